// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 9 章　自动混合精度：autocast 与 GradScaler

种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是《PyTorch GPU 加速》）给了两段混合精度的代码。第一段是“最佳实践”：

```python
from torch.cuda.amp import autocast, GradScaler
scaler = GradScaler()
with autocast():
    output = model(x)
    loss = nn.CrossEntropyLoss()(output, y)
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
```

第二段是“手动混合精度”：`model = model.half()`，再喂一个 `float16` 的输入。种子还在别处提醒“模型和数据的数据类型要匹配”。

先说名字。`torch.cuda.amp.autocast` 和 `torch.cuda.amp.GradScaler` 是旧写法：PyTorch 2.4 起它们会发出弃用警告（FutureWarning），现在的写法是 `torch.amp.autocast("cuda", dtype=...)` 和 `torch.amp.GradScaler("cuda")`，设备类型作为参数，同一套接口也管 CPU（`torch.amp.autocast("cpu", dtype=torch.bfloat16)`）。本章的正文和孪生程序都用新写法；孪生程序在只有旧接口的 PyTorch（Debian 的 1.13）上退回旧写法。

本章用 C 把这几行背后的事情做出来：`autocast` 是一个**每线程、每种设备各一份**的状态，模块在做矩阵乘和卷积时查它，决定在哪种精度里算；`GradScaler` 把损失乘上一个大数，让 float16 里会变成零的小梯度活下来，优化器更新之前再除回去，遇到 inf/NaN 就跳过这一步并把倍数减半。运行时的 API 在 `common/include/amp.h`。

```sh
cd build && ninja ch09_amp
./ch09                  # 有 GPU 用 GPU（float16 + GradScaler，bfloat16），否则用 CPU
./ch09 --device cpu     # CPU 上 bfloat16 走 oneDNN 和 AVX-512 BF16 指令
./ch09 --quick          # 几秒钟
```
:::
::: en
# Chapter 9. Automatic mixed precision: autocast and GradScaler

One seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “PyTorch GPU acceleration”) gives two pieces of mixed-precision code. The first is its "best practice":

```python
from torch.cuda.amp import autocast, GradScaler
scaler = GradScaler()
with autocast():
    output = model(x)
    loss = nn.CrossEntropyLoss()(output, y)
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
```

The second is "manual mixed precision": `model = model.half()`, fed a `float16` input. Elsewhere a seed warns that "the model's and the data's types must match".

