// SPDX-License-Identifier: MIT
//
// cpu_backend: the elementwise ops' arithmetic on the host, and the
// cti_cpu_backend table (the other entries live in cpu_loop.c,
// cpu_random.c, cpu_reduce.c and cpu_gemm.c; cpu_kernels.h maps them).
//
// The dispatcher (ops.c) has already checked shapes and dtypes and described
// each elementwise op as a cti_iter. Here each (op, dtype) pair becomes one
// *row kernel*: a small function that runs the op over n elements with one
// element stride per operand. Its first branch is the all-strides-1 case,
// written as a plain `omp simd` loop so that f32, f64, integer (and, with the
// inline conversions of cpu_kernels.h, f16/bf16) ops vectorize; then the two
// "one operand broadcast" cases (stride 0: a scalar, a bias row); then any
// strides. The kernels are stamped out by macros over the dtype suffixes
// (b8 u8 i32 i64 f16 bf16 f32 f64) and collected in tables indexed by
// [op][dtype]. cpu_loop.c's driver decides which thread runs which rows.
//
// Invariant: an element's value depends only on the inputs of that element,
// never on the thread, the row split or the number of threads.
//
// Arithmetic follows PyTorch on the CPU: f32 in float, f64 in double,
// f16/bf16 loaded to float, computed in float, rounded back to nearest even;
// integers wrap to their width; bool results of arithmetic are (value != 0);
// maximum/minimum propagate NaN. A Python-style scalar is first converted to
// the tensor's dtype, as PyTorch's CPU kernels do (a float16 tensor times 0.1
// multiplies by float16(0.1); uint8 + (-3) adds 253). Float to integer casts
// truncate toward zero, saturate at the integer type's range and send NaN
// to 0 (C leaves those undefined; CUDA's conversions saturate the same way).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "amp_kernels.h"
#include "backend.h"
#include "conv_kernels.h"
#include "cpu_kernels.h"
#include "dtype.h"
#include "error.h"
#include "hostdev.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "transformer_kernels.h"
#include "vecmath.h"

static bool dt_ok(ct_dtype dt) { return (unsigned)dt < (unsigned)CT_NUM_DTYPES; }

// ---- conversions ------------------------------------------------------------
// Float to integer: truncate toward zero, saturate, NaN -> 0 (no C UB).
static inline int64_t sat_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
static inline int32_t sat_i32(double v) {
  if (v != v) return 0;
  if (v >= 2147483648.0) return INT32_MAX;
  if (v <= -2147483649.0) return INT32_MIN;
  return (int32_t)v;
}
static inline uint8_t sat_u8(double v) {
  if (v != v) return 0;
  if (v >= 256.0) return 255;
  if (v <= -1.0) return 0;
  return (uint8_t)v;
}
// Integer to narrower integer: keep the low bits (two's complement wrap).
static inline uint8_t wrap_u8(int64_t v) { return (uint8_t)v; }
static inline int32_t wrap_i32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
static inline int64_t wrap_i64(int64_t v) { return v; }

// Integer power with wrap-around: hostdev.h's cti_ipow, the CUDA kernels' too.

