// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 8 章　DistributedDataParallel：多个进程，各自一个模型

第 7 章的 DataParallel 是一个进程带着几个线程，主设备负责分发、收集、汇总、更新。种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是 Byolio《用GPU加速PyTorch模型训练》）说 DistributedDataParallel（DDP）“需要多进程、比较复杂，因为没有主 GPU 负载瓶颈，性能更优”，然后就不讲了。本章把它讲完：每个进程（**rank**）有自己完整的模型、自己的那一份数据、自己的优化器；每一步只有一件事需要大家一起做：把梯度取平均（**all-reduce**）。平均之后每个 rank 的梯度完全相同，各自走一步，参数也就一直相同，不需要谁把参数广播给谁。

这需要真正的通信引擎。ct 不自己写传输层：进程由 **Open MPI** 启动，CPU 上的集合通信也由它完成；GPU 上用 **NCCL**。`tools/launch` 扮演 `torchrun` 的角色：

```sh
cd build && ninja ch08_ddp
./ch08                                   # 自己在 tools/launch 下启动 2 个 rank（--nproc 改数量）
../tools/launch --nproc-per-node 2 ./ch08 --quick   # 和上一行一样，显式地写出来
../tools/launch --nproc-per-node 2 /usr/bin/python3 ../chapters/ch08_ddp/ch08_pytorch.py --quick
../tools/launch --hosts node1,node2 --nproc-per-node 4 ./ch08 --device cuda --backend nccl
```

本章依次讲：进程组和启动器放进每个进程的环境变量；集合通信（all_reduce、broadcast、all_gather、reduce_scatter、barrier）；`DistributedSampler` 怎样给每个 rank 分数据；环形 all-reduce 的代价模型和实测带宽；DDP 的桶（bucket）和通信与反向计算的重叠；`no_sync` 梯度累积；DP 和 DDP 的对比；只由 rank 0 打印和保存。最后改正种子里 DDP 代码的错误。
:::
::: en
# Chapter 8. DistributedDataParallel: many processes, a model each

Chapter 7's DataParallel is one process with threads, and a main device that scatters, gathers, sums and updates. The seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here Byolio's “Accelerating PyTorch training with a GPU”) says DistributedDataParallel (DDP) "needs multiple processes and is more complex, performs better because there is no main-GPU bottleneck", and stops there. This chapter goes the rest of the way: each process (a **rank**) has its own whole model, its own share of the data, its own optimizer; one thing per step is done together: averaging the gradients (**all-reduce**). After the average every rank holds the same gradients, takes the same step, and so keeps the same parameters, without anyone broadcasting parameters to anyone.

That takes real communication engines. ct writes no transport of its own: **Open MPI** starts the processes and carries the collectives on the CPU, **NCCL** on GPUs. `tools/launch` plays `torchrun`'s part:

```sh
cd build && ninja ch08_ddp
./ch08                                   # starts itself under tools/launch with 2 ranks (--nproc)
../tools/launch --nproc-per-node 2 ./ch08 --quick   # the same, written out
../tools/launch --nproc-per-node 2 /usr/bin/python3 ../chapters/ch08_ddp/ch08_pytorch.py --quick
../tools/launch --hosts node1,node2 --nproc-per-node 4 ./ch08 --device cuda --backend nccl
```

In order: the process group and the environment the launcher gives each process; the collectives (all_reduce, broadcast, all_gather, reduce_scatter, barrier); how `DistributedSampler` shares the data out; the ring all-reduce's cost model and measured bandwidth; DDP's buckets and the overlap of communication with backward; `no_sync` gradient accumulation; DP against DDP; only rank 0 prints and saves. At the end, the seed's DDP code corrected.
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime, getpid

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct.h"

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530
#define TIMED_STEPS 100 // steps timed for overlap and DP vs DDP (--quick: QUICK_TIMED_STEPS)
#define QUICK_TIMED_STEPS 20

static const ct_cli *g_cli; // for ct_cli_check_loss in the training loop

typedef struct settings {
  const char *backend, *data, *save;
  long nproc, epochs, batch_size, train_size, accumulate;
  int timed_steps; // TIMED_STEPS or QUICK_TIMED_STEPS
  double lr, momentum, bucket_mb;
} settings;

// A scalar all-reduced (the mean, the max) so rank 0 can print one number for all.
static double reduce_scalar(ct_process_group *pg, double v, ct_dist_reduce_op op) {
  ct_tensor *h = ct_from_host(&v, CT_SHAPE(1), CT_F64, ct_device_cpu());
  ct_tensor *t = h ? ct_to_device(h, ct_dist_device(pg)) : NULL; // nccl reduces GPU tensors only
  double out = v;
  if (t && ct_dist_all_reduce(pg, t, op) == CT_OK) ct_copy_to_host(t, &out, sizeof out);
  ct_free(h), ct_free(t);
  return out;
}
/*md show*/

