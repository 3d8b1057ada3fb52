// SPDX-License-Identifier: MIT
//
// observe: the one way the runtime tells whoever watches it what it does
// (internal).
//
// Invariant: core names no observer. The profiler, the race checker, the
// sync debug mode and a graph capture are each one table of hooks (a
// cti_observer) that its own folder attaches while it is switched on;
// core calls the cti_observe_* functions below and nothing else. Each starts
// with one relaxed load, cti_observed(): with nothing attached, a hook costs
// that load and a branch, whatever the number of observers the program links.
// When something is attached, the attached tables are walked in slot order,
// and a hook a table leaves NULL is skipped.
//
// What an observer sees (each hook's contract is at its field):
//  - memory: every allocation and free with the allocator's totals, a new
//    tensor's storage, ct_record_stream, a storage being freed;
//  - accesses: an op about to issue work that reads and writes tensors on a
//    stream (an observer may refuse it: the op then fails unissued);
//  - host waits: every sync point (cti_sync_begin in sync_point.h, which
//    an observer may refuse), and what the host then knows to be done;
//    copies, and work a captured graph could not replay (may be refused);
//  - streams and events: waits between streams, records, destruction;
//  - ranges: a module's or the optimizer's named range;
//  - backend wrapping: the table an op gets from cti_backend_for.
//
// Slots: an observer names its own slot (0..CTI_OBSERVER_SLOTS-1), distinct
// from every other's; the slot is its place in every walk. The order that
// matters is the backend's: a lower slot wraps first, so a capture's
// recording table (slot 0) sits inside the profiler's timing table (slot 1),
// and refuses first at a sync point, before the sync debug mode reports it.
//
// State an observer keeps on a runtime object lives in that object's `obs`
// slot (a storage's, an event's), which starts NULL. An event's slot is one
// malloc'd block that the event frees; a storage's is handed back to the
// attached observers through storage_free. An observer that keeps such
// state therefore stays attached while any of it may exist.
#ifndef CT_OBSERVE_H
#define CT_OBSERVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "stream.h"
#include "tensor_impl.h"

struct cti_backend;

#define CTI_OBSERVER_SLOTS 8

// How a sync point waits (cti_sync_begin's `how`, sync_point.h).
enum {
  CTI_SYNC_REPORT = 1,            // the host wants values: the sync debug mode reports it
  CTI_SYNC_REFUSE_IN_CAPTURE = 2, // the wait itself is refused while this thread captures on the device
};

