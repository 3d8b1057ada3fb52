// SPDX-License-Identifier: MIT
//
// ops: the math, each on the CPU and on CUDA behind one dispatcher (ops.c).
//
// A public op checks its arguments (same device, dtypes it supports, shapes
// that broadcast), works out the result's shape and dtype the way PyTorch
// does, and hands the work to the backend of the tensors' device
// (backend.h). It never aborts: on bad input it returns NULL (or non-zero)
// with a message that names the op and the values at fault.
//
// Broadcasting follows NumPy/PyTorch: shapes are aligned from the right and a
// dim of size 1 stretches. Mixed dtypes promote as torch.promote_types does;
// a Python-style scalar does not change a tensor's dtype, except that a float
// scalar with an integer tensor gives float32.
#ifndef CT_OPS_H
#define CT_OPS_H

#include <stdbool.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_binary_op {
  CT_OP_ADD, CT_OP_SUB, CT_OP_MUL, CT_OP_DIV, CT_OP_MAXIMUM, CT_OP_MINIMUM, CT_OP_POW,
  CT_OP_EQ, CT_OP_NE, CT_OP_LT, CT_OP_LE, CT_OP_GT, CT_OP_GE, // give CT_BOOL
  CT_NUM_BINARY_OPS
} ct_binary_op;

typedef enum ct_unary_op {
  CT_OP_NEG, CT_OP_ABS, CT_OP_EXP, CT_OP_LOG, CT_OP_SQRT, CT_OP_RELU,
  CT_OP_SIGMOID, CT_OP_TANH,
  CT_OP_ISFINITE, // gives CT_BOOL
  CT_NUM_UNARY_OPS
} ct_unary_op;

typedef enum ct_reduce_op { CT_OP_SUM, CT_OP_MEAN, CT_OP_MAX, CT_OP_ARGMAX, CT_NUM_REDUCE_OPS } ct_reduce_op;

const char *ct_binary_op_name(ct_binary_op op); // "add"
const char *ct_unary_op_name(ct_unary_op op);   // "exp"

// ---- elementwise ------------------------------------------------------------
ct_tensor *ct_binary(ct_binary_op op, const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_binary_scalar(ct_binary_op op, const ct_tensor *a, double s); // a op s
// out = a op b in place of `out`; out must already have the broadcast shape and
// the result dtype, on the same device. `out` may alias a or b.
int ct_binary_out(ct_binary_op op, ct_tensor *out, const ct_tensor *a, const ct_tensor *b);
int ct_binary_scalar_out(ct_binary_op op, ct_tensor *out, const ct_tensor *a, double s);

ct_tensor *ct_add(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_sub(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_mul(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_div(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_maximum(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_minimum(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_pow(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_add_scalar(const ct_tensor *a, double s);
ct_tensor *ct_sub_scalar(const ct_tensor *a, double s);
ct_tensor *ct_mul_scalar(const ct_tensor *a, double s);
ct_tensor *ct_div_scalar(const ct_tensor *a, double s);
ct_tensor *ct_pow_scalar(const ct_tensor *a, double s);
ct_tensor *ct_eq(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_ne(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_lt(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_le(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_gt(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_ge(const ct_tensor *a, const ct_tensor *b);

ct_tensor *ct_unary(ct_unary_op op, const ct_tensor *a);
int ct_unary_out(ct_unary_op op, ct_tensor *out, const ct_tensor *a);
ct_tensor *ct_neg(const ct_tensor *a);
ct_tensor *ct_abs(const ct_tensor *a);
ct_tensor *ct_exp(const ct_tensor *a);
ct_tensor *ct_log(const ct_tensor *a);
ct_tensor *ct_sqrt(const ct_tensor *a);
ct_tensor *ct_relu(const ct_tensor *a);
ct_tensor *ct_sigmoid(const ct_tensor *a);
ct_tensor *ct_tanh(const ct_tensor *a);
ct_tensor *ct_isfinite(const ct_tensor *a);
// One device-side check and one small copy: *out = any element is inf/NaN.
int ct_any_nonfinite(const ct_tensor *a, bool *out);
// The check that stays on the device, for the GradScaler and CUDA graph
// capture (PyTorch's _amp_foreach_non_finite_check_and_unscale_ writes the
// same found_inf, without the unscale): found_inf, a one-element f32 tensor
// on t's device, is set to 1 when t holds an inf or NaN and is never cleared
// (zero it once per step; check many tensors into it). Queued on the current
// stream; the host does not wait, so read found_inf after a synchronize.
int ct_amp_non_finite_check_(const ct_tensor *t, ct_tensor *found_inf);

// ---- reductions ---------------------------------------------------------------
// Over all elements: a 0-d tensor. sum of bool/integers gives int64 (as
// torch.sum); mean needs a floating dtype; argmax gives int64 (flat index).
ct_tensor *ct_sum(const ct_tensor *a);
ct_tensor *ct_mean(const ct_tensor *a);
ct_tensor *ct_max(const ct_tensor *a);
ct_tensor *ct_argmax(const ct_tensor *a);
// Over one dim (negative counts from the end); keepdim keeps it as size 1.
ct_tensor *ct_sum_dim(const ct_tensor *a, int dim, bool keepdim);
ct_tensor *ct_mean_dim(const ct_tensor *a, int dim, bool keepdim);
// torch.max(a, dim): values, and indices (int64) if `indices` is not NULL.
ct_tensor *ct_max_dim(const ct_tensor *a, int dim, bool keepdim, ct_tensor **indices);
ct_tensor *ct_argmax_dim(const ct_tensor *a, int dim, bool keepdim);
// The first maximum wins ties; NaN is the maximum if present (as in PyTorch).

// ---- matrix products (OpenBLAS on the CPU, cuBLAS on CUDA) ------------------------
// f32, f64, f16 and bf16; f16/bf16 inputs accumulate in f32 and give their
// own dtype back. torch.matmul rules for 1-d to 3-d operands: (n,k)@(k,m),
// (b,n,k)@(b,k,m), (b,n,k)@(k,m), (n,k)@(b,k,m), vectors as in torch.
ct_tensor *ct_matmul(const ct_tensor *a, const ct_tensor *b);
ct_tensor *ct_mm(const ct_tensor *a, const ct_tensor *b);  // 2-d only
ct_tensor *ct_bmm(const ct_tensor *a, const ct_tensor *b); // 3-d only
// out (n,m) = alpha * op(a) @ op(b) + beta * out, 2-d, out contiguous.
int ct_addmm_(ct_tensor *out, const ct_tensor *a, const ct_tensor *b, double alpha, double beta);
// Whether f32 matmuls may use TF32 tensor cores on CUDA (default false, like
// torch.backends.cuda.matmul.allow_tf32).
void ct_set_allow_tf32(bool allow);
bool ct_get_allow_tf32(void);

#ifdef __cplusplus
}
#endif
#endif
