// SPDX-License-Identifier: MIT
//
// sim.warp: the emulator's execution model, each feature against values
// worked out here by hand: warp shuffles (idx/up/down/xor, with width),
// votes, __syncthreads_count/_or, a shared-memory tree reduction over 256
// threads, atomics from many blocks, launch-configuration errors, and a
// deadlock (a warp shuffle whose mask names a lane stuck at __syncthreads())
// reported as a failed launch.
#include <stdio.h>
#include <string.h>

#include "ct_sim.h"
#include "ct_sim_internal.h"

static int fails = 0;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      ++fails;                                                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                               \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

#define FULL 0xffffffffu

__global__ void shuffles(int *out) {
  const int t = threadIdx.x, lane = t % 32;
  int v = t + 1, s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
  out[t * 8 + 0] = s; // the warp's sum
  int d = v;
  for (int o = 16; o > 0; o >>= 1) d += __shfl_down_sync(FULL, d, o);
  out[t * 8 + 1] = lane == 0 ? d : -1;
  int p = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(FULL, p, o);
    if (lane >= o) p += u;
  }
  out[t * 8 + 2] = p; // inclusive prefix sum within the warp
  out[t * 8 + 3] = __shfl_sync(FULL, v, 3, 8); // lane 3 of each group of 8
  out[t * 8 + 4] = (int)__ballot_sync(FULL, t % 3 == 0);
  out[t * 8 + 5] = __any_sync(FULL, t == 40) * 2 + __all_sync(FULL, t < 48);
  out[t * 8 + 6] = __syncthreads_count(t % 5 == 0);
  out[t * 8 + 7] = __syncthreads_or(t == 63);
}

__global__ void tree_sum(const double *x, double *out) {
  __shared__ double sh[256];
  const int t = threadIdx.x;
  sh[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) sh[t] += sh[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

__global__ void atomics(float *sum, unsigned *maxv, int *cas_count) {
  const unsigned i = (blockIdx.y * gridDim.x + blockIdx.x) * (blockDim.x * blockDim.y) +
                     threadIdx.y * blockDim.x + threadIdx.x;
  atomicAdd(sum, 1.0f);
  atomicMax(maxv, i);
  int old = *cas_count, seen;
  do { // a CAS loop, as kernels write one
    seen = old;
    old = atomicCAS(cas_count, seen, seen + 1);
  } while (old != seen);
}

__global__ void stuck(int *out) {
  const int lane = threadIdx.x % 32;
  if (lane == 5) {
    __syncthreads(); // lane 5 waits here ...
  } else {
    out[lane] = __shfl_sync(FULL, lane, 0); // ... while the mask says it takes part here
  }
}

int main(void) {
  int out[64 * 8];
  CT_LAUNCH(shuffles)(1, 64, 0, nullptr)(out);
  EXPECT(cudaGetLastError() == cudaSuccess, "shuffles launch");
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, w0 = t - lane;
    const int wsum = 32 * (w0 + 1) + 31 * 32 / 2;
    EXPECT(out[t * 8 + 0] == wsum, "xor sum t=%d: %d vs %d", t, out[t * 8 + 0], wsum);
    EXPECT(out[t * 8 + 1] == (lane == 0 ? wsum : -1), "down sum t=%d: %d", t, out[t * 8 + 1]);
    const int pre = (lane + 1) * (w0 + 1) + lane * (lane + 1) / 2;
    EXPECT(out[t * 8 + 2] == pre, "scan t=%d: %d vs %d", t, out[t * 8 + 2], pre);
    EXPECT(out[t * 8 + 3] == t / 8 * 8 + 3 + 1, "width-8 broadcast t=%d: %d", t, out[t * 8 + 3]);
    unsigned want_ballot = 0;
    for (int k = 0; k < 32; ++k)
      if ((w0 + k) % 3 == 0) want_ballot |= 1u << k;
    EXPECT((unsigned)out[t * 8 + 4] == want_ballot, "ballot t=%d: %#x vs %#x", t, out[t * 8 + 4], want_ballot);
    const int want_vote = (w0 == 32 ? 2 : 0) + (w0 == 0 ? 1 : 0);
    EXPECT(out[t * 8 + 5] == want_vote, "any/all t=%d: %d vs %d", t, out[t * 8 + 5], want_vote);
    EXPECT(out[t * 8 + 6] == 13, "__syncthreads_count t=%d: %d", t, out[t * 8 + 6]);
    EXPECT(out[t * 8 + 7] == 1, "__syncthreads_or t=%d: %d", t, out[t * 8 + 7]);
  }

  double x[3 * 256], sums[3];
  for (int i = 0; i < 3 * 256; ++i) x[i] = i * 0.5;
  CT_LAUNCH(tree_sum)(3, 256, 0, nullptr)(x, sums);
  for (int b = 0; b < 3; ++b) {
    double want = 0;
    for (int i = 0; i < 256; ++i) want += x[b * 256 + i];
    EXPECT(sums[b] == want, "tree_sum block %d: %g vs %g", b, sums[b], want);
  }

  float sum = 0;
  unsigned maxv = 0;
  int cas = 0;
  CT_LAUNCH(atomics)(dim3(3, 2), dim3(16, 4), 0, nullptr)(&sum, &maxv, &cas);
  EXPECT(sum == 384.0f && maxv == 383 && cas == 384, "atomics: sum %g max %u cas %d", sum, maxv, cas);

  // configurations a GPU refuses
  CT_LAUNCH(tree_sum)(1, 2048, 0, nullptr)(x, sums);
  EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "a block of 2048 threads");
  CT_LAUNCH(tree_sum)(dim3(1, 70000), 32, 0, nullptr)(x, sums);
  EXPECT(cudaGetLastError() == cudaErrorInvalidConfiguration, "gridDim.y of 70000");
  EXPECT(cudaGetLastError() == cudaSuccess, "the last error is cleared once read");
  CT_LAUNCH(tree_sum)(1, 256, 1024, nullptr)(x, sums); // refused, never faked
  EXPECT(cudaGetLastError() == cudaErrorNotSupported, "dynamic shared memory is refused");

  const long e0 = ct_sim::error_count();
  CT_LAUNCH(stuck)(1, 32, 0, nullptr)(out);
  EXPECT(cudaGetLastError() == cudaErrorLaunchFailure, "the deadlocked launch fails");
  EXPECT(ct_sim::error_count() > e0, "the deadlock is reported");
  CT_LAUNCH(tree_sum)(1, 256, 0, nullptr)(x, sums); // and the emulator runs on
  EXPECT(cudaGetLastError() == cudaSuccess && sums[0] == 256 * 255 / 2 * 0.5, "a launch after the deadlock");

  EXPECT(ct_sim::launch_count("shuffles") == 1 && ct_sim::launch_count("tree_sum") == 2,
         "launch counter: shuffles %ld tree_sum %ld", ct_sim::launch_count("shuffles"),
         ct_sim::launch_count("tree_sum"));
  printf("%s\n", fails ? "FAILED" : "all warp, barrier, atomic and launch checks passed");
  return fails ? 1 : 0;
}
