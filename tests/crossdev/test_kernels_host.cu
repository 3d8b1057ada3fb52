// SPDX-License-Identifier: MIT
//
// crossdev test_kernels_host (ctest crossdev.kernels_host; CUDA builds only,
// no GPU needed): the CUDA backend's per-element bodies, run on the host.
//
// Invariant checked: every grid-stride loop of the CUDA backend computes, for
// each index, what the CPU backend computes. The bodies are the very
// functors the kernels run (kernels/*.cuh); cti_host_exec calls them for i =
// 0 .. n-1 on this thread instead of launching them, through the same
// launchers (dtype dispatch, hyperparameters rounded to the dtype, int32 or
// int64 indexing). Each result is compared with the CPU backend's
// (cpu_backend.c's elementwise loop, the ct_cpu_*_kernels tables) on fresh
// random inputs, bit for bit: these loops are specified to give the CPU's
// bits (conv_kernels.h, optim_kernels.h, nn_kernels.h). So CI, which has no
// GPU, still catches a wrong index or a wrong rounding in the CUDA code.
// Covered (with float16/bfloat16 for im2col, the permute and SGD, and
// GradScaler's device-side skip and step count): the elementwise offset walk, im2col/col2im, the NCHW -> CNHW
// permute, max pooling forward and backward, batch norm's affine map (train
// and eval), SGD/Adam/AdamW updates, clip_grad_norm_'s scaling, dropout and
// ReLU's backward. (The reductions -- batch-norm statistics, sums of squares,
// cross-entropy -- use block and warp collectives and run on a GPU only.)
// The transformer family (transformer.cuh) is checked here too, whole:
// embedding lookup and its gradient (bit for bit: both devices sum the same
// rows in the same order), and its warp-per-row kernels -- LayerNorm forward
// and backward with the chunked column sums, the causal scaled softmax and
// its backward, the LM cross-entropy with its target count and ignored rows
// -- through cti_rows_run's host replay of the lanes and the butterfly; those
// sum in float where the CPU sums in double, so they agree to within 1e-5 of
// the tensor's largest value (float32) or 1e-12 (float64). Bad indices and
// targets must be reported to the (host) async_error record.
#include <math.h>
#include <stdlib.h>
// testutil.h brings ct.h, which is C11: cli.h's _Noreturn is [[noreturn]] in C++.
#define _Noreturn [[noreturn]]
#include <string.h>

#include "backend.h"
#include "conv.cuh"
#include "conv_kernels.h"
#include "elementwise.cuh"
#include "nn.cuh"
#include "nn_kernels.h"
#include "optim.cuh"
#include "optim_kernels.h"
#include "transformer.cuh"
#include "transformer_kernels.h"
extern "C" { // testutil and cmocka are C
#include "testutil.h"
}

static const cti_host_exec host{};

// ---- buffers ----------------------------------------------------------------------------------
// n values of float type T, uniform in [lo, hi), from the test's seeded generator.
template <class T> static T *rand_buf(int64_t n, double lo, double hi) {
  double *d = (double *)malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
  tu_fill_uniform(d, n, lo, hi);
  T *t = (T *)malloc((size_t)(n > 0 ? n : 1) * sizeof(T));
  for (int64_t i = 0; i < n; ++i) t[i] = (T)d[i];
  free(d);
  return t;
}

// Two output buffers of `bytes`, both poisoned with the same bytes (NaN for
// floats), so an element one side forgets to write differs from a written one.
static void *poisoned(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  memset(p, 0xff, bytes);
  return p;
}

static void *dup_buf(const void *p, size_t bytes) {
  void *q = malloc(bytes ? bytes : 1);
  memcpy(q, p, bytes);
  return q;
}

// Fails unless the two buffers are identical, naming the first differing element.
template <class T>
static void assert_same(const T *cpu, const T *cuda, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; ++i)
    if (memcmp(&cpu[i], &cuda[i], sizeof(T)) != 0)
      fail_msg("%s: element %lld differs: cpu %.17g, cuda body on the host %.17g", what, (long long)i,
               (double)cpu[i], (double)cuda[i]);
}

// ---- the elementwise offset walk ---------------------------------------------------------------
// a[j] = j and b[j] = j * 2^20, so out = a + b names the two offsets used.
static void check_iter(int ndim, const int64_t *shape, const int64_t *so, const int64_t *sa,
                       const int64_t *sb, const char *what) {
  const int64_t *strides[3] = {so, sa, sb};
  cti_iter it;
  cti_iter_build(&it, ndim, shape, 3, strides);
  int64_t span[3] = {1, 1, 1};
  for (int k = 0; k < 3; ++k)
    for (int d = 0; d < ndim; ++d) span[k] += (shape[d] - 1) * strides[k][d];
  double *a = (double *)malloc((size_t)span[1] * sizeof(double));
  double *b = (double *)malloc((size_t)span[2] * sizeof(double));
  for (int64_t j = 0; j < span[1]; ++j) a[j] = (double)j;
  for (int64_t j = 0; j < span[2]; ++j) b[j] = (double)j * 1048576.0;
  double *out_cpu = (double *)poisoned((size_t)span[0] * sizeof(double));
  double *out_cuda = (double *)poisoned((size_t)span[0] * sizeof(double));
  TU_OK(cti_cpu_backend.binary(CT_OP_ADD, CT_F64, &it, out_cpu, a, b, NULL));
  for (int64_t i = 0; i < it.numel; ++i) {
    int64_t off[3];
    cti_elementwise_offsets<3>(it, i, off);
    out_cuda[off[0]] = a[off[1]] + b[off[2]];
  }
  assert_same(out_cpu, out_cuda, span[0], what);
  free(a), free(b), free(out_cpu), free(out_cuda);
}

