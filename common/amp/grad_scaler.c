// SPDX-License-Identifier: MIT
//
// grad_scaler: torch.amp.GradScaler (see amp.h), call for call.
//
// State, all on the device of the first tensor scale() sees:
//   scale           one float32, starts at init_scale;
//   growth_tracker  one int32: clean steps since the last change;
//   skipped         one int64: updates that found an inf/NaN (ct's counter);
//   per optimizer   a stage (READY -> UNSCALED -> STEPPED, back to READY at
//                   update()) and a found_inf float32, 1 when one of its
//                   gradients held an inf or NaN this iteration.
// The stage is host state and is checked with PyTorch's messages; every
// value the device computes stays there. unscale_ checks and rescales the
// gradients with ct_amp_non_finite_check_ and an in-place multiply by
// inv_scale (a device tensor), step hands found_inf to the optimizer, which
// the device skips when it is set, and update runs _amp_update_scale_'s
// rule as a one-thread kernel. A training step therefore never waits for
// the device because of the scaler; only get_scale, state_dict and the
// counters do, when asked.
//
// Invariant: a call that fails changes no stage (checks run first), so a
// caller may report the error and go on with the next iteration.
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "amp_kernels.h"
#include "backend.h"
#include "error.h"
#include "ops.h"
#include "stream.h"

#define CT_GRAD_SCALER_MAX_OPTIMIZERS 8

typedef enum opt_stage { STAGE_READY, STAGE_UNSCALED, STAGE_STEPPED } opt_stage;

typedef struct per_optimizer {
  const ct_optimizer *opt; // NULL: a free slot
  opt_stage stage;
  bool checked;            // found_inf holds this iteration's check
  ct_tensor *found_inf;    // (1,) f32 on the scale's device, kept between iterations
} per_optimizer;

struct ct_grad_scaler {
  ct_device_type device_type;
  ct_grad_scaler_options o;
  int64_t init_growth_tracker;
  ct_tensor *scale;    // (1,) f32, NULL until the first scale()
  ct_tensor *tracker;  // (1,) i32
  ct_tensor *skipped;  // (1,) i64
  ct_tensor *inv;      // (1,) f32 scratch for unscale_
  per_optimizer per[CT_GRAD_SCALER_MAX_OPTIMIZERS];
};

ct_grad_scaler_options ct_grad_scaler_defaults(void) {
  return (ct_grad_scaler_options){.init_scale = 65536.0, .growth_factor = 2.0, .backoff_factor = 0.5,
                                  .growth_interval = 2000, .enabled = true};
}

ct_grad_scaler *ct_grad_scaler_create(ct_device_type device_type, ct_grad_scaler_options o) {
  static const char op[] = "ct_grad_scaler_create";
  if (device_type != CT_CPU && device_type != CT_CUDA) {
    ct_fail(CT_ERR_VALUE, "%s: unsupported device type %d (cpu or cuda)", op, (int)device_type);
    return NULL;
  }
  // torch.amp.GradScaler.__init__'s checks, in its words.
  if (!(o.growth_factor > 1.0)) {
    ct_fail(CT_ERR_VALUE, "%s: The growth factor must be > 1.0. (got %g)", op, o.growth_factor);
    return NULL;
  }
  if (!(o.backoff_factor < 1.0) || !(o.backoff_factor > 0.0)) {
    ct_fail(CT_ERR_VALUE, "%s: The backoff factor must be < 1.0 (and > 0). (got %g)", op, o.backoff_factor);
    return NULL;
  }
  if (o.growth_interval < 1 || o.growth_interval > INT32_MAX) {
    ct_fail(CT_ERR_VALUE, "%s: growth_interval must be in [1, 2^31), got %" PRId64, op, o.growth_interval);
    return NULL;
  }
  if (!(o.init_scale > 0.0) || !isfinite((float)o.init_scale)) {
    ct_fail(CT_ERR_VALUE, "%s: init_scale must be a positive float32, got %g", op, o.init_scale);
    return NULL;
  }
  ct_grad_scaler *s = calloc(1, sizeof *s);
  if (!s) {
    ct_fail(CT_ERR_OOM, "%s: out of host memory", op);
    return NULL;
  }
  s->device_type = device_type;
  s->o = o;
  return s;
}

