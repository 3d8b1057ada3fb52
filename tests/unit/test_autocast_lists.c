// SPDX-License-Identifier: MIT
//
// test_autocast_lists: the runtime's autocast table (common/amp/autocast.c)
// against PyTorch 2.x's lists, per device type.
//
// Reference: tests/fixtures/autocast/lists.txt, written by
// tools/fixtures/autocast_lists.py with PyTorch 2.x: the dtype each op of
// the table answers in under torch.autocast(device, dtype), for each device
// type (cpu, cuda), autocast dtype and input dtype, as torch computes it.
// Checked:
//   - the table, for both device types whatever the device under test (the
//     dtype question needs no tensor): cti_autocast_dtype answers torch's
//     dtype on every row, and every op of the table has rows on both;
//   - the ops themselves on the device under test: each module or function
//     run under autocast returns a tensor of torch's dtype.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autocast_policy.h"
#include "testutil.h"
#include "tu_ref.h"

typedef struct row {
  ct_device_type dev;
  ct_dtype ac, in, out;
  cti_autocast_op op;
} row;

static ct_dtype dtype_named(const char *s) {
  static const ct_dtype all[] = {CT_F32, CT_F16, CT_BF16};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (!strcmp(ct_dtype_name(all[i]), s)) return all[i];
  fail_msg("lists.txt: unknown dtype \"%s\"", s);
  return CT_F32;
}

static cti_autocast_op op_named(const char *s) {
  for (int i = 0; i < CTI_AC_N_OPS; ++i)
    if (!strcmp(cti_autocast_rules[i].torch_name, s)) return (cti_autocast_op)i;
  fail_msg("lists.txt: \"%s\" is not an op of the table", s);
  return CTI_AC_N_OPS;
}

// The fixture's rows (caller frees).
static row *load_rows(int *n) {
  const char *dir = getenv("CT_FIXTURE_DIR");
  if (!dir || !*dir) fail_msg("CT_FIXTURE_DIR is not set (ctest sets it to tests/fixtures)");
  char path[1024], line[256];
  snprintf(path, sizeof path, "%s/autocast/lists.txt", dir);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("%s: cannot open", path);
  row *r = NULL;
  int cap = 0;
  *n = 0;
  while (fgets(line, sizeof line, f)) {
    char dev[16], ac[16], op[32], in[16], out[16];
    if (line[0] == '#') continue;
    if (sscanf(line, "%15s %15s %31s %15s %15s", dev, ac, op, in, out) != 5) fail_msg("%s: bad line \"%s\"", path, line);
    if (*n == cap) r = realloc(r, sizeof *r * (size_t)(cap = cap ? 2 * cap : 64));
    TU_CHECK(r);
    r[(*n)++] = (row){!strcmp(dev, "cuda") ? CT_CUDA : CT_CPU, dtype_named(ac), dtype_named(in), dtype_named(out),
                      op_named(op)};
  }
  fclose(f);
  return r;
}

static const char *dev_name(ct_device_type t) { return t == CT_CUDA ? "cuda" : "cpu"; }

static void test_table(void **state) {
  (void)state;
  int n = 0;
  row *r = load_rows(&n);
  int seen[2][CTI_AC_N_OPS] = {{0}};
  for (int i = 0; i < n; ++i) {
    const ct_device d = {r[i].dev, r[i].dev == CT_CUDA ? 0 : -1};
    TU_OK(ct_autocast_enter(r[i].dev, r[i].ac, true));
    const ct_dtype got = cti_autocast_dtype(r[i].op, d, r[i].in);
    TU_OK(ct_autocast_exit());
    if (got != r[i].out)
      fail_msg("autocast(%s, %s) %s of %s: the table says %s, torch %s", dev_name(r[i].dev), ct_dtype_name(r[i].ac),
               cti_autocast_rules[r[i].op].torch_name, ct_dtype_name(r[i].in), ct_dtype_name(got),
               ct_dtype_name(r[i].out));
    seen[r[i].dev][r[i].op]++;
  }
  for (int t = 0; t < 2; ++t)
    for (int op = 0; op < CTI_AC_N_OPS; ++op)
      if (!seen[t][op]) fail_msg("lists.txt: no %s row for %s", dev_name((ct_device_type)t), cti_autocast_rules[op].torch_name);
  printf("%d rows: the table agrees with torch on both device types\n", n);
  free(r);
}

