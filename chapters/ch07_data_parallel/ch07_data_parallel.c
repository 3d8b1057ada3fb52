// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 7 章　DataParallel：一个进程，多个设备

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)；这里是王哲峰《PyTorch GPU训练 和 CUDA》和《GPU 使用》）讲多 GPU 训练，从 `nn.DataParallel` 开始：

```python
model = Model(input_size, output_size)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)   # 数据按 dim 0 切开，分给各个 GPU
model.to(device)                     # device 是 cuda:0
for data in rand_loader:
    output = model(data.to(device))
```

一行包装，模型就能“用上所有 GPU”。本章用 C 把这一行背后的事情逐件做出来：把模型**复制**到每个设备（replicate），把一批数据沿第 0 维**切开**分发（scatter），每个副本在自己的线程里、以自己的设备为当前设备、在自己的流上**并行**地前向（parallel_apply），把输出**收集**到 `device_ids[0]` 上（gather）；反向时梯度按同样的切法分下去，各副本的参数梯度**加回**原模型（reduce_add），优化器只走一步。`broadcast`、`scatter`、`gather`、`reduce_add` 是运行时的函数，对应 `torch.cuda.comm`，在 `common/include/parallel.h` 里。

设备列表来自 `--devices`，可以重复同一个设备（`cpu,cpu,cpu`、`cuda:0,cuda:0`），所以在只有一块 GPU 甚至没有 GPU 的机器上，这些机制照样能跑、能检查。但要说清楚：**同一个设备重复三次，不会快三倍**。三个线程抢的是同一组核心（或同一块 GPU），速度只有在设备真的不同时才会上去。

本章还要把种子教程里说错的、没说清的地方讲明白：`DataParallel` 的 state_dict 键前面多了 `module.`（种子写成了 `model.`）；存 `model.module` 还是存包装器，两种文件怎样都能载入一个裸模型；为什么模型必须先放在 `device_ids[0]` 上（种子用红字问了这个问题）；“多块 GPU 就看成一块大显存的 GPU”只对了一半。

```sh
cd build && ninja ch07_data_parallel
./ch07                          # 有 2 块以上 GPU 就全用；否则把一个设备重复 3 次
./ch07 --devices cpu,cpu,cpu    # 在 CPU 上看机制
./ch07 --devices cuda:0,cuda:1  # 两块真正的 GPU
./ch07 --quick                  # 几秒钟
```
:::
::: en
# Chapter 7. DataParallel: one process, many devices

The seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here Wang Zhefeng's “PyTorch GPU training and CUDA” and “Using the GPU”) start multi-GPU training with `nn.DataParallel`:

```python
model = Model(input_size, output_size)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)   # the batch is split along dim 0 over the GPUs
model.to(device)                     # device is cuda:0
for data in rand_loader:
    output = model(data.to(device))
```

One line of wrapping and the model "uses every GPU". This chapter does, in C, each thing that line does: it **replicates** the model onto every device, **scatters** a batch along dim 0, runs the replicas' forward passes **in parallel**, each on its own thread with its own device current and its own stream (parallel_apply), and **gathers** the outputs on `device_ids[0]`; backward splits the gradient the same way and **adds** every replica's parameter gradients back into the original model (reduce_add), and the optimizer takes one step. `broadcast`, `scatter`, `gather` and `reduce_add` are runtime functions, mirroring `torch.cuda.comm`, in `common/include/parallel.h`.

The device list comes from `--devices` and may repeat a device (`cpu,cpu,cpu`, `cuda:0,cuda:0`), so the mechanics run, and can be checked, on a machine with one GPU or none. Plainly, though: **one device named three times is not three times faster**. Three threads then share the same cores (or the same GPU); speed only comes with devices that are really distinct.

The chapter also settles what the seeds get wrong or leave open: the keys of a `DataParallel`'s state_dict start with `module.` (one seed writes `model.`); saving `model.module` or the wrapper, and loading either file into a bare model; why the model must sit on `device_ids[0]` first (a seed asks this in red); and why "many GPUs are one big GPU" is only half true.

```sh
cd build && ninja ch07_data_parallel
./ch07                          # every GPU when there are 2 or more; else one device 3 times
./ch07 --devices cpu,cpu,cpu    # the mechanics on the CPU
./ch07 --devices cuda:0,cuda:1  # two real GPUs
./ch07 --quick                  # seconds
```
:::
*/
/*md
::: zh
{{fig dp}} 把这四步画在两个设备上，用的是种子的例子（一批 30 行）。第 1 步，模型从 `device_ids[0]` 复制到每个设备；第 2 步，输入沿第 0 维切成 15 行和 15 行；第 3 步，两个副本各自在自己的设备上前向；第 4 步，输出收集回 `cuda:0`，在那里算损失。反向时，各副本的参数梯度加回 `cuda:0` 上的原模型，下一次前向再重新复制。本章的每一节对应图中的一个箭头。
:::
::: en
{{fig dp}} draws these four steps on two devices, with the seed's example (a batch of 30 rows). Step 1: the model is copied from `device_ids[0]` to every device; step 2: the input is split along dim 0 into 15 rows and 15 rows; step 3: each replica runs forward on its own device; step 4: the outputs are gathered on `cuda:0`, where the loss is computed. In backward each replica's parameter gradients are added back into the model on `cuda:0`, and the next forward copies it again. Each section of this chapter is one arrow of the figure.
:::
*/
/*md figure dp: DataParallel 的一次前向和反向：replicate、scatter、parallel_apply、gather | One DataParallel forward and backward: replicate, scatter, parallel_apply, gather*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <inttypes.h>
#include <limits.h> // PATH_MAX
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct.h"

#define MAX_DEV CT_MAX_REPLICAS
#define LOG_EVERY 25 // training steps between printed losses
#define EVAL_IMAGES 1000

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

static const ct_cli *g_cli; // for ct_cli_check_loss in the training loop

typedef struct settings {
  const char *devices; // "auto" or a list: "cpu,cpu,cpu", "cuda:0,cuda:1"
  long steps, batch_size;
  double lr, momentum;
  const char *data, *out_dir, *save, *save_init;
} settings;

static void sync_all(const ct_device *devs, int n) {
  for (int i = 0; i < n; ++i)
    if (devs[i].type == CT_CUDA) ct_cuda_synchronize(devs[i].index);
}
/*md show*/

/*md
::: zh
## 设备列表

`--devices` 给出 `device_ids`：逗号分隔的设备名，和 `--device` 的写法一样，可以重复。默认的 `auto` 这样选：有两块以上 GPU 就全用（PyTorch 的 `DataParallel(model)` 不给 `device_ids` 时也是这样）；否则把 `--device` 选中的那一个设备（有 GPU 就是 `cuda:0`，没有就是 CPU）重复三次，让本章的机制在任何机器上都能跑。种子教程在 `device_count() > 1` 时才包装模型；这里一个设备也照样包装，只是提醒读者那样不会变快。
:::
::: en
## The device list

`--devices` gives `device_ids`: comma-separated device names written as for `--device`, repeats allowed. The default, `auto`, picks every GPU when there are two or more (what PyTorch's `DataParallel(model)` does without `device_ids`), and otherwise the one device `--device` chose (`cuda:0` when there is a GPU, else the CPU) three times over, so that the chapter's mechanics run on any machine. The seed wraps the model only when `device_count() > 1`; here a single device is wrapped too, with a reminder that it will not be faster.
:::
*/
// Parses "auto" or "cpu,cuda:0,..." into devs; returns the count, or -1
// with the runtime's error (a bad name, a device that is not there).
static int parse_devices(const char *spec, ct_device fallback, ct_device *devs) {
  if (strcmp(spec, "auto") == 0) {
    int g = ct_cuda_device_count();
    if (g >= 2) {
      for (int i = 0; i < g && i < MAX_DEV; ++i) devs[i] = ct_device_cuda(i);
      return g < MAX_DEV ? g : MAX_DEV;
    }
    for (int i = 0; i < 3; ++i) devs[i] = fallback;
    return 3;
  }
  int n = 0;
  const char *p = spec;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char name[32];
    if (len == 0 || len >= sizeof name || n == MAX_DEV) {
      ct_fail(CT_ERR_VALUE, "--devices: expected up to %d comma-separated devices (cpu, cuda, cuda:N), got \"%s\"",
              MAX_DEV, spec);
      return -1;
    }
    memcpy(name, p, len);
    name[len] = '\0';
    if (ct_device_parse(name, &devs[n]) != CT_OK) return -1;
    ++n;
    p = comma ? comma + 1 : p + len;
  }
  if (n == 0) ct_fail(CT_ERR_VALUE, "--devices: empty list");
  return n > 0 ? n : -1;
}

