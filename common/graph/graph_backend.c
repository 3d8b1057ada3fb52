// SPDX-License-Identifier: MIT
//
// graph_backend: the recording table, cti_graph_backend, that the dispatcher
// hands out instead of a device's backend while the calling thread captures
// a graph on that device (graph.c says why the recorder sits here).
//
// Invariant: every entry of cti_backend and of the nn, conv, optim and amp family
// tables has a stand-in here with the same signature, which packs its
// arguments by value into a struct (a cti_iter or a geometry is copied, not
// pointed to) and hands them, with a call function that unpacks them into
// the real entry, to cti_graph_issue. That routes the call by its stream:
// recorded (CPU capture stream), run (CUDA capture stream, where CUDA
// records the launch, or any other stream), or refused (the default
// stream). The static assertions below stop the build when a table gains an
// entry without its stand-in.
#include <string.h>

#include "amp_kernels.h"
#include "conv_kernels.h"
#include "graph_impl.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "transformer_kernels.h"

_Static_assert(sizeof(cti_backend) == 17 * sizeof(void *), "a new cti_backend entry needs its stand-in here");
_Static_assert(sizeof(cti_transformer_kernels) == 8 * sizeof(void *), "a new transformer kernel needs its stand-in here");
_Static_assert(sizeof(cti_nn_kernels) == 3 * sizeof(void *), "a new nn kernel needs its stand-in here");
_Static_assert(sizeof(cti_conv_kernels) == 9 * sizeof(void *), "a new conv kernel needs its stand-in here");
_Static_assert(sizeof(cti_optim_kernels) == 7 * sizeof(void *), "a new optim kernel needs its stand-in here");
_Static_assert(sizeof(cti_amp_kernels) == 2 * sizeof(void *), "a new amp kernel needs its stand-in here");

// Hands the packed arguments `x` of entry NAME (its call function NAME_call)
// to the router; `s` is the entry's stream argument.
#define ISSUE(name) cti_graph_issue(s, name##_call, &x, sizeof x)

// ---- the plain ops -------------------------------------------------------------------------

// region: binary
typedef struct { ct_binary_op op; ct_dtype dt; cti_iter it; void *out; const void *a, *b; } binary_args;
static int binary_call(const cti_backend *be, const void *p, ct_stream *s) {
  const binary_args *x = p;
  return be->binary(x->op, x->dt, &x->it, x->out, x->a, x->b, s);
}
static int binary_rec(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                      const void *b, ct_stream *s) {
  binary_args x = {op, dt, *it, out, a, b};
  return ISSUE(binary);
}
// endregion

typedef struct { ct_binary_op op; ct_dtype dt; cti_iter it; void *out; const void *a; double scalar; } binary_scalar_args;
static int binary_scalar_call(const cti_backend *be, const void *p, ct_stream *s) {
  const binary_scalar_args *x = p;
  return be->binary_scalar(x->op, x->dt, &x->it, x->out, x->a, x->scalar, s);
}
static int binary_scalar_rec(ct_binary_op op, ct_dtype dt, const cti_iter *it, void *out,
                             const void *a, double scalar, ct_stream *s) {
  binary_scalar_args x = {op, dt, *it, out, a, scalar};
  return ISSUE(binary_scalar);
}

typedef struct { ct_unary_op op; ct_dtype dt; cti_iter it; void *out; const void *a; } unary_args;
static int unary_call(const cti_backend *be, const void *p, ct_stream *s) {
  const unary_args *x = p;
  return be->unary(x->op, x->dt, &x->it, x->out, x->a, s);
}
static int unary_rec(ct_unary_op op, ct_dtype dt, const cti_iter *it, void *out, const void *a,
                     ct_stream *s) {
  unary_args x = {op, dt, *it, out, a};
  return ISSUE(unary);
}