/*md
::: zh
## 进程组：每个 rank 知道自己是谁

`tools/launch --nproc-per-node 2 PROG` 让 `mpirun` 启动两个 PROG 进程，并在每个进程的环境里放上 `torchrun` 放的那几个变量：`RANK`（全局编号）、`LOCAL_RANK`（本机上的编号，决定用哪块 GPU）、`WORLD_SIZE`（总进程数）、`MASTER_ADDR` 和 `MASTER_PORT`（rank 0 所在的地址和端口）。`ct_dist_init_process_group("mpi")` 就是 `dist.init_process_group("gloo")`（CPU）或 `("nccl")`（GPU）加上 `init_method="env://"`：读这些变量，并和 MPI 自己给出的编号核对。变量缺了就报错，说出缺的是哪个、该用什么启动，而不是卡住不动。

后端的选择：`mpi` 处理 CPU 张量（GPU 张量先经锁页内存中转）；`nccl` 要求每个 rank 独占一块 GPU，它的 unique id 由 rank 0 生成，经 MPI 广播给所有人。**一块 GPU 不能放两个 NCCL rank**：NCCL 把同一设备上的两个 rank 视为错误（`ncclInvalidUsage`，“Duplicate GPU detected”），因为它的环和树是按设备建的。所以 `--backend nccl` 时 rank 数不能超过 GPU 数，本章会在初始化时报出这一点。

线程也要分。`torchrun` 在每台机器启动多个进程、而 `OMP_NUM_THREADS` 没有设置时，把它设为 1，并打印一条警告请你自己再调。`tools/launch` 在同样的情况下给每个 rank 分一份 OpenMP 线程：“核数 ÷ 每台机器的 rank 数”（至少 1），`OPENBLAS_NUM_THREADS` 和 `MKL_NUM_THREADS` 没设时也取这个值。两者都是为了避免每个 rank 都开一整台机器那么多的线程：核被超额占用，MPI 忙等的 rank 又抢走别人计算用的核，每一步会慢上许多倍。不同在于份额：1 个线程对 GPU 训练足够（计算在 GPU 上），而本书的 rank 常常在 CPU 上计算，只给 1 个线程会让一台多核机器上的少数几个 rank 空着大部分核，所以 `tools/launch` 把核平均分给各 rank。想和 `torchrun` 一样，就在启动前写 `OMP_NUM_THREADS=1`。

等待也不能占着核。先做完反向的 rank 要等另一个 rank 的梯度。Open MPI 的 `MPI_Wait` 不停地轮询，直到请求完成；机器上可运行的线程比核多时（别的程序在跑，或者 rank 比核多），它轮询占用的正是另一个 rank 算完这一步所需要的核，等待于是越等越长，每一步会慢上几倍。ct 的等待先用 `MPI_Test` 轮询 50 微秒，之后每次轮询之间睡 50 微秒（PyTorch 的 CPU 后端 gloo 也是睡着等，直到套接字里有数据）；`tools/launch` 还给 `mpirun` 加上 `--mca mpi_yield_when_idle 1`，让 Open MPI 的阻塞调用（比如 broadcast）在轮询时让出核；`ct_dist_barrier` 则发起非阻塞的 barrier，也这样睡着等（否则 rank 0 独自跑 DataParallel 时，等在 barrier 上的 rank 会占掉副本线程要用的核）。`mpirun` 只在 rank 比核多时才自己这样做，看不到机器上别的负载。剩下的一部分不是程序能改的：DDP 的一步要两个 rank 同时在核上，而 Open MPI 只在等待的那个 rank 调用 MPI 时才推进集合通信，所以在十几个忙碌的进程中间，all-reduce 的每一次来回都可能要等某个 rank 再轮到核；gloo 的线程则在数据到达时由操作系统唤醒。所以负载很重时，每步的时间一次和一次差得很多，PyTorch 的孪生程序也可能更快；在安静的机器上，两个 rank 各占一个核，这个问题不存在。

下面由 rank 0 打印每个 rank 的身份：各 rank 先把自己的 (rank, local rank, 进程号) 放进一个张量，`all_gather` 到每个 rank，rank 0 打印。只有 rank 0 打印（其他 rank 的标准输出被重定向到 `/dev/null`），这是分布式程序的通行做法，否则 N 个进程的输出会混在一起。
:::
::: en
## The process group: each rank knows who it is

`tools/launch --nproc-per-node 2 PROG` has `mpirun` start two PROG processes and puts in each one's environment the variables `torchrun` puts there: `RANK` (the global number), `LOCAL_RANK` (the number on this machine, which picks the GPU), `WORLD_SIZE` (the number of processes), `MASTER_ADDR` and `MASTER_PORT` (where rank 0 is). `ct_dist_init_process_group("mpi")` is `dist.init_process_group("gloo")` (CPU) or `("nccl")` (GPU) with `init_method="env://"`: it reads those variables and checks them against MPI's own numbering. A missing variable is an error that names it and the launcher to use, not a hang.

The backends: `mpi` takes CPU tensors (a GPU tensor goes through pinned host memory); `nccl` wants one GPU per rank, and its unique id, made by rank 0, reaches everyone through an MPI broadcast. **One GPU cannot host two NCCL ranks**: NCCL treats two ranks on one device as an error (`ncclInvalidUsage`, "Duplicate GPU detected"), because it builds its rings and trees per device. So with `--backend nccl` there can be no more ranks than GPUs, and the chapter says so at initialization.

Threads must be shared out too. When `torchrun` starts several processes per machine and `OMP_NUM_THREADS` is not set, it sets it to 1 and prints a warning asking you to tune it. In the same case `tools/launch` gives each rank one OpenMP share of the cores: the cores divided by the ranks per machine (at least 1), also used for `OPENBLAS_NUM_THREADS` and `MKL_NUM_THREADS` when those are unset. Both avoid every rank starting as many threads as the whole machine has: the cores would be oversubscribed, and ranks busy-waiting in MPI would steal the cores the others compute on, making each step many times slower. They differ in the share: one thread is enough for GPU training (the work is on the GPU), but this book's ranks often compute on the CPU, and one thread each would leave most of a many-core machine idle under a few ranks, so `tools/launch` divides the cores among them. To get `torchrun`'s behaviour, set `OMP_NUM_THREADS=1` before launching.

Waiting must not hold a core either. The rank that finishes its backward first waits for the other's gradients. Open MPI's `MPI_Wait` polls without pause until the request completes; where there are more runnable threads than cores (other programs running, or more ranks than cores), its polling takes the very core the other rank needs to finish the step, the wait feeds itself, and each step gets several times slower. ct's wait polls with `MPI_Test` for 50 microseconds and then sleeps 50 microseconds between polls (gloo, PyTorch's CPU backend, also sleeps until its socket has data); and `tools/launch` gives `mpirun` `--mca mpi_yield_when_idle 1`, so that Open MPI's blocking calls (broadcast, say) yield the core while they poll; `ct_dist_barrier` starts a non-blocking barrier and waits for it the same sleeping way (a rank that waits while rank 0 alone runs DataParallel would otherwise take a core from its replica threads). `mpirun` does that by itself only when there are more ranks than cores; it cannot see the machine's other load. What remains is not the program's to fix: a DDP step needs both ranks on a core at the same time, and Open MPI advances a collective only inside an MPI call of the rank that waits, so among a dozen busy processes every exchange of the all-reduce may wait for a rank's next turn on a core, where gloo's thread is woken by the operating system when the data arrives. That is why, under heavy load, the step time swings from run to run and the PyTorch twin can come out ahead; on a quiet machine each rank has its core and the problem does not arise.

Below, rank 0 prints every rank's identity: each rank puts its (rank, local rank, process id) in a tensor, `all_gather` brings all of them to every rank, and rank 0 prints them. Only rank 0 prints (the other ranks' standard output goes to `/dev/null`), the usual rule of distributed programs; otherwise N processes' lines interleave.
:::
*/
static int show_group(ct_process_group *pg, ct_metrics *m) {
  ct_cli_section("process group");
  int w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  double mine[4] = {ct_dist_get_rank(pg), ct_dist_get_local_rank(pg), (double)getpid(), d.index};
  ct_tensor *h = ct_from_host(mine, CT_SHAPE(4), CT_F64, ct_device_cpu());
  ct_tensor *in = h ? ct_to_device(h, d) : NULL, *all[64];
  for (int r = 0; r < w; ++r) all[r] = ct_zeros(CT_SHAPE(4), CT_F64, d);
  int rc = in ? ct_dist_all_gather(pg, all, in) : -1;
  char dev[CT_DEVICE_STR_MAX];
  printf("backend %s, world size %d, MASTER_ADDR %s, MASTER_PORT %s\n", ct_dist_get_backend(pg), w,
         getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
  printf("%5s %11s %8s  %s\n", "rank", "local rank", "pid", "device");
  for (int r = 0; rc == CT_OK && r < w; ++r) {
    double v[4];
    if ((rc = ct_copy_to_host(all[r], v, sizeof v)) != CT_OK) break;
    ct_device rd = v[3] < 0 ? ct_device_cpu() : ct_device_cuda((int)v[3]);
    printf("%5d %11d %8d  %s\n", (int)v[0], (int)v[1], (int)v[2], ct_device_str(rd, dev));
  }
  ct_metrics_num(m, "world_size", w);
  ct_metrics_str(m, "backend", ct_dist_get_backend(pg));
  for (int r = 0; r < w; ++r) ct_free(all[r]);
  ct_free(in), ct_free(h);
  return rc;
}
/*md output process group*/

/*md
::: zh
## 集合通信

五个操作覆盖了数据并行需要的一切，每个 rank 都以同样的顺序调用它们（顺序不一致就会互相等待，卡住）：

- `all_reduce(t, SUM)`：每个 rank 的 t 变成所有 rank 的 t 之和（`AVG` 是平均，`MAX`/`MIN` 同理）。DDP 的梯度平均就是它。
- `broadcast(t, src)`：每个 rank 的 t 变成 rank src 的 t。DDP 开始时用它把 rank 0 的参数发给所有人。
- `all_gather(out_list, t)`：每个 rank 都得到所有 rank 的 t。
- `reduce_scatter(out, in_list)`：对第 k 块求和，结果只留在 rank k。all-reduce 其实就是一次 reduce-scatter 加一次 all-gather，下一节的环形算法正是这样做的。
- `barrier()`：所有 rank 都到了才继续。

下面每个 rank 用自己的编号 r 构造输入，rank 0 打印结果，以及按定义应得的值。
:::
::: en
## Collectives

Five operations cover everything data parallelism needs, and every rank calls them in the same order (in a different order the ranks wait for each other forever):

- `all_reduce(t, SUM)`: each rank's t becomes the sum of every rank's t (`AVG` the mean, `MAX`/`MIN` alike). DDP's gradient average is this.
- `broadcast(t, src)`: each rank's t becomes rank src's t. DDP uses it at the start to give everyone rank 0's parameters.
- `all_gather(out_list, t)`: every rank receives every rank's t.
- `reduce_scatter(out, in_list)`: chunk k summed over the ranks lands on rank k only. An all-reduce is a reduce-scatter followed by an all-gather, which is how the ring algorithm of the next section does it.
- `barrier()`: nobody continues until everyone has arrived.

Below, each rank builds its inputs from its rank r; rank 0 prints the results and the values the definitions give.
:::
*/
static ct_tensor *filled(double v, int64_t n, ct_device d) {
  ct_tensor *t = ct_empty(CT_SHAPE(n), CT_F32, d);
  if (t && ct_fill_(t, v) != CT_OK) ct_free(t), t = NULL;
  return t;
}

static double first(const ct_tensor *t) {
  float v = NAN;
  ct_tensor *c = ct_narrow(t, 0, 0, 1);
  if (c) ct_copy_to_host(c, &v, sizeof v);
  ct_free(c);
  return v;
}

// "1 + 2 + 3" for up to 4 ranks, "1 + 2 + ... + 8" beyond: the sum the
// all_reduce of r + 1 must give, written out without a nonsense ellipsis.
static void sum_terms(int w, char *buf, size_t n) {
  if (w > 4) {
    snprintf(buf, n, "1 + 2 + ... + %d", w);
    return;
  }
  size_t at = 0;
  for (int k = 1; k <= w && at < n; ++k) at += (size_t)snprintf(buf + at, n - at, k == 1 ? "%d" : " + %d", k);
}

static int show_collectives(ct_process_group *pg, ct_metrics *m) {
  ct_cli_section("collectives");
  int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  double sum = NAN, bcast = NAN;
  ct_tensor *in = filled(10.0 * r, 2, d), *out[64];
  for (int k = 0; k < w; ++k) out[k] = filled(-1, 2, d);
  int rc = CT_OK;
  /* LAB BEGIN: all_reduce (SUM) a tensor of r + 1 into sum; broadcast 100 + r from the last rank into bcast; all_gather `in` into out */
  ct_tensor *t = filled(r + 1, 4, d);
  rc = t ? ct_dist_all_reduce(pg, t, CT_REDUCE_SUM) : -1;         // dist.all_reduce(t)
  sum = t ? first(t) : NAN;
  ct_free(t);
  t = filled(100 + r, 4, d);
  if (!rc) rc = t ? ct_dist_broadcast(pg, t, w - 1) : -1;          // dist.broadcast(t, src=w-1)
  bcast = t ? first(t) : NAN;
  ct_free(t);
  if (!rc) rc = in ? ct_dist_all_gather(pg, out, in) : -1;        // dist.all_gather(out, in)
  /* LAB END */
  char terms[64];
  sum_terms(w, terms, sizeof terms);
  printf("all_reduce(r + 1, SUM)  = %g   (%s = %d)\n", sum, terms, w * (w + 1) / 2);
  printf("broadcast(100 + r, src=%d) = %g\n", w - 1, bcast);
  printf("all_gather(10 r)        =");
  double gathered[64];
  for (int k = 0; k < w; ++k) printf(" %g", gathered[k] = first(out[k]));
  printf("\n");
  for (int k = 0; k < w; ++k) ct_free(out[k]);
  ct_free(in);
  // reduce_scatter: rank r gives chunk k the value r + k; rank k receives sum_r (r + k).
  ct_tensor *chunks[64], *mine = filled(0, 1, d);
  for (int k = 0; k < w; ++k) chunks[k] = filled(r + k, 1, d);
  if (!rc) rc = ct_dist_reduce_scatter(pg, mine, chunks, CT_REDUCE_SUM);
  double rs = mine ? first(mine) : NAN;
  printf("reduce_scatter(r + k) on rank 0 = %g   (sum over r of r + 0 = %d)\n", rs, w * (w - 1) / 2);
  for (int k = 0; k < w; ++k) ct_free(chunks[k]);
  ct_free(mine);
  if (!rc) rc = ct_dist_barrier(pg);
  printf("barrier: all %d ranks arrived\n", w);
  ct_metrics_num(m, "all_reduce_sum", sum);
  ct_metrics_num(m, "broadcast_value", bcast);
  ct_metrics_series(m, "all_gather", gathered, w);
  ct_metrics_num(m, "reduce_scatter_rank0", rs);
  return rc;
}
/*md output collectives*/

/*md
::: zh
## DistributedSampler：每个 rank 拿哪些样本

每个 rank 必须看到**不同**的样本，合起来又正好是整个数据集。`DistributedSampler` 的做法：每轮（epoch）用种子 `seed + epoch` 把下标打乱（所有 rank 用同一个种子，所以打乱的结果相同），不够整除时把开头的几个下标重复补在末尾，使总数是 rank 数的倍数（`drop_last=True` 则丢掉多出来的），然后 rank r 取第 r、r+W、r+2W……个。忘了每轮调 `set_epoch(e)`，每轮的顺序就都一样，这是种子代码之外最常见的 DDP 错误。

ct 的实现要和 PyTorch 逐个下标地一致，所以它的打乱不用 ct 自己的 Philox，而是复现 `torch.randperm` 在 CPU 上的做法：以 `manual_seed(seed + epoch)` 初始化的 32 位梅森旋转（mt19937），配上 Fisher–Yates 洗牌，第 i 步和 i + (mt() mod (n − i)) 交换。测试 `unit.dist_sampler` 在 1428 种（长度、rank 数、rank、epoch、种子、shuffle、drop_last）组合上和 PyTorch 的 `DistributedSampler` 比对。下表是 10 个样本时各 rank 的份额。
:::
::: en
## DistributedSampler: which samples each rank gets

Each rank must see **different** samples, and together exactly the dataset. `DistributedSampler`'s recipe: each epoch, shuffle the indices with seed `seed + epoch` (every rank uses the same seed, so every rank gets the same permutation); when they do not divide evenly, repeat the first indices at the end until the count is a multiple of the number of ranks (or, with `drop_last=True`, drop the extra ones); then rank r takes elements r, r+W, r+2W, .... Forgetting `set_epoch(e)` at each epoch makes every epoch's order the same, the most common DDP mistake outside the seed's code.

ct's version must equal PyTorch's index for index, so its shuffle is not ct's Philox but `torch.randperm`'s CPU recipe: a 32-bit Mersenne Twister (mt19937) seeded by `manual_seed(seed + epoch)`, and a Fisher–Yates pass whose i-th step swaps with i + (mt() mod (n − i)). The test `unit.dist_sampler` compares it with PyTorch's `DistributedSampler` over 1428 combinations of length, world size, rank, epoch, seed, shuffle and drop_last. The table shows each rank's share of 10 samples.
:::
*/
static void show_sampler(int w, ct_metrics *m) {
  ct_cli_section("sampler");
  double flat[256];
  int nf = 0;
  for (int shuffle = 0; shuffle <= 1; ++shuffle)
    for (int epoch = 0; epoch <= shuffle; ++epoch)
      for (int r = 0; r < w; ++r) {
        ct_distributed_sampler s = {.length = 10, .num_replicas = w, .rank = r, .shuffle = shuffle != 0,
                                    .seed = 0, .epoch = epoch};
        int64_t idx[16];
        int64_t n = ct_distributed_sampler_len(&s);
        if (n < 0 || n > 16 || ct_distributed_sampler_indices(&s, idx) != CT_OK) continue;
        printf("shuffle %-5s epoch %d  rank %d:", shuffle ? "True" : "False", epoch, r);
        for (int64_t i = 0; i < n; ++i) {
          printf(" %" PRId64, idx[i]);
          if (nf < 256) flat[nf++] = (double)idx[i];
        }
        printf("\n");
      }
  ct_metrics_series(m, "sampler_table", flat, nf);
}
/*md output sampler*/
/*md twin sampler*/

/*md
::: zh
## 环形 all-reduce 的代价

N 个 rank 各有 S 字节，怎样最快地求和？最笨的办法是都发给 rank 0，加好再发回来：rank 0 要收 (N − 1)·S、发 (N − 1)·S，N 越大它越忙，正是 DataParallel 的主设备瓶颈。**环形算法**把 N 个 rank 连成一个环，把数据切成 N 块：先做 N − 1 轮 reduce-scatter，每轮每个 rank 把一块发给下一个、从上一个收一块加到自己那块上，结束时每个 rank 拥有一块的完整和；再做 N − 1 轮 all-gather，把完整的块转一圈。每个 rank 一共发送 2(N − 1)·S/N 字节，**几乎与 N 无关**：N 从 2 变到 1000，每个 rank 的流量只从 S 增加到不到 2S。时间大约是

  T ≈ 2(N − 1)·α + 2·(N − 1)/N · S/β

α 是每条消息的延迟，β 是链路带宽。小消息由延迟项主导（所以 DDP 把梯度攒成桶再发），大消息由带宽项主导。

nccl-tests 报两个数：**algbw** = S/T，和 **busbw** = algbw · 2(N − 1)/N，后者把算法的流量系数除掉，能直接和链路带宽比较。下面测几种大小的 all_reduce（每种取 5 次的中位数，报所有 rank 中最慢的），按这两个定义报告。2 个 rank 时系数 2(N − 1)/N 正好是 1，两列数字相同；从 3 个 rank 起 busbw 才大于 algbw（`--nproc 4` 时是它的 1.5 倍）。在一台机器上用 `mpi` 后端时，“链路”是共享内存，两个 rank 还在抢同样的两个核，数字只说明趋势，不代表网络。
:::
::: en
## What a ring all-reduce costs

N ranks hold S bytes each: what is the fastest way to sum them? The naive way sends everything to rank 0, adds, and sends the sum back: rank 0 receives (N − 1)·S and sends (N − 1)·S, busier with every rank added, which is DataParallel's main-device bottleneck. The **ring algorithm** links the N ranks in a ring and cuts the data into N chunks: first N − 1 rounds of reduce-scatter, where each rank sends one chunk to the next rank and adds the chunk it receives from the previous one, leaving each rank with one chunk's complete sum; then N − 1 rounds of all-gather pass the complete chunks around. Each rank sends 2(N − 1)·S/N bytes in all, **nearly independent of N**: from 2 ranks to 1000, each rank's traffic only grows from S to under 2S. The time is about

  T ≈ 2(N − 1)·α + 2·(N − 1)/N · S/β

with α the latency of a message and β the link bandwidth. Small messages are dominated by the latency term (which is why DDP packs gradients into buckets before sending them), large ones by the bandwidth term.

nccl-tests reports two figures: **algbw** = S/T, and **busbw** = algbw · 2(N − 1)/N, which divides out the algorithm's traffic factor so that it compares directly with a link's bandwidth. Below, all_reduce is timed at a few sizes (the median of 5 runs each, the slowest rank's) and reported by those two definitions. At 2 ranks the factor 2(N − 1)/N is exactly 1 and the two columns agree; from 3 ranks on busbw exceeds algbw (1.5 times it with `--nproc 4`). With the `mpi` backend on one machine the "link" is shared memory and two ranks compete for the same two cores: the figures show the trend, not a network.
:::
*/
/*md
::: zh
{{fig ring}} 一步步画出了 3 个 rank 的环形 all-reduce。每个 rank 的梯度切成 N = 3 块 a、b、c。reduce-scatter 的 N−1 = 2 步里，每个 rank 把一块发给下一个 rank，对方把它加到自己那块上；两步之后，每个 rank 手里有一块完整的和（橙色）。all-gather 再用 N−1 步把这三块和沿环传一圈，人人都有了全部。每一步每个 rank 只发一块（梯度的 1/N），总共 2(N−1) 步，所以每个 rank 发送的字节数是梯度的 2(N−1)/N 倍，几乎不随 N 增长：busbw 就是按这个量算的。
:::
::: en
{{fig ring}} walks through a ring all-reduce on 3 ranks. Each rank's gradient is cut into N = 3 chunks a, b, c. In the N−1 = 2 steps of the reduce-scatter, each rank sends one chunk to the next rank, which adds it to its own; after two steps each rank holds one complete sum (orange). The all-gather then passes the three sums once around the ring in N−1 more steps, and everyone has all of them. Each step a rank sends one chunk (1/N of the gradient), in 2(N−1) steps, so each rank sends 2(N−1)/N times the gradient's bytes, almost independent of N: that is what busbw counts.
:::
*/
/*md figure ring: 3 个 rank 上的环形 all-reduce：先 reduce-scatter，再 all-gather | Ring all-reduce on 3 ranks: a reduce-scatter, then an all-gather*/
static int show_bandwidth(ct_process_group *pg, bool quick, ct_metrics *m) {
  ct_cli_section("all-reduce bandwidth");
  int w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  double sizes[8], algbw[8], busbw[8];
  int ns = 0;
  printf("%10s %10s %12s %12s\n", "bytes", "time (us)", "algbw GB/s", "busbw GB/s");
  for (int64_t bytes = 4096; bytes <= (quick ? (1 << 20) : (16 << 20)); bytes *= 16) {
    ct_tensor *t = filled(1, bytes / 4, d);
    if (!t) return -1;
    double times[5];
    for (int k = 0; k < 5; ++k) {
      int rc = ct_dist_barrier(pg);
      double t0 = ct_cli_seconds();
      if (!rc) rc = ct_dist_all_reduce(pg, t, CT_REDUCE_SUM);
      if (!rc) rc = ct_cli_synchronize(d);
      times[k] = ct_cli_seconds() - t0;
      if (rc) {
        ct_free(t);
        return rc;
      }
    }
    double sec = reduce_scalar(pg, ct_cli_median(times, 5), CT_REDUCE_MAX);
    sizes[ns] = (double)bytes;
    algbw[ns] = (double)bytes / sec / 1e9;
    busbw[ns] = algbw[ns] * 2.0 * (w - 1) / w;
    printf("%10" PRId64 " %10.1f %12.3f %12.3f\n", bytes, sec * 1e6, algbw[ns], busbw[ns]);
    ++ns;
    ct_free(t);
  }
  if (w == 2) printf("(2 ranks: 2(N - 1)/N = 1, so busbw equals algbw; they part from 3 ranks on)\n");
  ct_metrics_series(m, "allreduce_bytes", sizes, ns);
  ct_metrics_series(m, "allreduce_algbw_gbs", algbw, ns);
  ct_metrics_series(m, "allreduce_busbw_gbs", busbw, ns);
  return CT_OK;
}
/*md output all-reduce bandwidth*/

/*md
::: zh
## 用 DDP 训练 Fashion-MNIST

和第 6 章同一个 MLP、同样的数据。每个 rank：

1. 载入数据集（每个进程各自载入一份；Fashion-MNIST 只有 47 MB，大数据集则每个 rank 只读自己的份额）；
2. 建模型，搬到本 rank 的设备上，用 `ct_ddp_create` 包起来：这一步把 rank 0 的参数广播给所有人，不管各 rank 的随机初始化是否相同；
3. 每轮调 `set_epoch`，取自己那份下标，按 `--batch-size`（**每个 rank 的** batch，全局 batch 是它乘以 rank 数）一批一批地训练；
4. 损失只在本 rank 的 batch 上算；`ct_ddp_backward_params` 在反向时把梯度平均掉，所以每个 rank 的 `optimizer.step()` 做的是同一步。

`--accumulate K` 演示梯度累积：每 K 个 micro-batch 才同步一次，前 K − 1 个在 `no_sync` 里只在本地累加梯度。梯度要除以 K（这里缩放的是 dL/dlogits），更新才相当于一个 K 倍大的 batch。

打印的训练损失是所有 rank 的平均（又一次 all_reduce）；测试准确率也是分布式地算的：每个 rank 评估测试集的一份，正确数和总数各做一次 all_reduce 求和。`chapter.ch08` 测试在 2 个 rank 上运行本章；`dist.collectives_2`/`_3` 测试检查 2 个和 3 个 rank、每个 batch B 训练 5 步后的参数和单进程 batch 2B（3B）的结果相差不到 1e-5（相对），以及 `no_sync` 累积的梯度等于大 batch 的梯度。
:::
::: en
## Training Fashion-MNIST with DDP

The MLP of chapter 6 on the same data. Each rank:

1. loads the dataset (each process its own copy; Fashion-MNIST is 47 MB, and with a big dataset each rank would read only its share);
2. builds the model, moves it to its device and wraps it with `ct_ddp_create`, which broadcasts rank 0's parameters to everyone, whether or not the ranks' random initializations agree;
3. each epoch calls `set_epoch`, takes its share of the indices and trains batch by batch with `--batch-size` (the batch **of each rank**; the global batch is that times the number of ranks);
4. computes the loss on its own batch only; `ct_ddp_backward_params` averages the gradients during backward, so every rank's `optimizer.step()` takes the same step.

`--accumulate K` shows gradient accumulation: only every K-th micro-batch synchronizes; the K − 1 before it run under `no_sync` and only add up gradients locally. The gradients must be divided by K (here dL/dlogits is scaled) for the update to equal one batch K times as big.

The training loss printed is the mean over the ranks (one more all_reduce); the test accuracy is computed in a distributed way as well: each rank evaluates its share of the test set, and the counts of correct answers and of images are summed with all_reduce. The test `chapter.ch08` runs the chapter on 2 ranks; the tests `dist.collectives_2`/`_3` check that 2 and 3 ranks with batch B reach, after 5 steps, the parameters of one process with batch 2B (3B) within 1e-5 relative, and that gradients accumulated under `no_sync` equal the big batch's.
:::
*/
static ct_module *build_mlp(void) {
  ct_module *mods[] = {ct_nn_flatten(), ct_nn_linear(784, 256, true), ct_nn_relu(),
                       ct_nn_linear(256, 128, true), ct_nn_relu(), ct_nn_linear(128, 10, true)};
  return ct_nn_sequential(6, mods);
}

typedef struct shard {
  ct_dataset *ds;
  int64_t *idx, n; // this rank's indices for the epoch
  ct_tensor *x, *y;  // (B, 1, 28, 28), (B,) batch buffers on the CPU
} shard;

// Batch k of the shard, on the device: rows idx[k*B .. k*B + B).
static int get_batch(shard *s, int64_t k, int64_t B, ct_device d, ct_tensor **x, ct_tensor **y) {
  int64_t n = s->n - k * B < B ? s->n - k * B : B;
  ct_tensor *xs = ct_narrow(s->x, 0, 0, n), *ys = ct_narrow(s->y, 0, 0, n);
  int rc = xs && ys ? ct_dataset_get_batch(s->ds, s->idx + k * B, n, xs, ys) : -1;
  *x = rc ? NULL : ct_to_device(xs, d);
  *y = rc ? NULL : ct_to_device(ys, d);
  ct_free(xs), ct_free(ys);
  return *x && *y ? CT_OK : -1;
}

// One optimizer step over `acc` micro-batches starting at batch k0.
static int train_step(ct_ddp *ddp, ct_optimizer *opt, shard *s, int64_t k0, int acc, int64_t B, ct_device d,
                      double *loss_out) {
  /* LAB BEGIN: zero the grads; for each micro-batch: no_sync unless it is the last, forward, loss, scale dL/dlogits by 1/acc, backward; then step */
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return -1;
  double total = 0;
  for (int j = 0; j < acc; ++j) {
    ct_tensor *x = NULL, *y = NULL;
    if (get_batch(s, k0 + j, B, d, &x, &y) != CT_OK) return -1;
    ct_ddp_set_no_sync(ddp, j < acc - 1);                 // with ddp.no_sync(): ...
    ct_tensor *logits = ct_ddp_forward(ddp, x), *g = NULL; // (B, 10)
    ct_tensor *loss = logits ? ct_cross_entropy_loss(logits, y, &g) : NULL;
    ct_tensor *gs = g ? ct_mul_scalar(g, 1.0 / acc) : NULL; // loss / acc
    double l = 0;
    int rc = gs && ct_item(loss, &l) == CT_OK ? ct_ddp_backward_params(ddp, gs) : -1;
    total += l / acc;
    ct_free(x), ct_free(y), ct_free(logits), ct_free(g), ct_free(gs), ct_free(loss);
    if (rc) return rc;
  }
  *loss_out = total;
  return ct_optimizer_step(opt);
  /* LAB END */
}
/*md twin train_step*/

// Accuracy over every rank's share of the test set: (correct, total) summed by all_reduce.
static int accuracy(ct_process_group *pg, ct_module *model, ct_dataset *test, int64_t limit, double *acc) {
  if (limit > ct_dataset_len(test)) limit = ct_dataset_len(test); // a smaller test set (--data)
  ct_distributed_sampler ss = {.length = limit, .num_replicas = ct_dist_get_world_size(pg),
                               .rank = ct_dist_get_rank(pg), .drop_last = true};
  int64_t n = ct_distributed_sampler_len(&ss);
  shard s = {.ds = test, .n = n, .idx = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t))};
  s.x = ct_empty(CT_SHAPE(n, 1, 28, 28), CT_F32, ct_device_cpu());
  s.y = ct_empty(CT_SHAPE(n), CT_I64, ct_device_cpu());
  int rc = s.idx && s.x && s.y ? ct_distributed_sampler_indices(&ss, s.idx) : -1;
  ct_tensor *x = NULL, *y = NULL;
  double correct = 0;
  ct_module_train(model, false);
  if (!rc) rc = get_batch(&s, 0, n, ct_module_device(model), &x, &y);
  ct_tensor *logits = rc ? NULL : ct_module_forward(model, x);
  ct_tensor *pred = logits ? ct_argmax_dim(logits, 1, false) : NULL;
  ct_tensor *pc = pred ? ct_cpu(pred) : NULL, *yc = y ? ct_cpu(y) : NULL;
  for (int64_t i = 0; pc && yc && i < n; ++i)
    correct += ((const int64_t *)ct_data_ptr(pc))[i] == ((const int64_t *)ct_data_ptr(yc))[i];
  if (!pc || !yc) rc = -1;
  ct_module_train(model, true);
  double c = reduce_scalar(pg, correct, CT_REDUCE_SUM), t = reduce_scalar(pg, (double)n, CT_REDUCE_SUM);
  *acc = t > 0 ? c / t : 0;
  ct_free(x), ct_free(y), ct_free(logits), ct_free(pred), ct_free(pc), ct_free(yc), ct_free(s.x), ct_free(s.y);
  free(s.idx);
  return rc;
}

