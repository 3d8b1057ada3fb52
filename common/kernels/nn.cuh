// SPDX-License-Identifier: MIT
//
// nn.cuh: the per-element bodies of nn.cu's grid-stride loops (ReLU's
// backward, dropout's mask-and-scale) and their launchers, templated on the
// executor (kernel_util.cuh): nn.cu runs them on the GPU, the host test
// (tests/crossdev/test_kernels_host.cu) runs the same code on the CPU.
//
// Invariant: body(i) reads element i of the inputs and writes element i of
// the outputs, in the compute type of the dtype, rounded once (as cpu_nn.c).
#ifndef CT_NN_CUH
#define CT_NN_CUH

#include <stdint.h>

#include "kernel_util.cuh"
#include "nn_kernels.h"

// ---- ReLU backward ----------------------------------------------------------------------------
// out[i] = y[i] <= 0 ? 0 : g[i] (y, g, out: n elements, contiguous).
template <ct_dtype D> struct cti_relu_backward_op {
  const cti_T<D> *y, *g;
  cti_T<D> *out;
  __host__ __device__ void operator()(int64_t i) const {
    out[i] = cti_load<D>(y[i]) <= 0 ? cti_convert<D>(0.0f) : g[i];
  }
};

template <class X> struct cti_relu_backward_launch {
  X x;
  int64_t n;
  const void *y, *g;
  void *out;
  template <ct_dtype D> int operator()() const {
    if constexpr (!cti_dt<D>::floating) {
      return ct_fail(CT_ERR_DTYPE, "cti_relu_backward: not supported for %s on cuda (floating dtypes only)",
                     cti_dt_name(D));
    } else {
      return x.run(n, cti_relu_backward_op<D>{static_cast<const cti_T<D> *>(y),
                                             static_cast<const cti_T<D> *>(g), static_cast<cti_T<D> *>(out)});
    }
  }
};

template <class X>
int cti_relu_backward_run(const X &x, ct_dtype dt, int64_t n, const void *y, const void *g, void *out) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "cti_relu_backward: dtype %s not supported on cuda", cti_dt_name(dt));
  if (n <= 0) return CT_OK;
  return cti_dispatch_dtype(dt, cti_relu_backward_launch<X>{x, n, y, g, out});
}

// ---- dropout ----------------------------------------------------------------------------------
// mask[i] = u[i] >= p ? keep : 0, y[i] = x[i] * mask[i] in the compute type,
// rounded once (n elements, contiguous; u float32; keep = scale in dtype D).
template <ct_dtype D> struct cti_dropout_op {
  const cti_T<D> *x;
  const float *u;
  double p;
  cti_T<D> keep;
  cti_T<D> *y, *mask;
  __host__ __device__ void operator()(int64_t i) const {
    using C = cti_C<D>;
    const bool k = (double)u[i] >= p;
    mask[i] = k ? keep : cti_convert<D>(0.0f);
    y[i] = cti_convert<D>(cti_load<D>(x[i]) * (k ? cti_load<D>(keep) : C(0)));
  }
};

template <class X> struct cti_dropout_launch {
  X x;
  int64_t n;
  const void *src;
  const float *u;
  double p, scale;
  void *y, *mask;
  template <ct_dtype D> int operator()() const {
    if constexpr (!cti_dt<D>::floating) {
      return ct_fail(CT_ERR_DTYPE, "cti_dropout: not supported for %s on cuda (floating dtypes only)",
                     cti_dt_name(D));
    } else {
      const cti_T<D> keep = cti_convert<D>((cti_C<D>)scale);
      return x.run(n, cti_dropout_op<D>{static_cast<const cti_T<D> *>(src), u, p, keep,
                                       static_cast<cti_T<D> *>(y), static_cast<cti_T<D> *>(mask)});
    }
  }
};

template <class X>
int cti_dropout_run(const X &x, ct_dtype dt, int64_t n, const void *src, const float *u, double p,
                   double scale, void *y, void *mask) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "cti_dropout: dtype %s not supported on cuda", cti_dt_name(dt));
  if (n <= 0) return CT_OK;
  return cti_dispatch_dtype(dt, cti_dropout_launch<X>{x, n, src, u, p, scale, y, mask});
}

#endif
