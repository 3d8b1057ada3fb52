// SPDX-License-Identifier: MIT
//
// unit test_kernel_math (ctest unit.kernel_math; CUDA builds only, no GPU
// needed): the CUDA backend's shared __host__ __device__ math, compiled by
// nvcc and run on the host, against the CPU backend and the specifications.
//
// Invariants checked (kernels/README.md, "Numbers"):
//  - dtype conversions (kernel_util.cuh): each of the 65,536 float16 and
//    bfloat16 bit patterns widens to the float32 IEEE 754 binary16 / the
//    bfloat16 layout defines (decoded here from sign, exponent and
//    significand) and narrows back to itself; float32 -> float16/bfloat16
//    rounds to nearest, ties to even (every midpoint between neighbours, one
//    float32 step either side, overflow to inf at the first midpoint past the
//    largest finite value), a NaN stays a NaN; a double goes through float32
//    (rounded twice, as the CPU and PyTorch do); floating -> integer
//    truncates, saturates and sends NaN to 0, -> bool is (x != 0); integers
//    wrap to narrower integers. Each is also compared with the CPU backend's
//    own cast (ct_to_dtype on the CPU), dtype by dtype, every f16/bf16 pattern
//    to every dtype;
//  - integer pow (hostdev.h): the wrap and negative-exponent rules;
//  - Philox (hostdev.h, philox.cuh): Random123's published known answers, the CPU's
//    ct_philox4x32_10 bit for bit, and the per-counter element writer
//    cti_random_counter equal bit for bit to the CPU backend's rand/randn for
//    several seeds, offsets (one crossing 2^32, one wrapping 2^64), lengths
//    and all four floating dtypes;
//  - reducers (reduce.cuh): combine is commutative and associative over
//    every triple of a set of States with ties, -0/+0, infinities and NaNs;
//    max keeps the first maximum and the first NaN, whatever the order (left
//    fold, right fold, the kernels' chunked, strided and tree orders, random
//    orders), as a plain scan and the CPU backend's cti_cpu_reduce do; the int64
//    sum wraps;
//  - chunk plans (reduce.cuh): for a grid of shapes, the chunks cover [0, r)
//    exactly, in order, without overlap or an empty chunk, within the limits.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

// testutil.h brings ct.h, which is C11: cli.h's _Noreturn is [[noreturn]] in C++.
#define _Noreturn [[noreturn]]

#include "kernel_util.cuh"
#include "philox.cuh"
#include "reduce.cuh"
extern "C" { // C headers
#include "cpu_kernels.h"
#include "testutil.h"
}

// ---- bits -------------------------------------------------------------------------------------
static __half half_of(uint16_t u) {
  __half_raw r;
  r.x = u;
  return __half(r);
}
static uint16_t bits_of(__half h) { return ((__half_raw)h).x; }
static __nv_bfloat16 bf16_of(uint16_t u) {
  __nv_bfloat16_raw r;
  r.x = u;
  return __nv_bfloat16(r);
}
static uint16_t bits_of(__nv_bfloat16 h) { return ((__nv_bfloat16_raw)h).x; }
static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float from_fbits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---- the specifications, decoded field by field ------------------------------------------
// IEEE 754 binary16: 1 sign bit, 5 exponent bits (bias 15), 10 significand bits.
static double spec_f16(uint16_t u) {
  const int s = u >> 15, e = (u >> 10) & 31, m = u & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return s ? -v : v;
}
// bfloat16: 1 sign bit, 8 exponent bits (bias 127), 7 significand bits.
static double spec_bf16(uint16_t u) {
  const int s = u >> 15, e = (u >> 7) & 255, m = u & 127;
  double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
  return s ? -v : v;
}
// Round to nearest, ties to even, to a format with `p` significand bits,
// smallest normal exponent emin and overflow threshold `over` (the midpoint
// between the largest finite value and the next power of two): rint is
// round-half-even in the default rounding mode.
static double spec_round(double x, int p, int emin, double over) {
  const double ax = fabs(x);
  if (ax != ax) return NAN;
  if (ax >= over) return copysign(INFINITY, x);
  if (ax == 0) return x;
  int e = ilogb(ax);
  if (e < emin) e = emin;
  const double ulp = ldexp(1.0, e - (p - 1));
  return copysign(rint(ax / ulp) * ulp, x);
}
static double spec_round_f16(double x) { return spec_round(x, 11, -14, 65520.0); }
static double spec_round_bf16(double x) { return spec_round(x, 8, -126, ldexp(255.0 * 2 + 1, 127 - 8)); }

// Fails unless the float f is the value v (NaN for NaN), sign of zero included.
static void assert_value(double v, float f, const char *what, unsigned u) {
  if (v != v) {
    if (f == f) fail_msg("%s 0x%04x: %.9g, expected a NaN", what, u, (double)f);
    return;
  }
  if ((double)f != v || signbit(f) != signbit(v))
    fail_msg("%s 0x%04x: %.9g, expected %.9g", what, u, (double)f, v);
}

