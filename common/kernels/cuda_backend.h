// SPDX-License-Identifier: MIT
//
// cuda_backend: the C-callable face of the CUDA backend (internal).
//
// The backend is the table cti_cuda_backend (backend.h), defined in
// backend_cuda.cu from the entry points below, one per op family. Each one
// checks the dtypes it was handed, issues its kernels (or cuBLAS) on the
// stream's cudaStream_t and returns CT_OK or an error recorded with ct_fail;
// their arguments mean what backend.h says for the table's field of the same
// name. Apart from cti_cuda_any_nonfinite, which waits for its answer, they
// return as soon as the work is queued.
#ifndef CT_CUDA_BACKEND_H
#define CT_CUDA_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// elementwise.cu
int cti_cuda_binary(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                   const void *b, ct_stream *s);
int cti_cuda_binary_scalar(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                          const void *a, double scalar, ct_stream *s);
int cti_cuda_unary(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                  ct_stream *s);
int cti_cuda_copy(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out, const void *in,
                 ct_stream *s);
int cti_cuda_fill(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s);
int cti_cuda_arange(ct_dtype dt, int64_t n, void *out, double start, double step, ct_stream *s);

// random.cu
int cti_cuda_random(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed,
                   uint64_t offset, ct_stream *s);

// reduce.cu
int cti_cuda_reduce(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in, void *out,
                   int64_t *idx, int64_t outer, int64_t r, int64_t inner, ct_stream *s);
int cti_cuda_any_nonfinite(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s);
int cti_cuda_found_nonfinite(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s);

// gemm.cu
int cti_cuda_gemm(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *A, int64_t lda, int64_t strideA, const void *B, int64_t ldb,
                 int64_t strideB, double beta, void *C, int64_t ldc, int64_t strideC,
                 int64_t batch, ct_stream *s);
// (cti_cublas_get_version, the one entry core calls itself, is in core's backend.h.)

#ifdef __cplusplus
}
#endif
#endif