static ct_tensor *rand_on(ct_shape s, ct_dtype dt) {
  double *h;
  ct_tensor *t = ref_tensor(s, dt, tu_device, -1, 1, &h);
  free(h);
  return t;
}

static ct_tensor *run_module(ct_module *m, const ct_tensor *x, ct_dtype param_dt) {
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  if (param_dt != CT_F32) TU_OK(ct_module_to_dtype(m, param_dt));
  ct_tensor *y = ct_module_forward(m, x);
  ct_module_free(m);
  return y;
}

static ct_tensor *indices(int64_t a, int64_t b) {
  ct_tensor *h = ct_from_host((int64_t[]){a, b}, CT_SHAPE(2), CT_I64, ct_device_cpu());
  ct_tensor *t = ct_to_device(h, tu_device);
  ct_free(h);
  return t;
}

// ct's op `op` on an activation of dtype in, inside the caller's autocast region: its result.
static ct_tensor *run_op(cti_autocast_op op, ct_dtype in) {
  ct_tensor *x = op == CTI_AC_EMBEDDING ? NULL : rand_on(op == CTI_AC_CONV2D ? CT_SHAPE(1, 2, 2, 2) : CT_SHAPE(1, 4), in);
  ct_tensor *y = NULL, *t = NULL, *g = NULL;
  switch (op) {
  case CTI_AC_LINEAR: y = run_module(ct_nn_linear(4, 3, true), x, CT_F32); break;
  case CTI_AC_CONV2D: y = run_module(ct_nn_conv2d(2, 3, 1, 1, 0, true), x, CT_F32); break;
  case CTI_AC_MATMUL: y = ct_autocast_lower(x); break; // what attention's products multiply in
  case CTI_AC_LAYER_NORM: y = run_module(ct_nn_layernorm(4, 1e-5), x, CT_F32); break;
  case CTI_AC_SOFTMAX: y = ct_softmax(x, -1); break;
  case CTI_AC_CROSS_ENTROPY:
    t = indices(0, 0);
    y = ct_cross_entropy_loss(x, (g = ct_narrow(t, 0, 0, 1)), NULL);
    break;
  case CTI_AC_MSE_LOSS: y = ct_mse_loss(x, x, NULL); break;
  case CTI_AC_GELU: y = run_module(ct_nn_gelu(true), x, CT_F32); break;
  case CTI_AC_EMBEDDING: t = indices(0, 1), y = run_module(ct_nn_embedding(2, 2), t, in); break;
  case CTI_AC_ADD: y = ct_add(x, x); break;
  default: break;
  }
  ct_free(x), ct_free(t), ct_free(g);
  return y;
}

static void test_ops(void **state) {
  (void)state;
  int n = 0, ran = 0;
  row *r = load_rows(&n);
  for (int i = 0; i < n; ++i) {
    if (r[i].dev != tu_device.type) continue;
    TU_OK(ct_autocast_enter(r[i].dev, r[i].ac, true));
    ct_tensor *y = run_op(r[i].op, r[i].in);
    TU_OK(ct_autocast_exit());
    char what[128];
    snprintf(what, sizeof what, "autocast(%s, %s) %s of %s", dev_name(r[i].dev), ct_dtype_name(r[i].ac),
             cti_autocast_rules[r[i].op].torch_name, ct_dtype_name(r[i].in));
    if (!y) fail_msg("%s: %s", what, ct_last_error());
    ref_assert_dtype(y, r[i].out, what);
    ct_free(y);
    ++ran;
  }
  printf("%d ops on %s answer torch's dtypes\n", ran, dev_name(tu_device.type));
  free(r);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_ops),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
