// SPDX-License-Identifier: MIT
//
// nn_kernels: the fused kernels of the nn family (internal), each on the CPU
// (cpu_nn.c) and on CUDA (kernels/nn.cu): entry `x` is cpu_nn.c's static `x`
// and kernels/nn.cu's static `cuda_x`.
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
#include "oplist.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

// The family's table: one signature on both devices. The CPU entries run at
// once and ignore `s`; the CUDA entries queue on `s`. A backend reaches it as
// cti_backend_for(op, dev)->nn.
#define CTI_NN_OPS(X)                                                                                \
  X(nn, relu_backward, OP, int, "relu_backward", CTI_SH_1_1(n, n), ARG(ct_dtype, dt),            \
    ARG(int64_t, n), ARG(const void *, y), ARG(const void *, g), ARG(void *, out))                   \
  X(nn, dropout, OP, int, "dropout", CTI_SH_1(n), ARG(ct_dtype, dt), ARG(int64_t, n),                \
    ARG(const void *, x), ARG(const float *, u), ARG(double, p), ARG(double, scale), ARG(void *, y),  \
    ARG(void *, mask))                                                                               \
  X(nn, cross_entropy, BAD, int, "cross_entropy", CTI_SH_2_1(n, c, n), ARG(ct_dtype, dt),             \
    ARG(int64_t, n), ARG(int64_t, c), ARG(const void *, logits), ARG(const int64_t *, target),        \
    ARG(void *, loss), ARG(void *, grad), ARG(double, inv_n), ARG_BAD(int64_t, bad_row))
typedef struct cti_nn_kernels {
  CTI_NN_OPS(CTI_OP_FIELD)
} cti_nn_kernels;

extern const cti_nn_kernels cti_cpu_nn_kernels;  // cpu_nn.c
extern const cti_nn_kernels cti_cuda_nn_kernels; // kernels/nn.cu (CUDA builds only)

#ifdef __cplusplus
}
#endif
#endif