// ---- the CPU backend's cast, as a run over a whole buffer ---------------------------------
static ct_shape shape1(int64_t n) {
  ct_shape s{};
  s.ndim = 1;
  s.d[0] = n;
  return s;
}

// out := the CPU backend's cast of n elements of `from` at src to `to`.
static void cpu_cast(const void *src, ct_dtype from, int64_t n, ct_dtype to, void *out) {
  ct_tensor *x = ct_from_host(src, shape1(n), from, ct_device_cpu());
  TU_CHECK(x);
  ct_tensor *y = ct_to_dtype(x, to);
  TU_CHECK(y);
  memcpy(out, ct_data_ptr(y), (size_t)n * cti_cpu_elsize(to));
  ct_free(y);
  ct_free(x);
}

static bool is_nan_bits(ct_dtype dt, const void *p) {
  uint16_t h;
  switch (dt) {
  case CT_F16: memcpy(&h, p, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
  case CT_BF16: memcpy(&h, p, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
  case CT_F32: { float f; memcpy(&f, p, 4); return f != f; }
  case CT_F64: { double d; memcpy(&d, p, 8); return d != d; }
  default: return false;
  }
}

// Element i of `dev` (written by cti_cast / cti_convert) against the CPU's:
// the same bytes, or both NaN (a NaN's sign and payload are not promised:
// the CPU keeps them, CUDA's conversions give the canonical NaN).
static void assert_same_elem(ct_dtype to, const unsigned char *cpu, const unsigned char *dev, int64_t i,
                             const char *what, double in) {
  const size_t es = cti_cpu_elsize(to);
  const unsigned char *a = cpu + (size_t)i * es, *b = dev + (size_t)i * es;
  if (is_nan_bits(to, a) && is_nan_bits(to, b)) return;
  if (memcmp(a, b, es) != 0)
    fail_msg("%s -> %s, element %lld (input %.17g): cpu %.17g, cuda math %.17g", what, ct_dtype_name(to), (long long)i,
             in, ct_load_f64(a, to), ct_load_f64(b, to));
}

// cti_cast<To, From> of every element of src (storage of From), into out.
template <ct_dtype From> struct cast_all {
  const cti_T<From> *src;
  int64_t n;
  void *out;
  template <ct_dtype To> int operator()() const {
    for (int64_t i = 0; i < n; ++i) static_cast<cti_T<To> *>(out)[i] = cti_cast<To, From>(src[i]);
    return 0;
  }
};

// Every element of src [From] cast to every dtype, by kernel_util.cuh and by the CPU backend.
template <ct_dtype From> static void check_casts_to_all(const cti_T<From> *src, int64_t n, const char *what) {
  std::vector<unsigned char> cpu((size_t)n * 8), dev((size_t)n * 8);
  for (int to = 0; to < CT_NUM_DTYPES; ++to) {
    cpu_cast(src, From, n, (ct_dtype)to, cpu.data());
    memset(dev.data(), 0xa5, dev.size());
    cti_dispatch_dtype((ct_dtype)to, cast_all<From>{src, n, dev.data()});
    for (int64_t i = 0; i < n; ++i)
      assert_same_elem((ct_dtype)to, cpu.data(), dev.data(), i, what, (double)cti_load<From>(src[i]));
  }
}

// ---- float16 and bfloat16: all 65,536 patterns ------------------------------------------------
static void test_f16_all_patterns(void **state) {
  (void)state;
  std::vector<__half> all(65536);
  for (unsigned u = 0; u < 65536; ++u) {
    const __half h = half_of((uint16_t)u);
    all[u] = h;
    const double v = spec_f16((uint16_t)u);
    const float f = cti_load<CT_F16>(h);
    assert_value(v, f, "float16 -> float32", u);
    assert_value(v, cti_cpu_f16_to_f32((uint16_t)u), "cpu float16 -> float32", u);
    const uint16_t back = bits_of(cti_convert<CT_F16>(f)); // and back
    if (v == v ? back != u : (back & 0x7c00) != 0x7c00 || !(back & 0x3ff))
      fail_msg("float16 0x%04x -> float32 -> float16 gives 0x%04x", u, back);
  }
  check_casts_to_all<CT_F16>(all.data(), 65536, "float16");
}

static void test_bf16_all_patterns(void **state) {
  (void)state;
  std::vector<__nv_bfloat16> all(65536);
  for (unsigned u = 0; u < 65536; ++u) {
    const __nv_bfloat16 h = bf16_of((uint16_t)u);
    all[u] = h;
    const double v = spec_bf16((uint16_t)u);
    const float f = cti_load<CT_BF16>(h);
    assert_value(v, f, "bfloat16 -> float32", u);
    assert_value(v, cti_cpu_bf16_to_f32((uint16_t)u), "cpu bfloat16 -> float32", u);
    const uint16_t back = bits_of(cti_convert<CT_BF16>(f));
    if (v == v ? back != u : (back & 0x7f80) != 0x7f80 || !(back & 0x7f))
      fail_msg("bfloat16 0x%04x -> float32 -> bfloat16 gives 0x%04x", u, back);
  }
  check_casts_to_all<CT_BF16>(all.data(), 65536, "bfloat16");
}

// ---- float32 -> float16 / bfloat16 rounding ---------------------------------------------------
// x rounded by kernel_util.cuh and by the CPU, against the spelled-out rule.
static void check_round_f16(float x, const char *what) {
  const double want = spec_round_f16(x);
  const uint16_t dev = bits_of(cti_convert<CT_F16>(x)), cpu = cti_cpu_f32_to_f16(x);
  assert_value(want, (float)spec_f16(dev), what, fbits(x));
  assert_value(want, (float)spec_f16(cpu), what, fbits(x));
}
static void check_round_bf16(float x, const char *what) {
  const double want = spec_round_bf16(x);
  const uint16_t dev = bits_of(cti_convert<CT_BF16>(x)), cpu = cti_cpu_f32_to_bf16(x);
  assert_value(want, (float)spec_bf16(dev), what, fbits(x));
  assert_value(want, (float)spec_bf16(cpu), what, fbits(x));
}

static void test_narrowing_rounds_to_even(void **state) {
  (void)state;
  // Every midpoint between neighbouring finite values (and between the
  // largest and the first value past it, where rounding up is overflow):
  // exactly on it goes to the even pattern, one float32 step off it to the
  // nearer side. Both signs.
  for (uint16_t u = 0; u <= 0x7bff; ++u) {
    const double lo = spec_f16(u), hi = u == 0x7bff ? 65536.0 : spec_f16((uint16_t)(u + 1));
    const float mid = (float)((lo + hi) / 2); // exact: 12 significant bits
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float m = sgn ? -mid : mid;
      const uint16_t s = sgn ? 0x8000 : 0;
      const uint16_t even = (uint16_t)(s | ((u & 1) ? u + 1 : u)); // 0x7c00 (inf) past the largest
      if (bits_of(cti_convert<CT_F16>(m)) != even || cti_cpu_f32_to_f16(m) != even)
        fail_msg("float16: the midpoint %.9g gives 0x%04x (cpu 0x%04x), expected 0x%04x", (double)m,
                 bits_of(cti_convert<CT_F16>(m)), cti_cpu_f32_to_f16(m), even);
      check_round_f16(m, "float16 midpoint");
      check_round_f16(nextafterf(m, 0.0f), "float16 below a midpoint");
      check_round_f16(nextafterf(m, sgn ? -INFINITY : INFINITY), "float16 above a midpoint");
    }
  }
  for (uint16_t u = 0; u < 0x7f80; ++u) {
    const float lo = from_fbits((uint32_t)u << 16);
    const float mid = from_fbits(((uint32_t)u << 16) | 0x8000u); // halfway to the next pattern
    (void)lo;
    for (int sgn = 0; sgn < 2; ++sgn) {
      const float m = sgn ? -mid : mid;
      const uint16_t even = (uint16_t)((sgn ? 0x8000 : 0) | ((u & 1) ? u + 1 : u)); // 0x7f80 is inf
      if (bits_of(cti_convert<CT_BF16>(m)) != even || cti_cpu_f32_to_bf16(m) != even)
        fail_msg("bfloat16: the midpoint %.9g gives 0x%04x (cpu 0x%04x), expected 0x%04x", (double)m,
                 bits_of(cti_convert<CT_BF16>(m)), cti_cpu_f32_to_bf16(m), even);
      check_round_bf16(m, "bfloat16 midpoint");
      check_round_bf16(nextafterf(m, 0.0f), "bfloat16 below a midpoint");
      check_round_bf16(nextafterf(m, sgn ? -INFINITY : INFINITY), "bfloat16 above a midpoint");
    }
  }
  // Overflow, infinities and NaN.
  const float big[] = {65520.0f, 1e5f, 3.4028235e38f, INFINITY};
  for (float b : big) {
    assert_int_equal(bits_of(cti_convert<CT_F16>(b)), 0x7c00);
    assert_int_equal(bits_of(cti_convert<CT_F16>(-b)), 0xfc00);
  }
  assert_int_equal(bits_of(cti_convert<CT_F16>(65519.996f)), 0x7bff);
  assert_int_equal(bits_of(cti_convert<CT_BF16>(INFINITY)), 0x7f80);
  assert_int_equal(bits_of(cti_convert<CT_BF16>(3.4028235e38f)), 0x7f80); // FLT_MAX rounds up
  const float nans[] = {NAN, -NAN, from_fbits(0x7f800001u), from_fbits(0xffc00123u)};
  for (float n : nans) {
    uint16_t h = bits_of(cti_convert<CT_F16>(n)), b = bits_of(cti_convert<CT_BF16>(n));
    if ((h & 0x7c00) != 0x7c00 || !(h & 0x3ff) || (b & 0x7f80) != 0x7f80 || !(b & 0x7f))
      fail_msg("NaN 0x%08x became float16 0x%04x, bfloat16 0x%04x", fbits(n), h, b);
  }
  // Random float32 patterns: the rule, and the CPU, pattern for pattern.
  srand((unsigned)tu_seed());
  for (int t = 0; t < 1000000; ++t) {
    const float x = from_fbits(((uint32_t)rand() << 16) ^ (uint32_t)rand());
    check_round_f16(x, "float16 random");
    check_round_bf16(x, "bfloat16 random");
  }
  // A double is rounded to float32 first (as c10::Half(float(x)) does): just
  // above the midpoint between 1 and 1 + 2^-10, by less than float32 can
  // tell, it lands on the midpoint and goes to the even 1.0.
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  assert_int_equal(bits_of(cti_convert<CT_F16>(d)), 0x3c00);
  uint16_t cpu16;
  cpu_cast(&d, CT_F64, 1, CT_F16, &cpu16);
  assert_int_equal(cpu16, 0x3c00);
}

// ---- floating -> integer: truncate, saturate, NaN -> 0; integers wrap ---------------------------
// (at most 64: the buffers below)
static const double kEdges[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, 0.5, -0.5, 0.99999, -0.99999, 1.5, -1.5,
                                127.9, 128.0, 254.5, 255.0, 255.99, 256.0, 300.7, -1.0, -300.0, 2147483647.0,
                                2147483647.5, 2147483648.0, -2147483648.0, -2147483648.9, -2147483649.0, 4294967296.0,
                                1e10, -1e10, 9007199254740993.0, 9223372036854774784.0, 9223372036854775808.0,
                                -9223372036854775808.0, -9223372036854777856.0, 1e19, -1e19, 1e300, -1e300, 5e-324};

// The documented rule, spelled out per dtype.
static int64_t spec_to_int(double d, ct_dtype to) {
  if (to == CT_BOOL) return d != 0; // bool(float('nan')) is True
  if (d != d) return 0;
  const double t = trunc(d);
  switch (to) {
  case CT_U8: return t <= 0 ? 0 : t >= 255 ? 255 : (int64_t)t;
  case CT_I32: return t <= -2147483648.0 ? INT32_MIN : t >= 2147483647.0 ? INT32_MAX : (int64_t)t;
  case CT_I64: return t < -0x1p63 ? INT64_MIN : t >= 0x1p63 ? INT64_MAX : (int64_t)t;
  default: return INT64_C(0x7eadbeef); // not an integer dtype
  }
}

template <ct_dtype To> static int64_t as_i64(cti_T<To> v) { return (int64_t)v; }

template <ct_dtype To> static void check_float_to_int(const char *name) {
  const int64_t n = (int64_t)(sizeof kEdges / sizeof kEdges[0]);
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = (float)kEdges[i];
  cti_T<To> cpu_d[64], cpu_f[64];
  cpu_cast(kEdges, CT_F64, n, To, cpu_d);
  cpu_cast(f.data(), CT_F32, n, To, cpu_f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want_d = spec_to_int(kEdges[i], To), want_f = spec_to_int((double)f[i], To);
    const int64_t got_d = as_i64<To>(cti_convert<To>(kEdges[i])), got_f = as_i64<To>(cti_convert<To>(f[i]));
    if (got_d != want_d || as_i64<To>(cpu_d[i]) != want_d)
      fail_msg("double %.17g -> %s: cuda math %lld, cpu %lld, expected %lld", kEdges[i], name, (long long)got_d,
               (long long)as_i64<To>(cpu_d[i]), (long long)want_d);
    if (got_f != want_f || as_i64<To>(cpu_f[i]) != want_f)
      fail_msg("float %.9g -> %s: cuda math %lld, cpu %lld, expected %lld", (double)f[i], name, (long long)got_f,
               (long long)as_i64<To>(cpu_f[i]), (long long)want_f);
  }
}

static void test_float_to_int_saturates(void **state) {
  (void)state;
  check_float_to_int<CT_U8>("uint8");
  check_float_to_int<CT_I32>("int32");
  check_float_to_int<CT_I64>("int64");
  check_float_to_int<CT_BOOL>("bool");
  // The rule's own examples (kernels/README.md): NaN -> 0, saturation, truncation.
  assert_int_equal(cti_convert<CT_I32>((double)NAN), 0);
  assert_int_equal(cti_convert<CT_U8>(300.7), 255);
  assert_int_equal(cti_convert<CT_U8>(-3.5), 0);
  assert_int_equal(cti_convert<CT_I32>(-2.9), -2);
  assert_true(cti_convert<CT_I64>(1e19) == INT64_MAX);
  assert_true(cti_convert<CT_I64>(-(double)INFINITY) == INT64_MIN);
}

static void test_integer_wrap(void **state) {
  (void)state;
  std::vector<int64_t> v = {0, 1, -1, 127, 128, 255, 256, 257, -128, -129, -256, 65535, 65536, 2147483647,
                            2147483648LL, -2147483648LL, -2147483649LL, 4294967295LL, 4294967296LL, 2049, 16777217,
                            65504, 65519, 65520, INT64_MAX, INT64_MIN, INT64_MIN + 1};
  srand((unsigned)tu_seed() + 7);
  for (int t = 0; t < 2000; ++t) v.push_back((int64_t)(((uint64_t)rand() << 40) ^ ((uint64_t)rand() << 20) ^ (uint64_t)rand()));
  const int64_t n = (int64_t)v.size();
  check_casts_to_all<CT_I64>(v.data(), n, "int64"); // every dtype, against the CPU backend
  for (int64_t x : v) { // and the rule: keep the low bits, two's complement
    const uint64_t u = (uint64_t)x;
    const int64_t want32 = (int64_t)(u & 0xffffffffu) - ((u & 0x80000000u) ? 0x100000000LL : 0);
    if (cti_convert<CT_U8>(x) != (uint8_t)(u & 0xff) || (int64_t)cti_convert<CT_I32>(x) != want32)
      fail_msg("int64 %lld: uint8 %d (expected %d), int32 %d (expected %lld)", (long long)x, cti_convert<CT_U8>(x),
               (int)(u & 0xff), cti_convert<CT_I32>(x), (long long)want32);
  }
  assert_int_equal(cti_convert<CT_U8>((int64_t)-1), 255);
  assert_int_equal(cti_convert<CT_I32>((int64_t)2147483648LL), INT32_MIN);
  // int64 -> float16 goes through float32, then rounds to even: 2049 -> 2048, 65520 -> inf.
  assert_int_equal(bits_of(cti_convert<CT_F16>((int64_t)2049)), 0x6800);
  assert_int_equal(bits_of(cti_convert<CT_F16>((int64_t)65520)), 0x7c00);
  // The int64 sum wraps mod 2^64, as the CPU's does.
  using SR = cti_sum_reducer<int64_t>;
  const int64_t in[3] = {INT64_MAX, 1, INT64_MAX};
  SR::state_t acc = SR::identity();
  for (int k = 0; k < 3; ++k) acc = SR::combine(acc, SR::make(in[k], k));
  int64_t cpu = 0;
  TU_OK(cti_cpu_reduce(CT_OP_SUM, CT_I64, CT_I64, in, &cpu, NULL, 1, 3, 1, NULL));
  assert_true(acc.v == (int64_t)((uint64_t)INT64_MAX * 2 + 1));
  assert_true(acc.v == cpu);
}

// ---- integer pow (core/hostdev.h, compiled here as CUDA C++) ---------------------------------
// The same references as unit.hostdev's C compile: a plain product that wraps
// mod 2^64, PyTorch's rules for negative exponents.
static void test_ipow(void **state) {
  (void)state;
  for (int64_t base = -7; base <= 7; ++base)
    for (int64_t e = -3; e <= 130; ++e) {
      uint64_t r = 1;
      for (int64_t i = 0; i < e; ++i) r *= (uint64_t)base;
      const int64_t want = e >= 0 ? (int64_t)r : base == 1 ? 1 : base == -1 ? ((e % 2) ? -1 : 1) : 0;
      if (cti_ipow(base, e) != want)
        fail_msg("%lld^%lld: %lld, expected %lld", (long long)base, (long long)e, (long long)cti_ipow(base, e),
                 (long long)want);
    }
  assert_true(cti_ipow(3, 40) == INT64_C(-6289078614652622815));
}

// ---- Philox ----------------------------------------------------------------------------------
static void test_philox(void **state) {
  (void)state;
  // Random123's kat_vectors, "philox4x32 10": counter[4] key[2] -> output[4].
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
       0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
       0x24126ea1},
  };
  for (int v = 0; v < 3; ++v) {
    uint32_t out[4];
    cti_philox4x32_10(kat[v], kat[v][4], kat[v][5], out);
    for (int i = 0; i < 4; ++i)
      if (out[i] != kat[v][6 + i]) fail_msg("vector %d word %d: 0x%08x, expected 0x%08x", v, i, out[i], kat[v][6 + i]);
  }
  // The block function against the CPU's, on random counters and keys.
  srand((unsigned)tu_seed() + 3);
  for (int t = 0; t < 100000; ++t) {
    uint32_t ctr[4], key[2], a[4], b[4];
    for (int i = 0; i < 4; ++i) ctr[i] = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
    for (int i = 0; i < 2; ++i) key[i] = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
    cti_philox4x32_10(ctr, key[0], key[1], a);
    ct_philox4x32_10(ctr, key, b);
    if (memcmp(a, b, sizeof a)) fail_msg("philox differs from the CPU's at draw %d", t);
  }
}

