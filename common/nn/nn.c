// SPDX-License-Identifier: MIT
//
// nn: the generic half of every module (nn_impl.h): the tree, names,
// parameters()/state_dict order, .to(device), train/eval, zero_grad,
// load_state_dict, print(model), and Sequential.
//
// Names: a module's own tensors carry their full state_dict name in
// ct_param.name ("weight" at the root, "0.weight" inside a Sequential,
// "2.0.weight" two levels down). A tensor's own (local) name is the part
// after the last dot: kinds register names without dots. When
// ct_nn_sequential adopts modules it rewrites the names of the whole new
// tree from the root down (path of child names joined by dots + local name),
// so nesting Sequentials gives torch's keys. The ct_param structs are shared
// by the whole tree, so a child asked for its parameters lists them under
// their names in the tree it belongs to.
//
// Order: parameters() is each module's own parameters in registration order,
// then its children's, depth first (model.parameters()); the state is each
// module's parameters, then its buffers, then its children's
// (model.state_dict()). Both flat arrays are refilled on each call (in
// place: an array handed out earlier stays valid); they point at the
// ct_param structs themselves, so they always see the current tensors
// (replaced by ct_module_to).
//
// Ownership: cti_module_register takes the caller's reference to `value`,
// also when it fails (the tensor is then freed), so a kind's constructor can
// hand over a tensor and only check the result.
#include "nn.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "observe.h"
#include "strbuf.h"

// ---- names ----------------------------------------------------------------------------------
static const char *local_name(const char *full) {
  const char *dot = strrchr(full, '.');
  return dot ? dot + 1 : full;
}

// Sets the names of m's tensors and of its subtree's to prefix + path.
static int set_paths(ct_module *m, const char *prefix) {
  for (int i = 0; i < m->n_own; ++i) {
    char name[sizeof m->own[i].name];
    int w = snprintf(name, sizeof name, "%s%s", prefix, local_name(m->own[i].name));
    if (w < 0 || (size_t)w >= sizeof name)
      return ct_fail(CT_ERR_VALUE, "%s: the state_dict name \"%s%s\" is longer than %zu characters",
                     m->ops->kind, prefix, local_name(m->own[i].name), sizeof name - 1);
    memcpy(m->own[i].name, name, sizeof name);
  }
  for (int c = 0; c < m->n_children; ++c) {
    char p[sizeof m->own[0].name];
    int w = snprintf(p, sizeof p, "%s%s.", prefix, m->children[c]->name);
    if (w < 0 || (size_t)w >= sizeof p)
      return ct_fail(CT_ERR_VALUE, "%s: the module path \"%s%s\" is too long", m->ops->kind, prefix,
                     m->children[c]->name);
    int rc = set_paths(m->children[c], p);
    if (rc) return rc;
  }
  return CT_OK;
}

// ---- creation and registration --------------------------------------------------------------
ct_module *cti_module_new(const cti_module_ops *ops, void *state) {
  if (!ops || !ops->kind || !ops->forward || !ops->backward) {
    ct_fail(CT_ERR_VALUE, "cti_module_new: ops must have a kind, forward and backward");
    return NULL;
  }
  ct_module *m = calloc(1, sizeof *m);
  if (!m) {
    ct_fail(CT_ERR_OOM, "cti_module_new: out of host memory");
    return NULL;
  }
  m->ops = ops;
  m->state = state;
  m->device = ct_device_cpu();
  m->training = true;
  return m;
}

