// SPDX-License-Identifier: MIT
//
// prof: the profiler's session, its per-thread event buffers and ranges.
//
// Invariant: each thread appends only to its own buffer, under that
// buffer's mutex (uncontended except while a cycle is collected), and keeps
// its open ranges on a thread-local stack of frames; a frame remembers the
// session (generation) and the buffer slot it opened, so a range opened in
// one session is never closed into another. A record is appended when its
// range begins (so parents precede children) and completed when it ends.
//
// Lifetime: the hooks enter by raising `inflight` and then reading the live
// session; ct_profiler_stop clears the live session and waits for inflight
// to drop to zero, so after stop no thread touches the session's buffers
// and ct_profiler_free may free them.
//
// Schedule: torch.profiler.schedule's rule (action_at). Recording is on in
// the warmup and active steps; a cycle's events are those that begin and end
// inside its active window, collected when the window closes.
#define _GNU_SOURCE // syscall(SYS_gettid)

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "observe.h"
#include "prof_internal.h"
#include "stream.h"

#if defined(CT_HAVE_CUDA) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define CTI_HAVE_NVTX 1
#endif
#endif
#ifdef CTI_HAVE_NVTX
static void nvtx_push(const char *name) { nvtxRangePushA(name); }
static void nvtx_pop(void) { nvtxRangePop(); }
#else
static void nvtx_push(const char *name) { (void)name; }
static void nvtx_pop(void) {}
#endif

atomic_int cti_prof_on;
static atomic_bool time_cpu_ops; // cti_prof_time_cpu_ops_

void cti_prof_time_cpu_ops_(bool on) { atomic_store(&time_cpu_ops, on); }
static _Atomic(ct_profiler *) live; // the session hooks record into, or NULL
static atomic_int inflight;         // hooks between their entry and exit
static atomic_uint_least64_t generations;
pthread_mutex_t cti_prof_sessions_mu = PTHREAD_MUTEX_INITIALIZER;

// ---- the thread's frames ----------------------------------------------------------------
#define MAX_FRAMES 128
typedef struct frame {
  uint64_t gen; // session generation, 0 when nothing was recorded
  int idx;      // slot in the thread's buffer, or -1
  bool nvtx;    // pushed to NVTX
} frame;

static _Thread_local struct {
  uint64_t gen;     // the session `buf` belongs to
  cti_prof_buf *buf;
  frame stack[MAX_FRAMES];
  int depth;
  int overflow;     // user ranges begun past MAX_FRAMES
} T;

double cti_prof_now_us(const ct_profiler *p) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec - p->t0_ns) * 1e-3;
}

static int thread_id(void) { return (int)syscall(SYS_gettid); }

static void enter(void) { atomic_fetch_add(&inflight, 1); }
static void leave(void) { atomic_fetch_sub(&inflight, 1); }

// This thread's buffer in session p, made and registered on first use.
static cti_prof_buf *my_buf(ct_profiler *p) {
  if (T.gen == p->gen && T.buf) return T.buf;
  cti_prof_buf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->tid = thread_id();
  pthread_mutex_lock(&cti_prof_sessions_mu);
  b->next = p->bufs;
  p->bufs = b;
  pthread_mutex_unlock(&cti_prof_sessions_mu);
  T.gen = p->gen;
  T.buf = b;
  return b;
}

// The slot of the innermost range this thread recorded in session p, or -1.
static int open_parent(const ct_profiler *p) {
  for (int i = T.depth - 1; i >= 0; --i)
    if (T.stack[i].gen == p->gen && T.stack[i].idx >= 0) return T.stack[i].idx;
  return -1;
}

