// SPDX-License-Identifier: MIT
//
// nn_pool: MaxPool2d, as torch.nn.MaxPool2d(kernel_size, stride) with no
// padding, no dilation and floor mode.
//
// x (N, C, H, W) (or (C, H, W)) -> y (N, C, Ho, Wo), Ho = (H - k) / s + 1.
// In training mode forward keeps, for every output, the position of its
// window's maximum inside its plane (int32 h*W + w; torch keeps the same
// numbers as int64); backward sends each output's gradient to that
// position, summing where windows overlap (s < k). The maximum follows
// torch's CPU rule: the first of equal values wins, a NaN always wins.
// All four floating dtypes: float16 and bfloat16 (an activation under
// autocast, where pooling runs in its input's dtype) compare in float and
// sum overlapping gradients in float, rounded once. A gradient of another
// floating dtype is cast to the forward's. No parameters, no buffers.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "conv_kernels.h"
#include "error.h"
#include "nn_impl.h"
#include "stream.h"

typedef struct pool_state {
  int k, stride;
  ct_tensor *idx;     // (planes, Ho, Wo) int32 of the last training forward, or NULL
  ct_shape in_shape;  // its input's shape
  ct_dtype dt;        // and dtype
  cti_pool_geom g;
} pool_state;

static void drop_saved(pool_state *st) {
  ct_free(st->idx);
  st->idx = NULL;
}

static ct_tensor *pool_forward(ct_module *m, const ct_tensor *x_in) {
  pool_state *st = m->state;
  drop_saved(st);
  char sb[128];
  const int nd = ct_ndim(x_in);
  if (nd != 3 && nd != 4) {
    ct_fail(CT_ERR_SHAPE, "MaxPool2d: expected a 3-D or 4-D input, got %s",
            ct_shape_str(ct_shape_of(x_in), sb, sizeof sb));
    return NULL;
  }
  const ct_dtype dt = ct_dtype_of(x_in);
  if (!ct_dtype_is_floating(dt)) {
    ct_fail(CT_ERR_DTYPE, "MaxPool2d: \"max_pool2d\" not implemented for '%s' (a floating input is)",
            ct_dtype_name(dt));
    return NULL;
  }
  const ct_device dev = ct_device_of(x_in);
  const cti_backend *be = cti_backend_for("MaxPool2d", dev);
  if (!be) return NULL;
  ct_shape s = ct_shape_of(x_in);
  cti_pool_geom g = {.h = s.d[nd - 2], .w = s.d[nd - 1], .k = st->k, .stride = st->stride};
  g.planes = nd == 4 ? s.d[0] * s.d[1] : s.d[0];
  if (g.h < g.k || g.w < g.k) {
    ct_fail(CT_ERR_SHAPE,
            "MaxPool2d: given input size %s, the %d x %d window leaves an output size of 0",
            ct_shape_str(s, sb, sizeof sb), st->k, st->k);
    return NULL;
  }
  g.ho = (g.h - g.k) / g.stride + 1;
  g.wo = (g.w - g.k) / g.stride + 1;
  ct_shape os = s;
  os.d[nd - 2] = g.ho;
  os.d[nd - 1] = g.wo;
  ct_tensor *y = ct_empty(os, dt, dev);
  ct_tensor *idx = y && m->training ? ct_empty(os, CT_I32, dev) : NULL;
  ct_tensor *x = y && (idx || !m->training) ? ct_contiguous(x_in) : NULL;
  int rc = x ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK && g.planes > 0)
    rc = be->conv->maxpool_forward(dt, &g, ct_data_ptr(x), ct_data_ptr(y),
                                   idx ? ct_data_ptr(idx) : NULL, ct_current_stream(dev));
  ct_free(x);
  if (rc != CT_OK) {
    ct_free(y), ct_free(idx);
    return NULL;
  }
  st->idx = idx;
  st->in_shape = s;
  st->dt = dt;
  st->g = g;
  return y;
}

static ct_tensor *pool_backward(ct_module *m, const ct_tensor *gy_in) {
  pool_state *st = m->state;
  if (!st->idx) {
    ct_fail(CT_ERR_VALUE, "MaxPool2d: backward needs a forward in training mode first");
    return NULL;
  }
  char sa[128], sb[128];
  const ct_shape want = ct_shape_of(st->idx);
  if (!ct_shape_eq(ct_shape_of(gy_in), want)) {
    ct_fail(CT_ERR_SHAPE, "MaxPool2d: backward expected a gradient of shape %s, got %s",
            ct_shape_str(want, sa, sizeof sa), ct_shape_str(ct_shape_of(gy_in), sb, sizeof sb));
    return NULL;
  }
  const ct_dtype dt = st->dt;
  const ct_device dev = ct_device_of(st->idx);
  if (!ct_device_eq(ct_device_of(gy_in), dev)) {
    ct_fail(CT_ERR_DEVICE, "MaxPool2d: backward got a gradient on another device than its forward");
    return NULL;
  }
  const cti_backend *be = cti_backend_for("MaxPool2d", dev);
  if (!be) return NULL;
  if (!ct_dtype_is_floating(ct_dtype_of(gy_in))) {
    ct_fail(CT_ERR_DTYPE, "MaxPool2d: backward expected a floating gradient, got %s",
            ct_dtype_name(ct_dtype_of(gy_in)));
    return NULL;
  }
  ct_tensor *gy = ct_dtype_of(gy_in) == dt ? ct_contiguous(gy_in) : ct_to_dtype(gy_in, dt);
  ct_tensor *dx = gy ? ct_empty(st->in_shape, dt, dev) : NULL;
  int rc = dx ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK && st->g.planes > 0)
    rc = be->conv->maxpool_backward(dt, &st->g, ct_data_ptr(gy), ct_data_ptr(st->idx),
                                    ct_data_ptr(dx), ct_current_stream(dev));
  ct_free(gy);
  if (rc != CT_OK) {
    ct_free(dx);
    return NULL;
  }
  return dx;
}

static void pool_describe(const ct_module *m, char *buf, size_t len) {
  const pool_state *st = m->state;
  snprintf(buf, len, "kernel_size=%d, stride=%d, padding=0, dilation=1, ceil_mode=False", st->k,
           st->stride);
}

static int pool_state_to(ct_module *m, ct_device device) {
  (void)device;
  drop_saved(m->state);
  return CT_OK;
}

static void pool_state_free(ct_module *m) {
  if (!m->state) return;
  drop_saved(m->state);
  free(m->state);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *pool_state_clone(const ct_module *m) {
  pool_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->idx = NULL;
  return st;
}

static const cti_module_ops pool_ops = {
    .kind = "MaxPool2d",
    .forward = pool_forward,
    .backward = pool_backward,
    .describe = pool_describe,
    .state_to = pool_state_to,
    .state_free = pool_state_free,
    .state_clone = pool_state_clone,
};

ct_module *ct_nn_maxpool2d(int kernel_size, int stride) {
  if (kernel_size <= 0 || stride < 0) {
    ct_fail(CT_ERR_VALUE,
            "ct_nn_maxpool2d: expected kernel_size > 0 and stride >= 0 (0: the kernel size), "
            "got %d and %d", kernel_size, stride);
    return NULL;
  }
  pool_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_maxpool2d: out of host memory");
    return NULL;
  }
  st->k = kernel_size;
  st->stride = stride == 0 ? kernel_size : stride;
  ct_module *m = cti_module_new(&pool_ops, st);
  if (!m) free(st);
  return m;
}
