// SPDX-License-Identifier: MIT
//
// transformer.cuh: the bodies of transformer.cu's kernels (Embedding,
// LayerNorm, GELU, softmax, the LM cross-entropy; transformer_kernels.h says
// what each computes) and their launchers, templated on the executor
// (kernel_util.cuh), so that tests/crossdev/test_kernels_host.cu runs on the
// host the very code the GPU runs.
//
// Two shapes of work:
//  - per element: a functor body(i) writes output element i alone, reading
//    what it needs in a fixed order (embedding lookup and its gradient, GELU,
//    LayerNorm's column sums), run by x.run(n, body) as in conv.cuh;
//  - per row: a warp owns a row. A row op F makes `passes` reductions over
//    the row, then writes every element, then finishes the row once:
//      acc_t init(p); acc_t step(p, row, j, acc, red)   lane-strided partials
//      acc_t combine(p, a, b)                         the butterfly's operator
//      void write(row, j, red); void finish(row, red)
//    where red[q] is pass q's result. On the GPU lane l steps through
//    j = l, l + 32, ...; five butterfly rounds (__shfl_xor_sync with 16, 8,
//    4, 2, 1) leave the same value in every lane, since combine is
//    commutative (a + b == b + a bit for bit). cti_rows_run on the host
//    walks the 32 lanes one after another and replays the same rounds, so
//    it computes what the warp computes, in the same order.
// The sums run in the compute type (float for f32), in an order fixed by
// the shape: the same input gives the same bits on every run.
#ifndef CT_TRANSFORMER_CUH
#define CT_TRANSFORMER_CUH

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "async_error.h"
#include "kernel_util.cuh"
#include "transformer_kernels.h"
#if defined(__CUDACC__) || defined(CT_SIM) // CT_SIM: the SIMT emulator (tools/sim)
#include "async_error.cuh"
#endif

// ---- math in the compute type, on both sides ---------------------------------------------------
__host__ __device__ inline float cti_tf_exp(float x) { return expf(x); }
__host__ __device__ inline double cti_tf_exp(double x) { return exp(x); }
__host__ __device__ inline float cti_tf_log(float x) { return logf(x); }
__host__ __device__ inline double cti_tf_log(double x) { return log(x); }
__host__ __device__ inline float cti_tf_tanh(float x) { return tanhf(x); }
__host__ __device__ inline double cti_tf_tanh(double x) { return tanh(x); }
__host__ __device__ inline float cti_tf_erf(float x) { return erff(x); }
__host__ __device__ inline double cti_tf_erf(double x) { return erf(x); }
__host__ __device__ inline float cti_tf_rsqrt(float x) { return 1.0f / sqrtf(x); }
__host__ __device__ inline double cti_tf_rsqrt(double x) { return 1.0 / sqrt(x); }
// max that lets a NaN through (either operand), commutative in value.
template <class A> __host__ __device__ inline A cti_tf_max(A a, A b) { return (a > b || a != a) ? a : b; }

// A kernel's report of bad input: on the GPU the device's async_error record
// (first report wins); on the host a plain record the test reads back.
__host__ __device__ inline void cti_tf_report(cti_async_record *r, long long code, long long a,
                                              long long b, long long c) {
#ifdef __CUDA_ARCH__
  cti_async_report(r, code, a, b, c);
#else
  if (!r || r->claimed) return;
  r->claimed = 1, r->a = a, r->b = b, r->c = c, r->code = code;
#endif
}

// ---- the row executor ------------------------------------------------------------------------------
template <class A> struct cti_acc2 {
  A a, b;
};
template <class A> __host__ __device__ inline cti_acc2<A> cti_acc2_sum(cti_acc2<A> x, cti_acc2<A> y) {
  return {x.a + y.a, x.b + y.b};
}

constexpr int CT_TF_ROW_THREADS = 256; // 8 warps, 8 rows per block
constexpr int CT_TF_MAX_PASSES = 2;

#if defined(__CUDACC__) || defined(CT_SIM)
template <class A> __device__ inline cti_acc2<A> cti_tf_shfl_xor(cti_acc2<A> v, int m) {
  return {__shfl_xor_sync(0xffffffffu, v.a, m), __shfl_xor_sync(0xffffffffu, v.b, m)};
}

