// SPDX-License-Identifier: MIT
//
// kernel_util: what every file of the CUDA backend shares (device code).
//
// The invariant this header keeps: a value crosses between dtypes in exactly
// one way, the one the CPU backend uses (cpu_backend.c's LD_/CV_ macros), so
// that a test comparing the two devices compares only arithmetic:
//   - each dtype has a storage type T and a compute type C: integers and bool
//     compute in int64 (a bool loads as 0 or 1), f16/bf16/f32 in float, f64
//     in double;
//   - cti_convert<D>(x) turns an int64, float or double into dtype D:
//     to bool is (x != 0); integers wrap to D; floating -> integer truncates
//     toward zero, clamps to D's range and sends NaN to 0; to f16/bf16 goes
//     through float and rounds to nearest even (as c10::Half(float) does, so
//     a double is rounded twice, like PyTorch).
// Everything here is __host__ __device__ where it can be, so that it can be
// checked on a machine without a GPU.
#ifndef CT_KERNEL_UTIL_CUH
#define CT_KERNEL_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_check.h"
#include "dtype.h"
#include "error.h"
#include "stream.h"

// ---- dtype traits ---------------------------------------------------------------------
template <ct_dtype D> struct cti_dt;
template <> struct cti_dt<CT_BOOL> { using T = uint8_t; using C = int64_t; static constexpr bool floating = false; };
template <> struct cti_dt<CT_U8> { using T = uint8_t; using C = int64_t; static constexpr bool floating = false; };
template <> struct cti_dt<CT_I32> { using T = int32_t; using C = int64_t; static constexpr bool floating = false; };
template <> struct cti_dt<CT_I64> { using T = int64_t; using C = int64_t; static constexpr bool floating = false; };
template <> struct cti_dt<CT_F16> { using T = __half; using C = float; static constexpr bool floating = true; };
template <> struct cti_dt<CT_BF16> { using T = __nv_bfloat16; using C = float; static constexpr bool floating = true; };
template <> struct cti_dt<CT_F32> { using T = float; using C = float; static constexpr bool floating = true; };
template <> struct cti_dt<CT_F64> { using T = double; using C = double; static constexpr bool floating = true; };

template <ct_dtype D> using cti_T = typename cti_dt<D>::T;
template <ct_dtype D> using cti_C = typename cti_dt<D>::C;

// Storage -> compute type. Exact for every dtype.
template <ct_dtype D> __host__ __device__ inline cti_C<D> cti_load(cti_T<D> x) {
  if constexpr (D == CT_F16) return __half2float(x);
  else if constexpr (D == CT_BF16) return __bfloat162float(x);
  else if constexpr (D == CT_F32 || D == CT_F64) return x;
  else if constexpr (D == CT_BOOL) return (int64_t)(x != 0); // any nonzero byte is true
  else return (int64_t)x;
}

// |x| <= the largest finite value: false for inf and NaN.
__host__ __device__ inline bool cti_isfinite(float x) { return fabsf(x) <= 3.40282346638528859812e+38f; }
__host__ __device__ inline bool cti_isfinite(double x) { return fabs(x) <= 1.7976931348623157e308; }

// ---- conversions into dtype D (see the essay at the top) ------------------------------
template <ct_dtype D> __host__ __device__ inline cti_T<D> cti_convert(double d) {
  if constexpr (D == CT_F64) {
    return d;
  } else if constexpr (D == CT_F32) {
    return (float)d;
  } else if constexpr (D == CT_F16) {
    return __float2half_rn((float)d);
  } else if constexpr (D == CT_BF16) {
    return __float2bfloat16_rn((float)d);
  } else if constexpr (D == CT_BOOL) {
    return (uint8_t)(d != 0.0); // NaN != 0: true, as bool(float('nan'))
  } else {
    // Truncate toward zero and saturate, NaN -> 0: the CPU backend's sat_*
    // (cpu_backend.c), bound for bound, and what CUDA's cvt.rzi.sat does.
    if (d != d) return 0;
    if constexpr (D == CT_U8) {
      if (d <= 0.0) return 0;
      if (d >= 255.0) return 255;
      return (uint8_t)d;
    } else if constexpr (D == CT_I32) {
      if (d <= -2147483648.0) return INT32_MIN;
      if (d >= 2147483647.0) return INT32_MAX;
      return (int32_t)d;
    } else {
      if (d <= -9223372036854775808.0) return INT64_MIN;
      if (d >= 9223372036854775808.0) return INT64_MAX;
      return (int64_t)d;
    }
  }
}

