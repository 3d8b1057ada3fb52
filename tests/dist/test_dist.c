// SPDX-License-Identifier: MIT
//
// test_dist: the process group and DistributedDataParallel, run as N ranks
// under tools/launch (ctest dist.*).
//
// References: the collectives against sums written out here for the known
// per-rank inputs; DDP against the same model trained in this very process on
// the whole global batch (every rank's rows), which is what N ranks of batch
// B must equal: one process with batch N*B (PyTorch's guarantee, within
// 1e-5 relative); no_sync accumulation against the large batch's gradient;
// a GPT block run module by module (tests/tu_gpt.h: a ModuleDict root,
// lm_head tied to wte) through ct_ddp_allreduce_grads against the mean of
// its float64 gradients over every rank's batch, computed here.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct.h"
#include "tu_gpt.h"

static int rank_ = -1, failures = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (!(cond)) {                                                    \
      printf("FAIL (rank %d, line %d): ", rank_, __LINE__);           \
      printf(__VA_ARGS__);                                            \
      printf(" [last error: %s]\n", ct_last_error());                 \
      failures++;                                                     \
    }                                                                 \
  } while (0)

static double at(const ct_tensor *t, int64_t i) {
  ct_tensor *c = ct_cpu(t);
  ct_tensor *f = c ? ct_to_dtype(c, CT_F64) : NULL;
  double v = f ? ((const double *)ct_data_ptr(f))[i] : NAN;
  ct_free(c), ct_free(f);
  return v;
}

static ct_tensor *vec(const double *v, int n, ct_device d) {
  ct_tensor *h = ct_from_host(v, CT_SHAPE(n), CT_F64, ct_device_cpu());
  ct_tensor *f = h ? ct_to(h, d, CT_F32, false) : NULL;
  ct_free(h);
  return f;
}

static void test_collectives(ct_process_group *pg) {
  int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  double s = w * (w + 1) / 2.0;
  ct_tensor *t = vec((double[]){r + 1, 2 * (r + 1)}, 2, d);
  CHECK(ct_dist_all_reduce(pg, t, CT_REDUCE_SUM) == CT_OK && at(t, 0) == s && at(t, 1) == 2 * s, "all_reduce sum");
  ct_free(t);
  t = vec((double[]){r + 1, 0}, 2, d);
  CHECK(ct_dist_all_reduce(pg, t, CT_REDUCE_AVG) == CT_OK && fabs(at(t, 0) - s / w) < 1e-6, "all_reduce avg %g",
        at(t, 0));
  ct_free(t);
  t = vec((double[]){r + 1, -(r + 1)}, 2, d);
  CHECK(ct_dist_all_reduce(pg, t, CT_REDUCE_MAX) == CT_OK && at(t, 0) == w && at(t, 1) == -1, "all_reduce max");
  ct_free(t);
  t = vec((double[]){r == w - 1 ? 42 : r, 7}, 2, d);
  CHECK(ct_dist_broadcast(pg, t, w - 1) == CT_OK && at(t, 0) == 42, "broadcast from the last rank");
  CHECK(ct_dist_broadcast(pg, t, w) != CT_OK && strstr(ct_last_error(), "is not a rank"), "broadcast bad src");
  ct_free(t);
  ct_tensor *in = vec((double[]){r, 10 * r}, 2, d), *out[16];
  for (int k = 0; k < w; ++k) out[k] = ct_zeros(CT_SHAPE(2), CT_F32, d);
  CHECK(ct_dist_all_gather(pg, out, in) == CT_OK, "all_gather");
  for (int k = 0; k < w; ++k) CHECK(at(out[k], 0) == k && at(out[k], 1) == 10 * k, "all_gather slot %d", k);
  for (int k = 0; k < w; ++k) {
    ct_free(out[k]);
    out[k] = vec((double[]){r + k}, 1, d);
  }
  ct_tensor *mine = ct_zeros(CT_SHAPE(1), CT_F32, d);
  CHECK(ct_dist_reduce_scatter(pg, mine, out, CT_REDUCE_SUM) == CT_OK && at(mine, 0) == s - w + (double)w * r,
        "reduce_scatter: %g", at(mine, 0));
  for (int k = 0; k < w; ++k) ct_free(out[k]);
  ct_free(in), ct_free(mine);
  t = vec((double[]){1, 1}, 2, d);
  ct_work *wk = ct_dist_all_reduce_async(pg, t, CT_REDUCE_SUM);
  CHECK(wk && ct_work_wait(wk) == CT_OK && at(t, 0) == w, "async all_reduce");
  ct_free(t);
  ct_tensor *i16 = ct_zeros(CT_SHAPE(2), CT_BF16, d);
  if (d.type == CT_CPU)
    CHECK(ct_dist_all_reduce(pg, i16, CT_REDUCE_SUM) != CT_OK && strstr(ct_last_error(), "bfloat16"), "mpi bf16");
  ct_free(i16);
  CHECK(ct_dist_barrier(pg) == CT_OK, "barrier");
}