// Copies a C string into a fixed field, cut to fit (snprintf costs more
// than the whole rest of a record on the profiler's hot path).
static void copy_name(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

// Appends a record (zeroed, with its name, kind, parent, device, stream,
// shapes and the time now), all under one lock; its slot or -1.
static int append(const ct_profiler *p, cti_prof_buf *b, ct_profiler_event_kind kind, const char *name,
                  int parent, ct_device dev, ct_stream *s, const char *shapes) {
  pthread_mutex_lock(&b->mu);
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 256;
    cti_prof_rec *r = realloc(b->recs, (size_t)cap * sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&b->mu);
      return -1;
    }
    b->recs = r;
    b->cap = cap;
  }
  int idx = b->n++;
  cti_prof_rec *r = &b->recs[idx];
  memset(r, 0, sizeof *r);
  copy_name(r->e.name, sizeof r->e.name, name);
  if (shapes) copy_name(r->e.shapes, sizeof r->e.shapes, shapes);
  r->e.kind = kind;
  r->e.tid = b->tid;
  r->e.parent = parent;
  r->e.correlation = -1;
  r->e.device = dev;
  r->stream = s;
  r->e.ts_us = cti_prof_now_us(p);
  pthread_mutex_unlock(&b->mu);
  return idx;
}

static bool push(frame f) {
  if (T.depth >= MAX_FRAMES) return false;
  T.stack[T.depth++] = f;
  return true;
}

int cti_prof_range_begin(ct_profiler_event_kind kind, const char *name, const char *shapes,
                         ct_device dev, ct_stream *s) {
  if (T.depth >= MAX_FRAMES) return -1;
  enter();
  ct_profiler *p = atomic_load(&live);
  int token = -1;
  cti_prof_buf *b = p && CTI_PROF_ON ? my_buf(p) : NULL;
  const char *sh = shapes && p && p->o.record_shapes ? shapes : NULL;
  int idx = b ? append(p, b, kind, name, open_parent(p), dev, s, sh) : -1;
  if (idx >= 0) {
    bool timed = kind == CT_EVENT_OP && s && (p->o.activities & CT_ACTIVITY_CUDA) &&
                 (dev.type == CT_CUDA || atomic_load(&time_cpu_ops));
    if (timed) { // outside the lock: the event calls the CUDA runtime
      ct_event *e = ct_event_create(dev, true);
      if (e && ct_event_record(e, s) != CT_OK) ct_event_free(e), e = NULL;
      pthread_mutex_lock(&b->mu);
      b->recs[idx].ev0 = e;
      pthread_mutex_unlock(&b->mu);
    }
    nvtx_push(name);
    token = T.depth;
    push((frame){p->gen, idx, true});
  }
  leave();
  return token;
}

// Pops the top frame; completes its record when it belongs to the live session.
static void pop_one(void) {
  frame f = T.stack[--T.depth];
  if (f.nvtx) nvtx_pop();
  if (f.idx < 0) return;
  enter();
  ct_profiler *p = atomic_load(&live);
  if (p && p->gen == f.gen && T.gen == f.gen && T.buf) {
    cti_prof_buf *b = T.buf;
    pthread_mutex_lock(&b->mu);
    cti_prof_rec *r = &b->recs[f.idx];
    if (!r->ev0) { // the usual case: one lock
      r->e.dur_us = cti_prof_now_us(p) - r->e.ts_us;
      r->done = true;
      pthread_mutex_unlock(&b->mu);
    } else { // the end event first, outside the lock (it calls the CUDA runtime)
      ct_stream *s = r->stream;
      pthread_mutex_unlock(&b->mu);
      ct_event *e1 = ct_event_create(ct_stream_device(s), true);
      if (e1 && ct_event_record(e1, s) != CT_OK) ct_event_free(e1), e1 = NULL;
      double t = cti_prof_now_us(p);
      pthread_mutex_lock(&b->mu);
      r = &b->recs[f.idx];
      r->ev1 = e1;
      r->e.dur_us = t - r->e.ts_us;
      r->done = true;
      pthread_mutex_unlock(&b->mu);
    }
  }
  leave();
}

void cti_prof_end(int token) {
  if (token < 0 || token >= T.depth) return;
  while (T.depth > token) pop_one();
}

