// wrong: out-of-range elements not loaded as 0 (reads past A and B at the edges)
  __shared__ float As[ST][ST]; // As[ty][kk] = A[row][k0 + kk]
  __shared__ float Bs[ST][ST]; // Bs[kk][tx] = B[k0 + kk][col]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * ST + ty, col = blockIdx.x * ST + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += ST) {
    As[ty][tx] = A[(size_t)row * K + k0 + tx];
    Bs[ty][tx] = B[(size_t)(k0 + ty) * N + col];
    __syncthreads(); // the tiles are complete
#pragma unroll
    for (int kk = 0; kk < ST; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads(); // everyone is done reading before the next tiles overwrite them
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
