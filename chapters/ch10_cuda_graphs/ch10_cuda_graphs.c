// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 10 章　CUDA Graphs：录下一整步训练，一次提交重放

种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是《PyTorch GPU 加速》）讲性能优化时给了一段 CUDA Graphs 的代码：先在一条旁路流上预热三步，再在 `torch.cuda.graph(g)` 里把一整步训练（清梯度、前向、损失、反向、优化器更新）录成一张图；之后每一步只要把新数据 `copy_` 进静态输入张量，再调用 `g.replay()`。思路是对的，代码却有一个错误：它在捕获**里面**重新创建了 `static_input`，大意如下：

```python
with torch.cuda.graph(g):
    static_input = torch.randn(32, 10, device="cuda")  # 这一行也被录进了图
    ...                                                 # 前向、反向、step
static_input.copy_(real_input)
g.replay()   # 先执行录下的 randn，把刚拷进去的数据盖掉
```

`randn` 成了图里的第一个核函数，每次重放都先执行它，`copy_` 进去的数据随即被覆盖，模型训练的永远是随机数。

不过在 PyTorch 里，这个错误根本没有机会露面：种子的优化器是 `torch.optim.Adam(model.parameters())`，没有 `capturable=True`，捕获里调用 `optimizer.step()` 时，优化器先检查当前流是否在捕获，发现 `capturable` 为 False 就抛出 `RuntimeError`（“Attempting CUDA graph capture of step() for an instance of Adam but param_groups' capturable is False.”），整个 `with torch.cuda.graph(g)` 到此失败，根本走不到重放。改正要两处：建优化器时写 `torch.optim.Adam(model.parameters(), capturable=True)`（它的步数和偏差修正于是留在 GPU 上，而不是主机上的 Python 数），并把 `static_input` 放到捕获之前创建。本章用 C 把正确的做法一步步做出来，再把这两个错误真的跑一遍：`static_input` 的错误在“种子里的错误”一节，不可捕获的 Adam 在“捕获期间不允许做的事”一节。

为什么要捕获成图？每个算子在 GPU 上干活之前，主机要先做一串事：调度器检查参数、广播、推导 dtype、从缓存分配器取内存，然后把核函数提交给驱动（每次 launch 在主机上要几微秒）。模型小的时候，GPU 执行一个核函数比主机准备它还快，GPU 大部分时间在等主机，这叫**受启动开销限制**（launch-bound）。CUDA Graph 把一步里的全部核函数连同参数录下来，之后用一次 `cudaGraphLaunch` 整张提交：调度器的工作只在捕获时做一次，驱动也不再逐个处理几百次 launch。

没有 GPU 的机器上本章照样真的运行：运行时在 CPU 上按同样的规则录制一步。捕获期间，调度器把每个核函数调用（后端表里的入口，以及按值拷贝下来的参数）追加到一个列表，而不执行它；重放时依次执行这个列表，跳过检查、广播、分配这些主机上的工作。地址固定、私有内存池、捕获期间不许同步，这些规则两种设备完全一样，违反时报的错也一样。所以 CPU 上测到的加速，正是重放省下的调度开销。CUDA Graph 在此之上还多给了 CPU 给不了的东西：几百个核函数只要**一次**提交，GPU 上的核函数之间不再夹着主机的空隙。

```sh
cd build && ninja ch10_cuda_graphs
./ch10                 # 有 GPU 用真正的流捕获，否则用 CPU 上的录制
./ch10 --quick         # 几秒钟
./ch10 --width 1024    # 演示用一个计算量大的模型
```
:::
::: en
# Chapter 10. CUDA graphs: record a whole training step, replay it with one launch

In its section on performance, a seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “PyTorch GPU acceleration”) shows CUDA graphs: three warm-up steps on a side stream, then a whole training step (zero the grads, forward, loss, backward, optimizer step) recorded into a graph inside `torch.cuda.graph(g)`; after that each step is a `copy_` of new data into the static input tensor and a `g.replay()`. The idea is right, but the code has a bug: it re-creates `static_input` **inside** the capture, in effect:

```python
with torch.cuda.graph(g):
    static_input = torch.randn(32, 10, device="cuda")  # this line is recorded too
    ...                                                 # forward, backward, step
static_input.copy_(real_input)
g.replay()   # runs the recorded randn first, over the data just copied in
```

The `randn` becomes the graph's first kernel. Every replay runs it first and overwrites what `copy_` put there, so the model always trains on random numbers.

In PyTorch, though, that bug never gets a chance to show: the seed's optimizer is `torch.optim.Adam(model.parameters())`, without `capturable=True`. When `optimizer.step()` runs inside the capture, the optimizer first checks whether the current stream is capturing and, its `capturable` being False, raises a `RuntimeError` ("Attempting CUDA graph capture of step() for an instance of Adam but param_groups' capturable is False."); the whole `with torch.cuda.graph(g)` fails there, long before any replay. The fix takes two changes: build the optimizer as `torch.optim.Adam(model.parameters(), capturable=True)` (its step count and bias corrections then live on the GPU instead of in host-side Python numbers), and create `static_input` before the capture. This chapter builds the right pattern in C, step by step, and then runs both bugs for real: `static_input` in "The seed's bug", the non-capturable Adam in "What capture forbids".

