// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 6 章　图像分类：在设备上训练 Fashion-MNIST

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)，例如《PyTorch GPU 加速》）里最常见的一段 PyTorch 代码是这样的训练循环：

```python
model = Net().to(device)                      # 模型搬到设备上
loss_fn = nn.CrossEntropyLoss().to(device)    # 损失函数也"搬"过去
for imgs, targets in dataloader:
    imgs, targets = imgs.to(device), targets.to(device)   # 数据和标签
    optimizer.zero_grad()
    loss = loss_fn(model(imgs), targets)
    loss.backward()
    optimizer.step()
```

本章用 C 把这个循环完整地做一遍，数据是真实的：Fashion-MNIST，7 万张 28×28 的灰度服饰图片，10 个类别（T 恤、裤子、套头衫、连衣裙、外套、凉鞋、衬衫、运动鞋、包、短靴）。训练集 6 万张，测试集 1 万张。它是 MNIST 手写数字的替代品：同样的文件格式、同样的大小，但更难，简单的模型在它上面拉不开差距的情况少得多。

本章有两个模型：一个多层感知机（MLP，只有全连接层），一个小卷积网络（CNN，两层卷积加池化，可选 BatchNorm）。程序报告每轮（epoch）的训练损失和测试准确率、每个类别的准确率、混淆矩阵、每秒处理的图片数，并把一批测试图片连同预测结果画成 PNG。训练好的模型可以存成 safetensors 检查点，C 和 PyTorch 都能读。

本章用到的运行时部分：`nn.h`（层、损失函数）、`optim.h`（SGD、Adam）、`data.h`（数据集和 DataLoader）、`checkpoint.h`（检查点）、`progress.h`（进度条）。每一层的前向和反向都是显式写出来的：PyTorch 用 autograd 自动完成的工作，在这里一层一层地做。

```sh
cd build && ninja ch06_image_classification
./ch06                          # CNN，10 轮，有 GPU 就用 GPU
./ch06 --model mlp              # 多层感知机
./ch06 --batchnorm --save cnn.safetensors
./ch06 --load cnn.safetensors   # 只评估一个存好的检查点
./ch06 --quick                  # 2560 张训练图片、1 轮：几秒钟
```
:::
::: en
# Chapter 6. Image classification: Fashion-MNIST on the device

The PyTorch code the seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); among them “PyTorch GPU acceleration”) show most often is this training loop:

```python
model = Net().to(device)                      # the model to the device
loss_fn = nn.CrossEntropyLoss().to(device)    # the loss function "too"
for imgs, targets in dataloader:
    imgs, targets = imgs.to(device), targets.to(device)   # data and labels
    optimizer.zero_grad()
    loss = loss_fn(model(imgs), targets)
    loss.backward()
    optimizer.step()
```

This chapter runs that loop end to end in C, on real data: Fashion-MNIST, 70,000 grayscale 28×28 pictures of clothing in 10 classes (T-shirt/top, trouser, pullover, dress, coat, sandal, shirt, sneaker, bag, ankle boot), 60,000 for training and 10,000 for testing. It was made as a drop-in replacement for the MNIST digits: the same file format and size, but harder, so that models differ on it.

There are two models: a multilayer perceptron (MLP, fully connected layers only) and a small convolutional network (CNN: two convolutions with pooling, optionally with BatchNorm). The program reports each epoch's training loss and test accuracy, the accuracy of each class, the confusion matrix and the images per second, and draws a grid of test images with their predicted labels into a PNG. A trained model is saved as a safetensors checkpoint, which C and PyTorch both read.

The runtime parts this chapter uses: `nn.h` (layers, losses), `optim.h` (SGD, Adam), `data.h` (datasets and the DataLoader), `checkpoint.h` and `progress.h`. Every layer's forward and backward pass is written out: the work autograd does for a PyTorch user happens here layer by layer.

```sh
cd build && ninja ch06_image_classification
./ch06                          # the CNN, 10 epochs, on the GPU when there is one
./ch06 --model mlp              # the multilayer perceptron
./ch06 --batchnorm --save cnn.safetensors
./ch06 --load cnn.safetensors   # only evaluate a saved checkpoint
./ch06 --quick                  # 2560 training images, 1 epoch: seconds
```
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime, getpid

#include <ctype.h>
#include <inttypes.h>
#include <limits.h> // PATH_MAX
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct.h"

// stb_image_write (Debian's libstb-dev) writes the PNG; it is a single
// header, compiled here, with its own warnings silenced.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_SIMD
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

#define NUM_CLASSES 10
#define STEP_LOSSES 50  // per-step losses kept for the twin comparison
#define EVAL_BATCH 1000 // test batches: no gradients, so big ones are fine
#define FIRST_LOGITS 8  // test images whose logits go to the metrics

// Fashion-MNIST's pixel statistics over the training set (after /255), the
// numbers transforms.Normalize is given for this dataset.
#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530

// The chapter's settings, from its flags.
typedef struct settings {
  const char *model;     // "mlp" | "cnn"
  const char *optimizer; // "adam" | "sgd"
  long epochs, batch_size, workers, channels, max_steps, train_size, test_size;
  double lr, momentum, dropout;
  bool batchnorm, no_shuffle;
  const char *data, *out_dir, *save, *load, *save_init, *resume;
} settings;

// What one pass over the test set found.
typedef struct eval_result {
  int64_t total, correct;
  int64_t confusion[NUM_CLASSES][NUM_CLASSES]; // [true class][predicted class]
  double loss;                                 // mean cross-entropy
  double seconds;
  float first_logits[FIRST_LOGITS * NUM_CLASSES];
  int n_first;
} eval_result;
/*md show*/

/*md
::: zh
## 数据：Fashion-MNIST 和 DataLoader

数据来自 Debian 的 `dataset-fashion-mnist` 软件包，放在 `/usr/share/datasets/fashion-mnist`：四个 gzip 压缩的 IDX 文件（训练图片、训练标签、测试图片、测试标签）。IDX 是一种极简的格式：一个魔数说明元素类型和维数，接着是每一维的大小（大端 32 位整数），然后是原始字节。`--data DIR` 或环境变量 `CT_FASHION_MNIST_DIR` 可以指向别的目录。

`ct_fashion_mnist(dir, train, mean, std)` 做的就是 torchvision 里这两步变换：

```python
transforms.Compose([transforms.ToTensor(),                      # 像素 / 255 -> [0, 1]
                    transforms.Normalize((0.2860,), (0.3530,))]) # (x - mean) / std
```

0.2860 和 0.3530 是 Fashion-MNIST 训练集全部像素的均值和标准差。归一化之后输入大致以 0 为中心、方差为 1，和权重初始化时假设的输入尺度一致，第一层的输出不会一开始就过大或过小，训练更快也更稳。

`DataLoader` 负责把数据集切成一批一批：

- `batch_size`：每批多少张；`shuffle`：每轮开始时用带种子的 Philox 生成器把顺序打乱（种子相同，顺序就相同），这样模型不会记住样本的先后顺序；
- `num_workers`：几个工作线程并行地把样本拼成批（PyTorch 用的是工作进程）；`prefetch_factor`：每个工作线程最多提前准备几批；
- `pin_memory`：批数据放在锁页内存里。只有锁页内存才能被 GPU 的 DMA 引擎直接读取，主机到设备的拷贝才能异步进行（第 2 章测过它的带宽）；
- 把批数据拷到设备上的工作在一条**旁路流**（side stream）上完成，计算用的当前流只在真正用到这批数据之前等待拷贝完成的事件。于是第 k 批在 GPU 上训练的同时，第 k+1 批已经在路上了。种子教程的 DataLoader 调优一节在循环里写 `x.to("cuda", non_blocking=True)`，仿佛这一行就能让下一批的拷贝和计算重叠。其实不能：这一行把拷贝排在**当前流**上，而当前流上排在它前面的是上一批的核函数，拷贝要等它们都做完才开始；`non_blocking=True` 只是让主机不必等待。要真的重叠，得像 ct 这样另开一条流：`side = torch.cuda.Stream()`，`side.wait_stream(torch.cuda.current_stream())`，在 `with torch.cuda.stream(side):` 里拷贝，用之前让当前流等拷贝完成，再对拷过来的张量调用 `record_stream(torch.cuda.current_stream())`，免得缓存分配器在当前流还在读它们的时候把内存交给旁路流。本章的 PyTorch twin 正是这样写的（`tools/fixtures/batches.py` 里的 `device_batches`），所以两边比的是同一件事。

训练时打乱顺序，测试时不打乱（顺序不影响准确率，而固定的顺序让结果可以逐张对照）。`--quick` 只取训练集的前 2560 张、测试集的前 1000 张，相当于 PyTorch 的 `Subset`：这里用 `ct_tensor_dataset` 把取出来的那部分包成一个新的数据集。
:::
::: en
## Data: Fashion-MNIST and the DataLoader

The data comes from Debian's `dataset-fashion-mnist` package, in `/usr/share/datasets/fashion-mnist`: four gzip-compressed IDX files (training images, training labels, test images, test labels). IDX is a minimal format: a magic number giving the element type and the number of dims, each dim's size (big-endian 32-bit), then the raw bytes. `--data DIR` or the environment variable `CT_FASHION_MNIST_DIR` points elsewhere.

`ct_fashion_mnist(dir, train, mean, std)` does what these two torchvision transforms do:

```python
transforms.Compose([transforms.ToTensor(),                      # pixel / 255 -> [0, 1]
                    transforms.Normalize((0.2860,), (0.3530,))]) # (x - mean) / std
```

0.2860 and 0.3530 are the mean and standard deviation of all pixels of Fashion-MNIST's training set. Normalized, the inputs are centred near 0 with unit variance, the scale the weight initialization assumes, so the first layer's outputs start neither too large nor too small and training is faster and steadier.

The `DataLoader` cuts the dataset into batches:

- `batch_size`: images per batch; `shuffle`: at the start of each epoch the order is permuted by a seeded Philox generator (same seed, same order), so the model cannot learn the order of the samples;
- `num_workers`: worker threads that gather samples into batches in parallel (PyTorch uses worker processes); `prefetch_factor`: how many batches each worker may prepare ahead;
- `pin_memory`: batches live in page-locked (pinned) host memory. Only pinned memory can be read directly by the GPU's DMA engines, so only then can the host-to-device copy run asynchronously (chapter 2 measured its bandwidth);
- the copy of each batch to the device runs on a **side stream**; the current stream, where the computation runs, waits on the copy's event only just before it uses the batch. So while batch k trains on the GPU, batch k+1 is already on its way. The seed tutorial's DataLoader tuning section writes `x.to("cuda", non_blocking=True)` in the loop, as if that line alone overlapped the next batch's copy with compute. It does not: it queues the copy on the **current stream**, behind the previous batch's kernels, so the copy starts only when they are done; `non_blocking=True` only spares the host the wait. Real overlap takes a second stream, as ct uses: `side = torch.cuda.Stream()`, `side.wait_stream(torch.cuda.current_stream())`, the copy inside `with torch.cuda.stream(side):`, the current stream made to wait for the copy before use, and `record_stream(torch.cuda.current_stream())` on the copied tensors, so the caching allocator does not hand their memory to the side stream while the current stream still reads them. The chapter's PyTorch twin is written that way (`device_batches`, in `tools/fixtures/batches.py`), so both sides measure the same thing.

Training batches are shuffled, test batches are not (the order does not change the accuracy, and a fixed order lets results be compared image by image). `--quick` takes only the first 2560 training and the first 1000 test images, PyTorch's `Subset`: here `ct_tensor_dataset` wraps the part taken out as a new dataset.
:::
*/
// The first n samples of ds as a new dataset (torch.utils.data.Subset(ds,
// range(n))); n <= 0 or n >= len(ds) keeps ds itself. Takes ownership of ds.
static ct_dataset *first_n(ct_dataset *ds, int64_t n) {
  if (!ds || n <= 0 || n >= ct_dataset_len(ds)) return ds;
  ct_shape xs = ct_dataset_x_shape(ds), shape = {xs.ndim + 1, {n}};
  for (int i = 0; i < xs.ndim; ++i) shape.d[i + 1] = xs.d[i];
  ct_tensor *x = ct_empty(shape, ct_dataset_x_dtype(ds), ct_device_cpu()); // (n, 1, 28, 28)
  ct_tensor *y = ct_empty(CT_SHAPE(n), ct_dataset_y_dtype(ds), ct_device_cpu()); // (n,)
  int64_t *idx = malloc((size_t)n * sizeof *idx);
  ct_dataset *sub = NULL;
  if (x && y && idx) {
    for (int64_t i = 0; i < n; ++i) idx[i] = i;
    if (ct_dataset_get_batch(ds, idx, n, x, y) == CT_OK) sub = ct_tensor_dataset(x, y);
  }
  free(idx);
  ct_free(x);
  ct_free(y);
  ct_dataset_free(ds);
  return sub;
}

