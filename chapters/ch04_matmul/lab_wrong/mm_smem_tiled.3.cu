// wrong: the B tile indexed transposed (Bs[tx][ty]), a plausible mix-up of the two tiles
  __shared__ float As[ST][ST]; // As[ty][kk] = A[row][k0 + kk]
  __shared__ float Bs[ST][ST]; // Bs[kk][tx] = B[k0 + kk][col]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * ST + ty, col = blockIdx.x * ST + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += ST) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
    Bs[tx][ty] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
    __syncthreads(); // the tiles are complete
#pragma unroll
    for (int kk = 0; kk < ST; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads(); // everyone is done reading before the next tiles overwrite them
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
