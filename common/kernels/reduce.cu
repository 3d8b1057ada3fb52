// SPDX-License-Identifier: MIT
//
// reduce: sum, mean, max (with its index) and argmax over the middle axis of
// a contiguous (outer, r, inner) input, and the non-finite scan, on CUDA.
//
// A reduction is a state_t per output element, built from the identity by
// `combine`. Two reducers exist:
//   cti_sum_reducer<A>: state_t {A v}, A the accumulation type (float for f16, bf16
//     and f32; double for f64; int64 for integers and bool, wrapping);
//   cti_max_reducer<V>: state_t {V v, int64 i}, i the position along r, -1 for "no
//     element yet". combine keeps the larger value, a NaN over any number,
//     and on ties (or two NaNs) the smaller index, so it is associative and
//     commutative and the first maximum wins whatever order the threads meet.
// Two layouts of the work, both with grid-stride loops and 64-bit indices:
//   inner == 1 (a row per output: the whole-tensor reduction, softmax rows):
//     one block of 256 threads per (row, chunk); threads stride over the
//     chunk's elements, then a tree reduction (warp shuffles, then one warp
//     over the warps' results) leaves the block's state_t in thread 0;
//   inner > 1 (a column per output): 32 x 8 blocks; x walks 32 adjacent
//     outputs (coalesced loads), the 8 rows of y split r, and thread y == 0
//     combines the 8 partial States from shared memory.
// When there are too few outputs to fill the GPU (few rows, each long),
// r is cut into `chunks` pieces, one block each; pass 1 writes a state_t per
// (output, chunk) to a workspace from the caching allocator and pass 2, the
// same kernel reading those States, reduces them per output. The order of
// every addition is fixed by the launch geometry, which depends only on the
// shape: the same input gives the same bits on every run. The reducers and
// the chunk plan are __host__ __device__ and live in reduce.cuh, so that
// tests/unit/test_kernel_math.cu runs the very same rules on the host.
#include <type_traits>

#include "alloc.h"
#include "cuda_backend.h"
#include "kernel_util.cuh"
#include "reduce.cuh"

// ---- where States come from -----------------------------------------------------------------
// get(pos, k): the state_t of element `pos` of the (outer, R, inner) array, k
// its position along R.
template <ct_dtype D, class R>
struct elem_src { // the input itself
  const cti_T<D> *in;
  __device__ typename R::state_t get(int64_t pos, int64_t k) const { return R::make(cti_load<D>(in[pos]), k); }
};

template <class R>
struct partial_src { // pass 1's States, (outer, chunks, inner); their indices are already global
  const typename R::state_t *p;
  __device__ typename R::state_t get(int64_t pos, int64_t) const { return p[pos]; }
};

// ---- where results go -------------------------------------------------------------------------
// out (outer, inner) [out_dt], idx (outer, inner) [int64] or NULL.
struct reduce_out {
  ct_reduce_op op;
  ct_dtype out_dt;
  void *out;
  int64_t *idx;
  int64_t r; // the reduced length, for MEAN

  template <class A> __device__ void write(int64_t pos, cti_sum_state<A> s) const {
    A v = s.v;
    if constexpr (!std::is_same<A, int64_t>::value) // MEAN takes floating input only
      if (op == CT_OP_MEAN) v = v / (A)r;
    cti_store_dyn(out_dt, out, pos, v);
  }
  template <class V> __device__ void write(int64_t pos, cti_max_state<V> s) const {
    if (op == CT_OP_ARGMAX) {
      static_cast<int64_t *>(out)[pos] = s.i;
    } else {
      cti_store_dyn(out_dt, out, pos, s.v); // exact: v came from out_dt == in_dt
      if (idx) idx[pos] = s.i;
    }
  }
};

// ---- block-wide combine ---------------------------------------------------------------------
// Enters with every thread of the (1-d, multiple-of-32) block holding v;
// leaves with the combination of all of them in thread 0 (other threads hold
// partial results) and `smem` free for reuse.
template <class R>
__device__ typename R::state_t block_reduce(typename R::state_t v, typename R::state_t *smem /* [32] */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = R::combine(v, R::shfl_down(v, off));
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? smem[lane] : R::identity();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = R::combine(v, R::shfl_down(v, off));
  }
  __syncthreads();
  return v;
}

