// SPDX-License-Identifier: MIT
//
// cpu_random: rand and randn on the host, by random.h's recipe.
//
// Invariant (random.h): element i depends only on (seed, offset, i). One
// loop iteration owns one Philox counter c = offset + q and writes elements
// 4q .. 4q+3 (those < n), so the numbers are the same on 1 thread or 16,
// and the same as the CUDA backend's, which follows the same recipe
// operation for operation (philox.cuh): uniforms (u32 >> (32 - p)) * 2^-p
// with p = 11 for float16, 8 for bfloat16, 24 otherwise; normals by Box-Muller in double on the pairs (2j, 2j+1), an odd
// last element taking z0 with its partner's uniform from the same counter.
#include <math.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "error.h"
#include "random.h"

// The double nearest 2*pi (strict C11 has no M_PI); equal to 2.0 * M_PI.
#define CT_TWO_PI 6.283185307179586476925286766559

// random.h's recipe, one Philox counter (four elements) per iteration, so
// the numbers do not depend on how the counters are shared among threads.
// Values are stored as float32 (exact for uniforms), float64, or rounded to
// float16/bfloat16 through float32.
int cti_cpu_random(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed,
                  uint64_t offset, ct_stream *s) {
  (void)s;
  const char *op = normal ? "randn" : "rand";
  if (!cti_cpu_is_float(dt))
    return ct_fail(CT_ERR_DTYPE, "ct_%s: the CPU backend makes random float16, bfloat16, "
                   "float32 and float64 tensors, got %s",
                   op, (unsigned)dt < (unsigned)CT_NUM_DTYPES ? ct_dtype_name(dt) : "(invalid)");
  if (n < 0) return ct_fail(CT_ERR_VALUE, "ct_%s: negative length %lld", op, (long long)n);
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const int64_t nctr = n / 4 + (n % 4 != 0);
#pragma omp parallel for if (n >= CT_CPU_PAR_MIN) schedule(static)
  for (int64_t c = 0; c < nctr; ++c) {
    const uint64_t cc = offset + (uint64_t)c;
    const uint32_t ctr[4] = {(uint32_t)cc, (uint32_t)(cc >> 32), 0, 0};
    uint32_t bits[4];
    ct_philox4x32_10(ctr, key, bits);
    // Uniforms keep the dtype's significand bits, so none rounds up to 1.
    const int bits_kept = normal ? 24 : dt == CT_F16 ? 11 : dt == CT_BF16 ? 8 : 24;
    double v[4];
    for (int l = 0; l < 4; ++l) v[l] = (double)(bits[l] >> (32 - bits_kept)) * ldexp(1.0, -bits_kept);
    if (normal) {
      for (int p = 0; p < 4; p += 2) {
        const double r = sqrt(-2.0 * log(1.0 - v[p]));
        const double theta = CT_TWO_PI * v[p + 1];
        v[p] = r * cos(theta);
        v[p + 1] = r * sin(theta);
      }
    }
    const int64_t i0 = 4 * c;
    const int m = n - i0 < 4 ? (int)(n - i0) : 4;
    for (int l = 0; l < m; ++l) {
      switch (dt) {
      case CT_F16: ((uint16_t *)out)[i0 + l] = cti_cpu_f32_to_f16((float)v[l]); break;
      case CT_BF16: ((uint16_t *)out)[i0 + l] = cti_cpu_f32_to_bf16((float)v[l]); break;
      case CT_F32: ((float *)out)[i0 + l] = (float)v[l]; break;
      default: ((double *)out)[i0 + l] = v[l]; break;
      }
    }
  }
  return CT_OK;
}
