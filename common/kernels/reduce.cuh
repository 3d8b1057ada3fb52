// SPDX-License-Identifier: MIT
//
// reduce.cuh: the host-and-device half of reduce.cu: the reducers' combine
// rules and the chunk plan, shared by the kernels and by
// tests/unit/test_kernel_math.cu, which runs them on the host.
//
// Invariants:
//  - combine is associative and commutative, so any order the threads meet
//    in gives the same state_t: cti_sum_reducer<A> adds (int64 wrapping mod 2^64);
//    cti_max_reducer<V> keeps the larger value, a NaN over any number, and on ties
//    (two equal values, -0 == +0, or two NaNs) the smaller index, so the
//    first maximum wins as in torch.max;
//  - the chunk plan cuts r into `chunks` pieces [c * chunk_len, min(r, (c +
//    1) * chunk_len)), c = 0 .. chunks - 1, that cover [0, r) exactly, with
//    no overlap and no empty piece (r > 0), 1 <= chunks <= 1024, and depends
//    on the shape only.
#ifndef CT_REDUCE_CUH
#define CT_REDUCE_CUH

#include <stdint.h>

#include <type_traits>

#include "kernel_util.cuh"

// ---- reducers ------------------------------------------------------------------------------
template <class A> struct cti_sum_state { A v; };
template <class V> struct cti_max_state { V v; int64_t i; };

__device__ inline float cti_shfl_down(float v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }
__device__ inline double cti_shfl_down(double v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }
__device__ inline int64_t cti_shfl_down(int64_t v, int off) {
  return (int64_t)__shfl_down_sync(0xffffffffu, (long long)v, off);
}

template <class A>
struct cti_sum_reducer {
  using state_t = cti_sum_state<A>;
  __host__ __device__ static state_t identity() { return state_t{A(0)}; }
  __host__ __device__ static state_t make(A x, int64_t) { return state_t{x}; }
  __host__ __device__ static state_t combine(state_t a, state_t b) {
    if constexpr (std::is_same<A, int64_t>::value) return state_t{(int64_t)((uint64_t)a.v + (uint64_t)b.v)};
    else return state_t{a.v + b.v};
  }
  __device__ static state_t shfl_down(state_t s, int off) { return state_t{cti_shfl_down(s.v, off)}; }
};

template <class V>
struct cti_max_reducer {
  using state_t = cti_max_state<V>;
  __host__ __device__ static state_t identity() { return state_t{V(0), -1}; }
  __host__ __device__ static state_t make(V x, int64_t k) { return state_t{x, k}; }
  __host__ __device__ static state_t combine(state_t a, state_t b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = a.v != a.v, bn = b.v != b.v; // NaN (never true for integers)
    if (an || bn) {
      if (an && bn) return a.i <= b.i ? a : b;
      return an ? a : b;
    }
    if (a.v > b.v) return a;
    if (b.v > a.v) return b;
    return a.i <= b.i ? a : b; // equal (including -0 == +0): the first index
  }
  __device__ static state_t shfl_down(state_t s, int off) {
    return state_t{cti_shfl_down(s.v, off), cti_shfl_down(s.i, off)};
  }
};

// ---- the chunk plan ---------------------------------------------------------------------------
// Threads of the two layouts (reduce.cu): a block of 256 per row when
// inner == 1, 32 x 8 per tile of 32 adjacent outputs otherwise.
constexpr int CT_ROWS_THREADS = 256;
constexpr int CT_COLS_X = 32, CT_COLS_Y = 8;
// Aim for about this many blocks in flight: an H100 has 132 SMs running up to
// 8 blocks of 256 threads each.
constexpr int64_t CT_REDUCE_TARGET_BLOCKS = 1024;
constexpr int64_t CT_REDUCE_MAX_CHUNKS = 1024;
constexpr int64_t CT_MAX_GRID_X = 1 << 20;

// How many chunks to cut r into when `nblocks` (>= 1) blocks already cover
// the outputs and a chunk should hold at least `min_chunk` elements; and the
// chunk length. Leaves with chunks * chunk_len >= r and no empty chunk.
__host__ __device__ inline void cti_plan_chunks(int64_t nblocks, int64_t r, int64_t min_chunk, int64_t *chunks,
                                               int64_t *chunk_len) {
  int64_t c = 1;
  if (nblocks < CT_REDUCE_TARGET_BLOCKS) {
    c = cti_ceil_div(CT_REDUCE_TARGET_BLOCKS, nblocks);
    const int64_t most = r / min_chunk; // every chunk at least min_chunk long
    if (c > most) c = most;
    if (c > CT_REDUCE_MAX_CHUNKS) c = CT_REDUCE_MAX_CHUNKS;
    if (c < 1) c = 1;
  }
  int64_t len = cti_ceil_div(r, c);
  if (len < 1) len = 1;
  *chunk_len = len;
  *chunks = cti_ceil_div(r, len) > 0 ? cti_ceil_div(r, len) : 1;
}

// The plan of a reduction of (outer >= 1, r, inner >= 1): blocks and the
// shortest worthwhile chunk are those of its layout.
__host__ __device__ inline void cti_reduce_plan(int64_t outer, int64_t r, int64_t inner, int64_t *chunks,
                                               int64_t *chunk_len) {
  if (inner == 1) cti_plan_chunks(outer, r, 8 * CT_ROWS_THREADS, chunks, chunk_len);
  else cti_plan_chunks(outer * cti_ceil_div(inner, CT_COLS_X), r, 16 * CT_COLS_Y, chunks, chunk_len);
}

// Chunk c's positions along r: [*k0, *k1).
__host__ __device__ inline void cti_chunk_range(int64_t c, int64_t chunk_len, int64_t r, int64_t *k0, int64_t *k1) {
  *k0 = c * chunk_len;
  *k1 = *k0 + chunk_len < r ? *k0 + chunk_len : r;
}

#endif
