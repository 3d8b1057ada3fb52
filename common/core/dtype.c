// SPDX-License-Identifier: MIT
//
// dtype: names, sizes and promotion of element types, and the bit-exact
// float16/bfloat16 conversions used on the CPU. Conversions round to nearest,
// ties to even, as __float2half_rn and __float2bfloat16_rn do on the GPU, so
// both devices store the same bits for the same float.
#include "dtype.h"

#include <math.h>
#include <string.h>

#include "error.h"

static const struct {
  const char *name, *torch, *alias1, *alias2;
  size_t size;
} info[CT_NUM_DTYPES] = {
    [CT_BOOL] = {"bool", "torch.bool", "b8", "bool_", 1},
    [CT_U8] = {"uint8", "torch.uint8", "u8", "byte", 1},
    [CT_I32] = {"int32", "torch.int32", "i32", "int", 4},
    [CT_I64] = {"int64", "torch.int64", "i64", "long", 8},
    [CT_F16] = {"float16", "torch.float16", "f16", "half", 2},
    [CT_BF16] = {"bfloat16", "torch.bfloat16", "bf16", "bfloat", 2},
    [CT_F32] = {"float32", "torch.float32", "f32", "float", 4},
    [CT_F64] = {"float64", "torch.float64", "f64", "double", 8},
};

bool ct_dtype_valid(ct_dtype dt) { return (unsigned)dt < CT_NUM_DTYPES; }
size_t ct_dtype_size(ct_dtype dt) { return ct_dtype_valid(dt) ? info[dt].size : 0; }
const char *ct_dtype_name(ct_dtype dt) { return ct_dtype_valid(dt) ? info[dt].name : "invalid"; }
const char *ct_dtype_torch_name(ct_dtype dt) {
  return ct_dtype_valid(dt) ? info[dt].torch : "invalid";
}
bool ct_dtype_is_floating(ct_dtype dt) {
  return dt == CT_F16 || dt == CT_BF16 || dt == CT_F32 || dt == CT_F64;
}

int ct_dtype_parse(const char *s, ct_dtype *out) {
  if (!s || !out) return ct_fail(CT_ERR_VALUE, "ct_dtype_parse: NULL argument");
  const char *name = strncmp(s, "torch.", 6) == 0 ? s + 6 : s;
  for (int i = 0; i < CT_NUM_DTYPES; ++i) {
    if (!strcmp(name, info[i].name) || !strcmp(name, info[i].alias1) ||
        !strcmp(name, info[i].alias2)) {
      *out = (ct_dtype)i;
      return CT_OK;
    }
  }
  return ct_fail(CT_ERR_VALUE,
                 "ct_dtype_parse: unknown dtype \"%s\"; expected one of bool, uint8, "
                 "int32, int64, float16, bfloat16, float32, float64 (or f16, bf16, "
                 "f32, f64, i32, i64, u8, half, float, double)", s);
}

ct_dtype ct_promote_types(ct_dtype a, ct_dtype b) {
  if (a == b) return a;
  if ((a == CT_F16 && b == CT_BF16) || (a == CT_BF16 && b == CT_F16)) return CT_F32;
  return a > b ? a : b; // the enum is ordered by promotion category
}

// ---- float16 ----------------------------------------------------------------
uint16_t ct_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or NaN (keep NaN quiet and non-zero)
    return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return (uint16_t)(sign | 0x7c00u);
  if (absx < 0x38800000u) { // below the smallest normal half: subnormal or zero
    // value = absx as float; half subnormal unit is 2^-24.
    float af;
    memcpy(&af, &absx, 4);
    float scaled = af * 16777216.0f; // in units of 2^-24, exact (power of two)
    // round to nearest even integer
    float r = nearbyintf(scaled);    // default rounding mode: to nearest even
    return (uint16_t)(sign | (uint32_t)r);
  }
  // normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 112u;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1u; // may carry into exp: fine
  return (uint16_t)(sign | h);
}

float ct_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)mant, -24);
    if (sign) f = -f;
    return f;
  }
  uint32_t x;
  if (exp == 31) x = sign | 0x7f800000u | (mant << 13);
  else x = sign | ((exp + 112u) << 23) | (mant << 13);
  memcpy(&f, &x, 4);
  return f;
}

// ---- bfloat16: the top 16 bits of a float32, rounded --------------------------
uint16_t ct_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return (uint16_t)(x >> 16);
}

float ct_bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

// ---- one element as double ---------------------------------------------------
double ct_load_f64(const void *p, ct_dtype dt) {
  switch (dt) {
  case CT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  case CT_U8: return *(const uint8_t *)p;
  case CT_I32: return *(const int32_t *)p;
  case CT_I64: return (double)*(const int64_t *)p;
  case CT_F16: return ct_f16_to_f32(*(const uint16_t *)p);
  case CT_BF16: return ct_bf16_to_f32(*(const uint16_t *)p);
  case CT_F32: return *(const float *)p;
  case CT_F64: return *(const double *)p;
  default: return NAN;
  }
}

// Float to integer as a C cast would, but defined everywhere: NaN -> 0 and
// out-of-range values clamp (the GPU kernels do the same).
static int64_t to_i64(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

void ct_store_f64(void *p, ct_dtype dt, double v) {
  switch (dt) {
  case CT_BOOL: *(uint8_t *)p = (v != 0.0); break;
  case CT_U8: *(uint8_t *)p = (uint8_t)to_i64(v, 0, 255); break;
  case CT_I32: *(int32_t *)p = (int32_t)to_i64(v, -2147483648.0, 2147483647.0); break;
  case CT_I64:
    *(int64_t *)p = to_i64(v, -9223372036854775808.0, 9223372036854774784.0);
    break;
  case CT_F16: *(uint16_t *)p = ct_f32_to_f16((float)v); break;
  case CT_BF16: *(uint16_t *)p = ct_f32_to_bf16((float)v); break;
  case CT_F32: *(float *)p = (float)v; break;
  case CT_F64: *(double *)p = v; break;
  default: break;
  }
}
