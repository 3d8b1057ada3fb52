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
// nn.ModuleDict / nn.ModuleList: containers that name their modules (the
// given names; "0", "1", ...) for state_dict keys ("transformer.wte.weight")
// and print(model), and have no forward (it fails: call the modules, found
// with ct_module_get_submodule). Take ownership of the modules, also on
// failure. Names: non-empty, no dots, unique, under 32 bytes.
ct_module *ct_nn_module_dict(int n, const char *const *names, ct_module **modules);
ct_module *ct_nn_module_list(int n, ct_module **modules);
// model.get_submodule("transformer.h.0.attn"): the module at a dotted path
// of child names ("" is m itself), or NULL naming the missing part.
ct_module *ct_module_get_submodule(ct_module *m, const char *target);

// ---- transformer layers (GPT-2's: chapter 14) -------------------------------------------------
// Their loops are the transformer kernel family (common/nn/transformer_kernels.h),
// on the CPU and on CUDA, float32 and float64 (GELU and Embedding also
// float16/bfloat16); every sum's order is fixed by the shape, so a run
// repeats its bits on either device.
//
// torch.nn.Embedding(num_embeddings, embedding_dim): indices (*) int64 (or
// int32) -> (*, embedding_dim), rows of weight (V, C) ~ N(0, 1). An index
// outside [0, V) is CT_ERR_VALUE "index out of range in self" (on CUDA at the
// next call that waits for the device, as a device-side assert). The indices
// have no gradient: run ct_module_backward_params (ct_module_backward fails),
// which adds dweight[r] += sum of dy rows whose index is r, deterministically
// (a thread owns each row and adds in index order; no atomics).
ct_module *ct_nn_embedding(int64_t num_embeddings, int64_t embedding_dim);
// torch.nn.LayerNorm(normalized_shape, eps) over the last dim (elementwise
// affine): x (*, C) -> (x - mean) / sqrt(var + eps) * weight + bias, biased
// variance; weight 1, bias 0. Training keeps x, mean and rstd for backward
// (dx, dweight, dbias). torch's default eps is 1e-5.
ct_module *ct_nn_layernorm(int64_t normalized_shape, double eps);
// torch.nn.GELU(approximate="tanh") when tanh_approx (GPT-2's
// x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), else approximate="none",
// the exact x/2 (1 + erf(x / sqrt 2)).
ct_module *ct_nn_gelu(bool tanh_approx);
// torch.softmax(x, dim) and torch.nn.Softmax(dim), over the last dim only
// (dim -1 or ndim-1): exp(x - max) / sum exp(x - max) per row, so nothing
// overflows. The module keeps y for dx = y (g - sum y g).
ct_tensor *ct_softmax(const ct_tensor *x, int dim);
ct_module *ct_nn_softmax(int dim);
// GPT-2's causal self-attention (nanoGPT's CausalSelfAttention): x (B, T, C)
// -> c_proj(attention(c_attn(x))) with c_attn = Linear(C, 3C, bias) split into
// q, k, v of n_head heads, c_proj = Linear(C, C, bias), and between them
// F.scaled_dot_product_attention(q, k, v, is_causal=True) (scale
// 1/sqrt(C/n_head), no dropout): S = q k^T as one batched GEMM, a softmax
// that applies scale and mask, y = P v. state_dict: c_attn.weight,
// c_attn.bias, c_proj.weight, c_proj.bias. Backward runs through c_proj,
// both matrix products, the masked softmax and c_attn.
ct_module *ct_nn_causal_self_attention(int64_t n_embd, int64_t n_head, bool bias);

// Weight tying, as GPT's `transformer.wte.weight = lm_head.weight`: dst's
// parameter dst_name becomes src's parameter src_name (same shape, dtype and
// device), so forward reads one tensor and both modules' backward passes add
// into its one grad. dst must be a Linear or an Embedding. After it:
//  - ct_module_parameters lists the shared parameter once, under src's name
//    (the optimizer steps it once);
//  - ct_module_state and ct_module_state_dict list both names, as
//    model.state_dict() does, each entry holding the same tensor (the same
//    handle), so a saved checkpoint carries both keys (the data twice);
//  - ct_module_load_state copies into the one tensor under either name, and
//    a checkpoint that holds only one of the tied names (safetensors'
//    save_model keeps one) loads with strict=true: the other is not missing;
//  - ct_module_to moves the tensor once; ct_module_replicate refuses a model
//    with ties. Both modules must stay in one tree (freed together).
int ct_module_tie(ct_module *dst, const char *dst_name, ct_module *src, const char *src_name);

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
// Frees an array of n named tensors and drops each tensor's reference (NULL: nothing).
void ct_named_tensors_free(ct_named_tensor *entries, int n);
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
// F.cross_entropy(logits.view(-1, V), target.view(-1), ignore_index=...) for
// a language model's logits (*, V) against target (*) int64, mean over the
// rows whose target is not ignore_index (PyTorch's default is -100); their
// gradient rows are 0. One fused pass per row gives its loss and, when
// grad is not NULL, dlogits = (softmax - onehot) / count, *grad of logits'
// shape. All rows ignored: loss NaN, as torch. A target that is neither
// ignore_index nor in [0, V) is CT_ERR_VALUE "Target 70 is out of bounds." (on
// CUDA at the next call that waits for the device). float32 and float64.
ct_tensor *ct_cross_entropy(const ct_tensor *logits, const ct_tensor *target, int64_t ignore_index,
                            ct_tensor **grad);

#ifdef __cplusplus
}
#endif
#endif