int cti_prof_module_begin(const char *kind, const char *what, const ct_tensor *x) {
  char name[64], shapes[96] = "";
  if (what) snprintf(name, sizeof name, "%s.%s", kind, what);
  else snprintf(name, sizeof name, "%s", kind);
  if (x && atomic_load_explicit(&cti_prof_shapes_on, memory_order_relaxed)) {
    char s[80];
    snprintf(shapes, sizeof shapes, "[%s]", cti_prof_shape_str(ct_shape_of(x), s, sizeof s));
  }
  return cti_prof_range_begin(CT_EVENT_MODULE, name, shapes, x ? ct_device_of(x) : ct_device_cpu(), NULL);
}

const char *cti_prof_shape_str(ct_shape s, char *buf, size_t len) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < s.ndim && k < len; ++i)
    k += (size_t)snprintf(buf + k, len - k, "%s%" PRId64, i ? ", " : "", s.d[i]);
  if (k < len) snprintf(buf + k, len - k, "]");
  return buf;
}

void cti_prof_memory(ct_device d, const void *ptr, int64_t bytes, size_t total_allocated,
                     size_t total_reserved) {
  enter();
  ct_profiler *p = atomic_load(&live);
  cti_prof_buf *b = p && CTI_PROF_ON && p->o.profile_memory ? my_buf(p) : NULL;
  int idx = b ? append(p, b, CT_EVENT_MEMORY, "[memory]", open_parent(p), d, NULL, NULL) : -1;
  if (idx >= 0) {
    pthread_mutex_lock(&b->mu);
    cti_prof_rec *r = &b->recs[idx];
    r->e.bytes = bytes;
    r->e.total_allocated = total_allocated;
    r->e.total_reserved = total_reserved;
    r->e.addr = (uint64_t)(uintptr_t)ptr;
    r->done = true;
    pthread_mutex_unlock(&b->mu);
  }
  leave();
}

// ---- user ranges ------------------------------------------------------------------------------
void ct_record_function_begin(const char *name) {
  if (!name) name = "(null)";
  if (T.depth >= MAX_FRAMES) {
    T.overflow++;
    return;
  }
  int token = CTI_PROF_ON ? cti_prof_range_begin(CT_EVENT_USER, name, NULL, ct_device_cpu(), NULL) : -1;
  if (token < 0) { // not recorded: still a frame, so the matching end finds it, and still NVTX
    nvtx_push(name);
    push((frame){0, -1, true});
  }
}

int ct_record_function_end(void) {
  if (T.overflow > 0) {
    T.overflow--;
    return CT_OK;
  }
  if (T.depth == 0)
    return ct_fail(CT_ERR_VALUE, "ct_record_function_end: no range is open on this thread "
                   "(every ct_record_function_begin takes one end, on the same thread)");
  pop_one();
  return CT_OK;
}

bool ct_profiler_enabled(void) { return CTI_PROF_ON != 0; }

bool ct_profiler_has_nvtx(void) {
#ifdef CTI_HAVE_NVTX
  return true;
#else
  return false;
#endif
}

// ---- the session ---------------------------------------------------------------------------
ct_profiler_options ct_profiler_defaults(void) {
  return (ct_profiler_options){.activities = CT_ACTIVITY_CPU | CT_ACTIVITY_CUDA};
}

enum { A_NONE, A_WARMUP, A_RECORD, A_SAVE };

static bool scheduled(const ct_profiler *p) { return p->o.schedule.active > 0; }

// torch.profiler.schedule's action for step `step`.
static int action_at(const ct_profiler_schedule *s, int64_t step) {
  if (step < s->skip_first) return A_NONE;
  step -= s->skip_first;
  int64_t cycle = (int64_t)s->wait + s->warmup + s->active;
  if (s->repeat > 0 && step / cycle >= s->repeat) return A_NONE;
  int64_t m = step % cycle;
  if (m < s->wait) return A_NONE;
  if (m < s->wait + s->warmup) return A_WARMUP;
  return m < cycle - 1 ? A_RECORD : A_SAVE;
}

static bool recording(int a) { return a == A_RECORD || a == A_SAVE; }

// Closes the active window: collects its events, then calls the handler.
static int close_window(ct_profiler *p) {
  p->win_end = cti_prof_now_us(p);
  int rc = cti_prof_collect(p);
  if (rc == CT_OK && p->o.on_trace_ready) p->o.on_trace_ready(p, p->o.ctx);
  return rc;
}