static ct_dataloader *make_loader(ct_dataset *ds, int64_t batch, bool shuffle, int workers,
                                  uint64_t seed, ct_device device) {
  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.num_workers = workers;
  o.pin_memory = device.type == CT_CUDA; // page-locked batches: async H2D copies
  o.prefetch_factor = 2;
  o.seed = seed;
  o.device = device; // batches arrive on the device, copied on a side stream
  return ct_dataloader_create(ds, o);
}
/*md twin data*/

static void show_data(const settings *s, const ct_cli *cli, ct_dataset *train, ct_dataset *test,
                      ct_dataloader *train_dl, ct_metrics *m) {
  ct_cli_section("data");
  char sh[64];
  printf("train: %" PRId64 " images %s float32, labels int64 in [0, %d)\n", ct_dataset_len(train),
         ct_shape_str(ct_dataset_x_shape(train), sh, sizeof sh), NUM_CLASSES);
  printf("test:  %" PRId64 " images\n", ct_dataset_len(test));
  printf("normalize: (x / 255 - %.4f) / %.4f\n", FMNIST_MEAN, FMNIST_STD);
  printf("classes:");
  for (int c = 0; c < NUM_CLASSES; ++c) printf(" %d=%s", c, ct_fashion_mnist_class_name(c));
  printf("\n");
  printf("train loader: batch_size %ld, shuffle %s (seed %llu), num_workers %ld, pin_memory %s, "
         "prefetch_factor 2 -> %" PRId64 " batches per epoch\n",
         s->batch_size, s->no_shuffle ? "off" : "on", (unsigned long long)cli->seed, s->workers,
         cli->device.type == CT_CUDA ? "on" : "off", ct_dataloader_len(train_dl));
  ct_metrics_num(m, "train_size", (double)ct_dataset_len(train));
  ct_metrics_num(m, "test_size", (double)ct_dataset_len(test));
  ct_metrics_num(m, "batches_per_epoch", (double)ct_dataloader_len(train_dl));
}
/*md output data*/

/*md
::: zh
## 模型

MLP 把 28×28 的图片展平成 784 维的向量，经过两个带 ReLU 的隐藏层（256 和 128 个单元），输出 10 个数，每个类别一个。这 10 个数叫 logits：还不是概率，softmax 之后才是。

CNN 保留图片的二维结构。`Conv2d(1, 16, 3, padding=1)` 用 16 个 3×3 的卷积核扫过图片，每个位置输出 16 个数，填充 1 圈 0 使输出仍是 28×28；ReLU 之后 `MaxPool2d(2)` 在每个 2×2 的窗口里取最大值，把尺寸减半到 14×14。第二层卷积把 16 个通道变成 32 个，再池化到 7×7。这时每张图片是 32×7×7 = 1568 个数，展平之后接两层全连接：1568 → 128 → 10。卷积核在整张图上共享，所以第二层卷积只有 16×32×9 + 32 = 4,640 个参数，却在 14×14 个位置上都用到，每张图片要做约 180 万次乘加；全连接层的 1568×128 个权重占了参数的大头，每个权重每张图片却只用一次。`--channels C` 改变第一层的通道数（第二层是它的两倍）。默认的 16 是为 CPU 选的：在这台 2 核机器上 10 轮几分钟就能跑完，准确率仍在 0.91 以上；`--channels 32` 更准一点，计算量是三倍多。

`Dropout(0.25)` 在训练时随机把四分之一的激活置零，其余的乘以 1/(1-p) 保持期望不变；它让网络不能依赖个别单元，减少过拟合。`--batchnorm` 在每个卷积后面加一个 `BatchNorm2d`（后面专门讲）。`--dropout 0` 让 Dropout 变成恒等映射，但层还在，所以参数的名字（`10.weight` 之类）不会变，检查点仍然兼容。

`ct_nn_sequential` 对应 `nn.Sequential`：把子模块依次命名为 `0`、`1`、`2`……，参数的名字就是 `1.weight`、`4.bias` 这样的 state_dict 键，和 PyTorch 里结构相同的模型一模一样。`ct_module_str` 按 `print(model)` 的格式打印模型。

`ct_module_to(model, device)` 就是 `model.to(device)`：把每个参数和缓冲区（BatchNorm 的 running_mean 等）搬到设备上。和 PyTorch 一样，优化器要在搬完之后再创建，它的状态（Adam 的一阶、二阶矩）建在参数所在的设备上。种子教程里有一行 `optimizer = optimizer.to(device)`：PyTorch 的优化器没有 `.to` 方法，这一行会抛出 `AttributeError`。优化器本来也不用搬：它只引用模型的参数，状态按需建在参数所在的设备上，先搬模型、再建优化器就够了。至于 `loss_fn.to(device)`：交叉熵没有参数也没有缓冲区，搬它什么也不做；真正要求的是 logits 和标签在同一个设备上，DataLoader 已经把标签送到了那里。
:::
::: en
## The models

The MLP flattens the 28×28 picture into a 784-vector and passes it through two hidden layers with ReLU (256 and 128 units) to 10 outputs, one per class. Those 10 numbers are the logits: not yet probabilities, which softmax makes of them.

The CNN keeps the picture two-dimensional. `Conv2d(1, 16, 3, padding=1)` slides 16 kernels of 3×3 over the image and gives 16 numbers at each position, with one ring of zero padding keeping the output 28×28; after ReLU, `MaxPool2d(2)` keeps the maximum of each 2×2 window and halves the size to 14×14. The second convolution turns 16 channels into 32 and pooling brings them to 7×7. Each image is now 32×7×7 = 1568 numbers, which two fully connected layers take to 128 and then 10. The kernels are shared over the whole image, so the second convolution has only 16×32×9 + 32 = 4,640 parameters yet is used at all 14×14 positions, about 1.8 million multiply-adds per image; the 1568×128 weights of the first fully connected layer are most of the model, yet each is used only once per image. `--channels C` sets the first convolution's channels (the second has twice as many). The default of 16 is chosen for the CPU: on this 2-core machine 10 epochs take minutes and still reach more than 0.91; `--channels 32` is a little more accurate for over three times the work.

`Dropout(0.25)` zeroes a random quarter of the activations during training and scales the rest by 1/(1-p) to keep the expected value; the network cannot rely on any single unit, which reduces overfitting. `--batchnorm` adds a `BatchNorm2d` after each convolution (a section below is about it). `--dropout 0` makes the dropout an identity, but the layer stays, so the parameter names (`10.weight` and so on) do not move and checkpoints stay compatible.

`ct_nn_sequential` is `nn.Sequential`: it names its children `0`, `1`, `2`, ..., so the parameters are called `1.weight`, `4.bias`: the state_dict keys of the same model built in PyTorch. `ct_module_str` prints the model the way `print(model)` does.

`ct_module_to(model, device)` is `model.to(device)`: every parameter and buffer (BatchNorm's running_mean and the like) moves to the device. As in PyTorch, the optimizer is created after the move, so that its state (Adam's first and second moments) is created where the parameters are. A seed tutorial writes `optimizer = optimizer.to(device)`: PyTorch's optimizers have no `.to` method, so that line raises `AttributeError`. Nor does an optimizer need moving: it only refers to the model's parameters and creates its state where they are, so moving the model first and creating the optimizer afterwards is all it takes. As for `loss_fn.to(device)`: cross-entropy has no parameters or buffers, so moving it does nothing; what matters is that the logits and the labels are on the same device, and the DataLoader has already put the labels there.
:::
*/
// nn.Sequential(*mods), or NULL (and every module freed) if any is NULL.
static ct_module *sequential(ct_module **mods, int n) {
  for (int i = 0; i < n; ++i)
    if (!mods[i]) {
      for (int j = 0; j < n; ++j) ct_module_free(mods[j]);
      return NULL;
    }
  return ct_nn_sequential(n, mods);
}

static ct_module *build_mlp(void) {
  ct_module *mods[] = {
      ct_nn_flatten(),              // 0: (B, 1, 28, 28) -> (B, 784)
      ct_nn_linear(784, 256, true), // 1
      ct_nn_relu(),                 // 2
      ct_nn_linear(256, 128, true), // 3
      ct_nn_relu(),                 // 4
      ct_nn_linear(128, 10, true),  // 5: (B, 10) logits
  };
  return sequential(mods, (int)(sizeof mods / sizeof mods[0]));
}

static ct_module *build_cnn(int64_t c1, bool batchnorm, double dropout) {
  int64_t c2 = 2 * c1;
  ct_module *mods[13];
  int n = 0;
  mods[n++] = ct_nn_conv2d(1, c1, 3, 1, 1, true);  // (B, 1, 28, 28) -> (B, c1, 28, 28)
  if (batchnorm) mods[n++] = ct_nn_batchnorm2d(c1, 1e-5, 0.1);
  mods[n++] = ct_nn_relu();
  mods[n++] = ct_nn_maxpool2d(2, 0);               // -> (B, c1, 14, 14)
  mods[n++] = ct_nn_conv2d(c1, c2, 3, 1, 1, true); // -> (B, c2, 14, 14)
  if (batchnorm) mods[n++] = ct_nn_batchnorm2d(c2, 1e-5, 0.1);
  mods[n++] = ct_nn_relu();
  mods[n++] = ct_nn_maxpool2d(2, 0);               // -> (B, c2, 7, 7)
  mods[n++] = ct_nn_flatten();                     // -> (B, c2 * 49)
  mods[n++] = ct_nn_linear(c2 * 7 * 7, 128, true);
  mods[n++] = ct_nn_relu();
  mods[n++] = ct_nn_dropout(dropout);
  mods[n++] = ct_nn_linear(128, NUM_CLASSES, true); // (B, 10) logits
  return sequential(mods, n);
}
/*md twin model*/

static void show_model(const settings *s, ct_module *model, ct_metrics *m) {
  ct_cli_section("model");
  char *text = ct_module_str(model); // print(model)
  if (text) printf("%s\n", text);
  free(text);
  int n = 0;
  ct_param **state = ct_module_state(model, &n);
  int n_params = 0;
  ct_module_parameters(model, &n_params);
  char dev[CT_DEVICE_STR_MAX];
  printf("parameters: %" PRId64 " in %d tensors (state_dict: %d entries), on %s\n",
         ct_module_num_elements(model), n_params, n, ct_device_str(ct_module_device(model), dev));
  for (int i = 0; i < n; ++i) {
    char sh[64];
    printf("  %-24s %-16s %s%s\n", state[i]->name, ct_shape_str(ct_shape_of(state[i]->value), sh, sizeof sh),
           ct_dtype_name(ct_dtype_of(state[i]->value)), state[i]->is_buffer ? "  (buffer)" : "");
  }
  ct_metrics_str(m, "model", s->model);
  ct_metrics_num(m, "batchnorm", s->batchnorm);
  ct_metrics_num(m, "num_params", (double)ct_module_num_elements(model));
}
/*md output model*/