void ct_grad_scaler_free(ct_grad_scaler *s) {
  if (!s) return;
  ct_free(s->scale), ct_free(s->tracker), ct_free(s->skipped), ct_free(s->inv);
  for (int i = 0; i < CT_GRAD_SCALER_MAX_OPTIMIZERS; ++i) ct_free(s->per[i].found_inf);
  free(s);
}

bool ct_grad_scaler_is_enabled(const ct_grad_scaler *s) { return s && s->o.enabled; }

// _lazy_init_scale_growth_tracker: the state on `dev`.
static int lazy_init(ct_grad_scaler *s, ct_device dev) {
  if (s->scale) return CT_OK;
  ct_tensor *scale = ct_full(CT_SHAPE(1), s->o.init_scale, CT_F32, dev);
  ct_tensor *tracker = ct_full(CT_SHAPE(1), (double)s->init_growth_tracker, CT_I32, dev);
  ct_tensor *skipped = ct_zeros(CT_SHAPE(1), CT_I64, dev);
  ct_tensor *inv = ct_empty(CT_SHAPE(1), CT_F32, dev);
  if (!scale || !tracker || !skipped || !inv) {
    ct_free(scale), ct_free(tracker), ct_free(skipped), ct_free(inv);
    return ct_last_status();
  }
  s->scale = scale, s->tracker = tracker, s->skipped = skipped, s->inv = inv;
  return CT_OK;
}

// _check_scale_growth_tracker.
static int need_scale(const ct_grad_scaler *s, const char *funcname) {
  if (s->scale) return CT_OK;
  return ct_fail(CT_ERR_VALUE,
                 "ct_grad_scaler_%s: Attempted %s but _scale is None.  This may indicate your script did not "
                 "use scaler.scale(loss or outputs) earlier in the iteration.",
                 funcname, funcname);
}

ct_tensor *ct_grad_scaler_scale(ct_grad_scaler *s, const ct_tensor *outputs) {
  static const char op[] = "ct_grad_scaler_scale";
  if (!s || !outputs) {
    ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
    return NULL;
  }
  if (!s->o.enabled) return ct_retain((ct_tensor *)outputs);
  const ct_device dev = ct_device_of(outputs);
  if (dev.type != s->device_type) {
    char b[CT_DEVICE_STR_MAX];
    ct_fail(CT_ERR_DEVICE, "%s: this GradScaler is for %s tensors, got one on %s", op,
            s->device_type == CT_CUDA ? "cuda" : "cpu", ct_device_str(dev, b));
    return NULL;
  }
  if (!ct_dtype_is_floating(ct_dtype_of(outputs))) {
    ct_fail(CT_ERR_DTYPE, "%s: expected a floating tensor, got %s", op, ct_dtype_name(ct_dtype_of(outputs)));
    return NULL;
  }
  if (lazy_init(s, dev) != CT_OK) return NULL;
  if (!ct_device_eq(dev, ct_device_of(s->scale))) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    ct_fail(CT_ERR_DEVICE, "%s: the scale lives on %s but this tensor is on %s (ct's GradScaler serves "
            "one device)", op, ct_device_str(ct_device_of(s->scale), a), ct_device_str(dev, b));
    return NULL;
  }
  return ct_mul(outputs, s->scale); // outputs * self._scale: float32 at least, outputs' shape
}

// The slot of `opt`, made READY on first sight; NULL when all are taken.
static per_optimizer *slot_of(ct_grad_scaler *s, const ct_optimizer *opt) {
  per_optimizer *free_slot = NULL;
  for (int i = 0; i < CT_GRAD_SCALER_MAX_OPTIMIZERS; ++i) {
    if (s->per[i].opt == opt) return &s->per[i];
    if (!s->per[i].opt && !free_slot) free_slot = &s->per[i];
  }
  if (!free_slot) {
    ct_fail(CT_ERR_VALUE, "ct_grad_scaler: more than %d optimizers in one iteration", CT_GRAD_SCALER_MAX_OPTIMIZERS);
    return NULL;
  }
  free_slot->opt = opt;
  free_slot->stage = STAGE_READY;
  free_slot->checked = false;
  return free_slot;
}

