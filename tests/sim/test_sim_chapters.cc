// SPDX-License-Identifier: MIT
//
// sim.chapters: chapter 2's and chapter 4's own kernels (their .cu files,
// unchanged, compiled as host C++ against tools/sim/ct_sim.h) run on the SIMT
// emulator, each result checked against a float64 reference computed here.
// Built twice: under ASan (sim.chapters) and with the racecheck hooks on the
// kernel files (sim.chapters_racecheck), where any shared-memory hazard fails.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "ct_sim.h"
#include "ct_sim_internal.h"
#include "error.h"

extern "C" {
int ch04_gpu_naive(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_coalesced(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_smem_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_reg_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch02_fma_burn(float *x, int64_t n, int iters, void *stream);
}

static int failures = 0;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      ++failures;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float uniform(void) { // in [-1, 1), from a 64-bit LCG's high bits
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef int (*Rung)(const float *, const float *, float *, int, int, int, void *);

static void check_matmul(const char *name, Rung rung, int M, int N, int K) {
  std::vector<float> a((size_t)M * K), b((size_t)K * N), c((size_t)M * N, NAN);
  for (float &v : a) v = uniform();
  for (float &v : b) v = uniform();
  float *da, *db, *dc;
  EXPECT(cudaMalloc((void **)&da, a.size() * 4) == cudaSuccess, "cudaMalloc");
  EXPECT(cudaMalloc((void **)&db, b.size() * 4) == cudaSuccess, "cudaMalloc");
  EXPECT(cudaMalloc((void **)&dc, c.size() * 4) == cudaSuccess, "cudaMalloc");
  cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice); // NaN: an unwritten C shows
  const long errors0 = ct_sim::error_count();
  int rc = rung(da, db, dc, M, N, K, nullptr);
  EXPECT(rc == CT_OK, "%s(M=%d N=%d K=%d) returned %d: %s", name, M, N, K, rc, ct_last_error());
  EXPECT(cudaStreamSynchronize(nullptr) == cudaSuccess, "sync");
  cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost);
  // |c - ref| <= K * 2^-23 * sum_k |a b| bounds float32 accumulation in any order
  double worst = 0;
  long bad = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = (double)a[(size_t)i * K + k] * b[(size_t)k * N + j];
        ref += p;
        mag += fabs(p);
      }
      const double err = fabs((double)c[(size_t)i * N + j] - ref);
      const double tol = K * ldexp(1.0, -23) * mag + 1e-30;
      if (!(err <= tol)) {
        if (bad++ < 3) fprintf(stderr, "  %s C[%d][%d] = %.9g, reference %.9g\n", name, i, j, c[(size_t)i * N + j], ref);
      }
      if (err / (mag + 1e-30) > worst) worst = err / (mag + 1e-30);
    }
  EXPECT(bad == 0, "%s(M=%d N=%d K=%d): %ld of %d elements outside the bound", name, M, N, K, bad, M * N);
  EXPECT(ct_sim::error_count() == errors0, "%s: the emulator reported %ld errors", name,
         ct_sim::error_count() - errors0);
  printf("%-20s M=%-4d N=%-4d K=%-4d max |err| / sum|a b| = %.3g\n", name, M, N, K, worst);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

static void check_fma_burn(int64_t n, int iters) {
  std::vector<float> x((size_t)n), want((size_t)n);
  for (int64_t i = 0; i < n; ++i) x[i] = uniform() * 4.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    for (int k = 0; k < iters; ++k) v = fmaf(v, 0.999f, 0.001f); // fmaf is exact-rounded on both
    want[i] = v;
  }
  float *dx;
  cudaMalloc((void **)&dx, (size_t)n * 4);
  cudaMemcpy(dx, x.data(), (size_t)n * 4, cudaMemcpyHostToDevice);
  int rc = ch02_fma_burn(dx, n, iters, nullptr);
  EXPECT(rc == CT_OK, "ch02_fma_burn: %s", ct_last_error());
  cudaMemcpy(x.data(), dx, (size_t)n * 4, cudaMemcpyDeviceToHost);
  long bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += x[i] != want[i];
  EXPECT(bad == 0, "ch02_fma_burn(n=%lld, iters=%d): %ld elements differ", (long long)n, iters, bad);
  printf("%-20s n=%lld iters=%d: bit-exact\n", "ch02_fma_burn", (long long)n, iters);
  cudaFree(dx);
}

int main(void) {
  // odd sizes for the rungs that take any size; the grid has partial blocks
  check_matmul("ch04_gpu_naive", ch04_gpu_naive, 37, 45, 29);
  check_matmul("ch04_gpu_coalesced", ch04_gpu_coalesced, 37, 45, 29);
  check_matmul("ch04_gpu_smem_tiled", ch04_gpu_smem_tiled, 37, 45, 70);
  // every rung at a size rung 4 takes: two block tiles each way, K over several slices
  check_matmul("ch04_gpu_naive", ch04_gpu_naive, 128, 256, 40);
  check_matmul("ch04_gpu_coalesced", ch04_gpu_coalesced, 128, 256, 40);
  check_matmul("ch04_gpu_smem_tiled", ch04_gpu_smem_tiled, 128, 256, 40);
  check_matmul("ch04_gpu_reg_tiled", ch04_gpu_reg_tiled, 256, 128, 40);
  check_fma_burn(300000, 7); // 1172 blocks of 256 threads, the last one partial
  const long hz = ct_sim::racecheck_hazards();
  EXPECT(hz == 0, "racecheck found %ld shared-memory hazards", hz);
  if (getenv("CT_SIM_EXPECT_RACECHECK"))
    EXPECT(ct_sim::racecheck_accesses() > 0, "the racecheck build checked no shared-memory access");
  printf("racecheck: %ld shared-memory accesses checked, %ld hazards\n", ct_sim::racecheck_accesses(), hz);
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