// ---- DDP ---------------------------------------------------------------------------------
#define LAYERS 6
#define WIDTH 256
#define B 8

static ct_module *deep_mlp(ct_device d) {
  ct_module *mods[2 * LAYERS - 1];
  int n = 0;
  for (int i = 0; i < LAYERS; ++i) {
    if (i) mods[n++] = ct_nn_relu();
    mods[n++] = ct_nn_linear(WIDTH, i == LAYERS - 1 ? 4 : WIDTH, true);
  }
  ct_module *m = ct_nn_sequential(n, mods);
  if (m && ct_module_to(m, d) != CT_OK) return NULL;
  return m;
}

// The global batch: rows [0, world * B * micro), the same on every rank.
static void global_batch(int rows, ct_device d, ct_tensor **x, ct_tensor **y) {
  ct_manual_seed(1234);
  ct_tensor *xc = ct_randn(CT_SHAPE(rows, WIDTH), CT_F32, ct_device_cpu());
  ct_tensor *yc = ct_randn(CT_SHAPE(rows, 4), CT_F32, ct_device_cpu());
  *x = ct_to_device(xc, d), *y = ct_to_device(yc, d);
  ct_free(xc), ct_free(yc);
}

static int step(ct_module *m, ct_ddp *ddp, const ct_tensor *x, const ct_tensor *y) {
  ct_tensor *out = ddp ? ct_ddp_forward(ddp, x) : ct_module_forward(m, x), *g = NULL;
  ct_tensor *loss = out ? ct_mse_loss(out, y, &g) : NULL;
  int rc = !loss ? -1 : ddp ? ct_ddp_backward_params(ddp, g) : ct_module_backward_params(m, g);
  ct_free(out), ct_free(g), ct_free(loss);
  return rc;
}

static double max_param_diff(ct_module *a, ct_module *b, double *scale) {
  int na = 0, nb = 0;
  ct_param **pa = ct_module_parameters(a, &na), **pb = ct_module_parameters(b, &nb);
  double diff = 0;
  *scale = 0;
  for (int i = 0; i < na && i < nb; ++i) {
    ct_tensor *ca = ct_cpu(pa[i]->value), *cb = ct_cpu(pb[i]->value);
    const float *fa = ct_data_ptr(ca), *fb = ct_data_ptr(cb);
    for (int64_t e = 0; e < ct_numel(ca); ++e) {
      diff = fmax(diff, fabs((double)fa[e] - fb[e]));
      *scale = fmax(*scale, fabs((double)fb[e]));
    }
    ct_free(ca), ct_free(cb);
  }
  return diff;
}

