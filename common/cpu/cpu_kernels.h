// SPDX-License-Identifier: MIT
//
// cpu_kernels: what the files of the CPU backend share (internal).
//
// The CPU backend (backend.h's cti_cpu_backend) is split by kind of work:
//   cpu_backend.c  the elementwise row kernels (binary, unary, casts, fills),
//                  arange, and the cti_cpu_backend table;
//   cpu_loop.c     the elementwise driver: threads, strides, tiles;
//   cpu_random.c   rand/randn from Philox;
//   cpu_reduce.c   sum, mean, max, argmax, and the non-finite scan;
//   cpu_gemm.c     matrix products through OpenBLAS.
// Their common invariant: a result never depends on the number of OpenMP
// threads. Work is split by element (or by fixed-size blocks combined in a
// fixed order), never by "one piece per thread" with the pieces' order
// showing in the arithmetic.
#ifndef CT_CPU_KERNELS_H
#define CT_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "dtype.h"

// Below this many elements a loop runs on the calling thread alone: starting
// the OpenMP team costs more than it saves.
#define CT_CPU_PAR_MIN 32768

// ---- float16 / bfloat16 conversions for inner loops -------------------------
// Branch-free twins of dtype.c's ct_f32_to_f16 & co., so that the compiler
// inlines and vectorizes them inside element loops (a call per element costs
// 10x). They give the same bits as dtype.c for every input, NaNs included
// (checked exhaustively over all 2^32 floats and 2^16 halves when written):
// round to nearest even, overflow to inf, subnormals kept, NaN stays a quiet
// NaN with the top payload bits.
static inline uint32_t cti_cpu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float cti_cpu_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint16_t cti_cpu_f32_to_f16(float f) {
  const uint32_t x = cti_cpu_f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
  // normal halves: rebias 127 -> 15, round the 13 dropped bits to nearest even
  const uint32_t normal = (absx + 0xfffu + ((absx >> 13) & 1u) - (112u << 23)) >> 13;
  // subnormal halves: units of 2^-24, rounded to nearest even by adding 2^23
  const uint32_t sub =
      cti_cpu_f32_bits(cti_cpu_bits_f32(absx) * 16777216.0f + 8388608.0f) - 0x4b000000u;
  const uint32_t nan = 0x7e00u | ((absx >> 13) & 0x3ffu);
  const uint32_t h = absx > 0x7f800000u   ? nan
                     : absx >= 0x477ff000u ? 0x7c00u
                     : absx < 0x38800000u  ? sub
                                           : normal;
  return (uint16_t)(sign | h);
}
static inline float cti_cpu_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const uint32_t normal = ((e + 112u) << 23) | (m << 13);
  const uint32_t special = 0x7f800000u | (m << 13);
  const uint32_t sub = cti_cpu_f32_bits((float)(int32_t)m * 0x1p-24f);
  return cti_cpu_bits_f32(sign | (e == 0 ? sub : e == 31 ? special : normal));
}
static inline uint16_t cti_cpu_f32_to_bf16(float f) {
  const uint32_t x = cti_cpu_f32_bits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : rounded);
}
static inline float cti_cpu_bf16_to_f32(uint16_t b) { return cti_cpu_bits_f32((uint32_t)b << 16); }