static bool all_same(const ct_device *devs, int n) {
  for (int i = 1; i < n; ++i)
    if (!ct_device_eq(devs[i], devs[0])) return false;
  return true;
}

static void show_devices(const ct_device *devs, int n, ct_metrics *m) {
  ct_cli_section("devices");
  char buf[CT_DEVICE_STR_MAX];
  printf("CUDA devices: %d\n", ct_cuda_device_count());
  printf("Let's use %d devices!  device_ids = [", n);
  for (int i = 0; i < n; ++i) printf("%s%s", i ? ", " : "", ct_device_str(devs[i], buf));
  printf("]\n");
  if (n > 1 && all_same(devs, n))
    printf("note: one device named %d times: the mechanics run, the speed cannot scale\n", n);
  ct_metrics_num(m, "replicas", n);
  ct_metrics_str(m, "device_ids0", ct_device_str(devs[0], buf));
  ct_metrics_num(m, "distinct_devices", all_same(devs, n) ? 1 : n);
}
/*md output devices*/

/*md
::: zh
## 当前设备：`set_device` 和 `torch.cuda.device(i)`

种子教程有一段例子，在三块 GPU 之间创建张量，打印 `get_device()`：0、1、1、1、0、2。规则是：不写设备的 CUDA 张量（`torch.cuda.FloatTensor(1)`、`.cuda()`）放在**当前设备**上；`with torch.cuda.device(1):` 在代码块里把当前设备换成 1，出了代码块再换回来；两个张量的运算结果放在它们所在的设备上，和当前设备无关（`x + x` 在 0 上，即使当前设备是 1）；`.cuda(2)` 明确指定设备。`torch.cuda.set_device(i)` 是不带“换回来”的版本。

C 没有 `with`，上下文就写成“记下旧的当前设备、设置新的、最后恢复”三步。当前设备是**每个线程各自的**（CUDA 运行时就是这样规定的），所以 DataParallel 的每个副本线程一开始都要把自己的设备设为当前设备。下面按机器上实际有的 GPU 重放这个例子：第 i 块 GPU 不存在时用第 i mod n 块代替，并打印出来。没有 GPU 的机器上只能说明这一点。
:::
::: en
## The current device: `set_device` and `torch.cuda.device(i)`

One seed creates tensors across three GPUs and prints `get_device()`: 0, 1, 1, 1, 0, 2. The rules: a CUDA tensor made without a device (`torch.cuda.FloatTensor(1)`, `.cuda()`) goes to the **current device**; `with torch.cuda.device(1):` makes device 1 current inside the block and restores the old one after it; the result of an op on two tensors lives where they live, whatever the current device (`x + x` is on 0 even while 1 is current); `.cuda(2)` names the device outright. `torch.cuda.set_device(i)` is the version without the restore.

C has no `with`, so the context is three steps: remember the current device, set the new one, restore the old one at the end. The current device belongs to **each thread** (the CUDA runtime defines it so), which is why each of DataParallel's replica threads starts by making its own device current. Below, the example is replayed on the GPUs the machine has: where GPU i does not exist, GPU i mod n stands in, and the output says so. A machine without a GPU can only say that.
:::
*/
// The index of a tensor's CUDA device, as Tensor.get_device() (-1 on the CPU).
static int get_device(const ct_tensor *t) { return ct_device_of(t).index; }

static void show_current_device(ct_metrics *m) {
  ct_cli_section("current device");
  int g = ct_cuda_device_count();
  if (g == 0) {
    printf("no CUDA device (%s): every tensor here is a CPU tensor, get_device() == -1\n",
           ct_cuda_unavailable_reason());
    ct_metrics_str(m, "get_device_sequence", "");
    return;
  }
  int gpu[3] = {0, 1 % g, 2 % g}, seq[6];
  if (g < 3) printf("%d GPU(s): GPU 1 is played by cuda:%d, GPU 2 by cuda:%d\n", g, gpu[1], gpu[2]);
  ct_cuda_set_device(gpu[0]);
  ct_device cur;
  ct_device_parse("cuda", &cur);                      // "cuda" = the current device
  ct_tensor *x = ct_zeros(CT_SHAPE(1), CT_F32, cur);  // x = torch.cuda.FloatTensor(1)
  int saved = ct_cuda_current_device();               // with torch.cuda.device(1):
  ct_cuda_set_device(gpu[1]);
  ct_device_parse("cuda", &cur);
  ct_tensor *a = ct_zeros(CT_SHAPE(1), CT_F32, cur);  //   a = torch.cuda.FloatTensor(1)
  ct_tensor *b0 = ct_zeros(CT_SHAPE(1), CT_F32, ct_device_cpu());
  ct_tensor *b = ct_cuda(b0, -1);                      //   b = torch.FloatTensor(1).cuda()
  ct_tensor *c = ct_add(a, b);                         //   c = a + b
  ct_tensor *z = ct_add(x, x);                         //   z = x + x: on x's device
  ct_cuda_set_device(saved);                           // (the block ends)
  ct_tensor *d = ct_cuda(b0, gpu[2]);                  // d = torch.randn(2).cuda(2)
  const ct_tensor *ts[6] = {x, a, b, c, z, d};
  const char *names[6] = {"x", "a", "b", "c", "z", "d"};
  for (int i = 0; i < 6; ++i) {
    seq[i] = ts[i] ? get_device(ts[i]) : -2;
    printf("%s.get_device() == %d\n", names[i], seq[i]);
  }
  double dseq[6];
  for (int i = 0; i < 6; ++i) dseq[i] = seq[i];
  ct_metrics_series(m, "get_device_sequence", dseq, 6);
  ct_free(x), ct_free(a), ct_free(b0), ct_free(b), ct_free(c), ct_free(z), ct_free(d);
}
/*md output current device*/
/*md twin current_device*/

