// SPDX-License-Identifier: MIT
//
// backend: what a device must provide to run the ops (internal).
//
// The dispatcher in ops.c does everything that does not depend on the device:
// it checks arguments, broadcasts, promotes dtypes, allocates the result and
// describes the loop as a cti_iter. A backend only runs loops. So the CPU and
// CUDA backends agree by construction on shapes, dtypes and errors, and a
// test that compares them compares only arithmetic.
//
// Pointers handed to a backend are element 0 of each operand (offset already
// applied). Element strides in a cti_iter may be 0 (a broadcast operand) and
// are never negative. Every function returns CT_OK or a ct_status with the
// error recorded (ct_fail), and issues its work on stream `s` (the CPU runs
// it at once).
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "ops.h"
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// The loop over an elementwise op's output: element with multi-index
// (i0..in-1) of `shape` reads operand k at sum(ij * stride[k][j]).
// Operand 0 is the output, 1 and 2 the inputs. cti_iter_build merges dims that
// are contiguous in every operand, so a contiguous op has ndim == 1.
typedef struct cti_iter {
  int ndim;      // 0..CT_MAX_DIMS; 0 means a single element
  int noperands; // 2 or 3
  int64_t numel;
  int64_t shape[CT_MAX_DIMS];
  int64_t stride[3][CT_MAX_DIMS];
  bool contiguous; // ndim <= 1 and every stride is 1 (or the single element)
} cti_iter;

// Builds the loop for `noperands` tensors already of the same shape `shape`
// (broadcast operands carry stride 0). stride[k] are the operands' strides.
void cti_iter_build(cti_iter *it, int ndim, const int64_t *shape, int noperands,
                   const int64_t *const strides[3]);
// Offset (elements) of operand k for linear output index `i` (row-major).
static inline int64_t cti_iter_offset(const cti_iter *it, int k, int64_t i) {
  int64_t off = 0;
  for (int d = it->ndim - 1; d >= 0; --d) {
    int64_t idx = i % it->shape[d];
    i /= it->shape[d];
    off += idx * it->stride[k][d];
  }
  return off;
}

// The op families' kernel tables (nn_kernels.h, conv_kernels.h,
// optim_kernels.h, transformer_kernels.h): each family's entries have one signature on every device,
// so the family's code calls cti_backend_for(op, dev)->conv->im2col(...) and
// never asks which device it is on.
struct cti_nn_kernels;
struct cti_conv_kernels;
struct cti_optim_kernels;
struct cti_transformer_kernels;
struct cti_amp_kernels;

typedef struct cti_backend {
  const char *name;
  // out = a op b. a and b have dtype dt; out has dt, or CT_BOOL for the
  // comparisons. For CT_OP_DIV on integers the dispatcher promotes to float
  // first, so backends see DIV only on floating dtypes. POW likewise.
  int (*binary)(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                const void *a, const void *b, ct_stream *s);
  // out = a op scalar (it has 2 operands: out, a).
  int (*binary_scalar)(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                       const void *a, double scalar, ct_stream *s);
  // out = op(a); out has dt, or CT_BOOL for CT_OP_ISFINITE. Exp, log, sqrt,
  // sigmoid, tanh come only with floating dt.
  int (*unary)(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out,
               const void *a, ct_stream *s);
  // out = (out_dt) in, elementwise over it (2 operands: out, in); any pair of
  // dtypes; float->int truncates toward zero; to bool is != 0.
  int (*copy)(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out,
              const void *in, ct_stream *s);
  // Every element of out := v (it has 1 operand used: stride[0]).
  int (*fill)(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s);
  // out[i] = start + i * step, contiguous, n elements.
  int (*arange)(ct_dtype dt, int64_t n, void *out, double start, double step, ct_stream *s);
  // Contiguous out of n elements from Philox (random.h gives the exact
  // recipe): uniform if !normal, else standard normal. Floating dt only.
  int (*random)(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed,
                uint64_t offset, ct_stream *s);
  // Contiguous input of in_dt viewed as (outer, r, inner), reduced over r
  // into contiguous out (outer, inner) of out_dt (r >= 1):
  //   SUM, MEAN: out_dt is the accumulation's result dtype (floating inputs
  //     accumulate in f32, or f64 for f64; integers in i64);
  //   MAX: out_dt == in_dt; `idx` (int64, may be NULL) gets the argmax;
  //   ARGMAX: out is int64 (out_dt CT_I64), idx unused.
  // Ties: the first index wins; a NaN wins over numbers (first NaN).
  int (*reduce)(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in,
                void *out, int64_t *idx, int64_t outer, int64_t r, int64_t inner,
                ct_stream *s);
  // *out := any element of the contiguous input is inf or NaN. Waits.
  int (*any_nonfinite)(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s);
  // *found := 1.0f when an element of the contiguous input is inf or NaN,
  // else untouched; found is one f32 on the device. Queued on s, no wait.
  int (*found_nonfinite)(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s);
  // Row-major batched GEMM, batch >= 1:
  //   C[b] (m,n) = alpha * op(A[b]) (m,k) @ op(B[b]) (k,n) + beta * C[b]
  // op(X) is X, or X transposed when tX. lda/ldb/ldc are row strides of the
  // matrices as stored (elements); strideX the distance between batches
  // (0 = the same matrix for every batch). dt is f32, f64, f16 or bf16 for
  // A, B and C alike; f16/bf16 accumulate in f32.
  int (*gemm)(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
              double alpha, const void *A, int64_t lda, int64_t strideA,
              const void *B, int64_t ldb, int64_t strideB, double beta, void *C,
              int64_t ldc, int64_t strideC, int64_t batch, ct_stream *s);
  const struct cti_nn_kernels *nn;       // ReLU backward, dropout, cross-entropy
  const struct cti_conv_kernels *conv;   // im2col/col2im, max pooling, batch norm
  const struct cti_optim_kernels *optim; // SGD/Adam updates, clip_grad_norm_'s pieces
  // Embedding, LayerNorm, GELU, attention's softmax, the LM cross-entropy
  const struct cti_transformer_kernels *transformer;
  const struct cti_amp_kernels *amp;     // GradScaler's scale update
} cti_backend;

extern const cti_backend cti_cpu_backend;
#ifdef CT_HAVE_CUDA
extern const cti_backend cti_cuda_backend;
#endif
// The backend for a device, or NULL + an error naming `op` when that device
// has none (CUDA asked for in a CPU-only build, or no GPU).
const cti_backend *cti_backend_for(const char *op, ct_device d);

// ops.c's shared checks, for the JIT's dispatcher: broadcasting by
// PyTorch's rules and message, and "expected all tensors to be on the same
// device, but found ...".
int cti_broadcast_shapes(const char *op, ct_shape a, ct_shape b, ct_shape *out);
int cti_same_device(const char *op, const ct_tensor *a, const ct_tensor *b);

// Copies nbytes between any two devices (host<->device, device<->device,
// host<->host). Waits for the copy unless non_blocking, where the copy is
// issued on `s` (the current stream of the CUDA side when NULL).
int cti_memcpy(ct_device dst_dev, void *dst, ct_device src_dev, const void *src,
              size_t nbytes, bool non_blocking, ct_stream *s);

#ifdef __cplusplus
}
#endif
#endif