Why record a graph at all? Before an op does any work on the GPU, the host does a series of things: the dispatcher checks the arguments, broadcasts, works out the dtype, takes memory from the caching allocator, and hands the kernel to the driver (a launch costs the host a few microseconds). With a small model the GPU runs a kernel faster than the host can prepare the next one, and spends most of its time waiting: the step is **launch-bound**. A CUDA graph records every kernel of the step with its arguments; afterwards one `cudaGraphLaunch` submits the whole graph. The dispatcher's work is done once, at capture, and the driver no longer handles hundreds of launches one by one.

On a machine without a GPU the chapter still runs for real: the runtime records a step on the CPU under the same rules. During capture the dispatcher appends each kernel call (the backend table's entry and its arguments, copied by value) to a list instead of running it; replay runs the list in order, skipping the host-side work of checks, broadcasting and allocation. Fixed addresses, the private memory pool, no synchronization during capture: the rules are the same on both devices, and so are the errors when they are broken. The speed-up measured on the CPU is therefore exactly the dispatcher overhead a replay removes. A CUDA graph adds what a CPU cannot: hundreds of kernels submitted with **one** launch, and no host-made gaps between the kernels on the GPU.

```sh
cd build && ninja ch10_cuda_graphs
./ch10                 # real stream capture with a GPU, else the CPU recorder
./ch10 --quick         # seconds
./ch10 --width 1024    # a compute-heavy model for the demo
```
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

static const ct_cli *g_cli; // for ct_cli_check_loss in the training loop

/*md show*/

/*md
::: zh
## 模型、数据和一步训练

模型是一个小 MLP：输入 10 维，`--depth` 个宽度为 `--width` 的隐藏层（ReLU），输出 10 维；batch 是 32 行，和种子里 `(32, 10)` 的形状一样。数据是 8 批固定的随机输入 x，目标由一个固定的“老师”给出：y = tanh(x T)，所以损失确实会降下来。第 i 步读第 i mod 8 批。

`train_step` 就是种子里的那一步：`zero_grad(set_to_none=True)`、前向、MSE 损失、反向、带动量的 SGD。它对图一无所知：同一个函数既可以即时执行，也可以被捕获。这正是 CUDA Graph 的用法：被捕获的是普通的训练代码，不必为它改写。
:::
::: en
## The model, the data and one training step

The model is a small MLP: 10 inputs, `--depth` hidden layers of width `--width` (ReLU), 10 outputs; a batch is 32 rows, the seed's `(32, 10)`. The data are 8 fixed batches of random inputs x whose targets come from a fixed "teacher", y = tanh(x T), so the loss really falls. Step i reads batch i mod 8.

`train_step` is the seed's step: `zero_grad(set_to_none=True)`, forward, MSE loss, backward, SGD with momentum. It knows nothing of graphs: the same function runs eagerly and is captured. That is how CUDA graphs are meant to be used: what gets captured is ordinary training code, not a rewrite of it.
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

/*md
::: zh
## 预热：在旁路流上先跑几步

本章要用到流和事件，它们在第 12 章才细讲（那一章不依赖本章，可以先读）。这里够用的是：**流**是设备上的一条工作队列，同一条流里的工作按提交顺序执行，不同流上的工作可以同时进行；每个设备有一条默认流，`ct_set_stream`（`torch.cuda.stream(s)`）改变“当前流”，之后的运算都提交到它上面；`ct_stream_wait_stream(a, b)`（`a.wait_stream(b)`）让流 a 之后的工作等 b 上已经提交的工作做完，主机不必等；**事件**是记在流里的一个标记，可以用来计时或让别的流等它。

捕获之前，先在一条**旁路流**（`ct_stream_create`，即 `torch.cuda.Stream()`）上照常跑几步。有几件事只在第一次发生，而它们在捕获期间都不允许：

- cuBLAS 在每条流上第一次做矩阵乘法时，为这条流分配自己的工作区（`cudaMalloc`，见 `common/kernels/gemm.cu`）；CPU 之外，第一次可能报设备端错误的核函数还要分配错误记录。`cudaMalloc` 不能被捕获。工作区按流分开，所以预热必须在**将要捕获的那条流**上做。
- 优化器的状态在第一步才创建：SGD 的动量缓冲第一步是 `buf = grad`，之后才是 `buf = momentum · buf + grad`。如果把第一步录进图，每次重放都会把缓冲重置成梯度，动量就不存在了。

两次 `wait_stream` 也不能少：开始前旁路流要等当前流（数据和模型是在当前流上做出来的），结束后当前流要等旁路流（之后的工作要看到预热的结果）。种子的预热两次都没有等，在 GPU 上这是一个竞争。CPU 上工作一提交就执行完，等待是空操作，但代码照样写上。
:::
::: en
## Warm-up on a side stream

This chapter uses streams and events, which chapter 12 explains in full (it does not depend on this one and can be read first). What is needed here: a **stream** is a queue of work on a device; work on one stream runs in the order it was issued, work on different streams may run at the same time; each device has a default stream, `ct_set_stream` (`torch.cuda.stream(s)`) changes the "current stream" that later ops are issued to, and `ct_stream_wait_stream(a, b)` (`a.wait_stream(b)`) makes the work issued to stream a from then on wait until the work already issued to b is done, without the host waiting. An **event** is a marker recorded in a stream, used to time work or to make another stream wait for it.

Before capture, a few steps run as usual on a **side stream** (`ct_stream_create`, `torch.cuda.Stream()`). Some things happen only the first time, and none of them is allowed during capture:

- cuBLAS allocates a workspace for each stream at that stream's first matrix product (`cudaMalloc`, see `common/kernels/gemm.cu`); on a GPU the first kernel that can report a device-side error also allocates the error record. `cudaMalloc` cannot be captured. The workspace belongs to the stream, so the warm-up has to run on **the stream that will capture**.
- The optimizer creates its state at the first step: SGD's momentum buffer is `buf = grad` at the first step and `buf = momentum · buf + grad` after. A captured first step would reset the buffer to the gradient at every replay, and there would be no momentum.

Neither `wait_stream` may be left out: before, the side stream waits for the current one (the data and the model were made there); after, the current stream waits for the side one (later work must see the warm-up's results). The seed's warm-up waits neither way, a race on a GPU. On the CPU work is done when issued and the waits cost nothing, but the code says them all the same.
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
  ct_stream_free(gr->side);
  memset(gr, 0, sizeof *gr);
}

static int graphed_init(graphed *gr, ct_module *model, const settings *s, ct_device dev) {
  memset(gr, 0, sizeof *gr);
  gr->model = model;
  gr->opt = make_sgd(model, s);
  gr->static_x = ct_empty(CT_SHAPE(s->batch, IN), CT_F32, dev);
  gr->static_y = ct_empty(CT_SHAPE(s->batch, OUT), CT_F32, dev);
  gr->side = ct_stream_create(dev, 0);
  gr->g = ct_cuda_graph_create();
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

static int show_warm_up(graphed *gr, const data *d, const settings *s, ct_metrics *m) {
  ct_cli_section("warm-up");
  double loss[16];
  long n = s->warmup < 16 ? s->warmup : 16;
  if (warm_up(gr, d, n, loss) != CT_OK) return -1;
  for (long i = 0; i < n; ++i) ct_cli_check_loss(g_cli, loss[i], i + 1, i + 1, s->lr); // diverged: exit 1
  for (long i = 0; i < n; ++i) printf("warm-up step %ld on the side stream: loss %.6f\n", i + 1, loss[i]);
  ct_metrics_series(m, "warmup_loss", loss, (int)n);
  return CT_OK;
}
/*md output warm-up*/

/*md
::: zh
## 捕获

`ct_cuda_graph_capture_begin(g, side, NULL)` 对应 `with torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):` 的开头：它让 `side` 成为当前流，在 GPU 上调用 `cudaStreamBeginCapture`（thread-local 模式：只有本线程的不安全调用被禁止），在 CPU 上让本线程进入录制状态。PyTorch 的默认值有两点不同：不给 `stream` 时，`torch.cuda.graph` 在它自己的一条旁路流上捕获（第一次用时创建，之后各次捕获共用），所以种子在外面再包一层 `with torch.cuda.stream(s)` 并不影响捕获用哪条流；`capture_error_mode` 默认是 `"global"`，捕获期间**任何**线程的不安全调用（比如另一个线程里的 `cudaMalloc`）都会让捕获失败。ct 只有一种模式，即 thread-local，而且总是在调用者给的流上捕获。之后照常调用 `train_step`，最后 `ct_cuda_graph_capture_end` 结束捕获，把图实例化（`cudaGraphInstantiate`），并恢复原来的当前流。

捕获期间**什么都不执行**。GPU 上，核函数只被记进图里；CPU 上的录制遵守同样的约定。下面的输出检查了这一点：捕获前后参数完全没变。捕获的这一步做出的张量，比如 `static_loss`，其内存来自这张图的私有内存池，而它的值要到第一次重放之后才有。

录制发生在调度器和后端之间的一个地方。每个算子在做完主机上的工作之后，都通过 `cti_backend_for(op, device)` 取得设备的后端表，再调用表里的入口。本线程在这个设备上捕获时，这里返回的是录制表：
:::
::: en
## Capture

`ct_cuda_graph_capture_begin(g, side, NULL)` is the start of `with torch.cuda.graph(g, stream=side, capture_error_mode="thread_local"):`. It makes `side` the current stream, calls `cudaStreamBeginCapture` on a GPU (thread-local mode: only this thread's unsafe calls are forbidden) and puts this thread into recording on the CPU. PyTorch's defaults differ in two ways: without `stream`, `torch.cuda.graph` captures on a side stream of its own (made at first use, then shared by later captures), so the seed's outer `with torch.cuda.stream(s)` does not change the stream it captures on; and `capture_error_mode` defaults to `"global"`, under which an unsafe call from **any** thread during the capture (a `cudaMalloc` in another thread, say) fails it. ct has one mode, thread-local, and always captures on the stream the caller gives. Then `train_step` is called as usual, and `ct_cuda_graph_capture_end` ends the capture, instantiates the graph (`cudaGraphInstantiate`) and restores the previous current stream.

During capture **nothing runs**. On a GPU the kernels are only entered into the graph, and the CPU recorder keeps the same contract. The output below checks it: the parameters are exactly what they were before capture. Tensors the captured step makes, such as `static_loss`, get their memory from the graph's private pool, and their values exist only after the first replay.

Recording happens at one place between the dispatcher and the backends. Every op, once its host-side work is done, gets the device's backend table from `cti_backend_for(op, device)` and calls an entry of it. While this thread captures on that device, what comes back is the recording table:
:::
*/
/*md
::: zh
{{fig capture}} 对比了两种做法。上面是即时执行：每一步，主机都要重做 Python 代码、分派、形状检查、向分配器要内存，再逐个启动核函数，每次启动几微秒。下面是 CUDA Graph：捕获时（在旁路流上）这些主机工作照做一遍，但核函数不执行，只把核函数、参数和指针记进图；之后每次 `g.replay()` 一次启动，按记下的顺序执行全部核函数，主机那一侧全部跳过。因为指针是记死的，重放读写的永远是同一批地址：新数据要 `copy_` 进 `static_input`，而不是换一个新张量，这正是后面种子那个错误的根源。
:::
::: en
{{fig capture}} sets the two ways side by side. Above, eager execution: every step the host redoes the Python code, the dispatch, the shape checks, the allocator's work, and launches the kernels one by one, microseconds each. Below, a CUDA graph: capture (on a side stream) does that host work once, but the kernels do not run; the kernels, their arguments and pointers are recorded into the graph. Each `g.replay()` is then one launch that runs every recorded kernel in order, and the host side is skipped entirely. Because the pointers are fixed, replay always reads and writes the same addresses: new data must be `copy_`'d into `static_input`, not passed as a new tensor, which is the root of the seed's bug below.
:::
*/
/*md figure capture: 捕获记下什么、重放跳过什么 | What capture records and what replay skips*/
/*md source common/core/ops.c backend_for*/
/*md
::: zh
录制表的每个入口和真正的入口签名相同，它把参数按值打包（`cti_iter` 这样的结构体整个拷贝，而不是留一个指针），交给 `cti_graph_issue`。这些入口不是逐个手写的：每个算子族把它的入口在一个列表里写一次（`common/core/oplist.h` 说明列表的写法），录制表由列表生成。下面是生成一个发出计算的入口的宏：参数结构体的成员、打包、以及重放时把记录解包交给真正入口的调用函数：
:::
::: en
Each entry of the recording table has the real entry's signature; it packs the arguments by value (a struct such as the `cti_iter` is copied whole, not pointed to) and hands them to `cti_graph_issue`. The entries are not written one by one: each op family writes its entries once, in one list (`common/core/oplist.h` describes it), and the recording table is generated from the lists. Here is the macro that generates an entry that issues work: the members of its argument struct, the packing, and the call function that unpacks the record into the real entry at replay:
:::
*/
/*md source common/graph/graph_backend.c standin*/
/*md
::: zh
`cti_graph_issue` 按调用所在的流分派：在捕获流上，CPU 把调用记进列表，GPU 直接调用真正的入口，由 CUDA 的流捕获把这次 launch 记进图；在设备的默认流上，拒绝并让捕获失效（下文“捕获期间不允许做的事”）；在其他流上，立即执行，不进入图，这和 CUDA 的 thread-local 模式一致。这样一来，没有哪个算子需要知道图的存在，而新加的算子自动被录制。这个设计记在 README 的架构一节里。
:::
::: en
`cti_graph_issue` routes the call by its stream. On the capture stream the CPU appends it to the list, and a GPU calls the real entry so that CUDA's stream capture records the launch. On the device's default stream it refuses and invalidates the capture (see "What capture forbids" below). On any other stream it runs at once, outside the graph, as CUDA's thread-local mode allows. No op has to know that graphs exist, and a new op is recorded without any change. README's architecture section records this design.
:::
*/
/*md source common/graph/graph.c issue*/
static int capture(graphed *gr) {
  /* LAB BEGIN: capture one train_step on the static tensors into gr->g on the side stream, keeping its loss | stub: return -1; */
  int rc = ct_cuda_graph_capture_begin(gr->g, gr->side, NULL); // with torch.cuda.graph(g, stream=side):
  if (rc != CT_OK) return rc;
  gr->static_loss = train_step(gr->model, gr->opt, gr->static_x, gr->static_y);
  rc = ct_cuda_graph_capture_end(gr->g);
  return rc == CT_OK && gr->static_loss ? CT_OK : -1;
  /* LAB END */
}
/*md twin capture*/

static int show_capture(graphed *gr, ct_metrics *m) {
  ct_cli_section("capture");
  ct_device dev = ct_module_device(gr->model);
  int np = 0;
  ct_param **p = ct_module_parameters(gr->model, &np);
  ct_tensor *before = ct_clone(p[0]->value); // to see that capture runs nothing
  if (!before || ct_cli_synchronize(dev) != CT_OK) return -1;
  size_t a0 = ct_memory_allocated(dev), r0 = ct_memory_reserved(dev);
  if (capture(gr) != CT_OK) return -1;
  if (ct_cli_synchronize(dev) != CT_OK) return -1;
  size_t a1 = ct_memory_allocated(dev), r1 = ct_memory_reserved(dev);
  double moved = 0;
  if (max_abs_diff(before, p[0]->value, &moved) != CT_OK) return -1;
  ct_free(before);
  int64_t nodes = ct_cuda_graph_num_nodes(gr->g);
  ct_metrics_print(m, "kernels_per_step", "captured one training step: %.0f kernel calls in one graph\n", (double)nodes);
  printf("parameters after capture: %s\n", moved == 0 ? "unchanged (capture runs nothing)" : "CHANGED");
  printf("memory: allocated %.0f KiB -> %.0f KiB, reserved %.0f KiB -> %.0f KiB (the graph's private pool)\n",
         kib(a0), kib(a1), kib(r0), kib(r1));
  ct_metrics_num(m, "capture_param_change", moved);
  ct_metrics_num(m, "capture_reserved_kib", kib(r1) - kib(r0));
  return moved == 0 ? CT_OK : ct_fail(CT_ERR_VALUE, "the capture changed the parameters");
}
/*md output capture*/

/*md
::: zh
## 重放

训练循环里的一步变成两件事：把这一批数据 `copy_` 进静态输入和静态目标（它们在捕获前就做好，地址一直不变），再重放。重放的结果留在捕获时做出的张量里：损失在 `static_loss` 里，参数在原地被更新。
:::
::: en
## Replay

A step of the training loop becomes two things: `copy_` the batch into the static input and target (made before the capture, at addresses that never change), then replay. The results land in the tensors the capture made: the loss in `static_loss`, the parameters updated in place.
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

/*md
::: zh
在 CPU 上，重放就是按顺序调用录下的每个入口，不再经过调度器：
:::
::: en
On the CPU a replay calls each recorded entry in order, with no dispatcher in between:
:::
*/
/*md source common/graph/graph.c cpu_replay*/
/*md
::: zh
下面把同样的训练跑两遍：一个模型逐个调用（eager），另一个模型从同样的初始权重出发、读同样的批次、用重放训练。两边每一步的损失和最后的参数**逐位相同**：重放执行的是同样的核函数、同样的参数、同样的地址、同样的顺序，算术上什么都没变，省掉的只是主机上的工作。测试 `chapter.ch10_twin_agree` 还把重放训练出的参数和 PyTorch 用 float64 即时训练的结果对照。
:::
::: en
Below the same training runs twice: one model op by op (eager), another from the same initial weights on the same batches by replay. Every step's loss and the final parameters are **equal bit for bit**: a replay runs the same kernels with the same arguments on the same addresses in the same order. Nothing in the arithmetic changes; only the host's work is gone. The test `chapter.ch10_twin_agree` also compares the replay-trained parameters with PyTorch training eagerly in float64.
:::
*/

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
    ct_cli_exit_if_interrupted(NULL); // Ctrl-C: stop after a whole step
    ct_tensor *l = train_step(eager, opt, d->x[k % NBATCH], d->y[k % NBATCH]);
    rc = l ? ct_item(l, &le[i]) : -1;
    ct_free(l);
    if (rc == CT_OK) rc = replay_step(gr, d, k);
    if (rc == CT_OK) rc = ct_item(gr->static_loss, &lr[i]);
    if (rc == CT_OK) ct_cli_check_loss(g_cli, isfinite(le[i]) ? lr[i] : le[i], i + 1, i + 1, s->lr); // exit 1
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

现在把种子的写法原样跑一遍：先预热，然后在捕获里释放原来的静态输入，用 `ct_randn` 做一个新的（Python 里就是给 `static_input` 重新赋值），再走一步训练。捕获结束后 `static_input` 指向图里 `randn` 的输出；`copy_` 确实把数据写了进去，但重放的第一个核函数就是那个 `randn`，数据被盖掉，后面的前向看到的是随机数。

在 ct 里，录下的随机算子每次重放都产生**同样的**数（它的 Philox 偏移在捕获时就作为参数固定了），下面的输出连续两次重放的和一样就说明了这一点。PyTorch 会把生成器的状态登记到图里，每次重放推进偏移，所以那里每次得到的是新的随机数，但同样永远不是你的数据。改正的办法只有一个：静态张量在捕获**之前**做好，捕获里只读它们，数据用 `copy_` 送进去。本章的 `graphed_init` 就是这样做的，输出的最后一行是它的结果。
:::
::: en
## The seed's bug: static_input re-created inside the capture

Now the seed's version, as written: warm up, then inside the capture free the static input and make a new one with `ct_randn` (in Python, rebinding `static_input`), then a training step. After the capture `static_input` is the output of the graph's `randn`; `copy_` does write the data into it, but the first kernel of the replay is that `randn`, which overwrites the data, and the forward pass after it sees random numbers.

In ct a recorded random op produces **the same** numbers at every replay (its Philox offset is an argument fixed at capture), which the output shows as two equal sums from two replays. PyTorch registers the generator's state with the graph and advances the offset at each replay, so there every replay draws new numbers, never your data either. The fix is the only one: make the static tensors **before** the capture, only read them inside, and feed them with `copy_`. The chapter's `graphed_init` does that, and the last line of the output is its result.
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

图里的核函数在重放时才执行，所以捕获期间凡是需要“现在就有结果”的事都不行；图里的地址是固定的，所以内存只能来自图自己的池。CUDA 在流捕获期间拒绝这些调用，报错后整个捕获失效。ct 在两种设备上都**先于 CUDA** 检查它们，用同样的话报错：

| 捕获期间 | 报错 |
|---|---|
| 等设备的调用：`ct_item`（`loss.item()`）、`ct_stream_synchronize`、`ct_event_synchronize`、`ct_cuda_synchronize`、`ct_copy_to_host`、从主机内存拷贝（`ct_from_host`）、`ct_empty_cache`、`ct_any_nonfinite` | `operation not permitted when stream is capturing`（CUDA 对 `cudaErrorStreamCaptureUnsupported` 的说法） |
| 在设备的默认流（legacy stream）上做事 | `operation would make the legacy stream depend on a capturing blocking stream`（`cudaErrorStreamCaptureImplicit`） |
| 在默认流上开始捕获 | PyTorch 的原话：`CUDA graphs must be captured on a non-default stream. ...` |
| 捕获流上的内存来自别的池 | `must come from the graph's private pool` |
| Adam 的 step | PyTorch 对不可捕获优化器的原话：它的偏差修正是主机上由步数算出的标量，录下来就永远停在捕获那一步 |

每次拒绝都让捕获失效：之后在捕获流上的核函数调用也失败（`operation failed due to a previous error during capture`，CUDA 对 `cudaErrorStreamCaptureInvalidated` 的说法），`ct_cuda_graph_capture_end` 报告第一次拒绝的原因，图保持为空，运行时恢复正常。下面每个探针都开始一次捕获、录一点工作、做一件被禁止的事，然后把捕获到的错误打印出来。

形状也是图的一部分：录下的核函数带着 32 行的尺寸。最后一批不满 32 行时，它放不进静态输入，`copy_` 会报错，而图本身不受影响。办法是 `drop_last`、补齐，或者为这个形状再捕获一张图（练习 2）。
:::
::: en
## What capture forbids

A graph's kernels run at replay, so anything that needs a result *now* cannot happen during capture; a graph's addresses are fixed, so memory can only come from the graph's own pool. CUDA refuses such calls during stream capture, and the whole capture is spoiled. ct checks them on both devices **before** CUDA does, in the same words:

| during capture | error |
|---|---|
| calls that wait for the device: `ct_item` (`loss.item()`), `ct_stream_synchronize`, `ct_event_synchronize`, `ct_cuda_synchronize`, `ct_copy_to_host`, copies from host memory (`ct_from_host`), `ct_empty_cache`, `ct_any_nonfinite` | `operation not permitted when stream is capturing` (CUDA's words for `cudaErrorStreamCaptureUnsupported`) |
| work on the device's default (legacy) stream | `operation would make the legacy stream depend on a capturing blocking stream` (`cudaErrorStreamCaptureImplicit`) |
| capture started on a default stream | PyTorch's words: `CUDA graphs must be captured on a non-default stream. ...` |
| memory for the capture stream from another pool | `must come from the graph's private pool` |
| Adam's step | PyTorch's words for a non-capturable optimizer: its bias corrections are host scalars computed from the step count, and a recorded step would keep the captured step's forever |

Every refusal invalidates the capture: later kernel calls on the capture stream fail too (`operation failed due to a previous error during capture`, CUDA's words for `cudaErrorStreamCaptureInvalidated`), `ct_cuda_graph_capture_end` reports the first refusal, the graph stays empty, and the runtime works as before. Each probe below starts a capture, records a little work, does one forbidden thing and prints the error it caught.

Shapes are part of the graph too: the recorded kernels carry the 32-row sizes. A last batch of fewer rows does not fit the static input, and `copy_` says so, leaving the graph untouched. The remedies are `drop_last`, padding, or a second graph captured for that shape (exercise 2).
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
  ct_mempool_free(pool);
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
  ct_cuda_graph *g = ct_cuda_graph_create();
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

重放把结果写到捕获时的地址上，所以这些地址在图活着的时候不能分给别人。捕获期间，捕获流上的每次分配都来自图的**私有内存池**（`ct_graph_pool_handle`，即 `torch.cuda.graph_pool_handle()`）；默认池从不从它分配，它也不为默认池服务。捕获中释放的临时张量回到这个池，可以被捕获中后面的分配再用：重放按同样的顺序执行，这种复用在重放时同样安全。`capture_begin` 把这个池告诉分配器（和 PyTorch 的 `capture_begin` 一样，由捕获告诉分配器，分配器不去问图），分配器在捕获流上只认这一个池：
:::
::: en
## The private pool

A replay writes its results to the addresses of the capture, so those addresses must not go to anyone else while the graph lives. During capture every allocation for the capture stream comes from the graph's **private pool** (`ct_graph_pool_handle`, `torch.cuda.graph_pool_handle()`); the default pool never allocates from it, and it never serves the default pool. A temporary freed during the capture goes back to this pool and may serve a later allocation of the same capture: a replay runs in the same order, so that reuse is just as safe at replay. `capture_begin` tells the allocator this pool (as PyTorch's `capture_begin` does: the capture tells the allocator, the allocator never asks the graph), and for the capture stream the allocator accepts this one pool:
:::
*/
/*md source common/core/alloc.c capture_pool*/
/*md
::: zh
池比图活得久：捕获做出的张量（损失、梯度、模型为反向保存的激活值）在图释放之后可能还在用，池要等它们的最后一块内存也释放了才还给系统（`ct_mempool_release`）。下面在一张新图上看内存的来去。几张图也可以共用一个池（`ct_cuda_graph_pool(g)`，即 `g.pool()`，传给下一次捕获），这时要按捕获的顺序重放它们，因为后捕获的图可能复用了先捕获的图释放掉的内存。
:::
::: en
The pool outlives the graph: tensors the capture made (the loss, the grads, the activations the model kept for backward) may still be in use after the graph is freed, and the pool goes back to the system only when their last block is freed too (`ct_mempool_release`). Below, a new graph shows the memory coming and going. Several graphs may share one pool (`ct_cuda_graph_pool(g)`, `g.pool()`, passed to the next capture); they must then be replayed in the order they were captured, since a later capture may reuse memory an earlier one freed.
:::
*/
// A second graph of the same step, to watch its pool come and go.
static int show_pool(const settings *s, const data *d, ct_device dev, ct_metrics *m) {
  ct_cli_section("pool");
  graphed gr;
  ct_module *model = model_on(s, s->width, dev);
  if (!model || graphed_init(&gr, model, s, dev) != CT_OK || warm_up(&gr, d, s->warmup, NULL) != CT_OK)
    return -1;
  if (ct_cli_synchronize(dev) != CT_OK) return -1;
  size_t r0 = ct_memory_reserved(dev);
  int rc = capture(&gr);
  if (rc == CT_OK) rc = ct_cli_synchronize(dev);
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

最后在几种宽度上比较同一步的两种执行方式：宽度从每个核函数都很小（时间花在调度和启动上）一直到计算本身占主导。每种宽度都新建模型、预热、先计时逐个调用的步骤、再捕获并计时重放；两边每步都包括把一批数据 `copy_` 进静态张量。每个数是若干次计时（每次若干步）的中位数。

{{recorded @run}}中，逐个调用与重放的每步时间之比，在最小宽度 {{recorded timing_widths[0]}} 上是 {{recorded speedup_smallest %.2f}}，在最大宽度 {{recorded timing_widths[-1]}} 上是 {{recorded speedup_largest %.2f}}。{{if recorded speedup_smallest > 1.1 and recorded speedup_smallest > recorded speedup_largest}}重放在小宽度上更快，宽度越大优势越小，和下面的解释一致。{{elif recorded speedup_smallest > 1.1}}重放在小宽度上更快，但这次最大宽度上的比值并没有更接近 1：那一端的差别在计时噪声之内。{{else}}这次在最小宽度上重放也没有明显更快：省下的调度开销小于这台机器上的计时噪声（忙碌的机器上常见），下面说的差别要在安静的机器上才看得出来。{{end}}一步有 {{recorded kernels_per_step}} 个核函数调用，宽度不改变这个数，只改变每个调用的计算量：小宽度时省下的调度开销占了一步的大头；宽度越大，计算占的时间越多，两者之比越接近 1（在安静的机器上，两条线在右端几乎重合）。在 CPU 上，省下的只是调度器的工作（检查、广播、分配、引用计数），核函数还是一个一个地调用；在 GPU 上，重放还把几百次 launch 合成一次提交。本章为 H100 定的目标是在受启动开销限制的一端，逐个调用与重放的时间之比至少是 2；{{if recorded device is cuda and recorded speedup_smallest >= 2}}这次的 GPU 运行达到了这个目标。{{elif recorded device is cuda}}这次的 GPU 运行没有达到这个目标。{{end}}这一点只能由 GPU 上的运行来验证：`tools/bench` 在 GPU 上报告这个比值，有 GPU 录制的输出时会显示在本节输出旁边。
:::
::: en
## Timing: eager against replay

Last, the two ways of running one step are compared over several widths, from widths where every kernel is tiny (the time goes to dispatch and launches) to widths where the arithmetic dominates. For each width a model is built and warmed up, its eager steps are timed, then it is captured and its replays are timed; both kinds of step include the `copy_` of a batch into the static tensors. Each figure is the median of several timings of several steps.

In {{recorded @run}}, eager's time per step over replay's was {{recorded speedup_smallest %.2f}} at the smallest width ({{recorded timing_widths[0]}}) and {{recorded speedup_largest %.2f}} at the largest ({{recorded timing_widths[-1]}}). {{if recorded speedup_smallest > 1.1 and recorded speedup_smallest > recorded speedup_largest}}Replay is faster at small widths, and its lead shrinks as the width grows, as explained below.{{elif recorded speedup_smallest > 1.1}}Replay is faster at small widths, but this time the ratio at the largest width is not nearer 1: the difference at that end is within the timing noise.{{else}}This time replay is not clearly faster even at the smallest width: the dispatch work it saves is smaller than the timing noise on this machine (common on a busy one), and the difference explained below shows only on a quiet machine.{{end}} A step has {{recorded kernels_per_step}} kernel calls whatever the width; the width only changes the work of each. At small widths the dispatch overhead a replay saves is most of the step; the wider the layers, the more of the time goes to arithmetic and the nearer the ratio comes to 1 (on a quiet machine the two lines nearly meet at the right). On the CPU what is saved is only the dispatcher's work (checks, broadcasting, allocation, reference counts), and the kernels are still called one by one; on a GPU a replay also turns hundreds of launches into one submission. The goal set for an H100 is a ratio of eager's time to replay's of at least 2 at the launch-bound end.{{if recorded device is cuda and recorded speedup_smallest >= 2}} This GPU run meets it.{{elif recorded device is cuda}} This GPU run does not meet it.{{end}} Only a run on a GPU can verify it: `tools/bench` reports the ratio there, and a GPU-recorded output, where there is one, is shown beside this section's.
:::
*/
// Seconds per step, the median of `reps` timings of `n` steps each; eager
// steps (copy_ into the static tensors, train_step) when eager, else replays.
static int time_steps(graphed *gr, const data *d, bool eager, int n, int reps, double *out) {
  ct_device dev = ct_module_device(gr->model);
  double t[16];
  int rc = ct_set_stream(gr->side);
  for (int r = 0; rc == CT_OK && r < reps && r < 16; ++r) {
    rc = ct_cli_synchronize(dev);
    double t0 = ct_cli_seconds();
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
    if (rc == CT_OK) rc = ct_cli_synchronize(dev);
    t[r] = (ct_cli_seconds() - t0) / n;
  }
  if (ct_set_stream(ct_default_stream(dev)) != CT_OK) rc = -1;
  if (rc == CT_OK) rc = ct_stream_wait_stream(ct_default_stream(dev), gr->side); // before the frees on it
  *out = rc == CT_OK ? ct_cli_median(t, reps < 16 ? reps : 16) : NAN;
  return rc;
}

static int show_timing(const settings *s, ct_device dev, bool quick, ct_metrics *m) {
  ct_cli_section("timing");
  static const int64_t cpu_widths[] = {16, 64, 256, 1024}, cpu_quick[] = {16, 128};
  static const int64_t gpu_widths[] = {16, 64, 256, 1024, 4096, 8192}, gpu_quick[] = {16, 256, 2048};
  const int64_t *w = dev.type == CT_CUDA ? (quick ? gpu_quick : gpu_widths) : (quick ? cpu_quick : cpu_widths);
  int nw = dev.type == CT_CUDA ? (quick ? 3 : 6) : (quick ? 2 : 4);
  int n = quick ? 4 : (dev.type == CT_CUDA ? 20 : 10), reps = quick ? 3 : (dev.type == CT_CUDA ? 7 : 5);
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
/*md
::: zh
{{fig steps}} 画出两种做法每一步的时间随隐藏层宽度的变化：宽度小时每个核函数都很小，一步的时间主要是启动开销，这正是重放省掉的部分（{{fig capture}}）；宽度大时计算本身占了上风。
:::
::: en
{{fig steps}} plots both ways' time per step against the hidden width: at small widths every kernel is tiny and a step is mostly launch overhead, the part replay skips ({{fig capture}}); at large widths the computation itself dominates.
:::
*/
/*md figure steps*/

/*md
::: zh
## main：把各部分连起来

`main` 做出数据和两个初始权重相同的模型（一个用于逐个调用的对照），然后依次：预热、捕获、重放并与逐个调用对照、种子的错误、被禁止的操作、私有内存池、计时。`--save-init` 写出初始权重和数据，`--save` 写出重放训练后的参数，供 PyTorch 孪生程序对照。
:::
::: en
## main: putting the parts together

`main` makes the data and two models with the same initial weights (one for the eager comparison), then runs in order: warm-up, capture, replay against eager, the seed's bug, the forbidden operations, the private pool, timing. `--save-init` writes the initial weights and the data and `--save` the replay-trained parameters, for the PyTorch twin to compare.
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
  g_cli = &cli;
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
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded
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

1. 去掉预热：在 `main` 里把 `show_warm_up` 删掉，让捕获的是优化器的第一步。重放的损失还和逐个调用的相同吗？读 `common/optim/optim.c` 里 SGD 的 `init_buf`，解释为什么动量消失了，以及为什么 PyTorch 也要求先预热。
2. 最后一批不满：把 `--batch` 设成 32，但让数据的最后一批只有 16 行。为 16 行再捕获一张图，用 `ct_cuda_graph_pool(g)` 让它和第一张图共用内存池，并按捕获的顺序重放。两张图一共多占了多少内存？
3. 在模型里加一层 `ct_nn_dropout(0.1)` 再捕获。连续重放两次，掩码一样吗？PyTorch 为什么不一样？要让 ct 的重放每次抽新的随机数，随机核函数的偏移应该放在哪里？
4. 把 `ct_item(loss)` 写进 `train_step` 里面（很多训练循环都在每步打印损失）。捕获时报什么错？改成在重放之后读 `static_loss`。
5. 用 `--depth 1` 和 `--depth 8` 各跑一次计时。每步的核函数数怎样变化？最小宽度上的加速比又怎样变化，为什么？
:::
::: en
## Exercises

1. Drop the warm-up: delete `show_warm_up` from `main`, so that the capture records the optimizer's first step. Are the replayed losses still equal to the eager ones? Read SGD's `init_buf` in `common/optim/optim.c` and explain why the momentum is gone, and why PyTorch also asks for a warm-up.
2. A short last batch: keep `--batch 32` but give the data a last batch of 16 rows. Capture a second graph for 16 rows that shares the first graph's pool through `ct_cuda_graph_pool(g)`, and replay the two in capture order. How much more memory do the two graphs hold together?
3. Add a `ct_nn_dropout(0.1)` layer to the model and capture it. Are the masks of two replays in a row the same? Why are PyTorch's different? Where would the random kernels' offset have to live for ct's replays to draw new numbers each time?
4. Put `ct_item(loss)` inside `train_step` (many training loops print the loss at every step). What error does the capture give? Read `static_loss` after the replay instead.
5. Time `--depth 1` and `--depth 8`. How does the number of kernels per step change, and how does the speed-up at the smallest width change? Why?
:::
*/
