// SPDX-License-Identifier: MIT
//
// ch04_kernels: chapter 4's own SGEMM ladder, C = A · B in float32.
//
// Every matrix is row-major and contiguous: A is (M, K), B is (K, N), C is
// (M, N), so element (i, j) of C is C[i * N + j]. Each rung is a
// `static __global__` kernel and an `extern "C"` launcher that checks its
// arguments, launches on the stream it is given (a cudaStream_t passed as
// void *, NULL meaning the legacy default stream) and checks the launch with
// cudaGetLastError(). A launcher returns a ct_status: CT_OK, or an error whose
// message names the kernel and the values at fault. Launches are asynchronous:
// the caller synchronizes (an event or the stream) before reading C.
//
//   1 naive       one thread per C element, a warp's threads walk down a
//                 column of C (consecutive i): every load of A is a separate
//                 memory transaction
//   2 coalesced   the same arithmetic, a warp's threads along a row of C
//                 (consecutive j): loads of B and stores of C coalesce
//   3 smem_tiled  32 x 32 tiles of A and B staged in shared memory: each
//                 value read from global memory is used 32 times
//   4 reg_tiled   128 x 128 block tiles, BK = 8, each thread computes 8 x 8
//                 outputs held in registers, float4 loads, A's tile stored
//                 transposed, two shared-memory buffers (load the next tile
//                 while computing this one)
//
// Rungs 1-3 take any M, N, K >= 1. Rung 4 needs M and N multiples of 128 and
// K a multiple of 8 (no edge handling: the chapter's sizes are powers of two;
// a production kernel adds guarded edge tiles). Indexing uses 64-bit offsets
// so that no product i * K overflows.
#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda_check.h"
#include "error.h"

/*md hide*/
// The launchers' C declarations; ch04_matmul.c declares the same ones.
extern "C" {
int ch04_gpu_naive(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_coalesced(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_smem_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_reg_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
}

static int check_args(const char *who, const float *a, const float *b, const float *c, int M, int N,
                      int K) {
  if (!a || !b || !c)
    return ct_fail(CT_ERR_VALUE, "%s: NULL matrix (a=%p b=%p c=%p)", who, (const void *)a,
                   (const void *)b, (const void *)c);
  if (M < 1 || N < 1 || K < 1)
    return ct_fail(CT_ERR_VALUE, "%s: sizes must be positive, got M=%d N=%d K=%d", who, M, N, K);
  // Grid y (and rung 1's grid x, which is a count of row blocks) must fit.
  if ((M + 31) / 32 > 65535 || (N + 31) / 32 > 65535)
    return ct_fail(CT_ERR_VALUE, "%s: M=%d N=%d need more than 65535 blocks along a grid axis", who,
                   M, N);
  return CT_OK;
}

/*md show*/
/*md
::: zh
第 1 级：每个线程算 C 的一个元素。`threadIdx.x` 对应行 `i`，所以一个 warp 的 32 个线程读 A 的 32 行，每次读取都是一次单独的内存事务。下面的启动函数用 32×32 的线程块铺满 C。
:::
::: en
Rung 1: one thread per element of C. `threadIdx.x` maps to the row `i`, so the 32 threads of a warp read 32 rows of A, each read a memory transaction of its own. The launcher below covers C with 32×32 blocks of threads.
:::
*/
// ---- 1 naive ------------------------------------------------------------------
// threadIdx.x -> row i. The 32 threads of a warp have consecutive i and the
// same j: at each k they read A[i][k] from 32 different rows (32 separate
// 32-byte sectors for 128 useful bytes), all read the same B[k][j], and
// finally write C down a column, 32 rows apart.
static __global__ void mm_naive(int M, int N, int K, const float *__restrict__ A,
                                const float *__restrict__ B, float *__restrict__ C) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= M || j >= N) return;
  const float *a = A + (size_t)i * K; // row i of A
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += a[k] * B[(size_t)k * N + j];
  C[(size_t)i * N + j] = acc;
}