// cti_random_counter for every counter of an n-element tensor, against
// cti_cpu_random; both outputs poisoned, 4 spare elements past n.
template <ct_dtype D> static void check_random(uint64_t seed, uint64_t offset, int64_t n, bool normal) {
  using T = cti_T<D>;
  std::vector<T> dev((size_t)n + 4), cpu((size_t)n + 4);
  memset((void *)dev.data(), 0xa5, dev.size() * sizeof(T));
  memset((void *)cpu.data(), 0xa5, cpu.size() * sizeof(T));
  for (int64_t q = 0; q < (n + 3) / 4; ++q) cti_random_counter<D>(dev.data(), n, seed, offset, q, normal);
  TU_OK(cti_cpu_random(normal, D, n, cpu.data(), seed, offset, NULL));
  for (int64_t i = 0; i < n + 4; ++i)
    if (memcmp(&dev[(size_t)i], &cpu[(size_t)i], sizeof(T)))
      fail_msg("%s %s seed %llu offset %llu n %lld: element %lld differs (cuda math %.17g, cpu %.17g)",
               normal ? "randn" : "rand", ct_dtype_name(D), (unsigned long long)seed, (unsigned long long)offset,
               (long long)n, (long long)i, (double)cti_load<D>(dev[(size_t)i]), (double)cti_load<D>(cpu[(size_t)i]));
}

