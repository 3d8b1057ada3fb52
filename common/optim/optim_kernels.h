// SPDX-License-Identifier: MIT
//
// optim_kernels: the fused optimizer updates and the gradient-norm pieces of
// clip_grad_norm_, on the CPU (cpu_optim.c) and on CUDA (kernels/optim.cu)
// (internal to the runtime; optim.c dispatches to them). Entry `x` is
// cpu_optim.c's static `x` and kernels/optim.cu's static `cuda_x`.
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

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "hostdev.h"
#include "oplist.h"
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
// float16/bfloat16 parameters (model.half()) are updated the way PyTorch
// updates them: each torch op of the formula (the weight-decay add, the
// momentum mul_ and add_, the final add_) computes in float32 from the
// stored values and rounds its result to the parameter's dtype.
typedef struct cti_sgd_step_args {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool init_buf; // this parameter's first step with momentum: buf := d (torch.clone(d_p))
  // GradScaler's skip (ct_optimizer_step_found_inf; both NULL for a plain
  // step), read where the loop runs: when *found_inf != 0 the entry writes
  // nothing; amp_state is the parameter's step count in that memory (see
  // amp_prologue), and init_buf is then amp_state[0] == 1.
  const float *found_inf;
  const double *amp_state;
} cti_sgd_step_args;

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
typedef struct cti_adam_step_args {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
  bool decoupled; // AdamW's decoupled weight decay
  double step_size, bias_correction2_sqrt;
  // As for SGD; with amp_state, amp_state[1] and amp_state[2] replace
  // step_size and bias_correction2_sqrt.
  const float *found_inf;
  const double *amp_state;
} cti_adam_step_args;

// The step count GradScaler's steps keep on the device, so that a skipped
// step needs no host wait (PyTorch's fused Adam keeps state["step"] as a
// device tensor for the same reason): state = [step, step_size,
// bias_correction2_sqrt]. Unless found_inf != 0: step += 1 and, for Adam,
// step_size = lr / (1 - beta1^step), bias_correction2_sqrt =
// sqrt(1 - beta2^step), in double as Python computes them. One definition
// for both backends (a single thread runs it on CUDA).
static inline CTI_HD void cti_amp_prologue_rule(float found_inf, double *state, bool adam,
                                                      double lr, double beta1, double beta2) {
  if (found_inf != 0.0f) return;
  state[0] += 1.0;
  if (adam) {
    state[1] = lr / (1.0 - pow(beta1, state[0]));
    state[2] = sqrt(1.0 - pow(beta2, state[0]));
  }
}

// The family's table: one signature on both devices. The CPU entries run at
// once and ignore `s`; the CUDA entries queue on `s` and never wait. A
// backend reaches it as cti_backend_for(op, dev)->optim. Scalars the entries
// exchange (sums of squares, the clip coefficient) live in memory of the
// entry's device, so clip_grad_norm_ on one device never waits for it.
//  sgd_step, adam_step: the updates above as one loop (one kernel) each.
//  sum_squares_workspace: number of doubles of workspace sum_squares needs
//    (0 on the CPU).
//  sum_squares: *out := sum of x[i]^2 in double, in an order fixed by n
//    alone (the same bits for any number of threads; CUDA: per-block
//    partials into `workspace`, then one block adds them in order). out and
//    workspace are memory of the entry's device.
//  clip_coef: total = sqrt(sum of sumsq[0..n)), coef = max_norm / (total +
//    1e-6) clamped to at most 1 (NaN stays NaN, as torch.clamp); writes
//    out[0] = total, out[1] = coef (the entry's device).
//  scale_by: x *= (dtype) *coef unless *coef >= 1 (coef read where the loop
//    runs).
//  amp_prologue: cti_amp_prologue_rule on the entry's device: found_inf (one
//    float) and state (three doubles) are memory of that device.
#define CTI_OPTIM_OPS(X)                                                                             \
  X(optim, sgd_step, OP, int, "sgd_step", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),           \
    ARG(void *, param), ARG(const void *, grad), ARG(void *, buf), ARG_COPY(cti_sgd_step_args, a))    \
  X(optim, adam_step, OP, int, "adam_step", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),         \
    ARG(void *, param), ARG(const void *, grad), ARG(void *, exp_avg), ARG(void *, exp_avg_sq),       \
    ARG(void *, max_exp_avg_sq), ARG_COPY(cti_adam_step_args, a))                                    \
  X(optim, sum_squares_workspace, QUERY, int64_t, "", NULL, void)                                    \
  X(optim, sum_squares, OP, int, "sum_squares", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),     \
    ARG(const void *, x), ARG(double *, out), ARG(double *, workspace))                              \
  X(optim, clip_coef, OP, int, "clip_coef", CTI_SH_1(n), ARG(int64_t, n), ARG(const double *, sumsq), \
    ARG(double, max_norm), ARG(double *, out))                                                       \
  X(optim, scale_by, OP, int, "scale_by", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),           \
    ARG(void *, x), ARG(const double *, coef))                                                       \
  X(optim, amp_prologue, OP, int, "amp_step_count", CTI_SH_CONST("[]"), ARG(const float *, found_inf), \
    ARG(double *, state), ARG(bool, adam), ARG(double, lr), ARG(double, beta1), ARG(double, beta2))
typedef struct cti_optim_kernels {
  CTI_OPTIM_OPS(CTI_OP_FIELD)
} cti_optim_kernels;

extern const cti_optim_kernels cti_cpu_optim_kernels;  // cpu_optim.c
extern const cti_optim_kernels cti_cuda_optim_kernels; // kernels/optim.cu (CUDA builds only)

// ---- optimizer state, for tests and checkpoints (internal) ----------------------------
// The state tensor `key` of parameter i as torch names it in
// optimizer.state[p]: "momentum_buffer" (SGD), "exp_avg", "exp_avg_sq",
// "max_exp_avg_sq" (Adam/AdamW); NULL while it does not exist yet (before the
// parameter's first step) or for an unknown key. Borrowed: do not free.
ct_tensor *cti_optimizer_state_tensor(const ct_optimizer *opt, int i, const char *key);
// state[p]["step"]: how many steps parameter i has taken (0 before its first).
int64_t cti_optimizer_state_step(const ct_optimizer *opt, int i);

#ifdef __cplusplus
}
#endif
#endif