extern "C" int ch04_gpu_naive(const float *a, const float *b, float *c, int M, int N, int K,
                              void *stream) {
  if (int rc = check_args("ch04_gpu_naive", a, b, c, M, N, K)) return rc;
  const dim3 block(32, 32);
  const dim3 grid((M + 31) / 32, (N + 31) / 32);
  CT_LAUNCH(mm_naive)(grid, block, 0, (cudaStream_t)stream)(M, N, K, a, b, c);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

/*md
::: zh
第 2 级只改了一件事：`threadIdx.x` 对应列 `j`。算术一模一样，但一个 warp 现在读 B 的一行上连续的 32 个 float，读取合并成一次事务。注意启动函数里网格的两个维度也随之对调。
:::
::: en
Rung 2 changes one thing: `threadIdx.x` maps to the column `j`. The arithmetic is identical, but a warp now reads 32 consecutive floats of a row of B, and the reads coalesce into one transaction. Note that the launcher swaps the grid's two dimensions to match.
:::
*/
// ---- 2 coalesced ------------------------------------------------------------------
// threadIdx.x -> column j. A warp now has consecutive j and one i: at each k
// it reads 32 consecutive floats of row k of B (one 128-byte line), one
// broadcast value of A, and writes 128 contiguous bytes of C.
static __global__ void mm_coalesced(int M, int N, int K, const float *__restrict__ A,
                                    const float *__restrict__ B, float *__restrict__ C) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= M || j >= N) return;
  const float *a = A + (size_t)i * K;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += a[k] * B[(size_t)k * N + j];
  C[(size_t)i * N + j] = acc;
}

