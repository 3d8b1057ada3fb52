// SPDX-License-Identifier: MIT
//
// nn_loss: MSELoss and CrossEntropyLoss (mean reduction), each returning the
// loss and, on request, its gradient with respect to the prediction: the
// first step of every backward pass.
//
// MSE:  L = mean((p - t)^2) over all n elements;  dL/dp = 2 (p - t) / n.
//       Built from existing ops (sub, mul, mean, mul by a scalar).
// Cross-entropy of logits x (N, C) against class indices t (N,):
//       L = (1/N) sum_i [log sum_j exp(x_ij) - x_i,t_i]
//       dL/dx_ij = (softmax(x_i)_j - [j == t_i]) / N.
//       One fused kernel per device (cpu_nn.c, kernels/nn.cu) computes each
//       row's loss and gradient row in one pass over the logits, shifting by
//       the row's max so that exp never overflows (log-softmax's trick);
//       the mean of the row losses is ct_mean. Targets are checked in the
//       same pass: one out of [0, C) fails with torch's "Target 10 is out of
//       bounds." (PyTorch's ignore_index is not supported here: -100 is an
//       error; ct_cross_entropy below, for language models, has it.)
// ct_cross_entropy: F.cross_entropy of (*, V) logits with ignore_index, the
//       mean over the rows not ignored, through the transformer family's
//       fused kernel (see its comment). GPT's bfloat16 logits under autocast
//       take the float32 route below.
//
// Half-precision input (float16/bfloat16) is computed in float32, widened
// first. Under autocast, where the losses are on PyTorch's float32 list,
// the loss and the gradient stay float32 (the backward of the widening, in
// the module that made the input, casts the gradient down); outside it (a
// model.half()) they are rounded to the input's dtype, as a half-precision
// loss in PyTorch is.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "autocast_policy.h"
#include "backend.h"
#include "error.h"
#include "nn.h"
#include "nn_kernels.h"
#include "ops.h"
#include "transformer_kernels.h"

static int same_device(const char *op, const ct_tensor *a, const ct_tensor *b) {
  if (ct_device_eq(ct_device_of(a), ct_device_of(b))) return CT_OK;
  char x[CT_DEVICE_STR_MAX], y[CT_DEVICE_STR_MAX];
  return ct_fail(CT_ERR_DEVICE, "%s: expected all tensors to be on the same device, but found %s and %s",
                 op, ct_device_str(ct_device_of(a), x), ct_device_str(ct_device_of(b), y));
}

// Widens half-precision x to float32 (a new reference either way).
static ct_tensor *widen(const ct_tensor *x) {
  const ct_dtype dt = ct_dtype_of(x);
  return dt == CT_F16 || dt == CT_BF16 ? ct_to_dtype(x, CT_F32) : ct_retain((ct_tensor *)x);
}

// A float32 result for an input of dtype `in` on device d: kept where op's
// autocast row (autocast_policy.h) computes in float32, rounded to `in`
// outside autocast (consumes t).
static ct_tensor *answer(ct_tensor *t, cti_autocast_op op, ct_dtype in, ct_device d) {
  if (!t || ct_dtype_of(t) == in || cti_autocast_dtype(op, d, in) == CT_F32) return t;
  ct_tensor *c = ct_to_dtype(t, in);
  ct_free(t);
  return c;
}

// Runs `loss` on the widened input and answers as op's row says.
typedef ct_tensor *(*loss_fn)(const ct_tensor *x, const ct_tensor *target, int64_t ignore_index, ct_tensor **grad);
static ct_tensor *half_loss(cti_autocast_op op, loss_fn loss, const ct_tensor *x, const ct_tensor *target,
                            int64_t ignore_index, ct_tensor **grad) {
  ct_tensor *xw = widen(x);
  ct_tensor *g = NULL;
  ct_tensor *l = xw ? loss(xw, target, ignore_index, grad ? &g : NULL) : NULL;
  ct_free(xw);
  const ct_dtype in = ct_dtype_of(x);
  const ct_device d = ct_device_of(x);
  l = answer(l, op, in, d);
  g = l ? answer(g, op, in, d) : (ct_free(g), NULL);
  if (grad && l && !g) {
    ct_free(l);
    l = NULL;
  }
  if (grad) *grad = g;
  return l;
}

static bool half(const ct_tensor *t) {
  return t && (ct_dtype_of(t) == CT_F16 || ct_dtype_of(t) == CT_BF16);
}

static ct_tensor *mse_fn(const ct_tensor *x, const ct_tensor *t, int64_t ignore_index, ct_tensor **g) {
  (void)ignore_index;
  return ct_mse_loss(x, t, g);
}
static ct_tensor *ce_fn(const ct_tensor *x, const ct_tensor *t, int64_t ignore_index, ct_tensor **g) {
  (void)ignore_index;
  return ct_cross_entropy_loss(x, t, g);
}
static ct_tensor *lm_ce_fn(const ct_tensor *x, const ct_tensor *t, int64_t ignore_index, ct_tensor **g) {
  return ct_cross_entropy(x, t, ignore_index, g);
}

