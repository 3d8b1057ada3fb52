// SPDX-License-Identifier: MIT
//
// binary: out = a OP b and out = a OP scalar on CUDA, for every dtype and op
// (add, sub, mul, div, maximum, minimum, pow and the six comparisons).
//
// Invariant: as elementwise.cuh says, one element at a time in the compute
// type of the dtype, rounded once. Integer DIV never arrives (the dispatcher
// makes it float32 true division) and is refused, as on the CPU; integer POW
// (the dispatcher sends float64) wraps like the CPU's. MAXIMUM and MINIMUM
// propagate NaN; comparisons write bool (uint8 0/1).
#include "cuda_backend.h"
#include "elementwise.cuh"

// ---- functors: one element each -------------------------------------------------------------
// out (it's shape) [out_t] = a [T] OP b [T]; off = {out, a, b} element offsets.
template <ct_dtype D, ct_binary_op OP>
struct binary_fn {
  using T = cti_T<D>;
  using out_t = typename std::conditional<cti_is_comparison(OP), uint8_t, T>::type;
  out_t *out;
  const T *a, *b;
  __host__ __device__ void operator()(const int64_t *off) const {
    const auto r = cti_binary_apply<OP>(cti_load<D>(a[off[1]]), cti_load<D>(b[off[2]]));
    if constexpr (cti_is_comparison(OP)) out[off[0]] = (uint8_t)r;
    else out[off[0]] = cti_convert<D>(r);
  }
};

// out [out_t] = a [T] OP s, s already in the compute type.
template <ct_dtype D, ct_binary_op OP>
struct binary_scalar_fn {
  using T = cti_T<D>;
  using out_t = typename std::conditional<cti_is_comparison(OP), uint8_t, T>::type;
  out_t *out;
  const T *a;
  cti_C<D> s;
  __host__ __device__ void operator()(const int64_t *off) const {
    const auto r = cti_binary_apply<OP>(cti_load<D>(a[off[1]]), s);
    if constexpr (cti_is_comparison(OP)) out[off[0]] = (uint8_t)r;
    else out[off[0]] = cti_convert<D>(r);
  }
};

// ---- launchers: pick the functor for the run-time dtype and op -------------------------------
#define CT_BINARY_CASES(X)                                                                   \
  X(CT_OP_ADD) X(CT_OP_SUB) X(CT_OP_MUL) X(CT_OP_MAXIMUM) X(CT_OP_MINIMUM) X(CT_OP_EQ)        \
  X(CT_OP_NE) X(CT_OP_LT) X(CT_OP_LE) X(CT_OP_GT) X(CT_OP_GE)

struct binary_launch {
  ct_binary_op op;
  const cti_iter *it;
  void *out;
  const void *a, *b;
  cudaStream_t stream;

  template <ct_dtype D, ct_binary_op OP> int go() const {
    using F = binary_fn<D, OP>;
    F f{static_cast<typename F::out_t *>(out), static_cast<const cti_T<D> *>(a),
        static_cast<const cti_T<D> *>(b)};
    return cti_launch_elementwise<3>(it, f, stream);
  }
  template <ct_dtype D> int operator()() const {
    switch (op) {
#define CT_CASE(OP) case OP: return go<D, OP>();
      CT_BINARY_CASES(CT_CASE)
#undef CT_CASE
    case CT_OP_DIV:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_DIV>();
      break;
    case CT_OP_POW: return go<D, CT_OP_POW>();
    default: break;
    }
    return ct_fail(CT_ERR_DTYPE, "ct_%s: not supported for %s on cuda", ct_binary_op_name(op),
                   cti_dt_name(D));
  }
};

struct binary_scalar_launch {
  ct_binary_op op;
  const cti_iter *it;
  void *out;
  const void *a;
  double scalar;
  cudaStream_t stream;

  template <ct_dtype D, ct_binary_op OP> int go() const {
    using F = binary_scalar_fn<D, OP>;
    const cti_C<D> s = cti_scalar_operand<D>(scalar);
    F f{static_cast<typename F::out_t *>(out), static_cast<const cti_T<D> *>(a), s};
    return cti_launch_elementwise<2>(it, f, stream);
  }
  template <ct_dtype D> int operator()() const {
    switch (op) {
#define CT_CASE(OP) case OP: return go<D, OP>();
      CT_BINARY_CASES(CT_CASE)
#undef CT_CASE
    case CT_OP_DIV:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_DIV>();
      break;
    case CT_OP_POW: return go<D, CT_OP_POW>();
    default: break;
    }
    return ct_fail(CT_ERR_DTYPE, "ct_%s: not supported for %s on cuda", ct_binary_op_name(op),
                   cti_dt_name(D));
  }
};

// ---- the backend's entries ---------------------------------------------------------------------
extern "C" int cti_cuda_binary(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                              const void *a, const void *b, ct_stream *s) {
  if ((unsigned)op >= CT_NUM_BINARY_OPS) return ct_fail(CT_ERR_VALUE, "ct_binary: invalid op %d", (int)op);
  if (!ct_dtype_valid(dt)) return cti_bad_dtype("ct_binary", dt);
  if (it->numel <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, binary_launch{op, it, out, a, b, scope.stream()});
}

extern "C" int cti_cuda_binary_scalar(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                                     const void *a, double scalar, ct_stream *s) {
  if ((unsigned)op >= CT_NUM_BINARY_OPS)
    return ct_fail(CT_ERR_VALUE, "ct_binary_scalar: invalid op %d", (int)op);
  if (!ct_dtype_valid(dt)) return cti_bad_dtype("ct_binary_scalar", dt);
  if (it->numel <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, binary_scalar_launch{op, it, out, a, scalar, scope.stream()});
}

