// SPDX-License-Identifier: MIT
//
// san_hooks: where the runtime tells the stream-ordering sanitizer
// (sanitizer.h) what it does. Every hook returns at once while the sanitizer
// is off.
//
// Contracts:
//  - cti_san_access(op, s, reads, nr, writes, nw) enters before `op` issues
//    work on stream s that reads the tensors reads[0..nr) and writes
//    writes[0..nw) (NULL entries are skipped). Leaves with CT_OK and the
//    accesses recorded, or, in error mode, with CT_ERR_RACE recorded and
//    nothing recorded: the op must then fail without issuing its work.
//  - cti_san_host_waits(s) after the host has waited for all of s's work
//    (a synchronize, a blocking copy, a query that answered "done").
//  - the event hooks take the event's own slot (`void **clock`), which
//    starts NULL and is freed by cti_san_event_free.
#ifndef CT_SAN_HOOKS_H
#define CT_SAN_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "stream.h"
#include "tensor_impl.h"

bool cti_san_on(void);

int cti_san_access(const char *op, ct_stream *s, const ct_tensor *const *reads, int nr,
                   const ct_tensor *const *writes, int nw);
// A new tensor's storage, allocated for stream s: its first write.
void cti_san_allocated(const ct_tensor *t, ct_stream *s);
// ct_record_stream(t, s): t's storage is also used on s (alloc.h).
void cti_san_record_stream(const ct_tensor *t, ct_stream *s);
// The storage is being freed: checks rule 2 (sanitizer.h), drops the record.
void cti_san_storage_free(cti_storage *st);

void cti_san_host_waits(ct_stream *s);
void cti_san_host_waits_device(ct_device d); // every stream of d (ct_cuda_synchronize)
void cti_san_wait_stream(ct_stream *s, ct_stream *other);
void cti_san_stream_destroyed(ct_stream *s);

void cti_san_event_record(void **clock, ct_stream *s);
void cti_san_wait_event(ct_stream *s, void *const *clock);
void cti_san_host_waits_event(void *const *clock);
void cti_san_event_free(void **clock);

// Graphs: a capture on stream s begins on this thread (returns the capture's
// id, 0 while the sanitizer is off) and ends; ops on s in between are the
// graph's, checked at each replay. cti_san_replay(id, s) before a replay on
// s: CT_OK, or in error mode CT_ERR_RACE recorded and the replay must not run.
uint32_t cti_san_capture_begin(const ct_stream *s);
void cti_san_capture_end(void);
int cti_san_replay(uint32_t graph, ct_stream *s);

#endif
