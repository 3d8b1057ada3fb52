// SPDX-License-Identifier: MIT
//
// ch02_kernels: chapter 2's own teaching kernel, and one PCI query.
//
// fma_burn is deliberately compute-bound: each thread loads one float, runs a
// chain of `iters` fused multiply-adds on it in registers and stores it back.
// Its time grows linearly with `iters` and hardly touches memory, so the
// chapter can calibrate it to last as long as a host->device copy and then
// show the two running at once: the copy on the copy engine, the kernel on
// the SMs.
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cuda_check.h"
#include "error.h"

/*md
::: zh
`fma_burn_kernel` 是一个普通的 CUDA 核函数：`static __global__` 函数，每个线程由 `blockIdx.x * blockDim.x + threadIdx.x` 得到自己的下标。网格跨步循环（grid-stride loop）让任意长度的 `n` 都能被有限个线程块覆盖：每个线程处理完一个元素后跳过整个网格的线程数，再处理下一个。循环体只在寄存器里做乘加，几乎不访问显存，所以它的耗时只取决于 `iters`。
:::
::: en
`fma_burn_kernel` is an ordinary CUDA kernel: a `static __global__` function in which each thread finds its index as `blockIdx.x * blockDim.x + threadIdx.x`. The grid-stride loop lets a bounded number of blocks cover any `n`: after one element a thread jumps ahead by the number of threads in the whole grid and takes the next. The loop body multiplies and adds in registers and hardly touches device memory, so its time depends only on `iters`.
:::
*/
// x is (n,) f32 on the current device; a grid-stride loop covers any n.
static __global__ void fma_burn_kernel(float *x, int64_t n, int iters) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = x[i];
    // The multiplier keeps v bounded (v converges to -b / (a - 1) = 1 and
    // stays there), so the result is finite whatever iters is.
    const float a = 0.999f, b = 0.001f;
    for (int k = 0; k < iters; ++k) v = fmaf(v, a, b);
    x[i] = v;
  }
}

/*md
::: zh
启动函数 `ch02_fma_burn` 是 C 代码调用的入口：它先检查参数，再用 `CT_LAUNCH(kernel)(网格, 线程块, 共享内存, 流)(参数)` 在给定的流上启动核函数（nvcc 看到的是 `kernel<<<网格, 线程块, 共享内存, 流>>>(参数)`，tools/sim 的模拟器则在 CPU 上运行同一个核函数），最后用 `CT_CUDA_CHECK(cudaGetLastError())` 检查启动是否成功。它不等待核函数结束：启动是异步的，正文的计时靠流上的事件。
:::
::: en
The launcher `ch02_fma_burn` is the entry the C code calls: it checks its arguments, launches the kernel on the given stream with `CT_LAUNCH(kernel)(grid, block, shared memory, stream)(arguments)` (nvcc sees `kernel<<<grid, block, shared memory, stream>>>(arguments)`; the emulator in tools/sim runs the same kernel on the CPU), and checks the launch with `CT_CUDA_CHECK(cudaGetLastError())`. It does not wait for the kernel: launches are asynchronous, and the chapter times them with events on the streams.
:::
*/
// Launches fma_burn on `stream` (a cudaStream_t; NULL is the legacy default
// stream) of the current device. Returns CT_OK, or an error naming the
// launch; never waits for the kernel.
extern "C" int ch02_fma_burn(float *x, int64_t n, int iters, void *stream) {
  if (!x || n <= 0 || iters < 0)
    return ct_fail(CT_ERR_VALUE, "ch02_fma_burn: bad arguments (x=%p, n=%lld, iters=%d)", (void *)x,
                   (long long)n, iters);
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535; // the grid-stride loop covers the rest
  CT_LAUNCH(fma_burn_kernel)((unsigned)blocks, threads, 0, (cudaStream_t)stream)(x, n, iters);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

/*md hide*/
// The PCI address of CUDA device `index`, "domain:bus:device.function" in
// hexadecimal, into buf (len bytes; 16 are enough).
extern "C" int ch02_pci_bus_id(int index, char *buf, int len) {
  if (!buf || len < 13) return ct_fail(CT_ERR_VALUE, "ch02_pci_bus_id: buffer of %d bytes is too small", len);
  CT_CUDA_CHECK(cudaDeviceGetPCIBusId(buf, len, index));
  return CT_OK;
}
/*md show*/
