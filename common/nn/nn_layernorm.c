// SPDX-License-Identifier: MIT
//
// nn_layernorm: torch.nn.LayerNorm(C, eps) over the last dimension, with
// elementwise_affine=True.
//
// For each row x of x (*, C) (every leading index):
//   mean = sum x / C, var = sum (x - mean)^2 / C (biased), rstd = 1/sqrt(var + eps),
//   y = (x - mean) * rstd * weight + bias.
// Training forward keeps x (a reference), mean and rstd (*,) for backward;
// with xhat = (x - mean) * rstd and g = dy * weight,
//   dx = rstd * (g - mean_C(g) - xhat * mean_C(g * xhat)),
//   dweight = sum over rows of dy * xhat, dbias = sum over rows of dy.
// Unlike BatchNorm there are no running statistics: eval computes the same
// y. Tensors: "weight" (C) = 1, "bias" (C) = 0, as torch.
//
// layer_norm is on CUDA autocast's float32 list (autocast_policy.h): under
// it a float16/bfloat16 input is widened to float32, y is float32, and
// backward casts an incoming gradient to float32 and hands dx back in the
// input's dtype. On the CPU (no layer_norm on its list) a float16/bfloat16
// input with a float32 weight is PyTorch 2.x's mixed-type layer norm, in or
// out of autocast: computed in float32, y rounded once to the input's dtype,
// dx likewise, the parameters' gradients float32. Otherwise input and
// weight must share a dtype.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocast_policy.h"
#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "transformer_kernels.h"

typedef struct layernorm_state {
  int64_t c;
  double eps;
  ct_tensor *x, *mean, *rstd; // of the last training forward (x as computed in), or NULL
  ct_dtype in_dtype;          // that forward's input dtype, for dx
  ct_dtype out_dtype;         // and y's (x's half dtype in the CPU's mixed type)
} layernorm_state;

static void drop_saved(layernorm_state *st) {
  ct_free(st->x), ct_free(st->mean), ct_free(st->rstd);
  st->x = st->mean = st->rstd = NULL;
}

// The CPU's mixed type: half-precision input, float32 weight.
static bool is_mixed(const ct_module *m, ct_dtype dt) {
  return m->device.type == CT_CPU && (dt == CT_F16 || dt == CT_BF16) &&
         ct_dtype_of(cti_module_find((ct_module *)m, "weight")->value) == CT_F32;
}

// x's shape and dtype against the module's (torch's message for the shape).
static int check_input(ct_module *m, const ct_tensor *x) {
  layernorm_state *st = m->state;
  char sb[128];
  if (ct_ndim(x) < 1 || ct_size(x, -1) != st->c)
    return ct_fail(CT_ERR_SHAPE, "LayerNorm: Given normalized_shape=[%" PRId64 "], expected input with shape "
                   "[*, %" PRId64 "], but got input of size%s", st->c, st->c,
                   ct_shape_str(ct_shape_of(x), sb, sizeof sb));
  const ct_dtype dt = ct_dtype_of(x), wt = ct_dtype_of(cti_module_find(m, "weight")->value);
  if (is_mixed(m, dt)) return CT_OK;
  if (dt != wt)
    return ct_fail(CT_ERR_DTYPE, "LayerNorm: expected the input's dtype %s to match the weight's %s (under "
                   "autocast a float16/bfloat16 input is widened to float32)", ct_dtype_name(dt), ct_dtype_name(wt));
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "LayerNorm: not implemented for %s (float32 and float64 are)", ct_dtype_name(dt));
  return CT_OK;
}

static ct_tensor *layernorm_forward(ct_module *m, const ct_tensor *x_given) {
  layernorm_state *st = m->state;
  drop_saved(st);
  ct_tensor *x_in = cti_autocast_cast(CTI_AC_LAYER_NORM, x_given); // autocast: half -> float32
  const cti_backend *be = x_in && !check_input(m, x_in) ? cti_backend_for("LayerNorm", m->device) : NULL;
  if (!be) {
    ct_free(x_in);
    return NULL;
  }
  const ct_dtype out_dt = ct_dtype_of(x_in), dt = is_mixed(m, out_dt) ? CT_F32 : out_dt;
  const int64_t n = ct_numel(x_in) / (st->c > 0 ? st->c : 1);
  ct_tensor *x = dt == out_dt ? ct_contiguous(x_in) : ct_to_dtype(x_in, dt);
  ct_free(x_in);
  ct_tensor *y = x ? ct_empty_like(x, dt, m->device) : NULL;
  ct_tensor *mean = y ? ct_empty(CT_SHAPE(n), dt, m->device) : NULL;
  ct_tensor *rstd = mean ? ct_empty(CT_SHAPE(n), dt, m->device) : NULL;
  int rc = rstd ? CT_OK : (int)ct_last_status();
  if (!rc && n > 0 && st->c > 0)
    rc = be->transformer->layernorm(dt, n, st->c, ct_data_ptr(x), ct_data_ptr(cti_module_find(m, "weight")->value),
                                    ct_data_ptr(cti_module_find(m, "bias")->value), st->eps, ct_data_ptr(y),
                                    ct_data_ptr(mean), ct_data_ptr(rstd), ct_current_stream(m->device));
  if (!rc && dt != out_dt) { // mixed type: y rounded once to the input's dtype
    ct_tensor *yo = ct_to_dtype(y, out_dt);
    ct_free(y);
    y = yo;
    rc = y ? CT_OK : (int)ct_last_status();
  }
  if (rc || !m->training) {
    ct_free(x), ct_free(mean), ct_free(rstd);
    if (rc) ct_free(y), y = NULL;
    return y;
  }
  st->x = x, st->mean = mean, st->rstd = rstd, st->in_dtype = ct_dtype_of(x_given), st->out_dtype = out_dt;
  return y;
}