ct_param *cti_module_register(ct_module *m, const char *name, ct_tensor *value, bool is_buffer) {
  const char *why = NULL;
  if (!m || !name || !value) why = "NULL module, name or tensor";
  else if (!*name || strchr(name, '.')) why = "a name must be non-empty and without dots";
  else if (strlen(name) >= sizeof m->own[0].name) why = "name too long";
  else if (m->n_own >= CT_MODULE_MAX_TENSORS) why = "too many tensors in one module";
  else if (cti_module_find(m, name)) why = "a tensor of that name is already registered";
  else if (!ct_device_eq(ct_device_of(value), m->device)) why = "the tensor is not on the module's device";
  if (why) {
    ct_fail(CT_ERR_VALUE, "cti_module_register: cannot register \"%s\" in %s: %s", name ? name : "(null)",
            m ? m->ops->kind : "(null)", why);
    ct_free(value);
    return NULL;
  }
  ct_param *p = &m->own[m->n_own++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->value = value;
  p->is_buffer = is_buffer;
  return p;
}

ct_param *cti_module_find(ct_module *m, const char *name) {
  if (!m || !name) return NULL;
  for (int i = 0; i < m->n_own; ++i)
    if (!strcmp(local_name(m->own[i].name), name)) return m->tied[i] ? m->tied[i] : &m->own[i];
  return NULL;
}

int cti_param_accumulate_grad(ct_param *p, const ct_tensor *g) {
  if (!p || !g || !p->value) return ct_fail(CT_ERR_VALUE, "cti_param_accumulate_grad: NULL parameter or gradient");
  ct_shape ps = ct_shape_of(p->value), gs = ct_shape_of(g);
  if (!ct_shape_eq(ps, gs)) {
    char a[96], b[96];
    return ct_fail(CT_ERR_SHAPE, "cti_param_accumulate_grad: gradient of shape %s for %s of shape %s",
                   ct_shape_str(gs, a, sizeof a), p->name, ct_shape_str(ps, b, sizeof b));
  }
  ct_device dev = ct_device_of(p->value);
  if (!ct_device_eq(ct_device_of(g), dev)) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE, "cti_param_accumulate_grad: gradient on %s for %s on %s",
                   ct_device_str(ct_device_of(g), a), p->name, ct_device_str(dev, b));
  }
  ct_dtype dt = ct_dtype_of(p->value);
  if (!p->grad) { // the first gradient: a copy of its own (g may be reused by the caller)
    ct_tensor *c = ct_dtype_of(g) == dt ? ct_clone(g) : ct_to(g, dev, dt, false);
    if (!c) return ct_last_status();
    p->grad = c;
    return CT_OK;
  }
  if (ct_dtype_of(g) == ct_dtype_of(p->grad)) return ct_binary_out(CT_OP_ADD, p->grad, p->grad, g);
  ct_tensor *c = ct_to(g, dev, ct_dtype_of(p->grad), false);
  if (!c) return ct_last_status();
  int rc = ct_binary_out(CT_OP_ADD, p->grad, p->grad, c);
  ct_free(c);
  return rc;
}

int cti_nn_init_uniform(ct_tensor *t, double bound) {
  if (!t) return ct_fail(CT_ERR_VALUE, "cti_nn_init_uniform: NULL tensor");
  if (!(bound >= 0) || isinf(bound))
    return ct_fail(CT_ERR_VALUE, "cti_nn_init_uniform: bound must be finite and >= 0, got %g", bound);
  if (!ct_dtype_is_floating(ct_dtype_of(t)))
    return ct_fail(CT_ERR_DTYPE, "cti_nn_init_uniform: expected a floating tensor, got %s",
                   ct_dtype_name(ct_dtype_of(t)));
  // w = (2u - 1) * bound with u uniform [0, 1) from the CPU generator, in
  // float64 (2u - 1 is exact), rounded once into t's dtype.
  ct_tensor *u = ct_rand(ct_shape_of(t), CT_F64, ct_device_cpu());
  if (!u) return ct_last_status();
  int rc = ct_binary_scalar_out(CT_OP_MUL, u, u, 2.0);
  if (!rc) rc = ct_binary_scalar_out(CT_OP_SUB, u, u, 1.0);
  if (!rc) rc = ct_binary_scalar_out(CT_OP_MUL, u, u, bound);
  if (!rc) rc = ct_copy_(t, u, false);
  ct_free(u);
  return rc;
}

// ---- Sequential --------------------------------------------------------------------------------
static ct_tensor *seq_forward(ct_module *m, const ct_tensor *x) {
  ct_tensor *cur = ct_retain((ct_tensor *)x);
  for (int i = 0; i < m->n_children && cur; ++i) {
    ct_tensor *next = ct_module_forward(m->children[i], cur);
    ct_free(cur);
    cur = next;
  }
  return cur;
}

static ct_tensor *seq_backward(ct_module *m, const ct_tensor *g) {
  ct_tensor *cur = ct_retain((ct_tensor *)g);
  for (int i = m->n_children - 1; i >= 0 && cur; --i) {
    ct_tensor *next = ct_module_backward(m->children[i], cur);
    ct_free(cur);
    cur = next;
  }
  return cur;
}

// Every layer but the first passes dL/dx down; the first needs none.
static int seq_backward_params(ct_module *m, const ct_tensor *g) {
  ct_tensor *cur = ct_retain((ct_tensor *)g);
  for (int i = m->n_children - 1; i >= 1 && cur; --i) {
    ct_tensor *next = ct_module_backward(m->children[i], cur);
    ct_free(cur);
    cur = next;
  }
  if (!cur) return ct_last_status();
  int rc = m->n_children > 0 ? ct_module_backward_params(m->children[0], cur) : CT_OK;
  ct_free(cur);
  return rc;
}

static const cti_module_ops sequential_ops = {.kind = "Sequential",
                                             .forward = seq_forward,
                                             .backward = seq_backward,
                                             .backward_params = seq_backward_params};

// Why the names cannot name children, or NULL.
static const char *bad_child_names(int n, const char *const *names) {
  for (int i = 0; names && i < n; ++i) {
    if (!names[i] || !*names[i] || strchr(names[i], '.')) return "a child's name must be non-empty and without dots";
    if (strlen(names[i]) >= sizeof ((ct_module *)0)->name) return "a child's name is 32 bytes or longer";
    for (int k = 0; k < i; ++k)
      if (!strcmp(names[k], names[i])) return "two children have the same name";
  }
  return NULL;
}

