// SPDX-License-Identifier: MIT
//
// nn_batchnorm: BatchNorm2d, as torch.nn.BatchNorm2d(C, eps, momentum)
// with affine=True and track_running_stats=True.
//
// Per channel c of x (N, C, H, W), over its M = N*H*W values:
//   training:  mean, var = the batch's mean and biased variance,
//              y = (x - mean) / sqrt(var + eps) * weight + bias,
//              running_mean = (1 - momentum) * running_mean + momentum * mean,
//              running_var  = (1 - momentum) * running_var
//                             + momentum * var * M / (M - 1)   (unbiased),
//              num_batches_tracked += 1;
//   eval:      y = (x - running_mean) / sqrt(running_var + eps) * weight + bias.
// Training forward keeps x, mean and invstd = 1/sqrt(var + eps); backward,
// with xhat = (x - mean) * invstd:
//   dbias = sum dy,  dweight = sum dy * xhat,
//   dx = weight * invstd * (dy - dbias / M - xhat * dweight / M),
// the gradient through the batch statistics included (they depend on x).
//
// Half-precision input (a float16/bfloat16 activation under autocast) with
// float32 parameters is PyTorch's "mixed" batch norm: the statistics, the
// running averages and the normalization are computed in float32 (the input
// widened), and y and dx come back in the input's dtype.
//
// Tensors, in torch's state_dict order: own[0] "weight" (C) = 1, own[1]
// "bias" (C) = 0, and the buffers own[2] "running_mean" (C) = 0, own[3]
// "running_var" (C) = 1, own[4] "num_batches_tracked" (int64, 0-d) = 0.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "conv_kernels.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "stream.h"

enum { BN_WEIGHT, BN_BIAS, BN_RMEAN, BN_RVAR, BN_NBT };

typedef struct bn_state {
  int64_t c;
  double eps, momentum;
  ct_tensor *x, *mean, *invstd; // of the last training forward, or NULL (x in the parameters' dtype)
  ct_dtype in_dtype;            // that forward's input dtype, for dx
} bn_state;

static void drop_saved(bn_state *st) {
  ct_free(st->x), ct_free(st->mean), ct_free(st->invstd);
  st->x = st->mean = st->invstd = NULL;
}

// Python's repr of a float, as torch prints eps and momentum: the shortest
// digits that read back to the same double, "1e-05", "0.1", "1.0".
void cti_py_float(double v, char *buf, size_t len) {
  for (int prec = 1; prec <= 17; ++prec) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eEni")) {
    size_t n = strlen(buf);
    if (n + 2 < len) memcpy(buf + n, ".0", 3);
  }
}

// The five tensors must share the input's device and (but the counter) dtype.
static int check_tensors(ct_module *m, const ct_tensor *x, const char *what) {
  bn_state *st = m->state;
  char sb[128];
  if (ct_ndim(x) != 4) {
    return ct_fail(CT_ERR_SHAPE, "BatchNorm2d: expected a 4-D %s (N, C, H, W), got %s", what,
                   ct_shape_str(ct_shape_of(x), sb, sizeof sb));
  }
  if (ct_size(x, 1) != st->c)
    return ct_fail(CT_ERR_SHAPE,
                   "BatchNorm2d: running_mean should contain %" PRId64 " elements not %" PRId64
                   " (the %s's channels)", ct_size(x, 1), st->c, what);
  const ct_dtype dt = ct_dtype_of(x);
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "BatchNorm2d: not implemented for %s (float32 and float64 are)",
                   ct_dtype_name(dt));
  for (int i = BN_WEIGHT; i <= BN_RVAR; ++i) {
    const ct_tensor *t = m->own[i].value;
    if (ct_dtype_of(t) != dt || ct_numel(t) != st->c || !ct_is_contiguous(t))
      return ct_fail(CT_ERR_DTYPE,
                     "BatchNorm2d: %s is %s (%" PRId64 " elements) but the %s is %s",
                     m->own[i].name, ct_dtype_name(ct_dtype_of(t)), ct_numel(t), what,
                     ct_dtype_name(dt));
  }
  return CT_OK;
}

