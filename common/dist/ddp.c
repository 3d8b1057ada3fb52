// SPDX-License-Identifier: MIT
//
// ddp: DistributedDataParallel. One process per rank, one model per process,
// gradients averaged with all-reduce while backward still runs.
//
// Buckets. The parameters are grouped, in reverse registration order (the
// order backward produces their gradients), into buckets: a bucket takes
// parameters until its bytes reach its limit. PyTorch 2.x's rule: with
// bucket_cap_mb not given (0 here, None there) the first bucket's limit is
// 1 MiB, so that the first all-reduce starts early, and 25 MiB after; an
// explicit bucket_cap_mb is every bucket's limit, the first one's too
// (1.13 kept the 1 MiB first bucket whatever the cap). Each bucket owns one
// flat buffer. PyTorch without find_unused_parameters reduces the first
// iteration in one bucket and then rebuilds the buckets in the order the
// gradients became ready; ct builds them once, at construction, in reverse
// registration order (the order its modules' backward makes them ready).
//
// A synced backward (enters with the module's grads as the optimizer left
// them; leaves with every parameter's grad = the mean over ranks):
//   1. the module's backward runs; after each layer's backward the
//      gradient-ready hook (nn_impl.h) marks that layer's parameters ready;
//   2. when the last parameter of a bucket is ready, its grads are copied
//      into the bucket's flat buffer and an asynchronous all-reduce (mean)
//      starts: MPI_Iallreduce on the CPU, NCCL on its own stream on a GPU;
//      every hook call also tests the started ones, since Open MPI advances
//      a non-blocking collective only inside MPI calls;
//   3. after backward, the buckets still unstarted start, every handle is
//      waited on, and the flat buffers are copied back into the grads.
// With overlap off, step 2 only marks; everything starts in step 3 (for
// measuring what overlap buys). Under no_sync nothing is communicated and the
// grads simply accumulate; the next synced backward reduces the sums.
//
// A model whose forward and backward the program writes out itself (GPT's,
// module by module) has no one backward call to wrap: it runs its backward,
// then ct_ddp_allreduce_grads does step 3 alone, with the same buckets. The
// hooks act only inside ct_ddp_backward_params, so a hand-written backward
// starts nothing early (and a backward outside DDP, an evaluation or a
// gradient check, never starts a collective the other ranks do not join).
//
// Tied parameters (ct_module_tie: GPT's lm_head.weight is wte.weight) are one
// parameter: model.parameters() lists it once, so it has one slot in one
// bucket and is averaged once; the first broadcast sends each tensor once
// though the state lists it under both names.
#define _POSIX_C_SOURCE 200809L
#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "nn_impl.h"
#include "ops.h"

#define FIRST_BUCKET_BYTES (1 << 20) // dist._DEFAULT_FIRST_BUCKET_BYTES
#define DEFAULT_BUCKET_MB 25.0

typedef struct bucket {
  int *idx;         // parameter indices, in the order they fill the flat buffer
  int n, ready;
  int64_t numel;
  ct_dtype dtype;
  ct_tensor *flat;  // (numel,) on the rank's device
  ct_work *work;    // the all-reduce under way, or NULL
} bucket;