static void test_random_counter(void **state) {
  (void)state;
  const uint64_t seeds[] = {0, 1, 42, 0xdeadbeefcafef00dull, UINT64_MAX};
  const uint64_t offsets[] = {0, 1, 12345, 0xffffffffull - 2, UINT64_MAX - 2}; // across 2^32; wrapping 2^64
  const int64_t lengths[] = {1, 2, 3, 5, 8, 1001};
  for (uint64_t seed : seeds)
    for (uint64_t off : offsets)
      for (int64_t n : lengths)
        for (int normal = 0; normal < 2; ++normal) {
          check_random<CT_F16>(seed, off, n, normal);
          check_random<CT_BF16>(seed, off, n, normal);
          check_random<CT_F32>(seed, off, n, normal);
          check_random<CT_F64>(seed, off, n, normal);
        }
}

// ---- reducers ---------------------------------------------------------------------------------
template <class V> using MR = cti_max_reducer<V>;
template <class V> static bool same_state(cti_max_state<V> a, cti_max_state<V> b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  return a.i == b.i && (an || bn ? an && bn : memcmp(&a.v, &b.v, sizeof(V)) == 0);
}

static void test_max_combine_rules(void **state) {
  (void)state;
  using S = cti_max_state<float>;
  // The rules, one by one.
  S r = MR<float>::combine(S{2.0f, 5}, S{2.0f, 3});
  assert_true(r.i == 3); // a tie: the first index
  r = MR<float>::combine(S{NAN, 7}, S{NAN, 2});
  assert_true(r.i == 2); // two NaNs: the first
  r = MR<float>::combine(S{INFINITY, 1}, S{NAN, 9});
  assert_true(r.i == 9 && r.v != r.v); // a NaN beats inf
  r = MR<float>::combine(S{-0.0f, 4}, S{0.0f, 1});
  assert_true(r.i == 1 && !signbit(r.v)); // -0 == +0: a tie
  r = MR<float>::combine(MR<float>::identity(), S{-INFINITY, 6});
  assert_true(r.i == 6); // the identity loses to anything
  r = MR<float>::combine(S{-INFINITY, 6}, MR<float>::identity());
  assert_true(r.i == 6);
  // Commutative and associative over every triple with distinct indices.
  const float vals[] = {NAN, -INFINITY, -1.0f, -0.0f, 0.0f, 2.0f, INFINITY};
  std::vector<S> states = {MR<float>::identity()};
  for (float v : vals)
    for (int64_t i = 0; i < 3; ++i) states.push_back(S{v, i});
  for (const S &a : states)
    for (const S &b : states) {
      if (a.i >= 0 && a.i == b.i) continue;
      if (!same_state(MR<float>::combine(a, b), MR<float>::combine(b, a)))
        fail_msg("combine((%g, %lld), (%g, %lld)) depends on the order", (double)a.v, (long long)a.i, (double)b.v,
                 (long long)b.i);
      for (const S &c : states) {
        if ((c.i >= 0 && (c.i == a.i || c.i == b.i))) continue;
        const S l = MR<float>::combine(MR<float>::combine(a, b), c), rr = MR<float>::combine(a, MR<float>::combine(b, c));
        if (!same_state(l, rr))
          fail_msg("combine is not associative on (%g, %lld), (%g, %lld), (%g, %lld)", (double)a.v, (long long)a.i,
                   (double)b.v, (long long)b.i, (double)c.v, (long long)c.i);
      }
    }
}