static ct_tensor *bn_forward_same(ct_module *m, const ct_tensor *x_in) {
  bn_state *st = m->state;
  drop_saved(st);
  if (check_tensors(m, x_in, "input")) return NULL;
  const ct_device dev = ct_device_of(x_in);
  const cti_backend *be = cti_backend_for("BatchNorm2d", dev);
  if (!be) return NULL;
  ct_stream *cs = ct_current_stream(dev);
  const ct_dtype dt = ct_dtype_of(x_in);
  const int64_t N = ct_size(x_in, 0), C = st->c, P = ct_size(x_in, 2) * ct_size(x_in, 3);
  void *w = ct_data_ptr(m->own[BN_WEIGHT].value), *b = ct_data_ptr(m->own[BN_BIAS].value);
  void *rm = ct_data_ptr(m->own[BN_RMEAN].value), *rv = ct_data_ptr(m->own[BN_RVAR].value);
  if (m->training && N * P <= 1) {
    char sb[128];
    ct_fail(CT_ERR_VALUE,
            "BatchNorm2d: expected more than 1 value per channel when training, got input size %s",
            ct_shape_str(ct_shape_of(x_in), sb, sizeof sb));
    return NULL;
  }
  ct_tensor *x = ct_contiguous(x_in);
  ct_tensor *y = x ? ct_empty_like(x, dt, dev) : NULL;
  if (!y) {
    ct_free(x);
    return NULL;
  }
  int rc = CT_OK;
  if (!m->training) {
    if (N * P > 0) rc = be->conv->bn_eval(dt, N, C, P, ct_data_ptr(x), rm, rv, st->eps, w, b, ct_data_ptr(y), cs);
    ct_free(x);
    if (rc != CT_OK) ct_free(y), y = NULL;
    return y;
  }
  ct_tensor *mean = ct_empty(CT_SHAPE(C), dt, dev), *invstd = ct_empty(CT_SHAPE(C), dt, dev);
  rc = mean && invstd ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK)
    rc = be->conv->bn_stats(dt, N, C, P, ct_data_ptr(x), st->eps, ct_data_ptr(mean),
                            ct_data_ptr(invstd), rm, rv, st->momentum, cs);
  if (rc == CT_OK)
    rc = be->conv->bn_apply(dt, N, C, P, ct_data_ptr(x), ct_data_ptr(mean), ct_data_ptr(invstd), w,
                            b, ct_data_ptr(y), cs);
  if (rc == CT_OK) {
    ct_tensor *nbt = m->own[BN_NBT].value;
    rc = ct_binary_scalar_out(CT_OP_ADD, nbt, nbt, 1.0);
  }
  if (rc != CT_OK) {
    ct_free(x), ct_free(y), ct_free(mean), ct_free(invstd);
    return NULL;
  }
  st->x = x;
  st->mean = mean;
  st->invstd = invstd;
  return y;
}

// The dtype the normalization runs in for input x: the parameters' for a
// half-precision input (mixed), else x's own.
static ct_dtype compute_dtype(ct_module *m, const ct_tensor *x) {
  const ct_dtype dt = ct_dtype_of(x), pdt = ct_dtype_of(m->own[BN_WEIGHT].value);
  return (dt == CT_F16 || dt == CT_BF16) && (pdt == CT_F32 || pdt == CT_F64) ? pdt : dt;
}

// y or dx back in dtype `to` (consumes t).
static ct_tensor *cast_back(ct_tensor *t, ct_dtype to) {
  if (!t || ct_dtype_of(t) == to) return t;
  ct_tensor *c = ct_to_dtype(t, to);
  ct_free(t);
  return c;
}

static ct_tensor *bn_forward(ct_module *m, const ct_tensor *x_in) {
  bn_state *st = m->state;
  const ct_dtype cdt = compute_dtype(m, x_in), in = ct_dtype_of(x_in);
  ct_tensor *x = cdt == in ? ct_retain((ct_tensor *)x_in) : ct_to_dtype(x_in, cdt);
  ct_tensor *y = x ? bn_forward_same(m, x) : NULL;
  ct_free(x);
  st->in_dtype = in;
  return cast_back(y, in);
}

static ct_tensor *bn_backward_same(ct_module *m, const ct_tensor *gy_in);

static ct_tensor *bn_backward(ct_module *m, const ct_tensor *gy_in) {
  bn_state *st = m->state;
  if (!st->x || !gy_in || ct_dtype_of(gy_in) == ct_dtype_of(st->x) || !ct_dtype_is_floating(ct_dtype_of(gy_in)))
    return bn_backward_same(m, gy_in);
  ct_tensor *g = ct_to_dtype(gy_in, ct_dtype_of(st->x)); // autograd casts to the output's dtype
  ct_tensor *dx = g ? bn_backward_same(m, g) : NULL;
  ct_free(g);
  return cast_back(dx, st->in_dtype);
}

