// SPDX-License-Identifier: MIT
//
// optim.cuh: the per-element bodies of optim.cu's fused updates (SGD, Adam,
// AdamW) and of clip_grad_norm_'s scaling, with their launchers, templated on
// the executor (kernel_util.cuh): optim.cu runs them on the GPU, the host
// test (tests/crossdev/test_kernels_host.cu) runs the same code on the CPU.
//
// Invariant: the arithmetic is cpu_optim.c's, operation for operation in the
// parameter's dtype T, every product rounded before its sum (cti_rn), the
// scalar hyperparameters rounded to T on the host first, as PyTorch does. The
// CPU and CUDA therefore give the same bits for the same step.
#ifndef CT_OPTIM_CUH
#define CT_OPTIM_CUH

#include <stdint.h>

#include "kernel_util.cuh"
#include "optim_kernels.h"

// ---- SGD ---------------------------------------------------------------------------------------
// GradScaler's skip, read where the loop runs (device memory on CUDA): every
// element's body returns at once when found_inf is set.
__host__ __device__ inline bool cti_amp_skipped(const float *found_inf) {
  return found_inf && *found_inf != 0.0f;
}

template <class T> struct cti_sgd_op {
  T *param;      // n elements
  const T *grad; // n
  T *buf;        // n, unused without momentum
  T wd, mom, damp1, neg_lr;
  bool has_wd, has_mom, nesterov, maximize, init;
  const float *found_inf;   // GradScaler's flag, or NULL
  const double *amp_state;  // the step count on the device, or NULL
  __host__ __device__ void operator()(int64_t i) const {
    using R = cti_rn<T>;
    if (cti_amp_skipped(found_inf)) return;
    const bool first = amp_state ? amp_state[0] == 1.0 : init;
    T p = param[i];
    T d = maximize ? -grad[i] : grad[i];
    if (has_wd) d = R::add(d, R::mul(wd, p));
    if (has_mom) {
      T b = first ? d : R::add(R::mul(buf[i], mom), R::mul(damp1, d));
      buf[i] = b;
      d = nesterov ? R::add(d, R::mul(mom, b)) : b;
    }
    param[i] = R::add(p, R::mul(neg_lr, d));
  }
};

// float16/bfloat16 parameters: each torch op in float32, rounded to D
// (cpu_optim.c's GEN_SGD_LP, operation for operation).
template <ct_dtype D> struct cti_sgd_lp_op {
  using T = cti_T<D>;
  T *param;
  const T *grad;
  T *buf;
  float wd, mom, damp1, neg_lr;
  bool has_wd, has_mom, nesterov, maximize, init;
  const float *found_inf;
  const double *amp_state;
  __host__ __device__ static float rnd(float v) { return cti_load<D>(cti_convert<D>(v)); }
  __host__ __device__ void operator()(int64_t i) const {
    using R = cti_rn<float>;
    if (cti_amp_skipped(found_inf)) return;
    const bool first = amp_state ? amp_state[0] == 1.0 : init;
    const float p = cti_load<D>(param[i]);
    float d = cti_load<D>(grad[i]);
    if (maximize) d = -d;
    if (has_wd) d = rnd(R::add(d, R::mul(wd, p)));
    if (has_mom) {
      float b = first ? d : rnd(R::add(rnd(R::mul(cti_load<D>(buf[i]), mom)), R::mul(damp1, d)));
      buf[i] = cti_convert<D>(b);
      d = nesterov ? rnd(R::add(d, R::mul(mom, b))) : b;
    }
    param[i] = cti_convert<D>(R::add(p, R::mul(neg_lr, d)));
  }
};

template <class K, class S> inline void cti_sgd_fill(K &k, const cti_sgd_step_args *a) {
  k.wd = (S)a->weight_decay;
  k.mom = (S)a->momentum;
  k.damp1 = (S)(1.0 - a->dampening);
  k.neg_lr = (S)(-a->lr);
  k.has_wd = a->weight_decay != 0.0;
  k.has_mom = a->momentum != 0.0;
  k.nesterov = a->nesterov;
  k.maximize = a->maximize;
  k.init = a->init_buf;
  k.found_inf = a->found_inf;
  k.amp_state = a->amp_state;
}

template <class X, ct_dtype D>
int cti_sgd_lp_run(const X &x, int64_t n, void *param, const void *grad, void *buf,
                   const cti_sgd_step_args *a) {
  cti_sgd_lp_op<D> k;
  k.param = static_cast<cti_T<D> *>(param);
  k.grad = static_cast<const cti_T<D> *>(grad);
  k.buf = static_cast<cti_T<D> *>(buf);
  cti_sgd_fill<cti_sgd_lp_op<D>, float>(k, a);
  return x.run(n, k);
}