/*md
::: zh
## 种子的例子：RandomDataset(5, 100)，batch 30，Linear(5, 2)

种子的模型在 `forward` 里打印输入和输出的大小。C 的模块没有可以改写的 `forward`，对应的工具是 PyTorch 的**前向钩子**（`register_forward_hook`）：每次前向之后，用模块、输入和输出调用一个函数。钩子挂在每个副本上；它在副本的线程里被调用，所以这里先把要打印的行记下来，等所有线程结束后按副本编号打印。PyTorch 里的 `print` 直接在各个线程里执行，几行的先后顺序每次运行可能不同。

100 个样本、batch 30，一轮（epoch）是 30、30、30、10 四批（`drop_last` 为假，最后一批不满）。三个副本时，30 切成 10+10+10，10 切成 4+4+2：每块 ceil(10/3) = 4 行，最后一块拿剩下的。这就是 `torch.chunk` 的规则，种子的输出正是如此（它标着“未测试”，这里测过了）。数据集就是种子里那个 `Dataset` 的三个函数变成的 C 接口：`__len__` 是 `ct_dataset_len`，`__getitem__` 是 `ct_dataset_get_batch`（一次取一批下标，省去逐个样本的函数调用）。
:::
::: en
## The seed's example: RandomDataset(5, 100), batch 30, Linear(5, 2)

The seed's model prints its input and output sizes inside `forward`. A C module has no `forward` to override; the tool for this is PyTorch's **forward hook** (`register_forward_hook`): after every forward, a function is called with the module, its input and its output. A hook sits on each replica and is called on that replica's thread, so here it records the line to print, and the lines are printed in replica order once the threads have finished. PyTorch's `print` runs on the threads themselves, and the order of those lines can change from run to run.

100 samples in batches of 30 make four batches per epoch: 30, 30, 30, 10 (`drop_last` is false, so the last batch is short). On three replicas, 30 splits 10+10+10 and 10 splits 4+4+2: each chunk takes ceil(10/3) = 4 rows and the last one takes what is left. That is `torch.chunk`'s rule, and it is what the seed prints (it marks that output "untested"; here it is tested). The dataset is the seed's `Dataset`, its three methods turned into a C interface: `__len__` is `ct_dataset_len`, `__getitem__` is `ct_dataset_get_batch` (a batch of indices at once, instead of one call per sample).
:::
*/
typedef struct size_log {
  char line[96]; // "\tIn Model: input size (10, 5) output size (10, 2)"
  int calls;
} size_log;

// The forward hook: print("\tIn Model: input size", input.size(), "output size", output.size())
static void log_sizes(ct_module *m, const ct_tensor *input, const ct_tensor *output, void *ctx) {
  (void)m;
  size_log *log = ctx;
  char a[64], b[64];
  snprintf(log->line, sizeof log->line, "\tIn Model: input size %s output size %s",
           ct_shape_str(ct_shape_of(input), a, sizeof a), ct_shape_str(ct_shape_of(output), b, sizeof b));
  log->calls++;
}

static int seed_example(const ct_device *devs, int n, uint64_t seed, ct_metrics *m) {
  ct_cli_section("seed example");
  ct_dataset *ds = ct_random_dataset(5, 100); // RandomDataset(input_size=5, data_size=100)
  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = 30;
  o.shuffle = true;
  o.seed = seed;
  o.device = devs[0]; // input = data.to(device)
  ct_dataloader *dl = ds ? ct_dataloader_create(ds, o) : NULL;
  ct_module *model = ct_nn_linear(5, 2, true); // Model(input_size, output_size)
  if (!dl || !model || ct_module_to(model, devs[0]) != CT_OK) return -1; // model.to(device)
  ct_data_parallel *dp = ct_data_parallel_create(model, devs, n); // nn.DataParallel(model)
  if (!dp) return -1;
  size_log logs[MAX_DEV];
  memset(logs, 0, sizeof logs);
  for (int i = 0; i < n; ++i) ct_module_register_forward_hook(ct_data_parallel_replica(dp, i), log_sizes, &logs[i]);
  double chunks[4 * MAX_DEV];
  int n_chunks = 0, rc = ct_dataloader_start_epoch(dl);
  ct_tensor *x = NULL, *y = NULL;
  while (rc == CT_OK && (rc = ct_dataloader_next(dl, &x, &y)) == 1) {
    for (int i = 0; i < n; ++i) logs[i].calls = 0;
    ct_tensor *out = ct_data_parallel_forward(dp, x); // output = model(input)
    rc = out ? CT_OK : -1;
    for (int i = 0; out && i < n; ++i)
      if (logs[i].calls) printf("%s\n", logs[i].line);
    int64_t split[MAX_DEV];
    int k = ct_data_parallel_last_split(dp, split);
    for (int i = 0; out && i < k && n_chunks < 4 * MAX_DEV; ++i) chunks[n_chunks++] = (double)split[i];
    char a[64], b[64];
    if (out)
      printf("Outside: input size %s output_size %s\n", ct_shape_str(ct_shape_of(x), a, sizeof a),
             ct_shape_str(ct_shape_of(out), b, sizeof b));
    ct_free(out), ct_free(x), ct_free(y);
  }
  ct_metrics_series(m, "seed_chunks", chunks, n_chunks);
  ct_data_parallel_free(dp);
  ct_module_free(model);
  ct_dataloader_free(dl);
  ct_dataset_free(ds);
  return rc < 0 ? -1 : CT_OK;
}
/*md output seed example*/
/*md twin seed_example*/

/*md
::: zh
## 切分的规则

`torch.chunk(n, k)` 的规则只有一句：每块 ceil(n/k) 行，切到没有为止。于是块数可能**少于** k：5 行分 4 块是 2+2+1，只有 3 块；2 行分 3 块只有 2 块。DataParallel 用几个副本，由块数决定，多出来的副本这一步闲着。所以 batch 比设备数还小，或者除不尽，都不会出错，只是有的设备没活干，有的活少。下表是本章的设备数下几个 batch 大小的切法，以及几组常见的 (n, k)。
:::
::: en
## The split rule

`torch.chunk(n, k)` has a one-line rule: chunks of ceil(n/k) rows until the rows run out. So there may be **fewer** than k chunks: 5 rows in 4 chunks are 2+2+1, only 3 chunks; 2 rows in 3 chunks make 2. DataParallel uses as many replicas as there are chunks, and the others sit that step out. A batch smaller than the device count, or one that does not divide evenly, is therefore no error: some devices get less work, some none. The table shows how batches of a few sizes split over this run's device count, and a few common (n, k) pairs.
:::
*/
static void show_split_rule(int n_dev, ct_metrics *m) {
  ct_cli_section("split rule");
  int64_t rows[] = {30, 10, 2, 256, 5, 7, 17};
  int ks[] = {n_dev, n_dev, n_dev, n_dev, 4, 3, 5};
  double flat[64];
  int nf = 0;
  printf("%6s %4s  chunks\n", "rows", "k");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    int64_t sizes[MAX_DEV];
    int k = 0;
    if (ct_chunk_sizes(rows[i], ks[i], sizes, &k) != CT_OK) continue;
    printf("%6" PRId64 " %4d  ", rows[i], ks[i]);
    for (int j = 0; j < k; ++j) {
      printf("%s%" PRId64, j ? " + " : "", sizes[j]);
      if (nf < 64) flat[nf++] = (double)sizes[j];
    }
    printf("\n");
  }
  ct_metrics_series(m, "split_table", flat, nf);
}
/*md output split rule*/

