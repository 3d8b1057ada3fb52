// SPDX-License-Identifier: MIT
//
// sim.race: the racecheck finds a planted missing __syncthreads(). Compiled
// with the racecheck hooks (g++ -fsanitize=thread, linked to the emulator's
// hooks instead of ThreadSanitizer). Each kernel stages a block's values in
// shared memory and reads a neighbour's: without the barrier the read races
// with the neighbour's write (read-after-write for one order of the threads,
// write-after-read for the other); with it, none. A warp-level variant reads
// within one warp after __syncwarp(), which orders it.
#include <stdio.h>

#include "ct_sim.h"
#include "ct_sim_internal.h"

#define N 64

__global__ void planted_missing_syncthreads(const float *in, float *out) {
  __shared__ float tile[N];
  const int t = threadIdx.x;
  tile[t] = in[t];
  // __syncthreads() belongs here
  out[t] = tile[(t + 1) % N];
}

__global__ void with_syncthreads(const float *in, float *out) {
  __shared__ float tile[N];
  const int t = threadIdx.x;
  tile[t] = in[t];
  __syncthreads();
  out[t] = tile[(t + 1) % N];
}

__global__ void within_warp_syncwarp(const float *in, float *out) {
  __shared__ float tile[32];
  const int t = threadIdx.x;
  tile[t] = in[t];
  __syncwarp();
  out[t] = tile[(t + 1) % 32];
}

static int run(const char *what, void (*launch)(const float *, float *), long want_hazards_min,
               long want_hazards_max) {
  float in[N], out[N];
  for (int i = 0; i < N; ++i) in[i] = (float)i;
  const long before = ct_sim::racecheck_hazards();
  launch(in, out);
  const long found = ct_sim::racecheck_hazards() - before;
  const bool ok = found >= want_hazards_min && found <= want_hazards_max;
  printf("%s %s: %ld hazards\n", ok ? "ok  " : "FAIL", what, found);
  return ok ? 0 : 1;
}

int main(void) {
  int fails = 0;
  fails += run("planted_missing_syncthreads", [](const float *i, float *o) {
    CT_LAUNCH(planted_missing_syncthreads)(1, N, 0, nullptr)(i, o);
  }, 1, 1L << 30);
  fails += run("with_syncthreads", [](const float *i, float *o) {
    CT_LAUNCH(with_syncthreads)(1, N, 0, nullptr)(i, o);
  }, 0, 0);
  fails += run("within_warp_syncwarp", [](const float *i, float *o) {
    CT_LAUNCH(within_warp_syncwarp)(1, 32, 0, nullptr)(i, o);
  }, 0, 0);
  if (ct_sim::racecheck_accesses() == 0) {
    printf("FAIL: no shared-memory access was checked (built without the racecheck hooks?)\n");
    ++fails;
  }
  return fails ? 1 : 0;
}
