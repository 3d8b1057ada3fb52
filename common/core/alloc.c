// SPDX-License-Identifier: MIT
//
// alloc: a caching allocator per device, after PyTorch's
// CUDACachingAllocator, and a pinned-host pool.
//
// The picture. Each device (the CPU is slot 0, cuda:i is slot 1 + i) keeps
// segments: big pieces of memory asked from the driver (cudaMalloc) or from
// the C library (aligned_alloc). A segment is cut into blocks that tile it
// with no gap, kept in address order in a doubly linked list. A block is
// either live (handed out by ct_block_alloc) or free (on its pool's free
// list, waiting for the next request that fits). The rules are those of
// alloc.h: 512-byte rounding, a small pool (requests <= 1 MiB, 2 MiB
// segments) and a large pool (20 MiB segments below 10 MiB, else the request
// rounded up to 2 MiB), best fit, splitting, coalescing.
//
// Invariants, true whenever a device's mutex is free:
//  - the blocks of a segment tile it: first->ptr == base, b->next->ptr ==
//    b->ptr + b->size, and the sizes add up to the segment's size;
//  - no two free blocks are neighbours (a freed block merges with free
//    neighbours at once), so a segment with no live block is one free block,
//    which is what empty_cache looks for;
//  - a block is on its pool's free list exactly when it is not live (a
//    freed block still waiting for other streams, "pending", counts as live);
//  - memory_allocated is the sum of the rounded request sizes of the live
//    blocks that are not pending (a block handed out whole, because its remainder was too small to
//    split off, still counts its rounded request, as alloc.h says; PyTorch
//    would count the whole block); memory_reserved is the sum of the sizes of
//    the segments held.
//
// Streams. A segment belongs to the stream it was first cut for, and its free
// blocks serve only requests for that same stream: work queued on another
// stream may still be using memory that this stream's program order says is
// free. A block used on other streams too (ct_block_record_stream) is, when
// freed, not put on the free list: an event is recorded on each of those
// streams and the block waits on its device's `pending` list, still counted
// live by its segment and pool (so it neither merges nor is released), until
// every event has completed. Each ct_block_alloc first polls the pending list
// (ct_event_query); empty_cache, the OOM flush and ct_mempool_free wait
// for the events instead. A destroyed stream's segments pass to the device's
// default stream (cti_alloc_stream_retire; the stream is idle by then), and
// the stream leaves every block's `uses`, so no stream pointer is left
// dangling.
//
// Pools. The default pool of a device serves every request with pool NULL. A
// private pool (ct_mempool_create, for CUDA graph capture) keeps its own
// segments: its blocks never serve default-pool requests and the other way
// round. empty_cache and the OOM flush release only the default pool's unused
// segments; a private pool keeps its memory until ct_mempool_free, since a
// captured graph replays into those addresses.
//
// Out of memory. A new segment is refused when the driver (or the C library)
// has no memory, when it is larger than the CPU's physical RAM (a CPU
// segment), or when the per-process fraction would be exceeded. Then the
// default pool's unused segments are released (num_cache_flushes counts
// this), the request is tried once more, and if that fails too the call fails
// with CT_ERR_OOM and a message carrying the facts of PyTorch 2.x's. "Tried to allocate" names
// the segment size that was asked for, as PyTorch's message does (it equals
// the rounded request for requests of 10 MiB and more).
//
// Threads: every device's state is behind its own mutex; DataParallel's
// worker threads allocate on their devices at the same time.
#define _GNU_SOURCE // sysconf(_SC_PHYS_PAGES), pthreads under -std=c11

#include "alloc.h"
#include "stream_alloc.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "error.h"
#include "alloc_capture.h"
#include "observe.h"
#include "stream.h"
#include "strbuf.h"
#include "sync_point.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

// ---- the rules' constants (PyTorch's names in comments) --------------------
#define KIB ((size_t)1024)
#define MIB ((size_t)1024 * 1024)
#define GIB ((size_t)1024 * 1024 * 1024)
#define ROUND_BYTES ((size_t)512)  // kMinBlockSize
#define SMALL_SIZE (1 * MIB)       // kSmallSize: largest small-pool request
#define SMALL_BUFFER (2 * MIB)     // kSmallBuffer: small-pool segment
#define LARGE_BUFFER (20 * MIB)    // kLargeBuffer: segment for 1..10 MiB
#define MIN_LARGE_ALLOC (10 * MIB) // kMinLargeAlloc
#define ROUND_LARGE (2 * MIB)      // kRoundLarge
// Requests beyond this cannot be rounded without overflow: they fail as OOM.
#define MAX_REQUEST ((size_t)1 << 62)

#define NSLOTS (1 + CT_MAX_CUDA_DEVICES)
#define CPU_ALIGN ((size_t)4096)

typedef struct alloc_segment alloc_segment;

struct ct_block {
  int slot;
  char *ptr;
  size_t size;    // extent inside the segment
  size_t rounded; // the rounded request while live; 0 while free
  bool live;
  alloc_segment *seg;
  ct_block *prev, *next;           // neighbours in the segment, by address
  ct_block *free_prev, *free_next; // on the pool's free list while free
  ct_stream **uses;                // other streams that used it (record_stream)
  int nuses, cap_uses;
  ct_event **events;               // while pending: one per stream in uses
  bool pending;                    // freed, waiting for its events
  ct_block *pending_next;          // the device's pending list
};

struct alloc_segment {
  char *base;
  size_t size;
  bool small;       // small pool (2 MiB) or large pool
  ct_stream *stream;
  ct_mempool *pool;
  size_t live;      // live blocks in this segment
  ct_block *first;  // lowest address
  alloc_segment *prev, *next; // the pool's segments
};

struct ct_mempool {
  int slot;
  bool is_private;
  size_t live;               // live blocks from this pool
  alloc_segment *segments;
  ct_block *free_list[2];    // [1] small pool, [0] large pool
  ct_mempool *next_private;  // the device's private pools
  bool orphaned;             // released (ct_mempool_release): destroyed with its last live block
};

typedef struct alloc_stats {
  size_t allocated, peak_allocated;
  uint64_t allocated_total, freed_total; // bytes over the process's life
  size_t reserved, peak_reserved;
  uint64_t reserved_total, released_total;
  size_t active, peak_active;
  uint64_t num_alloc_calls, num_frees;
  size_t segments, peak_segments;
  uint64_t num_device_allocs, num_device_frees;
  uint64_t num_ooms, num_cache_flushes;
} alloc_stats;

typedef struct dev_state {
  pthread_mutex_t mu;
  ct_mempool pool;        // the default pool
  ct_mempool *privates;
  ct_block *pending;      // freed blocks waiting for events on other streams
  alloc_stats st;
  double fraction;        // 1.0 until set
  bool fraction_set;
  size_t fraction_limit;  // fraction * total, when set
} dev_state;

static dev_state states[NSLOTS];
static pthread_once_t states_once = PTHREAD_ONCE_INIT;

static void states_init(void) {
  for (int i = 0; i < NSLOTS; ++i) {
    pthread_mutex_init(&states[i].mu, NULL);
    states[i].pool.slot = i;
    states[i].fraction = 1.0;
  }
}