int cti_module_adopt(ct_module *m, int n, ct_module **children, const char *const *names) {
  const char *why = NULL;
  if (!m || n < 0 || (n > 0 && !children)) why = "bad module list";
  else if (m->n_children) why = "the module already has children";
  for (int i = 0; i < n && !why; ++i)
    if (!children[i]) why = "a NULL module (did its constructor fail?)";
    else if (!ct_device_eq(children[i]->device, children[0]->device)) why = "modules on different devices";
  if (!why) why = bad_child_names(n, names);
  if (why) return ct_fail(CT_ERR_VALUE, "%s: %s", m ? m->ops->kind : "cti_module_adopt", why);
  if (n > 0 && !(m->children = calloc((size_t)n, sizeof *m->children)))
    return ct_fail(CT_ERR_OOM, "%s: out of host memory", m->ops->kind);
  for (int i = 0; i < n; ++i) {
    m->children[i] = children[i];
    if (names) snprintf(children[i]->name, sizeof children[i]->name, "%s", names[i]);
    else snprintf(children[i]->name, sizeof children[i]->name, "%d", i);
  }
  m->n_children = n;
  if (n > 0) m->device = children[0]->device;
  int rc = set_paths(m, "");
  if (rc) { // give the children back unadopted
    free(m->children);
    m->children = NULL;
    m->n_children = 0;
  }
  return rc;
}

// A new container of `ops` owning the n modules, or NULL (the modules freed).
static ct_module *container(const cti_module_ops *ops, int n, ct_module **modules, const char *const *names) {
  ct_module *m = cti_module_new(ops, NULL);
  if (m && cti_module_adopt(m, n, modules, names) != CT_OK) {
    free(m);
    m = NULL;
  }
  if (!m)
    for (int i = 0; modules && i < n; ++i) ct_module_free(modules[i]);
  return m;
}

ct_module *ct_nn_sequential(int n, ct_module **modules) { return container(&sequential_ops, n, modules, NULL); }

// ---- ModuleDict, ModuleList: containers without a forward ---------------------------------------------
static ct_tensor *no_forward(ct_module *m, const ct_tensor *x) {
  (void)x;
  ct_fail(CT_ERR_VALUE, "%s: a container has no forward; call its modules (ct_module_get_submodule)",
          m->ops->kind);
  return NULL;
}

static const cti_module_ops module_dict_ops = {.kind = "ModuleDict", .forward = no_forward, .backward = no_forward};
static const cti_module_ops module_list_ops = {.kind = "ModuleList", .forward = no_forward, .backward = no_forward};

ct_module *ct_nn_module_dict(int n, const char *const *names, ct_module **modules) {
  if (n > 0 && !names) {
    ct_fail(CT_ERR_VALUE, "ct_nn_module_dict: NULL names");
    for (int i = 0; modules && i < n; ++i) ct_module_free(modules[i]);
    return NULL;
  }
  return container(&module_dict_ops, n, modules, names);
}

ct_module *ct_nn_module_list(int n, ct_module **modules) { return container(&module_list_ops, n, modules, NULL); }

ct_module *ct_module_get_submodule(ct_module *m, const char *target) {
  if (!m || !target) {
    ct_fail(CT_ERR_VALUE, "ct_module_get_submodule: NULL module or target");
    return NULL;
  }
  const char *p = target;
  while (*p) {
    const char *dot = strchr(p, '.');
    const size_t len = dot ? (size_t)(dot - p) : strlen(p);
    ct_module *next = NULL;
    for (int i = 0; i < m->n_children && !next; ++i)
      if (strlen(m->children[i]->name) == len && !strncmp(m->children[i]->name, p, len)) next = m->children[i];
    if (!next) {
      ct_fail(CT_ERR_VALUE, "ct_module_get_submodule: %s has no attribute `%.*s` (in \"%s\")", m->ops->kind,
              (int)len, p, target);
      return NULL;
    }
    m = next;
    p = dot ? dot + 1 : p + len;
  }
  return m;
}

// ---- tied parameters ----------------------------------------------------------------------------------
// Points every tied entry's value at its parameter's current tensor.
static void sync_ties(ct_module *m) {
  for (int i = 0; i < m->n_own; ++i)
    if (m->tied[i] && m->own[i].value != m->tied[i]->value) {
      ct_free(m->own[i].value);
      m->own[i].value = ct_retain(m->tied[i]->value);
    }
  for (int c = 0; c < m->n_children; ++c) sync_ties(m->children[c]);
}

// The parameter p is tied to when p is a tied entry of m's tree, else NULL.
static ct_param *tie_target(ct_module *m, const ct_param *p) {
  for (int i = 0; i < m->n_own; ++i)
    if (p == &m->own[i]) return m->tied[i];
  for (int c = 0; c < m->n_children; ++c) {
    ct_param *t = tie_target(m->children[c], p);
    if (t) return t;
  }
  return NULL;
}