typedef struct { ct_dtype out_dt, in_dt; cti_iter it; void *out; const void *in; } copy_args;
static int copy_call(const cti_backend *be, const void *p, ct_stream *s) {
  const copy_args *x = p;
  return be->copy(x->out_dt, x->in_dt, &x->it, x->out, x->in, s);
}
static int copy_rec(ct_dtype out_dt, ct_dtype in_dt, const cti_iter *it, void *out, const void *in,
                    ct_stream *s) {
  copy_args x = {out_dt, in_dt, *it, out, in};
  return ISSUE(copy);
}

typedef struct { ct_dtype dt; cti_iter it; void *out; double v; } fill_args;
static int fill_call(const cti_backend *be, const void *p, ct_stream *s) {
  const fill_args *x = p;
  return be->fill(x->dt, &x->it, x->out, x->v, s);
}
static int fill_rec(ct_dtype dt, const cti_iter *it, void *out, double v, ct_stream *s) {
  fill_args x = {dt, *it, out, v};
  return ISSUE(fill);
}

typedef struct { ct_dtype dt; int64_t n; void *out; double start, step; } arange_args;
static int arange_call(const cti_backend *be, const void *p, ct_stream *s) {
  const arange_args *x = p;
  return be->arange(x->dt, x->n, x->out, x->start, x->step, s);
}
static int arange_rec(ct_dtype dt, int64_t n, void *out, double start, double step, ct_stream *s) {
  arange_args x = {dt, n, out, start, step};
  return ISSUE(arange);
}

// The Philox (seed, offset) are fixed here: every replay draws the same numbers.
typedef struct { bool normal; ct_dtype dt; int64_t n; void *out; uint64_t seed, offset; } random_args;
static int random_call(const cti_backend *be, const void *p, ct_stream *s) {
  const random_args *x = p;
  return be->random(x->normal, x->dt, x->n, x->out, x->seed, x->offset, s);
}
static int random_rec(bool normal, ct_dtype dt, int64_t n, void *out, uint64_t seed, uint64_t offset,
                      ct_stream *s) {
  random_args x = {normal, dt, n, out, seed, offset};
  return ISSUE(random);
}

typedef struct {
  ct_reduce_op op;
  ct_dtype in_dt, out_dt;
  const void *in;
  void *out;
  int64_t *idx;
  int64_t outer, r, inner;
} reduce_args;
static int reduce_call(const cti_backend *be, const void *p, ct_stream *s) {
  const reduce_args *x = p;
  return be->reduce(x->op, x->in_dt, x->out_dt, x->in, x->out, x->idx, x->outer, x->r, x->inner, s);
}
static int reduce_rec(ct_reduce_op op, ct_dtype in_dt, ct_dtype out_dt, const void *in, void *out,
                      int64_t *idx, int64_t outer, int64_t r, int64_t inner, ct_stream *s) {
  reduce_args x = {op, in_dt, out_dt, in, out, idx, outer, r, inner};
  return ISSUE(reduce);
}

// Waits for its answer on the host: never part of a graph.
static int any_nonfinite_rec(ct_dtype dt, int64_t n, const void *in, bool *out, ct_stream *s) {
  int rc = cti_graph_refuse_wait();
  return rc ? rc : cti_graph_real_backend()->any_nonfinite(dt, n, in, out, s);
}

typedef struct { ct_dtype dt; int64_t n; const void *in; float *found; } found_nonfinite_args;
static int found_nonfinite_call(const cti_backend *be, const void *p, ct_stream *s) {
  const found_nonfinite_args *x = p;
  return be->found_nonfinite(x->dt, x->n, x->in, x->found, s);
}
static int found_nonfinite_rec(ct_dtype dt, int64_t n, const void *in, float *found, ct_stream *s) {
  found_nonfinite_args x = {dt, n, in, found};
  return ISSUE(found_nonfinite);
}