// The block tree of block_reduce on the host: 256 threads' States,
// shuffled down within warps of 32 (a lane past the warp keeps its own
// value), then the warps' results the same way.
template <class R> static typename R::state_t host_block_reduce(std::vector<typename R::state_t> v) {
  auto warp = [](std::vector<typename R::state_t> &w) {
    for (int off = 16; off > 0; off >>= 1)
      for (int lane = 0; lane < 32; ++lane) w[lane] = R::combine(w[lane], lane + off < 32 ? w[lane + off] : w[lane]);
    return w[0];
  };
  std::vector<typename R::state_t> firsts(32, R::identity());
  for (size_t wi = 0; wi < v.size() / 32; ++wi) {
    std::vector<typename R::state_t> w(v.begin() + (long)(32 * wi), v.begin() + (long)(32 * wi + 32));
    firsts[wi] = warp(w);
  }
  return warp(firsts);
}

// What the rows kernel computes for one row of r elements: the plan's
// chunks, 256 strided threads per chunk, the block tree, then pass 2 over
// the chunks' States.
template <class R, class V> static typename R::state_t host_rows_kernel(const V *x, int64_t r) {
  int64_t chunks, chunk_len;
  cti_reduce_plan(1, r, 1, &chunks, &chunk_len);
  std::vector<typename R::state_t> partial((size_t)chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t k0, k1;
    cti_chunk_range(c, chunk_len, r, &k0, &k1);
    std::vector<typename R::state_t> th(CT_ROWS_THREADS, R::identity());
    for (int t = 0; t < CT_ROWS_THREADS; ++t)
      for (int64_t k = k0 + t; k < k1; k += CT_ROWS_THREADS) th[(size_t)t] = R::combine(th[(size_t)t], R::make(x[k], k));
    partial[(size_t)c] = host_block_reduce<R>(th);
  }
  std::vector<typename R::state_t> th(CT_ROWS_THREADS, R::identity());
  for (int64_t c = 0; c < chunks; ++c) th[(size_t)(c % CT_ROWS_THREADS)] = R::combine(th[(size_t)(c % CT_ROWS_THREADS)], partial[(size_t)c]);
  return host_block_reduce<R>(th);
}

