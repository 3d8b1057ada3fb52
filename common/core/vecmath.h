// SPDX-License-Identifier: MIT
//
// vecmath: the float exp, tanh and log of the runtime, written so that a
// compiler vectorizes the loop that calls them.
//
// A call to the C library's expf, tanhf or logf inside an element loop
// stops GCC from vectorizing it (without -ffast-math it has no vector
// version to call), and each call costs more than moving the element's
// bytes. The functions below are straight-line float arithmetic and bit
// manipulation, no call, no branch the compiler cannot turn into a select,
// so the loops around them run 4 (SSE2) or 8 (AVX2) elements at a time.
//
// Invariant: one definition per function, used by every CPU path that
// computes it in float: the CPU backend's exp, log, tanh and sigmoid of
// float16, bfloat16 and float32 (cpu/cpu_backend.c), GELU's tanh form on
// both devices (nn/transformer_kernels.h), and the kernels ct_jit writes
// for the CPU, which paste the text of this file's regions (jit/codegen.c,
// embedded at build time by jit/embed.cmake). So a fused expression gives
// the same bits as the chain of the runtime's ops. float64 keeps the C
// library, and CUDA's elementwise ops keep CUDA's own expf/logf/tanhf.
//
// Accuracy, measured against float64 in tests/unit/test_vecmath.c over
// every 4099th float (the bounds the test enforces): cti_expf within 1.5
// ulp, cti_tanhf within 2.5 ulp (2.26 over every float, measured once),
// cti_logf within 1.5 ulp. Special values
// as C's: exp(NaN) = NaN, exp(+inf) = inf, exp(-inf) = 0; tanh(+-inf) =
// +-1, tanh(-0) = -0; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
//
// Rounding: every product and sum is rounded on its own (no fused
// multiply-add). CUDA builds use the __f*_rn intrinsics, which nvcc never
// contracts; the CPU build targets baseline x86-64 (no FMA) and the JIT
// compiles with -ffp-contract=off. So a value is the same on every path.
//
// The text between a "jit-region NAME" line and the next "jit-region end"
// line is what the JIT pastes (NAME: base, exp, tanh, log); a region uses
// only what the regions before it define.
#ifndef CTI_VECMATH_H
#define CTI_VECMATH_H

#include <stdint.h>

// jit-region base
#if defined(__CUDACC__)
#define CTI_VM_FN static inline __host__ __device__
#else
#define CTI_VM_FN static inline
#endif
#ifdef __CUDA_ARCH__
#define CTI_FMUL(a, b) __fmul_rn(a, b)
#define CTI_FADD(a, b) __fadd_rn(a, b)
#define CTI_FSUB(a, b) __fsub_rn(a, b)
#define CTI_FDIV(a, b) __fdiv_rn(a, b)
#else
#define CTI_FMUL(a, b) ((a) * (b))
#define CTI_FADD(a, b) ((a) + (b))
#define CTI_FSUB(a, b) ((a) - (b))
#define CTI_FDIV(a, b) ((a) / (b))
#endif

// A float's bits and back.
CTI_VM_FN uint32_t cti_vm_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t x;
  __builtin_memcpy(&x, &f, sizeof x);
  return x;
#endif
}
CTI_VM_FN float cti_vm_float(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(x);
#else
  float f;
  __builtin_memcpy(&f, &x, sizeof f);
  return f;
#endif
}
// jit-region end

// jit-region exp
// 2^n for -126 <= n <= 127, built from its bits.
CTI_VM_FN float cti_vm_pow2(int32_t n) { return cti_vm_float((uint32_t)(n + 127) << 23); }

// exp(y) = 2^n e^r, n = round(y / ln 2), r = y - n ln 2 (ln 2 split in two,
// Cody and Waite: n ln2_hi is exact for |n| < 512), e^r by its Taylor
// polynomial to r^7/7! (|r| <= 0.35: truncation below 1e-8 relative), 2^n
// applied in two normal factors so that results near the overflow and in
// the subnormal range round once.
CTI_VM_FN float cti_expf(float y) {
  // enters with any float; 89 and -104 already give inf and 0
  float c = y > -104.0f ? y : -104.0f; // NaN becomes -104 here, and NaN again at the end
  c = c < 89.0f ? c : 89.0f;
  const float shift = 12582912.0f; // 1.5 * 2^23: adding it rounds to an integer (ties to even)
  const float nf = CTI_FSUB(CTI_FADD(CTI_FMUL(c, 1.44269504088896341f), shift), shift);
  const int32_t n = (int32_t)nf; // in [-150, 129]
  const float r = CTI_FSUB(CTI_FSUB(c, CTI_FMUL(nf, 0.693145751953125f)), CTI_FMUL(nf, 1.4286068202862268e-6f));
  float p = 1.0f / 5040.0f;
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 720.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 120.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 24.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 6.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 0.5f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f);
  const int32_t h = n / 2;
  const float e = CTI_FMUL(CTI_FMUL(p, cti_vm_pow2(h)), cti_vm_pow2(n - h));
  return y == y ? e : y;
}
// jit-region end