/*md
::: zh
## 训练：DataParallel 和单设备走出同样的参数

真正的问题是：包装之后训练的还是同一个模型吗？把 Fashion-MNIST 的 MLP（784-256-128-10）从同一组初始权重出发训练两次：一次在 `device_ids[0]` 上不包装，一次用 DataParallel，batch 相同、顺序相同（按文件顺序读，不打乱），都是带动量的 SGD。交叉熵取的是整批的平均，它对 logits 的梯度是 (softmax − onehot)/B，B 是**整批**的大小；这个梯度按前向的切法分给各副本，各副本算出的参数梯度之和，就是整批的梯度。所以两次训练在数学上是同一个计算，只是 float32 的求和顺序不同，舍入也就不同。

这个差别起初只是一次舍入（约为数值的 1e-7），但不会停在那里。第 k 步的参数差会进入之后每一步的前向和反向，改变之后的每一个梯度；动量 0.9 让每一步的梯度在后面大约 1/(1 − 0.9) = 10 步里继续起作用；输入恰好在 0 附近的 ReLU 可能在一次训练里打开、在另一次里关闭，这时那个单元的梯度差的是一整项，而不是一次舍入。训练像一个混沌系统那样放大微小的差别，所以走了很多步之后，两次训练的参数差远大于一次舍入，而损失和精度仍然一致。本书的运行里，{{metric steps}} 步之后两者最多差 {{metric max_param_diff %.2g}}（最大的参数是 {{metric max_param_abs %.2g}}）。哪一个是“对的”？都不是：程序还从同一个起点、用同样的 batch 做了一次 float64 训练（输出的 `float64 run` 一行），它离单设备的结果 {{metric single_f64_diff %.2g}}，离 DataParallel 的结果 {{metric dp_f64_diff %.2g}}，和两者彼此的距离同一个量级。差别来自 float32，DataParallel 没有带来自己的误差。测试 `chapter.ch07_twin_agree` 在 20 步（差别还没放大）时把 DataParallel 的参数和 PyTorch 用 float64 在单设备上训练的结果对照。

注意模型里没有 BatchNorm 和 Dropout。BatchNorm 在每个副本上只看到自己那一块的统计量（30 行的 batch 在 3 个副本上各用 10 行算均值和方差），running_mean 也只由副本 0 更新，所以 DataParallel 下它和单设备训练**本来就不同**，PyTorch 也一样；要跨设备同步统计量得用 `SyncBatchNorm`。Dropout 的随机掩码在哪个设备上抽、按什么顺序抽，也会不同。

计时要诚实地读：重复同一个设备时，DataParallel 只多了切分、复制参数、开线程、收集的开销，在 GPU 上不会更快。{{recorded @run}}中：单设备每步 {{recorded single_ms_per_step %.2f}} 毫秒，DataParallel 每步 {{recorded dp_ms_per_step %.2f}} 毫秒。{{if recorded distinct_devices > 1 and recorded dp_ms_per_step < recorded single_ms_per_step * 0.9}}这次的副本在不同的设备上，DataParallel 更快：每个设备只算一块。{{elif recorded distinct_devices > 1}}这次的副本在不同的设备上，DataParallel 仍然没有明显更快：模型太小，切分、复制和收集的开销抵消了并行省下的时间。{{elif recorded dp_ms_per_step >= recorded single_ms_per_step * 0.9}}DataParallel 没有更快，正如上面所说。{{elif recorded device is cpu}}这次 DataParallel 反而快了一成以上。GPU 重复几次不会因此变快；CPU 却有几个核，副本线程可以各占一个，单设备运行没有用满的核这时就用上了；计时期间机器上的其他负载也会让两次计时不可比。{{else}}这次 DataParallel 反而快了一成以上；同一块 GPU 重复几次，快不是并行带来的：差别来自计时期间的其他因素（机器上的其他负载、GPU 的频率或温度；中位数已经排除了一次性开销），应当在安静的机器上重新录制。{{end}}
:::
::: en
## Training: DataParallel and one device reach the same parameters

The real question: after wrapping, is it still the same model being trained? The Fashion-MNIST MLP (784-256-128-10) is trained twice from the same initial weights: once on `device_ids[0]` unwrapped, once under DataParallel, with the same batches in the same order (read in file order, no shuffling), both with SGD and momentum. The cross-entropy is the mean over the whole batch, so its gradient with respect to the logits is (softmax − onehot)/B with B the **whole** batch's size; that gradient is split over the replicas as the forward split the batch, and the sum of the replicas' parameter gradients is the whole batch's gradient. The two runs are therefore the same computation in exact arithmetic; only float32 sums in another order, and so rounds differently.

That difference starts as one rounding (about 1e-7 of a value) but does not stay there. A difference in the parameters at step k enters the forward and backward of every later step and changes every later gradient; momentum 0.9 keeps each step's gradient acting for about 1/(1 − 0.9) = 10 more steps; and a ReLU whose input sits near 0 can be on in one run and off in the other, and then that unit's gradient differs by a whole term, not by a rounding. Training amplifies small differences the way a chaotic system does, so after many steps the two runs' parameters differ by far more than one rounding, while their losses and accuracies still agree. In this book's run, after {{metric steps}} steps, they differ by at most {{metric max_param_diff %.2g}} (the largest parameter is {{metric max_param_abs %.2g}}). Which one is right? Neither: the program also trains in float64 from the same start on the same batches (the `float64 run` line of the output), and that run lies {{metric single_f64_diff %.2g}} from the one-device result and {{metric dp_f64_diff %.2g}} from DataParallel's, the same order as their distance from each other. The difference is float32's; DataParallel adds no error of its own. The test `chapter.ch07_twin_agree` compares DataParallel's parameters with PyTorch training on one device in float64 after 20 steps, before the difference has grown.

The model has no BatchNorm and no Dropout, on purpose. BatchNorm on each replica sees only its chunk's statistics (a batch of 30 on 3 replicas computes means and variances over 10 rows each), and only replica 0 updates running_mean, so under DataParallel it **is** different from one-device training, in PyTorch too; keeping statistics in step across devices takes `SyncBatchNorm`. Dropout's random masks would also be drawn on other devices, in another order.

Read the timings honestly: with one device repeated, DataParallel adds the cost of splitting, copying the parameters, starting threads and gathering, and on a GPU it cannot be faster. In {{recorded @run}}: {{recorded single_ms_per_step %.2f}} ms per step on one device, {{recorded dp_ms_per_step %.2f}} ms under DataParallel. {{if recorded distinct_devices > 1 and recorded dp_ms_per_step < recorded single_ms_per_step * 0.9}}This time the replicas are on distinct devices, and DataParallel is faster: each device computes one chunk.{{elif recorded distinct_devices > 1}}This time the replicas are on distinct devices, and DataParallel is still not clearly faster: the model is small, and splitting, copying and gathering eat what running in parallel saves.{{elif recorded dp_ms_per_step >= recorded single_ms_per_step * 0.9}}DataParallel is not faster, as said above.{{elif recorded device is cpu}}This time DataParallel came out more than 10% faster. A GPU repeated does not get faster; a CPU, though, has several cores, and the replica threads can each take one, using cores the one-device run left idle; other load on the machine while the two were timed can also make them incomparable.{{else}}This time DataParallel came out more than 10% faster; with one GPU repeated that cannot come from parallelism: something else differed while the two were timed (other load on the machine, the GPU's clock or temperature; the medians already leave out one-time costs), and the recording should be made again on a quiet machine.{{end}}
:::
*/
/*md
::: zh
### 运行时里的两段代码

包装器的前向和反向都落在 `common/parallel/data_parallel.c` 的两个函数上。先是 `parallel_apply`（连同它在每个线程里调用的 `run_job`）：每个副本一个线程，线程里先把自己的设备设为当前设备、把自己的流设为当前流，并在设备上（而不是在主机上）等调用方排给它的复制完成，再跑前向或反向；任何一个副本出错，都在调用方的线程上重新报告，并指明是哪个副本、哪个设备。只有一块时它不开线程，直接在调用方的线程上跑。
:::
::: en
### Two pieces of the runtime

The wrapper's forward and backward come down to two functions of `common/parallel/data_parallel.c`. First `parallel_apply` (with `run_job`, which each of its threads calls): one thread per replica; each makes its device current and its stream the current stream, waits on the device (not on the host) for the copies the caller queued for it, then runs the forward or the backward; a failure on any replica is raised again on the calling thread, naming the replica and its device. With a single chunk it starts no thread and runs on the caller's.
:::
*/
/*md source common/parallel/data_parallel.c parallel_apply*/
/*md
::: zh
然后是反向：`dL/dy` 按前向记下的切法再切一次分给各副本，副本 1…k−1 的梯度先清空，各副本在自己的线程上反向，最后 `reduce_grads` 把副本 1…k−1 的参数梯度复制到 `device_ids[0]`，加进原模型（也就是副本 0）的梯度里。这就是 `reduce_add`：优化器只看原模型的梯度，所以它看到的是整批的梯度。
:::
::: en
Then the backward: `dL/dy` is split again with the sizes the forward recorded, replicas 1…k−1 have their gradients cleared, each replica runs its backward on its own thread, and `reduce_grads` copies the parameter gradients of replicas 1…k−1 to `device_ids[0]` and adds them into the original model's (replica 0's). That is `reduce_add`: the optimizer reads only the original model's gradients, so what it sees is the whole batch's gradient.
:::
*/
/*md source common/parallel/data_parallel.c reduce_grads*/
static ct_module *build_mlp(void) {
  ct_module *mods[] = {
      ct_nn_flatten(),              // 0: (B, 1, 28, 28) -> (B, 784)
      ct_nn_linear(784, 256, true), // 1
      ct_nn_relu(),                 // 2
      ct_nn_linear(256, 128, true), // 3
      ct_nn_relu(),                 // 4
      ct_nn_linear(128, 10, true),  // 5: (B, 10) logits
  };
  return ct_nn_sequential(6, mods);
}

