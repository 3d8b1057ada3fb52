// SPDX-License-Identifier: MIT
//
// optim: torch.optim.SGD, Adam and AdamW, and torch.nn.utils.clip_grad_norm_
// (see optim.h). This file holds what does not depend on the device: option
// checks with PyTorch's messages, per-parameter state, the step count and
// the scalars PyTorch computes in Python (bias corrections, step size); the
// element-wise work is one fused kernel per parameter (optim_kernels.h).
//
// State follows torch.optim's single-tensor code: a parameter's state is
// created at its first step with a gradient (momentum_buffer := the first
// (decayed) gradient, not dampened; exp_avg, exp_avg_sq and max_exp_avg_sq
// := zeros), on the parameter's device, and each parameter counts its own
// steps, so a parameter skipped because its grad was NULL starts its bias
// corrections later, as in PyTorch.
//
// Invariant: a step that fails leaves every parameter and all state as they
// were. All checks (dtypes, shapes, devices) run first, then any state that
// is missing is allocated, and only then do the updates run.
//
// Under GradScaler (ct_optimizer_step_found_inf) the step may be skipped by
// the device, which the host does not wait to learn; a parameter's step
// count then lives in its device's memory too (slot.amp: the count and
// Adam's two scalars, advanced by the amp_prologue kernel unless found_inf
// is set), and the update kernels read it there. A plain step after such
// steps reads the count back once and goes on counting on the host.
#include "optim.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "ops.h"
#include "optim_kernels.h"
#include "observe.h"
#include "stream.h"

typedef enum opt_kind { KIND_SGD, KIND_ADAM, KIND_ADAMW } opt_kind;

// Per-parameter state; tensors are NULL until the parameter's first step.
typedef struct opt_slot {
  ct_tensor *buf;  // SGD: momentum_buffer; Adam: exp_avg
  ct_tensor *sq;   // exp_avg_sq
  ct_tensor *vmax; // max_exp_avg_sq (amsgrad)
  int64_t step;    // steps taken (torch's state["step"]), unless amp holds it
  ct_tensor *amp;  // GradScaler steps: [step, step_size, bias_correction2_sqrt] (f64, the
                   // parameter's device), or NULL
} opt_slot;

struct ct_optimizer {
  opt_kind kind;
  int n;
  ct_param **params; // borrowed; the array is our copy
  opt_slot *state;   // n slots
  ct_sgd_options sgd;
  ct_adam_options adam;
};

// ---- Python's repr(float), for messages in torch's wording ------------------------------------
// The shortest decimal that reads back as x; fixed notation for exponents in
// [-4, 16), else d.ddde+XX; a whole number gets ".0" (repr(1.0) == "1.0").
static const char *py_repr(double x, char *buf, size_t len) {
  if (isnan(x)) return snprintf(buf, len, "nan"), buf;
  if (isinf(x)) return snprintf(buf, len, x < 0 ? "-inf" : "inf"), buf;
  char e[40];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    snprintf(e, sizeof e, "%.*e", prec - 1, x);
    if (strtod(e, NULL) == x) break;
  }
  char *ep = strchr(e, 'e');
  int exp10 = atoi(ep + 1);
  if (exp10 >= -4 && exp10 < 16) {
    int decimals = prec - 1 - exp10;
    snprintf(buf, len, "%.*f", decimals > 0 ? decimals : 0, x);
    if (!strchr(buf, '.')) strncat(buf, ".0", len - strlen(buf) - 1);
  } else {
    *ep = '\0';
    snprintf(buf, len, "%se%c%02d", e, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
  return buf;
}

// ---- options ----------------------------------------------------------------------------------
ct_sgd_options ct_sgd_defaults(double lr) {
  return (ct_sgd_options){.lr = lr};
}

ct_adam_options ct_adam_defaults(void) {
  return (ct_adam_options){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
}

ct_adam_options ct_adamw_defaults(void) {
  ct_adam_options o = ct_adam_defaults();
  o.weight_decay = 1e-2;
  return o;
}

// torch.optim.SGD.__init__'s checks, in its order and words.
static int check_sgd(const char *op, const ct_sgd_options *o) {
  char b[64];
  if (o->lr < 0.0) return ct_fail(CT_ERR_VALUE, "%s: Invalid learning rate: %s", op, py_repr(o->lr, b, sizeof b));
  if (o->momentum < 0.0)
    return ct_fail(CT_ERR_VALUE, "%s: Invalid momentum value: %s", op, py_repr(o->momentum, b, sizeof b));
  if (o->weight_decay < 0.0)
    return ct_fail(CT_ERR_VALUE, "%s: Invalid weight_decay value: %s", op,
                   py_repr(o->weight_decay, b, sizeof b));
  if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0))
    return ct_fail(CT_ERR_VALUE, "%s: Nesterov momentum requires a momentum and zero dampening", op);
  return CT_OK;
}

