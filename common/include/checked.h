// SPDX-License-Identifier: MIT
//
// checked: size arithmetic that cannot overflow silently. Every size the
// runtime or a chapter computes from user input or file contents (flags,
// checkpoint headers, dataset headers) is formed with these: each returns
// false, leaving *out unspecified, when the exact result does not fit in an
// int64_t (or a size_t), so the caller can refuse before anything is
// allocated.
#ifndef CT_CHECKED_H
#define CT_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool ct_checked_mul(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool ct_checked_add(int64_t a, int64_t b, int64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool ct_checked_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
// f[0] * f[1] * ... * f[n-1] (1 when n == 0); false on overflow or a negative factor.
static inline bool ct_checked_product(int n, const int64_t *f, int64_t *out) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i)
    if (f[i] < 0 || __builtin_mul_overflow(p, f[i], &p)) return false;
  *out = p;
  return true;
}

#endif