typedef struct trained {
  ct_module *model;
  ct_ddp *ddp;
  ct_optimizer *opt;
  shard s;
  ct_dataset *test;
} trained;

static int train(const settings *st, ct_process_group *pg, trained *t, ct_metrics *m) {
  ct_cli_section("training");
  int r = ct_dist_get_rank(pg), w = ct_dist_get_world_size(pg);
  ct_device d = ct_dist_device(pg);
  t->s.ds = ct_fashion_mnist(st->data, true, FMNIST_MEAN, FMNIST_STD);
  t->test = ct_fashion_mnist(st->data, false, FMNIST_MEAN, FMNIST_STD);
  int rc = t->s.ds && t->test ? CT_OK : ct_last_status() ? ct_last_status() : CT_ERR_IO;
  int64_t len = rc ? 0 : st->train_size > 0 && st->train_size < ct_dataset_len(t->s.ds) ? st->train_size
                                                                                       : ct_dataset_len(t->s.ds);
  ct_distributed_sampler sampler = {.length = len, .num_replicas = w, .rank = r, .shuffle = true, .seed = 0};
  int64_t n = ct_distributed_sampler_len(&sampler), B = st->batch_size;
  if (!rc && (st->accumulate > n || B > n / st->accumulate)) // not one whole step
    rc = ct_fail(CT_ERR_VALUE, "a step takes --batch-size %lld x --accumulate %ld images on each rank, more than its "
                 "shard of %lld (%lld training images over %d ranks): lower --batch-size or --accumulate, or raise "
                 "--train-size", (long long)B, st->accumulate, (long long)n, (long long)len, w);
  if (!rc) {
    t->s.idx = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    t->s.x = ct_empty(CT_SHAPE(B, 1, 28, 28), CT_F32, ct_device_cpu());
    t->s.y = ct_empty(CT_SHAPE(B), CT_I64, ct_device_cpu());
    ct_manual_seed(1000 + (uint64_t)r); // a different start on every rank: DDP's broadcast makes them equal
    t->model = build_mlp();
    if (!t->s.idx || !t->s.x || !t->s.y || !t->model || ct_module_to(t->model, d) != CT_OK)
      rc = ct_last_status() ? ct_last_status() : CT_ERR_OOM;
  }
  // One rank's missing --data folder must not leave the others waiting in
  // DDP's first broadcast: all ranks compare notes here and stop together,
  // each saying which rank failed and why.
  if (ct_dist_agree(pg, rc, NULL) != CT_OK) {
    ct_dist_destroy_process_group(pg); // leave MPI cleanly: no "exited without finalize" from mpirun
    ct_cli_die(g_cli);
  }
  ct_ddp_options o = ct_ddp_defaults();
  o.bucket_cap_mb = st->bucket_mb;
  if (!(t->ddp = ct_ddp_create(t->model, pg, o))) return -1; // DDP(model): rank 0's weights everywhere
  int np = 0;
  ct_param **params = ct_module_parameters(t->model, &np);
  ct_sgd_options so = ct_sgd_defaults(st->lr);
  so.momentum = st->momentum;
  if (!(t->opt = ct_optim_sgd(params, np, so))) return -1;
  int acc = (int)st->accumulate;
  char cap[64];
  if (st->bucket_mb > 0) snprintf(cap, sizeof cap, "cap %g MB", st->bucket_mb);
  else snprintf(cap, sizeof cap, "default cap: 1 MiB first, then 25 MiB");
  int nbk = ct_ddp_bucket_count(t->ddp);
  printf("%d ranks x batch %ld x %d accumulated = global batch %ld; %" PRId64 " training images, %" PRId64
         " per rank; %d bucket%s (%s)\n", w, (long)B, acc, (long)B * w * acc, len, n, nbk, nbk == 1 ? "" : "s", cap);
  t->s.n = n;
  int64_t steps = n / (B * acc); // whole steps only (a DataLoader with drop_last=True)
  double losses[64], accs[64];
  rc = CT_OK;
  for (long e = 0; rc == CT_OK && e < st->epochs && e < 64; ++e) {
    sampler.epoch = e;                                     // sampler.set_epoch(e)
    rc = ct_distributed_sampler_indices(&sampler, t->s.idx);
    double sum = 0, t0 = ct_cli_seconds();
    for (int64_t k = 0; rc == CT_OK && k < steps; ++k) {
      double l = 0;
      rc = train_step(t->ddp, t->opt, &t->s, k * acc, acc, B, d, &l);
      sum += l;
    }
    if (rc == CT_OK) rc = ct_cli_synchronize(d);
    double sec = reduce_scalar(pg, ct_cli_seconds() - t0, CT_REDUCE_MAX);
    if (rc == CT_OK) rc = accuracy(pg, t->model, t->test, 2000, &accs[e]);
    losses[e] = reduce_scalar(pg, steps ? sum / (double)steps : NAN, CT_REDUCE_AVG);
    if (rc == CT_OK && steps) // every rank sees the same mean, so all stop together: NaN/inf, exit 1
      ct_cli_check_loss(g_cli, losses[e], e * steps + 1, (e + 1) * steps, st->lr);
    printf("epoch %ld: train loss %.4f (mean over ranks), test accuracy %.4f, %.2f s, %.0f images/s\n", e + 1,
           losses[e], accs[e], sec, (double)(steps * B * acc * w) / sec);
  }
  ct_metrics_series(m, "train_loss", losses, (int)(st->epochs < 64 ? st->epochs : 64));
  ct_metrics_series(m, "test_acc", accs, (int)(st->epochs < 64 ? st->epochs : 64));
  ct_metrics_num(m, "steps_per_epoch", (double)steps);
  ct_metrics_num(m, "buckets", ct_ddp_bucket_count(t->ddp));
  return rc;
}
/*md output training*/

