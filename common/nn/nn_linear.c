// SPDX-License-Identifier: MIT
//
// nn_linear: torch.nn.Linear, y = x W^T + b, with its backward.
//
// Shapes: x (N, in) (or (*, in): leading dims are flattened into N and
// restored), W (out, in), b (out), y (N, out). Forward is one GEMM with the
// bias broadcast into the output first (y := b; y = 1 * x @ W^T + 1 * y), so
// cuBLAS/OpenBLAS read W transposed in place, with no copy. Backward, for
// g = dL/dy (N, out):
//   dW += g^T x   (out, in): a GEMM that accumulates straight into W.grad;
//   db += sum_n g (out);
//   dx  = g W     (N, in).
// Training forward keeps x (a reference, no copy) for dW; eval keeps nothing.
//
// Under autocast (amp.h) the product runs in the autocast dtype: x, W and b
// are cast to it (a float64 operand is not, as in PyTorch), y has that dtype,
// and the cast W is kept for dx. Backward casts an incoming dL/dy of another
// dtype to it (the backward of the loss's upcast, as autograd's engine casts
// a gradient to its input's dtype), adds dW and db, computed in that dtype,
// into the float32 grads (the cast's backward), and hands dx back in x's
// own dtype.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocast_policy.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"

typedef struct linear_state {
  int64_t in, out;
  bool bias;
  ct_tensor *x;      // the last training forward's input, as (N, in), in its compute dtype
  ct_shape x_shape;  // its shape as given, for dx
  ct_dtype x_dtype;  // its dtype as given, for dx
  ct_tensor *w;      // W cast for that forward (autocast), or NULL: W itself
} linear_state;

static void drop_saved(linear_state *st) {
  ct_free(st->x), ct_free(st->w);
  st->x = st->w = NULL;
}

static ct_param *weight_of(ct_module *m) { return cti_module_find(m, "weight"); }
static ct_param *bias_of(ct_module *m) { return cti_module_find(m, "bias"); }

static ct_tensor *linear_forward(ct_module *m, const ct_tensor *x) {
  linear_state *st = m->state;
  ct_tensor *w = weight_of(m)->value;
  int nd = ct_ndim(x);
  if (nd < 1 || ct_size(x, -1) != st->in) {
    char s[96];
    ct_fail(CT_ERR_SHAPE, "Linear: mat1 and mat2 shapes cannot be multiplied: input %s, expected "
            "(*, %" PRId64 ")", ct_shape_str(ct_shape_of(x), s, sizeof s), st->in);
    return NULL;
  }
  // autocast: the eligible operands in its dtype (new references either way)
  ct_tensor *xc = cti_autocast_cast(CTI_AC_LINEAR, x), *wc = xc ? cti_autocast_cast(CTI_AC_LINEAR, w) : NULL;
  ct_tensor *bc = wc && st->bias ? cti_autocast_cast(CTI_AC_LINEAR, bias_of(m)->value) : NULL;
  if (!wc || (st->bias && !bc)) {
    ct_free(xc), ct_free(wc);
    return NULL;
  }
  if (ct_dtype_of(xc) != ct_dtype_of(wc)) {
    ct_fail(CT_ERR_DTYPE, "Linear: mat1 and mat2 must have the same dtype, but got %s and %s",
            ct_dtype_name(ct_dtype_of(xc)), ct_dtype_name(ct_dtype_of(wc)));
    ct_free(xc), ct_free(wc), ct_free(bc);
    return NULL;
  }
  ct_tensor *x2 = ct_reshape(xc, CT_SHAPE(-1, st->in)); // (N, in), a view when x is contiguous
  ct_free(xc);
  if (!x2) {
    ct_free(wc), ct_free(bc);
    return NULL;
  }
  int64_t n = ct_size(x2, 0);
  ct_tensor *y = ct_empty(CT_SHAPE(n, st->out), ct_dtype_of(x2), m->device);
  ct_tensor *wt = ct_t(wc); // (in, out), a view
  int rc = y && wt ? CT_OK : (int)ct_last_status();
  if (!rc && st->bias) rc = ct_copy_(y, bc, false); // broadcast b over the rows
  if (!rc) rc = ct_addmm_(y, x2, wt, 1.0, st->bias ? 1.0 : 0.0);
  ct_free(wt), ct_free(bc);
  if (rc) {
    ct_free(x2), ct_free(y), ct_free(wc);
    return NULL;
  }
  drop_saved(st);
  if (m->training) {
    st->x = x2;
    st->x_shape = ct_shape_of(x);
    st->x_dtype = ct_dtype_of(x);
    st->w = wc != w ? wc : NULL;
    if (!st->w) ct_free(wc);
  } else {
    ct_free(x2), ct_free(wc);
  }
  if (nd == 2) return y;
  ct_shape ys = ct_shape_of(x);
  ys.d[nd - 1] = st->out;
  ct_tensor *yr = ct_reshape(y, ys);
  ct_free(y);
  return yr;
}

