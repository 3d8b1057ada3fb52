// SPDX-License-Identifier: MIT
//
// stream_alloc: what a stream's end tells the caching allocator (alloc.c),
// private to core/. Not part of the public API: a chapter frees a stream with
// ct_stream_free and never calls this.
#ifndef CTI_STREAM_ALLOC_H
#define CTI_STREAM_ALLOC_H

#include "alloc.h"

#ifdef __cplusplus
extern "C" {
#endif

// Called by ct_stream_free once s's work is done: every segment cut for s
// passes to `heir` (the device's default stream), so no segment keeps a
// pointer to a freed stream, and s's cached memory serves the default
// stream from then on.
void cti_alloc_stream_retire(const ct_stream *s, ct_stream *heir);

#ifdef __cplusplus
}
#endif
#endif
