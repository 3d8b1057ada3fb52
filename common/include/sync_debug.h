// SPDX-License-Identifier: MIT
//
// sync_debug: find the calls that make the host wait for a device, as
// torch.cuda.set_sync_debug_mode does.
//
// Invariant: every runtime call that makes the host wait for a device's
// stream *because the caller asked for values or bytes on the host* is a
// "sync point", and passes through one check before it does anything. The
// mode decides what the check does:
//   CT_SYNC_DEBUG_DEFAULT (0, "default")  nothing;
//   CT_SYNC_DEBUG_WARN    (1, "warn")     a warning naming the call (stderr,
//                                         or the hook below), and the call goes on;
//   CT_SYNC_DEBUG_ERROR   (2, "error")    the call fails with CT_ERR_SYNC before
//                                         it has done anything: no copy started,
//                                         no output written, the runtime usable.
// A sync point inside another reports once, under the outer call's name
// (ct_item copies to the host: "ct_item" is reported, not the copy).
//
// The sync points, the same list on every device:
//   ct_item, ct_copy_to_host, ct_from_host, ct_tensor_str / ct_print,
//   ct_any_nonfinite, ct_stream_synchronize, and on CUDA every blocking copy
//   between host and device memory (ct_to / ct_copy_ with non_blocking false,
//   or from pageable memory) and between two GPUs.
// Not reported, as in PyTorch: ct_event_synchronize, ct_event_elapsed_time,
// ct_cuda_synchronize (waits the caller wrote on purpose), the allocator's
// own waits (empty_cache), and the collectives of dist.h.
//
// The CPU model: a CPU "device" runs work when it is issued, so nothing is
// waited for; the same calls still report, so that a CPU run lists the sync
// points a GPU run of the same program would hit. (PyTorch reports only on
// CUDA tensors.) The one difference is inherent: ct_to(x, cpu) of a tensor
// already on the CPU copies nothing and reports nothing, where on a GPU it is
// a device->host copy.
//
// The mode is global (all threads), as PyTorch's is; the hook too.
#ifndef CT_SYNC_DEBUG_H
#define CT_SYNC_DEBUG_H

#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_sync_debug_mode {
  CT_SYNC_DEBUG_DEFAULT = 0,
  CT_SYNC_DEBUG_WARN = 1,
  CT_SYNC_DEBUG_ERROR = 2,
} ct_sync_debug_mode;

// torch.cuda.set_sync_debug_mode(debug_mode): 0, 1 or 2; CT_ERR_VALUE otherwise.
int ct_set_sync_debug_mode(int mode);
// The same from a string: "default", "warn", "error" (or "0", "1", "2").
int ct_set_sync_debug_mode_str(const char *mode);
int ct_get_sync_debug_mode(void); // torch.cuda.get_sync_debug_mode()
const char *ct_sync_debug_mode_name(int mode); // "default", "warn", "error"

// Called once per report (warn and error modes) with the call's name, the
// device the host would wait for and the mode, instead of the default
// warning on stderr. NULL restores the default.
typedef void (*ct_sync_debug_hook)(const char *op, ct_device device, int mode, void *ctx);
void ct_set_sync_debug_hook(ct_sync_debug_hook hook, void *ctx);
uint64_t ct_sync_debug_reports(void); // reports made so far, in both modes

#ifdef __cplusplus
}
#endif
#endif