/*md
::: zh
## 每一层的反向传播

PyTorch 在前向时记录计算图，`loss.backward()` 沿着图倒着走。这里没有图：`Sequential` 的前向依次调用每一层，反向按相反的顺序调用每一层的 `backward`，把“损失对本层输出的梯度” dL/dy 变成“损失对本层输入的梯度” dL/dx，交给前一层，同时把参数的梯度**累加**进 `param->grad`（和 autograd 一样是累加，所以每一步之前要清零）。每一层只需要知道自己的局部规则：

- **Linear**，y = x Wᵀ + b，x 是 (B, in)：dL/dx = dL/dy · W，dL/dW = (dL/dy)ᵀ · x，dL/db = 对 batch 求和的 dL/dy。三个都是矩阵乘法，CPU 上交给 OpenBLAS，GPU 上交给 cuBLAS。
- **Conv2d** 用 im2col 变成矩阵乘法：把每个输出位置对应的 C_in×3×3 个输入值排成一列，卷积就是“卷积核矩阵 (C_out, C_in·9) × 列矩阵 (C_in·9, H·W)”。反向时，dL/dW = dL/dy × 列矩阵ᵀ；dL/d列 = Wᵀ × dL/dy，再用 col2im 把每一列加回它来自的输入位置（一个输入像素出现在 9 个窗口里，它的梯度是 9 份之和）。
- **ReLU**：前向输出为正的位置梯度原样通过，其余位置为 0。
- **MaxPool2d**：前向记住每个窗口最大值的位置（argmax），反向把梯度只送回那个位置，窗口里其他三个位置得 0。
- **Flatten**：只是改变形状，反向把梯度改回原来的形状。
- **Dropout**：前向记住随机掩码，反向用同一个掩码（乘同样的 1/(1-p)）。

所以训练模式下的前向要保存反向用得到的东西：Linear 和 Conv 的输入（或 im2col 的列）、ReLU 的掩码、MaxPool 的 argmax、Dropout 的掩码、BatchNorm 的批统计量。这正是训练比推理多占显存的原因，也是评估时要切换到 eval 模式的原因：ct 的 eval 模式什么也不保存。这一点和 PyTorch 不同。PyTorch 的 `model.eval()` 只改变 Dropout、BatchNorm 这类层的行为，autograd 照样记录计算图、保存反向要用的张量；不记录要靠 `torch.no_grad()`。ct 的 eval 模式两件事都做：它既是 `model.eval()`，也是 `torch.no_grad()`。
:::
::: en
## Each layer's backward pass

PyTorch records a graph during the forward pass and `loss.backward()` walks it in reverse. Here there is no graph: `Sequential`'s forward calls each layer in turn, and its backward calls each layer's `backward` in the opposite order, turning dL/dy, the gradient of the loss with respect to the layer's output, into dL/dx, the gradient with respect to its input, which goes to the layer before; on the way it **adds** the parameters' gradients into `param->grad` (adds, as autograd does, which is why they are zeroed before each step). Each layer only needs its own local rule:

- **Linear**, y = x Wᵀ + b with x of shape (B, in): dL/dx = dL/dy · W, dL/dW = (dL/dy)ᵀ · x, dL/db = dL/dy summed over the batch. All three are matrix products: OpenBLAS on the CPU, cuBLAS on the GPU.
- **Conv2d** becomes a matrix product through im2col: the C_in×3×3 input values under each output position are laid out as one column, and the convolution is "kernel matrix (C_out, C_in·9) × column matrix (C_in·9, H·W)". Backward, dL/dW = dL/dy × columnsᵀ; dL/dcolumns = Wᵀ × dL/dy, and col2im adds each column back to the input positions it came from (an input pixel sits in 9 windows, so its gradient is the sum of 9 parts).
- **ReLU**: the gradient passes where the forward output was positive and is 0 elsewhere.
- **MaxPool2d**: the forward pass remembers where each window's maximum was (the argmax); backward sends the gradient to that position only, and the other three get 0.
- **Flatten**: only a change of shape; backward changes the gradient back.
- **Dropout**: the forward pass keeps its random mask; backward applies the same mask (and the same 1/(1-p)).

So a forward pass in training mode keeps what backward will need: the inputs of Linear and Conv (or the im2col columns), ReLU's mask, MaxPool's argmax, Dropout's mask, BatchNorm's batch statistics. That is why training takes more memory than inference, and why evaluation switches to eval mode: ct's eval mode keeps nothing. Here ct differs from PyTorch. PyTorch's `model.eval()` only changes how layers such as Dropout and BatchNorm behave; autograd still records the graph and keeps the tensors backward needs, and it is `torch.no_grad()` that stops the recording. ct's eval mode does both: it is `model.eval()` and `torch.no_grad()` at once.
:::
*/

/*md
::: zh
## 交叉熵 = log-softmax + NLL

分类的损失是交叉熵。对一张图片，logits 是 x（10 个数），正确类别是 t：

$$\mathrm{softmax}(x)_j = \frac{e^{x_j}}{\sum_k e^{x_k}}, \qquad \ell = -\log \mathrm{softmax}(x)_t = \log\sum_k e^{x_k} - x_t$$

先做 log-softmax，再取出正确类别那一项取负（negative log-likelihood，NLL），PyTorch 的 `nn.CrossEntropyLoss` 就是 `log_softmax` 加 `nll_loss`。两步合成一个核（fused）更好：直接算 `logsumexp` 不需要先算出 softmax 再取对数；而且减去最大值 m 再求指数，log Σ e^(x_k) = m + log Σ e^(x_k − m)，logits 很大时也不会溢出。一个 batch 的损失是各张图片 ℓ 的平均。

它的梯度非常简单：

$$\frac{\partial \ell}{\partial x_j} = \mathrm{softmax}(x)_j - [j = t]$$

预测的概率减去 one-hot 的真实分布，再除以 batch 大小 B（因为取了平均）。预测越准，梯度越小。`ct_cross_entropy_loss(logits, y, &grad)` 一次返回损失和这个梯度，梯度就是整个网络反向传播的起点：PyTorch 里 `loss.backward()` 的第一步。

标签必须落在 [0, C) 里，C 是 logits 的列数。有一篇种子教程的训练例子在这里出了错：网络最后一层是 `nn.Linear(2, 1)`，只输出一列，却配上 `nn.CrossEntropyLoss` 和取值 0 或 1 的标签。C = 1，标签 1 越界。在 CPU 上 PyTorch 抛出 `IndexError: Target 1 is out of bounds.`；在 CUDA 上检查发生在核函数里，是一次 device-side assert（`RuntimeError: CUDA error: device-side assert triggered`），之后这个进程的 CUDA 上下文就不能再用了。两个类别要么用 `Linear(2, 2)` 配 `CrossEntropyLoss`，要么用一列 logits 配 `BCEWithLogitsLoss` 和浮点标签。ct 在 CPU 上让 `ct_cross_entropy_loss` 返回 `NULL`，消息是同样的 `Target 1 is out of bounds.`；在 GPU 上核函数把越界记下来，在下一次等待设备的调用里作为错误返回，进程照常运行。
:::
::: en
## Cross-entropy = log-softmax + NLL

The classification loss is cross-entropy. For one image with logits x (10 numbers) and correct class t:

$$\mathrm{softmax}(x)_j = \frac{e^{x_j}}{\sum_k e^{x_k}}, \qquad \ell = -\log \mathrm{softmax}(x)_t = \log\sum_k e^{x_k} - x_t$$

Log-softmax first, then the negated entry of the correct class (the negative log-likelihood, NLL): PyTorch's `nn.CrossEntropyLoss` is `log_softmax` followed by `nll_loss`. Fusing the two into one kernel is better: `logsumexp` is computed directly, without forming the softmax and taking its log; and subtracting the maximum m before exponentiating, log Σ e^(x_k) = m + log Σ e^(x_k − m), keeps large logits from overflowing. A batch's loss is the mean of its images' ℓ.

Its gradient is remarkably simple:

$$\frac{\partial \ell}{\partial x_j} = \mathrm{softmax}(x)_j - [j = t]$$

the predicted probabilities minus the one-hot true distribution, divided by the batch size B (because of the mean). The better the prediction, the smaller the gradient. `ct_cross_entropy_loss(logits, y, &grad)` returns the loss and this gradient at once; the gradient is where the whole network's backward pass starts, the first step of PyTorch's `loss.backward()`.

The labels must lie in [0, C), C being the number of logit columns. One seed tutorial's training example goes wrong here: its network ends in `nn.Linear(2, 1)`, a single output column, yet it uses `nn.CrossEntropyLoss` with labels 0 or 1. C = 1, so label 1 is out of range. On the CPU PyTorch raises `IndexError: Target 1 is out of bounds.`; on CUDA the check is inside the kernel and fails as a device-side assert (`RuntimeError: CUDA error: device-side assert triggered`), after which the process's CUDA context is unusable. For two classes, use `Linear(2, 2)` with `CrossEntropyLoss`, or one logit column with `BCEWithLogitsLoss` and float labels. ct makes `ct_cross_entropy_loss` return `NULL` on the CPU with the same `Target 1 is out of bounds.`; on the GPU the kernel records the bad label and the next call that waits for the device returns it as an error, and the process goes on.
:::
*/

/*md
::: zh
## 一步训练

一步训练就是开头那段 PyTorch 代码的循环体，五个动作：清零梯度，前向，算损失和它的梯度，反向，更新参数。`zero_grad(set_to_none=true)` 直接释放梯度，下一次反向时重新创建（PyTorch 2 的默认做法，省掉一次清零的写入）。反向用的是 `ct_module_backward_params`：图片不需要梯度（在 PyTorch 里它们的 `requires_grad` 也是 False），所以第一层不算 dL/dx；对 CNN 来说每一步省掉一次 GEMM 和一次 col2im。

注意这个函数**不读取**损失的值：返回的是设备上的一个 0 维张量。在 GPU 上，这一步的所有工作只是被排进了流里，函数返回时它们可能还没有执行。读出损失（PyTorch 的 `loss.item()`）会让 CPU 停下来等 GPU 做完，之后 CPU 才开始排下一步的工作，GPU 在这段时间里空着。所以训练循环把每一步的损失累加在设备上，只偶尔读一次。连损失函数对标签的检查也不等待：核函数没法让一个已经返回的调用失败，所以在 GPU 上，超出 0–9 的标签会让那一行的损失变成 NaN，并在下一次需要等待设备的调用（读取数值、同步）时报告出来，指明是哪个标签、在哪一行。PyTorch 的 device-side assert 也是这样，所以它的 CUDA 错误常常指向后面的某一行代码。
:::
::: en
## One training step

A training step is the body of the PyTorch loop at the top, five actions: zero the gradients, forward, the loss and its gradient, backward, update the parameters. `zero_grad(set_to_none=true)` frees the gradients outright and the next backward creates them again (PyTorch 2's default, which saves writing zeros). Backward is `ct_module_backward_params`: the images need no gradient (their `requires_grad` is False in PyTorch too), so the first layer skips dL/dx; for the CNN that saves a GEMM and a col2im per step.

Note that this function does **not** read the loss's value: it returns a 0-d tensor on the device. On a GPU, all of the step's work has only been queued on the stream when the function returns, and may not have run yet. Reading the loss (PyTorch's `loss.item()`) makes the CPU wait until the GPU has finished, and only then does the CPU start queueing the next step, while the GPU sits idle. So the training loop adds each step's loss up on the device and reads the sum only now and then. Even the loss's check of the labels does not wait: a kernel cannot make a call that has already returned fail, so on a GPU a label outside 0–9 turns that row's loss into NaN and is reported at the next call that waits for the device (reading a value, synchronizing), naming the label and its row. PyTorch's device-side assert behaves the same way, which is why its CUDA errors often point at a later line.
:::
*/
// One optimization step on the batch (x, y), both on the model's device.
// Returns the batch's mean loss (a new 0-d tensor on the device), or NULL.
static ct_tensor *train_step(ct_module *model, ct_optimizer *opt, const ct_tensor *x,
                             const ct_tensor *y) {
  /* LAB BEGIN: zero the grads (set_to_none), forward x, cross-entropy loss with its gradient, backward it, step; return the loss */
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return NULL; // optimizer.zero_grad()
  ct_tensor *logits = ct_module_forward(model, x);              // (B, 10)
  if (!logits) return NULL;
  ct_tensor *dlogits = NULL;                                    // (B, 10): (softmax - onehot) / B
  ct_tensor *loss = ct_cross_entropy_loss(logits, y, &dlogits); // loss_fn(logits, y)
  ct_free(logits);
  if (!loss) return NULL;
  int rc = ct_module_backward_params(model, dlogits); // loss.backward(): grads into param->grad
  ct_free(dlogits);
  if (rc != CT_OK || ct_optimizer_step(opt) != CT_OK) { // optimizer.step()
    ct_free(loss);
    return NULL;
  }
  return loss;
  /* LAB END */
}
/*md twin train_epoch*/

/*md
::: zh
## 评估：eval 模式、准确率和混淆矩阵

`ct_module_train(model, false)` 就是 `model.eval()`。它改变两种层的行为：Dropout 不再丢弃任何东西；BatchNorm 不再用当前 batch 的统计量，改用训练时积累下来的 running_mean 和 running_var，于是一张图片的预测结果不再取决于和它同批的其他图片。ct 的 eval 模式同时还是 `torch.no_grad()`：前向不保存反向需要的任何东西，所以测试时可以用大得多的 batch（这里是 1000）。PyTorch 的 `model.eval()` 不管这件事，所以 twin 在评估时写的是 `model.eval()` 再加 `with torch.no_grad():`。

每一批取 logits 每一行最大值的下标（`argmax`，对应 `logits.argmax(1)`）作为预测的类别，拷回主机计数。混淆矩阵 C[i][j] 是真实类别为 i、被预测成 j 的图片数：对角线是预测对的，第 i 行的和是测试集中类别 i 的图片数，第 i 类的准确率（召回率）是 C[i][i] 除以这一行的和。下面的计数函数是一个练习区。
:::
::: en
## Evaluation: eval mode, accuracy and the confusion matrix

`ct_module_train(model, false)` is `model.eval()`. It changes two kinds of layer: Dropout drops nothing any more, and BatchNorm stops using the current batch's statistics and uses the running_mean and running_var gathered during training instead, so that an image's prediction no longer depends on the other images in its batch. ct's eval mode is also `torch.no_grad()`: the forward pass keeps nothing for a backward pass, which is why testing can use much bigger batches (1000 here). PyTorch's `model.eval()` does not do that part, so the twin evaluates under `model.eval()` plus `with torch.no_grad():`.

For each batch, the index of the largest logit in each row (`argmax`, PyTorch's `logits.argmax(1)`) is the predicted class, copied back to the host and counted. The confusion matrix C[i][j] counts the images of true class i predicted as j: the diagonal holds the correct ones, row i sums to the number of test images of class i, and the accuracy (recall) of class i is C[i][i] over that row's sum. The counting function below is a lab region.
:::
*/
// Adds a batch of n predictions to the result: the confusion matrix, the
// number correct, the number seen.
static void count_predictions(const int64_t *pred, const int64_t *label, int64_t n, eval_result *r) {
  /* LAB BEGIN: for each of the n images add one to confusion[true][predicted]; count the correct ones and all n */
  for (int64_t i = 0; i < n; ++i) {
    r->confusion[label[i]][pred[i]] += 1;
    if (pred[i] == label[i]) r->correct += 1;
  }
  r->total += n;
  /* LAB END */
}

