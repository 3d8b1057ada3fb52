// SPDX-License-Identifier: MIT
//
// elementwise: unary ops, copy/cast, fill and arange on CUDA.
//
// Invariant: as elementwise.cuh says, one element at a time, converted
// between dtypes only through kernel_util.cuh's cti_convert, the CPU's rules:
// float -> integer truncates toward zero and clamps (NaN -> 0), to bool is
// x != 0, f16/bf16 round to nearest even.
#include "cuda_backend.h"
#include "elementwise.cuh"

// ---- functors: one element each -------------------------------------------------------------
// out [out_t] = OP(a [T]).
template <ct_dtype D, ct_unary_op OP>
struct unary_fn {
  using T = cti_T<D>;
  using out_t = typename std::conditional<OP == CT_OP_ISFINITE, uint8_t, T>::type;
  out_t *out;
  const T *a;
  __host__ __device__ void operator()(const int64_t *off) const {
    const auto r = cti_unary_apply<OP>(cti_load<D>(a[off[1]]));
    if constexpr (OP == CT_OP_ISFINITE) out[off[0]] = (uint8_t)r;
    else out[off[0]] = cti_convert<D>(r);
  }
};

// out [To] = (To) in [From].
template <ct_dtype To, ct_dtype From>
struct copy_fn {
  cti_T<To> *out;
  const cti_T<From> *in;
  __host__ __device__ void operator()(const int64_t *off) const { out[off[0]] = cti_cast<To, From>(in[off[1]]); }
};

// out [W] = in [W]: a same-dtype copy moves the bits (NaN payloads and all),
// W an unsigned integer of the element's size.
template <size_t N> struct uint_of_size;
template <> struct uint_of_size<1> { using type = uint8_t; };
template <> struct uint_of_size<2> { using type = uint16_t; };
template <> struct uint_of_size<4> { using type = uint32_t; };
template <> struct uint_of_size<8> { using type = uint64_t; };

template <class W>
struct move_fn {
  W *out;
  const W *in;
  __host__ __device__ void operator()(const int64_t *off) const { out[off[0]] = in[off[1]]; }
};

// out [T] = v, v already stored as T.
template <ct_dtype D>
struct fill_fn {
  cti_T<D> *out;
  cti_T<D> v;
  __host__ __device__ void operator()(const int64_t *off) const { out[off[0]] = v; }
};

struct unary_launch {
  ct_unary_op op;
  const cti_iter *it;
  void *out;
  const void *a;
  cudaStream_t stream;

  template <ct_dtype D, ct_unary_op OP> int go() const {
    using F = unary_fn<D, OP>;
    F f{static_cast<typename F::out_t *>(out), static_cast<const cti_T<D> *>(a)};
    return cti_launch_elementwise<2>(it, f, stream);
  }
  template <ct_dtype D> int operator()() const {
    switch (op) {
    case CT_OP_NEG: return go<D, CT_OP_NEG>();
    case CT_OP_ABS: return go<D, CT_OP_ABS>();
    case CT_OP_RELU: return go<D, CT_OP_RELU>();
    case CT_OP_ISFINITE: return go<D, CT_OP_ISFINITE>();
    case CT_OP_EXP:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_EXP>();
      break;
    case CT_OP_LOG:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_LOG>();
      break;
    case CT_OP_SQRT:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_SQRT>();
      break;
    case CT_OP_SIGMOID:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_SIGMOID>();
      break;
    case CT_OP_TANH:
      if constexpr (cti_dt<D>::floating) return go<D, CT_OP_TANH>();
      break;
    default: break;
    }
    return ct_fail(CT_ERR_DTYPE, "ct_%s: not supported for %s on cuda", ct_unary_op_name(op),
                   cti_dt_name(D));
  }
};