// One SGD step on (x, y); dp NULL means the module alone. Returns the 0-d loss.
static ct_tensor *train_step(ct_module *model, ct_data_parallel *dp, ct_optimizer *opt, const ct_tensor *x,
                             const ct_tensor *y) {
  /* LAB BEGIN: zero the grads; forward through dp (or the model); loss and its gradient; backward through dp (or the model); step */
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;
  ct_tensor *logits = dp ? ct_data_parallel_forward(dp, x) : ct_module_forward(model, x); // (B, 10) on device_ids[0]
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;                                                 // (B, 10): (softmax - onehot) / B
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits);
  ct_free(logits);
  if (!loss) return NULL;
  int rc = dp ? ct_data_parallel_backward_params(dp, dlogits) : ct_module_backward_params(model, dlogits);
  ct_free(dlogits);
  if (rc != CT_OK || ct_optimizer_step(opt) != CT_OK) {
    ct_free(loss);
    return NULL;
  }
  return loss;
  /* LAB END */
}

typedef struct run {
  double *loss;    // per step
  double *step_ms; // per step: batch, forward, backward, optimizer, the item
  double accuracy;
  bool float64;   // the float64 reference: the batches are cast to it
} run;

// Accuracy on the first EVAL_IMAGES test images.
static int accuracy(ct_module *model, ct_dataloader *test, double *acc) {
  ct_module_train(model, false);
  int64_t correct = 0, seen = 0;
  ct_tensor *x = NULL, *y = NULL;
  int rc = ct_dataloader_start_epoch(test);
  while (rc == CT_OK && seen < EVAL_IMAGES && (rc = ct_dataloader_next(test, &x, &y)) == 1) {
    rc = CT_OK;
    ct_tensor *logits = ct_module_forward(model, x), *pred = logits ? ct_argmax_dim(logits, 1, false) : NULL;
    ct_tensor *ycpu = ct_cpu(y), *pcpu = pred ? ct_cpu(pred) : NULL;
    if (!pcpu || !ycpu) rc = -1;
    for (int64_t i = 0; rc == CT_OK && i < ct_size(y, 0); ++i)
      correct += ((const int64_t *)ct_data_ptr(pcpu))[i] == ((const int64_t *)ct_data_ptr(ycpu))[i];
    seen += ct_size(y, 0);
    ct_free(logits), ct_free(pred), ct_free(ycpu), ct_free(pcpu), ct_free(x), ct_free(y);
  }
  ct_module_train(model, true);
  *acc = seen ? (double)correct / (double)seen : 0;
  return rc < 0 ? -1 : CT_OK;
}

static int train(const settings *s, const ct_cli *cli, ct_module *model, ct_data_parallel *dp,
                 ct_dataloader *train_dl, const ct_device *devs, int n_dev, run *r) {
  int np = 0;
  ct_param **params = ct_module_parameters(model, &np);
  ct_sgd_options o = ct_sgd_defaults(s->lr);
  o.momentum = s->momentum;
  ct_optimizer *opt = ct_optim_sgd(params, np, o); // optimizer over model.parameters(): the module's
  if (!opt) return -1;
  int rc = ct_dataloader_start_epoch(train_dl);
  ct_progress *bar = ct_progress_start_label(NULL, dp ? "DataParallel" : r->float64 ? "float64" : "one device",
                                             s->steps); // a terminal's
  ct_tensor *x = NULL, *y = NULL;
  for (long step = 0; rc == CT_OK && step < s->steps; ++step) {
    double ts = ct_cli_seconds();
    rc = ct_dataloader_next(train_dl, &x, &y);
    if (rc == 0 && (rc = ct_dataloader_start_epoch(train_dl)) == CT_OK) // the epoch ended: a new one,
      rc = ct_dataloader_next(train_dl, &x, &y);                        // as `for epoch ...` would
    if (rc != 1) {
      if (rc == 0) rc = ct_fail(CT_ERR_VALUE, "the training set gives no batch");
      break;
    }
    int64_t rows = ct_size(x, 0);
    if (r->float64) { // x.double()
      ct_tensor *x64 = ct_to_dtype(x, CT_F64);
      ct_free(x);
      if (!(x = x64)) {
        ct_free(y);
        rc = -1;
        break;
      }
    }
    ct_tensor *loss = train_step(model, dp, opt, x, y);
    rc = loss && ct_item(loss, &r->loss[step]) == CT_OK ? CT_OK : -1;
    ct_free(loss), ct_free(x), ct_free(y);
    // No synchronize per step: the item has waited for device_ids[0]'s stream, where the
    // optimizer step ran last, so the clock read here already times the whole step on a GPU.
    r->step_ms[step] = 1e3 * (ct_cli_seconds() - ts);
    if (rc == CT_OK) ct_cli_check_loss(g_cli, r->loss[step], step + 1, step + 1, s->lr); // NaN/inf: exit 1
    ct_progress_step(bar, rc == CT_OK ? r->loss[step] : NAN, rows);
    if (ct_cli_interrupted()) { // Ctrl-C: nothing to save, stop after this whole step
      ct_progress_clear(bar);
      ct_cli_exit_if_interrupted(cli);
    }
  }
  ct_progress_clear(bar);
  sync_all(devs, n_dev);
  ct_optimizer_free(opt);
  return rc;
}
/*md twin train*/

// The parameter's values as float64 on the host (a new reference).
static ct_tensor *host_double(const ct_tensor *t) {
  ct_tensor *c = ct_cpu(t), *d = c ? ct_to_dtype(c, CT_F64) : NULL;
  ct_free(c);
  return d;
}