static bool has_ties(const ct_module *m) {
  for (int i = 0; i < m->n_own; ++i)
    if (m->tied[i]) return true;
  for (int c = 0; c < m->n_children; ++c)
    if (has_ties(m->children[c])) return true;
  return false;
}

int ct_module_tie(ct_module *dst, const char *dst_name, ct_module *src, const char *src_name) {
  static const char *op = "ct_module_tie";
  if (!dst || !src || !dst_name || !src_name) return ct_fail(CT_ERR_VALUE, "%s: NULL module or name", op);
  if (strcmp(dst->ops->kind, "Linear") && strcmp(dst->ops->kind, "Embedding"))
    return ct_fail(CT_ERR_VALUE, "%s: only a Linear's or an Embedding's parameter can be tied, not %s's", op,
                   dst->ops->kind);
  int k = -1;
  for (int i = 0; i < dst->n_own; ++i)
    if (!strcmp(local_name(dst->own[i].name), dst_name)) k = i;
  ct_param *p = cti_module_find(src, src_name);
  if (k < 0 || !p || p->is_buffer || dst->own[k].is_buffer)
    return ct_fail(CT_ERR_VALUE, "%s: %s has no parameter \"%s\" or %s has no parameter \"%s\"", op,
                   dst->ops->kind, dst_name, src->ops->kind, src_name);
  if (p == &dst->own[k] || p == dst->tied[k]) return CT_OK; // already the same parameter
  ct_tensor *a = dst->own[k].value, *b = p->value;
  char sa[96], sb[96], da[CT_DEVICE_STR_MAX], db[CT_DEVICE_STR_MAX];
  if (!ct_shape_eq(ct_shape_of(a), ct_shape_of(b)) || ct_dtype_of(a) != ct_dtype_of(b) ||
      !ct_device_eq(ct_device_of(a), ct_device_of(b)))
    return ct_fail(CT_ERR_VALUE, "%s: %s.%s is %s %s on %s but %s.%s is %s %s on %s (they must agree)", op,
                   dst->ops->kind, dst_name, ct_dtype_name(ct_dtype_of(a)), ct_shape_str(ct_shape_of(a), sa, sizeof sa),
                   ct_device_str(ct_device_of(a), da), src->ops->kind, src_name, ct_dtype_name(ct_dtype_of(b)),
                   ct_shape_str(ct_shape_of(b), sb, sizeof sb), ct_device_str(ct_device_of(b), db));
  ct_free(dst->own[k].value);
  ct_free(dst->own[k].grad);
  dst->own[k].value = ct_retain(b);
  dst->own[k].grad = NULL;
  dst->tied[k] = p;
  return CT_OK;
}

// ---- running ----------------------------------------------------------------------------------
static int check_device(const char *op, const ct_module *m, const ct_tensor *t, const char *what) {
  if (ct_device_eq(ct_device_of(t), m->device)) return CT_OK;
  char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
  return ct_fail(CT_ERR_DEVICE, "%s: expected all tensors to be on the same device, but %s is on %s "
                 "and its %s on %s (move the model with ct_module_to or the tensor with ct_to)", op,
                 m->ops->kind, ct_device_str(m->device, a), what, ct_device_str(ct_device_of(t), b));
}

ct_tensor *ct_module_forward(ct_module *m, const ct_tensor *x) {
  if (!m || !x) {
    ct_fail(CT_ERR_VALUE, "ct_module_forward: NULL module or input");
    return NULL;
  }
  if (check_device("ct_module_forward", m, x, "input")) return NULL;
  cti_range range = cti_observe_range_begin(m->ops->kind, "forward", x); // "Conv2d.forward"
  ct_tensor *y = m->ops->forward(m, x);
  cti_observe_range_end(range);
  if (y && m->hook) m->hook(m, x, y, m->hook_ctx);
  return y;
}

void ct_module_register_forward_hook(ct_module *m, ct_forward_hook hook, void *ctx) {
  if (!m) return;
  m->hook = hook;
  m->hook_ctx = hook ? ctx : NULL;
}

ct_tensor *ct_module_backward(ct_module *m, const ct_tensor *grad_output) {
  if (!m || !grad_output) {
    ct_fail(CT_ERR_VALUE, "ct_module_backward: NULL module or gradient");
    return NULL;
  }
  if (check_device("ct_module_backward", m, grad_output, "grad_output")) return NULL;
  cti_range range = cti_observe_range_begin(m->ops->kind, "backward", grad_output);
  ct_tensor *dx = m->ops->backward(m, grad_output);
  cti_observe_range_end(range);
  if (dx && m->grad_hook && m->n_own > 0) m->grad_hook(m, m->grad_ctx);
  return dx;
}