// ---- more per-dtype traits (ST_, CT_, LD_, ISNAN_ are in cpu_kernels.h) --------
// UT_: the type add/sub/mul/neg wrap in; STO_: compute -> storage; CV_: any
// C value -> storage with copy semantics; POW_, ABS_, EXP_...: the math.
#define UT_b8 uint8_t
#define UT_u8 uint8_t
#define UT_i32 uint32_t
#define UT_i64 uint64_t
#define UT_f16 float
#define UT_bf16 float
#define UT_f32 float
#define UT_f64 double
#define STO_b8(v) ((uint8_t)((v) != 0))
#define STO_u8(v) ((uint8_t)(v))
#define STO_i32(v) ((int32_t)(v))
#define STO_i64(v) ((int64_t)(v))
#define STO_f16(v) cti_cpu_f32_to_f16(v)
#define STO_bf16(v) cti_cpu_f32_to_bf16(v)
#define STO_f32(v) (v)
#define STO_f64(v) (v)
#define CV_b8(v) ((uint8_t)((v) != 0))
#define CV_u8(v) _Generic((v), float: sat_u8, double: sat_u8, default: wrap_u8)(v)
#define CV_i32(v) _Generic((v), float: sat_i32, double: sat_i32, default: wrap_i32)(v)
#define CV_i64(v) _Generic((v), float: sat_i64, double: sat_i64, default: wrap_i64)(v)
#define CV_f16(v) cti_cpu_f32_to_f16((float)(v))
#define CV_bf16(v) cti_cpu_f32_to_bf16((float)(v))
#define CV_f32(v) ((float)(v))
#define CV_f64(v) ((double)(v))
#define POW_b8(x, y) ((uint8_t)(cti_ipow((x), (y)) != 0))
#define POW_u8(x, y) ((uint8_t)cti_ipow((x), (y)))
#define POW_i32(x, y) ((int32_t)cti_ipow((x), (y)))
#define POW_i64(x, y) cti_ipow((x), (y))
#define POW_f16(x, y) powf((x), (y))
#define POW_bf16(x, y) powf((x), (y))
#define POW_f32(x, y) powf((x), (y))
#define POW_f64(x, y) pow((x), (y))
#define ABS_b8(x) (x)
#define ABS_u8(x) (x)
#define ABS_i32(x) ((x) < 0 ? (int32_t)(0u - (uint32_t)(x)) : (x))
#define ABS_i64(x) ((x) < 0 ? (int64_t)(0u - (uint64_t)(x)) : (x))
#define ABS_f16(x) fabsf(x)
#define ABS_bf16(x) fabsf(x)
#define ABS_f32(x) fabsf(x)
#define ABS_f64(x) fabs(x)
// Float math: f16/bf16 compute in float; exp, log and tanh in float are
// core/vecmath.h's (calls of no library function, so the loops vectorize;
// a kernel ct_jit writes uses the same text), float64 the C library's.
#define EXP_f16 cti_expf
#define EXP_bf16 cti_expf
#define EXP_f32 cti_expf
#define EXP_f64 exp
#define LOG_f16 cti_logf
#define LOG_bf16 cti_logf
#define LOG_f32 cti_logf
#define LOG_f64 log
#define SQRT_f16 sqrtf
#define SQRT_bf16 sqrtf
#define SQRT_f32 sqrtf
#define SQRT_f64 sqrt
#define TANH_f16 cti_tanhf
#define TANH_bf16 cti_tanhf
#define TANH_f32 cti_tanhf
#define TANH_f64 tanh
#define ONE_f16 1.0f
#define ONE_bf16 1.0f
#define ONE_f32 1.0f
#define ONE_f64 1.0

// Applies GEN(arg, S) to every dtype suffix, or to the floating ones.
#define FOR_ALL(GEN, A)                                                        \
  GEN(A, b8) GEN(A, u8) GEN(A, i32) GEN(A, i64) GEN(A, f16) GEN(A, bf16)       \
  GEN(A, f32) GEN(A, f64)