// ---- kernels --------------------------------------------------------------------------------

// inner == 1. src is (outer, r); grid (row blocks, chunks); block (256).
// Block (x, c) reduces elements [c*chunk_len, min(r, (c+1)*chunk_len)) of
// rows x, x + gridDim.x, ...; with one chunk it writes the result, else the
// state_t to partial (outer, chunks).
template <class R, class Src>
static __global__ void reduce_rows_kernel(Src src, int64_t outer, int64_t r, int64_t chunk_len,
                                             typename R::state_t *partial, reduce_out res) {
  using state_t = typename R::state_t;
  __shared__ state_t smem[32];
  const int64_t chunks = gridDim.y, c = blockIdx.y;
  int64_t k0, k1;
  cti_chunk_range(c, chunk_len, r, &k0, &k1);
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) { // uniform across the block
    state_t acc = R::identity();
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) acc = R::combine(acc, src.get(o * r + k, k));
    acc = block_reduce<R>(acc, smem);
    if (threadIdx.x == 0) {
      if (chunks == 1) res.write(o, acc);
      else partial[o * chunks + c] = acc;
    }
  }
}

// inner > 1. src is (outer, r, inner); grid (tiles, chunks); block (32, 8).
// A tile is 32 adjacent outputs (o, j0 .. j0+31) of one outer index o; the
// tiles are numbered o * jtiles + j0 / 32. With one chunk the block writes
// out (outer, inner), else partial (outer, chunks, inner).
template <class R, class Src>
static __global__ void reduce_cols_kernel(Src src, int64_t outer, int64_t r, int64_t inner,
                                             int64_t chunk_len, typename R::state_t *partial,
                                             reduce_out res) {
  using state_t = typename R::state_t;
  __shared__ state_t tile[CT_COLS_Y][CT_COLS_X];
  const int64_t chunks = gridDim.y, c = blockIdx.y;
  int64_t k0, k1;
  cti_chunk_range(c, chunk_len, r, &k0, &k1);
  const int64_t jtiles = cti_ceil_div(inner, CT_COLS_X);
  const int64_t ntiles = outer * jtiles;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) { // uniform across the block
    const int64_t o = t / jtiles;
    const int64_t j = (t - o * jtiles) * CT_COLS_X + threadIdx.x;
    state_t acc = R::identity();
    if (j < inner)
      for (int64_t k = k0 + threadIdx.y; k < k1; k += CT_COLS_Y)
        acc = R::combine(acc, src.get((o * r + k) * inner + j, k));
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
#pragma unroll
      for (int y = 1; y < CT_COLS_Y; ++y) acc = R::combine(acc, tile[y][threadIdx.x]);
      if (chunks == 1) res.write(o * inner + j, acc);
      else partial[(o * chunks + c) * inner + j] = acc;
    }
    __syncthreads();
  }
}

// ---- launcher ---------------------------------------------------------------------------------
// A workspace block on the op's device and stream, given back when the
// holder goes out of scope. Giving it back right after the kernels are queued
// is safe: the allocator hands a block out again only to requests on the same
// stream, whose work runs after these kernels.
class workspace_block {
 public:
  workspace_block() = default;
  workspace_block(const workspace_block &) = delete;
  workspace_block &operator=(const workspace_block &) = delete;
  ~workspace_block() {
    if (block_) ct_block_free(block_);
  }
  int alloc(const cti_cuda_scope &scope, ct_stream *s, size_t nbytes) {
    block_ = ct_block_alloc(ct_device_cuda(scope.device()), nbytes, s, NULL);
    if (block_) return CT_OK;
    const int st = ct_last_status();
    return st != CT_OK ? st : ct_fail(CT_ERR_OOM, "ct_cuda: no memory for a %zu-byte workspace", nbytes);
  }
  void *ptr() const { return ct_block_ptr(block_); }

 private:
  ct_block *block_ = nullptr;
};