static int evaluate(ct_module *model, ct_dataloader *dl, eval_result *r) {
  memset(r, 0, sizeof *r);
  bool was_training = ct_module_is_training(model);
  ct_module_train(model, false); // model.eval()
  int64_t cap = EVAL_BATCH;
  int64_t *pred = malloc((size_t)cap * sizeof *pred), *label = malloc((size_t)cap * sizeof *label);
  double loss_sum = 0, t0 = ct_cli_seconds();
  int rc = pred && label ? ct_dataloader_start_epoch(dl) : (int)ct_fail(CT_ERR_OOM, "ch06: out of host memory");
  ct_tensor *x = NULL, *y = NULL;
  while (rc == CT_OK && (rc = ct_dataloader_next(dl, &x, &y)) == 1) {
    rc = CT_OK;
    int64_t n = ct_size(y, 0);
    ct_tensor *logits = ct_module_forward(model, x);                      // (n, 10)
    ct_tensor *loss = logits ? ct_cross_entropy_loss(logits, y, NULL) : NULL; // no gradient
    ct_tensor *p = logits ? ct_argmax_dim(logits, 1, false) : NULL;         // (n,) int64
    double l = 0;
    if (!loss || !p || n > cap || ct_item(loss, &l) != CT_OK ||
        ct_copy_to_host(p, pred, (size_t)cap * sizeof *pred) != CT_OK ||
        ct_copy_to_host(y, label, (size_t)cap * sizeof *label) != CT_OK)
      rc = n > cap ? (int)ct_fail(CT_ERR_VALUE, "ch06: eval batch %" PRId64 " > %" PRId64, n, cap) : -1;
    if (rc == CT_OK) {
      loss_sum += l * (double)n;
      if (r->total == 0) { // the first images' logits, for comparison with PyTorch
        r->n_first = (int)(n < FIRST_LOGITS ? n : FIRST_LOGITS);
        ct_tensor *head = ct_narrow(logits, 0, 0, r->n_first), *hc = head ? ct_contiguous(head) : NULL;
        if (!hc || ct_copy_to_host(hc, r->first_logits, sizeof r->first_logits) != CT_OK) rc = -1;
        ct_free(hc);
        ct_free(head);
      }
      count_predictions(pred, label, n, r);
    }
    ct_free(p);
    ct_free(loss);
    ct_free(logits);
    ct_free(x);
    ct_free(y);
  }
  free(pred);
  free(label);
  ct_module_train(model, was_training);
  r->loss = r->total ? loss_sum / (double)r->total : NAN;
  r->seconds = ct_cli_seconds() - t0;
  return rc < 0 ? -1 : rc;
}
/*md twin evaluate*/

/*md
::: zh
## 训练循环

每轮：切到训练模式，让 DataLoader 开始新的一轮（新的随机顺序），一批一批地训练。每一步的损失加到设备上的 `loss_sum` 里（一个 0 维张量，在设备上做加法，不需要同步）；CPU 上读它没有代价，每步都读；GPU 上每 50 步才读一次，给进度条一个新数。epoch 结束时读一次，得到这个 epoch 的平均训练损失，这次读取同时也保证了这个 epoch 的所有工作都已完成，计时才准确。读到的和一旦是 NaN 或 inf（学习率太大，比如 `--optimizer sgd --lr 1e6`），训练就停下并以退出码 1 结束，报告出问题的那一步（GPU 上是两次读取之间的步数范围），不写 `--save` 和 `--metrics` 的文件。

在终端里运行时，进度条在一行里不断刷新（步数、损失、每秒样本数、预计剩余时间）；输出被重定向时（日志、测试、本书），每轮只打印一行。每轮之后在测试集上评估一次，打印测试损失和准确率。训练损失一直下降、测试损失却开始上升，就是过拟合的信号。

`--no-shuffle` 和 `--max-steps N` 用来和 PyTorch 逐步对照：两边从同一组初始权重出发（C 用 `--save-init` 写出，PyTorch 孪生程序用 `--load-init` 读入），按同样的顺序读数据，关掉 Dropout（两边的随机掩码来自不同的生成器）。测试 `chapter.ch06_twin_agree` 检查前 20 步的损失和 PyTorch 相差不到 1e-4（相对误差）。

比较的对象是用 float64 运行的 PyTorch（`--float64`），而不是 float32 的 PyTorch，这件事本身值得一学。默认的 CNN 用 Adam 训练 20 步后，C 的 float32 损失和 PyTorch 的 float64 损失相差约 1e-7，PyTorch 自己的 float32 和 float64 却相差约 3e-4。原因在 Adam：它的第一步把每个权重都移动约 lr，不管梯度多小。一个本应抵消成 0 的梯度和（实际约 1e-8，完全是舍入噪声）也会让权重移动 lr，方向由噪声决定，噪声就这样被放大了。两个 float32 实现的舍入各不相同，所以它们之间的差别说明不了谁对；float64 的运行才接近精确的轨迹。用 Adam 训练 MLP 时，连 C 的 float32 也会在 20 步内离开 float64 的轨迹（约 1e-3：某个 ReLU 单元正好处在拐点附近，被舍入推到了另一边），测试只报告这个数，不做判定。
:::
::: en
## The training loop

Each epoch: switch to training mode, start the DataLoader's next epoch (a new random order), and train batch by batch. Each step's loss is added into `loss_sum` on the device (a 0-d tensor; the addition happens on the device and needs no synchronization). On the CPU reading it costs nothing and it is read every step; on a GPU it is read every 50 steps, to give the progress bar a fresh number. At the end of the epoch it is read once more, giving the epoch's mean training loss; that read also makes sure all of the epoch's work is done, so the timing is honest. Once a sum read is NaN or inf (the learning rate is too large, e.g. `--optimizer sgd --lr 1e6`), training stops with exit code 1, naming the step (on a GPU, the range of steps between two reads), and writes no `--save` or `--metrics` file.

On a terminal the progress bar redraws one line as it goes (step, loss, samples per second, time left); when the output is redirected (logs, tests, this book) each epoch prints one line. After each epoch the model is evaluated on the test set and the test loss and accuracy are printed. A training loss that keeps falling while the test loss starts to rise is the sign of overfitting.

`--no-shuffle` and `--max-steps N` are there to compare with PyTorch step by step: both sides start from the same initial weights (C writes them with `--save-init`, the PyTorch version reads them with `--load-init`), read the data in the same order and leave dropout off (the two sides draw their masks from different generators). The test `chapter.ch06_twin_agree` checks that the losses of the first 20 steps agree with PyTorch's to better than 1e-4 relative.

The comparison is with PyTorch run in float64 (`--float64`), not in float32, and why is worth learning in itself. After 20 Adam steps on the default CNN, C's float32 losses are within about 1e-7 of PyTorch's float64 ones, while PyTorch's own float32 and float64 runs differ by about 3e-4. Adam is the reason: its first step moves every weight by about lr however small its gradient is, so a gradient sum that should cancel to 0 (about 1e-8 in practice, pure rounding noise) moves its weight by lr in a direction the noise picks, and the noise is amplified. Two float32 implementations round differently, so the difference between them says nothing about which is right; the float64 run is close to the exact trajectory. Trained with Adam, the MLP leaves the float64 trajectory even in C's float32 run within 20 steps (by about 1e-3: a ReLU unit sits right at its kink and rounding pushes it to the other side), and the test reports that number without judging it.
:::
*/
typedef struct history {
  int first_epoch;               // epochs done before this run (--resume)
  int epochs;                    // epochs run
  double *train_loss, *test_loss, *test_acc, *images_per_s;
  double step_loss[STEP_LOSSES]; // the first steps' losses
  int n_step_loss;
  int64_t steps, images;         // over all epochs
  double train_seconds;          // training only (evaluation excluded)
} history;

// Where a run starts and how it stopped: a fresh run starts at zero; --resume
// starts where the checkpoint says, with the interrupted epoch's loss sum.
// Ctrl-C sets `interrupted` and leaves `at` where the next run should go on.
typedef struct run_state {
  ct_train_progress at; // epochs started before, batches of the current one, steps in all
  double loss_sum;      // the current epoch's summed step losses at `at`
  bool interrupted;
} run_state;

static int train(const settings *s, const ct_cli *cli, ct_module *model, ct_optimizer *opt, ct_dataloader *train_dl,
                 ct_dataloader *test_dl, ct_device dev, history *h, eval_result *last, run_state *rs) {
  ct_tensor *loss_sum = ct_zeros(CT_SCALAR_SHAPE, CT_F32, dev); // sum of this epoch's step losses
  if (!loss_sum) return -1;
  const int64_t sync_every = dev.type == CT_CPU ? 1 : 50;
  int64_t steps_per_epoch = ct_dataloader_len(train_dl);
  int rc = CT_OK;
  h->first_epoch = (int)rs->at.epoch;
  h->steps = rs->at.step - rs->at.batch; // the steps of the epochs before
  for (int epoch = 1 + (int)rs->at.epoch; epoch <= s->epochs && rc == CT_OK; ++epoch) {
    ct_module_train(model, true); // model.train()
    bool resumed = epoch == 1 + rs->at.epoch && rs->at.batch > 0; // go on mid-epoch, where Ctrl-C stopped
    if (ct_fill_(loss_sum, resumed ? rs->loss_sum : 0.0) != CT_OK ||
        (resumed && ct_dataloader_resume_at(train_dl, epoch - 1, rs->at.batch) != CT_OK) ||
        ct_dataloader_start_epoch(train_dl) != CT_OK) {
      rc = -1;
      break;
    }
    ct_progress *bar = ct_progress_start(stdout, epoch, (int)s->epochs, steps_per_epoch, false);
    double t0 = ct_cli_seconds(), mean = NAN;
    int64_t step = resumed ? rs->at.batch : 0, images = 0, finite_until = step; // the last step read finite
    ct_tensor *x = NULL, *y = NULL;
    while ((rc = ct_dataloader_next(train_dl, &x, &y)) == 1) {
      rc = CT_OK;
      int64_t b = ct_size(x, 0);
      ct_tensor *loss = train_step(model, opt, x, y);
      ct_free(x);
      ct_free(y);
      if (!loss && ct_last_status() == CT_OK) ct_fail(CT_ERR_VALUE, "ch06: train_step returned no loss");
      if (!loss || ct_binary_out(CT_OP_ADD, loss_sum, loss_sum, loss) != CT_OK) {
        ct_free(loss);
        rc = -1;
        break;
      }
      step++;
      images += b;
      if (h->n_step_loss < STEP_LOSSES && ct_item(loss, &h->step_loss[h->n_step_loss]) == CT_OK)
        h->n_step_loss++; // loss.item(): a synchronization on a GPU, only for the first steps
      ct_free(loss);
      double sum;
      if ((step == 1 || step % sync_every == 0 || step == steps_per_epoch) && ct_item(loss_sum, &sum) == CT_OK) {
        mean = sum / (double)step;
        if (!isfinite(sum)) break; // NaN or inf: stop, and say at which step (below)
        finite_until = step;
      }
      ct_progress_step(bar, mean, b);
      if (ct_cli_interrupted()) { // Ctrl-C: stop here, at the end of a whole step
        rs->interrupted = true;
        rs->at = (ct_train_progress){.epoch = epoch - 1, .batch = step, .step = h->steps + step};
        break;
      }
      if (s->max_steps > 0 && h->steps + step >= s->max_steps) break;
    }
    double sum = NAN;
    if (rc == CT_OK && ct_item(loss_sum, &sum) != CT_OK) rc = -1; // waits for the epoch's work
    double seconds = ct_cli_seconds() - t0;
    ct_progress_finish(bar, NULL);
    if (rc != CT_OK) break;
    ct_cli_check_loss(cli, sum, h->steps + finite_until + 1, h->steps + step, s->lr); // diverged: exit 1
    if (rs->interrupted) {
      rs->loss_sum = sum;
      break;
    }
    h->steps += step;
    h->images += images;
    h->train_seconds += seconds;
    h->train_loss[h->epochs] = step ? sum / (double)step : NAN;
    h->images_per_s[h->epochs] = (double)images / seconds;

    if (evaluate(model, test_dl, last) != CT_OK) {
      rc = -1;
      break;
    }
    h->test_loss[h->epochs] = last->loss;
    h->test_acc[h->epochs] = (double)last->correct / (double)last->total;
    printf("  test loss %.4f, test acc %.4f (%" PRId64 "/%" PRId64 "), eval %.1f s\n", last->loss,
           h->test_acc[h->epochs], last->correct, last->total, last->seconds);
    fflush(stdout);
    h->epochs++;
    if (s->max_steps > 0 && h->steps >= s->max_steps) break;
  }
  ct_free(loss_sum);
  return rc;
}
/*md output train*/
/*md
::: zh
{{fig loss}} 画出每一轮的训练损失和之后量的测试损失；两条线分开的地方，就是模型开始记住训练集而不是学会规律的地方。{{fig accuracy}} 是每一轮之后的测试准确率，虚线是本章给两种模型定的目标。
:::
::: en
{{fig loss}} plots each epoch's training loss and the test loss measured after it; where the two lines part is where the model starts to memorise the training set rather than learn the rule. {{fig accuracy}} is the test accuracy after each epoch, with the chapter's targets for the two models as dashed lines.
:::
*/
/*md figure loss*/
/*md figure accuracy*/

