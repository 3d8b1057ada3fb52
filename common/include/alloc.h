// SPDX-License-Identifier: MIT
//
// alloc: the caching allocator, one per device (the CPU has one too), and a
// pinned-host pool.
//
// Why: cudaMalloc/cudaFree synchronize and cost far more than a kernel
// launch, so, like PyTorch, memory freed by a tensor is kept ("reserved") and
// handed to the next request of a fitting size without asking the driver.
//
// The rules (PyTorch's CUDACachingAllocator, simplified where noted):
//  - every request is rounded up to a multiple of 512 bytes; the rounded size
//    is what memory_allocated counts;
//  - requests of at most 1 MiB are carved from 2 MiB segments ("small pool");
//    larger ones from segments of 20 MiB when under 10 MiB, else rounded up to
//    a multiple of 2 MiB ("large pool");
//  - a free block that fits is split when the remainder is worth keeping
//    (>= 512 B in the small pool, > 1 MiB in the large); freed blocks merge
//    with free neighbours in their segment;
//  - a block is reused only by requests on the stream it was allocated on;
//  - a block also used on other streams (ct_block_record_stream, or
//    ct_record_stream on a tensor) is, when freed, reusable only after an
//    event recorded at free time on each of those streams has completed; the
//    allocator polls those events on later requests, and empty_cache (and the
//    retry after an out-of-memory) waits for them;
//  - memory_reserved counts whole segments held from the driver (or malloc);
//    empty_cache returns every segment with no live block in it;
//  - on failure (driver OOM, or the per-process fraction exceeded): free the
//    cache, retry once, then fail with CT_ERR_OOM and a message naming the
//    request and the numbers (allocated, reserved, free, total).
//
// Streams and ordering, the rule. A block is allocated *for a stream* (the
// request's, by default the current one), and everything the allocator does
// to it is queued on that stream: the poison fill (CT_POISON_ALLOC) is a
// memset on that stream, so it lands after the work that freed the memory
// there and before any op that writes the new tensor there. Work on another
// stream is not ordered by this. So a tensor made on stream A and read on
// stream B needs both of what PyTorch asks for:
//   1. B waits for A after the producing op (ct_stream_wait_stream(B, A) or
//      an event), or B could read the poison or half-written values;
//   2. ct_record_stream(t, B) before t is freed, or A may hand the memory to
//      its next request (and poison it) while B still reads it.
// Work issued while a block is live on its own stream needs neither. On the
// CPU every op runs when issued, so both hold by themselves; the CPU still
// records events for record_stream, and tests hold them pending
// (ct_cpu_events_hold in stream.h) to exercise the deferral.
//
// Pools: blocks come from a ct_mempool. Each device has a default pool; a
// private pool (for CUDA graph capture) keeps its segments apart.
#ifndef CT_ALLOC_H
#define CT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_stream ct_stream;
typedef struct ct_mempool ct_mempool;

// A live allocation. `ptr` is device memory for CUDA, host memory for CPU.
typedef struct ct_block ct_block;

// ---- statistics, as torch.cuda.memory_* ----------------------------------
size_t ct_memory_allocated(ct_device d);
size_t ct_memory_reserved(ct_device d);
size_t ct_max_memory_allocated(ct_device d);
size_t ct_max_memory_reserved(ct_device d);
void ct_reset_peak_memory_stats(ct_device d); // peaks := current values
int ct_empty_cache(ct_device d);              // frees unused cached segments
// A multi-line table like torch.cuda.memory_summary(); caller free()s it.
char *ct_memory_summary(ct_device d);
// Caps what this process may reserve on the device at fraction * total (CPU:
// physical RAM), like torch.cuda.set_per_process_memory_fraction. 0 < f <= 1.
int ct_set_per_process_memory_fraction(double fraction, ct_device d);
double ct_get_per_process_memory_fraction(ct_device d);
// Total bytes of the device's memory and how much the driver (or OS) says is
// free; for the CPU, physical RAM and MemAvailable.
int ct_device_memory_info(ct_device d, size_t *free_bytes, size_t *total_bytes);