// PyTorch 2.x's bucket rule, worked out here from the parameters' byte sizes
// (an independent statement of torch/nn/parallel/distributed.py's
// bucket_size_limits and the reducer's first_bucket_bytes_cap): walk the
// parameters in reverse registration order; a bucket closes once its bytes
// reach its limit; the limits are 1 MiB then 25 MiB when bucket_cap_mb is
// not given (0), and cap_mb MiB for every bucket, the first included, when it
// is. Checks ddp's buckets hold exactly those parameters in that order, and,
// when want != NULL, that the rule gives the hand-worked bucket sizes want[].
static void check_layout(ct_ddp *ddp, ct_module *m, double cap_mb, const int *want, int nwant, const char *what) {
  int np = 0;
  ct_param **p = ct_module_parameters(m, &np);
  int size[64], nb = 0, members = 0;
  double bytes = 0;
  for (int i = np - 1; i >= 0 && nb < 64; --i) {
    double limit = cap_mb > 0 ? cap_mb * 1048576.0 : (nb == 0 ? 1048576.0 : 25 * 1048576.0);
    bytes += (double)ct_nbytes(p[i]->value);
    ++members;
    if (bytes >= limit || i == 0) {
      size[nb++] = members;
      members = 0, bytes = 0;
    }
  }
  if (want) {
    bool same = nb == nwant;
    for (int b = 0; same && b < nb; ++b) same = size[b] == want[b];
    CHECK(same, "%s: the rule gives %d buckets, the hand-worked layout %d", what, nb, nwant);
  }
  CHECK(ct_ddp_bucket_count(ddp) == nb, "%s: %d buckets, PyTorch 2.x's rule gives %d", what, ct_ddp_bucket_count(ddp),
        nb);
  int next = np - 1;
  for (int b = 0; b < ct_ddp_bucket_count(ddp) && b < nb; ++b) {
    int n = 0;
    const int *idx = ct_ddp_bucket(ddp, b, &n);
    CHECK(n == size[b], "%s: bucket %d holds %d parameters, the rule %d", what, b, n, size[b]);
    for (int j = 0; j < n && j < size[b]; ++j, --next)
      CHECK(idx[j] == next, "%s: bucket %d slot %d holds %d, the rule %d", what, b, j, idx[j], next);
  }
}

static void test_ddp_equivalence(ct_process_group *pg, bool overlap) {
  int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  ct_manual_seed(7 + (uint64_t)r); // different starts: DDP must broadcast rank 0's weights
  ct_module *m = deep_mlp(d);
  ct_manual_seed(7); // rank 0's start, for the one-process reference
  ct_module *ref = deep_mlp(d);
  ct_ddp_options o = ct_ddp_defaults();
  o.bucket_cap_mb = 0.2;
  ct_ddp *ddp = ct_ddp_create(m, pg, o);
  CHECK(ddp != NULL, "ct_ddp_create");
  if (!ddp) return;
  ct_ddp_set_overlap(ddp, overlap);
  double scale = 0;
  CHECK(max_param_diff(m, ref, &scale) == 0, "parameters after the broadcast differ from rank 0's");
  // Buckets: every parameter once, in reverse registration order. Worked by hand
  // (b5 16 B, W5 4096 B, then 1024 B + 262144 B per 256x256 layer): an explicit
  // 0.2 MB cap (209,715 B) caps the first bucket too (PyTorch 2.x), so it closes
  // after b5 W5 b4 W4 (267,280 B) and each later bucket after one b, W pair.
  // PyTorch 1.13's 1 MiB first bucket would have given {10, 2}, as the default does.
  check_layout(ddp, m, 0.2, (const int[]){4, 2, 2, 2, 2}, 5, "cap 0.2");
  if (overlap) { // bucket_cap_mb not given: 1 MiB first (closes after 1,056,784 B), then 25 MiB.
    ct_module *m2 = deep_mlp(d); // its own module: a DDP owns its module's gradient hook
    ct_ddp *dd = m2 ? ct_ddp_create(m2, pg, ct_ddp_defaults()) : NULL;
    CHECK(dd != NULL, "ct_ddp_create with the default cap");
    if (dd) check_layout(dd, m2, 0, (const int[]){10, 2}, 2, "default cap");
    ct_ddp_free(dd);
    ct_module_free(m2);
  }
  int np = 0, np2 = 0;
  ct_sgd_options so = ct_sgd_defaults(0.05);
  so.momentum = 0.9;
  ct_param **pm = ct_module_parameters(m, &np), **pr = ct_module_parameters(ref, &np2);
  ct_optimizer *opt = ct_optim_sgd(pm, np, so), *ropt = ct_optim_sgd(pr, np2, so);
  ct_tensor *x = NULL, *y = NULL;
  global_batch(w * B, d, &x, &y);
  ct_tensor *xr = ct_narrow(x, 0, (int64_t)r * B, B), *yr = ct_narrow(y, 0, (int64_t)r * B, B);
  for (int k = 0; k < 5; ++k) {
    CHECK(ct_optimizer_zero_grad(opt, true) == CT_OK && step(m, ddp, xr, yr) == CT_OK && ct_optimizer_step(opt) == CT_OK,
          "DDP step %d", k);
    CHECK(ct_optimizer_zero_grad(ropt, true) == CT_OK && step(ref, NULL, x, y) == CT_OK &&
              ct_optimizer_step(ropt) == CT_OK, "reference step %d", k);
  }
  double diff = max_param_diff(m, ref, &scale);
  CHECK(diff <= 1e-5 * scale, "%d ranks x batch %d vs 1 process x batch %d: max |diff| %g (scale %g)", w, B, w * B,
        diff, scale);
  if (r == 0) printf("ddp (overlap %s): %d buckets, max |param diff| vs one process %.3g (scale %.3g)\n",
                     overlap ? "on" : "off", ct_ddp_bucket_count(ddp), diff, scale);
  ct_free(xr), ct_free(yr), ct_free(x), ct_free(y);
  ct_optimizer_free(opt), ct_optimizer_free(ropt);
  ct_ddp_free(ddp);
  ct_module_free(m), ct_module_free(ref);
}