ct_tensor *ct_mse_loss(const ct_tensor *pred, const ct_tensor *target, ct_tensor **grad) {
  if (half(pred) && target && ct_device_eq(ct_device_of(pred), ct_device_of(target)))
    return half_loss(CTI_AC_MSE_LOSS, mse_fn, pred, target, 0, grad);
  static const char *op = "ct_mse_loss";
  if (grad) *grad = NULL;
  if (!pred || !target) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);
    return NULL;
  }
  if (same_device(op, pred, target)) return NULL;
  if (!ct_shape_eq(ct_shape_of(pred), ct_shape_of(target))) {
    char a[96], b[96];
    ct_fail(CT_ERR_SHAPE, "%s: input of shape %s and target of shape %s differ", op,
            ct_shape_str(ct_shape_of(pred), a, sizeof a), ct_shape_str(ct_shape_of(target), b, sizeof b));
    return NULL;
  }
  ct_dtype dt = ct_dtype_of(pred);
  if (!ct_dtype_is_floating(dt)) {
    ct_fail(CT_ERR_DTYPE, "%s: expected a floating input, got %s", op, ct_dtype_name(dt));
    return NULL;
  }
  ct_tensor *t = ct_to_dtype(target, dt); // the loss has pred's dtype
  ct_tensor *diff = t ? ct_sub(pred, t) : NULL;
  ct_tensor *sq = diff ? ct_mul(diff, diff) : NULL;
  ct_tensor *loss = sq ? ct_mean(sq) : NULL;
  ct_tensor *g = NULL;
  if (loss && grad) {
    g = ct_mul_scalar(diff, 2.0 / (double)ct_numel(pred));
    if (!g) {
      ct_free(loss);
      loss = NULL;
    }
  }
  ct_free(t);
  ct_free(diff);
  ct_free(sq);
  if (grad) *grad = g;
  return loss;
}

ct_tensor *ct_cross_entropy_loss(const ct_tensor *logits, const ct_tensor *target, ct_tensor **grad) {
  static const char *op = "ct_cross_entropy_loss";
  if (half(logits)) return half_loss(CTI_AC_CROSS_ENTROPY, ce_fn, logits, target, 0, grad);
  if (grad) *grad = NULL;
  if (!logits || !target) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);
    return NULL;
  }
  if (same_device(op, logits, target)) return NULL;
  ct_dtype dt = ct_dtype_of(logits);
  if (dt != CT_F32 && dt != CT_F64) {
    ct_fail(CT_ERR_DTYPE, "%s: logits must be floating (float16, bfloat16, float32, float64), got %s", op,
            ct_dtype_name(dt));
    return NULL;
  }
  if (ct_dtype_of(target) != CT_I64) {
    ct_fail(CT_ERR_DTYPE, "%s: expected scalar type Long but found %s (targets are class indices, int64)",
            op, ct_dtype_name(ct_dtype_of(target)));
    return NULL;
  }
  if (ct_ndim(logits) != 2 || ct_ndim(target) != 1 || ct_size(target, 0) != ct_size(logits, 0)) {
    char a[96], b[96];
    ct_fail(CT_ERR_SHAPE, "%s: expected logits (N, C) and target (N,), got %s and %s", op,
            ct_shape_str(ct_shape_of(logits), a, sizeof a), ct_shape_str(ct_shape_of(target), b, sizeof b));
    return NULL;
  }
  ct_device dev = ct_device_of(logits);
  const cti_backend *be = cti_backend_for(op, dev);
  if (!be) return NULL;
  int64_t n = ct_size(logits, 0), c = ct_size(logits, 1);
  ct_tensor *x = ct_contiguous(logits), *t = ct_contiguous(target);
  ct_tensor *rows = x && t ? ct_empty(CT_SHAPE(n), dt, dev) : NULL; // per-row losses
  ct_tensor *g = rows && grad ? ct_empty(CT_SHAPE(n, c), dt, dev) : NULL;
  int rc = rows && (g || !grad) ? CT_OK : (int)ct_last_status();
  int64_t bad = -1;
  double inv_n = n > 0 ? 1.0 / (double)n : 0.0;
  if (!rc && n > 0) {
    rc = be->nn->cross_entropy(dt, n, c, ct_data_ptr(x), ct_data_ptr(t), ct_data_ptr(rows),
                               g ? ct_data_ptr(g) : NULL, inv_n, &bad, ct_current_stream(dev));
  }
  if (!rc && bad >= 0) {
    int64_t value = 0;
    ct_tensor *tv = ct_narrow(t, 0, bad, 1);
    rc = tv ? ct_copy_to_host(tv, &value, sizeof value) : (int)ct_last_status();
    ct_free(tv);
    if (!rc) rc = ct_fail(CT_ERR_VALUE, "%s: Target %" PRId64 " is out of bounds.", op, value);
  }
  ct_tensor *loss = rc ? NULL : ct_mean(rows); // NaN for N = 0, as torch
  ct_free(x);
  ct_free(t);
  ct_free(rows);
  if (!loss) {
    ct_free(g);
    return NULL;
  }
  if (grad) *grad = g;
  return loss;
}