/*md
::: zh
## Ctrl-C 与 `--resume`

训练跑到一半按下 Ctrl-C，不应该白白丢掉已经做完的步数。`main` 在训练开始前调用 `ct_cli_catch_interrupt()`：第一次 Ctrl-C 只设置一个标志，训练循环在每一步结束时用 `ct_cli_interrupted()` 检查它，于是总是停在一个完整的步之后，不会停在反向传播或参数更新的中间。停下来之后，如果给了 `--save FILE`，`stop_interrupted` 就写一个可续训的检查点，然后以退出码 130 结束（shell 对被 Ctrl-C 结束的程序报告的就是 130）。再按一次 Ctrl-C 则立刻退出：正在写的临时文件被删掉，原来的 FILE 保持原样。`timeout` 和作业调度器发来的 SIGTERM 按 Ctrl-C 同样处理，只是退出码是 143。

可续训的检查点就是 PyTorch 里常见的 `torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, ...})`，只是写成一个 safetensors 文件（`ct_save_train_checkpoint`）：模型的张量名字前加 `model.`，优化器的状态（Adam 的 `exp_avg`、`exp_avg_sq` 和每个参数的 `step`）名字形如 `optimizer.state.3.exp_avg`；元数据里记着第几轮、这一轮已经训练了几批、一共多少步、CPU 随机数生成器的状态（Dropout 的掩码从它来），以及本章自己加的两项：这一轮到此为止的损失和，和决定训练过程的那些参数（模型、batch 大小、学习率、种子……）。

`--resume FILE` 把这些全部装回去：权重和 BatchNorm 的 running 统计量、优化器状态、生成器的偏移量，再让 DataLoader 从同一轮的同一个排列、跳过已经训练过的那几批接着走（`ct_dataloader_resume_at`）。每一个影响后续步骤的数都回到了原样，所以续训的结果和不中断的训练**逐位相同**，不只是“差不多”。测试 `chapter.ch06_resume` 在第 1 轮和第 2 轮中途各打断一次，续训到底，比较最终的每个张量的每个字节。换了参数续训会被拒绝，错误信息列出两边的参数：batch 大小不同，数据的顺序和每一步的平均就都变了，那已经是另一次训练了。`--load` 也能读这种检查点，只取其中的模型部分做评估。
:::
::: en
## Ctrl-C and `--resume`

Pressing Ctrl-C halfway through training should not throw away the steps already done. Before training starts, `main` calls `ct_cli_catch_interrupt()`: the first Ctrl-C only sets a flag, which the training loop checks with `ct_cli_interrupted()` at the end of every step, so the run always stops after a whole step, never in the middle of a backward pass or an update. Once stopped, if `--save FILE` was given, `stop_interrupted` writes a resumable checkpoint and ends with exit status 130 (what a shell reports for a program that Ctrl-C ended). A second Ctrl-C quits at once: the temporary file being written is removed and the old FILE stays as it was. SIGTERM, what `timeout` and job schedulers send, is handled as Ctrl-C is, with exit status 143.

The resumable checkpoint is PyTorch's familiar `torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, ...})`, written as one safetensors file (`ct_save_train_checkpoint`): the model's tensors get the prefix `model.`, the optimizer's state (Adam's `exp_avg`, `exp_avg_sq` and each parameter's `step`) is named like `optimizer.state.3.exp_avg`, and the metadata records the epoch, how many batches of it were trained, the step count, the state of the CPU's random number generator (where dropout's masks come from), and two entries of the chapter's own: the epoch's loss sum so far and the settings that decide the training (model, batch size, learning rate, seed, ...).

`--resume FILE` puts all of it back: the weights and BatchNorm's running statistics, the optimizer's state, the generator's offset, and the DataLoader goes on with the same epoch's permutation, skipping the batches already trained (`ct_dataloader_resume_at`). Every number the following steps depend on is restored, so the resumed run ends **bit-identical** to an uninterrupted one, not merely close. The test `chapter.ch06_resume` interrupts a run once in epoch 1 and once in epoch 2, resumes each to the end, and compares every byte of every final tensor. Resuming with other settings is refused, with both sets of settings in the message: with another batch size the data order and every step's average change, and that is a different training run. `--load` reads such a checkpoint too, and evaluates its model part.
:::
*/

/*md
::: zh
## 结果

下面是最后一轮之后的测试结果：总准确率、每个类别的准确率和混淆矩阵。Fashion-MNIST 的作者在数据集的基准表里给出了参考数字：MLP 约 0.883，两层卷积的网络 0.916 到 0.925。本章默认设置下的目标是 MLP 至少 0.88、CNN 至少 0.91（10 轮以内）。

最难的一类几乎总是衬衫（Shirt）：它和 T 恤、套头衫、外套的轮廓很像，在 28×28 的灰度图里缺少区分它们的细节。混淆矩阵的第 6 行能看出它被错分到了哪里。裤子、包、凉鞋、运动鞋这些形状独特的类别则接近全对。
:::
::: en
## Results

Below are the test results after the last epoch: the overall accuracy, each class's accuracy and the confusion matrix. Fashion-MNIST's authors list reference numbers in the dataset's benchmark table: about 0.883 for an MLP and 0.916 to 0.925 for two-convolution networks. This chapter's targets with the default settings are at least 0.88 for the MLP and 0.91 for the CNN, within 10 epochs.

The hardest class is nearly always the shirt: its outline is close to the T-shirt's, the pullover's and the coat's, and a 28×28 grayscale picture lacks the details that tell them apart. Row 6 of the confusion matrix shows where shirts end up. Classes with distinctive shapes, trousers, bags, sandals and sneakers, come close to perfect.
:::
*/
static void show_accuracy(const eval_result *r, ct_metrics *m) {
  ct_cli_section("accuracy");
  double acc = r->total ? (double)r->correct / (double)r->total : NAN;
  printf("test accuracy: %.4f (%" PRId64 "/%" PRId64 "), test loss %.4f\n", acc, r->correct, r->total,
         r->loss);
  printf("%-14s %7s %8s %9s\n", "class", "images", "correct", "accuracy");
  double counts[NUM_CLASSES], correct[NUM_CLASSES], per_class[NUM_CLASSES];
  for (int c = 0; c < NUM_CLASSES; ++c) {
    int64_t n = 0;
    for (int j = 0; j < NUM_CLASSES; ++j) n += r->confusion[c][j];
    counts[c] = (double)n;
    correct[c] = (double)r->confusion[c][c];
    per_class[c] = n ? correct[c] / counts[c] : NAN;
    printf("%d %-12s %7" PRId64 " %8" PRId64 " %9.4f\n", c, ct_fashion_mnist_class_name(c), n,
           r->confusion[c][c], per_class[c]);
  }
  ct_metrics_num(m, "final_test_acc", acc);
  ct_metrics_num(m, "final_test_loss", r->loss);
  ct_metrics_num(m, "test_correct", (double)r->correct);
  ct_metrics_num(m, "test_total", (double)r->total);
  ct_metrics_series(m, "class_counts", counts, NUM_CLASSES);
  ct_metrics_series(m, "class_correct", correct, NUM_CLASSES);
  ct_metrics_series(m, "per_class_acc", per_class, NUM_CLASSES);
}
/*md output accuracy*/

static void show_confusion(const eval_result *r, ct_metrics *m) {
  ct_cli_section("confusion");
  printf("rows: true class, columns: predicted class\n%-14s", "");
  for (int j = 0; j < NUM_CLASSES; ++j) printf(" %5d", j);
  printf("\n");
  double flat[NUM_CLASSES * NUM_CLASSES];
  for (int i = 0; i < NUM_CLASSES; ++i) {
    printf("%d %-12s", i, ct_fashion_mnist_class_name(i));
    for (int j = 0; j < NUM_CLASSES; ++j) {
      printf(" %5" PRId64, r->confusion[i][j]);
      flat[i * NUM_CLASSES + j] = (double)r->confusion[i][j];
    }
    printf("\n");
  }
  ct_metrics_series(m, "confusion", flat, NUM_CLASSES * NUM_CLASSES);
}
/*md output confusion*/

/*md
::: zh
## 吞吐量

训练的吞吐量按“训练图片数 ÷ 训练时间”计算，不含评估。PyTorch 孪生程序（`ch06_pytorch.py`）用同样的模型、同样的超参数、同样的线程数（`torch.set_num_threads(os.cpu_count())`）测同一个数，两者都写进 metrics 的 `images_per_s`。

在 CPU 上，时间几乎全花在卷积上：im2col 把输入展开成列矩阵，然后是一次大的矩阵乘法（OpenBLAS，用满所有核）。PyTorch 在每个算子上还有一层 Python 和调度器的开销，对这么小的模型，这部分开销并不小。在 GPU 上情况更明显：每步有几十个核函数，每个只跑几微秒，CPU 启动核函数的速度成了瓶颈。C 程序启动一个核函数的开销只有几微秒，PyTorch 的[即时执行](glossary:eager)（eager）模式每个算子要十几微秒。
:::
::: en
## Throughput

Training throughput is training images divided by training time, evaluation excluded. The PyTorch version (`ch06_pytorch.py`) measures the same number for the same model with the same hyperparameters and the same thread count (`torch.set_num_threads(os.cpu_count())`); both write it to the metrics as `images_per_s`.

On the CPU nearly all the time goes into the convolutions: im2col lays the input out as a matrix of columns, then one large matrix product (OpenBLAS, on every core). PyTorch adds a layer of Python and dispatcher overhead to every operator, which is not small next to a model this size. On a GPU this shows even more: a step is a few dozen kernels of a few microseconds each, and how fast the CPU can launch kernels becomes the limit. The C program spends a few microseconds launching a kernel; PyTorch's eager mode spends over ten per operator.
:::
*/
static void show_throughput(const settings *s, const history *h, const eval_result *r, ct_metrics *m) {
  ct_cli_section("throughput");
  double ips = h->train_seconds > 0 ? (double)h->images / h->train_seconds : NAN;
  if (h->images > 0)
    printf("train: %" PRId64 " images in %.1f s: %.0f images/s (batch %ld, %d CPU threads)\n",
           h->images, h->train_seconds, ips, s->batch_size, ct_cli_threads());
  else
    printf("train: no training in this run (--load)\n");
  double eips = r->seconds > 0 ? (double)r->total / r->seconds : NAN;
  printf("eval:  %" PRId64 " images in %.2f s: %.0f images/s (batch %d)\n", r->total, r->seconds, eips,
         EVAL_BATCH);
  ct_metrics_num(m, "images_per_s", ips);
  ct_metrics_num(m, "train_seconds", h->train_seconds);
  ct_metrics_num(m, "train_images", (double)h->images);
  ct_metrics_num(m, "eval_images_per_s", eips);
  ct_metrics_num(m, "threads", ct_cli_threads());
}
/*md output throughput*/

// The matrix-product FLOPs one training image costs (what a model-FLOPs
// utilization counts): 2*M*N*K for each convolution (the GEMM im2col makes of
// it: M = output pixels, N = output channels, K = input channels x 3 x 3) and
// each linear layer, once forward and twice backward (the weight's gradient and
// the input's), less the first layer's input gradient, which nothing needs.
// Bias adds, ReLU, pooling, BatchNorm, the loss and Adam are not products.
static double model_flops_per_image(const settings *s) {
  double c1 = (double)s->channels, c2 = 2 * c1;
  const double cnn[] = {2 * (28 * 28) * c1 * (1 * 9), 2 * (14 * 14) * c2 * (c1 * 9), 2 * 128 * (c2 * 49), 2 * 10 * 128};
  const double mlp[] = {2 * 256 * 784, 2 * 128 * 256, 2 * 10 * 128};
  bool is_cnn = strcmp(s->model, "cnn") == 0;
  const double *f = is_cnn ? cnn : mlp;
  int n = is_cnn ? 4 : 3;
  double forward = 0;
  for (int i = 0; i < n; ++i) forward += f[i];
  return 3 * forward - f[0];
}

