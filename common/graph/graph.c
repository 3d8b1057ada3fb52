// SPDX-License-Identifier: MIT
//
// graph: capture and replay (graph.h), and the rules capture imposes on the
// rest of the runtime, as an observer of it (core/observe.h).
//
// Invariant: a thread captures at most one graph at a time, and
// `capturing` (thread-local) points to it from capture_begin to capture_end;
// NULL means eager. The observer is attached while any thread captures
// (`ncapturing`), and each of its hooks returns at once for a thread that
// captures nothing. While `capturing` is set, the dispatcher hands ops on
// the graph's device the recording table (graph_backend.c), the allocator
// serves the capture stream from the graph's pool (capture_begin told it,
// core/alloc_capture.h), and the calls that would wait for the device are
// refused.
// A refusal invalidates the capture: later kernel calls on the capture
// stream fail too (CUDA: cudaErrorStreamCaptureInvalidated), and
// capture_end reports the first refusal and leaves the graph empty.
//
// Why the CPU recorder sits behind the backend table: every kernel the
// runtime runs, the plain ops' and the nn, conv and optim families', is
// reached through cti_backend_for(op, device)->entry(...) with plain
// arguments (pointers, sizes, scalars, a cti_iter), after the dispatcher
// has done its host-side work. Standing in for the table at that one place
// records exactly the kernel calls, with nothing of the host work, and no op
// needs to know about graphs. The same table on CUDA only routes (the
// launches go to the real backend, and CUDA's stream capture records them),
// so the forbidden-stream rule is enforced identically on both devices.
//
// The CPU list: each node is a call function and its arguments, copied by
// value into one growing arena (offsets, so the arena may move while it
// grows); replay runs the nodes in order. The arguments' pointers are the
// addresses the tensors had at capture, which the private pool keeps.
#include "graph_impl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_capture.h"
#include "observe.h"
#include "san_hooks.h"
#include "stream.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

struct ct_graph_pool {
  ct_device device;
  ct_mempool *mp;
  atomic_int refs; // handles given out + graphs capturing or holding a capture into it
};

typedef struct graph_node {
  cti_graph_call call;
  size_t off; // the arguments, in the arena
} graph_node;

typedef enum graph_state { GRAPH_EMPTY, GRAPH_CAPTURING, GRAPH_READY } graph_state;

struct ct_cuda_graph {
  graph_state state;
  ct_device device;
  ct_graph_pool *pool;     // while capturing or ready
  ct_stream *stream;       // the capture stream (while capturing)
  ct_stream *prev;         // the device's current stream before capture_begin
  const cti_backend *real; // the device's own backend
  bool invalid;            // a refused operation spoiled the capture
  uint32_t san_id;         // the sanitizer's id of the capture (san_hooks.h), 0 if none
  char cause[384];         // the first refusal's message
  char op[64];             // the op being dispatched, for messages
  // CPU: the recorded calls
  graph_node *nodes;
  int64_t nnodes, cap_nodes;
  unsigned char *arena;
  size_t arena_len, arena_cap;
  // CUDA: the captured graph and its executable form
  void *cu_graph, *cu_exec;
  int64_t cu_nodes;
};

static _Thread_local ct_cuda_graph *capturing;
static int ncapturing; // threads capturing now; the observer is attached while > 0 (under mu)
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static const cti_observer observer; // the hooks, at the end of this file
static int refuse_alloc(const char *msg);

// This thread starts or stops capturing: the observer is attached while any thread does.
static void count_capture(int delta) {
  pthread_mutex_lock(&mu);
  ncapturing += delta;
  if (ncapturing == 1 && delta > 0) (void)cti_observer_attach(&observer);
  if (ncapturing == 0) cti_observer_detach(&observer);
  pthread_mutex_unlock(&mu);
}

// ---- pools ------------------------------------------------------------------------------------

ct_graph_pool *ct_graph_pool_handle(ct_device d) {
  ct_graph_pool *p = calloc(1, sizeof *p);
  if (!p) {
    ct_fail(CT_ERR_OOM, "ct_graph_pool_handle: out of host memory");
    return NULL;
  }
  p->device = d;
  p->mp = ct_mempool_create(d);
  if (!p->mp) {
    free(p);
    return NULL;
  }
  atomic_init(&p->refs, 1);
  return p;
}

