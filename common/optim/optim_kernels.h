// SPDX-License-Identifier: MIT
//
// optim_kernels: the fused optimizer updates and the gradient-norm pieces of
// clip_grad_norm_, on the CPU (cpu_optim.c) and on CUDA (kernels/optim.cu)
// (internal to the runtime; optim.c dispatches to them).
//
// Invariant: one call updates one parameter tensor completely, every element
// independently, in one pass over memory (one OpenMP loop, one CUDA kernel),
// doing exactly the operations of torch.optim's single-tensor code, in the
// same order, each rounded to the parameter's dtype (f32 or f64): a scalar
// hyperparameter is first rounded to that dtype, as PyTorch does when it
// multiplies a float tensor by a Python float. Products and sums are never
// fused into an FMA (CUDA uses the __f*_rn intrinsics, the CPU build does not
// contract), so the CPU and CUDA give the same bits for the same step.
//
// Pointers are element 0 of contiguous buffers of n elements on the device
// the entry is for; param, grad and the state buffers have the same dtype.
#ifndef CT_OPTIM_KERNELS_H
#define CT_OPTIM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "optim.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// torch.optim.SGD's _single_tensor_sgd, per element:
//   d = maximize ? -g : g
//   if weight_decay != 0: d = d + weight_decay * p
//   if momentum != 0:
//     buf = init_buf ? d : buf * momentum + (1 - dampening) * d
//     d = nesterov ? d + momentum * buf : buf
//   p = p + (-lr) * d
// buf may be NULL when momentum == 0.
typedef struct ct_sgd_step_args {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool init_buf; // this parameter's first step with momentum: buf := d (torch.clone(d_p))
} ct_sgd_step_args;

// torch.optim.Adam / AdamW's _single_tensor_adam(w), per element (step is
// the parameter's step count after this step's increment; the scalars below
// are computed on the host in double, as Python does):
//   g = maximize ? -grad : grad
//   AdamW: p = p * (1 - lr * weight_decay)
//   Adam:  if weight_decay != 0: g = g + weight_decay * p
//   m = m * beta1 + (1 - beta1) * g
//   v = v * beta2 + ((1 - beta2) * g) * g
//   amsgrad: vmax = maximum(vmax, v) (NaN propagates); v_hat = vmax, else v
//   denom = sqrt(v_hat) / bias_correction2_sqrt + eps
//   p = p + ((-step_size) * m) / denom
// with step_size = lr / (1 - beta1^step), bias_correction2_sqrt =
// sqrt(1 - beta2^step). max_exp_avg_sq may be NULL unless amsgrad.
typedef struct ct_adam_step_args {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
  bool decoupled; // AdamW's decoupled weight decay
  double step_size, bias_correction2_sqrt;
} ct_adam_step_args;

int ct_cpu_sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                    const ct_sgd_step_args *a);
int ct_cpu_adam_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                     void *exp_avg_sq, void *max_exp_avg_sq, const ct_adam_step_args *a);
// *out := sum of x[i]^2, accumulated in double in an order fixed by n alone
// (the same bits for any number of threads).
int ct_cpu_sum_squares(ct_dtype dt, int64_t n, const void *x, double *out);

#ifdef CT_HAVE_CUDA
// The same updates as one kernel each, on stream s.
int ct_cuda_sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                     const ct_sgd_step_args *a, ct_stream *s);
int ct_cuda_adam_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                      void *exp_avg_sq, void *max_exp_avg_sq, const ct_adam_step_args *a,
                      ct_stream *s);
// Number of doubles of workspace ct_cuda_sum_squares needs.
int64_t ct_cuda_sum_squares_workspace(void);
// *out (device memory) := sum of x[i]^2 in double: per-block partials into
// `workspace` (device, ct_cuda_sum_squares_workspace() doubles), then one
// block adds them in order. Deterministic; no host synchronization.
int ct_cuda_sum_squares(ct_dtype dt, int64_t n, const void *x, double *out, double *workspace,
                        ct_stream *s);
// One thread: total = sqrt(sum of sumsq[0..n)), coef = max_norm / (total +
// 1e-6) clamped to at most 1 (NaN stays NaN, as torch.clamp); writes
// out[0] = total, out[1] = coef (device memory).
int ct_cuda_clip_coef(int64_t n, const double *sumsq, double max_norm, double *out, ct_stream *s);
// x *= (dtype) *coef unless *coef >= 1 (device memory, read on the device).
int ct_cuda_scale_by(ct_dtype dt, int64_t n, void *x, const double *coef, ct_stream *s);
#endif

// ---- optimizer state, for tests and checkpoints (internal) ----------------------------
// The state tensor `key` of parameter i as torch names it in
// optimizer.state[p]: "momentum_buffer" (SGD), "exp_avg", "exp_avg_sq",
// "max_exp_avg_sq" (Adam/AdamW); NULL while it does not exist yet (before the
// parameter's first step) or for an unknown key. Borrowed: do not free.
ct_tensor *ct_optimizer_state_tensor(const ct_optimizer *opt, int i, const char *key);
// state[p]["step"]: how many steps parameter i has taken (0 before its first).
int64_t ct_optimizer_state_step(const ct_optimizer *opt, int i);

#ifdef __cplusplus
}
#endif
#endif
