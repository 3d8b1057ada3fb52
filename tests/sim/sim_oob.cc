// SPDX-License-Identifier: MIT
//
// sim.oob: a planted out-of-bounds read inside a kernel. Under AddressSanitizer
// the emulator's run of it must report heap-buffer-overflow, and the
// emulator's error hook must name the kernel, block and thread. The program
// is expected to die; tools/sim/expect_output.sh checks what it printed.
#include <stdio.h>

#include "ct_sim.h"

__global__ void planted_out_of_bounds(const float *x, float *y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i % n] = x[i]; // `<=`: thread n reads x[n], one past the end
}

int main(void) {
  const int n = 100;
  float *x, *y;
  cudaMalloc((void **)&x, n * sizeof(float));
  cudaMalloc((void **)&y, n * sizeof(float));
  cudaMemset(x, 0, n * sizeof(float));
  CT_LAUNCH(planted_out_of_bounds)(4, 32, 0, nullptr)(x, y, n);
  printf("planted_out_of_bounds ran to the end: the out-of-bounds read was NOT reported\n");
  return 0;
}
