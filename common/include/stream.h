// SPDX-License-Identifier: MIT
//
// stream: ordered queues of device work, and events to mark points in them.
//
// On CUDA a ct_stream wraps a cudaStream_t and a ct_event a cudaEvent_t. The
// CPU device has streams and events too, so that chapters time and order work
// the same way everywhere: CPU work runs when it is issued, so a CPU stream is
// always idle, and recording a CPU event stores the host clock's time.
//
// The CPU model and "not yet complete": since CPU work is done when issued, a
// CPU event is complete once recorded, so code that defers something until
// an event completes (the allocator's ct_record_stream) would never see a
// deferral on the CPU. ct_cpu_events_hold (a testing aid) changes that:
// while held, CPU events recorded are reported incomplete by ct_event_query
// until the hold is lifted, so tests on a machine without a GPU exercise the
// "still pending" paths. ct_event_synchronize on such an event returns at
// once (the host is the CPU's only worker; there is nothing to wait for).
//
// Each device has a default stream and a current stream per thread (the
// default until ct_set_stream); ops issue their work on the current stream.
#ifndef CT_STREAM_H
#define CT_STREAM_H

#include <stdbool.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_stream ct_stream;
typedef struct ct_event ct_event;

ct_stream *ct_default_stream(ct_device d); // NULL + error if d is unavailable
ct_stream *ct_current_stream(ct_device d); // this thread's current stream
int ct_set_stream(ct_stream *s);           // makes s current for its device
// A new stream; priority 0 is normal, lower is higher (-1, -2, ...), clamped
// into ct_stream_priority_range. Its work is ordered after nothing: order
// it against other streams with events (it does not wait for the default stream).
ct_stream *ct_stream_create(ct_device d, int priority);
int ct_stream_priority(const ct_stream *s); // torch.cuda.Stream.priority (after clamping)
// torch.cuda.Stream.priority_range(): (least, greatest) = (0, -3) on current
// GPUs (CUDA's own range cut to PyTorch's four levels); (0, 0) on the CPU.
int ct_stream_priority_range(ct_device d, int *least, int *greatest);
int ct_cuda_stream_priority_range(int *least, int *greatest); // the current CUDA device; CT_ERR_UNAVAILABLE without one
// Waits for the stream's queued work, then destroys it (not for default
// streams: ignored). The memory the allocator cut for it passes to the
// device's default stream, which the wait makes safe.
void ct_stream_free(ct_stream *s);
ct_device ct_stream_device(const ct_stream *s);
int ct_stream_synchronize(ct_stream *s);
bool ct_stream_query(ct_stream *s);        // true when all its work is done
int ct_stream_wait_event(ct_stream *s, ct_event *e); // s waits for e, without blocking the host
int ct_stream_wait_stream(ct_stream *s, ct_stream *other);
// The cudaStream_t behind a CUDA stream (NULL for the legacy default and on
// the CPU), for chapters that launch their own kernels.
void *ct_stream_handle(const ct_stream *s);

ct_event *ct_event_create(ct_device d, bool enable_timing);
void ct_event_free(ct_event *e);
int ct_event_record(ct_event *e, ct_stream *s); // s NULL = current stream
int ct_event_synchronize(ct_event *e);
bool ct_event_query(ct_event *e);
// Milliseconds from `start` to `end`, like torch.cuda.Event.elapsed_time;
// writes it to *ms. Both events need enable_timing and a record, else
// CT_ERR_VALUE in PyTorch's words ("Both events must be created with argument
// 'enable_timing=True'.", then "Both events must be recorded before
// calculating elapsed time."); events of two devices are CT_ERR_DEVICE. On
// CUDA it waits for both to complete (not a sync point: see sync_debug.h).
int ct_event_elapsed_time(ct_event *start, ct_event *end, float *ms);

// Testing aid (see the top): on = CPU events recorded from now on stay
// incomplete for ct_event_query; off = every CPU event recorded so far is
// complete. Not for chapters.
void ct_cpu_events_hold(bool on);

#ifdef __cplusplus
}
#endif
#endif