// The runtime's side (core/observe.h): the profiler's observer is attached
// exactly while cti_prof_on is set, so a program with no session recording
// pays the observers' one load per hook. A range opened while recording is
// closed through the observer even if recording stopped in between.
static const struct cti_backend *wrap(const char *op, ct_device d, const struct cti_backend *be) {
  (void)op, (void)d;
  return CTI_PROF_ON ? cti_prof_backend(be) : be;
}

static int range_begin(const char *kind, const char *what, const ct_tensor *x) {
  return CTI_PROF_ON ? cti_prof_module_begin(kind, what, x) : -1;
}

static const cti_observer observer = {.name = "the profiler",
                                      .slot = 1,
                                      .wrap = wrap,
                                      .memory = cti_prof_memory,
                                      .range_begin = range_begin,
                                      .range_end = cti_prof_end};

static void set_on(bool on) {
  atomic_store(&cti_prof_on, on);
  if (on) (void)cti_observer_attach(&observer);
  else cti_observer_detach(&observer);
}

static int transition(ct_profiler *p, int prev, int cur) {
  int rc = CT_OK;
  if (recording(prev) && (prev == A_SAVE || !recording(cur))) rc = close_window(p);
  if (recording(cur) && prev != A_RECORD) p->win_start = cti_prof_now_us(p);
  set_on(cur != A_NONE);
  return rc;
}

static void open_step(ct_profiler *p) {
  char name[48];
  snprintf(name, sizeof name, "ProfilerStep#%" PRId64, p->step_num);
  p->step_token = cti_prof_range_begin(CT_EVENT_STEP, name, NULL, ct_device_cpu(), NULL);
}

static void close_step(ct_profiler *p) {
  if (p->step_token >= 0) cti_prof_end(p->step_token);
  p->step_token = -1;
}

// The device clocks' origin: each GPU idle, an event recorded on its default
// stream at a known host time; kernels are placed at that time plus the
// events' elapsed time.
static void device_bases(ct_profiler *p) {
  if (!(p->o.activities & CT_ACTIVITY_CUDA)) return;
  if (atomic_load(&time_cpu_ops)) {
    ct_device c = ct_device_cpu();
    int k = cti_prof_slot(c);
    p->base[k] = ct_event_create(c, true);
    // The origin's host time brackets the record: tried again (up to 64
    // times) until the bracket is under a quarter of a microsecond, its
    // midpoint kept (the event holds the last record), so a preemption
    // between the record and the clock read does not shift every CPU
    // "kernel" later than its op.
    double best = -1;
    for (int tries = 0; p->base[k] && tries < 64; ++tries) {
      const double t0 = cti_prof_now_us(p);
      if (ct_event_record(p->base[k], ct_default_stream(c)) != CT_OK) { best = -1; break; }
      const double t1 = cti_prof_now_us(p);
      best = t1 - t0, p->base_us[k] = 0.5 * (t0 + t1);
      if (best <= 0.25) break;
    }
    if (best < 0) ct_event_free(p->base[k]), p->base[k] = NULL;
  }
  if (!ct_cuda_is_available()) return;
  int n = ct_cuda_device_count();
  for (int i = 0; i < n && i < CT_MAX_CUDA_DEVICES; ++i) {
    ct_device d = ct_device_cuda(i);
    if (ct_cuda_synchronize(i) != CT_OK) continue;
    ct_event *e = ct_event_create(d, true);
    if (e && ct_event_record(e, ct_default_stream(d)) == CT_OK) {
      p->base[i] = e;
      p->base_us[i] = cti_prof_now_us(p);
    } else {
      ct_event_free(e);
    }
  }
}