/*md
::: zh
## 桶和重叠：为什么 DDP 在反向时就开始通信

如果等反向全部算完再对所有梯度做 all-reduce，通信时间就完整地加在每一步上。DDP 的做法是：参数按**注册的逆序**（也就是反向算出它们梯度的顺序）分进若干个**桶**，一个桶的字节数一达到上限就封口。上限是 PyTorch 2.x 的规则：不给 `bucket_cap_mb` 时，第一个桶的上限是 1 MiB（让第一次通信尽早开始），之后每个桶 25 MiB；显式给了 `bucket_cap_mb`，它就是每个桶的上限，第一个桶也不例外（PyTorch 1.13 不论给没给，第一个桶都是 1 MiB）。`ct_ddp_defaults()` 的 `bucket_cap_mb = 0` 表示“没给”，相当于 PyTorch 的 `None`。反向每算完一层，那一层的参数就标为“就绪”；一个桶里的参数全部就绪，立即把它们拷进桶的连续缓冲区，启动一次**异步** all-reduce，反向接着算前面的层。反向结束时，多数桶的通信已经在路上或已完成，只需等剩下的。

PyTorch 还有一步 ct 没有做：没开 `find_unused_parameters` 时，第一次迭代把所有梯度放在**一个**桶里归约，之后（`Reducer::rebuild_buckets`）按第一次反向里梯度**实际就绪的顺序**重新分桶，因为注册顺序不一定是使用顺序。ct 在 `ct_ddp_create` 里一次分好桶，按注册的逆序；ct 的模块（`Sequential` 这样的链）反向时大体就是按这个顺序就绪的，所以分出的桶和 PyTorch 重建后的基本一样（同一层的权重和偏置谁先就绪，在 PyTorch 里不一定），只是 ct 的第一次迭代也已经分桶、和反向重叠。

在 CPU 上，异步的是 `MPI_Iallreduce`。Open MPI 默认没有后台进度线程，非阻塞集合通信只在进程调用 MPI 函数时才前进，所以 ct 的“梯度就绪”钩子每次被调用时都对已启动的桶做一次 `MPI_Test`，推着通信往前走。在 GPU 上，NCCL 在自己的流上运行，计算流和通信流之间用事件排序，真正并行。

下面用同一个模型各跑若干步：重叠打开和关闭（关闭时所有桶都等反向结束才启动），报告每步时间，以及反向算完之后还要等待通信的时间（各 rank 的最大值）。本章的 MLP 只有约 0.9 MB 的梯度，默认的桶大小下全部落在第一个（1 MiB 的）桶里，没什么可重叠的；`--bucket-mb` 给了上限，第一个桶也按它封口，桶就多了。要看到重叠的效果，得有更大的模型或 GPU 上真正并行的通信。{{recorded @run}}中：重叠打开时每步 {{recorded step_ms_overlap_on %.2f}} 毫秒，反向后等待通信 {{recorded wait_ms_overlap_on %.2f}} 毫秒；关闭时每步 {{recorded step_ms_overlap_off %.2f}} 毫秒，等待 {{recorded wait_ms_overlap_off %.2f}} 毫秒。{{if recorded device is cpu and recorded step_ms_overlap_on about recorded step_ms_overlap_off within 15%}}两者每步相差不到 15%，正如上面所说：CPU 上没有什么可让重叠藏起来的。{{elif recorded device is cpu}}两者每步相差超过 15%，但这不是重叠的作用：CPU 上通信和计算并不同时进行，差别来自机器上的其他负载。在 GPU 上，NCCL 的通信在自己的流上和反向的核函数同时运行，重叠才省得下时间，模型越大、桶越多，省得越多。{{elif recorded step_ms_overlap_on < recorded step_ms_overlap_off * 0.9}}打开重叠后每步更快：通信藏在了反向的计算后面。{{else}}这次打开重叠后每步并没有明显更快：梯度太少、桶太少，可以藏起来的通信不多；换更大的模型或更小的 `--bucket-mb` 再试。{{end}}
:::
::: en
## Buckets and overlap: why DDP communicates during backward

If every gradient were all-reduced after backward has finished, the whole communication time would add to every step. DDP instead puts the parameters, in **reverse registration order** (the order backward produces their gradients), into **buckets**; a bucket closes as soon as its bytes reach its limit. The limits are PyTorch 2.x's rule: with `bucket_cap_mb` not given, the first bucket's limit is 1 MiB (so that the first transfer starts early) and every later one's 25 MiB; an explicit `bucket_cap_mb` is every bucket's limit, the first one's included (PyTorch 1.13 kept the 1 MiB first bucket either way). In `ct_ddp_defaults()`, `bucket_cap_mb = 0` means "not given", PyTorch's `None`. Each time backward finishes a layer, that layer's parameters are marked "ready"; when every parameter of a bucket is ready, their gradients are copied into the bucket's contiguous buffer and an **asynchronous** all-reduce starts, while backward goes on with the layers before. When backward ends, most buckets are on their way or done, and only the rest must be waited for.

PyTorch takes one more step that ct does not: without `find_unused_parameters`, its first iteration reduces every gradient in **one** bucket, and after it (`Reducer::rebuild_buckets`) the buckets are rebuilt in the order the gradients **actually became ready** in that backward, since registration order need not be the order of use. ct builds the buckets once, in `ct_ddp_create`, in reverse registration order; ct's modules (chains like `Sequential`) make their gradients ready in essentially that order, so the buckets come out much as PyTorch's rebuilt ones (whether a layer's weight or bias is ready first is not fixed in PyTorch), except that ct's first iteration is already bucketed and overlapped with backward.

On the CPU the asynchronous call is `MPI_Iallreduce`. Open MPI has no background progress thread by default: a non-blocking collective advances only while the process is inside an MPI call, so ct's gradient-ready hook calls `MPI_Test` on the started buckets each time it runs, pushing them along. On a GPU, NCCL runs on its own stream, ordered against the compute stream by events, truly in parallel.

Below, the same model runs some steps with overlap on and off (off: every bucket starts only when backward has ended), reporting the time per step and the time spent after backward waiting for communication (the maximum over the ranks). This chapter's MLP has about 0.9 MB of gradients, which at the default bucket size all fall into the first (1 MiB) bucket, so there is little to overlap; `--bucket-mb` sets a limit that closes the first bucket too, and there are more buckets. Seeing overlap pay takes a bigger model, or a GPU where communication truly runs alongside. In {{recorded @run}}: {{recorded step_ms_overlap_on %.2f}} ms per step with overlap on, {{recorded wait_ms_overlap_on %.2f}} ms of it waiting for communication after backward; {{recorded step_ms_overlap_off %.2f}} ms per step with it off, {{recorded wait_ms_overlap_off %.2f}} ms waiting. {{if recorded device is cpu and recorded step_ms_overlap_on about recorded step_ms_overlap_off within 15%}}The steps are within 15% of each other, as said above: on a CPU there is little for overlap to hide.{{elif recorded device is cpu}}The steps differ by more than 15%, and overlap is not the cause: on a CPU communication and compute do not run at the same time, and the difference comes from other load on the machine. On GPUs NCCL's communication runs on its own stream alongside backward's kernels; only there does overlap save time, and the more so the bigger the model and the more buckets it fills.{{elif recorded step_ms_overlap_on < recorded step_ms_overlap_off * 0.9}}With overlap on the steps are faster: communication hides behind backward's compute.{{else}}This time overlap does not make the steps clearly faster: with few gradients and few buckets there is little communication to hide; try a bigger model or a smaller `--bucket-mb`.{{end}}
:::
*/
/*md
::: zh
{{fig buckets}} 是理想化的画面。左列是反向，从最后一层算到第一层；右列是通信。层 3 的梯度一就绪，第一个桶（默认 1 MiB）就满了，它的 all-reduce 立即启动，反向同时接着算层 2；后面的桶同样如此。反向结束时，只需等还在路上的最后一个桶，然后 `optimizer.step()`。在 CPU 上，通信和计算并不真的同时进行，本章的 MLP 在默认设置下也只装满一个桶，所以 CPU 上没有什么可让重叠藏起来的；图画的是 GPU 上、大模型时的情形。
:::
::: en
{{fig buckets}} is the idealised picture. The left column is backward, from the last layer to the first; the right column is communication. As soon as layer 3's gradients are ready, the first bucket (1 MiB by default) is full and its all-reduce starts, while backward goes on with layer 2; so with the later buckets. When backward ends, only the last bucket still in flight is waited for, then `optimizer.step()`. On a CPU communication does not truly run alongside compute, and with the defaults this chapter's MLP fills a single bucket, so on a CPU there is little for overlap to hide; the figure shows what a GPU and a bigger model give.
:::
*/
/*md figure buckets: DDP 的桶：按反向产生梯度的顺序装桶，桶一满就异步 all-reduce，与反向重叠（理想化） | DDP's buckets: filled in the order backward produces gradients, each all-reduced asynchronously as it fills, overlapping backward (idealised)*/
// Milliseconds since t0, read at the end of a step after ct_cli_synchronize. The
// timings are medians of per-step times: one-time costs and a step slowed by
// another program move a mean, not the median. On a GPU a step's kernels and
// NCCL's all-reduce run after the host has queued them, so each step ends with
// a synchronize for the clock to time them; that adds no wait the step did not
// already have, since the next step's first act, the blocking copy of its batch
// (ct_to_device), waits for the stream all the same.
static double step_ms(double t0) { return 1e3 * (ct_cli_seconds() - t0); }

