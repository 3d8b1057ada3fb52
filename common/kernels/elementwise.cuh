// SPDX-License-Identifier: MIT
//
// elementwise.cuh: the one loop every elementwise op of the CUDA backend runs
// (binary.cu, elementwise.cu), and the scalar math they share.
//
// cti_elementwise_kernel<N, F> walks the cti_iter's numel output elements with
// a grid-stride loop (64-bit indices: a tensor may have more than 2^31
// elements), turns the linear index into one element offset per operand, and
// calls the functor F, which loads, computes and stores one element. An op is
// then only a functor, a launcher that picks the functor for the run-time
// dtype and op, and the extern "C" entry that checks what it was handed.
//
// The invariant: element i's result depends only on the inputs at i, through
// the same arithmetic as the CPU backend: integers and bool compute in int64
// and wrap to their dtype, f16/bf16 and f32 compute in float, f64 in double,
// and results are rounded to the dtype once (kernel_util.cuh). The math
// functions are CUDA's precise ones (expf, logf, tanhf, powf; this code is
// never built with --use_fast_math), which may differ from glibc's by an ulp
// or two: tests compare with a tolerance, not bit for bit.
#ifndef CT_ELEMENTWISE_CUH
#define CT_ELEMENTWISE_CUH

#include <type_traits>

#include "hostdev.h"
#include "kernel_util.cuh"

// ---- the loop ----------------------------------------------------------------------------
// Element i's offset into each of the N operands: off[k] = sum over dims d of
// (i's index along d) * it.stride[k][d], i read as a row-major index into
// it.shape (cti_iter_offset's walk, backend.h). Three paths: all operands
// contiguous (offset = i), one merged dim with any strides (offset = i *
// stride; covers a broadcast scalar operand), and the general N-d case.
// __host__ too: the host test checks it against the CPU backend's loops.
#ifdef __CUDA_ARCH__
#define CT_UNROLL _Pragma("unroll") // off[] stays in registers
#else
#define CT_UNROLL
#endif
template <int N>
__host__ __device__ inline void cti_elementwise_offsets(const cti_iter &it, int64_t i, int64_t (&off)[N]) {
  if (it.contiguous) {
CT_UNROLL
    for (int k = 0; k < N; ++k) off[k] = i;
  } else if (it.ndim == 1) {
CT_UNROLL
    for (int k = 0; k < N; ++k) off[k] = i * it.stride[k][0];
  } else {
    // peel dims from the last
    int64_t rem = i;
CT_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = it.ndim - 1; d >= 0; --d) {
      const int64_t size = it.shape[d];
      const int64_t q = rem / size;
      const int64_t idx = rem - q * size;
      rem = q;
CT_UNROLL
      for (int k = 0; k < N; ++k) off[k] += idx * it.stride[k][d];
    }
  }
}

// Enters with it.numel >= 1 and f's pointers valid for every offset the iter
// describes; leaves with f applied once to every element (a grid-stride loop
// over 64-bit indices: a tensor may have more than 2^31 elements).
template <int N, class F>
static __global__ void cti_elementwise_kernel(cti_iter it, F f) {
  const int64_t n = it.numel;
  int64_t off[N];
  for (int64_t i = cti_grid_start<int64_t>(); i < n; i += cti_grid_step<int64_t>()) {
    cti_elementwise_offsets<N>(it, i, off);
    f(off);
  }
}