// Every gradient of opt: a float32/float64 tensor on the scale's device
// (PyTorch refuses FP16 gradients here: the parameters must be float32).
static int check_grads(const ct_grad_scaler *s, ct_optimizer *opt) {
  int n = 0;
  ct_param **ps = ct_optimizer_params(opt, &n);
  const ct_device dev = ct_device_of(s->scale);
  for (int i = 0; i < n; ++i) {
    const ct_tensor *g = ps[i]->grad;
    if (!g) continue;
    const ct_dtype dt = ct_dtype_of(g);
    if (dt == CT_F16 || dt == CT_BF16)
      return ct_fail(CT_ERR_DTYPE, "ct_grad_scaler_unscale_: Attempting to unscale FP16 gradients. "
                     "(parameter '%s' has a %s grad: keep the parameters float32 and let autocast cast them)",
                     ps[i]->name, ct_dtype_name(dt));
    if (dt != CT_F32 && dt != CT_F64)
      return ct_fail(CT_ERR_DTYPE, "ct_grad_scaler_unscale_: parameter '%s' has a %s grad", ps[i]->name,
                     ct_dtype_name(dt));
    if (!ct_device_eq(ct_device_of(g), dev)) {
      char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
      return ct_fail(CT_ERR_DEVICE, "ct_grad_scaler_unscale_: the grad of '%s' is on %s but the scale is on %s "
                     "(ct's GradScaler serves one device)", ps[i]->name, ct_device_str(ct_device_of(g), a),
                     ct_device_str(dev, b));
    }
  }
  return CT_OK;
}

// _unscale_grads_: found_inf := 0, then for each gradient: found_inf |= it
// holds an inf/NaN (checked before the multiply, as PyTorch's kernel does),
// and g *= inv_scale in place.
static int unscale_grads(ct_grad_scaler *s, ct_optimizer *opt, per_optimizer *po) {
  const ct_device dev = ct_device_of(s->scale);
  if (!po->found_inf && !(po->found_inf = ct_zeros(CT_SHAPE(1), CT_F32, dev))) return ct_last_status();
  int rc = ct_zero_(po->found_inf);
  const cti_backend *be = rc == CT_OK ? cti_backend_for("ct_grad_scaler_unscale_", dev) : NULL;
  if (!be) return rc != CT_OK ? rc : (int)ct_last_status();
  rc = be->amp->inv_scale(ct_data_ptr(s->scale), ct_data_ptr(s->inv), ct_current_stream(dev));
  int n = 0;
  ct_param **ps = ct_optimizer_params(opt, &n);
  for (int i = 0; i < n && rc == CT_OK; ++i) {
    ct_tensor *g = ps[i]->grad;
    if (!g) continue;
    rc = ct_amp_non_finite_check_(g, po->found_inf);
    if (rc == CT_OK) rc = ct_binary_out(CT_OP_MUL, g, g, s->inv);
  }
  return rc;
}

int ct_grad_scaler_unscale_(ct_grad_scaler *s, ct_optimizer *opt) {
  if (!s || !opt) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_unscale_: NULL argument");
  if (!s->o.enabled) return CT_OK;
  int rc = need_scale(s, "unscale_");
  if (rc != CT_OK) return rc;
  per_optimizer *po = slot_of(s, opt);
  if (!po) return ct_last_status();
  if (po->stage == STAGE_UNSCALED)
    return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_unscale_: unscale_() has already been called on this "
                   "optimizer since the last update().");
  if (po->stage == STAGE_STEPPED)
    return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_unscale_: unscale_() is being called after step().");
  if ((rc = check_grads(s, opt)) != CT_OK) return rc;
  rc = unscale_grads(s, opt, po);
  if (rc != CT_OK) return rc;
  po->stage = STAGE_UNSCALED;
  po->checked = true;
  return CT_OK;
}

int ct_grad_scaler_step(ct_grad_scaler *s, ct_optimizer *opt) {
  if (!s || !opt) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_step: NULL argument");
  if (!s->o.enabled) return ct_optimizer_step(opt);
  int rc = need_scale(s, "step");
  if (rc != CT_OK) return rc;
  per_optimizer *po = slot_of(s, opt);
  if (!po) return ct_last_status();
  if (po->stage == STAGE_STEPPED)
    return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_step: step() has already been called since the last update().");
  if (po->stage == STAGE_READY && (rc = ct_grad_scaler_unscale_(s, opt)) != CT_OK) return rc;
  rc = ct_optimizer_step_found_inf(opt, po->found_inf);
  if (rc != CT_OK) return rc;
  po->stage = STAGE_STEPPED;
  return CT_OK;
}