// The median of st->timed_steps steps and the median wait, each the slowest rank's.
static double timed_steps(ct_process_group *pg, trained *t, const settings *st, double *wait_ms) {
  ct_device d = ct_dist_device(pg);
  double l = 0, ms[TIMED_STEPS], wait[TIMED_STEPS];
  ct_dist_barrier(pg);
  for (int k = 0; k < st->timed_steps; ++k) {
    double t0 = ct_cli_seconds();
    if (train_step(t->ddp, t->opt, &t->s, k % (t->s.n / st->batch_size), 1, st->batch_size, d, &l) != CT_OK ||
        ct_cli_synchronize(d) != CT_OK) // see step_ms
      return -1;
    ms[k] = step_ms(t0);
    wait[k] = 1e3 * ct_ddp_last_wait_seconds(t->ddp);
  }
  *wait_ms = reduce_scalar(pg, ct_cli_median(wait, st->timed_steps), CT_REDUCE_MAX);
  return reduce_scalar(pg, ct_cli_median(ms, st->timed_steps), CT_REDUCE_MAX);
}

static int show_overlap(ct_process_group *pg, trained *t, const settings *st, ct_metrics *m, double *ddp_ms) {
  ct_cli_section("overlap");
  double w_on = 0, w_off = 0;
  ct_ddp_set_overlap(t->ddp, false);
  double off = timed_steps(pg, t, st, &w_off);
  ct_ddp_set_overlap(t->ddp, true);
  double on = timed_steps(pg, t, st, &w_on);
  if (on < 0 || off < 0) return -1;
  printf("median of %d steps, the slowest rank's:\n", st->timed_steps);
  printf("overlap off: %.2f ms per step, %.3f ms of it waiting for all-reduce after backward\n", off, w_off);
  printf("overlap on:  %.2f ms per step, %.3f ms of it waiting for all-reduce after backward\n", on, w_on);
  ct_metrics_num(m, "step_ms_overlap_on", on);
  ct_metrics_num(m, "step_ms_overlap_off", off);
  ct_metrics_num(m, "wait_ms_overlap_on", w_on);
  ct_metrics_num(m, "wait_ms_overlap_off", w_off);
  *ddp_ms = on;
  return CT_OK;
}
/*md output overlap*/

