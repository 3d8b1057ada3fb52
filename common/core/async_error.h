// SPDX-License-Identifier: MIT
//
// async_error: errors that a CUDA kernel finds, reported to the host later.
//
// A kernel cannot make the call that launched it fail: by the time it runs,
// that call has returned (the host only queued it). Waiting for every kernel
// that might find bad input would undo the queue: cross-entropy would stop
// the host once per training step. So, as PyTorch's device-side asserts do,
// such an error is reported at the next call that waits for the device
// anyway: ct_stream_synchronize, ct_event_synchronize, ct_cuda_synchronize,
// and copies to the host (ct_item, ct_copy_to_host, ct_to(..., cpu)), on
// whichever stream the kernel ran (one record per device).
//
// Invariant: each CUDA device has one record in device memory. A kernel that
// finds bad input claims it (the first claim wins, later ones are dropped)
// and writes what it found; a check copies it to the host (a few bytes, on a
// call that synchronizes anyway), and when it holds an error, clears it and
// fails with a message naming the op that queued the kernel, the values, and
// the call where it surfaced. The CPU has no record: its ops fail at once.
#ifndef CT_ASYNC_ERROR_H
#define CT_ASYNC_ERROR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// What a kernel found; `code` 0 means nothing.
enum {
  CT_ASYNC_NONE = 0,
  CT_ASYNC_TARGET_OUT_OF_BOUNDS = 1,    // ct_cross_entropy_loss: row, target, classes
  CT_ASYNC_INDEX_OUT_OF_RANGE = 2,      // Embedding: position, index, num_embeddings
  CT_ASYNC_LM_TARGET_OUT_OF_BOUNDS = 3, // ct_cross_entropy: row, target, classes
};

// The record kernels write (device memory). Fields after `claimed` are valid
// once `code` is non-zero; a kernel writes `code` last, after a fence.
typedef struct cti_async_record {
  unsigned long long claimed; // 0 free, 1 taken
  long long code;             // CT_ASYNC_*
  long long a, b, c;          // the values the code names (above)
} cti_async_record;

#ifdef CT_HAVE_CUDA
// The device's record (allocated and zeroed on first use), for a kernel's
// argument; NULL and an error if it cannot be had.
cti_async_record *cti_cuda_async_record(int device);
// Enters with `device` current, after the caller `op` (e.g. "ct_item") has
// waited for a stream or an event of it; copies the record on the device's
// own non-blocking check stream, so nothing else is waited for and a report
// is seen whichever stream ran the kernel that made it. Leaves with CT_OK if
// no kernel left an error, else with the error (ct_fail) and the record
// cleared. A device whose kernels never reported costs nothing.
int cti_cuda_async_check(int device, const char *op);
#endif

#ifdef __cplusplus
}
#endif
#endif