// The torch.cuda names, for readers who know them (index = CUDA device).
size_t ct_cuda_memory_allocated(int index);
size_t ct_cuda_memory_reserved(int index);
size_t ct_cuda_max_memory_allocated(int index);
size_t ct_cuda_max_memory_reserved(int index);
void ct_cuda_reset_peak_memory_stats(int index);
int ct_cuda_empty_cache(void); // on the current device, as torch does

// Allocation counters kept beside the byte statistics.
typedef struct ct_memory_stats {
  size_t allocated_bytes, reserved_bytes;
  size_t peak_allocated_bytes, peak_reserved_bytes;
  size_t active_blocks;      // live allocations
  size_t segments;           // segments held
  uint64_t num_alloc_calls;  // ct_block_alloc calls that succeeded
  uint64_t num_device_allocs;// segments asked from the driver/malloc
  uint64_t num_device_frees; // segments given back
  uint64_t num_ooms;         // requests that failed with CT_ERR_OOM
  uint64_t num_cache_flushes;// times the cache was emptied to retry
} ct_memory_stats;
int ct_memory_stats_get(ct_device d, ct_memory_stats *out);

// ---- blocks (used by tensor storage; chapters may call them too) ---------
// Enters with a byte count (0 is allowed and gives a 512-byte block) and the
// stream the memory will be used on (NULL = the device's current stream).
// Leaves with a block from `pool` (NULL = the device's default pool), or NULL
// and CT_ERR_OOM.
ct_block *ct_block_alloc(ct_device d, size_t nbytes, ct_stream *stream, ct_mempool *pool);
void ct_block_free(ct_block *b); // back to its pool's cache
void *ct_block_ptr(const ct_block *b);
// Marks b as used on stream s too (torch's Tensor.record_stream): when b is
// freed, an event is recorded on s and b is reused only after it completes.
// s must be on b's device; b's own stream is ignored. CT_ERR_VALUE once b is
// freed.
int ct_block_record_stream(ct_block *b, ct_stream *s);
size_t ct_block_size(const ct_block *b); // the rounded size

// ---- private pools (graph capture) ----------------------------------------
ct_mempool *ct_mempool_create(ct_device d);
// Frees the pool's cached segments; fails if blocks are still live.
int ct_mempool_free(ct_mempool *p);
// Gives up the pool: freed now when no block is live, else as soon as
// its last live block is freed (graphs release theirs this way, since the
// tensors a captured step made may outlive the graph).
int ct_mempool_release(ct_mempool *p);

// ---- testing aid ---------------------------------------------------------------
// When on, every block handed out is first filled with 0xFF bytes (NaN for
// floats, -1 for integers, on every device), so that an op that leaves part
// of its output unwritten fails its test. Tests turn it on; it is off by
// default, and the environment variable CT_POISON_ALLOC=1 turns it on too.
void ct_alloc_set_poison(bool on);
bool ct_alloc_poison(void);

// ---- pinned host memory ------------------------------------------------------
// Page-locked host memory from a cache keyed by size (rounded up to a power
// of two, as PyTorch's host allocator does). CT_ERR_UNAVAILABLE without CUDA.
// A block is reused only when no copy recorded on it is in flight.
void *ct_pinned_alloc(size_t nbytes);
void ct_pinned_free(void *p);
bool ct_is_pinned_ptr(const void *p);
bool ct_pinned_contains(const void *p); // p anywhere inside a live pinned block
// Records an event on s now, after the asynchronous copy just issued there
// that reads or writes the live pinned block holding p, anywhere in it (PyTorch's
// CachingHostAllocator record_event). When the block is freed it is reused
// only after every such event has completed. The non-blocking copies of
// transfer.c call it; a chapter that issues its own copies may too.
int ct_pinned_record_stream(void *p, ct_stream *s);
size_t ct_pinned_memory_reserved(void);
int ct_pinned_empty_cache(void);

#ifdef __cplusplus
}
#endif
#endif
