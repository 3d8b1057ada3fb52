// SPDX-License-Identifier: MIT
//
// prof_backend: op ranges from one place, the backend table.
//
// Every op reaches its device through cti_backend_for (ops.c), which, while
// a session records, hands out a copy of the device's table whose entries
// are the wrappers below. A wrapper opens a range named after the entry
// ("ct::gemm", "ct::im2col", "ct::add" from the op code it is given), with
// the shapes the kernel runs on, calls the real entry of the stream's
// device, and closes the range; on a CUDA stream the range also brackets the
// work with two events (prof.c). The range is the counterpart of torch's
// aten:: op at the level where work is issued.
//
// Why the entry's name and not the name the caller gave cti_backend_for: a
// caller may ask for the backend twice before it runs an entry (Conv2d asks,
// then ct_empty asks for its workspace), so the caller's name is not reliably
// the one of the work that follows; the entry is.
//
// The copies keep every entry they do not wrap, so an entry added to a table
// later runs unprofiled rather than not at all.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "amp_kernels.h"
#include "backend.h"
#include "conv_kernels.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "prof_internal.h"

atomic_int cti_prof_shapes_on;

// region: wrapper
static const cti_backend *real_of(const ct_stream *s) {
#ifdef CT_HAVE_CUDA
  if (ct_stream_device(s).type == CT_CUDA) return &cti_cuda_backend;
#endif
  return &cti_cpu_backend;
}

static int op_begin(const char *name, const char *shapes, ct_stream *s) {
  char full[64] = "ct::";
  size_t n = strlen(name);
  if (n > sizeof full - 5) n = sizeof full - 5;
  memcpy(full + 4, name, n);
  full[4 + n] = '\0';
  return cti_prof_range_begin(CT_EVENT_OP, full, shapes, ct_stream_device(s), s);
}

// The shapes string, built only under record_shapes: SH("[[%" PRId64 "]]", n).
#define SH(...) (atomic_load_explicit(&cti_prof_shapes_on, memory_order_relaxed) \
                     ? (snprintf(sh, sizeof sh, __VA_ARGS__), sh) : NULL)
#define I64 "%" PRId64

// "[[d0, d1], [d0, d1]]": the loop's shape once per input.
static const char *iter_shapes(char *sh, size_t len, const cti_iter *it, int inputs) {
  if (!atomic_load_explicit(&cti_prof_shapes_on, memory_order_relaxed)) return NULL;
  ct_shape shape = {it->ndim, {0}};
  for (int d = 0; d < it->ndim; ++d) shape.d[d] = it->shape[d];
  char one[80];
  cti_prof_shape_str(shape, one, sizeof one);
  size_t k = (size_t)snprintf(sh, len, "[");
  for (int i = 0; i < inputs && k < len; ++i) k += (size_t)snprintf(sh + k, len - k, "%s%s", i ? ", " : "", one);
  if (k < len) snprintf(sh + k, len - k, "]");
  return sh;
}

// ---- the core table ------------------------------------------------------------------------
static int w_binary(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                    const void *b, ct_stream *s) {
  char sh[96];
  int t = op_begin(ct_binary_op_name(op), iter_shapes(sh, sizeof sh, it, 2), s);
  int rc = real_of(s)->binary(op, dt, it, out, a, b, s);
  cti_prof_end(t);
  return rc;
}
// endregion

static int w_binary_scalar(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                           const void *a, double scalar, ct_stream *s) {
  char sh[96];
  int t = op_begin(ct_binary_op_name(op), iter_shapes(sh, sizeof sh, it, 1), s);
  int rc = real_of(s)->binary_scalar(op, dt, it, out, a, scalar, s);
  cti_prof_end(t);
  return rc;
}

static int w_unary(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                   ct_stream *s) {
  char sh[96];
  int t = op_begin(ct_unary_op_name(op), iter_shapes(sh, sizeof sh, it, 1), s);
  int rc = real_of(s)->unary(op, dt, it, out, a, s);
  cti_prof_end(t);
  return rc;
}

static int w_copy(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out, const void *in,
                  ct_stream *s) {
  char sh[96];
  int t = op_begin("copy", iter_shapes(sh, sizeof sh, it, 1), s);
  int rc = real_of(s)->copy(out_dt, in_dt, it, out, in, s);
  cti_prof_end(t);
  return rc;
}

static int w_fill(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s) {
  char sh[96];
  int t = op_begin("fill", iter_shapes(sh, sizeof sh, it, 1), s);
  int rc = real_of(s)->fill(dt, it, out, v, s);
  cti_prof_end(t);
  return rc;
}

