// SPDX-License-Identifier: MIT
//
// prof_impl: the profiler's hooks (internal). The runtime reaches them only
// through the profiler's observer (core/observe.h, attached while a session
// records, prof.c); its own files and the tests call them here.
//
// Each hook is written `if (CTI_PROF_ON) ...`, one relaxed load of a flag. A range hook returns a token
// (>= 0 when it opened a range) that its end takes back; a range opened
// while recording is closed even if recording stops in between, and one not
// opened is never closed.
#ifndef CT_PROF_IMPL_H
#define CT_PROF_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "profiler.h"
#include "tensor.h"

struct cti_backend;

extern atomic_int cti_prof_on; // a session is recording
#define CTI_PROF_ON atomic_load_explicit(&cti_prof_on, memory_order_relaxed)

// The dispatcher's hook (cti_backend_for, through the observer): while
// recording, the backend is a copy of `real` whose entries open an op range
// around the real entry.
const struct cti_backend *cti_prof_backend(const struct cti_backend *real);

// A module's (or the optimizer's) range, "<kind>.<what>" ("<kind>" when
// what is NULL), with x's shape
// under record_shapes (x may be NULL). Returns the token for cti_prof_end.
int cti_prof_module_begin(const char *kind, const char *what, const ct_tensor *x);
void cti_prof_end(int token);

// The allocator's hook, called with the device's lock held, after the
// statistics changed: bytes > 0 for an allocation, < 0 for a free.
void cti_prof_memory(ct_device d, const void *ptr, int64_t bytes, size_t total_allocated,
                     size_t total_reserved);

// Testing aid, off in every program: while on, ops on the CPU get device
// events too (the CPU's events read the host clock), so that the device-time
// path (event pairs, the clock origin, kernels, sums up the tree) runs in
// tests on a machine without a GPU. Set it before ct_profiler_start.
void cti_prof_time_cpu_ops_(bool on);

#endif
