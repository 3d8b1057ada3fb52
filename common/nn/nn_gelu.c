// SPDX-License-Identifier: MIT
//
// nn_gelu: torch.nn.GELU(approximate="tanh" | "none"), elementwise.
//
//   tanh (GPT-2's):  y = x/2 (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2/pi)
//   none (exact):    y = x/2 (1 + erf(x / sqrt 2)) = x Phi(x)
// Backward is dx = dy * gelu'(x), the derivative of the same formula:
//   tanh:  (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 * 0.044715 x^2),  t = tanh(...)
//   none:  Phi(x) + x phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi).
// Training forward keeps x (a reference). One kernel entry does both
// directions (transformer_kernels.h's gelu, dy NULL for forward). All four
// floating dtypes (f16/bf16 compute in float, as torch's kernels). Not on
// autocast's lists: it runs in its input's dtype (bfloat16 after an
// autocast Linear), and a gradient of another dtype is cast to it.
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "transformer_kernels.h"

typedef struct gelu_state {
  bool tanh_approx;
  ct_tensor *x; // the last training forward's input
} gelu_state;

// out = gelu(x) (dy NULL) or dy * gelu'(x), all of x's shape and dtype.
static ct_tensor *gelu_run(ct_module *m, const ct_tensor *x_in, const ct_tensor *dy_in) {
  gelu_state *st = m->state;
  const cti_backend *be = cti_backend_for("GELU", m->device);
  if (!be) return NULL;
  const ct_dtype dt = ct_dtype_of(x_in);
  ct_tensor *x = ct_contiguous(x_in), *dy = dy_in ? ct_contiguous(dy_in) : NULL;
  ct_tensor *out = x && (dy || !dy_in) ? ct_empty_like(x, dt, m->device) : NULL;
  int rc = out ? CT_OK : (int)ct_last_status();
  if (!rc) // cpu/cpu_transformer.c's gelu, or kernels/transformer.cu's cuda_gelu
    rc = be->transformer->gelu(dt, st->tanh_approx, ct_numel(x), ct_data_ptr(x), dy ? ct_data_ptr(dy) : NULL,
                               ct_data_ptr(out), ct_current_stream(m->device));
  ct_free(x), ct_free(dy);
  if (rc) ct_free(out), out = NULL;
  return out;
}

static ct_tensor *gelu_forward(ct_module *m, const ct_tensor *x) {
  gelu_state *st = m->state;
  if (!ct_dtype_is_floating(ct_dtype_of(x))) {
    ct_fail(CT_ERR_DTYPE, "GELU: expected a floating input, got %s", ct_dtype_name(ct_dtype_of(x)));
    return NULL;
  }
  ct_tensor *y = gelu_run(m, x, NULL);
  ct_free(st->x);
  st->x = y && m->training ? ct_retain((ct_tensor *)x) : NULL;
  return y;
}

static ct_tensor *gelu_backward(ct_module *m, const ct_tensor *g) {
  gelu_state *st = m->state;
  if (!st->x) {
    ct_fail(CT_ERR_VALUE, "GELU backward: no saved input (run forward in training mode first)");
    return NULL;
  }
  ct_tensor *gc = cti_nn_grad_as("GELU", g, ct_shape_of(st->x), ct_dtype_of(st->x));
  ct_tensor *dx = gc ? gelu_run(m, st->x, gc) : NULL;
  ct_free(gc);
  return dx;
}

static void gelu_describe(const ct_module *m, char *buf, size_t len) {
  snprintf(buf, len, "approximate='%s'", ((const gelu_state *)m->state)->tanh_approx ? "tanh" : "none");
}

static int gelu_state_to(ct_module *m, ct_device device) { return cti_nn_move(&((gelu_state *)m->state)->x, device); }

static void gelu_state_free(ct_module *m) {
  gelu_state *st = m->state;
  if (st) ct_free(st->x);
  free(st);
  m->state = NULL;
}

static void *gelu_state_clone(const ct_module *m) {
  gelu_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->x = NULL;
  return st;
}

static const cti_module_ops gelu_ops = {
    .kind = "GELU",
    .forward = gelu_forward,
    .backward = gelu_backward,
    .describe = gelu_describe,
    .state_to = gelu_state_to,
    .state_free = gelu_state_free,
    .state_clone = gelu_state_clone,
};

ct_module *ct_nn_gelu(bool tanh_approx) {
  gelu_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_gelu: out of host memory");
    return NULL;
  }
  st->tanh_approx = tanh_approx;
  ct_module *m = cti_module_new(&gelu_ops, st);
  if (!m) free(st);
  return m;
}
