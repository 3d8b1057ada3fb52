// SPDX-License-Identifier: MIT
//
// autocast: torch.amp.autocast's state, and the table of which dtype each
// op computes in under it (autocast_policy.h; amp.h says what the modules do).
//
// The state is per thread and per device type, as PyTorch's is: a CUDA
// autocast region on one thread changes nothing on another, and an autocast
// region for "cuda" leaves CPU tensors alone. Regions nest: enter pushes the
// state it found onto a small per-thread stack, exit pops it back.
//
// Invariant: between a thread's matching enter and exit the stack holds
// exactly the states to restore, innermost last; a failed enter pushes
// nothing, so a caller that checks the result pairs exits with successful
// enters only.
#include <stdbool.h>

#include "amp.h"
#include "autocast_policy.h"
#include "error.h"
#include "ops.h"

#define CT_AUTOCAST_MAX_DEPTH 16

typedef struct autocast_state {
  bool enabled[2]; // indexed by ct_device_type
  ct_dtype dtype[2];
} autocast_state;

typedef struct autocast_saved {
  ct_device_type type;
  bool enabled;
  ct_dtype dtype;
} autocast_saved;

// PyTorch's defaults: float16 on CUDA, bfloat16 on the CPU; off.
static _Thread_local autocast_state t_state = {{false, false}, {CT_BF16, CT_F16}};
static _Thread_local autocast_saved t_stack[CT_AUTOCAST_MAX_DEPTH];
static _Thread_local int t_depth;

static bool valid_type(ct_device_type t) { return t == CT_CPU || t == CT_CUDA; }

int ct_autocast_enter(ct_device_type device_type, ct_dtype dtype, bool enabled) {
  if (!valid_type(device_type))
    return ct_fail(CT_ERR_VALUE, "ct_autocast_enter: unsupported device type %d (cpu or cuda)", (int)device_type);
  if (dtype != CT_F16 && dtype != CT_BF16)
    return ct_fail(CT_ERR_DTYPE,
                   "ct_autocast_enter: autocast runs in float16 or bfloat16, got %s (float32 work "
                   "needs no autocast: pass enabled=false)",
                   ct_dtype_valid(dtype) ? ct_dtype_name(dtype) : "an invalid dtype");
  if (t_depth == CT_AUTOCAST_MAX_DEPTH)
    return ct_fail(CT_ERR_VALUE, "ct_autocast_enter: autocast regions nest %d deep at most (a missing "
                   "ct_autocast_exit?)", CT_AUTOCAST_MAX_DEPTH);
  t_stack[t_depth++] = (autocast_saved){device_type, t_state.enabled[device_type], t_state.dtype[device_type]};
  t_state.enabled[device_type] = enabled;
  t_state.dtype[device_type] = dtype;
  return CT_OK;
}

int ct_autocast_exit(void) {
  if (t_depth == 0)
    return ct_fail(CT_ERR_VALUE, "ct_autocast_exit: no autocast region to leave on this thread");
  const autocast_saved *s = &t_stack[--t_depth];
  t_state.enabled[s->type] = s->enabled;
  t_state.dtype[s->type] = s->dtype;
  return CT_OK;
}

bool ct_is_autocast_enabled(ct_device_type device_type) {
  return valid_type(device_type) && t_state.enabled[device_type];
}

ct_dtype ct_get_autocast_dtype(ct_device_type device_type) {
  return valid_type(device_type) ? t_state.dtype[device_type] : CT_F32;
}