typedef struct {
  ct_dtype dt;
  bool ta, tb;
  int64_t m, n, k;
  double alpha, beta;
  const void *A, *B;
  void *C;
  int64_t lda, strideA, ldb, strideB, ldc, strideC, batch;
} gemm_args;
static int gemm_call(const cti_backend *be, const void *p, ct_stream *s) {
  const gemm_args *x = p;
  return be->gemm(x->dt, x->ta, x->tb, x->m, x->n, x->k, x->alpha, x->A, x->lda, x->strideA, x->B,
                  x->ldb, x->strideB, x->beta, x->C, x->ldc, x->strideC, x->batch, s);
}
static int gemm_rec(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                    const void *A, int64_t lda, int64_t strideA, const void *B, int64_t ldb,
                    int64_t strideB, double beta, void *C, int64_t ldc, int64_t strideC, int64_t batch,
                    ct_stream *s) {
  gemm_args x = {dt, ta, tb, m, n, k, alpha, beta, A, B, C, lda, strideA, ldb, strideB, ldc, strideC, batch};
  return ISSUE(gemm);
}

// ---- the nn family ------------------------------------------------------------------------------

typedef struct { ct_dtype dt; int64_t n; const void *y, *g; void *out; } relu_backward_args;
static int relu_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const relu_backward_args *x = p;
  return be->nn->relu_backward(x->dt, x->n, x->y, x->g, x->out, s);
}
static int relu_backward_rec(ct_dtype dt, int64_t n, const void *y, const void *g, void *out, ct_stream *s) {
  relu_backward_args x = {dt, n, y, g, out};
  return ISSUE(relu_backward);
}

typedef struct {
  ct_dtype dt;
  int64_t n;
  const void *x;
  const float *u;
  double p, scale;
  void *y, *mask;
} dropout_args;
static int dropout_call(const cti_backend *be, const void *p, ct_stream *s) {
  const dropout_args *a = p;
  return be->nn->dropout(a->dt, a->n, a->x, a->u, a->p, a->scale, a->y, a->mask, s);
}
static int dropout_rec(ct_dtype dt, int64_t n, const void *xp, const float *u, double p, double scale,
                       void *y, void *mask, ct_stream *s) {
  dropout_args x = {dt, n, xp, u, p, scale, y, mask};
  return ISSUE(dropout);
}

// bad_row is the caller's host variable while the call is made at once; a
// recorded call has none, and a bad target found at replay fails the replay
// with the eager message.
typedef struct {
  ct_dtype dt;
  int64_t n, c;
  const void *logits;
  const int64_t *target;
  void *loss, *grad;
  double inv_n;
  int64_t *bad_row; // NULL when recorded
} cross_entropy_args;
static int cross_entropy_call(const cti_backend *be, const void *p, ct_stream *s) {
  const cross_entropy_args *x = p;
  int64_t bad = -1;
  int rc = be->nn->cross_entropy(x->dt, x->n, x->c, x->logits, x->target, x->loss, x->grad, x->inv_n,
                                 x->bad_row ? x->bad_row : &bad, s);
  if (rc == CT_OK && bad >= 0)
    return ct_fail(CT_ERR_VALUE, "ct_cross_entropy_loss: Target %lld is out of bounds.",
                   (long long)x->target[bad]);
  return rc;
}
static int cross_entropy_rec(ct_dtype dt, int64_t n, int64_t c, const void *logits, const int64_t *target,
                             void *loss, void *grad, double inv_n, int64_t *bad_row, ct_stream *s) {
  bool recorded = cti_graph_records(s);
  if (recorded) *bad_row = -1;
  cross_entropy_args x = {dt, n, c, logits, target, loss, grad, inv_n, recorded ? NULL : bad_row};
  return ISSUE(cross_entropy);
}

// ---- the conv family ----------------------------------------------------------------------------

typedef struct { ct_dtype dt; cti_conv_geom g; const void *src; void *dst; } im2col_args;
static int im2col_call(const cti_backend *be, const void *p, ct_stream *s) {
  const im2col_args *x = p;
  return be->conv->im2col(x->dt, &x->g, x->src, x->dst, s);
}
static int im2col_rec(ct_dtype dt, const cti_conv_geom *g, const void *src, void *cols, ct_stream *s) {
  im2col_args x = {dt, *g, src, cols};
  return ISSUE(im2col);
}
static int col2im_call(const cti_backend *be, const void *p, ct_stream *s) {
  const im2col_args *x = p;
  return be->conv->col2im(x->dt, &x->g, x->src, x->dst, s);
}
static int col2im_rec(ct_dtype dt, const cti_conv_geom *g, const void *cols, void *dx, ct_stream *s) {
  im2col_args x = {dt, *g, cols, dx};
  return ISSUE(col2im);
}