template <ct_dtype D> __host__ __device__ inline cti_T<D> cti_convert(float f) {
  if constexpr (D == CT_F32) return f;
  else if constexpr (D == CT_F16) return __float2half_rn(f);
  else if constexpr (D == CT_BF16) return __float2bfloat16_rn(f);
  else return cti_convert<D>((double)f); // exact widening, then as a double
}

template <ct_dtype D> __host__ __device__ inline cti_T<D> cti_convert(int64_t v) {
  if constexpr (D == CT_BOOL) return (uint8_t)(v != 0);
  else if constexpr (D == CT_U8) return (uint8_t)(uint64_t)v;              // wraps mod 2^8
  else if constexpr (D == CT_I32) return (int32_t)(uint32_t)(uint64_t)v;   // wraps mod 2^32
  else if constexpr (D == CT_I64) return v;
  else if constexpr (D == CT_F64) return (double)v;
  else return cti_convert<D>((float)v); // f32, f16, bf16: through float
}

// Storage of dtype `From` -> storage of dtype `To`: ct_copy's cast.
template <ct_dtype To, ct_dtype From> __host__ __device__ inline cti_T<To> cti_cast(cti_T<From> x) {
  return cti_convert<To>(cti_load<From>(x));
}

// out[pos] := v converted to the run-time dtype dt (reductions' results).
template <class A> __device__ inline void cti_store_dyn(ct_dtype dt, void *out, int64_t pos, A v) {
  switch (dt) {
  case CT_BOOL: static_cast<cti_T<CT_BOOL> *>(out)[pos] = cti_convert<CT_BOOL>(v); break;
  case CT_U8: static_cast<cti_T<CT_U8> *>(out)[pos] = cti_convert<CT_U8>(v); break;
  case CT_I32: static_cast<cti_T<CT_I32> *>(out)[pos] = cti_convert<CT_I32>(v); break;
  case CT_I64: static_cast<cti_T<CT_I64> *>(out)[pos] = cti_convert<CT_I64>(v); break;
  case CT_F16: static_cast<cti_T<CT_F16> *>(out)[pos] = cti_convert<CT_F16>(v); break;
  case CT_BF16: static_cast<cti_T<CT_BF16> *>(out)[pos] = cti_convert<CT_BF16>(v); break;
  case CT_F32: static_cast<cti_T<CT_F32> *>(out)[pos] = cti_convert<CT_F32>(v); break;
  case CT_F64: static_cast<cti_T<CT_F64> *>(out)[pos] = cti_convert<CT_F64>(v); break;
  default: break;
  }
}

// Calls f.template operator()<D>() with D the compile-time twin of the
// run-time dtype dt; returns what f returns, or -1 for an invalid dtype.
template <class F> inline int cti_dispatch_dtype(ct_dtype dt, F &&f) {
  switch (dt) {
  case CT_BOOL: return f.template operator()<CT_BOOL>();
  case CT_U8: return f.template operator()<CT_U8>();
  case CT_I32: return f.template operator()<CT_I32>();
  case CT_I64: return f.template operator()<CT_I64>();
  case CT_F16: return f.template operator()<CT_F16>();
  case CT_BF16: return f.template operator()<CT_BF16>();
  case CT_F32: return f.template operator()<CT_F32>();
  case CT_F64: return f.template operator()<CT_F64>();
  default: return -1;
  }
}

// A dtype's name for messages, safe for invalid values.
inline const char *cti_dt_name(ct_dtype dt) {
  return ct_dtype_valid(dt) ? ct_dtype_name(dt) : "an invalid dtype";
}

// ---- launch geometry ------------------------------------------------------------------
constexpr int CT_THREADS = 256;          // threads per block of the 1-d kernels
constexpr int64_t CT_MAX_BLOCKS = 65536; // grid-stride loops cover the rest

// Blocks for n work items at `threads` per block: at least 1, at most CT_MAX_BLOCKS.
inline unsigned cti_blocks_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > CT_MAX_BLOCKS) b = CT_MAX_BLOCKS;
  return (unsigned)b;
}

