// SPDX-License-Identifier: MIT
//
// cpu_optim: the fused optimizer updates and the sum of squares of
// clip_grad_norm_ on the host (see optim_kernels.h for the formulas).
//
// One OpenMP loop per parameter tensor: every element is read once (param,
// grad, state), updated in registers and written once, which is what makes a
// fused update faster than PyTorch's chain of whole-tensor ops (each of
// which reads and writes the whole tensor). Small tensors run on one thread:
// below OMP_MIN elements starting the team costs more than the work.
//
// Arithmetic is the dtype's own (float for f32, double for f64), one IEEE
// operation per step of the formula; this file is compiled as ISO C, where
// GCC does not contract a * b + c into an FMA, so each product is rounded
// before the sum, as in kernels/optim.cu.
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "error.h"
#include "optim_kernels.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF // clang contracts within expressions by default; GCC's ISO mode does not
#endif

#define OMP_MIN 32768     // elements below which one thread does the work
#define SUMSQ_CHUNK 65536 // elements per partial sum of sum_squares

// ---- SGD --------------------------------------------------------------------------------------
// Generates sgd_<sfx>(n, param, grad, buf, args) for storage/compute type T.
#define GEN_SGD(sfx, T, SQRT)                                                                  \
  static void sgd_##sfx(int64_t n, T *restrict param, const T *restrict grad, T *restrict buf, \
                        const cti_sgd_step_args *a) {                                           \
    const T wd = (T)a->weight_decay, mom = (T)a->momentum, damp1 = (T)(1.0 - a->dampening);    \
    const T neg_lr = (T)(-a->lr);                                                              \
    const bool has_wd = a->weight_decay != 0.0, has_mom = a->momentum != 0.0;                  \
    const bool nesterov = a->nesterov, maximize = a->maximize, init = a->init_buf;             \
    _Pragma("omp parallel for schedule(static) if (n >= OMP_MIN)")                             \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      T p = param[i];                                                                          \
      T d = maximize ? -grad[i] : grad[i];                                                     \
      if (has_wd) d = d + wd * p;                                                              \
      if (has_mom) {                                                                           \
        T b = init ? d : buf[i] * mom + damp1 * d;                                             \
        buf[i] = b;                                                                            \
        d = nesterov ? d + mom * b : b;                                                        \
      }                                                                                        \
      param[i] = p + neg_lr * d;                                                               \
    }                                                                                          \
  }

// ---- Adam / AdamW -----------------------------------------------------------------------------
#define GEN_ADAM(sfx, T, SQRT)                                                                 \
  static void adam_##sfx(int64_t n, T *restrict param, const T *restrict grad,                 \
                         T *restrict exp_avg, T *restrict exp_avg_sq, T *restrict vmax,        \
                         const cti_adam_step_args *a) {                                         \
    const T wd = (T)a->weight_decay, decay = (T)(1.0 - a->lr * a->weight_decay);               \
    const T b1 = (T)a->beta1, omb1 = (T)(1.0 - a->beta1);                                      \
    const T b2 = (T)a->beta2, omb2 = (T)(1.0 - a->beta2);                                      \
    const T bc2_sqrt = (T)a->bias_correction2_sqrt, eps = (T)a->eps;                           \
    const T neg_step = (T)(-a->step_size);                                                     \
    const bool has_wd = a->weight_decay != 0.0, decoupled = a->decoupled;                      \
    const bool amsgrad = a->amsgrad, maximize = a->maximize;                                   \
    _Pragma("omp parallel for schedule(static) if (n >= OMP_MIN)")                             \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      T p = param[i];                                                                          \
      T g = maximize ? -grad[i] : grad[i];                                                     \
      if (decoupled) p = p * decay;                                                            \
      else if (has_wd) g = g + wd * p;                                                         \
      T m = exp_avg[i] * b1 + omb1 * g;                                                        \
      T v = exp_avg_sq[i] * b2 + (omb2 * g) * g;                                               \
      exp_avg[i] = m;                                                                          \
      exp_avg_sq[i] = v;                                                                       \
      T vh = v;                                                                                \
      if (amsgrad) {                                                                           \
        T mx = vmax[i];                                                                        \
        mx = (mx != mx || mx > v) ? mx : v; /* torch.maximum: NaN propagates */                \
        vmax[i] = mx;                                                                          \
        vh = mx;                                                                               \
      }                                                                                        \
      T denom = SQRT(vh) / bc2_sqrt + eps;                                                     \
      param[i] = p + (neg_step * m) / denom;                                                   \
    }                                                                                          \
  }

