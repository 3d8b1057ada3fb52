// SPDX-License-Identifier: MIT
//
// nn_kernels: the fused kernels of the nn family (internal), each on the CPU
// (cpu_nn.c) and on CUDA (kernels/nn.cu).
//
// The public functions (nn_act.c, nn_loss.c) check shapes, dtypes and
// devices, make the operands contiguous, allocate the results and call the
// entry of the tensors' backend (cti_backend_for(op, dev)->nn); an entry only
// runs the loop. Every pointer is
// element 0 of a contiguous buffer on the entry's device; CUDA entries issue
// their work on stream `s` and return once it is queued (except the
// cross-entropy entry, which waits for its target check). Each returns CT_OK
// or a status recorded with ct_fail (an unsupported dtype is CT_ERR_DTYPE).
//
//  relu_backward: out[i] = y[i] <= 0 ? 0 : g[i], y the ReLU's output (as
//    torch's threshold_backward: a NaN output passes the gradient on).
//    Floating dtypes (f32, f64, f16, bf16); y, g and out of dtype dt.
//  dropout: mask[i] = u[i] >= p ? scale : 0 (rounded to dt), y[i] = x[i] *
//    mask[i]; u is float32 uniform [0, 1) from Philox (ct_rand). Floating dt.
//  cross_entropy: logits (n, c) and target (n,) int64; for each row i
//    loss[i] = logsumexp(x_i) - x_i[t_i] (max-shifted, so no overflow), and
//    when grad is not NULL grad[i, j] = (softmax(x_i)_j - [j == t_i]) * inv_n.
//    dt is f32 or f64 for logits, loss (n,) and grad (n, c); sums run in
//    double on the CPU and in dt on CUDA. On the CPU *bad_row gets the first
//    row whose target is outside [0, c), or -1; then loss and grad hold
//    nothing meaningful. The CUDA entry only queues the kernel and leaves
//    *bad_row at -1: the kernel reports a bad row to the device's
//    async_error record (the row's loss and gradient become NaN), and the
//    error surfaces at the next call that waits for the device.
#ifndef CT_NN_KERNELS_H
#define CT_NN_KERNELS_H

#include <stdint.h>

#include "dtype.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// The family's table: one signature on both devices. The CPU entries run at
// once and ignore `s`; the CUDA entries queue on `s`. A backend reaches it as
// cti_backend_for(op, dev)->nn.
typedef struct cti_nn_kernels {
  int (*relu_backward)(ct_dtype dt, int64_t n, const void *y, const void *g, void *out,
                       ct_stream *s);
  int (*dropout)(ct_dtype dt, int64_t n, const void *x, const float *u, double p, double scale,
                 void *y, void *mask, ct_stream *s);
  int (*cross_entropy)(ct_dtype dt, int64_t n, int64_t c, const void *logits,
                       const int64_t *target, void *loss, void *grad, double inv_n,
                       int64_t *bad_row, ct_stream *s);
} cti_nn_kernels;

extern const cti_nn_kernels cti_cpu_nn_kernels;  // cpu_nn.c
extern const cti_nn_kernels cti_cuda_nn_kernels; // kernels/nn.cu (CUDA builds only)

#ifdef __cplusplus
}
#endif
#endif