typedef struct { ct_dtype dt; int64_t n, c, p; const void *src; void *dst; } cnhw_args;
static int cnhw_call(const cti_backend *be, const void *p, ct_stream *s) {
  const cnhw_args *x = p;
  return be->conv->cnhw_from_nchw(x->dt, x->n, x->c, x->p, x->src, x->dst, s);
}
static int cnhw_rec(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *src, void *dst, ct_stream *s) {
  cnhw_args x = {dt, n, c, p, src, dst};
  return ISSUE(cnhw);
}

typedef struct { ct_dtype dt; cti_pool_geom g; const void *in; void *out; int32_t *idx; } maxpool_args;
static int maxpool_forward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const maxpool_args *x = p;
  return be->conv->maxpool_forward(x->dt, &x->g, x->in, x->out, x->idx, s);
}
static int maxpool_forward_rec(ct_dtype dt, const cti_pool_geom *g, const void *in, void *y, int32_t *idx,
                               ct_stream *s) {
  maxpool_args x = {dt, *g, in, y, idx};
  return ISSUE(maxpool_forward);
}
static int maxpool_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const maxpool_args *x = p;
  return be->conv->maxpool_backward(x->dt, &x->g, x->in, x->idx, x->out, s);
}
static int maxpool_backward_rec(ct_dtype dt, const cti_pool_geom *g, const void *dy, const int32_t *idx,
                                void *dx, ct_stream *s) {
  maxpool_args x = {dt, *g, dy, dx, (int32_t *)idx};
  return ISSUE(maxpool_backward);
}

typedef struct {
  ct_dtype dt;
  int64_t n, c, p;
  const void *x;
  double eps, momentum;
  void *mean, *invstd, *running_mean, *running_var;
} bn_stats_args;
static int bn_stats_call(const cti_backend *be, const void *p, ct_stream *s) {
  const bn_stats_args *a = p;
  return be->conv->bn_stats(a->dt, a->n, a->c, a->p, a->x, a->eps, a->mean, a->invstd, a->running_mean,
                            a->running_var, a->momentum, s);
}
static int bn_stats_rec(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *xp, double eps,
                        void *mean, void *invstd, void *running_mean, void *running_var, double momentum,
                        ct_stream *s) {
  bn_stats_args x = {dt, n, c, p, xp, eps, momentum, mean, invstd, running_mean, running_var};
  return ISSUE(bn_stats);
}

// bn_apply and bn_eval: y = (x - a) * b * gamma + beta per channel, with
// (a, b) the batch's (mean, invstd) or the running (mean, var) and eps.
typedef struct {
  ct_dtype dt;
  int64_t n, c, p;
  const void *x, *a, *b, *gamma, *beta;
  double eps;
  void *y;
} bn_affine_args;
static int bn_apply_call(const cti_backend *be, const void *p, ct_stream *s) {
  const bn_affine_args *x = p;
  return be->conv->bn_apply(x->dt, x->n, x->c, x->p, x->x, x->a, x->b, x->gamma, x->beta, x->y, s);
}
static int bn_apply_rec(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *xp, const void *mean,
                        const void *invstd, const void *gamma, const void *beta, void *y, ct_stream *s) {
  bn_affine_args x = {dt, n, c, p, xp, mean, invstd, gamma, beta, 0.0, y};
  return ISSUE(bn_apply);
}
static int bn_eval_call(const cti_backend *be, const void *p, ct_stream *s) {
  const bn_affine_args *x = p;
  return be->conv->bn_eval(x->dt, x->n, x->c, x->p, x->x, x->a, x->b, x->eps, x->gamma, x->beta, x->y, s);
}
static int bn_eval_rec(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *xp, const void *running_mean,
                       const void *running_var, double eps, const void *gamma, const void *beta, void *y,
                       ct_stream *s) {
  bn_affine_args x = {dt, n, c, p, xp, running_mean, running_var, gamma, beta, eps, y};
  return ISSUE(bn_eval);
}

