// SPDX-License-Identifier: MIT
// fuzz_jit: the JIT's expression parser (common/jit/parse.c) on arbitrary
// text, over the inputs x, y, z and the scalars alpha, beta.
//
// Contracts (a breach aborts):
//  - a refusal has a message of the form "ct_jit_create: column C: ...",
//    then the expression (or a window of it), then a line with a caret;
//  - an accepted expression types for every dtype (the result is the
//    promotion of the inputs it reads), emits C and CUDA source, and its
//    canonical spelling parses again to the same canonical spelling;
//  - the unfused chain runs it on 3-element CPU tensors, or fails with a
//    message (never a crash).
// The first byte picks the dtypes; the rest is the expression.
#include <stdlib.h>
#include <string.h>

#include "ct.h"
#include "jit_impl.h"

static const ct_dtype floats[4] = {CT_F16, CT_BF16, CT_F32, CT_F64};

static void check_refusal(void) {
  const char *e = ct_last_error();
  const char *col = strstr(e, ": column ");
  const char *nl1 = strchr(e, '\n'), *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  if (!col || !nl2 || !strchr(nl2, '^')) abort();
}

static void check_accepted(const char *text, ct_jit_fn *f, uint8_t pick) {
  ct_dtype dt[3] = {floats[pick & 3], floats[(pick >> 2) & 3], floats[(pick >> 4) & 3]}, out;
  if (ct_jit_result_dtype(f, dt, 3, &out) != CT_OK || !ct_dtype_is_floating(out)) abort();
  char *c = ct_jit_source(f, dt, 3, CT_CPU), *cu = ct_jit_source(f, dt, 3, CT_CUDA);
  if (!c || !cu || !strstr(c, "jit_expr(") || !strstr(cu, "__global__")) abort();
  free(c), free(cu);
  cti_jit_ast a, b;
  if (cti_jit_parse("fuzz", text, "x,y,z", "alpha,beta", &a) != CT_OK) abort();
  char *canon = cti_jit_canonical(&a);
  if (!canon || cti_jit_parse("fuzz", canon, "x,y,z", "alpha,beta", &b) != CT_OK) abort();
  char *again = cti_jit_canonical(&b);
  if (!again || strcmp(canon, again) != 0) abort();
  free(canon), free(again);
  cti_jit_ast_free(&a), cti_jit_ast_free(&b);
  // the unfused chain on tiny tensors: a result, or a message
  ct_tensor *x = ct_full(CT_SHAPE(3), 0.5, dt[0], ct_device_cpu());
  ct_tensor *y = ct_full(CT_SHAPE(1, 3), -1.25, dt[1], ct_device_cpu());
  ct_tensor *z = ct_full(CT_SHAPE(1), 2.0, dt[2], ct_device_cpu());
  const ct_tensor *in[3] = {x, y, z};
  const double sc[2] = {0.5, -3.0};
  ct_tensor *r = ct_jit_call_unfused(f, in, 3, sc, 2);
  if (r && (ct_dtype_of(r) != out || ct_numel(r) != 3)) abort();
  if (!r && !ct_last_error()[0]) abort();
  ct_free(r), ct_free(x), ct_free(y), ct_free(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0 || size > CT_JIT_MAX_EXPR) return 0;
  char *text = malloc(size);
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  ct_clear_error();
  ct_jit_fn *f = ct_jit_create(text, "x,y,z", "alpha,beta");
  if (!f) check_refusal();
  else check_accepted(text, f, data[0]);
  ct_jit_free(f);
  ct_clear_error();
  free(text);
  return 0;
}
