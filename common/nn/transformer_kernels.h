// SPDX-License-Identifier: MIT
//
// transformer_kernels: the loops behind a GPT's layers (internal), each on
// the CPU (cpu_transformer.c) and on CUDA (kernels/transformer.cu):
// Embedding, LayerNorm, GELU, the (causal, scaled) softmax of attention and
// the language model's cross-entropy.
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
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

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
typedef struct cti_transformer_kernels {
  int (*embedding)(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                   const void *weight, void *out, int64_t *bad, ct_stream *s);
  int (*embedding_backward)(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                            const void *dout, void *dweight, ct_stream *s);
  int (*layernorm)(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *w, const void *b,
                   double eps, void *y, void *mean, void *rstd, ct_stream *s);
  int (*layernorm_backward)(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *dy,
                            const void *mean, const void *rstd, const void *w, void *dx, void *dw,
                            void *db, void *work, ct_stream *s);
  int (*gelu)(ct_dtype dt, bool tanh_approx, int64_t n, const void *x, const void *dy, void *out,
              ct_stream *s);
  int (*softmax)(ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale, const void *x,
                 void *y, ct_stream *s);
  int (*softmax_backward)(ct_dtype dt, int64_t rows, int64_t cols, double scale, const void *y,
                          const void *dy, void *dx, ct_stream *s);
  int (*cross_entropy)(ct_dtype dt, int64_t n, int64_t v, const void *logits, const int64_t *target,
                       int64_t ignore_index, void *loss_rows, void *grad, void *scale, int64_t *bad,
                       ct_stream *s);
} cti_transformer_kernels;

extern const cti_transformer_kernels cti_cpu_transformer_kernels;  // cpu_transformer.c
extern const cti_transformer_kernels cti_cuda_transformer_kernels; // kernels/transformer.cu

#ifdef __cplusplus
}
#endif
#endif