static void test_elementwise_offsets(void **state) {
  (void)state;
  { // contiguous: one merged dim, offset = i
    const int64_t sh[] = {2, 3, 4}, c[] = {12, 4, 1};
    check_iter(3, sh, c, c, c, "contiguous (2,3,4)");
  }
  { // one dim, strided a and a broadcast scalar b
    const int64_t sh[] = {7}, so[] = {1}, sa[] = {3}, sb[] = {0};
    check_iter(1, sh, so, sa, sb, "1-d strided, broadcast scalar");
  }
  { // a transposed, b broadcast along dim 0: the N-d walk
    const int64_t sh[] = {5, 6}, so[] = {6, 1}, sa[] = {1, 5}, sb[] = {0, 1};
    check_iter(2, sh, so, sa, sb, "transposed (5,6) + row broadcast");
  }
  { // 4-d, permuted a, b broadcast along two dims, strided output
    const int64_t sh[] = {2, 3, 4, 5}, so[] = {130, 40, 10, 2}, sa[] = {1, 40, 10, 2},
                  sb[] = {0, 5, 0, 1};
    check_iter(4, sh, so, sa, sb, "4-d permuted + broadcast");
  }
}

// ---- im2col / col2im / permute -----------------------------------------------------------------
static cti_conv_geom conv_geom(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s,
                              int64_t p) {
  cti_conv_geom g = {n, c, h, w, k, s, p, 0, 0};
  g.ho = (h + 2 * p - k) / s + 1;
  g.wo = (w + 2 * p - k) / s + 1;
  return g;
}

template <class T> static void check_conv(const cti_conv_geom &g, ct_dtype dt) {
  const int64_t nx = g.n * g.c * g.h * g.w, ncols = g.c * g.k * g.k * g.n * g.ho * g.wo;
  T *x = rand_buf<T>(nx, -2, 2), *dcols = rand_buf<T>(ncols, -2, 2);
  T *c_cpu = (T *)poisoned(ncols * sizeof(T)), *c_cuda = (T *)poisoned(ncols * sizeof(T));
  T *c_cuda64 = (T *)poisoned(ncols * sizeof(T));
  TU_OK(cti_cpu_conv_kernels.im2col(dt, &g, x, c_cpu, NULL));
  TU_OK(cti_im2col_run(host, dt, &g, x, c_cuda));
  // the int64 path, taken by the kernels past 2^30 elements
  TU_OK(host.run(g.c * g.n * g.ho * g.wo, cti_conv_op<cti_im2col_op, T, int64_t>(&g, x, c_cuda64)));
  assert_same(c_cpu, c_cuda, ncols, "im2col");
  assert_same(c_cpu, c_cuda64, ncols, "im2col (int64 indices)");

  T *dx_cpu = (T *)poisoned(nx * sizeof(T)), *dx_cuda = (T *)poisoned(nx * sizeof(T));
  T *dx_cuda64 = (T *)poisoned(nx * sizeof(T));
  TU_OK(cti_cpu_conv_kernels.col2im(dt, &g, dcols, dx_cpu, NULL));
  TU_OK(cti_col2im_run(host, dt, &g, dcols, dx_cuda));
  TU_OK(host.run(nx, cti_conv_op<cti_col2im_op, T, int64_t>(&g, dcols, dx_cuda64)));
  assert_same(dx_cpu, dx_cuda, nx, "col2im");
  assert_same(dx_cpu, dx_cuda64, nx, "col2im (int64 indices)");

  // (N, C, P) -> (C, N, P) of x viewed with P = H*W
  T *p_cpu = (T *)poisoned(nx * sizeof(T)), *p_cuda = (T *)poisoned(nx * sizeof(T));
  TU_OK(cti_cpu_conv_kernels.cnhw_from_nchw(dt, g.n, g.c, g.h * g.w, x, p_cpu, NULL));
  TU_OK(cti_cnhw_run(host, dt, g.n, g.c, g.h * g.w, x, p_cuda));
  assert_same(p_cpu, p_cuda, nx, "cnhw_from_nchw");
  free(x), free(dcols), free(c_cpu), free(c_cuda), free(c_cuda64);
  free(dx_cpu), free(dx_cuda), free(dx_cuda64), free(p_cpu), free(p_cuda);
}

