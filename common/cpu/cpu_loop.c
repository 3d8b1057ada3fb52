// SPDX-License-Identifier: MIT
//
// cpu_loop: the CPU backend's elementwise driver.
//
// An elementwise op arrives as a cti_iter (its output's shape, each operand's
// element strides) and a row kernel from cpu_backend.c that runs the op
// along one row with one stride per operand. The driver decides who runs
// which rows:
//   - past CT_CPU_PAR_MIN elements, one contiguous range of output elements
//     per OpenMP thread; below it, the calling thread alone;
//   - inside a range, rows along the innermost dim, reached with an
//     incremental multi-index (a division per range, none per element);
//   - when an operand is transposed (stride 1 on the next-to-last dim),
//     EW_TILE x EW_TILE tiles of the last two dims instead, each transposed
//     operand staged through a compact buffer (see ew_tiles).
// Invariant: each element is computed by the row kernel from that element's
// inputs alone, so the split changes who computes it, never its value.
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

typedef struct ew_loop {
  int nd;                           // >= 1
  int64_t shape[CT_MAX_DIMS];
  int64_t stride[3][CT_MAX_DIMS];   // elements; 0 for unused or broadcast operands
  char *p[3];                       // element 0 of each operand, or NULL
  int64_t es[3];                    // element sizes in bytes
  cti_cpu_row_fn fn;
} ew_loop;

// Runs output elements [lo, hi) (row-major linear order).
// Enters with the multi-index of `lo` computed once; leaves having called
// fn once per (part of a) row along the innermost dim.
static void ew_range(const ew_loop *L, int64_t lo, int64_t hi) {
  const int last = L->nd - 1;
  int64_t idx[CT_MAX_DIMS];
  int64_t row[3] = {0, 0, 0}; // offsets of the current row's first element
  int64_t rem = lo;
  for (int d = last; d >= 0; --d) {
    idx[d] = rem % L->shape[d];
    rem /= L->shape[d];
    if (d < last)
      for (int k = 0; k < 3; ++k) row[k] += idx[d] * L->stride[k][d];
  }
  const int64_t inner = L->shape[last];
  int64_t col = idx[last], pos = lo;
  while (pos < hi) {
    int64_t len = inner - col;
    if (len > hi - pos) len = hi - pos;
    const void *q[3];
    for (int k = 0; k < 3; ++k)
      q[k] = L->p[k] ? L->p[k] + (row[k] + col * L->stride[k][last]) * L->es[k] : NULL;
    L->fn((void *)q[0], q[1], q[2], len, L->stride[0][last], L->stride[1][last],
          L->stride[2][last]);
    pos += len;
    col = 0;
    for (int d = last - 1; d >= 0; --d) { // next row: carry through the outer dims
      for (int k = 0; k < 3; ++k) row[k] += L->stride[k][d];
      if (++idx[d] < L->shape[d]) break;
      for (int k = 0; k < 3; ++k) row[k] -= L->shape[d] * L->stride[k][d];
      idx[d] = 0;
    }
  }
}

// A transposed operand (stride 1 along the next-to-last dim, a stride along
// the last) makes row-by-row walking touch a new cache line per element, and
// with power-of-two strides every such line falls into the same cache set.
// Then the last two dims are walked in EW_TILE x EW_TILE tiles: a transposed
// input's tile is first gathered into a compact buffer along its own
// contiguous dim, so the row kernel sees stride 1 (and vectorizes); a
// transposed output is computed into a buffer and scattered the same way.
#ifndef EW_TILE
#define EW_TILE 64
#endif
static bool ew_transposed(const ew_loop *L, int k) {
  const int d1 = L->nd - 1, d0 = L->nd - 2;
  return L->p[k] && L->stride[k][d1] > 1 && L->stride[k][d0] == 1;
}
static bool ew_wants_tiles(const ew_loop *L) {
  if (L->nd < 2) return false;
  const int d1 = L->nd - 1, d0 = L->nd - 2;
  if (L->shape[d0] < EW_TILE / 2 || L->shape[d1] < EW_TILE / 2) return false;
  for (int k = 0; k < 3; ++k)
    if (ew_transposed(L, k)) return true;
  return false;
}

// Moves a rows x cols tile between a compact buffer (row stride EW_TILE) and
// an operand with element stride 1 along rows and `cs` along cols, walking
// rows innermost (the operand's contiguous direction).
#define TILE_MOVE(T)                                                           \
  static void tile_gather_##T(T *buf, const T *src, int64_t rows, int64_t cols, \
                              int64_t cs) {                                    \
    for (int64_t c = 0; c < cols; ++c)                                         \
      for (int64_t r = 0; r < rows; ++r) buf[r * EW_TILE + c] = src[r + c * cs]; \
  }                                                                            \
  static void tile_scatter_##T(T *dst, const T *buf, int64_t rows, int64_t cols, \
                               int64_t cs) {                                   \
    for (int64_t c = 0; c < cols; ++c)                                         \
      for (int64_t r = 0; r < rows; ++r) dst[r + c * cs] = buf[r * EW_TILE + c]; \
  }
