// SPDX-License-Identifier: MIT
//
// nn: the nn family's fused kernels on CUDA (see nn_kernels.h): ReLU's
// backward, dropout's mask-and-scale, and cross-entropy (log-softmax + NLL
// and its gradient in one pass over the logits).
//
// ReLU's backward and dropout are grid-stride loops over 64-bit indices
// whose per-element bodies live in nn.cuh (the host test runs them too).
// Cross-entropy gives one warp to a row: the 32 lanes stride over the row's
// c logits, then butterfly shuffles (__shfl_xor_sync) leave the row's max and
// its sum of exp(x - max) in every lane, so each lane can write its share of
// the gradient without shared memory or __syncthreads. Rows are short for
// classifiers (c = 10 for Fashion-MNIST), so eight rows per 256-thread block
// keep the loads coalesced along each row. Sums run in the dtype (float for
// f32, as PyTorch's CUDA kernels do), in an order fixed by the shape.
//
// A target outside [0, c) cannot make the call fail (it has returned by the
// time the kernel runs), and waiting for the kernel on every call would stop
// the host once per training step. So the row's warp reports it to the
// device's async_error record, the row's loss and gradient become NaN, and
// the error surfaces at the next call that waits for the device
// (async_error.h), as PyTorch's device-side assert does.
#include <stdint.h>

#include "async_error.cuh"
#include "kernel_util.cuh"
#include "nn.cuh"
#include "nn_kernels.h"

// ---- math in the compute type ---------------------------------------------------------------
__device__ inline float nn_exp(float x) { return expf(x); }
__device__ inline double nn_exp(double x) { return exp(x); }
__device__ inline float nn_log(float x) { return logf(x); }
__device__ inline double nn_log(double x) { return log(x); }
__device__ inline float nn_max(float a, float b) { return fmaxf(a, b); }
__device__ inline double nn_max(double a, double b) { return fmax(a, b); }
__device__ inline bool nn_isfinite(float x) { return cti_isfinite(x); }
__device__ inline bool nn_isfinite(double x) { return cti_isfinite(x); }
__device__ inline float nn_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ inline double nn_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }

// ---- ReLU backward and dropout: per-element bodies in nn.cuh -----------------------------------
static int cuda_relu_backward(ct_dtype dt, int64_t n, const void *y, const void *g, void *out,
                                 ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_relu_backward_run(cti_device_exec{scope.stream()}, dt, n, y, g, out);
}

static int cuda_dropout(ct_dtype dt, int64_t n, const void *x, const float *u, double p,
                           double scale, void *y, void *mask, ct_stream *s) {
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dropout_run(cti_device_exec{scope.stream()}, dt, n, x, u, p, scale, y, mask);
}

// ---- cross-entropy ----------------------------------------------------------------------------------
constexpr int CT_CE_THREADS = 256;
constexpr int CT_CE_ROWS_PER_BLOCK = CT_CE_THREADS / 32;

// One warp per row i of x (n, c): loss[i] = logsumexp(x_i) - x_i[t_i] and,
// when grad is not NULL, grad[i, :] = (softmax(x_i) - onehot(t_i)) * inv_n.
// A row whose target is outside [0, c) is reported to `rec` and gets NaN.
template <ct_dtype D>
static __global__ void cross_entropy_kernel(const cti_T<D> *x, const int64_t *target, cti_T<D> *loss,
                                               cti_T<D> *grad, int64_t n, int64_t c, cti_C<D> inv_n,
                                               cti_async_record *rec) {
  using A = cti_C<D>;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t)gridDim.x * CT_CE_ROWS_PER_BLOCK;
  for (int64_t i = (int64_t)blockIdx.x * CT_CE_ROWS_PER_BLOCK + (threadIdx.x >> 5); i < n; i += warps) {
    const int64_t t = target[i]; // the same for the whole warp, so the branch is uniform
    if (t < 0 || t >= c) {
      if (lane == 0) {
        cti_async_report(rec, CT_ASYNC_TARGET_OUT_OF_BOUNDS, i, t, c);
        loss[i] = cti_convert<D>(A(NAN));
      }
      if (grad)
        for (int64_t j = lane; j < c; j += 32) grad[i * c + j] = cti_convert<D>(A(NAN));
      continue;
    }
    const cti_T<D> *xi = x + i * c;
    A m = -INFINITY;
    for (int64_t j = lane; j < c; j += 32) m = nn_max(m, cti_load<D>(xi[j]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = nn_max(m, nn_shfl_xor(m, off));
    // All -inf (or a +inf): shift by 0 so that exp sees the real values (NaN
    // results, as PyTorch gives). A NaN logit makes the sum NaN below.
    const A shift = nn_isfinite(m) ? m : A(0);
    A s = 0;
    for (int64_t j = lane; j < c; j += 32) s += nn_exp(cti_load<D>(xi[j]) - shift);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += nn_shfl_xor(s, off);
    // log_softmax_j = (x_j - shift) - log(s): x_j - shift is exact for the
    // large entries (Sterbenz) and log(s) is small, so nothing cancels; adding
    // shift back first (lse = shift + log(s)) would round away digits of
    // log(s) when the logits are large.
    const A ls = nn_log(s);
    if (lane == 0) loss[i] = cti_convert<D>(ls - (cti_load<D>(xi[t]) - shift));
    if (grad) {
      cti_T<D> *gi = grad + i * c;
      for (int64_t j = lane; j < c; j += 32)
        gi[j] = cti_convert<D>((nn_exp((cti_load<D>(xi[j]) - shift) - ls) - (j == t ? A(1) : A(0))) * inv_n);
    }
  }
}

template <ct_dtype D>
static int cross_entropy_launch(int64_t n, int64_t c, const void *logits, const int64_t *target,
                                   void *loss, void *grad, double inv_n, cti_async_record *rec,
                                   cudaStream_t stream) {
  const unsigned blocks = cti_blocks_for(cti_ceil_div(n, CT_CE_ROWS_PER_BLOCK), 1);
  CT_LAUNCH(cross_entropy_kernel<D>)(blocks, CT_CE_THREADS, 0, stream)(
      static_cast<const cti_T<D> *>(logits), target, static_cast<cti_T<D> *>(loss),
      static_cast<cti_T<D> *>(grad), n, c, (cti_C<D>)inv_n, rec);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// Queues the kernel and returns: *bad_row stays -1, since a bad target is
// reported later, through the device's async_error record.
static int cuda_cross_entropy(ct_dtype dt, int64_t n, int64_t c, const void *logits,
                                     const int64_t *target, void *loss, void *grad, double inv_n,
                                     int64_t *bad_row, ct_stream *s) {
  *bad_row = -1;
  if (dt != CT_F32 && dt != CT_F64)
    return ct_fail(CT_ERR_DTYPE, "ct_cross_entropy_loss: not implemented for %s on cuda "
                   "(float32 and float64 only)", cti_dt_name(dt));
  if (n <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  cti_async_record *rec = cti_cuda_async_record(scope.device());
  if (!rec) return ct_last_status();
  return dt == CT_F32 ? cross_entropy_launch<CT_F32>(n, c, logits, target, loss, grad, inv_n, rec, scope.stream())
                      : cross_entropy_launch<CT_F64>(n, c, logits, target, loss, grad, inv_n, rec, scope.stream());
}

// ---- the family's table ------------------------------------------------------------------------
// In the family list's order (nvcc's C++17 has no designated initializers),
// so the order cannot drift from the table's: each entry is the static cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cuda_
extern "C" const cti_nn_kernels cti_cuda_nn_kernels = {CTI_NN_OPS(CTI_OP_CUDA_INIT)};
