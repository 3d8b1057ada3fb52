// SPDX-License-Identifier: MIT
//
// transformer: the transformer family's kernels on CUDA (see
// transformer_kernels.h for what each computes, transformer.cuh for the
// bodies, which the host test runs too).
//
// Work layout:
//   embedding           a thread per output element (consecutive threads:
//                       consecutive columns of one row), a copy;
//   embedding backward  a thread per element of dweight walks the indices in
//                       ascending order and adds the rows that name its row:
//                       no atomics, the CPU's bits (a warp reads the same
//                       index at once, a broadcast);
//   GELU                a thread per element;
//   LayerNorm, softmax, a warp per row (transformer.cuh's row executor):
//   cross-entropy       lane-strided partial sums, five butterfly rounds;
//   LayerNorm dw, db    chunks of CTI_LN_CHUNK rows per thread and column
//                       into `work`, then a thread per column adds the
//                       chunks in order: deterministic, no atomics;
//   the count of        one block of 256 threads, integer partial counts
//   counted targets     added in shared memory (exact in any order).
// Every sum's order is fixed by the shape, so a run repeats its bits.
#include <stdint.h>

#include "async_error.cuh"
#include "kernel_util.cuh"
#include "transformer.cuh"
#include "transformer_kernels.h"

// ---- embedding --------------------------------------------------------------------------------
// Queues the lookup; a bad index surfaces later (async_error.h), so *bad stays -1.
static int cuda_embedding(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                             const void *weight, void *out, int64_t *bad, ct_stream *s) {
  *bad = -1;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  cti_async_record *rec = cti_cuda_async_record(scope.device());
  if (!rec) return ct_last_status();
  return cti_embedding_run(cti_device_exec{scope.stream()}, dt, false, n, c, v, idx, weight, out, rec);
}

static int cuda_embedding_backward(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                                      const void *dout, void *dweight, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_embedding_run(cti_device_exec{scope.stream()}, dt, true, n, c, v, idx, dout, dweight, nullptr);
}

// ---- layer norm, GELU, softmax -----------------------------------------------------------------------
static int cuda_layernorm(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *w, const void *b,
                             double eps, void *y, void *mean, void *rstd, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_layernorm_run(cti_device_exec{scope.stream()}, dt, n, c, x, w, b, eps, y, mean, rstd);
}

static int cuda_layernorm_backward(ct_dtype dt, int64_t n, int64_t c, const void *x, const void *dy,
                                      const void *mean, const void *rstd, const void *w, void *dx,
                                      void *dw, void *db, void *work, ct_stream *s) {
  if (c <= 0) return CT_OK;
  if (n > 0 && !work)
    return ct_fail(CT_ERR_VALUE, "LayerNorm backward: CUDA needs a work buffer (cti_layernorm_work_bytes)");
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  if (n <= 0) { // no rows: the sums are 0
    const size_t bytes = (size_t)c * (dt == CT_F64 ? 8 : 4);
    CT_CUDA_CHECK(cudaMemsetAsync(dw, 0, bytes, scope.stream()));
    CT_CUDA_CHECK(cudaMemsetAsync(db, 0, bytes, scope.stream()));
    return CT_OK;
  }
  return cti_layernorm_backward_run(cti_device_exec{scope.stream()}, dt, n, c, x, dy, mean, rstd, w, dx, dw,
                                    db, work);
}

static int cuda_gelu(ct_dtype dt, bool tanh_approx, int64_t n, const void *x, const void *dy, void *out,
                        ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_gelu_run(cti_device_exec{scope.stream()}, dt, tanh_approx, n, x, dy, out);
}

static int cuda_softmax(ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale, const void *x,
                           void *y, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_softmax_run(cti_device_exec{scope.stream()}, dt, rows, cols, causal, scale, x, y);
}

static int cuda_softmax_backward(ct_dtype dt, int64_t rows, int64_t cols, double scale, const void *y,
                                    const void *dy, void *dx, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_softmax_backward_run(cti_device_exec{scope.stream()}, dt, rows, cols, scale, y, dy, dx);
}

// ---- cross-entropy ------------------------------------------------------------------------------------
constexpr int CT_TF_COUNT_THREADS = 256;

// One block: *scale = 1 / (number of targets that are not ignore_index).
template <class T>
static __global__ void count_targets_kernel(const int64_t *target, int64_t n, int64_t ignore, T *scale) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  const long long k = cti_count_targets(target, n, ignore, threadIdx.x, blockDim.x);
  atomicAdd(&total, (unsigned long long)k); // integers: the sum is exact in any order
  __syncthreads();
  if (threadIdx.x == 0) *scale = T(1) / T((double)total);
}

static int cuda_cross_entropy(ct_dtype dt, int64_t n, int64_t v, const void *logits, const int64_t *target,
                                 int64_t ignore_index, void *loss_rows, void *grad, void *scale, int64_t *bad,
                                 ct_stream *s) {
  *bad = -1;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  cti_async_record *rec = cti_cuda_async_record(scope.device());
  if (!rec) return ct_last_status();
  int rc = cti_dispatch_float(dt, "ct_cross_entropy", [&](auto tag) -> int {
    using T = decltype(tag);
    CT_LAUNCH(count_targets_kernel<T>)(1, CT_TF_COUNT_THREADS, 0, scope.stream())(target, n, ignore_index,
                                                                             static_cast<T *>(scale));
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  });
  if (rc) return rc;
  return cti_lm_cross_entropy_rows_run(cti_device_exec{scope.stream()}, dt, n, v, logits, target, ignore_index,
                                       loss_rows, grad, scale, rec);
}

// ---- the family's table ----------------------------------------------------------------------------
// In the family list's order (nvcc's C++17 has no designated initializers),
// so the order cannot drift from the table's: each entry is the static cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cuda_
extern "C" const cti_transformer_kernels cti_cuda_transformer_kernels = {CTI_TRANSFORMER_OPS(CTI_OP_CUDA_INIT)};
