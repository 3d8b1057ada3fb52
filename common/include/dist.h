// SPDX-License-Identifier: MIT
//
// dist: many processes. torch.distributed's process group over real engines
// (Open MPI for processes and CPU collectives, NCCL for GPU collectives),
// DistributedSampler with PyTorch's shards, and DistributedDataParallel
// (chapter 8).
//
// Invariants:
//  - a process group is made once per process, after tools/launch (or any
//    launcher that sets them) has put RANK, LOCAL_RANK, WORLD_SIZE,
//    MASTER_ADDR and MASTER_PORT in the environment; MPI's own rank and size
//    must agree with them. Missing or contradictory variables are an error
//    naming the variable and the launcher to use, never a hang;
//  - backend "mpi" takes CPU tensors (a CUDA tensor is staged through pinned
//    host memory); backend "nccl" takes CUDA tensors on this rank's device
//    (one GPU per rank; NCCL's unique id travels over MPI); every collective
//    works in place on contiguous tensors of one dtype;
//  - the asynchronous forms return a ct_work that must be waited on exactly
//    once (ct_work_wait frees it); a tensor given to one must not be read or
//    written until then;
//  - DistributedDataParallel's gradients after a synced backward are the
//    mean over the ranks of each rank's gradients, as PyTorch's are, so that
//    N ranks with batch B reach the parameters of one process with batch N*B.
#ifndef CT_DIST_H
#define CT_DIST_H
#include <stdbool.h>
#include <stdint.h>
#include "nn.h"
#include "tensor.h"
#ifdef __cplusplus
extern "C" {
#endif

// ---- DistributedSampler (no process group needed) -----------------------------------------------
// torch.utils.data.DistributedSampler(dataset of `length`, num_replicas,
// rank, shuffle, seed, drop_last) at `epoch` (set_epoch): with shuffle, the
// permutation is torch.randperm(length) under torch.Generator().manual_seed(
// seed + epoch), PyTorch's exact numbers; without drop_last the list is
// padded by repeating its start to a multiple of num_replicas; the rank's
// shard is indices[rank::num_replicas]. Writes ct_distributed_sampler_len()
// indices into out.
typedef struct ct_distributed_sampler {
  int64_t length;
  int num_replicas, rank;
  bool shuffle, drop_last;
  uint64_t seed;
  int64_t epoch; // set_epoch(e)
} ct_distributed_sampler;
int64_t ct_distributed_sampler_len(const ct_distributed_sampler *s); // num_samples
int ct_distributed_sampler_indices(const ct_distributed_sampler *s, int64_t *out);
// torch.randperm(n, generator=torch.Generator().manual_seed(seed)), CPU:
// mt19937 and Fisher-Yates as PyTorch draws them (n < 2^31).
int ct_randperm_torch(int64_t n, uint64_t seed, int64_t *out);

// ---- the process group ------------------------------------------------------------------------
typedef struct ct_process_group ct_process_group;
typedef struct ct_work ct_work;
// dist.ReduceOp
typedef enum ct_dist_reduce_op { CT_REDUCE_SUM, CT_REDUCE_AVG, CT_REDUCE_MAX, CT_REDUCE_MIN } ct_dist_reduce_op;

// dist.init_process_group(backend) with init_method env://: backend "mpi" or
// "nccl". NULL with an error naming what is wrong (an unset variable, a
// backend this build lacks, NCCL asked for on a rank without its GPU).
ct_process_group *ct_dist_init_process_group(const char *backend);
void ct_dist_destroy_process_group(ct_process_group *pg);
int ct_dist_get_rank(const ct_process_group *pg);
int ct_dist_get_world_size(const ct_process_group *pg);
int ct_dist_get_local_rank(const ct_process_group *pg);
const char *ct_dist_get_backend(const ct_process_group *pg); // "mpi" | "nccl"
// The device this rank computes on: the CPU for "mpi", cuda:LOCAL_RANK for "nccl".
ct_device ct_dist_device(const ct_process_group *pg);

int ct_dist_all_reduce(ct_process_group *pg, ct_tensor *t, ct_dist_reduce_op op);
int ct_dist_broadcast(ct_process_group *pg, ct_tensor *t, int src);
// out[r] receives rank r's `in` (world_size tensors of in's shape and dtype).
int ct_dist_all_gather(ct_process_group *pg, ct_tensor *const *out, const ct_tensor *in);
// out = the reduction over ranks of in[rank], where in holds world_size tensors
// of out's shape (torch's reduce_scatter(output, input_list)).
int ct_dist_reduce_scatter(ct_process_group *pg, ct_tensor *out, ct_tensor *const *in, ct_dist_reduce_op op);
int ct_dist_barrier(ct_process_group *pg);
// Agreement after setup (data, vocabulary, model): every rank calls it with
// its own status (CT_OK or the failure's) and message (NULL: ct_last_error()).
// CT_OK when every rank is ok. Otherwise every rank gets a failure back
// together: the failing rank its own status and message, the others the
// lowest failing rank's status and "rank K failed: <its message>" (at most
// 1023 bytes, longer ones end in "..."), so each can print it and exit 1
// instead of waiting in a later collective for a rank that has given up.
int ct_dist_agree(ct_process_group *pg, int status, const char *message);
// async_op=True: the collective starts and a handle comes back.
ct_work *ct_dist_all_reduce_async(ct_process_group *pg, ct_tensor *t, ct_dist_reduce_op op);
bool ct_work_is_completed(ct_work *w); // also drives MPI's progress
int ct_work_wait(ct_work *w);          // waits, then frees the handle

// ---- DistributedDataParallel --------------------------------------------------------------------------
typedef struct ct_ddp_options {
  double bucket_cap_mb;    // 0: not given (PyTorch's None): a 1 MiB first bucket,
                           // then 25 MiB; > 0: every bucket's limit, the first's too
                           // (PyTorch 2.x; 1.13 kept the 1 MiB first bucket)
  bool broadcast_buffers;  // true: rank 0's buffers at each forward
} ct_ddp_options;
ct_ddp_options ct_ddp_defaults(void);

typedef struct ct_ddp ct_ddp;
// Wraps `module` (on ct_dist_device(pg); not owned): broadcasts rank 0's
// parameters and buffers (a tied tensor once), groups the parameters into
// buckets (limits as bucket_cap_mb says), in reverse registration order (the
// order backward makes their gradients ready), once: PyTorch 2.x reduces the
// first iteration in one bucket and rebuilds them in the order gradients
// became ready, which for ct's modules is this order. Nothing is replicated, so a root
// with tied parameters (ct_module_tie) is fine.
ct_ddp *ct_ddp_create(ct_module *module, ct_process_group *pg, ct_ddp_options options);
void ct_ddp_free(ct_ddp *ddp);
ct_tensor *ct_ddp_forward(ct_ddp *ddp, const ct_tensor *x);
// loss.backward(): runs the module's backward; each bucket is all-reduced,
// asynchronously, as soon as backward has made all its gradients; returns
// with every gradient averaged over the ranks (unless inside no_sync).
int ct_ddp_backward_params(ct_ddp *ddp, const ct_tensor *grad_output);
// For a model whose forward and backward the program writes out itself (a
// GPT run module by module, its root a ModuleDict, ties allowed): after the
// program's own backward has accumulated every parameter's grad, averages
// each .grad over the ranks, with ct_ddp_backward_params's buckets (reverse
// registration order, the same limits); a tied parameter is one parameter, in
// one slot. All buckets start after the backward (no overlap: nothing tells
// ct when a hand-written backward has finished a bucket). Every rank must
// call it once per step; inside no_sync it does nothing. A parameter without
// a grad fails, naming it.
int ct_ddp_allreduce_grads(ct_ddp *ddp);
// with ddp.no_sync(): while on, backward only accumulates local gradients;
// the first synced backward after it all-reduces the accumulated sums.
void ct_ddp_set_no_sync(ct_ddp *ddp, bool on);
// Overlap off: every bucket waits for the end of backward (for measuring).
void ct_ddp_set_overlap(ct_ddp *ddp, bool on);
int ct_ddp_bucket_count(const ct_ddp *ddp);
// Parameters in bucket b (their indices in model.parameters()), *n the count.
const int *ct_ddp_bucket(const ct_ddp *ddp, int b, int *n);
// Seconds the last synced backward spent waiting for all-reduces after its
// computation ended (0 when everything overlapped).
double ct_ddp_last_wait_seconds(const ct_ddp *ddp);
ct_module *ct_ddp_module(ct_ddp *ddp);

#ifdef __cplusplus
}
#endif
#endif