// One warp per row (every lane of a warp has the same row, so the shuffles
// see full warps); a grid-stride loop over rows.
template <class F> static __global__ void cti_warp_rows_kernel(int64_t rows, int64_t cols, F f) {
  using acc_t = typename F::acc_t;
  const int lane = threadIdx.x & 31, per_block = blockDim.x >> 5;
  const int64_t step = (int64_t)gridDim.x * per_block;
  for (int64_t r = (int64_t)blockIdx.x * per_block + (threadIdx.x >> 5); r < rows; r += step) {
    acc_t red[CT_TF_MAX_PASSES];
    for (int p = 0; p < F::passes; ++p) {
      acc_t a = f.init(p);
      for (int64_t j = lane; j < cols; j += 32) a = f.step(p, r, j, a, red);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) a = f.combine(p, a, cti_tf_shfl_xor(a, off));
      red[p] = a;
    }
    for (int64_t j = lane; j < cols; j += 32) f.write(r, j, red);
    if (lane == 0) f.finish(r, red);
  }
}

template <class F> int cti_rows_run(const cti_device_exec &x, int64_t rows, int64_t cols, const F &f) {
  if (rows <= 0) return CT_OK;
  const int per_block = CT_TF_ROW_THREADS / 32;
  CT_LAUNCH(cti_warp_rows_kernel<F>)(cti_blocks_for(cti_ceil_div(rows, per_block), 1), CT_TF_ROW_THREADS, 0,
                            x.stream)(rows, cols, f);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}
#endif

// The warp's work replayed on the host: lanes one by one, then the butterfly.
template <class F> int cti_rows_run(const cti_host_exec &, int64_t rows, int64_t cols, const F &f) {
  using acc_t = typename F::acc_t;
  for (int64_t r = 0; r < rows; ++r) {
    acc_t red[CT_TF_MAX_PASSES];
    for (int p = 0; p < F::passes; ++p) {
      acc_t lane[32], next[32];
      for (int l = 0; l < 32; ++l) {
        lane[l] = f.init(p);
        for (int64_t j = l; j < cols; j += 32) lane[l] = f.step(p, r, j, lane[l], red);
      }
      for (int off = 16; off > 0; off >>= 1) {
        for (int l = 0; l < 32; ++l) next[l] = f.combine(p, lane[l], lane[l ^ off]);
        for (int l = 0; l < 32; ++l) lane[l] = next[l];
      }
      red[p] = lane[0];
    }
    for (int64_t j = 0; j < cols; ++j) f.write(r, j, red);
    f.finish(r, red);
  }
  return CT_OK;
}

// ---- embedding -------------------------------------------------------------------------------------
// Element i = (row, j) of out (n, c) copies weight[idx[row]][j]; a row whose
// index lies outside [0, v) is reported (code CT_ASYNC_INDEX_OUT_OF_RANGE:
// position, index, v) and becomes NaN.
template <ct_dtype D> struct cti_embedding_op {
  const int64_t *idx;
  const cti_T<D> *w;
  cti_T<D> *out;
  int64_t c, v;
  cti_async_record *rec;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t row = i / c, j = i - row * c, t = idx[row];
    if (t < 0 || t >= v) {
      if (j == 0) cti_tf_report(rec, CT_ASYNC_INDEX_OUT_OF_RANGE, row, t, v);
      out[i] = cti_convert<D>((cti_C<D>)NAN);
      return;
    }
    out[i] = w[t * c + j];
  }
};

// Element i = (r, j) of dweight (v, c): the sum of dout[k][j] over the k with
// idx[k] == r, k ascending, in the compute type (a thread owns its element).
template <ct_dtype D> struct cti_embedding_backward_op {
  const int64_t *idx;
  const cti_T<D> *dout;
  cti_T<D> *dw;
  int64_t n, c;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t r = i / c, j = i - r * c;
    cti_C<D> acc = 0;
    for (int64_t k = 0; k < n; ++k)
      if (idx[k] == r) acc = acc + cti_load<D>(dout[k * c + j]);
    dw[i] = cti_convert<D>(acc);
  }
};

template <class X> struct cti_embedding_launch {
  X x;
  bool backward;
  int64_t n, c, v;
  const int64_t *idx;
  const void *src; // weight (forward) or dout (backward)
  void *dst;       // out or dweight
  cti_async_record *rec;
  template <ct_dtype D> int operator()() const {
    if constexpr (!cti_dt<D>::floating) {
      return ct_fail(CT_ERR_DTYPE, "Embedding: not implemented for %s on cuda (floating dtypes only)",
                     cti_dt_name(D));
    } else {
      const cti_T<D> *s = static_cast<const cti_T<D> *>(src);
      cti_T<D> *d = static_cast<cti_T<D> *>(dst);
      if (backward) return x.run(v * c, cti_embedding_backward_op<D>{idx, s, d, n, c});
      return x.run(n * c, cti_embedding_op<D>{idx, s, d, c, v, rec});
    }
  }
};

