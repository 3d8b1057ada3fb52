// SPDX-License-Identifier: MIT
//
// sanitizer: the stream-ordering race checker (sanitizer.h has the model),
// an observer of the runtime (core/observe.h).
//
// Attachment: the observer is attached from the first time the checker is
// switched on (ct_sanitizer_set_mode, or CT_STREAM_SANITIZER read when the
// program starts) or names a tensor or a stream, and stays attached: it
// keeps records on storages and streams whose end it must see even while
// off (each hook then returns at once, as before). A program that never
// turns it on pays the observers' one load per hook.
//
// Invariant: while the sanitizer is on, for every registered stream s,
// streams[s].vc.c[a] is the count of the last op on stream a known to come
// before anything issued on s from now on (vc.c[s] is s's own count); `host`
// is the same for the host's knowledge, and every op learns it before it is
// counted. Every tracked storage's record holds its last write and the reads
// since, each as (stream, count, op). All of it is guarded by one mutex;
// the mode is an atomic read without it.
//
// Limits, said once: at most MAX_STREAMS streams are ever registered (ids
// are not reused, so counts stay meaningful after a stream is destroyed);
// past that, ops on new streams go unchecked and one notice says so. A
// storage keeps the reads of at most MAX_READS streams since its last write
// (the oldest is dropped: a race could be missed, none invented).
#define _POSIX_C_SOURCE 200809L // snprintf, getenv

#include "sanitizer.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "observe.h"
#include "san_hooks.h"

#define MAX_STREAMS 128
#define MAX_READS 8
#define NAME_MAX_ 32
#define OP_MAX 32
#define NONE 0xFFFF
#define ALLOCATION "(allocation)" // the op of an allocation's write

typedef struct vclock {
  uint32_t c[MAX_STREAMS];
} vclock;

typedef struct stream_ent {
  const ct_stream *s; // NULL once destroyed
  ct_device dev;
  bool is_default;
  char name[NAME_MAX_];
  vclock vc;
} stream_ent;

typedef struct access {
  uint16_t stream; // NONE: no access
  uint32_t at;     // the stream's count for the op
  char op[OP_MAX];
} access;

struct cti_san_rec {
  char name[NAME_MAX_];
  uint32_t gen;   // the generation it was written in (see `generation`)
  uint16_t owner; // the stream the storage was allocated for; NONE if unknown
  access write;
  access reads[MAX_READS];
  int nreads;
  uint16_t recorded[MAX_READS]; // streams named by ct_record_stream
  int nrecorded;
  // A graph's accesses (see "graphs" below): the last capture that used the
  // storage (0: none), whether it wrote it, and the op.
  uint32_t graph;
  bool graph_writes;
  char graph_op[OP_MAX];
  // every live record, for a replay to find its graph's storages
  cti_storage *st;
  struct cti_san_rec *prev, *next;
};
typedef struct cti_san_rec rec;

static atomic_int mode = -1; // -1: not read from the environment yet
// Counts the times the sanitizer was turned on. While it is off no wait is
// seen, so a record written before that is stale: rec_of forgets a record of
// an older generation (a race across the gap is missed, none is invented).
static atomic_uint generation = 1; // 0 marks a record not yet initialized
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static stream_ent streams[MAX_STREAMS];
static int nstreams;
static bool full_noted;
static vclock host;
static atomic_uint_least64_t nreports;
static char last[1024];
static _Thread_local char last_copy[1024];
static rec *live;              // the records of live storages, linked
static uint32_t ncaptures;     // captures begun (a capture's id is its number)
static _Thread_local const ct_stream *cap_stream; // the stream this thread captures on, or NULL
static _Thread_local uint32_t cap_id;

// ---- mode -----------------------------------------------------------------------------------------
static int current_mode(void) {
  int m = atomic_load(&mode);
  if (m >= 0) return m;
  const char *env = getenv("CT_STREAM_SANITIZER");
  int want = env && (env[0] == '1' || env[0] == '2') && env[1] == '\0' ? env[0] - '0' : 0;
  int expected = -1;
  atomic_compare_exchange_strong(&mode, &expected, want);
  return atomic_load(&mode);
}

bool cti_san_on(void) { return current_mode() != CT_SANITIZER_OFF; }