// no_sync over 2 micro-batches, then a synced one: grads = 2 x the global batch's.
static void test_no_sync(ct_process_group *pg) {
  int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  ct_manual_seed(11);
  ct_module *m = deep_mlp(d), *ref = NULL;
  ct_manual_seed(11);
  ref = deep_mlp(d);
  ct_ddp *ddp = ct_ddp_create(m, pg, ct_ddp_defaults());
  ct_tensor *x = NULL, *y = NULL;
  global_batch(2 * w * B, d, &x, &y); // micro-batch k of rank r: rows (k * w + r) * B ...
  for (int k = 0; k < 2; ++k) {
    ct_tensor *xk = ct_narrow(x, 0, (int64_t)(k * w + r) * B, B), *yk = ct_narrow(y, 0, (int64_t)(k * w + r) * B, B);
    ct_ddp_set_no_sync(ddp, k == 0);
    CHECK(step(m, ddp, xk, yk) == CT_OK, "micro-batch %d", k);
    ct_free(xk), ct_free(yk);
  }
  CHECK(step(ref, NULL, x, y) == CT_OK, "reference");
  int n = 0, n2 = 0;
  ct_param **p = ct_module_parameters(m, &n), **q = ct_module_parameters(ref, &n2);
  double diff = 0, scale = 0;
  for (int i = 0; i < n; ++i) {
    ct_tensor *half = ct_mul_scalar(p[i]->grad, 0.5), *a = ct_cpu(half), *b = ct_cpu(q[i]->grad);
    for (int64_t e = 0; e < ct_numel(a); ++e) {
      double u = ((const float *)ct_data_ptr(a))[e], v = ((const float *)ct_data_ptr(b))[e];
      diff = fmax(diff, fabs(u - v)), scale = fmax(scale, fabs(v));
    }
    ct_free(half), ct_free(a), ct_free(b);
  }
  CHECK(diff <= 1e-5 * scale, "no_sync accumulation: max |grad/2 - large-batch grad| %g (scale %g)", diff, scale);
  ct_free(x), ct_free(y);
  ct_ddp_free(ddp);
  ct_module_free(m), ct_module_free(ref);
}

// ---- a hand-written model: tu_gpt and ct_ddp_allreduce_grads -----------------------------------
#define GPT_V 13
#define GPT_T 6
#define GPT_C 192 // 1.8 MB of parameters: past the first bucket's 1 MiB
#define GPT_NH 4
#define GPT_B 3