#define FOR_FLOAT(GEN, A) GEN(A, f16) GEN(A, bf16) GEN(A, f32) GEN(A, f64)
// Table rows indexed by ct_dtype (enum order: bool u8 i32 i64 f16 bf16 f32 f64).
#define ROW_ALL(P, A)                                                          \
  { P##A##_b8, P##A##_u8, P##A##_i32, P##A##_i64,                              \
    P##A##_f16, P##A##_bf16, P##A##_f32, P##A##_f64 }
#define ROW_FLOAT(P, A)                                                        \
  { NULL, NULL, NULL, NULL, P##A##_f16, P##A##_bf16, P##A##_f32, P##A##_f64 }

// out[i*so] = f(a[i*sa], b[i*sb]) for i < n; strides in elements.
typedef cti_cpu_row_fn row_fn;

// ---- binary row kernels ------------------------------------------------------
#define B_ADD(x, y, S) ((CT_##S)((UT_##S)(x) + (UT_##S)(y)))
#define B_SUB(x, y, S) ((CT_##S)((UT_##S)(x) - (UT_##S)(y)))
#define B_MUL(x, y, S) ((CT_##S)((UT_##S)(x) * (UT_##S)(y)))
#define B_DIV(x, y, S) ((x) / (y))
// std::max/min order on ties, NaN from either side wins.
#define B_MAXIMUM(x, y, S) ((ISNAN_##S(x) || (x) >= (y)) ? (x) : (y))
#define B_MINIMUM(x, y, S) ((ISNAN_##S(x) || (x) <= (y)) ? (x) : (y))
#define B_POW(x, y, S) POW_##S(x, y)
#define B_EQ(x, y, S) ((x) == (y))
#define B_NE(x, y, S) ((x) != (y))
#define B_LT(x, y, S) ((x) < (y))
#define B_LE(x, y, S) ((x) <= (y))
#define B_GT(x, y, S) ((x) > (y))
#define B_GE(x, y, S) ((x) >= (y))
#define STORE_CMP(v) ((uint8_t)(v))

#define BIN_ROW(NAME, S, TO, STORE, OP)                                        \
  static void NAME(void *o_, const void *a_, const void *b_, int64_t n,        \
                   int64_t so, int64_t sa, int64_t sb) {                       \
    TO *o = (TO *)o_;                                                          \
    const ST_##S *a = (const ST_##S *)a_;                                      \
    const ST_##S *b = (const ST_##S *)b_;                                      \
    if (so == 1 && sa == 1 && sb == 1) {                                       \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                   \
        const CT_##S x = LD_##S(a[i]), y = LD_##S(b[i]);                       \
        o[i] = STORE(OP(x, y, S));                                             \
      }                                                                        \
    } else if (so == 1 && sa == 1 && sb == 0) {                                \
      const CT_##S y = LD_##S(b[0]);                                           \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                   \
        const CT_##S x = LD_##S(a[i]);                                         \
        o[i] = STORE(OP(x, y, S));                                             \
      }                                                                        \
    } else if (so == 1 && sa == 0 && sb == 1) {                                \
      const CT_##S x = LD_##S(a[0]);                                           \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                   \
        const CT_##S y = LD_##S(b[i]);                                         \
        o[i] = STORE(OP(x, y, S));                                             \
      }                                                                        \
    } else {                                                                   \
      for (int64_t i = 0; i < n; ++i) {                                        \
        const CT_##S x = LD_##S(a[i * sa]), y = LD_##S(b[i * sb]);             \
        o[i * so] = STORE(OP(x, y, S));                                        \
      }                                                                        \
    }                                                                          \
  }
#define DEF_ARITH(OP, S) BIN_ROW(bin_##OP##_##S, S, ST_##S, STO_##S, B_##OP)
#define DEF_CMP(OP, S) BIN_ROW(bin_##OP##_##S, S, uint8_t, STORE_CMP, B_##OP)

FOR_ALL(DEF_ARITH, ADD)
FOR_ALL(DEF_ARITH, SUB)
FOR_ALL(DEF_ARITH, MUL)
FOR_FLOAT(DEF_ARITH, DIV)
FOR_ALL(DEF_ARITH, MAXIMUM)
FOR_ALL(DEF_ARITH, MINIMUM)
FOR_ALL(DEF_ARITH, POW)
FOR_ALL(DEF_CMP, EQ)
FOR_ALL(DEF_CMP, NE)
FOR_ALL(DEF_CMP, LT)
FOR_ALL(DEF_CMP, LE)
FOR_ALL(DEF_CMP, GT)
FOR_ALL(DEF_CMP, GE)

static const row_fn k_binary[CT_NUM_BINARY_OPS][CT_NUM_DTYPES] = {
    [CT_OP_ADD] = ROW_ALL(bin_, ADD),         [CT_OP_SUB] = ROW_ALL(bin_, SUB),
    [CT_OP_MUL] = ROW_ALL(bin_, MUL),         [CT_OP_DIV] = ROW_FLOAT(bin_, DIV),
    [CT_OP_MAXIMUM] = ROW_ALL(bin_, MAXIMUM), [CT_OP_MINIMUM] = ROW_ALL(bin_, MINIMUM),
    [CT_OP_POW] = ROW_ALL(bin_, POW),         [CT_OP_EQ] = ROW_ALL(bin_, EQ),
    [CT_OP_NE] = ROW_ALL(bin_, NE),           [CT_OP_LT] = ROW_ALL(bin_, LT),
    [CT_OP_LE] = ROW_ALL(bin_, LE),           [CT_OP_GT] = ROW_ALL(bin_, GT),
    [CT_OP_GE] = ROW_ALL(bin_, GE),
};
static bool is_comparison(ct_binary_op op) { return op >= CT_OP_EQ && op <= CT_OP_GE; }