typedef struct {
  ct_dtype dt;
  int64_t n, c, p;
  const void *x, *dy, *mean, *invstd, *gamma;
  void *dx, *dgamma, *dbeta;
} bn_backward_args;
static int bn_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const bn_backward_args *a = p;
  return be->conv->bn_backward(a->dt, a->n, a->c, a->p, a->x, a->dy, a->mean, a->invstd, a->gamma, a->dx,
                               a->dgamma, a->dbeta, s);
}
static int bn_backward_rec(ct_dtype dt, int64_t n, int64_t c, int64_t p, const void *xp, const void *dy,
                           const void *mean, const void *invstd, const void *gamma, void *dx, void *dgamma,
                           void *dbeta, ct_stream *s) {
  bn_backward_args x = {dt, n, c, p, xp, dy, mean, invstd, gamma, dx, dgamma, dbeta};
  return ISSUE(bn_backward);
}

// ---- the optim family ------------------------------------------------------------------------

typedef struct { ct_dtype dt; int64_t n; void *param; const void *grad; void *buf; cti_sgd_step_args a; } sgd_args;
static int sgd_step_call(const cti_backend *be, const void *p, ct_stream *s) {
  const sgd_args *x = p;
  return be->optim->sgd_step(x->dt, x->n, x->param, x->grad, x->buf, &x->a, s);
}
static int sgd_step_rec(ct_dtype dt, int64_t n, void *param, const void *grad, void *buf,
                        const cti_sgd_step_args *a, ct_stream *s) {
  sgd_args x = {dt, n, param, grad, buf, *a};
  return ISSUE(sgd_step);
}

typedef struct {
  ct_dtype dt;
  int64_t n;
  void *param;
  const void *grad;
  void *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
  cti_adam_step_args a;
} adam_args;
static int adam_step_call(const cti_backend *be, const void *p, ct_stream *s) {
  const adam_args *x = p;
  return be->optim->adam_step(x->dt, x->n, x->param, x->grad, x->exp_avg, x->exp_avg_sq, x->max_exp_avg_sq,
                              &x->a, s);
}
static int adam_step_rec(ct_dtype dt, int64_t n, void *param, const void *grad, void *exp_avg,
                         void *exp_avg_sq, void *max_exp_avg_sq, const cti_adam_step_args *a, ct_stream *s) {
  adam_args x = {dt, n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, *a};
  return ISSUE(adam_step);
}

static int64_t sum_squares_workspace_rec(void) {
  return cti_graph_real_backend()->optim->sum_squares_workspace();
}

typedef struct { ct_dtype dt; int64_t n; const void *x; double *out, *workspace; } sum_squares_args;
static int sum_squares_call(const cti_backend *be, const void *p, ct_stream *s) {
  const sum_squares_args *a = p;
  return be->optim->sum_squares(a->dt, a->n, a->x, a->out, a->workspace, s);
}
static int sum_squares_rec(ct_dtype dt, int64_t n, const void *xp, double *out, double *workspace,
                           ct_stream *s) {
  sum_squares_args x = {dt, n, xp, out, workspace};
  return ISSUE(sum_squares);
}

typedef struct { int64_t n; const double *sumsq; double max_norm; double *out; } clip_coef_args;
static int clip_coef_call(const cti_backend *be, const void *p, ct_stream *s) {
  const clip_coef_args *x = p;
  return be->optim->clip_coef(x->n, x->sumsq, x->max_norm, x->out, s);
}
static int clip_coef_rec(int64_t n, const double *sumsq, double max_norm, double *out, ct_stream *s) {
  clip_coef_args x = {n, sumsq, max_norm, out};
  return ISSUE(clip_coef);
}

