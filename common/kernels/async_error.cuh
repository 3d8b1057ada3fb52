// SPDX-License-Identifier: MIT
//
// async_error.cuh: the device side of async_error.h. A kernel that finds bad
// input calls cti_async_report; the first report on the device wins.
#ifndef CT_ASYNC_ERROR_CUH
#define CT_ASYNC_ERROR_CUH

#include "async_error.h"

// Claims the record (first caller only), writes the values, then the code
// after a fence, so a host that sees the code sees the values too.
__device__ inline void cti_async_report(cti_async_record *r, long long code, long long a, long long b,
                                       long long c) {
  if (!r || atomicCAS(&r->claimed, 0ull, 1ull) != 0ull) return;
  r->a = a;
  r->b = b;
  r->c = c;
  __threadfence();
  *(volatile long long *)&r->code = code;
}

#endif