template <class R, ct_dtype D>
static int reduce_run(const cti_cuda_scope &scope, ct_stream *s, const void *in, reduce_out res,
                         int64_t outer, int64_t r, int64_t inner) {
  using state_t = typename R::state_t;
  const cudaStream_t stream = scope.stream();
  const elem_src<D, R> src{static_cast<const cti_T<D> *>(in)};
  int64_t chunks, chunk_len;
  workspace_block ws;
  if (inner == 1) {
    const int64_t gx = outer < CT_MAX_GRID_X ? outer : CT_MAX_GRID_X;
    cti_reduce_plan(outer, r, inner, &chunks, &chunk_len);
    if (chunks == 1) {
      CT_LAUNCH(reduce_rows_kernel<R>)(dim3((unsigned)gx, 1), CT_ROWS_THREADS, 0, stream)(
          src, outer, r, chunk_len, nullptr, res);
      CT_CUDA_CHECK(cudaGetLastError());
      return CT_OK;
    }
    if (int rc = ws.alloc(scope, s, (size_t)(outer * chunks) * sizeof(state_t))) return rc;
    state_t *partial = static_cast<state_t *>(ws.ptr()); // (outer, chunks)
    CT_LAUNCH(reduce_rows_kernel<R>)(dim3((unsigned)gx, (unsigned)chunks), CT_ROWS_THREADS, 0, stream)(
        src, outer, r, chunk_len, partial, res);
    CT_CUDA_CHECK(cudaGetLastError());
    CT_LAUNCH(reduce_rows_kernel<R>)(dim3((unsigned)gx, 1), CT_ROWS_THREADS, 0, stream)(
        partial_src<R>{partial}, outer, chunks, chunks, nullptr, res);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  }
  const int64_t ntiles = outer * cti_ceil_div(inner, CT_COLS_X);
  const int64_t gx = ntiles < CT_MAX_GRID_X ? ntiles : CT_MAX_GRID_X;
  const dim3 block(CT_COLS_X, CT_COLS_Y);
  cti_reduce_plan(outer, r, inner, &chunks, &chunk_len);
  if (chunks == 1) {
    CT_LAUNCH(reduce_cols_kernel<R>)(dim3((unsigned)gx, 1), block, 0, stream)(
        src, outer, r, inner, chunk_len, nullptr, res);
    CT_CUDA_CHECK(cudaGetLastError());
    return CT_OK;
  }
  if (int rc = ws.alloc(scope, s, (size_t)(outer * chunks * inner) * sizeof(state_t))) return rc;
  state_t *partial = static_cast<state_t *>(ws.ptr()); // (outer, chunks, inner)
  CT_LAUNCH(reduce_cols_kernel<R>)(dim3((unsigned)gx, (unsigned)chunks), block, 0, stream)(
      src, outer, r, inner, chunk_len, partial, res);
  CT_CUDA_CHECK(cudaGetLastError());
  CT_LAUNCH(reduce_cols_kernel<R>)(dim3((unsigned)gx, 1), block, 0, stream)(
      partial_src<R>{partial}, outer, chunks, inner, chunks, nullptr, res);
  CT_CUDA_CHECK(cudaGetLastError());
  return CT_OK;
}

struct reduce_launch {
  const cti_cuda_scope &scope;
  ct_stream *s;
  const void *in;
  reduce_out res;
  int64_t outer, r, inner;
  template <ct_dtype D> int operator()() const {
    using C = cti_C<D>;
    if (res.op == CT_OP_SUM || res.op == CT_OP_MEAN)
      return reduce_run<cti_sum_reducer<C>, D>(scope, s, in, res, outer, r, inner);
    return reduce_run<cti_max_reducer<C>, D>(scope, s, in, res, outer, r, inner);
  }
};

static const char *reduce_name(ct_reduce_op op) {
  switch (op) {
  case CT_OP_SUM: return "ct_sum";
  case CT_OP_MEAN: return "ct_mean";
  case CT_OP_MAX: return "ct_max";
  case CT_OP_ARGMAX: return "ct_argmax";
  default: return "ct_reduce";
  }
}

