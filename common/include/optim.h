// SPDX-License-Identifier: MIT
//
// optim: optimizers with PyTorch's exact update rules and defaults
// (torch.optim.SGD, Adam, AdamW; the single-tensor "foreach=False" forms),
// fused into one kernel per parameter on CUDA.
//
// An optimizer holds borrowed ct_param pointers (from ct_module_parameters)
// and its own state (momentum buffers, exp_avg, exp_avg_sq, step count) on
// each parameter's device. Create it after ct_module_to, as with PyTorch.
// A parameter whose grad is NULL is skipped by step, as in PyTorch.
// Parameters are float32 or float64; SGD also takes float16/bfloat16 ones
// (model.half()), each op rounded to them as PyTorch rounds.
#ifndef CT_OPTIM_H
#define CT_OPTIM_H

#include <stdbool.h>

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_sgd_options {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
} ct_sgd_options;

typedef struct ct_adam_options {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize;
} ct_adam_options;

ct_sgd_options ct_sgd_defaults(double lr); // momentum 0, dampening 0, weight_decay 0, nesterov false
ct_adam_options ct_adam_defaults(void);    // lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0
ct_adam_options ct_adamw_defaults(void);   // the same with weight_decay 1e-2

typedef struct ct_optimizer ct_optimizer;

// Invalid options (negative lr, nesterov without momentum or with dampening,
// betas outside [0, 1)) fail with CT_ERR_VALUE and torch's wording.
ct_optimizer *ct_optim_sgd(ct_param **params, int n, ct_sgd_options options);
ct_optimizer *ct_optim_adam(ct_param **params, int n, ct_adam_options options);
ct_optimizer *ct_optim_adamw(ct_param **params, int n, ct_adam_options options);
void ct_optimizer_free(ct_optimizer *opt);

int ct_optimizer_step(ct_optimizer *opt);
// The step a fused PyTorch optimizer takes under GradScaler
// (optimizer.step(found_inf=...)): found_inf, one float32 on the
// parameters' device, is read by the device, and when it is nonzero the
// step writes nothing (parameters, momentum/Adam state and step counts stay
// bit for bit), without the host waiting to find out. ct_grad_scaler_step
// calls it (amp.h).
int ct_optimizer_step_found_inf(ct_optimizer *opt, const ct_tensor *found_inf);
// The parameters the optimizer updates (param_groups[0]["params"]); the
// array is the optimizer's, valid until it is freed.
ct_param **ct_optimizer_params(const ct_optimizer *opt, int *n);
int ct_optimizer_zero_grad(ct_optimizer *opt, bool set_to_none);
double ct_optimizer_get_lr(const ct_optimizer *opt);
int ct_optimizer_set_lr(ct_optimizer *opt, double lr);
const char *ct_optimizer_name(const ct_optimizer *opt); // "SGD", "Adam", "AdamW"

// optimizer.state_dict()["state"], flattened to named tensors
// "<prefix>state.<i>.<key>" (i the parameter's index; keys momentum_buffer,
// or exp_avg, exp_avg_sq, max_exp_avg_sq; and step, a float32 0-d tensor;
// PyTorch's SGD keeps no step, this one does: its first step initializes the
// momentum buffer). New references (free with ct_named_tensors_free); the
// hyperparameters (param_groups) are the caller's to record.
ct_named_tensor *ct_optimizer_state_dict(ct_optimizer *opt, const char *prefix, int *n);
// optimizer.load_state_dict for that state: entries without the prefix are
// ignored; an entry naming no parameter or key, a shape or dtype that is not
// the parameter's, or a stepped parameter missing a buffer fails and leaves
// the optimizer unchanged. Tensors are copied to each parameter's device.
int ct_optimizer_load_state_dict(ct_optimizer *opt, const ct_named_tensor *entries, int n, const char *prefix);

// torch.nn.utils.clip_grad_norm_: the global L2 norm over all grads (NULL
// grads skipped); if it exceeds max_norm, every grad is scaled by
// max_norm / (norm + 1e-6). *total_norm (may be NULL) gets the norm before
// clipping.
int ct_clip_grad_norm_(ct_param **params, int n, double max_norm, double *total_norm);

#ifdef __cplusplus
}
#endif
#endif