// Enters with dL/dy of the last training forward; leaves with dW (and db)
// added into the grads and, when dx is not NULL, *dx = dL/dx (shape of x).
static int linear_grads(ct_module *m, const ct_tensor *g, ct_tensor **dx_out) {
  linear_state *st = m->state;
  if (!st->x)
    return ct_fail(CT_ERR_VALUE, "Linear backward: no saved input (run forward in training mode first)");
  int64_t n = ct_size(st->x, 0);
  ct_shape want = st->x_shape;
  want.d[want.ndim - 1] = st->out;
  if (!ct_shape_eq(ct_shape_of(g), want)) {
    char a[96], b[96];
    return ct_fail(CT_ERR_SHAPE, "Linear backward: grad_output of shape %s, expected %s",
                   ct_shape_str(ct_shape_of(g), a, sizeof a), ct_shape_str(want, b, sizeof b));
  }
  ct_param *pw = weight_of(m), *pb = st->bias ? bias_of(m) : NULL;
  const ct_tensor *w = st->w ? st->w : pw->value; // as the forward multiplied
  const ct_dtype cdt = ct_dtype_of(st->x);
  if (!ct_dtype_is_floating(ct_dtype_of(g)))
    return ct_fail(CT_ERR_DTYPE, "Linear backward: grad_output is %s, expected a floating tensor",
                   ct_dtype_name(ct_dtype_of(g)));
  // dL/dy in the forward's compute dtype (autograd casts a gradient to its output's dtype)
  ct_tensor *gc = ct_dtype_of(g) == cdt ? ct_retain((ct_tensor *)g) : ct_to_dtype(g, cdt);
  ct_tensor *g2 = gc ? ct_reshape(gc, CT_SHAPE(n, st->out)) : NULL; // (N, out)
  ct_tensor *gt = g2 ? ct_t(g2) : NULL;                             // (out, N), a view
  ct_free(gc);
  if (!gt) {
    ct_free(g2);
    return ct_last_status();
  }
  int rc = CT_OK;
  // dW += g^T x: straight into W.grad when it is there and contiguous.
  if (pw->grad && ct_is_contiguous(pw->grad) && ct_dtype_of(pw->grad) == cdt) {
    rc = ct_addmm_(pw->grad, gt, st->x, 1.0, 1.0);
  } else {
    ct_tensor *dw = ct_mm(gt, st->x);
    rc = dw ? cti_param_accumulate_grad(pw, dw) : (int)ct_last_status();
    ct_free(dw);
  }
  if (!rc && pb) {
    ct_tensor *db = ct_sum_dim(g2, 0, false); // (out)
    rc = db ? cti_param_accumulate_grad(pb, db) : (int)ct_last_status();
    ct_free(db);
  }
  ct_tensor *dx = NULL;
  if (!rc && dx_out) {
    dx = ct_mm(g2, w); // (N, in), in the compute dtype
    if (dx && ct_dtype_of(dx) != st->x_dtype) { // the input cast's backward
      ct_tensor *dxc = ct_to_dtype(dx, st->x_dtype);
      ct_free(dx);
      dx = dxc;
    }
    if (dx && st->x_shape.ndim != 2) {
      ct_tensor *dxr = ct_reshape(dx, st->x_shape);
      ct_free(dx);
      dx = dxr;
    }
    if (!dx) rc = ct_last_status();
  }
  ct_free(gt);
  ct_free(g2);
  if (dx_out) *dx_out = dx;
  return rc;
}

