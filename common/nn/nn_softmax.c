// SPDX-License-Identifier: MIT
//
// nn_softmax: softmax over the last dimension, as a function
// (torch.softmax(x, -1)) and as a module (torch.nn.Softmax(dim=-1)).
//
//   y_j = exp(x_j - max x) / sum_k exp(x_k - max x)   over each row of x (*, C)
// Shifting by the row's max makes every exp at most 1, so nothing overflows
// (and the row's largest term is exactly 1, so the sum is at least 1).
// Backward, for g = dL/dy: dx_j = y_j (g_j - sum_k y_k g_k); the module keeps
// y for it. Attention (nn_attention.c) uses the same kernels with a scale and
// the causal mask. The kernels are float32 and float64; float16/bfloat16
// input is computed in float32 and y rounded back to it, except under CUDA
// autocast, where softmax is on the float32 list (autocast_policy.h) and y
// stays float32 (backward then hands dx back in the input's dtype); CPU
// autocast has no softmax on its lists, so y is rounded there too.
#include <stdio.h>
#include <stdlib.h>

#include "autocast_policy.h"
#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "transformer_kernels.h"

static int check_softmax(const char *op, const ct_tensor *x, int dim) {
  const int nd = ct_ndim(x);
  if (nd < 1 || (dim != -1 && dim != nd - 1))
    return ct_fail(CT_ERR_VALUE, "%s: only the last dimension is supported (dim -1 or %d), got dim %d", op, nd - 1,
                   dim);
  const ct_dtype dt = ct_dtype_of(x);
  if (!ct_dtype_is_floating(dt))
    return ct_fail(CT_ERR_DTYPE, "%s: \"softmax\" not implemented for '%s' (a floating input is)", op,
                   ct_dtype_name(dt));
  return CT_OK;
}

// x (a new reference) in the kernels' dtype: float64 stays, the rest computes in float32.
static ct_tensor *kernel_operand(const ct_tensor *x) {
  const ct_dtype kdt = ct_dtype_of(x) == CT_F64 ? CT_F64 : CT_F32;
  return ct_dtype_of(x) == kdt ? ct_contiguous(x) : ct_to_dtype(x, kdt);
}

// y = softmax(x) over the last dim, or (dy != NULL) dx = y (dy - sum y dy) with x := y; the
// result in out_dt.
static ct_tensor *softmax_run(const char *op, const ct_tensor *x_in, const ct_tensor *dy_in, ct_dtype out_dt) {
  const ct_device dev = ct_device_of(x_in);
  const cti_backend *be = cti_backend_for(op, dev);
  if (!be) return NULL;
  const int64_t cols = ct_size(x_in, -1), rows = cols > 0 ? ct_numel(x_in) / cols : 0;
  ct_tensor *x = kernel_operand(x_in), *dy = dy_in && x ? kernel_operand(dy_in) : NULL;
  const ct_dtype dt = x ? ct_dtype_of(x) : out_dt;
  ct_tensor *out = x && (dy || !dy_in) ? ct_empty_like(x, dt, dev) : NULL;
  int rc = out ? CT_OK : (int)ct_last_status();
  ct_stream *s = ct_current_stream(dev);
  if (!rc && rows > 0)
    rc = dy ? be->transformer->softmax_backward(dt, rows, cols, 1.0, ct_data_ptr(x), ct_data_ptr(dy),
                                                ct_data_ptr(out), s)
            : be->transformer->softmax(dt, rows, cols, false, 1.0, ct_data_ptr(x), ct_data_ptr(out), s);
  ct_free(x), ct_free(dy);
  if (rc) ct_free(out), out = NULL;
  if (out && dt != out_dt) {
    ct_tensor *c = ct_to_dtype(out, out_dt);
    ct_free(out);
    out = c;
  }
  return out;
}

// The dtype softmax answers in for input x now (autocast: float32 for half precision).
static ct_dtype answer_dtype(const ct_tensor *x) {
  return cti_autocast_dtype(CTI_AC_SOFTMAX, ct_device_of(x), ct_dtype_of(x));
}

ct_tensor *ct_softmax(const ct_tensor *x, int dim) {
  if (!x) {
    ct_fail(CT_ERR_VALUE, "ct_softmax: NULL tensor");
    return NULL;
  }
  if (check_softmax("ct_softmax", x, dim)) return NULL;
  return softmax_run("ct_softmax", x, NULL, answer_dtype(x));
}

// ---- the module ---------------------------------------------------------------------------------
typedef struct softmax_state {
  int dim;
  ct_tensor *y;      // the last training forward's output
  ct_dtype in_dtype; // and its input's dtype, for dx
} softmax_state;

static ct_tensor *softmax_forward(ct_module *m, const ct_tensor *x) {
  softmax_state *st = m->state;
  if (check_softmax("Softmax", x, st->dim)) return NULL;
  ct_tensor *y = softmax_run("Softmax", x, NULL, answer_dtype(x));
  ct_free(st->y);
  st->y = y && m->training ? ct_retain(y) : NULL;
  st->in_dtype = ct_dtype_of(x);
  return y;
}

static ct_tensor *softmax_backward(ct_module *m, const ct_tensor *g) {
  softmax_state *st = m->state;
  if (!st->y) {
    ct_fail(CT_ERR_VALUE, "Softmax backward: no saved output (run forward in training mode first)");
    return NULL;
  }
  ct_tensor *gy = cti_nn_grad_as("Softmax", g, ct_shape_of(st->y), ct_dtype_of(st->y));
  ct_tensor *dx = gy ? softmax_run("Softmax backward", st->y, gy, st->in_dtype) : NULL;
  ct_free(gy);
  return dx;
}

static void softmax_describe(const ct_module *m, char *buf, size_t len) {
  snprintf(buf, len, "dim=%d", ((const softmax_state *)m->state)->dim);
}

static int softmax_state_to(ct_module *m, ct_device device) {
  return cti_nn_move(&((softmax_state *)m->state)->y, device);
}

static void softmax_state_free(ct_module *m) {
  softmax_state *st = m->state;
  if (st) ct_free(st->y);
  free(st);
  m->state = NULL;
}

static void *softmax_state_clone(const ct_module *m) {
  softmax_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->y = NULL;
  return st;
}

static const cti_module_ops softmax_ops = {
    .kind = "Softmax",
    .forward = softmax_forward,
    .backward = softmax_backward,
    .describe = softmax_describe,
    .state_to = softmax_state_to,
    .state_free = softmax_state_free,
    .state_clone = softmax_state_clone,
};

ct_module *ct_nn_softmax(int dim) {
  softmax_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_softmax: out of host memory");
    return NULL;
  }
  st->dim = dim;
  ct_module *m = cti_module_new(&softmax_ops, st);
  if (!m) free(st);
  return m;
}