__host__ __device__ inline int64_t cti_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- the op's stream and device ---------------------------------------------------------
// Enters an op: the cudaStream_t behind `s` (NULL handle = the legacy default
// stream) and the stream's device made current for the op's duration (the
// dispatcher has normally done so already; then this costs one
// cudaGetDevice). The destructor restores the caller's device.
class cti_cuda_scope {
 public:
  cti_cuda_scope() = default;
  cti_cuda_scope(const cti_cuda_scope &) = delete;
  cti_cuda_scope &operator=(const cti_cuda_scope &) = delete;
  ~cti_cuda_scope() {
    if (restore_) (void)cudaSetDevice(prev_);
  }
  // Returns CT_OK or the CUDA error (recorded).
  int enter(ct_stream *s) {
    stream_ = s ? static_cast<cudaStream_t>(ct_stream_handle(s)) : nullptr;
    CT_CUDA_CHECK(cudaGetDevice(&prev_));
    device_ = prev_;
    if (s) {
      ct_device d = ct_stream_device(s);
      if (d.type == CT_CUDA && d.index >= 0 && d.index != prev_) {
        CT_CUDA_CHECK(cudaSetDevice(d.index));
        device_ = d.index;
        restore_ = true;
      }
    }
    return CT_OK;
  }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  cudaStream_t stream_ = nullptr;
  int prev_ = 0, device_ = 0;
  bool restore_ = false;
};


// ---- per-index bodies: one grid-stride loop on the device, a plain loop on the host ----------
// An op's work per output element is a functor with
//   __host__ __device__ void operator()(I i) const
// (I = int32_t or int64_t, the index type the op's sizes fit). Its launcher
// is written once, templated on an executor X, and hands the functor to
// x.run(n, f):
//   cti_device_exec  launches cti_grid_kernel on the op's stream: a grid-stride
//                   loop over i in [0, n) calling f(i) (the CUDA backend);
//   cti_host_exec    calls f(i) for i = 0 .. n-1 on the calling thread.
// So the arithmetic a GPU runs also runs on a machine without one, and
// tests/crossdev/test_kernels_host.cu compares it there with the CPU backend.
// The host side compiles as ISO C++ (no FMA contraction, like cpu_*.c);
// cti_rn below rounds every operation on the device too.
template <class I> __device__ inline I cti_grid_start() { return (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; }
template <class I> __device__ inline I cti_grid_step() { return (I)gridDim.x * (I)blockDim.x; }

template <class I, class F> static __global__ void cti_grid_kernel(I n, F f) {
  for (I i = cti_grid_start<I>(); i < n; i += cti_grid_step<I>()) f(i);
}

struct cti_device_exec {
  cudaStream_t stream;
  template <class I, class F> int run(I n, const F &f) const {
    if (n <= 0) return CT_OK;
    CT_LAUNCH(cti_grid_kernel<I, F>)(cti_blocks_for(n, CT_THREADS), CT_THREADS, 0, stream)(n, f);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  }
};

struct cti_host_exec {
  template <class I, class F> int run(I n, const F &f) const {
    for (I i = 0; i < n; ++i) f(i);
    return CT_OK;
  }
};

// Runs f(T{}) with T = float or double for dt; another dtype fails with
// "<op>: not implemented for <dtype> on cuda (float32 and float64 are)".
template <class F> inline int cti_dispatch_float(ct_dtype dt, const char *op, F &&f) {
  if (dt == CT_F32) return f(float{});
  if (dt == CT_F64) return f(double{});
  return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s on cuda (float32 and float64 are)", op,
                 cti_dt_name(dt));
}

// ---- arithmetic rounded once per operation ------------------------------------------------
// nvcc contracts a * b + c into an FMA (one rounding instead of two); the
// __f*_rn / __d*_rn intrinsics are never contracted, so with them every
// product is rounded before the sum, as on the CPU. On the host the plain
// operators do the same (ISO C++: no contraction).
template <class T> struct cti_rn;
template <> struct cti_rn<float> {
#ifdef __CUDA_ARCH__
  __device__ static float mul(float a, float b) { return __fmul_rn(a, b); }
  __device__ static float add(float a, float b) { return __fadd_rn(a, b); }
  __device__ static float div(float a, float b) { return __fdiv_rn(a, b); }
  __device__ static float sqrt(float a) { return __fsqrt_rn(a); }
#else
  static float mul(float a, float b) { return a * b; }
  static float add(float a, float b) { return a + b; }
  static float div(float a, float b) { return a / b; }
  static float sqrt(float a) { return sqrtf(a); }
#endif
};
template <> struct cti_rn<double> {
#ifdef __CUDA_ARCH__
  __device__ static double mul(double a, double b) { return __dmul_rn(a, b); }
  __device__ static double add(double a, double b) { return __dadd_rn(a, b); }
  __device__ static double div(double a, double b) { return __ddiv_rn(a, b); }
  __device__ static double sqrt(double a) { return __dsqrt_rn(a); }
#else
  static double mul(double a, double b) { return a * b; }
  static double add(double a, double b) { return a + b; }
  static double div(double a, double b) { return a / b; }
  static double sqrt(double a) { return ::sqrt(a); }
#endif
};

#endif