// torch.max's answer by a plain scan: the first NaN, else the first maximum.
template <class V> static cti_max_state<V> scan_max(const V *x, int64_t r) {
  cti_max_state<V> best{x[0], 0};
  for (int64_t k = 0; k < r; ++k) {
    if (x[k] != x[k]) return cti_max_state<V>{x[k], k};
    if (x[k] > best.v) best = cti_max_state<V>{x[k], k};
  }
  return best;
}

template <class V> static void check_max_orders(const V *x, int64_t r, const cti_max_state<V> &cpu, const char *what) {
  using R = MR<V>;
  const cti_max_state<V> want = scan_max(x, r);
  if (!same_state(cpu, want)) fail_msg("%s: the CPU's max is at %lld, the scan's at %lld", what, (long long)cpu.i, (long long)want.i);
  typename R::state_t left = R::identity(), right = R::identity(), shuffled = R::identity();
  for (int64_t k = 0; k < r; ++k) left = R::combine(left, R::make(x[k], k));
  for (int64_t k = r - 1; k >= 0; --k) right = R::combine(R::make(x[k], k), right);
  std::vector<int64_t> perm((size_t)r);
  for (int64_t k = 0; k < r; ++k) perm[(size_t)k] = k;
  for (int64_t k = r - 1; k > 0; --k) std::swap(perm[(size_t)k], perm[(size_t)(rand() % (k + 1))]);
  for (int64_t k : perm) shuffled = R::combine(shuffled, R::make(x[k], k));
  const typename R::state_t kern = host_rows_kernel<R>(x, r);
  const typename R::state_t got[4] = {left, right, shuffled, kern};
  static const char *order[4] = {"left fold", "right fold", "random order", "the rows kernel's order"};
  for (int o = 0; o < 4; ++o)
    if (!same_state(got[o], want))
      fail_msg("%s, %s: max at %lld, expected %lld", what, order[o], (long long)got[o].i, (long long)want.i);
}

