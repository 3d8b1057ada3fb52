// SPDX-License-Identifier: MIT
//
// conv_kernels: the loops behind Conv2d, MaxPool2d and BatchNorm2d
// (internal), each on the CPU (cpu_conv.c) and on CUDA (kernels/conv.cu):
// entry `x` is cpu_conv.c's static `x` and kernels/conv.cu's static `cuda_x`.
//
// The modules (nn_conv.c, nn_pool.c, nn_batchnorm.c) check shapes, dtypes
// and devices, make the operands contiguous, allocate the results, run the
// GEMMs through the device's backend (OpenBLAS or cuBLAS) and call the entry
// of the tensors' backend (cti_backend_for(op, dev)->conv); an entry only runs
// its loop. Every pointer is
// element 0 of a contiguous buffer on the entry's device. dt is float32 or float64 (anything else is
// CT_ERR_DTYPE; im2col and cnhw_from_nchw, which only move elements, take
// float16 and bfloat16 too, and so does max pooling, which compares and sums
// them in float); CUDA entries issue their work on stream `s` and return once
// it is queued. Each returns CT_OK or a status recorded with ct_fail.
//
// Convolution, im2col layout. For x (N, C, H, W), a k x k kernel, stride s
// and zero padding p, the output is Ho x Wo with Ho = (H + 2p - k) / s + 1.
// The column matrix of N images (a chunk of the batch) is
//   cols (C*k*k, N*Ho*Wo):  cols[(c*k + i)*k + j][(n*Ho + oh)*Wo + ow]
//                           = x[n][c][oh*s - p + i][ow*s - p + j]  (0 outside)
// so that W (C_out, C*k*k) @ cols[:, n*Ho*Wo : (n+1)*Ho*Wo] is image n's
// output. Backward needs dL/dy with the same column order: cnhw_from_nchw
// lays it out as gt (C_out, N*Ho*Wo), and col2im sums a column matrix back
// into the images:
//   dx[n][c][h][w] = sum over (i, j, oh, ow) with oh*s - p + i == h and
//                    ow*s - p + j == w of dcols[(c*k + i)*k + j][(n*Ho + oh)*Wo + ow]
// Every output element is written by one thread, in a fixed order, so the
// results do not depend on the thread count (col2im gathers, never adds
// concurrently), and the CPU and CUDA loops sum in the same order.
//
// Max pooling over k x k windows with stride s (floor mode, no padding) of
// `planes` = N*C planes of H x W: y[q][oh][ow] is the max of the window at
// (oh*s, ow*s), and idx (int32, may be NULL in eval) receives its position
// h*W + w inside the plane, as torch's indices. A window's maximum is
// found as torch's CPU kernel does: starting from -inf at the window's first
// element, a value replaces it when it is greater or NaN (so the first of
// equal maxima wins and a NaN always propagates; the CPU's 2x2 / stride-2
// loop gets the same answer by selects). Backward:
//   dx[q][h*W + w] = sum of dy[q][o] over outputs o with idx[q][o] == h*W + w
// (windows overlap when s < k), in ascending o; for float16 and bfloat16
// the sum runs in float and is rounded once (both devices gather per input
// element for them, so the bits agree).
//
// Batch normalization over x (N, C, P), P = H*W, per channel c over the M =
// N*P values:
//   bn_stats: mean[c] = sum x / M, var = sum (x - mean)^2 / M (two passes,
//     sums in double), invstd[c] = 1 / sqrt(var + eps); when running_mean
//     is not NULL, running = (1 - momentum) * running + momentum * batch,
//     with the unbiased variance var * M / (M - 1) (M >= 2) for running_var;
//   bn_apply: y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c];
//   bn_eval: y = (x - rmean[c]) / sqrt(rvar[c] + eps) * gamma[c] + beta[c];
//   bn_backward: with xhat = (x - mean) * invstd,
//     dbeta[c] = sum dy, dgamma[c] = sum dy * xhat (sums in double),
//     dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
// mean, invstd, running stats, gamma, beta, dgamma and dbeta are (C,) of dt.
#ifndef CT_CONV_KERNELS_H
#define CT_CONV_KERNELS_H