static const cti_observer observer; // the hooks, at the end of this file
static void attach(void) { (void)cti_observer_attach(&observer); }

// CT_STREAM_SANITIZER is read when the program starts (the build links this
// file into every program, CMakeLists.txt's cti_sanitizer_linked).
void cti_sanitizer_linked(void) {}
__attribute__((constructor)) static void from_environment(void) {
  if (cti_san_on()) attach();
}

int ct_sanitizer_set_mode(int m) {
  if (m < CT_SANITIZER_OFF || m > CT_SANITIZER_ERROR)
    return ct_fail(CT_ERR_VALUE, "ct_sanitizer_set_mode: expected 0 (off), 1 (warn) or 2 (error), got %d", m);
  if (m != CT_SANITIZER_OFF) attach();
  int was = atomic_exchange(&mode, m);
  if (was <= CT_SANITIZER_OFF && m != CT_SANITIZER_OFF) atomic_fetch_add(&generation, 1);
  return CT_OK;
}

int ct_sanitizer_mode(void) { return current_mode(); }

uint64_t ct_sanitizer_reports(void) { return atomic_load(&nreports); }

const char *ct_sanitizer_last_report(void) {
  pthread_mutex_lock(&mu);
  memcpy(last_copy, last, sizeof last);
  pthread_mutex_unlock(&mu);
  return last_copy;
}

// ---- streams and clocks (callers hold mu) ------------------------------------------------------
static void join(vclock *into, const vclock *from) {
  for (int i = 0; i < nstreams; ++i)
    if (from->c[i] > into->c[i]) into->c[i] = from->c[i];
}

// What stream id knows before its next op: everything the host has waited
// for, and, for a GPU stream, every op issued so far on a CPU stream (CPU
// work is done when issued, so a GPU op issued later comes after it). CPU
// streams do not learn each other's work this way: a CPU run models them as a
// GPU's streams, so that it shows the races a GPU run could have.
static void learn(int id) {
  stream_ent *e = &streams[id];
  join(&e->vc, &host);
  if (e->dev.type == CT_CPU) return;
  for (int i = 0; i < nstreams; ++i)
    if (streams[i].dev.type == CT_CPU && streams[i].vc.c[i] > e->vc.c[i]) e->vc.c[i] = streams[i].vc.c[i];
}

// The id of s, registering it when `add`; -1 when unknown or the table is full.
static int stream_id(const ct_stream *s, bool add) {
  if (!s) return -1;
  for (int i = 0; i < nstreams; ++i)
    if (streams[i].s == s) return i;
  if (!add) return -1;
  if (nstreams == MAX_STREAMS) {
    if (!full_noted) fprintf(stderr, "sanitizer: more than %d streams; ops on new ones go unchecked\n", MAX_STREAMS);
    full_noted = true;
    return -1;
  }
  stream_ent *e = &streams[nstreams];
  memset(e, 0, sizeof *e);
  e->s = s;
  e->dev = ct_stream_device(s);
  e->is_default = ct_default_stream(e->dev) == s;
  return nstreams++;
}

static const char *stream_label(int id, char *buf, size_t n) {
  char dev[CT_DEVICE_STR_MAX];
  const stream_ent *e = &streams[id];
  ct_device_str(e->dev, dev);
  if (e->name[0]) snprintf(buf, n, "stream '%s' (%s)", e->name, dev);
  else if (e->is_default) snprintf(buf, n, "the default stream (%s)", dev);
  else snprintf(buf, n, "stream #%d (%s)", id, dev);
  return buf;
}

static const char *short_label(int id, char *buf, size_t n) {
  const stream_ent *e = &streams[id];
  if (e->name[0]) snprintf(buf, n, "%s", e->name);
  else if (e->is_default) snprintf(buf, n, "the default stream");
  else snprintf(buf, n, "#%d", id);
  return buf;
}

