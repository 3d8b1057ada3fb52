// SPDX-License-Identifier: MIT
//
// spec: the dtype of every node of an expression, for given input dtypes.
//
// The rules are the runtime's own (core/ops.c), so that the fused kernel's
// result has the dtype the unfused chain of ops gives:
//   - two tensors promote as torch.promote_types (ct_promote_types):
//     float16 with bfloat16 gives float32, any float with a wider one the
//     wider;
//   - a number (a literal, a scalar, or arithmetic on numbers only) is a
//     Python number: with a floating tensor the tensor's dtype wins;
//   - exp, log, ..., min, max, pow keep their (promoted) argument's dtype.
// Invariant: a node's type depends only on its children's, and children
// come first in the node array, so one pass in order types them all.
#include <string.h>
#include <stdlib.h>

#include "error.h"
#include "jit_impl.h"

static int first_use(const cti_jit_ast *ast, int input) {
  for (int i = 0; i < ast->n; ++i)
    if (ast->nodes[i].kind == CTI_JIT_INPUT && ast->nodes[i].index == input) return i;
  return -1;
}

static int check_input(const char *op, const cti_jit_ast *ast, int k, ct_dtype dt) {
  if (ct_dtype_valid(dt) && ct_dtype_is_floating(dt)) return CT_OK;
  const char *name = ct_dtype_valid(dt) ? ct_dtype_name(dt) : "an invalid dtype";
  int u = first_use(ast, k);
  const char *why = "compiled expressions take float16, bfloat16, float32 or float64 tensors; "
                    "cast it first (ct_to_dtype)";
  if (u < 0) return ct_fail(CT_ERR_DTYPE, "%s: input '%s' is %s: %s", op, ast->input[k], name, why);
  return cti_jit_fail_at(CT_ERR_DTYPE, ast->text, ast->nodes[u].pos, ast->nodes[u].len, "%s: input '%s' is %s: %s",
                         op, ast->input[k], name, why);
}

static int join(int ta, int tb) {
  if (ta == CTI_JIT_NUM) return tb;
  if (tb == CTI_JIT_NUM) return ta;
  return (int)ct_promote_types((ct_dtype)ta, (ct_dtype)tb);
}

void cti_jit_spec_free(cti_jit_spec *spec) {
  if (!spec) return;
  free(spec->type);
  spec->type = NULL;
}

int cti_jit_specialize(const char *op, const cti_jit_ast *ast, const ct_dtype *dtypes, cti_jit_spec *spec) {
  memset(spec, 0, sizeof *spec);
  for (int k = 0; k < ast->n_inputs; ++k) {
    int rc = check_input(op, ast, k, dtypes[k]);
    if (rc) return rc;
    spec->in[k] = dtypes[k];
  }
  spec->type = malloc((size_t)ast->n);
  if (!spec->type) return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; i < ast->n; ++i) {
    const cti_jit_node *nd = &ast->nodes[i];
    int t = CTI_JIT_NUM;
    switch (nd->kind) {
    case CTI_JIT_INPUT:
      t = (int)dtypes[nd->index];
      spec->used[nd->index] = true;
      break;
    case CTI_JIT_SCALAR:
    case CTI_JIT_NUMBER:
      break;
    case CTI_JIT_NEG:
      t = spec->type[nd->a];
      break;
    case CTI_JIT_CALL:
      t = nd->b < 0 ? spec->type[nd->a] : join(spec->type[nd->a], spec->type[nd->b]);
      break;
    default: // the four binary operators
      t = join(spec->type[nd->a], spec->type[nd->b]);
      break;
    }
    spec->type[i] = (int8_t)t;
  }
  if (spec->type[ast->root] == CTI_JIT_NUM) {
    int n = (int)strlen(ast->text);
    int rc = cti_jit_fail_at(CT_ERR_VALUE, ast->text, 0, n, "%s: the expression uses no input tensor", op);
    cti_jit_spec_free(spec);
    return rc;
  }
  spec->out = (ct_dtype)spec->type[ast->root];
  return CT_OK;
}