// torch.optim.Adam/AdamW.__init__'s checks (`not 0.0 <= x` also refuses NaN).
static int check_adam(const char *op, const ct_adam_options *o) {
  char b[64];
  if (!(0.0 <= o->lr)) return ct_fail(CT_ERR_VALUE, "%s: Invalid learning rate: %s", op, py_repr(o->lr, b, sizeof b));
  if (!(0.0 <= o->eps)) return ct_fail(CT_ERR_VALUE, "%s: Invalid epsilon value: %s", op, py_repr(o->eps, b, sizeof b));
  if (!(0.0 <= o->beta1 && o->beta1 < 1.0))
    return ct_fail(CT_ERR_VALUE, "%s: Invalid beta parameter at index 0: %s", op, py_repr(o->beta1, b, sizeof b));
  if (!(0.0 <= o->beta2 && o->beta2 < 1.0))
    return ct_fail(CT_ERR_VALUE, "%s: Invalid beta parameter at index 1: %s", op, py_repr(o->beta2, b, sizeof b));
  if (!(0.0 <= o->weight_decay))
    return ct_fail(CT_ERR_VALUE, "%s: Invalid weight_decay value: %s", op,
                   py_repr(o->weight_decay, b, sizeof b));
  return CT_OK;
}

// Optimizer.__init__: a non-empty list of parameters.
static ct_optimizer *make(const char *op, opt_kind kind, ct_param **params, int n) {
  if (n < 0) return ct_fail(CT_ERR_VALUE, "%s: negative parameter count %d", op, n), NULL;
  if (n == 0) return ct_fail(CT_ERR_VALUE, "%s: optimizer got an empty parameter list", op), NULL;
  if (!params) return ct_fail(CT_ERR_VALUE, "%s: params is NULL", op), NULL;
  for (int i = 0; i < n; ++i)
    if (!params[i] || !params[i]->value)
      return ct_fail(CT_ERR_VALUE, "%s: parameter %d is %s", op, i, params[i] ? "empty (no value)" : "NULL"), NULL;
  ct_optimizer *o = calloc(1, sizeof *o);
  ct_param **copy = malloc((size_t)n * sizeof *copy);
  opt_slot *state = calloc((size_t)n, sizeof *state);
  if (!o || !copy || !state) {
    free(o), free(copy), free(state);
    return ct_fail(CT_ERR_OOM, "%s: out of host memory for %d parameters", op, n), NULL;
  }
  memcpy(copy, params, (size_t)n * sizeof *copy);
  o->kind = kind;
  o->n = n;
  o->params = copy;
  o->state = state;
  return o;
}

ct_optimizer *ct_optim_sgd(ct_param **params, int n, ct_sgd_options options) {
  if (check_sgd("ct_optim_sgd", &options) != CT_OK) return NULL;
  ct_optimizer *o = make("ct_optim_sgd", KIND_SGD, params, n);
  if (o) o->sgd = options;
  return o;
}

static ct_optimizer *adam_like(const char *op, opt_kind kind, ct_param **params, int n,
                               ct_adam_options options) {
  if (check_adam(op, &options) != CT_OK) return NULL;
  ct_optimizer *o = make(op, kind, params, n);
  if (o) o->adam = options;
  return o;
}

ct_optimizer *ct_optim_adam(ct_param **params, int n, ct_adam_options options) {
  return adam_like("ct_optim_adam", KIND_ADAM, params, n, options);
}

ct_optimizer *ct_optim_adamw(ct_param **params, int n, ct_adam_options options) {
  return adam_like("ct_optim_adamw", KIND_ADAMW, params, n, options);
}

void ct_optimizer_free(ct_optimizer *opt) {
  if (!opt) return;
  for (int i = 0; i < opt->n; ++i) {
    ct_free(opt->state[i].buf);
    ct_free(opt->state[i].sq);
    ct_free(opt->state[i].vmax);
    ct_free(opt->state[i].amp);
  }
  free(opt->state);
  free(opt->params);
  free(opt);
}

const char *ct_optimizer_name(const ct_optimizer *opt) {
  if (!opt) return "";
  return opt->kind == KIND_SGD ? "SGD" : opt->kind == KIND_ADAM ? "Adam" : "AdamW";
}

double ct_optimizer_get_lr(const ct_optimizer *opt) {
  if (!opt) return NAN;
  return opt->kind == KIND_SGD ? opt->sgd.lr : opt->adam.lr;
}

int ct_optimizer_set_lr(ct_optimizer *opt, double lr) {
  if (!opt) return ct_fail(CT_ERR_VALUE, "ct_optimizer_set_lr: NULL optimizer");
  char b[64];
  if (!(lr >= 0.0))
    return ct_fail(CT_ERR_VALUE, "ct_optimizer_set_lr: Invalid learning rate: %s", py_repr(lr, b, sizeof b));
  if (opt->kind == KIND_SGD) opt->sgd.lr = lr;
  else opt->adam.lr = lr;
  return CT_OK;
}

