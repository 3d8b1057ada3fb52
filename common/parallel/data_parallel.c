// SPDX-License-Identifier: MIT
//
// data_parallel: nn.DataParallel, one thread per replica (parallel.h states
// the invariants).
//
// A step, as the wrapper runs it:
//   forward   scatter x -> chunks; copy the module's tensors into replicas
//             1..k-1 (the "broadcast"); run replica i on chunk i on thread i;
//             gather the outputs on device_ids[0];
//   backward  scatter dL/dy with the forward's chunk sizes; run each
//             replica's backward on its thread; add replicas 1..k-1's
//             parameter grads into the module's (replica 0 wrote its own).
// Threads: a replica's thread makes its device current and its stream the
// current stream, waits (on the device, not the host) for the work the
// calling thread queued for it (the chunk's copy, the broadcast), runs, and
// synchronizes its stream before it ends, so the calling thread can read
// the results at once. A failure on a thread is carried back and re-raised
// on the calling thread, naming the replica and its device, as PyTorch's
// "Caught RuntimeError in replica 1 on device 1."
#include "parallel.h"

#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "error.h"
#include "nn_impl.h"
#include "stream.h"

struct ct_data_parallel {
  ct_module *module;                       // replica 0, on devices[0]; not owned
  ct_module *replicas[CT_MAX_REPLICAS];    // [0] = module; [1..n-1] owned
  ct_device devices[CT_MAX_REPLICAS];
  ct_stream *streams[CT_MAX_REPLICAS];     // CUDA replicas' own streams; NULL on the CPU
  int n;
  int64_t split[CT_MAX_REPLICAS];          // the last forward's chunk sizes
  int k;                                   // and their count
  int k_running;                           // replicas of the parallel_apply under way
};

// ---- checks -----------------------------------------------------------------------------------
// PyTorch's check (DataParallel.forward), at creation and at every forward.
static int check_module_device(const char *op, const ct_data_parallel *dp) {
  int n = 0;
  ct_param **state = ct_module_state(dp->module, &n);
  for (int i = 0; i < n; ++i) {
    ct_device d = ct_device_of(state[i]->value);
    if (!ct_device_eq(d, dp->devices[0])) {
      char want[CT_DEVICE_STR_MAX], got[CT_DEVICE_STR_MAX];
      return ct_fail(CT_ERR_DEVICE, "%s: module must have its parameters and buffers on device %s (device_ids[0]) "
                     "but found one of them on device: %s", op, ct_device_str(dp->devices[0], want),
                     ct_device_str(d, got));
    }
  }
  if (!ct_device_eq(ct_module_device(dp->module), dp->devices[0])) {
    char want[CT_DEVICE_STR_MAX], got[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE, "%s: module must be on device %s (device_ids[0]) but is on %s", op,
                   ct_device_str(dp->devices[0], want), ct_device_str(ct_module_device(dp->module), got));
  }
  return CT_OK;
}

// ---- creation ---------------------------------------------------------------------------------
void ct_data_parallel_free(ct_data_parallel *dp) {
  if (!dp) return;
  for (int i = 1; i < dp->n; ++i) ct_module_free(dp->replicas[i]);
  for (int i = 0; i < dp->n; ++i) ct_stream_free(dp->streams[i]);
  free(dp);
}

ct_data_parallel *ct_data_parallel_create(ct_module *module, const ct_device *device_ids, int n) {
  if (!module || !device_ids) {
    ct_fail(CT_ERR_VALUE, "ct_data_parallel_create: NULL module or device_ids");
    return NULL;
  }
  if (n < 1 || n > CT_MAX_REPLICAS) {
    ct_fail(CT_ERR_VALUE, "ct_data_parallel_create: expected 1 to %d device ids, got %d", CT_MAX_REPLICAS, n);
    return NULL;
  }
  ct_data_parallel *dp = calloc(1, sizeof *dp);
  if (!dp) {
    ct_fail(CT_ERR_OOM, "ct_data_parallel_create: out of host memory");
    return NULL;
  }
  dp->module = module;
  dp->n = 1; // what ct_data_parallel_free may release so far
  memcpy(dp->devices, device_ids, (size_t)n * sizeof *device_ids);
  if (check_module_device("ct_data_parallel_create", dp)) {
    free(dp);
    return NULL;
  }
  dp->replicas[0] = module;
  for (int i = 0; i < n; ++i) {
    bool ok = true;
    if (i > 0) ok = (dp->replicas[i] = ct_module_replicate(module, device_ids[i])) != NULL;
    if (ok && device_ids[i].type == CT_CUDA) ok = (dp->streams[i] = ct_stream_create(device_ids[i], 0)) != NULL;
    dp->n = i + 1;
    if (!ok) {
      ct_data_parallel_free(dp);
      return NULL;
    }
  }
  return dp;
}

