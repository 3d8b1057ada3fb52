// SPDX-License-Identifier: MIT
//
// nn_impl: how a module kind plugs into nn.c (internal to the runtime).
//
// A module is a kind (cti_module_ops: forward, backward, ...) plus its own
// named tensors (parameters and buffers, in registration order) plus children
// (Sequential). nn.c owns the generic parts: the tree, dotted names,
// parameters()/state_dict order, .to(device), train/eval, zero_grad, loading
// and printing. A kind's file (nn_linear.c, nn_conv.c, ...) owns its math and
// the tensors it saves between forward and backward, in `state`.
#ifndef CT_NN_IMPL_H
#define CT_NN_IMPL_H

#include <stddef.h>

#include "nn.h"

#define CT_MODULE_MAX_TENSORS 8

typedef struct cti_module_ops {
  const char *kind; // "Linear", as print(model) shows it
  // Enters with x on the module's device; in training mode saves what
  // backward needs in m->state (replacing the last forward's).
  ct_tensor *(*forward)(ct_module *m, const ct_tensor *x);
  // Enters with dL/dy of the last training forward; accumulates parameter
  // grads with cti_param_accumulate_grad; returns dL/dx.
  ct_tensor *(*backward)(ct_module *m, const ct_tensor *grad_output);
  // Optional: backward for a module whose input needs no gradient (the first
  // layer of a model): accumulates the parameter grads and skips dL/dx. When
  // NULL, nn.c runs backward and drops dL/dx (a module without parameters
  // does nothing).
  int (*backward_params)(ct_module *m, const ct_tensor *grad_output);
  // Writes the arguments print(model) shows, e.g.
  // "in_features=784, out_features=256, bias=True".
  void (*describe)(const ct_module *m, char *buf, size_t len);
  // Moves tensors kept in m->state (not the named ones: nn.c moves those);
  // NULL when state holds only configuration. Saved activations may simply
  // be dropped instead.
  int (*state_to)(ct_module *m, ct_device device);
  void (*state_free)(ct_module *m); // frees m->state's contents and m->state
  // A new state holding m's configuration and none of its saved tensors,
  // for ct_module_replicate; NULL (with an error) when out of memory. Kinds
  // whose state is NULL need none.
  void *(*state_clone)(const ct_module *m);
} cti_module_ops;

struct ct_module {
  const cti_module_ops *ops;
  char name[32];        // the name in its parent ("0"); "" at the root
  ct_device device;
  bool training;
  ct_param own[CT_MODULE_MAX_TENSORS]; // parameters and buffers, in registration order
  int n_own;
  // tied[i] != NULL: own[i] is another module's parameter under this
  // module's name (ct_module_tie): cti_module_find returns tied[i], own[i]
  // keeps only the name and a reference to tied[i]->value (for the
  // state_dict), and parameters() leaves own[i] out.
  ct_param *tied[CT_MODULE_MAX_TENSORS];
  ct_module **children;
  int n_children;
  void *state;          // the kind's configuration and saved tensors
  // Flattened views built by ct_module_parameters / ct_module_state.
  ct_param **flat_params, **flat_state;
  int n_flat_params, n_flat_state;
  ct_forward_hook hook; // called after each forward, or NULL
  void *hook_ctx;
  // Called after this module's backward has accumulated its own parameters'
  // grads (DistributedDataParallel's "gradient ready" signal), or NULL.
  void (*grad_hook)(ct_module *m, void *ctx);
  void *grad_ctx;
};
// Sets the gradient-ready hook on m and every module below it (NULL clears).
void cti_module_set_grad_hook(ct_module *m, void (*fn)(ct_module *m, void *ctx), void *ctx);
// calloc'ed copy of `size` bytes of src for a kind's state_clone; the kind
// then clears the saved-tensor fields. NULL (with an error) when out of memory.
void *cti_state_dup(const void *src, size_t size);

// Makes the n modules m's children under `names` (NULL: "0", "1", ... as
// nn.Sequential), names the whole tree's tensors and moves m to the
// children's device. All or nothing: on failure nothing is adopted and the
// caller still owns the children. Names must be non-empty, without dots,
// unique and shorter than 32 bytes.
int cti_module_adopt(ct_module *m, int n, ct_module **children, const char *const *names);

// A new module of `ops` on the CPU, in training mode, owning `state`.
ct_module *cti_module_new(const cti_module_ops *ops, void *state);
// Registers a named tensor (takes the reference `value`); returns it or NULL.
ct_param *cti_module_register(ct_module *m, const char *name, ct_tensor *value, bool is_buffer);
// An own tensor by local name; for a tied one, the parameter it is tied to
// (so a kind reads and accumulates into the shared parameter).
ct_param *cti_module_find(ct_module *m, const char *name);
// p->grad += g, creating p->grad (a copy of g) when NULL, as autograd
// accumulates into .grad.
int cti_param_accumulate_grad(ct_param *p, const ct_tensor *g);
// Fails unless grad_output g has shape `want` and dtype dt, naming `kind`
// ("LayerNorm backward: grad_output of shape (2, 3), expected (2, 4)").
int cti_nn_check_grad(const char *kind, const ct_tensor *g, ct_shape want, ct_dtype dt); // nn_act.c
// The same shape check for a module whose output may differ in dtype from
// what its consumer's backward hands back (autocast: a bfloat16 branch summed
// into a float32 residual gets a float32 gradient): g cast to the output's
// dtype dt, as autograd's engine casts a gradient to its tensor's dtype (a
// new reference either way; NULL with the error for a bad shape or a
// non-floating g). nn_act.c
ct_tensor *cti_nn_grad_as(const char *kind, const ct_tensor *g, ct_shape want, ct_dtype dt);
// The attention probabilities a CausalSelfAttention's last training forward
// saved (B*nh, T, T), or NULL: for tests of the dtypes autocast chose.
const ct_tensor *cti_attention_probs(const ct_module *m); // nn_attention.c
// Replaces *t (NULL is fine) by its copy on `device`, for a kind's state_to.
int cti_nn_move(ct_tensor **t, ct_device device); // nn.c
// Python's repr of a float, as torch prints eps and momentum: "1e-05",
// "0.1", "1.0".
void cti_py_float(double v, char *buf, size_t len); // nn_batchnorm.c
// Fills t (CPU) with U(-bound, bound) from the CPU generator: torch.nn's
// kaiming_uniform_(a=sqrt(5)) for weights and the bias rule both reduce to
// bound = 1/sqrt(fan_in).
int cti_nn_init_uniform(ct_tensor *t, double bound);

#endif