// ---- unary row kernels -------------------------------------------------------
#define U_NEG(x, S) ((CT_##S)(-(UT_##S)(x)))
#define U_ABS(x, S) ABS_##S(x)
#define U_RELU(x, S) (((x) > 0 || ISNAN_##S(x)) ? (x) : (CT_##S)0)
#define U_EXP(x, S) EXP_##S(x)
#define U_LOG(x, S) LOG_##S(x)
#define U_SQRT(x, S) SQRT_##S(x)
#define U_SIGMOID(x, S) (ONE_##S / (ONE_##S + EXP_##S(-(x))))
#define U_TANH(x, S) TANH_##S(x)
#define U_ISFINITE(x, S) (isfinite(x) != 0)

#define UN_ROW(NAME, S, TO, STORE, OP)                                         \
  static void NAME(void *o_, const void *a_, const void *b_, int64_t n,        \
                   int64_t so, int64_t sa, int64_t sb) {                       \
    TO *o = (TO *)o_;                                                          \
    const ST_##S *a = (const ST_##S *)a_;                                      \
    (void)b_;                                                                  \
    (void)sb;                                                                  \
    if (so == 1 && sa == 1) {                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {                   \
        const CT_##S x = LD_##S(a[i]);                                         \
        o[i] = STORE(OP(x, S));                                                \
      }                                                                        \
    } else {                                                                   \
      for (int64_t i = 0; i < n; ++i) {                                        \
        const CT_##S x = LD_##S(a[i * sa]);                                    \
        o[i * so] = STORE(OP(x, S));                                           \
      }                                                                        \
    }                                                                          \
  }
#define DEF_UN(OP, S) UN_ROW(un_##OP##_##S, S, ST_##S, STO_##S, U_##OP)
#define DEF_UN_BOOL(OP, S) UN_ROW(un_##OP##_##S, S, uint8_t, STORE_CMP, U_##OP)

FOR_ALL(DEF_UN, NEG)
FOR_ALL(DEF_UN, ABS)
FOR_ALL(DEF_UN, RELU)
FOR_FLOAT(DEF_UN, EXP)
FOR_FLOAT(DEF_UN, LOG)
FOR_FLOAT(DEF_UN, SQRT)
FOR_FLOAT(DEF_UN, SIGMOID)
FOR_FLOAT(DEF_UN, TANH)
FOR_FLOAT(DEF_UN_BOOL, ISFINITE)

// Integer isfinite is a fill with true (cti_cpu_unary), hence NULL here.
static const row_fn k_unary[CT_NUM_UNARY_OPS][CT_NUM_DTYPES] = {
    [CT_OP_NEG] = ROW_ALL(un_, NEG),          [CT_OP_ABS] = ROW_ALL(un_, ABS),
    [CT_OP_EXP] = ROW_FLOAT(un_, EXP),        [CT_OP_LOG] = ROW_FLOAT(un_, LOG),
    [CT_OP_SQRT] = ROW_FLOAT(un_, SQRT),      [CT_OP_RELU] = ROW_ALL(un_, RELU),
    [CT_OP_SIGMOID] = ROW_FLOAT(un_, SIGMOID), [CT_OP_TANH] = ROW_FLOAT(un_, TANH),
    [CT_OP_ISFINITE] = ROW_FLOAT(un_, ISFINITE),
};

// ---- casts, raw moves and fills --------------------------------------------------
#define CP_ROW(SO, SI)                                                         \
  static void cp_##SI##_##SO(void *o_, const void *a_, const void *b_,         \
                             int64_t n, int64_t so, int64_t sa, int64_t sb) {  \
    ST_##SO *o = (ST_##SO *)o_;                                                \
    const ST_##SI *a = (const ST_##SI *)a_;                                    \
    (void)b_;                                                                  \
    (void)sb;                                                                  \
    if (so == 1 && sa == 1) {                                                  \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) o[i] =              \
          CV_##SO(LD_##SI(a[i]));                                              \
    } else {                                                                   \
      for (int64_t i = 0; i < n; ++i) o[i * so] = CV_##SO(LD_##SI(a[i * sa])); \
    }                                                                          \
  }
// (a second list macro: a macro cannot expand inside its own expansion)
#define FOR_ALL_IN(GEN, A)                                                     \
  GEN(A, b8) GEN(A, u8) GEN(A, i32) GEN(A, i64) GEN(A, f16) GEN(A, bf16)       \
  GEN(A, f32) GEN(A, f64)
