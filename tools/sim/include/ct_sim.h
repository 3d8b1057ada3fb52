// SPDX-License-Identifier: MIT
//
// ct_sim.h: the SIMT emulator's view of CUDA, for compiling the project's
// .cu files as host C++ (g++ -x c++) so that their kernels run on the CPU
// with CUDA's execution model. See tools/sim/README.md.
//
// What a kernel sees here:
//   - __global__/__device__/__host__ are empty: a kernel is a C++ function;
//   - threadIdx/blockIdx/blockDim/gridDim are the running CUDA thread's;
//   - each CUDA thread of a block is a fiber (ct_sim.cc): __syncthreads() is
//     a real barrier over the block, and the warp intrinsics (__shfl_*_sync,
//     __syncwarp, __ballot_sync, __any_sync, __all_sync) are warp-level
//     barriers that exchange the lanes' values in lockstep;
//   - a __shared__ variable is a static thread_local: one copy per OS thread,
//     and an OS thread runs one block at a time, so one copy per block;
//   - atomics are plain read-modify-writes: the fibers of a block never run
//     at the same time, and blocks run one after another.
// CT_LAUNCH(kernel)(grid, block, smem, stream)(args...) runs every block of
// the grid before it returns (streams run in issue order: the launch is
// complete when the call returns).
#ifndef CT_SIM_H
#define CT_SIM_H

#ifndef __cplusplus
#error "ct_sim.h is C++: compile the .cu file with g++ -x c++"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define CT_SIM 1

// ---- vector types and dims ------------------------------------------------------------
// The emulator's own vector types, laid out as CUDA's. With
// CT_SIM_TOOLKIT_VECTOR_TYPES the toolkit's host-usable vector_types.h and
// vector_functions.h are taken instead (stage 2: cuda_fp16.h/cuda_bf16.h,
// which the runtime's kernels include, bring them in, and with them
// driver_types.h, whose cudaError_t must then replace the enum below).
#if defined(CT_SIM_TOOLKIT_VECTOR_TYPES)
#include <driver_types.h>
#include <vector_functions.h>
#include <vector_types.h>
// the toolkit's runtime declarations (through the stand-in, which takes the
// toolkit's header with #include_next): ct_sim.cc and ct_sim_runtime.cc
// implement the subset the runtime calls, under the toolkit's own names
#include <cuda_runtime_api.h>
#else
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return {x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return {x, y}; }
#endif

// After the toolkit's headers (their host_defines.h defines these for a
// host compiler too, mostly as nothing), the emulator's meanings.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __align__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local
#define __constant__ static

// ---- the runtime API subset (ct_sim.cc) -------------------------------------------------
#if !defined(CT_SIM_TOOLKIT_VECTOR_TYPES) // else driver_types.h has them
typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorNotSupported = 801,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999,
} cudaError_t;
typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#endif

#if !defined(CT_SIM_TOOLKIT_VECTOR_TYPES) // else the toolkit's cuda_runtime_api.h declares them
extern "C" {
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorName(cudaError_t err);
const char *cudaGetErrorString(cudaError_t err);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device);
}
#endif

// ---- device math the kernels use that libm lacks -----------------------------------------
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// __expf and __logf: glibc's math.h declares them (its exact expf/logf); on a
// GPU they are the fast approximations, so results may differ in the last bits.
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
// The _rn forms round to nearest even, which is what host IEEE arithmetic
// does (the sim build keeps -ffp-contract=off so they are not fused).
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dsqrt_rn(double a) { return sqrt(a); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}

// ---- atomics: fibers never run at once, so a plain read-modify-write is atomic --------
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = (T)(o + v); return o; }
template <class T> static inline T atomicSub(T *p, T v) { T o = *p; *p = (T)(o - v); return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
template <class T> static inline T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <class T> static inline T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
template <class T> static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }

// ---- the emulator's state and entry points (ct_sim.cc) -----------------------------------
namespace ct_sim {

enum WarpOp { W_SYNC, W_IDX, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL };

// The running fiber's CUDA coordinates. Plain globals (not thread_local): in
// this stage one OS thread runs every block, and the racecheck tells shared
// memory (thread_local) from everything else by address.
extern uint3 g_thread_idx, g_block_idx;
extern dim3 g_block_dim, g_grid_dim;

void syncthreads(void);
int syncthreads_count(int pred, int how); // how: 0 count, 1 and, 2 or
uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width);

// Stream capture (cudaStreamBeginCapture ... cudaStreamEndCapture): while a
// stream captures, what is issued to it is recorded, not run; a graph
// launch runs the records in order (ct_sim.cc).
bool capturing(cudaStream_t stream);
void capture(cudaStream_t stream, std::function<void()> op);