// The model's FLOP rate at the median epoch (after the first, as tools/bench
// takes it) against the ceiling ct_mm reaches on this device right now.
static void show_ceiling(const settings *s, ct_device dev, const history *h, ct_metrics *m) {
  if (h->epochs < 1) return; // --load: nothing was trained
  int skip = h->epochs > 1;  // the first epoch pays the warm-up
  double ips = ct_cli_median(h->images_per_s + skip, h->epochs - skip), flops = model_flops_per_image(s);
  int64_t n = 0;
  double ceiling = ct_cli_matmul_gflops(dev, &n), gflops = flops * ips * 1e-9;
  printf("model: %.2f MFLOP of matrix products per training image", flops * 1e-6);
  ct_metrics_num(m, "model_flops_per_image", flops);
  ct_metrics_print(m, "model_gflops_per_s", ": %.1f GFLOP/s at the median epoch's %.0f images/s\n", gflops, ips);
  ct_metrics_print(m, "matmul_ceiling_gflops", "ceiling: %.1f GFLOP/s (ct_mm, %" PRId64 "x%" PRId64 " float32, measured now)",
                   ceiling, n, n);
  ct_metrics_print(m, "ceiling_fraction", "; the model reaches %.2f of it\n", gflops / ceiling);
}

/*md
::: zh
## 离矩阵乘法的上限还有多远

一张训练图片要多少次浮点运算，可以按模型的形状数出来：卷积按 im2col 之后的 GEMM 计 2·M·N·K（M 是输出像素数，N 是输出通道数，K 是输入通道数 × 3 × 3），Linear 也一样；前向一次，反向两次（权重的梯度和输入的梯度），第一层的输入梯度没有人需要，不算。BatchNorm、ReLU、池化、损失和 Adam 不是矩阵乘法，不计。这个数乘以中位数那一轮的每秒图片数，就是模型实际达到的 GFLOP/s。上限由 `ct_cli_matmul_gflops` 在训练之后马上、在同一个进程里测：1024×1024 的 float32 `ct_mm`，即这台机器此刻矩阵乘法能达到的速度，机器上别的负载对两边一样。这次运行里模型达到上限的 {{metric ceiling_fraction %.2f}}。

其余的时间去了哪里，第 11 章的分析器给出答案（它分析的正是这个带 BatchNorm 的 CNN）：矩阵乘法（`ct::gemm`）约占六成，其余是 im2col 的展开和 col2im 的累加、BatchNorm 的三个核函数、复制、池化和 ReLU。矩阵乘法本身也到不了上限：第一个卷积的 K 只有 9，Linear 的 M 只是一个 batch 的 128，BLAS 在这样细长的形状上远不如在方阵上快。第 11 章按输入形状列出的 GEMM 表还曾显示，每张图片调用一次 BLAS（32×144 乘 144×196）比同样 FLOP 的整块 GEMM 慢好几倍，所以运行时在 CPU 上把一块图片的卷积前向合成一次 GEMM，再把结果按 NCHW 重排。

各轮的速度为什么会差很多：OpenMP 的空闲线程在等下一段并行工作时先自旋，libgomp 默认自旋 30 万次（约一毫秒）才睡。机器上还有别的工作时，一个线程组里的某个线程常常不在核上，其他线程就把它需要的时间自旋掉了，一轮可能慢上十倍。所以本书的程序启动时把 `GOMP_SPINCOUNT` 设为 1000（libgomp 发现自己的线程多于核数时用的就是这个值）再重新启动自己一次；你自己设了 `OMP_WAIT_POLICY` 或 `GOMP_SPINCOUNT` 时不会这样做。
:::
::: en
## How far from the matrix-product ceiling

The floating-point operations one training image needs can be counted from the model's shapes: a convolution as the GEMM im2col makes of it, 2·M·N·K (M output pixels, N output channels, K input channels × 3 × 3), a Linear the same way; once forward and twice backward (the weight's gradient and the input's), less the first layer's input gradient, which nothing needs. BatchNorm, ReLU, pooling, the loss and Adam are not matrix products and are left out. That count times the median epoch's images per second is the GFLOP/s the model reaches. The ceiling is measured by `ct_cli_matmul_gflops` right after training, in the same process: a 1024×1024 float32 `ct_mm`, what the machine's matrix products reach at that moment, under whatever other load the training had too. In this run the model reaches {{metric ceiling_fraction %.2f}} of it.

Where the rest goes, chapter 11's profiler says (it profiles this very CNN with BatchNorm): the matrix products (`ct::gemm`) take about six tenths, the rest goes to im2col's unfolding and col2im's sums, BatchNorm's three kernels, copies, pooling and ReLU. The products themselves stay below the ceiling: the first convolution's K is 9, the Linears' M one batch of 128, and BLAS is far slower on such narrow shapes than on square ones. Chapter 11's table of GEMMs by input shape also showed a BLAS call per image (32×144 by 144×196) running several times slower than a chunk-wide GEMM of the same FLOPs, which is why the runtime makes a chunk of images' convolution forward one GEMM on the CPU and then lays the result out as NCHW.

Why some epochs are much slower than others: OpenMP's idle threads spin while they wait for the next parallel region, and libgomp spins 300,000 times (about a millisecond) before it sleeps. With other work on the machine, one thread of a team is often off its core, and the others spin away the time it needs: an epoch can be ten times slower. So the book's programs set `GOMP_SPINCOUNT` to 1000 (what libgomp uses when it sees more of its threads than cores) and restart themselves once at start-up; they do not when you set `OMP_WAIT_POLICY` or `GOMP_SPINCOUNT` yourself.
:::
*/

/*md
::: zh
## 为什么 BatchNorm 有用

`BatchNorm2d` 对每个通道，用当前 batch 在 (N, H, W) 上的均值 μ 和方差 σ² 把激活标准化，再做一个可学习的仿射变换：y = γ (x − μ) / √(σ² + ε) + β。它有三个作用：

- 每一层的输入分布不再随着前面各层的权重变化而漂移，后面的层不用不断适应新的尺度，可以用更大的学习率，收敛更快；
- 损失对权重尺度不再敏感（权重乘以常数，标准化之后结果不变），优化的曲面更平滑；
- batch 统计量带来一点噪声，起到轻微的正则化作用。

训练时用 batch 统计量，同时用动量 0.1 更新 running_mean 和 running_var（方差用无偏估计）；eval 模式下用的是这两个累积量。所以忘记调用 `model.eval()` 是一个常见的错误：测试结果会随 batch 的组成而变，batch 很小时尤其糟。running 统计量是**缓冲区**（buffer），不是参数：优化器不更新它们，但它们属于 state_dict，要和模型一起保存。试一试 `--batchnorm`：同样的 epoch 数，测试准确率通常更高，前几个 epoch 的损失降得更快。
:::
::: en
## Why BatchNorm helps

`BatchNorm2d` standardizes each channel's activations with the current batch's mean μ and variance σ² over (N, H, W), then applies a learned affine map: y = γ (x − μ) / √(σ² + ε) + β. It helps in three ways:

- each layer's input distribution no longer drifts as the weights of the layers before it change, so later layers need not keep adapting to new scales; larger learning rates work and training converges faster;
- the loss becomes insensitive to the scale of the weights (multiply them by a constant and the standardized result is unchanged), which smooths the surface the optimizer walks on;
- the batch statistics add a little noise, a mild regularizer.

Training uses the batch statistics and updates running_mean and running_var with momentum 0.1 (the variance unbiased); eval mode uses those running values. That is why forgetting `model.eval()` is a classic mistake: test results then depend on how the batch was made up, badly so for small batches. The running statistics are **buffers**, not parameters: the optimizer leaves them alone, but they belong to the state_dict and are saved with the model. Try `--batchnorm`: for the same number of epochs the test accuracy is usually higher and the loss falls faster in the first epochs.
:::
*/

/*md
::: zh
## 检查点：safetensors，原子写入

`ct_module_save(model, path)` 就是 `torch.save(model.state_dict(), path)`，只是文件格式用 safetensors：8 字节的头部长度，一段 JSON 头部（每个张量的名字、dtype、形状、数据在文件中的偏移），然后是所有张量的原始小端字节。和 PyTorch 默认的 pickle 格式不同，读它不会执行任何代码，而且可以直接把数据映射进内存。PyTorch 用户用 `safetensors.torch.load_file(path)` 读；本书的 PyTorch 孪生程序用 `tools/fixtures/st.py`（Debian 没有打包 safetensors）。测试 `chapter.ch06_ckpt_torch` 把 C 存的检查点载入 PyTorch 的同构模型，比较几张测试图片的 logits。

写入是原子的：先写到目标旁边的一个临时文件，`fsync` 让数据真正落盘，再用 `rename` 把它换到目标名字上（同一个文件系统里的 rename 是原子的），最后 `fsync` 目录，让这次改名本身也落盘。训练到一半被杀掉、断电，目标位置上要么是旧的完整文件，要么是新的完整文件，不会是写了一半的文件。长时间的训练每轮存一次检查点，靠的就是这一点。

`--load FILE` 建好同样结构的模型，载入检查点（严格模式：缺少的或多余的键都报错，和 `load_state_dict` 一样），不训练，只评估。
:::
::: en
## Checkpoints: safetensors, written atomically

`ct_module_save(model, path)` is `torch.save(model.state_dict(), path)`, in the safetensors format: an 8-byte header length, a JSON header (each tensor's name, dtype, shape and where its data lies in the file), then the raw little-endian bytes of all tensors. Unlike PyTorch's default pickle format, reading it runs no code, and the data can be mapped straight into memory. PyTorch users read it with `safetensors.torch.load_file(path)`; this book's PyTorch version uses `tools/fixtures/st.py` (Debian does not package safetensors). The test `chapter.ch06_ckpt_torch` loads the C program's checkpoint into the same model built in PyTorch and compares the logits of a few test images.

The write is atomic: the data goes to a temporary file next to the target, `fsync` makes it reach the disk, `rename` puts it in the target's place (a rename within one file system is atomic), and a final `fsync` of the directory makes the rename itself durable. If training is killed or the power fails halfway, the target holds either the old complete file or the new complete file, never half of one. Long training runs that save a checkpoint every epoch rely on exactly this.

`--load FILE` builds a model of the same structure, loads the checkpoint (strictly: missing or unexpected keys are errors, as in `load_state_dict`), and evaluates it without training.
:::
*/
static void show_checkpoint(const settings *s, const ct_cli *cli, ct_module *model, ct_metrics *m) {
  ct_cli_section("checkpoint");
  if (s->load) printf("loaded %s (strict: every state_dict key matched)\n", s->load);
  if (s->save_init) printf("initial weights were saved to %s before training\n", s->save_init);
  if (!s->save) {
    printf("not saved (pass --save FILE to write the trained state_dict)\n");
    return;
  }
  if (ct_module_save(model, s->save) != CT_OK) ct_cli_die(cli); // temp file, fsync, rename
  FILE *f = fopen(s->save, "rb");
  long bytes = -1;
  if (f && fseek(f, 0, SEEK_END) == 0) bytes = ftell(f);
  if (f) fclose(f);
  int n = 0;
  ct_module_state(model, &n);
  printf("saved %s: %d tensors, %ld bytes (safetensors, written atomically)\n", s->save, n, bytes);
  ct_metrics_str(m, "checkpoint", s->save);
  ct_metrics_num(m, "checkpoint_bytes", (double)bytes);
}
/*md twin save*/
/*md output checkpoint*/