// ---- SGD on float16 / bfloat16 parameters ---------------------------------------------------
// Each torch op of the update computes in float32 from stored values and
// rounds its result to the storage dtype (RND), as PyTorch's half-precision
// add_/mul_ do: d + wd*p, buf*mom, buf + (1-damp)*d, d + mom*buf, p + (-lr)*d.
#define GEN_SGD_LP(sfx, LD, RND)                                                               \
  static void sgd_##sfx(int64_t n, uint16_t *restrict param, const uint16_t *restrict grad,    \
                        uint16_t *restrict buf, const cti_sgd_step_args *a) {                   \
    const float wd = (float)a->weight_decay, mom = (float)a->momentum;                         \
    const float damp1 = (float)(1.0 - a->dampening), neg_lr = (float)(-a->lr);                 \
    const bool has_wd = a->weight_decay != 0.0, has_mom = a->momentum != 0.0;                  \
    const bool nesterov = a->nesterov, maximize = a->maximize, init = a->init_buf;             \
    _Pragma("omp parallel for schedule(static) if (n >= OMP_MIN)")                             \
    for (int64_t i = 0; i < n; ++i) {                                                          \
      const float p = LD(param[i]);                                                            \
      float d = maximize ? -LD(grad[i]) : LD(grad[i]);                                         \
      if (has_wd) d = LD(RND(d + wd * p));                                                     \
      if (has_mom) {                                                                           \
        float b = init ? d : LD(RND(LD(RND(LD(buf[i]) * mom)) + damp1 * d));                  \
        buf[i] = RND(b);                                                                       \
        d = nesterov ? LD(RND(d + mom * b)) : b;                                               \
      }                                                                                        \
      param[i] = RND(p + neg_lr * d);                                                          \
    }                                                                                          \
  }

GEN_SGD(f32, float, sqrtf)
GEN_SGD(f64, double, sqrt)
GEN_SGD_LP(f16, cti_cpu_f16_to_f32, cti_cpu_f32_to_f16)
GEN_SGD_LP(bf16, cti_cpu_bf16_to_f32, cti_cpu_f32_to_bf16)
GEN_ADAM(f32, float, sqrtf)
GEN_ADAM(f64, double, sqrt)

// GradScaler's skip: true when the step must write nothing.
static bool skipped(const float *found_inf) { return found_inf && *found_inf != 0.0f; }

static int sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                    const cti_sgd_step_args *args, ct_stream *s) {
  (void)s;
  if (skipped(args->found_inf)) return CT_OK;
  cti_sgd_step_args a = *args;
  if (a.amp_state) a.init_buf = a.amp_state[0] == 1.0;
  switch (dt) {
  case CT_F32: sgd_f32(n, param, grad, buf, &a); return CT_OK;
  case CT_F64: sgd_f64(n, param, grad, buf, &a); return CT_OK;
  case CT_F16: sgd_f16(n, param, grad, buf, &a); return CT_OK;
  case CT_BF16: sgd_bf16(n, param, grad, buf, &a); return CT_OK;
  default:
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: SGD not supported for %s on cpu",
                   ct_dtype_name(dt));
  }
}

static int adam_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                     void *exp_avg_sq, void *max_exp_avg_sq, const cti_adam_step_args *args,
                     ct_stream *s) {
  (void)s;
  if (skipped(args->found_inf)) return CT_OK;
  cti_adam_step_args a = *args;
  if (a.amp_state) a.step_size = a.amp_state[1], a.bias_correction2_sqrt = a.amp_state[2];
  switch (dt) {
  case CT_F32: adam_f32(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, &a); return CT_OK;
  case CT_F64: adam_f64(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, &a); return CT_OK;
  default:
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: Adam not supported for %s on cpu",
                   ct_dtype_name(dt));
  }
}

