// SPDX-License-Identifier: MIT
//
// stream: streams and events on the CPU and on CUDA devices.
//
// Invariant: a ct_stream or ct_event belongs to one device for its whole
// life, and every CUDA call made for it runs with that device current; the
// calling thread's current device is restored before returning. So a chapter
// may time work on cuda:1 while its thread "lives" on cuda:0.
//
// Choices, stated once:
//  - The default stream of a CUDA device is the legacy default stream (handle
//    NULL), as in PyTorch: it orders against every blocking stream on the
//    device. This project never compiles with --default-stream per-thread, so
//    the NULL handle that kernels receive from ct_stream_handle means the
//    legacy stream in every translation unit. Default stream objects are
//    static and live for the whole process.
//  - Streams from ct_stream_create are non-blocking (cudaStreamNonBlocking),
//    again as torch.cuda.Stream(): they do not wait for the legacy stream, so
//    order them with events (ct_stream_wait_event / ct_stream_wait_stream).
//    Priorities are clamped to ct_stream_priority_range: PyTorch's range,
//    CUDA's (least 0, greatest -5 on recent GPUs) cut to 0..-3 (c10's
//    max_compile_time_stream_priorities = 4); on the CPU, 0..0.
//  - The current stream is thread-local per device (_Thread_local): a new
//    thread starts on the default streams. Destroying a stream that is
//    current in the calling thread makes the default current again; the
//    caller must not destroy a stream still current in another thread.
//  - CPU work runs when it is issued. So a CPU stream is always idle, a CPU
//    event is complete as soon as it is recorded, and waiting on a CPU event
//    is a no-op for any stream (its work is already done). A CPU stream that
//    waits on a CUDA event blocks the host until the event completes: that
//    is the only way the CPU's next, immediately-run work can come after it.
//  - ct_cpu_events_hold (tests only) makes CPU events recorded during a
//    hold answer "not done" to ct_event_query until the hold ends; nothing
//    else about CPU streams changes.
//  - A CPU event records CLOCK_MONOTONIC; elapsed time is the difference in
//    milliseconds. Elapsed time between events of different devices is
//    CT_ERR_DEVICE; it needs both events recorded and created with timing.
//    The checks come in PyTorch's order and words (timing, then recorded).
//    On CUDA, ct_event_elapsed_time then waits for both events to complete
//    (current PyTorch raises "Both events must be completed before calculating
//    elapsed time." instead; 1.13 raised cudaErrorNotReady).
#define _POSIX_C_SOURCE 200809L // clock_gettime under -std=c11

#include "stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "alloc.h"
#include "stream_alloc.h"
#include "error.h"
#include "observe.h"
#include "sync_point.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "async_error.h"
#include "cuda_check.h"
#endif

struct ct_stream {
  ct_device device;
  bool is_default;
  int priority;
  void *handle; // cudaStream_t; NULL for the legacy default stream and on the CPU
};

struct ct_event {
  ct_device device;
  bool enable_timing;
  bool recorded;
  double host_ms; // CPU: CLOCK_MONOTONIC at the last record, in ms
  void *obs;      // an observer's state (the race checker's clock at the last record), or NULL (observe.h)
  uint64_t held;  // CPU: nonzero = recorded during hold number `held` (ct_cpu_events_hold)
  void *handle;   // cudaEvent_t on CUDA, NULL on the CPU
};

// Slot 0 is the CPU, slot 1 + i is cuda:i.
#define NSLOTS (1 + CT_MAX_CUDA_DEVICES)

static ct_stream default_streams[NSLOTS];
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;
static _Thread_local ct_stream *current_streams[NSLOTS]; // NULL = the default

static void defaults_init(void) {
  default_streams[0] = (ct_stream){ct_device_cpu(), true, 0, NULL};
  for (int i = 0; i < CT_MAX_CUDA_DEVICES; ++i)
    default_streams[1 + i] = (ct_stream){ct_device_cuda(i), true, 0, NULL};
}

static int slot_of(ct_device d) { return d.type == CT_CPU ? 0 : 1 + d.index; }

// CT_OK when d can have streams and events; else records why under `op`.
static int check_device(const char *op, ct_device d) {
  if (d.type == CT_CPU) return CT_OK;
  if (d.type != CT_CUDA) return ct_fail(CT_ERR_DEVICE, "%s: unknown device type %d", op, (int)d.type);
  if (!ct_cuda_is_available())
    return ct_fail(CT_ERR_UNAVAILABLE, "%s: cuda:%d asked for, but CUDA is unavailable: %s", op,
                   d.index, ct_cuda_unavailable_reason());
  int n = ct_cuda_device_count();
  if (d.index < 0 || d.index >= n)
    return ct_fail(CT_ERR_DEVICE, "%s: CUDA device index %d out of range (%d device%s)", op, d.index,
                   n, n == 1 ? "" : "s");
  return CT_OK;
}