/*md hide*/
// A 5x7 bitmap font for the labels: upper-case letters, digits and a little
// punctuation. Each glyph is 7 rows; bit 4 of a row is the leftmost pixel.
static const char FONT_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-/:. ?";
static const uint8_t FONT[][7] = {
    {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}, // A B
    {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E}, // C D
    {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}, // E F
    {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, // G H
    {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}, // I J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}, // K L
    {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}, // M N
    {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}, // O P
    {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}, // Q R
    {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}, // S T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}, // U V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}, // W X
    {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}, // Y Z
    {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}, // 0 1
    {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}, // 2 3
    {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}, // 4 5
    {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}, // 6 7
    {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}, // 8 9
    {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}, {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}, // - /
    {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}, {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}, // : .
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, {0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04}, // space ?
};

typedef struct canvas {
  int w, h;
  uint8_t *rgb; // (h, w, 3) row-major
} canvas;

static void fill_rect(canvas *c, int x0, int y0, int w, int h, const uint8_t color[3]) {
  for (int y = y0; y < y0 + h; ++y)
    for (int x = x0; x < x0 + w; ++x)
      if (x >= 0 && y >= 0 && x < c->w && y < c->h) memcpy(c->rgb + 3 * ((size_t)y * c->w + x), color, 3);
}

// Draws text in upper case, 6 pixels per character (5 + 1 of spacing).
static void draw_text(canvas *c, int x0, int y0, const char *text, const uint8_t color[3]) {
  for (int i = 0; text[i]; ++i) {
    const char *at = strchr(FONT_CHARS, toupper((unsigned char)text[i]));
    int g = at ? (int)(at - FONT_CHARS) : (int)sizeof FONT_CHARS - 2; // unknown: '?'
    for (int row = 0; row < 7; ++row)
      for (int col = 0; col < 5; ++col)
        if (FONT[g][row] & (0x10 >> col)) fill_rect(c, x0 + 6 * i + col, y0 + row, 1, 1, color);
  }
}
/*md show*/

/*md
::: zh
## 预测结果一览

最后把测试集的前 32 张图片画成一张 8×4 的网格，每张放大 3 倍。边框是绿色表示预测对了，红色表示错了；图片下面第一行 `P:` 是预测的类别（颜色同边框），第二行 `T:` 是真实类别。字是用程序里内嵌的一套 5×7 点阵字体画的，PNG 由 stb_image_write 编码（Debian 的 `libstb-dev`，一个头文件的库）。图片写到 `--out-dir`（默认当前目录）下的 `predictions.png`，和检查点一样先写临时文件再改名。

看错的那几张往往能理解模型为什么错：衬衫被认成 T 恤，套头衫被认成外套，有时连人也很难分清。
:::
::: en
## The predictions at a glance

Finally, the first 32 test images are drawn as an 8×4 grid, each enlarged 3 times. A green frame means the prediction was right, a red one that it was wrong; under each image the first line, `P:`, is the predicted class (in the frame's colour) and the second, `T:`, the true class. The letters come from a 5×7 bitmap font built into the program, and stb_image_write (Debian's `libstb-dev`, a one-header library) encodes the PNG. The image goes to `predictions.png` in `--out-dir` (the current directory by default), written to a temporary file and renamed, like the checkpoint.

The wrong ones often show why the model went wrong: a shirt taken for a T-shirt, a pullover for a coat, pictures a person finds hard to tell apart too.
:::
*/
#define GRID_COLS 8
#define GRID_MAX 32 // images drawn
#define GRID_SCALE 3
#define GRID_BORDER 3
#define GRID_PAD 6
#define GRID_TEXT_H 24
#define GRID_HEADER_H 16
#define GRID_IMG (28 * GRID_SCALE + 2 * GRID_BORDER)  // 90: a framed image
#define GRID_CELL_W (GRID_IMG + GRID_PAD)             // 96
#define GRID_CELL_H (GRID_IMG + GRID_TEXT_H + GRID_PAD) // 120

// stbi_write_png_to_func's sink: the PNG's bytes appended to a growing buffer.
typedef struct png_buf {
  unsigned char *p;
  size_t n, cap;
  bool oom;
} png_buf;

static void png_put(void *ctx, void *data, int size) {
  png_buf *b = ctx;
  if (b->oom || size <= 0) return;
  if (b->n + (size_t)size > b->cap) {
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->n + (size_t)size) cap *= 2;
    unsigned char *q = realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->n, data, (size_t)size);
  b->n += (size_t)size;
}

static void show_predictions(const settings *s, const ct_cli *cli, ct_module *model, ct_dataset *test,
                             ct_metrics *m) {
  ct_cli_section("predictions");
  static const uint8_t GREEN[3] = {40, 200, 80}, RED[3] = {230, 50, 50}, BG[3] = {24, 24, 28},
                       WHITE[3] = {235, 235, 235}, GRAY[3] = {170, 170, 170};
  int n = (int)(ct_dataset_len(test) < GRID_MAX ? ct_dataset_len(test) : GRID_MAX);
  int rows = (n + GRID_COLS - 1) / GRID_COLS;
  canvas c = {GRID_PAD + GRID_COLS * GRID_CELL_W, GRID_HEADER_H + GRID_PAD + rows * GRID_CELL_H, NULL};
  int64_t idx[GRID_MAX], label[GRID_MAX], pred[GRID_MAX];
  float pixels[GRID_MAX * 28 * 28]; // normalized, as the model sees them
  for (int i = 0; i < n; ++i) idx[i] = i;
  ct_tensor *x = ct_empty(CT_SHAPE(n, 1, 28, 28), CT_F32, ct_device_cpu());
  ct_tensor *y = ct_empty(CT_SHAPE(n), CT_I64, ct_device_cpu());
  ct_tensor *xd = NULL, *logits = NULL, *p = NULL;
  bool was_training = ct_module_is_training(model);
  ct_module_train(model, false);
  if (!x || !y || ct_dataset_get_batch(test, idx, n, x, y) != CT_OK ||
      !(xd = ct_to_device(x, cli->device)) || !(logits = ct_module_forward(model, xd)) ||
      !(p = ct_argmax_dim(logits, 1, false)) || ct_copy_to_host(p, pred, sizeof pred) != CT_OK ||
      ct_copy_to_host(y, label, sizeof label) != CT_OK || ct_copy_to_host(x, pixels, sizeof pixels) != CT_OK)
    ct_cli_die(cli);
  ct_module_train(model, was_training);
  ct_free(p);
  ct_free(logits);
  ct_free(xd);
  ct_free(x);
  ct_free(y);

  c.rgb = malloc((size_t)c.w * c.h * 3);
  if (!c.rgb) ct_cli_die(cli);
  fill_rect(&c, 0, 0, c.w, c.h, BG);
  draw_text(&c, GRID_PAD, 5, "P: PREDICTED  T: TRUE  GREEN: RIGHT  RED: WRONG", WHITE);
  int right = 0;
  double dpred[GRID_MAX], dlabel[GRID_MAX];
  for (int i = 0; i < n; ++i) {
    int x0 = GRID_PAD + (i % GRID_COLS) * GRID_CELL_W, y0 = GRID_HEADER_H + GRID_PAD + (i / GRID_COLS) * GRID_CELL_H;
    bool ok = pred[i] == label[i];
    right += ok;
    dpred[i] = (double)pred[i];
    dlabel[i] = (double)label[i];
    fill_rect(&c, x0, y0, GRID_IMG, GRID_IMG, ok ? GREEN : RED);
    for (int py = 0; py < 28; ++py)
      for (int px = 0; px < 28; ++px) {
        // Undo the normalization: back to the file's 0..255 pixel.
        double v = (pixels[(size_t)i * 784 + py * 28 + px] * FMNIST_STD + FMNIST_MEAN) * 255.0;
        uint8_t g = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lround(v)), gray[3] = {g, g, g};
        fill_rect(&c, x0 + GRID_BORDER + px * GRID_SCALE, y0 + GRID_BORDER + py * GRID_SCALE, GRID_SCALE,
                  GRID_SCALE, gray);
      }
    char line[40];
    snprintf(line, sizeof line, "P:%s", ct_fashion_mnist_class_name((int)pred[i]));
    draw_text(&c, x0, y0 + GRID_IMG + 3, line, ok ? GREEN : RED);
    snprintf(line, sizeof line, "T:%s", ct_fashion_mnist_class_name((int)label[i]));
    draw_text(&c, x0, y0 + GRID_IMG + 13, line, GRAY);
  }

  char path[PATH_MAX];
  if (ct_path_join(path, sizeof path, "--out-dir", s->out_dir, "predictions.png") != CT_OK) {
    fprintf(stderr, "ch06: %s\n", ct_last_error());
    exit(1);
  }
  // Encoded in memory, then written as the checkpoints are (ct_write_file:
  // a temporary with a random name, never a planted link, then a rename).
  png_buf png = {0};
  int encoded = stbi_write_png_to_func(png_put, &png, c.w, c.h, 3, c.rgb, c.w * 3);
  free(c.rgb);
  if (!encoded || png.oom || ct_write_file("--out-dir", path, png.p, png.n) != CT_OK) {
    fprintf(stderr, "ch06: %s\n", encoded && !png.oom ? ct_last_error() : "encoding predictions.png failed (out of memory)");
    free(png.p);
    exit(1);
  }
  free(png.p);
  printf("wrote %s: %dx%d pixels, the first %d test images, %d of them right\n", path, c.w, c.h, n, right);
  printf("frame and P: line green = predicted right, red = wrong; T: line = the true class\n");
  ct_metrics_str(m, "png_path", path);
  ct_metrics_num(m, "png_width", c.w);
  ct_metrics_num(m, "png_height", c.h);
  ct_metrics_num(m, "png_images", n);
  ct_metrics_series(m, "png_pred", dpred, n);
  ct_metrics_series(m, "png_label", dlabel, n);
}
/*md output predictions*/
/*md
::: zh
{{fig predictions}} 是程序自己画的图：测试集的前 32 张图片，每张上方写着预测（P）和真实类别（T），框的颜色说明对错。
:::
::: en
{{fig predictions}} is a picture the program draws itself: the first 32 test images, each labelled with the predicted (P) and the true (T) class, its frame's colour telling right from wrong.
:::
*/
/*md figure predictions: 测试集前 32 张图片和模型的预测：绿框预测正确，红框预测错误；P 是预测类别，T 是真实类别。 | The first 32 test images and the model's predictions: a green frame is a right prediction, a red one a wrong one; P is the predicted class, T the true class.*/

/*md
::: zh
## main：把各部分连起来

`main` 解析参数，载入数据，建好模型搬到设备上，建优化器，训练（或者载入检查点），然后依次打印结果、存检查点、画图。默认设置：CNN、Adam（学习率 1e-3）、batch 128、10 轮、Dropout 0.25；`--optimizer sgd` 用带动量 0.9 的 SGD，默认学习率 0.05。

为了让整本书几分钟就能构建完，书里这一章的输出来自一次缩短的运行（`--epochs 3 --train-size 12000`）；默认设置的完整运行（10 轮，全部 6 万张训练图片）在 CPU 上录制一次，和书里的运行并排展示，标明机器和日期。
:::
::: en
## main: putting the parts together

`main` parses the flags, loads the data, builds the model and moves it to the device, creates the optimizer, trains (or loads a checkpoint), then prints the results, saves the checkpoint and draws the picture. The defaults: the CNN, Adam (learning rate 1e-3), batch 128, 10 epochs, dropout 0.25; `--optimizer sgd` is SGD with momentum 0.9 and a default learning rate of 0.05.

So that the whole book builds in minutes, the output shown for this chapter comes from a shortened run (`--epochs 3 --train-size 12000`); the full run with the default settings (10 epochs, all 60,000 training images) was recorded once on a CPU and is shown beside it, labelled with its machine and date.
:::
*/
/*md bookrun --epochs 3 --train-size 12000*/
// The flags a resumed run must share with the one it continues: anything
// else would change the steps it repeats. Kept in the checkpoint as text.
static void run_config(const settings *s, const ct_cli *cli, char *out, size_t cap) {
  snprintf(out, cap,
           "model=%s batchnorm=%d channels=%ld dropout=%.17g optimizer=%s lr=%.17g momentum=%.17g "
           "batch-size=%ld train-size=%ld shuffle=%d seed=%llu",
           s->model, s->batchnorm, s->channels, s->dropout, s->optimizer, s->lr, s->momentum, s->batch_size,
           s->train_size, !s->no_shuffle, (unsigned long long)cli->seed);
}

// Ctrl-C stopped training: with --save, write everything --resume needs
// (weights, optimizer state, generators, epoch and batch, the epoch's loss
// sum so far, the run's settings); then exit 130, as a program Ctrl-C ends (143 after SIGTERM).
static _Noreturn void stop_interrupted(const settings *s, const ct_cli *cli, ct_module *model, ct_optimizer *opt,
                                       const run_state *rs) {
  printf("interrupted after step %" PRId64 " (epoch %" PRId64 ", batch %" PRId64 ")\n", rs->at.step,
         rs->at.epoch + 1, rs->at.batch);
  if (!s->save) {
    printf("nothing saved: pass --save FILE to keep a run that Ctrl-C stops, then --resume FILE\n");
  } else {
    char config[512], loss_sum[40];
    run_config(s, cli, config, sizeof config);
    snprintf(loss_sum, sizeof loss_sum, "%.17g", rs->loss_sum);
    const char *extra[] = {"ch06.config", config, "ch06.loss_sum", loss_sum, NULL};
    if (ct_save_train_checkpoint(s->save, model, opt, &rs->at, extra) != CT_OK) ct_cli_die(cli);
    printf("saved %s: continue with --resume %s and the same flags\n", s->save, s->save);
  }
  fflush(stdout);
  exit(ct_cli_interrupt_status()); // 130 after Ctrl-C, 143 after SIGTERM
}

// --resume FILE: the model, the optimizer, the generators and where to go on.
static void resume(const settings *s, const ct_cli *cli, ct_module *model, ct_optimizer *opt, run_state *rs) {
  char **meta = NULL, config[512];
  if (ct_load_train_checkpoint(s->resume, model, opt, &rs->at, &meta) != CT_OK) ct_cli_die(cli);
  run_config(s, cli, config, sizeof config);
  const char *saved = ct_metadata_get(meta, "ch06.config"), *sum = ct_metadata_get(meta, "ch06.loss_sum");
  if (!saved || strcmp(saved, config) != 0 || !sum) {
    fprintf(stderr, "ch06: --resume %s: the run was saved with settings\n  %s\nand this one has\n  %s\n"
            "resume with the same flags\n", s->resume, saved ? saved : "(none: not a ch06 run)", config);
    ct_metadata_free(meta);
    exit(1);
  }
  rs->loss_sum = strtod(sum, NULL);
  ct_metadata_free(meta);
  printf("resuming %s: epoch %" PRId64 ", after batch %" PRId64 " (step %" PRId64 ")\n", s->resume,
         rs->at.epoch + 1, rs->at.batch, rs->at.step);
}