template <class X>
int cti_sgd_step_run(const X &x, ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                    const cti_sgd_step_args *a) {
  const bool lp = dt == CT_F16 || dt == CT_BF16;
  if (n <= 0 && (dt == CT_F32 || dt == CT_F64 || lp)) return CT_OK;
  if (dt == CT_F16) return cti_sgd_lp_run<X, CT_F16>(x, n, param, grad, buf, a);
  if (dt == CT_BF16) return cti_sgd_lp_run<X, CT_BF16>(x, n, param, grad, buf, a);
  return cti_dispatch_float(dt, "ct_optimizer_step (SGD)", [&](auto tag) -> int {
    using T = decltype(tag);
    cti_sgd_op<T> k;
    k.param = static_cast<T *>(param);
    k.grad = static_cast<const T *>(grad);
    k.buf = static_cast<T *>(buf);
    cti_sgd_fill<cti_sgd_op<T>, T>(k, a);
    return x.run(n, k);
  });
}

// ---- Adam / AdamW ------------------------------------------------------------------------------
template <class T> struct cti_adam_op {
  T *param;                      // n elements
  const T *grad;                 // n
  T *exp_avg, *exp_avg_sq, *vmax; // n each; vmax only with amsgrad
  T wd, decay, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
  bool has_wd, decoupled, amsgrad, maximize;
  const float *found_inf;  // GradScaler's flag, or NULL
  const double *amp_state; // [step, step_size, bias_correction2_sqrt] on the device, or NULL
  __host__ __device__ void operator()(int64_t i) const {
    using R = cti_rn<T>;
    if (cti_amp_skipped(found_inf)) return;
    const T bc2 = amp_state ? (T)amp_state[2] : bc2_sqrt;
    const T nstep = amp_state ? (T)(-amp_state[1]) : neg_step;
    T p = param[i];
    T g = maximize ? -grad[i] : grad[i];
    if (decoupled) p = R::mul(p, decay);
    else if (has_wd) g = R::add(g, R::mul(wd, p));
    T m = R::add(R::mul(exp_avg[i], b1), R::mul(omb1, g));
    T v = R::add(R::mul(exp_avg_sq[i], b2), R::mul(R::mul(omb2, g), g));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T vh = v;
    if (amsgrad) {
      T mx = vmax[i];
      mx = (mx != mx || mx > v) ? mx : v; // torch.maximum: NaN propagates
      vmax[i] = mx;
      vh = mx;
    }
    T denom = R::add(R::div(R::sqrt(vh), bc2), eps);
    param[i] = R::add(p, R::div(R::mul(nstep, m), denom));
  }
};

template <class X>
int cti_adam_step_run(const X &x, ct_dtype dt, int64_t n, void *param, const void *grad,
                     void *exp_avg, void *exp_avg_sq, void *vmax, const cti_adam_step_args *a) {
  if (n <= 0 && (dt == CT_F32 || dt == CT_F64)) return CT_OK;
  return cti_dispatch_float(dt, "ct_optimizer_step (Adam)", [&](auto tag) -> int {
    using T = decltype(tag);
    cti_adam_op<T> k;
    k.param = static_cast<T *>(param);
    k.grad = static_cast<const T *>(grad);
    k.exp_avg = static_cast<T *>(exp_avg);
    k.exp_avg_sq = static_cast<T *>(exp_avg_sq);
    k.vmax = static_cast<T *>(vmax);
    k.wd = (T)a->weight_decay;
    k.decay = (T)(1.0 - a->lr * a->weight_decay);
    k.b1 = (T)a->beta1;
    k.omb1 = (T)(1.0 - a->beta1);
    k.b2 = (T)a->beta2;
    k.omb2 = (T)(1.0 - a->beta2);
    k.bc2_sqrt = (T)a->bias_correction2_sqrt;
    k.eps = (T)a->eps;
    k.neg_step = (T)(-a->step_size);
    k.has_wd = a->weight_decay != 0.0;
    k.decoupled = a->decoupled;
    k.amsgrad = a->amsgrad;
    k.maximize = a->maximize;
    k.found_inf = a->found_inf;
    k.amp_state = a->amp_state;
    return x.run(n, k);
  });
}

// ---- clip_grad_norm_'s scaling -----------------------------------------------------------------
// x[i] *= (T) *coef, unless *coef >= 1 (then nothing is written). coef is
// read where the loop runs (device memory on CUDA), so nothing waits.
template <class T> struct cti_scale_op {
  T *x;
  const double *coef;
  __host__ __device__ void operator()(int64_t i) const {
    const double c = *coef;
    if (c >= 1.0) return;
    x[i] = cti_rn<T>::mul(x[i], (T)c);
  }
};

template <class X>
int cti_scale_by_run(const X &x, ct_dtype dt, int64_t n, void *data, const double *coef) {
  if (n <= 0 && (dt == CT_F32 || dt == CT_F64)) return CT_OK;
  return cti_dispatch_float(dt, "ct_clip_grad_norm_", [&](auto tag) -> int {
    using T = decltype(tag);
    return x.run(n, cti_scale_op<T>{static_cast<T *>(data), coef});
  });
}

#endif