// Back to READY for the next iteration (_per_optimizer_states reset).
static void refresh(ct_grad_scaler *s) {
  for (int i = 0; i < CT_GRAD_SCALER_MAX_OPTIMIZERS; ++i) {
    s->per[i].opt = NULL;
    s->per[i].stage = STAGE_READY;
    s->per[i].checked = false;
  }
}

int ct_grad_scaler_update(ct_grad_scaler *s) {
  if (!s) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_update: NULL scaler");
  if (!s->o.enabled) return CT_OK;
  int rc = need_scale(s, "update");
  if (rc != CT_OK) return rc;
  // found_inf_combined = found_infs[0]; found_inf_combined += found_infs[i] ...
  ct_tensor *combined = NULL;
  for (int i = 0; i < CT_GRAD_SCALER_MAX_OPTIMIZERS && rc == CT_OK; ++i) {
    if (!s->per[i].opt || !s->per[i].checked) continue;
    if (!combined) combined = s->per[i].found_inf;
    else rc = ct_binary_out(CT_OP_ADD, combined, combined, s->per[i].found_inf);
  }
  if (rc != CT_OK) return rc;
  if (!combined) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_update: No inf checks were recorded prior to update.");
  const ct_device dev = ct_device_of(s->scale);
  const cti_backend *be = cti_backend_for("ct_grad_scaler_update", dev);
  if (!be) return ct_last_status();
  rc = be->amp->update_scale(ct_data_ptr(s->scale), ct_data_ptr(s->tracker), ct_data_ptr(combined),
                             s->o.growth_factor, s->o.backoff_factor, s->o.growth_interval,
                             ct_data_ptr(s->skipped), ct_current_stream(dev));
  if (rc == CT_OK) refresh(s);
  return rc;
}

int ct_grad_scaler_update_to(ct_grad_scaler *s, double new_scale) {
  if (!s) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_update_to: NULL scaler");
  if (!s->o.enabled) return CT_OK;
  int rc = need_scale(s, "update");
  if (rc != CT_OK) return rc;
  if (!(new_scale > 0.0) || !isfinite((float)new_scale))
    return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_update_to: new_scale must be a positive float32, got %g", new_scale);
  rc = ct_fill_(s->scale, new_scale); // self._scale.fill_(new_scale)
  if (rc == CT_OK) refresh(s);
  return rc;
}

// One element of a (1,) device tensor as a double (waits for the device).
static int read_one(const ct_tensor *t, double *out) { return ct_item(t, out); }

int ct_grad_scaler_get_scale(const ct_grad_scaler *s, double *scale) {
  if (!s || !scale) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_get_scale: NULL argument");
  if (!s->o.enabled) return *scale = 1.0, CT_OK; // PyTorch: 1.0 when disabled
  if (!s->scale) return *scale = s->o.init_scale, CT_OK;
  return read_one(s->scale, scale);
}

int ct_grad_scaler_get_growth_tracker(const ct_grad_scaler *s, int64_t *tracker) {
  if (!s || !tracker) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_get_growth_tracker: NULL argument");
  if (!s->scale) return *tracker = s->init_growth_tracker, CT_OK;
  double v;
  int rc = read_one(s->tracker, &v);
  *tracker = (int64_t)v;
  return rc;
}

int ct_grad_scaler_skipped_steps(const ct_grad_scaler *s, int64_t *skipped) {
  if (!s || !skipped) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_skipped_steps: NULL argument");
  *skipped = 0;
  if (!s->skipped) return CT_OK;
  double v;
  int rc = read_one(s->skipped, &v);
  *skipped = (int64_t)v;
  return rc;
}

int ct_grad_scaler_state_dict(const ct_grad_scaler *s, ct_grad_scaler_state *out) {
  if (!s || !out) return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_state_dict: NULL argument");
  if (!s->o.enabled)
    return ct_fail(CT_ERR_VALUE, "ct_grad_scaler_state_dict: a disabled GradScaler has an empty state_dict");
  *out = (ct_grad_scaler_state){.growth_factor = s->o.growth_factor, .backoff_factor = s->o.backoff_factor,
                                .growth_interval = s->o.growth_interval};
  int rc = ct_grad_scaler_get_scale(s, &out->scale);
  if (rc == CT_OK) rc = ct_grad_scaler_get_growth_tracker(s, &out->growth_tracker);
  return rc;
}

