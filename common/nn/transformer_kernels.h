// SPDX-License-Identifier: MIT
//
// transformer_kernels: the loops behind a GPT's layers (internal), each on
// the CPU (cpu_transformer.c) and on CUDA (kernels/transformer.cu):
// Embedding, LayerNorm, GELU, the (causal, scaled) softmax of attention and
// the language model's cross-entropy. Entry `x` is the static function `x`
// of cpu/cpu_transformer.c and the static `cuda_x` of kernels/transformer.cu
// (core/oplist.h builds both tables from CTI_TRANSFORMER_OPS below), so a
// reader goes from a call be->transformer->x straight to those two files.
//
// The modules (nn_embedding.c, nn_layernorm.c, nn_gelu.c, nn_attention.c,
// nn_loss.c) check shapes, dtypes and devices, make the operands
// contiguous, allocate the results, run the matrix products through the
// device's batched GEMM (OpenBLAS or cuBLAS) and call the entry of the
// tensors' backend (cti_backend_for(op, dev)->transformer); an entry only
// runs its loop. Every pointer is element 0 of a contiguous buffer on the
// entry's device; CUDA entries queue their work on stream `s` and return,
// the CPU ones run at once and ignore it. Each returns CT_OK or a status
// recorded with ct_fail (an unsupported dtype is CT_ERR_DTYPE). The entries
// take plain values only (sizes, flags, pointers), so a recorder can stand
// in for each one.
//
// What each computes. "Rows" are the leading dimensions flattened, "sums"
// are over a row unless said, A is the accumulation type: double on the CPU,
// the compute type on CUDA (float for f32, f16 and bf16; double for f64),
// so the two devices agree to rounding, not to the bit, except where said.
//
//  embedding (dt: f32 f64 f16 bf16): out (n, c)[i] = weight (v, c)[idx[i]].
//    On the CPU *bad gets the first i whose index lies outside [0, v) (then
//    out holds nothing meaningful), else -1. The CUDA entry leaves *bad at
//    -1: the kernel reports a bad index to the device's async_error record
//    (its row becomes NaN) and the error surfaces at the next call that waits
//    for the device, as PyTorch's device-side assert.
//  embedding_backward: dweight (v, c)[r] = sum of dout (n, c)[i] over the i
//    with idx[i] == r, in ascending i, in the compute type (0 where no index
//    is r). Each element of dweight is owned by one thread, which adds the
//    rows naming it in ascending i, so no two threads add into one place and
//    the bits do not depend on the schedule: the CPU and CUDA give the same
//    bits. On CUDA the owner walks all n indices (v*n index reads: right for
//    character vocabularies and position tables, not for a 50,000-token
//    vocabulary, which would want the positions sorted first); the CPU first
//    lists each row's positions with a stable counting sort.
//  layernorm (f32 f64): per row of x (n, c): mean = sum x / c, var = sum
//    (x - mean)^2 / c (two passes, biased), rstd = 1 / sqrt(var + eps),
//    y = (x - mean) * rstd * w + b; mean (n) and rstd (n) are saved in dt.
//  layernorm_backward: xhat = (x - mean) * rstd, g = dy * w;
//    dx = rstd * (g - sum g / c - xhat * sum (g * xhat) / c);
//    dw = sum over rows of dy * xhat, db = sum over rows of dy, written
//    (not added). The column sums are deterministic: on CUDA rows are cut
//    into chunks of CTI_LN_CHUNK rows, one thread sums a chunk of one column
//    into `work` (cti_layernorm_work_bytes), a second pass adds the chunks
//    in order; the CPU sums each column over all rows in double and needs
//    no work (it may be NULL there).
//  gelu (f32 f64 f16 bf16): dy NULL: out = gelu(x); else out = dy * gelu'(x).
//    tanh_approx: gelu(x) = x/2 (1 + tanh(k (x + 0.044715 x^3))), k =
//    sqrt(2/pi) (torch.nn.GELU(approximate="tanh")); else x/2 (1 +
//    erf(x / sqrt 2)) (approximate="none"). n elements.
//  softmax (f32 f64): over rows of `cols`: z_j = scale * x_j; y_j =
//    exp(z_j - max z) / sum exp(z - max z). causal: row r is query
//    t = r mod cols of a (cols x cols) score matrix and keys j > t are
//    masked: they take no part in max and sum and get y_j = 0 (attention's
//    masked_fill(-inf) then softmax). A row whose values are all -inf gives
//    NaN, as torch.
//  softmax_backward: dx_j = scale * y_j * (dy_j - sum_k y_k dy_k) (masked
//    entries have y_j = 0, so dx_j = 0).
//  cross_entropy (f32 f64): logits (n, v), target (n) int64. count = the
//    number of rows whose target is not ignore_index; *scale (one element of
//    dt on the device) := 1 / count (inf when 0, so the mean is NaN, as
//    torch). Per row i: an ignored row gets loss_rows[i] = 0 and a zero
//    gradient row; else loss_rows[i] = logsumexp(x_i) - x_i[t] (max-shifted)
//    and, when grad is not NULL, grad[i, j] = (softmax(x_i)_j - [j == t]) *
//    (1 / count). The loss is sum(loss_rows) * *scale. On the CPU *bad gets
//    the first row whose target is neither ignore_index nor in [0, v) (the
//    outputs then mean nothing), else -1; on CUDA a bad row is reported to
//    the async_error record and becomes NaN.
#ifndef CT_TRANSFORMER_KERNELS_H
#define CT_TRANSFORMER_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "hostdev.h"
#include "oplist.h"
#include "stream.h"
#include "vecmath.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- GELU's float math, one definition for both devices --------------------------------------
// The CPU loop (cpu_transformer.c) and the CUDA functor (kernels/
// transformer.cuh) compute float GELU (f32, and f16/bf16 whose math type is
// float) with the functions below, so the two devices run one formula.
// They call no libm function, so GCC vectorizes the CPU loop.
//
// tanh_approx: 0.5 x (1 + tanh(u)) = x s with s = sigmoid(2u) = 1 / (1 +
// exp(-2u)), u = k (x + 0.044715 x^3): the same function, written so that no
// 1 + tanh cancels for negative x (x s keeps its relative accuracy down to
// the float underflow). The slope is s + 2 k x s (1 - s) (1 + 3 0.044715 x^2).
//
// exp is cti_expf of core/vecmath.h (within 1.5 ulp; special values as
// C's), whose notes say how every product and sum is rounded on its own so
// that the host and CUDA give the same bits for the same input.