static ct_graph_pool *pool_retain(ct_graph_pool *p) {
  atomic_fetch_add(&p->refs, 1);
  return p;
}

void ct_graph_pool_free(ct_graph_pool *p) {
  if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
  (void)ct_mempool_release(p->mp); // its memory lives on while tensors hold blocks of it
  free(p);
}

// ---- the CUDA side ---------------------------------------------------------------------------
#ifdef CT_HAVE_CUDA
// Makes cuda:index current for one call; cuda_leave restores the previous one.
static int cuda_enter(int index, int *prev) {
  CT_CUDA_CHECK(cudaGetDevice(prev));
  if (*prev != index) CT_CUDA_CHECK(cudaSetDevice(index));
  return CT_OK;
}
static void cuda_leave(int index, int prev) {
  if (prev != index) (void)cudaSetDevice(prev);
}

static int cuda_begin(ct_cuda_graph *g) {
  int prev = 0, rc = cuda_enter(g->device.index, &prev);
  if (rc) return rc;
  cudaError_t e = cudaStreamBeginCapture((cudaStream_t)ct_stream_handle(g->stream),
                                         cudaStreamCaptureModeThreadLocal);
  cuda_leave(g->device.index, prev);
  if (e != cudaSuccess)
    return ct_cuda_fail((int)e, "cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)", __FILE__, __LINE__);
  return CT_OK;
}

static void cuda_drop(ct_cuda_graph *g) {
  if (g->cu_exec) (void)cudaGraphExecDestroy((cudaGraphExec_t)g->cu_exec);
  if (g->cu_graph) (void)cudaGraphDestroy((cudaGraph_t)g->cu_graph);
  g->cu_exec = g->cu_graph = NULL;
  g->cu_nodes = 0;
}

// Ends CUDA's capture (always: the stream must leave capture mode) and, for
// a capture still valid, instantiates it.
static int cuda_end(ct_cuda_graph *g) {
  int prev = 0, rc = cuda_enter(g->device.index, &prev);
  if (rc) return rc;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)ct_stream_handle(g->stream), &graph);
  const char *call = "cudaStreamEndCapture(s, &graph)";
  g->cu_graph = graph;
  if (e == cudaSuccess && !g->invalid) {
    size_t n = 0;
    e = cudaGraphGetNodes(graph, NULL, &n);
    call = "cudaGraphGetNodes(graph, NULL, &n)";
    g->cu_nodes = (int64_t)n;
  }
  if (e == cudaSuccess && !g->invalid && g->cu_nodes > 0) { // an empty graph replays as nothing
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    call = "cudaGraphInstantiate(&exec, graph, 0)";
    g->cu_exec = exec;
  }
  cuda_leave(g->device.index, prev);
  if (e != cudaSuccess) {
    cuda_drop(g);
    return ct_cuda_fail((int)e, call, __FILE__, __LINE__);
  }
  return CT_OK;
}

static int cuda_replay(ct_cuda_graph *g, ct_stream *s) {
  if (!g->cu_exec) return CT_OK; // captured nothing
  int prev = 0, rc = cuda_enter(g->device.index, &prev);
  if (rc) return rc;
  cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)g->cu_exec, (cudaStream_t)ct_stream_handle(s));
  cuda_leave(g->device.index, prev);
  if (e != cudaSuccess) return ct_cuda_fail((int)e, "cudaGraphLaunch(exec, s)", __FILE__, __LINE__);
  return CT_OK;
}
#endif

// ---- the CPU list ------------------------------------------------------------------------------

// Appends a call with a copy of its arguments. Enters during a valid CPU
// capture; leaves with the node recorded, or CT_ERR_OOM.
static int record(ct_cuda_graph *g, cti_graph_call call, const void *args, size_t size) {
  const size_t align = 16;
  size_t off = (g->arena_len + align - 1) / align * align;
  if (off + size > g->arena_cap) {
    size_t cap = g->arena_cap ? 2 * g->arena_cap : 4096;
    while (cap < off + size) cap *= 2;
    unsigned char *a = realloc(g->arena, cap);
    if (!a) return ct_fail(CT_ERR_OOM, "%s: out of host memory while recording a graph", g->op);
    g->arena = a;
    g->arena_cap = cap;
  }
  if (g->nnodes == g->cap_nodes) {
    int64_t cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
    graph_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
    if (!n) return ct_fail(CT_ERR_OOM, "%s: out of host memory while recording a graph", g->op);
    g->nodes = n;
    g->cap_nodes = cap;
  }
  memcpy(g->arena + off, args, size);
  g->arena_len = off + size;
  g->nodes[g->nnodes++] = (graph_node){call, off};
  return CT_OK;
}