static ct_tensor *bn_backward_same(ct_module *m, const ct_tensor *gy_in) {
  bn_state *st = m->state;
  if (!st->x) {
    ct_fail(CT_ERR_VALUE, "BatchNorm2d: backward needs a forward in training mode first");
    return NULL;
  }
  char sa[128], sb[128];
  const ct_dtype dt = ct_dtype_of(st->x);
  const ct_device dev = ct_device_of(st->x);
  if (!ct_shape_eq(ct_shape_of(gy_in), ct_shape_of(st->x)) || ct_dtype_of(gy_in) != dt) {
    ct_fail(CT_ERR_SHAPE, "BatchNorm2d: backward expected a %s gradient of shape %s, got %s %s",
            ct_dtype_name(dt), ct_shape_str(ct_shape_of(st->x), sa, sizeof sa),
            ct_dtype_name(ct_dtype_of(gy_in)), ct_shape_str(ct_shape_of(gy_in), sb, sizeof sb));
    return NULL;
  }
  if (check_tensors(m, st->x, "saved input")) return NULL;
  const cti_backend *be = cti_backend_for("BatchNorm2d", dev);
  if (!be) return NULL;
  const int64_t N = ct_size(st->x, 0), C = st->c, P = ct_size(st->x, 2) * ct_size(st->x, 3);
  ct_tensor *gy = ct_contiguous(gy_in);
  ct_tensor *dx = gy ? ct_empty_like(st->x, dt, dev) : NULL;
  ct_tensor *dw = dx ? ct_empty(CT_SHAPE(C), dt, dev) : NULL;
  ct_tensor *db = dw ? ct_empty(CT_SHAPE(C), dt, dev) : NULL;
  int rc = db ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK)
    rc = be->conv->bn_backward(dt, N, C, P, ct_data_ptr(st->x), ct_data_ptr(gy),
                               ct_data_ptr(st->mean), ct_data_ptr(st->invstd),
                               ct_data_ptr(m->own[BN_WEIGHT].value), ct_data_ptr(dx),
                               ct_data_ptr(dw), ct_data_ptr(db), ct_current_stream(dev));
  if (rc == CT_OK) rc = cti_param_accumulate_grad(&m->own[BN_WEIGHT], dw);
  if (rc == CT_OK) rc = cti_param_accumulate_grad(&m->own[BN_BIAS], db);
  ct_free(gy), ct_free(dw), ct_free(db);
  if (rc != CT_OK) {
    ct_free(dx);
    return NULL;
  }
  return cast_back(dx, st->in_dtype);
}

static void bn_describe(const ct_module *m, char *buf, size_t len) {
  const bn_state *st = m->state;
  char e[32], mo[32];
  cti_py_float(st->eps, e, sizeof e);
  cti_py_float(st->momentum, mo, sizeof mo);
  snprintf(buf, len, "%" PRId64 ", eps=%s, momentum=%s, affine=True, track_running_stats=True",
           st->c, e, mo);
}

static int bn_state_to(ct_module *m, ct_device device) {
  (void)device;
  drop_saved(m->state);
  return CT_OK;
}

static void bn_state_free(ct_module *m) {
  if (!m->state) return;
  drop_saved(m->state);
  free(m->state);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *bn_state_clone(const ct_module *m) {
  bn_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->x = NULL;
  st->mean = NULL;
  st->invstd = NULL;
  return st;
}

static const cti_module_ops bn_ops = {
    .kind = "BatchNorm2d",
    .forward = bn_forward,
    .backward = bn_backward,
    .describe = bn_describe,
    .state_to = bn_state_to,
    .state_free = bn_state_free,
    .state_clone = bn_state_clone,
};

ct_module *ct_nn_batchnorm2d(int64_t num_features, double eps, double momentum) {
  if (num_features <= 0 || !(eps >= 0) || !(momentum >= 0 && momentum <= 1)) {
    ct_fail(CT_ERR_VALUE,
            "ct_nn_batchnorm2d: expected num_features > 0, eps >= 0 and momentum in [0, 1], "
            "got %" PRId64 ", %g, %g", num_features, eps, momentum);
    return NULL;
  }
  bn_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_batchnorm2d: out of host memory");
    return NULL;
  }
  *st = (bn_state){.c = num_features, .eps = eps, .momentum = momentum};
  ct_module *m = cti_module_new(&bn_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  const ct_device cpu = ct_device_cpu();
  static const char *const names[] = {"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"};
  for (int i = BN_WEIGHT; i <= BN_NBT; ++i) {
    ct_tensor *t = i == BN_NBT ? ct_zeros(CT_SCALAR_SHAPE, CT_I64, cpu)
                   : i == BN_WEIGHT || i == BN_RVAR ? ct_ones(CT_SHAPE(num_features), CT_F32, cpu)
                                                    : ct_zeros(CT_SHAPE(num_features), CT_F32, cpu);
    if (!t || !cti_module_register(m, names[i], t, i >= BN_RMEAN)) { // takes t even on failure
      ct_module_free(m);
      return NULL;
    }
  }
  return m;
}