// ---- F.cross_entropy for language models ----------------------------------------------------------
// logits (*, V) against target (*) int64, as
//   F.cross_entropy(logits.view(-1, V), target.view(-1), ignore_index=ignore_index)
// with mean reduction over the rows whose target is not ignore_index. One
// fused kernel (transformer_kernels.h's cross_entropy) counts those rows
// (scale = 1/count, on the device), and makes every row's loss and gradient
// row in one pass over the logits: the loss is sum(rows) * scale, computed
// on the device, so nothing waits for the GPU. All rows ignored: the loss is
// NaN (0/0) and the gradient 0, as torch.
ct_tensor *ct_cross_entropy(const ct_tensor *logits, const ct_tensor *target, int64_t ignore_index,
                            ct_tensor **grad) {
  static const char *op = "ct_cross_entropy";
  if (grad) *grad = NULL;
  if (!logits || !target) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);
    return NULL;
  }
  if (same_device(op, logits, target)) return NULL;
  if (half(logits)) return half_loss(CTI_AC_CROSS_ENTROPY, lm_ce_fn, logits, target, ignore_index, grad);
  const ct_dtype dt = ct_dtype_of(logits);
  if (dt != CT_F32 && dt != CT_F64) {
    ct_fail(CT_ERR_DTYPE, "%s: logits must be floating (float16, bfloat16, float32, float64), got %s", op,
            ct_dtype_name(dt));
    return NULL;
  }
  if (ct_dtype_of(target) != CT_I64) {
    ct_fail(CT_ERR_DTYPE, "%s: expected scalar type Long but found %s (targets are class indices, int64)", op,
            ct_dtype_name(ct_dtype_of(target)));
    return NULL;
  }
  const int nd = ct_ndim(logits);
  bool fits = nd >= 1 && ct_ndim(target) == nd - 1;
  for (int i = 0; fits && i < nd - 1; ++i) fits = ct_size(logits, i) == ct_size(target, i);
  if (!fits) {
    char a[96], b[96];
    ct_fail(CT_ERR_SHAPE, "%s: expected logits (*, V) and target (*) with the same leading dims, got %s and %s", op,
            ct_shape_str(ct_shape_of(logits), a, sizeof a), ct_shape_str(ct_shape_of(target), b, sizeof b));
    return NULL;
  }
  const ct_device dev = ct_device_of(logits);
  const cti_backend *be = cti_backend_for(op, dev);
  if (!be) return NULL;
  const int64_t v = ct_size(logits, -1), n = ct_numel(target);
  ct_tensor *x = ct_contiguous(logits), *t = ct_contiguous(target);
  ct_tensor *rows = x && t ? ct_empty(CT_SHAPE(n), dt, dev) : NULL;
  ct_tensor *scale = rows ? ct_empty(CT_SCALAR_SHAPE, dt, dev) : NULL;
  ct_tensor *g = scale && grad ? ct_empty_like(x, dt, dev) : NULL;
  int rc = scale && (g || !grad) ? CT_OK : (int)ct_last_status();
  int64_t bad = -1;
  if (!rc && n > 0)
    rc = be->transformer->cross_entropy(dt, n, v, ct_data_ptr(x), ct_data_ptr(t), ignore_index, ct_data_ptr(rows),
                                        g ? ct_data_ptr(g) : NULL, ct_data_ptr(scale), &bad, ct_current_stream(dev));
  else if (!rc)
    rc = ct_fill_(scale, NAN); // no rows: the mean of nothing
  if (!rc && bad >= 0) {
    int64_t value = 0;
    ct_tensor *flat = ct_reshape(t, CT_SHAPE(n));
    ct_tensor *tv = flat ? ct_narrow(flat, 0, bad, 1) : NULL;
    ct_free(flat);
    rc = tv ? ct_copy_to_host(tv, &value, sizeof value) : (int)ct_last_status();
    ct_free(tv);
    if (!rc) rc = ct_fail(CT_ERR_VALUE, "%s: Target %" PRId64 " is out of bounds.", op, value);
  }
  ct_tensor *sum = rc ? NULL : ct_sum(rows);
  ct_tensor *loss = sum ? ct_mul(sum, scale) : NULL;
  ct_free(x), ct_free(t), ct_free(rows), ct_free(scale), ct_free(sum);
  if (!loss) {
    ct_free(g);
    return NULL;
  }
  if (grad) *grad = g;
  return loss;
}