// region: cpu_replay
static int cpu_replay(const ct_cuda_graph *g, ct_stream *s) {
  for (int64_t i = 0; i < g->nnodes; ++i) {
    int rc = g->nodes[i].call(g->real, g->arena + g->nodes[i].off, s);
    if (rc != CT_OK) return rc;
  }
  return CT_OK;
}
// endregion

// ---- capture ---------------------------------------------------------------------------------

ct_cuda_graph *ct_cuda_graph_create(void) {
  ct_cuda_graph *g = calloc(1, sizeof *g);
  if (!g) ct_fail(CT_ERR_OOM, "ct_cuda_graph_create: out of host memory");
  else g->device = ct_device_cpu();
  return g;
}

// Leaves g empty: no capture, no nodes, no pool. Enters not capturing.
static void drop_capture(ct_cuda_graph *g) {
#ifdef CT_HAVE_CUDA
  cuda_drop(g);
#endif
  free(g->nodes);
  free(g->arena);
  g->nodes = NULL;
  g->arena = NULL;
  g->nnodes = g->cap_nodes = 0;
  g->arena_len = g->arena_cap = 0;
  ct_graph_pool_free(g->pool);
  g->pool = NULL;
  g->state = GRAPH_EMPTY;
  g->invalid = false;
  g->cause[0] = '\0';
}

// Takes this thread out of capture: the previous current stream again, and
// on CUDA the stream out of capture mode (instantiated when still valid).
static int leave_capture(ct_cuda_graph *g) {
  capturing = NULL;
  cti_alloc_capture_end();
  count_capture(-1);
  cti_san_capture_end();
  int rc = g->prev ? ct_set_stream(g->prev) : CT_OK;
#ifdef CT_HAVE_CUDA
  if (g->device.type == CT_CUDA) {
    int erc = cuda_end(g);
    if (rc == CT_OK) rc = erc;
  }
#endif
  g->stream = g->prev = NULL;
  return rc;
}

int ct_cuda_graph_capture_begin(ct_cuda_graph *g, ct_stream *s, ct_graph_pool *pool) {
  static const char op[] = "ct_cuda_graph_capture_begin";
  if (!g || !s) return ct_fail(CT_ERR_VALUE, "%s: NULL %s", op, g ? "stream" : "graph");
  if (capturing)
    return ct_fail(CT_ERR_CAPTURE, "%s: this thread is already capturing a graph (one capture at a time)", op);
  if (g->state != GRAPH_EMPTY)
    return ct_fail(CT_ERR_VALUE, "%s: the graph already holds a capture; ct_cuda_graph_reset it first", op);
  ct_device d = ct_stream_device(s);
  ct_stream *def = ct_default_stream(d);
  if (!def) return ct_last_status();
  if (s == def)
    return ct_fail(CT_ERR_CAPTURE, "%s: CUDA graphs must be captured on a non-default stream. "
                   "(However, after capture, it's ok to replay on any stream.)", op);
  char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
  if (pool && !ct_device_eq(pool->device, d))
    return ct_fail(CT_ERR_DEVICE, "%s: the pool is on %s but the stream is on %s", op,
                   ct_device_str(pool->device, a), ct_device_str(d, b));
  const cti_backend *be = cti_backend_for(op, d);
  if (!be) return ct_last_status();
#ifdef CT_HAVE_CUDA
  // As `with torch.cuda.graph(g)`: the warm-up's work is finished first.
  if (d.type == CT_CUDA && ct_cuda_synchronize(d.index) != CT_OK) return ct_last_status();
#endif
  ct_graph_pool *p = pool ? pool_retain(pool) : ct_graph_pool_handle(d);
  if (!p) return ct_last_status();
  g->device = d;
  g->pool = p;
  g->stream = s;
  g->real = be;
  g->prev = ct_current_stream(d);
#ifdef CT_HAVE_CUDA
  if (d.type == CT_CUDA && cuda_begin(g) != CT_OK) {
    ct_status st = ct_last_status();
    g->stream = g->prev = NULL;
    drop_capture(g);
    return st;
  }
#endif
  g->state = GRAPH_CAPTURING;
  count_capture(+1);
  capturing = g;
  cti_alloc_capture_begin(d, s, p->mp, refuse_alloc); // as PyTorch's beginAllocateToPool
  g->san_id = cti_san_capture_begin(s);
  return ct_set_stream(s);
}