static const char *slot_str(int slot, char *buf) {
  if (slot == 0)
    snprintf(buf, CT_DEVICE_STR_MAX, "cpu");
  else
    snprintf(buf, CT_DEVICE_STR_MAX, "cuda:%u", (unsigned)(unsigned char)(slot - 1)); // slot < NSLOTS
  return buf;
}

// The slot of d if it is a device this process can use, else -1. With `op`
// non-NULL a failure is recorded under that name.
static int slot_of(ct_device d, const char *op) {
  pthread_once(&states_once, states_init);
  if (d.type == CT_CPU) return 0;
  if (d.type != CT_CUDA) {
    if (op) ct_fail(CT_ERR_DEVICE, "%s: unknown device type %d", op, (int)d.type);
    return -1;
  }
#ifdef CT_HAVE_CUDA
  if (d.index < 0 || d.index >= CT_MAX_CUDA_DEVICES) {
    if (op) ct_fail(CT_ERR_DEVICE, "%s: invalid CUDA device index %d", op, d.index);
    return -1;
  }
  int n = ct_cuda_device_count();
  if (n <= 0) {
    if (op)
      ct_fail(CT_ERR_UNAVAILABLE, "%s: cuda:%d requested but CUDA is unavailable: %s", op,
              d.index, ct_cuda_unavailable_reason());
    return -1;
  }
  if (d.index >= n) {
    if (op)
      ct_fail(CT_ERR_DEVICE, "%s: cuda:%d requested but there %s only %d CUDA device%s", op,
              d.index, n == 1 ? "is" : "are", n, n == 1 ? "" : "s");
    return -1;
  }
  return 1 + d.index;
#else
  if (op)
    ct_fail(CT_ERR_UNAVAILABLE, "%s: cuda:%d requested but this build has no CUDA", op,
            d.index);
  return -1;
#endif
}

// ---- sizes as text ------------------------------------------------------------
// "512 B", "3.81 MiB", "2.00 GiB": two decimals from KiB up, like PyTorch's
// format_size.
static const char *fmt_size(uint64_t n, char *buf, size_t len) {
  if (n < KIB)
    snprintf(buf, len, "%llu B", (unsigned long long)n);
  else if (n < MIB)
    snprintf(buf, len, "%.2f KiB", (double)n / (double)KIB);
  else if (n < GIB)
    snprintf(buf, len, "%.2f MiB", (double)n / (double)MIB);
  else
    snprintf(buf, len, "%.2f GiB", (double)n / (double)GIB);
  return buf;
}

// ---- poison ---------------------------------------------------------------------
static atomic_int poison_flag;
static pthread_once_t poison_once = PTHREAD_ONCE_INIT;

static void poison_init(void) {
  const char *e = getenv("CT_POISON_ALLOC");
  atomic_store(&poison_flag, (e && e[0] && strcmp(e, "0") != 0) ? 1 : 0);
}

void ct_alloc_set_poison(bool on) {
  pthread_once(&poison_once, poison_init); // so the env read cannot undo this later
  atomic_store(&poison_flag, on ? 1 : 0);
}

bool ct_alloc_poison(void) {
  pthread_once(&poison_once, poison_init);
  return atomic_load(&poison_flag) != 0;
}

// ---- CUDA helpers ---------------------------------------------------------------
#ifdef CT_HAVE_CUDA
// Makes cuda:index current; *prev receives the device to restore.
static int cuda_enter(int index, int *prev) {
  CT_CUDA_CHECK(cudaGetDevice(prev));
  if (*prev != index) CT_CUDA_CHECK(cudaSetDevice(index));
  return CT_OK;
}

static int cuda_leave(int index, int prev) {
  if (prev != index) CT_CUDA_CHECK(cudaSetDevice(prev));
  return CT_OK;
}

static int cuda_sync(int index) {
  int prev, rc = cuda_enter(index, &prev);
  if (rc) return rc;
  cudaError_t e = cudaDeviceSynchronize();
  cuda_leave(index, prev);
  if (e != cudaSuccess)
    return ct_cuda_fail((int)e, "cudaDeviceSynchronize()", __FILE__, __LINE__);
  return CT_OK;
}
#endif

// ---- memory info ------------------------------------------------------------------
static size_t cpu_total_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return (pages > 0 && psz > 0) ? (size_t)pages * (size_t)psz : 0;
}

static size_t cpu_free_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        fclose(f);
        return (size_t)kb * KIB;
      }
    }
    fclose(f);
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  return (pages > 0 && psz > 0) ? (size_t)pages * (size_t)psz : 0;
}

// ---- raw memory -----------------------------------------------------------------
// Enters with a slot and a size (a multiple of 2 MiB or of 512 B); leaves with
// *out set and CT_OK, or CT_ERR_OOM with no message recorded (the caller
// writes it), or another error with its message recorded.
static int raw_alloc(int slot, size_t size, void **out) {
  *out = NULL;
  if (slot == 0) {
    // Like a GPU, the CPU refuses a segment larger than its memory, whatever
    // the kernel's overcommit policy would promise.
    size_t total = cpu_total_bytes();
    if (total && size > total) return CT_ERR_OOM;
    size_t sz = (size + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
    void *p = aligned_alloc(CPU_ALIGN, sz);
    if (!p) return CT_ERR_OOM;
    *out = p;
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  int prev, rc = cuda_enter(slot - 1, &prev);
  if (rc) return rc;
  void *p = NULL;
  // A segment may be asked for while this thread captures a graph (for the
  // graph's pool): cudaMalloc is then allowed only in relaxed capture mode,
  // as PyTorch's allocator sets it around its own cudaMalloc.
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
  if (e == cudaSuccess) {
    e = cudaMalloc(&p, size);
    cudaError_t e2 = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e == cudaSuccess && e2 != cudaSuccess) {
      (void)cudaFree(p);
      cuda_leave(slot - 1, prev);
      return ct_cuda_fail((int)e2, "cudaThreadExchangeStreamCaptureMode(&mode)", __FILE__, __LINE__);
    }
  } else {
    cuda_leave(slot - 1, prev);
    return ct_cuda_fail((int)e, "cudaThreadExchangeStreamCaptureMode(&mode)", __FILE__, __LINE__);
  }
  cuda_leave(slot - 1, prev);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); // clear the sticky-free error so later calls see success
    return CT_ERR_OOM;
  }
  if (e != cudaSuccess) return ct_cuda_fail((int)e, "cudaMalloc(&p, size)", __FILE__, __LINE__);
  *out = p;
  return CT_OK;
#else
  return ct_fail(CT_ERR_UNAVAILABLE, "ct_block_alloc: no CUDA in this build");
#endif
}