extern "C" int ch04_gpu_coalesced(const float *a, const float *b, float *c, int M, int N, int K,
                                  void *stream) {
  if (int rc = check_args("ch04_gpu_coalesced", a, b, c, M, N, K)) return rc;
  const dim3 block(32, 32);
  const dim3 grid((N + 31) / 32, (M + 31) / 32);
  CT_LAUNCH(mm_coalesced)(grid, block, 0, (cudaStream_t)stream)(M, N, K, a, b, c);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

/*md
::: zh
第 3 级是本章的练习区（练习 4）：`mm_smem_tiled` 的函数体。线程块先合作把 A 和 B 的 32×32 小块搬进 `__shared__` 数组，第一个 `__syncthreads()` 保证小块已经完整，再各自做 32 次乘加；第二个 `__syncthreads()` 保证所有线程都读完了，下一轮才覆盖小块。越界的元素按 0 读入，所以任何大小都能算。`tools/lab` 会把这段函数体挖空，留给读者自己写。
:::
::: en
Rung 3 is the chapter's lab region (exercise 4): the body of `mm_smem_tiled`. The block first copies 32×32 tiles of A and B into `__shared__` arrays together; the first `__syncthreads()` makes sure the tiles are complete before each thread does its 32 multiply-adds; the second makes sure every thread has finished reading before the next round overwrites the tiles. Elements out of range are loaded as 0, so any size works. `tools/lab` blanks this body for the reader to write.
:::
*/
// ---- 3 shared-memory tiles ------------------------------------------------------------
// A 32 x 32 block of threads computes a 32 x 32 tile of C. It walks K in
// steps of 32: each thread copies one element of A's tile and one of B's
// into shared memory (coalesced: threadIdx.x runs along a row), the block
// waits, and each thread multiplies row ty of As by column tx of Bs. Every
// element fetched from global memory now serves 32 multiply-adds instead of
// one. Out-of-range elements are loaded as 0, so any size works.
#define ST 32

static __global__ void mm_smem_tiled(int M, int N, int K, const float *__restrict__ A,
                                     const float *__restrict__ B, float *__restrict__ C) {
  /* LAB BEGIN: stage 32x32 tiles of A and B in __shared__ arrays, __syncthreads(), accumulate, write C[row][col] | test: gpu.ch04 */
  __shared__ float As[ST][ST]; // As[ty][kk] = A[row][k0 + kk]
  __shared__ float Bs[ST][ST]; // Bs[kk][tx] = B[k0 + kk][col]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * ST + ty, col = blockIdx.x * ST + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += ST) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[(size_t)row * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(size_t)(k0 + ty) * N + col] : 0.0f;
    __syncthreads(); // the tiles are complete
#pragma unroll
    for (int kk = 0; kk < ST; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads(); // everyone is done reading before the next tiles overwrite them
  }
  if (row < M && col < N) C[(size_t)row * N + col] = acc;
  /* LAB END */
}

extern "C" int ch04_gpu_smem_tiled(const float *a, const float *b, float *c, int M, int N, int K,
                                   void *stream) {
  if (int rc = check_args("ch04_gpu_smem_tiled", a, b, c, M, N, K)) return rc;
  const dim3 block(ST, ST);
  const dim3 grid((N + ST - 1) / ST, (M + ST - 1) / ST);
  CT_LAUNCH(mm_smem_tiled)(grid, block, 0, (cudaStream_t)stream)(M, N, K, a, b, c);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

/*md
::: zh
第 4 级把每个线程的工作从 1 个输出加到 8×8 个，存在寄存器里；A 的小块转置后存进共享内存，好让每个线程用 `float4` 一次读 4 个值；两个共享内存缓冲区轮流使用，算这一块时下一块已经在读入。它只接受 M、N 是 128 的倍数、K 是 8 的倍数的矩阵，本章的大小都满足。
:::
::: en
Rung 4 raises each thread's work from 1 output to 8×8, held in registers; A's tile is stored transposed in shared memory so that each thread reads 4 values at a time as a `float4`; two shared-memory buffers take turns, so the next tile is loading while this one is computed on. It takes only M and N that are multiples of 128 and K a multiple of 8, which the chapter's sizes are.
:::
*/
// ---- 4 register tiles (2D block tiling) -------------------------------------------------
// A block of 256 threads computes a 128 x 128 tile of C, marching along K in
// steps of BK = 8. Per step it stages A's 128 x 8 slice and B's 8 x 128
// slice in shared memory (one float4 of each per thread), then every thread
// computes its 8 x 8 outputs as 8 outer products: per k it reads 8 values of
// A and 8 of B from shared memory into registers and does 64 FMAs with them.
// That is 16 FMAs per shared-memory float4 read, where rung 3 did one FMA per
// two shared-memory reads.
//
// Layout choices, each to keep the hardware busy:
//  - A's slice is stored transposed, As[k][m], so a thread's 8 values of A at
//    one k are contiguous and load as float4s (as B's already are);
//  - a thread's 8 rows are ty*4..ty*4+3 and 64+ty*4..64+ty*4+3, its 8 columns
//    tx*4.. and 64+tx*4..: the 8 threads that share a 128-bit shared-memory
//    access phase then read 8 consecutive float4s (all 32 banks, no
//    conflict), and a warp stores 16 consecutive float4s (256 bytes) per row
//    of C;
//  - As rows are padded to 132 floats so that the transposing stores of the
//    two k-halves land in different banks;
//  - two shared-memory buffers: while computing on one, the next slice is
//    already loading from global memory into registers, and it is written to
//    the other buffer afterwards; one __syncthreads() per step.
#define RT_BM 128
#define RT_BN 128
#define RT_BK 8
#define RT_THREADS 256
#define RT_APAD 4

static __global__ void __launch_bounds__(RT_THREADS, 2)
    mm_reg_tiled(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ B,
                 float *__restrict__ C) {
  __shared__ __align__(16) float As[2][RT_BK][RT_BM + RT_APAD]; // As[buf][k][m], A transposed
  __shared__ __align__(16) float Bs[2][RT_BK][RT_BN];           // Bs[buf][k][n]
  (void)M;
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16; // this thread's 8 x 8 outputs
  const float *Ablk = A + (size_t)blockIdx.y * RT_BM * K;         // row 0 of this block's rows
  const float *Bblk = B + (size_t)blockIdx.x * RT_BN;             // column 0 of this block's columns
  float *Cblk = C + (size_t)blockIdx.y * RT_BM * N + (size_t)blockIdx.x * RT_BN;

  // Who loads what: A's 128 x 8 slice is 256 float4s, row tid / 2, columns
  // (tid % 2) * 4 ..+3; B's 8 x 128 slice is 256 float4s, row tid / 32,
  // columns (tid % 32) * 4 ..+3.
  const int a_row = tid / 2, a_col = (tid % 2) * 4;
  const int b_row = tid / 32, b_col = (tid % 32) * 4;
  const float *a_src = Ablk + (size_t)a_row * K + a_col;
  const float *b_src = Bblk + (size_t)b_row * N + b_col;

  float acc[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int s = 0; s < 8; ++s) acc[r][s] = 0.0f;

  // Slice 0 into buffer 0.
  float4 va = *reinterpret_cast<const float4 *>(a_src);
  float4 vb = *reinterpret_cast<const float4 *>(b_src);
  As[0][a_col + 0][a_row] = va.x;
  As[0][a_col + 1][a_row] = va.y;
  As[0][a_col + 2][a_row] = va.z;
  As[0][a_col + 3][a_row] = va.w;
  *reinterpret_cast<float4 *>(&Bs[0][b_row][b_col]) = vb;
  __syncthreads();

  int buf = 0;
  for (int k0 = 0; k0 < K; k0 += RT_BK) {
    const bool more = k0 + RT_BK < K;
    if (more) { // the next slice, into registers, while this one is used
      va = *reinterpret_cast<const float4 *>(a_src + k0 + RT_BK);
      vb = *reinterpret_cast<const float4 *>(b_src + (size_t)(k0 + RT_BK) * N);
    }
#pragma unroll
    for (int k = 0; k < RT_BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4 *>(&As[buf][k][ty * 4]);
      const float4 a1 = *reinterpret_cast<const float4 *>(&As[buf][k][64 + ty * 4]);
      const float4 b0 = *reinterpret_cast<const float4 *>(&Bs[buf][k][tx * 4]);
      const float4 b1 = *reinterpret_cast<const float4 *>(&Bs[buf][k][64 + tx * 4]);
      const float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int s = 0; s < 8; ++s) acc[r][s] = fmaf(ra[r], rb[s], acc[r][s]);
    }
    if (more) { // the other buffer: nobody reads it during this step (see the sync below)
      const int nb = buf ^ 1;
      As[nb][a_col + 0][a_row] = va.x;
      As[nb][a_col + 1][a_row] = va.y;
      As[nb][a_col + 2][a_row] = va.z;
      As[nb][a_col + 3][a_row] = va.w;
      *reinterpret_cast<float4 *>(&Bs[nb][b_row][b_col]) = vb;
    }
    // Makes the new slice visible, and keeps any thread from overwriting the
    // buffer just read (at the next step) before all threads finished with it.
    __syncthreads();
    buf ^= 1;
  }

#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int row = r < 4 ? ty * 4 + r : 64 + ty * 4 + (r - 4);
    float *c = Cblk + (size_t)row * N;
    *reinterpret_cast<float4 *>(c + tx * 4) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    *reinterpret_cast<float4 *>(c + 64 + tx * 4) =
        make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
  }
}

extern "C" int ch04_gpu_reg_tiled(const float *a, const float *b, float *c, int M, int N, int K,
                                  void *stream) {
  if (int rc = check_args("ch04_gpu_reg_tiled", a, b, c, M, N, K)) return rc;
  if (M % RT_BM || N % RT_BN || K % RT_BK)
    return ct_fail(CT_ERR_VALUE,
                   "ch04_gpu_reg_tiled: needs M and N multiples of %d and K a multiple of %d, got "
                   "M=%d N=%d K=%d",
                   RT_BM, RT_BK, M, N, K);
  // float4 loads and stores need 16-byte aligned rows.
  if (((size_t)a | (size_t)b | (size_t)c) % 16)
    return ct_fail(CT_ERR_VALUE, "ch04_gpu_reg_tiled: matrices must be 16-byte aligned");
  const dim3 grid(N / RT_BN, M / RT_BM);
  CT_LAUNCH(mm_reg_tiled)(grid, RT_THREADS, 0, (cudaStream_t)stream)(M, N, K, a, b, c);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}