// GELU(approximate="tanh") and its slope, in float.
static inline CTI_HD float cti_gelu_tanh_sigmoid(float x, float *e_out) {
  // s = 1 / (1 + exp(z)), z = -2u = x (-2k - 2k 0.044715 x^2)
  const float z = CTI_FMUL(x, CTI_FADD(-1.5957691216057308f, CTI_FMUL(-0.07135481627260025f, CTI_FMUL(x, x))));
  const float e = cti_expf(z);
  *e_out = e;
  return CTI_FDIV(1.0f, CTI_FADD(1.0f, e));
}
static inline CTI_HD float cti_gelu_tanh_valuef(float x) {
  float e;
  return CTI_FMUL(x, cti_gelu_tanh_sigmoid(x, &e));
}
static inline CTI_HD float cti_gelu_tanh_slopef(float x) {
  float e;
  const float s = cti_gelu_tanh_sigmoid(x, &e);
  // 1 - s = e s: exact in relative terms where e <= 1; 1 - s where s < 1/2
  const float oms = e > 1.0f ? CTI_FSUB(1.0f, s) : CTI_FMUL(e, s);
  // Beyond |x| = 20 the second term is 0 (s or 1 - s is), so x is clamped
  // there to keep x^2 finite: huge x give the limits 1 and 0, as float64
  // does, and so do x = +-inf (where torch and float64 give NaN).
  float xc = x < 20.0f ? x : 20.0f;
  xc = xc > -20.0f ? xc : -20.0f;
  // du/dx * 2 = 2k (1 + 3 0.044715 x^2)
  const float d = CTI_FADD(1.5957691216057308f, CTI_FMUL(0.21406444881780076f, CTI_FMUL(xc, xc)));
  return CTI_FADD(s, CTI_FMUL(CTI_FMUL(CTI_FMUL(xc, s), oms), d));
}