// max |a - b| over all parameters, and max |a|; either may be float32 or float64.
static int param_difference(ct_module *a, ct_module *b, double *max_diff, double *max_abs) {
  int na = 0, nb = 0;
  ct_param **pa = ct_module_parameters(a, &na), **pb = ct_module_parameters(b, &nb);
  *max_diff = *max_abs = 0;
  for (int i = 0; i < na && i < nb; ++i) {
    ct_tensor *ca = host_double(pa[i]->value), *cb = host_double(pb[i]->value);
    if (!ca || !cb) {
      ct_free(ca), ct_free(cb);
      return -1;
    }
    const double *fa = ct_data_ptr(ca), *fb = ct_data_ptr(cb);
    for (int64_t e = 0; e < ct_numel(ca); ++e) {
      *max_diff = fmax(*max_diff, fabs(fa[e] - fb[e]));
      *max_abs = fmax(*max_abs, fabs(fa[e]));
    }
    ct_free(ca), ct_free(cb);
  }
  return CT_OK;
}

static ct_dataloader *fmnist_loader(const char *dir, bool train, int64_t batch, ct_device dev, ct_dataset **ds) {
  *ds = ct_fashion_mnist(dir, train, FMNIST_MEAN, FMNIST_STD);
  if (!*ds) return NULL;
  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = batch;
  o.shuffle = false; // file order: both runs, and the twin, see the same batches
  o.device = dev;
  o.pin_memory = dev.type == CT_CUDA;
  return ct_dataloader_create(*ds, o);
}

static int compare_training(const settings *s, const ct_cli *cli, const ct_device *devs, int n, ct_metrics *m) {
  ct_cli_section("training");
  ct_dataset *train_ds = NULL, *test_ds = NULL;
  ct_data_parallel *dp = NULL;
  run a = {0}, b = {0}, c = {.float64 = true};
  int rc = -1; // until the end is reached; every way out frees what was made
  ct_dataloader *dl = fmnist_loader(s->data, true, s->batch_size, devs[0], &train_ds);
  ct_dataloader *test = dl ? fmnist_loader(s->data, false, EVAL_IMAGES, devs[0], &test_ds) : NULL;
  ct_module *single = build_mlp(), *wrapped = build_mlp(), *ref = build_mlp();
  if (!test || !single || !wrapped || !ref || ct_module_to(single, devs[0]) || ct_module_to(wrapped, devs[0]) ||
      ct_module_to(ref, devs[0]))
    goto out;
  int ns = 0;
  ct_named_tensor *init = ct_module_state_dict(single, "", &ns);
  if (!init || ct_module_load_state(wrapped, init, ns, true) != CT_OK || // the same start
      ct_module_load_state(ref, init, ns, true) != CT_OK || ct_module_to_dtype(ref, CT_F64) != CT_OK) {
    ct_named_tensors_free(init, ns);
    goto out;
  }
  ct_named_tensors_free(init, ns);
  if (s->save_init && ct_module_save(single, s->save_init) != CT_OK) goto out;
  dp = ct_data_parallel_create(wrapped, devs, n);
  if (!dp) goto out;
  int64_t split[MAX_DEV], nsplit = 0;
  int k = 0;
  if (ct_chunk_sizes(s->batch_size, n, split, &k) != CT_OK) goto out;
  printf("model: MLP 784-256-128-10, %" PRId64 " parameters; SGD lr %g momentum %g; %ld steps of batch %ld\n",
         ct_module_num_elements(single), s->lr, s->momentum, s->steps, s->batch_size);
  printf("each batch on %d replicas: ", k);
  for (int i = 0; i < k; ++i) printf("%s%" PRId64, i ? " + " : "", split[i]), nsplit += split[i];
  printf(" = %" PRId64 " rows\n", nsplit);

  a.loss = calloc((size_t)s->steps, sizeof(double)), b.loss = calloc((size_t)s->steps, sizeof(double));
  c.loss = calloc((size_t)s->steps, sizeof(double));
  a.step_ms = calloc((size_t)s->steps, sizeof(double)), b.step_ms = calloc((size_t)s->steps, sizeof(double));
  c.step_ms = calloc((size_t)s->steps, sizeof(double));
  if (!a.loss || !b.loss || !c.loss || !a.step_ms || !b.step_ms || !c.step_ms) {
    ct_fail(CT_ERR_OOM, "ch07: out of host memory");
    goto out;
  }
  if (train(s, cli, single, NULL, dl, devs, 1, &a) != CT_OK || train(s, cli, wrapped, dp, dl, devs, n, &b) != CT_OK ||
      train(s, cli, ref, NULL, dl, devs, 1, &c) != CT_OK || accuracy(single, test, &a.accuracy) != CT_OK ||
      accuracy(wrapped, test, &b.accuracy) != CT_OK)
    goto out;
  printf("%6s  %12s  %12s\n", "step", "one device", "DataParallel");
  for (long i = 0; i < s->steps; ++i)
    if (i == 0 || (i + 1) % LOG_EVERY == 0 || i == s->steps - 1)
      printf("%6ld  %12.6f  %12.6f\n", i + 1, a.loss[i], b.loss[i]);
  double diff = 0, scale = 0;
  if (param_difference(single, wrapped, &diff, &scale) != CT_OK) goto out;
  printf("max |parameter difference| after %ld steps: %.3g (largest |parameter| %.3g)\n", s->steps, diff, scale);
  double d_single = 0, d_dp = 0, unused = 0;
  if (param_difference(single, ref, &d_single, &unused) != CT_OK || param_difference(wrapped, ref, &d_dp, &unused))
    goto out;
  printf("float64 run, same start and batches: max |one device - float64| %.3g, max |DataParallel - float64| %.3g\n",
         d_single, d_dp);
  printf("test accuracy on the first %d test images: one device %.4f, DataParallel %.4f\n", EVAL_IMAGES,
         a.accuracy, b.accuracy);
  // The median step, not the mean: one-time costs (the first steps, the replica threads
  // starting) and a step slowed by another program move the mean, not the median.
  double ms_a = ct_cli_median(a.step_ms, (int)s->steps), ms_b = ct_cli_median(b.step_ms, (int)s->steps);
  printf("time per step (median of %ld steps): one device %.2f ms, DataParallel on %d replica%s %.2f ms%s\n",
         s->steps, ms_a, n, n == 1 ? "" : "s", ms_b, n > 1 && all_same(devs, n) ? " (one device, repeated)" : "");
  ct_metrics_series(m, "single_loss", a.loss, (int)s->steps);
  ct_metrics_series(m, "dp_loss", b.loss, (int)s->steps);
  ct_metrics_num(m, "max_param_diff", diff);
  ct_metrics_num(m, "max_param_abs", scale);
  ct_metrics_num(m, "single_f64_diff", d_single);
  ct_metrics_num(m, "dp_f64_diff", d_dp);
  ct_metrics_num(m, "single_accuracy", a.accuracy);
  ct_metrics_num(m, "dp_accuracy", b.accuracy);
  ct_metrics_num(m, "single_ms_per_step", ms_a);
  ct_metrics_num(m, "dp_ms_per_step", ms_b);
  ct_metrics_num(m, "steps", (double)s->steps);
  int64_t last[CT_MAX_REPLICAS];
  double lastd[CT_MAX_REPLICAS];
  int nl = ct_data_parallel_last_split(dp, last); // how the wrapper split the last training batch
  for (int i = 0; i < nl; ++i) lastd[i] = (double)last[i];
  ct_metrics_series(m, "dp_last_split", lastd, nl);
  rc = s->save ? ct_module_save(wrapped, s->save) : CT_OK; // torch.save(model.module.state_dict())
  (void)cli;
out:
  free(a.loss), free(b.loss), free(c.loss), free(a.step_ms), free(b.step_ms), free(c.step_ms);
  ct_data_parallel_free(dp);
  ct_module_free(single), ct_module_free(wrapped), ct_module_free(ref);
  ct_dataloader_free(dl), ct_dataloader_free(test);
  ct_dataset_free(train_ds), ct_dataset_free(test_ds);
  return rc;
}
/*md output training*/

