// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 5 章　线性回归：把模型、数据和损失搬到设备上训练

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)，例如 Byolio《用GPU加速PyTorch模型训练》）把“用 GPU 训练”归结为三次搬运：把模型搬到 GPU 上（`model.to('cuda')`），把每一批数据和标签搬上去（`imgs.to('cuda')`），把损失函数也搬上去（`loss_fn.to('cuda')`）。搬完之后，训练循环本身一个字都不用改。

本章在能训练的最小模型上做这三次搬运：线性回归。它的好处是答案事先知道：数据是我们用选定的 $w$ 和 $b$ 造出来的；在这份数据上可能达到的最好结果，即最小二乘解，也能直接算出来。所以训练打印出的每个数字都可以核对。

本章一步一步地做：

1. 在 CPU 上造数据 $y = Xw^\top + b + \varepsilon$；
2. 用 float64 算出最小二乘的闭式解，作为标准答案；
3. 三次搬运：模型、数据、损失；
4. 手工推导均方误差（MSE）的梯度，与运行时的反向传播算出的梯度逐项核对（本章的练习区）；
5. 训练循环：前向、损失、反向、SGD 更新；
6. 学到的参数与真值、闭式解对比；
7. 测量每秒训练步数，与 CPU、与 PyTorch 比较。

构建并运行：

```sh
cmake --preset default && cd build
ninja ch05_linear_regression && ./ch05
./ch05 --device cpu --epochs 20 --lr 0.1 --batch-size 64
```
:::
::: en
# Chapter 5. Linear regression: move the model, the data and the loss to the device, and train

The seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); among them Byolio's “Accelerating PyTorch training with a GPU”) boil GPU training down to three moves: put the model on the GPU (`model.to('cuda')`), put each batch of data and labels there (`imgs.to('cuda')`), and put the loss function there (`loss_fn.to('cuda')`). After the moves the training loop itself does not change by a single character.

This chapter makes the three moves on the smallest model there is to train: linear regression. Its virtue is that the answer is known in advance: we make the data ourselves from a chosen $w$ and $b$, and the best fit this data allows, the least-squares solution, can be computed directly. So every number the training prints can be checked.

Step by step, the chapter

1. makes the data $y = Xw^\top + b + \varepsilon$ on the CPU;
2. computes the closed-form least-squares solution in float64, the answer to compare against;
3. makes the three moves: model, data, loss;
4. derives the gradient of the mean squared error (MSE) by hand and checks it, entry by entry, against what the runtime's backward pass computes (the chapter's lab);
5. runs the training loop: forward, loss, backward, SGD step;
6. compares the learned parameters with the truth and with the closed form;
7. measures training steps per second, against the CPU and against PyTorch.

Build and run:

```sh
cmake --preset default && cd build
ninja ch05_linear_regression && ./ch05
./ch05 --device cpu --epochs 20 --lr 0.1 --batch-size 64
```
:::
*/

/*md hide*/
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ct.h"

int openblas_get_num_threads(void); // OpenBLAS's own query (also in its cblas.h)

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define F 4             // features
#define TWIN_STEPS 20   // per-step losses kept for the comparison with PyTorch
#define MAX_STEP_LOG 4096 // per-step losses of the first epoch, for the figure
#define MAX_EPOCHS 1000
#define GRAD_TOL 1e-5   // float32: the same sums in another order differ by ~1e-7

// The chapter's run-time failures end it with the runtime's message (exit 1).
static const ct_cli *g_cli;
static ct_tensor *must(ct_tensor *t) {
  if (!t) ct_cli_die(g_cli);
  return t;
}
static void ok(int status) {
  if (status != CT_OK) ct_cli_die(g_cli);
}
static void *must_alloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "%s: out of host memory (%zu bytes)\n", g_cli->program, bytes);
    exit(1);
  }
  return p;
}

// The values of a tensor (any device, any float dtype) as doubles, in a new
// array of ct_numel(t) entries in row-major order. The caller free()s it.
static double *host_values(const ct_tensor *t) {
  ct_tensor *c = must(ct_to(t, ct_device_cpu(), CT_F64, false));
  size_t n = (size_t)ct_numel(c);
  double *v = must_alloc(n * sizeof *v);
  ok(ct_copy_to_host(c, v, n * sizeof *v));
  ct_free(c);
  return v;
}

// max |a - b| / max |b| over the elements of two tensors of the same shape.
static double max_rel_diff(const ct_tensor *a, const ct_tensor *b) {
  double *va = host_values(a), *vb = host_values(b);
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < ct_numel(b); i++) {
    diff = fmax(diff, fabs(va[i] - vb[i]));
    scale = fmax(scale, fabs(vb[i]));
  }
  free(va);
  free(vb);
  return diff / (scale > 0 ? scale : 1);
}

static const char *dev_str(ct_device d) {
  static char buf[4][CT_DEVICE_STR_MAX];
  static int k;
  k = (k + 1) % 4;
  return ct_device_str(d, buf[k]);
}

// The hyperparameters; ch05_pytorch.py has the same flags and defaults.
typedef struct hyper {
  long samples, batch_size, epochs;
  double lr;
} hyper;

// What one training run measured.
typedef struct train_log {
  double epoch_loss[MAX_EPOCHS]; // mean of the epoch's batch losses
  double epoch_ms[MAX_EPOCHS];
  double step_loss[MAX_STEP_LOG]; // the losses of the first epoch's steps (at least
  int n_step_loss;                // TWIN_STEPS of them), read one by one
  long steps_per_epoch;
  double ms_per_epoch; // the median over the epochs after the first (the warm-up)
  double steps_per_s;  // steps_per_epoch / ms_per_epoch
} train_log;

// Everything one run of the chapter holds.
typedef struct run {
  ct_cli *cli;
  ct_metrics *m;
  hyper h;
  ct_device dev;
  const char *save_init, *load_init, *save;
  ct_tensor *x, *y;           // the data on the CPU: x (N, F), y (N, 1), float32
  ct_tensor *xd, *yd;         // the same on the device
  ct_named_tensor init[2];    // the initial "weight" (1, F) and "bias" (1,), CPU
  ct_module *model;           // Linear(F, 1) on the device
  double theta[F + 1];        // the closed form: w, then b
  double closed_mse;
  train_log log;
} run;

static void show_data(run *r);
static void show_closed_form(run *r);
static void show_to_device(run *r);
static void show_gradient_check(run *r);
static void show_train(run *r);
static void show_parameters(run *r);
static void show_speed(run *r);
static const double TRUE_W[F] = {2.0, -3.4, 1.7, 0.5};
static const double TRUE_B = 4.2;
static const double NOISE_STD = 0.01;
/*md show*/