void cti_module_set_grad_hook(ct_module *m, void (*fn)(ct_module *m, void *ctx), void *ctx) {
  if (!m) return;
  m->grad_hook = fn;
  m->grad_ctx = fn ? ctx : NULL;
  for (int i = 0; i < m->n_children; ++i) cti_module_set_grad_hook(m->children[i], fn, ctx);
}

int ct_module_backward_params(ct_module *m, const ct_tensor *grad_output) {
  if (!m || !grad_output) return ct_fail(CT_ERR_VALUE, "ct_module_backward_params: NULL module or gradient");
  int rc = check_device("ct_module_backward_params", m, grad_output, "grad_output");
  if (rc) return rc;
  cti_range range = cti_observe_range_begin(m->ops->kind, "backward", grad_output);
  if (m->ops->backward_params) {
    rc = m->ops->backward_params(m, grad_output);
  } else if (m->n_own > 0 || m->n_children > 0) { // else nothing to learn, nothing to pass on
    ct_tensor *dx = m->ops->backward(m, grad_output);
    rc = dx ? CT_OK : (int)ct_last_status();
    ct_free(dx);
  }
  cti_observe_range_end(range);
  if (rc == CT_OK && m->grad_hook && m->n_own > 0) m->grad_hook(m, m->grad_ctx);
  return rc;
}

void ct_module_train(ct_module *m, bool mode) {
  if (!m) return;
  m->training = mode;
  for (int i = 0; i < m->n_children; ++i) ct_module_train(m->children[i], mode);
}

bool ct_module_is_training(const ct_module *m) { return m && m->training; }

ct_device ct_module_device(const ct_module *m) { return m ? m->device : ct_device_cpu(); }

// Replaces *t by its copy on `device` (a no-op reference when already there).
int cti_nn_move(ct_tensor **t, ct_device device) {
  if (!*t) return CT_OK;
  ct_tensor *moved = ct_to(*t, device, ct_dtype_of(*t), false);
  if (!moved) return ct_last_status();
  ct_free(*t);
  *t = moved;
  return CT_OK;
}

int ct_module_to(ct_module *m, ct_device device) {
  if (!m) return ct_fail(CT_ERR_VALUE, "ct_module_to: NULL module");
  if (!cti_backend_for("ct_module_to", device)) return ct_last_status();
  for (int i = 0; i < m->n_own; ++i) {
    if (m->tied[i]) continue; // follows its parameter (sync_ties below)
    int rc = cti_nn_move(&m->own[i].value, device);
    if (!rc) rc = cti_nn_move(&m->own[i].grad, device);
    if (rc) return rc;
  }
  if (m->ops->state_to) {
    int rc = m->ops->state_to(m, device);
    if (rc) return rc;
  }
  for (int i = 0; i < m->n_children; ++i) {
    int rc = ct_module_to(m->children[i], device);
    if (rc) return rc;
  }
  m->device = device;
  sync_ties(m);
  return CT_OK;
}

// Replaces a floating *t by its copy in dtype (integers stay).
static int convert_tensor(ct_tensor **t, ct_dtype dtype) {
  if (!*t || !ct_dtype_is_floating(ct_dtype_of(*t)) || ct_dtype_of(*t) == dtype) return CT_OK;
  ct_tensor *c = ct_to_dtype(*t, dtype);
  if (!c) return ct_last_status();
  ct_free(*t);
  *t = c;
  return CT_OK;
}

int ct_module_to_dtype(ct_module *m, ct_dtype dtype) {
  if (!m) return ct_fail(CT_ERR_VALUE, "ct_module_to_dtype: NULL module");
  if (!ct_dtype_valid(dtype) || !ct_dtype_is_floating(dtype))
    return ct_fail(CT_ERR_DTYPE, "ct_module_to_dtype: nn.Module.to only accepts floating point dtypes, but got %s",
                   ct_dtype_valid(dtype) ? ct_dtype_name(dtype) : "an invalid dtype");
  for (int i = 0; i < m->n_own; ++i) {
    int rc = convert_tensor(&m->own[i].value, dtype);
    if (!rc) rc = convert_tensor(&m->own[i].grad, dtype);
    if (rc) return rc;
  }
  for (int i = 0; i < m->n_children; ++i) {
    int rc = ct_module_to_dtype(m->children[i], dtype);
    if (rc) return rc;
  }
  return CT_OK;
}

int ct_module_zero_grad(ct_module *m, bool set_to_none) {
  if (!m) return ct_fail(CT_ERR_VALUE, "ct_module_zero_grad: NULL module");
  for (int i = 0; i < m->n_own; ++i) {
    ct_param *p = &m->own[i];
    if (p->is_buffer || !p->grad) continue;
    if (set_to_none) {
      ct_free(p->grad);
      p->grad = NULL;
    } else {
      int rc = ct_zero_(p->grad);
      if (rc) return rc;
    }
  }
  for (int i = 0; i < m->n_children; ++i) {
    int rc = ct_module_zero_grad(m->children[i], set_to_none);
    if (rc) return rc;
  }
  return CT_OK;
}