int ct_cuda_graph_capture_end(ct_cuda_graph *g) {
  static const char op[] = "ct_cuda_graph_capture_end";
  if (!g) return ct_fail(CT_ERR_VALUE, "%s: NULL graph", op);
  if (g->state != GRAPH_CAPTURING || capturing != g)
    return ct_fail(CT_ERR_VALUE, "%s: no capture of this graph is underway on this thread", op);
  int rc = leave_capture(g);
  if (g->invalid) rc = ct_fail(CT_ERR_CAPTURE, "%s: the capture was invalidated: %s", op, g->cause);
  if (rc != CT_OK) {
    drop_capture(g);
    return rc;
  }
  g->state = GRAPH_READY;
  return CT_OK;
}

int ct_cuda_graph_replay(ct_cuda_graph *g) {
  static const char op[] = "ct_cuda_graph_replay";
  if (!g) return ct_fail(CT_ERR_VALUE, "%s: NULL graph", op);
  if (g->state != GRAPH_READY)
    return ct_fail(CT_ERR_VALUE, "%s: the graph holds no capture (capture_begin and a successful "
                   "capture_end come first)", op);
  if (capturing)
    return ct_fail(CT_ERR_CAPTURE, "%s: replaying a graph while this thread captures one is not supported", op);
  ct_stream *s = ct_current_stream(g->device);
  if (!s) return ct_last_status();
  if (cti_san_replay(g->san_id, s) != CT_OK) return ct_last_status(); // the sanitizer's race: nothing runs
#ifdef CT_HAVE_CUDA
  if (g->device.type == CT_CUDA) return cuda_replay(g, s);
#endif
  return cpu_replay(g, s);
}

int ct_cuda_graph_reset(ct_cuda_graph *g) {
  if (!g) return CT_OK;
  int rc = CT_OK;
  if (g->state == GRAPH_CAPTURING && capturing == g) {
    g->invalid = true; // abandoned: nothing to instantiate
    rc = leave_capture(g);
  }
  drop_capture(g);
  return rc;
}

void ct_cuda_graph_free(ct_cuda_graph *g) {
  if (!g) return;
  (void)ct_cuda_graph_reset(g);
  free(g);
}

ct_graph_pool *ct_cuda_graph_pool(ct_cuda_graph *g) {
  return g && g->pool ? pool_retain(g->pool) : NULL;
}

int64_t ct_cuda_graph_num_nodes(const ct_cuda_graph *g) {
  if (!g || g->state == GRAPH_EMPTY) return 0;
  return g->device.type == CT_CUDA ? g->cu_nodes : g->nnodes;
}

ct_device ct_cuda_graph_device(const ct_cuda_graph *g) { return g ? g->device : ct_device_cpu(); }

bool ct_is_current_stream_capturing(ct_device d) {
  ct_cuda_graph *g = capturing;
  return g && ct_device_eq(g->device, d) && ct_current_stream(d) == g->stream;
}

// ---- the hooks (graph_impl.h, and the observer's) ----------------------------------------------

// region: intercept
static const cti_backend *intercept(const char *op, ct_device d, const cti_backend *be) {
  ct_cuda_graph *g = capturing;
  if (!g || !ct_device_eq(g->device, d)) return be;
  snprintf(g->op, sizeof g->op, "%s", op);
  return &cti_graph_backend;
}
// endregion

const cti_backend *cti_graph_real_backend(void) {
  ct_cuda_graph *g = capturing;
  return g ? g->real : &cti_cpu_backend;
}