#define CP_TO(unused, SO) FOR_ALL_IN(CP_ROW, SO)
FOR_ALL(CP_TO, _)
// k_copy[in][out]
static const row_fn k_copy[CT_NUM_DTYPES][CT_NUM_DTYPES] = {
    ROW_ALL(cp_b8, ), ROW_ALL(cp_u8, ),  ROW_ALL(cp_i32, ), ROW_ALL(cp_i64, ),
    ROW_ALL(cp_f16, ), ROW_ALL(cp_bf16, ), ROW_ALL(cp_f32, ), ROW_ALL(cp_f64, ),
};

// Same-dtype copies move bits (element size T); fills store *b everywhere.
#define MV_ROW(T)                                                              \
  static void mv_##T(void *o_, const void *a_, const void *b_, int64_t n,      \
                     int64_t so, int64_t sa, int64_t sb) {                     \
    T *o = (T *)o_;                                                            \
    const T *a = (const T *)a_;                                                \
    (void)b_;                                                                  \
    (void)sb;                                                                  \
    if (so == 1 && sa == 1) {                                                  \
      memmove(o, a, (size_t)n * sizeof(T));                                    \
    } else if (so == 1 && sa == 0) { /* a broadcast row: a fill, vectorized */ \
      const T v = *a;                                                          \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) o[i] = v;           \
    } else {                                                                   \
      for (int64_t i = 0; i < n; ++i) o[i * so] = a[i * sa];                   \
    }                                                                          \
  }                                                                            \
  static void fl_##T(void *o_, const void *a_, const void *b_, int64_t n,      \
                     int64_t so, int64_t sa, int64_t sb) {                     \
    T *o = (T *)o_;                                                            \
    T v;                                                                       \
    memcpy(&v, b_, sizeof(T));                                                 \
    (void)a_;                                                                  \
    (void)sa;                                                                  \
    (void)sb;                                                                  \
    if (so == 1) {                                                             \
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) o[i] = v;           \
    } else {                                                                   \
      for (int64_t i = 0; i < n; ++i) o[i * so] = v;                           \
    }                                                                          \
  }
MV_ROW(uint8_t)
MV_ROW(uint16_t)
MV_ROW(uint32_t)
MV_ROW(uint64_t)
static row_fn move_fn(size_t size) {
  return size == 1 ? mv_uint8_t : size == 2 ? mv_uint16_t : size == 4 ? mv_uint32_t : mv_uint64_t;
}
static row_fn fill_fn(size_t size) {
  return size == 1 ? fl_uint8_t : size == 2 ? fl_uint16_t : size == 4 ? fl_uint32_t : fl_uint64_t;
}

// Room for one element of any dtype.
typedef union elem_value {
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  float f32;
  double f64;
} elem_value;

// v converted to dt with copy semantics (a double -> dt cast).
static elem_value elem_from_double(ct_dtype dt, double v) {
  elem_value e;
  memset(&e, 0, sizeof e);
  k_copy[CT_F64][dt](&e, &v, NULL, 1, 1, 1, 0);
  return e;
}

// ---- backend entry points ---------------------------------------------------------
static int bad_dtype(const char *op, ct_dtype dt) {
  return ct_fail(CT_ERR_DTYPE, "ct_%s: the CPU backend has no kernel for dtype %s", op,
                 dt_ok(dt) ? ct_dtype_name(dt) : "(invalid)");
}

static int cti_cpu_binary(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                          const void *a, const void *b, ct_stream *s) {
  (void)s;
  if ((unsigned)op >= (unsigned)CT_NUM_BINARY_OPS)
    return ct_fail(CT_ERR_VALUE, "ct_binary: unknown binary op %d", (int)op);
  if (!dt_ok(dt) || !k_binary[op][dt]) return bad_dtype(ct_binary_op_name(op), dt);
  const size_t es = cti_cpu_elsize(dt);
  cti_cpu_ew_run(it, 3, k_binary[op][dt], out, a, b, is_comparison(op) ? 1 : es, es, es);
  return CT_OK;
}

static int cti_cpu_binary_scalar(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                                 const void *a, double scalar, ct_stream *s) {
  (void)s;
  if ((unsigned)op >= (unsigned)CT_NUM_BINARY_OPS)
    return ct_fail(CT_ERR_VALUE, "ct_binary_scalar: unknown binary op %d", (int)op);
  if (!dt_ok(dt) || !k_binary[op][dt]) return bad_dtype(ct_binary_op_name(op), dt);
  // PyTorch's CPU kernels convert the scalar to the tensor's dtype first; a
  // Python int is an int64, so for integer dtypes it wraps (uint8 + (-3)
  // adds 253) rather than saturating as a float cast would.
  elem_value sv;
  if (dt == CT_U8 || dt == CT_I32 || dt == CT_I64) {
    const int64_t iv = sat_i64(scalar);
    memset(&sv, 0, sizeof sv);
    k_copy[CT_I64][dt](&sv, &iv, NULL, 1, 1, 1, 0);
  } else {
    sv = elem_from_double(dt, scalar);
  }
  const size_t es = cti_cpu_elsize(dt);
  cti_cpu_ew_run(it, 2, k_binary[op][dt], out, a, &sv, is_comparison(op) ? 1 : es, es, es);
  return CT_OK;
}