static void test_max_orders(void **state) {
  (void)state;
  srand((unsigned)tu_seed() + 11);
  const int64_t r = 20000; // several chunks: the plan cuts a lone row of 20000 into 9
  int64_t chunks, chunk_len;
  cti_reduce_plan(1, r, 1, &chunks, &chunk_len);
  assert_true(chunks > 1);
  std::vector<float> f((size_t)r);
  std::vector<double> d((size_t)r);
  std::vector<int64_t> i64((size_t)r);
  std::vector<__half> h((size_t)r);
  const float pool[] = {-INFINITY, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f, 2.0f, 2.0f, NAN};
  for (int trial = 0; trial < 24; ++trial) {
    // trials 0..7 without NaN (ties decide), the rest with a NaN or two
    const int npool = trial < 8 ? 8 : 9;
    for (int64_t k = 0; k < r; ++k) {
      f[(size_t)k] = pool[rand() % 8];
      if (npool == 9 && rand() % 5000 == 0) f[(size_t)k] = NAN;
      d[(size_t)k] = f[(size_t)k];
      i64[(size_t)k] = f[(size_t)k] == f[(size_t)k] && fabsf(f[(size_t)k]) < 10 ? (int64_t)f[(size_t)k] : -7;
      h[(size_t)k] = cti_convert<CT_F16>(f[(size_t)k]);
    }
    cti_max_state<float> cf;
    cti_max_state<double> cd;
    cti_max_state<int64_t> ci;
    TU_OK(cti_cpu_reduce(CT_OP_MAX, CT_F32, CT_F32, f.data(), &cf.v, &cf.i, 1, r, 1, NULL));
    TU_OK(cti_cpu_reduce(CT_OP_MAX, CT_F64, CT_F64, d.data(), &cd.v, &cd.i, 1, r, 1, NULL));
    TU_OK(cti_cpu_reduce(CT_OP_MAX, CT_I64, CT_I64, i64.data(), &ci.v, &ci.i, 1, r, 1, NULL));
    check_max_orders(f.data(), r, cf, "float32");
    check_max_orders(d.data(), r, cd, "float64");
    check_max_orders(i64.data(), r, ci, "int64");
    int64_t arg = -1;
    TU_OK(cti_cpu_reduce(CT_OP_ARGMAX, CT_F32, CT_I64, f.data(), &arg, NULL, 1, r, 1, NULL));
    assert_true(arg == cf.i);
    // float16 computes in float: cti_load, then the float reducer.
    std::vector<float> hf((size_t)r);
    for (int64_t k = 0; k < r; ++k) hf[(size_t)k] = cti_load<CT_F16>(h[(size_t)k]);
    __half hv;
    int64_t hi = -1;
    TU_OK(cti_cpu_reduce(CT_OP_MAX, CT_F16, CT_F16, h.data(), &hv, &hi, 1, r, 1, NULL));
    check_max_orders(hf.data(), r, cti_max_state<float>{cti_load<CT_F16>(hv), hi}, "float16");
  }
}

