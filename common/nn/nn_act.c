// SPDX-License-Identifier: MIT
//
// nn_act: the layers without parameters: ReLU, Flatten, Dropout.
//
// ReLU: y = max(x, 0); backward dx = g where y > 0, else 0 (one fused kernel
//   reading the saved output y: y > 0 exactly where x > 0, and y already
//   exists, so training keeps no extra tensor).
// Flatten: (N, d1, d2, ...) -> (N, d1*d2*...), a view of a contiguous input;
//   backward reshapes g back to the input's shape.
// Dropout(p): in training each element is kept when its uniform u (float32,
//   from the module's device's Philox stream via ct_rand) satisfies u >= p,
//   so it is kept with probability 1 - p, and kept elements are scaled by
//   1/(1-p) so that E[y] = x. The mask (0 or 1/(1-p), in x's dtype) is
//   saved; backward is dx = g * mask, the same elements with the same scale.
//   p = 0 or eval mode: the identity (no random numbers drawn); p = 1: zeros.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "nn_kernels.h"
#include "ops.h"

int cti_nn_check_grad(const char *kind, const ct_tensor *g, ct_shape want, ct_dtype dt) {
  if (!ct_shape_eq(ct_shape_of(g), want)) {
    char a[96], b[96];
    return ct_fail(CT_ERR_SHAPE, "%s backward: grad_output of shape %s, expected %s", kind,
                   ct_shape_str(ct_shape_of(g), a, sizeof a), ct_shape_str(want, b, sizeof b));
  }
  if (ct_dtype_of(g) != dt)
    return ct_fail(CT_ERR_DTYPE, "%s backward: grad_output is %s, expected %s", kind,
                   ct_dtype_name(ct_dtype_of(g)), ct_dtype_name(dt));
  return CT_OK;
}

ct_tensor *cti_nn_grad_as(const char *kind, const ct_tensor *g, ct_shape want, ct_dtype dt) {
  if (!g) {
    ct_fail(CT_ERR_VALUE, "%s backward: NULL grad_output", kind);
    return NULL;
  }
  if (!ct_dtype_is_floating(ct_dtype_of(g))) {
    ct_fail(CT_ERR_DTYPE, "%s backward: grad_output is %s, expected a floating tensor", kind,
            ct_dtype_name(ct_dtype_of(g)));
    return NULL;
  }
  if (cti_nn_check_grad(kind, g, want, ct_dtype_of(g))) return NULL;
  return ct_dtype_of(g) == dt ? ct_retain((ct_tensor *)g) : ct_to_dtype(g, dt);
}

static int no_forward(const char *kind) {
  return ct_fail(CT_ERR_VALUE, "%s backward: nothing saved (run forward in training mode first)", kind);
}

// ---- ReLU -------------------------------------------------------------------------------------
typedef struct relu_state {
  ct_tensor *y; // the last training forward's output
} relu_state;

static ct_tensor *relu_forward(ct_module *m, const ct_tensor *x) {
  relu_state *st = m->state;
  if (!ct_dtype_is_floating(ct_dtype_of(x))) {
    ct_fail(CT_ERR_DTYPE, "ReLU: expected a floating input, got %s", ct_dtype_name(ct_dtype_of(x)));
    return NULL;
  }
  ct_tensor *y = ct_relu(x);
  if (!y) return NULL;
  ct_free(st->y);
  st->y = m->training ? ct_retain(y) : NULL;
  return y;
}

static ct_tensor *relu_backward(ct_module *m, const ct_tensor *g) {
  relu_state *st = m->state;
  if (!st->y) return no_forward("ReLU"), NULL;
  if (cti_nn_check_grad("ReLU", g, ct_shape_of(st->y), ct_dtype_of(st->y))) return NULL;
  ct_device dev = ct_device_of(g);
  const cti_backend *be = cti_backend_for("ReLU backward", dev);
  if (!be) return NULL;
  ct_tensor *gc = ct_contiguous(g), *yc = ct_contiguous(st->y);
  ct_tensor *dx = gc && yc ? ct_empty_like(g, ct_dtype_of(g), dev) : NULL;
  int rc = dx ? CT_OK : (int)ct_last_status();
  if (!rc) {
    rc = be->nn->relu_backward(ct_dtype_of(g), ct_numel(g), ct_data_ptr(yc), ct_data_ptr(gc),
                               ct_data_ptr(dx), ct_current_stream(dev));
  }
  ct_free(gc);
  ct_free(yc);
  if (rc) {
    ct_free(dx);
    return NULL;
  }
  return dx;
}

