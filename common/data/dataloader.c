// SPDX-License-Identifier: MIT
//
// dataloader: torch.utils.data.DataLoader, with threads instead of processes.
//
// One epoch, from the index list to batches on the device:
//
//   permutation ──> batch k = perm[k*B .. k*B+B) ──> workers gather (host)
//     ──> ring of prefetch_factor * num_workers slots ──> main thread, in order
//     ──> [CUDA] copy on a side stream ──> current stream waits ──> caller
//
// The shuffle. Epoch e (the e-th call to ct_dataloader_start_epoch, counting
// from 0) permutes 0..N-1 with a Fisher-Yates shuffle driven by Philox
// 4x32-10 (random.h) with key = seed + e:
//   key      = (lo32(seed + e), hi32(seed + e))
//   word j   = philox4x32_10((lo32(j / 4), hi32(j / 4), 0, 0), key)[j % 4]
//   draw m   = word 2m | word 2m+1 << 32                    (a u64)
//   for i = N-1 down to 1: j = uniform in [0, i] from the draws by Lemire's
//       multiply-and-reject (r * (i+1), 128 bits; reject while the low half
//       is below 2^64 mod (i+1), then draw again); swap perm[i], perm[j].
// The permutation depends on (seed, e, N) only: not on the thread count, nor
// on the global generator (ct_manual_seed does not touch it), so runs repeat
// and num_workers can change without changing what the model sees.
//
// Workers. num_workers threads claim batch numbers in order (k = 0, 1, ...),
// gather each whole batch into fresh host tensors (pinned when pin_memory)
// and put it into slot k % C of a ring of C = prefetch_factor * num_workers
// slots. A worker may claim batch k only while k < consumed + C, so at most C
// batches are ever in flight (PyTorch's prefetch_factor per worker). The main
// thread takes slot k when it is ready: batches come out in permutation order
// whatever the number of workers or their speed. num_workers = 0 gathers on
// the calling thread, as PyTorch does. Workers are started by
// ct_dataloader_start_epoch and end when the epoch has no batch left to
// claim; starting a new epoch, or freeing the loader, mid-epoch tells them to
// stop, waits for each to finish the batch it is gathering, joins them and
// drops what they made.
//
// Delivery to a GPU. With pin_memory, batch k's host tensors are pinned and
// the main thread copies them on a side stream of its own:
//   side waits for the current stream   (the memory of the device tensors is
//                                        the current stream's: earlier work
//                                        on it may still use a reused block)
//   copy x, y non_blocking on side; record event E_k on side
// and it does this for batch k+1 before returning batch k, so the copy of the
// next batch runs while the caller's kernels for this one run. Before batch
// k is returned the current stream waits on E_k (the host does not wait).
// The pinned host tensors of batch k are freed as soon as the copy is
// issued: the non-blocking copy recorded an event on their pinned blocks
// (alloc.h), so the pinned pool hands that memory to a worker only after the
// DMA has read it. A staged batch that is never delivered (an error, a new
// epoch, the loader freed) has its device tensors freed with
// ct_record_stream(side): the caching allocator reuses them only after the
// copy into them is done; nothing waits on the host. Without pin_memory, batches are copied on the current
// stream with a blocking copy, as x.to(device) from pageable memory does in
// PyTorch: no overlap, which is why PyTorch users pass pin_memory=True.
//
// pin_memory without CUDA: PyTorch warns and goes on with pageable memory;
// so does this loader (one line on stderr per process), since chapters pass
// pin_memory = true on every machine and must still run on a CPU-only one.
//
// Epochs. ct_dataloader_next on a loader never started starts epoch 0 by
// itself (a plain `while (next(...) == 1)` loop works); at the end of an
// epoch it returns 0, and keeps returning 0 until the next start_epoch.
// An error from a batch (returned as a negative ct_status) ends the epoch.
//
// Device batches are allocated on the current stream of the call that
// stages them (one call before they are returned): keep one current stream
// per loader, as a training loop does.
//
// The loader does not own the dataset: the dataset must outlive it.
#define _GNU_SOURCE // pthreads under -std=c11

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "error.h"
#include "random.h"
#include "stream.h"
#include "tensor_impl.h"