// ---- step -------------------------------------------------------------------------------------
static const char *pname(const ct_param *p, int i, char *buf, size_t len) {
  if (p->name[0]) snprintf(buf, len, "'%s'", p->name);
  else snprintf(buf, len, "%d", i);
  return buf;
}

// What a step needs of parameter i (which has a grad): float32/float64, a
// contiguous value, a grad of the same dtype, shape and device, and state
// (if any) that still matches the value.
static int check_param(const ct_optimizer *opt, int i) {
  const ct_param *p = opt->params[i];
  const opt_slot *st = &opt->state[i];
  char nm[112], a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX], sa[64], sb[64];
  if (!p->value) return ct_fail(CT_ERR_VALUE, "ct_optimizer_step: parameter %s has no value", pname(p, i, nm, sizeof nm));
  ct_dtype dt = ct_dtype_of(p->value);
  const bool half = dt == CT_F16 || dt == CT_BF16; // model.half(): SGD only
  if (dt != CT_F32 && dt != CT_F64 && !(half && opt->kind == KIND_SGD))
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: parameter %s is %s; %s supports float32 and float64%s",
                   pname(p, i, nm, sizeof nm), ct_dtype_name(dt), ct_optimizer_name(opt),
                   half ? " (keep float32 master weights and train float16 with autocast)" : "");
  if (ct_dtype_of(p->grad) != dt)
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step: parameter %s is %s but its grad is %s",
                   pname(p, i, nm, sizeof nm), ct_dtype_name(dt), ct_dtype_name(ct_dtype_of(p->grad)));
  ct_shape ps = ct_shape_of(p->value), gs = ct_shape_of(p->grad);
  if (!ct_shape_eq(ps, gs))
    return ct_fail(CT_ERR_SHAPE, "ct_optimizer_step: parameter %s has shape %s but its grad has shape %s",
                   pname(p, i, nm, sizeof nm), ct_shape_str(ps, sa, sizeof sa), ct_shape_str(gs, sb, sizeof sb));
  ct_device pd = ct_device_of(p->value), gd = ct_device_of(p->grad);
  if (!ct_device_eq(pd, gd))
    return ct_fail(CT_ERR_DEVICE, "ct_optimizer_step: parameter %s is on %s but its grad is on %s",
                   pname(p, i, nm, sizeof nm), ct_device_str(pd, a), ct_device_str(gd, b));
  if (!ct_is_contiguous(p->value))
    return ct_fail(CT_ERR_VALUE, "ct_optimizer_step: parameter %s is not contiguous", pname(p, i, nm, sizeof nm));
  const ct_tensor *s = st->buf ? st->buf : st->sq;
  if (s) {
    ct_device sd = ct_device_of(s);
    if (!ct_device_eq(sd, pd))
      return ct_fail(CT_ERR_DEVICE,
                     "ct_optimizer_step: the state of parameter %s is on %s but the parameter is now on %s "
                     "(create the optimizer after moving the model)",
                     pname(p, i, nm, sizeof nm), ct_device_str(sd, a), ct_device_str(pd, b));
    if (!ct_shape_eq(ct_shape_of(s), ps) || ct_dtype_of(s) != dt)
      return ct_fail(CT_ERR_SHAPE, "ct_optimizer_step: the state of parameter %s no longer matches it "
                     "(%s %s, parameter %s %s)", pname(p, i, nm, sizeof nm),
                     ct_shape_str(ct_shape_of(s), sa, sizeof sa), ct_dtype_name(ct_dtype_of(s)),
                     ct_shape_str(ps, sb, sizeof sb), ct_dtype_name(dt));
  }
  // Adam's bias corrections are host scalars of the step count: a captured
  // step would replay the captured step's forever (PyTorch's capturable=False).
  if (opt->kind != KIND_SGD && cti_observe_uncapturable(pd, "ct_optimizer_step: Attempting CUDA graph capture of "
                                                        "step() for an instance of %s but param_groups' "
                                                        "capturable is False.", ct_optimizer_name(opt)))
    return ct_last_status();
  return cti_backend_for("ct_optimizer_step", pd) ? CT_OK : (int)ct_last_status();
}

// Allocates what parameter i's state lacks (zeros, as torch.zeros_like; the
// momentum buffer is written whole by its first step).
static int alloc_state(const ct_optimizer *opt, int i) {
  const ct_tensor *v = opt->params[i]->value;
  opt_slot *st = &opt->state[i];
  ct_dtype dt = ct_dtype_of(v);
  ct_device d = ct_device_of(v);
  if (opt->kind == KIND_SGD) {
    if (opt->sgd.momentum != 0.0 && !st->buf && !(st->buf = ct_empty_like(v, dt, d))) return ct_last_status();
    return CT_OK;
  }
  if (!st->buf && !(st->buf = ct_zeros_like(v, dt, d))) return ct_last_status();
  if (!st->sq && !(st->sq = ct_zeros_like(v, dt, d))) return ct_last_status();
  if (opt->adam.amsgrad && !st->vmax && !(st->vmax = ct_zeros_like(v, dt, d))) return ct_last_status();
  return CT_OK;
}