/*md
::: zh
## 问题和参数

要学的函数是 $\hat y = x w^\top + b$：每个样本 $x$ 是 4 个特征组成的行向量，$w$ 是 1×4 的权重，$b$ 是偏置。数据按真值 $w = (2, -3.4, 1.7, 0.5)$、$b = 4.2$ 生成，再加上标准差 0.01 的高斯噪声 $\varepsilon$。有了噪声，数据点就不再恰好落在一个超平面上，学到的参数和真值之间总会差一点；闭式解告诉我们这份数据上最少会差多少。

超参数都是命令行参数，PyTorch 孪生程序（`ch05_pytorch.py`）接受同样的参数，默认值也一样：

| 参数 | 默认值（`--quick`） | 含义 |
|---|---|---|
| `--samples` | 8192（1024） | 样本数 $N$ |
| `--batch-size` | 32 | 每一步用的样本数 $B$ |
| `--epochs` | 10（3） | 把全部数据过几遍 |
| `--lr` | 0.05 | 学习率 $\eta$ |
| `--save-init FILE` | | 把数据和初始权重写成 safetensors 文件 |
| `--load-init FILE` | | 从这样的文件读入数据和初始权重，不再随机生成 |
| `--save FILE` | | 训练后把模型的 `state_dict` 存成 safetensors |

`--save-init` 和 `--load-init` 是为了和 PyTorch 严格对比：两个程序从同一份数据、同一组初始权重出发，逐步比较损失（见“训练循环”一节）。参数超出范围（比如 `--epochs 0`）和写错参数一样，以退出码 2 结束。
:::
::: en
## The problem and the knobs

The function to learn is $\hat y = x w^\top + b$: each sample $x$ is a row of 4 features, $w$ is a 1×4 weight and $b$ a bias. The data is generated from the true $w = (2, -3.4, 1.7, 0.5)$ and $b = 4.2$ plus Gaussian noise $\varepsilon$ of standard deviation 0.01. The noise lifts the points off a flat hyperplane, so the learned parameters always miss the true ones by a little; the closed-form solution tells us the least that miss can be on this data.

The hyperparameters are flags, and the PyTorch twin (`ch05_pytorch.py`) takes the same flags with the same defaults:

| flag | default (`--quick`) | meaning |
|---|---|---|
| `--samples` | 8192 (1024) | number of samples $N$ |
| `--batch-size` | 32 | samples per step $B$ |
| `--epochs` | 10 (3) | passes over the data |
| `--lr` | 0.05 | learning rate $\eta$ |
| `--save-init FILE` | | write the data and the initial weights as a safetensors file |
| `--load-init FILE` | | read the data and the initial weights from such a file instead of drawing them |
| `--save FILE` | | after training, save the model's `state_dict` as safetensors |

`--save-init` and `--load-init` make an exact comparison with PyTorch possible: both programs start from the same data and the same initial weights, and their losses are compared step by step (see the training loop). A value out of range (such as `--epochs 0`) is a usage error like a misspelt flag: exit code 2.
:::
*/
int main(int argc, char **argv) {
  static run r; // static: the training logs are a few tens of KiB
  r.h = (hyper){.samples = LONG_MIN, .batch_size = 32, .epochs = LONG_MIN, .lr = 0.05}; // LONG_MIN: by --quick
  ct_cli_opt opts[] = {
      {"samples", CT_OPT_INT, &r.h.samples, "number of samples N (default 8192; --quick 1024)"},
      {"batch-size", CT_OPT_INT, &r.h.batch_size, "samples per SGD step (default 32)"},
      {"epochs", CT_OPT_INT, &r.h.epochs, "passes over the data (default 10; --quick 3)"},
      {"lr", CT_OPT_DOUBLE, &r.h.lr, "SGD learning rate (default 0.05)"},
      {"save-init", CT_OPT_OUTPUT, &r.save_init, "write the data and the initial weights (safetensors) to FILE"},
      {"load-init", CT_OPT_INPUT, &r.load_init, "read the data and the initial weights from FILE"},
      {"save", CT_OPT_OUTPUT, &r.save, "save the trained model's state_dict (safetensors) to FILE"},
  };
  ct_cli cli = {.program = "ch05",
                .summary = "Chapter 5: linear regression trained with SGD on the device, "
                           "checked against the closed-form least-squares solution."};
  ct_cli_parse(&cli, argc, argv, opts, COUNT(opts));
  hyper *h = &r.h;
  if (h->samples == LONG_MIN) h->samples = cli.quick ? 1024 : 8192; // not given: --samples -5 is an error
  if (h->epochs == LONG_MIN) h->epochs = cli.quick ? 3 : 10;
  const char *bad = h->samples < 2 * (F + 1) || h->samples > (1L << 26) ? "--samples must be in [10, 67108864]"
                    : h->batch_size < 1                                 ? "--batch-size must be at least 1"
                    : h->epochs < 1 || h->epochs > MAX_EPOCHS           ? "--epochs must be in [1, 1000]"
                    : !(h->lr > 0) || h->lr > 10                        ? "--lr must be in (0, 10]"
                                                                        : NULL;
  if (bad) {
    fprintf(stderr, "ch05: %s\nusage: ch05 [flags]; ch05 --help lists them\n", bad);
    return 2;
  }
  ct_cli_begin(&cli); // "device: ...", and ct_manual_seed(seed)
  g_cli = r.cli = &cli;
  r.dev = cli.device;
  r.m = cli.metrics; // device, seed and quick already recorded

  show_data(&r);           // X, y and the initial weights, on the CPU
  show_closed_form(&r);    // the least-squares answer, float64
  show_to_device(&r);      // model.to(device), X.to(device), y.to(device)
  show_gradient_check(&r); // dL/dW by hand against backward
  show_train(&r);          // SGD on the device
  show_parameters(&r);     // learned against true and closed form
  show_speed(&r);          // steps/s: CPU, GPU, DataLoader

  ct_module_free(r.model);
  for (int i = 0; i < 2; i++) ct_free(r.init[i].tensor);
  ct_free(r.x);
  ct_free(r.y);
  ct_free(r.xd);
  ct_free(r.yd);
  if (ct_metrics_close(r.m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 数据

$X$ 的每个元素取自标准正态分布，$y$ 按定义算出来：

$$y = X w^\top + b + 0.01\,\varepsilon, \qquad X_{ij},\ \varepsilon_i \sim \mathcal N(0, 1).$$

三者都用 `ct_randn` 在 CPU 上生成（对应 `torch.randn`），算 $y$ 用的是普通的张量运算：`ct_mm` 做矩阵乘法，`ct_binary_scalar_out` 原地加上偏置、原地缩放噪声。数据先放在 CPU 上，是为了照原样演示搬运；实际训练中，数据通常也是从磁盘读进 CPU 内存的。

初始权重来自 `ct_nn_linear(4, 1, true)`，它按 `torch.nn.Linear` 的默认规则初始化：$W$ 和 $b$ 都取自 $U(-1/\sqrt{4}, 1/\sqrt{4})$。`ct` 的随机数生成器和 PyTorch 的不同（见 `random.h`），同一个种子在两边给出的数不一样；所以要让两个程序从同一点出发，就得把数据和初始权重写进文件（`--save-init`），让另一边读进去（`--load-init`）。文件格式是 safetensors：8 字节长度、一段 JSON 头、然后是原始字节，PyTorch 用户用 `safetensors.torch.load_file` 读它。文件里的名字 `weight`、`bias` 正是 `nn.Linear` 的 `state_dict` 里的名字。
:::
::: en
## The data

Every element of $X$ is drawn from the standard normal distribution, and $y$ follows from the definition:

$$y = X w^\top + b + 0.01\,\varepsilon, \qquad X_{ij},\ \varepsilon_i \sim \mathcal N(0, 1).$$

All three are drawn on the CPU with `ct_randn` (PyTorch's `torch.randn`), and $y$ is computed with ordinary tensor ops: `ct_mm` for the matrix product, `ct_binary_scalar_out` to add the bias and to scale the noise in place. The data starts on the CPU so that the move can be shown as it happens in practice: real data is read from disk into host memory, too.

The initial weights come from `ct_nn_linear(4, 1, true)`, which follows `torch.nn.Linear`'s default initialization: $W$ and $b$ drawn from $U(-1/\sqrt{4}, 1/\sqrt{4})$. ct's random generator is not PyTorch's (see `random.h`), so one seed gives different numbers on each side; to start both programs from the same point, one writes the data and the initial weights to a file (`--save-init`) and the other reads it (`--load-init`). The file is safetensors: an 8-byte length, a JSON header, then the raw bytes, the format PyTorch users read with `safetensors.torch.load_file`. Its names `weight` and `bias` are exactly the keys of `nn.Linear`'s `state_dict`.
:::
*/
// x (n, F) ~ N(0, 1); y (n, 1) = x w^T + b + noise_std * N(0, 1); on the CPU.
static void make_data(long n, const double w[F], double b, double noise_std, ct_tensor **x, ct_tensor **y) {
  const ct_device cpu = ct_device_cpu();
  float wf[F];
  for (int j = 0; j < F; j++) wf[j] = (float)w[j];
  ct_tensor *wt = must(ct_from_host(wf, CT_SHAPE(F, 1), CT_F32, cpu)); // w^T (F, 1)
  *x = must(ct_randn(CT_SHAPE(n, F), CT_F32, cpu));                     // (n, F)
  ct_tensor *noise = must(ct_randn(CT_SHAPE(n, 1), CT_F32, cpu));       // (n, 1)
  ct_tensor *xw = must(ct_mm(*x, wt));                                  // (n, 1)
  ok(ct_binary_scalar_out(CT_OP_ADD, xw, xw, b));                       // + b, in place
  ok(ct_binary_scalar_out(CT_OP_MUL, noise, noise, noise_std));         // * 0.01, in place
  *y = must(ct_add(xw, noise));
  ct_free(wt);
  ct_free(noise);
  ct_free(xw);
}
/*md twin data*/

// The initial parameters of a fresh Linear(F, 1): torch.nn.Linear's init,
// from the CPU generator. Copied out, so that every model of this chapter
// (the trained one, the probe of the gradient check, the speed runs) starts
// from the same numbers.
static void initial_weights(ct_named_tensor init[2]) {
  ct_module *fresh = ct_nn_linear(F, 1, true);
  if (!fresh) ct_cli_die(g_cli);
  int n;
  ct_param **p = ct_module_parameters(fresh, &n); // "weight" (1, F), "bias" (1,)
  for (int i = 0; i < 2; i++) {
    snprintf(init[i].name, sizeof init[i].name, "%s", p[i]->name);
    init[i].tensor = must(ct_clone(p[i]->value));
  }
  ct_module_free(fresh);
}

// A Linear(F, 1) holding the given state, on `dev`.
static ct_module *model_from(const ct_named_tensor init[2], ct_device dev) {
  ct_module *model = ct_nn_linear(F, 1, true);
  if (!model) ct_cli_die(g_cli);
  ok(ct_module_load_state(model, init, 2, true)); // model.load_state_dict(init)
  ok(ct_module_to(model, dev));
  return model;
}

/*md hide*/
static ct_tensor *find_entry(ct_named_tensor *e, int n, const char *name, const char *path) {
  for (int i = 0; i < n; i++)
    if (!strcmp(e[i].name, name)) return e[i].tensor;
  fprintf(stderr, "ch05: --load-init %s: no tensor named \"%s\" in the file\n", path, name);
  exit(1);
}

static void expect_shape(const ct_tensor *t, ct_shape want, const char *name, const char *path) {
  if (ct_shape_eq(ct_shape_of(t), want)) return;
  char a[64], b[64];
  fprintf(stderr, "ch05: --load-init %s: \"%s\" has shape %s, expected %s\n", path, name,
          ct_shape_str(ct_shape_of(t), a, sizeof a), ct_shape_str(want, b, sizeof b));
  exit(1);
}

// t: float32 on the CPU. NaN or inf in the data would only surface later as
// a singular closed form or a NaN loss: refuse it here, naming the element.
static void expect_finite(const ct_tensor *t, const char *name, const char *path) {
  const float *v = ct_data_ptr(t);
  for (int64_t i = 0; i < ct_numel(t); i++)
    if (!isfinite(v[i])) {
      fprintf(stderr, "ch05: --load-init %s: \"%s\" holds %g at element %lld: the data and the weights must be "
              "finite numbers\n", path, name, (double)v[i], (long long)i);
      exit(1);
    }
}

// x, y, weight and bias from a safetensors file written by --save-init (this
// program's or the twin's); converted to float32 on the CPU.
static void load_init(const char *path, ct_tensor **x, ct_tensor **y, ct_named_tensor init[2]) {
  ct_named_tensor *e = NULL;
  int n = 0;
  ok(ct_load_safetensors(path, ct_device_cpu(), &e, &n));
  ct_tensor *tx = find_entry(e, n, "x", path), *ty = find_entry(e, n, "y", path);
  int64_t samples = ct_ndim(tx) == 2 ? ct_size(tx, 0) : -1;
  expect_shape(tx, CT_SHAPE(samples, F), "x", path);
  expect_shape(ty, CT_SHAPE(samples, 1), "y", path);
  if (samples < 2 * (F + 1) || samples > (1L << 26)) {
    fprintf(stderr, "ch05: --load-init %s: %lld samples, expected 10 to 67108864\n", path, (long long)samples);
    exit(1);
  }
  *x = must(ct_to_dtype(tx, CT_F32));
  *y = must(ct_to_dtype(ty, CT_F32));
  expect_finite(*x, "x", path);
  expect_finite(*y, "y", path);
  const char *names[2] = {"weight", "bias"};
  const ct_shape shapes[2] = {CT_SHAPE(1, F), CT_SHAPE(1)};
  for (int i = 0; i < 2; i++) {
    ct_tensor *t = find_entry(e, n, names[i], path);
    expect_shape(t, shapes[i], names[i], path);
    snprintf(init[i].name, sizeof init[i].name, "%s", names[i]);
    init[i].tensor = must(ct_to_dtype(t, CT_F32));
    expect_finite(init[i].tensor, names[i], path);
  }
  ct_named_tensors_free(e, n);
}

// The data, the initial weights and the true parameters, as safetensors.
static void save_init(const char *path, const ct_tensor *x, const ct_tensor *y, const ct_named_tensor init[2]) {
  float tw[F], tb = (float)TRUE_B;
  for (int j = 0; j < F; j++) tw[j] = (float)TRUE_W[j];
  ct_named_tensor e[6] = {{"x", (ct_tensor *)x}, {"y", (ct_tensor *)y}, init[0], init[1]};
  snprintf(e[4].name, sizeof e[4].name, "true_weight");
  e[4].tensor = must(ct_from_host(tw, CT_SHAPE(1, F), CT_F32, ct_device_cpu()));
  snprintf(e[5].name, sizeof e[5].name, "true_bias");
  e[5].tensor = must(ct_from_host(&tb, CT_SHAPE(1), CT_F32, ct_device_cpu()));
  const char *meta[] = {"written_by", "ch05 --save-init", NULL};
  ok(ct_save_safetensors(path, e, 6, meta));
  ct_free(e[4].tensor);
  ct_free(e[5].tensor);
}
/*md show*/

static void show_data(run *r) {
  if (r->load_init) {
    load_init(r->load_init, &r->x, &r->y, r->init);
    r->h.samples = ct_size(r->x, 0);
  } else {
    make_data(r->h.samples, TRUE_W, TRUE_B, NOISE_STD, &r->x, &r->y);
    initial_weights(r->init);
  }
  if (r->h.batch_size > r->h.samples) r->h.batch_size = r->h.samples;
  if (r->save_init) save_init(r->save_init, r->x, r->y, r->init);

  ct_cli_section("data");
  printf("y = X w^T + b + noise: %ld samples, %d features, noise std %g%s\n", r->h.samples, F, NOISE_STD,
         r->load_init ? " (read from --load-init)" : "");
  printf("true w = [%g, %g, %g, %g], b = %g\n", TRUE_W[0], TRUE_W[1], TRUE_W[2], TRUE_W[3], TRUE_B);
  ct_tensor *x3 = must(ct_narrow(r->x, 0, 0, 3)), *y3 = must(ct_narrow(r->y, 0, 0, 3)); // X[:3], y[:3]
  printf("X[:3] = ");
  ok(ct_print(stdout, x3));
  printf("y[:3] = ");
  ok(ct_print(stdout, y3));
  printf("initial weight = ");
  ok(ct_print(stdout, r->init[0].tensor));
  printf("initial bias = ");
  ok(ct_print(stdout, r->init[1].tensor));
  if (r->save_init) printf("wrote X, y and the initial weights to %s\n", r->save_init);
  ct_free(x3);
  ct_free(y3);

  ct_metrics *m = r->m;
  ct_metrics_num(m, "samples", (double)r->h.samples);
  ct_metrics_num(m, "features", F);
  ct_metrics_num(m, "batch_size", (double)r->h.batch_size);
  ct_metrics_num(m, "epochs", (double)r->h.epochs);
  ct_metrics_num(m, "lr", r->h.lr);
  ct_metrics_series(m, "true_w", TRUE_W, F);
  ct_metrics_num(m, "true_b", TRUE_B);
}
/*md output data*/

/*md
::: zh
## 标准答案：最小二乘的闭式解

在训练之前，先把答案算出来。给 $X$ 添一列 1，记作 $A = [X\ \mathbf 1]$（$N \times 5$），把参数合成一个向量 $\theta = (w_1, \dots, w_4, b)$。使 $\lVert A\theta - y \rVert^2$ 最小的 $\theta$ 满足**正规方程**：

$$A^\top A\, \theta = A^\top y.$$

$A^\top A$ 只有 5×5，对称正定（只要样本足够多、各不相同），所以用 Cholesky 分解 $A^\top A = L L^\top$ 解它：先解 $L z = A^\top y$（前代），再解 $L^\top \theta = z$（回代）。下面的函数用二十来行手写完成。

为什么用 float64：构造 $A^\top A$ 会把问题的条件数平方，float32 的 7 位有效数字可能不够；本章的 $X$ 各列独立、条件很好，但参考答案应当比被检验的东西精确得多。遇到病态问题，正规方程不是好办法：`numpy.linalg.lstsq`、`torch.linalg.lstsq` 和 LAPACK 的 `dgels` 用 QR 或 SVD 分解 $A$ 本身，不去平方条件数。本章的测试正是用 `numpy.linalg.lstsq` 独立地再算一遍，和这里的结果比较。

闭式解的 MSE 是这份数据上任何 $w, b$ 能达到的最小值，它接近噪声的方差 $0.01^2 = 10^{-4}$：平均说来略小一点，因为 5 个参数也拟合掉了一点噪声（期望是 $\sigma^2 (N-5)/N$），具体一次抽样还会有百分之几的起伏。训练结束时的损失不可能比它更低。
:::
::: en
## The answer: least squares in closed form

Before training, compute the answer. Append a column of ones to $X$, $A = [X\ \mathbf 1]$ ($N \times 5$), and gather the parameters into one vector $\theta = (w_1, \dots, w_4, b)$. The $\theta$ that minimizes $\lVert A\theta - y \rVert^2$ satisfies the **normal equations**:

$$A^\top A\, \theta = A^\top y.$$

$A^\top A$ is only 5×5, symmetric and positive definite (given enough distinct samples), so a Cholesky factorization $A^\top A = L L^\top$ solves it: first $L z = A^\top y$ (forward substitution), then $L^\top \theta = z$ (back substitution). The function below does it in twenty-odd hand-written lines.

Why float64: forming $A^\top A$ squares the problem's condition number, and float32's 7 significant digits may not survive that; this chapter's $X$ has independent, well-conditioned columns, but a reference should be far more accurate than what it checks. For ill-conditioned problems the normal equations are the wrong tool: `numpy.linalg.lstsq`, `torch.linalg.lstsq` and LAPACK's `dgels` factor $A$ itself (QR or SVD) and never square the condition number. The chapter's test recomputes the answer independently with `numpy.linalg.lstsq` and compares it with this one.

The MSE of the closed form is the least any $w, b$ can reach on this data, close to the noise variance $0.01^2 = 10^{-4}$: a little below it on average, since the 5 parameters also fit away a little of the noise (its expectation is $\sigma^2 (N-5)/N$), give or take a few percent for any one draw. No training can end below it.
:::
*/
// Solves (A^T A) theta = A^T y for A = [x 1] in float64 by Cholesky; x (n, F)
// and y (n, 1) on the CPU. theta[0..F) = w, theta[F] = b; *mse the mean of
// (A theta - y)^2. False when A^T A is not positive definite.
static bool least_squares(const ct_tensor *x, const ct_tensor *y, double theta[F + 1], double *mse) {
  enum { P = F + 1 };
  const int64_t n = ct_size(x, 0);
  double *xv = host_values(x), *yv = host_values(y);
  double g[P][P] = {{0}}, rhs[P] = {0}; // lower triangle of A^T A, and A^T y
  for (int64_t i = 0; i < n; i++) {
    double a[P];
    for (int j = 0; j < F; j++) a[j] = xv[i * F + j];
    a[F] = 1.0;
    for (int j = 0; j < P; j++) {
      rhs[j] += a[j] * yv[i];
      for (int k = 0; k <= j; k++) g[j][k] += a[j] * a[k];
    }
  }
  // A^T A = L L^T: L overwrites the lower triangle of g, column by column.
  bool pd = true;
  for (int j = 0; j < P && pd; j++) {
    double d = g[j][j];
    for (int k = 0; k < j; k++) d -= g[j][k] * g[j][k];
    pd = d > 1e-12 * g[j][j];
    g[j][j] = sqrt(pd ? d : 1.0);
    for (int i = j + 1; i < P; i++) {
      double s = g[i][j];
      for (int k = 0; k < j; k++) s -= g[i][k] * g[j][k];
      g[i][j] = s / g[j][j];
    }
  }
  double z[P];
  for (int i = 0; i < P; i++) { // L z = A^T y
    double s = rhs[i];
    for (int k = 0; k < i; k++) s -= g[i][k] * z[k];
    z[i] = s / g[i][i];
  }
  for (int i = P - 1; i >= 0; i--) { // L^T theta = z
    double s = z[i];
    for (int k = i + 1; k < P; k++) s -= g[k][i] * theta[k];
    theta[i] = s / g[i][i];
  }
  double sse = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = theta[F] - yv[i];
    for (int j = 0; j < F; j++) e += xv[i * F + j] * theta[j];
    sse += e * e;
  }
  *mse = sse / (double)n;
  free(xv);
  free(yv);
  return pd;
}

static void show_closed_form(run *r) {
  ct_cli_section("closed form");
  if (!least_squares(r->x, r->y, r->theta, &r->closed_mse)) {
    fprintf(stderr, "ch05: the normal equations are singular: the samples do not determine w and b\n");
    exit(1);
  }
  const double *t = r->theta;
  printf("normal equations (A^T A) theta = A^T y, A = [X 1] (%ld x %d), float64, Cholesky\n", r->h.samples, F + 1);
  printf("closed form: w = [%.6f, %.6f, %.6f, %.6f], b = %.6f\n", t[0], t[1], t[2], t[3], t[F]);
  printf("MSE of the closed form: %.4e (the noise variance is %.4e)\n", r->closed_mse, NOISE_STD * NOISE_STD);
  ct_metrics_series(r->m, "closed_w", t, F);
  ct_metrics_num(r->m, "closed_b", t[F]);
  ct_metrics_num(r->m, "closed_mse", r->closed_mse);
}
/*md output closed form*/

/*md
::: zh
## 三次搬运

种子教程里的三行，在这里各有对应：

- `model.to(device)` 是 `ct_module_to(model, dev)`：模型的每个参数（和缓冲区，如果有的话）都换成目标设备上的副本。之后再创建优化器，它持有的是搬过去的参数（PyTorch 也建议先 `.to()` 再建优化器）。
- `X.to(device)` 是 `ct_to(x, dev, CT_F32, false)`。本章的数据只有几百 KiB，一次全部搬上去，训练时每一批都是设备上已有数据的一个视图，不再拷贝。数据放不下时，才需要像第 6 章那样每一批搬一次（本章最后测量了这样做要多花多少时间）。
- `loss_fn.to(device)`：`nn.MSELoss` 没有参数也没有缓冲区，它的 `.to()` 什么也不做；这一行仍然值得保留，因为有些损失函数带着张量（比如 `CrossEntropyLoss(weight=...)` 的类别权重），那些张量也必须和数据在同一个设备上。`ct_mse_loss` 是个普通函数，它在输入所在的设备上计算，没有东西要搬。

搬运之后，模型、数据、损失都在同一个设备上。少搬一样，第一个同时碰到两边的运算就会报错。比如忘了搬数据，Linear 的矩阵乘法会说 `ct_addmm_: expected all tensors to be on the same device, but found cpu and cuda:0`。PyTorch 2.x 在这里说的是 `Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)`：事实相同，措辞不同。
:::
::: en
## The three moves

Each of the seed tutorials' three lines has its counterpart here:

- `model.to(device)` is `ct_module_to(model, dev)`: every parameter of the model (and buffer, if it had any) is replaced by a copy on the target device. The optimizer is created after this, so that it holds the moved parameters (PyTorch's documentation gives the same advice: `.to()` first, then the optimizer).
- `X.to(device)` is `ct_to(x, dev, CT_F32, false)`. This chapter's data is a few hundred KiB, so it moves once, whole, and each batch during training is a view of data already on the device, with no copy. Only data too large for the device needs moving batch by batch, as in chapter 6 (the end of this chapter measures what that costs).
- `loss_fn.to(device)`: `nn.MSELoss` has no parameters and no buffers, so its `.to()` does nothing; the line is still worth keeping, because some losses do carry tensors (the class weights of `CrossEntropyLoss(weight=...)`, for instance), and those must live on the data's device too. `ct_mse_loss` is a plain function that computes wherever its inputs are; there is nothing to move.

After the moves the model, the data and the loss are on one device. Forget one, and the first op that meets both sides fails. Forget the data, for instance, and Linear's matrix product says `ct_addmm_: expected all tensors to be on the same device, but found cpu and cuda:0`. PyTorch 2.x says `Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)` here: the same facts, other words.
:::
*/
static void show_to_device(run *r) {
  ct_cli_section("to device");
  r->model = model_from(r->init, ct_device_cpu());
  char *desc = ct_module_str(r->model);
  printf("model: %s\n", desc ? desc : "?");
  free(desc);

  ok(ct_module_to(r->model, r->dev));                // model.to(device)
  r->xd = must(ct_to(r->x, r->dev, CT_F32, false));  // X.to(device)
  r->yd = must(ct_to(r->y, r->dev, CT_F32, false));  // y.to(device)
  // loss_fn.to(device): ct_mse_loss is a function; nothing to move.

  int np;
  ct_param **params = ct_module_parameters(r->model, &np);
  for (int i = 0; i < np; i++) {
    char s[64];
    printf("%-7s on %s, shape %s\n", params[i]->name, dev_str(ct_device_of(params[i]->value)),
           ct_shape_str(ct_shape_of(params[i]->value), s, sizeof s));
  }
  printf("X       %s -> %s, %.1f KiB\n", dev_str(ct_device_of(r->x)), dev_str(ct_device_of(r->xd)),
         ct_nbytes(r->xd) / 1024.0);
  printf("y       %s -> %s, %.1f KiB\n", dev_str(ct_device_of(r->y)), dev_str(ct_device_of(r->yd)),
         ct_nbytes(r->yd) / 1024.0);
  printf("loss    ct_mse_loss: no parameters or buffers, nothing to move\n");
}
/*md twin to_device*/
/*md output to device*/

/*md
::: zh
## 手工推导 MSE 的梯度

一批 $B$ 个样本按行排成 $X$（$B \times 4$），模型的预测是

$$\hat y = X W^\top + b,$$

其中 $W$ 是 $1 \times 4$（`nn.Linear` 的权重形状是 `(out_features, in_features)`），$\hat y$ 是 $B \times 1$。损失是误差平方的平均：

$$L = \frac{1}{B} \sum_{i=1}^{B} (\hat y_i - y_i)^2.$$

反向传播就是从损失出发，沿链式法则一路求到参数。先对每个预测求导；和式里只有第 $i$ 项含 $\hat y_i$：

$$\frac{\partial L}{\partial \hat y_i} = \frac{2}{B}\,(\hat y_i - y_i).$$

把这一列记作 $G$（$B \times 1$）。`ct_mse_loss` 在 `*grad` 里返回的就是它，也就是 PyTorch 里 `nn.MSELoss` 的反向传给下一层的东西。公式里的 $B$ 其实是“求平均的元素个数”：这里输出只有一维，它等于批大小；最后一批不满时，它就是那一批的样本数。

再对权重求导。$\hat y_i = \sum_j X_{ij} W_j + b$，所以 $\partial \hat y_i / \partial W_j = X_{ij}$，于是

$$\frac{\partial L}{\partial W_j} = \sum_{i} G_i X_{ij}, \qquad \text{即}\quad \frac{\partial L}{\partial W} = G^\top X \quad (1 \times 4).$$

偏置以系数 1 加到每一个预测上：

$$\frac{\partial L}{\partial b} = \sum_{i} G_i.$$

最后，对输入的梯度 $\partial L / \partial X = G\,W$（$B \times 4$）是 Linear 层交给它下面那一层的东西；这里下面没有层，它被丢掉。

练习区用普通的张量运算写出这三个公式：`ct_sub`、`ct_mul_scalar`、对转置视图做 `ct_mm`、`ct_sum_dim`。后面的函数拿它们和运行时的结果比较：损失函数给出的 $G$，以及 `ct_module_backward` 累加进 `weight.grad` 和 `bias.grad` 的参数梯度，也就是 PyTorch 里 `loss.backward()` 之后留在 `.grad` 里的数。它还手工走一步 SGD，$W \leftarrow W - \eta\, \partial L / \partial W$，和 `ct_optimizer_step` 的结果比较。这些都在模型的一个副本上做，所以后面的训练仍从原来的初始权重开始。

数值上两边做的是同样的运算，只是求和顺序可能不同，float32 下相对误差应在 $10^{-7}$ 量级，这里以 $10^{-5}$ 为界判断 OK。
:::
::: en
## The gradient of the MSE, by hand

For a batch of $B$ samples stacked as the rows of $X$ ($B \times 4$), the model predicts

$$\hat y = X W^\top + b,$$

with $W$ of shape $1 \times 4$ (`nn.Linear` keeps its weight as `(out_features, in_features)`) and $\hat y$ of shape $B \times 1$. The loss is the mean of the squared errors:

$$L = \frac{1}{B} \sum_{i=1}^{B} (\hat y_i - y_i)^2.$$

The backward pass applies the chain rule from the loss back to the parameters. First, the loss with respect to each prediction; only the $i$-th term of the sum contains $\hat y_i$:

$$\frac{\partial L}{\partial \hat y_i} = \frac{2}{B}\,(\hat y_i - y_i).$$

Call this column $G$ ($B \times 1$). It is what `ct_mse_loss` returns in `*grad`, and what `nn.MSELoss`'s backward hands on in PyTorch. The $B$ in the formula is really "the number of elements averaged": with one output it equals the batch size, and a last, smaller batch divides by its own size.

Next, the weights. $\hat y_i = \sum_j X_{ij} W_j + b$, so $\partial \hat y_i / \partial W_j = X_{ij}$, and

$$\frac{\partial L}{\partial W_j} = \sum_{i} G_i X_{ij}, \qquad \text{that is}\quad \frac{\partial L}{\partial W} = G^\top X \quad (1 \times 4).$$

The bias enters every prediction with coefficient 1:

$$\frac{\partial L}{\partial b} = \sum_{i} G_i.$$

Last, the gradient with respect to the input, $\partial L / \partial X = G\,W$ ($B \times 4$), is what a Linear layer hands to the layer below it; here there is none, and it is dropped.

The lab region writes the three formulas with plain tensor ops: `ct_sub`, `ct_mul_scalar`, `ct_mm` on a transposed view, `ct_sum_dim`. The function after it compares them with the runtime: the $G$ the loss returns, and the parameter gradients that `ct_module_backward` accumulates into `weight.grad` and `bias.grad`, the numbers `loss.backward()` leaves in `.grad` in PyTorch. It also takes one SGD step by hand, $W \leftarrow W - \eta\, \partial L / \partial W$, and compares it with `ct_optimizer_step`. All of it happens on a copy of the model, so the training below still starts from the original initial weights.

Both sides do the same arithmetic, possibly summing in another order; in float32 that moves the result by about $10^{-7}$ relative, and the check calls anything under $10^{-5}$ OK.
:::
*/
// dL/dpred, dL/dW and dL/db of L = mean((pred - y)^2) for pred = x W^T + b:
// x (B, F), y and pred (B, 1). New tensors in *d_pred (B, 1), *d_weight
// (1, F), *d_bias (1,). Returns CT_OK or the failing op's status.
static int mse_gradients_by_hand(const ct_tensor *x, const ct_tensor *y, const ct_tensor *pred, ct_tensor **d_pred,
                                 ct_tensor **d_weight, ct_tensor **d_bias) {
  /* LAB BEGIN: G = 2 (pred - y) / B; dL/dW = G^T x; dL/db = the sum of G over the batch | stub: return ct_fail(CT_ERR_VALUE, "mse_gradients_by_hand: not written yet"); */
  const double n = (double)ct_numel(pred); // the elements averaged: B * 1
  ct_tensor *diff = ct_sub(pred, y);       // (B, 1)
  if (!diff) return ct_last_status();
  *d_pred = ct_mul_scalar(diff, 2.0 / n); // G (B, 1)
  ct_free(diff);
  if (!*d_pred) return ct_last_status();
  ct_tensor *gt = ct_t(*d_pred);           // G^T (1, B), a view
  *d_weight = gt ? ct_mm(gt, x) : NULL;    // (1, B) @ (B, F) = (1, F)
  ct_free(gt);
  *d_bias = ct_sum_dim(*d_pred, 0, false); // (1,)
  return *d_weight && *d_bias ? CT_OK : ct_last_status();
  /* LAB END */
}

static void show_gradient_check(run *r) {
  ct_cli_section("gradient check");
  const long bs = r->h.batch_size;
  ct_module *probe = model_from(r->init, r->dev); // a copy: training starts untouched
  int np;
  ct_param **p = ct_module_parameters(probe, &np); // p[0] weight (1, F), p[1] bias (1,)
  ct_tensor *xb = must(ct_narrow(r->xd, 0, 0, bs)), *yb = must(ct_narrow(r->yd, 0, 0, bs)); // the first batch

  // The runtime's way: forward, the loss and its gradient, backward.
  ct_tensor *pred = must(ct_module_forward(probe, xb));
  ct_tensor *g_loss = NULL;
  ct_tensor *loss = must(ct_mse_loss(pred, yb, &g_loss));
  ct_tensor *g_x = must(ct_module_backward(probe, g_loss)); // fills weight.grad and bias.grad
  double lv;
  ok(ct_item(loss, &lv));

  // By hand.
  ct_tensor *g = NULL, *gw = NULL, *gb = NULL;
  ok(mse_gradients_by_hand(xb, yb, pred, &g, &gw, &gb));
  double e_pred = max_rel_diff(g, g_loss), e_w = max_rel_diff(gw, p[0]->grad), e_b = max_rel_diff(gb, p[1]->grad);

  // One SGD step by hand, W - lr dW, against the optimizer's.
  ct_tensor *w_hand = must(ct_mul_scalar(gw, -r->h.lr)), *b_hand = must(ct_mul_scalar(gb, -r->h.lr));
  ok(ct_binary_out(CT_OP_ADD, w_hand, w_hand, p[0]->value)); // W - lr dW
  ok(ct_binary_out(CT_OP_ADD, b_hand, b_hand, p[1]->value)); // b - lr db
  ct_optimizer *opt = ct_optim_sgd(p, np, ct_sgd_defaults(r->h.lr));
  if (!opt) ct_cli_die(g_cli);
  ok(ct_optimizer_step(opt));
  double e_step = fmax(max_rel_diff(w_hand, p[0]->value), max_rel_diff(b_hand, p[1]->value));

  printf("first batch: %ld samples, loss %.6f\n", bs, lv);
  printf("dL/dpred = 2 (pred - y) / B   vs ct_mse_loss's grad:  max rel diff %.1e %s\n", e_pred,
         e_pred < GRAD_TOL ? "OK" : "FAIL");
  printf("dL/dW    = G^T X              vs weight.grad:          max rel diff %.1e %s\n", e_w,
         e_w < GRAD_TOL ? "OK" : "FAIL");
  printf("dL/db    = sum of G           vs bias.grad:            max rel diff %.1e %s\n", e_b,
         e_b < GRAD_TOL ? "OK" : "FAIL");
  printf("W - lr dW, b - lr db          vs ct_optimizer_step:    max rel diff %.1e %s\n", e_step,
         e_step < GRAD_TOL ? "OK" : "FAIL");
  double e_max = fmax(fmax(e_pred, e_w), fmax(e_b, e_step));
  ct_metrics_num(r->m, "grad_check_max_rel_diff", e_max);
  ct_metrics_num(r->m, "grad_check_first_loss", lv);

  ct_optimizer_free(opt);
  ct_tensor *tensors[] = {xb, yb, pred, g_loss, loss, g_x, g, gw, gb, w_hand, b_hand};
  for (int i = 0; i < COUNT(tensors); i++) ct_free(tensors[i]);
  ct_module_free(probe);
  if (!(e_max < GRAD_TOL)) {
    fprintf(stderr, "ch05: the gradient by hand disagrees with the runtime's backward (max rel diff %.1e)\n", e_max);
    exit(1);
  }
}
/*md output gradient check*/

/*md
::: zh
## 训练循环

每一步就是所有 PyTorch 训练循环都有的那五行，一行一个调用：

| PyTorch | ct |
|---|---|
| `optimizer.zero_grad(set_to_none=True)` | `ct_optimizer_zero_grad(opt, true)` |
| `pred = model(xb)` | `pred = ct_module_forward(model, xb)` |
| `loss = loss_fn(pred, yb)` | `loss = ct_mse_loss(pred, yb, &g)` |
| `loss.backward()` | `ct_module_backward_params(model, g)` |
| `optimizer.step()` | `ct_optimizer_step(opt)` |

区别在反向传播。PyTorch 在前向时记下一张计算图，`loss.backward()` 沿图往回走；ct 不记图，损失函数直接返回它对预测的梯度 $G$，`ct_module_backward_params` 接过 $G$，按上一节的公式算出参数梯度并累加进 `.grad`。两边算的是同一组数。名字里的 `params` 说的是它只算参数的梯度：数据 `xb` 不需要梯度（PyTorch 里 `xb.requires_grad` 为 False），所以对输入的梯度 $G W$ 不算。前面检查梯度时用的 `ct_module_backward` 会多算并返回这一项。

**批。** 数据已经在设备上，所以一批就是一个视图：`ct_narrow(xd, 0, i, B)` 取第 $i$ 到 $i+B-1$ 行，不拷贝，相当于 `X[i:i+B]`。这里不打乱顺序：样本本来就是独立抽取的，顺序里没有信息。数据按类别或时间排好序时才必须打乱，比如第 6 章。不打乱还有一个好处：PyTorch 孪生程序能走完全相同的批，两边的损失可以逐步比较。

**不要在循环里读损失。** 在 GPU 上，ct 和 PyTorch 一样，只是把核函数排进流里就返回，主机不等设备算完。每一步都读一次损失（PyTorch 的 `loss.item()`，这里的 `ct_item`），主机就得每一步都停下来等设备，排队的好处全没了。所以这一轮（epoch）的损失在设备上累加：`ct_binary_out(CT_OP_ADD, loss_sum, loss_sum, loss)` 把结果原地写进一个只分配一次的 0 维张量，每轮结束才读一次。只有第一轮的损失逐步读出来，留作画图和与 PyTorch 的比较（前 20 步）；这是测速度时跳过第一轮的原因之一，另一个原因是第一轮也是预热：分配器第一次要内存、cuBLAS 第一次选算法，都发生在这一轮。每轮读到的和如果是 NaN 或 inf（学习率太大时损失会发散，比如 `--lr 10`），程序就停下并以退出码 1 结束，说出是哪一步：第一轮的损失逐步读过，能精确到步；之后的轮次只能给出那一轮的步数范围。

**计时。** 每轮前后在设备的当前流上各记录一个事件（`ct_event_record`），读完这一轮的损失之后用 `ct_event_elapsed_time` 得到两者之间的毫秒数，相当于 `torch.cuda.Event(enable_timing=True)`。在 CPU 上，事件读的是主机时钟，代码不用改。每秒步数取第一轮之后各轮用时的中位数来算：机器上别的程序偶尔拖慢一轮，中位数不受影响，平均数会。
:::
::: en
## The training loop

Each step is the five lines every PyTorch training loop has, one call each:

| PyTorch | ct |
|---|---|
| `optimizer.zero_grad(set_to_none=True)` | `ct_optimizer_zero_grad(opt, true)` |
| `pred = model(xb)` | `pred = ct_module_forward(model, xb)` |
| `loss = loss_fn(pred, yb)` | `loss = ct_mse_loss(pred, yb, &g)` |
| `loss.backward()` | `ct_module_backward_params(model, g)` |
| `optimizer.step()` | `ct_optimizer_step(opt)` |

The difference is the backward pass. PyTorch records a graph during the forward pass and `loss.backward()` walks it back; ct records nothing: the loss returns its gradient with respect to the prediction, $G$, and `ct_module_backward_params` takes $G$, computes the parameter gradients by the formulas of the previous section and adds them into `.grad`. Both compute the same numbers. The `params` in its name says that it computes the parameters' gradients only: the data `xb` needs no gradient (`xb.requires_grad` is False in PyTorch), so the gradient with respect to the input, $G W$, is not computed. `ct_module_backward`, used in the gradient check above, also computes and returns it.

**Batches.** The data is already on the device, so a batch is a view: `ct_narrow(xd, 0, i, B)` takes rows $i$ to $i+B-1$ without a copy, as `X[i:i+B]` does. The order is not shuffled: the samples were drawn independently, so their order carries no information. Shuffling is a must when data comes sorted by class or by time, as in chapter 6. Keeping the order has one more use: the PyTorch twin walks exactly the same batches, so the two losses can be compared step by step.

**Do not read the loss inside the loop.** On a GPU, ct, like PyTorch, only queues each kernel on a stream and returns; the host does not wait for the device. Reading the loss every step (PyTorch's `loss.item()`, ct's `ct_item`) makes the host stop and wait at every step, and the queue's advantage is gone. So the epoch's loss is summed on the device: `ct_binary_out(CT_OP_ADD, loss_sum, loss_sum, loss)` writes in place into a 0-d tensor allocated once, which is read once per epoch. Only the first epoch's losses are read step by step, kept for a figure and for the comparison with PyTorch (its first 20 steps); that is one reason the first epoch is left out of the speed figures, the other being that it is also the warm-up: the allocator's first requests and cuBLAS's first choice of algorithm happen in it. If the sum read at the end of an epoch is NaN or inf (the loss diverges when the learning rate is too large, e.g. `--lr 10`), the run stops with exit code 1 and names the step: exactly in the first epoch, whose losses were read one by one, and as the epoch's range of steps after it.

**Timing.** An event is recorded on the device's current stream before and after each epoch (`ct_event_record`), and once the epoch's loss has been read, `ct_event_elapsed_time` gives the milliseconds between them, like `torch.cuda.Event(enable_timing=True)`. On the CPU an event reads the host clock, and the code stays the same. Steps per second come from the median epoch after the first: another program on the machine occasionally slows an epoch down, which moves the mean but not the median.
:::
*/
// A NaN or inf sum of epoch e's losses ends the run (exit 1), naming the
// step: the first non-finite step logged, or the epoch's range of steps.
static void stop_if_diverged(double sum, long e, long steps, const train_log *log, const hyper *h) {
  int64_t first = (int64_t)e * steps + 1, last = (int64_t)(e + 1) * steps;
  for (int i = 0; e == 0 && i < log->n_step_loss; i++)
    if (!isfinite(log->step_loss[i])) {
      first = last = i + 1;
      sum = log->step_loss[i]; // that step's own loss (later sums may have turned inf into nan)
      break;
    }
  ct_cli_check_loss(g_cli, sum, first, last, h->lr);
}

// Trains `model` with SGD for h->epochs epochs on batches of h->batch_size:
// views of x (N, F) and y (N, 1) on the model's device, or, when `loader` is
// not NULL, the batches it delivers. Fills `log`; prints a line per epoch if
// `print_epochs`.
static void train(ct_module *model, const ct_tensor *x, const ct_tensor *y, ct_dataloader *loader, const hyper *h,
                  bool print_epochs, train_log *log) {
  const ct_device dev = ct_module_device(model);
  int np;
  ct_param **params = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_sgd(params, np, ct_sgd_defaults(h->lr)); // after .to(device)
  if (!opt) ct_cli_die(g_cli);
  ct_tensor *loss_sum = must(ct_zeros(CT_SCALAR_SHAPE, CT_F32, dev)); // the epoch's losses, on the device
  ct_event *start = ct_event_create(dev, true), *end = ct_event_create(dev, true);
  if (!start || !end) ct_cli_die(g_cli);
  const int64_t n = x ? ct_size(x, 0) : 0;
  log->n_step_loss = 0;

  for (long e = 0; e < h->epochs; e++) {
    ok(ct_zero_(loss_sum));
    ok(ct_event_record(start, NULL));
    if (loader) ok(ct_dataloader_start_epoch(loader));
    long steps = 0;
    for (;;) {
      ct_tensor *xb, *yb;
      if (loader) { // for xb, yb in loader: already on the device
        int got = ct_dataloader_next(loader, &xb, &yb);
        if (got < 0) ct_cli_die(g_cli);
        if (got == 0) break;
      } else { // xb, yb = X[i:i+B], y[i:i+B]: views, no copy
        const int64_t i = steps * h->batch_size;
        if (i >= n) break;
        const int64_t b = n - i < h->batch_size ? n - i : h->batch_size;
        xb = must(ct_narrow(x, 0, i, b));
        yb = must(ct_narrow(y, 0, i, b));
      }
      /* the step */
      ct_tensor *pred = NULL, *g = NULL, *loss = NULL;
      /* LAB BEGIN: the five lines: zero the grads (set_to_none), pred = model(xb), the MSE loss and its gradient g, backward g into the parameters, step */
      ok(ct_optimizer_zero_grad(opt, true));        // optimizer.zero_grad(set_to_none=True)
      pred = must(ct_module_forward(model, xb));    // pred = model(xb)
      loss = must(ct_mse_loss(pred, yb, &g));       // loss = loss_fn(pred, yb)
      ok(ct_module_backward_params(model, g));      // loss.backward()
      ok(ct_optimizer_step(opt));                   // optimizer.step()
      /* LAB END */
      ok(ct_binary_out(CT_OP_ADD, loss_sum, loss_sum, loss)); // loss_sum += loss, on the device
      if (log->n_step_loss < MAX_STEP_LOG && (e == 0 || log->n_step_loss < TWIN_STEPS)) // reads: waits
        ok(ct_item(loss, &log->step_loss[log->n_step_loss++]));
      ct_free(pred);
      ct_free(g);
      ct_free(loss);
      ct_free(xb);
      ct_free(yb);
      steps++;
    }
    ok(ct_event_record(end, NULL));
    double sum;
    ok(ct_item(loss_sum, &sum)); // waits for the epoch's work
    stop_if_diverged(sum, e, steps, log, h); // NaN or inf: name the step, exit 1
    float ms;
    ok(ct_event_elapsed_time(start, end, &ms));
    log->epoch_loss[e] = sum / (double)steps;
    log->epoch_ms[e] = ms;
    log->steps_per_epoch = steps;
    if (print_epochs)
      printf("epoch %ld/%ld: loss %.6e, %.2f ms, %.0f steps/s\n", e + 1, h->epochs, log->epoch_loss[e], ms,
             steps / (ms * 1e-3));
  }
  // Speed: the median epoch after the first (which reads its losses one by
  // one and pays the warm-up); the median, not the mean, so that an epoch
  // slowed by another program on the machine does not count.
  const long first = h->epochs > 1 ? 1 : 0;
  log->ms_per_epoch = ct_cli_median(log->epoch_ms + first, (int)(h->epochs - first));
  log->steps_per_s = log->steps_per_epoch / (log->ms_per_epoch * 1e-3);

  ct_event_free(start);
  ct_event_free(end);
  ct_free(loss_sum);
  ct_optimizer_free(opt);
}
/*md twin step*/

static void show_train(run *r) {
  ct_cli_section("train");
  const hyper *h = &r->h;
  printf("SGD, lr %g, batch %ld, %ld epochs of %ld steps, on %s\n", h->lr, h->batch_size, h->epochs,
         (h->samples + h->batch_size - 1) / h->batch_size, dev_str(r->dev));
  train(r->model, r->xd, r->yd, NULL, h, true, &r->log);
  const train_log *log = &r->log;
  const int n_twin = log->n_step_loss < TWIN_STEPS ? log->n_step_loss : TWIN_STEPS;
  printf("loss of the first %d steps:", n_twin);
  for (int i = 0; i < n_twin; i++) printf("%s%.4g", i % 10 ? " " : "\n  ", log->step_loss[i]);
  printf("\n");

  double epochs[MAX_EPOCHS];
  for (long e = 0; e < h->epochs; e++) epochs[e] = (double)(e + 1);
  ct_metrics_series(r->m, "epoch", epochs, (int)h->epochs);
  ct_metrics_series(r->m, "loss_curve", log->epoch_loss, (int)h->epochs);
  ct_metrics_series(r->m, "epoch_ms", log->epoch_ms, (int)h->epochs);
  ct_metrics_series(r->m, "step_losses", log->step_loss, n_twin);
  ct_metrics_num(r->m, "steps_per_epoch", (double)log->steps_per_epoch);
  ct_metrics_num(r->m, "ms_per_epoch", log->ms_per_epoch);
  ct_metrics_num(r->m, "steps_per_s", log->steps_per_s);
  // For the figures: the flat line the curves fall toward, and the first
  // epoch step by step.
  static double floor_line[MAX_STEP_LOG], steps[MAX_STEP_LOG];
  const int n_first = log->steps_per_epoch < log->n_step_loss ? (int)log->steps_per_epoch : log->n_step_loss;
  for (int i = 0; i < MAX_STEP_LOG; i++) floor_line[i] = r->closed_mse, steps[i] = i + 1;
  ct_metrics_series(r->m, "closed_form_mse", floor_line, (int)h->epochs);
  ct_metrics_series(r->m, "first_epoch_step", steps, n_first);
  ct_metrics_series(r->m, "first_epoch_loss", log->step_loss, n_first);
  ct_metrics_series(r->m, "first_epoch_closed_form_mse", floor_line, n_first);
}
/*md output train*/

/*md
::: zh
损失在第一轮里就降了好几个数量级，然后停在闭式解的 MSE 附近，也就是噪声的方差附近。学习率为 $\eta$ 时，每一步大约把参数与最优值之间的距离乘上 $1 - 2\eta$（特征是标准正态时，MSE 的海森矩阵近似是 $2I$）；默认的 $\eta = 0.05$ 每步缩小 10%，第一轮的几百步足够收敛。把 `--lr` 调到 1 以上，$|1 - 2\eta| > 1$，训练就会发散；试试看。

第二轮以后，每轮的平均损失可能一位不差地重复。这不是程序出了错：批的顺序每轮相同、学习率固定，SGD 收敛后不会停在一个点上，而是落进一个每轮重复一遍的循环，每一批都把参数往自己的最优点拉一下。打乱顺序或者逐渐减小学习率，循环就会消失（练习 3）。

下面两张图来自这次运行的 `--metrics`：第一张是每轮的平均损失，第二张是第一轮里逐步的损失。
:::
::: en
The loss drops by several orders of magnitude within the first epoch and then levels off near the closed form's MSE, that is, near the noise variance. With learning rate $\eta$, each step multiplies the distance between the parameters and the optimum by about $1 - 2\eta$ (for standard-normal features the Hessian of the MSE is close to $2I$); the default $\eta = 0.05$ shrinks it by 10% per step, and the few hundred steps of the first epoch are plenty. Raise `--lr` above 1 and $|1 - 2\eta| > 1$: the training diverges. Try it.

From the second epoch on, the mean loss may repeat to the last digit. That is not a bug: with the same batch order every epoch and a fixed learning rate, converged SGD does not come to rest at a point but settles into a cycle that repeats every epoch, each batch pulling the parameters a little toward its own optimum. Shuffling, or a learning rate that decays, breaks the cycle (exercise 3).

The two figures come from this run's `--metrics`: the mean loss of each epoch, and the loss of each step of the first epoch.
:::
*/
/*md
::: zh
{{fig loss}} 画的是每一轮的平均训练损失，旁边一条水平线是闭式解在同一份数据上的均方误差：梯度下降最多只能降到这条线。{{fig steps}} 把第一轮放大到每一步：纵轴取对数，所以每步按固定比例缩小的误差画出来是一条直线。
:::
::: en
{{fig loss}} plots each epoch's mean training loss beside a horizontal line, the closed-form solution's mean squared error on the same data: the floor gradient descent can at best reach. {{fig steps}} zooms into the first epoch, step by step; its vertical axis is logarithmic, so an error shrinking by a fixed factor per step draws a straight line.
:::
*/
/*md figure loss*/
/*md figure steps*/

/*md
::: zh
## 学到了什么

把学到的参数放在真值和闭式解旁边。学到的参数离闭式解比离真值更近：离真值的那点差距来自噪声，任何方法在这份数据上都消除不了；离闭式解的差距来自 SGD 本身，每一步只看 32 个样本，参数就在最优点附近小幅抖动，学习率越小抖得越小。

最后一行在全部样本上重新算一遍 MSE。这次用 `ct_module_train(model, false)` 切到评估模式。ct 的评估模式同时是 PyTorch 的两样东西：`model.eval()`（Dropout、BatchNorm 这类层换成推理时的行为；本章的模型里没有这类层）和 `torch.no_grad()`（前向不为反向保存任何东西）。在 PyTorch 里 `model.eval()` 只管前一样，autograd 照样记录，所以 twin 写的是 `model.eval()` 再加 `with torch.no_grad():`。学到的参数的 MSE 只能大于等于闭式解的 MSE。
:::
::: en
## What was learned

The learned parameters next to the truth and the closed form. They sit closer to the closed form than to the truth: the distance to the truth comes from the noise, which no method can remove from this data; the distance to the closed form comes from SGD itself, which looks at 32 samples per step and so keeps jittering a little around the optimum, less so with a smaller learning rate.

The last line recomputes the MSE over all samples. This time `ct_module_train(model, false)` switches to evaluation mode. ct's evaluation mode is two PyTorch things at once: `model.eval()` (layers such as Dropout and BatchNorm switch to their inference behaviour; this chapter's model has none) and `torch.no_grad()` (the forward pass keeps nothing for a backward pass). In PyTorch `model.eval()` does only the first, and autograd keeps recording, so the twin writes `model.eval()` plus `with torch.no_grad():`. The learned parameters' MSE can only be at or above the closed form's.
:::
*/
static void show_parameters(run *r) {
  ct_cli_section("parameters");
  int np;
  ct_param **params = ct_module_parameters(r->model, &np);
  double *w = host_values(params[0]->value), *b = host_values(params[1]->value); // .cpu(): copies back
  const double *t = r->theta;
  printf("          true        closed form   learned (SGD)   learned - closed\n");
  for (int j = 0; j < F; j++)
    printf("w[%d]  %10.6f   %12.6f   %12.6f      %+.2e\n", j, TRUE_W[j], t[j], w[j], w[j] - t[j]);
  printf("b     %10.6f   %12.6f   %12.6f      %+.2e\n", TRUE_B, t[F], b[0], b[0] - t[F]);

  ct_module_train(r->model, false); // model.eval()
  ct_tensor *pred = must(ct_module_forward(r->model, r->xd));
  ct_tensor *loss = must(ct_mse_loss(pred, r->yd, NULL)); // no gradient asked for
  double mse;
  ok(ct_item(loss, &mse));
  printf("MSE on all %ld samples: learned %.4e, closed form %.4e (the least possible on this data)\n", r->h.samples,
         mse, r->closed_mse);
  ct_metrics_series(r->m, "learned_w", w, F);
  ct_metrics_num(r->m, "learned_b", b[0]);
  ct_metrics_num(r->m, "final_mse", mse);
  if (r->save) {
    ok(ct_module_save(r->model, r->save)); // torch.save(model.state_dict()), as safetensors
    printf("saved the state_dict (weight, bias) to %s\n", r->save);
  }
  free(w);
  free(b);
  ct_free(pred);
  ct_free(loss);
}
/*md output parameters*/

/*md
::: zh
## 速度：每秒多少步

4 个特征的线性回归，一个样本只有 5 次乘加，32 个样本的一步不过几百次浮点运算。无论 CPU 还是 GPU，算这点东西都几乎不花时间；一步的时间几乎全是每个算子的固定开销：检查参数、分配结果、在 GPU 上启动核函数（每次几微秒）、在 CPU 上唤醒线程。一步大约十来个算子（前向一次矩阵乘法，损失两三个，反向两次矩阵乘法和一次求和，两个参数的更新，累加损失），每秒步数衡量的就是这些开销。

这一节在同样的数据、同样的初始权重上再训练几轮，比较三种情形：

- **数据常驻设备**：上面的训练本身，数据一次搬完，每批是视图。
- **在 CPU 上**（只在设备是 GPU 时）：对这么小的模型，CPU 完全可能比 GPU 快：CPU 上一个算子是一次函数调用，GPU 上却要经过驱动启动核函数。GPU 的优势要等每个核函数有足够多的活才显现出来，第 4 章的矩阵乘法就是这样。
- **DataLoader 逐批送数据**：种子教程的写法，`for xb, yb in loader: xb = xb.to(device)`。每一批先在主机上按下标收集成一块，再拷到设备上（GPU 上用锁页内存，在旁路流（side stream）上异步拷贝）。数据放不下设备时只能这样做；放得下时，这就是白交的开销。在 CPU 上这两行几乎一样：收集 32 行只是一次很小的内存拷贝，也没有拷到设备这一步。

PyTorch 孪生程序做同样的测量，它的输出在本章最后。Python 里每个算子还要经过解释器和 PyTorch 的调度器，每次大约十几微秒，对小模型来说这就是大头。本项目的目标是：在同一设备上，本章的每秒步数至少是 PyTorch 孪生程序的 3 倍。CPU 上的比较让两边用相同的线程数（PyTorch 孪生程序调用 `torch.set_num_threads`）。
:::
::: en
## Speed: steps per second

Linear regression with 4 features costs 5 multiply-adds per sample, so a step on 32 samples is a few hundred floating-point operations. Neither a CPU nor a GPU needs measurable time for that; a step's time is almost all the fixed cost of each op: checking the arguments, allocating the result, launching a kernel on a GPU (a few microseconds each), waking threads on a CPU. A step is a dozen or so ops (one matrix product forward; two or three for the loss; two products and a sum backward; an update per parameter; the loss sum), and steps per second measures exactly those costs.

This section trains a few more epochs on the same data from the same initial weights, in three settings:

- **Data resident on the device**: the training above, data moved once, batches as views.
- **On the CPU** (only when the device is a GPU): for a model this small the CPU may well beat the GPU: an op on the CPU is a function call, while on the GPU it is a kernel launch through the driver. The GPU's advantage appears only when each kernel has enough work, as the matrix products of chapter 4 did.
- **A DataLoader delivering each batch**: the seed tutorials' pattern, `for xb, yb in loader: xb = xb.to(device)`. Each batch is first gathered by index into one block on the host, then copied to the device (from pinned memory, on a side stream, on a GPU). Data that does not fit on the device leaves no other way; data that fits pays this for nothing. On the CPU the two rows come out nearly equal: gathering 32 rows is one small memory copy, and there is no copy to a device.

The PyTorch twin makes the same measurements; its output is at the end of the chapter. In Python each op also passes through the interpreter and PyTorch's dispatcher, some ten-odd microseconds each, and for a small model that is most of the time. The project's target: on the same device, this chapter's steps per second at least 3 times the twin's. On the CPU the two compare with the same number of threads (the twin calls `torch.set_num_threads`).
:::
*/
static void speed_row(const char *how, ct_device d, const train_log *log) {
  printf("%-44s %-7s %10.3f %10.0f %9.2f\n", how, dev_str(d), log->ms_per_epoch, log->steps_per_s,
         1e6 / log->steps_per_s);
}

static void show_speed(run *r) {
  ct_cli_section("speed");
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
  printf("CPU threads: %d (OpenMP), %d (OpenBLAS)\n", threads, openblas_get_num_threads());
  ct_metrics_num(r->m, "threads", threads);
  hyper h = r->h; // the same run, fewer epochs: the first is the warm-up
  h.epochs = r->h.epochs < 3 ? r->h.epochs : 3;
  static train_log other;
  printf("%-44s %-7s %10s %10s %9s\n", "how the batches arrive", "device", "ms/epoch", "steps/s", "us/step");
  speed_row("resident: X moved once, batches are views", r->dev, &r->log);

  if (r->dev.type == CT_CUDA) {
    ct_module *cm = model_from(r->init, ct_device_cpu());
    train(cm, r->x, r->y, NULL, &h, false, &other);
    speed_row("resident: X moved once, batches are views", ct_device_cpu(), &other);
    printf("GPU over CPU: %.2fx\n", r->log.steps_per_s / other.steps_per_s);
    ct_metrics_num(r->m, "cpu_steps_per_s", other.steps_per_s);
    ct_module_free(cm);
  } else {
    printf("(the CPU is the device of this run: no GPU to compare with)\n");
  }

  ct_dataset *ds = ct_tensor_dataset(r->x, r->y); // TensorDataset(X, y), on the CPU
  if (!ds) ct_cli_die(g_cli);
  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = r->h.batch_size;
  o.shuffle = false;                   // the same batches as above
  o.num_workers = 0;                   // batches gathered on this thread (exercise 5 tries 2)
  o.pin_memory = r->dev.type == CT_CUDA; // page-locked host batches: asynchronous copies
  o.device = r->dev;                   // each batch is copied to the device
  ct_dataloader *loader = ct_dataloader_create(ds, o);
  if (!loader) ct_cli_die(g_cli);
  ct_module *lm = model_from(r->init, r->dev);
  train(lm, NULL, NULL, loader, &h, false, &other);
  speed_row("DataLoader: each batch gathered and copied", r->dev, &other);
  printf("resident over DataLoader: %.2fx\n", r->log.steps_per_s / other.steps_per_s);
  ct_metrics_num(r->m, "loader_steps_per_s", other.steps_per_s);
  ct_module_free(lm);
  ct_dataloader_free(loader);
  ct_dataset_free(ds);
}
/*md twin loader*/
/*md output speed*/

/*md
::: zh
## 练习

1. 把 `--lr` 从 0.05 逐步加到 0.5、0.9、1.1，看损失曲线怎么变。发散从哪里开始？和 $|1 - 2\eta| < 1$ 的预测一致吗？
2. 把噪声的标准差 `NOISE_STD` 改成 0.1 和 1，重新编译运行。闭式解的 MSE、学到的参数与真值的差距各怎样变化？学到的参数离真值的差距大约按 $\sigma/\sqrt N$ 缩小，用 `--samples` 验证这一点。
3. 加一个 `--shuffle` 参数：每轮打乱样本顺序（最省事的办法是让 DataLoader 来做：`shuffle = true`）。损失曲线有变化吗？再把数据按 $y$ 排序后不打乱地训练，会怎样？
4. 把 `--batch-size` 设成 1、32、1024，比较每秒步数和每秒样本数。哪一个随批大小变化不大，为什么？
5. 在 GPU 上运行，比较“数据常驻”和“DataLoader”两行。再把 DataLoader 的 `pin_memory` 关掉、把 `num_workers` 设为 2，差别在哪里？
:::
::: en
## Exercises

1. Raise `--lr` from 0.05 to 0.5, 0.9 and 1.1 and watch the loss curve. Where does the training start to diverge? Does that match the prediction $|1 - 2\eta| < 1$?
2. Change the noise's standard deviation `NOISE_STD` to 0.1 and to 1, rebuild and run. How do the closed form's MSE and the distance between the learned and the true parameters change? That distance should shrink roughly as $\sigma/\sqrt N$: check it with `--samples`.
3. Add a `--shuffle` flag that reorders the samples every epoch (the easy way: let a DataLoader do it, `shuffle = true`). Does the loss curve change? Then sort the data by $y$ and train without shuffling: what happens?
4. Set `--batch-size` to 1, 32 and 1024 and compare the steps per second and the samples per second. Which one barely changes with the batch size, and why?
5. On a GPU, compare the "resident" and "DataLoader" rows. Then turn the DataLoader's `pin_memory` off and set `num_workers` to 2: what changes?
:::
*/