#define MAX_WORKERS 256

typedef struct slot {
  bool ready;
  int status;     // CT_OK or the worker's error
  char msg[1024]; // the worker's error message (errors are thread-local)
  ct_tensor *x, *y;
} slot;

// A batch whose host->device copy has been issued.
typedef struct staged {
  ct_tensor *dx, *dy; // device tensors being written
  ct_event *ev;       // recorded on the side stream after the copy
} staged;

struct ct_dataloader {
  ct_dataset *ds;
  ct_dataloader_options o;
  int64_t len, nbatches;
  int64_t *perm; // (len)
  uint64_t epochs_started;
  bool epoch_active;
  int64_t host_next; // next batch the main thread takes from the host side
  int64_t skip;      // batches the next epoch skips (ct_dataloader_resume_at)

  // workers (num_workers > 0)
  pthread_mutex_t mu;
  pthread_cond_t work_cv;  // workers wait here for a free slot or stop
  pthread_cond_t ready_cv; // the main thread waits here for its slot
  pthread_t *threads;
  int nthreads;  // running in this epoch (to join)
  int cap;       // ring slots
  slot *ring;
  int64_t next_claim, consumed;
  bool stop;

  // device delivery
  bool pinned; // host batches are pinned
  bool staged_copy; // CUDA device and pinned: side-stream copies
  ct_stream *side;
  ct_event *fence; // recorded on the current stream; the side stream waits on it
  staged pend;
  bool have_pend;
  ct_event *events[4]; // spare events: at most two batches are staged at once
  int nevents;
};

ct_dataloader_options ct_dataloader_defaults(void) {
  return (ct_dataloader_options){
      .batch_size = 1,
      .shuffle = false,
      .drop_last = false,
      .num_workers = 0,
      .pin_memory = false,
      .prefetch_factor = 2,
      .seed = 0,
      .device = ct_device_cpu(),
  };
}

// ---- the permutation ---------------------------------------------------------------
typedef struct philox_words {
  uint32_t key[2];
  uint64_t block; // next counter
  uint32_t buf[4];
  int pos; // next word in buf; 4 = empty
} philox_words;

static uint32_t next_word(philox_words *p) {
  if (p->pos == 4) {
    uint32_t ctr[4] = {(uint32_t)p->block, (uint32_t)(p->block >> 32), 0, 0};
    ct_philox4x32_10(ctr, p->key, p->buf);
    p->block++;
    p->pos = 0;
  }
  return p->buf[p->pos++];
}

static uint64_t next_u64(philox_words *p) {
  uint64_t lo = next_word(p);
  return lo | (uint64_t)next_word(p) << 32;
}

