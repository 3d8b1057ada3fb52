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

#include "oplist.h"
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

// The plain ops' entries (oplist.h says how a list is read and what it
// generates):
//  binary: out = a op b. a and b have dtype dt; out has dt, or CT_BOOL for
//    the comparisons. For CT_OP_DIV on integers the dispatcher promotes to
//    float first, so backends see DIV only on floating dtypes. POW likewise.
//  binary_scalar: out = a op scalar (it has 2 operands: out, a).
//  unary: out = op(a); out has dt, or CT_BOOL for CT_OP_ISFINITE. Exp, log,
//    sqrt, sigmoid, tanh come only with floating dt.
//  copy: out = (out_dt) in, elementwise over it (2 operands: out, in); any
//    pair of dtypes; float->int truncates toward zero; to bool is != 0.
//  fill: every element of out := v (it has 1 operand used: stride[0]).
//  arange: out[i] = start + i * step, contiguous, n elements.
//  random: contiguous out of n elements from Philox (random.h gives the
//    exact recipe): uniform if !normal, else standard normal. Floating dt.
//  reduce: contiguous input of in_dt viewed as (outer, r, inner), reduced
//    over r into contiguous out (outer, inner) of out_dt (r >= 1):
//      SUM, MEAN: out_dt is the accumulation's result dtype (floating inputs
//        accumulate in f32, or f64 for f64; integers in i64);
//      MAX: out_dt == in_dt; `idx` (int64, may be NULL) gets the argmax;
//      ARGMAX: out is int64 (out_dt CT_I64), idx unused.
//    Ties: the first index wins; a NaN wins over numbers (first NaN).
//  any_nonfinite: *out := any element of the contiguous input is inf or
//    NaN. Waits.
//  found_nonfinite: *found := 1.0f when an element of the contiguous input
//    is inf or NaN, else untouched; found is one f32 on the device. Queued
//    on s, no wait.
//  gemm: row-major batched GEMM, batch >= 1:
//      C[b] (m,n) = alpha * op(A[b]) (m,k) @ op(B[b]) (k,n) + beta * C[b]
//    op(X) is X, or X transposed when tX. lda/ldb/ldc are row strides of
//    the matrices as stored (elements); strideX the distance between batches
//    (0 = the same matrix for every batch). dt is f32, f64, f16 or bf16 for
//    A, B and C alike; f16/bf16 accumulate in f32.
#define CTI_CORE_OPS(X)                                                                              \
  X(core, binary, OP, int, ct_binary_op_name(op), CTI_SH_ITER(it, 2), ARG(ct_binary_op, op),         \
    ARG(ct_dtype, dt), ARG_COPY(cti_iter, it), ARG(void *, out), ARG(const void *, a),               \
    ARG(const void *, b))                                                                            \
  X(core, binary_scalar, OP, int, ct_binary_op_name(op), CTI_SH_ITER(it, 1), ARG(ct_binary_op, op),  \
    ARG(ct_dtype, dt), ARG_COPY(cti_iter, it), ARG(void *, out), ARG(const void *, a),               \
    ARG(double, scalar))                                                                             \
  X(core, unary, OP, int, ct_unary_op_name(op), CTI_SH_ITER(it, 1), ARG(ct_unary_op, op),            \
    ARG(ct_dtype, dt), ARG_COPY(cti_iter, it), ARG(void *, out), ARG(const void *, a))               \
  X(core, copy, OP, int, "copy", CTI_SH_ITER(it, 1), ARG(ct_dtype, out_dt), ARG(ct_dtype, in_dt),    \
    ARG_COPY(cti_iter, it), ARG(void *, out), ARG(const void *, in))                                 \
  X(core, fill, OP, int, "fill", CTI_SH_ITER(it, 1), ARG(ct_dtype, dt), ARG_COPY(cti_iter, it),      \
    ARG(void *, out), ARG(double, v))                                                                \
  X(core, arange, OP, int, "arange", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),                \
    ARG(void *, out), ARG(double, start), ARG(double, step))                                         \
  X(core, random, OP, int, normal ? "normal" : "uniform", CTI_SH_1(n), ARG(bool, normal),           \
    ARG(ct_dtype, dt), ARG(int64_t, n), ARG(void *, out), ARG(uint64_t, seed),                       \
    ARG(uint64_t, offset))                                                                           \
  X(core, reduce, OP, int, cti_reduce_op_name(op), CTI_SH_3(outer, r, inner), ARG(ct_reduce_op, op), \
    ARG(ct_dtype, in_dt), ARG(ct_dtype, out_dt), ARG(const void *, in), ARG(void *, out),            \
    ARG(int64_t *, idx), ARG(int64_t, outer), ARG(int64_t, r), ARG(int64_t, inner))                  \
  X(core, any_nonfinite, WAIT, int, "any_nonfinite", CTI_SH_1(n), ARG(ct_dtype, dt),                 \
    ARG(int64_t, n), ARG(const void *, in), ARG(bool *, out))                                        \
  X(core, found_nonfinite, OP, int, "found_nonfinite", CTI_SH_1(n), ARG(ct_dtype, dt),               \
    ARG(int64_t, n), ARG(const void *, in), ARG(float *, found))                                     \
  X(core, gemm, OP, int, "gemm", CTI_SH_GEMM(batch, m, n, k), ARG(ct_dtype, dt), ARG(bool, ta),      \
    ARG(bool, tb), ARG(int64_t, m), ARG(int64_t, n), ARG(int64_t, k), ARG(double, alpha),            \
    ARG(const void *, A), ARG(int64_t, lda), ARG(int64_t, strideA), ARG(const void *, B),            \
    ARG(int64_t, ldb), ARG(int64_t, strideB), ARG(double, beta), ARG(void *, C), ARG(int64_t, ldc),  \
    ARG(int64_t, strideC), ARG(int64_t, batch))

typedef struct cti_backend {
  const char *name;
  CTI_CORE_OPS(CTI_OP_FIELD)
  const struct cti_nn_kernels *nn;       // ReLU backward, dropout, cross-entropy
  const struct cti_conv_kernels *conv;   // im2col/col2im, max pooling, batch norm
  const struct cti_optim_kernels *optim; // SGD/Adam updates, clip_grad_norm_'s pieces
  // Embedding, LayerNorm, GELU, attention's softmax, the LM cross-entropy
  const struct cti_transformer_kernels *transformer;
  const struct cti_amp_kernels *amp;     // GradScaler's scale update
} cti_backend;

// The name of a reduction as torch names the op ("sum", "mean", "max",
// "argmax"; "reduce" for anything else).
static inline const char *cti_reduce_op_name(ct_reduce_op op) {
  static const char *const names[] = {"sum", "mean", "max", "argmax"};
  return (unsigned)op < 4 ? names[op] : "reduce";
}

extern const cti_backend cti_cpu_backend;
#ifdef CT_HAVE_CUDA
extern const cti_backend cti_cuda_backend;
// gemm.cu: cuBLAS's version as cublasGetVersion encodes it: major * 10000 +
// minor * 100 + patch (130100 for 13.1.0). Needs no GPU. Returns CT_OK, or
// an error with *version left 0. (Here, so that core needs no header of the
// CUDA backend's.)
int cti_cublas_get_version(int *version);
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