// n float16 or bfloat16 values (their 16-bit patterns), uniform in [lo, hi) then rounded.
static uint16_t *rand_half(ct_dtype dt, int64_t n, double lo, double hi) {
  float *f = rand_buf<float>(n, lo, hi);
  uint16_t *h = (uint16_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
  for (int64_t i = 0; i < n; ++i) h[i] = dt == CT_F16 ? ct_f32_to_f16(f[i]) : ct_f32_to_bf16(f[i]);
  free(f);
  return h;
}

// im2col and the permute only move elements: float16/bfloat16 move as 16-bit patterns.
static void check_moves16(const cti_conv_geom &g, ct_dtype dt) {
  const int64_t nx = g.n * g.c * g.h * g.w, ncols = g.c * g.k * g.k * g.n * g.ho * g.wo;
  uint16_t *x = rand_half(dt, nx, -2, 2);
  uint16_t *c_cpu = (uint16_t *)poisoned(ncols * 2), *c_cuda = (uint16_t *)poisoned(ncols * 2);
  TU_OK(cti_cpu_conv_kernels.im2col(dt, &g, x, c_cpu, NULL));
  TU_OK(cti_im2col_run(host, dt, &g, x, c_cuda));
  assert_same(c_cpu, c_cuda, ncols, "im2col (16-bit)");
  uint16_t *p_cpu = (uint16_t *)poisoned(nx * 2), *p_cuda = (uint16_t *)poisoned(nx * 2);
  TU_OK(cti_cpu_conv_kernels.cnhw_from_nchw(dt, g.n, g.c, g.h * g.w, x, p_cpu, NULL));
  TU_OK(cti_cnhw_run(host, dt, g.n, g.c, g.h * g.w, x, p_cuda));
  assert_same(p_cpu, p_cuda, nx, "cnhw_from_nchw (16-bit)");
  free(x), free(c_cpu), free(c_cuda), free(p_cpu), free(p_cuda);
}

static void test_im2col_col2im(void **state) {
  (void)state;
  const cti_conv_geom gs[] = {conv_geom(2, 3, 7, 6, 3, 2, 1), conv_geom(3, 2, 5, 5, 3, 1, 1),
                             conv_geom(2, 4, 8, 9, 2, 2, 0), conv_geom(1, 1, 4, 4, 4, 1, 2)};
  for (const cti_conv_geom &g : gs) {
    check_conv<float>(g, CT_F32);
    check_conv<double>(g, CT_F64);
    check_moves16(g, CT_F16);
    check_moves16(g, CT_BF16);
  }
}

// ---- max pooling -------------------------------------------------------------------------------
template <class T> static void check_pool(int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s,
                                          ct_dtype dt) {
  cti_pool_geom g = {planes, h, w, k, s, (h - k) / s + 1, (w - k) / s + 1};
  const int64_t nx = planes * h * w, ny = planes * g.ho * g.wo;
  T *x = rand_buf<T>(nx, -1, 1);
  for (int64_t i = 0; i < nx; i += 5) x[i] = x[i / 2]; // ties inside and across windows
  x[nx / 3] = (T)NAN;                                  // a NaN wins its windows
  T *y_cpu = (T *)poisoned(ny * sizeof(T)), *y_cuda = (T *)poisoned(ny * sizeof(T));
  int32_t *i_cpu = (int32_t *)poisoned(ny * 4), *i_cuda = (int32_t *)poisoned(ny * 4);
  TU_OK(cti_cpu_conv_kernels.maxpool_forward(dt, &g, x, y_cpu, i_cpu, NULL));
  TU_OK(cti_maxpool_forward_run(host, dt, &g, x, y_cuda, i_cuda));
  assert_same(y_cpu, y_cuda, ny, "maxpool forward");
  assert_same(i_cpu, i_cuda, ny, "maxpool forward indices");

  T *dy = rand_buf<T>(ny, -1, 1);
  T *dx_cpu = (T *)poisoned(nx * sizeof(T)), *dx_cuda = (T *)poisoned(nx * sizeof(T));
  TU_OK(cti_cpu_conv_kernels.maxpool_backward(dt, &g, dy, i_cpu, dx_cpu, NULL));
  TU_OK(cti_maxpool_backward_run(host, dt, &g, dy, i_cpu, dx_cuda));
  assert_same(dx_cpu, dx_cuda, nx, "maxpool backward");
  free(x), free(y_cpu), free(y_cuda), free(i_cpu), free(i_cuda), free(dy), free(dx_cpu), free(dx_cuda);
}

// float16 / bfloat16: the CUDA body against the CPU bit for bit, and both
// against the float32 kernels on the widened values (the maximum is exact;
// dx is float32's sum rounded once).
static void check_pool16(int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s, ct_dtype dt) {
  cti_pool_geom g = {planes, h, w, k, s, (h - k) / s + 1, (w - k) / s + 1};
  const int64_t nx = planes * h * w, ny = planes * g.ho * g.wo;
  const bool bf = dt == CT_BF16;
  uint16_t *x = rand_half(dt, nx, -1, 1);
  for (int64_t i = 0; i < nx; i += 5) x[i] = x[i / 2]; // ties inside and across windows
  x[nx / 3] = bf ? 0x7fc0 : 0x7e00;                    // a NaN wins its windows
  float *xf = (float *)malloc((size_t)nx * sizeof(float)), *yf = (float *)poisoned(ny * 4);
  for (int64_t i = 0; i < nx; ++i) xf[i] = bf ? ct_bf16_to_f32(x[i]) : ct_f16_to_f32(x[i]);
  uint16_t *y_cpu = (uint16_t *)poisoned(ny * 2), *y_cuda = (uint16_t *)poisoned(ny * 2);
  int32_t *i_cpu = (int32_t *)poisoned(ny * 4), *i_cuda = (int32_t *)poisoned(ny * 4);
  int32_t *i_f = (int32_t *)poisoned(ny * 4);
  TU_OK(cti_cpu_conv_kernels.maxpool_forward(dt, &g, x, y_cpu, i_cpu, NULL));
  TU_OK(cti_maxpool_forward_run(host, dt, &g, x, y_cuda, i_cuda));
  TU_OK(cti_cpu_conv_kernels.maxpool_forward(CT_F32, &g, xf, yf, i_f, NULL));
  assert_same(y_cpu, y_cuda, ny, "maxpool forward (16-bit)");
  assert_same(i_cpu, i_cuda, ny, "maxpool forward indices (16-bit)");
  assert_same(i_cpu, i_f, ny, "maxpool forward indices (16-bit vs float32)");
  for (int64_t i = 0; i < ny; ++i)
    if (y_cpu[i] != x[i_f[i] + (i / (g.ho * g.wo)) * h * w])
      fail_msg("maxpool forward (16-bit): output %lld is not the float32 argmax's element", (long long)i);
  uint16_t *dy = rand_half(dt, ny, -1, 1);
  float *dyf = (float *)malloc((size_t)ny * sizeof(float)), *dxf = (float *)poisoned(nx * 4);
  for (int64_t i = 0; i < ny; ++i) dyf[i] = bf ? ct_bf16_to_f32(dy[i]) : ct_f16_to_f32(dy[i]);
  uint16_t *dx_cpu = (uint16_t *)poisoned(nx * 2), *dx_cuda = (uint16_t *)poisoned(nx * 2);
  TU_OK(cti_cpu_conv_kernels.maxpool_backward(dt, &g, dy, i_cpu, dx_cpu, NULL));
  TU_OK(cti_maxpool_backward_run(host, dt, &g, dy, i_cpu, dx_cuda));
  TU_OK(cti_cpu_conv_kernels.maxpool_backward(CT_F32, &g, dyf, i_cpu, dxf, NULL));
  assert_same(dx_cpu, dx_cuda, nx, "maxpool backward (16-bit)");
  for (int64_t i = 0; i < nx; ++i) {
    const uint16_t want = bf ? ct_f32_to_bf16(dxf[i]) : ct_f32_to_f16(dxf[i]);
    if (dx_cpu[i] != want)
      fail_msg("maxpool backward (16-bit): dx %lld is 0x%04x, float32's sum rounded is 0x%04x", (long long)i,
               dx_cpu[i], want);
  }
  free(x), free(xf), free(yf), free(y_cpu), free(y_cuda), free(i_cpu), free(i_cuda), free(i_f);
  free(dy), free(dyf), free(dxf), free(dx_cpu), free(dx_cuda);
}

static void test_maxpool(void **state) {
  (void)state;
  for (ct_dtype dt : {CT_F16, CT_BF16}) {
    check_pool16(6, 8, 8, 2, 2, dt);
    check_pool16(4, 7, 9, 3, 2, dt); // overlapping windows: dx sums in float
    check_pool16(3, 6, 5, 3, 1, dt);
  }
  check_pool<float>(6, 8, 8, 2, 2, CT_F32);  // the CPU's 2x2 / stride-2 fast path
  check_pool<double>(6, 8, 8, 2, 2, CT_F64);
  check_pool<float>(4, 7, 9, 3, 2, CT_F32);  // overlapping windows
  check_pool<double>(3, 6, 5, 3, 1, CT_F64);
}

// ---- batch norm's affine map -------------------------------------------------------------------
template <class T> static void check_bn(int64_t n, int64_t c, int64_t p, ct_dtype dt) {
  const int64_t nx = n * c * p;
  T *x = rand_buf<T>(nx, -3, 3), *mean = rand_buf<T>(c, -1, 1), *invstd = rand_buf<T>(c, 0.5, 2);
  T *var = rand_buf<T>(c, 0.1, 3), *gamma = rand_buf<T>(c, -2, 2), *beta = rand_buf<T>(c, -1, 1);
  T *y_cpu = (T *)poisoned(nx * sizeof(T)), *y_cuda = (T *)poisoned(nx * sizeof(T));
  TU_OK(cti_cpu_conv_kernels.bn_apply(dt, n, c, p, x, mean, invstd, gamma, beta, y_cpu, NULL));
  TU_OK(cti_bn_affine_run(host, dt, n, c, p, x, mean, invstd, false, 0.0, gamma, beta, y_cuda));
  assert_same(y_cpu, y_cuda, nx, "batch norm apply (train)");
  TU_OK(cti_cpu_conv_kernels.bn_eval(dt, n, c, p, x, mean, var, 1e-5, gamma, beta, y_cpu, NULL));
  TU_OK(cti_bn_affine_run(host, dt, n, c, p, x, mean, var, true, 1e-5, gamma, beta, y_cuda));
  assert_same(y_cpu, y_cuda, nx, "batch norm eval");
  free(x), free(mean), free(invstd), free(var), free(gamma), free(beta), free(y_cpu), free(y_cuda);
}

static void test_bn_affine(void **state) {
  (void)state;
  check_bn<float>(4, 3, 25, CT_F32);
  check_bn<double>(4, 3, 25, CT_F64);
  check_bn<float>(2, 5, 1, CT_F32);
}

// ---- optimizer updates -------------------------------------------------------------------------
// Three steps of each configuration on both sides from the same state; the
// parameter and every state buffer must stay bit-identical.
template <class T> static void check_sgd(ct_dtype dt, cti_sgd_step_args a) {
  const int64_t n = 301;
  T *p = rand_buf<T>(n, -1, 1), *buf = rand_buf<T>(n, -1, 1);
  T *p2 = (T *)dup_buf(p, n * sizeof(T)), *buf2 = (T *)dup_buf(buf, n * sizeof(T));
  for (int step = 0; step < 3; ++step) {
    T *g = rand_buf<T>(n, -1, 1);
    a.init_buf = step == 0;
    TU_OK(cti_cpu_optim_kernels.sgd_step(dt, n, p, g, buf, &a, NULL));
    TU_OK(cti_sgd_step_run(host, dt, n, p2, g, buf2, &a));
    assert_same(p, p2, n, "SGD param");
    assert_same(buf, buf2, n, "SGD momentum_buffer");
    free(g);
  }
  free(p), free(buf), free(p2), free(buf2);
}

template <class T> static void check_adam(ct_dtype dt, cti_adam_step_args a) {
  const int64_t n = 257;
  T *p = rand_buf<T>(n, -1, 1), *m = rand_buf<T>(n, -0.1, 0.1), *v = rand_buf<T>(n, 0, 0.01);
  T *vm = rand_buf<T>(n, 0, 0.01);
  T *p2 = (T *)dup_buf(p, n * sizeof(T)), *m2 = (T *)dup_buf(m, n * sizeof(T));
  T *v2 = (T *)dup_buf(v, n * sizeof(T)), *vm2 = (T *)dup_buf(vm, n * sizeof(T));
  for (int step = 1; step <= 3; ++step) {
    T *g = rand_buf<T>(n, -1, 1);
    a.step_size = a.lr / (1.0 - pow(a.beta1, step));
    a.bias_correction2_sqrt = sqrt(1.0 - pow(a.beta2, step));
    TU_OK(cti_cpu_optim_kernels.adam_step(dt, n, p, g, m, v, vm, &a, NULL));
    TU_OK(cti_adam_step_run(host, dt, n, p2, g, m2, v2, vm2, &a));
    assert_same(p, p2, n, "Adam param");
    assert_same(m, m2, n, "Adam exp_avg");
    assert_same(v, v2, n, "Adam exp_avg_sq");
    assert_same(vm, vm2, n, "Adam max_exp_avg_sq");
    free(g);
  }
  free(p), free(m), free(v), free(vm), free(p2), free(m2), free(v2), free(vm2);
}

static void test_sgd(void **state) {
  (void)state;
  cti_sgd_step_args plain = {0.1, 0.0, 0.0, 0.0, false, false, false};
  cti_sgd_step_args mom = {0.05, 0.9, 0.1, 1e-3, false, false, false};
  cti_sgd_step_args nest = {0.03, 0.8, 0.0, 5e-4, true, true, false};
  for (const cti_sgd_step_args &a : {plain, mom, nest}) {
    check_sgd<float>(CT_F32, a);
    check_sgd<double>(CT_F64, a);
  }
}

// SGD on float16/bfloat16 parameters (model.half()): one rounding per torch op, both sides.
static void check_sgd_half(ct_dtype dt, cti_sgd_step_args a) {
  const int64_t n = 301;
  uint16_t *p = rand_half(dt, n, -1, 1), *buf = rand_half(dt, n, -1, 1);
  uint16_t *p2 = (uint16_t *)dup_buf(p, n * 2), *buf2 = (uint16_t *)dup_buf(buf, n * 2);
  for (int step = 0; step < 3; ++step) {
    uint16_t *g = rand_half(dt, n, -1, 1);
    a.init_buf = step == 0;
    TU_OK(cti_cpu_optim_kernels.sgd_step(dt, n, p, g, buf, &a, NULL));
    TU_OK(cti_sgd_step_run(host, dt, n, p2, g, buf2, &a));
    assert_same(p, p2, n, "SGD param (half)");
    assert_same(buf, buf2, n, "SGD momentum_buffer (half)");
    free(g);
  }
  free(p), free(buf), free(p2), free(buf2);
}

static void test_sgd_half(void **state) {
  (void)state;
  cti_sgd_step_args plain = {0.1, 0.0, 0.0, 0.0, false, false, false};
  cti_sgd_step_args mom = {0.05, 0.9, 0.1, 1e-3, false, false, false};
  cti_sgd_step_args nest = {0.03, 0.8, 0.0, 5e-4, true, true, false};
  for (const cti_sgd_step_args &a : {plain, mom, nest}) {
    check_sgd_half(CT_F16, a);
    check_sgd_half(CT_BF16, a);
  }
}

// GradScaler's path: found_inf set writes nothing on either side; found_inf
// clear with the step count in amp_state (advanced by the shared prologue
// rule) gives the bits of the host-scalar path, on both sides.
static void test_amp_skip(void **state) {
  (void)state;
  const int64_t n = 129;
  const float inf_set = 1.0f, inf_clear = 0.0f;
  float *p = rand_buf<float>(n, -1, 1), *buf = rand_buf<float>(n, -1, 1), *m = rand_buf<float>(n, -0.1, 0.1);
  float *v = rand_buf<float>(n, 0, 0.01);
  float *p0 = (float *)dup_buf(p, n * 4), *buf0 = (float *)dup_buf(buf, n * 4);
  float *m0 = (float *)dup_buf(m, n * 4), *v0 = (float *)dup_buf(v, n * 4);
  float *g = rand_buf<float>(n, -1, 1);
  cti_sgd_step_args sa = {0.05, 0.9, 0.0, 0.0, false, false, false};
  cti_adam_step_args aa = {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false, false, 0, 0};
  double st[3] = {4, 0, 0};
  sa.found_inf = aa.found_inf = &inf_set;
  sa.amp_state = aa.amp_state = st;
  TU_OK(cti_cpu_optim_kernels.sgd_step(CT_F32, n, p, g, buf, &sa, NULL));
  TU_OK(cti_sgd_step_run(host, CT_F32, n, p, g, buf, &sa));
  TU_OK(cti_cpu_optim_kernels.adam_step(CT_F32, n, p, g, m, v, NULL, &aa, NULL));
  TU_OK(cti_adam_step_run(host, CT_F32, n, p, g, m, v, NULL, &aa));
  assert_same(p0, p, n, "a skipped step's param");
  assert_same(buf0, buf, n, "a skipped step's momentum_buffer");
  assert_same(m0, m, n, "a skipped step's exp_avg");
  assert_same(v0, v, n, "a skipped step's exp_avg_sq");
  cti_amp_prologue_rule(inf_set, st, true, aa.lr, aa.beta1, aa.beta2);
  assert_true(st[0] == 4); // a skipped step does not count
  cti_amp_prologue_rule(inf_clear, st, true, aa.lr, aa.beta1, aa.beta2);
  assert_true(st[0] == 5 && st[1] == aa.lr / (1.0 - pow(aa.beta1, 5.0)) && st[2] == sqrt(1.0 - pow(aa.beta2, 5.0)));
  // the device-count path against the host-scalar path, on both sides
  float *p1 = (float *)dup_buf(p, n * 4), *m1 = (float *)dup_buf(m, n * 4), *v1 = (float *)dup_buf(v, n * 4);
  float *p2 = (float *)dup_buf(p, n * 4), *m2 = (float *)dup_buf(m, n * 4), *v2 = (float *)dup_buf(v, n * 4);
  cti_adam_step_args plain = aa;
  plain.found_inf = NULL, plain.amp_state = NULL, plain.step_size = st[1], plain.bias_correction2_sqrt = st[2];
  aa.found_inf = &inf_clear;
  TU_OK(cti_cpu_optim_kernels.adam_step(CT_F32, n, p, g, m, v, NULL, &plain, NULL));
  TU_OK(cti_cpu_optim_kernels.adam_step(CT_F32, n, p1, g, m1, v1, NULL, &aa, NULL));
  TU_OK(cti_adam_step_run(host, CT_F32, n, p2, g, m2, v2, NULL, &aa));
  assert_same(p, p1, n, "Adam, step count on the device (cpu)");
  assert_same(p, p2, n, "Adam, step count on the device (cuda body)");
  assert_same(m, m2, n, "Adam exp_avg, step count on the device");
  free(p), free(buf), free(m), free(v), free(p0), free(buf0), free(m0), free(v0), free(g);
  free(p1), free(m1), free(v1), free(p2), free(m2), free(v2);
}

static void test_adam_adamw(void **state) {
  (void)state;
  //                       lr     beta1 beta2  eps   wd    amsgrad maximize decoupled
  cti_adam_step_args adam = {1e-3, 0.9, 0.999, 1e-8, 0.0, false, false, false, 0, 0};
  cti_adam_step_args adam_wd = {3e-3, 0.85, 0.99, 1e-6, 1e-2, true, true, false, 0, 0};
  cti_adam_step_args adamw = {1e-3, 0.9, 0.999, 1e-8, 1e-2, false, false, true, 0, 0};
  cti_adam_step_args adamw_ams = {2e-3, 0.8, 0.95, 1e-7, 0.1, true, false, true, 0, 0};
  for (const cti_adam_step_args &a : {adam, adam_wd, adamw, adamw_ams}) {
    check_adam<float>(CT_F32, a);
    check_adam<double>(CT_F64, a);
  }
}

template <class T> static void check_scale(ct_dtype dt, double coef) {
  const int64_t n = 123;
  T *x = rand_buf<T>(n, -5, 5), *x2 = (T *)dup_buf(x, n * sizeof(T));
  TU_OK(cti_cpu_optim_kernels.scale_by(dt, n, x, &coef, NULL));
  TU_OK(cti_scale_by_run(host, dt, n, x2, &coef));
  assert_same(x, x2, n, "clip_grad_norm_ scaling");
  free(x), free(x2);
}

static void test_clip_scale(void **state) {
  (void)state;
  for (double c : {0.3137, 1.0 / 3.0, 1.0}) {
    check_scale<float>(CT_F32, c);
    check_scale<double>(CT_F64, c);
  }
}

// ---- dropout and ReLU backward -----------------------------------------------------------------
// Values of dtype dt (storage T) from doubles, rounded as the runtime rounds.
template <ct_dtype D> static cti_T<D> *rand_dt(int64_t n, double lo, double hi) {
  double *d = (double *)malloc((size_t)n * sizeof *d);
  tu_fill_uniform(d, n, lo, hi);
  cti_T<D> *t = (cti_T<D> *)malloc((size_t)n * sizeof(cti_T<D>));
  for (int64_t i = 0; i < n; ++i) t[i] = cti_convert<D>(d[i]);
  free(d);
  return t;
}

template <ct_dtype D> static void check_nn(double p) {
  using T = cti_T<D>;
  const int64_t n = 517;
  T *x = rand_dt<D>(n, -3, 3), *g = rand_dt<D>(n, -1, 1);
  x[7] = cti_convert<D>(0.0); // ReLU's boundary
  float *u = rand_buf<float>(n, 0, 1);
  u[3] = (float)p; // u == p keeps
  const double scale = 1.0 / (1.0 - p);
  T *y1 = (T *)poisoned(n * sizeof(T)), *y2 = (T *)poisoned(n * sizeof(T));
  T *m1 = (T *)poisoned(n * sizeof(T)), *m2 = (T *)poisoned(n * sizeof(T));
  TU_OK(cti_cpu_nn_kernels.dropout(D, n, x, u, p, scale, y1, m1, NULL));
  TU_OK(cti_dropout_run(host, D, n, x, u, p, scale, y2, m2));
  if (memcmp(y1, y2, n * sizeof(T)) || memcmp(m1, m2, n * sizeof(T)))
    fail_msg("dropout (%s, p = %g): the CUDA body differs from the CPU", ct_dtype_name(D), p);
  TU_OK(cti_cpu_nn_kernels.relu_backward(D, n, x, g, y1, NULL));
  TU_OK(cti_relu_backward_run(host, D, n, x, g, y2));
  if (memcmp(y1, y2, n * sizeof(T)))
    fail_msg("ReLU backward (%s): the CUDA body differs from the CPU", ct_dtype_name(D));
  free(x), free(g), free(u), free(y1), free(y2), free(m1), free(m2);
}

static void test_dropout_relu(void **state) {
  (void)state;
  for (double p : {0.5, 0.3, 0.9}) {
    check_nn<CT_F32>(p);
    check_nn<CT_F64>(p);
    check_nn<CT_F16>(p);
    check_nn<CT_BF16>(p);
  }
}


// ---- the transformer family ---------------------------------------------------------------------
// max |a - b| <= tol * max |b| over n values (NaN only where NaN).
template <class T> static void assert_near(const T *cpu, const T *cuda, int64_t n, double tol, const char *what) {
  double big = 0;
  for (int64_t i = 0; i < n; ++i) big = fmax(big, fabs((double)cpu[i]));
  for (int64_t i = 0; i < n; ++i) {
    const double a = (double)cpu[i], b = (double)cuda[i];
    if ((a != a) != (b != b) || fabs(a - b) > tol * (big > 0 ? big : 1))
      fail_msg("%s: element %lld: cpu %.17g, cuda body on the host %.17g", what, (long long)i, a, b);
  }
}

template <class T> static double tol_of() { return sizeof(T) == 8 ? 1e-12 : 1e-5; }

static int64_t *rand_indices(int64_t n, int64_t v) {
  double *u = (double *)malloc((size_t)n * sizeof *u);
  tu_fill_uniform(u, n, 0, (double)v);
  int64_t *k = (int64_t *)malloc((size_t)n * sizeof *k);
  for (int64_t i = 0; i < n; ++i) k[i] = (int64_t)u[i] % v;
  free(u);
  return k;
}

template <ct_dtype D> static void check_embedding(int64_t n, int64_t c, int64_t v) {
  using T = cti_T<D>;
  int64_t *idx = rand_indices(n, v);
  T *w = rand_dt<D>(v * c, -2, 2), *g = rand_dt<D>(n * c, -1, 1);
  T *o1 = (T *)poisoned(n * c * sizeof(T)), *o2 = (T *)poisoned(n * c * sizeof(T));
  int64_t bad = 0;
  cti_async_record rec = {};
  TU_OK(cti_cpu_transformer_kernels.embedding(D, n, c, v, idx, w, o1, &bad, NULL));
  TU_OK(cti_embedding_run(host, D, false, n, c, v, idx, w, o2, &rec));
  if (bad != -1 || rec.code != 0 || memcmp(o1, o2, n * c * sizeof(T)))
    fail_msg("embedding (%s, n %lld, c %lld): the CUDA body differs from the CPU", ct_dtype_name(D), (long long)n,
             (long long)c);
  T *d1 = (T *)poisoned(v * c * sizeof(T)), *d2 = (T *)poisoned(v * c * sizeof(T));
  TU_OK(cti_cpu_transformer_kernels.embedding_backward(D, n, c, v, idx, g, d1, NULL));
  TU_OK(cti_embedding_run(host, D, true, n, c, v, idx, g, d2, nullptr));
  if (memcmp(d1, d2, v * c * sizeof(T)))
    fail_msg("embedding backward (%s, n %lld, v %lld): the CUDA body differs from the CPU", ct_dtype_name(D),
             (long long)n, (long long)v);
  idx[n / 2] = v; // out of range: reported, the row NaN
  TU_OK(cti_embedding_run(host, D, false, n, c, v, idx, w, o2, &rec));
  if (rec.code != CT_ASYNC_INDEX_OUT_OF_RANGE || rec.a != n / 2 || rec.b != v || rec.c != v)
    fail_msg("embedding: a bad index was not reported (code %lld)", rec.code);
  if (cti_load<D>(o2[(n / 2) * c]) == cti_load<D>(o2[(n / 2) * c]))
    fail_msg("embedding: a bad index's row is not NaN");
  free(idx), free(w), free(g), free(o1), free(o2), free(d1), free(d2);
}

static void test_embedding(void **state) {
  (void)state;
  check_embedding<CT_F32>(37, 19, 7);   // repeats: 37 positions over 7 rows
  check_embedding<CT_F64>(64, 40, 65);  // rows no index names
  check_embedding<CT_F16>(50, 8, 5);
  check_embedding<CT_BF16>(50, 8, 5);
}

template <class T> static void check_gelu(ct_dtype dt) {
  const int64_t n = 1000;
  T *x = rand_buf<T>(n, -6, 6), *g = rand_buf<T>(n, -1, 1);
  T *a = (T *)poisoned(n * sizeof(T)), *b = (T *)poisoned(n * sizeof(T));
  for (int ta = 0; ta < 2; ++ta)
    for (int bwd = 0; bwd < 2; ++bwd) {
      TU_OK(cti_cpu_transformer_kernels.gelu(dt, ta, n, x, bwd ? g : NULL, a, NULL));
      TU_OK(cti_gelu_run(host, dt, ta, n, x, bwd ? g : NULL, b));
      assert_near(a, b, n, sizeof(T) == 8 ? 1e-14 : 1e-6, bwd ? "gelu backward" : "gelu");
    }
  free(x), free(g), free(a), free(b);
}

static void test_gelu(void **state) {
  (void)state;
  check_gelu<float>(CT_F32);
  check_gelu<double>(CT_F64);
}

template <class T> static void check_layernorm(ct_dtype dt, int64_t n, int64_t c) {
  T *x = rand_buf<T>(n * c, -2, 3), *w = rand_buf<T>(c, 0.5, 1.5), *b = rand_buf<T>(c, -1, 1);
  T *g = rand_buf<T>(n * c, -1, 1);
  T *y[2], *mu[2], *rs[2], *dx[2], *dw[2], *db[2];
  for (int k = 0; k < 2; ++k) {
    y[k] = (T *)poisoned(n * c * sizeof(T)), dx[k] = (T *)poisoned(n * c * sizeof(T));
    mu[k] = (T *)poisoned(n * sizeof(T)), rs[k] = (T *)poisoned(n * sizeof(T));
    dw[k] = (T *)poisoned(c * sizeof(T)), db[k] = (T *)poisoned(c * sizeof(T));
  }
  void *work = poisoned((size_t)cti_layernorm_work_bytes(dt, n, c));
  TU_OK(cti_cpu_transformer_kernels.layernorm(dt, n, c, x, w, b, 1e-5, y[0], mu[0], rs[0], NULL));
  TU_OK(cti_layernorm_run(host, dt, n, c, x, w, b, 1e-5, y[1], mu[1], rs[1]));
  const double tol = tol_of<T>();
  assert_near(y[0], y[1], n * c, tol, "layernorm y");
  assert_near(mu[0], mu[1], n, tol, "layernorm mean");
  assert_near(rs[0], rs[1], n, tol, "layernorm rstd");
  // backward from the same saved statistics (the CPU's)
  TU_OK(cti_cpu_transformer_kernels.layernorm_backward(dt, n, c, x, g, mu[0], rs[0], w, dx[0], dw[0], db[0], NULL, NULL));
  TU_OK(cti_layernorm_backward_run(host, dt, n, c, x, g, mu[0], rs[0], w, dx[1], dw[1], db[1], work));
  assert_near(dx[0], dx[1], n * c, tol, "layernorm dx");
  assert_near(dw[0], dw[1], c, tol, "layernorm dweight");
  assert_near(db[0], db[1], c, tol, "layernorm dbias");
  for (int k = 0; k < 2; ++k) free(y[k]), free(mu[k]), free(rs[k]), free(dx[k]), free(dw[k]), free(db[k]);
  free(x), free(w), free(b), free(g), free(work);
}

static void test_layernorm(void **state) {
  (void)state;
  check_layernorm<float>(CT_F32, 70, 48); // 70 rows: a last chunk of 6
  check_layernorm<float>(CT_F32, 3, 7);   // rows shorter than a warp
  check_layernorm<double>(CT_F64, 33, 100);
}

template <class T> static void check_softmax(ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale) {
  T *x = rand_buf<T>(rows * cols, -4, 4), *g = rand_buf<T>(rows * cols, -1, 1);
  x[cols + 1] += (T)80; // a large value: the max shift keeps exp finite
  T *y[2], *dx[2];
  for (int k = 0; k < 2; ++k) y[k] = (T *)poisoned(rows * cols * sizeof(T)), dx[k] = (T *)poisoned(rows * cols * sizeof(T));
  TU_OK(cti_cpu_transformer_kernels.softmax(dt, rows, cols, causal, scale, x, y[0], NULL));
  TU_OK(cti_softmax_run(host, dt, rows, cols, causal, scale, x, y[1]));
  assert_near(y[0], y[1], rows * cols, tol_of<T>(), causal ? "causal softmax" : "softmax");
  for (int64_t r = 0; causal && r < rows; ++r)
    for (int64_t j = r % cols + 1; j < cols; ++j)
      if (y[1][r * cols + j] != 0) fail_msg("causal softmax: a masked entry (%lld, %lld) is not 0", (long long)r, (long long)j);
  TU_OK(cti_cpu_transformer_kernels.softmax_backward(dt, rows, cols, scale, y[0], g, dx[0], NULL));
  TU_OK(cti_softmax_backward_run(host, dt, rows, cols, scale, y[0], g, dx[1]));
  assert_near(dx[0], dx[1], rows * cols, tol_of<T>(), "softmax backward");
  for (int k = 0; k < 2; ++k) free(y[k]), free(dx[k]);
  free(x), free(g);
}

static void test_softmax(void **state) {
  (void)state;
  check_softmax<float>(CT_F32, 12, 37, false, 1.0);
  check_softmax<float>(CT_F32, 3 * 40, 40, true, 0.25); // 3 (batch, head) pairs of 40 x 40 scores
  check_softmax<double>(CT_F64, 2 * 5, 5, true, 0.5);
  check_softmax<double>(CT_F64, 4, 70, false, 1.0);
}

template <class T> static void check_cross_entropy(ct_dtype dt, int64_t n, int64_t v) {
  T *x = rand_buf<T>(n * v, -3, 3);
  x[2 * v + 1] += (T)90;
  int64_t *t = rand_indices(n, v);
  t[1] = -100, t[n - 1] = -100; // ignored
  T *l[2], *g[2], sc[2];
  for (int k = 0; k < 2; ++k) l[k] = (T *)poisoned(n * sizeof(T)), g[k] = (T *)poisoned(n * v * sizeof(T));
  int64_t bad = 0;
  TU_OK(cti_cpu_transformer_kernels.cross_entropy(dt, n, v, x, t, -100, l[0], g[0], &sc[0], &bad, NULL));
  long long count = 0; // the count kernel's 256 threads, replayed
  for (int64_t tid = 0; tid < 256; ++tid) count += cti_count_targets(t, n, -100, tid, 256);
  sc[1] = T(1) / T((double)count);
  cti_async_record rec = {};
  TU_OK(cti_lm_cross_entropy_rows_run(host, dt, n, v, x, t, -100, l[1], g[1], &sc[1], &rec));
  if (bad != -1 || rec.code != 0 || count != n - 2 || sc[0] != sc[1]) fail_msg("cross-entropy: count or scale differ");
  assert_near(l[0], l[1], n, tol_of<T>(), "cross-entropy rows");
  assert_near(g[0], g[1], n * v, tol_of<T>(), "cross-entropy gradient");
  for (int64_t j = 0; j < v; ++j)
    if (g[1][v + j] != 0 || l[1][1] != 0) fail_msg("cross-entropy: an ignored row is not 0");
  t[3] = v; // out of bounds: reported
  TU_OK(cti_lm_cross_entropy_rows_run(host, dt, n, v, x, t, -100, l[1], g[1], &sc[1], &rec));
  if (rec.code != CT_ASYNC_LM_TARGET_OUT_OF_BOUNDS || rec.a != 3 || rec.b != v || l[1][3] == l[1][3])
    fail_msg("cross-entropy: a bad target was not reported (code %lld)", rec.code);
  for (int k = 0; k < 2; ++k) free(l[k]), free(g[k]);
  free(x), free(t);
}

static void test_lm_cross_entropy(void **state) {
  (void)state;
  check_cross_entropy<float>(CT_F32, 300, 65); // rows over a warp's 32 lanes, targets over 256 threads
  check_cross_entropy<double>(CT_F64, 9, 11);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_elementwise_offsets), cmocka_unit_test(test_im2col_col2im),
      cmocka_unit_test(test_maxpool),             cmocka_unit_test(test_bn_affine),
      cmocka_unit_test(test_sgd),                 cmocka_unit_test(test_adam_adamw),
      cmocka_unit_test(test_clip_scale),          cmocka_unit_test(test_dropout_relu),
      cmocka_unit_test(test_embedding),           cmocka_unit_test(test_gelu),
      cmocka_unit_test(test_layernorm),           cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_lm_cross_entropy),
      cmocka_unit_test(test_sgd_half),            cmocka_unit_test(test_amp_skip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