#ifdef CT_HAVE_CUDA
// Makes `index` the thread's current CUDA device for the length of a call.
// Enters with any current device; guard_exit restores it.
typedef struct dev_guard {
  int prev;
  bool switched;
} dev_guard;

static int guard_enter(dev_guard *g, int index) {
  g->switched = false;
  CT_CUDA_CHECK(cudaGetDevice(&g->prev));
  if (g->prev != index) {
    CT_CUDA_CHECK(cudaSetDevice(index));
    g->switched = true;
  }
  return CT_OK;
}

static void guard_exit(const dev_guard *g) {
  if (g->switched) (void)cudaSetDevice(g->prev);
}

// Records a failed CUDA call named `call` (for calls whose result was kept
// in a variable so that the device could be restored first).
#define CT_CUDA_FAILED(e, call) ct_cuda_fail((int)(e), call, __FILE__, __LINE__)

static cudaStream_t cu_stream(const ct_stream *s) { return (cudaStream_t)s->handle; }
static cudaEvent_t cu_event(const ct_event *e) { return (cudaEvent_t)e->handle; }
#endif

// The CPU event hold (stream.h's testing aid). hold_gen counts holds begun;
// holding says whether the latest is still on. An event recorded during hold
// g is pending while that hold lasts (holding && hold_gen == g).
static atomic_uint_least64_t hold_gen;
static atomic_bool holding;

void ct_cpu_events_hold(bool on) {
  if (on && !atomic_load(&holding)) atomic_fetch_add(&hold_gen, 1);
  atomic_store(&holding, on);
}

static bool cpu_event_pending(const ct_event *e) {
  return e->held && atomic_load(&holding) && atomic_load(&hold_gen) == e->held;
}

static double monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

// ---- streams -----------------------------------------------------------------------

ct_stream *ct_default_stream(ct_device d) {
  if (check_device("ct_default_stream", d)) return NULL;
  (void)pthread_once(&defaults_once, defaults_init);
  return &default_streams[slot_of(d)];
}

ct_stream *ct_current_stream(ct_device d) {
  if (check_device("ct_current_stream", d)) return NULL;
  ct_stream *s = current_streams[slot_of(d)];
  return s ? s : ct_default_stream(d);
}

int ct_set_stream(ct_stream *s) {
  if (!s) return ct_fail(CT_ERR_VALUE, "ct_set_stream: stream is NULL");
  int rc = check_device("ct_set_stream", s->device);
  if (rc) return rc;
  current_streams[slot_of(s->device)] = s->is_default ? NULL : s;
  return CT_OK;
}

// PyTorch supports this many priority levels (c10::cuda::max_compile_time_stream_priorities).
#define TORCH_STREAM_PRIORITIES 4

int ct_stream_priority_range(ct_device d, int *least, int *greatest) {
  if (!least || !greatest) return ct_fail(CT_ERR_VALUE, "ct_stream_priority_range: NULL argument");
  int rc = check_device("ct_stream_priority_range", d);
  if (rc) return rc;
  *least = *greatest = 0; // the CPU runs work as it is issued: one level
#ifdef CT_HAVE_CUDA
  if (d.type == CT_CUDA) {
    dev_guard g;
    rc = guard_enter(&g, d.index);
    if (rc) return rc;
    int lo = 0, hi = 0; // numerically: lo >= hi (lower = higher priority)
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    guard_exit(&g);
    if (e != cudaSuccess) return CT_CUDA_FAILED(e, "cudaDeviceGetStreamPriorityRange(&least, &greatest)");
    *least = lo;
    *greatest = hi > -TORCH_STREAM_PRIORITIES + 1 ? hi : -TORCH_STREAM_PRIORITIES + 1;
  }
#endif
  return CT_OK;
}

int ct_cuda_stream_priority_range(int *least, int *greatest) {
  if (!ct_cuda_is_available())
    return ct_fail(CT_ERR_UNAVAILABLE, "ct_cuda_stream_priority_range: CUDA is unavailable: %s",
                   ct_cuda_unavailable_reason());
  return ct_stream_priority_range(ct_device_cuda(ct_cuda_current_device()), least, greatest);
}

int ct_stream_priority(const ct_stream *s) { return s ? s->priority : 0; }