int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch06",
                .summary = "Chapter 6: Fashion-MNIST classification (MLP or CNN) trained on the device."};
  settings s = {.model = "cnn", .optimizer = "adam", .epochs = 10, .batch_size = 128, .workers = 2,
                .channels = 16, .lr = 0, .momentum = 0.9, .dropout = 0.25, .out_dir = "."};
  ct_cli_opt opts[] = {
      {"model", CT_OPT_STRING, &s.model, "mlp or cnn"},
      {"epochs", CT_OPT_INT, &s.epochs, "passes over the training set (--quick: 1)"},
      {"batch-size", CT_OPT_INT, &s.batch_size, "training images per step"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "learning rate (0: 1e-3 for adam, 0.05 for sgd)"},
      {"optimizer", CT_OPT_STRING, &s.optimizer, "adam or sgd (with --momentum)"},
      {"momentum", CT_OPT_DOUBLE, &s.momentum, "SGD momentum"},
      {"batchnorm", CT_OPT_FLAG, &s.batchnorm, "CNN: BatchNorm2d after each convolution"},
      {"dropout", CT_OPT_DOUBLE, &s.dropout, "CNN: dropout before the last layer"},
      {"channels", CT_OPT_INT, &s.channels, "CNN: channels of the first convolution (the second has twice)"},
      {"workers", CT_OPT_INT, &s.workers, "DataLoader worker threads"},
      {"data", CT_OPT_STRING, &s.data, "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)"},
      {"out-dir", CT_OPT_STRING, &s.out_dir, "where predictions.png goes"},
      {"save", CT_OPT_OUTPUT, &s.save, "write the trained state_dict to FILE (safetensors)"},
      {"load", CT_OPT_INPUT, &s.load, "evaluate the checkpoint FILE instead of training"},
      {"save-init", CT_OPT_OUTPUT, &s.save_init, "write the initial state_dict to FILE (for the PyTorch twin)"},
      {"resume", CT_OPT_INPUT, &s.resume, "continue the run Ctrl-C stopped and --save kept in FILE (same flags)"},
      {"no-shuffle", CT_OPT_FLAG, &s.no_shuffle, "read the training set in order"},
      {"max-steps", CT_OPT_INT, &s.max_steps, "stop after this many steps (0: no limit)"},
      {"train-size", CT_OPT_INT, &s.train_size, "use the first N training images (0: all; --quick: 2560)"},
      {"test-size", CT_OPT_INT, &s.test_size, "use the first N test images (0: all; --quick: 1000)"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  ct_cli_check_path(&cli, "--out-dir", s.out_dir, "predictions.png"); // a long folder: refused now
  /*md hide*/
  bool cnn = strcmp(s.model, "cnn") == 0, adam = strcmp(s.optimizer, "adam") == 0;
  const char *bad = NULL;
  if (!cnn && strcmp(s.model, "mlp") != 0) bad = "--model expects mlp or cnn";
  else if (!adam && strcmp(s.optimizer, "sgd") != 0) bad = "--optimizer expects adam or sgd";
  else if (s.epochs < 1 || s.batch_size < 1 || s.workers < 0 || s.channels < 1 || s.max_steps < 0 ||
           s.train_size < 0 || s.test_size < 0)
    bad = "--epochs, --batch-size and --channels must be >= 1; --workers, --max-steps, --train-size, "
          "--test-size >= 0";
  else if (!(s.lr >= 0) || !(s.dropout >= 0 && s.dropout < 1) || !(s.momentum >= 0))
    bad = "--lr and --momentum must be >= 0, --dropout in [0, 1)";
  if (!bad && s.resume && s.load) bad = "--resume continues training and --load only evaluates: give one of them";
  if (bad) {
    fprintf(stderr, "ch06: %s\nusage: ch06 [--help] ...\n", bad);
    return 2;
  }
  // before anything is allocated: the CNN's weights (the second convolution's and the first
  // linear layer's, with grads and Adam's state: about 4 copies) and a batch's activations (at most
  // the whole training set of 60000 images in one batch)
  if (!strcmp(s.model, "cnn")) {
    ct_cli_need_memory(&cli, "--channels x --channels x 18 and --channels x 12544 floats (about 4 copies)", 3,
                       (const int64_t[]){s.channels, s.channels * 18 + 12544, 4}, sizeof(float));
    ct_cli_need_memory(&cli, "--batch-size x --channels x 28 x 28 floats (activations: about 6)", 4,
                       (const int64_t[]){s.batch_size < 60000 ? s.batch_size : 60000, s.channels, 784, 6},
                       sizeof(float));
  }
  if (cli.quick) { // a small workload for tests: seconds on a 2-core CPU
    if (s.epochs == 10) s.epochs = 1;
    if (s.train_size == 0) s.train_size = 2560;
    if (s.test_size == 0) s.test_size = 1000;
  }
  if (s.lr == 0) s.lr = adam ? 1e-3 : 0.05;
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  ct_device dev = cli.device;
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded

  // Data: Fashion-MNIST, normalized, batched, delivered on the device.
  ct_dataset *train_ds = first_n(ct_fashion_mnist(s.data, true, FMNIST_MEAN, FMNIST_STD), s.train_size);
  if (!train_ds) ct_cli_die(&cli); // the message names the file and what was wrong with it
  ct_dataset *test_ds = first_n(ct_fashion_mnist(s.data, false, FMNIST_MEAN, FMNIST_STD), s.test_size);
  if (!test_ds) ct_cli_die(&cli);
  ct_dataloader *train_dl = make_loader(train_ds, s.batch_size, !s.no_shuffle, (int)s.workers, cli.seed, dev);
  ct_dataloader *test_dl = make_loader(test_ds, EVAL_BATCH, false, (int)s.workers, cli.seed, dev);
  if (!train_dl || !test_dl) ct_cli_die(&cli);
  show_data(&s, &cli, train_ds, test_ds, train_dl, m);

  // The model, on the device: model = Net().to(device).
  ct_module *model = cnn ? build_cnn(s.channels, s.batchnorm, s.dropout) : build_mlp();
  if (!model || ct_module_to(model, dev) != CT_OK) ct_cli_die(&cli);
  if (s.save_init && ct_module_save(model, s.save_init) != CT_OK) ct_cli_die(&cli);
  if (s.load && ct_module_load(model, s.load) != CT_OK) ct_cli_die(&cli); // load_state_dict(strict)
  show_model(&s, model, m);

  // The optimizer, created after the move, over model.parameters().
  int np = 0;
  ct_param **params = ct_module_parameters(model, &np);
  ct_optimizer *opt = NULL;
  if (adam) {
    ct_adam_options o = ct_adam_defaults();
    o.lr = s.lr;
    opt = ct_optim_adam(params, np, o);
  } else {
    ct_sgd_options o = ct_sgd_defaults(s.lr);
    o.momentum = s.momentum;
    opt = ct_optim_sgd(params, np, o);
  }
  if (!opt) ct_cli_die(&cli);
  printf("optimizer: %s, lr %g%s\n", ct_optimizer_name(opt), s.lr, adam ? ", betas (0.9, 0.999)" : "");
  ct_metrics_str(m, "optimizer", s.optimizer);
  ct_metrics_num(m, "lr", s.lr);
  ct_metrics_num(m, "batch_size", (double)s.batch_size);

  ct_cli_section("train");
  history h = {0};
  double *buf = calloc((size_t)s.epochs * 5, sizeof *buf);
  if (!buf) ct_cli_die(&cli);
  h.train_loss = buf;
  h.test_loss = buf + s.epochs;
  h.test_acc = buf + 2 * s.epochs;
  h.images_per_s = buf + 3 * s.epochs;
  double *epoch_no = buf + 4 * s.epochs;
  eval_result last;
  run_state rs = {{0}, 0, false};
  if (s.resume) resume(&s, &cli, model, opt, &rs);
  if (s.load) {
    printf("no training: evaluating %s\n", s.load);
    if (evaluate(model, test_dl, &last) != CT_OK) ct_cli_die(&cli);
  } else {
    ct_cli_catch_interrupt(); // Ctrl-C ends the current step, then stops (below)
    if (train(&s, &cli, model, opt, train_dl, test_dl, dev, &h, &last, &rs) != CT_OK) ct_cli_die(&cli);
    if (rs.interrupted) stop_interrupted(&s, &cli, model, opt, &rs); // exits
  }
  if (ct_cli_synchronize(dev) != CT_OK) ct_cli_die(&cli);
  for (int e = 0; e < h.epochs; ++e) epoch_no[e] = h.first_epoch + e + 1;
  ct_metrics_num(m, "epochs", h.epochs);
  ct_metrics_series(m, "epoch", epoch_no, h.epochs);
  ct_metrics_series(m, "train_loss", h.train_loss, h.epochs);
  ct_metrics_series(m, "test_loss", h.test_loss, h.epochs);
  ct_metrics_series(m, "test_acc", h.test_acc, h.epochs);
  ct_metrics_series(m, "epoch_images_per_s", h.images_per_s, h.epochs);
  ct_metrics_series(m, "step_losses", h.step_loss, h.n_step_loss);
  ct_metrics_num(m, "steps", (double)h.steps);
  double first_logits[FIRST_LOGITS * NUM_CLASSES];
  for (int i = 0; i < last.n_first * NUM_CLASSES; ++i) first_logits[i] = last.first_logits[i];
  ct_metrics_series(m, "sample_logits", first_logits, last.n_first * NUM_CLASSES);

  show_accuracy(&last, m);
  show_confusion(&last, m);
  show_throughput(&s, &h, &last, m);
  show_ceiling(&s, dev, &h, m);
  show_checkpoint(&s, &cli, model, m);
  show_predictions(&s, &cli, model, test_ds, m);

  free(buf);
  ct_optimizer_free(opt);
  ct_module_free(model);
  ct_dataloader_free(train_dl);
  ct_dataloader_free(test_dl);
  ct_dataset_free(train_ds);
  ct_dataset_free(test_ds);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 用 `--model mlp` 和默认的 CNN 各训练一次，比较测试准确率和每秒图片数。CNN 的参数比 MLP 多还是少？为什么它每张图片的计算量却大得多？
2. 加上 `--batchnorm` 再训练 CNN。前两轮的训练损失降得更快吗？然后把 `evaluate` 里的 `ct_module_train(model, false)` 删掉，用 `--test-size 64` 之类的小测试集和不同的 `EVAL_BATCH` 看看准确率怎么随 batch 变化。
3. 用 `--optimizer sgd --lr 0.5` 训练，损失会怎样？再试 `--lr 0.001`。把 Adam 的学习率调到 1e-2 呢？
4. 把 `train` 里的 `sync_every` 在 GPU 上改成 1（每步都读损失），比较每秒图片数。在 CPU 上为什么看不出差别？
5. 用 `--save a.safetensors` 训练，然后 `./ch06 --load a.safetensors`。再用 `--batchnorm --load a.safetensors` 载入它，读一读报错信息。用 Python 打开这个文件（`tools/fixtures/st.py` 的 `load`），打印每个张量的名字和形状。
6. 用 `--workers 0`、`1`、`4` 各训练一轮。在这台机器的 CPU 上，吞吐量变了吗？在 GPU 上呢？为什么？
7. 用 `--epochs 2 --save run.safetensors` 训练，在第二轮中途按 Ctrl-C，再用 `--resume run.safetensors --save end.safetensors` 续完；和一次不中断、`--save full.safetensors` 的训练比较两个文件（`cmp`）。然后把 `ct_load_train_checkpoint` 里恢复生成器状态的那一行注释掉再试一次：哪些张量变了，为什么没有 Dropout 的 MLP 不受影响？
:::
::: en
## Exercises

1. Train the MLP (`--model mlp`) and the default CNN and compare their test accuracy and images per second. Does the CNN have more parameters than the MLP, or fewer? Why, then, does it do so much more work per image?
2. Train the CNN with `--batchnorm`. Does the training loss fall faster in the first two epochs? Then delete `ct_module_train(model, false)` from `evaluate` and see how the accuracy changes with the batch, using a small test set such as `--test-size 64` and different values of `EVAL_BATCH`.
3. Train with `--optimizer sgd --lr 0.5`: what happens to the loss? Then try `--lr 0.001`. And Adam with a learning rate of 1e-2?
4. On a GPU, set `sync_every` in `train` to 1 (read the loss every step) and compare the images per second. Why is there no difference on the CPU?
5. Train with `--save a.safetensors`, then run `./ch06 --load a.safetensors`. Load it with `--batchnorm --load a.safetensors` too and read the error. Open the file from Python (`load` in `tools/fixtures/st.py`) and print each tensor's name and shape.
6. Train one epoch each with `--workers 0`, `1` and `4`. Does the throughput change on this machine's CPU? On a GPU? Why?
7. Train with `--epochs 2 --save run.safetensors`, press Ctrl-C halfway through the second epoch, and finish with `--resume run.safetensors --save end.safetensors`; compare the file with an uninterrupted run's `--save full.safetensors` (`cmp`). Then comment out the line of `ct_load_train_checkpoint` that restores the generators and try again: which tensors change, and why is the MLP, which has no dropout, not affected?
:::
*/
