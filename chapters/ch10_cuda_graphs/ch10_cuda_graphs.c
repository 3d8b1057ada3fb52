// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 10 章　CUDA Graphs：把整个训练步录下来，一次launch重放

TODO
:::
::: en
# Chapter 10. CUDA graphs: record a whole training step, replay it with one launch

TODO
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct.h"

#define IN 10       // the seed's shapes: input (32, 10), target (32, 10)
#define OUT 10
#define NBATCH 8    // batches in the data pool, read in turn
#define LOG_EVERY 10
#define MAX_WIDTHS 8

typedef struct settings {
  long width, depth, batch, steps, warmup;
  double lr, momentum;
  const char *save, *save_init;
} settings;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int sync_device(ct_device d) { return d.type == CT_CUDA ? ct_cuda_synchronize(d.index) : CT_OK; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
/*md show*/

/*md
::: zh
## 模型、数据和一步训练

TODO
:::
::: en
## The model, the data and one training step

TODO
:::
*/
// Linear(10, w), ReLU, then depth - 1 times [Linear(w, w), ReLU], then Linear(w, 10).
static ct_module *build_mlp(int64_t width, int depth) {
  ct_module *mods[2 * 16 + 1];
  int n = 0;
  for (int i = 0; i < depth && i < 16; ++i) {
    mods[n++] = ct_nn_linear(i == 0 ? IN : width, width, true);
    mods[n++] = ct_nn_relu();
  }
  mods[n++] = ct_nn_linear(width, OUT, true);
  return ct_nn_sequential(n, mods);
}

static ct_optimizer *make_sgd(ct_module *m, const settings *s) {
  int n = 0;
  ct_param **p = ct_module_parameters(m, &n);
  ct_sgd_options o = ct_sgd_defaults(s->lr);
  o.momentum = s->momentum;
  return ct_optim_sgd(p, n, o);
}

// NBATCH batches: x ~ N(0, 1) of shape (B, 10) and a teacher's targets
// y = tanh(x T) with T ~ N(0, 1/10) fixed, so there is something to learn.
typedef struct data {
  ct_tensor *x[NBATCH], *y[NBATCH];
} data;

static void free_data(data *d) {
  for (int i = 0; i < NBATCH; ++i) ct_free(d->x[i]), ct_free(d->y[i]);
  memset(d, 0, sizeof *d);
}

static int make_data(ct_device dev, int64_t batch, data *d) {
  memset(d, 0, sizeof *d);
  ct_tensor *t0 = ct_randn(CT_SHAPE(IN, OUT), CT_F32, dev);
  ct_tensor *teacher = t0 ? ct_mul_scalar(t0, 1.0 / sqrt((double)IN)) : NULL;
  int rc = teacher ? CT_OK : -1;
  for (int i = 0; rc == CT_OK && i < NBATCH; ++i) {
    d->x[i] = ct_randn(CT_SHAPE(batch, IN), CT_F32, dev);
    ct_tensor *xt = d->x[i] ? ct_matmul(d->x[i], teacher) : NULL;
    d->y[i] = xt ? ct_tanh(xt) : NULL;
    ct_free(xt);
    if (!d->y[i]) rc = -1;
  }
  ct_free(t0), ct_free(teacher);
  if (rc != CT_OK) free_data(d);
  return rc;
}

// One training step as the seed writes it: zero_grad(set_to_none=True),
// forward, MSE loss, backward, optimizer step. Returns the 0-d loss.
static ct_tensor *train_step(ct_module *m, ct_optimizer *opt, const ct_tensor *x, const ct_tensor *y) {
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_tensor *out = ct_module_forward(m, x), *dout = NULL; // out (B, 10)
  ct_tensor *loss = out ? ct_mse_loss(out, y, &dout) : NULL;
  int rc = loss ? ct_module_backward_params(m, dout) : -1;
  if (rc == CT_OK) rc = ct_optimizer_step(opt);
  ct_free(out), ct_free(dout);
  if (rc != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
}
/*md twin step*/

/*md
::: zh
## 预热：在旁路流上先跑几步

TODO
:::
::: en
## Warm-up on a side stream

TODO
:::
*/
// Everything one captured step needs: the model and its optimizer, the
// static input and target (made once, fed by copy_), the loss the captured
// step made, the side stream and the graph.
typedef struct graphed {
  ct_module *model;
  ct_optimizer *opt;
  ct_tensor *static_x, *static_y; // (B, 10) each
  ct_tensor *static_loss;         // 0-d, in the graph's pool
  ct_stream *side;
  ct_cuda_graph *g;
} graphed;

static void graphed_free(graphed *gr) {
  ct_cuda_graph_free(gr->g);
  ct_free(gr->static_loss), ct_free(gr->static_x), ct_free(gr->static_y);
  ct_optimizer_free(gr->opt);
  ct_module_free(gr->model);
  ct_stream_destroy(gr->side);
  memset(gr, 0, sizeof *gr);
}

static int graphed_init(graphed *gr, ct_module *model, const settings *s, ct_device dev) {
  memset(gr, 0, sizeof *gr);
  gr->model = model;
  gr->opt = make_sgd(model, s);
  gr->static_x = ct_empty(CT_SHAPE(s->batch, IN), CT_F32, dev);
  gr->static_y = ct_empty(CT_SHAPE(s->batch, OUT), CT_F32, dev);
  gr->side = ct_stream_create(dev, 0);
  gr->g = ct_cuda_graph_new();
  return gr->opt && gr->static_x && gr->static_y && gr->side && gr->g ? CT_OK : -1;
}

// s.wait_stream(current); with torch.cuda.stream(s): a few steps;
// current.wait_stream(s). Losses go to loss[0..n) when loss is not NULL.
static int warm_up(graphed *gr, const data *d, long n, double *loss) {
  ct_device dev = ct_module_device(gr->model);
  ct_stream *cur = ct_current_stream(dev);
  int rc = ct_stream_wait_stream(gr->side, cur);
  if (rc == CT_OK) rc = ct_set_stream(gr->side);
  for (long i = 0; rc == CT_OK && i < n; ++i) {
    rc = ct_copy_(gr->static_x, d->x[i % NBATCH], false);
    if (rc == CT_OK) rc = ct_copy_(gr->static_y, d->y[i % NBATCH], false);
    ct_tensor *l = rc == CT_OK ? train_step(gr->model, gr->opt, gr->static_x, gr->static_y) : NULL;
    if (!l) rc = -1;
    else if (loss) rc = ct_item(l, &loss[i]);
    ct_free(l);
  }
  if (ct_set_stream(cur) != CT_OK) rc = -1;
  if (rc == CT_OK) rc = ct_stream_wait_stream(cur, gr->side);
  return rc;
}
/*md twin warm_up*/

/*md
::: zh
## 捕获

TODO
:::
::: en
## Capture

TODO
:::
*/
static int capture(graphed *gr) {
  int rc = ct_cuda_graph_capture_begin(gr->g, gr->side, NULL); // with torch.cuda.graph(g, stream=side):
  if (rc != CT_OK) return rc;
  gr->static_loss = train_step(gr->model, gr->opt, gr->static_x, gr->static_y);
  rc = ct_cuda_graph_capture_end(gr->g);
  return rc == CT_OK && gr->static_loss ? CT_OK : -1;
}
/*md twin capture*/

/*md
::: zh
## 重放

TODO
:::
::: en
## Replay

TODO
:::
*/
// Step i of training: new data into the static tensors, then one replay.
static int replay_step(graphed *gr, const data *d, long i) {
  /* LAB BEGIN: copy batch i % NBATCH into the static input and target, then replay the graph */
  int rc = ct_copy_(gr->static_x, d->x[i % NBATCH], false); // static_input.copy_(real_input)
  if (rc == CT_OK) rc = ct_copy_(gr->static_y, d->y[i % NBATCH], false);
  if (rc == CT_OK) rc = ct_cuda_graph_replay(gr->g); // g.replay()
  return rc;
  /* LAB END */
}
/*md twin replay*/

/*md hide*/
// max |a - b| over two tensors of one shape (a host wait).
static int max_abs_diff(const ct_tensor *a, const ct_tensor *b, double *out) {
  ct_tensor *d = ct_sub(a, b), *ad = d ? ct_abs(d) : NULL, *mx = ad ? ct_max(ad) : NULL;
  int rc = mx ? ct_item(mx, out) : -1;
  ct_free(d), ct_free(ad), ct_free(mx);
  return rc;
}

// max |a - b| over the parameters of two models of one structure.
static int param_difference(ct_module *a, ct_module *b, double *out) {
  int na = 0, nb = 0;
  ct_param **pa = ct_module_parameters(a, &na), **pb = ct_module_parameters(b, &nb);
  *out = 0;
  for (int i = 0; i < na && i < nb; ++i) {
    double d = 0;
    if (max_abs_diff(pa[i]->value, pb[i]->value, &d) != CT_OK) return -1;
    *out = fmax(*out, d);
  }
  return CT_OK;
}

static ct_module *model_on(const settings *s, int64_t width, ct_device dev) {
  ct_module *m = build_mlp(width, (int)s->depth);
  if (m && ct_module_to(m, dev) != CT_OK) {
    ct_module_free(m);
    return NULL;
  }
  return m;
}

// b := a's weights (the same start for two runs).
static int copy_weights(ct_module *a, ct_module *b) {
  int n = 0;
  ct_named_tensor *st = ct_module_state_dict(a, "", &n);
  int rc = st ? ct_module_load_state(b, st, n, true) : -1;
  ct_named_tensors_free(st, n);
  return rc;
}

static double kib(size_t bytes) { return (double)bytes / 1024.0; }
/*md show*/

static void show_model(const settings *s, ct_module *model, ct_metrics *m) {
  ct_cli_section("model");
  printf("MLP 10 -> %ld x %ld -> 10 (ReLU), %" PRId64 " parameters; batch %ld; SGD lr %g momentum %g\n",
         s->width, s->depth, ct_module_num_elements(model), s->batch, s->lr, s->momentum);
  ct_metrics_num(m, "width", (double)s->width);
  ct_metrics_num(m, "depth", (double)s->depth);
  ct_metrics_num(m, "batch", (double)s->batch);
  ct_metrics_num(m, "parameters", (double)ct_module_num_elements(model));
}
/*md output model*/

static int show_warm_up(graphed *gr, const data *d, const settings *s, ct_metrics *m) {
  ct_cli_section("warm-up");
  double loss[16];
  long n = s->warmup < 16 ? s->warmup : 16;
  if (warm_up(gr, d, n, loss) != CT_OK) return -1;
  for (long i = 0; i < n; ++i) printf("warm-up step %ld on the side stream: loss %.6f\n", i + 1, loss[i]);
  ct_metrics_series(m, "warmup_loss", loss, (int)n);
  return CT_OK;
}
/*md output warm-up*/

static int show_capture(graphed *gr, ct_metrics *m) {
  ct_cli_section("capture");
  ct_device dev = ct_module_device(gr->model);
  int np = 0;
  ct_param **p = ct_module_parameters(gr->model, &np);
  ct_tensor *before = ct_clone(p[0]->value); // to see that capture runs nothing
  if (!before || sync_device(dev) != CT_OK) return -1;
  size_t a0 = ct_memory_allocated(dev), r0 = ct_memory_reserved(dev);
  if (capture(gr) != CT_OK) return -1;
  if (sync_device(dev) != CT_OK) return -1;
  size_t a1 = ct_memory_allocated(dev), r1 = ct_memory_reserved(dev);
  double moved = 0;
  if (max_abs_diff(before, p[0]->value, &moved) != CT_OK) return -1;
  ct_free(before);
  int64_t nodes = ct_cuda_graph_num_nodes(gr->g);
  printf("captured one training step: %" PRId64 " kernel calls in one graph\n", nodes);
  printf("parameters after capture: %s\n", moved == 0 ? "unchanged (capture runs nothing)" : "CHANGED");
  printf("memory: allocated %.0f KiB -> %.0f KiB, reserved %.0f KiB -> %.0f KiB (the graph's private pool)\n",
         kib(a0), kib(a1), kib(r0), kib(r1));
  ct_metrics_num(m, "kernels_per_step", (double)nodes);
  ct_metrics_num(m, "capture_param_change", moved);
  ct_metrics_num(m, "capture_reserved_kib", kib(r1) - kib(r0));
  return moved == 0 ? CT_OK : ct_fail(CT_ERR_VALUE, "ch10: the capture changed the parameters");
}
/*md output capture*/

// The same steps eagerly on `eager` (same start, same batches) and by
// replay; losses side by side, then the parameters compared.
static int show_replay(graphed *gr, ct_module *eager, const data *d, const settings *s, ct_metrics *m) {
  ct_cli_section("replay");
  ct_optimizer *opt = make_sgd(eager, s);
  double *le = calloc((size_t)s->steps, sizeof(double)), *lr = calloc((size_t)s->steps, sizeof(double));
  if (!opt || !le || !lr) return -1;
  int rc = CT_OK;
  for (long i = 0; rc == CT_OK && i < s->warmup; ++i) { // the warm-up the graphed model had
    ct_tensor *l = train_step(eager, opt, d->x[i % NBATCH], d->y[i % NBATCH]);
    rc = l ? CT_OK : -1;
    ct_free(l);
  }
  printf("%6s  %12s  %12s\n", "step", "eager", "replay");
  for (long i = 0; rc == CT_OK && i < s->steps; ++i) {
    long k = s->warmup + i;
    ct_tensor *l = train_step(eager, opt, d->x[k % NBATCH], d->y[k % NBATCH]);
    rc = l ? ct_item(l, &le[i]) : -1;
    ct_free(l);
    if (rc == CT_OK) rc = replay_step(gr, d, k);
    if (rc == CT_OK) rc = ct_item(gr->static_loss, &lr[i]);
    if (rc == CT_OK && (i == 0 || (i + 1) % LOG_EVERY == 0 || i == s->steps - 1))
      printf("%6ld  %12.6f  %12.6f\n", i + 1, le[i], lr[i]);
  }
  double diff = 0;
  if (rc == CT_OK) rc = param_difference(eager, gr->model, &diff);
  if (rc == CT_OK)
    printf("max |parameter difference|, eager vs replay, after %ld steps: %g%s\n", s->warmup + s->steps, diff,
           diff == 0 ? " (bit for bit)" : "");
  ct_metrics_series(m, "eager_loss", le, (int)s->steps);
  ct_metrics_series(m, "replay_loss", lr, (int)s->steps);
  ct_metrics_num(m, "max_param_diff", diff);
  ct_metrics_num(m, "steps", (double)s->steps);
  ct_metrics_num(m, "warmup", (double)s->warmup);
  free(le), free(lr);
  ct_optimizer_free(opt);
  return rc;
}
/*md output replay*/

/*md
::: zh
## 种子里的错误：在捕获里重新创建 static_input

TODO
:::
::: en
## The seed's bug: static_input re-created inside the capture

TODO
:::
*/
// The seed's capture: static_input = randn(...) inside the graph.
static int capture_seed_style(graphed *gr) {
  int rc = ct_cuda_graph_capture_begin(gr->g, gr->side, NULL);
  if (rc != CT_OK) return rc;
  ct_device dev = ct_module_device(gr->model);
  ct_free(gr->static_x);
  gr->static_x = ct_randn(ct_shape_of(gr->static_y), CT_F32, dev); // captured: replayed every time
  gr->static_loss = gr->static_x ? train_step(gr->model, gr->opt, gr->static_x, gr->static_y) : NULL;
  rc = ct_cuda_graph_capture_end(gr->g);
  return rc == CT_OK && gr->static_loss ? CT_OK : -1;
}

static int show_seed_bug(const settings *s, graphed *fixed, const data *d, ct_metrics *m) {
  ct_cli_section("seed bug");
  ct_device dev = ct_module_device(fixed->model);
  graphed gr;
  ct_module *model = model_on(s, s->width, dev);
  if (!model || graphed_init(&gr, model, s, dev) != CT_OK || warm_up(&gr, d, s->warmup, NULL) != CT_OK ||
      capture_seed_style(&gr) != CT_OK)
    return -1;
  double bad[2] = {0, 0}, good = 0, first[2] = {0, 0};
  int rc = CT_OK;
  for (int r = 0; rc == CT_OK && r < 2; ++r) { // two replays, each after copy_ of batch 0
    rc = replay_step(&gr, d, 0);
    if (rc == CT_OK) rc = max_abs_diff(gr.static_x, d->x[0], &bad[r]);
    ct_tensor *row = rc == CT_OK ? ct_narrow(gr.static_x, 0, 0, 1) : NULL, *e = row ? ct_sum(row) : NULL;
    if (!e || ct_item(e, &first[r]) != CT_OK) rc = -1;
    ct_free(row), ct_free(e);
  }
  if (rc == CT_OK) rc = replay_step(fixed, d, 0);
  if (rc == CT_OK) rc = max_abs_diff(fixed->static_x, d->x[0], &good);
  if (rc == CT_OK) {
    printf("seed's capture, after static_input.copy_(real_input); g.replay():\n");
    printf("  max |static_input - real_input| = %.4f (the captured randn overwrote the copy)\n", bad[0]);
    printf("  sum of static_input's first row, replay 1: %.6f, replay 2: %.6f (%s)\n", first[0], first[1],
           first[0] == first[1] ? "the same numbers: the random op replays its captured Philox offset"
                                : "new numbers");
    printf("corrected capture (static_input made once, before capture_begin):\n");
    printf("  max |static_input - real_input| = %g\n", good);
  }
  ct_metrics_num(m, "seed_bug_input_diff", bad[0]);
  ct_metrics_num(m, "fixed_input_diff", good);
  graphed_free(&gr);
  return rc;
}
/*md output seed bug*/

/*md
::: zh
## 捕获期间不允许做的事

TODO
:::
::: en
## What capture forbids

TODO
:::
*/
// Each probe starts a capture on the side stream (except the first), does
// one forbidden thing on top of some captured work, and returns the status
// of the forbidden call. The graph under test is never touched.
static int probe_default_stream(graphed *gr, ct_cuda_graph *g) {
  return ct_cuda_graph_capture_begin(g, ct_default_stream(ct_module_device(gr->model)), NULL);
}
static int probe_item(graphed *gr, ct_cuda_graph *g) { // print(loss.item()) inside the step
  (void)g;
  ct_tensor *y = ct_mul_scalar(gr->static_x, 2.0), *sum = y ? ct_sum(y) : NULL;
  double v = 0;
  int rc = sum ? ct_item(sum, &v) : -1;
  ct_free(y), ct_free(sum);
  return rc;
}
static int probe_synchronize(graphed *gr, ct_cuda_graph *g) { // torch.cuda.synchronize() inside the step
  (void)g;
  return ct_stream_synchronize(gr->side);
}
static int probe_legacy_stream(graphed *gr, ct_cuda_graph *g) { // an op on the default stream
  (void)g;
  ct_device dev = ct_module_device(gr->model);
  int rc = ct_set_stream(ct_default_stream(dev));
  ct_tensor *y = rc == CT_OK ? ct_add(gr->static_x, gr->static_x) : NULL;
  rc = y ? CT_OK : (int)ct_last_status();
  ct_free(y);
  (void)ct_set_stream(gr->side);
  return rc;
}
static int probe_other_pool(graphed *gr, ct_cuda_graph *g) { // memory the graph does not own
  (void)g;
  ct_device dev = ct_module_device(gr->model);
  ct_mempool *pool = ct_mempool_create(dev);
  ct_block *b = pool ? ct_block_alloc(dev, 4096, NULL, pool) : NULL;
  int rc = b ? CT_OK : (int)ct_last_status();
  ct_block_free(b);
  ct_mempool_destroy(pool);
  return rc;
}
static int probe_adam(graphed *gr, ct_cuda_graph *g) { // an optimizer that is not capturable
  (void)g;
  int n = 0;
  ct_param **p = ct_module_parameters(gr->model, &n);
  ct_optimizer *adam = ct_optim_adam(p, n, ct_adam_defaults());
  int rc = adam ? ct_optimizer_step(adam) : -1;
  ct_optimizer_free(adam);
  return rc;
}

typedef struct probe {
  const char *what;
  int (*run)(graphed *gr, ct_cuda_graph *g);
  bool in_capture; // the probe runs inside a capture it starts
} probe;

static const probe probes[] = {
    {"capture on the default stream", probe_default_stream, false},
    {"loss.item() inside the capture", probe_item, true},
    {"synchronize inside the capture", probe_synchronize, true},
    {"an op on the legacy default stream", probe_legacy_stream, true},
    {"a block from another pool", probe_other_pool, true},
    {"Adam's step inside the capture", probe_adam, true},
};

// Runs one probe; prints the error it caught and what capture_end said.
static int run_probe(graphed *gr, const probe *p, int *caught) {
  ct_cuda_graph *g = ct_cuda_graph_new();
  if (!g) return -1;
  int rc = p->in_capture ? ct_cuda_graph_capture_begin(g, gr->side, NULL) : CT_OK;
  ct_tensor *work = rc == CT_OK && p->in_capture ? ct_mul_scalar(gr->static_x, 3.0) : NULL; // captured work
  if (rc == CT_OK && p->run(gr, g) != CT_OK) {
    printf("%s\n  caught: %s\n", p->what, ct_last_error());
    *caught += ct_last_status() == CT_ERR_CAPTURE;
    if (p->in_capture && ct_cuda_graph_capture_end(g) != CT_OK) printf("  capture_end: %s\n", ct_last_error());
  } else if (rc == CT_OK) {
    printf("%s\n  NOT caught\n", p->what);
    if (p->in_capture) (void)ct_cuda_graph_capture_end(g);
  }
  ct_free(work);
  ct_cuda_graph_free(g);
  return rc;
}

static int show_forbidden(graphed *gr, const data *d, ct_metrics *m) {
  ct_cli_section("forbidden");
  int caught = 0, n = (int)(sizeof probes / sizeof probes[0]);
  for (int i = 0; i < n; ++i)
    if (run_probe(gr, &probes[i], &caught) != CT_OK) return -1;
  // Shapes are part of the capture: a short last batch does not fit.
  ct_tensor *half = ct_narrow(d->x[1], 0, 0, ct_size(d->x[1], 0) / 2);
  if (!half) return -1;
  int rc = ct_copy_(gr->static_x, half, false);
  ct_free(half);
  printf("a batch of another size into static_input\n  caught: %s\n", rc ? ct_last_error() : "NOT caught");
  int shape_caught = rc != CT_OK;
  // The graph under test is intact and the runtime usable: one more replay.
  double loss = NAN;
  rc = replay_step(gr, d, 1);
  if (rc == CT_OK) rc = ct_item(gr->static_loss, &loss);
  printf("after all of them: eager ops run, and the captured step replays (loss %.6f)\n", loss);
  ct_metrics_num(m, "forbidden_probes", n);
  ct_metrics_num(m, "forbidden_caught", caught);
  ct_metrics_num(m, "shape_caught", shape_caught);
  return rc;
}
/*md output forbidden*/

/*md
::: zh
## 私有内存池

TODO
:::
::: en
## The private pool

TODO
:::
*/
// A second graph of the same step, to watch its pool come and go.
static int show_pool(const settings *s, const data *d, ct_device dev, ct_metrics *m) {
  ct_cli_section("pool");
  graphed gr;
  ct_module *model = model_on(s, s->width, dev);
  if (!model || graphed_init(&gr, model, s, dev) != CT_OK || warm_up(&gr, d, s->warmup, NULL) != CT_OK)
    return -1;
  if (sync_device(dev) != CT_OK) return -1;
  size_t r0 = ct_memory_reserved(dev);
  int rc = capture(&gr);
  if (rc == CT_OK) rc = sync_device(dev);
  size_t r1 = ct_memory_reserved(dev);
  ct_tensor *eager = rc == CT_OK ? ct_empty(CT_SHAPE(1), CT_F32, dev) : NULL; // an eager request now
  bool apart = eager && ct_data_ptr(eager) != ct_data_ptr(gr.static_loss);
  ct_free(eager);
  ct_cuda_graph_free(gr.g);
  gr.g = NULL;
  size_t r2 = ct_memory_reserved(dev);
  // The tensors the captured step made: the loss, the grads, the
  // activations the model kept for backward. They go with the model.
  graphed_free(&gr);
  size_t r3 = ct_memory_reserved(dev);
  if (rc == CT_OK) {
    printf("reserved before capture:                          %8.0f KiB\n", kib(r0));
    printf("after capture (the graph's private pool):         %8.0f KiB\n", kib(r1));
    printf("graph freed, the tensors it made still alive:     %8.0f KiB\n", kib(r2));
    printf("those freed too (loss, grads, saved activations): %8.0f KiB\n", kib(r3));
    printf("an eager tensor made after capture lies outside the pool: %s\n", apart ? "yes" : "NO");
  }
  ct_metrics_num(m, "pool_kib", kib(r1) - kib(r0));
  ct_metrics_num(m, "pool_kib_after_free", kib(r3) - kib(r0));
  return rc;
}
/*md output pool*/

/*md
::: zh
## 计时：逐个调用与重放

TODO
:::
::: en
## Timing: eager against replay

TODO
:::
*/
// Seconds per step, the median of `reps` timings of `n` steps each; eager
// steps (copy_ into the static tensors, train_step) when eager, else replays.
static int time_steps(graphed *gr, const data *d, bool eager, int n, int reps, double *out) {
  ct_device dev = ct_module_device(gr->model);
  double t[16];
  int rc = ct_set_stream(gr->side);
  for (int r = 0; rc == CT_OK && r < reps && r < 16; ++r) {
    rc = sync_device(dev);
    double t0 = now_seconds();
    for (int i = 0; rc == CT_OK && i < n; ++i) {
      if (!eager) {
        rc = replay_step(gr, d, i);
        continue;
      }
      rc = ct_copy_(gr->static_x, d->x[i % NBATCH], false);
      if (rc == CT_OK) rc = ct_copy_(gr->static_y, d->y[i % NBATCH], false);
      ct_tensor *l = rc == CT_OK ? train_step(gr->model, gr->opt, gr->static_x, gr->static_y) : NULL;
      if (!l) rc = -1;
      ct_free(l);
    }
    if (rc == CT_OK) rc = sync_device(dev);
    t[r] = (now_seconds() - t0) / n;
  }
  if (ct_set_stream(ct_default_stream(dev)) != CT_OK) rc = -1;
  *out = rc == CT_OK ? median(t, reps < 16 ? reps : 16) : NAN;
  return rc;
}

static int show_timing(const settings *s, ct_device dev, bool quick, ct_metrics *m) {
  ct_cli_section("timing");
  static const int64_t cpu_widths[] = {16, 64, 256, 1024}, cpu_quick[] = {16, 128};
  static const int64_t gpu_widths[] = {16, 64, 256, 1024, 4096, 8192}, gpu_quick[] = {16, 256, 2048};
  const int64_t *w = dev.type == CT_CUDA ? (quick ? gpu_quick : gpu_widths) : (quick ? cpu_quick : cpu_widths);
  int nw = dev.type == CT_CUDA ? (quick ? 3 : 6) : (quick ? 2 : 4);
  int n = quick ? 4 : 20, reps = quick ? 3 : 7;
  double widths[MAX_WIDTHS], params[MAX_WIDTHS], kernels[MAX_WIDTHS], e_ms[MAX_WIDTHS], r_ms[MAX_WIDTHS],
      ratio[MAX_WIDTHS];
  printf("%6s %10s %8s %11s %11s %8s\n", "width", "params", "kernels", "eager ms", "replay ms", "speedup");
  int rc = CT_OK;
  for (int i = 0; rc == CT_OK && i < nw; ++i) {
    data d;
    graphed gr;
    ct_module *model = model_on(s, w[i], dev);
    if (!model || make_data(dev, s->batch, &d) != CT_OK || graphed_init(&gr, model, s, dev) != CT_OK) return -1;
    rc = warm_up(&gr, &d, s->warmup, NULL);
    if (rc == CT_OK) rc = time_steps(&gr, &d, true, n, reps, &e_ms[i]);
    if (rc == CT_OK) rc = capture(&gr);
    if (rc == CT_OK) rc = time_steps(&gr, &d, false, n, reps, &r_ms[i]);
    widths[i] = (double)w[i];
    params[i] = (double)ct_module_num_elements(model);
    kernels[i] = (double)ct_cuda_graph_num_nodes(gr.g);
    e_ms[i] *= 1e3, r_ms[i] *= 1e3;
    ratio[i] = e_ms[i] / r_ms[i];
    if (rc == CT_OK)
      printf("%6.0f %10.0f %8.0f %11.4f %11.4f %7.2fx\n", widths[i], params[i], kernels[i], e_ms[i], r_ms[i],
             ratio[i]);
    graphed_free(&gr);
    free_data(&d);
  }
  if (rc != CT_OK) return rc;
  ct_metrics_series(m, "timing_widths", widths, nw);
  ct_metrics_series(m, "timing_params", params, nw);
  ct_metrics_series(m, "timing_kernels", kernels, nw);
  ct_metrics_series(m, "eager_ms", e_ms, nw);
  ct_metrics_series(m, "replay_ms", r_ms, nw);
  ct_metrics_series(m, "speedup", ratio, nw);
  ct_metrics_num(m, "speedup_smallest", ratio[0]);
  ct_metrics_num(m, "speedup_largest", ratio[nw - 1]);
  ct_metrics_num(m, "timing_steps", n);
  ct_metrics_num(m, "timing_reps", reps);
  return CT_OK;
}
/*md output timing*/
/*md figure steps*/

/*md
::: zh
## main

TODO
:::
::: en
## main

TODO
:::
*/
// The NBATCH batches t[i] (B, C) stacked into one (NBATCH * B, C) tensor.
static ct_tensor *stack(ct_tensor *const *t) {
  int64_t b = ct_size(t[0], 0);
  ct_tensor *all = ct_empty(CT_SHAPE(NBATCH * b, ct_size(t[0], 1)), CT_F32, ct_device_of(t[0]));
  for (int i = 0; all && i < NBATCH; ++i) {
    ct_tensor *part = ct_narrow(all, 0, i * b, b);
    int rc = part ? ct_copy_(part, t[i], false) : -1;
    ct_free(part);
    if (rc != CT_OK) {
      ct_free(all);
      all = NULL;
    }
  }
  return all;
}

// --save-init: the model's start and the data, for the PyTorch twin.
static int save_init(const char *path, ct_module *model, const data *d) {
  int n = 0;
  ct_named_tensor *st = ct_module_state_dict(model, "", &n);
  ct_named_tensor *all = st ? calloc((size_t)n + 2, sizeof *all) : NULL;
  ct_tensor *x = all ? stack(d->x) : NULL, *y = x ? stack(d->y) : NULL;
  int rc = y ? CT_OK : -1;
  if (rc == CT_OK) {
    memcpy(all, st, sizeof *all * (size_t)n);
    snprintf(all[n].name, sizeof all[n].name, "data.x");
    snprintf(all[n + 1].name, sizeof all[n + 1].name, "data.y");
    all[n].tensor = x, all[n + 1].tensor = y;
    rc = ct_save_safetensors(path, all, n + 2, NULL);
  }
  ct_free(x), ct_free(y);
  free(all);
  ct_named_tensors_free(st, n);
  return rc;
}

int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch10", .summary = "Chapter 10: CUDA graphs, a whole training step captured and replayed."};
  settings s = {.width = 64, .depth = 4, .batch = 32, .steps = 100, .warmup = 3, .lr = 0.05, .momentum = 0.9};
  ct_cli_opt opts[] = {
      {"width", CT_OPT_INT, &s.width, "hidden width of the MLP that is trained and captured"},
      {"depth", CT_OPT_INT, &s.depth, "hidden layers (1..16)"},
      {"batch", CT_OPT_INT, &s.batch, "rows per batch (the seed's 32)"},
      {"steps", CT_OPT_INT, &s.steps, "replayed training steps (--quick: 20)"},
      {"warmup", CT_OPT_INT, &s.warmup, "eager warm-up steps on the side stream before capture (1..16)"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "SGD learning rate"},
      {"momentum", CT_OPT_DOUBLE, &s.momentum, "SGD momentum"},
      {"save", CT_OPT_OUTPUT, &s.save, "write the replay-trained state_dict to FILE"},
      {"save-init", CT_OPT_OUTPUT, &s.save_init, "write the initial state_dict and the data to FILE (for the twin)"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  /*md hide*/
  if (s.width < 1 || s.depth < 1 || s.depth > 16 || s.batch < 2 || s.steps < 1 || s.warmup < 1 ||
      s.warmup > 16 || !(s.lr > 0) || !(s.momentum >= 0)) {
    fprintf(stderr, "ch10: --width and --steps must be >= 1, --depth and --warmup in 1..16, --batch >= 2, "
                    "--lr > 0, --momentum >= 0\nusage: ch10 [--help] ...\n");
    return 2;
  }
  if (cli.quick && s.steps == 100) s.steps = 20;
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  ct_device dev = cli.device;
  ct_metrics *m = ct_metrics_open(cli.metrics_path);
  if (!m) ct_cli_die(&cli);
  ct_metrics_num(m, "quick", cli.quick);
  ct_metrics_str(m, "model", "MLP");
  data d;
  ct_module *model = model_on(&s, s.width, dev), *eager = model_on(&s, s.width, dev);
  if (!model || !eager || make_data(dev, s.batch, &d) != CT_OK || copy_weights(model, eager) != CT_OK)
    ct_cli_die(&cli);
  if (s.save_init && save_init(s.save_init, model, &d) != CT_OK) ct_cli_die(&cli);
  graphed gr;
  if (graphed_init(&gr, model, &s, dev) != CT_OK) ct_cli_die(&cli);

  show_model(&s, model, m);
  if (show_warm_up(&gr, &d, &s, m) != CT_OK) ct_cli_die(&cli);
  if (show_capture(&gr, m) != CT_OK) ct_cli_die(&cli);
  if (show_replay(&gr, eager, &d, &s, m) != CT_OK) ct_cli_die(&cli);
  if (s.save && ct_module_save(gr.model, s.save) != CT_OK) ct_cli_die(&cli);
  if (show_seed_bug(&s, &gr, &d, m) != CT_OK) ct_cli_die(&cli);
  if (show_forbidden(&gr, &d, m) != CT_OK) ct_cli_die(&cli);
  if (show_pool(&s, &d, dev, m) != CT_OK) ct_cli_die(&cli);
  graphed_free(&gr);
  ct_module_free(eager);
  free_data(&d);
  if (show_timing(&s, dev, cli.quick, m) != CT_OK) ct_cli_die(&cli);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. TODO
2. TODO
3. TODO
:::
::: en
## Exercises

1. TODO
2. TODO
3. TODO
:::
*/
