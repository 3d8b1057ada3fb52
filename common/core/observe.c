// SPDX-License-Identifier: MIT
//
// observe: the attached observers and the walks over them (observe.h), and
// the sync points' one call (sync_point.h).
//
// Invariant: slots[i] is set once, by the first attach of the observer that
// names slot i, and never changes; bit i of cti_observers is set exactly
// while that observer is attached. A walk loads the bits once (acquire,
// pairing with attach's release) and reads only slots whose bit it saw.
// The sync points' nesting depth is per thread and counted whatever is
// attached, so an observer attached or detached inside a sync point never
// sees an unbalanced scope.
#include "observe.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "backend.h"
#include "error.h"
#include "sync_point.h"

atomic_uint cti_observers;
static const cti_observer *_Atomic slots[CTI_OBSERVER_SLOTS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int sync_depth; // open sync points on this thread

int cti_observer_attach(const cti_observer *o) {
  if (!o || o->slot < 0 || o->slot >= CTI_OBSERVER_SLOTS)
    return ct_fail(CT_ERR_VALUE, "cti_observer_attach: no observer or a slot out of range");
  pthread_mutex_lock(&mu);
  const cti_observer *held = atomic_load(&slots[o->slot]);
  if (held && held != o) {
    pthread_mutex_unlock(&mu);
    return ct_fail(CT_ERR_VALUE, "cti_observer_attach: slot %d of %s is held by %s", o->slot, o->name,
                   held->name);
  }
  atomic_store(&slots[o->slot], o);
  atomic_fetch_or_explicit(&cti_observers, 1u << o->slot, memory_order_release);
  pthread_mutex_unlock(&mu);
  return CT_OK;
}

void cti_observer_detach(const cti_observer *o) {
  if (!o || o->slot < 0 || o->slot >= CTI_OBSERVER_SLOTS) return;
  pthread_mutex_lock(&mu);
  if (atomic_load(&slots[o->slot]) == o) atomic_fetch_and(&cti_observers, ~(1u << o->slot));
  pthread_mutex_unlock(&mu);
}

// Each attached observer o in slot order, for the body that follows.
#define EACH(o)                                                                                  \
  for (unsigned bits_ = atomic_load_explicit(&cti_observers, memory_order_acquire); bits_;       \
       bits_ &= bits_ - 1)                                                                       \
    for (const cti_observer *o = atomic_load_explicit(&slots[__builtin_ctz(bits_)],               \
                                                      memory_order_relaxed);                     \
         o; o = NULL)

// region: wrap
const cti_backend *cti_observe_wrap(const char *op, ct_device d, const cti_backend *be) {
  if (!cti_observed()) return be;
  EACH(o) if (o->wrap) be = o->wrap(op, d, be);
  return be;
}
// endregion

// region: sync_point
int cti_sync_begin(const char *op, ct_device d, unsigned how) {
  if (cti_observed()) {
    EACH(o) {
      int rc = o->sync_point ? o->sync_point(op, d, how, sync_depth == 0) : CT_OK;
      if (rc != CT_OK) return rc;
    }
  }
  ++sync_depth;
  return CT_OK;
}

void cti_sync_end(void) {
  if (sync_depth > 0) --sync_depth;
}
// endregion

int cti_observe_copy(ct_device dst, ct_device src, bool non_blocking) {
  if (!cti_observed()) return CT_OK;
  EACH(o) {
    int rc = o->copy ? o->copy(dst, src, non_blocking) : CT_OK;
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

int cti_observe_uncapturable(ct_device d, const char *fmt, ...) {
  if (!cti_observed()) return CT_OK;
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  EACH(o) {
    int rc = o->uncapturable ? o->uncapturable(d, msg) : CT_OK;
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

int cti_observe_access(const char *op, ct_stream *s, const ct_tensor *const *reads, int nr,
                       const ct_tensor *const *writes, int nw) {
  if (!cti_observed()) return CT_OK;
  EACH(o) {
    int rc = o->access ? o->access(op, s, reads, nr, writes, nw) : CT_OK;
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}

// The notifications: every attached observer with the hook hears it.
#define NOTIFY(hook, ...)                                                                        \
  do {                                                                                           \
    if (!cti_observed()) return;                                                                 \
    EACH(o) if (o->hook) o->hook(__VA_ARGS__);                                                   \
  } while (0)

void cti_observe_host_waits(ct_stream *s) { NOTIFY(host_waits, s); }
void cti_observe_host_waits_device(ct_device d) { NOTIFY(host_waits_device, d); }
void cti_observe_host_waits_event(void *const *event) { NOTIFY(host_waits_event, event); }
void cti_observe_memory(ct_device d, const void *ptr, int64_t bytes, size_t total_allocated,
                        size_t total_reserved) {
  NOTIFY(memory, d, ptr, bytes, total_allocated, total_reserved);
}
void cti_observe_allocated(const ct_tensor *t, ct_stream *s) { NOTIFY(allocated, t, s); }
void cti_observe_record_stream(const ct_tensor *t, ct_stream *s) { NOTIFY(record_stream, t, s); }
void cti_observe_storage_free(cti_storage *st) { NOTIFY(storage_free, st); }
void cti_observe_wait_stream(ct_stream *s, ct_stream *other) { NOTIFY(wait_stream, s, other); }
void cti_observe_stream_destroyed(ct_stream *s) { NOTIFY(stream_destroyed, s); }
void cti_observe_event_record(void **event, ct_stream *s) { NOTIFY(event_record, event, s); }
void cti_observe_wait_event(ct_stream *s, void *const *event) { NOTIFY(wait_event, s, event); }

// region: range
cti_range cti_observe_range_begin(const char *kind, const char *what, const ct_tensor *x) {
  cti_range r = {-1, -1};
  if (!cti_observed()) return r;
  EACH(o) {
    if (!o->range_begin || r.slot >= 0) continue;
    int token = o->range_begin(kind, what, x);
    if (token >= 0) r = (cti_range){o->slot, token};
  }
  return r;
}

void cti_observe_range_end(cti_range r) {
  if (r.slot < 0) return;
  const cti_observer *o = atomic_load_explicit(&slots[r.slot], memory_order_acquire);
  if (o && o->range_end) o->range_end(r.token);
}
// endregion