// ---- state dicts with a prefix ----------------------------------------------------------------
ct_named_tensor *ct_module_state_dict(ct_module *m, const char *prefix, int *n) {
  if (n) *n = 0;
  if (!m || !n) {
    ct_fail(CT_ERR_VALUE, "ct_module_state_dict: NULL module or count");
    return NULL;
  }
  if (!prefix) prefix = "";
  int ns = 0;
  ct_param **state = ct_module_state(m, &ns);
  if (!state && ns) return NULL;
  ct_named_tensor *e = calloc(ns > 0 ? (size_t)ns : 1, sizeof *e);
  if (!e) {
    ct_fail(CT_ERR_OOM, "ct_module_state_dict: out of host memory");
    return NULL;
  }
  for (int i = 0; i < ns; ++i) {
    int w = snprintf(e[i].name, sizeof e[i].name, "%s%s", prefix, state[i]->name);
    if (w < 0 || (size_t)w >= sizeof e[i].name) {
      ct_named_tensors_free(e, i);
      ct_fail(CT_ERR_VALUE, "ct_module_state_dict: the key \"%s%s\" is longer than %zu characters", prefix,
              state[i]->name, sizeof e[i].name - 1);
      return NULL;
    }
    e[i].tensor = ct_retain(state[i]->value);
  }
  *n = ns;
  return e;
}

int ct_consume_prefix_in_state_dict_if_present(ct_named_tensor *entries, int n, const char *prefix) {
  if (!entries || !prefix || !*prefix) return 0;
  size_t len = strlen(prefix);
  int changed = 0;
  for (int i = 0; i < n; ++i) {
    if (strncmp(entries[i].name, prefix, len) != 0) continue;
    memmove(entries[i].name, entries[i].name + len, strlen(entries[i].name + len) + 1);
    ++changed;
  }
  return changed;
}

// ---- replicas ------------------------------------------------------------------------------
void *cti_state_dup(const void *src, size_t size) {
  void *st = calloc(1, size);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_module_replicate: out of host memory");
    return NULL;
  }
  memcpy(st, src, size);
  return st;
}

// A copy of t on `device` that never shares t's storage (ct_to would hand
// back t itself when it is already there).
static ct_tensor *copy_to(const ct_tensor *t, ct_device device) {
  if (!t) return NULL;
  return ct_device_eq(ct_device_of(t), device) ? ct_clone(t) : ct_to_device(t, device);
}

// Enters with m; leaves with a new module of m's kind on `device` whose own
// tensors are copies of m's (same names, same order), children replicated
// recursively, or NULL with the first failure's message.
ct_module *ct_module_replicate(const ct_module *m, ct_device device) {
  if (!m) {
    ct_fail(CT_ERR_VALUE, "ct_module_replicate: NULL module");
    return NULL;
  }
  if (!cti_backend_for("ct_module_replicate", device)) return NULL;
  if (has_ties(m)) {
    ct_fail(CT_ERR_VALUE, "ct_module_replicate: %s has tied parameters (ct_module_tie), which replicas "
            "cannot share yet", m->ops->kind);
    return NULL;
  }
  void *state = NULL;
  if (m->state) {
    if (!m->ops->state_clone) {
      ct_fail(CT_ERR_VALUE, "ct_module_replicate: %s cannot be replicated (its kind has no state_clone)",
              m->ops->kind);
      return NULL;
    }
    if (!(state = m->ops->state_clone(m))) return NULL;
  }
  ct_module *r = cti_module_new(m->ops, state);
  if (!r) {
    free(state); // a fresh clone holds no tensors yet
    return NULL;
  }
  memcpy(r->name, m->name, sizeof r->name);
  r->training = m->training;
  r->device = device;
  r->hook = m->hook;
  r->hook_ctx = m->hook_ctx;
  bool ok = true;
  for (int i = 0; i < m->n_own && ok; ++i) {
    ct_tensor *v = copy_to(m->own[i].value, device);
    ct_param *p = v ? cti_module_register(r, local_name(m->own[i].name), v, m->own[i].is_buffer) : NULL;
    if (p) memcpy(p->name, m->own[i].name, sizeof p->name); // the full dotted name
    ok = p != NULL;
  }
  if (ok && m->n_children > 0) {
    r->children = calloc((size_t)m->n_children, sizeof *r->children);
    ok = r->children != NULL;
    if (!ok) ct_fail(CT_ERR_OOM, "ct_module_replicate: out of host memory");
    for (int c = 0; c < m->n_children && ok; ++c) {
      r->children[c] = ct_module_replicate(m->children[c], device);
      ok = r->children[c] != NULL;
      r->n_children = c + 1;
    }
  }
  if (!ok) {
    ct_module_free(r);
    return NULL;
  }
  return r;
}