#ifdef CT_HAVE_CUDA
static int cuda_stream_create(ct_stream *s) {
  dev_guard g;
  int rc = guard_enter(&g, s->device.index);
  if (rc) return rc;
  cudaStream_t h = NULL;
  cudaError_t e = cudaStreamCreateWithPriority(&h, cudaStreamNonBlocking, s->priority);
  s->handle = h;
  guard_exit(&g);
  if (e != cudaSuccess) return CT_CUDA_FAILED(e, "cudaStreamCreateWithPriority(&h, cudaStreamNonBlocking, priority)");
  return CT_OK;
}
#endif

ct_stream *ct_stream_create(ct_device d, int priority) {
  if (check_device("ct_stream_create", d)) return NULL;
  ct_stream *s = calloc(1, sizeof *s);
  if (!s) {
    ct_fail(CT_ERR_OOM, "ct_stream_create: out of host memory");
    return NULL;
  }
  s->device = d;
  int least = 0, greatest = 0; // clamp into the device's range
  if (ct_stream_priority_range(d, &least, &greatest) != CT_OK) {
    free(s);
    return NULL;
  }
  s->priority = priority > least ? least : priority < greatest ? greatest : priority;
#ifdef CT_HAVE_CUDA
  if (d.type == CT_CUDA && cuda_stream_create(s)) {
    free(s);
    return NULL;
  }
#endif
  return s;
}

void ct_stream_free(ct_stream *s) {
  if (!s || s->is_default) return;
  int slot = slot_of(s->device);
  if (current_streams[slot] == s) current_streams[slot] = NULL;
#ifdef CT_HAVE_CUDA
  if (s->device.type == CT_CUDA && s->handle) {
    dev_guard g;
    if (guard_enter(&g, s->device.index) == CT_OK) {
      // Finish the stream's queued work first. cudaStreamDestroy returns at
      // once and lets that work run on, but the blocks the caching allocator
      // cut for this stream pass to the default stream below
      // (cti_alloc_stream_retire), which must not be handed memory that the
      // old stream's kernels are still reading or writing.
      cudaError_t es = cudaStreamSynchronize(cu_stream(s));
      cudaError_t e = cudaStreamDestroy(cu_stream(s));
      guard_exit(&g);
      if (es != cudaSuccess) (void)CT_CUDA_FAILED(es, "cudaStreamSynchronize(s)");
      else if (e != cudaSuccess) (void)CT_CUDA_FAILED(e, "cudaStreamDestroy(s)");
    }
  }
#endif
  cti_observe_stream_destroyed(s);
  cti_alloc_stream_retire(s, ct_default_stream(s->device));
  free(s);
}

ct_device ct_stream_device(const ct_stream *s) { return s ? s->device : ct_device_cpu(); }

void *ct_stream_handle(const ct_stream *s) { return s ? s->handle : NULL; }

// Waits for s. Not a sync point itself: ct_stream_synchronize is; the
// runtime's own waits (ct_stream_wait_stream from the CPU) call this.
static int stream_sync(ct_stream *s) {
  cti_observe_host_waits(s); // (a failure below is reported anyway)
  if (s->device.type == CT_CPU) return CT_OK;
#ifdef CT_HAVE_CUDA
  dev_guard g;
  int rc = guard_enter(&g, s->device.index);
  if (rc) return rc;
  cudaError_t e = cudaStreamSynchronize(cu_stream(s)); // NULL: this device's legacy stream
  // The stream's work is done: a kernel's deferred error (async_error.h) surfaces here.
  rc = e == cudaSuccess ? cti_cuda_async_check(s->device.index, "ct_stream_synchronize") : CT_OK;
  guard_exit(&g);
  if (e != cudaSuccess) return CT_CUDA_FAILED(e, "cudaStreamSynchronize(s)");
  return rc;
#else
  return check_device("ct_stream_synchronize", s->device);
#endif
}

// A sync point (sync_debug.h), as torch.cuda.Stream.synchronize is one.
int ct_stream_synchronize(ct_stream *s) {
  if (!s) return ct_fail(CT_ERR_VALUE, "ct_stream_synchronize: stream is NULL");
  int rc = cti_sync_begin("ct_stream_synchronize", s->device, CTI_SYNC_REFUSE_IN_CAPTURE | CTI_SYNC_REPORT);
  if (rc) return rc;
  rc = stream_sync(s);
  cti_sync_end();
  return rc;
}

#ifdef CT_HAVE_CUDA
// Turns a cudaStreamQuery/cudaEventQuery result into "done?". Not ready is
// not an error (and is cleared, as PyTorch does); a real error is recorded
// and answered "done", since no more work will complete, so that a polling
// loop ends and its next synchronize reports the failure.
static bool query_result(cudaError_t e, const char *call) {
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  (void)CT_CUDA_FAILED(e, call);
  return true;
}
#endif

