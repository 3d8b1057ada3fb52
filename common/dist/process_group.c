// SPDX-License-Identifier: MIT
//
// process_group: torch.distributed's process group on Open MPI and NCCL.
//
// The launcher's contract (tools/launch sets it; dist.h states it): RANK,
// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are in the environment
// and agree with MPI's rank and size. MPI starts the processes and carries
// the CPU collectives; NCCL carries the GPU ones, its unique id broadcast from
// rank 0 over MPI (so MASTER_ADDR/MASTER_PORT are checked but not used to
// rendezvous: MPI already knows where every rank is).
//
// Errors: MPI is told to return errors (MPI_ERRORS_RETURN) rather than
// abort, so a failing collective becomes a ct error naming the op and MPI's
// words. A rank that dies is a different matter: mpirun notices and ends the
// whole job (every other rank gets a signal), which is what keeps a
// collective from waiting forever for a rank that is gone.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "ops.h"
#include "stream.h"

#ifdef CT_HAVE_MPI
#include <mpi.h>
#endif
#ifdef CT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cuda_check.h"
#endif

struct ct_process_group {
  int rank, world, local_rank;
  bool nccl;
  ct_device device;
#ifdef CT_HAVE_MPI
  MPI_Comm comm;
#endif
#ifdef CT_HAVE_NCCL
  ncclComm_t nc;
  ct_stream *stream; // NCCL's work runs here, ordered after the caller's stream by events
#endif
};

struct ct_work {
  ct_process_group *pg;
  ct_tensor *t; // kept alive until the wait
#ifdef CT_HAVE_MPI
  MPI_Request req;
  ct_tensor *staged; // the pinned host copy of a CUDA tensor (mpi backend), or NULL
#endif
  ct_event *done;    // nccl: recorded on the NCCL stream after the collective
  ct_dist_reduce_op op;
  bool finished;
  int rc;
};

// ---- the environment ----------------------------------------------------------------------------
static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v)
    return ct_fail(CT_ERR_VALUE, "init_process_group: environment variable %s expected, but not set: start the "
                   "program with tools/launch --nproc-per-node N PROGRAM (it sets RANK, LOCAL_RANK, WORLD_SIZE, "
                   "MASTER_ADDR and MASTER_PORT), as torchrun does for PyTorch", name);
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 20)
    return ct_fail(CT_ERR_VALUE, "init_process_group: %s=\"%s\" is not a non-negative integer", name, v);
  *out = (int)x;
  return CT_OK;
}

static int read_env(ct_process_group *pg) {
  int rc = env_int("RANK", &pg->rank);
  if (!rc) rc = env_int("WORLD_SIZE", &pg->world);
  if (!rc) rc = env_int("LOCAL_RANK", &pg->local_rank);
  int port = 0;
  if (!rc) rc = env_int("MASTER_PORT", &port);
  if (!rc && (!getenv("MASTER_ADDR") || !*getenv("MASTER_ADDR")))
    rc = ct_fail(CT_ERR_VALUE, "init_process_group: environment variable MASTER_ADDR expected, but not set "
                 "(tools/launch sets it)");
  if (!rc && (port < 1 || port > 65535))
    rc = ct_fail(CT_ERR_VALUE, "init_process_group: MASTER_PORT=%d is not a port (1-65535)", port);
  if (!rc && (pg->world < 1 || pg->rank >= pg->world))
    rc = ct_fail(CT_ERR_VALUE, "init_process_group: RANK=%d is not below WORLD_SIZE=%d", pg->rank, pg->world);
  return rc;
}

#ifdef CT_HAVE_MPI
static int mpi_fail(const char *op, int err) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(err, msg, &len);
  return ct_fail(CT_ERR_IO, "%s: MPI failed: %s", op, msg);
}
#define MPI_TRY(op, call)                  \
  do {                                     \
    int mpi_err_ = (call);                 \
    if (mpi_err_ != MPI_SUCCESS)           \
      return mpi_fail((op), mpi_err_);     \
  } while (0)