// Uniform in [0, bound) without bias (Lemire 2019).
static uint64_t uniform_below(philox_words *p, uint64_t bound) {
  unsigned __int128 m = (unsigned __int128)next_u64(p) * bound;
  uint64_t low = (uint64_t)m;
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = (unsigned __int128)next_u64(p) * bound;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

static void make_permutation(int64_t *perm, int64_t n, bool shuffle, uint64_t key) {
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  if (!shuffle) return;
  philox_words p = {.key = {(uint32_t)key, (uint32_t)(key >> 32)}, .block = 0, .pos = 4};
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = (int64_t)uniform_below(&p, (uint64_t)i + 1);
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

// ---- gathering one batch on the host ---------------------------------------------------
static ct_shape batch_shape(int64_t n, ct_shape sample) {
  ct_shape s = {.ndim = sample.ndim + 1};
  s.d[0] = n;
  for (int i = 0; i < sample.ndim && i + 1 < CT_MAX_DIMS; ++i) s.d[i + 1] = sample.d[i];
  return s;
}

// Batch k into new host tensors *x, *y. Any thread.
static int gather(const ct_dataloader *dl, int64_t k, ct_tensor **x, ct_tensor **y) {
  int64_t start = k * dl->o.batch_size;
  int64_t n = dl->len - start < dl->o.batch_size ? dl->len - start : dl->o.batch_size;
  const ct_dataset *ds = dl->ds;
  *x = cti_tensor_new(batch_shape(n, ct_dataset_x_shape(ds)), ct_dataset_x_dtype(ds),
                     ct_device_cpu(), dl->pinned);
  *y = *x ? cti_tensor_new(batch_shape(n, ct_dataset_y_shape(ds)), ct_dataset_y_dtype(ds),
                          ct_device_cpu(), dl->pinned)
          : NULL;
  int rc;
  if (*y) {
    rc = ct_dataset_get_batch(ds, dl->perm + start, n, *x, *y);
    if (rc == CT_OK) return CT_OK;
  } else {
    rc = ct_last_status() != CT_OK ? (int)ct_last_status() : CT_ERR_OOM;
  }
  ct_free(*x);
  ct_free(*y);
  *x = *y = NULL;
  return rc;
}

// ---- workers -----------------------------------------------------------------------
static void *worker_main(void *arg) {
  ct_dataloader *dl = arg;
  pthread_mutex_lock(&dl->mu);
  for (;;) {
    while (!dl->stop && dl->next_claim < dl->nbatches && dl->next_claim >= dl->consumed + dl->cap)
      pthread_cond_wait(&dl->work_cv, &dl->mu);
    if (dl->stop || dl->next_claim >= dl->nbatches) break;
    int64_t k = dl->next_claim++;
    pthread_mutex_unlock(&dl->mu);

    ct_tensor *x = NULL, *y = NULL;
    int rc = gather(dl, k, &x, &y);

    pthread_mutex_lock(&dl->mu);
    if (dl->stop) {
      ct_free(x);
      ct_free(y);
      break;
    }
    slot *s = &dl->ring[k % dl->cap];
    s->x = x;
    s->y = y;
    s->status = rc;
    if (rc != CT_OK) snprintf(s->msg, sizeof s->msg, "%s", ct_last_error());
    s->ready = true;
    pthread_cond_broadcast(&dl->ready_cv);
  }
  pthread_mutex_unlock(&dl->mu);
  return NULL;
}

// Tells the workers to stop, joins them and drops the batches they left.
static void stop_workers(ct_dataloader *dl) {
  if (dl->nthreads == 0) return;
  pthread_mutex_lock(&dl->mu);
  dl->stop = true;
  pthread_cond_broadcast(&dl->work_cv);
  pthread_mutex_unlock(&dl->mu);
  for (int i = 0; i < dl->nthreads; ++i) pthread_join(dl->threads[i], NULL);
  dl->nthreads = 0;
  for (int i = 0; i < dl->cap; ++i) {
    ct_free(dl->ring[i].x);
    ct_free(dl->ring[i].y);
    dl->ring[i] = (slot){0};
  }
  dl->stop = false;
}

static int start_workers(ct_dataloader *dl) {
  dl->next_claim = dl->host_next; // a resumed epoch starts past its skipped batches
  dl->consumed = dl->host_next;
  int want = dl->o.num_workers;
  if ((int64_t)want > dl->nbatches) want = (int)dl->nbatches; // idle workers would only exit
  for (int i = 0; i < want; ++i) {
    int e = pthread_create(&dl->threads[i], NULL, worker_main, dl);
    if (e != 0) {
      stop_workers(dl);
      return ct_fail(CT_ERR_OOM, "ct_dataloader_start_epoch: cannot start worker %d of %d: %s", i,
                     dl->o.num_workers, strerror(e));
    }
    dl->nthreads = i + 1;
  }
  return CT_OK;
}

// Batch k from the host side, in order: from the ring, or gathered here.
static int take_host(ct_dataloader *dl, int64_t k, ct_tensor **x, ct_tensor **y) {
  if (dl->o.num_workers == 0) return gather(dl, k, x, y);
  pthread_mutex_lock(&dl->mu);
  slot *s = &dl->ring[k % dl->cap];
  while (!s->ready) pthread_cond_wait(&dl->ready_cv, &dl->mu);
  int rc = s->status;
  *x = s->x;
  *y = s->y;
  if (rc != CT_OK) ct_fail((ct_status)rc, "%s", s->msg);
  *s = (slot){0};
  dl->consumed = k + 1;
  pthread_cond_broadcast(&dl->work_cv);
  pthread_mutex_unlock(&dl->mu);
  return rc;
}

// ---- device delivery ---------------------------------------------------------------------
static ct_event *event_get(ct_dataloader *dl) {
  if (dl->nevents > 0) return dl->events[--dl->nevents];
  return ct_event_create(dl->o.device, false);
}

static void event_put(ct_dataloader *dl, ct_event *e) {
  if (!e) return;
  if (dl->nevents < (int)(sizeof dl->events / sizeof dl->events[0])) dl->events[dl->nevents++] = e;
  else ct_event_free(e);
}

// Frees a staged batch's device tensors without waiting: they are used on the
// side stream, so the allocator reuses them only once the copies there are done.
static void staged_drop(ct_dataloader *dl, staged *b) {
  if (b->dx) (void)ct_record_stream(b->dx, dl->side);
  if (b->dy) (void)ct_record_stream(b->dy, dl->side);
  ct_free(b->dx);
  ct_free(b->dy);
  event_put(dl, b->ev);
  *b = (staged){NULL, NULL, NULL};
}

// Issues batch (hx, hy)'s copy on the side stream into new device tensors
// owned by the current stream. On failure everything is freed.
static int stage(ct_dataloader *dl, ct_tensor *hx, ct_tensor *hy, staged *out) {
  ct_device dev = dl->o.device;
  ct_stream *cur = ct_current_stream(dev);
  staged b = {NULL, NULL, NULL};
  int rc = cur ? CT_OK : (int)ct_last_status();
  // Allocated while `cur` is current: the blocks belong to the caller's stream.
  if (rc == CT_OK) b.dx = ct_empty(ct_shape_of(hx), ct_dtype_of(hx), dev);
  if (rc == CT_OK && b.dx) b.dy = ct_empty(ct_shape_of(hy), ct_dtype_of(hy), dev);
  if (rc == CT_OK && !b.dy) rc = ct_last_status();
  if (rc == CT_OK) rc = ct_event_record(dl->fence, cur);
  if (rc == CT_OK) rc = ct_stream_wait_event(dl->side, dl->fence);
  if (rc == CT_OK) {
    b.ev = event_get(dl);
    if (!b.ev) rc = ct_last_status();
  }
  if (rc == CT_OK) {
    rc = ct_set_stream(dl->side);
    if (rc == CT_OK) {
      rc = ct_copy_(b.dx, hx, true);
      if (rc == CT_OK) rc = ct_copy_(b.dy, hy, true);
      int rc2 = ct_set_stream(cur);
      if (rc == CT_OK) rc = rc2;
    }
  }
  if (rc == CT_OK) rc = ct_event_record(b.ev, dl->side);
  // The pinned pool keeps hx and hy until the copies issued from them are done.
  ct_free(hx);
  ct_free(hy);
  if (rc != CT_OK) {
    staged_drop(dl, &b); // a copy may have been issued into them
    return rc;
  }
  *out = b;
  return CT_OK;
}

// Drops a staged batch that will not be delivered.
static void drop_pending(ct_dataloader *dl) {
  if (!dl->have_pend) return;
  staged_drop(dl, &dl->pend);
  dl->have_pend = false;
}

// ---- the public calls ----------------------------------------------------------------------
ct_dataloader *ct_dataloader_create(ct_dataset *ds, ct_dataloader_options o) {
  char d[CT_DEVICE_STR_MAX];
  if (!ds) {
    ct_fail(CT_ERR_VALUE, "ct_dataloader_create: NULL dataset");
    return NULL;
  }
  if (o.batch_size < 1) {
    ct_fail(CT_ERR_VALUE, "ct_dataloader_create: batch_size should be a positive integer, got %" PRId64,
            o.batch_size);
    return NULL;
  }
  if (o.num_workers < 0 || o.num_workers > MAX_WORKERS) {
    ct_fail(CT_ERR_VALUE, "ct_dataloader_create: num_workers must be in [0, %d], got %d",
            MAX_WORKERS, o.num_workers);
    return NULL;
  }
  if (o.num_workers > 0 && (o.prefetch_factor < 1 || o.prefetch_factor > 1024)) {
    ct_fail(CT_ERR_VALUE,
            "ct_dataloader_create: prefetch_factor must be in [1, 1024] with workers, got %d",
            o.prefetch_factor);
    return NULL;
  }
  if (o.device.type == CT_CUDA) {
    if (!ct_cuda_is_available()) {
      ct_fail(CT_ERR_UNAVAILABLE, "ct_dataloader_create: batches asked for on %s, but CUDA is unavailable: %s",
              ct_device_str(o.device, d), ct_cuda_unavailable_reason());
      return NULL;
    }
    if (o.device.index < 0 || o.device.index >= ct_cuda_device_count()) {
      ct_fail(CT_ERR_DEVICE, "ct_dataloader_create: %s is not a device here (%d CUDA devices)",
              ct_device_str(o.device, d), ct_cuda_device_count());
      return NULL;
    }
  } else if (o.device.type != CT_CPU) {
    ct_fail(CT_ERR_DEVICE, "ct_dataloader_create: unknown device type %d", (int)o.device.type);
    return NULL;
  }
  if (ct_dataset_x_shape(ds).ndim >= CT_MAX_DIMS || ct_dataset_y_shape(ds).ndim >= CT_MAX_DIMS) {
    ct_fail(CT_ERR_SHAPE, "ct_dataloader_create: samples with %d dims leave no room for the batch dim",
            CT_MAX_DIMS);
    return NULL;
  }
  bool pinned = o.pin_memory;
  if (pinned && !ct_cuda_is_available()) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
      fprintf(stderr,
              "ct_dataloader: warning: pin_memory is set, but CUDA is unavailable (%s); batches "
              "stay in pageable memory, as PyTorch does\n",
              ct_cuda_unavailable_reason());
    pinned = false;
  }

  ct_dataloader *dl = calloc(1, sizeof *dl);
  if (!dl) {
    ct_fail(CT_ERR_OOM, "ct_dataloader_create: out of host memory");
    return NULL;
  }
  dl->ds = ds;
  dl->o = o;
  dl->pinned = pinned;
  dl->len = ct_dataset_len(ds);
  dl->nbatches = o.drop_last ? dl->len / o.batch_size : (dl->len + o.batch_size - 1) / o.batch_size;
  dl->perm = malloc(sizeof(int64_t) * (size_t)(dl->len ? dl->len : 1));
  dl->cap = o.num_workers > 0 ? o.prefetch_factor * o.num_workers : 0;
  dl->ring = dl->cap ? calloc((size_t)dl->cap, sizeof(slot)) : NULL;
  dl->threads = o.num_workers ? calloc((size_t)o.num_workers, sizeof(pthread_t)) : NULL;
  pthread_mutex_init(&dl->mu, NULL);
  pthread_cond_init(&dl->work_cv, NULL);
  pthread_cond_init(&dl->ready_cv, NULL);
  if (!dl->perm || (dl->cap && !dl->ring) || (o.num_workers && !dl->threads)) {
    ct_fail(CT_ERR_OOM, "ct_dataloader_create: out of host memory");
    ct_dataloader_free(dl);
    return NULL;
  }
  dl->staged_copy = o.device.type == CT_CUDA && pinned;
  if (dl->staged_copy) {
    dl->side = ct_stream_create(o.device, 0);
    dl->fence = dl->side ? ct_event_create(o.device, false) : NULL;
    if (!dl->fence) {
      ct_dataloader_free(dl);
      return NULL;
    }
  }
  return dl;
}

void ct_dataloader_free(ct_dataloader *dl) {
  if (!dl) return;
  stop_workers(dl);
  drop_pending(dl);
  for (int i = 0; i < dl->nevents; ++i) ct_event_free(dl->events[i]);
  ct_event_free(dl->fence);
  ct_stream_free(dl->side);
  pthread_cond_destroy(&dl->ready_cv);
  pthread_cond_destroy(&dl->work_cv);
  pthread_mutex_destroy(&dl->mu);
  free(dl->threads);
  free(dl->ring);
  free(dl->perm);
  free(dl);
}

int64_t ct_dataloader_len(const ct_dataloader *dl) { return dl ? dl->nbatches : 0; }

int ct_dataloader_start_epoch(ct_dataloader *dl) {
  if (!dl) return ct_fail(CT_ERR_VALUE, "ct_dataloader_start_epoch: NULL loader");
  stop_workers(dl);
  drop_pending(dl);
  make_permutation(dl->perm, dl->len, dl->o.shuffle, dl->o.seed + dl->epochs_started);
  dl->epochs_started++;
  dl->host_next = dl->skip < dl->nbatches ? dl->skip : dl->nbatches;
  dl->skip = 0;
  dl->epoch_active = true;
  if (dl->o.num_workers > 0) {
    int rc = start_workers(dl);
    if (rc != CT_OK) {
      dl->epoch_active = false;
      return rc;
    }
  }
  return CT_OK;
}

int ct_dataloader_resume_at(ct_dataloader *dl, int64_t epoch, int64_t batch) {
  if (!dl) return ct_fail(CT_ERR_VALUE, "ct_dataloader_resume_at: NULL loader");
  if (epoch < 0 || batch < 0 || batch > dl->nbatches)
    return ct_fail(CT_ERR_VALUE,
                   "ct_dataloader_resume_at: epoch %lld, batch %lld: expected epoch >= 0 and 0 <= batch <= %lld "
                   "(the batches per epoch)",
                   (long long)epoch, (long long)batch, (long long)dl->nbatches);
  stop_workers(dl);
  drop_pending(dl);
  dl->epoch_active = false;
  dl->epochs_started = (uint64_t)epoch;
  dl->skip = batch;
  return CT_OK;
}

static void end_epoch(ct_dataloader *dl) {
  stop_workers(dl);
  drop_pending(dl);
  dl->epoch_active = false;
}

int ct_dataloader_next(ct_dataloader *dl, ct_tensor **x, ct_tensor **y) {
  if (!dl || !x || !y) return -(int)ct_fail(CT_ERR_VALUE, "ct_dataloader_next: NULL argument");
  *x = *y = NULL;
  if (dl->epochs_started == 0) {
    int rc = ct_dataloader_start_epoch(dl); // a loader used without start_epoch: epoch 0
    if (rc != CT_OK) return -rc;
  }
  if (!dl->epoch_active) return 0;
  ct_tensor *hx = NULL, *hy = NULL;
  int rc = CT_OK;

  if (!dl->staged_copy) {
    if (dl->host_next >= dl->nbatches) {
      end_epoch(dl);
      return 0;
    }
    rc = take_host(dl, dl->host_next++, &hx, &hy);
    if (rc == CT_OK && dl->o.device.type == CT_CUDA) { // pageable: a blocking copy
      ct_tensor *dx = ct_to(hx, dl->o.device, ct_dtype_of(hx), false);
      ct_tensor *dy = dx ? ct_to(hy, dl->o.device, ct_dtype_of(hy), false) : NULL;
      ct_free(hx);
      ct_free(hy);
      hx = dx;
      hy = dy;
      if (!dy) {
        ct_free(dx);
        hx = NULL;
        rc = ct_last_status() ? (int)ct_last_status() : CT_ERR_CUDA;
      }
    }
    if (rc != CT_OK) {
      end_epoch(dl);
      return -rc;
    }
    *x = hx;
    *y = hy;
    return 1;
  }

  // Side-stream copies, one batch ahead.
  if (!dl->have_pend) {
    if (dl->host_next >= dl->nbatches) {
      end_epoch(dl);
      return 0;
    }
    rc = take_host(dl, dl->host_next++, &hx, &hy);
    if (rc == CT_OK) rc = stage(dl, hx, hy, &dl->pend);
    if (rc != CT_OK) {
      end_epoch(dl);
      return -rc;
    }
    dl->have_pend = true;
  }
  staged cur = dl->pend;
  dl->have_pend = false;
  if (dl->host_next < dl->nbatches) {
    rc = take_host(dl, dl->host_next++, &hx, &hy);
    if (rc == CT_OK) rc = stage(dl, hx, hy, &dl->pend);
    if (rc == CT_OK) dl->have_pend = true;
  }
  if (rc == CT_OK) rc = ct_stream_wait_event(ct_current_stream(dl->o.device), cur.ev);
  if (rc != CT_OK) {
    staged_drop(dl, &cur);
    end_epoch(dl);
    return -rc;
  }
  *x = cur.dx;
  *y = cur.dy;
  event_put(dl, cur.ev); // the wait above has taken its record: free to reuse
  return 1;
}