// jit-region tanh
// tanh(|x|) = (1 - e) / (1 + e) with e = exp(-2|x|) = 2^n (1 + q), n and r
// as in cti_expf and q = e^r - 1 summed without its constant term (Taylor
// to r^8/8!), so that the numerator, (1 - 2^n) - 2^n q (1 - 2^n is exact
// for n >= -24), keeps its relative accuracy as x goes to 0, where n = 0
// and it is -q itself; the denominator 1 + (2^n + 2^n q) lies in (1, 2].
// The sign of x is put back. Beyond |x| = 9.5, tanh rounds to 1 in float.
CTI_VM_FN float cti_tanhf(float x) {
  float a = cti_vm_float(cti_vm_bits(x) & 0x7fffffffu);
  a = a < 9.5f ? a : 9.5f; // NaN becomes 9.5 here, and NaN again at the end
  const float y = CTI_FMUL(-2.0f, a); // in [-19, 0]
  const float shift = 12582912.0f;
  const float nf = CTI_FSUB(CTI_FADD(CTI_FMUL(y, 1.44269504088896341f), shift), shift);
  const int32_t n = (int32_t)nf; // in [-28, 0]
  const float r = CTI_FSUB(CTI_FSUB(y, CTI_FMUL(nf, 0.693145751953125f)), CTI_FMUL(nf, 1.4286068202862268e-6f));
  float p = 1.0f / 40320.0f; // (e^r - 1 - r) / r^2 = 1/2 + r/6 + ... + r^6/8!
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 5040.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 720.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 120.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 24.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 1.0f / 6.0f);
  p = CTI_FADD(CTI_FMUL(p, r), 0.5f);
  const float q = CTI_FADD(r, CTI_FMUL(CTI_FMUL(r, r), p)); // e^r - 1
  const float s = cti_vm_float((uint32_t)(n + 127) << 23); // 2^n, normal
  const float sq = CTI_FMUL(s, q);
  const float t = CTI_FDIV(CTI_FSUB(CTI_FSUB(1.0f, s), sq), CTI_FADD(1.0f, CTI_FADD(s, sq)));
  const float signed_t = cti_vm_float(cti_vm_bits(t) | (cti_vm_bits(x) & 0x80000000u));
  return x == x ? signed_t : x;
}
// jit-region end

// jit-region log
// log(x) = k ln 2 + log(1 + f), x = 2^k (1 + f) with 1 + f in
// [sqrt(1/2), sqrt(2)); log(1 + f) = 2 atanh(s), s = f / (2 + f), |s| <=
// 0.172, written f - (f^2/2 - s (f^2/2 + R)), R = 2s^2/3 + 2s^4/5 + ...
// + 2s^10/11 (Taylor; the next term is below 1e-10): the small correction
// is added last, so f's own value is not rounded away. Subnormal x are
// scaled by 2^23 first.
CTI_VM_FN float cti_logf(float x) {
  const int sub = x < 1.17549435e-38f; // subnormal, zero or negative
  const float xs = sub ? CTI_FMUL(x, 8388608.0f) : x;
  const uint32_t b = cti_vm_bits(xs) + (0x3f800000u - 0x3f3504f3u); // shifts [sqrt(1/2), 1) into the next binade
  const int32_t k = (int32_t)(b >> 23) - 127 - (sub ? 23 : 0);
  const float m = cti_vm_float((b & 0x007fffffu) + 0x3f3504f3u); // 1 + f in [sqrt(1/2), sqrt(2))
  const float f = CTI_FSUB(m, 1.0f);
  const float s = CTI_FDIV(f, CTI_FADD(2.0f, f));
  const float z = CTI_FMUL(s, s);
  float R = 2.0f / 11.0f;
  R = CTI_FADD(CTI_FMUL(R, z), 2.0f / 9.0f);
  R = CTI_FADD(CTI_FMUL(R, z), 2.0f / 7.0f);
  R = CTI_FADD(CTI_FMUL(R, z), 2.0f / 5.0f);
  R = CTI_FADD(CTI_FMUL(R, z), 2.0f / 3.0f);
  R = CTI_FMUL(R, z);
  const float hfsq = CTI_FMUL(CTI_FMUL(0.5f, f), f);
  const float kf = (float)k;
  // k ln2_hi is exact (ln2_hi has 16 significant bits, |k| < 150)
  const float lo = CTI_FSUB(CTI_FMUL(s, CTI_FADD(hfsq, R)), hfsq);          // log(1 + f) - f
  const float v = CTI_FADD(CTI_FMUL(kf, 0.693145751953125f),
                           CTI_FADD(f, CTI_FADD(lo, CTI_FMUL(kf, 1.4286068202862268e-6f))));
  const float inf = cti_vm_float(0x7f800000u);
  return x > 0.0f ? (x < inf ? v : x) : x == 0.0f ? -inf : cti_vm_float(0x7fc00000u); // NaN for x < 0 and NaN
}
// jit-region end

// sigmoid(v) = 1 / (1 + exp(-v)), the runtime's definition.
CTI_VM_FN float cti_sigmoidf(float v) { return CTI_FDIV(1.0f, CTI_FADD(1.0f, cti_expf(-v))); }

#endif