static ct_tensor *linear_backward(ct_module *m, const ct_tensor *g) {
  ct_tensor *dx = NULL;
  return linear_grads(m, g, &dx) == CT_OK ? dx : NULL;
}

static int linear_backward_params(ct_module *m, const ct_tensor *g) { return linear_grads(m, g, NULL); }

static void linear_describe(const ct_module *m, char *buf, size_t len) {
  const linear_state *st = m->state;
  snprintf(buf, len, "in_features=%" PRId64 ", out_features=%" PRId64 ", bias=%s", st->in, st->out,
           st->bias ? "True" : "False");
}

// The saved input is an activation: moved along rather than dropped, so a
// backward after .to() still works.
static int move_saved(ct_tensor **t, ct_device device) {
  if (!*t) return CT_OK;
  ct_tensor *moved = ct_to(*t, device, ct_dtype_of(*t), false);
  if (!moved) return ct_last_status();
  ct_free(*t);
  *t = moved;
  return CT_OK;
}

static int linear_state_to(ct_module *m, ct_device device) {
  linear_state *st = m->state;
  int rc = move_saved(&st->x, device);
  return rc == CT_OK ? move_saved(&st->w, device) : rc;
}

static void linear_state_free(ct_module *m) {
  linear_state *st = m->state;
  if (st) drop_saved(st);
  free(st);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *linear_state_clone(const ct_module *m) {
  linear_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->x = st->w = NULL;
  return st;
}

static const cti_module_ops linear_ops = {
    .kind = "Linear",
    .forward = linear_forward,
    .backward = linear_backward,
    .backward_params = linear_backward_params,
    .describe = linear_describe,
    .state_to = linear_state_to,
    .state_free = linear_state_free,
    .state_clone = linear_state_clone,
};

ct_module *ct_nn_linear(int64_t in_features, int64_t out_features, bool bias) {
  if (in_features < 0 || out_features < 0) {
    ct_fail(CT_ERR_VALUE, "ct_nn_linear: in_features and out_features must be >= 0, got %" PRId64
            " and %" PRId64, in_features, out_features);
    return NULL;
  }
  linear_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_linear: out of host memory");
    return NULL;
  }
  st->in = in_features;
  st->out = out_features;
  st->bias = bias;
  ct_module *m = cti_module_new(&linear_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  // torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) on W and
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on b, both bound 1/sqrt(in); W first.
  double bound = in_features > 0 ? 1.0 / sqrt((double)in_features) : 0.0;
  ct_tensor *w = ct_empty(CT_SHAPE(out_features, in_features), CT_F32, ct_device_cpu());
  if (w && cti_nn_init_uniform(w, bound) != CT_OK) ct_free(w), w = NULL;
  if (!w || !cti_module_register(m, "weight", w, false)) { // register takes w even when it fails
    ct_module_free(m);
    return NULL;
  }
  if (bias) {
    ct_tensor *b = ct_empty(CT_SHAPE(out_features), CT_F32, ct_device_cpu());
    if (b && cti_nn_init_uniform(b, bound) != CT_OK) ct_free(b), b = NULL;
    if (!b || !cti_module_register(m, "bias", b, false)) {
      ct_module_free(m);
      return NULL;
    }
  }
  return m;
}