// ---- parameters and state -------------------------------------------------------------------------
// Appends m's tensors in parameters() order (buffers false) or state_dict
// order (buffers true) to out (may be NULL: counts only); returns the count.
static int collect(ct_module *m, bool with_buffers, ct_param **out, int k) {
  for (int i = 0; i < m->n_own; ++i)
    if (!m->own[i].is_buffer && (with_buffers || !m->tied[i])) { // a tied entry is in the state only
      if (out) out[k] = &m->own[i];
      ++k;
    }
  if (with_buffers)
    for (int i = 0; i < m->n_own; ++i)
      if (m->own[i].is_buffer) {
        if (out) out[k] = &m->own[i];
        ++k;
      }
  for (int c = 0; c < m->n_children; ++c) k = collect(m->children[c], with_buffers, out, k);
  return k;
}

// Refills the module's array in place (a tree never changes its size after
// construction, so the array handed out earlier stays valid, as nn.h
// promises); reallocates only when the count differs.
static ct_param **flatten(ct_module *m, bool with_buffers, ct_param ***arr, int *count, int *n) {
  if (with_buffers) sync_ties(m);
  int k = collect(m, with_buffers, NULL, 0);
  ct_param **a = *arr && *count == k ? *arr : realloc(*arr, (size_t)(k > 0 ? k : 1) * sizeof *a);
  if (!a) {
    ct_fail(CT_ERR_OOM, "ct_module_parameters: out of host memory");
    if (n) *n = 0;
    return NULL;
  }
  collect(m, with_buffers, a, 0);
  *arr = a;
  *count = k;
  if (n) *n = k;
  return a;
}

ct_param **ct_module_parameters(ct_module *m, int *n) {
  if (!m) {
    if (n) *n = 0;
    ct_fail(CT_ERR_VALUE, "ct_module_parameters: NULL module");
    return NULL;
  }
  return flatten(m, false, &m->flat_params, &m->n_flat_params, n);
}

ct_param **ct_module_state(ct_module *m, int *n) {
  if (!m) {
    if (n) *n = 0;
    ct_fail(CT_ERR_VALUE, "ct_module_state: NULL module");
    return NULL;
  }
  return flatten(m, true, &m->flat_state, &m->n_flat_state, n);
}

int64_t ct_module_num_elements(ct_module *m) {
  if (!m) return 0;
  int64_t total = 0;
  for (int i = 0; i < m->n_own; ++i)
    if (!m->own[i].is_buffer && !m->tied[i] && m->own[i].value) total += ct_numel(m->own[i].value);
  for (int c = 0; c < m->n_children; ++c) total += ct_module_num_elements(m->children[c]);
  return total;
}

// The arrays state_dict and the checkpoint loaders hand out (nn.h). Here,
// beside the type, so that nn/ needs nothing of io/ (io/ saves modules).
void ct_named_tensors_free(ct_named_tensor *entries, int n) {
  if (!entries) return;
  for (int i = 0; i < n; i++) ct_free(entries[i].tensor);
  free(entries);
}

// load_state_dict: every check first, then the copies, so that a failed load
// leaves the model as it was. Messages as torch's, e.g.
//   Error(s) in loading state_dict for Sequential:
//   \tMissing key(s) in state_dict: "0.bias". 
//   \tUnexpected key(s) in state_dict: "foo". 
//   \tsize mismatch for 0.weight: copying a param with shape (3, 2) from checkpoint, the shape in current model is (2, 3).
// Tied names share one tensor, so a checkpoint needs only one of them (as
// safetensors' save_model keeps one): true when another entry of state[i]'s
// tie group (the parameter and the names tied to it) is matched.
static bool tie_group_loaded(ct_module *m, ct_param **state, const int *match, int ns, int i) {
  const ct_param *ti = tie_target(m, state[i]);
  const ct_param *gi = ti ? ti : state[i];
  for (int k = 0; k < ns; ++k) {
    if (k == i || match[k] < 0) continue;
    const ct_param *tk = tie_target(m, state[k]);
    if ((tk ? tk : state[k]) == gi) return true;
  }
  return false;
}