static const char *tensor_label(const rec *r, const ct_tensor *t, char *buf, size_t n) {
  char shape[96], dev[CT_DEVICE_STR_MAX];
  if (!t) { // a replay knows the storage only
    if (r->name[0]) snprintf(buf, n, "tensor '%s'", r->name);
    else snprintf(buf, n, "the tensor at %p (%zu bytes on %s)", r->st->data, r->st->nbytes,
                  ct_device_str(r->st->device, dev));
    return buf;
  }
  ct_shape_str(ct_shape_of(t), shape, sizeof shape);
  ct_device_str(ct_device_of(t), dev);
  if (r->name[0]) snprintf(buf, n, "tensor '%s' (%s %s on %s)", r->name, ct_dtype_name(ct_dtype_of(t)), shape, dev);
  else snprintf(buf, n, "tensor at %p (%s %s on %s)", ct_data_ptr(t), ct_dtype_name(ct_dtype_of(t)), shape, dev);
  return buf;
}

// ---- records (callers hold mu) -------------------------------------------------------------------
static rec *rec_of(const ct_tensor *t) {
  cti_storage *st = t->storage;
  if (!st->obs) {
    rec *n = calloc(1, sizeof(rec));
    if (!n) return NULL; // untracked: nothing is invented
    n->st = st;
    n->next = live;
    if (live) live->prev = n;
    live = n;
    st->obs = n;
  }
  rec *r = st->obs;
  unsigned g = atomic_load(&generation);
  if (r->gen != g) { // new, or written before the sanitizer was last off
    char name[NAME_MAX_];
    rec *prev = r->prev, *next = r->next;
    memcpy(name, r->name, sizeof name);
    memset(r, 0, sizeof *r);
    memcpy(r->name, name, sizeof name);
    r->st = st;
    r->prev = prev;
    r->next = next;
    r->gen = g;
    r->owner = NONE;
    r->write.stream = NONE;
  }
  return r;
}

static void set_access(access *a, int stream, uint32_t at, const char *op) {
  a->stream = (uint16_t)stream;
  a->at = at;
  snprintf(a->op, sizeof a->op, "%s", op);
}

// Formats the report of `op` on stream id racing with access `prev` of r.
static void describe(char *msg, size_t n, const char *op, bool writes, const rec *r, const ct_tensor *t,
                     int id, const access *prev, bool prev_write) {
  char tl[200], me[80], other[80], ms[40], os[40];
  tensor_label(r, t, tl, sizeof tl);
  stream_label(id, me, sizeof me);
  stream_label(prev->stream, other, sizeof other);
  short_label(id, ms, sizeof ms);
  short_label(prev->stream, os, sizeof os);
  const char *what = writes ? "write" : "read";
  if (prev_write && strcmp(prev->op, ALLOCATION) == 0)
    snprintf(msg, n, "%s: stream-ordering race on %s: %s on %s, but it was allocated for %s, whose "
             "earlier work may still use that memory; nothing orders them. Make %s wait for %s first "
             "(ct_stream_wait_stream), or allocate it on %s", op, tl, what, me, other, ms, os, ms);
  else
    snprintf(msg, n, "%s: stream-ordering race on %s: %s on %s, but the %s by %s on %s may not have %s "
             "yet; nothing orders them. Make %s wait for %s first: ct_stream_wait_stream, or "
             "ct_stream_wait_event with an event recorded on %s after the %s", op, tl, what, me,
             prev_write ? "write" : "read", prev->op, other, prev_write ? "run" : "finished", ms, os, os,
             prev_write ? "write" : "read");
}

// region: ordered
// Whether stream `id` (knowing vc) comes after access a.
static bool ordered(const access *a, int id, const vclock *vc) {
  /* LAB BEGIN: true when a was on no stream or on stream id itself, or when id knows a's stream (vc) up to at least a's count | test: chapter.ch12, chapter.ch12_race, unit.sanitizer */
  return a->stream == NONE || a->stream == id || vc->c[a->stream] >= a->at;
  /* LAB END */
}

// The first race of an access, into msg; false when there is none.
static bool find_race(char *msg, size_t n, const char *op, bool writes, const rec *r, const ct_tensor *t,
                      int id, const vclock *vc) {
  if (!ordered(&r->write, id, vc)) {
    describe(msg, n, op, writes, r, t, id, &r->write, true);
    return true;
  }
  for (int i = 0; writes && i < r->nreads; ++i)
    if (!ordered(&r->reads[i], id, vc)) {
      describe(msg, n, op, writes, r, t, id, &r->reads[i], false);
      return true;
    }
  return false;
}
// endregion