typedef struct { ct_dtype dt; int64_t n; void *x; const double *coef; } scale_by_args;
static int scale_by_call(const cti_backend *be, const void *p, ct_stream *s) {
  const scale_by_args *a = p;
  return be->optim->scale_by(a->dt, a->n, a->x, a->coef, s);
}
static int scale_by_rec(ct_dtype dt, int64_t n, void *xp, const double *coef, ct_stream *s) {
  scale_by_args x = {dt, n, xp, coef};
  return ISSUE(scale_by);
}

// ---- the transformer family -----------------------------------------------------------------------
// As cross_entropy above: `bad` is the caller's host variable for a call made
// at once; a recorded call has none, and a bad index or target found at
// replay fails the replay with the eager message.

typedef struct {
  ct_dtype dt;
  int64_t n, c, v;
  const int64_t *idx;
  const void *weight;
  void *out;
  int64_t *bad; // NULL when recorded
} embedding_args;
static int embedding_call(const cti_backend *be, const void *p, ct_stream *s) {
  const embedding_args *x = p;
  int64_t bad = -1;
  int rc = be->transformer->embedding(x->dt, x->n, x->c, x->v, x->idx, x->weight, x->out, x->bad ? x->bad : &bad, s);
  if (rc == CT_OK && bad >= 0)
    return ct_fail(CT_ERR_VALUE, "Embedding: index out of range in self (index %lld at position %lld, "
                   "num_embeddings %lld)", (long long)x->idx[bad], (long long)bad, (long long)x->v);
  return rc;
}
static int embedding_rec(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx, const void *weight,
                         void *out, int64_t *bad, ct_stream *s) {
  bool recorded = cti_graph_records(s);
  if (recorded) *bad = -1;
  embedding_args x = {dt, n, c, v, idx, weight, out, recorded ? NULL : bad};
  return ISSUE(embedding);
}

typedef struct { ct_dtype dt; int64_t n, c, v; const int64_t *idx; const void *dout; void *dweight; } embedding_backward_args;
static int embedding_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const embedding_backward_args *x = p;
  return be->transformer->embedding_backward(x->dt, x->n, x->c, x->v, x->idx, x->dout, x->dweight, s);
}
static int embedding_backward_rec(ct_dtype dt, int64_t n, int64_t c, int64_t v, const int64_t *idx,
                                  const void *dout, void *dweight, ct_stream *s) {
  embedding_backward_args x = {dt, n, c, v, idx, dout, dweight};
  return ISSUE(embedding_backward);
}

typedef struct {
  ct_dtype dt;
  int64_t n, c;
  const void *x, *w, *b;
  double eps;
  void *y, *mean, *rstd;
} layernorm_args;
static int layernorm_call(const cti_backend *be, const void *p, ct_stream *s) {
  const layernorm_args *a = p;
  return be->transformer->layernorm(a->dt, a->n, a->c, a->x, a->w, a->b, a->eps, a->y, a->mean, a->rstd, s);
}
static int layernorm_rec(ct_dtype dt, int64_t n, int64_t c, const void *xp, const void *w, const void *b,
                         double eps, void *y, void *mean, void *rstd, ct_stream *s) {
  layernorm_args x = {dt, n, c, xp, w, b, eps, y, mean, rstd};
  return ISSUE(layernorm);
}

typedef struct {
  ct_dtype dt;
  int64_t n, c;
  const void *x, *dy, *mean, *rstd, *w;
  void *dx, *dw, *db, *work;
} layernorm_backward_args;
static int layernorm_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const layernorm_backward_args *a = p;
  return be->transformer->layernorm_backward(a->dt, a->n, a->c, a->x, a->dy, a->mean, a->rstd, a->w, a->dx,
                                             a->dw, a->db, a->work, s);
}
static int layernorm_backward_rec(ct_dtype dt, int64_t n, int64_t c, const void *xp, const void *dy,
                                  const void *mean, const void *rstd, const void *w, void *dx, void *dw,
                                  void *db, void *work, ct_stream *s) {
  layernorm_backward_args x = {dt, n, c, xp, dy, mean, rstd, w, dx, dw, db, work};
  return ISSUE(layernorm_backward);
}

