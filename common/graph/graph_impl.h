// SPDX-License-Identifier: MIT
//
// graph_impl: what the recording table and the modules ask of a capture in
// progress (internal). Core asks nothing: the capture is an observer of it
// (core/observe.h) and tells the allocator its pool (core/alloc_capture.h).
// Each call is one thread-local load and a return when this thread captures
// nothing, so eager code pays nothing else for graphs.
#ifndef CT_GRAPH_IMPL_H
#define CT_GRAPH_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc.h"
#include "backend.h"
#include "error.h"
#include "graph.h"

#ifdef __cplusplus
extern "C" {
#endif

// A kernel call as the recording table hands it over: `args` holds the
// entry's arguments by value (size bytes), and call(be, args, s) runs the
// entry of backend `be` with them on stream s.
typedef int (*cti_graph_call)(const cti_backend *be, const void *args, ct_stream *s);
// Routes one kernel call issued on stream s during capture: on the capture
// stream it is recorded (CPU; CUDA's own capture records the launch, so it
// is called); on the device's default stream it is refused and the capture
// invalidated; on any other stream it runs now, outside the graph.
int cti_graph_issue(ct_stream *s, cti_graph_call call, const void *args, size_t size);
// Whether a kernel call on stream s is being recorded (a valid CPU capture on
// s): an entry with a host-side output (cross-entropy's bad row) then has
// nowhere to write it and must not keep the caller's pointer.
bool cti_graph_records(const ct_stream *s);
// The refusal of an entry that waits for its answer (any_nonfinite), named
// after the op being dispatched; CT_OK outside capture.
int cti_graph_refuse_wait(void);
// The backend the recording table stands in for (sum_squares_workspace and
// other entries that launch nothing call through it).
const cti_backend *cti_graph_real_backend(void);

// CT_OK, or, when this thread captures on device d, CT_ERR_CAPTURE:
// "OP: operation not permitted when stream is capturing", and the capture is
// invalidated. Every sync point that refuses during capture asks (the
// observer's sync_point hook, graph.c), and so does the recording table.
int cti_graph_forbid_sync(const char *op, ct_device d);
// Refuses an operation during capture on d with the given status and message
// (printf-style), invalidating the capture; CT_OK outside capture.
int cti_graph_refuse(ct_device d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

extern const cti_backend cti_graph_backend; // graph_backend.c

#ifdef __cplusplus
}
#endif
#endif