static void add_read(rec *r, int id, uint32_t at, const char *op) {
  int i = 0;
  while (i < r->nreads && r->reads[i].stream != id) ++i;
  if (i == MAX_READS) { // drop the oldest
    memmove(r->reads, r->reads + 1, sizeof(access) * (MAX_READS - 1));
    i = MAX_READS - 1;
  } else if (i == r->nreads) {
    r->nreads++;
  }
  set_access(&r->reads[i], id, at, op);
}

// Counts and keeps a report; prints it too unless it becomes the op's error.
static void report_locked(const char *msg, bool print) {
  snprintf(last, sizeof last, "%s", msg);
  atomic_fetch_add(&nreports, 1);
  if (!print) return;
  fflush(stdout);
  fprintf(stderr, "sanitizer: %s\n", msg);
  fflush(stderr);
}

// ---- graphs ------------------------------------------------------------------------------------
// A captured op does not run when it is issued: its work runs at each replay,
// on the stream the replay is issued on. So an access on the capturing
// stream is not checked or counted then; the storage is marked as used by
// the capture instead, and a replay checks and records all its capture's
// storages as one op of the replay's stream. Limit: a storage remembers only
// the last capture that used it (an older graph's replay then misses it: a
// race could be missed, none invented).
static void graph_use(rec *r, bool writes, const char *op) {
  if (r->graph != cap_id) {
    r->graph = cap_id;
    r->graph_writes = false;
    snprintf(r->graph_op, sizeof r->graph_op, "%s", op);
  }
  if (writes && !r->graph_writes) {
    r->graph_writes = true;
    snprintf(r->graph_op, sizeof r->graph_op, "%s", op);
  }
}

uint32_t cti_san_capture_begin(const ct_stream *s) {
  if (!cti_san_on()) return 0;
  pthread_mutex_lock(&mu);
  cap_id = ++ncaptures;
  cap_stream = s;
  pthread_mutex_unlock(&mu);
  return cap_id;
}

void cti_san_capture_end(void) {
  cap_stream = NULL;
  cap_id = 0;
}

int cti_san_replay(uint32_t graph, ct_stream *s) {
  int m = current_mode();
  if (m == CT_SANITIZER_OFF || graph == 0) return CT_OK;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  if (id < 0) {
    pthread_mutex_unlock(&mu);
    return CT_OK;
  }
  learn(id);
  unsigned gen = atomic_load(&generation);
  char msg[1024];
  for (rec *r = live; r; r = r->next) {
    if (r->graph != graph || r->gen != gen ||
        !find_race(msg, sizeof msg, "ct_cuda_graph_replay", r->graph_writes, r, NULL, id, &streams[id].vc))
      continue;
    report_locked(msg, m == CT_SANITIZER_WARN);
    if (m == CT_SANITIZER_ERROR) {
      pthread_mutex_unlock(&mu);
      return ct_fail(CT_ERR_RACE, "%s", msg);
    }
    break;
  }
  uint32_t at = ++streams[id].vc.c[id];
  for (rec *r = live; r; r = r->next) {
    if (r->graph != graph || r->gen != gen) continue;
    if (r->graph_writes) {
      set_access(&r->write, id, at, r->graph_op);
      r->nreads = 0;
    } else {
      add_read(r, id, at, r->graph_op);
    }
  }
  pthread_mutex_unlock(&mu);
  return CT_OK;
}