static int raw_free(int slot, void *p) {
  if (slot == 0) {
    free(p);
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  int prev, rc = cuda_enter(slot - 1, &prev);
  if (rc) return rc;
  cudaError_t e = cudaFree(p);
  cuda_leave(slot - 1, prev);
  if (e != cudaSuccess) return ct_cuda_fail((int)e, "cudaFree(p)", __FILE__, __LINE__);
#endif
  return CT_OK;
}

static int slot_memory_info(int slot, size_t *free_b, size_t *total_b) {
  if (slot == 0) {
    *total_b = cpu_total_bytes();
    *free_b = cpu_free_bytes();
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  int prev, rc = cuda_enter(slot - 1, &prev);
  if (rc) return rc;
  size_t f = 0, t = 0;
  cudaError_t e = cudaMemGetInfo(&f, &t);
  cuda_leave(slot - 1, prev);
  if (e != cudaSuccess) return ct_cuda_fail((int)e, "cudaMemGetInfo(&f, &t)", __FILE__, __LINE__);
  *free_b = f;
  *total_b = t;
  return CT_OK;
#else
  return ct_fail(CT_ERR_UNAVAILABLE, "ct_device_memory_info: no CUDA in this build");
#endif
}

int ct_device_memory_info(ct_device d, size_t *free_bytes, size_t *total_bytes) {
  int slot = slot_of(d, "ct_device_memory_info");
  if (slot < 0) return ct_last_status();
  size_t f = 0, t = 0;
  int rc = slot_memory_info(slot, &f, &t);
  if (rc) return rc;
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return CT_OK;
}

// ---- the free lists ---------------------------------------------------------------
static ct_block **free_head(ct_mempool *p, bool small) { return &p->free_list[small ? 1 : 0]; }

static void free_list_insert(ct_block *b) {
  ct_block **head = free_head(b->seg->pool, b->seg->small);
  b->free_prev = NULL;
  b->free_next = *head;
  if (*head) (*head)->free_prev = b;
  *head = b;
}

static void free_list_remove(ct_block *b) {
  ct_block **head = free_head(b->seg->pool, b->seg->small);
  if (b->free_prev)
    b->free_prev->free_next = b->free_next;
  else
    *head = b->free_next;
  if (b->free_next) b->free_next->free_prev = b->free_prev;
  b->free_prev = b->free_next = NULL;
}

// region: best_fit
// Best fit: the smallest free block of the pool that holds `size` bytes and
// belongs to `stream`; ties go to the lower address (PyTorch orders its free
// set by stream, size, address).
static ct_block *best_fit(ct_mempool *p, bool small, ct_stream *stream, size_t size) {
  ct_block *best = NULL;
  for (ct_block *b = *free_head(p, small); b; b = b->free_next) {
    if (b->seg->stream != stream || b->size < size) continue;
    if (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr))
      best = b;
  }
  return best;
}
// endregion

// ---- segments -----------------------------------------------------------------------
static void stats_segment_added(alloc_stats *s, size_t size) {
  s->reserved += size;
  s->reserved_total += size;
  if (s->reserved > s->peak_reserved) s->peak_reserved = s->reserved;
  s->segments++;
  if (s->segments > s->peak_segments) s->peak_segments = s->segments;
  s->num_device_allocs++;
}

// Enters with the device's mutex held. Leaves with a new segment in pool `p`
// holding one free block (on the free list), or an error: CT_ERR_OOM (no
// message yet) when the fraction or the driver refuses.
static int segment_new(dev_state *ds, ct_mempool *p, bool small, ct_stream *stream,
                       size_t size) {
  if (ds->fraction_set && ds->st.reserved + size > ds->fraction_limit) return CT_ERR_OOM;
  alloc_segment *seg = calloc(1, sizeof *seg);
  ct_block *b = calloc(1, sizeof *b);
  if (!seg || !b) {
    free(seg);
    free(b);
    return CT_ERR_OOM;
  }
  void *mem = NULL;
  int rc = raw_alloc(p->slot, size, &mem);
  if (rc) {
    free(seg);
    free(b);
    return rc;
  }
  seg->base = mem;
  seg->size = size;
  seg->small = small;
  seg->stream = stream;
  seg->pool = p;
  seg->first = b;
  seg->next = p->segments;
  if (p->segments) p->segments->prev = seg;
  p->segments = seg;
  b->slot = p->slot;
  b->ptr = mem;
  b->size = size;
  b->seg = seg;
  free_list_insert(b);
  stats_segment_added(&ds->st, size);
  return CT_OK;
}

// Releases every segment of pool `p` with no live block. Enters with the
// device's mutex held. On CUDA the device is synchronized first, as PyTorch
// does, so no queued kernel still reads the memory. *released (may be NULL)
// receives the bytes given back.
static int pool_release_free(dev_state *ds, ct_mempool *p, size_t *released) {
  if (released) *released = 0;
  bool any = false;
  for (alloc_segment *s = p->segments; s; s = s->next)
    if (s->live == 0) any = true;
  if (!any) return CT_OK;
#ifdef CT_HAVE_CUDA
  if (p->slot > 0) {
    int rc = cuda_sync(p->slot - 1);
    if (rc) return rc;
  }
#endif
  int status = CT_OK;
  alloc_segment *s = p->segments;
  while (s) {
    alloc_segment *next = s->next;
    if (s->live == 0) {
      // No live block: by the coalescing invariant, one free block.
      ct_block *b = s->first;
      int rc = raw_free(p->slot, s->base);
      if (rc) {
        status = rc; // keep the segment: its memory is still held
        s = next;
        continue;
      }
      free_list_remove(b);
      free(b);
      if (s->prev)
        s->prev->next = s->next;
      else
        p->segments = s->next;
      if (s->next) s->next->prev = s->prev;
      ds->st.reserved -= s->size;
      ds->st.released_total += s->size;
      ds->st.segments--;
      ds->st.num_device_frees++;
      if (released) *released += s->size;
      free(s);
    }
    s = next;
  }
  return status;
}

// ---- graph capture (alloc_capture.h) ------------------------------------------------------
// This thread's capture, as the capture told it: the device, the capture
// stream, the graph's pool and how to refuse; `on` false outside capture.
static _Thread_local struct {
  bool on;
  ct_device device;
  const ct_stream *stream;
  ct_mempool *pool;
  int (*refuse)(const char *msg);
} capture;

void cti_alloc_capture_begin(ct_device d, const ct_stream *stream, ct_mempool *pool, int (*refuse)(const char *msg)) {
  capture.device = d;
  capture.stream = stream;
  capture.pool = pool;
  capture.refuse = refuse;
  capture.on = true;
}

void cti_alloc_capture_end(void) { capture.on = false; }

static bool capturing_on(ct_device d) { return capture.on && ct_device_eq(capture.device, d); }

// region: capture_pool
// The pool a block for `stream` on d comes from. Outside capture, or for
// another stream, *pool is left as asked. For the capture stream, NULL
// becomes the graph's pool, and any other pool is refused (the capture is
// spoilt).
static int capture_pool(ct_device d, const ct_stream *stream, ct_mempool **pool) {
  if (!capturing_on(d) || stream != capture.stream) return CT_OK;
  if (!*pool) *pool = capture.pool;
  if (*pool == capture.pool) return CT_OK;
  return capture.refuse("ct_block_alloc: operation not permitted when stream is capturing: a block for "
                        "the capturing stream must come from the graph's private pool (pass pool NULL)");
}
// endregion

// Whether s is the default (legacy) stream of the device this thread captures on.
static bool capture_legacy_stream(const ct_stream *s) {
  return capture.on && s && ct_device_eq(capture.device, ct_stream_device(s)) &&
         s == ct_default_stream(capture.device);
}

// ---- blocks ---------------------------------------------------------------------------
static size_t round_request(size_t n) {
  if (n == 0) n = 1;
  return (n + ROUND_BYTES - 1) / ROUND_BYTES * ROUND_BYTES;
}

static size_t segment_size_for(size_t rounded) {
  if (rounded <= SMALL_SIZE) return SMALL_BUFFER;
  if (rounded < MIN_LARGE_ALLOC) return LARGE_BUFFER;
  return (rounded + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

// Records the OOM failure. Enters with the mutex held. The message carries
// the facts of PyTorch 2.x's, in its order: the request; the device's total
// and free memory; the fraction's limit ("allowed"); what live tensors hold
// and what the cache holds beyond them. PyTorch's closing hint names
// expandable_segments; ct has none, and by now it has already released every
// wholly free segment, so what is reserved but unallocated sits in segments
// that a live tensor splits: the hint says so.
static void fail_oom(dev_state *ds, int slot, size_t asked) {
  char a[32], tot[32], al[32], un[32], fr[32], lim[32];
  size_t free_b = 0, total_b = 0;
  if (slot_memory_info(slot, &free_b, &total_b) != CT_OK) free_b = total_b = 0;
  char allowed[48] = "";
  if (ds->fraction_set)
    snprintf(allowed, sizeof allowed, "%s allowed; ", fmt_size(ds->fraction_limit, lim, sizeof lim));
  char where[32];
  if (slot == 0)
    snprintf(where, sizeof where, "The CPU");
  else
    snprintf(where, sizeof where, "GPU %d", slot - 1);
  ct_fail(CT_ERR_OOM,
          "ct_block_alloc: %s out of memory. Tried to allocate %s. %s has a total capacity of %s of "
          "which %s is free. %sOf the allocated memory %s is allocated by ct, and %s is reserved by ct "
          "but unallocated. ct has no expandable segments and has already released its wholly free "
          "segments: if reserved but unallocated memory is large, it is split by live tensors; free "
          "those, or allocate the largest tensors first, to avoid fragmentation.",
          slot == 0 ? "CPU" : "CUDA", fmt_size(asked, a, sizeof a), where,
          fmt_size(total_b, tot, sizeof tot), fmt_size(free_b, fr, sizeof fr), allowed,
          fmt_size(ds->st.allocated, al, sizeof al),
          fmt_size(ds->st.reserved - ds->st.allocated, un, sizeof un));
}

// Takes s out of b->uses (it is in at most once).
static void block_forget_stream(ct_block *b, const ct_stream *s) {
  for (int i = 0; i < b->nuses; ++i)
    if (b->uses[i] == s) {
      b->uses[i] = b->uses[--b->nuses];
      return;
    }
}

void cti_alloc_stream_retire(const ct_stream *s, ct_stream *heir) {
  if (!s) return;
  const int slot = slot_of(ct_stream_device(s), NULL);
  if (slot < 0) return;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  for (ct_mempool *p = &ds->pool; p; p = p == &ds->pool ? ds->privates : p->next_private)
    for (alloc_segment *seg = p->segments; seg; seg = seg->next) {
      if (seg->stream == s) seg->stream = heir;
      for (ct_block *b = seg->first; b; b = b->next) // s's work is done: nothing to wait for
        if (!b->pending) block_forget_stream(b, s);
    }
  pthread_mutex_unlock(&ds->mu);
}

static int poison_block(ct_block *b) {
  if (b->slot == 0) {
    memset(b->ptr, 0xFF, b->rounded);
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  int prev, rc = cuda_enter(b->slot - 1, &prev);
  if (rc) return rc;
  cudaStream_t cs = b->seg->stream ? (cudaStream_t)ct_stream_handle(b->seg->stream) : 0;
  cudaError_t e = cudaMemsetAsync(b->ptr, 0xFF, b->rounded, cs);
  cuda_leave(b->slot - 1, prev);
  if (e != cudaSuccess)
    return ct_cuda_fail((int)e, "cudaMemsetAsync(b->ptr, 0xFF, b->rounded, cs)", __FILE__,
                        __LINE__);
#endif
  return CT_OK;
}

static void process_events(dev_state *ds, bool wait);

ct_block *ct_block_alloc(ct_device d, size_t nbytes, ct_stream *stream, ct_mempool *pool) {
  int slot = slot_of(d, "ct_block_alloc");
  if (slot < 0) return NULL;
  dev_state *ds = &states[slot];
  if (pool && pool->slot != slot) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    ct_fail(CT_ERR_DEVICE, "ct_block_alloc: pool belongs to %s, but the request is for %s",
            slot_str(pool->slot, a), slot_str(slot, b));
    return NULL;
  }
  if (!stream) stream = ct_current_stream(d);
  if (stream && slot_of(ct_stream_device(stream), NULL) != slot) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    int ss = slot_of(ct_stream_device(stream), NULL);
    ct_fail(CT_ERR_DEVICE, "ct_block_alloc: stream belongs to %s, but the request is for %s",
            ss < 0 ? "an unavailable device" : slot_str(ss, a), slot_str(slot, b));
    return NULL;
  }
  // During a graph capture a block for the capture stream comes from the graph's pool.
  if (capture_pool(d, stream, &pool) != CT_OK) return NULL;
  ct_mempool *p = pool ? pool : &ds->pool;

  pthread_mutex_lock(&ds->mu);
  if (nbytes > MAX_REQUEST) {
    ds->st.num_ooms++;
    fail_oom(ds, slot, nbytes);
    pthread_mutex_unlock(&ds->mu);
    return NULL;
  }
  // Blocks whose other-stream work has finished; not while this thread
  // captures on the device (an event query there is not permitted, PyTorch
  // skips it too).
  if (!capturing_on(d)) process_events(ds, false);
  // region: cache
  size_t rounded = round_request(nbytes);
  bool small = rounded <= SMALL_SIZE;
  ct_block *b = best_fit(p, small, stream, rounded);
  if (!b) {
    size_t seg_size = segment_size_for(rounded);
    int rc = segment_new(ds, p, small, stream, seg_size);
    if (rc == CT_ERR_OOM) {
      // Free the cache and retry once (PyTorch: release_cached_blocks).
      ds->st.num_cache_flushes++;
      process_events(ds, true);
      int frc = pool_release_free(ds, &ds->pool, NULL);
      rc = frc ? frc : segment_new(ds, p, small, stream, seg_size);
      if (rc == CT_ERR_OOM) {
        ds->st.num_ooms++;
        fail_oom(ds, slot, seg_size);
      }
    }
    if (rc) {
      pthread_mutex_unlock(&ds->mu);
      return NULL;
    }
    b = best_fit(p, small, stream, rounded); // the new segment's block
  }
  // endregion
  // region: split
  free_list_remove(b);
  size_t remainder = b->size - rounded;
  if (small ? remainder >= ROUND_BYTES : remainder > SMALL_SIZE) {
    ct_block *r = calloc(1, sizeof *r);
    if (r) { // without it the block is handed out whole, which is still correct
      r->slot = slot;
      r->ptr = b->ptr + rounded;
      r->size = remainder;
      r->seg = b->seg;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = rounded;
      free_list_insert(r);
    }
  }
  // endregion
  b->live = true;
  b->rounded = rounded;
  b->seg->live++;
  p->live++;
  alloc_stats *s = &ds->st;
  s->allocated += rounded;
  s->allocated_total += rounded;
  if (s->allocated > s->peak_allocated) s->peak_allocated = s->allocated;
  s->active++;
  if (s->active > s->peak_active) s->peak_active = s->active;
  s->num_alloc_calls++;
  if (cti_observed()) cti_observe_memory(d, b->ptr, (int64_t)rounded, s->allocated, s->reserved);
  pthread_mutex_unlock(&ds->mu);

  if (ct_alloc_poison() && !capture_legacy_stream(stream) && poison_block(b) != CT_OK) {
    ct_status st = ct_last_status();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_block_free(b);
    ct_fail(st, "%s", msg);
    return NULL;
  }
  return b;
}

// Puts a block whose life is over back on its pool's free list, merged with
// free neighbours. Enters with the device's mutex held and b live (its
// statistics already taken off); leaves with b possibly freed (merged).
static void block_release(ct_block *b) {
  alloc_segment *seg = b->seg;
  seg->live--;
  seg->pool->live--;
  b->live = false;
  b->pending = false;
  b->rounded = 0;
  free(b->uses);
  free(b->events);
  b->uses = NULL;
  b->events = NULL;
  b->nuses = b->cap_uses = 0;
  // Coalesce with free neighbours, so that no two free blocks touch.
  if (b->prev && !b->prev->live) {
    ct_block *q = b->prev;
    free_list_remove(q);
    q->size += b->size;
    q->next = b->next;
    if (b->next) b->next->prev = q;
    free(b);
    b = q;
  }
  if (b->next && !b->next->live) {
    ct_block *n = b->next;
    free_list_remove(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
  }
  free_list_insert(b);
}

// Wait for event e / stream s by polling. ct_event_synchronize is not used inside the
// allocator: it would also take a kernel's deferred error (async_error.h)
// off its record, and the allocator has no caller to report it to.
static void event_wait(ct_event *e) {
  while (!ct_event_query(e)) sched_yield();
}

static void stream_wait(ct_stream *s) {
  while (!ct_stream_query(s)) sched_yield();
}

// Records an event on each stream of b->uses, so that b can wait for them.
// Enters with the mutex held. An event that cannot be made or recorded is
// replaced by waiting for its stream now (then nothing is left to wait for).
static void block_insert_events(ct_block *b) {
  b->events = calloc((size_t)b->nuses, sizeof *b->events);
  for (int i = 0; i < b->nuses; ++i) {
    ct_event *e = b->events ? ct_event_create(ct_stream_device(b->uses[i]), false) : NULL;
    if (e && ct_event_record(e, b->uses[i]) != CT_OK) {
      ct_event_free(e);
      e = NULL;
    }
    if (!e) stream_wait(b->uses[i]);
    if (b->events) b->events[i] = e;
  }
}

// True when every event of pending block b has completed; with `wait`, waits
// for them first (empty_cache, the OOM flush). On the CPU, whose work is
// done when issued, waiting ends every hold (stream.h). Enters with the
// mutex held.
static bool block_events_done(ct_block *b, bool wait) {
  if (wait && b->slot == 0) return true;
  for (int i = 0; i < b->nuses; ++i) {
    ct_event *e = b->events ? b->events[i] : NULL;
    if (!e) continue;
    if (wait) event_wait(e);
    else if (!ct_event_query(e)) return false;
  }
  return true;
}

// Releases every pending block of the device whose events are done (all of
// them, with `wait`), as PyTorch's process_events / synchronize_and_free_events.
// Enters with the device's mutex held.
static void pool_reap(dev_state *ds, ct_mempool *p);

static void process_events(dev_state *ds, bool wait) {
  for (ct_block **q = &ds->pending; *q;) {
    ct_block *b = *q;
    if (!block_events_done(b, wait)) {
      q = &b->pending_next;
      continue;
    }
    *q = b->pending_next;
    b->pending_next = NULL;
    for (int i = 0; i < b->nuses; ++i)
      if (b->events && b->events[i]) ct_event_free(b->events[i]);
    ct_mempool *pool = b->seg->pool;
    block_release(b);
    pool_reap(ds, pool);
  }
}

void ct_block_free(ct_block *b) {
  if (!b) return;
  dev_state *ds = &states[b->slot];
  pthread_mutex_lock(&ds->mu);
  if (!b->live || b->pending) { // a second free of a block that still exists
    pthread_mutex_unlock(&ds->mu);
    ct_fail(CT_ERR_VALUE, "ct_block_free: block %p was already freed", (void *)b->ptr);
    return;
  }
  alloc_stats *s = &ds->st;
  s->allocated -= b->rounded;
  s->freed_total += b->rounded;
  s->active--;
  s->num_frees++;
  if (cti_observed())
    cti_observe_memory(b->slot == 0 ? ct_device_cpu() : ct_device_cuda(b->slot - 1), b->ptr,
                    -(int64_t)b->rounded, s->allocated, s->reserved);
  if (b->nuses > 0) { // used on other streams: wait for them (record_stream)
    block_insert_events(b);
    b->pending = true;
    b->pending_next = ds->pending;
    ds->pending = b;
  } else {
    ct_mempool *pool = b->seg->pool;
    block_release(b);
    pool_reap(ds, pool);
  }
  pthread_mutex_unlock(&ds->mu);
}

int ct_block_record_stream(ct_block *b, ct_stream *s) {
  if (!b || !s) return ct_fail(CT_ERR_VALUE, "ct_record_stream: block or stream is NULL");
  dev_state *ds = &states[b->slot];
  if (slot_of(ct_stream_device(s), NULL) != b->slot) {
    char a[CT_DEVICE_STR_MAX], c[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE,
                   "ct_record_stream: the stream is on %s, but the memory is on %s",
                   ct_device_str(ct_stream_device(s), a), slot_str(b->slot, c));
  }
  pthread_mutex_lock(&ds->mu);
  int rc = CT_OK;
  bool known = s == b->seg->stream; // its own stream orders itself
  for (int i = 0; i < b->nuses && !known; ++i) known = b->uses[i] == s;
  if (!b->live || b->pending) {
    rc = CT_ERR_VALUE;
  } else if (!known) {
    if (b->nuses == b->cap_uses) {
      int cap = b->cap_uses ? 2 * b->cap_uses : 4;
      ct_stream **u = realloc(b->uses, (size_t)cap * sizeof *u);
      if (!u) rc = CT_ERR_OOM;
      else {
        b->uses = u;
        b->cap_uses = cap;
      }
    }
    if (rc == CT_OK) b->uses[b->nuses++] = s;
  }
  pthread_mutex_unlock(&ds->mu);
  if (rc == CT_ERR_VALUE) return ct_fail(rc, "ct_record_stream: the block was already freed");
  if (rc == CT_ERR_OOM) return ct_fail(rc, "ct_record_stream: out of host memory");
  return CT_OK;
}

void *ct_block_ptr(const ct_block *b) { return b ? b->ptr : NULL; }
size_t ct_block_size(const ct_block *b) { return b ? b->rounded : 0; }

// ---- private pools --------------------------------------------------------------------
ct_mempool *ct_mempool_create(ct_device d) {
  int slot = slot_of(d, "ct_mempool_create");
  if (slot < 0) return NULL;
  ct_mempool *p = calloc(1, sizeof *p);
  if (!p) {
    ct_fail(CT_ERR_OOM, "ct_mempool_create: out of host memory");
    return NULL;
  }
  p->slot = slot;
  p->is_private = true;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  p->next_private = ds->privates;
  ds->privates = p;
  pthread_mutex_unlock(&ds->mu);
  return p;
}

// Gives back a private pool with no live block: its segments, its place in
// the device's list, itself. Enters with the device's mutex held.
static int pool_destroy_locked(dev_state *ds, ct_mempool *p) {
  int rc = pool_release_free(ds, p, NULL);
  if (rc) return rc;
  for (ct_mempool **q = &ds->privates; *q; q = &(*q)->next_private) {
    if (*q == p) {
      *q = p->next_private;
      break;
    }
  }
  free(p);
  return CT_OK;
}

// Destroys a released pool once its last live block is gone (not while this
// thread captures on the device: giving memory back waits for the device).
static void pool_reap(dev_state *ds, ct_mempool *p) {
  ct_device d = p->slot == 0 ? ct_device_cpu() : ct_device_cuda(p->slot - 1);
  if (p->orphaned && p->live == 0 && !capturing_on(d)) (void)pool_destroy_locked(ds, p);
}

int ct_mempool_free(ct_mempool *p) {
  if (!p) return CT_OK;
  if (!p->is_private)
    return ct_fail(CT_ERR_VALUE, "ct_mempool_free: a device's default pool cannot be destroyed");
  dev_state *ds = &states[p->slot];
  pthread_mutex_lock(&ds->mu);
  process_events(ds, true); // its pending blocks are free once their streams are done
  if (p->live) {
    size_t n = p->live;
    pthread_mutex_unlock(&ds->mu);
    return ct_fail(CT_ERR_VALUE, "ct_mempool_free: the pool still has %zu live block%s", n,
                   n == 1 ? "" : "s");
  }
  int rc = pool_destroy_locked(ds, p);
  pthread_mutex_unlock(&ds->mu);
  return rc;
}

int ct_mempool_release(ct_mempool *p) {
  if (!p) return CT_OK;
  if (!p->is_private)
    return ct_fail(CT_ERR_VALUE, "ct_mempool_release: a device's default pool cannot be released");
  dev_state *ds = &states[p->slot];
  pthread_mutex_lock(&ds->mu);
  p->orphaned = true;
  pool_reap(ds, p);
  pthread_mutex_unlock(&ds->mu);
  return CT_OK;
}

// ---- statistics ------------------------------------------------------------------------
// Copies the device's statistics; false (and zeros) for an unusable device.
static bool stats_snapshot(ct_device d, alloc_stats *out) {
  memset(out, 0, sizeof *out);
  int slot = slot_of(d, NULL);
  if (slot < 0) return false;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  *out = ds->st;
  pthread_mutex_unlock(&ds->mu);
  return true;
}

size_t ct_memory_allocated(ct_device d) {
  alloc_stats s;
  stats_snapshot(d, &s);
  return s.allocated;
}

size_t ct_memory_reserved(ct_device d) {
  alloc_stats s;
  stats_snapshot(d, &s);
  return s.reserved;
}

size_t ct_max_memory_allocated(ct_device d) {
  alloc_stats s;
  stats_snapshot(d, &s);
  return s.peak_allocated;
}

size_t ct_max_memory_reserved(ct_device d) {
  alloc_stats s;
  stats_snapshot(d, &s);
  return s.peak_reserved;
}

void ct_reset_peak_memory_stats(ct_device d) {
  int slot = slot_of(d, NULL);
  if (slot < 0) return;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  ds->st.peak_allocated = ds->st.allocated;
  ds->st.peak_reserved = ds->st.reserved;
  ds->st.peak_active = ds->st.active;
  ds->st.peak_segments = ds->st.segments;
  pthread_mutex_unlock(&ds->mu);
}

int ct_empty_cache(ct_device d) {
  int slot = slot_of(d, "ct_empty_cache");
  if (slot < 0) return ct_last_status();
  // Giving memory back waits for the device: refused during capture, not reported.
  int rc = cti_sync_begin("ct_empty_cache", d, CTI_SYNC_REFUSE_IN_CAPTURE);
  if (rc) return rc;
  cti_sync_end();
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  process_events(ds, true); // as PyTorch's synchronize_and_free_events
  rc = pool_release_free(ds, &ds->pool, NULL);
  pthread_mutex_unlock(&ds->mu);
  return rc;
}

int ct_memory_stats_get(ct_device d, ct_memory_stats *out) {
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_memory_stats_get: out is NULL");
  memset(out, 0, sizeof *out);
  int slot = slot_of(d, "ct_memory_stats_get");
  if (slot < 0) return ct_last_status();
  alloc_stats s;
  stats_snapshot(d, &s);
  out->allocated_bytes = s.allocated;
  out->reserved_bytes = s.reserved;
  out->peak_allocated_bytes = s.peak_allocated;
  out->peak_reserved_bytes = s.peak_reserved;
  out->active_blocks = s.active;
  out->segments = s.segments;
  out->num_alloc_calls = s.num_alloc_calls;
  out->num_device_allocs = s.num_device_allocs;
  out->num_device_frees = s.num_device_frees;
  out->num_ooms = s.num_ooms;
  out->num_cache_flushes = s.num_cache_flushes;
  return CT_OK;
}

int ct_set_per_process_memory_fraction(double fraction, ct_device d) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    return ct_fail(CT_ERR_VALUE,
                   "ct_set_per_process_memory_fraction: fraction must be in (0, 1], got %g",
                   fraction);
  int slot = slot_of(d, "ct_set_per_process_memory_fraction");
  if (slot < 0) return ct_last_status();
  size_t free_b = 0, total_b = 0;
  int rc = slot_memory_info(slot, &free_b, &total_b);
  if (rc) return rc;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  ds->fraction = fraction;
  ds->fraction_set = true;
  ds->fraction_limit = (size_t)(fraction * (double)total_b);
  pthread_mutex_unlock(&ds->mu);
  return CT_OK;
}

double ct_get_per_process_memory_fraction(ct_device d) {
  int slot = slot_of(d, NULL);
  if (slot < 0) return 0.0;
  dev_state *ds = &states[slot];
  pthread_mutex_lock(&ds->mu);
  double f = ds->fraction;
  pthread_mutex_unlock(&ds->mu);
  return f;
}

// ---- the summary ------------------------------------------------------------------------
// Built in a cti_strbuf (strbuf.h).
#define SUMMARY_ROW "| %-27s | %11s | %11s | %11s | %11s |\n"
#define SUMMARY_WIDTH 85 // characters between the outer bars of SUMMARY_ROW

static void sb_rule(cti_strbuf *b, char c) {
  char line[SUMMARY_WIDTH + 4];
  line[0] = '|';
  memset(line + 1, c, SUMMARY_WIDTH);
  line[SUMMARY_WIDTH + 1] = '|';
  line[SUMMARY_WIDTH + 2] = '\n';
  line[SUMMARY_WIDTH + 3] = '\0';
  cti_sb_puts(b, line);
}

static void sb_centered(cti_strbuf *b, const char *text) {
  int n = (int)strlen(text);
  int left = n < SUMMARY_WIDTH ? (SUMMARY_WIDTH - n) / 2 : 0;
  int right = n < SUMMARY_WIDTH ? SUMMARY_WIDTH - n - left : 0;
  cti_sb_printf(b, "|%*s%s%*s|\n", left, "", text, right, "");
}

static void sb_size_row(cti_strbuf *b, const char *label, uint64_t cur, uint64_t peak,
                        uint64_t tot_a, uint64_t tot_f) {
  char c[32], p[32], a[32], f[32];
  cti_sb_printf(b, SUMMARY_ROW, label, fmt_size(cur, c, sizeof c), fmt_size(peak, p, sizeof p),
            fmt_size(tot_a, a, sizeof a), fmt_size(tot_f, f, sizeof f));
}

static void sb_count_row(cti_strbuf *b, const char *label, uint64_t cur, uint64_t peak,
                         uint64_t tot_a, uint64_t tot_f) {
  char c[32], p[32], a[32], f[32];
  snprintf(c, sizeof c, "%llu", (unsigned long long)cur);
  snprintf(p, sizeof p, "%llu", (unsigned long long)peak);
  snprintf(a, sizeof a, "%llu", (unsigned long long)tot_a);
  snprintf(f, sizeof f, "%llu", (unsigned long long)tot_f);
  cti_sb_printf(b, SUMMARY_ROW, label, c, p, a, f);
}

char *ct_memory_summary(ct_device d) {
  int slot = slot_of(d, "ct_memory_summary");
  if (slot < 0) return NULL;
  dev_state *ds = &states[slot];
  alloc_stats s;
  stats_snapshot(d, &s);
  pthread_mutex_lock(&ds->mu);
  double fraction = ds->fraction;
  bool fraction_set = ds->fraction_set;
  size_t limit = ds->fraction_limit;
  pthread_mutex_unlock(&ds->mu);

  char dev[CT_DEVICE_STR_MAX], title[400], name[256] = "";
  slot_str(slot, dev);
  if (slot > 0 && ct_cuda_get_device_name(slot - 1, name, sizeof name) != CT_OK) name[0] = '\0';
  if (name[0])
    snprintf(title, sizeof title, "ct memory summary, device %s (%s)", dev, name);
  else
    snprintf(title, sizeof title, "ct memory summary, device %s", dev);

  cti_strbuf b = {0};
  sb_rule(&b, '=');
  sb_centered(&b, title);
  sb_rule(&b, '-');
  cti_sb_printf(&b, SUMMARY_ROW, "Metric", "Current", "Peak", "Total alloc", "Total freed");
  sb_rule(&b, '-');
  sb_size_row(&b, "Allocated memory", s.allocated, s.peak_allocated, s.allocated_total,
              s.freed_total);
  sb_count_row(&b, "Active blocks (live)", s.active, s.peak_active, s.num_alloc_calls,
               s.num_frees);
  sb_size_row(&b, "Reserved memory (segments)", s.reserved, s.peak_reserved,
              s.reserved_total, s.released_total);
  sb_count_row(&b, "Segments", s.segments, s.peak_segments, s.num_device_allocs,
               s.num_device_frees);
  sb_rule(&b, '-');
  char line[200], f1[32], f2[32];
  snprintf(line, sizeof line, " Cache flushes: %llu    OOMs: %llu",
           (unsigned long long)s.num_cache_flushes, (unsigned long long)s.num_ooms);
  cti_sb_printf(&b, "|%-*s|\n", SUMMARY_WIDTH, line);
  if (fraction_set)
    snprintf(line, sizeof line, " Memory fraction: %.4g (allows %s)", fraction,
             fmt_size(limit, f1, sizeof f1));
  else
    snprintf(line, sizeof line, " Memory fraction: not set (1.00)");
  cti_sb_printf(&b, "|%-*s|\n", SUMMARY_WIDTH, line);
  size_t free_b = 0, total_b = 0;
  if (slot_memory_info(slot, &free_b, &total_b) == CT_OK) {
    snprintf(line, sizeof line, " Device memory: %s free of %s total",
             fmt_size(free_b, f1, sizeof f1), fmt_size(total_b, f2, sizeof f2));
    cti_sb_printf(&b, "|%-*s|\n", SUMMARY_WIDTH, line);
  }
  sb_rule(&b, '=');
  char *text = cti_sb_take(&b);
  if (!text) ct_fail(CT_ERR_OOM, "ct_memory_summary: out of host memory");
  return text;
}

// ---- torch.cuda names ----------------------------------------------------------------------
size_t ct_cuda_memory_allocated(int index) { return ct_memory_allocated(ct_device_cuda(index)); }
size_t ct_cuda_memory_reserved(int index) { return ct_memory_reserved(ct_device_cuda(index)); }
size_t ct_cuda_max_memory_allocated(int index) {
  return ct_max_memory_allocated(ct_device_cuda(index));
}
size_t ct_cuda_max_memory_reserved(int index) {
  return ct_max_memory_reserved(ct_device_cuda(index));
}
void ct_cuda_reset_peak_memory_stats(int index) {
  ct_reset_peak_memory_stats(ct_device_cuda(index));
}

int ct_cuda_empty_cache(void) {
  int index = ct_cuda_current_device();
  if (index < 0)
    return ct_fail(CT_ERR_UNAVAILABLE, "ct_cuda_empty_cache: CUDA is unavailable: %s",
                   ct_cuda_unavailable_reason());
  return ct_empty_cache(ct_device_cuda(index));
}

// ---- pinned host memory ----------------------------------------------------------------------
// Every pinned block ever obtained from cudaHostAlloc is on one list, live or
// cached; a freed block waits there for a request of its (power-of-two) size.
// As PyTorch's host allocator: each asynchronous copy that uses a block
// records an event (ct_pinned_record_stream), and a freed block is handed out
// again only once its events have completed; empty_cache waits for them.
typedef struct pinned_block {
  void *ptr;
  size_t size;
  bool live;
  ct_event **events; // copies in flight on it (the completed are dropped)
  int nevents, cap_events;
  struct pinned_block *next;
} pinned_block;

static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;
static pinned_block *pinned_all;
static size_t pinned_reserved_bytes;

#ifdef CT_HAVE_CUDA
// Drops pb's completed events (all, waiting for them, with `wait`); true
// when none is left. Enters with pinned_mu held.
static bool pinned_events_done(pinned_block *pb, bool wait) {
  int kept = 0;
  for (int i = 0; i < pb->nevents; ++i) {
    ct_event *e = pb->events[i];
    if (wait) event_wait(e);
    if (wait || ct_event_query(e)) ct_event_free(e);
    else pb->events[kept++] = e;
  }
  pb->nevents = kept;
  return kept == 0;
}

// Frees every cached (not live) pinned block. Enters with pinned_mu held.
static int pinned_release_cached(void) {
  int status = CT_OK;
  for (pinned_block **q = &pinned_all; *q;) {
    pinned_block *pb = *q;
    if (pb->live) {
      q = &pb->next;
      continue;
    }
    (void)pinned_events_done(pb, true);
    cudaError_t e = cudaFreeHost(pb->ptr);
    if (e != cudaSuccess) {
      status = ct_cuda_fail((int)e, "cudaFreeHost(pb->ptr)", __FILE__, __LINE__);
      q = &pb->next;
      continue;
    }
    pinned_reserved_bytes -= pb->size;
    *q = pb->next;
    free(pb->events);
    free(pb);
  }
  return status;
}
#endif

void *ct_pinned_alloc(size_t nbytes) {
#ifndef CT_HAVE_CUDA
  (void)nbytes;
  ct_fail(CT_ERR_UNAVAILABLE, "ct_pinned_alloc: pinned memory needs CUDA: built without CUDA");
  return NULL;
#else
  if (!ct_cuda_is_available()) {
    ct_fail(CT_ERR_UNAVAILABLE, "ct_pinned_alloc: pinned memory needs CUDA: %s",
            ct_cuda_unavailable_reason());
    return NULL;
  }
  if (nbytes > ((size_t)1 << 62)) {
    char a[32];
    ct_fail(CT_ERR_OOM, "ct_pinned_alloc: CPU pinned memory out of memory. Tried to allocate %s",
            fmt_size(nbytes, a, sizeof a));
    return NULL;
  }
  size_t size = 512;
  while (size < nbytes) size <<= 1;
  pthread_mutex_lock(&pinned_mu);
  pinned_block *hit = NULL;
  for (pinned_block *pb = pinned_all; pb; pb = pb->next)
    if (!pb->live && pb->size == size && pinned_events_done(pb, false)) {
      hit = pb;
      break;
    }
  if (!hit) {
    hit = calloc(1, sizeof *hit);
    void *p = NULL;
    cudaError_t e = hit ? cudaHostAlloc(&p, size, cudaHostAllocDefault) : cudaErrorMemoryAllocation;
    if (hit && e == cudaErrorMemoryAllocation) { // free the cache, retry once
      (void)cudaGetLastError();
      pinned_release_cached();
      e = cudaHostAlloc(&p, size, cudaHostAllocDefault);
    }
    if (e != cudaSuccess) {
      free(hit);
      if (e == cudaErrorMemoryAllocation) {
        char a[32], r[32];
        (void)cudaGetLastError();
        ct_fail(CT_ERR_OOM,
                "ct_pinned_alloc: CPU pinned memory out of memory. Tried to allocate %s "
                "(%s pinned by ct)",
                fmt_size(size, a, sizeof a), fmt_size(pinned_reserved_bytes, r, sizeof r));
      } else {
        ct_cuda_fail((int)e, "cudaHostAlloc(&p, size, cudaHostAllocDefault)", __FILE__, __LINE__);
      }
      pthread_mutex_unlock(&pinned_mu);
      return NULL;
    }
    hit->ptr = p;
    hit->size = size;
    hit->next = pinned_all;
    pinned_all = hit;
    pinned_reserved_bytes += size;
  }
  hit->live = true;
  pthread_mutex_unlock(&pinned_mu);
  if (ct_alloc_poison()) memset(hit->ptr, 0xFF, size);
  return hit->ptr;
#endif
}

void ct_pinned_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&pinned_mu);
  pinned_block *pb = pinned_all;
  while (pb && !(pb->live && pb->ptr == p)) pb = pb->next;
  if (pb) pb->live = false;
  pthread_mutex_unlock(&pinned_mu);
  if (!pb) ct_fail(CT_ERR_VALUE, "ct_pinned_free: %p is not a live pinned block", p);
}

