// SPDX-License-Identifier: MIT
//
// graph_impl: what the rest of the runtime asks of a capture in progress
// (internal). Each hook is one thread-local load and a return when this
// thread captures nothing, so eager code pays nothing else for graphs.
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

// Whether this thread is capturing a graph on device d.
bool cti_graph_capturing_on(ct_device d);

// The one place capture meets the dispatcher (ops.c's cti_backend_for): the
// device's own backend `be`, or, while this thread captures on d, the
// recording table cti_graph_backend, which routes each kernel call by its
// stream (graph_backend.c). `op` names the public op for messages.
const cti_backend *cti_graph_intercept(const char *op, ct_device d, const cti_backend *be);

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
// invalidated. Every call that waits for the device asks first.
int cti_graph_forbid_sync(const char *op, ct_device d);
// The same for a copy between devices (or host memory) of cti_memcpy: a
// blocking copy touching a capturing device is refused; a non-blocking one
// on CUDA is captured like a kernel; on the CPU every copy is refused (it
// would run at once, outside the graph).
int cti_graph_forbid_copy(ct_device dst, ct_device src, bool non_blocking);
// Refuses an operation during capture on d with the given status and message
// (printf-style), invalidating the capture; CT_OK outside capture.
int cti_graph_refuse(ct_device d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// alloc.c: the pool a block for `stream` on d comes from. Outside capture,
// or for another stream, *pool is left as asked. For the capture stream,
// NULL becomes the graph's pool, and any other pool is refused
// (CT_ERR_CAPTURE, capture invalidated).
int cti_graph_alloc_pool(ct_device d, const ct_stream *stream, ct_mempool **pool);

// Whether s is the default (legacy) stream of a device this thread captures
// on: the allocator then skips its poison fill there, which would be work
// on that stream (the op that asked for the block is refused when it runs).
bool cti_graph_legacy_stream(const ct_stream *s);

extern const cti_backend cti_graph_backend; // graph_backend.c

#ifdef __cplusplus
}
#endif
#endif