// Rank k's batch: (GPT_B, GPT_T) token ids and targets from a fixed LCG (one
// target ignored), the same on every rank.
static void gpt_batch(int k, ct_device d, ct_tensor **idx, ct_tensor **tgt) {
  int64_t a[GPT_B * GPT_T], b[GPT_B * GPT_T];
  uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1);
  for (int i = 0; i < GPT_B * GPT_T; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    a[i] = (int64_t)((s >> 33) % GPT_V);
    b[i] = (int64_t)((s >> 17) % GPT_V);
  }
  b[k % (GPT_B * GPT_T)] = -100;
  ct_tensor *ha = ct_from_host(a, CT_SHAPE(GPT_B, GPT_T), CT_I64, ct_device_cpu());
  ct_tensor *hb = ct_from_host(b, CT_SHAPE(GPT_B, GPT_T), CT_I64, ct_device_cpu());
  *idx = ct_to_device(ha, d), *tgt = ct_to_device(hb, d);
  ct_free(ha), ct_free(hb);
}

// One forward and backward of g on rank k's batch: grads accumulate.
static void gpt_step(tu_gpt *g, int k, ct_device d) {
  ct_tensor *idx = NULL, *tgt = NULL, *loss = NULL, *dl = NULL;
  gpt_batch(k, d, &idx, &tgt);
  ct_tensor *logits = tu_gpt_forward(g, idx, tgt, &loss, &dl);
  tu_gpt_backward(g, dl);
  ct_free(idx), ct_free(tgt), ct_free(loss), ct_free(dl), ct_free(logits);
}

// t's elements as doubles (caller frees), or NULL.
static double *host_f64(const ct_tensor *t) {
  ct_tensor *c = t ? ct_cpu(t) : NULL;
  ct_tensor *f = c ? ct_to_dtype(c, CT_F64) : NULL;
  double *h = f ? malloc((size_t)ct_numel(f) * sizeof *h + 1) : NULL;
  if (h) memcpy(h, ct_data_ptr(f), (size_t)ct_numel(f) * sizeof *h);
  ct_free(c), ct_free(f);
  return h;
}

// max |a - b| over two models' parameters (values, or grads), and max |b|.
static double gpt_diff(ct_module *a, ct_module *b, bool grads, double *scale) {
  int na = 0, nb = 0;
  ct_param **pa = ct_module_parameters(a, &na), **pb = ct_module_parameters(b, &nb);
  double diff = na == nb ? 0 : INFINITY;
  *scale = 0;
  for (int i = 0; i < na && i < nb; ++i) {
    const ct_tensor *ta = grads ? pa[i]->grad : pa[i]->value, *tb = grads ? pb[i]->grad : pb[i]->value;
    double *u = host_f64(ta), *v = host_f64(tb);
    for (int64_t e = 0; u && v && e < ct_numel(ta); ++e)
      diff = fmax(diff, fabs(u[e] - v[e])), *scale = fmax(*scale, fabs(v[e]));
    if (!u || !v || ct_numel(ta) != ct_numel(tb)) diff = INFINITY;
    free(u), free(v);
  }
  return diff;
}