static int relu_state_to(ct_module *m, ct_device device) {
  relu_state *st = m->state;
  if (!st->y) return CT_OK;
  ct_tensor *y = ct_to(st->y, device, ct_dtype_of(st->y), false);
  if (!y) return ct_last_status();
  ct_free(st->y);
  st->y = y;
  return CT_OK;
}

static void relu_state_free(ct_module *m) {
  relu_state *st = m->state;
  if (st) ct_free(st->y);
  free(st);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *relu_state_clone(const ct_module *m) {
  relu_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->y = NULL;
  return st;
}

static const cti_module_ops relu_ops = {
    .kind = "ReLU",
    .forward = relu_forward,
    .backward = relu_backward,
    .state_to = relu_state_to,
    .state_free = relu_state_free,
    .state_clone = relu_state_clone,
};

ct_module *ct_nn_relu(void) {
  relu_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_relu: out of host memory");
    return NULL;
  }
  ct_module *m = cti_module_new(&relu_ops, st);
  if (!m) free(st);
  return m;
}

// ---- Flatten ------------------------------------------------------------------------------------
typedef struct flatten_state {
  ct_shape in;  // the last forward's input shape
  bool saved;
} flatten_state;

static ct_tensor *flatten_forward(ct_module *m, const ct_tensor *x) {
  flatten_state *st = m->state;
  int nd = ct_ndim(x);
  if (nd < 2) {
    ct_fail(CT_ERR_SHAPE, "Flatten: Dimension out of range (expected to be in range of [%d, %d], but got 1)",
            nd ? -nd : -1, nd ? nd - 1 : 0);
    return NULL;
  }
  ct_shape s = ct_shape_of(x);
  int64_t rest = 1;
  for (int i = 1; i < nd; ++i) rest *= s.d[i];
  ct_tensor *y = ct_reshape(x, CT_SHAPE(s.d[0], rest));
  if (!y) return NULL;
  st->in = s;
  st->saved = m->training;
  return y;
}

static ct_tensor *flatten_backward(ct_module *m, const ct_tensor *g) {
  flatten_state *st = m->state;
  if (!st->saved) return no_forward("Flatten"), NULL;
  int64_t rest = 1;
  for (int i = 1; i < st->in.ndim; ++i) rest *= st->in.d[i];
  if (cti_nn_check_grad("Flatten", g, CT_SHAPE(st->in.d[0], rest), ct_dtype_of(g))) return NULL;
  return ct_reshape(g, st->in);
}

static void flatten_describe(const ct_module *m, char *buf, size_t len) {
  snprintf(buf, len, "start_dim=1, end_dim=-1");
}

// The configuration without the saved tensors (ct_module_replicate).
static void *flatten_state_clone(const ct_module *m) {
  flatten_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->saved = false;
  return st;
}

static const cti_module_ops flatten_ops = {
    .kind = "Flatten",
    .forward = flatten_forward,
    .backward = flatten_backward,
    .describe = flatten_describe,
    .state_clone = flatten_state_clone,
};

ct_module *ct_nn_flatten(void) {
  flatten_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_flatten: out of host memory");
    return NULL;
  }
  ct_module *m = cti_module_new(&flatten_ops, st);
  if (!m) free(st);
  return m;
}

// ---- Dropout -----------------------------------------------------------------------------------
typedef struct dropout_state {
  double p;
  ct_tensor *mask;  // the last training forward's mask (0 or 1/(1-p)); NULL: identity
  ct_shape shape;   // the last forward's shape
  bool saved;       // a training forward has run since the last eval one
} dropout_state;