static int cti_cpu_unary(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out,
                         const void *a, ct_stream *s) {
  (void)s;
  if ((unsigned)op >= (unsigned)CT_NUM_UNARY_OPS)
    return ct_fail(CT_ERR_VALUE, "ct_unary: unknown unary op %d", (int)op);
  if (!dt_ok(dt)) return bad_dtype(ct_unary_op_name(op), dt);
  if (op == CT_OP_ISFINITE && !cti_cpu_is_float(dt)) { // integers are always finite
    const uint8_t one = 1;
    cti_cpu_ew_run(it, 1, fill_fn(1), out, NULL, &one, 1, 0, 1);
    return CT_OK;
  }
  if (!k_unary[op][dt]) return bad_dtype(ct_unary_op_name(op), dt);
  const size_t es = cti_cpu_elsize(dt);
  cti_cpu_ew_run(it, 2, k_unary[op][dt], out, a, NULL, op == CT_OP_ISFINITE ? 1 : es, es, 0);
  return CT_OK;
}

static int cti_cpu_copy(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out,
                        const void *in, ct_stream *s) {
  (void)s;
  if (!dt_ok(out_dt)) return bad_dtype("copy_", out_dt);
  if (!dt_ok(in_dt)) return bad_dtype("copy_", in_dt);
  const row_fn fn = out_dt == in_dt ? move_fn(cti_cpu_elsize(in_dt)) : k_copy[in_dt][out_dt];
  cti_cpu_ew_run(it, 2, fn, out, in, NULL, cti_cpu_elsize(out_dt), cti_cpu_elsize(in_dt), 0);
  return CT_OK;
}

static int cti_cpu_fill(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s) {
  (void)s;
  if (!dt_ok(dt)) return bad_dtype("fill_", dt);
  const elem_value e = elem_from_double(dt, v);
  const size_t es = cti_cpu_elsize(dt);
  cti_cpu_ew_run(it, 1, fill_fn(es), out, NULL, &e, es, 0, es);
  return CT_OK;
}

#define ARANGE_CASE(DT, S)                                                     \
  case DT: {                                                                   \
    ST_##S *o = (ST_##S *)out;                                                 \
    _Pragma("omp parallel for if (n >= CT_CPU_PAR_MIN) schedule(static)")      \
    for (int64_t i = 0; i < n; ++i) o[i] = CV_##S(start + (double)i * step);   \
    break;                                                                     \
  }

static int cti_cpu_arange(ct_dtype dt, int64_t n, void *out, double start, double step,
                          ct_stream *s) {
  (void)s;
  if (n < 0) return ct_fail(CT_ERR_VALUE, "ct_arange: negative length %lld", (long long)n);
  switch (dt) {
    ARANGE_CASE(CT_BOOL, b8)
    ARANGE_CASE(CT_U8, u8)
    ARANGE_CASE(CT_I32, i32)
    ARANGE_CASE(CT_I64, i64)
    ARANGE_CASE(CT_F16, f16)
    ARANGE_CASE(CT_BF16, bf16)
    ARANGE_CASE(CT_F32, f32)
    ARANGE_CASE(CT_F64, f64)
  default:
    return bad_dtype("arange", dt);
  }
  return CT_OK;
}

// The plain ops' list (backend.h) names every entry: cti_cpu_<entry>.
#define CTI_OP_CPU_PREFIX cti_cpu_
const cti_backend cti_cpu_backend = {
    .name = "cpu",
    CTI_CORE_OPS(CTI_OP_CPU_INIT)
    .nn = &cti_cpu_nn_kernels,
    .conv = &cti_cpu_conv_kernels,
    .optim = &cti_cpu_optim_kernels,
    .transformer = &cti_cpu_transformer_kernels,
    .amp = &cti_cpu_amp_kernels,
};