// ---- the op table (autocast_policy.h) -------------------------------------------------------
// {CPU, CUDA}, from PyTorch 2.x's AutocastCPU and AutocastCUDA lists. Rows
// without an entry of their own there:
//   matmul    ct's attention multiplies with ct_bmm and softmaxes by the
//             softmax row, where torch's nanoGPT calls
//             scaled_dot_product_attention (lower_precision_fp on both lists,
//             one fused op): on the CPU ct's S, P and P v are then bfloat16,
//             as torch's attention written out (matmul, softmax, matmul)
//             under CPU autocast; on CUDA P is float32 and cast for P v, as
//             the fused kernels keep their softmax in float32;
//   cross_entropy  ct's loss is one op; CPU lists cross_entropy_loss, CUDA
//             the log_softmax and nll_loss it calls: float32 either way;
//   gelu, embedding, add  on no list of either device: the input's dtype
//             (embedding: its weight's; add: ordinary type promotion, as
//             add is not on CUDA's promote list).
const cti_autocast_rule cti_autocast_rules[CTI_AC_N_OPS] = {
    [CTI_AC_LINEAR] = {"linear", {CTI_AC_LOWER, CTI_AC_LOWER}},
    [CTI_AC_CONV2D] = {"conv2d", {CTI_AC_LOWER, CTI_AC_LOWER}},
    [CTI_AC_MATMUL] = {"matmul", {CTI_AC_LOWER, CTI_AC_LOWER}},
    [CTI_AC_LAYER_NORM] = {"layer_norm", {CTI_AC_FOLLOW, CTI_AC_FP32}},
    [CTI_AC_SOFTMAX] = {"softmax", {CTI_AC_FOLLOW, CTI_AC_FP32}},
    [CTI_AC_CROSS_ENTROPY] = {"cross_entropy", {CTI_AC_FP32, CTI_AC_FP32}},
    [CTI_AC_MSE_LOSS] = {"mse_loss", {CTI_AC_FP32, CTI_AC_FP32}},
    [CTI_AC_GELU] = {"gelu", {CTI_AC_FOLLOW, CTI_AC_FOLLOW}},
    [CTI_AC_EMBEDDING] = {"embedding", {CTI_AC_FOLLOW, CTI_AC_FOLLOW}},
    [CTI_AC_ADD] = {"add", {CTI_AC_FOLLOW, CTI_AC_FOLLOW}},
};

static bool is_half(ct_dtype dt) { return dt == CT_F16 || dt == CT_BF16; }

ct_dtype cti_autocast_dtype(cti_autocast_op op, ct_device d, ct_dtype dt) {
  if (op < 0 || op >= CTI_AC_N_OPS || !ct_is_autocast_enabled(d.type)) return dt;
  switch (cti_autocast_rules[op].policy[d.type]) {
  case CTI_AC_LOWER: // PyTorch casts "eligible" tensors only: floating and not float64
    return dt == CT_F32 || is_half(dt) ? t_state.dtype[d.type] : dt;
  case CTI_AC_FP32:
    return is_half(dt) ? CT_F32 : dt;
  case CTI_AC_FOLLOW:
    break;
  }
  return dt;
}

ct_tensor *cti_autocast_cast(cti_autocast_op op, const ct_tensor *t) {
  if (!t) {
    ct_fail(CT_ERR_VALUE, "autocast (%s): NULL tensor",
            op >= 0 && op < CTI_AC_N_OPS ? cti_autocast_rules[op].torch_name : "?");
    return NULL;
  }
  const ct_dtype want = cti_autocast_dtype(op, ct_device_of(t), ct_dtype_of(t));
  return want == ct_dtype_of(t) ? ct_retain((ct_tensor *)t) : ct_to_dtype(t, want);
}

// ---- the public questions, through the table ------------------------------------------------
ct_dtype ct_autocast_compute_dtype(ct_device d, ct_dtype dt) { return cti_autocast_dtype(CTI_AC_MATMUL, d, dt); }

bool ct_autocast_wants_f32(ct_device d, ct_dtype dt) {
  return is_half(dt) && cti_autocast_dtype(CTI_AC_CROSS_ENTROPY, d, dt) == CT_F32;
}

ct_tensor *ct_autocast_lower(const ct_tensor *t) { return cti_autocast_cast(CTI_AC_MATMUL, t); }