static int w_arange(ct_dtype dt, int64_t n, void *out, double start, double step, ct_stream *s) {
  char sh[96];
  int t = op_begin("arange", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->arange(dt, n, out, start, step, s);
  cti_prof_end(t);
  return rc;
}

static int w_random(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed, uint64_t offset,
                    ct_stream *s) {
  char sh[96];
  int t = op_begin(normal ? "normal" : "uniform", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->random(normal, dt, n, out, seed, offset, s);
  cti_prof_end(t);
  return rc;
}

static int w_reduce(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in, void *out,
                    int64_t *idx, int64_t outer, int64_t r, int64_t inner, ct_stream *s) {
  static const char *names[] = {"sum", "mean", "max", "argmax"};
  char sh[96];
  int t = op_begin((unsigned)op < 4 ? names[op] : "reduce", SH("[[" I64 ", " I64 ", " I64 "]]", outer, r, inner), s);
  int rc = real_of(s)->reduce(op, in_dt, out_dt, in, out, idx, outer, r, inner, s);
  cti_prof_end(t);
  return rc;
}

static int w_any_nonfinite(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s) {
  char sh[96];
  int t = op_begin("any_nonfinite", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->any_nonfinite(dt, n, in, out, s);
  cti_prof_end(t);
  return rc;
}

static int w_found_nonfinite(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s) {
  char sh[96];
  int t = op_begin("found_nonfinite", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->found_nonfinite(dt, n, in, found, s);
  cti_prof_end(t);
  return rc;
}

// torch's aten::mm shows [[m, k], [k, n]]; a batch adds its leading size.
static int w_gemm(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const void *A, int64_t lda, int64_t strideA, const void *B, int64_t ldb,
                  int64_t strideB, double beta, void *C, int64_t ldc, int64_t strideC,
                  int64_t batch, ct_stream *s) {
  char sh[96];
  const char *shapes = batch > 1 ? SH("[[" I64 ", " I64 ", " I64 "], [" I64 ", " I64 ", " I64 "]]",
                                      batch, m, k, batch, k, n)
                                 : SH("[[" I64 ", " I64 "], [" I64 ", " I64 "]]", m, k, k, n);
  int t = op_begin("gemm", shapes, s);
  int rc = real_of(s)->gemm(dt, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                            ldc, strideC, batch, s);
  cti_prof_end(t);
  return rc;
}

// ---- the nn family ----------------------------------------------------------------------------
static int w_relu_backward(ct_dtype dt, int64_t n, const void *y, const void *g, void *out,
                           ct_stream *s) {
  char sh[96];
  int t = op_begin("relu_backward", SH("[[" I64 "], [" I64 "]]", n, n), s);
  int rc = real_of(s)->nn->relu_backward(dt, n, y, g, out, s);
  cti_prof_end(t);
  return rc;
}

static int w_dropout(ct_dtype dt, int64_t n, const void *x, const float *u, double p, double scale,
                     void *y, void *mask, ct_stream *s) {
  char sh[96];
  int t = op_begin("dropout", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->nn->dropout(dt, n, x, u, p, scale, y, mask, s);
  cti_prof_end(t);
  return rc;
}

static int w_cross_entropy(ct_dtype dt, int64_t n, int64_t c, const void *logits,
                           const int64_t *target, void *loss, void *grad, double inv_n,
                           int64_t *bad_row, ct_stream *s) {
  char sh[96];
  int t = op_begin("cross_entropy", SH("[[" I64 ", " I64 "], [" I64 "]]", n, c, n), s);
  int rc = real_of(s)->nn->cross_entropy(dt, n, c, logits, target, loss, grad, inv_n, bad_row, s);
  cti_prof_end(t);
  return rc;
}

// ---- the conv family --------------------------------------------------------------------------
#define GEOM_SHAPES(g) SH("[[" I64 ", " I64 ", " I64 ", " I64 "]]", (g)->n, (g)->c, (g)->h, (g)->w)
#define NCP_SHAPES(n, c, p) SH("[[" I64 ", " I64 ", " I64 "]]", n, c, p)

static int w_im2col(ct_dtype dt, const cti_conv_geom *g, const void *x, void *cols, ct_stream *s) {
  char sh[96];
  int t = op_begin("im2col", GEOM_SHAPES(g), s);
  int rc = real_of(s)->conv->im2col(dt, g, x, cols, s);
  cti_prof_end(t);
  return rc;
}

static int w_col2im(ct_dtype dt, const cti_conv_geom *g, const void *cols, void *dx, ct_stream *s) {
  char sh[96];
  int t = op_begin("col2im", GEOM_SHAPES(g), s);
  int rc = real_of(s)->conv->col2im(dt, g, cols, dx, s);
  cti_prof_end(t);
  return rc;
}

static int w_cnhw(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src, void *dst, ct_stream *s) {
  char sh[96];
  int t = op_begin("cnhw_from_nchw", NCP_SHAPES(n, c, p), s);
  int rc = real_of(s)->conv->cnhw_from_nchw(dt, n, c, p, src, dst, s);
  cti_prof_end(t);
  return rc;
}

static int w_maxpool_forward(ct_dtype dt, const cti_pool_geom *g, const void *x, void *y, int32_t *idx,
                             ct_stream *s) {
  char sh[96];
  int t = op_begin("max_pool2d", SH("[[" I64 ", " I64 ", " I64 "]]", g->planes, g->h, g->w), s);
  int rc = real_of(s)->conv->maxpool_forward(dt, g, x, y, idx, s);
  cti_prof_end(t);
  return rc;
}

static int w_maxpool_backward(ct_dtype dt, const cti_pool_geom *g, const void *dy, const int32_t *idx,
                              void *dx, ct_stream *s) {
  char sh[96];
  int t = op_begin("max_pool2d_backward", SH("[[" I64 ", " I64 ", " I64 "]]", g->planes, g->ho, g->wo), s);
  int rc = real_of(s)->conv->maxpool_backward(dt, g, dy, idx, dx, s);
  cti_prof_end(t);
  return rc;
}

static int w_bn_stats(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, double eps,
                      void *mean, void *invstd, void *running_mean, void *running_var,
                      double momentum, ct_stream *s) {
  char sh[96];
  int t = op_begin("batch_norm_stats", NCP_SHAPES(n, c, p), s);
  int rc = real_of(s)->conv->bn_stats(dt, n, c, p, x, eps, mean, invstd, running_mean, running_var,
                                      momentum, s);
  cti_prof_end(t);
  return rc;
}

static int w_bn_apply(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, const void *mean,
                      const void *invstd, const void *gamma, const void *beta, void *y, ct_stream *s) {
  char sh[96];
  int t = op_begin("batch_norm_apply", NCP_SHAPES(n, c, p), s);
  int rc = real_of(s)->conv->bn_apply(dt, n, c, p, x, mean, invstd, gamma, beta, y, s);
  cti_prof_end(t);
  return rc;
}

static int w_bn_eval(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x,
                     const void *running_mean, const void *running_var, double eps,
                     const void *gamma, const void *beta, void *y, ct_stream *s) {
  char sh[96];
  int t = op_begin("batch_norm_eval", NCP_SHAPES(n, c, p), s);
  int rc = real_of(s)->conv->bn_eval(dt, n, c, p, x, running_mean, running_var, eps, gamma, beta, y, s);
  cti_prof_end(t);
  return rc;
}

static int w_bn_backward(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *x, const void *dy,
                         const void *mean, const void *invstd, const void *gamma, void *dx,
                         void *dgamma, void *dbeta, ct_stream *s) {
  char sh[96];
  int t = op_begin("batch_norm_backward", NCP_SHAPES(n, c, p), s);
  int rc = real_of(s)->conv->bn_backward(dt, n, c, p, x, dy, mean, invstd, gamma, dx, dgamma, dbeta, s);
  cti_prof_end(t);
  return rc;
}

// ---- the optim family -------------------------------------------------------------------------
static int w_sgd_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                      const cti_sgd_step_args *a, ct_stream *s) {
  char sh[96];
  int t = op_begin("sgd_step", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->optim->sgd_step(dt, n, param, grad, buf, a, s);
  cti_prof_end(t);
  return rc;
}

static int w_adam_step(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                       void *exp_avg_sq, void *max_exp_avg_sq, const cti_adam_step_args *a,
                       ct_stream *s) {
  char sh[96];
  int t = op_begin("adam_step", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->optim->adam_step(dt, n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, a, s);
  cti_prof_end(t);
  return rc;
}

static int w_sum_squares(ct_dtype dt, int64_t n, const void *x, double *out, double *workspace,
                         ct_stream *s) {
  char sh[96];
  int t = op_begin("sum_squares", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->optim->sum_squares(dt, n, x, out, workspace, s);
  cti_prof_end(t);
  return rc;
}

static int w_clip_coef(int64_t n, const double *sumsq, double max_norm, double *out, ct_stream *s) {
  char sh[96];
  int t = op_begin("clip_coef", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->optim->clip_coef(n, sumsq, max_norm, out, s);
  cti_prof_end(t);
  return rc;
}

static int w_scale_by(ct_dtype dt, int64_t n, void *x, const double *coef, ct_stream *s) {
  char sh[96];
  int t = op_begin("scale_by", SH("[[" I64 "]]", n), s);
  int rc = real_of(s)->optim->scale_by(dt, n, x, coef, s);
  cti_prof_end(t);
  return rc;
}

static int w_amp_prologue(const float *found_inf, double *state, bool adam, double lr, double beta1,
                          double beta2, ct_stream *s) {
  int t = op_begin("amp_step_count", "[]", s);
  int rc = real_of(s)->optim->amp_prologue(found_inf, state, adam, lr, beta1, beta2, s);
  cti_prof_end(t);
  return rc;
}

// ---- the amp family -----------------------------------------------------------------------
static int w_update_scale(float *scale, int32_t *tracker, const float *found_inf, double growth_factor,
                          double backoff_factor, int64_t growth_interval, int64_t *skipped, ct_stream *s) {
  int t = op_begin("_amp_update_scale_", "[[1], [1], [1]]", s);
  int rc = real_of(s)->amp->update_scale(scale, tracker, found_inf, growth_factor, backoff_factor,
                                         growth_interval, skipped, s);
  cti_prof_end(t);
  return rc;
}

static int w_inv_scale(const float *scale, float *inv, ct_stream *s) {
  int t = op_begin("reciprocal", "[[1]]", s);
  int rc = real_of(s)->amp->inv_scale(scale, inv, s);
  cti_prof_end(t);
  return rc;
}

// ---- the copies ---------------------------------------------------------------------------
typedef struct proxy {
  cti_backend be;
  cti_nn_kernels nn;
  cti_conv_kernels conv;
  cti_optim_kernels optim;
  cti_amp_kernels amp;
} proxy;

enum { PROXY_CPU, PROXY_CUDA, NPROXIES };
static proxy proxies[NPROXIES];
static pthread_once_t proxies_once = PTHREAD_ONCE_INIT;

// Replaces an entry the real table has (NULL stays NULL).
#define WRAP(table, entry, fn) \
  if ((table).entry) (table).entry = fn

static void make_proxy(proxy *x, const cti_backend *real) {
  x->be = *real;
  WRAP(x->be, binary, w_binary);
  WRAP(x->be, binary_scalar, w_binary_scalar);
  WRAP(x->be, unary, w_unary);
  WRAP(x->be, copy, w_copy);
  WRAP(x->be, fill, w_fill);
  WRAP(x->be, arange, w_arange);
  WRAP(x->be, random, w_random);
  WRAP(x->be, reduce, w_reduce);
  WRAP(x->be, any_nonfinite, w_any_nonfinite);
  WRAP(x->be, found_nonfinite, w_found_nonfinite);
  WRAP(x->be, gemm, w_gemm);
  if (real->nn) {
    x->nn = *real->nn;
    WRAP(x->nn, relu_backward, w_relu_backward);
    WRAP(x->nn, dropout, w_dropout);
    WRAP(x->nn, cross_entropy, w_cross_entropy);
    x->be.nn = &x->nn;
  }
  if (real->conv) {
    x->conv = *real->conv;
    WRAP(x->conv, im2col, w_im2col);
    WRAP(x->conv, col2im, w_col2im);
    WRAP(x->conv, cnhw_from_nchw, w_cnhw);
    WRAP(x->conv, maxpool_forward, w_maxpool_forward);
    WRAP(x->conv, maxpool_backward, w_maxpool_backward);
    WRAP(x->conv, bn_stats, w_bn_stats);
    WRAP(x->conv, bn_apply, w_bn_apply);
    WRAP(x->conv, bn_eval, w_bn_eval);
    WRAP(x->conv, bn_backward, w_bn_backward);
    x->be.conv = &x->conv;
  }
  if (real->optim) {
    x->optim = *real->optim;
    WRAP(x->optim, sgd_step, w_sgd_step);
    WRAP(x->optim, adam_step, w_adam_step);
    WRAP(x->optim, sum_squares, w_sum_squares);
    WRAP(x->optim, clip_coef, w_clip_coef);
    WRAP(x->optim, scale_by, w_scale_by);
    WRAP(x->optim, amp_prologue, w_amp_prologue);
    x->be.optim = &x->optim;
  }
  if (real->amp) {
    x->amp = *real->amp;
    WRAP(x->amp, update_scale, w_update_scale);
    WRAP(x->amp, inv_scale, w_inv_scale);
    x->be.amp = &x->amp;
  }
}

static void make_proxies(void) {
  make_proxy(&proxies[PROXY_CPU], &cti_cpu_backend);
#ifdef CT_HAVE_CUDA
  make_proxy(&proxies[PROXY_CUDA], &cti_cuda_backend);
#endif
}

const cti_backend *cti_prof_backend(const cti_backend *real) {
  pthread_once(&proxies_once, make_proxies);
  if (real == &cti_cpu_backend) return &proxies[PROXY_CPU].be;
#ifdef CT_HAVE_CUDA
  if (real == &cti_cuda_backend) return &proxies[PROXY_CUDA].be;
#endif
  return real;
}