First, the names. `torch.cuda.amp.autocast` and `torch.cuda.amp.GradScaler` are the old spelling: since PyTorch 2.4 they raise a deprecation warning (FutureWarning); the current names are `torch.amp.autocast("cuda", dtype=...)` and `torch.amp.GradScaler("cuda")`, with the device type as an argument, and the same interface serves the CPU (`torch.amp.autocast("cpu", dtype=torch.bfloat16)`). The prose and the twin use the current names; on a PyTorch that has only the old ones (Debian's 1.13) the twin falls back to them.

This chapter builds what those lines do, in C. `autocast` is a state **per thread and per device type** that the modules consult when they multiply or convolve, to choose the precision they compute in. `GradScaler` multiplies the loss by a large number so that small gradients that float16 would flush to zero survive, divides it back out before the optimizer sees them, and on an inf or NaN skips the step and halves the factor. The runtime's API is `common/include/amp.h`.

```sh
cd build && ninja ch09_amp
./ch09                  # the GPU if there is one (float16 + GradScaler, bfloat16), else the CPU
./ch09 --device cpu     # on the CPU, bfloat16 runs through oneDNN and the AVX-512 BF16 instructions
./ch09 --quick          # seconds
```
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <errno.h>
#include <inttypes.h>
#include <limits.h> // PATH_MAX
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct.h"

static const ct_cli *g_cli; // for ct_cli_check_loss in the training loop

typedef struct settings {
  long steps, batch, hidden, scale_steps, half_steps;
  double lr;
  const char *out_dir;
} settings;

static const char *tname(ct_dtype dt) { return ct_dtype_torch_name(dt); }

// A value of a one-element tensor (waits for the device); NAN on failure.
static double item(const ct_tensor *t) {
  double v = NAN;
  if (t) ct_item(t, &v);
  return v;
}
/*md show*/

/*md
::: zh
## 三种格式

混合精度的两个问题，都能从格式本身看出来。float16 只有 5 位指数：最大能表示 65504，最小的正规数约 6e-5，再往下是精度越来越差的次正规数，小于最小次正规数一半的值直接变成 0。bfloat16 反过来：它和 float32 一样有 8 位指数，范围一样大，但尾数只有 7 位，相邻两个数相差约 0.8%。下表里的数都是运行时从各格式的位模式和转换函数算出来的；后三行把三个值分别存进三种格式。
:::
::: en
## Three formats

Both problems of mixed precision can be read off the formats. float16 has 5 exponent bits: its largest value is 65504, its smallest normal about 6e-5, below that come subnormals with fewer and fewer significant bits, and anything under half the smallest subnormal becomes 0. bfloat16 is the other way round: it has float32's 8 exponent bits and so its range, but only 7 mantissa bits, so neighbouring values are about 0.8% apart. The table below is computed by the runtime from each format's bit patterns and conversions; the last three lines store three values in each format.
:::
*/
// x stored in dt and read back (through ct_to_dtype, as a tensor would be).
static double stored(double x, ct_dtype dt) {
  ct_tensor *a = ct_full(CT_SHAPE(1), x, CT_F64, ct_device_cpu());
  ct_tensor *b = a ? ct_to_dtype(a, CT_F32) : NULL; // the value as float32 first, as PyTorch's x.half() sees it
  ct_tensor *c = b ? ct_to_dtype(b, dt) : NULL;
  double v = item(c);
  ct_free(a), ct_free(b), ct_free(c);
  return v;
}

static void show_formats(ct_metrics *m) {
  ct_cli_section("formats");
  // largest, smallest normal, smallest subnormal, eps from the bit patterns
  const double f16[4] = {ct_f16_to_f32(0x7bff), ct_f16_to_f32(0x0400), ct_f16_to_f32(0x0001),
                         ct_f16_to_f32(0x3c01) - 1.0};
  const double bf16[4] = {ct_bf16_to_f32(0x7f7f), ct_bf16_to_f32(0x0080), ct_bf16_to_f32(0x0001),
                          ct_bf16_to_f32(0x3f81) - 1.0};
  const double f32[4] = {3.4028234663852886e38, 1.1754943508222875e-38, 1.401298464324817e-45,
                         1.1920928955078125e-07};
  printf("%-9s %4s %8s %8s %11s %11s %11s %11s\n", "format", "bits", "exponent", "mantissa", "largest",
         "min normal", "min subnorm", "eps");
  printf("%-9s %4d %8d %8d %11.4g %11.4g %11.4g %11.4g\n", "float32", 32, 8, 23, f32[0], f32[1], f32[2], f32[3]);
  printf("%-9s %4d %8d %8d %11.4g %11.4g %11.4g %11.4g\n", "float16", 16, 5, 10, f16[0], f16[1], f16[2], f16[3]);
  printf("%-9s %4d %8d %8d %11.4g %11.4g %11.4g %11.4g\n", "bfloat16", 16, 8, 7, bf16[0], bf16[1], bf16[2], bf16[3]);
  const double probes[3] = {1.0 + ldexp(1.0, -11), 70000.0, 1e-8};
  const char *labels[3] = {"1 + 2^-11", "70000", "1e-8"};
  for (int i = 0; i < 3; ++i)
    printf("%-9s stored: float32 %.12g, float16 %.6g, bfloat16 %.6g\n", labels[i], stored(probes[i], CT_F32),
           stored(probes[i], CT_F16), stored(probes[i], CT_BF16));
  ct_metrics_num(m, "f16_max", f16[0]);
  ct_metrics_num(m, "f16_min_subnormal", f16[2]);
  ct_metrics_num(m, "bf16_eps", bf16[3]);
}
/*md output formats*/

/*md
::: zh
## “数据类型要匹配”：一个 float16 输入和一个 float32 模型

种子说模型和数据的类型要一致。不一致时会发生什么？下面把一个 float16 的批次喂给一个 float32 的 `Linear`：矩阵乘要求两个操作数类型相同，报错，报错信息用 PyTorch 的措辞，由程序接住并打印。改法有两种：把输入变回 float32（种子的建议），或者在 autocast 里运行——autocast 会把两个操作数都转成它的低精度类型，输出也是那个类型。
:::
::: en
## "Match the data types": a float16 input and a float32 model

A seed says the model's and the data's types must match. What happens when they do not? Below, a float16 batch goes into a float32 `Linear`: a matrix product needs both operands of one type, so it fails, with PyTorch's wording, and the program catches and prints the error. There are two fixes: turn the input back into float32 (the seed's advice), or run under autocast, which casts both operands to its lower precision and returns that type.
:::
*/
static int show_mismatch(ct_device dev, ct_dtype lowp, ct_metrics *m) {
  ct_cli_section("mismatch");
  ct_module *model = ct_nn_linear(16, 4, true);
  ct_tensor *x32 = ct_randn(CT_SHAPE(8, 16), CT_F32, dev);
  ct_tensor *x16 = x32 ? ct_to_dtype(x32, CT_F16) : NULL; // x = x.half()
  if (!model || !x16 || ct_module_to(model, dev) != CT_OK) return -1;
  printf("x.dtype = %s, model weight dtype = %s\n", tname(CT_F16), tname(CT_F32));
  ct_tensor *y = ct_module_forward(model, x16);
  int caught = y == NULL;
  printf("model(x) fails: %s\n", caught ? ct_last_error() : "(no error: unexpected)");
  ct_metrics_str(m, "mismatch_error", caught ? ct_last_error() : "");
  ct_free(y);
  ct_tensor *xf = ct_to_dtype(x16, CT_F32); // fix 1: x.float()
  y = xf ? ct_module_forward(model, xf) : NULL;
  if (!y) return -1;
  printf("fix 1, the seed's: model(x.float()) -> %s\n", tname(ct_dtype_of(y)));
  ct_free(y);
  ct_autocast_enter(dev.type, lowp, true); // fix 2: with torch.amp.autocast(device_type, dtype=lowp):
  y = ct_module_forward(model, x16);
  ct_autocast_exit();
  if (!y) return -1;
  printf("fix 2: under autocast(%s) model(x) -> %s\n", tname(lowp), tname(ct_dtype_of(y)));
  ct_free(y), ct_free(xf), ct_free(x16), ct_free(x32);
  ct_module_free(model);
  return caught ? CT_OK : ct_fail(CT_ERR_VALUE, "ch09: the dtype mismatch was not reported");
}
/*md output mismatch*/
/*md twin mismatch*/

/*md
::: zh
## autocast 的规则

PyTorch 的 autocast 按算子分三类：矩阵乘、卷积这类**在低精度里算**（float32 累加）；softmax、各种损失、求和这类**在 float32 里算**；其余的（ReLU、池化、变形）**跟着输入的类型走**。批归一化是个特例：它接受低精度输入，但均值、方差和滑动平均都在 float32 里算，输出和输入同类型。参数始终是 float32，叫作“主权重”（master weights）；梯度也是 float32。

这几张列表**因设备而异**。上面说的是 CUDA 的列表（PyTorch 源码 `aten/src/ATen/autocast_mode.cpp` 里注册给 AutocastCUDA 的那些）：softmax、log_softmax、layer_norm、sum 和各种损失都在 float32 里算。PyTorch 2.x 给 CPU 的列表（同一文件里的 AutocastCPU）另成一套：低精度一类大致相同（conv、linear、matmul/mm/bmm/baddbmm，还有 `scaled_dot_product_attention`）；float32 一类是各种损失（cross_entropy、nll_loss、mse_loss……）和一些池化、FFT、线性代数运算，**没有** softmax、log_softmax、sum 和 layer_norm：在 CPU 上它们跟着输入走，bfloat16 进、bfloat16 出。本章的模型（卷积、批归一化、求平均、Linear、交叉熵）两套列表给出同样的类型；带 softmax 和 LayerNorm 的模型（[第 14 章](chapter:ch14)的 GPT）就不同了。ct 和 PyTorch 一样按设备选列表：CPU 上的 autocast 用 CPU 的列表，CUDA 上的用 CUDA 的（`common/amp/autocast.c` 每个算子一行、每种设备一列；`unit.autocast_lists` 拿 PyTorch 2.x 实际给出的类型逐行核对）。所以在 CPU 上，ct 的 softmax 和 LayerNorm 在 autocast 下跟着输入走：bfloat16 进、bfloat16 出（LayerNorm 的参数仍是 float32，内部在 float32 里算，结果舍入一次）。和 Debian 的 PyTorch 1.13 比，这些算子在 CPU 上的规则没变（1.13 的 softmax 在 CPU 上也跟着输入走），变的是：`scaled_dot_product_attention` 是 2.x 新加的，在低精度列表上；bfloat16 输入配 float32 参数的 layer_norm 在 2.x 里能算（1.13 在这里报错 "expected scalar type BFloat16 but found Float"）。本章的模型两套列表给出同样的类型，所以本章在 CPU 上的数不变。

ct 没有自动求导的计算图，转换放在哪里？放在模块里。一次转换有它的反向：前向把 float32 的权重转成 float16，反向就要把 float16 的权重梯度加回 float32 的 `.grad`；前向把输入转成 float16，反向就要把 dx 转回输入原来的类型。只有同时拥有前向和反向的东西才能把这两件事都做对，在 ct 里那就是模块（`common/nn/nn_linear.c`、`nn_conv.c`）。所以 `Linear` 和 `Conv2d` 在前向开头查一次 autocast 的算子表（`common/amp/autocast.c`，每个算子一行，照 PyTorch 的列表写），记住算的精度和转换后的权重，反向照着做。损失函数遇到低精度输入就先转成 float32 再算，返回 float32 的损失和梯度。

下面用种子“最佳实践”里的模型（Conv2d(3, 64, 3)、BatchNorm2d、按空间求平均、Linear(64, 10)）跑一步，用前向钩子记录每一层输出的类型。
:::
::: en
## The rules of autocast

PyTorch's autocast sorts ops into three lists: matrix products and convolutions **compute in the lower precision** (with float32 accumulation); softmax, the losses and sums **compute in float32**; the rest (ReLU, pooling, reshaping) **follow their input's type**. Batch norm is a special case: it takes a low-precision input, but its means, variances and running averages are computed in float32, and its output has the input's type. Parameters stay float32, the "master weights"; so do their gradients.

These lists **differ by device**. The ones above are CUDA's (those registered for AutocastCUDA in PyTorch's `aten/src/ATen/autocast_mode.cpp`): softmax, log_softmax, layer_norm, sum and the losses compute in float32. PyTorch 2.x's lists for the CPU (AutocastCPU, in the same file) are a set of their own: the lower-precision list is much the same (conv, linear, matmul/mm/bmm/baddbmm, and `scaled_dot_product_attention`); the float32 list holds the losses (cross_entropy, nll_loss, mse_loss, ...) and some pooling, FFT and linear-algebra ops, and **not** softmax, log_softmax, sum or layer_norm: on the CPU those follow their input, bfloat16 in, bfloat16 out. This chapter's model (convolution, batch norm, a mean, Linear, cross-entropy) gets the same dtypes from both sets; a model with softmax and LayerNorm ([chapter 14](chapter:ch14)'s GPT) does not. ct picks the lists by device as PyTorch does: autocast on the CPU follows the CPU lists, on CUDA the CUDA lists (`common/amp/autocast.c`, one row per op, one column per device type; `unit.autocast_lists` checks every row against the dtypes PyTorch 2.x actually answers). So on the CPU, ct's softmax and LayerNorm follow their input under autocast: bfloat16 in, bfloat16 out (LayerNorm's parameters stay float32; it computes in float32 and rounds its result once). Compared with Debian's PyTorch 1.13, the CPU rules for these ops are the same (1.13's softmax follows its input on the CPU too); what changed: `scaled_dot_product_attention` is new in 2.x and on the lower-precision list, and a layer_norm with bfloat16 input and float32 weight runs in 2.x (1.13 fails there with "expected scalar type BFloat16 but found Float"). This chapter's model gets the same dtypes from both sets, so its CPU numbers do not change.

ct has no autograd graph, so where do the casts go? Into the modules. A cast has a backward: if the forward casts the float32 weight to float16, the backward must add the float16 weight gradient into the float32 `.grad`; if the forward casts the input to float16, the backward must hand dx back in the input's own type. Only something that owns both the forward and the backward can do both, and in ct that is the module (`common/nn/nn_linear.c`, `nn_conv.c`). So `Linear` and `Conv2d` read the autocast op table once at the start of their forward (`common/amp/autocast.c`, one row per op, written from PyTorch's lists), remember the precision and the cast weight, and their backward follows. A loss given low-precision input widens it to float32 first and returns a float32 loss and gradient.

Below, the model of the seed's best practice (Conv2d(3, 64, 3), BatchNorm2d, a mean over the pixels, Linear(64, 10)) takes one step, and a forward hook records each layer's output type.
:::
*/
/*md
::: zh
{{fig casts}} 把这些规则放进一个两层的块里看。参数一直是 float32。`linear` 在低精度列表上，所以它的输入和参数在入口处转成 float16（↓），结果是 float16；`relu` 不在任何列表里，沿用输入的 float16；损失 `cross_entropy` 在 CUDA 的 float32 列表上，logits 在入口处转回 float32（↑）再算 `log_softmax` 和求和。CPU 上的 autocast 用 bfloat16，它的列表不同：`log_softmax` 之类在 CPU 上没有 float32 规则。
:::
::: en
{{fig casts}} puts these rules into a two-layer block. The parameters stay float32 throughout. `linear` is on the lower-precision list, so its input and parameters are cast to float16 on entry (↓) and its result is float16; `relu` is on no list and keeps its input's float16; the loss, `cross_entropy`, is on CUDA's float32 list, so the logits are cast back to float32 on entry (↑) before `log_softmax` and the sum. CPU autocast uses bfloat16 and other lists: there `log_softmax` and the like have no float32 rule.
:::
*/
/*md figure casts: autocast（CUDA 的列表）在一个块里的转换点：↓ 转成 float16，↑ 转回 float32 | Where autocast (the CUDA lists) casts inside one block: ↓ to float16, ↑ back to float32*/
// The seed's Model: conv1 -> bn1 -> x.mean(dim=[2, 3]) -> fc, as a
// Sequential; children (may be NULL) receives its five layers.
static ct_module *seed_model(ct_module **children) {
  ct_module *mods[5] = {ct_nn_conv2d(3, 64, 3, 1, 0, true), ct_nn_batchnorm2d(64, 1e-5, 0.1),
                        ct_nn_adaptive_avgpool2d(1), ct_nn_flatten(), ct_nn_linear(64, 10, true)};
  for (int i = 0; i < 5; ++i)
    if (!mods[i]) return NULL;
  if (children) memcpy(children, mods, sizeof mods);
  return ct_nn_sequential(5, mods);
}

typedef struct dtype_log {
  char kind[32];
  ct_dtype dt;
} dtype_log;

// The forward hook: the layer's kind and its output's dtype.
static void log_dtype(ct_module *mod, const ct_tensor *in, const ct_tensor *out, void *ctx) {
  (void)in;
  dtype_log *log = ctx;
  log->dt = ct_dtype_of(out);
  char *s = ct_module_str(mod); // "Conv2d(3, 64, ...)": the kind is what comes before '('
  if (s) snprintf(log->kind, sizeof log->kind, "%.*s", (int)strcspn(s, "("), s);
  free(s);
}

static int show_autocast(ct_device dev, ct_dtype lowp, ct_metrics *m) {
  ct_cli_section("autocast");
  ct_module *layer[5];
  ct_module *model = seed_model(layer);
  if (!model || ct_module_to(model, dev) != CT_OK) return -1;
  dtype_log logs[5];
  memset(logs, 0, sizeof logs);
  for (int i = 0; i < 5; ++i) ct_module_register_forward_hook(layer[i], log_dtype, &logs[i]);
  ct_tensor *x = ct_randn(CT_SHAPE(8, 3, 16, 16), CT_F32, dev);
  const int64_t labels[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  ct_tensor *y = ct_from_host(labels, CT_SHAPE(8), CT_I64, dev);
  if (!x || !y) return -1;
  ct_autocast_enter(dev.type, lowp, true); // with torch.amp.autocast(device_type, dtype=lowp):
  ct_tensor *out = ct_module_forward(model, x);  //     output = model(x)
  ct_tensor *grad = NULL;
  ct_tensor *loss = out ? ct_cross_entropy_loss(out, y, &grad) : NULL; // loss = criterion(output, y)
  ct_autocast_exit();
  if (!loss || ct_module_backward_params(model, grad) != CT_OK) return -1; // loss.backward()
  printf("%-24s %s\n", "layer", "output dtype");
  double dts[6];
  for (int i = 0; i < 5; ++i) {
    printf("%d %-22s %s\n", i, logs[i].kind, tname(logs[i].dt));
    dts[i] = logs[i].dt;
  }
  printf("%-24s %s\n", "loss (cross_entropy)", tname(ct_dtype_of(loss)));
  dts[5] = ct_dtype_of(loss);
  int np = 0;
  ct_param **ps = ct_module_parameters(model, &np);
  bool master = true;
  for (int i = 0; i < np; ++i)
    master = master && ct_dtype_of(ps[i]->value) == CT_F32 && ct_dtype_of(ps[i]->grad) == CT_F32;
  printf("parameters and their grads: %s\n", master ? "torch.float32 (master weights)" : "NOT float32");
  ct_metrics_series(m, "autocast_dtypes", dts, 6);
  ct_metrics_num(m, "master_weights_f32", master);
  ct_free(x), ct_free(y), ct_free(out), ct_free(grad), ct_free(loss);
  ct_module_free(model);
  return CT_OK;
}
/*md output autocast*/
/*md twin autocast*/

/*md
::: zh
## 一步训练：种子的“最佳实践”循环

下面是本章所有训练共用的一步，逐行对应种子的循环。它对三种精度都一样：float32 时 autocast 关着（`enabled=false`），bfloat16 和 float16 时开着；GradScaler 只在 float16 时启用——bfloat16 的指数和 float32 一样宽，不会下溢，PyTorch 的惯用写法就是 `GradScaler("cuda", enabled=use_fp16)`，关掉的 scaler 什么都不做。

`scaler.scale(loss).backward()` 在 ct 里怎么写？反向传播从放大后的损失开始，第一步得到的梯度就是 `scale × dL/dlogits`；ct 的损失函数直接交回 `dL/dlogits`，所以要放大的就是它。`scale` 是设备上的一个 float32 张量，乘法在设备上做，主机不必知道它的值。
:::
::: en
## One step: the seed's best-practice loop

Here is the one step every training run of this chapter uses, line for line the seed's loop. It is the same for all three precisions: for float32 autocast is off (`enabled=false`), for bfloat16 and float16 it is on; the GradScaler is enabled only for float16, because bfloat16 has float32's exponent range and does not underflow. PyTorch's idiom is `GradScaler("cuda", enabled=use_fp16)`, and a disabled scaler does nothing.

How is `scaler.scale(loss).backward()` written in ct? Backward starts from the scaled loss, so its first gradient is `scale × dL/dlogits`; ct's losses hand back `dL/dlogits` directly, and that is what gets scaled. `scale` is a float32 tensor on the device and the product is taken there: the host never needs its value.
:::
*/
// One iteration; returns the loss (a new float32 tensor on the device, not
// read back), or NULL with the runtime's error.
static ct_tensor *amp_step(ct_module *model, ct_optimizer *opt, ct_grad_scaler *scaler, const ct_tensor *x,
                           const ct_tensor *y, ct_dtype dt, double max_norm) {
  ct_tensor *out = NULL, *dlogits = NULL, *loss = NULL, *g = NULL;
  int rc = -1;
  /* LAB BEGIN: zero the grads; forward and loss under autocast (dt); backward the scaled dlogits; if max_norm > 0, unscale_ then clip; the scaler's step, then its update (rc: the first failure) */
  const ct_device_type type = ct_device_of(x).type;
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL;       // optimizer.zero_grad()
  ct_autocast_enter(type, dt == CT_F32 ? ct_get_autocast_dtype(type) : dt, dt != CT_F32);
  out = ct_module_forward(model, x);                                 //   output = model(x)
  loss = out ? ct_cross_entropy_loss(out, y, &dlogits) : NULL;       //   loss = criterion(output, y)
  ct_autocast_exit();
  g = loss ? ct_grad_scaler_scale(scaler, dlogits) : NULL;           // scaler.scale(loss).backward()
  rc = g ? ct_module_backward_params(model, g) : -1;
  if (rc == CT_OK && max_norm > 0) {
    int np = 0;
    ct_param **ps = ct_optimizer_params(opt, &np);
    rc = ct_grad_scaler_unscale_(scaler, opt);                        // scaler.unscale_(optimizer)
    if (rc == CT_OK) rc = ct_clip_grad_norm_(ps, np, max_norm, NULL); // clip_grad_norm_(..., 1.0)
  }
  if (rc == CT_OK) rc = ct_grad_scaler_step(scaler, opt);             // scaler.step(optimizer)
  if (rc == CT_OK) rc = ct_grad_scaler_update(scaler);                // scaler.update()
  /* LAB END */
  ct_free(out), ct_free(dlogits), ct_free(g);
  if (rc != CT_OK) ct_free(loss), loss = NULL;
  return loss;
}
/*md twin amp_step*/

/*md hide*/
// ---- the two workloads ------------------------------------------------------------------------
// A synthetic classification task: the labels are a fixed random teacher's
// argmax, so the task is learnable and the same for every precision.
typedef struct task {
  ct_tensor *x, *y; // (n, ...) float32 inputs, (n,) int64 labels, on the device
  int64_t n;
} task;

#define CLASSES 10

// Teacher scores of features f (n, k): f @ T for a fixed random T (k, 10).
static ct_tensor *teacher_labels(const ct_tensor *f) {
  ct_tensor *t = ct_randn(CT_SHAPE(ct_size(f, 1), CLASSES), CT_F32, ct_device_of(f));
  ct_tensor *s = t ? ct_mm(f, t) : NULL;
  ct_tensor *y = s ? ct_argmax_dim(s, 1, false) : NULL;
  ct_free(t), ct_free(s);
  return y;
}

// The GEMM-heavy task: x (n, feat) ~ N(0, 1).
static int make_mlp_task(ct_device dev, int64_t n, int64_t feat, task *t) {
  t->n = n;
  t->x = ct_randn(CT_SHAPE(n, feat), CT_F32, dev);
  t->y = t->x ? teacher_labels(t->x) : NULL;
  return t->y ? CT_OK : (int)ct_last_status();
}

// The seed's image task: x (n, 3, hw, hw); the teacher sees each image's
// channel means.
static int make_image_task(ct_device dev, int64_t n, int64_t hw, task *t) {
  t->n = n;
  t->x = ct_randn(CT_SHAPE(n, 3, hw, hw), CT_F32, dev);
  ct_tensor *x3 = t->x ? ct_reshape(t->x, CT_SHAPE(n, 3, hw * hw)) : NULL;
  ct_tensor *f = x3 ? ct_mean_dim(x3, 2, false) : NULL;
  t->y = f ? teacher_labels(f) : NULL;
  ct_free(x3), ct_free(f);
  return t->y ? CT_OK : (int)ct_last_status();
}

static void task_free(task *t) { ct_free(t->x), ct_free(t->y); }

// Batch k of the task (rows wrap around), as views.
static void batch_of(const task *t, long k, long batch, ct_tensor **x, ct_tensor **y) {
  const int64_t per = t->n / batch, b0 = (k % per) * batch;
  *x = ct_narrow(t->x, 0, b0, batch);
  *y = ct_narrow(t->y, 0, b0, batch);
}

// The GEMM-heavy model: Linear(feat, h) ReLU Linear(h, h) ReLU Linear(h, 10).
static ct_module *mlp_model(int64_t feat, int64_t h) {
  ct_module *mods[5] = {ct_nn_linear(feat, h, true), ct_nn_relu(), ct_nn_linear(h, h, true), ct_nn_relu(),
                        ct_nn_linear(h, CLASSES, true)};
  for (int i = 0; i < 5; ++i)
    if (!mods[i]) {
      for (int j = 0; j < 5; ++j) ct_module_free(mods[j]);
      return NULL;
    }
  return ct_nn_sequential(5, mods);
}

// A model built from the same seed every time, on dev.
static ct_module *fresh(ct_module *(*build)(const settings *), const settings *s, ct_device dev) {
  ct_manual_seed(7);
  ct_module *m = build(s);
  if (m && ct_module_to(m, dev) != CT_OK) ct_module_free(m), m = NULL;
  return m;
}

static ct_module *build_mlp(const settings *s) { return mlp_model(s->hidden, s->hidden); }
static ct_module *build_seed(const settings *s) { (void)s; return seed_model(NULL); }

// Copies of every parameter's grad (or value), as host doubles.
static double **snapshot(ct_param **ps, int n, bool grads) {
  double **v = calloc((size_t)n, sizeof *v);
  if (!v) return NULL;
  for (int i = 0; i < n; ++i) {
    const ct_tensor *t = grads ? ps[i]->grad : ps[i]->value;
    int64_t k = t ? ct_numel(t) : 0;
    v[i] = malloc((size_t)(k ? k : 1) * sizeof(double));
    ct_tensor *c = t ? ct_to(t, ct_device_cpu(), CT_F64, false) : NULL;
    if (!v[i] || (t && (!c || ct_copy_to_host(c, v[i], (size_t)k * sizeof(double)) != CT_OK))) {
      ct_free(c);
      for (int j = 0; j <= i; ++j) free(v[j]);
      free(v);
      return NULL;
    }
    if (!t) v[i][0] = 0;
    ct_free(c);
  }
  return v;
}

static void snapshot_free(double **v, int n) {
  if (!v) return;
  for (int i = 0; i < n; ++i) free(v[i]);
  free(v);
}
/*md show*/

/*md
::: zh
## 不放大的 float16：梯度被冲成零

GradScaler 要解决的问题先看清楚。梯度小是训练后期的常态：模型已经拟合了数据，`softmax - onehot` 很小，再除以批大小。下面用 float32 在一个批次上训练到把它拟合好（相当于训练后期），再对这个批次算三次梯度：float32；float16 的 autocast 不加 scaler；float16 加 scaler（倍数 2^16，`unscale_` 之后）。数一数 float32 里不为零、另两种里却恰好为零的梯度元素——它们在 float16 的反向里掉到了最小次正规数的一半以下，被冲成了零。这次运行里，不加 scaler 时有 {{metric underflow_flushed_noscale_pct %.2f}}% 的非零梯度变成了零；加上 scaler，只剩 {{metric underflow_flushed_scaled %.0f}} 个。
:::
::: en
## float16 without scaling: gradients flushed to zero

First, the problem GradScaler solves. Small gradients are the rule late in training: the model fits the data, `softmax - onehot` is small, and it is divided by the batch size. Below, float32 trains on one batch until it fits it (late training in miniature), then that batch's gradients are computed three times: float32; float16 autocast without a scaler; float16 with a scaler (factor 2^16, after `unscale_`). Then we count the gradient elements that are not zero in float32 but exactly zero in the other two: in the float16 backward they fell below half the smallest subnormal and were flushed to zero. In this run, without a scaler {{metric underflow_flushed_noscale_pct %.2f}}% of the nonzero gradients became zero; with the scaler, {{metric underflow_flushed_scaled %.0f}} did.
:::
*/
// Grads of one batch under precision dt (scaler options: enabled or not);
// leaves them in the model's .grad, unscaled.
static int grads_of(ct_module *model, ct_optimizer *opt, const ct_tensor *x, const ct_tensor *y, ct_dtype dt,
                    bool scale) {
  const ct_device_type type = ct_device_of(x).type;
  ct_grad_scaler_options so = ct_grad_scaler_defaults();
  so.enabled = scale;
  ct_grad_scaler *scaler = ct_grad_scaler_create(type, so);
  if (!scaler || ct_optimizer_zero_grad(opt, true) != CT_OK) return -1;
  ct_autocast_enter(type, dt == CT_F32 ? CT_F16 : dt, dt != CT_F32);
  ct_tensor *out = ct_module_forward(model, x), *dl = NULL;
  ct_tensor *loss = out ? ct_cross_entropy_loss(out, y, &dl) : NULL;
  ct_autocast_exit();
  ct_tensor *g = loss ? ct_grad_scaler_scale(scaler, dl) : NULL;
  int rc = g ? ct_module_backward_params(model, g) : -1;
  if (rc == CT_OK) rc = ct_grad_scaler_unscale_(scaler, opt);
  ct_free(out), ct_free(dl), ct_free(loss), ct_free(g);
  ct_grad_scaler_free(scaler);
  return rc;
}

static int show_underflow(const settings *s, ct_device dev, ct_metrics *m) {
  ct_cli_section("underflow");
  task t;
  ct_module *model = fresh(build_mlp, s, dev);
  if (!model || make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  int np = 0;
  ct_param **ps = ct_module_parameters(model, &np);
  ct_sgd_options so = ct_sgd_defaults(0.1);
  so.momentum = 0.9;
  ct_optimizer *opt = ct_optim_sgd(ps, np, so);
  ct_grad_scaler_options off = ct_grad_scaler_defaults();
  off.enabled = false;
  ct_grad_scaler *none = ct_grad_scaler_create(dev.type, off);
  if (!opt || !none) return -1;
  const long warm = 40; // float32 training on one batch until it fits it: late-training gradients
  ct_tensor *loss = NULL, *x, *y;
  for (long k = 0; k < warm; ++k) {
    batch_of(&t, 0, s->batch, &x, &y);
    ct_free(loss);
    loss = amp_step(model, opt, none, x, y, CT_F32, 0);
    ct_free(x), ct_free(y);
    if (!loss) return -1;
  }
  printf("float32, %ld steps on one batch: its loss is now %.3g\n", warm, item(loss));
  batch_of(&t, 0, s->batch, &x, &y);
  double **ref = grads_of(model, opt, x, y, CT_F32, false) == CT_OK ? snapshot(ps, np, true) : NULL;
  if (!ref) return -1;
  int64_t total = 0, nonzero = 0, flushed[2] = {0, 0};
  for (int mode = 0; mode < 2; ++mode) { // 0: float16 without a scaler, 1: with one
    if (grads_of(model, opt, x, y, CT_F16, mode == 1) != CT_OK) return -1;
    double **got = snapshot(ps, np, true);
    if (!got) return -1;
    for (int i = 0; i < np; ++i)
      for (int64_t e = 0; e < ct_numel(ps[i]->value); ++e) {
        if (mode == 0) total++, nonzero += ref[i][e] != 0;
        flushed[mode] += ref[i][e] != 0 && got[i][e] == 0;
      }
    snapshot_free(got, np);
  }
  printf("gradient elements: %" PRId64 ", nonzero in float32: %" PRId64 "\n", total, nonzero);
  printf("flushed to zero by float16 without a scaler: %" PRId64 " (%.2f%%)\n", flushed[0],
         100.0 * (double)flushed[0] / (double)(nonzero ? nonzero : 1));
  printf("flushed to zero by float16 with GradScaler (2^16): %" PRId64 " (%.2f%%)\n", flushed[1],
         100.0 * (double)flushed[1] / (double)(nonzero ? nonzero : 1));
  ct_metrics_num(m, "underflow_loss", item(loss));
  ct_metrics_num(m, "underflow_nonzero", (double)nonzero);
  ct_metrics_num(m, "underflow_flushed_noscale", (double)flushed[0]);
  ct_metrics_num(m, "underflow_flushed_scaled", (double)flushed[1]);
  ct_metrics_num(m, "underflow_flushed_noscale_pct", 100.0 * (double)flushed[0] / (double)(nonzero ? nonzero : 1));
  snapshot_free(ref, np);
  ct_free(loss), ct_free(x), ct_free(y);
  ct_grad_scaler_free(none);
  ct_optimizer_free(opt);
  ct_module_free(model);
  task_free(&t);
  return CT_OK;
}
/*md output underflow*/

/*md
::: zh
## GradScaler 的倍数怎样变化

规则（PyTorch 的 `_amp_update_scale_`）：倍数从 2^16 开始；某一步的梯度里有 inf 或 NaN，这一步**跳过**（优化器什么都不写），倍数乘 0.5，计数清零；否则计数加一，连续 `growth_interval`（默认 2000）步都干净，倍数乘 2（乘完会溢出 float32 时不乘），计数清零。倍数、计数和 found_inf 标志都在设备上，更新它们的是一个单线程的核函数（`common/amp/amp_kernels.h`，CPU 和 CUDA 用同一段代码），所以训练循环不需要等设备把 found_inf 读回主机。优化器的“跳过”也在设备上：更新核函数先读 found_inf，是 1 就直接返回——这是 PyTorch 的 fused 优化器的做法；PyTorch 默认的 `scaler.step` 则用 `.item()` 把 found_inf 读回主机，每步同步一次。

下面用 float16 训练 MLP，把 `growth_interval` 改成 10，好在几十步里看到倍数增长；几个批次里故意放进 NaN 或 inf，模拟溢出。为了打印，这里每步读一次倍数（真正的训练循环不会这样做）。旁边一列是本章自己按规则算的倍数（练习的实验区），两列必须一致。
:::
::: en
## How GradScaler's factor moves

The rule (PyTorch's `_amp_update_scale_`): the factor starts at 2^16. When a step's gradients hold an inf or NaN, the step is **skipped** (the optimizer writes nothing), the factor is multiplied by 0.5 and the count of clean steps resets; otherwise the count grows by one, and after `growth_interval` (2000 by default) clean steps in a row the factor doubles (unless that would overflow float32) and the count resets. Factor, count and the found_inf flag live on the device, updated by a one-thread kernel (`common/amp/amp_kernels.h`, the same code for the CPU and CUDA), so the training loop never waits to read found_inf back. The optimizer's skip happens on the device too: its update kernel reads found_inf first and returns at once when it is 1. That is what PyTorch's fused optimizers do; PyTorch's default `scaler.step` reads found_inf back with `.item()`, one synchronization per step.

Below, float16 trains the MLP with `growth_interval` set to 10, so that growth shows within a few dozen steps, and a few batches carry a planted NaN or inf, standing in for overflows. To print it, the factor is read back every step here (a real training loop would not). Beside it is the factor this chapter computes by the rule itself (the lab's region); the two columns must agree.
:::
*/
// PyTorch's update rule, by hand, on the host: what ct_grad_scaler_update
// does on the device (torch._amp_update_scale_).
static void update_scale_by_hand(double *scale, int64_t *tracker, bool found_inf, const ct_grad_scaler_options *o) {
  /* LAB BEGIN: on found_inf: scale *= backoff_factor (as a float32) and tracker = 0; else tracker + 1, and at growth_interval scale *= growth_factor (unless the float32 result is inf) and tracker = 0 */
  if (found_inf) {
    *scale = (float)(*scale * o->backoff_factor);
    *tracker = 0;
    return;
  }
  if (*tracker + 1 == o->growth_interval) {
    const float grown = (float)(*scale * o->growth_factor);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
  } else {
    *tracker += 1;
  }
  /* LAB END */
}

// The batch x with element `at` set to v (a new tensor).
static ct_tensor *planted(const ct_tensor *x, int64_t at, double v) {
  ct_tensor *c = ct_clone(x);
  ct_tensor *flat = c ? ct_reshape(c, CT_SHAPE(-1)) : NULL;
  ct_tensor *e = flat ? ct_narrow(flat, 0, at, 1) : NULL;
  int rc = e ? ct_fill_(e, v) : -1;
  ct_free(flat), ct_free(e);
  if (rc != CT_OK) ct_free(c), c = NULL;
  return c;
}

// 1-based steps whose batch carries a NaN, an inf and a NaN.
static const long k_plant_steps[3] = {5, 6, 17};
static const double k_plant_values[3] = {NAN, INFINITY, NAN};

static double plant_at(long step) {
  for (int i = 0; i < 3; ++i)
    if (k_plant_steps[i] == step) return k_plant_values[i];
  return 0;
}

static int show_gradscaler(const settings *s, ct_device dev, ct_metrics *m) {
  ct_cli_section("gradscaler");
  task t;
  ct_module *model = fresh(build_mlp, s, dev);
  if (!model || make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  int np = 0;
  ct_param **ps = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(s->lr));
  ct_grad_scaler_options o = ct_grad_scaler_defaults();
  o.growth_interval = 10;
  ct_grad_scaler *scaler = ct_grad_scaler_create(dev.type, o); // torch.amp.GradScaler("cuda", growth_interval=10)
  if (!opt || !scaler) return -1;
  const int n = (int)s->scale_steps;
  double *steps = calloc((size_t)n, sizeof *steps), *scales = calloc((size_t)n, sizeof *scales);
  double *hand = calloc((size_t)n, sizeof *hand), *found = calloc((size_t)n, sizeof *found);
  if (!steps || !scales || !hand || !found) return ct_fail(CT_ERR_OOM, "ch09: out of host memory");
  double by_hand = o.init_scale;
  int64_t tracker = 0, skipped = 0, agree = 1;
  printf("%5s %9s %12s %12s %8s\n", "step", "found_inf", "scale", "by hand", "tracker");
  for (int k = 0; k < n; ++k) {
    ct_tensor *x, *y;
    batch_of(&t, k, s->batch, &x, &y);
    const double bad = plant_at(k + 1);
    if (bad != 0) {
      ct_tensor *xp = planted(x, 3, bad);
      ct_free(x);
      x = xp;
    }
    ct_tensor *loss = x ? amp_step(model, opt, scaler, x, y, CT_F16, 0) : NULL;
    ct_free(x), ct_free(y);
    if (!loss) return -1;
    ct_free(loss);
    double scale;
    int64_t now_skipped, tr;
    if (ct_grad_scaler_get_scale(scaler, &scale) != CT_OK || ct_grad_scaler_skipped_steps(scaler, &now_skipped) ||
        ct_grad_scaler_get_growth_tracker(scaler, &tr))
      return -1;
    const bool inf = now_skipped > skipped;
    skipped = now_skipped;
    update_scale_by_hand(&by_hand, &tracker, inf, &o);
    agree = agree && by_hand == scale && tracker == tr;
    steps[k] = k + 1, scales[k] = scale, hand[k] = by_hand, found[k] = inf;
    const bool changed = k == 0 || scale != scales[k - 1] || inf;
    if (changed || k == n - 1) printf("%5d %9d %12.6g %12.6g %8" PRId64 "\n", k + 1, (int)inf, scale, by_hand, tr);
  }
  printf("skipped steps: %" PRId64 "; the rule by hand agrees with ct_grad_scaler_update: %s\n", skipped,
         agree ? "yes" : "NO");
  ct_metrics_series(m, "scale_steps", steps, n);
  ct_metrics_series(m, "scale_values", scales, n);
  ct_metrics_series(m, "scale_by_hand", hand, n);
  ct_metrics_series(m, "scale_found_inf", found, n);
  ct_metrics_num(m, "scale_skipped", (double)skipped);
  ct_metrics_num(m, "scale_rule_agrees", agree);
  free(steps), free(scales), free(hand), free(found);
  ct_grad_scaler_free(scaler);
  ct_optimizer_free(opt);
  ct_module_free(model);
  task_free(&t);
  return CT_OK;
}
/*md output gradscaler*/
/*md
::: zh
{{fig scale}} 把上面打印的倍数画出来：纵轴取对数，所以每次减半是往下一格的台阶，每连续 10 步干净后的加倍是往上一格。
:::
::: en
{{fig scale}} plots the factor printed above: its vertical axis is logarithmic, so each halving is a step down and each doubling after 10 clean steps a step up.
:::
*/
/*md figure scale: GradScaler 的倍数：埋下的 inf/NaN 让它减半，连续 10 步干净让它加倍 | The GradScaler's factor: each planted inf/NaN halves it, every 10 clean steps in a row double it*/

/*md
::: zh
## 先 unscale_，再裁剪

种子的最佳实践在 `clip_grad_norm_` 之前调用 `scaler.unscale_(optimizer)`。原因一看数字就明白：反向之后，梯度里带着倍数，范数大了 2^16 倍。拿这样的梯度去按 1.0 裁剪，裁剪系数会小 2^16 倍，之后 `step` 再除以倍数，真正用上的梯度几乎是零。先 `unscale_`，裁剪看到的就是真实的梯度；`step` 知道这个优化器已经 unscale 过，不会再除一次。
:::
::: en
## unscale_ first, then clip

The seed's best practice calls `scaler.unscale_(optimizer)` before `clip_grad_norm_`. The numbers say why: after backward the gradients carry the factor, and their norm is 2^16 times too large. Clipping those to 1.0 gives a clip coefficient 2^16 times too small, and after `step` divides by the factor the gradient actually used is almost nothing. With `unscale_` first, clipping sees the true gradients, and `step` knows this optimizer is already unscaled and does not divide again.
:::
*/
static double grad_norm(ct_optimizer *opt) {
  int np = 0;
  ct_param **ps = ct_optimizer_params(opt, &np);
  double norm = NAN;
  ct_clip_grad_norm_(ps, np, 1e300, &norm); // a max_norm nothing reaches: only measures
  return norm;
}

static int show_best_practice(const settings *s, ct_device dev, ct_metrics *m) {
  ct_cli_section("best practice");
  task t;
  ct_module *model = fresh(build_mlp, s, dev);
  if (!model || make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  int np = 0;
  ct_param **ps = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(s->lr));
  ct_grad_scaler *scaler = ct_grad_scaler_create(dev.type, ct_grad_scaler_defaults());
  if (!opt || !scaler) return -1;
  ct_tensor *x, *y, *dl = NULL;
  batch_of(&t, 0, s->batch, &x, &y);
  ct_autocast_enter(dev.type, CT_F16, true);
  ct_tensor *out = ct_module_forward(model, x);
  ct_tensor *loss = out ? ct_cross_entropy_loss(out, y, &dl) : NULL;
  ct_autocast_exit();
  ct_tensor *g = loss ? ct_grad_scaler_scale(scaler, dl) : NULL;
  if (!g || ct_module_backward_params(model, g) != CT_OK) return -1;
  double scale, scaled = grad_norm(opt);
  ct_grad_scaler_get_scale(scaler, &scale);
  printf("grad norm after scaler.scale(loss).backward(): %.6g  (scale %.6g)\n", scaled, scale);
  if (ct_grad_scaler_unscale_(scaler, opt) != CT_OK) return -1; // scaler.unscale_(optimizer)
  const double true_norm = grad_norm(opt);
  printf("after scaler.unscale_(optimizer): %.6g  (ratio %.6g)\n", true_norm, scaled / true_norm);
  double seen = 0;
  if (ct_clip_grad_norm_(ps, np, 1.0, &seen) != CT_OK) return -1; // clip_grad_norm_(model.parameters(), 1.0)
  printf("clip_grad_norm_(max_norm=1.0) sees %.6g and leaves %.6g\n", seen, grad_norm(opt));
  printf("clipping before unscale_ would leave a gradient of norm %.6g after step divides by the scale\n",
         1.0 / scale);
  if (ct_grad_scaler_step(scaler, opt) != CT_OK || ct_grad_scaler_update(scaler) != CT_OK) return -1;
  ct_metrics_num(m, "clip_scaled_norm", scaled);
  ct_metrics_num(m, "clip_true_norm", true_norm);
  ct_metrics_num(m, "clip_scale", scale);
  ct_free(x), ct_free(y), ct_free(out), ct_free(dl), ct_free(loss), ct_free(g);
  ct_grad_scaler_free(scaler);
  ct_optimizer_free(opt);
  ct_module_free(model);
  task_free(&t);
  return CT_OK;
}
/*md output best practice*/

/*md
::: zh
## 种子的 `model.half()`：丢掉了什么

“手动混合精度”把整个模型转成 float16：参数、梯度、优化器的更新都在 float16 里（PyTorch 1.13 在 CPU 上连这一步都跑不了：它的 CPU 矩阵乘没有 float16，孪生程序会打印那条错误）。它省掉了 float32 的主权重，也没有 GradScaler。下面从同一个初始权重出发，用 float16 模型和普通 SGD 训练同样的步数，和 float32、autocast（float16 + GradScaler）两次运行比较（为了在几秒内走上千步，这里的 MLP 最多 128 宽、batch 最多 32；`--half-steps` 改步数），并数两件事：一是前 10 步里**丢掉的更新**——梯度不为零、参数却一点没变的元素：`lr × grad` 小于参数在 float16 里最小间隔的一半，加上去又被舍入掉了；主权重在 float32 里，这样的小更新能累积起来。二是没有放大时被冲成零的梯度，和上一节一样。这次运行里，float16 模型有 {{metric half_lost_pct %.1f}}% 的更新被舍入掉了。

前几百步里三条曲线几乎重合（{{fig half}}）：梯度还大，`lr × grad` 比 float16 的间隔大得多，丢掉的只是零头。损失越小，梯度越小，被整个舍入掉的更新就越多，model.half() 的损失停在另外两条上面；autocast 的主权重在 float32 里，曲线一直跟着 float32。最后五步的平均损失：float32 {{metric half_loss_f32 %.4f}}，autocast {{metric half_loss_amp %.4f}}，model.half() {{metric half_loss_half %.4f}}。
:::
::: en
## The seed's `model.half()`: what it loses

"Manual mixed precision" turns the whole model into float16: parameters, gradients and the optimizer's update all live in float16 (PyTorch 1.13 cannot even run this on a CPU: its CPU matmul has no float16, and the twin prints that error). It drops the float32 master weights, and it has no GradScaler. Below, starting from the same initial weights, a float16 model trains with plain SGD for the same number of steps, next to a float32 run and an autocast run (float16 + GradScaler) (the MLP here is at most 128 wide with batches of at most 32, so that a thousand steps take seconds; `--half-steps` sets their number), counting two things. First, over the first 10 steps, **lost updates**: elements whose gradient is not zero yet whose parameter did not change at all, because `lr × grad` was less than half the parameter's float16 spacing and rounding took it away again; float32 master weights let such small updates add up. Second, as in the section above, gradients flushed to zero without scaling. In this run rounding took away {{metric half_lost_pct %.1f}}% of the half-precision model's updates.

For the first few hundred steps the three curves lie on one another ({{fig half}}): the gradients are still large, `lr × grad` is much larger than float16's spacing, and rounding takes only the small change. As the loss falls the gradients shrink, more and more updates are rounded away whole, and model.half()'s loss stays above the other two; autocast keeps its master weights in float32 and follows float32 throughout. The mean loss of the last five steps: float32 {{metric half_loss_f32 %.4f}}, autocast {{metric half_loss_amp %.4f}}, model.half() {{metric half_loss_half %.4f}}.
:::
*/
#define LOST_STEPS 10 // steps over which model.half()'s lost updates are counted

// The figure's curves: each run's mean loss over each pass through the `per`
// batches (a step's loss swings with its batch), at the pass's last step.
static int record_pass_means(ct_metrics *m, const double *curve, long n, long per) {
  static const char *keys[3] = {"half_curve_float32", "half_curve_autocast", "half_curve_half"};
  const long passes = n / per;
  double *xs = calloc((size_t)(passes ? passes : 1), sizeof *xs), *ys = calloc((size_t)(passes ? passes : 1), sizeof *ys);
  if (!xs || !ys) {
    free(xs), free(ys);
    return ct_fail(CT_ERR_OOM, "ch09: out of host memory");
  }
  for (long j = 0; j < passes; ++j) xs[j] = (double)((j + 1) * per);
  ct_metrics_series(m, "half_steps", xs, (int)passes);
  for (int run = 0; run < 3; ++run) {
    for (long j = 0; j < passes; ++j) {
      double sum = 0;
      for (long k = j * per; k < (j + 1) * per; ++k) sum += curve[run * n + k];
      ys[j] = sum / (double)per;
    }
    ct_metrics_series(m, keys[run], ys, (int)passes);
  }
  free(xs), free(ys);
  return CT_OK;
}
#define HALF_WIDTH 128 // the comparison's MLP at most this wide, its batch at most 32: many steps in seconds

static int show_half(const settings *full, ct_device dev, ct_metrics *m) {
  ct_cli_section("half");
  settings small = *full;
  if (small.hidden > HALF_WIDTH) small.hidden = HALF_WIDTH;
  if (small.batch > 32) small.batch = 32;
  const settings *s = &small;
  task t;
  if (make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  double final[3];
  const long n = s->half_steps;
  double *curve = calloc((size_t)(3 * n), sizeof *curve); // each run's loss at every step, for the figure
  if (!curve) return ct_fail(CT_ERR_OOM, "ch09: out of host memory");
  int64_t lost = 0, updates = 0, zero_grads = 0, grads = 0;
  for (int run = 0; run < 3; ++run) { // 0: float32, 1: autocast float16 + GradScaler, 2: model.half()
    ct_module *model = fresh(build_mlp, s, dev);
    if (!model || (run == 2 && ct_module_to_dtype(model, CT_F16) != CT_OK)) return -1; // model = model.half()
    int np = 0;
    ct_param **ps = ct_module_parameters(model, &np);
    ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(s->lr));
    ct_grad_scaler_options so = ct_grad_scaler_defaults();
    so.enabled = run == 1;
    ct_grad_scaler *scaler = ct_grad_scaler_create(dev.type, so);
    if (!opt || !scaler) return -1;
    double sum = 0;
    int counted = 0;
    static const char *labels[3] = {"float32", "autocast float16", "model.half()"};
    ct_progress *bar = ct_progress_start_label(NULL, labels[run], n); // a terminal's bar; nothing in a log
    for (long k = 0; k < n; ++k) {
      ct_tensor *x, *y, *xin = NULL;
      ct_cli_exit_if_interrupted(NULL); // Ctrl-C: stop after a whole step
      batch_of(&t, k, s->batch, &x, &y);
      if (run == 2) xin = ct_to_dtype(x, CT_F16); // the seed feeds a float16 input
      const bool count = run == 2 && k < LOST_STEPS; // counting copies every weight: the first steps only
      double **before = count ? snapshot(ps, np, false) : NULL;
      ct_tensor *loss = amp_step(model, opt, scaler, run == 2 ? xin : x, y, run == 1 ? CT_F16 : CT_F32, 0);
      if (!loss) return -1;
      if (count) { // count the updates rounding took away, and the grads that are zero
        double **after = snapshot(ps, np, false), **g = snapshot(ps, np, true);
        if (!before || !after || !g) return ct_fail(CT_ERR_OOM, "ch09: out of host memory");
        for (int i = 0; i < np; ++i)
          for (int64_t e = 0; e < ct_numel(ps[i]->value); ++e) {
            grads++, zero_grads += g[i][e] == 0;
            if (g[i][e] != 0) updates++, lost += after[i][e] == before[i][e];
          }
        snapshot_free(before, np), snapshot_free(after, np), snapshot_free(g, np);
      }
      curve[run * n + k] = item(loss);
      ct_progress_step(bar, curve[run * n + k], s->batch);
      if (k >= n - 5) sum += curve[run * n + k], counted++; // the last five steps' mean loss
      if (run == 0) ct_cli_check_loss(g_cli, curve[k], k + 1, k + 1, s->lr); // float32 diverged: exit 1
      ct_free(loss), ct_free(x), ct_free(y), ct_free(xin);
    }
    ct_progress_clear(bar);
    final[run] = sum / counted;
    ct_grad_scaler_free(scaler);
    ct_optimizer_free(opt);
    ct_module_free(model);
  }
  printf("MLP %ld wide, batch %ld: mean loss of the last 5 of %ld steps: float32 %.5f, autocast float16 + "
         "GradScaler %.5f, model.half() %.5f\n", s->hidden, s->batch, n, final[0], final[1], final[2]);
  printf("model.half(), first %d steps: updates lost to rounding: %" PRId64 " of %" PRId64 " (%.2f%%); gradients "
         "that are zero: %.2f%%\n", LOST_STEPS, lost, updates, 100.0 * (double)lost / (double)(updates ? updates : 1),
         100.0 * (double)zero_grads / (double)(grads ? grads : 1));
  if (record_pass_means(m, curve, n, t.n / s->batch) != CT_OK) return -1;
  free(curve);
  ct_metrics_num(m, "half_loss_f32", final[0]);
  ct_metrics_num(m, "half_loss_amp", final[1]);
  ct_metrics_num(m, "half_loss_half", final[2]);
  ct_metrics_num(m, "half_lost_updates", (double)lost);
  ct_metrics_num(m, "half_lost_pct", 100.0 * (double)lost / (double)(updates ? updates : 1));
  task_free(&t);
  return CT_OK;
}
/*md output half*/
/*md figure half*/
/*md twin half*/

/*md
::: zh
## 速度、内存和最终损失

两个工作负载，各用三种精度训练同样的步数：一个以矩阵乘为主的 MLP（Linear–ReLU–Linear–ReLU–Linear，隐藏层宽 `--hidden`），和种子的卷积 + 批归一化模型（输入 3×32×32，`--quick` 时 16×16）。每种精度都从同一个初始权重、同一批数据出发。计时不含前两步（预热），只在开始和结束时等设备；内存是训练步里分配器的峰值减去训练前已占用的量（模型、数据、优化器），也就是激活值和临时张量；损失是最后五步的平均。

在 GPU 上，float16 和 bfloat16 的矩阵乘走张量核心（cuBLAS 的 GemmEx，float32 累加），吞吐比 float32 高一个数量级，激活值也只有一半大小；卷积是 im2col 加同一个 GEMM。在 CPU 上：bfloat16 的矩阵乘交给 oneDNN，用这台 CPU 的 AVX-512 BF16 指令（`vdpbf16ps`：一条指令把成对的 bf16 乘积加进 float32）；这台 CPU 没有 float16 的算术指令（Debian 的 OpenBLAS 也没有半精度 GEMM），float16 只能先展宽成 float32 再用 sgemm，精度降低换不来速度，还要多付类型转换的时间。有 float16 算术的 CPU 是有的：带 AVX512-FP16 的（Intel Sapphire Rapids 起的至强）和带 AMX-FP16 的（Granite Rapids），oneDNN 在那里会用上它们；ct 的 CPU 后端不查这些指令，float16 一律走展宽。有 oneDNN 时，表里还多一行“bfloat16，关掉 oneDNN”，看看原生指令本身带来了多少。PyTorch 的 CPU autocast 用的也是 oneDNN（孪生程序的同一张表是 `torch.autocast("cpu", dtype=torch.bfloat16)` 量出来的）。

{{recorded @run}}中，MLP 一步的时间，float32 与 bfloat16 之比是 {{recorded gemm_speedup_bfloat16 %.2f}}，与 float16 之比是 {{recorded gemm_speedup_float16 %.2f}}；卷积模型上 float32 与 bfloat16 之比是 {{recorded conv_speedup_bfloat16 %.2f}}。{{if recorded device is cpu and recorded gemm_speedup_bfloat16 > 4}}这个比值远远超过 bfloat16 指令能带来的（它们把每条指令的乘加数翻倍）：这次运行里 float32 的时间是由运算以外的东西决定的（忙碌的机器，或者冒烟运行只计了几步），比值不可信。{{elif recorded gemm_speedup_bfloat16 > 1.1}}bfloat16 让 MLP 快了，原生指令起了作用。{{elif recorded gemm_speedup_bfloat16 >= 0.9}}bfloat16 和 float32 的 MLP 一步相差不到一成：这次运行没有用上原生的 bfloat16 指令，或者省下的时间被类型转换抵消了。{{else}}bfloat16 的 MLP 反而更慢：这次运行没有用上原生的 bfloat16 指令，只剩类型转换的代价。{{end}}{{if recorded device is cpu and recorded gemm_speedup_float16 < 0.9}}float16 更慢，正如上面说的：它先展宽成 float32。{{elif recorded device is cpu and recorded gemm_speedup_float16 > 1.1}}float16 这次反而更快，可它先展宽成 float32、再做同样的 float32 运算，不可能真的更快：这说明 float32 那一行的计时受了干扰。{{elif recorded device is cpu}}float16 这次没有更慢，虽然它先展宽成 float32：转换的代价在这次的计时噪声之内。{{elif recorded gemm_speedup_float16 > 1.1}}在 GPU 上 float16 更快：矩阵乘走张量核心。{{else}}在这块 GPU 上 float16 没有更快：这个 MLP 太小，喂不饱张量核心。{{end}}{{if recorded conv_speedup_bfloat16 < recorded gemm_speedup_bfloat16}}卷积模型从 bfloat16 得到的好处比 MLP 少：它的矩阵很“瘦”（输出通道 64，每张图的 im2col 只有 27 行），原生指令省下的时间很大一部分又花在了类型转换上。{{else}}这次卷积模型从 bfloat16 得到的好处不比 MLP 少，虽然它的矩阵很“瘦”（输出通道 64，每张图的 im2col 只有 27 行），类型转换占的比例更大。{{end}}卷积模型的步内存在低精度下反而更大，因为 ct 为了精度，col2im 在 float32 里求和（多一块 float32 的列矩阵），批归一化也在输入的 float32 副本上计算。
:::
::: en
## Speed, memory and final loss

Two workloads, each trained for the same number of steps in the three precisions: a GEMM-heavy MLP (Linear–ReLU–Linear–ReLU–Linear, hidden width `--hidden`), and the seed's convolution + batch-norm model (3×32×32 inputs, 16×16 with `--quick`). Every precision starts from the same initial weights and sees the same batches. Timing leaves out the first two steps (warm-up) and waits for the device only at its start and end; memory is the allocator's peak during the steps minus what was held before them (model, data, optimizer), that is activations and temporaries; the loss is the mean of the last five steps.

On a GPU, float16 and bfloat16 products run on the tensor cores (cuBLAS GemmEx with float32 accumulation), an order of magnitude more throughput than float32, and activations take half the memory; convolution is im2col plus the same GEMM. On the CPU, bfloat16 products go to oneDNN, which uses this CPU's AVX-512 BF16 instructions (`vdpbf16ps`: one instruction adds pairs of bf16 products into float32); this CPU has no float16 arithmetic (and Debian's OpenBLAS no half-precision GEMM), so float16 widens to float32 and runs sgemm: the lower precision buys no speed, and the conversions cost time on top. CPUs with float16 arithmetic do exist: those with AVX512-FP16 (Intel Xeons from Sapphire Rapids on) and AMX-FP16 (Granite Rapids), where oneDNN uses them; ct's CPU backend does not look for those instructions and always widens float16. Where oneDNN is present the table has one more row, "bfloat16, oneDNN off", to show what the native instructions themselves add. PyTorch's CPU autocast uses oneDNN too (the twin's table is measured with `torch.autocast("cpu", dtype=torch.bfloat16)`).

In {{recorded @run}}, float32's step time over bfloat16's was {{recorded gemm_speedup_bfloat16 %.2f}} on the MLP, over float16's {{recorded gemm_speedup_float16 %.2f}}; on the convolution model float32's over bfloat16's was {{recorded conv_speedup_bfloat16 %.2f}}. {{if recorded device is cpu and recorded gemm_speedup_bfloat16 > 4}}That ratio is far beyond what the bfloat16 instructions can give (they double the multiply-adds per instruction): something other than the arithmetic set this run's float32 time (a busy machine, or a smoke run's few timed steps), and the ratio cannot be trusted.{{elif recorded gemm_speedup_bfloat16 > 1.1}}bfloat16 made the MLP faster: the native instructions paid off.{{elif recorded gemm_speedup_bfloat16 >= 0.9}}The MLP's bfloat16 and float32 steps are within 10% of each other: this run did not use native bfloat16 instructions, or the conversions ate what they saved.{{else}}The MLP's bfloat16 step is slower: this run did not use native bfloat16 instructions, and only the conversions' cost is left.{{end}} {{if recorded device is cpu and recorded gemm_speedup_float16 < 0.9}}float16 is slower, as said above: it widens to float32 first.{{elif recorded device is cpu and recorded gemm_speedup_float16 > 1.1}}float16 came out faster this time, but it widens to float32 and then does the same float32 arithmetic, so it cannot truly be faster: this run's float32 timing was disturbed.{{elif recorded device is cpu}}float16 is not slower this time, although it widens to float32 first: the conversions' cost is within this run's timing noise.{{elif recorded gemm_speedup_float16 > 1.1}}On the GPU float16 is faster: its products run on the tensor cores.{{else}}On this GPU float16 is not faster: the MLP is too small to keep the tensor cores busy.{{end}} {{if recorded conv_speedup_bfloat16 < recorded gemm_speedup_bfloat16}}The convolution gains less from bfloat16 than the MLP: its matrices are thin (64 output channels, 27 rows of im2col per image), so the casts take a large share of what the native instructions save.{{else}}This time the convolution gains no less from bfloat16 than the MLP, although its matrices are thin (64 output channels, 27 rows of im2col per image) and the casts take a larger share.{{end}} The convolution's step memory is larger in low precision, because for accuracy ct sums col2im in float32 (one more float32 column matrix) and batch norm computes on a float32 copy of its input.
:::
*/
typedef struct run_stats {
  double ms, mem_mb, loss;
  int64_t skipped;
} run_stats;

// Trains a fresh model of `build` on t for s->steps steps in precision dt
// (float16 with a GradScaler); losses (may be NULL) receives each step's loss.
static int timed_run(const settings *s, ct_module *(*build)(const settings *), const task *t, long batch, ct_dtype dt,
                     ct_device dev, double *losses, run_stats *r) {
  ct_module *model = fresh(build, s, dev);
  if (!model) return -1;
  int np = 0;
  ct_param **ps = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(s->lr));
  ct_grad_scaler_options so = ct_grad_scaler_defaults();
  so.enabled = dt == CT_F16;
  ct_grad_scaler *scaler = ct_grad_scaler_create(dev.type, so); // GradScaler("cuda", enabled=use_fp16)
  ct_tensor **loss = calloc((size_t)s->steps, sizeof *loss);
  if (!opt || !scaler || !loss) return -1;
  const long warm = s->steps > 4 ? 2 : 0;
  double t0 = 0;
  size_t base = 0;
  int rc = CT_OK;
  for (long k = 0; k < s->steps && rc == CT_OK; ++k) {
    ct_cli_exit_if_interrupted(NULL); // Ctrl-C: stop after a whole step
    if (k == warm) {
      if (ct_cli_synchronize(dev) != CT_OK) rc = -1;
      base = ct_memory_allocated(dev);
      ct_reset_peak_memory_stats(dev);
      t0 = ct_cli_seconds();
    }
    ct_tensor *x, *y;
    batch_of(t, k, batch, &x, &y);
    loss[k] = amp_step(model, opt, scaler, x, y, dt, 0);
    if (!loss[k]) rc = -1;
    ct_free(x), ct_free(y);
  }
  if (ct_cli_synchronize(dev) != CT_OK) rc = -1;
  r->ms = 1e3 * (ct_cli_seconds() - t0) / (double)(s->steps - warm);
  r->mem_mb = (double)(ct_max_memory_allocated(dev) - base) / (1 << 20);
  double sum = 0;
  for (long k = 0; k < s->steps; ++k) {
    const double v = item(loss[k]);
    if (dt == CT_F32 && loss[k]) ct_cli_check_loss(g_cli, v, k + 1, k + 1, s->lr); // float32 diverged: exit 1
    if (losses) losses[k] = v;
    if (k >= s->steps - 5) sum += v;
    ct_free(loss[k]);
  }
  r->loss = sum / (double)(s->steps < 5 ? s->steps : 5);
  ct_grad_scaler_skipped_steps(scaler, &r->skipped);
  free(loss);
  ct_grad_scaler_free(scaler);
  ct_optimizer_free(opt);
  ct_module_free(model);
  return rc;
}

static const ct_dtype k_precisions[3] = {CT_F32, CT_BF16, CT_F16};

static int speed_table(const settings *s, const char *name, ct_module *(*build)(const settings *), const task *t,
                       long batch, ct_device dev, ct_metrics *m, bool loss_curves) {
  printf("%s, batch %ld, %ld steps\n", name, batch, s->steps);
  printf("  %-22s %10s %9s %14s %11s %8s\n", "precision", "ms/step", "speedup", "step memory MB", "final loss",
         "skipped");
  double f32_ms = 0;
  const bool extra = dev.type == CT_CPU && ct_cpu_bf16_native_available();
  for (int p = 0; p < 3 + extra; ++p) {
    const ct_dtype dt = p < 3 ? k_precisions[p] : CT_BF16;
    if (p == 3) ct_cpu_bf16_native_set_enabled(false); // the widening fallback, for comparison
    double *curve = loss_curves ? calloc((size_t)s->steps, sizeof *curve) : NULL;
    run_stats r;
    int rc = timed_run(s, build, t, batch, dt, dev, curve, &r);
    ct_cpu_bf16_native_set_enabled(true);
    if (rc != CT_OK) return -1;
    if (p == 0) f32_ms = r.ms;
    char label[40], key[96];
    snprintf(label, sizeof label, "%s%s", ct_dtype_name(dt), p == 3 ? ", oneDNN off" : dt == CT_F16 ? " + GradScaler" : "");
    printf("  %-22s %10.2f %8.2fx %14.1f %11.5f %8" PRId64 "\n", label, r.ms, f32_ms / r.ms, r.mem_mb, r.loss,
           r.skipped);
    const char *tag = p == 3 ? "bf16_fallback" : ct_dtype_name(dt);
    snprintf(key, sizeof key, "%s_ms_%s", name, tag);
    ct_metrics_num(m, key, r.ms);
    snprintf(key, sizeof key, "%s_mem_mb_%s", name, tag);
    ct_metrics_num(m, key, r.mem_mb);
    snprintf(key, sizeof key, "%s_loss_%s", name, tag);
    ct_metrics_num(m, key, r.loss);
    snprintf(key, sizeof key, "%s_speedup_%s", name, tag);
    ct_metrics_num(m, key, f32_ms / r.ms);
    if (curve && p < 3) {
      snprintf(key, sizeof key, "%s_curve_%s", name, tag);
      ct_metrics_series(m, key, curve, (int)s->steps);
    }
    free(curve);
  }
  return CT_OK;
}

static int show_speed(const settings *s, ct_device dev, bool quick, ct_metrics *m) {
  ct_cli_section("speed");
  if (dev.type == CT_CPU) printf("bfloat16 matmul on this CPU: %s\n", ct_cpu_bf16_gemm_info());
  task t;
  if (make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  int rc = speed_table(s, "gemm", build_mlp, &t, s->batch, dev, m, true);
  task_free(&t);
  const long cbatch = s->batch / 4 > 8 ? s->batch / 4 : 8;
  if (rc == CT_OK && make_image_task(dev, 8 * cbatch, quick ? 16 : 32, &t) == CT_OK) {
    rc = speed_table(s, "conv", build_seed, &t, cbatch, dev, m, false);
    task_free(&t);
  }
  double steps[4096];
  const int n = s->steps < 4096 ? (int)s->steps : 4096;
  for (int k = 0; k < n; ++k) steps[k] = k + 1;
  ct_metrics_series(m, "loss_steps", steps, n);
  return rc;
}
/*md output speed*/
/*md twin speed*/
/*md
::: zh
{{fig loss}} 把三种精度的逐步损失画在一起：同样的初始权重、同样的批次，所以三条线之间的差别只来自精度。
:::
::: en
{{fig loss}} plots the loss of each step in the three precisions together: the same initial weights and the same batches, so whatever separates the three lines comes from the precision alone.
:::
*/
/*md figure loss: MLP 训练损失：float32、bfloat16、float16 + GradScaler | Training loss of the MLP: float32, bfloat16, float16 + GradScaler*/

/*md
::: zh
## 断点续训：GradScaler 的状态存进检查点

续训时只存模型不够：倍数和增长计数也是训练状态。从头开始的倍数是 2^16，而一个训练了很久的运行，倍数早已调到了别的值；续训从 2^16 开始，会先白白跳过几步把倍数降下来，增长计数也从零重新数。PyTorch 的做法是把 `scaler.state_dict()`（五个数：scale、growth_factor、backoff_factor、growth_interval、_growth_tracker）和模型一起存。ct 把它们写进 safetensors 文件的元数据（`__metadata__`，字符串到字符串，17 位有效数字，读回来一位不差）。下面训练 K 步后存盘，一边接着训练，一边从文件恢复一个新的模型和 scaler 训练同样的步数，比较两边的倍数序列和最终权重。
:::
::: en
## Resuming: the GradScaler's state in the checkpoint

Saving only the model is not enough to resume: the factor and the growth count are training state too. A fresh scaler starts at 2^16, while a run that has trained for long has settled on another factor; resuming at 2^16 first wastes skipped steps bringing it down, and counts growth from zero again. PyTorch saves `scaler.state_dict()` (five numbers: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker) with the model. ct writes them into the safetensors file's metadata (`__metadata__`, strings to strings, 17 significant digits, read back exactly). Below, a run saves after K steps and goes on, while a new model and scaler restored from the file train the same steps; the two factor sequences and the final weights are compared.
:::
*/
static int scaled_steps(ct_module *model, ct_optimizer *opt, ct_grad_scaler *scaler, const task *t, long k0, long k1,
                        long batch, double *scales) {
  for (long k = k0; k < k1; ++k) {
    ct_tensor *x, *y;
    batch_of(t, k, batch, &x, &y);
    const double bad = plant_at(k + 1);
    if (bad != 0) {
      ct_tensor *xp = planted(x, 0, bad);
      ct_free(x);
      x = xp;
    }
    ct_tensor *loss = x ? amp_step(model, opt, scaler, x, y, CT_F16, 0) : NULL;
    ct_free(x), ct_free(y);
    if (!loss) return -1;
    ct_free(loss);
    if (scales && ct_grad_scaler_get_scale(scaler, &scales[k - k0]) != CT_OK) return -1;
  }
  return CT_OK;
}

// A model, its SGD and a GradScaler (growth_interval 4) for the checkpoint demo.
typedef struct trainer {
  ct_module *model;
  ct_optimizer *opt;
  ct_grad_scaler *scaler;
} trainer;

static int trainer_make(const settings *s, ct_device dev, trainer *tr) {
  tr->model = fresh(build_mlp, s, dev);
  int np = 0;
  ct_param **ps = tr->model ? ct_module_parameters(tr->model, &np) : NULL;
  tr->opt = ps ? ct_optim_sgd(ps, np, ct_sgd_defaults(s->lr)) : NULL;
  ct_grad_scaler_options o = ct_grad_scaler_defaults();
  o.growth_interval = 4;
  tr->scaler = tr->opt ? ct_grad_scaler_create(dev.type, o) : NULL;
  return tr->scaler ? CT_OK : -1;
}

static void trainer_free(trainer *tr) {
  ct_grad_scaler_free(tr->scaler);
  ct_optimizer_free(tr->opt);
  ct_module_free(tr->model);
}

static int show_checkpoint(const settings *s, ct_device dev, ct_metrics *m) {
  ct_cli_section("checkpoint");
  task t;
  if (make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK) return -1;
  enum { K = 8, MORE = 12 };
  trainer a, b;
  if (trainer_make(s, dev, &a) != CT_OK || scaled_steps(a.model, a.opt, a.scaler, &t, 0, K, s->batch, NULL)) return -1;
  // torch.save({"model": model.state_dict(), "scaler": scaler.state_dict()}, path)
  char path[PATH_MAX];
  if (ct_path_join(path, sizeof path, "--out-dir", s->out_dir, "ch09_checkpoint.safetensors") != CT_OK) return -1;
  ct_grad_scaler_state st;
  ct_grad_scaler_metadata md;
  int n = 0;
  if (ct_grad_scaler_state_dict(a.scaler, &st) != CT_OK) return -1;
  ct_grad_scaler_state_to_metadata(&st, &md);
  ct_named_tensor *sd = ct_module_state_dict(a.model, "", &n);
  if (!sd || ct_save_safetensors(path, sd, n, md.pairs) != CT_OK) return -1;
  ct_named_tensors_free(sd, n);
  printf("saved after %d steps: %d tensors and", K, n);
  for (int i = 0; i < CT_GRAD_SCALER_METADATA_KEYS; ++i) printf(" %s=%s", md.pairs[2 * i], md.pairs[2 * i + 1]);
  printf("\n");
  double cont[MORE], resumed[MORE];
  if (scaled_steps(a.model, a.opt, a.scaler, &t, K, K + MORE, s->batch, cont) != CT_OK) return -1;
  // Resume: model.load_state_dict(ck["model"]); scaler.load_state_dict(ck["scaler"])
  char **pairs = NULL;
  ct_named_tensor *loaded = NULL;
  ct_grad_scaler_state back;
  if (trainer_make(s, dev, &b) != CT_OK ||
      ct_load_safetensors_with_metadata(path, dev, &loaded, &n, &pairs) != CT_OK ||
      ct_module_load_state(b.model, loaded, n, true) != CT_OK ||
      ct_grad_scaler_state_from_metadata((const char *const *)pairs, &back) != CT_OK ||
      ct_grad_scaler_load_state_dict(b.scaler, &back) != CT_OK)
    return -1;
  ct_named_tensors_free(loaded, n);
  ct_metadata_free(pairs);
  if (scaled_steps(b.model, b.opt, b.scaler, &t, K, K + MORE, s->batch, resumed) != CT_OK) return -1;
  bool same_scale = memcmp(cont, resumed, sizeof cont) == 0;
  int np = 0;
  ct_param **pa = ct_module_parameters(a.model, &np), **pb = ct_module_parameters(b.model, &np);
  double **wa = snapshot(pa, np, false), **wb = snapshot(pb, np, false);
  if (!wa || !wb) return ct_fail(CT_ERR_OOM, "ch09: out of host memory");
  bool same_w = true;
  for (int i = 0; i < np; ++i)
    same_w = same_w && memcmp(wa[i], wb[i], (size_t)ct_numel(pa[i]->value) * sizeof(double)) == 0;
  printf("resumed from the file, %d more steps: scale %g -> %g, %s the run that never stopped; weights %s\n", MORE,
         back.scale, resumed[MORE - 1], same_scale ? "the same sequence as" : "NOT the sequence of",
         same_w ? "bit for bit equal" : "DIFFERENT");
  ct_metrics_num(m, "resume_same_scales", same_scale);
  ct_metrics_num(m, "resume_same_weights", same_w);
  ct_metrics_num(m, "resume_saved_scale", st.scale);
  snapshot_free(wa, np), snapshot_free(wb, np);
  trainer_free(&a), trainer_free(&b);
  task_free(&t);
  return same_scale && same_w ? CT_OK : ct_fail(CT_ERR_VALUE, "ch09: the resumed run diverged");
}
/*md output checkpoint*/

/*md
::: zh
## 坏批次：数据里的 NaN 和 inf

数据出错时（一个 NaN 像素、一个大到 float16 装不下的值），前向算出 NaN 或 inf，梯度也是。在 AMP 下这和梯度溢出是同一回事：`unscale_` 发现它，这一步被跳过、计数，倍数减半，权重一位都不变。下面给一次训练依次喂一个含 NaN 的批次和一个含 1e6 的批次（1e6 超过 float16 的 65504，转换后是 inf）。注意批归一化的滑动平均不受这个保护：它在前向里就更新了，PyTorch 也是这样（练习 4）。
:::
::: en
## Bad batches: NaN and inf in the data

When the data go wrong (a NaN pixel, a value float16 cannot hold), the forward produces NaN or inf, and so do the gradients. Under AMP that is the same event as a gradient overflow: `unscale_` finds it, the step is skipped and counted, the factor halves, and the weights do not change by a single bit. Below, a run is fed one batch holding a NaN and one holding 1e6 (above float16's 65504, so inf once cast). Batch norm's running averages are not protected this way: they are updated in the forward, as in PyTorch (exercise 4).
:::
*/
static int show_bad_batch(const settings *s, ct_device dev, ct_metrics *m) {
  ct_cli_section("bad batch");
  task t;
  trainer tr;
  if (make_mlp_task(dev, 8 * s->batch, s->hidden, &t) != CT_OK || trainer_make(s, dev, &tr) != CT_OK) return -1;
  int np = 0;
  ct_param **ps = ct_module_parameters(tr.model, &np);
  const double bad[2] = {NAN, 1e6};
  int unchanged = 0;
  for (int b = 0; b < 2; ++b) {
    int64_t before_skipped, after_skipped;
    double **w0 = snapshot(ps, np, false);
    if (!w0 || ct_grad_scaler_skipped_steps(tr.scaler, &before_skipped) != CT_OK) return -1;
    ct_tensor *x, *y;
    batch_of(&t, b, s->batch, &x, &y);
    ct_tensor *xp = planted(x, 7, bad[b]);
    ct_tensor *loss = xp ? amp_step(tr.model, tr.opt, tr.scaler, xp, y, CT_F16, 0) : NULL;
    if (!loss || ct_grad_scaler_skipped_steps(tr.scaler, &after_skipped) != CT_OK) return -1;
    double **w1 = snapshot(ps, np, false);
    bool same = w1 != NULL;
    for (int i = 0; same && i < np; ++i)
      same = memcmp(w0[i], w1[i], (size_t)ct_numel(ps[i]->value) * sizeof(double)) == 0;
    double scale;
    ct_grad_scaler_get_scale(tr.scaler, &scale);
    const double lv = item(loss);
    printf("a batch holding %g: loss %g, skipped steps %" PRId64 " -> %" PRId64 ", scale now %g, weights %s\n", bad[b],
           isnan(lv) ? NAN : lv, before_skipped, after_skipped, scale, same ? "bit for bit unchanged" : "CHANGED");
    unchanged += same && after_skipped == before_skipped + 1;
    snapshot_free(w0, np), snapshot_free(w1, np);
    ct_free(x), ct_free(xp), ct_free(y), ct_free(loss);
  }
  ct_metrics_num(m, "bad_batches_skipped_unchanged", unchanged);
  trainer_free(&tr);
  task_free(&t);
  return unchanged == 2 ? CT_OK : ct_fail(CT_ERR_VALUE, "ch09: a bad batch reached the weights");
}
/*md output bad batch*/

/*md
::: zh
## main

`main` 选设备：有 GPU 时低精度默认是 float16（PyTorch 在 CUDA 上的默认），没有时是 bfloat16（PyTorch 的 CPU 默认），然后依次演示本章的各节。
:::
::: en
## main

`main` chooses the device; with a GPU the default lower precision is float16 (PyTorch's default on CUDA), without one bfloat16 (PyTorch's CPU default); then it shows the chapter's sections in order.
:::
*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch09", .summary = "Chapter 9: automatic mixed precision, autocast and GradScaler."};
  settings s = {.steps = 40, .batch = 256, .hidden = 1024, .scale_steps = 40, .half_steps = 1000, .lr = 0.05,
                .out_dir = "."};
  ct_cli_opt opts[] = {
      {"steps", CT_OPT_INT, &s.steps, "training steps of each timed run (--quick: 8)"},
      {"batch-size", CT_OPT_INT, &s.batch, "the MLP's batch; the conv model takes a quarter (--quick: 32)"},
      {"hidden", CT_OPT_INT, &s.hidden, "the MLP's width, also its input width (--quick: 128)"},
      {"scale-steps", CT_OPT_INT, &s.scale_steps, "steps of the GradScaler demonstration (--quick: 20)"},
      {"half-steps", CT_OPT_INT, &s.half_steps, "steps of the model.half() comparison (--quick: 40)"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "SGD learning rate"},
      {"out-dir", CT_OPT_STRING, &s.out_dir, "where the checkpoint file goes"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  g_cli = &cli;
  ct_cli_check_path(&cli, "--out-dir", s.out_dir, "ch09_checkpoint.safetensors"); // a long folder: refused now
  /*md hide*/
  if (cli.quick) {
    if (s.steps == 40) s.steps = 8;
    if (s.batch == 256) s.batch = 32;
    if (s.hidden == 1024) s.hidden = 128;
    if (s.scale_steps == 40) s.scale_steps = 20;
    if (s.half_steps == 1000) s.half_steps = 40;
  }
  if (s.steps < 6 || s.batch < 8 || s.hidden < 8 || s.scale_steps < 18 || s.half_steps < 10 || s.half_steps > 4096 ||
      !(s.lr > 0)) {
    fprintf(stderr, "ch09: --steps must be >= 6, --batch-size >= 8, --hidden >= 8, --scale-steps >= 18, "
                    "--half-steps 10..4096, --lr > 0\n"
                    "usage: ch09 [--help] ...\n");
    return 2;
  }
  // before anything is allocated: the hidden layer's weights (with grads, copies and scaler state,
  // about 8 of them) and the batch's activations
  ct_cli_need_memory(&cli, "--hidden x --hidden floats (about 8 copies)", 3, (const int64_t[]){s.hidden, s.hidden, 8},
                     sizeof(float));
  ct_cli_need_memory(&cli, "--batch-size x --hidden floats (about 8 copies)", 3,
                     (const int64_t[]){s.batch, s.hidden, 8}, sizeof(float));
  if (access(s.out_dir, W_OK) != 0) { // the checkpoint goes there: fail now, not after the training
    fprintf(stderr, "ch09: --out-dir %s: %s\n", s.out_dir, strerror(errno));
    return 1;
  }
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  const ct_device dev = cli.device;
  const ct_dtype lowp = ct_get_autocast_dtype(dev.type); // float16 on CUDA, bfloat16 on the CPU
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded
  ct_metrics_str(m, "lowp", ct_dtype_name(lowp));
  show_formats(m);
  if (show_mismatch(dev, lowp, m) != CT_OK) ct_cli_die(&cli);
  if (show_autocast(dev, lowp, m) != CT_OK) ct_cli_die(&cli);
  if (show_underflow(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_gradscaler(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_best_practice(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_half(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_speed(&s, dev, cli.quick, m) != CT_OK) ct_cli_die(&cli);
  if (show_checkpoint(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_bad_batch(&s, dev, m) != CT_OK) ct_cli_die(&cli);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 把 `show_gradscaler` 里的 `growth_interval` 改回默认的 2000，用 `--scale-steps 2100` 运行（去掉埋下的坏批次）：倍数什么时候第一次增长？和 `tests/fixtures/amp/defaults.safetensors` 里 PyTorch 的序列对照。
2. 在 `show_underflow` 里把倍数从 2^16 改成 2^8 和 2^24（`ct_grad_scaler_options.init_scale`）。被冲成零的梯度有多少？倍数太大时会发生什么（看 `skipped`）？
3. 用 `--device cpu` 比较 `speed` 表里 bfloat16 与“bfloat16，关掉 oneDNN”两行，再改 `--hidden`（256、1024、2048）：原生 BF16 指令在多大的矩阵上才值得？为什么卷积模型上 bfloat16 不一定更快？
4. 批归一化的 `running_mean` 不受跳步保护。给种子的卷积模型喂一个含 NaN 的批次，看 `running_mean` 变成什么，再想想 PyTorch 里是否一样，应该怎样防。
5. （实验）重写 `update_scale_by_hand`：`tools/lab make ch09 /tmp/lab09`，再 `tools/lab check ch09 /tmp/lab09`。
:::
::: en
## Exercises

1. In `show_gradscaler`, set `growth_interval` back to the default 2000 and run with `--scale-steps 2100` (without the planted bad batches): when does the scale first grow? Compare with PyTorch's sequence in `tests/fixtures/amp/defaults.safetensors`.
2. In `show_underflow`, change the factor from 2^16 to 2^8 and 2^24 (`ct_grad_scaler_options.init_scale`). How many gradients are flushed to zero? What happens when the factor is too large (watch `skipped`)?
3. With `--device cpu`, compare the rows "bfloat16" and "bfloat16, oneDNN off" of the `speed` table, then vary `--hidden` (256, 1024, 2048): from what matrix size on do the native BF16 instructions pay? Why is bfloat16 not necessarily faster for the convolution model?
4. Batch norm's `running_mean` is not protected by skipped steps. Feed the seed's conv model a batch holding a NaN, look at `running_mean`, consider whether PyTorch behaves the same, and how to guard against it.
5. (Lab) Write `update_scale_by_hand` again: `tools/lab make ch09 /tmp/lab09`, then `tools/lab check ch09 /tmp/lab09`.
:::
*/