// ---- chunk plans ------------------------------------------------------------------------------
static void test_chunk_plans(void **state) {
  (void)state;
  const int64_t outers[] = {1, 2, 3, 31, 100, 1023, 1024, 5000};
  const int64_t inners[] = {1, 2, 31, 32, 33, 1000};
  const int64_t rs[] = {0, 1, 2, 127, 128, 129, 2047, 2048, 2049, 4096, 100000, 1000007, 2147483653LL, 1LL << 40};
  int multi = 0;
  for (int64_t outer : outers)
    for (int64_t inner : inners)
      for (int64_t r : rs) {
        int64_t chunks = -1, len = -1;
        cti_reduce_plan(outer, r, inner, &chunks, &len);
        const int64_t blocks = inner == 1 ? outer : outer * ((inner + 31) / 32);
        const int64_t min_chunk = inner == 1 ? 2048 : 128;
        if (chunks < 1 || chunks > CT_REDUCE_MAX_CHUNKS || len < 1)
          fail_msg("(%lld, %lld, %lld): %lld chunks of %lld", (long long)outer, (long long)r, (long long)inner,
                   (long long)chunks, (long long)len);
        if (blocks >= CT_REDUCE_TARGET_BLOCKS && chunks != 1)
          fail_msg("(%lld, %lld, %lld): %lld blocks fill the GPU, yet %lld chunks", (long long)outer, (long long)r,
                   (long long)inner, (long long)blocks, (long long)chunks);
        if (chunks > 1 && len < min_chunk)
          fail_msg("(%lld, %lld, %lld): chunks of %lld < %lld elements", (long long)outer, (long long)r,
                   (long long)inner, (long long)len, (long long)min_chunk);
        multi += chunks > 1;
        int64_t next = 0; // where the next chunk must start
        for (int64_t c = 0; c < chunks; ++c) {
          int64_t k0, k1;
          cti_chunk_range(c, len, r, &k0, &k1);
          if (k0 != next || (r > 0 && k1 <= k0) || k1 > r)
            fail_msg("(%lld, %lld, %lld): chunk %lld of %lld is [%lld, %lld), expected to start at %lld and be "
                     "non-empty within r",
                     (long long)outer, (long long)r, (long long)inner, (long long)c, (long long)chunks, (long long)k0,
                     (long long)k1, (long long)next);
          next = k1;
        }
        if (next != r)
          fail_msg("(%lld, %lld, %lld): the chunks cover [0, %lld), not [0, %lld)", (long long)outer, (long long)r,
                   (long long)inner, (long long)next, (long long)r);
      }
  assert_true(multi > 20); // the grid does exercise the chunked path
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16_all_patterns),        cmocka_unit_test(test_bf16_all_patterns),
      cmocka_unit_test(test_narrowing_rounds_to_even), cmocka_unit_test(test_float_to_int_saturates),
      cmocka_unit_test(test_integer_wrap),            cmocka_unit_test(test_philox), cmocka_unit_test(test_ipow),
      cmocka_unit_test(test_random_counter),          cmocka_unit_test(test_max_combine_rules),
      cmocka_unit_test(test_max_orders),              cmocka_unit_test(test_chunk_plans),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