template <class X>
int cti_embedding_run(const X &x, ct_dtype dt, bool backward, int64_t n, int64_t c, int64_t v,
                      const int64_t *idx, const void *src, void *dst, cti_async_record *rec) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "Embedding: dtype %s not supported on cuda", cti_dt_name(dt));
  if (c <= 0 || (backward ? v : n) <= 0) return CT_OK;
  return cti_dispatch_dtype(dt, cti_embedding_launch<X>{x, backward, n, c, v, idx, src, dst, rec});
}

// ---- GELU --------------------------------------------------------------------------------------------
// approximate="tanh" in float (f32, f16, bf16) is transformer_kernels.h's
// cti_gelu_tanh_valuef/slopef, the very code the CPU loop runs, so the two
// devices give the same bits; double and approximate="none" use the
// formulas below (the CPU computes those in double).
template <class A> __host__ __device__ inline A cti_gelu_value(bool tanh_approx, A x) {
  const A k = A(0.7978845608028654), a = A(0.044715);
  if (tanh_approx) {
    if constexpr (std::is_same<A, float>::value) return cti_gelu_tanh_valuef(x);
    else return A(0.5) * x * (A(1) + cti_tf_tanh(k * (x + a * x * x * x)));
  }
  return A(0.5) * x * (A(1) + cti_tf_erf(x * A(0.7071067811865476)));
}
template <class A> __host__ __device__ inline A cti_gelu_slope(bool tanh_approx, A x) {
  const A k = A(0.7978845608028654), a = A(0.044715);
  if (tanh_approx) {
    if constexpr (std::is_same<A, float>::value) {
      return cti_gelu_tanh_slopef(x);
    } else {
      const A t = cti_tf_tanh(k * (x + a * x * x * x));
      return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * a * x * x);
    }
  }
  return A(0.5) * (A(1) + cti_tf_erf(x * A(0.7071067811865476))) +
         x * cti_tf_exp(A(-0.5) * x * x) * A(0.3989422804014327);
}

// out[i] = gelu(x[i]), or dy[i] * gelu'(x[i]) when dy is not NULL.
template <ct_dtype D> struct cti_gelu_op {
  const cti_T<D> *x, *dy;
  cti_T<D> *out;
  bool tanh_approx;
  __host__ __device__ void operator()(int64_t i) const {
    const cti_C<D> v = cti_load<D>(x[i]);
    out[i] = cti_convert<D>(dy ? cti_load<D>(dy[i]) * cti_gelu_slope(tanh_approx, v)
                               : cti_gelu_value(tanh_approx, v));
  }
};

template <class X> struct cti_gelu_launch {
  X x;
  bool tanh_approx;
  int64_t n;
  const void *src, *dy;
  void *out;
  template <ct_dtype D> int operator()() const {
    if constexpr (!cti_dt<D>::floating) {
      return ct_fail(CT_ERR_DTYPE, "GELU: not implemented for %s on cuda (floating dtypes only)",
                     cti_dt_name(D));
    } else {
      return x.run(n, cti_gelu_op<D>{static_cast<const cti_T<D> *>(src), static_cast<const cti_T<D> *>(dy),
                                     static_cast<cti_T<D> *>(out), tanh_approx});
    }
  }
};

template <class X>
int cti_gelu_run(const X &x, ct_dtype dt, bool tanh_approx, int64_t n, const void *src, const void *dy,
                 void *out) {
  if (!ct_dtype_valid(dt)) return ct_fail(CT_ERR_DTYPE, "GELU: dtype %s not supported on cuda", cti_dt_name(dt));
  if (n <= 0) return CT_OK;
  return cti_dispatch_dtype(dt, cti_gelu_launch<X>{x, tanh_approx, n, src, dy, out});
}