typedef void (*Trampoline)(void *ctx);
// Runs the grid; returns through cudaGetLastError what a failed launch would.
void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Trampoline run, void *ctx);
// Records a launch on a capturing stream: each replay calls
// launch(name, grid, block, smem, ..., run, ctx); destroy(ctx) frees the
// arguments' copy with the graph (ct_sim.cc).
void capture_launch(cudaStream_t stream, const char *name, dim3 grid, dim3 block, size_t smem,
                    Trampoline run, void *ctx, void (*destroy)(void *ctx));

// The launch's arguments, copied once; every CUDA thread then calls the
// kernel with its own copy, as every GPU thread reads its own parameters.
// Kept small on purpose: it is instantiated once per kernel instantiation
// and launch site, and the runtime's .cu files hold hundreds (binary.cu: every
// dtype times every op): a std::function capture here per instantiation made
// elementwise.cu cost 2.4 times the CPU to compile (tools/sim/README.md).
template <class Call, class... T> struct LaunchArgs {
  Call call;
  std::tuple<T...> args;
  template <size_t... I> void run(std::index_sequence<I...>) const {
    std::tuple<T...> mine = args;
    call(std::get<I>(mine)...);
  }
  static void trampoline(void *c) { ((const LaunchArgs *)c)->run(std::index_sequence_for<T...>()); }
  static void destroy(void *c) { delete (LaunchArgs *)c; }
};

// CT_LAUNCH(kernel) wraps the kernel's name in a generic lambda, `call`, so
// that a template kernel whose remaining template arguments are deduced
// from the launch's arguments (ct_reduce_rows_kernel<R>(src, ...)) is
// deduced here exactly as nvcc deduces it at kernel<<<...>>>(args).
template <class Call> struct Bound {
  Call call;
  const char *name;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A> void operator()(A &&...a) const {
    using Args = LaunchArgs<Call, std::decay_t<A>...>;
    if (capturing(stream)) { // recorded with copies of its arguments, launched at each replay
      capture_launch(stream, name, grid, block, smem, &Args::trampoline,
                     new Args{call, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)}, &Args::destroy);
      return;
    }
    Args ctx{call, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
    launch(name, grid, block, smem, stream, &Args::trampoline, &ctx);
  }
};
template <class Call> struct Kernel {
  Call call;
  const char *name;
  Bound<Call> operator()(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) const {
    return Bound<Call>{call, name, grid, block, smem, stream};
  }
};
template <class Call> Kernel<Call> kernel(Call call, const char *name) { return {call, name}; }

template <class T> static inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp value too large");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  return b;
}
template <class T> static inline T from_bits(uint64_t b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}
} // namespace ct_sim

#define CT_LAUNCH(...)                                                                             \
  ::ct_sim::kernel([](auto &...ct_sim_args_) { __VA_ARGS__(ct_sim_args_...); }, #__VA_ARGS__)

#define threadIdx (static_cast<const uint3 &>(::ct_sim::g_thread_idx))
#define blockIdx (static_cast<const uint3 &>(::ct_sim::g_block_idx))
#define blockDim (static_cast<const dim3 &>(::ct_sim::g_block_dim))
#define gridDim (static_cast<const dim3 &>(::ct_sim::g_grid_dim))
#define warpSize 32

static inline void __syncthreads(void) { ::ct_sim::syncthreads(); }
static inline int __syncthreads_count(int p) { return ::ct_sim::syncthreads_count(p, 0); }
static inline int __syncthreads_and(int p) { return ::ct_sim::syncthreads_count(p, 1); }
static inline int __syncthreads_or(int p) { return ::ct_sim::syncthreads_count(p, 2); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)::ct_sim::warp_op(::ct_sim::W_SYNC, mask, 0, 0, 32);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return ::ct_sim::from_bits<T>(::ct_sim::warp_op(::ct_sim::W_IDX, mask, ::ct_sim::to_bits(v), src, width));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return ::ct_sim::from_bits<T>(::ct_sim::warp_op(::ct_sim::W_UP, mask, ::ct_sim::to_bits(v), (int)d, width));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return ::ct_sim::from_bits<T>(::ct_sim::warp_op(::ct_sim::W_DOWN, mask, ::ct_sim::to_bits(v), (int)d, width));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
  return ::ct_sim::from_bits<T>(::ct_sim::warp_op(::ct_sim::W_XOR, mask, ::ct_sim::to_bits(v), lm, width));
}
static inline unsigned __ballot_sync(unsigned mask, int p) {
  return (unsigned)::ct_sim::warp_op(::ct_sim::W_BALLOT, mask, p != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int p) {
  return (int)::ct_sim::warp_op(::ct_sim::W_ANY, mask, p != 0, 0, 32);
}
static inline int __all_sync(unsigned mask, int p) {
  return (int)::ct_sim::warp_op(::ct_sim::W_ALL, mask, p != 0, 0, 32);
}

#endif
