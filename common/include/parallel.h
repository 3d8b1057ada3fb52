// SPDX-License-Identifier: MIT
//
// parallel: one process, many devices. torch.chunk's split rule,
// torch.cuda.comm's broadcast / scatter / gather / reduce_add, and
// nn.DataParallel (chapter 7).
//
// The device lists may repeat a device ("cpu,cpu,cpu", "cuda:0,cuda:0"), so
// the mechanics run on a machine with one GPU or none; speed needs distinct
// devices.
//
// DataParallel's invariants:
//  - the wrapped module lives on device_ids[0] and is replica 0 itself: its
//    parameters are the ones the optimizer updates, and its buffers (a
//    BatchNorm's running statistics) are the ones replica 0's chunk updates,
//    as in PyTorch;
//  - replicas 1..n-1 are made once (ct_module_replicate) and receive the
//    module's parameters and buffers at every forward (PyTorch replicates the
//    module at every forward; copying into kept replicas gives the same
//    values without rebuilding them);
//  - a batch of N rows runs on min(n, ceil-split) replicas by torch.chunk's
//    rule: 30 rows on 3 devices are 10+10+10, 10 rows are 4+4+2, 2 rows use 2;
//  - each replica runs on its own thread, with its device current and its own
//    stream; the outputs are gathered on device_ids[0];
//  - backward scatters dL/d(output) the way the forward split the batch, runs
//    each replica's backward on its thread, and adds every replica's
//    parameter gradients into the module's .grad (accumulating, as autograd
//    does through Broadcast's backward). The optimizer then steps once.
#ifndef CT_PARALLEL_H
#define CT_PARALLEL_H
#include <stdint.h>
#include "nn.h"
#include "tensor.h"
#ifdef __cplusplus
extern "C" {
#endif

#define CT_MAX_REPLICAS 16

// torch.chunk(size, chunks) along one dim: chunks of ceil(size / chunks)
// rows, the last one smaller, and fewer than `chunks` of them when there are
// not enough rows (10 in 3: 4, 4, 2; 5 in 4: 2, 2, 1; 2 in 3: 1, 1). Writes
// up to `chunks` sizes and the count in *n. size >= 1, 1 <= chunks <= CT_MAX_REPLICAS.
int ct_chunk_sizes(int64_t size, int chunks, int64_t *sizes, int *n);

// ---- torch.cuda.comm --------------------------------------------------------------------------
// A copy of t on each of the n devices (new tensors, also where t already is).
int ct_comm_broadcast(const ct_tensor *t, const ct_device *devices, int n, ct_tensor **out);
// Splits t along dim 0 (by chunk_sizes, which must sum to t's rows, or by
// torch.chunk's rule when NULL) and puts chunk i on devices[i]; *n_out gets
// the number of chunks (<= n). A chunk already on its device is a view of t.
int ct_comm_scatter(const ct_tensor *t, const ct_device *devices, int n, const int64_t *chunk_sizes,
                    ct_tensor **out, int *n_out);
// The n tensors concatenated along dim 0 on `destination` (same dtype, same
// shape but for dim 0).
ct_tensor *ct_comm_gather(ct_tensor *const *tensors, int n, ct_device destination);
// The element-wise sum of n tensors of one shape and dtype, on `destination`.
ct_tensor *ct_comm_reduce_add(ct_tensor *const *tensors, int n, ct_device destination);

// ---- nn.DataParallel ---------------------------------------------------------------------------
typedef struct ct_data_parallel ct_data_parallel;

// Wraps `module` (not owned: free it after the wrapper) for the n devices of
// device_ids. The module must already be on device_ids[0]: otherwise
// CT_ERR_DEVICE with PyTorch's "module must have its parameters and buffers
// on device cuda:0 (device_ids[0]) but found one of them on device: cpu".
ct_data_parallel *ct_data_parallel_create(ct_module *module, const ct_device *device_ids, int n);
void ct_data_parallel_free(ct_data_parallel *dp);

// model(x): scatter x (N, ...) along dim 0, forward each chunk on its replica
// in parallel, gather the outputs on device_ids[0]. x may be on any device.
ct_tensor *ct_data_parallel_forward(ct_data_parallel *dp, const ct_tensor *x);
// loss.backward() for a batch that needs no input gradient: grad_output is
// dL/d(the last forward's output), on device_ids[0]; every parameter's grad
// of the module receives the sum over the replicas.
int ct_data_parallel_backward_params(ct_data_parallel *dp, const ct_tensor *grad_output);

ct_module *ct_data_parallel_module(ct_data_parallel *dp); // model.module
int ct_data_parallel_replica_count(const ct_data_parallel *dp);
// Replica i (0 is the module itself), e.g. to register a forward hook on it.
ct_module *ct_data_parallel_replica(ct_data_parallel *dp, int i);
// How the last forward split its batch: writes the chunk sizes (up to
// CT_MAX_REPLICAS) and returns their count (0 before the first forward).
int ct_data_parallel_last_split(const ct_data_parallel *dp, int64_t *sizes);

#ifdef __cplusplus
}
#endif
#endif