/*md
::: zh
## DP 和 DDP

同样 W 个设备、同样的全局 batch，两种做法各跑若干步，再加上一个参照：一个进程不加任何包装，独自算整个全局 batch（它的 OpenMP 线程数也是每个 rank 分到的那么多），DDP 相对它的加速比就是本章的扩展性。两种做法是：DDP（本章，W 个进程各算 B 行）和 DataParallel（第 7 章，rank 0 一个进程，W 个副本线程，每步算 W·B 行，其余 rank 在 barrier 上等）。种子说 DP 简单、DDP 没有主设备瓶颈：DP 每一步都要把参数从主设备复制给每个副本、把输出收集回来、在主设备上算损失和汇总梯度，这些都由一个进程串行地做；DDP 每步只有一次梯度平均，而且和反向重叠。在这台 2 核的机器上两个 rank 各占一个核，差别主要来自 DP 的复制和汇总；在多块 GPU 上，差别还来自 Python 的 GIL（PyTorch 的 DP 线程要抢它）和主 GPU 的显存。{{recorded @run}}中：DDP 每步 {{recorded ddp_ms_per_step %.2f}} 毫秒，DP 每步 {{recorded dp_ms_per_step %.2f}} 毫秒。{{if recorded ddp_ms_per_step < recorded dp_ms_per_step * 0.8}}DDP 明显更快，和种子说的一致。{{elif recorded device is cpu}}在这台 CPU 上 DDP 并没有明显更快：DP 最多慢四分之一，也常常反而领先，谁领先每次运行都可能不同。DP 的副本是同一个进程里的线程，复制和汇总就是共享内存里的 `memcpy` 和加法；DDP 的两个进程则要在进程之间交换梯度（经 MPI 的共享内存通道）。种子支持 DDP 的理由，主设备瓶颈和 Python 的 GIL，说的是多块 GPU。{{elif recorded ddp_ms_per_step about recorded dp_ms_per_step within 20%}}两者相差不到两成：在这个规模上，DP 的复制和汇总只占一步的一小部分。{{else}}这次 DP 反而更快：这个模型很小，DDP 每步的进程间通信比 DP 在一个进程里的复制和汇总还贵；模型越大、设备越多，DP 的主设备瓶颈越明显。{{end}}
:::
::: en
## DP and DDP

The same W devices and the same global batch, a few steps each way, plus a reference: one process with no wrapper computing the whole global batch alone (with the OpenMP threads of one rank), against which DDP's speed-up is this chapter's measure of scaling. The two ways: DDP (this chapter, W processes of B rows each) and DataParallel (chapter 7: rank 0 alone, W replica threads, W·B rows per step, the other ranks waiting at a barrier). The seed says DP is simpler and DDP has no main-device bottleneck: every DP step copies the parameters from the main device to each replica, gathers the outputs back, and computes the loss and sums the gradients on the main device, all driven by one process; a DDP step has one gradient average, overlapped with backward. On this 2-core machine each of two ranks has a core to itself, and the difference comes mostly from DP's copies and sums; on several GPUs it also comes from Python's GIL (which PyTorch's DP threads share) and from the main GPU's memory. In {{recorded @run}}: {{recorded ddp_ms_per_step %.2f}} ms per DDP step, {{recorded dp_ms_per_step %.2f}} ms per DP step. {{if recorded ddp_ms_per_step < recorded dp_ms_per_step * 0.8}}DDP is clearly faster, as the seed says.{{elif recorded device is cpu}}On this CPU DDP is not clearly faster: DP is at most a quarter slower and often ahead, and which of the two leads changes from run to run. DP's replicas are threads of one process, so its copies and sums are `memcpy` calls and additions in shared memory, while DDP's two processes exchange gradients between processes (through MPI's shared-memory transport). The seed's reasons for DDP, the main device as a bottleneck and Python's GIL, are about several GPUs.{{elif recorded ddp_ms_per_step about recorded dp_ms_per_step within 20%}}The two are within 20% of each other: at this size DP's copies and sums are a small part of a step.{{else}}This time DP is faster: the model is small, and DDP's communication between processes costs more per step than DP's copies and sums inside one process; the bigger the model and the more devices, the more DP's main-device bottleneck shows.{{end}}
:::
*/
// Milliseconds per SGD step (the median of n steps) of `model` on the global batch,
// through DataParallel when dp is given, else alone; -1 on an error.
static double time_global_steps(ct_module *model, ct_data_parallel *dp, shard *s, int64_t B, ct_device d,
                                double lr, int n) {
  int np = 0;
  ct_param **p = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_sgd(p, np, ct_sgd_defaults(lr));
  int rc = opt ? CT_OK : -1;
  double ms[TIMED_STEPS];
  for (int k = 0; rc == CT_OK && k < n; ++k) {
    double t0 = ct_cli_seconds();
    ct_tensor *x = NULL, *y = NULL, *g = NULL;
    rc = get_batch(s, k % (s->n / B), B, d, &x, &y);
    ct_tensor *out = rc ? NULL : dp ? ct_data_parallel_forward(dp, x) : ct_module_forward(model, x);
    ct_tensor *loss = out ? ct_cross_entropy_loss(out, y, &g) : NULL;
    if (!loss || ct_optimizer_zero_grad(opt, true) ||
        (dp ? ct_data_parallel_backward_params(dp, g) : ct_module_backward_params(model, g)) ||
        ct_optimizer_step(opt))
      rc = -1;
    ct_free(x), ct_free(y), ct_free(g), ct_free(out), ct_free(loss);
    if (rc == CT_OK) rc = ct_cli_synchronize(d); // see step_ms
    ms[k] = step_ms(t0);
  }
  ct_optimizer_free(opt);
  return rc == CT_OK ? ct_cli_median(ms, n) : -1;
}