// MPI_Wait that sleeps. Open MPI's MPI_Wait polls without pause until the
// request completes: a rank that finished its backward first burns its core
// waiting for the other rank's gradients, and on a busy machine (more runnable
// threads than cores) that core is the one the other rank needs, so the wait
// feeds itself (ch08 on 2 cores under a load of 10: 17-21 ms a step instead of
// about 5). gloo's wait sleeps on a condition variable. This one polls with
// MPI_Test (which also advances the collective) for WAIT_SPIN_NS, then sleeps
// WAIT_PAUSE_NS between polls, which adds at most a pause (plus the kernel's
// timer slack) to a wait that long already.
#define WAIT_SPIN_NS 50000L
#define WAIT_PAUSE_NS 50000L
static int mpi_wait_sleeping(MPI_Request *req) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int flag = 0, err;
  while ((err = MPI_Test(req, &flag, MPI_STATUS_IGNORE)) == MPI_SUCCESS && !flag) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) >= WAIT_SPIN_NS)
      nanosleep(&(struct timespec){0, WAIT_PAUSE_NS}, NULL);
  }
  return err;
}

static int mpi_start(ct_process_group *pg) {
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_TRY("init_process_group", MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
  MPI_TRY("init_process_group", MPI_Comm_dup(MPI_COMM_WORLD, &pg->comm));
  MPI_Comm_set_errhandler(pg->comm, MPI_ERRORS_RETURN);
  int r = 0, w = 0;
  MPI_Comm_rank(pg->comm, &r);
  MPI_Comm_size(pg->comm, &w);
  if (r != pg->rank || w != pg->world)
    return ct_fail(CT_ERR_VALUE, "init_process_group: RANK=%d WORLD_SIZE=%d, but MPI says rank %d of %d: start the "
                   "program with tools/launch, which sets them from MPI's own numbers", pg->rank, pg->world, r, w);
  return CT_OK;
}

static MPI_Datatype mpi_type(ct_dtype dt) {
  switch (dt) {
  case CT_F32: return MPI_FLOAT;
  case CT_F64: return MPI_DOUBLE;
  case CT_I64: return MPI_INT64_T;
  case CT_I32: return MPI_INT32_T;
  case CT_U8: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(ct_dist_reduce_op op) {
  return op == CT_REDUCE_MAX ? MPI_MAX : op == CT_REDUCE_MIN ? MPI_MIN : MPI_SUM; // AVG = SUM, then / world
}
#endif

#ifdef CT_HAVE_NCCL
static int nccl_fail(const char *op, ncclResult_t r) {
  return ct_fail(CT_ERR_CUDA, "%s: NCCL failed: %s", op, ncclGetErrorString(r));
}
#define NCCL_TRY(op, call)                    \
  do {                                        \
    ncclResult_t nccl_r_ = (call);            \
    if (nccl_r_ != ncclSuccess)               \
      return nccl_fail((op), nccl_r_);        \
  } while (0)

static int nccl_start(ct_process_group *pg) {
  int ngpu = ct_cuda_device_count();
  if (pg->local_rank >= ngpu)
    return ct_fail(CT_ERR_DEVICE, "init_process_group(\"nccl\"): LOCAL_RANK=%d needs GPU %d, but this machine has "
                   "%d: NCCL takes one GPU per rank (start at most %d ranks per node, or use backend \"mpi\")",
                   pg->local_rank, pg->local_rank, ngpu, ngpu);
  int rc = ct_cuda_set_device(pg->local_rank);
  if (rc) return rc;
  pg->device = ct_device_cuda(pg->local_rank);
  ncclUniqueId id;
  if (pg->rank == 0) NCCL_TRY("init_process_group", ncclGetUniqueId(&id));
  MPI_TRY("init_process_group", MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, pg->comm));
  NCCL_TRY("init_process_group", ncclCommInitRank(&pg->nc, pg->world, id, pg->rank));
  pg->stream = ct_stream_create(pg->device, 0);
  return pg->stream ? CT_OK : ct_last_status();
}

static ncclDataType_t nccl_type(ct_dtype dt, bool *ok) {
  *ok = true;
  switch (dt) {
  case CT_F32: return ncclFloat32;
  case CT_F64: return ncclFloat64;
  case CT_F16: return ncclFloat16;
  case CT_BF16: return ncclBfloat16;
  case CT_I64: return ncclInt64;
  case CT_I32: return ncclInt32;
  case CT_U8: return ncclUint8;
  default: *ok = false; return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(ct_dist_reduce_op op) {
  return op == CT_REDUCE_MAX ? ncclMax : op == CT_REDUCE_MIN ? ncclMin : op == CT_REDUCE_AVG ? ncclAvg : ncclSum;
}

// The NCCL stream waits for the caller's current stream (the tensor's producers).
static int nccl_enter(ct_process_group *pg) {
  return ct_stream_wait_stream(pg->stream, ct_current_stream(pg->device));
}
// The caller's stream waits for NCCL's (the tensor's consumers).
static int nccl_leave(ct_process_group *pg) {
  return ct_stream_wait_stream(ct_current_stream(pg->device), pg->stream);
}
#endif

// ---- the group --------------------------------------------------------------------------------
ct_process_group *ct_dist_init_process_group(const char *backend) {
  bool nccl = backend && strcmp(backend, "nccl") == 0;
  if (!backend || (!nccl && strcmp(backend, "mpi") != 0)) {
    ct_fail(CT_ERR_VALUE, "init_process_group: backend must be \"mpi\" or \"nccl\", got \"%s\"",
            backend ? backend : "(null)");
    return NULL;
  }
#ifndef CT_HAVE_MPI
  ct_fail(CT_ERR_UNAVAILABLE, "init_process_group: this build has no MPI (install libopenmpi-dev and rebuild)");
  return NULL;
#else
#ifndef CT_HAVE_NCCL
  if (nccl) {
    ct_fail(CT_ERR_UNAVAILABLE, "init_process_group(\"nccl\"): this build has no NCCL (a CUDA build with libnccl is "
            "needed); use backend \"mpi\"");
    return NULL;
  }
#endif
  ct_process_group *pg = calloc(1, sizeof *pg);
  if (!pg) {
    ct_fail(CT_ERR_OOM, "init_process_group: out of host memory");
    return NULL;
  }
  pg->nccl = nccl;
  pg->device = ct_device_cpu();
  pg->comm = MPI_COMM_NULL;
  int rc = read_env(pg);
  if (!rc) rc = mpi_start(pg);
#ifdef CT_HAVE_NCCL
  if (!rc && nccl) rc = nccl_start(pg);
#endif
  if (rc) {
    ct_dist_destroy_process_group(pg);
    return NULL;
  }
  return pg;
#endif
}

void ct_dist_destroy_process_group(ct_process_group *pg) {
  if (!pg) return;
#ifdef CT_HAVE_NCCL
  if (pg->nc) ncclCommDestroy(pg->nc);
  ct_stream_free(pg->stream);
#endif
#ifdef CT_HAVE_MPI
  if (pg->comm != MPI_COMM_NULL) MPI_Comm_free(&pg->comm);
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Finalize();
#endif
  free(pg);
}

int ct_dist_get_rank(const ct_process_group *pg) { return pg ? pg->rank : -1; }
int ct_dist_get_world_size(const ct_process_group *pg) { return pg ? pg->world : -1; }
int ct_dist_get_local_rank(const ct_process_group *pg) { return pg ? pg->local_rank : -1; }
const char *ct_dist_get_backend(const ct_process_group *pg) { return pg && pg->nccl ? "nccl" : "mpi"; }
ct_device ct_dist_device(const ct_process_group *pg) { return pg ? pg->device : ct_device_cpu(); }

// ---- argument checks, written once -----------------------------------------------------------------
static int check_tensor(const char *op, const ct_process_group *pg, const ct_tensor *t) {
  if (!pg || !t) return ct_fail(CT_ERR_VALUE, "%s: NULL process group or tensor", op);
  if (!ct_is_contiguous(t)) return ct_fail(CT_ERR_VALUE, "%s: Tensors must be contiguous", op);
  ct_device d = ct_device_of(t);
  char want[CT_DEVICE_STR_MAX], got[CT_DEVICE_STR_MAX];
  if (pg->nccl && !ct_device_eq(d, pg->device))
    return ct_fail(CT_ERR_DEVICE, "%s: backend nccl works on this rank's GPU %s, but the tensor is on %s", op,
                   ct_device_str(pg->device, want), ct_device_str(d, got));
  return CT_OK;
}

#ifdef CT_HAVE_MPI
static int check_mpi_dtype(const char *op, const ct_tensor *t) {
  if (mpi_type(ct_dtype_of(t)) == MPI_DATATYPE_NULL)
    return ct_fail(CT_ERR_DTYPE, "%s: backend mpi has no %s reduction; cast to float32 first", op,
                   ct_dtype_name(ct_dtype_of(t)));
  return CT_OK;
}

// The host tensor MPI reads and writes: t itself on the CPU, else a pinned copy.
static ct_tensor *host_view(ct_tensor *t) {
  if (ct_device_of(t).type == CT_CPU) return ct_retain(t);
  return ct_pin_memory(t); // waits for t's producers; a copy in page-locked memory
}

// Writes the host result back into a CUDA tensor.
static int host_back(ct_tensor *t, ct_tensor *host) {
  return host == t ? CT_OK : ct_copy_(t, host, false);
}

static int scale_avg(ct_process_group *pg, ct_tensor *t, ct_dist_reduce_op op) {
  if (op != CT_REDUCE_AVG) return CT_OK;
  ct_tensor *avg = ct_mul_scalar(t, 1.0 / pg->world);
  int rc = avg ? ct_copy_(t, avg, false) : (int)ct_last_status();
  ct_free(avg);
  return rc;
}
#endif

// ---- collectives ------------------------------------------------------------------------------------
int ct_dist_all_reduce(ct_process_group *pg, ct_tensor *t, ct_dist_reduce_op op) {
  ct_work *w = ct_dist_all_reduce_async(pg, t, op);
  return w ? ct_work_wait(w) : (int)ct_last_status();
}

int ct_dist_broadcast(ct_process_group *pg, ct_tensor *t, int src) {
  static const char op[] = "ct_dist_broadcast";
  int rc = check_tensor(op, pg, t);
  if (rc) return rc;
  if (src < 0 || src >= pg->world)
    return ct_fail(CT_ERR_VALUE, "%s: src %d is not a rank (0..%d)", op, src, pg->world - 1);
#ifdef CT_HAVE_NCCL
  if (pg->nccl) {
    bool ok;
    ncclDataType_t ty = nccl_type(ct_dtype_of(t), &ok);
    if (!ok) return ct_fail(CT_ERR_DTYPE, "%s: NCCL has no %s", op, ct_dtype_name(ct_dtype_of(t)));
    if ((rc = nccl_enter(pg))) return rc;
    NCCL_TRY(op, ncclBroadcast(ct_data_ptr(t), ct_data_ptr(t), (size_t)ct_numel(t), ty, src, pg->nc,
                               (cudaStream_t)ct_stream_handle(pg->stream)));
    return nccl_leave(pg);
  }
#endif
#ifdef CT_HAVE_MPI
  if ((rc = check_mpi_dtype(op, t))) return rc;
  ct_tensor *h = host_view(t);
  if (!h) return ct_last_status();
  int err = MPI_Bcast(ct_data_ptr(h), (int)ct_numel(h), mpi_type(ct_dtype_of(h)), src, pg->comm);
  rc = err != MPI_SUCCESS ? mpi_fail(op, err) : host_back(t, h);
  ct_free(h);
  return rc;
#else
  return ct_fail(CT_ERR_UNAVAILABLE, "%s: no MPI in this build", op);
#endif
}

static int check_list(const char *op, ct_process_group *pg, ct_tensor *const *list, const ct_tensor *like) {
  if (!list) return ct_fail(CT_ERR_VALUE, "%s: NULL tensor list", op);
  for (int r = 0; r < pg->world; ++r) {
    int rc = check_tensor(op, pg, list[r]);
    if (rc) return rc;
    if (!ct_shape_eq(ct_shape_of(list[r]), ct_shape_of(like)) || ct_dtype_of(list[r]) != ct_dtype_of(like))
      return ct_fail(CT_ERR_SHAPE, "%s: tensor %d of the list differs in shape or dtype from the single tensor", op, r);
  }
  return CT_OK;
}

int ct_dist_all_gather(ct_process_group *pg, ct_tensor *const *out, const ct_tensor *in) {
  static const char op[] = "ct_dist_all_gather";
  int rc = check_tensor(op, pg, in);
  if (!rc) rc = check_list(op, pg, out, in);
  if (rc) return rc;
  // One contiguous (world, ...) buffer, gathered, then split into out[].
  ct_shape s = ct_shape_of(in), ws = {s.ndim + 1, {pg->world}};
  for (int i = 0; i < s.ndim; ++i) ws.d[i + 1] = s.d[i];
  ct_tensor *all = ct_empty(ws, ct_dtype_of(in), ct_device_of(in));
  if (!all) return ct_last_status();
#ifdef CT_HAVE_NCCL
  if (pg->nccl) {
    bool ok;
    ncclDataType_t ty = nccl_type(ct_dtype_of(in), &ok);
    if (!ok) rc = ct_fail(CT_ERR_DTYPE, "%s: NCCL has no %s", op, ct_dtype_name(ct_dtype_of(in)));
    if (!rc) rc = nccl_enter(pg);
    ncclResult_t nr = rc ? ncclSuccess
                         : ncclAllGather(ct_data_ptr(in), ct_data_ptr(all), (size_t)ct_numel(in), ty, pg->nc,
                                         (cudaStream_t)ct_stream_handle(pg->stream));
    if (!rc && nr != ncclSuccess) rc = nccl_fail(op, nr);
    if (!rc) rc = nccl_leave(pg);
  } else
#endif
  {
#ifdef CT_HAVE_MPI
    if (!rc) rc = check_mpi_dtype(op, in);
    ct_tensor *hin = rc ? NULL : host_view((ct_tensor *)in), *hall = rc ? NULL : host_view(all);
    if (!rc && (!hin || !hall)) rc = ct_last_status();
    if (!rc) {
      int err = MPI_Allgather(ct_data_ptr(hin), (int)ct_numel(hin), mpi_type(ct_dtype_of(in)), ct_data_ptr(hall),
                              (int)ct_numel(hin), mpi_type(ct_dtype_of(in)), pg->comm);
      rc = err != MPI_SUCCESS ? mpi_fail(op, err) : host_back(all, hall);
    }
    ct_free(hin), ct_free(hall);
#else
    rc = ct_fail(CT_ERR_UNAVAILABLE, "%s: no MPI in this build", op);
#endif
  }
  for (int r = 0; !rc && r < pg->world; ++r) {
    ct_tensor *row = ct_select(all, 0, r);
    rc = row ? ct_copy_(out[r], row, false) : (int)ct_last_status();
    ct_free(row);
  }
  ct_free(all);
  return rc;
}

int ct_dist_reduce_scatter(ct_process_group *pg, ct_tensor *out, ct_tensor *const *in, ct_dist_reduce_op op_kind) {
  static const char op[] = "ct_dist_reduce_scatter";
  int rc = check_tensor(op, pg, out);
  if (!rc) rc = check_list(op, pg, in, out);
  if (rc) return rc;
  // Simple and exact: all-reduce the stacked inputs, keep this rank's row.
  ct_shape s = ct_shape_of(out), ws = {s.ndim + 1, {pg->world}};
  for (int i = 0; i < s.ndim; ++i) ws.d[i + 1] = s.d[i];
  ct_tensor *all = ct_empty(ws, ct_dtype_of(out), ct_device_of(out));
  for (int r = 0; all && !rc && r < pg->world; ++r) {
    ct_tensor *row = ct_select(all, 0, r);
    rc = row ? ct_copy_(row, in[r], false) : (int)ct_last_status();
    ct_free(row);
  }
  if (!all) rc = ct_last_status();
  if (!rc) rc = ct_dist_all_reduce(pg, all, op_kind);
  if (!rc) {
    ct_tensor *mine = ct_select(all, 0, pg->rank);
    rc = mine ? ct_copy_(out, mine, false) : (int)ct_last_status();
    ct_free(mine);
  }
  ct_free(all);
  return rc;
}

int ct_dist_barrier(ct_process_group *pg) {
  if (!pg) return ct_fail(CT_ERR_VALUE, "ct_dist_barrier: NULL process group");
#ifdef CT_HAVE_NCCL
  if (pg->nccl) { // the GPU's queued work first, as PyTorch's NCCL barrier waits for it
    int rc = ct_stream_synchronize(ct_current_stream(pg->device));
    if (rc) return rc;
  }
#endif
#ifdef CT_HAVE_MPI
  // MPI_Ibarrier and the sleeping wait: a rank that arrives first (ch08's
  // other ranks while rank 0 runs DataParallel alone) must not poll on a
  // core the working rank's threads need.
  MPI_Request req;
  MPI_TRY("ct_dist_barrier", MPI_Ibarrier(pg->comm, &req));
  MPI_TRY("ct_dist_barrier", mpi_wait_sleeping(&req));
  return CT_OK;
#else
  return ct_fail(CT_ERR_UNAVAILABLE, "ct_dist_barrier: no MPI in this build");
#endif
}

// ---- agreement after setup ----------------------------------------------------------------------
// One all-reduce (MIN of "my rank if I failed, else world size": the lowest
// failing rank) and, only when some rank failed, one broadcast of that rank's
// status and message from it. Every rank learns the same thing at once, so
// all of them stop together in the program's words instead of the healthy
// ones waiting in a later collective until mpirun ends them.
#define AGREE_MSG 1024
int ct_dist_agree(ct_process_group *pg, int status, const char *message) {
  char mine[AGREE_MSG] = "";
  char *full = NULL; // the failing rank's whole message, copied: `message` may lie in ct_last_error()'s buffer
  if (status != CT_OK) {
    const char *m = message && message[0] ? message : ct_last_error();
    if (!m || !m[0]) m = "unknown error";
    size_t n = strlen(m);
    if (n < sizeof mine) memcpy(mine, m, n + 1);
    else memcpy(mine, m, sizeof mine - 4), memcpy(mine + sizeof mine - 4, "...", 4);
    if ((full = malloc(n + 1))) memcpy(full, m, n + 1);
  }
  int rc = CT_OK;
  if (!pg) rc = status != CT_OK ? ct_fail((ct_status)status, "%s", full ? full : mine)
                                : ct_fail(CT_ERR_VALUE, "ct_dist_agree: NULL process group");
#ifdef CT_HAVE_MPI
  int first = status != CT_OK && pg ? pg->rank : pg ? pg->world : 0;
  int err = pg ? MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, pg->comm) : MPI_SUCCESS;
  if (pg && err != MPI_SUCCESS) rc = mpi_fail("ct_dist_agree", err);
  else if (pg && first < pg->world) {
    struct { int status; char msg[AGREE_MSG]; } what = {status, ""};
    memcpy(what.msg, mine, sizeof mine);
    err = MPI_Bcast(&what, (int)sizeof what, MPI_BYTE, first, pg->comm);
    what.msg[sizeof what.msg - 1] = '\0';
    if (err != MPI_SUCCESS) rc = mpi_fail("ct_dist_agree", err);
    else if (status != CT_OK) rc = ct_fail((ct_status)status, "%s", full ? full : mine); // its own words
    else rc = ct_fail(what.status != CT_OK ? (ct_status)what.status : CT_ERR_VALUE, "rank %d failed: %s", first,
                      what.msg);
  }
#else
  if (pg) rc = status != CT_OK ? ct_fail((ct_status)status, "%s", full ? full : mine)
                               : ct_fail(CT_ERR_UNAVAILABLE, "ct_dist_agree: no MPI in this build");
#endif
  free(full);
  return rc;
}


// ---- asynchronous all-reduce --------------------------------------------------------------------
ct_work *ct_dist_all_reduce_async(ct_process_group *pg, ct_tensor *t, ct_dist_reduce_op op_kind) {
  static const char op[] = "ct_dist_all_reduce";
  if (check_tensor(op, pg, t)) return NULL;
  ct_work *w = calloc(1, sizeof *w);
  if (!w) {
    ct_fail(CT_ERR_OOM, "%s: out of host memory", op);
    return NULL;
  }
  w->pg = pg;
  w->t = ct_retain(t);
  w->op = op_kind;
  int rc = CT_OK;
#ifdef CT_HAVE_NCCL
  if (pg->nccl) {
    bool ok;
    ncclDataType_t ty = nccl_type(ct_dtype_of(t), &ok);
    if (!ok) rc = ct_fail(CT_ERR_DTYPE, "%s: NCCL has no %s", op, ct_dtype_name(ct_dtype_of(t)));
    if (!rc) rc = nccl_enter(pg);
    ncclResult_t nr = rc ? ncclSuccess
                         : ncclAllReduce(ct_data_ptr(t), ct_data_ptr(t), (size_t)ct_numel(t), ty, nccl_op(op_kind),
                                         pg->nc, (cudaStream_t)ct_stream_handle(pg->stream));
    if (!rc && nr != ncclSuccess) rc = nccl_fail(op, nr);
    if (!rc && !(w->done = ct_event_create(pg->device, false))) rc = ct_last_status();
    if (!rc) rc = ct_event_record(w->done, pg->stream);
    if (!rc) ct_record_stream(t, pg->stream); // t's memory is in use on NCCL's stream too
  } else
#endif
  {
#ifdef CT_HAVE_MPI
    w->req = MPI_REQUEST_NULL;
    rc = check_mpi_dtype(op, t);
    if (!rc && !(w->staged = host_view(t))) rc = ct_last_status();
    if (!rc) {
      int err = MPI_Iallreduce(MPI_IN_PLACE, ct_data_ptr(w->staged), (int)ct_numel(t), mpi_type(ct_dtype_of(t)),
                               mpi_op(op_kind), pg->comm, &w->req);
      if (err != MPI_SUCCESS) rc = mpi_fail(op, err);
    }
#else
    rc = ct_fail(CT_ERR_UNAVAILABLE, "%s: no MPI in this build", op);
#endif
  }
  if (rc) {
    w->finished = true;
    w->rc = rc;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_work_wait(w);
    ct_fail((ct_status)rc, "%s", msg);
    return NULL;
  }
  return w;
}

bool ct_work_is_completed(ct_work *w) {
  if (!w || w->finished) return true;
#ifdef CT_HAVE_NCCL
  if (w->pg->nccl) return ct_event_query(w->done);
#endif
#ifdef CT_HAVE_MPI
  int flag = 0;
  if (MPI_Test(&w->req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) return true; // the wait reports it
  return flag != 0;
#else
  return true;
#endif
}

int ct_work_wait(ct_work *w) {
  if (!w) return ct_fail(CT_ERR_VALUE, "ct_work_wait: NULL work");
  int rc = w->rc;
  if (!w->finished) {
#ifdef CT_HAVE_NCCL
    if (w->pg->nccl) {
      rc = ct_stream_wait_event(ct_current_stream(w->pg->device), w->done); // the device waits, not the host
    } else
#endif
    {
#ifdef CT_HAVE_MPI
      int err = mpi_wait_sleeping(&w->req);
      rc = err != MPI_SUCCESS ? mpi_fail("ct_dist_all_reduce", err) : host_back(w->t, w->staged);
      if (!rc) rc = scale_avg(w->pg, w->t, w->op);
#endif
    }
  }
#ifdef CT_HAVE_MPI
  ct_free(w->staged);
#endif
  ct_event_free(w->done);
  ct_free(w->t);
  free(w);
  return rc;
}
