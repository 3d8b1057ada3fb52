// SPDX-License-Identifier: MIT
//
// error: how the runtime says "no".
//
// Invariant: no ct_ call aborts on bad input. A call that fails returns its
// failure value (NULL for a tensor, a non-zero ct_status for an int) and
// leaves a message in a thread-local slot that names the operation and the
// values at fault, e.g.
//   "ct_add: expected all tensors to be on the same device, but found cuda:0 and cpu"
// The message stays until the next failure or ct_clear_error(). Success does
// not clear it: check the return value, then read the message.
#ifndef CT_ERROR_H
#define CT_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_status {
  CT_OK = 0,
  CT_ERR_VALUE,       // a bad argument (negative size, bad dim, bad string)
  CT_ERR_DEVICE,      // tensors on different devices, bad device index
  CT_ERR_DTYPE,       // dtype not supported by the op, or mismatched
  CT_ERR_SHAPE,       // shapes that do not broadcast or multiply
  CT_ERR_OOM,         // out of memory after freeing the cache and retrying
  CT_ERR_CUDA,        // a CUDA/cuBLAS call failed
  CT_ERR_UNAVAILABLE, // CUDA asked for where there is none
  CT_ERR_IO,          // files
  CT_ERR_SYNC,        // a synchronizing call refused by the sync debug mode "error" (sync_debug.h)
  CT_ERR_RACE,        // a stream-ordering race the sanitizer caught in its "error" mode (sanitizer.h)
  CT_ERR_CAPTURE,     // not permitted while a graph is being captured (graph.h)
} ct_status;

// Records a failure: formats the message (printf-style) and returns `status`,
// so a caller can write `return ct_fail(CT_ERR_VALUE, "ct_x: ...", ...);`.
ct_status ct_fail(ct_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *ct_last_error(void);    // "" when none was recorded
ct_status ct_last_status(void);     // CT_OK when none was recorded
const char *ct_status_name(ct_status s);
void ct_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
