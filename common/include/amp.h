// SPDX-License-Identifier: MIT
//
// amp: automatic mixed precision, torch.amp's two halves.
//
// Autocast (torch.amp.autocast(device_type, dtype)) is a per-thread state,
// one per device type, entered and left like a `with` block. While it is on
// for a device type, the modules working on tensors of that type follow
// PyTorch 2.x's autocast lists for that device type (autocast_policy.h; one
// row per op in the table of common/amp/autocast.c, one column per device
// type):
//   - lower precision: Linear, Conv2d and attention's matrix products
//     (q k^T and P v) cast their float32 input, weight and bias to the
//     autocast dtype (float16 or bfloat16) and multiply there, with float32
//     accumulation (cuBLAS GemmEx with f32 compute; oneDNN or a widening
//     sgemm on the CPU); their output has that dtype;
//   - float32: the losses (cross-entropy with its log-softmax, the language
//     model's ct_cross_entropy, MSE) and, on CUDA only, LayerNorm and
//     softmax (Softmax and attention's) compute in float32 from
//     lower-precision input and answer float32 (the losses' gradient too);
//     on the CPU those two answer in their input's dtype (computed in
//     float32, rounded once); BatchNorm2d computes its
//     statistics in float32 whatever its input (as PyTorch's mixed-precision
//     batch norm does) and returns the input's dtype;
//   - everything else (ReLU, GELU, pooling, Flatten, Dropout) runs in its
//     input's dtype, Embedding in its weight's, and a sum of a float32 and a
//     bfloat16 tensor (a residual) is float32, by ct_add's promotion.
// In backward each module casts a gradient that arrives in another dtype to
// its output's (as autograd's engine does) and hands dx back in its input's
// dtype, so a GPT written out module by module works unchanged under
// autocast (tests/unit/test_gpt_amp.c).
// Parameters stay float32 ("master weights") and so do their .grad: a
// module casts its weight for the forward, keeps the cast copy for the
// backward, and adds the low-precision gradient into the float32 .grad, as
// autograd does through the cast. float64 tensors are never cast.
//
// Invariant: autocast changes only what a module computes in, never what it
// stores: parameters, buffers and gradients keep their dtype, and a backward
// run outside the autocast region (where PyTorch recommends it) uses the
// dtypes its forward chose, saved in the module.
//
// GradScaler (torch.amp.GradScaler("cuda")) scales the loss so that small
// float16 gradients do not flush to zero, and undoes the scale before the
// optimizer sees them, with PyTorch's rules: scale 2^16 to start, x0.5 and
// a skipped step whenever a gradient holds an inf or NaN, x2 after 2000
// clean steps in a row. Scale, growth tracker and the found-inf flags live
// in the device's memory and are updated there: no step waits for the host.
// The optimizer skips on the device too (ct_optimizer_step_found_inf, what
// PyTorch's fused optimizers do), where PyTorch's default path reads the
// flag back with .item() once per step.
#ifndef CT_AMP_H
#define CT_AMP_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "optim.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- autocast ------------------------------------------------------------------------------
// `with torch.amp.autocast(device_type, dtype=dtype, enabled=enabled):` is
// ct_autocast_enter(...) ... ct_autocast_exit(). Blocks nest (up to 16
// deep); exit restores the state the matching enter found. dtype must be
// CT_F16 or CT_BF16 (PyTorch's CUDA default is float16, its CPU default
// bfloat16; both work on both device types here). The state is the calling
// thread's, as in PyTorch.
int ct_autocast_enter(ct_device_type device_type, ct_dtype dtype, bool enabled);
int ct_autocast_exit(void);
// torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type).
bool ct_is_autocast_enabled(ct_device_type device_type);
ct_dtype ct_get_autocast_dtype(ct_device_type device_type);
// What a lower-precision op does to one input: a float32, float16 or
// bfloat16 tensor on a device type where autocast is on comes back cast to
// the autocast dtype (PyTorch's "eligible" tensors); anything else, float64
// included, comes back as a new reference to itself. For code that writes
// its own layer with ct_matmul (and then owns the cast's backward).
ct_tensor *ct_autocast_lower(const ct_tensor *t);
// The dtype a lower-precision op on a tensor of dtype dt on device d runs in
// right now (dt itself when autocast does not apply).
ct_dtype ct_autocast_compute_dtype(ct_device d, ct_dtype dt);
// What a float32 op (a loss) does under autocast: true when a float16 or
// bfloat16 input on device d is to be computed, and answered, in float32.
bool ct_autocast_wants_f32(ct_device d, ct_dtype dt);

// ---- GradScaler ----------------------------------------------------------------------------
typedef struct ct_grad_scaler_options {
  double init_scale;       // 2^16
  double growth_factor;    // 2.0; must be > 1
  double backoff_factor;   // 0.5; must be in (0, 1)
  int64_t growth_interval; // 2000; must be >= 1
  bool enabled;            // false: every call passes through (scale returns its input)
} ct_grad_scaler_options;
ct_grad_scaler_options ct_grad_scaler_defaults(void);

typedef struct ct_grad_scaler ct_grad_scaler;