// ---- layer norm -------------------------------------------------------------------------------------
// Forward, a warp per row: pass 0 sums x, pass 1 sums (x - mean)^2.
template <class T> struct cti_layernorm_rows {
  using A = T;
  using acc_t = cti_acc2<A>;
  static constexpr int passes = 2;
  const T *x, *w, *b;
  T *y, *mean, *rstd;
  int64_t c;
  A eps;
  __host__ __device__ A mu(const acc_t *red) const { return red[0].a / A(c); }
  __host__ __device__ A rs(const acc_t *red) const { return cti_tf_rsqrt(red[1].a / A(c) + eps); }
  __host__ __device__ acc_t init(int) const { return {A(0), A(0)}; }
  __host__ __device__ acc_t step(int p, int64_t r, int64_t j, acc_t acc, const acc_t *red) const {
    const A v = x[r * c + j];
    if (p == 0) return {acc.a + v, acc.b};
    const A d = v - mu(red);
    return {acc.a + d * d, acc.b};
  }
  __host__ __device__ acc_t combine(int, acc_t a, acc_t b) const { return cti_acc2_sum(a, b); }
  __host__ __device__ void write(int64_t r, int64_t j, const acc_t *red) const {
    y[r * c + j] = (x[r * c + j] - mu(red)) * rs(red) * w[j] + b[j];
  }
  __host__ __device__ void finish(int64_t r, const acc_t *red) const {
    mean[r] = mu(red);
    rstd[r] = rs(red);
  }
};

// dx, a warp per row: one pass sums g = dy * w and g * xhat together.
template <class T> struct cti_layernorm_dx_rows {
  using A = T;
  using acc_t = cti_acc2<A>;
  static constexpr int passes = 1;
  const T *x, *dy, *mean, *rstd, *w;
  T *dx;
  int64_t c;
  __host__ __device__ A xhat(int64_t r, int64_t j) const { return (x[r * c + j] - mean[r]) * rstd[r]; }
  __host__ __device__ acc_t init(int) const { return {A(0), A(0)}; }
  __host__ __device__ acc_t step(int, int64_t r, int64_t j, acc_t acc, const acc_t *) const {
    const A g = dy[r * c + j] * w[j];
    return {acc.a + g, acc.b + g * xhat(r, j)};
  }
  __host__ __device__ acc_t combine(int, acc_t a, acc_t b) const { return cti_acc2_sum(a, b); }
  __host__ __device__ void write(int64_t r, int64_t j, const acc_t *red) const {
    const A g = dy[r * c + j] * w[j];
    dx[r * c + j] = rstd[r] * (g - red[0].a / A(c) - xhat(r, j) * (red[0].b / A(c)));
  }
  __host__ __device__ void finish(int64_t, const acc_t *) const {}
};

// Column sums, pass 1: element i = (k, j) sums rows [k*CH, (k+1)*CH) of
// column j into work[k*c + j] (dy * xhat) and work[K*c + k*c + j] (dy).
template <class T> struct cti_layernorm_colsum_op {
  const T *x, *dy, *mean, *rstd;
  T *work;
  int64_t n, c, chunks;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t k = i / c, j = i - k * c;
    const int64_t end = (k + 1) * CTI_LN_CHUNK < n ? (k + 1) * CTI_LN_CHUNK : n;
    T aw = 0, ab = 0;
    for (int64_t r = k * CTI_LN_CHUNK; r < end; ++r) {
      const T g = dy[r * c + j];
      aw = aw + g * ((x[r * c + j] - mean[r]) * rstd[r]);
      ab = ab + g;
    }
    work[i] = aw;
    work[chunks * c + i] = ab;
  }
};

// Pass 2: element j adds the chunks' partials in ascending k.
template <class T> struct cti_layernorm_colfinal_op {
  const T *work;
  T *dw, *db;
  int64_t c, chunks;
  __host__ __device__ void operator()(int64_t j) const {
    T aw = 0, ab = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      aw = aw + work[k * c + j];
      ab = ab + work[chunks * c + k * c + j];
    }
    dw[j] = aw;
    db[j] = ab;
  }
};

template <class X>
int cti_layernorm_run(const X &x, ct_dtype dt, int64_t n, int64_t c, const void *src, const void *w,
                      const void *b, double eps, void *y, void *mean, void *rstd) {
  if (n <= 0) return CT_OK;
  return cti_dispatch_float(dt, "LayerNorm", [&](auto tag) -> int {
    using T = decltype(tag);
    return cti_rows_run(x, n, c, cti_layernorm_rows<T>{static_cast<const T *>(src), static_cast<const T *>(w),
                                                       static_cast<const T *>(b), static_cast<T *>(y),
                                                       static_cast<T *>(mean), static_cast<T *>(rstd), c,
                                                       (T)eps});
  });
}