static void test_ddp_gpt(ct_process_group *pg) {
  const int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  const ct_device d = ct_dist_device(pg);
  tu_gpt g, ref;
  ct_manual_seed(300 + (uint64_t)r); // different starts: DDP broadcasts rank 0's, the tied weight included
  tu_gpt_init(&g, GPT_V, GPT_T, GPT_C, GPT_NH);
  ct_manual_seed(300);
  tu_gpt_init(&ref, GPT_V, GPT_T, GPT_C, GPT_NH);
  CHECK(ct_module_to(g.root, d) == CT_OK && ct_module_to(ref.root, d) == CT_OK, "GPT to %s", "device");
  ct_ddp_options o = ct_ddp_defaults();
  o.bucket_cap_mb = 0.25; // 256 KiB buckets, the first one too
  ct_ddp *ddp = ct_ddp_create(g.root, pg, o);
  CHECK(ddp != NULL, "ct_ddp_create on a ModuleDict with a tied weight");
  if (!ddp) return;
  double scale = 0, diff = gpt_diff(g.root, ref.root, false, &scale);
  CHECK(diff == 0, "GPT parameters after the broadcast differ from rank 0's by %g", diff);
  int np = 0;
  ct_module_parameters(g.root, &np);
  check_layout(ddp, g.root, 0.25, NULL, 0, "GPT, cap 0.25");
  CHECK(ct_ddp_bucket_count(ddp) >= 3, "GPT: %d buckets", ct_ddp_bucket_count(ddp));
  // The reference: the mean over all ranks' batches of float64 gradients.
  CHECK(ct_module_to_dtype(ref.root, CT_F64) == CT_OK, "reference to float64");
  for (int k = 0; k < w; ++k) gpt_step(&ref, k, d);
  int nr = 0;
  ct_param **pr = ct_module_parameters(ref.root, &nr);
  for (int i = 0; i < nr; ++i) {
    ct_tensor *m = ct_mul_scalar(pr[i]->grad, 1.0 / w);
    CHECK(m && ct_copy_(pr[i]->grad, m, false) == CT_OK, "mean of reference grad %d", i);
    ct_free(m);
  }
  for (int step = 0; step < 2; ++step) { // twice: the second starts from zeroed grads again
    CHECK(ct_module_zero_grad(g.root, true) == CT_OK, "zero_grad");
    gpt_step(&g, r, d); // this rank's batch only
    CHECK(ct_ddp_allreduce_grads(ddp) == CT_OK, "ct_ddp_allreduce_grads");
    diff = gpt_diff(g.root, ref.root, true, &scale);
    CHECK(diff <= 2e-6 * scale, "GPT grads after ct_ddp_allreduce_grads vs the float64 mean over %d batches: "
          "max |diff| %g (scale %g)", w, diff, scale);
  }
  if (r == 0) printf("ddp gpt (allreduce_grads): %d buckets, %d parameters, max |grad diff| vs float64 mean %.3g "
                     "(scale %.3g)\n", ct_ddp_bucket_count(ddp), np, diff, scale);
  // no_sync: nothing is communicated, the local grads stay this rank's own
  ct_ddp_set_no_sync(ddp, true);
  CHECK(ct_module_zero_grad(g.root, true) == CT_OK, "zero_grad");
  gpt_step(&g, r, d);
  ct_param *first = ct_module_parameters(g.root, &np)[0]; // wte.weight, the tied one
  ct_tensor *before = ct_clone(first->grad);
  CHECK(ct_ddp_allreduce_grads(ddp) == CT_OK, "ct_ddp_allreduce_grads under no_sync");
  double *u = host_f64(before), *v = host_f64(first->grad);
  bool same = u && v;
  for (int64_t e = 0; same && e < ct_numel(before); ++e) same = u[e] == v[e];
  free(u), free(v);
  CHECK(same, "ct_ddp_allreduce_grads under no_sync changed a grad");
  ct_free(before);
  ct_ddp_set_no_sync(ddp, false);
  // a parameter without a grad: named, on every rank alike
  CHECK(ct_module_zero_grad(g.root, true) == CT_OK && ct_ddp_allreduce_grads(ddp) != CT_OK &&
            strstr(ct_last_error(), "received no gradient"), "allreduce_grads without grads");
  ct_ddp_free(ddp);
  ct_module_free(g.root), ct_module_free(ref.root);
}

int main(int argc, char **argv) {
  const char *backend = argc > 1 ? argv[1] : "mpi";
  ct_process_group *pg = ct_dist_init_process_group(backend);
  if (!pg) {
    fprintf(stderr, "test_dist: %s\n", ct_last_error());
    return 1;
  }
  rank_ = ct_dist_get_rank(pg);
  test_collectives(pg);
  test_ddp_equivalence(pg, true);
  test_ddp_equivalence(pg, false);
  test_no_sync(pg);
  test_ddp_gpt(pg);
  int all = failures;
  ct_tensor *f = ct_from_host((int64_t[]){failures}, CT_SHAPE(1), CT_I64, ct_device_cpu());
  if (ct_dist_get_backend(pg)[0] == 'm' && ct_dist_all_reduce(pg, f, CT_REDUCE_SUM) == CT_OK)
    all = (int)((const int64_t *)ct_data_ptr(f))[0];
  ct_free(f);
  if (rank_ == 0) printf("%s: %d ranks, %d failures\n", all ? "FAILED" : "PASSED", ct_dist_get_world_size(pg), all);
  ct_dist_destroy_process_group(pg);
  return all ? 1 : 0;
}
