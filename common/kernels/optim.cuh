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
template <class T> struct cti_sgd_op {
  T *param;      // n elements
  const T *grad; // n
  T *buf;        // n, unused without momentum
  T wd, mom, damp1, neg_lr;
  bool has_wd, has_mom, nesterov, maximize, init;
  __host__ __device__ void operator()(int64_t i) const {
    using R = cti_rn<T>;
    T p = param[i];
    T d = maximize ? -grad[i] : grad[i];
    if (has_wd) d = R::add(d, R::mul(wd, p));
    if (has_mom) {
      T b = init ? d : R::add(R::mul(buf[i], mom), R::mul(damp1, d));
      buf[i] = b;
      d = nesterov ? R::add(d, R::mul(mom, b)) : b;
    }
    param[i] = R::add(p, R::mul(neg_lr, d));
  }
};

template <class X>
int cti_sgd_step_run(const X &x, ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                    const cti_sgd_step_args *a) {
  if (n <= 0 && (dt == CT_F32 || dt == CT_F64)) return CT_OK;
  return cti_dispatch_float(dt, "ct_optimizer_step (SGD)", [&](auto tag) -> int {
    using T = decltype(tag);
    cti_sgd_op<T> k;
    k.param = static_cast<T *>(param);
    k.grad = static_cast<const T *>(grad);
    k.buf = static_cast<T *>(buf);
    k.wd = (T)a->weight_decay;
    k.mom = (T)a->momentum;
    k.damp1 = (T)(1.0 - a->dampening);
    k.neg_lr = (T)(-a->lr);
    k.has_wd = a->weight_decay != 0.0;
    k.has_mom = a->momentum != 0.0;
    k.nesterov = a->nesterov;
    k.maximize = a->maximize;
    k.init = a->init_buf;
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
  __host__ __device__ void operator()(int64_t i) const {
    using R = cti_rn<T>;
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
    T denom = R::add(R::div(R::sqrt(vh), bc2_sqrt), eps);
    param[i] = R::add(p, R::div(R::mul(neg_step, m), denom));
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