// ---- hooks -------------------------------------------------------------------------------------------
static int on_access(const char *op, ct_stream *s, const ct_tensor *const *reads, int nr,
                   const ct_tensor *const *writes, int nw) {
  int m = current_mode();
  if (m == CT_SANITIZER_OFF) return CT_OK;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  if (id < 0) {
    pthread_mutex_unlock(&mu);
    return CT_OK;
  }
  if (s == cap_stream) { // captured: it runs at replay, on the replay's stream
    for (int k = 0; k < nr + nw; ++k) {
      const ct_tensor *t = k < nr ? reads[k] : writes[k - nr];
      rec *r = t ? rec_of(t) : NULL;
      if (r) graph_use(r, k >= nr, op);
    }
    pthread_mutex_unlock(&mu);
    return CT_OK;
  }
  stream_ent *se = &streams[id];
  learn(id);
  char msg[1024];
  bool race = false;
  for (int k = 0; k < nr + nw && !race; ++k) {
    const ct_tensor *t = k < nr ? reads[k] : writes[k - nr];
    rec *r = t ? rec_of(t) : NULL;
    race = r && find_race(msg, sizeof msg, op, k >= nr, r, t, id, &se->vc);
  }
  if (race) {
    report_locked(msg, m == CT_SANITIZER_WARN);
    if (m == CT_SANITIZER_ERROR) {
      pthread_mutex_unlock(&mu);
      return ct_fail(CT_ERR_RACE, "%s", msg);
    }
  }
  uint32_t at = ++se->vc.c[id];
  for (int k = 0; k < nr; ++k) {
    rec *r = reads[k] ? rec_of(reads[k]) : NULL;
    if (r) add_read(r, id, at, op);
  }
  for (int k = 0; k < nw; ++k) {
    rec *r = writes[k] ? rec_of(writes[k]) : NULL;
    if (!r) continue;
    set_access(&r->write, id, at, op);
    r->nreads = 0;
  }
  pthread_mutex_unlock(&mu);
  return CT_OK;
}

static void on_allocated(const ct_tensor *t, ct_stream *s) {
  if (!cti_san_on()) return;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  rec *r = id >= 0 ? rec_of(t) : NULL;
  if (r && s == cap_stream) { // the graph's private pool: its first write is the replay's
    graph_use(r, true, ALLOCATION);
  } else if (r) {
    learn(id);
    r->owner = (uint16_t)id;
    set_access(&r->write, id, ++streams[id].vc.c[id], ALLOCATION);
  }
  pthread_mutex_unlock(&mu);
}

static void on_record_stream(const ct_tensor *t, ct_stream *s) {
  if (!cti_san_on()) return;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  rec *r = id >= 0 ? rec_of(t) : NULL;
  if (r) {
    bool known = false;
    for (int i = 0; i < r->nrecorded; ++i) known |= r->recorded[i] == id;
    if (!known && r->nrecorded < MAX_READS) r->recorded[r->nrecorded++] = (uint16_t)id;
  }
  pthread_mutex_unlock(&mu);
}

// Rule 2: an access by another stream that the owner (or the host) does not
// know of, without ct_record_stream, when the storage is freed.
static bool unsafe_at_free(const rec *r, const access *a) {
  if (a->stream == NONE || a->stream == r->owner) return false;
  for (int i = 0; i < r->nrecorded; ++i)
    if (r->recorded[i] == a->stream) return false;
  uint32_t known = streams[r->owner].vc.c[a->stream];
  if (host.c[a->stream] > known) known = host.c[a->stream];
  return known < a->at;
}

static void on_storage_free(cti_storage *st) {
  rec *r = st->obs;
  if (!r) return;
  st->obs = NULL;
  pthread_mutex_lock(&mu);
  if (r->prev) r->prev->next = r->next;
  else live = r->next;
  if (r->next) r->next->prev = r->prev;
  pthread_mutex_unlock(&mu);
  if (cti_san_on() && r->owner != NONE && r->gen == atomic_load(&generation)) {
    pthread_mutex_lock(&mu);
    const access *bad = unsafe_at_free(r, &r->write) ? &r->write : NULL;
    for (int i = 0; !bad && i < r->nreads; ++i)
      if (unsafe_at_free(r, &r->reads[i])) bad = &r->reads[i];
    if (bad) {
      char msg[1024], tl[120], other[80], owner[80], os[40];
      char dev[CT_DEVICE_STR_MAX];
      if (r->name[0]) snprintf(tl, sizeof tl, "tensor '%s'", r->name);
      else snprintf(tl, sizeof tl, "the tensor at %p (%zu bytes on %s)", st->data, st->nbytes,
                    ct_device_str(st->device, dev));
      stream_label(bad->stream, other, sizeof other);
      stream_label(r->owner, owner, sizeof owner);
      short_label(bad->stream, os, sizeof os);
      snprintf(msg, sizeof msg, "ct_free: stream-ordering race on %s: freed while %s may still be using it "
               "(its %s by %s); the caching allocator hands the memory to work on %s next. Call "
               "ct_record_stream(t, %s) before freeing it, or make the owner wait for %s",
               tl, other, bad == &r->write ? "write" : "read", bad->op, owner, os, os);
      report_locked(msg, true); // a free cannot fail: always printed
    }
    pthread_mutex_unlock(&mu);
  }
  free(r);
}

