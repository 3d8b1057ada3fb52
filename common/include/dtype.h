// SPDX-License-Identifier: MIT
//
// dtype: element types, their sizes and names, type promotion, and the
// float16/bfloat16 conversions the CPU needs (round to nearest even, as the
// hardware does).
#ifndef CT_DTYPE_H
#define CT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Ordered from "smallest" to "largest" category for promotion.
typedef enum ct_dtype {
  CT_BOOL = 0,
  CT_U8,
  CT_I32,
  CT_I64,
  CT_F16,
  CT_BF16,
  CT_F32,
  CT_F64,
  CT_NUM_DTYPES
} ct_dtype;

size_t ct_dtype_size(ct_dtype dt);            // bytes per element
const char *ct_dtype_name(ct_dtype dt);       // "float32"
const char *ct_dtype_torch_name(ct_dtype dt); // "torch.float32"
bool ct_dtype_is_floating(ct_dtype dt);
bool ct_dtype_valid(ct_dtype dt);
// Accepts "float32", "f32", "float", "torch.float32", "half", "bf16", ...
// Returns CT_OK or CT_ERR_VALUE with a message listing the accepted names.
int ct_dtype_parse(const char *s, ct_dtype *out);
// PyTorch's promote_types for two tensors: bool < u8 < i32 < i64 < floats;
// f16 with bf16 gives f32; any float with a wider float gives the wider.
ct_dtype ct_promote_types(ct_dtype a, ct_dtype b);

uint16_t ct_f32_to_f16(float f);
float ct_f16_to_f32(uint16_t h);
uint16_t ct_f32_to_bf16(float f);
float ct_bf16_to_f32(uint16_t b);

// Reads/writes one element of any dtype as a double (bools as 0/1, integers
// truncated toward zero on store, as a C cast; f16/bf16 rounded to nearest).
double ct_load_f64(const void *p, ct_dtype dt);
void ct_store_f64(void *p, ct_dtype dt, double v);

#ifdef __cplusplus
}
#endif
#endif
