// SPDX-License-Identifier: MIT
//
// nn: layers with explicit forward and backward, the work autograd does for a
// PyTorch user, done layer by layer.
//
// Invariants:
//  - a module owns its parameters and buffers; each has PyTorch's state_dict
//    name ("weight", "bias", "running_mean"; inside a Sequential "0.weight",
//    "3.bias" ...), so checkpoints load into a torch.nn model of the same
//    structure and back;
//  - ct_module_forward in training mode keeps what backward needs (inputs,
//    masks, argmax indices, batch statistics); ct_module_backward takes
//    dL/d(output) of the LAST forward, ADDS dL/d(param) into each parameter's
//    grad (creating it on first use, as autograd accumulates) and returns
//    dL/d(input). In eval mode forward keeps nothing (like torch.no_grad());
//  - every parameter, buffer and saved tensor lives on the module's device;
//    ct_module_to moves them all (model.to(device));
//  - initialization follows torch.nn's defaults, drawn from the CPU Philox
//    generator (ct_manual_seed), so the same seed gives the same model on
//    any device (the values are not torch's own numbers: torch uses another
//    generator).
#ifndef CT_NN_H
#define CT_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// A named tensor of a module: a parameter (with a gradient) or a buffer.
typedef struct ct_param {
  char name[96];    // full dotted state_dict name, e.g. "0.weight"
  ct_tensor *value; // replaced (not resized) by ct_module_to and loads
  ct_tensor *grad;  // NULL until a backward writes it, or after zero_grad(set_to_none)
  bool is_buffer;   // running_mean, running_var, num_batches_tracked
} ct_param;

typedef struct ct_module ct_module; // opaque

// ---- layers (created on the CPU, in training mode) --------------------------------------
// y = x W^T + b; x (N, in) -> (N, out). W (out, in), b (out), both
// U(-1/sqrt(in), 1/sqrt(in)) as torch.nn.Linear.
ct_module *ct_nn_linear(int64_t in_features, int64_t out_features, bool bias);
// x (N, C_in, H, W) -> (N, C_out, H_out, W_out); square kernel, stride,
// zero padding; im2col + GEMM. W (C_out, C_in, k, k), b (C_out); torch init.
ct_module *ct_nn_conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, int stride,
                        int padding, bool bias);
// Max over k x k windows; stride 0 means stride = kernel_size (torch default).
ct_module *ct_nn_maxpool2d(int kernel_size, int stride);
ct_module *ct_nn_relu(void);
// (N, d1, d2, ...) -> (N, d1*d2*...), like nn.Flatten() (start_dim 1).
ct_module *ct_nn_flatten(void);
// Zeroes each element with probability p in training and scales the rest by
// 1/(1-p); identity in eval. Masks come from the device's Philox generator.
ct_module *ct_nn_dropout(double p);
// Per-channel batch normalization over (N, H, W) of x (N, C, H, W):
// training uses batch statistics (biased variance) and updates running ones
// with `momentum` (unbiased variance), eval uses the running ones. weight 1,
// bias 0, running_mean 0, running_var 1, num_batches_tracked 0 (int64).
ct_module *ct_nn_batchnorm2d(int64_t num_features, double eps, double momentum);
// torch.nn.AdaptiveAvgPool2d(1): x (N, C, H, W) -> its mean over H, W as
// (N, C, 1, 1) (follow it with Flatten for x.mean(dim=[2, 3])). Only output
// size 1 is implemented.
ct_module *ct_nn_adaptive_avgpool2d(int output_size);
// Takes ownership of the n modules; names them "0", "1", ... as nn.Sequential.
ct_module *ct_nn_sequential(int n, ct_module **modules);

void ct_module_free(ct_module *m);