ct_profiler *ct_profiler_start(const ct_profiler_options *o) {
  ct_profiler_options opts = o ? *o : ct_profiler_defaults();
  const ct_profiler_schedule *s = &opts.schedule;
  if (s->skip_first < 0 || s->wait < 0 || s->warmup < 0 || s->active < 0 || s->repeat < 0 ||
      (s->active == 0 && (s->wait || s->warmup || s->repeat || s->skip_first))) {
    ct_fail(CT_ERR_VALUE, "ct_profiler_start: bad schedule (skip_first=%d, wait=%d, warmup=%d, "
            "active=%d, repeat=%d): counts must be >= 0 and active >= 1 when any is set",
            s->skip_first, s->wait, s->warmup, s->active, s->repeat);
    return NULL;
  }
  if (!(opts.activities & (CT_ACTIVITY_CPU | CT_ACTIVITY_CUDA))) {
    ct_fail(CT_ERR_VALUE, "ct_profiler_start: no activity (give CT_ACTIVITY_CPU and/or CT_ACTIVITY_CUDA)");
    return NULL;
  }
  ct_profiler *p = calloc(1, sizeof *p);
  if (!p) {
    ct_fail(CT_ERR_OOM, "ct_profiler_start: out of host memory");
    return NULL;
  }
  p->o = opts;
  p->step_token = -1;
  p->win_end = INFINITY;
  p->win_start = -INFINITY;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  p->t0_ns = (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
  p->gen = atomic_fetch_add(&generations, 1) + 1;
  pthread_mutex_lock(&cti_prof_sessions_mu);
  bool busy = atomic_load(&live) != NULL;
  if (!busy) atomic_store(&live, p);
  pthread_mutex_unlock(&cti_prof_sessions_mu);
  if (busy) {
    free(p);
    ct_fail(CT_ERR_VALUE, "ct_profiler_start: a profiler session is already running "
            "(stop it with ct_profiler_stop first; sessions do not nest)");
    return NULL;
  }
  atomic_store(&cti_prof_shapes_on, opts.record_shapes);
  device_bases(p);
  p->action = scheduled(p) ? action_at(s, 0) : A_RECORD;
  transition(p, A_NONE, p->action);
  if (scheduled(p) && p->action != A_NONE) open_step(p);
  return p;
}

int ct_profiler_step(ct_profiler *p) {
  if (!p) return ct_fail(CT_ERR_VALUE, "ct_profiler_step: profiler is NULL");
  if (p->stopped) return ct_fail(CT_ERR_VALUE, "ct_profiler_step: the session was stopped");
  if (!scheduled(p)) {
    p->step_num++;
    return CT_OK;
  }
  close_step(p);
  int prev = p->action;
  p->step_num++;
  p->action = action_at(&p->o.schedule, p->step_num);
  int rc = transition(p, prev, p->action);
  if (p->action != A_NONE) open_step(p);
  return rc;
}

int ct_profiler_stop(ct_profiler *p) {
  if (!p) return ct_fail(CT_ERR_VALUE, "ct_profiler_stop: profiler is NULL");
  if (p->stopped) return CT_OK;
  close_step(p);
  int rc = recording(p->action) ? close_window(p) : CT_OK;
  pthread_mutex_lock(&cti_prof_sessions_mu);
  set_on(false);
  atomic_store(&cti_prof_shapes_on, 0);
  atomic_store(&live, NULL);
  pthread_mutex_unlock(&cti_prof_sessions_mu);
  while (atomic_load(&inflight) > 0) sched_yield(); // hooks already inside finish
  p->stopped = true;
  return rc;
}

void ct_profiler_free(ct_profiler *p) {
  if (!p) return;
  if (!p->stopped) (void)ct_profiler_stop(p);
  for (cti_prof_buf *b = p->bufs, *next; b; b = next) {
    next = b->next;
    for (int i = 0; i < b->n; ++i) {
      ct_event_free(b->recs[i].ev0);
      ct_event_free(b->recs[i].ev1);
    }
    pthread_mutex_destroy(&b->mu);
    free(b->recs);
    free(b);
  }
  for (int i = 0; i < CTI_PROF_SLOTS; ++i) ct_event_free(p->base[i]);
  free(p->ev);
  free(p);
}

const ct_profiler_event *ct_profiler_events(const ct_profiler *p, int *n) {
  if (n) *n = p ? p->nev : 0;
  return p ? p->ev : NULL;
}