static ct_tensor *layernorm_backward(ct_module *m, const ct_tensor *gy_in) {
  layernorm_state *st = m->state;
  if (!st->x) {
    ct_fail(CT_ERR_VALUE, "LayerNorm backward: no saved input (run forward in training mode first)");
    return NULL;
  }
  const ct_dtype dt = ct_dtype_of(st->x);
  ct_tensor *gd = cti_nn_grad_as("LayerNorm", gy_in, ct_shape_of(st->x), st->out_dtype); // y's dtype
  const cti_backend *be = gd ? cti_backend_for("LayerNorm backward", m->device) : NULL;
  ct_tensor *gy = !be ? NULL : st->out_dtype == dt ? ct_contiguous(gd) : ct_to_dtype(gd, dt);
  ct_free(gd);
  if (!gy) return NULL;
  ct_param *pw = cti_module_find(m, "weight"), *pb = cti_module_find(m, "bias");
  const int64_t c = st->c, n = ct_numel(st->x) / (c > 0 ? c : 1);
  ct_tensor *dx = ct_empty_like(st->x, dt, m->device);
  ct_tensor *dw = dx ? ct_empty(CT_SHAPE(c), dt, m->device) : NULL;
  ct_tensor *db = dw ? ct_empty(CT_SHAPE(c), dt, m->device) : NULL;
  ct_tensor *work = db ? ct_empty(CT_SHAPE(cti_layernorm_work_bytes(dt, n, c)), CT_U8, m->device) : NULL;
  int rc = work ? CT_OK : (int)ct_last_status();
  if (!rc && c > 0)
    rc = be->transformer->layernorm_backward(dt, n, c, ct_data_ptr(st->x), ct_data_ptr(gy), ct_data_ptr(st->mean),
                                             ct_data_ptr(st->rstd), ct_data_ptr(pw->value), ct_data_ptr(dx),
                                             ct_data_ptr(dw), ct_data_ptr(db), ct_data_ptr(work),
                                             ct_current_stream(m->device));
  if (!rc) rc = cti_param_accumulate_grad(pw, dw);
  if (!rc) rc = cti_param_accumulate_grad(pb, db);
  ct_free(gy), ct_free(dw), ct_free(db), ct_free(work);
  if (rc) ct_free(dx), dx = NULL;
  if (dx && st->in_dtype != dt) { // the backward of autocast's widening
    ct_tensor *dxc = ct_to_dtype(dx, st->in_dtype);
    ct_free(dx);
    dx = dxc;
  }
  return dx;
}

static void layernorm_describe(const ct_module *m, char *buf, size_t len) {
  const layernorm_state *st = m->state;
  char e[32];
  cti_py_float(st->eps, e, sizeof e);
  snprintf(buf, len, "(%" PRId64 ",), eps=%s, elementwise_affine=True", st->c, e);
}

static int layernorm_state_to(ct_module *m, ct_device device) {
  (void)device;
  drop_saved(m->state);
  return CT_OK;
}

static void layernorm_state_free(ct_module *m) {
  if (!m->state) return;
  drop_saved(m->state);
  free(m->state);
  m->state = NULL;
}

static void *layernorm_state_clone(const ct_module *m) {
  layernorm_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->x = st->mean = st->rstd = NULL;
  return st;
}

static const cti_module_ops layernorm_ops = {
    .kind = "LayerNorm",
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .describe = layernorm_describe,
    .state_to = layernorm_state_to,
    .state_free = layernorm_state_free,
    .state_clone = layernorm_state_clone,
};

ct_module *ct_nn_layernorm(int64_t normalized_shape, double eps) {
  if (normalized_shape <= 0 || !(eps >= 0)) {
    ct_fail(CT_ERR_VALUE, "ct_nn_layernorm: expected normalized_shape > 0 and eps >= 0, got %" PRId64 " and %g",
            normalized_shape, eps);
    return NULL;
  }
  layernorm_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_layernorm: out of host memory");
    return NULL;
  }
  *st = (layernorm_state){.c = normalized_shape, .eps = eps};
  ct_module *m = cti_module_new(&layernorm_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  const ct_device cpu = ct_device_cpu();
  ct_tensor *w = ct_ones(CT_SHAPE(normalized_shape), CT_F32, cpu);
  if (!w || !cti_module_register(m, "weight", w, false)) {
    ct_module_free(m);
    return NULL;
  }
  ct_tensor *b = ct_zeros(CT_SHAPE(normalized_shape), CT_F32, cpu);
  if (!b || !cti_module_register(m, "bias", b, false)) {
    ct_module_free(m);
    return NULL;
  }
  return m;
}