TILE_MOVE(uint8_t)
TILE_MOVE(uint16_t)
TILE_MOVE(uint32_t)
TILE_MOVE(uint64_t)
static void tile_move(bool gather, void *buf, void *x, int64_t es, int64_t rows,
                      int64_t cols, int64_t cs) {
  switch (es) {
  case 1:
    if (gather) tile_gather_uint8_t(buf, x, rows, cols, cs);
    else tile_scatter_uint8_t(x, buf, rows, cols, cs);
    break;
  case 2:
    if (gather) tile_gather_uint16_t(buf, x, rows, cols, cs);
    else tile_scatter_uint16_t(x, buf, rows, cols, cs);
    break;
  case 4:
    if (gather) tile_gather_uint32_t(buf, x, rows, cols, cs);
    else tile_scatter_uint32_t(x, buf, rows, cols, cs);
    break;
  default:
    if (gather) tile_gather_uint64_t(buf, x, rows, cols, cs);
    else tile_scatter_uint64_t(x, buf, rows, cols, cs);
    break;
  }
}

static void ew_tiles(const ew_loop *L, bool par) {
  const int d1 = L->nd - 1, d0 = L->nd - 2;
  const int64_t R = L->shape[d0], Cn = L->shape[d1];
  const int64_t tr = (R + EW_TILE - 1) / EW_TILE, tc = (Cn + EW_TILE - 1) / EW_TILE;
  int64_t nbatch = 1;
  for (int d = 0; d < d0; ++d) nbatch *= L->shape[d];
  const int64_t nunits = nbatch * tr * tc;
  bool tb[3];
  for (int k = 0; k < 3; ++k) tb[k] = ew_transposed(L, k);
#pragma omp parallel if (par)
  {
    // per thread: 3 x 32 KiB of stack for EW_TILE 64
    _Alignas(64) unsigned char buf[3][EW_TILE * EW_TILE * 8];
#pragma omp for schedule(static)
    for (int64_t u = 0; u < nunits; ++u) {
      int64_t bt = u / (tr * tc);
      const int64_t rem = u % (tr * tc);
      const int64_t r0 = rem / tc * EW_TILE, c0 = rem % tc * EW_TILE;
      const int64_t rows = r0 + EW_TILE < R ? EW_TILE : R - r0;
      const int64_t cols = c0 + EW_TILE < Cn ? EW_TILE : Cn - c0;
      char *corner[3] = {NULL, NULL, NULL}; // element (r0, c0) of each operand
      int64_t off[3] = {0, 0, 0};
      for (int d = d0 - 1; d >= 0; --d) { // the batch index over the leading dims
        const int64_t i = bt % L->shape[d];
        bt /= L->shape[d];
        for (int k = 0; k < 3; ++k) off[k] += i * L->stride[k][d];
      }
      for (int k = 0; k < 3; ++k)
        if (L->p[k])
          corner[k] = L->p[k] + (off[k] + r0 * L->stride[k][d0] + c0 * L->stride[k][d1]) *
                                    L->es[k];
      for (int k = 1; k < 3; ++k)
        if (tb[k]) tile_move(true, buf[k], corner[k], L->es[k], rows, cols, L->stride[k][d1]);
      for (int64_t r = 0; r < rows; ++r) {
        void *q[3];
        int64_t st[3];
        for (int k = 0; k < 3; ++k) {
          if (tb[k]) {
            q[k] = buf[k] + r * EW_TILE * L->es[k];
            st[k] = 1;
          } else {
            q[k] = corner[k] ? corner[k] + r * L->stride[k][d0] * L->es[k] : NULL;
            st[k] = L->stride[k][d1];
          }
        }
        L->fn(q[0], q[1], q[2], cols, st[0], st[1], st[2]);
      }
      if (tb[0]) tile_move(false, buf[0], corner[0], L->es[0], rows, cols, L->stride[0][d1]);
    }
  }
}

// Runs fn over the iteration `it`. Operands 0..nstrided-1 take their strides
// from `it`; the others (a scalar, a fill value) have stride 0.
void cti_cpu_ew_run(const cti_iter *it, int nstrided, cti_cpu_row_fn fn, void *o, const void *a,
                   const void *b, size_t eo, size_t ea, size_t eb) {
  if (it->numel <= 0) return;
  ew_loop L;
  memset(&L, 0, sizeof L);
  L.fn = fn;
  L.p[0] = (char *)o;
  L.p[1] = (char *)(uintptr_t)a;
  L.p[2] = (char *)(uintptr_t)b;
  L.es[0] = (int64_t)eo;
  L.es[1] = (int64_t)ea;
  L.es[2] = (int64_t)eb;
  if (it->ndim == 0) { // one element
    L.nd = 1;
    L.shape[0] = 1;
  } else {
    L.nd = it->ndim;
    for (int d = 0; d < it->ndim; ++d) {
      L.shape[d] = it->shape[d];
      for (int k = 0; k < nstrided && k < 3; ++k) L.stride[k][d] = it->stride[k][d];
    }
  }
  const int64_t numel = it->numel;
  if (ew_wants_tiles(&L)) {
    ew_tiles(&L, numel >= CT_CPU_PAR_MIN);
    return;
  }
  int nth = numel >= CT_CPU_PAR_MIN ? omp_get_max_threads() : 1;
  if (nth <= 1) {
    ew_range(&L, 0, numel);
    return;
  }
#pragma omp parallel num_threads(nth)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t chunk = (numel + T - 1) / T;
    chunk = (chunk + 63) & ~(int64_t)63; // whole cache lines for 1-byte outputs
    const int64_t lo = t * chunk;
    const int64_t hi = lo + chunk < numel ? lo + chunk : numel;
    if (lo < hi) ew_range(&L, lo, hi);
  }
}