template <ct_dtype To>
struct copy_from_launch {
  const cti_iter *it;
  void *out;
  const void *in;
  cudaStream_t stream;
  template <ct_dtype From> int operator()() const {
    if constexpr (To == From) { // same dtype, strided: move the bits
      using W = typename uint_of_size<sizeof(cti_T<To>)>::type;
      move_fn<W> f{static_cast<W *>(out), static_cast<const W *>(in)};
      return cti_launch_elementwise<2>(it, f, stream);
    } else {
      copy_fn<To, From> f{static_cast<cti_T<To> *>(out), static_cast<const cti_T<From> *>(in)};
      return cti_launch_elementwise<2>(it, f, stream);
    }
  }
};

struct copy_launch {
  ct_dtype in_dt;
  const cti_iter *it;
  void *out;
  const void *in;
  cudaStream_t stream;
  template <ct_dtype To> int operator()() const {
    return cti_dispatch_dtype(in_dt, copy_from_launch<To>{it, out, in, stream});
  }
};

struct fill_launch {
  const cti_iter *it;
  void *out;
  double v;
  cudaStream_t stream;
  template <ct_dtype D> int operator()() const {
    fill_fn<D> f{static_cast<cti_T<D> *>(out), cti_convert<D>(v)}; // converted once, on the host
    return cti_launch_elementwise<1>(it, f, stream);
  }
};

// out[i] (n, contiguous) = start + i * step, in double, then converted. The
// product and the sum are rounded separately (cti_rn): nvcc would otherwise
// fuse them into one fma, and the CPU does not.
template <ct_dtype D> struct arange_fn {
  cti_T<D> *out;
  double start, step;
  __host__ __device__ void operator()(int64_t i) const {
    out[i] = cti_convert<D>(cti_rn<double>::add(start, cti_rn<double>::mul((double)i, step)));
  }
};

struct arange_launch {
  int64_t n;
  void *out;
  double start, step;
  cudaStream_t stream;
  template <ct_dtype D> int operator()() const {
    return cti_device_exec{stream}.run(n, arange_fn<D>{static_cast<cti_T<D> *>(out), start, step});
  }
};

// ---- the backend's entries ---------------------------------------------------------------------
extern "C" int cti_cuda_unary(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out,
                             const void *a, ct_stream *s) {
  if ((unsigned)op >= CT_NUM_UNARY_OPS) return ct_fail(CT_ERR_VALUE, "ct_unary: invalid op %d", (int)op);
  if (!ct_dtype_valid(dt)) return cti_bad_dtype("ct_unary", dt);
  if (it->numel <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, unary_launch{op, it, out, a, scope.stream()});
}

extern "C" int cti_cuda_copy(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out,
                            const void *in, ct_stream *s) {
  if (!ct_dtype_valid(out_dt)) return cti_bad_dtype("ct_copy", out_dt);
  if (!ct_dtype_valid(in_dt)) return cti_bad_dtype("ct_copy", in_dt);
  if (it->numel <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  if (out_dt == in_dt && it->contiguous) { // the bits move unchanged, in one copy
    if (out != in)
      CT_CUDA_CHECK(cudaMemcpyAsync(out, in, (size_t)it->numel * ct_dtype_size(out_dt),
                                    cudaMemcpyDeviceToDevice, scope.stream()));
    return CT_OK;
  }
  return cti_dispatch_dtype(out_dt, copy_launch{in_dt, it, out, in, scope.stream()});
}

extern "C" int cti_cuda_fill(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s) {
  if (!ct_dtype_valid(dt)) return cti_bad_dtype("ct_fill_", dt);
  if (it->numel <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  if (it->contiguous && v == 0.0 && !signbit(v)) { // +0 is all-zero bytes in every dtype
    CT_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)it->numel * ct_dtype_size(dt), scope.stream()));
    return CT_OK;
  }
  return cti_dispatch_dtype(dt, fill_launch{it, out, v, scope.stream()});
}

extern "C" int cti_cuda_arange(ct_dtype dt, int64_t n, void *out, double start, double step,
                              ct_stream *s) {
  if (!ct_dtype_valid(dt)) return cti_bad_dtype("ct_arange", dt);
  if (n <= 0) return CT_OK;
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, arange_launch{n, out, start, step, scope.stream()});
}
