// SPDX-License-Identifier: MIT
//
// ct_sim_tsan_hooks.cc: the racecheck build's instrumentation hooks. A kernel
// file compiled with g++ -fsanitize=thread (and linked WITHOUT the
// ThreadSanitizer runtime) calls __tsan_readN/__tsan_writeN before each
// memory access; here they go to the emulator's racecheck instead. This file
// itself must be compiled without -fsanitize=thread.
#include "ct_sim_internal.h"

#include <stddef.h>

using ct_sim::racecheck_access;

extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
#define CT_SIM_HOOK(n)                                                                         \
  void __tsan_read##n(void *p) { racecheck_access(p, n, false); }                              \
  void __tsan_write##n(void *p) { racecheck_access(p, n, true); }                              \
  void __tsan_unaligned_read##n(void *p) { racecheck_access(p, n, false); }                    \
  void __tsan_unaligned_write##n(void *p) { racecheck_access(p, n, true); }                    \
  void __tsan_volatile_read##n(void *p) { racecheck_access(p, n, false); }                     \
  void __tsan_volatile_write##n(void *p) { racecheck_access(p, n, true); }
CT_SIM_HOOK(1)
CT_SIM_HOOK(2)
CT_SIM_HOOK(4)
CT_SIM_HOOK(8)
CT_SIM_HOOK(16)
void __tsan_read_range(void *p, size_t n) { racecheck_access(p, n, false); }
void __tsan_write_range(void *p, size_t n) { racecheck_access(p, n, true); }
void __tsan_vptr_read(void **) {}
void __tsan_vptr_update(void **, void *) {}
}