static void *ptr_or_null(const ct_tensor *t) { return t ? ct_data_ptr(t) : NULL; }

// Makes parameter i's device-side step count, from the host's count.
static int amp_state_make(ct_optimizer *opt, int i) {
  opt_slot *st = &opt->state[i];
  if (st->amp) return CT_OK;
  const double init[3] = {(double)st->step, 0.0, 0.0};
  ct_tensor *h = ct_from_host(init, CT_SHAPE(3), CT_F64, ct_device_cpu());
  st->amp = h ? ct_to_device(h, ct_device_of(opt->params[i]->value)) : NULL;
  ct_free(h);
  return st->amp ? CT_OK : (int)ct_last_status();
}

// Reads the device-side step count back into the host's (waits), and drops it.
static int amp_state_retire(opt_slot *st) {
  if (!st->amp) return CT_OK;
  double v[3];
  int rc = ct_copy_to_host(st->amp, v, sizeof v);
  if (rc != CT_OK) return rc;
  st->step = (int64_t)v[0];
  ct_free(st->amp);
  st->amp = NULL;
  return CT_OK;
}

// One parameter's fused update on its device; found_inf (a float on that
// device, or NULL) is GradScaler's skip flag.
static int update(ct_optimizer *opt, int i, const ct_tensor *found_inf) {
  ct_param *p = opt->params[i];
  opt_slot *st = &opt->state[i];
  ct_tensor *g = ct_contiguous(p->grad);
  if (!g) return ct_last_status();
  ct_dtype dt = ct_dtype_of(p->value);
  ct_device d = ct_device_of(p->value);
  int64_t n = ct_numel(p->value);
  void *pv = ct_data_ptr(p->value);
  const void *gv = ct_data_ptr(g);
  const cti_backend *be = cti_backend_for("ct_optimizer_step", d); // sets the CUDA device
  int rc = be ? CT_OK : (int)ct_last_status();
  const float *fi = found_inf ? ct_data_ptr(found_inf) : NULL;
  const double *amp = NULL;
  if (rc == CT_OK && found_inf) { // the count advances on the device, unless the step is skipped
    const bool adam = opt->kind != KIND_SGD;
    rc = amp_state_make(opt, i);
    if (rc == CT_OK)
      rc = be->optim->amp_prologue(fi, ct_data_ptr(st->amp), adam, adam ? opt->adam.lr : opt->sgd.lr,
                                   opt->adam.beta1, opt->adam.beta2, ct_current_stream(d));
    amp = st->amp ? ct_data_ptr(st->amp) : NULL;
  } else if (rc == CT_OK) {
    rc = amp_state_retire(st);
  }
  if (rc == CT_OK && opt->kind == KIND_SGD) {
    const ct_sgd_options *o = &opt->sgd;
    cti_sgd_step_args a = {.lr = o->lr, .momentum = o->momentum, .dampening = o->dampening,
                          .weight_decay = o->weight_decay, .nesterov = o->nesterov,
                          .maximize = o->maximize, .init_buf = st->step == 0,
                          .found_inf = fi, .amp_state = amp};
    void *bv = ptr_or_null(st->buf);
    rc = be->optim->sgd_step(dt, n, pv, gv, bv, &a, ct_current_stream(d));
  } else if (rc == CT_OK) {
    const ct_adam_options *o = &opt->adam;
    // torch: step_t += 1; bias_correction = 1 - beta ** step (Python floats).
    double step = (double)(st->step + 1);
    double bc1 = 1.0 - pow(o->beta1, step), bc2 = 1.0 - pow(o->beta2, step);
    cti_adam_step_args a = {.lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                           .weight_decay = o->weight_decay, .amsgrad = o->amsgrad,
                           .maximize = o->maximize, .decoupled = opt->kind == KIND_ADAMW,
                           .step_size = o->lr / bc1, .bias_correction2_sqrt = sqrt(bc2),
                           .found_inf = fi, .amp_state = amp};
    void *m = ct_data_ptr(st->buf), *v = ct_data_ptr(st->sq), *vm = ptr_or_null(st->vmax);
    rc = be->optim->adam_step(dt, n, pv, gv, m, v, vm, &a, ct_current_stream(d));
  }
  ct_free(g); // a temporary copy may be freed now: its block is reused only in stream order
  if (rc == CT_OK && !found_inf) st->step += 1;
  return rc;
}

// found_inf (when given) must be one float32 on parameter i's device.
static int check_found_inf(const ct_optimizer *opt, int i, const ct_tensor *found_inf) {
  if (!found_inf) return CT_OK;
  char nm[112], a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
  if (ct_dtype_of(found_inf) != CT_F32 || ct_numel(found_inf) != 1)
    return ct_fail(CT_ERR_DTYPE, "ct_optimizer_step_found_inf: found_inf must be one float32, got %s with %lld elements",
                   ct_dtype_name(ct_dtype_of(found_inf)), (long long)ct_numel(found_inf));
  const ct_param *p = opt->params[i];
  if (!ct_device_eq(ct_device_of(found_inf), ct_device_of(p->value)))
    return ct_fail(CT_ERR_DEVICE, "ct_optimizer_step_found_inf: found_inf is on %s but parameter %s is on %s",
                   ct_device_str(ct_device_of(found_inf), a), pname(p, i, nm, sizeof nm),
                   ct_device_str(ct_device_of(p->value), b));
  return CT_OK;
}