// The live block holding address p (anywhere inside it), or NULL. Enters
// with pinned_mu held.
static pinned_block *pinned_find(const void *p) {
  for (pinned_block *pb = pinned_all; pb; pb = pb->next)
    if (pb->live && (const char *)p >= (const char *)pb->ptr &&
        (const char *)p < (const char *)pb->ptr + pb->size)
      return pb;
  return NULL;
}

int ct_pinned_record_stream(void *p, ct_stream *s) {
  if (!p || !s) return ct_fail(CT_ERR_VALUE, "ct_pinned_record_stream: pointer or stream is NULL");
#ifndef CT_HAVE_CUDA
  return ct_fail(CT_ERR_VALUE, "ct_pinned_record_stream: %p is not a live pinned block", p);
#else
  ct_event *e = ct_event_create(ct_stream_device(s), false);
  if (!e) return ct_last_status();
  int rc = ct_event_record(e, s);
  if (rc) {
    ct_event_free(e);
    return rc;
  }
  pthread_mutex_lock(&pinned_mu);
  pinned_block *pb = pinned_find(p);
  if (pb && pb->nevents == pb->cap_events) {
    int cap = pb->cap_events ? 2 * pb->cap_events : 4;
    ct_event **ev = realloc(pb->events, (size_t)cap * sizeof *ev);
    if (ev) {
      pb->events = ev;
      pb->cap_events = cap;
    } else {
      rc = CT_ERR_OOM;
    }
  }
  if (pb && rc == CT_OK) pb->events[pb->nevents++] = e;
  pthread_mutex_unlock(&pinned_mu);
  if (pb && rc == CT_OK) return CT_OK;
  // Not kept: wait for the copy instead, so the caller may free at once.
  event_wait(e);
  ct_event_free(e);
  if (!pb) return ct_fail(CT_ERR_VALUE, "ct_pinned_record_stream: %p is not a live pinned block", p);
  return ct_fail(CT_ERR_OOM, "ct_pinned_record_stream: out of host memory");
#endif
}

bool ct_is_pinned_ptr(const void *p) {
  if (!p) return false;
  pthread_mutex_lock(&pinned_mu);
  pinned_block *pb = pinned_find(p);
  pthread_mutex_unlock(&pinned_mu);
  return pb && pb->ptr == p;
}

bool ct_pinned_contains(const void *p) {
  if (!p) return false;
  pthread_mutex_lock(&pinned_mu);
  pinned_block *pb = pinned_find(p);
  pthread_mutex_unlock(&pinned_mu);
  return pb != NULL;
}

size_t ct_pinned_memory_reserved(void) {
  pthread_mutex_lock(&pinned_mu);
  size_t n = pinned_reserved_bytes;
  pthread_mutex_unlock(&pinned_mu);
  return n;
}

int ct_pinned_empty_cache(void) {
#ifdef CT_HAVE_CUDA
  pthread_mutex_lock(&pinned_mu);
  int rc = pinned_release_cached();
  pthread_mutex_unlock(&pinned_mu);
  return rc;
#else
  return CT_OK; // nothing can be cached without CUDA
#endif
}