// torch.amp.GradScaler(device_type, ...). The scale tensor is made on the
// device of the first tensor scale() sees, as PyTorch does. Bad options
// fail with CT_ERR_VALUE in PyTorch's words.
ct_grad_scaler *ct_grad_scaler_create(ct_device_type device_type, ct_grad_scaler_options options);
void ct_grad_scaler_free(ct_grad_scaler *s);
bool ct_grad_scaler_is_enabled(const ct_grad_scaler *s);

// scaler.scale(outputs): outputs * scale, a new float tensor (outputs'
// shape). Backward from the scaled loss starts with scale * dL/d(output),
// so in ct, where the loss hands back dL/d(logits), that gradient is what
// gets scaled: ct_module_backward(model, ct_grad_scaler_scale(s, dlogits)).
ct_tensor *ct_grad_scaler_scale(ct_grad_scaler *s, const ct_tensor *outputs);
// scaler.unscale_(optimizer): every gradient of the optimizer's parameters
// is checked for inf/NaN (into this optimizer's found_inf, on the device)
// and multiplied by 1/scale, in place. Call it before clip_grad_norm_ so
// that the clipping sees true gradients. Once per optimizer per update().
int ct_grad_scaler_unscale_(ct_grad_scaler *s, ct_optimizer *opt);
// scaler.step(optimizer): unscales if unscale_ was not called, then runs the
// optimizer's step, which the device skips (writing nothing: weights and
// optimizer state stay bit for bit) when found_inf is set.
int ct_grad_scaler_step(ct_grad_scaler *s, ct_optimizer *opt);
// scaler.update(): from the found_inf flags of this iteration's optimizers,
// on the device (torch._amp_update_scale_): backoff and reset the tracker on
// an inf/NaN, else count a clean step and grow after growth_interval of
// them (unless growing would overflow float32). update_to is
// scaler.update(new_scale): the scale is set, the tracker kept.
int ct_grad_scaler_update(ct_grad_scaler *s);
int ct_grad_scaler_update_to(ct_grad_scaler *s, double new_scale);
// scaler.get_scale() and scaler._get_growth_tracker(): wait for the device.
int ct_grad_scaler_get_scale(const ct_grad_scaler *s, double *scale);
int ct_grad_scaler_get_growth_tracker(const ct_grad_scaler *s, int64_t *tracker);
// Steps skipped since the scaler was made (updates that saw an inf/NaN;
// counted on the device; not a PyTorch API). Waits for the device.
int ct_grad_scaler_skipped_steps(const ct_grad_scaler *s, int64_t *skipped);

// scaler.state_dict() / load_state_dict(): PyTorch's five entries.
typedef struct ct_grad_scaler_state {
  double scale, growth_factor, backoff_factor;
  int64_t growth_interval, growth_tracker; // "_growth_tracker"
} ct_grad_scaler_state;
int ct_grad_scaler_state_dict(const ct_grad_scaler *s, ct_grad_scaler_state *out); // waits
int ct_grad_scaler_load_state_dict(ct_grad_scaler *s, const ct_grad_scaler_state *st);

// The state as safetensors metadata (strings), keys "scaler.scale",
// "scaler.growth_factor", "scaler.backoff_factor", "scaler.growth_interval",
// "scaler._growth_tracker" (a torch checkpoint's {"scaler":
// scaler.state_dict()}, flattened); values with 17 significant digits, so
// they read back exactly. `pairs` is ct_save_safetensors's metadata
// argument; ct_grad_scaler_state_from_metadata reads what
// ct_load_safetensors_with_metadata returns (CT_ERR_VALUE naming a key that is
// missing or not a number).
#define CT_GRAD_SCALER_METADATA_KEYS 5
typedef struct ct_grad_scaler_metadata {
  const char *pairs[2 * CT_GRAD_SCALER_METADATA_KEYS + 1]; // key, value, ..., NULL
  char values[CT_GRAD_SCALER_METADATA_KEYS][40];
} ct_grad_scaler_metadata;
void ct_grad_scaler_state_to_metadata(const ct_grad_scaler_state *st, ct_grad_scaler_metadata *out);
int ct_grad_scaler_state_from_metadata(const char *const *pairs, ct_grad_scaler_state *out);

// ---- bfloat16 matrix products on the CPU -----------------------------------------------------
// PyTorch's CPU autocast multiplies bf16 through oneDNN; so does ct where
// the build found oneDNN (libdnnl-dev) and the CPU has AVX-512 BF16 (or AMX).
// Elsewhere a bf16 product widens to float32 and runs OpenBLAS's sgemm.
bool ct_cpu_bf16_native_available(void);
// Switches the oneDNN path off (and on again), for measuring the fallback.
void ct_cpu_bf16_native_set_enabled(bool enabled);
bool ct_cpu_bf16_native_enabled(void);
// One line naming the path bf16 products take now, e.g. "oneDNN 2.6.3
// matmul, AVX-512 BF16, kernel brg:avx512_core_bf16" (the kernel of this
// thread's last product), or the fallback and why.
const char *ct_cpu_bf16_gemm_info(void);

#ifdef __cplusplus
}
#endif
#endif