/*md
::: zh
## state_dict 的 `module.` 前缀

包装器本身也是一个模块，它唯一的子模块叫 `module`，所以包装器的 state_dict 里每个键前面都多了 `module.`：`1.weight` 变成 `module.1.weight`。种子教程说多出来的是 `model.`，那是笔误；它接着说载入时要用 `model.module.state_dict()`，其实说的是**保存**时：存 `model.module.state_dict()`，文件里就是裸模型的键，任何地方（没有 GPU 的机器、不用 DataParallel 的代码）都能直接载入。

如果手里已经是一个带 `module.` 的文件，严格载入到裸模型会失败，报错列出缺少的键和多出的键；PyTorch 为此提供了 `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state_dict, "module.")`，ct 里同名的函数做同一件事。下面把两种文件都写出来（safetensors 格式），再分别载入一个新建的裸模型，检查载入的参数和原来的完全相同。
:::
::: en
## The `module.` prefix of the state_dict

The wrapper is a module itself, and its only child is called `module`, so every key of the wrapper's state_dict gains a `module.` in front: `1.weight` becomes `module.1.weight`. The seed says the extra prefix is `model.`, a slip; and where it says to use `model.module.state_dict()` when loading, it means **saving**: save `model.module.state_dict()` and the file holds the bare model's keys, loadable anywhere (on a machine without a GPU, in code without DataParallel).

A file that already has `module.` fails a strict load into the bare model, and the error lists the missing and the unexpected keys; PyTorch has `torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state_dict, "module.")` for it, and ct's function of the same name does the same. Below, both files are written (as safetensors) and each is loaded into a freshly built bare model, checking that the loaded parameters equal the originals exactly.
:::
*/
static int load_into_bare(const char *path, ct_device dev, const ct_module *ref, bool strip) {
  ct_named_tensor *e = NULL;
  int n = 0;
  if (ct_load_safetensors(path, dev, &e, &n) != CT_OK) return -1;
  ct_module *bare = build_mlp();
  int rc = bare ? ct_module_to(bare, dev) : -1;
  if (rc == CT_OK && strip)
    printf("consume_prefix_in_state_dict_if_present(\"module.\"): %d keys renamed\n",
           ct_consume_prefix_in_state_dict_if_present(e, n, "module."));
  if (rc == CT_OK && ct_module_load_state(bare, e, n, true) != CT_OK) {
    printf("strict load into the bare model fails:\n  %.160s...\n", ct_last_error());
    rc = 1;
  } else if (rc == CT_OK) {
    double diff = 0, scale = 0;
    rc = param_difference((ct_module *)ref, bare, &diff, &scale);
    printf("loaded into the bare model: %s\n", diff == 0 ? "parameters equal, bit for bit" : "PARAMETERS DIFFER");
    if (diff != 0) rc = ct_fail(CT_ERR_VALUE, "ch07: %s loaded with a difference of %g", path, diff);
  }
  ct_named_tensors_free(e, n);
  ct_module_free(bare);
  return rc;
}

static int show_state_dict(const settings *s, const ct_device *devs, int n, ct_metrics *m) {
  ct_cli_section("state dict");
  ct_module *model = build_mlp();
  if (!model || ct_module_to(model, devs[0]) != CT_OK) return -1;
  ct_data_parallel *dp = ct_data_parallel_create(model, devs, n);
  int nw = 0, nm = 0;
  ct_named_tensor *wrapper = dp ? ct_module_state_dict(model, "module.", &nw) : NULL; // model.state_dict()
  ct_named_tensor *inner = wrapper ? ct_module_state_dict(model, "", &nm) : NULL;     // model.module.state_dict()
  if (!inner) return -1;
  printf("model.state_dict() keys:        %s, %s, ... (%d)\n", wrapper[0].name, wrapper[1].name, nw);
  printf("model.module.state_dict() keys: %s, %s, ... (%d)\n", inner[0].name, inner[1].name, nm);
  char pw[PATH_MAX], pm[PATH_MAX];
  int rc = ct_path_join(pw, sizeof pw, "--out-dir", s->out_dir, "ch07_wrapper.safetensors");
  if (rc == CT_OK) rc = ct_path_join(pm, sizeof pm, "--out-dir", s->out_dir, "ch07_module.safetensors");
  if (rc == CT_OK) rc = ct_save_safetensors(pw, wrapper, nw, NULL);
  if (rc == CT_OK) rc = ct_save_safetensors(pm, inner, nm, NULL);
  if (rc == CT_OK) {
    printf("saved model.module.state_dict() -> ch07_module.safetensors\n");
    rc = load_into_bare(pm, devs[0], model, false);
  }
  if (rc == CT_OK) {
    printf("saved model.state_dict() -> ch07_wrapper.safetensors\n");
    rc = load_into_bare(pw, devs[0], model, false); // fails, as PyTorch's does: 1
    if (rc == 1) rc = load_into_bare(pw, devs[0], model, true);
  }
  ct_metrics_str(m, "wrapper_key0", wrapper[0].name);
  ct_metrics_str(m, "module_key0", inner[0].name);
  ct_named_tensors_free(wrapper, nw);
  ct_named_tensors_free(inner, nm);
  ct_data_parallel_free(dp);
  ct_module_free(model);
  return rc;
}
/*md output state dict*/
/*md twin state_dict*/