struct ct_ddp {
  ct_module *module;
  ct_process_group *pg;
  ct_ddp_options o;
  ct_param **params; // model.parameters() (ct_param structs are stable)
  int np;
  int *bucket_of;    // parameter -> bucket
  bool *is_ready;
  bucket *b;
  int nb;
  bool no_sync, overlap, failed;
  bool in_backward; // inside ct_ddp_backward_params: the hooks may start buckets
  double wait_s;
  char err[1024];
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ct_ddp_options ct_ddp_defaults(void) { return (ct_ddp_options){.bucket_cap_mb = 0, .broadcast_buffers = true}; }

// ---- buckets --------------------------------------------------------------------------------------
static int build_buckets(ct_ddp *d) {
  d->b = calloc((size_t)(d->np > 0 ? d->np : 1), sizeof *d->b);
  d->bucket_of = calloc((size_t)(d->np > 0 ? d->np : 1), sizeof *d->bucket_of);
  d->is_ready = calloc((size_t)(d->np > 0 ? d->np : 1), sizeof *d->is_ready);
  if (!d->b || !d->bucket_of || !d->is_ready) return ct_fail(CT_ERR_OOM, "DistributedDataParallel: out of host memory");
  // PyTorch 2.x's rule: parameters join the open bucket until its bytes reach
  // the limit, then it closes. The limits: 1 MiB, then 25 MiB when
  // bucket_cap_mb is not given; bucket_cap_mb for every bucket when it is.
  bool given = d->o.bucket_cap_mb > 0;
  double cap = (given ? d->o.bucket_cap_mb : DEFAULT_BUCKET_MB) * 1024.0 * 1024.0;
  double first = given ? cap : (double)FIRST_BUCKET_BYTES;
  size_t bytes = 0;
  bool open = false;
  for (int i = d->np - 1; i >= 0; --i) { // reverse registration order
    ct_tensor *v = d->params[i]->value;
    bucket *cur = open ? &d->b[d->nb - 1] : NULL;
    if (!cur || ct_dtype_of(v) != cur->dtype) {
      cur = &d->b[d->nb++];
      cur->dtype = ct_dtype_of(v);
      if (!(cur->idx = calloc((size_t)d->np, sizeof *cur->idx)))
        return ct_fail(CT_ERR_OOM, "DistributedDataParallel: out of host memory");
      bytes = 0;
      open = true;
    }
    cur->idx[cur->n++] = i;
    cur->numel += ct_numel(v);
    d->bucket_of[i] = d->nb - 1;
    bytes += ct_nbytes(v);
    if ((double)bytes >= (d->nb == 1 ? first : cap)) open = false;
  }
  for (int k = 0; k < d->nb; ++k)
    if (!(d->b[k].flat = ct_empty(CT_SHAPE(d->b[k].numel), d->b[k].dtype, ct_dist_device(d->pg))))
      return ct_last_status();
  return CT_OK;
}

// flat[off : off + numel] viewed as parameter i's shape.
static ct_tensor *slot(const ct_ddp *d, const bucket *bk, int j, int64_t off) {
  ct_tensor *v = d->params[bk->idx[j]]->value;
  ct_tensor *part = ct_narrow(bk->flat, 0, off, ct_numel(v));
  ct_tensor *shaped = part ? ct_reshape(part, ct_shape_of(v)) : NULL;
  ct_free(part);
  return shaped;
}

static int launch(ct_ddp *d, bucket *bk) {
  int64_t off = 0;
  for (int j = 0; j < bk->n; ++j) {
    ct_param *p = d->params[bk->idx[j]];
    if (!p->grad)
      return ct_fail(CT_ERR_VALUE, "DistributedDataParallel: parameter \"%s\" received no gradient in this backward "
                     "(ct's DDP has no find_unused_parameters: every parameter must take part in the loss)", p->name);
    ct_tensor *s = slot(d, bk, j, off);
    int rc = s ? ct_copy_(s, p->grad, false) : (int)ct_last_status();
    ct_free(s);
    if (rc) return rc;
    off += ct_numel(p->value);
  }
  bk->work = ct_dist_all_reduce_async(d->pg, bk->flat, CT_REDUCE_AVG);
  return bk->work ? CT_OK : (int)ct_last_status();
}

// The gradient-ready hook: marks m's parameters, starts full buckets, and
// lets MPI advance the ones under way. Errors are kept for the backward's end
// (a hook cannot fail the layer's backward).
static void on_grad_ready(ct_module *m, void *ctx) {
  ct_ddp *d = ctx;
  if (!d->in_backward || d->no_sync || d->failed) return;
  for (int i = 0; i < m->n_own; ++i) {
    if (m->own[i].is_buffer) continue;
    for (int k = 0; k < d->np; ++k) {
      if (d->params[k] != &m->own[i] || d->is_ready[k]) continue;
      d->is_ready[k] = true;
      bucket *bk = &d->b[d->bucket_of[k]];
      if (++bk->ready == bk->n && d->overlap && launch(d, bk) != CT_OK) {
        d->failed = true;
        snprintf(d->err, sizeof d->err, "%s", ct_last_error());
      }
    }
  }
  for (int k = 0; k < d->nb; ++k)
    if (d->b[k].work) (void)ct_work_is_completed(d->b[k].work);
}

// Steps 3 of the top: start the rest, wait for all, copy back.
static int finish(ct_ddp *d) {
  int rc = d->failed ? ct_fail(CT_ERR_VALUE, "%s", d->err) : CT_OK;
  for (int k = 0; !rc && k < d->nb; ++k)
    if (!d->b[k].work) rc = launch(d, &d->b[k]);
  double t0 = now_s();
  for (int k = 0; k < d->nb; ++k) {
    if (!d->b[k].work) continue;
    int w = ct_work_wait(d->b[k].work);
    d->b[k].work = NULL;
    if (!rc) rc = w;
  }
  d->wait_s = now_s() - t0;
  for (int k = 0; !rc && k < d->nb; ++k) {
    bucket *bk = &d->b[k];
    int64_t off = 0;
    for (int j = 0; !rc && j < bk->n; ++j) {
      ct_param *p = d->params[bk->idx[j]];
      ct_tensor *s = slot(d, bk, j, off);
      rc = s ? ct_copy_(p->grad, s, false) : (int)ct_last_status();
      ct_free(s);
      off += ct_numel(p->value);
    }
  }
  return rc;
}

static void reset(ct_ddp *d) {
  memset(d->is_ready, 0, (size_t)d->np * sizeof *d->is_ready);
  for (int k = 0; k < d->nb; ++k) d->b[k].ready = 0;
  d->failed = false;
}

// ---- the wrapper ---------------------------------------------------------------------------------
void ct_ddp_free(ct_ddp *d) {
  if (!d) return;
  cti_module_set_grad_hook(d->module, NULL, NULL);
  for (int k = 0; k < d->nb; ++k) {
    if (d->b[k].work) ct_work_wait(d->b[k].work);
    ct_free(d->b[k].flat);
    free(d->b[k].idx);
  }
  free(d->b);
  free(d->bucket_of);
  free(d->is_ready);
  free(d);
}

// Whether state[i]'s tensor came earlier in the list (a tied name: the same tensor).
static bool seen_before(ct_param **state, int i) {
  for (int j = 0; j < i; ++j)
    if (state[j]->value == state[i]->value) return true;
  return false;
}

static int broadcast_state(ct_ddp *d, bool buffers_only) {
  int n = 0;
  ct_param **state = ct_module_state(d->module, &n);
  for (int i = 0; i < n; ++i) {
    if ((buffers_only && !state[i]->is_buffer) || seen_before(state, i)) continue;
    int rc = ct_dist_broadcast(d->pg, state[i]->value, 0);
    if (rc) return rc;
  }
  return CT_OK;
}

ct_ddp *ct_ddp_create(ct_module *module, ct_process_group *pg, ct_ddp_options o) {
  if (!module || !pg) {
    ct_fail(CT_ERR_VALUE, "DistributedDataParallel: NULL module or process group");
    return NULL;
  }
  if (!(o.bucket_cap_mb >= 0) || !isfinite(o.bucket_cap_mb)) { // 0: not given (None)
    ct_fail(CT_ERR_VALUE, "DistributedDataParallel: bucket_cap_mb must be > 0 (or 0 for the default, None), got %g", o.bucket_cap_mb);
    return NULL;
  }
  ct_device want = ct_dist_device(pg), got = ct_module_device(module);
  if (!ct_device_eq(want, got)) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    ct_fail(CT_ERR_DEVICE, "DistributedDataParallel: the module is on %s, but this rank computes on %s (backend %s): "
            "move it there first", ct_device_str(got, a), ct_device_str(want, b), ct_dist_get_backend(pg));
    return NULL;
  }
  ct_ddp *d = calloc(1, sizeof *d);
  if (!d) {
    ct_fail(CT_ERR_OOM, "DistributedDataParallel: out of host memory");
    return NULL;
  }
  d->module = module;
  d->pg = pg;
  d->o = o;
  d->overlap = true;
  d->params = ct_module_parameters(module, &d->np);
  if (build_buckets(d) != CT_OK || broadcast_state(d, false) != CT_OK) { // rank 0's weights everywhere
    ct_ddp_free(d);
    return NULL;
  }
  cti_module_set_grad_hook(module, on_grad_ready, d);
  return d;
}