static int step(ct_optimizer *opt, const ct_tensor *found_inf) {
  for (int i = 0; i < opt->n; ++i) {
    if (!opt->params[i]->grad) continue; // skipped, as PyTorch skips p.grad is None
    int rc = check_param(opt, i);
    if (rc == CT_OK) rc = check_found_inf(opt, i, found_inf);
    if (rc != CT_OK) return rc;
  }
  for (int i = 0; i < opt->n; ++i) {
    if (!opt->params[i]->grad) continue;
    int rc = alloc_state(opt, i);
    if (rc != CT_OK) return rc;
  }
  for (int i = 0; i < opt->n; ++i) {
    if (!opt->params[i]->grad) continue;
    int rc = update(opt, i, found_inf);
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

ct_param **ct_optimizer_params(const ct_optimizer *opt, int *n) {
  if (n) *n = opt ? opt->n : 0;
  return opt ? opt->params : NULL;
}

static int optimizer_zero_grad(ct_optimizer *opt, bool set_to_none) {
  int first = CT_OK;
  for (int i = 0; i < opt->n; ++i) {
    ct_param *p = opt->params[i];
    if (!p->grad) continue;
    if (set_to_none) {
      ct_free(p->grad);
      p->grad = NULL;
    } else {
      int rc = ct_zero_(p->grad);
      if (rc != CT_OK && first == CT_OK) first = rc;
    }
  }
  return first;
}

// torch's range names: "Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad".
static cti_range profile_range(const ct_optimizer *opt, const char *what) {
  if (!cti_observed()) return (cti_range){-1, -1};
  char name[64];
  snprintf(name, sizeof name, "Optimizer.%s#%s.%s", what, ct_optimizer_name(opt), what);
  return cti_observe_range_begin(name, NULL, NULL);
}

int ct_optimizer_step(ct_optimizer *opt) {
  if (!opt) return ct_fail(CT_ERR_VALUE, "ct_optimizer_step: NULL optimizer");
  cti_range range = profile_range(opt, "step");
  int rc = step(opt, NULL);
  cti_observe_range_end(range);
  return rc;
}

int ct_optimizer_step_found_inf(ct_optimizer *opt, const ct_tensor *found_inf) {
  if (!opt) return ct_fail(CT_ERR_VALUE, "ct_optimizer_step_found_inf: NULL optimizer");
  if (!found_inf) return ct_fail(CT_ERR_VALUE, "ct_optimizer_step_found_inf: NULL found_inf");
  cti_range range = profile_range(opt, "step");
  int rc = step(opt, found_inf);
  cti_observe_range_end(range);
  return rc;
}

int ct_optimizer_zero_grad(ct_optimizer *opt, bool set_to_none) {
  if (!opt) return ct_fail(CT_ERR_VALUE, "ct_optimizer_zero_grad: NULL optimizer");
  cti_range range = profile_range(opt, "zero_grad");
  int rc = optimizer_zero_grad(opt, set_to_none);
  cti_observe_range_end(range);
  return rc;
}

ct_tensor *cti_optimizer_state_tensor(const ct_optimizer *opt, int i, const char *key) {
  if (!opt || i < 0 || i >= opt->n || !key) return NULL;
  const opt_slot *st = &opt->state[i];
  if (opt->kind == KIND_SGD) return strcmp(key, "momentum_buffer") ? NULL : st->buf;
  if (!strcmp(key, "exp_avg")) return st->buf;
  if (!strcmp(key, "exp_avg_sq")) return st->sq;
  if (!strcmp(key, "max_exp_avg_sq")) return st->vmax;
  return NULL;
}

int64_t cti_optimizer_state_step(const ct_optimizer *opt, int i) {
  if (!opt || i < 0 || i >= opt->n) return 0;
  const opt_slot *st = &opt->state[i];
  double v[3];
  if (st->amp && ct_copy_to_host(st->amp, v, sizeof v) == CT_OK) return (int64_t)v[0];
  return st->step;
}

// ---- clip_grad_norm_ --------------------------------------------------------------------------
// torch.nn.utils.clip_grad_norm_ (1.13, norm_type 2, error_if_nonfinite
// False): total = ||(||g_1||, ..., ||g_k||)||_2, clip_coef = max_norm /
// (total + 1e-6), clamped to at most 1, and every grad multiplied by it
// (multiplying by exactly 1 changes nothing, so it is skipped; a NaN
// coefficient, from a NaN total, is applied as in PyTorch).

// Sum of squares of g (any device) into a host double; waits for the device.
static int sumsq_to_host(const ct_tensor *g, double *out) {
  ct_tensor *c = ct_contiguous(g);
  if (!c) return ct_last_status();
  ct_device d = ct_device_of(c);
  const cti_backend *be = cti_backend_for("ct_clip_grad_norm_", d);
  // ws: [sum of squares (1) | the entry's workspace]
  ct_tensor *ws = be ? ct_empty(CT_SHAPE(be->optim->sum_squares_workspace() + 1), CT_F64, d) : NULL;
  int rc = ws ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK) {
    double *w = ct_data_ptr(ws);
    rc = be->optim->sum_squares(ct_dtype_of(c), ct_numel(c), ct_data_ptr(c), w, w + 1,
                                ct_current_stream(d));
  }
  if (rc == CT_OK) {
    ct_tensor *first = ct_narrow(ws, 0, 0, 1);
    rc = first ? ct_item(first, out) : (int)ct_last_status();
    ct_free(first);
  }
  ct_free(ws);
  ct_free(c);
  return rc;
}

// Grads on more than one device: norms on the host, scaling with
// ct_binary_scalar_out.
static int clip_host(ct_tensor **grads, int k, double max_norm, double *total_norm) {
  double s = 0.0;
  for (int j = 0; j < k; ++j) {
    double sj;
    int rc = sumsq_to_host(grads[j], &sj);
    if (rc != CT_OK) return rc;
    s += sj;
  }
  double total = sqrt(s), coef = max_norm / (total + 1e-6);
  if (coef > 1.0) coef = 1.0;
  if (total_norm) *total_norm = total;
  if (coef >= 1.0) return CT_OK;
  for (int j = 0; j < k; ++j) {
    int rc = ct_binary_scalar_out(CT_OP_MUL, grads[j], grads[j], coef);
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

// Every grad on device d: norms, total and coefficient stay in d's memory
// (on CUDA nothing waits for the device); only *total_norm (when asked for)
// waits for the result.
static int clip_one_device(ct_tensor **grads, int k, ct_device d, double max_norm,
                           double *total_norm) {
  const cti_backend *be = cti_backend_for("ct_clip_grad_norm_", d);
  if (!be) return ct_last_status();
  const cti_optim_kernels *ok = be->optim;
  ct_stream *s = ct_current_stream(d);
  int64_t wn = ok->sum_squares_workspace();
  // ws: [sumsq of each grad (k) | total, coef (2) | partials (wn)]
  ct_tensor *ws = ct_empty(CT_SHAPE(k + 2 + wn), CT_F64, d);
  if (!ws) return ct_last_status();
  double *w = ct_data_ptr(ws);
  int rc = CT_OK;
  for (int j = 0; j < k && rc == CT_OK; ++j) {
    ct_tensor *c = ct_contiguous(grads[j]);
    if (!c) { rc = ct_last_status(); break; }
    rc = ok->sum_squares(ct_dtype_of(c), ct_numel(c), ct_data_ptr(c), w + j, w + k + 2, s);
    ct_free(c);
  }
  if (rc == CT_OK) rc = ok->clip_coef(k, w, max_norm, w + k, s);
  for (int j = 0; j < k && rc == CT_OK; ++j) {
    ct_tensor *g = grads[j];
    if (ct_is_contiguous(g)) {
      rc = ok->scale_by(ct_dtype_of(g), ct_numel(g), ct_data_ptr(g), w + k + 1, s);
    } else { // scale a contiguous copy and write it back
      ct_tensor *c = ct_contiguous(g);
      rc = c ? ok->scale_by(ct_dtype_of(c), ct_numel(c), ct_data_ptr(c), w + k + 1, s)
             : (int)ct_last_status();
      if (rc == CT_OK) rc = ct_copy_(g, c, false);
      ct_free(c);
    }
  }
  if (rc == CT_OK && total_norm) {
    ct_tensor *t = ct_narrow(ws, 0, k, 1);
    rc = t ? ct_item(t, total_norm) : (int)ct_last_status();
    ct_free(t);
  }
  ct_free(ws);
  return rc;
}

int ct_clip_grad_norm_(ct_param **params, int n, double max_norm, double *total_norm) {
  if (total_norm) *total_norm = 0.0;
  if (n < 0 || (n > 0 && !params))
    return ct_fail(CT_ERR_VALUE, "ct_clip_grad_norm_: bad parameter list (%d parameters, params %s)", n,
                   params ? "given" : "NULL");
  char b[64];
  if (!(max_norm >= 0.0))
    return ct_fail(CT_ERR_VALUE, "ct_clip_grad_norm_: max_norm must be non-negative, got %s",
                   py_repr(max_norm, b, sizeof b));
  ct_tensor **grads = malloc((size_t)(n > 0 ? n : 1) * sizeof *grads);
  if (!grads) return ct_fail(CT_ERR_OOM, "ct_clip_grad_norm_: out of host memory");
  int k = 0;
  bool one_device = true;
  ct_device d0 = ct_device_cpu();
  for (int i = 0; i < n; ++i) {
    if (!params[i]) {
      free(grads);
      return ct_fail(CT_ERR_VALUE, "ct_clip_grad_norm_: parameter %d is NULL", i);
    }
    ct_tensor *g = params[i]->grad;
    if (!g) continue; // torch: [p for p in parameters if p.grad is not None]
    ct_dtype dt = ct_dtype_of(g);
    if (dt != CT_F32 && dt != CT_F64) {
      free(grads);
      return ct_fail(CT_ERR_DTYPE, "ct_clip_grad_norm_: the grad of parameter %d ('%s') is %s; "
                     "float32 and float64 are supported", i, params[i]->name, ct_dtype_name(dt));
    }
    if (k == 0) d0 = ct_device_of(g);
    else if (!ct_device_eq(d0, ct_device_of(g))) one_device = false;
    grads[k++] = g;
  }
  int rc = CT_OK;
  if (k > 0) {
    rc = one_device ? clip_one_device(grads, k, d0, max_norm, total_norm)
                    : clip_host(grads, k, max_norm, total_norm);
  }
  free(grads);
  return rc;
}

// ---- state_dict ---------------------------------------------------------------------------
// Entries are "<prefix>state.<i>.<key>" as optimizer.state_dict()["state"][i]
// flattened: momentum_buffer (SGD), exp_avg, exp_avg_sq, max_exp_avg_sq
// (Adam/AdamW), and step, a float32 0-d tensor as PyTorch keeps it since 1.12
// (SGD too here: its first step initializes the momentum buffer, so a resumed
// run must know whether that happened). A parameter that has not stepped yet
// has no entries, as in PyTorch.
typedef struct state_key {
  const char *name;
  size_t off; // offsetof(opt_slot, member)
} state_key;

static int state_keys(const ct_optimizer *opt, state_key *keys) {
  if (opt->kind == KIND_SGD) {
    keys[0] = (state_key){"momentum_buffer", offsetof(opt_slot, buf)};
    return 1;
  }
  keys[0] = (state_key){"exp_avg", offsetof(opt_slot, buf)};
  keys[1] = (state_key){"exp_avg_sq", offsetof(opt_slot, sq)};
  keys[2] = (state_key){"max_exp_avg_sq", offsetof(opt_slot, vmax)};
  return 3;
}

static ct_tensor **slot_tensor(opt_slot *st, const state_key *k) {
  return (ct_tensor **)((char *)st + k->off);
}

ct_named_tensor *ct_optimizer_state_dict(ct_optimizer *opt, const char *prefix, int *n) {
  if (n) *n = 0;
  if (!opt || !n) return ct_fail(CT_ERR_VALUE, "ct_optimizer_state_dict: NULL argument"), NULL;
  if (!prefix) prefix = "";
  state_key keys[3];
  const int nk = state_keys(opt, keys);
  ct_named_tensor *out = calloc((size_t)opt->n * (size_t)(nk + 1) + 1, sizeof *out);
  if (!out) return ct_fail(CT_ERR_OOM, "ct_optimizer_state_dict: out of host memory"), NULL;
  int c = 0;
  for (int i = 0; i < opt->n; ++i) {
    opt_slot *st = &opt->state[i];
    const int64_t steps = cti_optimizer_state_step(opt, i); // the device's count under GradScaler
    if (steps == 0) continue;
    for (int k = 0; k < nk; ++k) {
      ct_tensor *t = *slot_tensor(st, &keys[k]);
      if (!t) continue;
      snprintf(out[c].name, sizeof out[c].name, "%sstate.%d.%s", prefix, i, keys[k].name);
      if (!(out[c].tensor = ct_clone(t))) goto fail;
      c++;
    }
    snprintf(out[c].name, sizeof out[c].name, "%sstate.%d.step", prefix, i);
    if (!(out[c].tensor = ct_full(CT_SCALAR_SHAPE, (double)steps, CT_F32, ct_device_cpu()))) goto fail;
    c++;
  }
  *n = c;
  return out;
fail:
  for (int j = 0; j < c; ++j) ct_free(out[j].tensor);
  free(out);
  return NULL;
}

// Finds "<prefix>state.<i>.<key>" in entries; NULL if absent.
static const ct_tensor *find_entry(const ct_named_tensor *e, int n, const char *prefix, int i, const char *key) {
  char want[sizeof e->name];
  snprintf(want, sizeof want, "%sstate.%d.%s", prefix, i, key);
  for (int j = 0; j < n; ++j)
    if (strcmp(e[j].name, want) == 0) return e[j].tensor;
  return NULL;
}

// Counts entries under "<prefix>state." that name no parameter or key of opt.
static int unexpected_entries(const ct_optimizer *opt, const ct_named_tensor *e, int n, const char *prefix,
                              const state_key *keys, int nk, char *first, size_t cap) {
  const size_t pl = strlen(prefix);
  int bad = 0;
  for (int j = 0; j < n; ++j) {
    if (strncmp(e[j].name, prefix, pl) != 0 || strncmp(e[j].name + pl, "state.", 6) != 0) continue;
    const char *s = e[j].name + pl + 6;
    char *end;
    long i = strtol(s, &end, 10);
    bool ok = end != s && *end == '.' && i >= 0 && i < opt->n;
    if (ok) {
      ok = strcmp(end + 1, "step") == 0;
      for (int k = 0; k < nk && !ok; ++k) ok = strcmp(end + 1, keys[k].name) == 0;
    }
    if (!ok && bad++ == 0) snprintf(first, cap, "%s", e[j].name);
  }
  return bad;
}

int ct_optimizer_load_state_dict(ct_optimizer *opt, const ct_named_tensor *entries, int n, const char *prefix) {
  static const char op[] = "ct_optimizer_load_state_dict";
  if (!opt || (!entries && n > 0) || n < 0) return ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
  if (!prefix) prefix = "";
  state_key keys[3];
  const int nk = state_keys(opt, keys);
  char nm[112], first[sizeof entries->name] = "", sa[64], sb[64];
  int bad = unexpected_entries(opt, entries, n, prefix, keys, nk, first, sizeof first);
  if (bad)
    return ct_fail(CT_ERR_VALUE, "%s: %d entr%s such as \"%s\" belong to no parameter of this %s (%d parameters): "
                   "was the checkpoint saved with another optimizer or model?",
                   op, bad, bad == 1 ? "y" : "ies", first, ct_optimizer_name(opt), opt->n);
  // Check everything before changing anything.
  for (int i = 0; i < opt->n; ++i) {
    const ct_tensor *v = opt->params[i]->value;
    for (int k = 0; k < nk; ++k) {
      const ct_tensor *t = find_entry(entries, n, prefix, i, keys[k].name);
      if (t && (!ct_shape_eq(ct_shape_of(t), ct_shape_of(v)) || ct_dtype_of(t) != ct_dtype_of(v)))
        return ct_fail(CT_ERR_SHAPE, "%s: %s of parameter %s is %s %s but the parameter is %s %s", op, keys[k].name,
                       pname(opt->params[i], i, nm, sizeof nm), ct_shape_str(ct_shape_of(t), sa, sizeof sa),
                       ct_dtype_name(ct_dtype_of(t)), ct_shape_str(ct_shape_of(v), sb, sizeof sb),
                       ct_dtype_name(ct_dtype_of(v)));
    }
    const ct_tensor *s = find_entry(entries, n, prefix, i, "step");
    if (s && ct_numel(s) != 1)
      return ct_fail(CT_ERR_SHAPE, "%s: step of parameter %s has %lld elements, expected 1", op,
                     pname(opt->params[i], i, nm, sizeof nm), (long long)ct_numel(s));
    for (int k = 0; k < nk && s; ++k) { // a parameter that stepped has every buffer this optimizer keeps
      bool kept = opt->kind == KIND_SGD ? opt->sgd.momentum != 0.0 : k < 2 || opt->adam.amsgrad;
      if (kept && !find_entry(entries, n, prefix, i, keys[k].name))
        return ct_fail(CT_ERR_VALUE, "%s: parameter %s has a step count but no %s (\"%sstate.%d.%s\" is missing)", op,
                       pname(opt->params[i], i, nm, sizeof nm), keys[k].name, prefix, i, keys[k].name);
    }
  }
  // Copy onto each parameter's device (optimizer.load_state_dict casts state to the parameter's device).
  opt_slot *fresh = calloc((size_t)opt->n, sizeof *fresh);
  if (!fresh) return ct_fail(CT_ERR_OOM, "%s: out of host memory", op);
  int rc = CT_OK;
  for (int i = 0; i < opt->n && rc == CT_OK; ++i) {
    const ct_tensor *v = opt->params[i]->value;
    for (int k = 0; k < nk && rc == CT_OK; ++k) {
      const ct_tensor *t = find_entry(entries, n, prefix, i, keys[k].name);
      if (t && !(*slot_tensor(&fresh[i], &keys[k]) = ct_to(t, ct_device_of(v), ct_dtype_of(v), false)))
        rc = ct_last_status();
    }
    const ct_tensor *s = find_entry(entries, n, prefix, i, "step");
    double step = 0;
    if (rc == CT_OK && s && (rc = ct_item(s, &step)) == CT_OK && !(step >= 0 && step == floor(step)))
      rc = ct_fail(CT_ERR_VALUE, "%s: step of parameter %s is %g, expected a count", op,
                   pname(opt->params[i], i, nm, sizeof nm), step);
    fresh[i].step = (int64_t)step;
  }
  for (int i = 0; i < opt->n; ++i) { // the new state, or on failure the old one, survives
    opt_slot *drop = rc == CT_OK ? &opt->state[i] : &fresh[i];
    ct_free(drop->buf), ct_free(drop->sq), ct_free(drop->vmax), ct_free(drop->amp);
    if (rc == CT_OK) opt->state[i] = fresh[i];
  }
  free(fresh);
  return rc;
}