/*md
::: zh
## 为什么模型必须先放在 `device_ids[0]` 上

种子用红字问：`model.to(device)` 里的 `device` 只是 `cuda:0`，是不是写错了？没有写错。DataParallel 把 `device_ids[0]` 当作“主设备”：原模型就放在那里，它本身就是副本 0，它的参数就是优化器更新的那一份；每次前向从它复制出其余的副本，输出收集回它那里，损失也在那里算，梯度最后都加回它的参数上。所以 `model.to("cuda:0")` 必不可少；种子另一个例子从没搬过模型，PyTorch 在第一次前向时就报错：

```
RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device: cpu
```

PyTorch 在构造 `DataParallel` 时不查，每次前向开头才查，所以错误在第一次前向时出现。ct 在每次前向时做同样的检查，报同样的话，并且在创建包装器时就先查一次，错误来得更早。下面在有 GPU 时真的触发一次；只有 CPU 时，所有副本都在 CPU 上，这个错误不可能出现。

这也回答了“多块 GPU 就看成一块大显存的 GPU”那句话：只对一半。batch 确实被切开了，每块卡只放自己那一块的激活值，所以总 batch 可以放大到 n 倍；但**模型在每块卡上都有一份完整的拷贝**，模型本身放不下一块卡，DataParallel 帮不上忙。而且 `device_ids[0]` 比别的卡多干活、多占显存：收集所有输出、算损失、汇总梯度、更新参数都在它上面，所以它往往先满。每一步还要把参数从它广播出去，所有副本都由一个 Python 进程里的线程驱动（在 PyTorch 里还受 GIL 限制）。这两个瓶颈正是第 8 章 DistributedDataParallel 要去掉的。
:::
::: en
## Why the model must sit on `device_ids[0]`

A seed asks in red: `model.to(device)` uses just `cuda:0`; is that a mistake? It is not. DataParallel treats `device_ids[0]` as the main device: the original model lives there and is replica 0 itself; its parameters are the ones the optimizer updates; every forward copies the other replicas from it, the outputs are gathered there, the loss is computed there, and the gradients all end up added into its parameters. So `model.to("cuda:0")` is required, and another seed example that never moves the model fails at its first forward in PyTorch with

```
RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one of them on device: cpu
```

PyTorch does not check when the `DataParallel` is constructed, only at the start of every forward, so the error comes at the first forward. ct makes the same check at every forward, in the same words, and once more, earlier, when the wrapper is created. Below it is triggered for real when there is a GPU; on a CPU-only machine every replica is on the CPU and the error cannot happen.

This also answers "many GPUs are one big GPU": it is half true. The batch is split, each GPU holds only its chunk's activations, so the total batch can grow n times; but **every GPU holds a whole copy of the model**, so a model that does not fit on one GPU is not helped by DataParallel. And `device_ids[0]` works and stores more than the others: gathering every output, the loss, summing the gradients and the update all happen there, so it tends to fill up first. Every step also broadcasts the parameters from it, and all replicas are driven by threads of one process (in PyTorch, under the GIL). Those two bottlenecks are what chapter 8's DistributedDataParallel removes.
:::
*/
static int show_main_device(const ct_device *devs, int n, ct_metrics *m) {
  ct_cli_section("device_ids[0]");
  if (devs[0].type != CT_CUDA) {
    printf("device_ids[0] is the CPU: the model is already there, the check passes\n");
    ct_metrics_str(m, "main_device_error", "");
    return CT_OK;
  }
  ct_module *model = build_mlp(); // built on the CPU and never moved
  if (!model) return -1;
  ct_data_parallel *dp = ct_data_parallel_create(model, devs, n);
  printf("%s\n", dp ? "no error (unexpected)" : ct_last_error());
  ct_metrics_str(m, "main_device_error", dp ? "" : ct_last_error());
  ct_data_parallel_free(dp);
  ct_module_free(model);
  return CT_OK;
}
/*md output device_ids[0]*/

/*md
::: zh
## main：把各部分连起来

`main` 先选设备列表，然后按本章的顺序依次演示：设备列表、当前设备、种子的例子、切分规则、两次训练的对照、state_dict 的前缀、主设备的检查。书里的输出来自一次 100 步的运行（`--steps 100`）；默认是 300 步，比一轮（60000 张图、每批 256，共 235 批）多：数据读完时训练循环开始新的一轮，就像 PyTorch 里外层的 `for epoch in ...` 那样，所以第 236 步是第二轮的第一批。
:::
::: en
## main: putting the parts together

`main` chooses the device list, then shows the chapter's parts in order: the device list, the current device, the seed's example, the split rule, the two training runs side by side, the state_dict prefix and the main device's check. The book's output comes from a 100-step run (`--steps 100`); the default is 300 steps, more than one epoch (60,000 images in batches of 256 make 235 batches): when the loader runs out, the training loop starts a new epoch, as PyTorch's outer `for epoch in ...` loop would, so step 236 is the second epoch's first batch.
:::
*/
/*md bookrun --steps 100*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch07", .summary = "Chapter 7: DataParallel, one process driving many devices."};
  settings s = {.devices = "auto", .steps = 300, .batch_size = 256, .lr = 0.05, .momentum = 0.9, .out_dir = "."};
  ct_cli_opt opts[] = {
      {"devices", CT_OPT_STRING, &s.devices, "device_ids: auto, or a list such as cpu,cpu,cpu or cuda:0,cuda:1"},
      {"steps", CT_OPT_INT, &s.steps, "training steps of each run (--quick: 20)"},
      {"batch-size", CT_OPT_INT, &s.batch_size, "the global batch, split over the replicas"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "SGD learning rate"},
      {"momentum", CT_OPT_DOUBLE, &s.momentum, "SGD momentum"},
      {"data", CT_OPT_STRING, &s.data, "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)"},
      {"out-dir", CT_OPT_STRING, &s.out_dir, "where the state-dict files go"},
      {"save", CT_OPT_OUTPUT, &s.save, "write the DataParallel-trained model.module.state_dict() to FILE"},
      {"save-init", CT_OPT_OUTPUT, &s.save_init, "write the initial state_dict to FILE (for the PyTorch twin)"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  g_cli = &cli;
  ct_cli_check_path(&cli, "--out-dir", s.out_dir, "ch07_wrapper.safetensors"); // a long folder: refused now
  /*md hide*/
  if (s.steps < 1 || s.batch_size < 1 || !(s.lr > 0) || !(s.momentum >= 0)) {
    fprintf(stderr, "ch07: --steps and --batch-size must be >= 1, --lr > 0, --momentum >= 0\n"
                    "usage: ch07 [--help] ...\n");
    return 2;
  }
  if (cli.quick && s.steps == 300) s.steps = 20;
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  ct_device devs[MAX_DEV];
  int n = parse_devices(s.devices, cli.device, devs);
  if (n < 0) ct_cli_die(&cli);
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded

  show_devices(devs, n, m);
  show_current_device(m);
  if (seed_example(devs, n, cli.seed, m) != CT_OK) ct_cli_die(&cli);
  show_split_rule(n, m);
  if (compare_training(&s, &cli, devs, n, m) != CT_OK) ct_cli_die(&cli);
  if (show_state_dict(&s, devs, n, m) != CT_OK) ct_cli_die(&cli);
  if (show_main_device(devs, n, m) != CT_OK) ct_cli_die(&cli);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 用 `--devices cpu`、`cpu,cpu`、`cpu,cpu,cpu,cpu` 各跑一次，看每步时间怎样变化。为什么重复同一个设备只会更慢？在有两块 GPU 的机器上用 `cuda:0,cuda:1` 试试。
2. 把 `--batch-size` 设成 2，用 3 个副本：几个副本在干活？再设成 5、7，和“切分的规则”一节的表对照。
3. 在 `common/parallel/data_parallel.c` 里让 `reduce_grads` 一开始就返回（只有副本 0 那一块的梯度进入参数）。参数差会变成多少？为什么训练仍然能进行，却不再和单设备等价？
4. 给 MLP 加一个 `BatchNorm1d` 式的层（或者换成第 6 章带 `--batchnorm` 的 CNN）再比较两次训练。参数差为什么不再是舍入级别？
5. 读 `common/parallel/data_parallel.c` 的 `parallel_apply`：只有一块时它不开线程。PyTorch 在只有一个设备时也这样做，为什么？
:::
::: en
## Exercises

1. Run with `--devices cpu`, `cpu,cpu` and `cpu,cpu,cpu,cpu` and watch the time per step. Why can repeating one device only make it slower? On a machine with two GPUs, try `cuda:0,cuda:1`.
2. Set `--batch-size 2` with 3 replicas: how many replicas work? Try 5 and 7 and compare with the table of "The split rule".
3. In `common/parallel/data_parallel.c`, make `reduce_grads` return at once (only replica 0's chunk reaches the parameters). How large does the parameter difference become? Why does training still go on, yet no longer match one device?
4. Add BatchNorm to the model (or use chapter 6's CNN with `--batchnorm`) and compare the two runs again. Why is the difference no longer at the level of rounding?
5. Read `parallel_apply` in `common/parallel/data_parallel.c`: with one chunk it starts no thread. PyTorch does the same for one device; why?
:::
*/