template <class X>
int cti_layernorm_backward_run(const X &x, ct_dtype dt, int64_t n, int64_t c, const void *src,
                               const void *dy, const void *mean, const void *rstd, const void *w,
                               void *dx, void *dw, void *db, void *work) {
  return cti_dispatch_float(dt, "LayerNorm backward", [&](auto tag) -> int {
    using T = decltype(tag);
    const T *xs = static_cast<const T *>(src), *g = static_cast<const T *>(dy);
    const T *mu = static_cast<const T *>(mean), *rs = static_cast<const T *>(rstd);
    const int64_t chunks = cti_ceil_div(n, CTI_LN_CHUNK);
    int rc = cti_rows_run(x, n, c, cti_layernorm_dx_rows<T>{xs, g, mu, rs, static_cast<const T *>(w),
                                                            static_cast<T *>(dx), c});
    if (!rc) rc = x.run(chunks * c, cti_layernorm_colsum_op<T>{xs, g, mu, rs, static_cast<T *>(work), n, c, chunks});
    if (!rc)
      rc = x.run(c, cti_layernorm_colfinal_op<T>{static_cast<const T *>(work), static_cast<T *>(dw),
                                                 static_cast<T *>(db), c, chunks});
    return rc;
  });
}

// ---- softmax -----------------------------------------------------------------------------------------
// Row r over `cols` values, z = scale * x; under the causal mask only
// j <= r mod cols take part. Pass 0: max z; pass 1: sum exp(z - shift).
template <class T> struct cti_softmax_rows {
  using A = T;
  using acc_t = cti_acc2<A>;
  static constexpr int passes = 2;
  const T *x;
  T *y;
  int64_t cols;
  bool causal;
  A scale;
  __host__ __device__ bool live(int64_t r, int64_t j) const { return !causal || j <= r % cols; }
  __host__ __device__ A shift(const acc_t *red) const { return cti_isfinite(red[0].a) ? red[0].a : A(0); }
  __host__ __device__ acc_t init(int p) const { return {p == 0 ? A(-INFINITY) : A(0), A(0)}; }
  __host__ __device__ acc_t step(int p, int64_t r, int64_t j, acc_t acc, const acc_t *red) const {
    if (!live(r, j)) return acc;
    const A z = scale * x[r * cols + j];
    if (p == 0) return {cti_tf_max(acc.a, z), acc.b};
    return {acc.a + cti_tf_exp(z - shift(red)), acc.b};
  }
  __host__ __device__ acc_t combine(int p, acc_t a, acc_t b) const {
    return p == 0 ? acc_t{cti_tf_max(a.a, b.a), A(0)} : cti_acc2_sum(a, b);
  }
  __host__ __device__ void write(int64_t r, int64_t j, const acc_t *red) const {
    y[r * cols + j] = live(r, j) ? cti_tf_exp(scale * x[r * cols + j] - shift(red)) / red[1].a : A(0);
  }
  __host__ __device__ void finish(int64_t, const acc_t *) const {}
};

// dx_j = scale * y_j * (dy_j - sum_k y_k dy_k).
template <class T> struct cti_softmax_backward_rows {
  using A = T;
  using acc_t = cti_acc2<A>;
  static constexpr int passes = 1;
  const T *y, *dy;
  T *dx;
  int64_t cols;
  A scale;
  __host__ __device__ acc_t init(int) const { return {A(0), A(0)}; }
  __host__ __device__ acc_t step(int, int64_t r, int64_t j, acc_t acc, const acc_t *) const {
    return {acc.a + y[r * cols + j] * dy[r * cols + j], acc.b};
  }
  __host__ __device__ acc_t combine(int, acc_t a, acc_t b) const { return cti_acc2_sum(a, b); }
  __host__ __device__ void write(int64_t r, int64_t j, const acc_t *red) const {
    const int64_t e = r * cols + j;
    dx[e] = scale * y[e] * (dy[e] - red[0].a);
  }
  __host__ __device__ void finish(int64_t, const acc_t *) const {}
};

template <class X>
int cti_softmax_run(const X &x, ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale,
                    const void *src, void *y) {
  if (rows <= 0 || cols <= 0) return CT_OK;
  return cti_dispatch_float(dt, "softmax", [&](auto tag) -> int {
    using T = decltype(tag);
    return cti_rows_run(x, rows, cols, cti_softmax_rows<T>{static_cast<const T *>(src), static_cast<T *>(y),
                                                           cols, causal, (T)scale});
  });
}