ct_module *ct_data_parallel_module(ct_data_parallel *dp) { return dp ? dp->module : NULL; }
int ct_data_parallel_replica_count(const ct_data_parallel *dp) { return dp ? dp->n : 0; }
ct_module *ct_data_parallel_replica(ct_data_parallel *dp, int i) {
  return dp && i >= 0 && i < dp->n ? dp->replicas[i] : NULL;
}
int ct_data_parallel_last_split(const ct_data_parallel *dp, int64_t *sizes) {
  if (!dp) return 0;
  if (sizes) memcpy(sizes, dp->split, (size_t)dp->k * sizeof *sizes);
  return dp->k;
}

// ---- the broadcast: module -> replicas 1..k-1 ---------------------------------------------------
static int broadcast_state(ct_data_parallel *dp, int k) {
  int n0 = 0;
  ct_param **src = ct_module_state(dp->module, &n0);
  for (int r = 1; r < k; ++r) {
    int nr = 0;
    ct_param **dst = ct_module_state(dp->replicas[r], &nr);
    if (nr != n0) return ct_fail(CT_ERR_VALUE, "ct_data_parallel: replica %d has %d tensors, the module %d", r, nr, n0);
    for (int i = 0; i < n0; ++i) {
      int rc = ct_copy_(dst[i]->value, src[i]->value, false);
      if (rc) return rc;
    }
    ct_module_train(dp->replicas[r], ct_module_is_training(dp->module));
  }
  return CT_OK;
}

// ---- parallel apply ---------------------------------------------------------------------------
// region: parallel_apply
typedef struct job {
  ct_data_parallel *dp;
  int i;                  // the replica
  const ct_tensor *in;    // its chunk (forward) or its dL/dy (backward)
  bool backward;
  ct_stream *issued_on;   // the calling thread's current stream on the replica's device
  ct_tensor *out;         // forward's output
  int rc;
  char msg[1024];
} job;

static int run_job(job *j) {
  ct_data_parallel *dp = j->dp;
  ct_device d = dp->devices[j->i];
  if (d.type == CT_CUDA) {
    int rc = ct_cuda_set_device(d.index);                       // torch.cuda.device(i)
    if (!rc) rc = ct_set_stream(dp->streams[j->i]);             // torch.cuda.stream(s)
    if (!rc) rc = ct_stream_wait_stream(dp->streams[j->i], j->issued_on); // the chunk's copy first
    if (rc) return rc;
  }
  ct_module *m = dp->replicas[j->i];
  int rc = CT_OK;
  if (j->backward) rc = ct_module_backward_params(m, j->in);
  else if (!(j->out = ct_module_forward(m, j->in))) rc = ct_last_status();
  if (!rc && d.type == CT_CUDA) rc = ct_stream_synchronize(dp->streams[j->i]);
  return rc;
}

static void *job_thread(void *arg) {
  job *j = arg;
#ifdef _OPENMP
  // CPU replicas share the host's cores: one OpenMP thread each, rather than
  // a fresh team per replica thread competing for the same cores.
  if (j->dp->devices[j->i].type == CT_CPU && j->dp->k_running > 1) omp_set_num_threads(1);
#endif
  j->rc = run_job(j);
  if (j->rc) snprintf(j->msg, sizeof j->msg, "%s", ct_last_error());
  return NULL;
}

// Runs jobs[0..k-1], each on its own thread (one job runs on the calling
// thread, as PyTorch calls the module directly for one device). Leaves with
// every job finished; the first failure re-raised here.
static int parallel_apply(job *jobs, int k) {
  pthread_t tid[CT_MAX_REPLICAS];
  bool started[CT_MAX_REPLICAS] = {false};
  for (int i = 0; i < k; ++i) {
    ct_device d = jobs[i].dp->devices[jobs[i].i];
    jobs[i].issued_on = d.type == CT_CUDA ? ct_current_stream(d) : NULL;
  }
  jobs[0].dp->k_running = k;
  if (k == 1) {
    job_thread(&jobs[0]);
  } else {
    for (int i = 0; i < k; ++i) started[i] = pthread_create(&tid[i], NULL, job_thread, &jobs[i]) == 0;
    for (int i = 0; i < k; ++i) {
      if (started[i]) pthread_join(tid[i], NULL);
      else jobs[i].rc = ct_fail(CT_ERR_VALUE, "ct_data_parallel: could not start the thread of replica %d", i);
    }
  }
  for (int i = 0; i < k; ++i) {
    if (!jobs[i].rc) continue;
    char dev[CT_DEVICE_STR_MAX];
    return ct_fail((ct_status)jobs[i].rc, "ct_data_parallel: caught an error in replica %d on device %s:\n%s", i,
                   ct_device_str(jobs[i].dp->devices[i], dev), jobs[i].msg);
  }
  return CT_OK;
}
// endregion