// ---- running --------------------------------------------------------------------------------
ct_tensor *ct_module_forward(ct_module *m, const ct_tensor *x);
ct_tensor *ct_module_backward(ct_module *m, const ct_tensor *grad_output);
// Backward when the model's input needs no gradient, which is what
// loss.backward() does for a batch of data (x.requires_grad is False):
// accumulates every parameter's grad exactly as ct_module_backward does and
// computes no dL/d(input). Inside a Sequential only the first layer skips
// its dL/dx: a GEMM for a Linear, a GEMM and a col2im for a Conv2d.
int ct_module_backward_params(ct_module *m, const ct_tensor *grad_output);
void ct_module_train(ct_module *m, bool mode); // ct_module_train(m, false) is model.eval()
bool ct_module_is_training(const ct_module *m);
int ct_module_to(ct_module *m, ct_device device);
// model.to(dtype), model.half() (CT_F16), model.bfloat16(), model.float():
// every floating parameter and buffer, and every grad, converted to dtype
// (integer buffers such as num_batches_tracked stay). dtype must be
// floating. Call it between iterations, not between a forward and its
// backward (the saved activations keep their dtype).
int ct_module_to_dtype(ct_module *m, ct_dtype dtype);
ct_device ct_module_device(const ct_module *m);
// Sets every parameter's grad to zero (set_to_none false) or frees it (true).
int ct_module_zero_grad(ct_module *m, bool set_to_none);

// A copy of m (its whole tree) on `device`: the same kinds and configuration,
// the same state_dict names, its own copies of the parameters and buffers,
// no gradients and nothing saved from a forward, in m's training mode, with
// m's forward hooks. torch.nn.parallel.replicate makes these for
// DataParallel.
ct_module *ct_module_replicate(const ct_module *m, ct_device device);

// A forward hook, as register_forward_hook: called with the module, its input
// and its output after each ct_module_forward of this module (not of its
// children), on the thread that ran the forward. One hook per module; NULL
// removes it. ct_module_replicate copies it (with the same ctx).
typedef void (*ct_forward_hook)(ct_module *m, const ct_tensor *input, const ct_tensor *output,
                                void *ctx);
void ct_module_register_forward_hook(ct_module *m, ct_forward_hook hook, void *ctx);

// ---- parameters and state ---------------------------------------------------------------------
// The module's parameters (not buffers), in registration order, as
// model.parameters(); the array is the module's (do not free), valid until
// the module is freed. *n receives the count.
ct_param **ct_module_parameters(ct_module *m, int *n);
// Parameters and buffers in state_dict order (per module: its parameters,
// then its buffers, then its children's), as model.state_dict().
ct_param **ct_module_state(ct_module *m, int *n);
int64_t ct_module_num_elements(ct_module *m); // sum of parameter numels
// Copies each named tensor into the module's tensor of the same name (shape
// must match; dtype converted; device kept). strict: every state name must be
// present and no extra names given, else CT_ERR_VALUE naming the keys, as
// load_state_dict's "Missing key(s)" / "Unexpected key(s)".
typedef struct ct_named_tensor {
  char name[96];
  ct_tensor *tensor;
} ct_named_tensor;
int ct_module_load_state(ct_module *m, const ct_named_tensor *entries, int n, bool strict);
// model.state_dict() as named tensors, each name prefixed with `prefix` (""
// for none; "module." is what a DataParallel or DDP wrapper's state_dict
// adds). The tensors are new references; free with ct_named_tensors_free.
ct_named_tensor *ct_module_state_dict(ct_module *m, const char *prefix, int *n);
// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present: strips
// `prefix` from every name that starts with it (in place), so a wrapper's
// checkpoint loads into the bare model. Returns the number of names changed.
int ct_consume_prefix_in_state_dict_if_present(ct_named_tensor *entries, int n, const char *prefix);
// print(model): "Sequential(\n  (0): Linear(in_features=784, out_features=256, bias=True)\n ...)";
// caller free()s.
char *ct_module_str(const ct_module *m);

// ---- losses (mean reduction) -------------------------------------------------------------------
// Each returns the 0-d loss (dtype of pred), and, when grad is not NULL, the
// gradient of the loss with respect to pred/logits in *grad (new tensor).
// MSE: mean((pred - target)^2); pred and target of the same shape.
ct_tensor *ct_mse_loss(const ct_tensor *pred, const ct_tensor *target, ct_tensor **grad);
// Cross-entropy of logits (N, C) against class indices target (N,) int64,
// fused log-softmax + NLL: mean_i(logsumexp(x_i) - x_i[t_i]). The gradient is
// (softmax(x) - onehot(t)) / N. A target outside [0, C) is CT_ERR_VALUE: at
// once on the CPU; on CUDA, as PyTorch's device-side assert, at the next
// call that waits for the device (ct_item, ct_stream_synchronize, ...; see
// async_error.h), the loss being NaN meanwhile.
ct_tensor *ct_cross_entropy_loss(const ct_tensor *logits, const ct_tensor *target, ct_tensor **grad);

#ifdef __cplusplus
}
#endif
#endif