int ct_module_load_state(ct_module *m, const ct_named_tensor *entries, int n, bool strict) {
  if (!m || (n > 0 && !entries) || n < 0)
    return ct_fail(CT_ERR_VALUE, "ct_module_load_state: NULL module or bad entry list");
  for (int j = 0; j < n; ++j)
    if (!entries[j].tensor)
      return ct_fail(CT_ERR_VALUE, "ct_module_load_state: entry \"%s\" has no tensor", entries[j].name);
  int ns = 0;
  ct_param **state = ct_module_state(m, &ns);
  if (!state) return ct_last_status();
  int *match = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *match); // entry index per state tensor, or -1
  bool *used = calloc((size_t)(n > 0 ? n : 1), sizeof *used);
  if (!match || !used) {
    free(match);
    free(used);
    return ct_fail(CT_ERR_OOM, "ct_module_load_state: out of host memory");
  }
  for (int i = 0; i < ns; ++i) {
    match[i] = -1;
    for (int j = 0; j < n && match[i] < 0; ++j)
      if (!strcmp(state[i]->name, entries[j].name)) match[i] = j, used[j] = true;
  }
  cti_strbuf missing = {0}, unexpected = {0}, sizes = {0};
  int n_missing = 0, n_unexpected = 0, n_sizes = 0;
  for (int i = 0; i < ns; ++i) {
    if (match[i] < 0 && tie_group_loaded(m, state, match, ns, i)) continue; // loaded under another name
    if (match[i] < 0) {
      cti_sb_printf(&missing, "%s\"%s\"", n_missing++ ? ", " : "", state[i]->name);
      continue;
    }
    ct_shape want = ct_shape_of(state[i]->value), got = ct_shape_of(entries[match[i]].tensor);
    if (!ct_shape_eq(want, got)) {
      char a[128], b[128];
      cti_sb_printf(&sizes, "\n\tsize mismatch for %s: copying a param with shape %s from checkpoint, the shape "
             "in current model is %s.", state[i]->name, ct_shape_str(got, a, sizeof a),
             ct_shape_str(want, b, sizeof b));
      ++n_sizes;
    }
  }
  for (int j = 0; j < n; ++j)
    if (!used[j]) cti_sb_printf(&unexpected, "%s\"%s\"", n_unexpected++ ? ", " : "", entries[j].name);
  int rc = CT_OK;
  if (n_sizes || (strict && (n_missing || n_unexpected))) {
    cti_strbuf msg = {0};
    cti_sb_printf(&msg, "ct_module_load_state: Error(s) in loading state_dict for %s:", m->ops->kind);
    if (strict && n_missing) cti_sb_printf(&msg, "\n\tMissing key(s) in state_dict: %s. ", missing.s);
    if (strict && n_unexpected) cti_sb_printf(&msg, "\n\tUnexpected key(s) in state_dict: %s. ", unexpected.s);
    if (n_sizes) cti_sb_printf(&msg, "%s", sizes.s);
    rc = ct_fail(CT_ERR_VALUE, "%s", msg.s ? msg.s : "ct_module_load_state: out of host memory");
    free(msg.s);
  } else {
    for (int i = 0; i < ns && rc == CT_OK; ++i)
      if (match[i] >= 0) rc = ct_copy_(state[i]->value, entries[match[i]].tensor, false);
  }
  free(missing.s);
  free(unexpected.s);
  free(sizes.s);
  free(match);
  free(used);
  return rc;
}

// ---- print(model) ----------------------------------------------------------------------------
// torch.nn.Module.__repr__: Kind(extra) for a leaf with one line of extra
// repr; else Kind(\n  extra lines\n  (name): child repr, its later lines
// indented by two more spaces\n).
static void repr(const ct_module *m, cti_strbuf *b, int indent) {
  char extra[512] = "";
  if (m->ops->describe) m->ops->describe(m, extra, sizeof extra);
  cti_sb_printf(b, "%s(", m->ops->kind);
  bool one_line = m->n_children == 0 && !strchr(extra, '\n');
  if (one_line) {
    cti_sb_printf(b, "%s)", extra);
    return;
  }
  if (extra[0]) {
    for (const char *line = extra; line;) {
      const char *nl = strchr(line, '\n');
      int len = nl ? (int)(nl - line) : (int)strlen(line);
      cti_sb_printf(b, "\n%*s%.*s", indent + 2, "", len, line);
      line = nl ? nl + 1 : NULL;
    }
  }
  for (int i = 0; i < m->n_children; ++i) {
    cti_sb_printf(b, "\n%*s(%s): ", indent + 2, "", m->children[i]->name);
    repr(m->children[i], b, indent + 2);
  }
  cti_sb_printf(b, "\n%*s)", indent, "");
}

char *ct_module_str(const ct_module *m) {
  if (!m) {
    ct_fail(CT_ERR_VALUE, "ct_module_str: NULL module");
    return NULL;
  }
  cti_strbuf b = {0};
  repr(m, &b, 0);
  if (b.oom || !b.s) {
    free(b.s);
    ct_fail(CT_ERR_OOM, "ct_module_str: out of host memory");
    return NULL;
  }
  return b.s;
}

void ct_module_free(ct_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_children; ++i) ct_module_free(m->children[i]);
  free(m->children);
  if (m->ops && m->ops->state_free) m->ops->state_free(m);
  else free(m->state);
  for (int i = 0; i < m->n_own; ++i) {
    ct_free(m->own[i].value);
    ct_free(m->own[i].grad);
  }
  free(m->flat_params);
  free(m->flat_state);
  free(m);
}