template <class X>
int cti_softmax_backward_run(const X &x, ct_dtype dt, int64_t rows, int64_t cols, double scale,
                             const void *y, const void *dy, void *dx) {
  if (rows <= 0 || cols <= 0) return CT_OK;
  return cti_dispatch_float(dt, "softmax backward", [&](auto tag) -> int {
    using T = decltype(tag);
    return cti_rows_run(x, rows, cols, cti_softmax_backward_rows<T>{static_cast<const T *>(y),
                                                                    static_cast<const T *>(dy),
                                                                    static_cast<T *>(dx), cols, (T)scale});
  });
}

// ---- cross-entropy -----------------------------------------------------------------------------------
// The targets counted by thread `tid` of `nthreads` (i = tid, tid +
// nthreads, ...): those not equal to ignore_index. The count kernel adds the
// threads' counts (integers: any order gives the same total).
__host__ __device__ inline long long cti_count_targets(const int64_t *target, int64_t n, int64_t ignore,
                                                       int64_t tid, int64_t nthreads) {
  long long k = 0;
  for (int64_t i = tid; i < n; i += nthreads) k += target[i] != ignore;
  return k;
}

// A warp per row: pass 0 max, pass 1 sum exp(x - shift); write the gradient
// scaled by *scale (1 / count, written by the count kernel before); finish
// the row's loss. An ignored row is 0; a bad target is reported (code
// CT_ASYNC_LM_TARGET_OUT_OF_BOUNDS: row, target, v) and its row becomes NaN.
template <class T> struct cti_lm_cross_entropy_rows {
  using A = T;
  using acc_t = cti_acc2<A>;
  static constexpr int passes = 2;
  const T *x;
  const int64_t *target;
  T *loss, *grad;
  const T *scale;
  int64_t v, ignore;
  cti_async_record *rec;
  __host__ __device__ bool bad(int64_t t) const { return t != ignore && (t < 0 || t >= v); }
  __host__ __device__ A shift(const acc_t *red) const { return cti_isfinite(red[0].a) ? red[0].a : A(0); }
  __host__ __device__ acc_t init(int p) const { return {p == 0 ? A(-INFINITY) : A(0), A(0)}; }
  __host__ __device__ acc_t step(int p, int64_t r, int64_t j, acc_t acc, const acc_t *red) const {
    const A z = x[r * v + j];
    if (p == 0) return {cti_tf_max(acc.a, z), acc.b};
    return {acc.a + cti_tf_exp(z - shift(red)), acc.b};
  }
  __host__ __device__ acc_t combine(int p, acc_t a, acc_t b) const {
    return p == 0 ? acc_t{cti_tf_max(a.a, b.a), A(0)} : cti_acc2_sum(a, b);
  }
  __host__ __device__ void write(int64_t r, int64_t j, const acc_t *red) const {
    if (!grad) return;
    const int64_t t = target[r];
    A g;
    if (t == ignore) g = A(0);
    else if (bad(t)) g = A(NAN);
    else g = (cti_tf_exp((x[r * v + j] - shift(red)) - cti_tf_log(red[1].a)) - (j == t ? A(1) : A(0))) * *scale;
    grad[r * v + j] = g;
  }
  __host__ __device__ void finish(int64_t r, const acc_t *red) const {
    const int64_t t = target[r];
    if (t == ignore) {
      loss[r] = A(0);
    } else if (bad(t)) {
      cti_tf_report(rec, CT_ASYNC_LM_TARGET_OUT_OF_BOUNDS, r, t, v);
      loss[r] = A(NAN);
    } else {
      loss[r] = cti_tf_log(red[1].a) - (x[r * v + t] - shift(red));
    }
  }
};

template <class X>
int cti_lm_cross_entropy_rows_run(const X &x, ct_dtype dt, int64_t n, int64_t v, const void *logits,
                                  const int64_t *target, int64_t ignore, void *loss, void *grad,
                                  const void *scale, cti_async_record *rec) {
  if (n <= 0) return CT_OK;
  return cti_dispatch_float(dt, "ct_cross_entropy", [&](auto tag) -> int {
    using T = decltype(tag);
    return cti_rows_run(x, n, v, cti_lm_cross_entropy_rows<T>{static_cast<const T *>(logits), target,
                                                              static_cast<T *>(loss), static_cast<T *>(grad),
                                                              static_cast<const T *>(scale), v, ignore, rec});
  });
}

#endif
