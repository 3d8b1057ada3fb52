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

// A new module of `ops` on the CPU, in training mode, owning `state`.
ct_module *cti_module_new(const cti_module_ops *ops, void *state);
// Registers a named tensor (takes the reference `value`); returns it or NULL.
ct_param *cti_module_register(ct_module *m, const char *name, ct_tensor *value, bool is_buffer);
ct_param *cti_module_find(ct_module *m, const char *name); // own tensors only
// p->grad += g, creating p->grad (a copy of g) when NULL, as autograd
// accumulates into .grad.
int cti_param_accumulate_grad(ct_param *p, const ct_tensor *g);
// Fills t (CPU) with U(-bound, bound) from the CPU generator: torch.nn's
// kaiming_uniform_(a=sqrt(5)) for weights and the bias rule both reduce to
// bound = 1/sqrt(fan_in).
int cti_nn_init_uniform(ct_tensor *t, double bound);

#endif
