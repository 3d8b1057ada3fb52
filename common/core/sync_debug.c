// SPDX-License-Identifier: MIT
//
// sync_debug: the mode of sync_debug.h, an observer (observe.h) of the sync
// points (sync_point.h).
//
// Invariant: the mode and the hook are process-wide atomics (read on every
// sync point, so a mode set on one thread applies to all, as in PyTorch),
// and the observer is attached exactly while the mode is not the default;
// the nesting depth is core's, per thread, so one thread's ct_item does not
// silence another's. In the default mode a sync point costs what any hook
// costs with nothing attached: one atomic load, and an increment of the
// thread-local depth.
#include "sync_debug.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "observe.h"
#include "sync_point.h"

static atomic_int mode = CT_SYNC_DEBUG_DEFAULT;
static _Atomic(ct_sync_debug_hook) hook;
static _Atomic(void *) hook_ctx;
static atomic_uint_least64_t reports;

static const char *const names[] = {"default", "warn", "error"};
static const cti_observer observer; // below

const char *ct_sync_debug_mode_name(int m) {
  return m >= CT_SYNC_DEBUG_DEFAULT && m <= CT_SYNC_DEBUG_ERROR ? names[m] : "invalid";
}

int ct_set_sync_debug_mode(int m) {
  if (m < CT_SYNC_DEBUG_DEFAULT || m > CT_SYNC_DEBUG_ERROR)
    return ct_fail(CT_ERR_VALUE,
                   "ct_set_sync_debug_mode: invalid value of debug_mode %d, expected one of 0 "
                   "(default), 1 (warn), 2 (error)", m);
  atomic_store(&mode, m);
  if (m == CT_SYNC_DEBUG_DEFAULT) cti_observer_detach(&observer);
  else return cti_observer_attach(&observer);
  return CT_OK;
}

int ct_set_sync_debug_mode_str(const char *s) {
  for (int m = 0; s && m <= CT_SYNC_DEBUG_ERROR; ++m) {
    char digit[2] = {(char)('0' + m), '\0'};
    if (strcmp(s, names[m]) == 0 || strcmp(s, digit) == 0) return ct_set_sync_debug_mode(m);
  }
  // PyTorch's words for a bad string.
  return ct_fail(CT_ERR_VALUE, "ct_set_sync_debug_mode: invalid value of debug_mode \"%s\", "
                 "expected one of `default`, `warn`, `error`", s ? s : "(null)");
}

int ct_get_sync_debug_mode(void) { return atomic_load(&mode); }

void ct_set_sync_debug_hook(ct_sync_debug_hook fn, void *ctx) {
  atomic_store(&hook_ctx, ctx);
  atomic_store(&hook, fn);
}

uint64_t ct_sync_debug_reports(void) { return atomic_load(&reports); }

// PyTorch says "called a synchronizing CUDA operation"; the CPU model says
// what a GPU would do there.
static const char *what(ct_device d) {
  return d.type == CT_CUDA ? "called a synchronizing CUDA operation"
                           : "called a synchronizing operation (on a GPU the host would wait here)";
}

static void report(const char *op, ct_device d, int m) {
  atomic_fetch_add(&reports, 1);
  ct_sync_debug_hook fn = atomic_load(&hook);
  if (fn) {
    fn(op, d, m, atomic_load(&hook_ctx));
  } else if (m == CT_SYNC_DEBUG_WARN) {
    char dev[CT_DEVICE_STR_MAX];
    fflush(stdout); // keep the warning after what the program printed before it
    fprintf(stderr, "warning: %s: %s [%s]\n", op, what(d), ct_device_str(d, dev));
    fflush(stderr);
  }
}

// region: sync_begin
// Every sync point's check (cti_sync_begin walks the attached observers):
// only the outermost one that wants values is reported.
static int sync_point(const char *op, ct_device d, unsigned how, bool outermost) {
  int m = atomic_load(&mode);
  if (outermost && (how & CTI_SYNC_REPORT) && m != CT_SYNC_DEBUG_DEFAULT) {
    report(op, d, m);
    if (m == CT_SYNC_DEBUG_ERROR) {
      char dev[CT_DEVICE_STR_MAX];
      return ct_fail(CT_ERR_SYNC, "%s: %s [%s], refused by the sync debug mode \"error\" "
                     "(ct_set_sync_debug_mode(0) allows it)", op, what(d), ct_device_str(d, dev));
    }
  }
  return CT_OK;
}
// endregion

static const cti_observer observer = {.name = "the sync debug mode", .slot = 3, .sync_point = sync_point};