// ---- forward and backward ------------------------------------------------------------------------
ct_tensor *ct_data_parallel_forward(ct_data_parallel *dp, const ct_tensor *x) {
  if (!dp || !x) {
    ct_fail(CT_ERR_VALUE, "ct_data_parallel_forward: NULL wrapper or input");
    return NULL;
  }
  if (check_module_device("ct_data_parallel_forward", dp)) return NULL;
  ct_tensor *chunks[CT_MAX_REPLICAS] = {NULL};
  int k = 0;
  if (ct_comm_scatter(x, dp->devices, dp->n, NULL, chunks, &k)) return NULL;
  ct_tensor *y = NULL;
  job jobs[CT_MAX_REPLICAS];
  memset(jobs, 0, sizeof jobs);
  if (broadcast_state(dp, k) == CT_OK) {
    for (int i = 0; i < k; ++i) jobs[i] = (job){.dp = dp, .i = i, .in = chunks[i]};
    if (parallel_apply(jobs, k) == CT_OK) {
      ct_tensor *outs[CT_MAX_REPLICAS];
      for (int i = 0; i < k; ++i) outs[i] = jobs[i].out;
      y = ct_comm_gather(outs, k, dp->devices[0]);
    }
  }
  for (int i = 0; i < k; ++i) {
    if (y) dp->split[i] = ct_shape_of(chunks[i]).d[0];
    ct_free(chunks[i]);
    ct_free(jobs[i].out);
  }
  dp->k = y ? k : 0;
  return y;
}

// region: reduce_grads
// The module's grads += replicas 1..k-1's grads (reduce_add onto device 0).
static int reduce_grads(ct_data_parallel *dp, int k) {
  int np = 0;
  ct_param **dst = ct_module_parameters(dp->module, &np);
  /* LAB BEGIN: for each replica r = 1..k-1, each parameter i with a grad: copy it to devices[0] and add it into dst[i]'s grad (cti_param_accumulate_grad); return a failure's status | test: chapter.ch07, unit.parallel */
  for (int r = 1; r < k; ++r) {
    int nr = 0;
    ct_param **src = ct_module_parameters(dp->replicas[r], &nr);
    for (int i = 0; i < np && i < nr; ++i) {
      if (!src[i]->grad) continue; // a parameter that took no part in the forward
      ct_tensor *g = ct_to_device(src[i]->grad, dp->devices[0]);
      int rc = g ? cti_param_accumulate_grad(dst[i], g) : (int)ct_last_status();
      ct_free(g);
      if (rc) return rc;
    }
  }
  /* LAB END */
  return CT_OK;
}

int ct_data_parallel_backward_params(ct_data_parallel *dp, const ct_tensor *grad_output) {
  if (!dp || !grad_output) return ct_fail(CT_ERR_VALUE, "ct_data_parallel_backward_params: NULL wrapper or gradient");
  if (dp->k == 0)
    return ct_fail(CT_ERR_VALUE, "ct_data_parallel_backward_params: no forward to go back through (call "
                   "ct_data_parallel_forward first)");
  int k = dp->k;
  ct_tensor *chunks[CT_MAX_REPLICAS] = {NULL};
  int got = 0;
  int rc = ct_comm_scatter(grad_output, dp->devices, k, dp->split, chunks, &got);
  if (rc) return rc;
  for (int r = 1; r < k && !rc; ++r) rc = ct_module_zero_grad(dp->replicas[r], true);
  if (!rc) {
    job jobs[CT_MAX_REPLICAS];
    for (int i = 0; i < k; ++i) jobs[i] = (job){.dp = dp, .i = i, .in = chunks[i], .backward = true};
    rc = parallel_apply(jobs, k);
  }
  if (!rc) rc = reduce_grads(dp, k);
  for (int i = 0; i < got; ++i) ct_free(chunks[i]);
  return rc;
}
// endregion