bool ct_stream_query(ct_stream *s) {
  if (!s) {
    ct_fail(CT_ERR_VALUE, "ct_stream_query: stream is NULL");
    return true;
  }
  bool done = true;
#ifdef CT_HAVE_CUDA
  if (s->device.type == CT_CUDA) {
    dev_guard g;
    if (guard_enter(&g, s->device.index)) return true;
    cudaError_t e = cudaStreamQuery(cu_stream(s));
    guard_exit(&g);
    done = query_result(e, "cudaStreamQuery(s)");
  }
#endif
  if (done) cti_observe_host_waits(s); // "done" tells the host what a synchronize would
  return done;
}

int ct_stream_wait_event(ct_stream *s, ct_event *e) {
  if (!s || !e) return ct_fail(CT_ERR_VALUE, "ct_stream_wait_event: stream or event is NULL");
  cti_observe_wait_event(s, &e->obs); // also where nothing below has to wait
  // A CPU event marks work that has already run, and an unrecorded event
  // marks nothing: nothing to wait for (cudaStreamWaitEvent agrees).
  if (e->device.type == CT_CPU || !e->recorded) return CT_OK;
#ifdef CT_HAVE_CUDA
  if (s->device.type == CT_CPU) return ct_event_synchronize(e); // the host is the CPU stream
  dev_guard g;
  int rc = guard_enter(&g, s->device.index);
  if (rc) return rc;
  cudaError_t err = cudaStreamWaitEvent(cu_stream(s), cu_event(e), 0); // may cross devices
  guard_exit(&g);
  if (err != cudaSuccess) return CT_CUDA_FAILED(err, "cudaStreamWaitEvent(s, e, 0)");
  return CT_OK;
#else
  return check_device("ct_stream_wait_event", e->device);
#endif
}

int ct_stream_wait_stream(ct_stream *s, ct_stream *other) {
  if (!s || !other) return ct_fail(CT_ERR_VALUE, "ct_stream_wait_stream: stream is NULL");
  cti_observe_wait_stream(s, other); // also where nothing below has to wait
  if (other->device.type == CT_CPU || s == other) return CT_OK; // nothing pending
  if (s->device.type == CT_CPU) return stream_sync(other); // the host is the CPU's stream
  // As torch.cuda.Stream.wait_stream: an event recorded on `other` now.
  ct_event *e = ct_event_create(other->device, false);
  if (!e) return ct_last_status();
  int rc = ct_event_record(e, other);
  if (rc == CT_OK) rc = ct_stream_wait_event(s, e);
  ct_event_free(e); // CUDA keeps the event alive until the wait resolves
  return rc;
}

// ---- events ---------------------------------------------------------------------

ct_event *ct_event_create(ct_device d, bool enable_timing) {
  if (check_device("ct_event_create", d)) return NULL;
  ct_event *e = calloc(1, sizeof *e);
  if (!e) {
    ct_fail(CT_ERR_OOM, "ct_event_create: out of host memory");
    return NULL;
  }
  e->device = d;
  e->enable_timing = enable_timing;
#ifdef CT_HAVE_CUDA
  if (d.type == CT_CUDA) {
    dev_guard g;
    if (guard_enter(&g, d.index)) {
      free(e);
      return NULL;
    }
    cudaEvent_t h = NULL;
    cudaError_t err =
        cudaEventCreateWithFlags(&h, enable_timing ? cudaEventDefault : cudaEventDisableTiming);
    guard_exit(&g);
    if (err != cudaSuccess) {
      (void)CT_CUDA_FAILED(err, "cudaEventCreateWithFlags(&h, flags)");
      free(e);
      return NULL;
    }
    e->handle = h;
  }
#endif
  return e;
}

void ct_event_free(ct_event *e) {
  if (!e) return;
  free(e->obs); // an observer's state, one block (observe.h)
#ifdef CT_HAVE_CUDA
  if (e->device.type == CT_CUDA && e->handle) {
    dev_guard g;
    if (guard_enter(&g, e->device.index) == CT_OK) {
      cudaError_t err = cudaEventDestroy(cu_event(e));
      guard_exit(&g);
      if (err != cudaSuccess) (void)CT_CUDA_FAILED(err, "cudaEventDestroy(e)");
    }
  }
#endif
  free(e);
}