#include <stdint.h>

#include "dtype.h"
#include "oplist.h"
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cti_conv_geom {
  int64_t n, c, h, w; // input (N, C, H, W)
  int64_t k, stride, pad;
  int64_t ho, wo;     // output spatial size
} cti_conv_geom;

typedef struct cti_pool_geom {
  int64_t planes, h, w; // N*C planes of H x W
  int64_t k, stride;
  int64_t ho, wo;
} cti_pool_geom;

// The family's table: one signature on both devices. The CPU entries run at
// once and ignore `s`; the CUDA entries queue on `s`. A backend reaches it as
// cti_backend_for(op, dev)->conv.
// cnhw_from_nchw: dst (C, N, P) = src (N, C, P).
#define CTI_CONV_OPS(X)                                                                              \
  X(conv, im2col, OP, int, "im2col", CTI_SH_GEOM(g), ARG(ct_dtype, dt), ARG_COPY(cti_conv_geom, g),   \
    ARG(const void *, x), ARG(void *, cols))                                                         \
  X(conv, col2im, OP, int, "col2im", CTI_SH_GEOM(g), ARG(ct_dtype, dt), ARG_COPY(cti_conv_geom, g),   \
    ARG(const void *, cols), ARG(void *, dx))                                                        \
  X(conv, cnhw_from_nchw, OP, int, "cnhw_from_nchw", CTI_SH_3(n, c, p), ARG(ct_dtype, dt),           \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, p), ARG(const void *, src), ARG(void *, dst))      \
  X(conv, maxpool_forward, OP, int, "max_pool2d", CTI_SH_3(g->planes, g->h, g->w), ARG(ct_dtype, dt), \
    ARG_COPY(cti_pool_geom, g), ARG(const void *, x), ARG(void *, y), ARG(int32_t *, idx))           \
  X(conv, maxpool_backward, OP, int, "max_pool2d_backward", CTI_SH_3(g->planes, g->ho, g->wo),        \
    ARG(ct_dtype, dt), ARG_COPY(cti_pool_geom, g), ARG(const void *, dy), ARG(const int32_t *, idx),  \
    ARG(void *, dx))                                                                                 \
  X(conv, bn_stats, OP, int, "batch_norm_stats", CTI_SH_3(n, c, p), ARG(ct_dtype, dt),               \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, p), ARG(const void *, x), ARG(double, eps),        \
    ARG(void *, mean), ARG(void *, invstd), ARG(void *, running_mean), ARG(void *, running_var),      \
    ARG(double, momentum))                                                                           \
  X(conv, bn_apply, OP, int, "batch_norm_apply", CTI_SH_3(n, c, p), ARG(ct_dtype, dt),               \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, p), ARG(const void *, x), ARG(const void *, mean), \
    ARG(const void *, invstd), ARG(const void *, gamma), ARG(const void *, beta), ARG(void *, y))     \
  X(conv, bn_eval, OP, int, "batch_norm_eval", CTI_SH_3(n, c, p), ARG(ct_dtype, dt),                 \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, p), ARG(const void *, x),                         \
    ARG(const void *, running_mean), ARG(const void *, running_var), ARG(double, eps),                \
    ARG(const void *, gamma), ARG(const void *, beta), ARG(void *, y))                               \
  X(conv, bn_backward, OP, int, "batch_norm_backward", CTI_SH_3(n, c, p), ARG(ct_dtype, dt),         \
    ARG(int64_t, n), ARG(int64_t, c), ARG(int64_t, p), ARG(const void *, x), ARG(const void *, dy),   \
    ARG(const void *, mean), ARG(const void *, invstd), ARG(const void *, gamma), ARG(void *, dx),    \
    ARG(void *, dgamma), ARG(void *, dbeta))
typedef struct cti_conv_kernels {
  CTI_CONV_OPS(CTI_OP_FIELD)
} cti_conv_kernels;

extern const cti_conv_kernels cti_cpu_conv_kernels;  // cpu_conv.c
extern const cti_conv_kernels cti_cuda_conv_kernels; // kernels/conv.cu (CUDA builds only)

#ifdef __cplusplus
}
#endif
#endif