ct_tensor *ct_ddp_forward(ct_ddp *d, const ct_tensor *x) {
  if (!d) {
    ct_fail(CT_ERR_VALUE, "DistributedDataParallel: NULL wrapper");
    return NULL;
  }
  if (d->o.broadcast_buffers && broadcast_state(d, true) != CT_OK) return NULL;
  return ct_module_forward(d->module, x);
}

int ct_ddp_backward_params(ct_ddp *d, const ct_tensor *grad_output) {
  if (!d) return ct_fail(CT_ERR_VALUE, "DistributedDataParallel: NULL wrapper");
  reset(d);
  d->in_backward = true;
  int rc = ct_module_backward_params(d->module, grad_output);
  d->in_backward = false;
  if (d->no_sync) return rc;
  if (rc) { // still wait for what started: the other ranks take part in those collectives
    for (int k = 0; k < d->nb; ++k)
      if (d->b[k].work) ct_work_wait(d->b[k].work), d->b[k].work = NULL;
    return rc;
  }
  return finish(d);
}

int ct_ddp_allreduce_grads(ct_ddp *d) {
  if (!d) return ct_fail(CT_ERR_VALUE, "DistributedDataParallel: NULL wrapper");
  if (d->no_sync) return CT_OK; // the grads accumulate; a later call averages the sums
  reset(d);
  return finish(d);
}

void ct_ddp_set_no_sync(ct_ddp *d, bool on) {
  if (d) d->no_sync = on;
}
void ct_ddp_set_overlap(ct_ddp *d, bool on) {
  if (d) d->overlap = on;
}
int ct_ddp_bucket_count(const ct_ddp *d) { return d ? d->nb : 0; }
const int *ct_ddp_bucket(const ct_ddp *d, int b, int *n) {
  if (!d || b < 0 || b >= d->nb) {
    if (n) *n = 0;
    return NULL;
  }
  if (n) *n = d->b[b].n;
  return d->b[b].idx;
}
double ct_ddp_last_wait_seconds(const ct_ddp *d) { return d ? d->wait_s : 0; }
ct_module *ct_ddp_module(ct_ddp *d) { return d ? d->module : NULL; }