static int show_dp_vs_ddp(ct_process_group *pg, trained *t, const settings *st, double ddp_ms, ct_metrics *m) {
  ct_cli_section("DP vs DDP");
  int w = ct_dist_get_world_size(pg), rc = CT_OK;
  double dp_ms = 0, solo_ms = 0;
  if (ct_dist_get_rank(pg) == 0) { // DataParallel needs no other process: rank 0 runs it alone
    ct_device d = ct_dist_device(pg), devs[CT_MAX_REPLICAS];
    for (int i = 0; i < w && i < CT_MAX_REPLICAS; ++i) devs[i] = d;
    int64_t B = st->batch_size * w;
    ct_distributed_sampler all = {.length = t->s.n, .num_replicas = 1, .rank = 0};
    shard s = {.ds = t->s.ds, .n = t->s.n, .idx = malloc((size_t)t->s.n * sizeof(int64_t))};
    s.x = ct_empty(CT_SHAPE(B, 1, 28, 28), CT_F32, ct_device_cpu());
    s.y = ct_empty(CT_SHAPE(B), CT_I64, ct_device_cpu());
    ct_module *model = build_mlp(), *solo = build_mlp(); // solo: one process alone, what W ranks scale against
    ct_data_parallel *dp = model && ct_module_to(model, d) == CT_OK ? ct_data_parallel_create(model, devs, w) : NULL;
    rc = dp && solo && ct_module_to(solo, d) == CT_OK && s.idx && s.x && s.y
             ? ct_distributed_sampler_indices(&all, s.idx) : -1;
    if (rc == CT_OK) dp_ms = time_global_steps(model, dp, &s, B, d, st->lr, st->timed_steps);
    if (rc == CT_OK && dp_ms >= 0) solo_ms = time_global_steps(solo, NULL, &s, B, d, st->lr, st->timed_steps);
    if (dp_ms < 0 || solo_ms < 0) rc = -1;
    ct_free(s.x), ct_free(s.y);
    free(s.idx);
    ct_data_parallel_free(dp);
    ct_module_free(model), ct_module_free(solo);
  }
  int all_ok = (int)reduce_scalar(pg, rc == CT_OK ? 0 : 1, CT_REDUCE_MAX) == 0; // the others wait here
  if (!all_ok) return rc ? rc : (int)ct_fail(CT_ERR_VALUE, "ch08: DataParallel failed on rank 0");
  printf("median of %d steps each\n", st->timed_steps);
  printf("global batch %ld on %d devices: DDP %.2f ms per step, DataParallel %.2f ms per step (%.2fx)\n",
         st->batch_size * w, w, ddp_ms, dp_ms, dp_ms / ddp_ms);
  printf("one process alone, the same global batch: %.2f ms per step; DDP's speed-up over it %.2fx on %d ranks\n",
         solo_ms, solo_ms / ddp_ms, w);
  ct_metrics_num(m, "ddp_ms_per_step", ddp_ms);
  ct_metrics_num(m, "dp_ms_per_step", dp_ms);
  ct_metrics_num(m, "single_ms_per_step", solo_ms);
  return CT_OK;
}
/*md output DP vs DDP*/

/*md
::: zh
## 只由 rank 0 保存

所有 rank 的参数都相同，所以只需 rank 0 保存一次（N 个进程同时写同一个文件只会互相覆盖）。存的是 `model.module.state_dict()` 的等价物：裸模型的键，没有 `module.` 前缀（第 7 章）。其他 rank 在 `barrier` 上等 rank 0 写完，再各自载入检查：载入的参数和自己手里的完全相同，这也验证了 DDP 让各 rank 的参数保持一致。写文件用的是临时文件加改名（第 5 章），rank 0 在写的途中被杀掉，旧的检查点仍然完好。
:::
::: en
## Only rank 0 saves

Every rank holds the same parameters, so rank 0 alone saves them, once (N processes writing one file would only overwrite each other). What is saved is the equivalent of `model.module.state_dict()`: the bare model's keys, without the `module.` prefix (chapter 7). The other ranks wait at a `barrier` until rank 0 has written, then each loads the file and checks it: the loaded parameters equal its own exactly, which also shows that DDP kept every rank's parameters the same. The file is written to a temporary file and renamed (chapter 5), so if rank 0 is killed while writing, the previous checkpoint stays intact.
:::
*/
static int show_checkpoint(ct_process_group *pg, trained *t, const settings *st, ct_metrics *m) {
  ct_cli_section("checkpoint");
  const char *path = st->save ? st->save : "ch08_model.safetensors";
  int rc = ct_dist_get_rank(pg) == 0 ? ct_module_save(t->model, path) : CT_OK; // if rank == 0: torch.save(...)
  int bad = (int)reduce_scalar(pg, rc ? 1 : 0, CT_REDUCE_MAX);
  if (bad) return rc ? rc : (int)ct_fail(CT_ERR_IO, "ch08: rank 0 could not save %s", path);
  if ((rc = ct_dist_barrier(pg))) return rc; // dist.barrier(): the file is complete for everyone
  ct_module *copy = build_mlp();
  rc = copy && ct_module_to(copy, ct_dist_device(pg)) == CT_OK ? ct_module_load(copy, path) : -1;
  int n = 0, n2 = 0;
  ct_param **a = ct_module_parameters(t->model, &n), **b = copy ? ct_module_parameters(copy, &n2) : NULL;
  double diff = 0;
  for (int i = 0; rc == CT_OK && i < n; ++i) {
    ct_tensor *ca = ct_cpu(a[i]->value), *cb = ct_cpu(b[i]->value);
    for (int64_t e = 0; ca && cb && e < ct_numel(ca); ++e)
      diff = fmax(diff, fabs((double)((const float *)ct_data_ptr(ca))[e] - ((const float *)ct_data_ptr(cb))[e]));
    ct_free(ca), ct_free(cb);
  }
  ct_module_free(copy);
  double worst = reduce_scalar(pg, rc == CT_OK ? diff : INFINITY, CT_REDUCE_MAX);
  printf("rank 0 saved %s; every rank loaded it: largest difference from its own parameters %g\n", path, worst);
  ct_metrics_num(m, "checkpoint_max_diff", worst);
  return worst == 0 ? CT_OK : ct_fail(CT_ERR_VALUE, "ch08: the ranks' parameters differ from rank 0's by %g", worst);
}
/*md output checkpoint*/

/*md
::: zh
## 种子里的 DDP 代码错在哪里

种子的第一段 DDP 代码用 `torch.multiprocessing.spawn` 启动进程，在 `setup` 里只写了 `dist.init_process_group("nccl", rank=rank, world_size=world_size)`。默认的 `init_method` 是 `env://`，它要读 `MASTER_ADDR` 和 `MASTER_PORT`，而 `mp.spawn` 不设置它们，于是初始化报错 `environment variable MASTER_ADDR expected, but not set`；要在 `setup` 里先写 `os.environ["MASTER_ADDR"] = "localhost"` 和一个端口，或者改用 `torchrun`。同一段代码里 `dataset`、`criterion`、`target` 都没有定义，而 `for batch in dataloader` 把 (图片, 标签) 这一对当成了模型输入；优化器建在 `ddp_model.parameters()` 上倒是对的。第二段（torchrun 版）用了 `os` 却没有 import，`epochs`、`train_one_epoch`、`dataloader`、`optimizer` 都没有定义，也没有 `DistributedSampler` 和 `set_epoch`，所以每个 rank 会训练**同样**的数据。

还有一个种子没提的陷阱：**fork 和 CUDA 不能混用**。`mp.spawn` 和 `torchrun` 用的是全新的进程（spawn），而在 Python 3.13 及以前，Linux 上 `multiprocessing` 的默认方式是 `fork`：复制父进程的内存（Python 3.14 起默认改成 `forkserver`：子进程由一个早早启动、没碰过 CUDA 的服务进程 fork 出来；显式选了 `fork` 或用较老的 Python 时，这个陷阱还在）。如果父进程已经初始化了 CUDA（哪怕只是调用过 `torch.cuda.is_available()` 之外的任何 CUDA 函数），子进程继承的是一份指向父进程 GPU 上下文的状态，驱动不支持在子进程里使用它，报 `Cannot re-initialize CUDA in forked subprocess`。ct 的进程由 `mpirun` 启动，每个都是全新的程序，不存在这个问题；第 6 章的 DataLoader 用线程而不是进程，也因此可以和 CUDA 共存。

跨机器运行：`tools/launch --hosts node1,node2`（或 `--hostfile`）让 `mpirun` 通过 ssh 在每台机器上启动 `--nproc-per-node` 个 rank，`MASTER_ADDR` 是第一台机器。各机器要有同样的路径和程序、免密码 ssh，Open MPI 的 TCP 传输用哪块网卡可以用 `--mca btl_tcp_if_include eth0` 指定；NCCL 则看 `NCCL_SOCKET_IFNAME`（用哪块网卡建立连接）、`NCCL_IB_HCA`（InfiniBand 设备）和 `NCCL_DEBUG=INFO`（打印它选了什么）。测试 `dist.netns` 在能用 `ip netns` 的机器上（以 root 运行时）建两个网络命名空间，用一对 veth 连起来，当作两台机器，真的经过 Open MPI 的 TCP 传输跑两个 rank。
:::
::: en
## What is wrong with the seed's DDP code

The seed's first DDP program starts its processes with `torch.multiprocessing.spawn` and its `setup` only calls `dist.init_process_group("nccl", rank=rank, world_size=world_size)`. The default `init_method` is `env://`, which reads `MASTER_ADDR` and `MASTER_PORT`, and `mp.spawn` sets neither, so initialization fails with `environment variable MASTER_ADDR expected, but not set`; `setup` needs `os.environ["MASTER_ADDR"] = "localhost"` and a port first, or the program should be started with `torchrun`. In the same program `dataset`, `criterion` and `target` are never defined, and `for batch in dataloader` feeds the (image, label) pair to the model as its input; building the optimizer on `ddp_model.parameters()` is right. The second program (the torchrun one) uses `os` without importing it, never defines `epochs`, `train_one_epoch`, `dataloader` or `optimizer`, and has no `DistributedSampler` and no `set_epoch`, so every rank would train on the **same** data.

One more trap the seed does not mention: **fork and CUDA do not mix**. `mp.spawn` and `torchrun` start fresh processes (spawn), but up to Python 3.13 `multiprocessing`'s default on Linux is `fork`, which copies the parent's memory (from Python 3.14 the default is `forkserver`: children are forked from a server process started early, which has not touched CUDA; with `fork` chosen explicitly, or an older Python, the trap remains). If the parent has initialized CUDA (any CUDA call beyond `torch.cuda.is_available()`), the child inherits state that points at the parent's GPU context, which the driver does not allow a child to use: `Cannot re-initialize CUDA in forked subprocess`. ct's processes are started by `mpirun`, each a fresh program, so the problem cannot arise; chapter 6's DataLoader uses threads rather than processes, which is also why it coexists with CUDA.

Across machines: `tools/launch --hosts node1,node2` (or `--hostfile`) has `mpirun` start `--nproc-per-node` ranks on each machine over ssh, with `MASTER_ADDR` the first machine. The machines need the same paths and programs and password-less ssh; which network interface Open MPI's TCP transport uses is set with `--mca btl_tcp_if_include eth0`; for NCCL, `NCCL_SOCKET_IFNAME` (the interface to connect over), `NCCL_IB_HCA` (InfiniBand devices) and `NCCL_DEBUG=INFO` (print what it chose). The test `dist.netns`, where `ip netns` is available (run as root), makes two network namespaces joined by a veth pair, treats them as two machines, and runs two ranks through Open MPI's TCP transport for real.
:::
*/

