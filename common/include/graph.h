// SPDX-License-Identifier: MIT
//
// graph: CUDA graphs, as torch.cuda.CUDAGraph. A whole training step is
// captured once on a side stream and then replayed, with no host-side work
// per op: the dispatcher's checks, broadcasting, dtype promotion and
// allocations are paid at capture only.
//
// Invariant: a captured graph holds the kernel calls of its step with their
// arguments fixed, pointers included. So every tensor the step reads or
// writes keeps its address from capture to the last replay: the step's own
// temporaries and results come from the graph's private memory pool, which
// nothing else allocates from; the tensors made before the capture (the
// parameters, the optimizer's state, the static input and target) must stay
// alive and are fed by copying new values into them (ct_copy_), never by
// making new tensors.
//
// On CUDA this is real stream capture: cudaStreamBeginCapture on the capture
// stream in thread-local mode, cudaStreamEndCapture, cudaGraphInstantiate,
// and replay is one cudaGraphLaunch on the current stream. On the CPU the
// runtime records the same step under the same rules: while a thread
// captures, the dispatcher hands its ops a recording backend, which appends
// each kernel call (the table entry and its arguments, copied by value) to
// the graph instead of running it; replay runs the list. Either way nothing
// runs during capture: the outputs of a captured step appear at its first
// replay.
//
// What capture forbids, on both devices, for the capturing thread and its
// device (each refusal names the op, fails with CT_ERR_CAPTURE and
// invalidates the capture; ct_cuda_graph_capture_end then fails, naming the
// first refusal, and the runtime is usable again):
//  - anything that waits for the device: ct_stream_synchronize,
//    ct_event_synchronize, ct_cuda_synchronize, ct_item, ct_copy_to_host,
//    blocking copies between devices or from host memory, ct_empty_cache,
//    ct_any_nonfinite ("operation not permitted when stream is capturing",
//    CUDA's words for cudaErrorStreamCaptureUnsupported);
//  - a block for the capture stream from a pool other than the graph's;
//  - work on the device's default (legacy) stream while it captures
//    ("operation would make the legacy stream depend on a capturing blocking
//    stream", CUDA's words for cudaErrorStreamCaptureImplicit), and capture
//    on a default stream at all (PyTorch's message);
//  - an optimizer whose step computes per-step scalars on the host (Adam,
//    AdamW: their bias corrections would be frozen at the captured step),
//    with PyTorch's message for a non-capturable optimizer.
// Work issued on another stream during capture runs at once, outside the
// graph, as CUDA's thread-local mode allows. Random ops captured in a graph
// draw the same numbers at every replay (their Philox offset is an argument
// fixed at capture); PyTorch advances it per replay.
#ifndef CT_GRAPH_H
#define CT_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_cuda_graph ct_cuda_graph;
// A private memory pool that one or more graphs allocate from (PyTorch's
// graph_pool_handle): graphs sharing one must be replayed in the order they
// were captured, since a later capture may reuse memory an earlier one
// freed.
typedef struct ct_graph_pool ct_graph_pool;

ct_cuda_graph *ct_cuda_graph_create(void); // torch.cuda.CUDAGraph()
// Drops the capture (reset) and the graph. Memory of the pool still held by
// live tensors stays valid until they are freed.
void ct_cuda_graph_free(ct_cuda_graph *g);

// Starts capturing on stream s, which must not be a default stream, and
// makes s the current stream of its device until capture_end (what
// `with torch.cuda.graph(g, stream=s, pool=pool):` does; on CUDA the device
// is synchronized first, as there). pool NULL: the graph gets a pool of its
// own. Enters with g empty (new or reset).
int ct_cuda_graph_capture_begin(ct_cuda_graph *g, ct_stream *s, ct_graph_pool *pool);
// Ends the capture and makes the graph replayable; restores the current
// stream. Fails (and leaves g empty) when the capture was invalidated.
int ct_cuda_graph_capture_end(ct_cuda_graph *g);
// Runs the captured step once on the current stream of the graph's device
// (asynchronously on CUDA).
int ct_cuda_graph_replay(ct_cuda_graph *g);
// Forgets the capture; g can capture again. Its pool is released once no
// graph and no live block uses it.
int ct_cuda_graph_reset(ct_cuda_graph *g);
// g.pool(): a new reference to the graph's pool (release it), for capturing
// another graph into the same memory; NULL before a capture.
ct_graph_pool *ct_cuda_graph_pool(ct_cuda_graph *g);
// Kernel calls (CUDA: graph nodes) in the captured graph; 0 when empty.
int64_t ct_cuda_graph_num_nodes(const ct_cuda_graph *g);
// The device the graph was captured on (the CPU when empty).
ct_device ct_cuda_graph_device(const ct_cuda_graph *g);

// torch.cuda.graph_pool_handle(): a new private pool on device d.
ct_graph_pool *ct_graph_pool_handle(ct_device d);
void ct_graph_pool_free(ct_graph_pool *p);

// torch.cuda.is_current_stream_capturing(): whether this thread is capturing
// on d's current stream.
bool ct_is_current_stream_capturing(ct_device d);

#ifdef __cplusplus
}
#endif
#endif