// Fails with msg, invalidating g's capture (the first cause is kept).
static int invalidate(ct_cuda_graph *g, const char *msg) {
  if (!g->invalid) {
    g->invalid = true;
    snprintf(g->cause, sizeof g->cause, "%s", msg);
  }
  return ct_fail(CT_ERR_CAPTURE, "%s", msg);
}

int cti_graph_refuse(ct_device d, const char *fmt, ...) {
  ct_cuda_graph *g = capturing;
  if (!g || !ct_device_eq(g->device, d)) return CT_OK;
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return invalidate(g, msg);
}

int cti_graph_forbid_sync(const char *op, ct_device d) {
  return cti_graph_refuse(d, "%s: operation not permitted when stream is capturing "
                          "(it waits for the device; do it before capture_begin or after capture_end)", op);
}

// A copy between devices (or host memory) of cti_memcpy: a blocking copy
// touching a capturing device is refused; a non-blocking one on CUDA is
// captured like a kernel; on the CPU every copy is refused (it would run at
// once, outside the graph).
static int forbid_copy(ct_device dst, ct_device src, bool non_blocking) {
  ct_cuda_graph *g = capturing;
  if (!g || !(ct_device_eq(g->device, dst) || ct_device_eq(g->device, src))) return CT_OK;
  bool host_only = dst.type == CT_CPU && src.type == CT_CPU;
  if (g->device.type == CT_CUDA && non_blocking && !host_only) return CT_OK; // captured as a copy node
  char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
  return cti_graph_refuse(g->device, "cti_memcpy: operation not permitted when stream is capturing "
                          "(a %s copy from %s to %s; copy into a static tensor before replay instead)",
                          non_blocking ? "host-side" : "blocking", ct_device_str(src, a), ct_device_str(dst, b));
}

// The allocator's refusal of a foreign pool for the capture stream (alloc_capture.h).
static int refuse_alloc(const char *msg) {
  ct_cuda_graph *g = capturing;
  return g ? invalidate(g, msg) : (int)ct_fail(CT_ERR_CAPTURE, "%s", msg);
}

// region: issue
int cti_graph_issue(ct_stream *s, cti_graph_call call, const void *args, size_t size) {
  ct_cuda_graph *g = capturing;
  if (!g) return call(cti_backend_for("cti_graph_issue", ct_stream_device(s)), args, s);
  if (s != g->stream) {
    if (s == ct_default_stream(g->device)) {
      char msg[384];
      snprintf(msg, sizeof msg, "%s: operation would make the legacy stream depend on a capturing "
               "blocking stream (work on the default stream while it captures)", g->op);
      return invalidate(g, msg);
    }
    return call(g->real, args, s); // another stream: now, outside the graph
  }
  if (g->invalid)
    return ct_fail(CT_ERR_CAPTURE, "%s: operation failed due to a previous error during capture (%s)",
                   g->op, g->cause);
  if (g->device.type == CT_CUDA) return call(g->real, args, s); // CUDA's capture records it
  return record(g, call, args, size);
}
// endregion

bool cti_graph_records(const ct_stream *s) {
  ct_cuda_graph *g = capturing;
  return g && s == g->stream && g->device.type == CT_CPU && !g->invalid;
}

int cti_graph_refuse_wait(void) {
  ct_cuda_graph *g = capturing;
  if (!g) return CT_OK;
  return cti_graph_forbid_sync(g->op, g->device);
}

// A sync point during capture on d: the wait itself is refused where it
// must be (how), with CUDA's words; other sync points are not the graph's.
static int sync_point(const char *op, ct_device d, unsigned how, bool outermost) {
  (void)outermost;
  return how & CTI_SYNC_REFUSE_IN_CAPTURE ? cti_graph_forbid_sync(op, d) : CT_OK;
}

// Work the graph could not replay (Adam's host-side bias corrections): refused during capture on d.
static int uncapturable(ct_device d, const char *msg) { return cti_graph_refuse(d, "%s", msg); }

static const cti_observer observer = {.name = "a graph capture",
                                      .slot = 0,
                                      .wrap = intercept,
                                      .sync_point = sync_point,
                                      .copy = forbid_copy,
                                      .uncapturable = uncapturable};
