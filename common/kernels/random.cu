// SPDX-License-Identifier: MIT
//
// random: uniform and normal tensors from Philox 4x32-10 on CUDA.
//
// The invariant (random.h): element i of the output depends only on (seed,
// offset, i). One thread takes one counter c = offset + q, which yields the
// uniforms of elements 4q .. 4q+3, and writes those four elements, uniform or
// normal (philox.cuh's cti_random_counter, which also runs on the host).
#include "cuda_backend.h"
#include "kernel_util.cuh"
#include "philox.cuh"

// out (n, contiguous) [T] := uniforms, or normals when `normal`; index q of
// the grid-stride loop (cti_grid_kernel) owns counter q.
template <ct_dtype D> struct random_fn {
  cti_T<D> *out;
  int64_t n;
  uint64_t seed, offset;
  bool normal;
  __host__ __device__ void operator()(int64_t q) const {
    cti_random_counter<D>(out, n, seed, offset, q, normal);
  }
};

struct random_launch {
  bool normal;
  int64_t n;
  void *out;
  uint64_t seed, offset;
  cudaStream_t stream;
  template <ct_dtype D> int operator()() const {
    if constexpr (!cti_dt<D>::floating) {
      return ct_fail(CT_ERR_DTYPE, "%s: not supported for %s on cuda (floating dtypes only)",
                     normal ? "ct_randn" : "ct_rand", cti_dt_name(D));
    } else {
      return cti_device_exec{stream}.run(
          cti_ceil_div(n, 4), random_fn<D>{static_cast<cti_T<D> *>(out), n, seed, offset, normal});
    }
  }
};

extern "C" int cti_cuda_random(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed,
                              uint64_t offset, ct_stream *s) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "%s: dtype %s not supported on cuda", normal ? "ct_randn" : "ct_rand",
                   cti_dt_name(dt));
  if (n <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, random_launch{normal, n, out, seed, offset, scope.stream()});
}