static void on_host_waits(ct_stream *s) {
  if (!cti_san_on()) return;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, false);
  if (id >= 0) join(&host, &streams[id].vc);
  pthread_mutex_unlock(&mu);
}

static void on_host_waits_device(ct_device d) {
  if (!cti_san_on()) return;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nstreams; ++i)
    if (ct_device_eq(streams[i].dev, d)) join(&host, &streams[i].vc);
  pthread_mutex_unlock(&mu);
}

static void on_wait_stream(ct_stream *s, ct_stream *other) {
  if (!cti_san_on()) return;
  pthread_mutex_lock(&mu);
  int a = stream_id(s, true), b = stream_id(other, false);
  if (a >= 0 && b >= 0) join(&streams[a].vc, &streams[b].vc);
  pthread_mutex_unlock(&mu);
}

static void on_stream_destroyed(ct_stream *s) {
  // Even when off: a later stream at the same address must not inherit the id.
  pthread_mutex_lock(&mu);
  int id = stream_id(s, false);
  if (id >= 0) {
    join(&host, &streams[id].vc); // destroying waits for the stream's work
    streams[id].s = NULL;
  }
  pthread_mutex_unlock(&mu);
}

static void on_event_record(void **clock, ct_stream *s) {
  if (!cti_san_on()) return;
  if (!*clock && !(*clock = calloc(1, sizeof(vclock)))) return;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  if (id >= 0) {
    learn(id);
    memcpy(*clock, &streams[id].vc, sizeof(vclock));
  } else {
    memset(*clock, 0, sizeof(vclock));
  }
  pthread_mutex_unlock(&mu);
}

static void on_wait_event(ct_stream *s, void *const *clock) {
  if (!cti_san_on() || !*clock) return;
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  if (id >= 0) join(&streams[id].vc, *clock);
  pthread_mutex_unlock(&mu);
}

static void on_host_waits_event(void *const *clock) {
  if (!cti_san_on() || !*clock) return;
  pthread_mutex_lock(&mu);
  join(&host, *clock);
  pthread_mutex_unlock(&mu);
}

// ---- names ------------------------------------------------------------------------------------------
int ct_sanitizer_name_tensor(const ct_tensor *t, const char *name) {
  if (!t || !name) return ct_fail(CT_ERR_VALUE, "ct_sanitizer_name_tensor: NULL argument");
  attach(); // the record must be seen freed
  pthread_mutex_lock(&mu);
  rec *r = rec_of(t);
  if (r) snprintf(r->name, sizeof r->name, "%s", name);
  pthread_mutex_unlock(&mu);
  return r ? CT_OK : ct_fail(CT_ERR_OOM, "ct_sanitizer_name_tensor: out of host memory");
}

int ct_sanitizer_name_stream(const ct_stream *s, const char *name) {
  if (!s || !name) return ct_fail(CT_ERR_VALUE, "ct_sanitizer_name_stream: NULL argument");
  attach(); // the stream must be seen destroyed
  pthread_mutex_lock(&mu);
  int id = stream_id(s, true);
  if (id >= 0) snprintf(streams[id].name, sizeof streams[id].name, "%s", name);
  pthread_mutex_unlock(&mu);
  return id >= 0 ? CT_OK : ct_fail(CT_ERR_VALUE, "ct_sanitizer_name_stream: more than %d streams", MAX_STREAMS);
}

static const cti_observer observer = {
    .name = "the stream sanitizer",
    .slot = 2,
    .access = on_access,
    .allocated = on_allocated,
    .record_stream = on_record_stream,
    .storage_free = on_storage_free,
    .host_waits = on_host_waits,
    .host_waits_device = on_host_waits_device,
    .host_waits_event = on_host_waits_event,
    .wait_stream = on_wait_stream,
    .stream_destroyed = on_stream_destroyed,
    .event_record = on_event_record,
    .wait_event = on_wait_event,
};