// ---- per-dtype traits, by suffix (b8 u8 i32 i64 f16 bf16 f32 f64) --------------
// ST_: storage type; CT_: the type one element is computed in (float for
// f16/bf16); LD_: storage -> compute; ISNAN_: NaN test (0 for integers, so
// that integer code has no self-comparison).
#define ST_b8 uint8_t
#define ST_u8 uint8_t
#define ST_i32 int32_t
#define ST_i64 int64_t
#define ST_f16 uint16_t
#define ST_bf16 uint16_t
#define ST_f32 float
#define ST_f64 double
#define CT_b8 uint8_t
#define CT_u8 uint8_t
#define CT_i32 int32_t
#define CT_i64 int64_t
#define CT_f16 float
#define CT_bf16 float
#define CT_f32 float
#define CT_f64 double
#define LD_b8(v) ((uint8_t)((v) != 0))
#define LD_u8(v) (v)
#define LD_i32(v) (v)
#define LD_i64(v) (v)
#define LD_f16(v) cti_cpu_f16_to_f32(v)
#define LD_bf16(v) cti_cpu_bf16_to_f32(v)
#define LD_f32(v) (v)
#define LD_f64(v) (v)
#define ISNAN_b8(x) 0
#define ISNAN_u8(x) 0
#define ISNAN_i32(x) 0
#define ISNAN_i64(x) 0
#define ISNAN_f16(x) ((x) != (x))
#define ISNAN_bf16(x) ((x) != (x))
#define ISNAN_f32(x) ((x) != (x))
#define ISNAN_f64(x) ((x) != (x))

static inline size_t cti_cpu_elsize(ct_dtype dt) {
  static const size_t size[CT_NUM_DTYPES] = {1, 1, 4, 8, 2, 2, 4, 8};
  return (unsigned)dt < (unsigned)CT_NUM_DTYPES ? size[dt] : 0;
}
static inline bool cti_cpu_is_float(ct_dtype dt) {
  return dt == CT_F16 || dt == CT_BF16 || dt == CT_F32 || dt == CT_F64;
}

// ---- the elementwise driver (cpu_loop.c) ------------------------------------------
// A row kernel: out[i*so] = f(a[i*sa], b[i*sb]) for i < n, strides in
// elements (an operand a kernel does not use may be NULL).
typedef void (*cti_cpu_row_fn)(void *o, const void *a, const void *b, int64_t n,
                              int64_t so, int64_t sa, int64_t sb);
// Runs fn over every element of the iteration `it`, threaded past
// CT_CPU_PAR_MIN elements. Operands 0 (o), 1 (a), 2 (b) have element sizes
// eo, ea, eb; operands 0..nstrided-1 take their strides from `it`, the
// others (a scalar, a fill value) have stride 0.
void cti_cpu_ew_run(const cti_iter *it, int nstrided, cti_cpu_row_fn fn, void *o, const void *a,
                   const void *b, size_t eo, size_t ea, size_t eb);

// backend.h's `random` for the CPU (cpu_random.c).
int cti_cpu_random(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed,
                  uint64_t offset, ct_stream *s);

// backend.h's `any_nonfinite` for the CPU (cpu_reduce.c).
int cti_cpu_any_nonfinite(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s);
int cti_cpu_found_nonfinite(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s);

// backend.h's `reduce` for the CPU (cpu_reduce.c).
int cti_cpu_reduce(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in,
                  void *out, int64_t *idx, int64_t outer, int64_t r, int64_t inner,
                  ct_stream *s);

// backend.h's `gemm` for the CPU (cpu_gemm.c).
int cti_cpu_gemm(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                double alpha, const void *A, int64_t lda, int64_t strideA,
                const void *B, int64_t ldb, int64_t strideB, double beta, void *C,
                int64_t ldc, int64_t strideC, int64_t batch, ct_stream *s);

// bf16 GEMM through oneDNN (cpu_dnnl.c), the same contract as cti_cpu_gemm
// for bf16 operands with checked arguments: CT_OK when done, an error when
// oneDNN failed midway, or CTI_GEMM_FALLBACK, touching nothing, when this
// build, this CPU or this layout has no native bf16 kernel (the caller then
// widens to float32).
#define CTI_GEMM_FALLBACK 1000
int cti_cpu_gemm_bf16_native(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                            const uint16_t *A, int64_t lda, int64_t strideA, const uint16_t *B,
                            int64_t ldb, int64_t strideB, double beta, uint16_t *C, int64_t ldc,
                            int64_t strideC, int64_t batch);

#endif