int ct_event_record(ct_event *e, ct_stream *s) {
  if (!e) return ct_fail(CT_ERR_VALUE, "ct_event_record: event is NULL");
  if (!s) {
    s = ct_current_stream(e->device);
    if (!s) return ct_last_status();
  }
  if (!ct_device_eq(e->device, s->device)) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE, "ct_event_record: event on %s cannot be recorded on a stream of %s",
                   ct_device_str(e->device, a), ct_device_str(s->device, b));
  }
  if (e->device.type == CT_CPU) {
    e->host_ms = monotonic_ms();
    e->held = atomic_load(&holding) ? atomic_load(&hold_gen) : 0;
    e->recorded = true;
    cti_observe_event_record(&e->obs, s);
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  dev_guard g;
  int rc = guard_enter(&g, e->device.index);
  if (rc) return rc;
  cudaError_t err = cudaEventRecord(cu_event(e), cu_stream(s));
  guard_exit(&g);
  if (err != cudaSuccess) return CT_CUDA_FAILED(err, "cudaEventRecord(e, s)");
  e->recorded = true;
  cti_observe_event_record(&e->obs, s);
  return CT_OK;
#else
  return check_device("ct_event_record", e->device);
#endif
}

int ct_event_synchronize(ct_event *e) {
  if (!e) return ct_fail(CT_ERR_VALUE, "ct_event_synchronize: event is NULL");
  // A wait written on purpose: refused during capture, not reported (sync_debug.h).
  int rc = cti_sync_begin("ct_event_synchronize", e->device, CTI_SYNC_REFUSE_IN_CAPTURE);
  if (rc) return rc;
  cti_sync_end(); // nothing below is a sync point
  cti_observe_host_waits_event(&e->obs);
  if (e->device.type == CT_CPU || !e->recorded) return CT_OK;
#ifdef CT_HAVE_CUDA
  dev_guard g;
  rc = guard_enter(&g, e->device.index);
  if (rc) return rc;
  cudaError_t err = cudaEventSynchronize(cu_event(e));
  // The work before e is done: a kernel's deferred error surfaces here.
  rc = err == cudaSuccess ? cti_cuda_async_check(e->device.index, "ct_event_synchronize") : CT_OK;
  guard_exit(&g);
  if (err != cudaSuccess) return CT_CUDA_FAILED(err, "cudaEventSynchronize(e)");
  return rc;
#else
  return check_device("ct_event_synchronize", e->device);
#endif
}

bool ct_event_query(ct_event *e) {
  if (!e) {
    ct_fail(CT_ERR_VALUE, "ct_event_query: event is NULL");
    return true;
  }
  if (!e->recorded) return true;
  bool done = e->device.type != CT_CPU || !cpu_event_pending(e);
#ifdef CT_HAVE_CUDA
  if (e->device.type == CT_CUDA) {
    dev_guard g;
    if (guard_enter(&g, e->device.index)) return true;
    cudaError_t err = cudaEventQuery(cu_event(e));
    guard_exit(&g);
    done = query_result(err, "cudaEventQuery(e)");
  }
#endif
  if (done) cti_observe_host_waits_event(&e->obs);
  return done;
}

int ct_event_elapsed_time(ct_event *start, ct_event *end, float *ms) {
  if (!start || !end || !ms)
    return ct_fail(CT_ERR_VALUE, "ct_event_elapsed_time: start, end and ms must not be NULL");
  if (!ct_device_eq(start->device, end->device)) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE,
                   "ct_event_elapsed_time: expected both events on the same device, got %s and %s",
                   ct_device_str(start->device, a), ct_device_str(end->device, b));
  }
  if (!start->enable_timing || !end->enable_timing)
    return ct_fail(CT_ERR_VALUE, "ct_event_elapsed_time: Both events must be created with argument "
                                 "'enable_timing=True'.");
  if (!start->recorded || !end->recorded)
    return ct_fail(CT_ERR_VALUE,
                   "ct_event_elapsed_time: Both events must be recorded before calculating elapsed time.");
  if (start->device.type == CT_CPU) {
    *ms = (float)(end->host_ms - start->host_ms);
    return CT_OK;
  }
#ifdef CT_HAVE_CUDA
  int rc = ct_event_synchronize(start);
  if (rc == CT_OK) rc = ct_event_synchronize(end);
  if (rc) return rc;
  dev_guard g;
  rc = guard_enter(&g, start->device.index);
  if (rc) return rc;
  float t = 0.0f;
  cudaError_t err = cudaEventElapsedTime(&t, cu_event(start), cu_event(end));
  guard_exit(&g);
  if (err != cudaSuccess) return CT_CUDA_FAILED(err, "cudaEventElapsedTime(&ms, start, end)");
  *ms = t;
  return CT_OK;
#else
  return check_device("ct_event_elapsed_time", start->device);
#endif
}