int ct_grad_scaler_load_state_dict(ct_grad_scaler *s, const ct_grad_scaler_state *st) {
  static const char op[] = "ct_grad_scaler_load_state_dict";
  if (!s || !st) return ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
  if (!s->o.enabled)
    return ct_fail(CT_ERR_VALUE, "%s: Attempted to load_state_dict() on a disabled GradScaler", op);
  if (!(st->scale > 0.0) || !isfinite((float)st->scale) || !(st->growth_factor > 1.0) ||
      !(st->backoff_factor > 0.0 && st->backoff_factor < 1.0) || st->growth_interval < 1 ||
      st->growth_interval > INT32_MAX || st->growth_tracker < 0 || st->growth_tracker >= st->growth_interval)
    return ct_fail(CT_ERR_VALUE, "%s: not a GradScaler state: scale %g, growth_factor %g, backoff_factor %g, "
                   "growth_interval %" PRId64 ", _growth_tracker %" PRId64, op, st->scale, st->growth_factor,
                   st->backoff_factor, st->growth_interval, st->growth_tracker);
  s->o.init_scale = st->scale;
  s->o.growth_factor = st->growth_factor;
  s->o.backoff_factor = st->backoff_factor;
  s->o.growth_interval = st->growth_interval;
  s->init_growth_tracker = st->growth_tracker;
  int rc = CT_OK;
  if (s->scale) rc = ct_fill_(s->scale, st->scale);
  if (rc == CT_OK && s->tracker) rc = ct_fill_(s->tracker, (double)st->growth_tracker);
  return rc;
}

// ---- as safetensors metadata ----------------------------------------------------------------
static const char *const k_keys[CT_GRAD_SCALER_METADATA_KEYS] = {
    "scaler.scale", "scaler.growth_factor", "scaler.backoff_factor", "scaler.growth_interval",
    "scaler._growth_tracker"};

void ct_grad_scaler_state_to_metadata(const ct_grad_scaler_state *st, ct_grad_scaler_metadata *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->values[0], sizeof out->values[0], "%.17g", st->scale);
  snprintf(out->values[1], sizeof out->values[1], "%.17g", st->growth_factor);
  snprintf(out->values[2], sizeof out->values[2], "%.17g", st->backoff_factor);
  snprintf(out->values[3], sizeof out->values[3], "%" PRId64, st->growth_interval);
  snprintf(out->values[4], sizeof out->values[4], "%" PRId64, st->growth_tracker);
  for (int i = 0; i < CT_GRAD_SCALER_METADATA_KEYS; ++i) {
    out->pairs[2 * i] = k_keys[i];
    out->pairs[2 * i + 1] = out->values[i];
  }
  out->pairs[2 * CT_GRAD_SCALER_METADATA_KEYS] = NULL;
}

static const char *lookup(const char *const *pairs, const char *key) {
  for (int i = 0; pairs && pairs[i] && pairs[i + 1]; i += 2)
    if (strcmp(pairs[i], key) == 0) return pairs[i + 1];
  return NULL;
}

int ct_grad_scaler_state_from_metadata(const char *const *pairs, ct_grad_scaler_state *out) {
  static const char op[] = "ct_grad_scaler_state_from_metadata";
  if (!out) return ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
  double v[CT_GRAD_SCALER_METADATA_KEYS];
  for (int i = 0; i < CT_GRAD_SCALER_METADATA_KEYS; ++i) {
    const char *text = lookup(pairs, k_keys[i]);
    if (!text)
      return ct_fail(CT_ERR_VALUE, "%s: the checkpoint's metadata has no \"%s\" (was it saved with a "
                     "GradScaler's state?)", op, k_keys[i]);
    char *end = NULL;
    errno = 0;
    v[i] = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !isfinite(v[i]))
      return ct_fail(CT_ERR_VALUE, "%s: metadata \"%s\" is \"%s\", not a number", op, k_keys[i], text);
  }
  *out = (ct_grad_scaler_state){.scale = v[0], .growth_factor = v[1], .backoff_factor = v[2],
                                .growth_interval = (int64_t)v[3], .growth_tracker = (int64_t)v[4]};
  return CT_OK;
}