extern "C" int cti_cuda_reduce(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in,
                              void *out, int64_t *idx, int64_t outer, int64_t r, int64_t inner,
                              ct_stream *s) {
  const char *name = reduce_name(op);
  if ((unsigned)op >= CT_NUM_REDUCE_OPS) return ct_fail(CT_ERR_VALUE, "ct_reduce: invalid op %d", (int)op);
  if (!ct_dtype_valid(in_dt) || !ct_dtype_valid(out_dt))
    return ct_fail(CT_ERR_DTYPE, "%s: dtypes %s -> %s not supported on cuda", name, cti_dt_name(in_dt),
                   cti_dt_name(out_dt));
  if (op == CT_OP_MEAN && !ct_dtype_is_floating(in_dt))
    return ct_fail(CT_ERR_DTYPE, "%s: not supported for %s on cuda (floating dtypes only)", name,
                   cti_dt_name(in_dt));
  if (op == CT_OP_MAX && out_dt != in_dt)
    return ct_fail(CT_ERR_DTYPE, "%s: result dtype %s differs from input dtype %s", name, cti_dt_name(out_dt),
                   cti_dt_name(in_dt));
  if (op == CT_OP_ARGMAX && out_dt != CT_I64)
    return ct_fail(CT_ERR_DTYPE, "%s: output dtype %s, expected int64", name, cti_dt_name(out_dt));
  if (outer < 0 || r < 0 || inner < 0)
    return ct_fail(CT_ERR_VALUE, "%s: bad shape (outer %lld, r %lld, inner %lld)", name, (long long)outer,
                   (long long)r, (long long)inner);
  if (outer == 0 || inner == 0) return CT_OK;
  if (r == 0 && (op == CT_OP_MAX || op == CT_OP_ARGMAX))
    return ct_fail(CT_ERR_SHAPE, "%s: Expected reduction dim to have non-zero size", name);
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  const reduce_out res{op, out_dt, out, idx, r};
  return cti_dispatch_dtype(in_dt, reduce_launch{scope, s, in, res, outer, r, inner});
}

// ---- any_nonfinite ---------------------------------------------------------------------------
// *flag := 1 if some element of in (n, contiguous) is inf or NaN; else untouched.
template <ct_dtype D>
static __global__ void nonfinite_kernel(const cti_T<D> *in, int64_t n, float *flag) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  bool bad = false;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    bad |= !cti_isfinite(cti_load<D>(in[i]));
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) *flag = 1.0f;
}

struct nonfinite_launch {
  int64_t n;
  const void *in;
  float *flag;
  cudaStream_t stream;
  template <ct_dtype D> int operator()() const {
    if constexpr (cti_dt<D>::floating) {
      CT_LAUNCH(nonfinite_kernel<D>)(cti_blocks_for(n, CT_THREADS), CT_THREADS, 0, stream)(
          static_cast<const cti_T<D> *>(in), n, flag);
      CT_CUDA_CHECK(cudaGetLastError());
    }
    return CT_OK;
  }
};

// The device-side check: queued on s, the host does not wait (GradScaler,
// graph capture).
extern "C" int cti_cuda_found_nonfinite(ct_dtype dt, int64_t n, const void *in, float *found,
                                       ct_stream *s) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "ct_amp_non_finite_check_: dtype %s not supported on cuda",
                   cti_dt_name(dt));
  if (n <= 0 || !ct_dtype_is_floating(dt)) return CT_OK; // integers are always finite
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  return cti_dispatch_dtype(dt, nonfinite_launch{n, in, found, scope.stream()});
}

extern "C" int cti_cuda_any_nonfinite(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s) {
  if (!ct_dtype_valid(dt))
    return ct_fail(CT_ERR_DTYPE, "ct_any_nonfinite: dtype %s not supported on cuda", cti_dt_name(dt));
  *out = false;
  if (n <= 0 || !ct_dtype_is_floating(dt)) return CT_OK; // integers are always finite
  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  workspace_block ws;
  if (int rc = ws.alloc(scope, s, sizeof(float))) return rc;
  float *flag = static_cast<float *>(ws.ptr()); // (1,) on the device
  CT_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(float), scope.stream()));
  if (int rc = cti_dispatch_dtype(dt, nonfinite_launch{n, in, flag, scope.stream()})) return rc;
  float host_flag = 0.0f;
  CT_CUDA_CHECK(cudaMemcpyAsync(&host_flag, flag, sizeof(float), cudaMemcpyDeviceToHost, scope.stream()));
  CT_CUDA_CHECK(cudaStreamSynchronize(scope.stream()));
  *out = host_flag != 0.0f;
  return CT_OK;
}