typedef struct { ct_dtype dt; bool tanh_approx; int64_t n; const void *x, *dy; void *out; } gelu_args;
static int gelu_call(const cti_backend *be, const void *p, ct_stream *s) {
  const gelu_args *a = p;
  return be->transformer->gelu(a->dt, a->tanh_approx, a->n, a->x, a->dy, a->out, s);
}
static int gelu_rec(ct_dtype dt, bool tanh_approx, int64_t n, const void *xp, const void *dy, void *out,
                    ct_stream *s) {
  gelu_args x = {dt, tanh_approx, n, xp, dy, out};
  return ISSUE(gelu);
}

typedef struct { ct_dtype dt; int64_t rows, cols; bool causal; double scale; const void *x; void *y; } softmax_args;
static int softmax_call(const cti_backend *be, const void *p, ct_stream *s) {
  const softmax_args *a = p;
  return be->transformer->softmax(a->dt, a->rows, a->cols, a->causal, a->scale, a->x, a->y, s);
}
static int softmax_rec(ct_dtype dt, int64_t rows, int64_t cols, bool causal, double scale, const void *xp,
                       void *y, ct_stream *s) {
  softmax_args x = {dt, rows, cols, causal, scale, xp, y};
  return ISSUE(softmax);
}

typedef struct { ct_dtype dt; int64_t rows, cols; double scale; const void *y, *dy; void *dx; } softmax_backward_args;
static int softmax_backward_call(const cti_backend *be, const void *p, ct_stream *s) {
  const softmax_backward_args *a = p;
  return be->transformer->softmax_backward(a->dt, a->rows, a->cols, a->scale, a->y, a->dy, a->dx, s);
}
static int softmax_backward_rec(ct_dtype dt, int64_t rows, int64_t cols, double scale, const void *y,
                                const void *dy, void *dx, ct_stream *s) {
  softmax_backward_args x = {dt, rows, cols, scale, y, dy, dx};
  return ISSUE(softmax_backward);
}

typedef struct {
  ct_dtype dt;
  int64_t n, v;
  const void *logits;
  const int64_t *target;
  int64_t ignore_index;
  void *loss_rows, *grad, *scale;
  int64_t *bad; // NULL when recorded
} lm_cross_entropy_args;
static int lm_cross_entropy_call(const cti_backend *be, const void *p, ct_stream *s) {
  const lm_cross_entropy_args *x = p;
  int64_t bad = -1;
  int rc = be->transformer->cross_entropy(x->dt, x->n, x->v, x->logits, x->target, x->ignore_index, x->loss_rows,
                                          x->grad, x->scale, x->bad ? x->bad : &bad, s);
  if (rc == CT_OK && bad >= 0)
    return ct_fail(CT_ERR_VALUE, "ct_cross_entropy: Target %lld is out of bounds.", (long long)x->target[bad]);
  return rc;
}
static int lm_cross_entropy_rec(ct_dtype dt, int64_t n, int64_t v, const void *logits, const int64_t *target,
                                int64_t ignore_index, void *loss_rows, void *grad, void *scale, int64_t *bad,
                                ct_stream *s) {
  bool recorded = cti_graph_records(s);
  if (recorded) *bad = -1;
  lm_cross_entropy_args x = {dt, n, v, logits, target, ignore_index, loss_rows, grad, scale, recorded ? NULL : bad};
  return ISSUE(lm_cross_entropy);
}

// ---- the optimizers' device-side skip (GradScaler) ----------------------------------------------

