// SPDX-License-Identifier: MIT
//
// sanitizer: a stream-ordering race checker that works on every device, in
// the spirit of PyTorch's CUDA sanitizer (TORCH_CUDA_SANITIZER=1).
//
// The race it finds: work on stream B reads (or writes) a tensor that work
// on stream A wrote (or read), and nothing orders the two: no
// ct_stream_wait_event / ct_stream_wait_stream chain from A to B, and no host
// wait for A (ct_stream_synchronize, ct_event_synchronize, a blocking copy
// to the host, ...) before B's work was issued. On a GPU such work may run
// in either order; on the CPU, where every op runs when it is issued, it
// never races, and that is why the checker does not look at what ran: it
// models, on the host, what a GPU would be allowed to do.
//
// The model (vector clocks). Each stream counts the ops issued on it; each
// stream also carries, for every other stream, how far along that stream it
// is known to come after. An op on stream s first learns everything the host
// has waited for, then takes the next count of s. Recording an event copies
// s's knowledge into it; waiting on the event (or on a stream) merges it into
// the waiter's; a host wait merges it into the host's, which every op issued
// afterwards learns. Each tensor's storage keeps its last write (stream,
// count, op) and the reads since (one per stream). An access is ordered
// after an earlier one on stream a at count c iff the accessing stream
// knows a up to c. Reads race with an unordered last write; writes race with
// an unordered last write or read. A tensor's allocation counts as a write
// on the stream it is allocated for (the caching allocator hands a block to
// work on that stream: the previous owner's kernels, or the poison fill,
// may still be running there), which is alloc.h's rule 1 checked. When a
// storage is freed, every access by a stream other than its own that the
// owning stream (or the host) does not know of must have been announced with
// ct_record_stream, or the allocator may hand the memory out while that
// stream still uses it: alloc.h's rule 2, checked.
//
// What it sees: the ops of the dispatcher (elementwise, reductions, matmul,
// fills, random, copies and moves between devices, the host reads ct_item,
// ct_copy_to_host and printing). The nn, conv and optim kernel tables and the
// collectives are not annotated: their accesses go unseen (a race there is
// missed; none is invented). A tensor is tracked by its storage: views share
// one record.
//
// Modes, as sync_debug.h's: 0 off (the default; each hook then costs one
// atomic load), 1 warn (a line on stderr per race, the op goes on), 2 error
// (the op fails with CT_ERR_RACE before it issues anything). A race found at
// a free is reported in both modes and never fails (ct_free returns nothing).
// CT_STREAM_SANITIZER=1 or 2 in the environment sets the mode at start.
// Thread-safe: one lock guards the model.
#ifndef CT_SANITIZER_H
#define CT_SANITIZER_H

#include <stdint.h>

#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CT_SANITIZER_OFF = 0, CT_SANITIZER_WARN = 1, CT_SANITIZER_ERROR = 2 };

int ct_sanitizer_set_mode(int mode); // CT_ERR_VALUE unless 0, 1 or 2
int ct_sanitizer_mode(void);
// Names for the reports ("tensor 'batch'", "stream 'copy'"); at most 31
// characters are kept. Without one a tensor is named by its address, shape
// and device, a stream by a number ("stream #2 (cuda:0)").
int ct_sanitizer_name_tensor(const ct_tensor *t, const char *name);
int ct_sanitizer_name_stream(const ct_stream *s, const char *name);
uint64_t ct_sanitizer_reports(void);     // races reported so far
const char *ct_sanitizer_last_report(void); // the latest report ("" if none); valid until the next call on this thread

#ifdef __cplusplus
}
#endif
#endif