template <int N, class F>
static int cti_launch_elementwise(const cti_iter *it, const F &f, cudaStream_t stream) {
  if (it->numel <= 0) return CT_OK;
  CT_LAUNCH(cti_elementwise_kernel<N, F>)(cti_blocks_for(it->numel, CT_THREADS), CT_THREADS, 0, stream)(*it, f);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

// ---- scalar math, in the compute type --------------------------------------------------
__host__ __device__ inline float cti_m_pow(float a, float b) { return powf(a, b); }
__host__ __device__ inline double cti_m_pow(double a, double b) { return pow(a, b); }
__host__ __device__ inline float cti_m_exp(float x) { return expf(x); }
__host__ __device__ inline double cti_m_exp(double x) { return exp(x); }
__host__ __device__ inline float cti_m_log(float x) { return logf(x); }
__host__ __device__ inline double cti_m_log(double x) { return log(x); }
__host__ __device__ inline float cti_m_sqrt(float x) { return sqrtf(x); }
__host__ __device__ inline double cti_m_sqrt(double x) { return sqrt(x); }
__host__ __device__ inline float cti_m_tanh(float x) { return tanhf(x); }
__host__ __device__ inline double cti_m_tanh(double x) { return tanh(x); }
__host__ __device__ inline float cti_m_abs(float x) { return fabsf(x); }
__host__ __device__ inline double cti_m_abs(double x) { return fabs(x); }

// Integer power with wrap-around: hostdev.h's cti_ipow, the CPU backend's too.

// a OP b in compute type C (int64_t, float or double). Comparisons give bool.
// Integer add/sub/mul/neg go through uint64 so that overflow wraps (defined)
// instead of being undefined behaviour.
template <ct_binary_op OP, class C>
__host__ __device__ inline auto cti_binary_apply(C a, C b) {
  constexpr bool is_int = std::is_same<C, int64_t>::value;
  if constexpr (OP == CT_OP_ADD) {
    if constexpr (is_int) return (int64_t)((uint64_t)a + (uint64_t)b);
    else return a + b;
  } else if constexpr (OP == CT_OP_SUB) {
    if constexpr (is_int) return (int64_t)((uint64_t)a - (uint64_t)b);
    else return a - b;
  } else if constexpr (OP == CT_OP_MUL) {
    if constexpr (is_int) return (int64_t)((uint64_t)a * (uint64_t)b);
    else return a * b;
  } else if constexpr (OP == CT_OP_DIV) {
    static_assert(!is_int, "integer division is promoted to float by the dispatcher");
    return a / b;
  } else if constexpr (OP == CT_OP_MAXIMUM) {
    // a NaN on either side wins; on ties a (so maximum(-0., 0.) is -0.), as the CPU
    return (a != a || a >= b) ? a : b;
  } else if constexpr (OP == CT_OP_MINIMUM) {
    return (a != a || a <= b) ? a : b;
  } else if constexpr (OP == CT_OP_POW) {
    if constexpr (is_int) return cti_ipow(a, b); // the dispatcher sends float64; kept for parity
    else return cti_m_pow(a, b);
  } else if constexpr (OP == CT_OP_EQ) {
    return a == b;
  } else if constexpr (OP == CT_OP_NE) {
    return a != b;
  } else if constexpr (OP == CT_OP_LT) {
    return a < b;
  } else if constexpr (OP == CT_OP_LE) {
    return a <= b;
  } else if constexpr (OP == CT_OP_GT) {
    return a > b;
  } else {
    static_assert(OP == CT_OP_GE, "unknown binary op");
    return a >= b;
  }
}

// OP(x) in compute type C. ISFINITE gives bool.
template <ct_unary_op OP, class C>
__host__ __device__ inline auto cti_unary_apply(C x) {
  constexpr bool is_int = std::is_same<C, int64_t>::value;
  if constexpr (OP == CT_OP_NEG) {
    if constexpr (is_int) return (int64_t)((uint64_t)0 - (uint64_t)x);
    else return -x;
  } else if constexpr (OP == CT_OP_ABS) {
    if constexpr (is_int) return x < 0 ? (int64_t)((uint64_t)0 - (uint64_t)x) : x;
    else return cti_m_abs(x);
  } else if constexpr (OP == CT_OP_RELU) { // NaN stays NaN
    if constexpr (is_int) return x > 0 ? x : (int64_t)0;
    else return x != x ? x : (x > C(0) ? x : C(0));
  } else if constexpr (OP == CT_OP_ISFINITE) {
    if constexpr (is_int) return true;
    else return cti_isfinite(x);
  } else {
    static_assert(!is_int, "exp, log, sqrt, sigmoid and tanh take floating dtypes only");
    if constexpr (OP == CT_OP_EXP) return cti_m_exp(x);
    else if constexpr (OP == CT_OP_LOG) return cti_m_log(x);
    else if constexpr (OP == CT_OP_SQRT) return cti_m_sqrt(x);
    else if constexpr (OP == CT_OP_SIGMOID) return C(1) / (C(1) + cti_m_exp(-x));
    else {
      static_assert(OP == CT_OP_TANH, "unknown unary op");
      return cti_m_tanh(x);
    }
  }
}

// The compute-type value of a Python-style scalar operand of a dtype-D
// tensor. The scalar is first converted to D, then loaded: a float16 tensor
// times 0.1 multiplies by float16(0.1), as PyTorch's CPU kernels do (its
// CUDA kernels would use float(0.1)). An integer dtype takes the (integral)
// scalar modulo its range, as PyTorch does, so uint8 + (-3) subtracts 3: the
// scalar goes to int64 first (truncating, saturating), then wraps to D.
template <ct_dtype D> __host__ __device__ inline cti_C<D> cti_scalar_operand(double scalar) {
  if constexpr (!cti_dt<D>::floating && D != CT_BOOL) return cti_load<D>(cti_convert<D>(cti_convert<CT_I64>(scalar)));
  else return cti_load<D>(cti_convert<D>(scalar));
}

constexpr bool cti_is_comparison(ct_binary_op op) { return op >= CT_OP_EQ && op <= CT_OP_GE; }

inline int cti_bad_dtype(const char *op, ct_dtype dt) {
  return ct_fail(CT_ERR_DTYPE, "%s: dtype %s not supported on cuda", op, cti_dt_name(dt));
}

#endif