typedef struct { const float *found_inf; double *state; bool adam; double lr, beta1, beta2; } amp_prologue_args;
static int amp_prologue_call(const cti_backend *be, const void *p, ct_stream *s) {
  const amp_prologue_args *x = p;
  return be->optim->amp_prologue(x->found_inf, x->state, x->adam, x->lr, x->beta1, x->beta2, s);
}
static int amp_prologue_rec(const float *found_inf, double *state, bool adam, double lr, double beta1,
                            double beta2, ct_stream *s) {
  amp_prologue_args x = {found_inf, state, adam, lr, beta1, beta2};
  return ISSUE(amp_prologue);
}

// ---- the amp family --------------------------------------------------------------------------

typedef struct {
  float *scale;
  int32_t *tracker;
  const float *found_inf;
  double growth_factor, backoff_factor;
  int64_t growth_interval;
  int64_t *skipped;
} update_scale_args;
static int update_scale_call(const cti_backend *be, const void *p, ct_stream *s) {
  const update_scale_args *x = p;
  return be->amp->update_scale(x->scale, x->tracker, x->found_inf, x->growth_factor, x->backoff_factor,
                               x->growth_interval, x->skipped, s);
}
static int update_scale_rec(float *scale, int32_t *tracker, const float *found_inf, double growth_factor,
                            double backoff_factor, int64_t growth_interval, int64_t *skipped, ct_stream *s) {
  update_scale_args x = {scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval, skipped};
  return ISSUE(update_scale);
}

typedef struct { const float *scale; float *inv; } inv_scale_args;
static int inv_scale_call(const cti_backend *be, const void *p, ct_stream *s) {
  const inv_scale_args *x = p;
  return be->amp->inv_scale(x->scale, x->inv, s);
}
static int inv_scale_rec(const float *scale, float *inv, ct_stream *s) {
  inv_scale_args x = {scale, inv};
  return ISSUE(inv_scale);
}

// ---- the tables ---------------------------------------------------------------------------------

static const cti_nn_kernels graph_nn = {
    .relu_backward = relu_backward_rec,
    .dropout = dropout_rec,
    .cross_entropy = cross_entropy_rec,
};

static const cti_conv_kernels graph_conv = {
    .im2col = im2col_rec,
    .col2im = col2im_rec,
    .cnhw_from_nchw = cnhw_rec,
    .maxpool_forward = maxpool_forward_rec,
    .maxpool_backward = maxpool_backward_rec,
    .bn_stats = bn_stats_rec,
    .bn_apply = bn_apply_rec,
    .bn_eval = bn_eval_rec,
    .bn_backward = bn_backward_rec,
};

static const cti_optim_kernels graph_optim = {
    .sgd_step = sgd_step_rec,
    .adam_step = adam_step_rec,
    .sum_squares_workspace = sum_squares_workspace_rec,
    .sum_squares = sum_squares_rec,
    .clip_coef = clip_coef_rec,
    .scale_by = scale_by_rec,
    .amp_prologue = amp_prologue_rec,
};

static const cti_amp_kernels graph_amp = {
    .update_scale = update_scale_rec,
    .inv_scale = inv_scale_rec,
};

static const cti_transformer_kernels graph_transformer = {
    .embedding = embedding_rec,
    .embedding_backward = embedding_backward_rec,
    .layernorm = layernorm_rec,
    .layernorm_backward = layernorm_backward_rec,
    .gelu = gelu_rec,
    .softmax = softmax_rec,
    .softmax_backward = softmax_backward_rec,
    .cross_entropy = lm_cross_entropy_rec,
};

const cti_backend cti_graph_backend = {
    .name = "graph",
    .binary = binary_rec,
    .binary_scalar = binary_scalar_rec,
    .unary = unary_rec,
    .copy = copy_rec,
    .fill = fill_rec,
    .arange = arange_rec,
    .random = random_rec,
    .reduce = reduce_rec,
    .any_nonfinite = any_nonfinite_rec,
    .found_nonfinite = found_nonfinite_rec,
    .gemm = gemm_rec,
    .nn = &graph_nn,
    .conv = &graph_conv,
    .optim = &graph_optim,
    .transformer = &graph_transformer,
    .amp = &graph_amp,
};