/*md
::: zh
## main
`main` 在没有启动器的环境变量时先把自己交给 `tools/launch`（`--nproc` 个 rank），然后每个 rank 建进程组，依次运行上面各节，最后销毁进程组。书里的输出来自 `--epochs 1 --train-size 12000` 的运行。
:::
::: en
## main
Without the launcher's variables, `main` first hands itself to `tools/launch` (`--nproc` ranks); then each rank creates the process group, runs the sections above in order, and destroys the group. The book's output comes from a run with `--epochs 1 --train-size 12000`.
:::
*/
/*md
::: zh
`--device auto` 在有 GPU 时选 NCCL，而 NCCL 要求每个 rank 独占一块 GPU。直接运行 `./ch08`（2 个 rank）的机器常常只有一块 GPU：这时 `cpu_if_gpus_short` 把各 rank 放到 CPU 上，用 Open MPI 通信，并在第一行说明原因和该用的开关（`--nproc 1` 用那一块 GPU）。明确写了 `--device cuda` 或 `--backend nccl` 时不替你改：初始化会报出 GPU 不够。
:::
::: en
`--device auto` picks NCCL where there is a GPU, and NCCL wants one GPU per rank. A machine that runs a plain `./ch08` (2 ranks) often has one GPU: then `cpu_if_gpus_short` puts the ranks on the CPU over Open MPI and says why on the first line, with the flag to use (`--nproc 1` takes the one GPU). An explicit `--device cuda` or `--backend nccl` is left as asked: initialization then reports that there are too few GPUs.
:::
*/
static void cpu_if_gpus_short(ct_cli *cli, const char *backend, int nproc) {
  const char *spec = cli->device_spec ? cli->device_spec : "auto";
  const char *env = getenv("LOCAL_WORLD_SIZE"); // tools/launch: the ranks on this machine
  long ranks = env && env[0] ? strtol(env, NULL, 10) : nproc;
  int gpus = ct_cuda_device_count();
  if (strcmp(spec, "auto") != 0 || strcmp(backend, "auto") != 0 || gpus <= 0 || gpus >= ranks) return;
  cli->device_spec = "cpu";
  snprintf(cli->fallback_reason, sizeof cli->fallback_reason,
           "%d GPU%s for %ld ranks: NCCL takes one GPU per rank, so the ranks run on the CPU over Open MPI; "
           "--nproc %d --device cuda to train on the GPU%s",
           gpus, gpus == 1 ? "" : "s", ranks, gpus, gpus == 1 ? "" : "s");
}

/*md bookrun --epochs 1 --train-size 12000*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch08", .summary = "Chapter 8: DistributedDataParallel over Open MPI and NCCL."};
  settings s = {.backend = "auto", .nproc = 2, .epochs = 2, .batch_size = 64, .accumulate = 1, .lr = 0.05,
                .momentum = 0.9, .bucket_mb = 0};
  ct_cli_opt opts[] = {
      {"nproc", CT_OPT_INT, &s.nproc, "ranks to start when run without tools/launch"},
      {"backend", CT_OPT_STRING, &s.backend, "auto (nccl with a GPU per rank, else mpi on the CPU), mpi or nccl"},
      {"epochs", CT_OPT_INT, &s.epochs, "passes over the training set (--quick: 1)"},
      {"batch-size", CT_OPT_INT, &s.batch_size, "the batch of each rank"},
      {"accumulate", CT_OPT_INT, &s.accumulate, "micro-batches per step (no_sync on all but the last)"},
      {"lr", CT_OPT_DOUBLE, &s.lr, "SGD learning rate"},
      {"momentum", CT_OPT_DOUBLE, &s.momentum, "SGD momentum"},
      {"bucket-mb", CT_OPT_DOUBLE, &s.bucket_mb, "DDP bucket_cap_mb (0: not given, 1 MiB first bucket then 25)"},
      {"train-size", CT_OPT_INT, &s.train_size, "use the first N training images (0: all; --quick: 2560)"},
      {"data", CT_OPT_STRING, &s.data, "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)"},
      {"save", CT_OPT_OUTPUT, &s.save, "where rank 0 saves the model (default: ch08_model.safetensors)"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  g_cli = &cli;
  /*md hide*/
  if (s.epochs < 1 || s.batch_size < 1 || s.accumulate < 1 || s.train_size < 0 || !(s.lr > 0) ||
      !(s.momentum >= 0) || !(s.bucket_mb >= 0) || s.nproc < 1 || s.nproc > 64) {
    fprintf(stderr, "ch08: --epochs, --batch-size, --accumulate must be >= 1, --train-size >= 0, --lr > 0, "
                    "--bucket-mb >= 0, --momentum >= 0, --nproc in [1, 64]\nusage: ch08 [--help] ...\n");
    return 2;
  }
  if (cli.quick) {
    if (s.epochs == 2) s.epochs = 1;
    if (s.train_size == 0) s.train_size = 2560;
  }
  s.timed_steps = cli.quick ? QUICK_TIMED_STEPS : TIMED_STEPS;
  /*md show*/
  ct_cli_launch("ch08", argc, argv, (int)s.nproc); // no RANK: run again under tools/launch, as torchrun would
  cpu_if_gpus_short(&cli, s.backend, (int)s.nproc); // NCCL: one GPU per rank, or the ranks go to the CPU
  ct_cli_begin(&cli);                              // "device: ..." (rank 0's stdout only)
  const char *backend = strcmp(s.backend, "auto") == 0 ? (cli.device.type == CT_CUDA ? "nccl" : "mpi") : s.backend;
  ct_process_group *pg = ct_dist_init_process_group(backend); // dist.init_process_group(backend)
  if (!pg) ct_cli_die(&cli);
  ct_metrics *m = cli.metrics; // device, seed and quick recorded; only rank 0 writes the file
  trained t = {0};
  double ddp_ms = 0;
  if (show_group(pg, m) != CT_OK || show_collectives(pg, m) != CT_OK) ct_cli_die(&cli);
  show_sampler(ct_dist_get_world_size(pg), m);
  if (show_bandwidth(pg, cli.quick, m) != CT_OK || train(&s, pg, &t, m) != CT_OK ||
      show_overlap(pg, &t, &s, m, &ddp_ms) != CT_OK || show_dp_vs_ddp(pg, &t, &s, ddp_ms, m) != CT_OK ||
      show_checkpoint(pg, &t, &s, m) != CT_OK)
    ct_cli_die(&cli);
  ct_ddp_free(t.ddp);
  ct_optimizer_free(t.opt);
  ct_module_free(t.model);
  ct_free(t.s.x), ct_free(t.s.y);
  free(t.s.idx);
  ct_dataset_free(t.s.ds), ct_dataset_free(t.test);
  ct_dist_destroy_process_group(pg);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 用 `--nproc 1`、`2`、`4` 各跑一次，比较每轮的图片/秒。4 个 rank 在 2 个核上为什么不会更快？`all-reduce bandwidth` 一节的 busbw 随 rank 数怎样变化？
2. 把 `train` 里的 `sampler.epoch = e` 删掉（忘了 `set_epoch`）。损失曲线会变吗？每轮每个 rank 看到的样本有什么不同？
3. 用 `--accumulate 4 --batch-size 16` 和 `--batch-size 64` 各训练一次。两者每步用的样本数相同，损失应该接近，为什么不完全相同？
4. 不加参数和用 `--bucket-mb 0.05` 各运行一次，`training` 一节报告的桶数各是多少？从各参数的字节数（按注册的逆序：最后一层的偏置、权重，……）算出每个桶在哪里封口。PyTorch 1.13 在 `--bucket-mb 0.05` 下会分出几个桶，为什么？
5. 让 rank 1 在训练途中退出（比如在 `train_step` 里加 `if (ct_dist_get_rank(...) == 1 && k == 5) exit(3);`），看看 `tools/launch` 多久结束、报了什么。不用启动器时 `mpirun` 会怎样？
:::
::: en
## Exercises

1. Run with `--nproc 1`, `2` and `4` and compare each epoch's images per second. Why are 4 ranks on 2 cores not faster? How does the busbw of the `all-reduce bandwidth` section change with the number of ranks?
2. Delete `sampler.epoch = e` from `train` (forgetting `set_epoch`). Does the loss curve change? What does each rank see differently in each epoch?
3. Train once with `--accumulate 4 --batch-size 16` and once with `--batch-size 64`. Both use the same samples per step, so the losses should be close: why are they not identical?
4. Run once without options and once with `--bucket-mb 0.05`: how many buckets does the `training` section report each time? Work out from the parameters' byte sizes (in reverse registration order: the last layer's bias, its weight, ...) where each bucket closes. How many buckets would PyTorch 1.13 have made with `--bucket-mb 0.05`, and why?
5. Make rank 1 exit in the middle of training (for example `if (rank == 1 && k == 5) exit(3);` in the step loop) and see how soon `tools/launch` ends and what it reports.
:::
*/