// Rows per chunk of layernorm_backward's column sums on CUDA.
#define CTI_LN_CHUNK 32

// Bytes of `work` layernorm_backward needs for (n, c) rows of dtype dt: two
// (chunks, c) arrays of the accumulation type.
static inline int64_t cti_layernorm_work_bytes(ct_dtype dt, int64_t n, int64_t c) {
  const int64_t chunks = (n + CTI_LN_CHUNK - 1) / CTI_LN_CHUNK;
  return 2 * chunks * c * (dt == CT_F64 ? 8 : 4);
}

// The family's table: one signature on both devices. A backend reaches it
// as cti_backend_for(op, dev)->transformer.
// The range names are aten's: embedding, embedding_dense_backward,
// native_layer_norm(_backward), gelu(_backward), _softmax,
// _softmax_backward_data; the LM loss is cross_entropy, as the nn family's.
#define CTI_TRANSFORMER_OPS(X)                                                                       \
  X(transformer, embedding, BAD, int, "embedding", CTI_SH_2_1(v, c, n), ARG(ct_dtype, dt),          \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, v), ARG(const int64_t *, idx),                    \
    ARG(const void *, weight), ARG(void *, out), ARG_BAD(int64_t, bad))                              \
  X(transformer, embedding_backward, OP, int, "embedding_dense_backward", CTI_SH_2_1(n, c, n),      \
    ARG(ct_dtype, dt), ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, v), ARG(const int64_t *, idx),  \
    ARG(const void *, dout), ARG(void *, dweight))                                                   \
  X(transformer, layernorm, OP, int, "native_layer_norm", CTI_SH_2(n, c), ARG(ct_dtype, dt),        \
    ARG(int64_t, n), ARG(int64_t, c), ARG(const void *, x), ARG(const void *, w),                    \
    ARG(const void *, b), ARG(double, eps), ARG(void *, y), ARG(void *, mean), ARG(void *, rstd))     \
  X(transformer, layernorm_backward, OP, int, "native_layer_norm_backward", CTI_SH_2(n, c),         \
    ARG(ct_dtype, dt), ARG(int64_t, n), ARG(int64_t, c), ARG(const void *, x), ARG(const void *, dy), \
    ARG(const void *, mean), ARG(const void *, rstd), ARG(const void *, w), ARG(void *, dx),          \
    ARG(void *, dw), ARG(void *, db), ARG(void *, work))                                             \
  X(transformer, gelu, OP, int, dy ? "gelu_backward" : "gelu", CTI_SH_1(n), ARG(ct_dtype, dt),       \
    ARG(bool, tanh_approx), ARG(int64_t, n), ARG(const void *, x), ARG(const void *, dy),            \
    ARG(void *, out))                                                                                \
  X(transformer, softmax, OP, int, "_softmax", CTI_SH_2(rows, cols), ARG(ct_dtype, dt),              \
    ARG(int64_t, rows), ARG(int64_t, cols), ARG(bool, causal), ARG(double, scale),                   \
    ARG(const void *, x), ARG(void *, y))                                                            \
  X(transformer, softmax_backward, OP, int, "_softmax_backward_data", CTI_SH_2(rows, cols),         \
    ARG(ct_dtype, dt), ARG(int64_t, rows), ARG(int64_t, cols), ARG(double, scale),                   \
    ARG(const void *, y), ARG(const void *, dy), ARG(void *, dx))                                    \
  X(transformer, cross_entropy, BAD, int, "cross_entropy", CTI_SH_2_1(n, v, n), ARG(ct_dtype, dt),  \
    ARG(int64_t, n), ARG(int64_t, v), ARG(const void *, logits), ARG(const int64_t *, target),        \
    ARG(int64_t, ignore_index), ARG(void *, loss_rows), ARG(void *, grad), ARG(void *, scale),        \
    ARG_BAD(int64_t, bad))
typedef struct cti_transformer_kernels {
  CTI_TRANSFORMER_OPS(CTI_OP_FIELD)
} cti_transformer_kernels;

extern const cti_transformer_kernels cti_cpu_transformer_kernels;  // cpu_transformer.c
extern const cti_transformer_kernels cti_cuda_transformer_kernels; // kernels/transformer.cu

#ifdef __cplusplus
}
#endif
#endif