static int amp_prologue(const float *found_inf, double *state, bool adam, double lr, double beta1,
                        double beta2, ct_stream *s) {
  (void)s;
  cti_amp_prologue_rule(*found_inf, state, adam, lr, beta1, beta2);
  return CT_OK;
}

// ---- sum of squares ---------------------------------------------------------------------------
// At most MAX_PARTS parts of at least SUMSQ_CHUNK elements, each summed in
// order into a double; the parts' sums are then added in order. The cut
// depends only on n, so the result does not depend on the thread count.
#define MAX_PARTS 256
#define GEN_SUMSQ(sfx, T)                                                                     \
  static double sumsq_##sfx(int64_t n, const T *x) {                                          \
    int64_t np = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;                                         \
    if (np > MAX_PARTS) np = MAX_PARTS;                                                       \
    if (np < 1) np = 1;                                                                       \
    const int64_t len = (n + np - 1) / np;                                                    \
    double part[MAX_PARTS];                                                                   \
    _Pragma("omp parallel for schedule(static) if (np > 1)")                                  \
    for (int64_t c = 0; c < np; ++c) {                                                        \
      int64_t lo = c * len, hi = lo + len < n ? lo + len : n;                                 \
      double s = 0.0;                                                                         \
      for (int64_t i = lo; i < hi; ++i) s += (double)x[i] * (double)x[i];                     \
      part[c] = s;                                                                            \
    }                                                                                         \
    double s = 0.0;                                                                           \
    for (int64_t c = 0; c < np; ++c) s += part[c];                                            \
    return s;                                                                                 \
  }

GEN_SUMSQ(f32, float)
GEN_SUMSQ(f64, double)

static int64_t sum_squares_workspace(void) { return 0; }

static int sum_squares(ct_dtype dt, int64_t n, const void *x, double *out, double *workspace,
                       ct_stream *s) {
  (void)workspace, (void)s;
  switch (dt) {
  case CT_F32: *out = sumsq_f32(n, x); return CT_OK;
  case CT_F64: *out = sumsq_f64(n, x); return CT_OK;
  default:
    return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: not supported for %s grads on cpu",
                   ct_dtype_name(dt));
  }
}

// ---- clip_grad_norm_'s coefficient and scaling --------------------------------------------------
static int clip_coef(int64_t n, const double *sumsq, double max_norm, double *out, ct_stream *s) {
  (void)s;
  double t = 0.0;
  for (int64_t i = 0; i < n; ++i) t += sumsq[i];
  const double total = sqrt(t);
  double coef = max_norm / (total + 1e-6);
  if (coef > 1.0) coef = 1.0; // NaN stays NaN, as torch.clamp(max=1.0)
  out[0] = total;
  out[1] = coef;
  return CT_OK;
}

// x *= (T)coef, one rounding per element, as ct_mul's scalar path.
#define GEN_SCALE(sfx, T)                                                                     \
  static void scale_##sfx(int64_t n, T *x, T c) {                                             \
    _Pragma("omp parallel for schedule(static) if (n >= OMP_MIN)")                            \
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * c;                                          \
  }
GEN_SCALE(f32, float)
GEN_SCALE(f64, double)

static int scale_by(ct_dtype dt, int64_t n, void *x, const double *coef, ct_stream *s) {
  (void)s;
  const double c = *coef;
  if (c >= 1.0) return CT_OK;
  switch (dt) {
  case CT_F32: scale_f32(n, x, (float)c); return CT_OK;
  case CT_F64: scale_f64(n, x, c); return CT_OK;
  default:
    return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: not supported for %s grads on cpu",
                   ct_dtype_name(dt));
  }
}

// The family's list names every entry; each is the function of its name above.
#define CTI_OP_CPU_PREFIX
const cti_optim_kernels cti_cpu_optim_kernels = {CTI_OPTIM_OPS(CTI_OP_CPU_INIT)};