typedef struct cti_observer {
  const char *name; // for messages
  int slot;         // 0..CTI_OBSERVER_SLOTS-1, distinct (see above)

  // backend wrapping: the table an op named `op` on d gets, given the one
  // the slots below chose (`be`, never NULL). Returns be or a stand-in.
  const struct cti_backend *(*wrap)(const char *op, ct_device d, const struct cti_backend *be);

  // host waits: `op` is about to make the host wait for device d (`how`:
  // CTI_SYNC_*; `outermost`: no other sync point is open on this thread).
  // CT_OK, or a status with the error recorded: the call then fails before
  // it has done anything.
  int (*sync_point)(const char *op, ct_device d, unsigned how, bool outermost);
  // A copy of cti_memcpy between dst and src is about to be issued: CT_OK,
  // or a status with the error recorded (the copy is refused).
  int (*copy)(ct_device dst, ct_device src, bool non_blocking);
  // An op on d is about to do what a captured graph could not replay (a
  // host scalar it would freeze); msg is the refusal, in the words to fail
  // with. CT_OK, or a status with the error recorded (the op must fail).
  int (*uncapturable)(ct_device d, const char *msg);
  // The host knows that all work issued so far on s (host_waits), on every
  // stream of d (host_waits_device) or before the event whose slot is
  // `event` (host_waits_event) is done.
  void (*host_waits)(ct_stream *s);
  void (*host_waits_device)(ct_device d);
  void (*host_waits_event)(void *const *event);

  // accesses: `op` is about to issue work on s that reads reads[0..nr) and
  // writes writes[0..nw) (NULL entries skipped). CT_OK, or a status with
  // the error recorded: the op must fail without issuing its work.
  int (*access)(const char *op, ct_stream *s, const ct_tensor *const *reads, int nr,
                const ct_tensor *const *writes, int nw);

  // memory: the allocator's statistics changed (bytes > 0 an allocation,
  // < 0 a free), called with the device's lock held.
  void (*memory)(ct_device d, const void *ptr, int64_t bytes, size_t total_allocated, size_t total_reserved);
  // A new tensor's storage, allocated for stream s: its first write.
  void (*allocated)(const ct_tensor *t, ct_stream *s);
  // ct_record_stream(t, s): t's storage is also used on s.
  void (*record_stream)(const ct_tensor *t, ct_stream *s);
  // A storage whose `obs` slot is set is being freed: leaves it NULL.
  void (*storage_free)(cti_storage *st);

  // streams and events: s waits for all work issued on other so far; s is
  // being destroyed; an event is recorded on s, or s waits for it (its
  // slot `event`, see above).
  void (*wait_stream)(ct_stream *s, ct_stream *other);
  void (*stream_destroyed)(ct_stream *s);
  void (*event_record)(void **event, ct_stream *s);
  void (*wait_event)(ct_stream *s, void *const *event);

  // ranges: opens the range "<kind>.<what>" ("<kind>" when what is NULL),
  // about x (may be NULL), and returns a token >= 0 for range_end, or -1
  // when it opened none. range_end is called on the observer that opened
  // the range even if it was detached in between.
  int (*range_begin)(const char *kind, const char *what, const ct_tensor *x);
  void (*range_end)(int token);
} cti_observer;

// Attaches o in its slot (again: nothing happens). CT_OK, or CT_ERR_VALUE
// when another observer holds the slot.
int cti_observer_attach(const cti_observer *o);
// Detaches o; its slot stays its own. Hooks already running finish.
void cti_observer_detach(const cti_observer *o);

// The one cheap test: is anything attached?
extern atomic_uint cti_observers; // a bit per attached slot
static inline bool cti_observed(void) {
  return atomic_load_explicit(&cti_observers, memory_order_relaxed) != 0;
}

// What core calls. Each returns at once (CT_OK, or `be`) when nothing is
// attached.
const struct cti_backend *cti_observe_wrap(const char *op, ct_device d, const struct cti_backend *be);
int cti_observe_copy(ct_device dst, ct_device src, bool non_blocking);
int cti_observe_uncapturable(ct_device d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cti_observe_host_waits(ct_stream *s);
void cti_observe_host_waits_device(ct_device d);
void cti_observe_host_waits_event(void *const *event);
int cti_observe_access(const char *op, ct_stream *s, const ct_tensor *const *reads, int nr,
                       const ct_tensor *const *writes, int nw);
void cti_observe_memory(ct_device d, const void *ptr, int64_t bytes, size_t total_allocated,
                        size_t total_reserved);
void cti_observe_allocated(const ct_tensor *t, ct_stream *s);
void cti_observe_record_stream(const ct_tensor *t, ct_stream *s);
void cti_observe_storage_free(cti_storage *st);
void cti_observe_wait_stream(ct_stream *s, ct_stream *other);
void cti_observe_stream_destroyed(ct_stream *s);
void cti_observe_event_record(void **event, ct_stream *s);
void cti_observe_wait_event(ct_stream *s, void *const *event);

// A range as core hands it out: which slot opened it and its token.
typedef struct cti_range {
  int slot; // -1: none opened
  int token;
} cti_range;
cti_range cti_observe_range_begin(const char *kind, const char *what, const ct_tensor *x);
void cti_observe_range_end(cti_range r);

#endif
