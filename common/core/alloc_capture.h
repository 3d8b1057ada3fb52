// SPDX-License-Identifier: MIT
//
// alloc_capture: a graph capture tells the allocator which pool serves it
// (internal), as PyTorch's capture_begin calls the caching allocator's
// beginAllocateToPool: the allocator asks no one.
//
// Contract: between cti_alloc_capture_begin(d, stream, pool, refuse) and
// cti_alloc_capture_end() on the same thread (one capture per thread),
//  - a block for `stream` on d comes from `pool`: ct_block_alloc with pool
//    NULL takes it, and any other pool is refused through refuse(msg), which
//    records the error (and spoils the capture) and returns its status;
//  - the allocator makes no event query on d (not permitted during capture)
//    and destroys no released pool of d (giving memory back waits);
//  - no poison fill runs on d's default (legacy) stream, which would be work
//    on that stream (the op that asked for the block is refused when it
//    runs).
// Other threads and other streams allocate as before.
#ifndef CT_ALLOC_CAPTURE_H
#define CT_ALLOC_CAPTURE_H

#include "alloc.h"
#include "device.h"
#include "stream.h"

void cti_alloc_capture_begin(ct_device d, const ct_stream *stream, ct_mempool *pool, int (*refuse)(const char *msg));
void cti_alloc_capture_end(void);

#endif