static ct_tensor *dropout_forward(ct_module *m, const ct_tensor *x) {
  dropout_state *st = m->state;
  ct_dtype dt = ct_dtype_of(x);
  if (!ct_dtype_is_floating(dt)) {
    ct_fail(CT_ERR_DTYPE, "Dropout: expected a floating input, got %s", ct_dtype_name(dt));
    return NULL;
  }
  ct_free(st->mask);
  st->mask = NULL;
  st->shape = ct_shape_of(x);
  st->saved = m->training;
  if (!m->training || st->p == 0.0) return ct_retain((ct_tensor *)x); // identity
  ct_device dev = m->device;
  if (st->p == 1.0) { // torch: input * 0 (a NaN stays NaN), no random numbers drawn
    ct_tensor *mask = ct_zeros_like(x, dt, dev);
    ct_tensor *y = mask ? ct_mul(x, mask) : NULL;
    if (!y) {
      ct_free(mask);
      return NULL;
    }
    st->mask = mask;
    return y;
  }
  const cti_backend *be = cti_backend_for("Dropout", dev);
  if (!be) return NULL;
  ct_tensor *xc = ct_contiguous(x);
  ct_tensor *u = xc ? ct_rand(ct_shape_of(x), CT_F32, dev) : NULL; // uniform [0, 1), 24-bit
  ct_tensor *mask = u ? ct_empty_like(x, dt, dev) : NULL;
  ct_tensor *y = mask ? ct_empty_like(x, dt, dev) : NULL;
  int rc = y ? CT_OK : (int)ct_last_status();
  double scale = 1.0 / (1.0 - st->p);
  if (!rc) {
    rc = be->nn->dropout(dt, ct_numel(x), ct_data_ptr(xc), ct_data_ptr(u), st->p, scale,
                         ct_data_ptr(y), ct_data_ptr(mask), ct_current_stream(dev));
  }
  ct_free(xc);
  ct_free(u);
  if (rc) {
    ct_free(mask);
    ct_free(y);
    return NULL;
  }
  st->mask = mask;
  return y;
}

static ct_tensor *dropout_backward(ct_module *m, const ct_tensor *g) {
  dropout_state *st = m->state;
  if (!st->saved) return no_forward("Dropout"), NULL;
  if (cti_nn_check_grad("Dropout", g, st->shape, st->mask ? ct_dtype_of(st->mask) : ct_dtype_of(g))) return NULL;
  if (!st->mask) return ct_retain((ct_tensor *)g); // p = 0: the identity
  return ct_mul(g, st->mask);
}

// Python's repr of a float (shortest round-trip digits, ".0" on integers),
// so that Dropout(p=0.1) prints as torch prints it.
static void py_float(double v, char *buf, size_t len) {
  for (int prec = 1; prec <= 17; ++prec) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eni")) {
    size_t l = strlen(buf);
    if (l + 2 < len) memcpy(buf + l, ".0", 3);
  }
}

static void dropout_describe(const ct_module *m, char *buf, size_t len) {
  const dropout_state *st = m->state;
  char p[32];
  py_float(st->p, p, sizeof p);
  snprintf(buf, len, "p=%s, inplace=False", p);
}

static int dropout_state_to(ct_module *m, ct_device device) {
  dropout_state *st = m->state;
  if (!st->mask) return CT_OK;
  ct_tensor *mask = ct_to(st->mask, device, ct_dtype_of(st->mask), false);
  if (!mask) return ct_last_status();
  ct_free(st->mask);
  st->mask = mask;
  return CT_OK;
}

static void dropout_state_free(ct_module *m) {
  dropout_state *st = m->state;
  if (st) ct_free(st->mask);
  free(st);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *dropout_state_clone(const ct_module *m) {
  dropout_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->mask = NULL;
  st->saved = false;
  return st;
}

static const cti_module_ops dropout_ops = {
    .kind = "Dropout",
    .forward = dropout_forward,
    .backward = dropout_backward,
    .describe = dropout_describe,
    .state_to = dropout_state_to,
    .state_free = dropout_state_free,
    .state_clone = dropout_state_clone,
};

ct_module *ct_nn_dropout(double p) {
  if (!(p >= 0.0 && p <= 1.0)) {
    ct_fail(CT_ERR_VALUE, "ct_nn_dropout: dropout probability has to be between 0 and 1, but got %g", p);
    return NULL;
  }
  dropout_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_dropout: out of host memory");
    return NULL;
  }
  st->p = p;
  ct_module *m = cti_module_new(&dropout_ops, st);
  if (!m) free(st);
  return m;
}
