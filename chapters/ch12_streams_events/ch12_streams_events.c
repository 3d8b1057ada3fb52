// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 12 章　流与事件

GPU 上的工作不是调用一次、做完一次：主机把核函数和拷贝**排进队列**就返回，GPU 按队列的顺序去做。这样的队列就是**流**（stream）。第 2 章用两个流让一次拷贝和一个核函数同时进行，第 3 章讲过缓存分配器按流分配内存，第 6 章的 DataLoader 在一个旁路流上拷贝下一批数据。本章把流和事件本身讲完整：

1. 默认流和它的顺序；创建流，流的优先级（`torch.cuda.Stream.priority_range()`）；
2. 事件：计时（`elapsed_time` 的规则和报错），以及跨流等待（`wait_event`、`wait_stream`）；
3. 拷贝和计算在两个流上流水线式重叠，用锁页内存，实测串行和双流的时间，并用事件记下的时间画出时间线（本章的实验）；
4. 少了一次等待会造成的竞争，以及一个能在 CPU 上也把它抓出来的检查器；
5. `record_stream`：为什么在另一个流上用过的内存，不告诉分配器就释放是不安全的；
6. 主机同步点（`item()`、打印、拷到可分页内存），以及报告它们的 sync debug 模式（`torch.cuda.set_sync_debug_mode`）。

种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是王哲峰《PyTorch GPU训练 和 CUDA》）的 “Streams 和 events” 一节只有标题，没有内容；相关的几句散在别处，其中有需要纠正的地方，在用到时指出。

**在 CPU 上。**运行时的 CPU 设备也有流和事件，但 CPU 的工作在发起时就做完了：流永远是空闲的，事件读的是主机时钟。所以在 CPU 上什么都不会真正重叠，也不会真正竞争。本章在 CPU 上照样演示顺序、时间线和同步点报告；竞争则交给一个检查器：它在主机上按 GPU 的规则为每个流记账，不看实际执行的顺序，所以 CPU 上的运行也能报告 GPU 上可能发生的竞争。

```sh
cd build && ninja ch12_streams_events
./ch12                    # 有 GPU 就在 GPU 上
./ch12 --device cpu       # 在 CPU 上看顺序、检查器和同步点
./ch12 --quick            # 几秒钟
```
:::
::: en
# Chapter 12. Streams and events

Work on a GPU is not done call by call: the host **queues** kernels and copies and returns, and the GPU does them in queue order. Such a queue is a **stream**. Chapter 2 used two streams to run one copy alongside one kernel, chapter 3 showed that the caching allocator hands out memory per stream, and chapter 6's DataLoader copies the next batch on a side stream. This chapter covers streams and events themselves:

1. the default stream and its ordering; creating streams, and their priorities (`torch.cuda.Stream.priority_range()`);
2. events: timing (the rules and errors of `elapsed_time`), and waits across streams (`wait_event`, `wait_stream`);
3. copies and compute overlapped as a pipeline on two streams with pinned memory, serial against two-stream time measured, and a timeline drawn from the times the events recorded (the chapter's lab);
4. the race a missing wait causes, and a checker that catches it even on the CPU;
5. `record_stream`: why freeing memory that another stream used, without telling the allocator, is unsafe;
6. host sync points (`item()`, printing, copies to pageable memory), and the sync debug mode that reports them (`torch.cuda.set_sync_debug_mode`).

The "Streams and events" section of a seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here Wang Zhefeng's “PyTorch GPU training and CUDA”) has a heading and no text; the few sentences about the subject elsewhere need some corrections, pointed out where they come up.

**On the CPU.** The runtime's CPU device has streams and events too, but CPU work is done when it is issued: a stream is always idle and an event reads the host clock. So on the CPU nothing really overlaps and nothing really races. The chapter still shows ordering, the timeline and the sync point reports there; races are left to a checker that keeps, on the host, each stream's accounts by a GPU's rules rather than by what actually ran, so that a CPU run reports the races a GPU run could have.

```sh
cd build && ninja ch12_streams_events
./ch12                    # on the GPU when there is one
./ch12 --device cpu       # ordering, the checker and the sync points on the CPU
./ch12 --quick            # seconds
```
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct.h"

#define MAX_CHUNKS 64
#define MAX_LAYERS 4
#define SYNC_ROUNDS 7 // timed rounds of the two item() loops, the median kept

static const ct_cli *g_cli;

static void ok(int status) {
  if (status != CT_OK) ct_cli_die(g_cli);
}

static ct_tensor *must(ct_tensor *t) {
  if (!t) ct_cli_die(g_cli);
  return t;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double item(const ct_tensor *t) {
  double v = NAN;
  ok(ct_item(t, &v));
  return v;
}

typedef struct settings {
  long chunks, rows, width, layers, reps;
} settings;
/*md show*/

/*md
::: zh
## 默认流、当前流和优先级

每个设备有一个**默认流**。PyTorch 的 CUDA 默认流是所谓的 legacy 默认流（句柄为 NULL）：它和同一设备上所有“阻塞”流互相排队。`torch.cuda.Stream()` 创建的流则是**非阻塞**的（`cudaStreamNonBlocking`），它不等默认流，默认流也不等它，它们之间的先后只能由事件来定。运行时照此办理：`ct_default_stream(d)` 是默认流，`ct_stream_create(d, priority)` 创建非阻塞流，`ct_set_stream(s)` 让之后的运算都排到 `s` 上（对应 `with torch.cuda.stream(s):`）。当前流是**每个线程**各自的，新线程从默认流开始。

一个流里的工作严格按发起的顺序执行，这是流唯一的保证。下面把 `x = 1`、`x *= 2`、`x += 3` 依次排进一个流：结果是 5，换个顺序会是 8。在 GPU 上，主机一口气把三步都发出去，一步也不等；它们按什么顺序执行，完全由流来保证。

**优先级。**调度器在两个流都有工作可发时，优先发优先级高的。数值越小优先级越高：CUDA 报告的范围在近几代 GPU 上是 (0, −5)，当前的 PyTorch 只用其中四级，`torch.cuda.Stream.priority_range()` 返回 (0, −3)（c10 的 `max_compile_time_stream_priorities = 4`）。运行时的 `ct_stream_priority_range` 给出同样的范围，创建流时把超出范围的优先级截到边界上，`ct_stream_priority` 读回截过的值（`Stream.priority`）。优先级决定的是**还在排队**的工作谁先上，细到线程块：高优先级核函数的线程块排在低优先级核函数还没开始的线程块前面，已经在跑的线程块不会被停下。CPU 上只有一级 (0, 0)。
:::
::: en
## The default stream, the current stream and priorities

Each device has a **default stream**. PyTorch's CUDA default stream is the so-called legacy default stream (handle NULL): it queues behind, and ahead of, every "blocking" stream on its device. Streams made by `torch.cuda.Stream()` are **non-blocking** (`cudaStreamNonBlocking`): they do not wait for the default stream, nor it for them, and only events can order them. The runtime does the same: `ct_default_stream(d)` is the default stream, `ct_stream_create(d, priority)` makes a non-blocking stream, and `ct_set_stream(s)` sends the ops that follow to `s` (PyTorch's `with torch.cuda.stream(s):`). The current stream belongs to **each thread**; a new thread starts on the default stream.

Work on one stream runs strictly in the order it was issued: that is the one promise a stream makes. Below, `x = 1`, `x *= 2`, `x += 3` go onto one stream in turn: the result is 5, where another order would give 8. On a GPU the host issues all three without waiting for any of them: the order they run in is the stream's doing alone.

**Priorities.** When two streams both have work ready, the scheduler launches the higher-priority one's first. Lower numbers are higher priorities: CUDA reports a range of (0, −5) on recent GPUs, of which current PyTorch uses four levels, so `torch.cuda.Stream.priority_range()` returns (0, −3) (c10's `max_compile_time_stream_priorities = 4`). The runtime's `ct_stream_priority_range` gives the same range; creating a stream clamps a priority outside it to the nearest end, and `ct_stream_priority` reads back the clamped value (`Stream.priority`). A priority decides which **pending** work goes first, down to thread blocks: a high-priority kernel's blocks go ahead of the blocks a running low-priority kernel has not started yet; blocks already running are not stopped. The CPU has a single level, (0, 0).
:::
*/
static void show_streams(ct_device dev, ct_metrics *m) {
  ct_cli_section("streams");
  char name[CT_DEVICE_STR_MAX];
  ct_device_str(dev, name);
  ct_stream *def = ct_default_stream(dev);
  if (!def) ct_cli_die(g_cli);
  printf("default stream of %s: current = %s\n", name, ct_current_stream(dev) == def ? "yes" : "no");
  int least = 0, greatest = 0;
  ok(ct_stream_priority_range(dev, &least, &greatest));
  printf("priority_range() = (%d, %d)\n", least, greatest);
  ct_stream *hi = ct_stream_create(dev, -100), *lo = ct_stream_create(dev, 0);
  if (!hi || !lo) ct_cli_die(g_cli);
  printf("Stream(priority=-100).priority = %d, Stream().priority = %d\n", ct_stream_priority(hi),
         ct_stream_priority(lo));
  ct_metrics_num(m, "priority_least", least);
  ct_metrics_num(m, "priority_greatest", greatest);
  ct_metrics_num(m, "priority_clamped", ct_stream_priority(hi));
  ct_stream_free(hi);
  ct_stream_free(lo);
}
/*md output streams*/
/*md twin streams*/

/*md
::: zh
## 顺序，以及事件

**事件**（event）是插在流里的一个记号：`ct_event_record(e, s)` 把它排进 `s`，流做到这里时事件就“完成”了，GPU 同时记下时间。事件有三种用法：

- **计时**：两个创建时打开了计时（`enable_timing=True`）的事件，都记录过并完成之后，`ct_event_elapsed_time(start, end, &ms)` 给出两者之间 GPU 上经过的毫秒数（`start.elapsed_time(end)`）。时间来自 GPU 自己的时钟，主机那边慢不慢都不影响。当前 PyTorch 的规则和报错按这个顺序：先查计时（“Both events must be created with argument 'enable_timing=True'.”），再查记录（“Both events must be recorded before calculating elapsed time.”）。它还要求两个事件都已完成，否则报错（1.13 则是 CUDA 的 `cudaErrorNotReady`）；运行时在这里替调用者等它们完成。
- **主机等待**：`ct_event_synchronize(e)` 让主机等到事件完成，`ct_event_query(e)` 只问不等。
- **流等待**：`ct_stream_wait_event(b, e)` 让流 `b` 之后的工作等到 `e` 完成才开始，主机不等（`b.wait_event(e)`）；`ct_stream_wait_stream(b, a)` 是在 `a` 上记录一个新事件再让 `b` 等它（`b.wait_stream(a)`）。跨流的先后只能这样建立。

下面先在一个流上验证顺序（事件时间不减），再让流 `a` 写、流 `b` 在等过 `a` 的事件之后读：`b` 读到的是 `a` 最后写的值。最后是 `elapsed_time` 的三种报错。在 CPU 上，事件读的是主机时钟，这些规则照样成立，只是每一步都已经做完了。
:::
::: en
## Ordering, and events

An **event** is a marker in a stream: `ct_event_record(e, s)` queues it on `s`, and when the stream gets there the event is "complete" and the GPU notes the time. Events serve three purposes:

- **Timing**: for two events created with timing on (`enable_timing=True`), both recorded and complete, `ct_event_elapsed_time(start, end, &ms)` gives the milliseconds that passed on the GPU between them (`start.elapsed_time(end)`). The time comes from the GPU's own clock, whatever the host was doing meanwhile. Current PyTorch's rules and errors come in this order: timing first ("Both events must be created with argument 'enable_timing=True'."), then recording ("Both events must be recorded before calculating elapsed time."). It also requires both events to be complete and raises otherwise (1.13 failed with CUDA's `cudaErrorNotReady`); the runtime waits for them there instead.
- **Host waits**: `ct_event_synchronize(e)` makes the host wait until the event is complete; `ct_event_query(e)` asks without waiting.
- **Stream waits**: `ct_stream_wait_event(b, e)` makes the work queued on stream `b` afterwards wait until `e` is complete, without the host waiting (`b.wait_event(e)`); `ct_stream_wait_stream(b, a)` records a fresh event on `a` and makes `b` wait for it (`b.wait_stream(a)`). Order across streams is made this way and no other.

Below, ordering on one stream is checked first (event times never decrease), then stream `a` writes and stream `b`, after waiting for `a`'s event, reads: `b` sees the last value `a` wrote. Last come the three errors of `elapsed_time`. On the CPU, events read the host clock and the same rules hold; every step is simply done already.
:::
*/
static void show_ordering(ct_device dev, ct_metrics *m) {
  ct_cli_section("ordering");
  ct_stream *def = ct_current_stream(dev), *a = ct_stream_create(dev, 0), *b = ct_stream_create(dev, 0);
  ct_event *ev[4], *done = ct_event_create(dev, false);
  if (!a || !b || !done) ct_cli_die(g_cli);
  for (int i = 0; i < 4; ++i)
    if (!(ev[i] = ct_event_create(dev, true))) ct_cli_die(g_cli);
  ct_tensor *x = must(ct_empty(CT_SHAPE(1 << 20), CT_F32, dev));
  // One stream: x = 1; x *= 2; x += 3, with an event before and after each step.
  ok(ct_stream_wait_stream(a, def)); // x was allocated on def
  ok(ct_set_stream(a));
  ok(ct_event_record(ev[0], a));
  ok(ct_fill_(x, 1.0));
  ok(ct_event_record(ev[1], a));
  ok(ct_binary_scalar_out(CT_OP_MUL, x, x, 2.0));
  ok(ct_event_record(ev[2], a));
  ok(ct_binary_scalar_out(CT_OP_ADD, x, x, 3.0));
  ok(ct_event_record(ev[3], a));
  ok(ct_event_record(done, a));
  // Stream b reads x after waiting for a's last event.
  ok(ct_stream_wait_event(b, done));
  ok(ct_set_stream(b));
  ct_tensor *y = must(ct_max(x));
  ok(ct_set_stream(def));
  ok(ct_stream_wait_stream(def, b));
  double v = item(y);
  ct_metrics_print(m, "order_result", "one stream: x = 1; x *= 2; x += 3 -> max(x) read on stream b after wait_event: %g\n",
                   v);
  float t[3];
  bool increasing = true;
  for (int i = 1; i < 4; ++i) {
    ok(ct_event_elapsed_time(ev[0], ev[i], &t[i - 1]));
    increasing &= t[i - 1] >= (i > 1 ? t[i - 2] : 0.0f);
  }
  printf("event times along the stream never decrease: %s\n", increasing ? "yes" : "NO");
  ct_metrics_num(m, "event_times_increase", increasing);
  // The three errors of elapsed_time, in PyTorch's order.
  ct_event *plain = ct_event_create(dev, false), *unrec = ct_event_create(dev, true);
  if (!plain || !unrec) ct_cli_die(g_cli);
  ok(ct_event_record(plain, NULL));
  float ms;
  printf("elapsed_time with a timing-less event: %s\n",
         ct_event_elapsed_time(ev[0], plain, &ms) ? ct_last_error() : "no error (unexpected)");
  printf("elapsed_time with an unrecorded event: %s\n",
         ct_event_elapsed_time(ev[0], unrec, &ms) ? ct_last_error() : "no error (unexpected)");
  printf("elapsed_time, end before start: %s\n",
         ct_event_elapsed_time(ev[3], ev[0], &ms) == CT_OK && ms <= 0 ? "a negative (or zero) time" : "?");
  ok(ct_record_stream(x, a));
  ok(ct_record_stream(x, b));
  ok(ct_record_stream(y, b));
  ct_free(x), ct_free(y);
  ct_event_free(plain), ct_event_free(unrec), ct_event_free(done);
  for (int i = 0; i < 4; ++i) ct_event_free(ev[i]);
  ct_stream_free(a);
  ct_stream_free(b);
}
/*md output ordering*/
/*md twin ordering*/

/*md
::: zh
## 流水线：拷贝和计算在两个流上重叠

种子教程说，要把数据传输和计算重叠起来，用异步拷贝，再让 DataLoader 把批次放在锁页内存里（还有一段训练循环写着 `x.to("cuda", non_blocking=True)`）。这只说对了一半。`non_blocking=True` 让主机不必等拷贝完成，可以接着往下发起工作；但这个拷贝进的是**当前流**，当前流上排在它后面的核函数仍要等它做完，排在它前面的核函数做完之前它也不会开始。所以一个流上的拷贝和计算永远是一个接一个的：GPU 上的拷贝要和计算**同时**进行，拷贝必须在另一个流上，数据必须在锁页内存里（第 2 章），两个流之间用事件排好先后。

经典的做法是把数据切成块，排成流水线：

- **copy 流**：依次把第 0、1、2……块拷到设备上，每拷完一块记录一个事件 `copied[i]`；
- **compute 流**：对第 i 块，先 `wait_event(copied[i])`，再计算。

copy 流不等 compute 流，所以第 i 块在计算时，第 i+1 块已经在拷贝了。理想情况下，总时间从“所有拷贝 + 所有计算”降到“较长的那一项，再加上较短那一项的一块”（计算较长时，是第一块的拷贝）。

每块的计算是 `y = relu(x @ W₁)`、`y = relu(y @ W₂)`……（`--layers` 层），最后求和。串行的安排把拷贝和计算都放在一个流上，作对照。两种安排的输出必须逐位相同（同样的运算、同样的顺序），这是本章的检查之一；另一个检查是在第一次运行时打开后面要讲的竞争检查器，它不能报告任何问题。

这里有两件事不能忘，也就是本章的实验要你写的代码：

1. compute 流在计算第 i 块之前等 `copied[i]`，否则它可能读到还没拷完的数据；
2. 第 i 块的设备内存是在 copy 流上分配的，却在 compute 流上被读：释放之前要 `ct_record_stream(d, compute)`，否则分配器可能在计算还在读它时，就把这块内存交给 copy 流上的下一次拷贝（后面一节细说）。

**在 CPU 上**，“拷到设备”就是一次主机内的 `memcpy`（`ct_clone`），两个流也只是先后两次函数调用：双流做的工作和串行一样，没有什么能让它更快（这次运行量到的时间见下面时间线之后的一段），时间线上拷贝和计算一段接一段，没有重叠。代码一行不改。
:::
::: en
## The pipeline: copies and compute overlapped on two streams

A seed says that to overlap data transfer with computation one uses asynchronous copies and has the DataLoader put batches in pinned memory (and a training loop elsewhere writes `x.to("cuda", non_blocking=True)`). That is half the story. `non_blocking=True` frees the host from waiting for the copy, so it can go on issuing work; but the copy goes onto the **current stream**, where the kernels queued after it still wait for it to finish, and it does not start before the kernels queued ahead of it are done. Copies and compute on one stream always take turns: for a copy to run on the GPU **at the same time** as compute, it must be on another stream, its data must be in pinned memory (chapter 2), and events must order the two streams.

The classic way is to cut the data into chunks and run a pipeline:

- **copy stream**: copies chunk 0, 1, 2, ... to the device in turn, recording an event `copied[i]` after each;
- **compute stream**: for chunk i, first `wait_event(copied[i])`, then compute.

The copy stream does not wait for the compute stream, so while chunk i is being computed, chunk i+1 is already being copied. Ideally the total time falls from "all copies plus all compute" to "the longer of the two, plus one chunk of the shorter" (when compute is longer, the first chunk's copy).

Each chunk's compute is `y = relu(x @ W₁)`, `y = relu(y @ W₂)`, ... (`--layers` layers), then a sum. The serial schedule, with copies and compute on one stream, is the reference. Both schedules must give bit-identical sums (the same ops in the same order): one of the chapter's checks. The other is that the first run is made with the race checker of the next section on, and it must report nothing.

Two things must not be forgotten, and they are the code the chapter's lab asks you to write:

1. the compute stream waits for `copied[i]` before computing chunk i, or it may read a chunk whose copy has not finished;
2. chunk i's device memory was allocated on the copy stream but is read on the compute stream: `ct_record_stream(d, compute)` before it is freed, or the allocator may hand that memory to the copy stream's next copy while the compute still reads it (the section after next says more).

**On the CPU** "copying to the device" is a host `memcpy` (`ct_clone`), and two streams are two function calls one after the other: the two-stream schedule does the same work as the serial one, and nothing can make it faster (this run's times follow the timeline below); on the timeline copies and compute follow each other without overlap. Not one line of code changes.
:::
*/
/*md
::: zh
{{fig streams}} 是这条流水线的理想化时间线，假设一块的拷贝和计算各占一格时间。一个流上，拷贝和计算轮流进行，三块要 6 格。两个流上，计算流先等事件 `copied[0]`，之后计算第 i 块的同时，拷贝流已经在拷第 i+1 块，三块只要 4 格：较长的那一项（这里一样长）的总和，加上一块较短的。下面的实测时间线（由事件的时间画出）是这张图的真实版本；在 CPU 上，两个流是先后调用的两个函数，看不到重叠。
:::
::: en
{{fig streams}} is the pipeline's idealised timeline, assuming one chunk's copy and one chunk's compute take a slot each. On one stream copies and compute take turns: three chunks take 6 slots. On two streams the compute stream first waits for the event `copied[0]`; from then on, while chunk i is computed, the copy stream is already copying chunk i+1, and three chunks take 4 slots: the sum of the longer kind (here they are equal) plus one chunk of the shorter. The measured timeline below (drawn from the events' times) is the real version of this picture; on a CPU the two streams are two function calls one after the other, and no overlap shows.
:::
*/
/*md figure streams: 理想化的流时间线：一个流上拷贝和计算轮流，两个流上拷贝与计算重叠 | An idealised stream timeline: on one stream copies and compute take turns; on two they overlap*/
typedef struct workload {
  ct_device dev;
  int n, layers;
  ct_tensor *host[MAX_CHUNKS]; // (rows, width) f32 on the host, pinned when dev is a GPU
  ct_tensor *w[MAX_LAYERS];    // (width, width) f32 on dev
  ct_stream *copy, *compute;
} workload;

// One schedule's record: when each chunk's copy and compute began and ended,
// in ms after the t0 event; the total; each chunk's sum.
typedef struct timeline {
  double copy_start[MAX_CHUNKS], copy_end[MAX_CHUNKS];
  double comp_start[MAX_CHUNKS], comp_end[MAX_CHUNKS];
  double total_ms;
  double sums[MAX_CHUNKS];
} timeline;

// The events a run records, timing on.
typedef struct marks {
  ct_event *t0, *end;
  ct_event *copy_start[MAX_CHUNKS], *copied[MAX_CHUNKS], *comp_start[MAX_CHUNKS], *comp_end[MAX_CHUNKS];
} marks;

/*md hide*/
// x[i] (rows, width): element (r, c) of chunk i is ((i*rows + r)*7 + 3c) mod 17 / 16 - 0.5;
// W_l (width, width): element (c, j) is ((5c + 11j + l) mod 13 - 6) / (4 width).
// Small exact values, so the twin rebuilds them bit for bit.
static float x_value(long i, long r, long c, long rows) {
  return (float)(((i * rows + r) * 7 + 3 * c) % 17) / 16.0f - 0.5f;
}
static float w_value(long l, long c, long j, long width) {
  return (float)((5 * c + 11 * j + l) % 13 - 6) / (float)(4 * width);
}

static void workload_make(workload *w, ct_device dev, const settings *s) {
  memset(w, 0, sizeof *w);
  w->dev = dev;
  w->n = (int)s->chunks;
  w->layers = (int)s->layers;
  float *buf = malloc(sizeof(float) * (size_t)(s->rows > s->width ? s->rows : s->width) * (size_t)s->width);
  if (!buf) ct_cli_die(g_cli);
  for (int i = 0; i < w->n; ++i) {
    for (long r = 0; r < s->rows; ++r)
      for (long c = 0; c < s->width; ++c) buf[r * s->width + c] = x_value(i, r, c, s->rows);
    ct_tensor *h = must(ct_from_host(buf, CT_SHAPE(s->rows, s->width), CT_F32, ct_device_cpu()));
    w->host[i] = dev.type == CT_CUDA ? must(ct_pin_memory(h)) : ct_retain(h);
    ct_free(h);
  }
  for (int l = 0; l < w->layers; ++l) {
    for (long c = 0; c < s->width; ++c)
      for (long j = 0; j < s->width; ++j) buf[c * s->width + j] = w_value(l, c, j, s->width);
    w->w[l] = must(ct_from_host(buf, CT_SHAPE(s->width, s->width), CT_F32, dev));
  }
  free(buf);
  w->copy = ct_stream_create(dev, 0);
  w->compute = ct_stream_create(dev, 0);
  if (!w->copy || !w->compute) ct_cli_die(g_cli);
  ok(ct_sanitizer_name_stream(w->copy, "copy"));
  ok(ct_sanitizer_name_stream(w->compute, "compute"));
}

static void workload_free(workload *w) {
  for (int i = 0; i < w->n; ++i) ct_free(w->host[i]);
  for (int l = 0; l < w->layers; ++l) ct_free(w->w[l]);
  ct_stream_free(w->copy);
  ct_stream_free(w->compute);
}

static void marks_make(marks *k, ct_device dev, int n) {
  memset(k, 0, sizeof *k);
  ct_event **all[] = {&k->t0, &k->end};
  for (int j = 0; j < 2; ++j)
    if (!(*all[j] = ct_event_create(dev, true))) ct_cli_die(g_cli);
  for (int i = 0; i < n; ++i)
    if (!(k->copy_start[i] = ct_event_create(dev, true)) || !(k->copied[i] = ct_event_create(dev, true)) ||
        !(k->comp_start[i] = ct_event_create(dev, true)) || !(k->comp_end[i] = ct_event_create(dev, true)))
      ct_cli_die(g_cli);
}

static void marks_free(marks *k, int n) {
  ct_event_free(k->t0), ct_event_free(k->end);
  for (int i = 0; i < n; ++i) {
    ct_event_free(k->copy_start[i]), ct_event_free(k->copied[i]);
    ct_event_free(k->comp_start[i]), ct_event_free(k->comp_end[i]);
  }
}

// The times of a finished run, in ms after t0.
static void read_times(const marks *k, int n, timeline *tl) {
  float ms = 0;
  for (int i = 0; i < n; ++i) {
    ok(ct_event_elapsed_time(k->t0, k->copy_start[i], &ms)), tl->copy_start[i] = ms;
    ok(ct_event_elapsed_time(k->t0, k->copied[i], &ms)), tl->copy_end[i] = ms;
    ok(ct_event_elapsed_time(k->t0, k->comp_start[i], &ms)), tl->comp_start[i] = ms;
    ok(ct_event_elapsed_time(k->t0, k->comp_end[i], &ms)), tl->comp_end[i] = ms;
  }
  ok(ct_event_elapsed_time(k->t0, k->end, &ms));
  tl->total_ms = ms;
}
/*md show*/

// The chunk on the device: an asynchronous copy from pinned memory on the
// current stream (x.to(device, non_blocking=True)); on the CPU, a memcpy.
static ct_tensor *upload(const ct_tensor *h, ct_device dev) {
  return dev.type == CT_CPU ? ct_clone(h) : ct_to(h, dev, CT_F32, true);
}

// sum(relu(...relu(x @ W1) @ W2 ...)) on the current stream; a 0-d tensor
// there (the host does not wait for it).
static ct_tensor *forward(const ct_tensor *x, const workload *w) {
  ct_tensor *y = ct_retain((ct_tensor *)x);
  for (int l = 0; l < w->layers && y; ++l) {
    ct_tensor *z = ct_matmul(y, w->w[l]);
    ct_free(y);
    y = z ? ct_relu(z) : NULL;
    ct_free(z);
  }
  ct_tensor *s = y ? ct_sum(y) : NULL;
  ct_free(y);
  return s;
}

typedef struct schedule {
  bool two_streams; // copies on the copy stream; else everything on compute
  bool wait;        // compute waits for copied[i] (the lab's first line)
  bool record;      // ct_record_stream(d, compute) (the lab's second line)
} schedule;

// Runs the first n chunks through upload and compute as `sc` says; fills tl
// (times and sums). Enters and leaves with the default stream current.
// Returns the first failure (a race the sanitizer refused, say) after
// cleaning up and waiting for both streams.
static int run_pipeline(const workload *w, int n, schedule sc, marks *k, timeline *tl) {
  ct_stream *def = ct_current_stream(w->dev), *compute = w->compute;
  ct_stream *copy = sc.two_streams ? w->copy : w->compute;
  ct_tensor *sums[MAX_CHUNKS] = {NULL};
  int rc = ct_stream_wait_stream(compute, def); // the weights were made on def
  if (rc == CT_OK) rc = ct_event_record(k->t0, compute);
  if (rc == CT_OK) rc = ct_stream_wait_event(copy, k->t0); // copies start at t0
  for (int i = 0; i < n && rc == CT_OK; ++i) {
    rc = ct_set_stream(copy);
    if (rc == CT_OK) rc = ct_event_record(k->copy_start[i], copy);
    ct_tensor *d = rc == CT_OK ? upload(w->host[i], w->dev) : NULL; // allocated for `copy`
    if (!d) rc = rc ? rc : (int)ct_last_status();
    if (rc == CT_OK) rc = ct_event_record(k->copied[i], copy);
    if (rc == CT_OK) rc = ct_set_stream(compute);
    if (rc == CT_OK && d) ct_sanitizer_name_tensor(d, "chunk");
    /* LAB BEGIN: make compute wait for chunk i's copy (k->copied[i]), and tell the allocator that d is used on compute | test: chapter.ch12, chapter.ch12_race */
    if (rc == CT_OK && sc.wait) rc = ct_stream_wait_event(compute, k->copied[i]);
    if (rc == CT_OK && sc.record) rc = ct_record_stream(d, compute);
    /* LAB END */
    if (rc == CT_OK) rc = ct_event_record(k->comp_start[i], compute);
    if (rc == CT_OK && !(sums[i] = forward(d, w))) rc = ct_last_status();
    if (rc == CT_OK) rc = ct_event_record(k->comp_end[i], compute);
    ct_free(d); // the block returns to `copy`'s pool
  }
  if (rc == CT_OK) rc = ct_stream_wait_stream(compute, copy);
  if (rc == CT_OK) rc = ct_event_record(k->end, compute);
  int rc2 = ct_set_stream(def);
  if (rc2 == CT_OK) rc2 = ct_stream_wait_stream(def, compute); // the sums are read on def
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(copy);
  if (rc2 == CT_OK) rc2 = ct_stream_synchronize(compute);
  if (rc == CT_OK) rc = rc2;
  if (rc == CT_OK) read_times(k, n, tl);
  for (int i = 0; i < n; ++i) {
    if (rc == CT_OK && ct_item(sums[i], &tl->sums[i]) != CT_OK) rc = ct_last_status();
    ct_free(sums[i]);
  }
  return rc;
}
/*md twin pipeline*/

/*md
::: zh
每种安排先不计时地跑一次（第一次会碰上 cuBLAS 初始化、分配器要新内存之类的一次性开销；这次打开竞争检查器，检查它没有任何报告），再把两种安排交替计时 `--reps` 次（串行、双流、串行、双流……，这样机器上其他程序的一阵负载会同样落在两者身上），各取中位数。时间是事件测的：`t0` 记在 compute 流上，copy 流先等它；`end` 在 compute 流等过 copy 流之后记录。下表是每种安排最后那次运行的时间线，每一块的拷贝和计算各占一行里的起止时刻（毫秒，从 `t0` 算起）。
:::
::: en
Each schedule is first run once untimed (the first run meets one-time costs: cuBLAS starting up, the allocator asking for fresh memory; this run has the race checker on, and it must report nothing), then the two are timed `--reps` times each, taking turns (serial, two streams, serial, two streams, ...; a burst of other load on the machine then hits both alike), and each keeps its median. Events do the timing: `t0` is recorded on the compute stream and the copy stream waits for it first; `end` is recorded after the compute stream has waited for the copy stream. The table is the timeline of each schedule's last run: each chunk's copy and compute, with their start and end times (ms after `t0`).
:::
*/
/*md hide*/
static void put_timeline(ct_metrics *m, const char *tag, const timeline *tl, int n) {
  double idx[MAX_CHUNKS];
  char key[64];
  for (int i = 0; i < n; ++i) idx[i] = i;
  snprintf(key, sizeof key, "%s_chunk", tag), ct_metrics_series(m, key, idx, n);
  snprintf(key, sizeof key, "%s_copy_start_ms", tag), ct_metrics_series(m, key, tl->copy_start, n);
  snprintf(key, sizeof key, "%s_copy_end_ms", tag), ct_metrics_series(m, key, tl->copy_end, n);
  snprintf(key, sizeof key, "%s_compute_start_ms", tag), ct_metrics_series(m, key, tl->comp_start, n);
  snprintf(key, sizeof key, "%s_compute_end_ms", tag), ct_metrics_series(m, key, tl->comp_end, n);
}

static void print_timeline(const char *title, const timeline *tl, int n) {
  printf("%s: %.3f ms\n  chunk   copy start..end (ms)   compute start..end (ms)\n", title, tl->total_ms);
  for (int i = 0; i < n; ++i)
    printf("  %5d   %8.3f..%-8.3f      %8.3f..%-8.3f\n", i, tl->copy_start[i], tl->copy_end[i],
           tl->comp_start[i], tl->comp_end[i]);
}

// Time during which some copy and some compute ran at once (ms).
static double overlapped_ms(const timeline *tl, int n) {
  double both = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double lo = fmax(tl->copy_start[i], tl->comp_start[j]), hi = fmin(tl->copy_end[i], tl->comp_end[j]);
      if (hi > lo) both += hi - lo;
    }
  return both;
}

// Runs each of the two schedules once checked (sanitizer in "error" mode),
// then times them in reps interleaved rounds (one, the other, one, ...) with
// the sanitizer off, so that a burst of other load hits both alike; ms[i] is
// schedule i's median time, tl[i] its last run. Leaves the sanitizer's mode
// as it found it.
static void measure(const workload *w, const schedule sc[2], int reps, double ms[2], timeline tl[2]) {
  marks k;
  marks_make(&k, w->dev, w->n);
  int mode = ct_sanitizer_mode();
  ok(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  uint64_t before = ct_sanitizer_reports();
  for (int i = 0; i < 2; ++i) ok(run_pipeline(w, w->n, sc[i], &k, &tl[i]));
  if (ct_sanitizer_reports() != before) {
    ct_fail(CT_ERR_RACE, "ch12: the pipeline has a race: %s", ct_sanitizer_last_report());
    ct_cli_die(g_cli);
  }
  ok(ct_sanitizer_set_mode(CT_SANITIZER_OFF));
  double *total = malloc(sizeof(double) * 2 * (size_t)reps); // schedule i's runs at total[i * reps ...]
  if (!total) ct_cli_die(g_cli);
  for (int r = 0; r < reps; ++r)
    for (int i = 0; i < 2; ++i) {
      ct_cli_exit_if_interrupted(NULL); // Ctrl-C: stop between timed runs
      ok(run_pipeline(w, w->n, sc[i], &k, &tl[i]));
      total[i * reps + r] = tl[i].total_ms;
    }
  for (int i = 0; i < 2; ++i) ms[i] = ct_cli_median(total + i * reps, reps);
  free(total);
  ok(ct_sanitizer_set_mode(mode));
  marks_free(&k, w->n);
}
/*md show*/

static void show_overlap(ct_device dev, const settings *s, ct_metrics *m) {
  ct_cli_section("overlap");
  workload w;
  workload_make(&w, dev, s);
  printf("%ld chunks of (%ld, %ld) f32 (%.1f MiB each), %ld layers of (%ld, %ld); %s host memory\n", s->chunks,
         s->rows, s->width, (double)s->rows * (double)s->width * 4 / (1 << 20), s->layers, s->width, s->width,
         dev.type == CT_CUDA ? "pinned" : "pageable (the CPU: no pinned memory, the 'copy' is a memcpy)");
  timeline tl[2];
  double ms[2]; // the medians: serial, two streams
  measure(&w,
          (const schedule[2]){{.two_streams = false, .wait = true, .record = true},
                              {.two_streams = true, .wait = true, .record = true}},
          (int)s->reps, ms, tl);
  const timeline serial = tl[0], two = tl[1];
  print_timeline("serial (one stream), the last run", &serial, w.n);
  print_timeline("two streams, the last run", &two, w.n);
  bool same = memcmp(serial.sums, two.sums, sizeof(double) * (size_t)w.n) == 0;
  double checksum = 0;
  for (int i = 0; i < w.n; ++i) checksum += serial.sums[i];
  printf("sums of the two schedules bit-identical: %s; checksum %.6e\n", same ? "yes" : "NO", checksum);
  printf("checker on the first run of each: no race reported\n");
  double copy_ms = 0, comp_ms = 0;
  for (int i = 0; i < w.n; ++i) {
    copy_ms += serial.copy_end[i] - serial.copy_start[i];
    comp_ms += serial.comp_end[i] - serial.comp_start[i];
  }
  printf("serial (last run): copies %.3f ms + compute %.3f ms; two streams (last run): copy and compute overlapped "
         "%.3f ms\n", copy_ms, comp_ms, overlapped_ms(&two, w.n));
  printf("median of %ld interleaved rounds: serial %.3f ms, two streams %.3f ms\n", s->reps, ms[0], ms[1]);
  printf("speed-up of two streams over one: %.2fx%s\n", ms[0] / ms[1],
         dev.type == CT_CPU ? " (the CPU runs work as it is issued: nothing can overlap)" : "");
  ct_metrics_num(m, "chunks", w.n);
  ct_metrics_num(m, "rows", (double)s->rows);
  ct_metrics_num(m, "width", (double)s->width);
  ct_metrics_num(m, "layers", w.layers);
  ct_metrics_num(m, "serial_ms", ms[0]);
  ct_metrics_num(m, "two_stream_ms", ms[1]);
  ct_metrics_num(m, "overlap_speedup", ms[0] / ms[1]);
  ct_metrics_num(m, "serial_copy_ms", copy_ms);
  ct_metrics_num(m, "serial_compute_ms", comp_ms);
  ct_metrics_num(m, "overlapped_ms", overlapped_ms(&two, w.n));
  ct_metrics_num(m, "sums_identical", same);
  ct_metrics_num(m, "checksum", checksum);
  ct_metrics_series(m, "chunk_sums", serial.sums, w.n);
  put_timeline(m, "serial", &serial, w.n);
  put_timeline(m, "two_stream", &two, w.n);
  workload_free(&w);
}
/*md output overlap*/
/*md
::: zh
{{fig timeline}} 是 {{fig streams}} 的实测版本：每一块的拷贝和计算在事件量到的时刻开始和结束，一栏是串行的安排，一栏是两个流。
:::
::: en
{{fig timeline}} is the measured version of {{fig streams}}: each chunk's copy and compute start and end at the times the events measured, one panel for the serial schedule and one for two streams.
:::
*/
/*md figure timeline*/

/*md
::: zh
在 GPU 上，时间线应当是这样的：串行时，拷贝和计算在一条线上交替；双流时，第 i+1 块的拷贝条和第 i 块的计算条在时间上叠在一起。双流比串行快多少，取决于拷贝和计算哪个长：两者相当时最多快将近一倍，差得越多省得越少（省下的是较短的那一项）。{{recorded @run}}中：串行 {{recorded serial_ms %.2f}} 毫秒，双流 {{recorded two_stream_ms %.2f}} 毫秒，比值 {{recorded overlap_speedup %.2f}}，拷贝和计算同时进行的时间共 {{recorded overlapped_ms %.2f}} 毫秒。{{if recorded device is cpu and recorded overlap_speedup about 1 within 15%}}两者相差不到 15%，和预期一样：在 CPU 上“拷贝”就是一次 `memcpy`，两个流只是先后两次函数调用，没有能同时工作的硬件，时间线上也没有重叠。{{elif recorded device is cpu}}两者相差超过 15%，但这不是流的作用：在 CPU 上两种安排做同样的工作，一段接一段地执行，差别来自同时运行在这台机器上的其他程序（忙碌的机器上，这样的计时只是噪声）。重叠要在 GPU 上才看得到：拷贝引擎和 SM 各自独立，下一块的拷贝才能和这一块的计算同时进行。{{elif recorded overlap_speedup > 1.1}}双流确实更快：拷贝引擎搬下一块数据的同时，SM 在算这一块。{{else}}这次双流没有明显更快：要么拷贝和计算的时间相差太大（省下的只是较短的那一项），要么主机内存不是锁页内存，拷贝无法异步进行。{{end}}
:::
::: en
On a GPU the timeline should look like this: serially, copies and compute alternate on one line; with two streams, the bar of chunk i+1's copy lies under the bar of chunk i's compute. How much faster two streams are depends on which is longer: when copy and compute take about as long, up to nearly twice as fast, and the more they differ the less is saved (the saving is the shorter of the two). In {{recorded @run}}: {{recorded serial_ms %.2f}} ms serially, {{recorded two_stream_ms %.2f}} ms on two streams, a ratio of {{recorded overlap_speedup %.2f}}, with copy and compute running at once for {{recorded overlapped_ms %.2f}} ms in all. {{if recorded device is cpu and recorded overlap_speedup about 1 within 15%}}The two are within 15% of each other, as expected: on a CPU a "copy" is a `memcpy` and two streams are two function calls one after the other; no hardware works at the same time, and the timeline shows no overlap.{{elif recorded device is cpu}}The two differ by more than 15%, and the streams are not the cause: on a CPU both schedules do the same work one piece after another, and the difference comes from other programs running on this machine at the same time (on a busy machine such timings are noise). Overlap shows only on a GPU, where the copy engine and the SMs are separate, so the next chunk's copy can run while this chunk is computed.{{elif recorded overlap_speedup > 1.1}}Two streams are indeed faster: the copy engine moves the next chunk while the SMs compute this one.{{else}}This time two streams are not clearly faster: either copy and compute differ too much in length (the saving is only the shorter of the two), or the host memory is not pinned and the copies cannot run asynchronously.{{end}}
:::
*/

/*md
::: zh
## 少了一次等待：竞争，以及抓住它的检查器

把流水线里的 `wait_event` 去掉，程序照样能跑，大多数时候结果也对：只要拷贝恰好比计算先做完。可一旦 compute 流跑在前面，它就会读到还没拷完的数据，结果时对时错。这种错误很难靠测试发现，在 CPU 上更是永远不会出现，因为 CPU 上没有什么是并发的。

所以运行时带了一个**流顺序检查器**（`common/include/sanitizer.h`，思路和 PyTorch 的 CUDA sanitizer `TORCH_CUDA_SANITIZER=1` 一样）。它不看实际执行的先后，而在主机上按 GPU 的规则记账：

- 每个流数着自己发起了多少个算子，并记着它对别的流“知道”到哪一个（一个**向量时钟**）；
- 记录事件时，事件抄下流此刻知道的一切；`wait_event`、`wait_stream` 把它并进等待的流；主机等待（`synchronize`、阻塞的拷贝）把它并进主机，之后发起的一切都知道它；
- 每个张量的存储记着最后一次写（哪个流、第几个算子、哪个算子）和之后的读。

一次读，如果最后那次写是别的流做的、而读的这个流并不“知道”它，就是竞争；一次写，和之前没排好顺序的读或写也是竞争。张量的**分配**也算一次写，写在它被分配给的那个流上（那块内存上一个主人的核函数、测试用的毒化填充都可能还在那个流上跑），这正是 `alloc.h` 的第一条规则；释放时，别的流用过它、而所属的流不知道、又没有 `record_stream` 的，按第二条规则报告。

检查器有三种模式，和 sync debug 模式一样：0 关（默认，每个钩子只多一次原子读），1 warn（报告后照常执行），2 error（运算在发起之前失败，返回 `CT_ERR_RACE`）。环境变量 `CT_STREAM_SANITIZER=1` 或 `2` 也能打开它。因为它只看运行时自己的记账，同一份代码在 CPU 上运行，报告和 GPU 上完全相同。它看得见调度器里的运算（逐元素、归约、矩阵乘、填充、随机数、设备间拷贝、`ct_item` 等主机读取）；`nn`、卷积和优化器的核函数表还没有标注，那里的访问它看不见：会漏报，但不会误报。

下面用两块数据跑三次流水线，检查器开在 error 模式：去掉等待，计算的第一个算子就失败，报告指名张量、两个流和写它的算子；加上等待，一声不响；等待加上、但去掉 `record_stream`，释放那一刻报告（释放不会失败，报告打印在 stderr 上）。
:::
::: en
## A missing wait: the race, and the checker that catches it

Take the `wait_event` out of the pipeline and the program still runs, and most of the time its results are right: whenever the copy happens to finish before the compute starts. But when the compute stream gets ahead, it reads a chunk whose copy has not finished, and the results are right one run and wrong the next. Tests rarely find such a bug, and on the CPU it never shows at all, since nothing on the CPU runs concurrently.

So the runtime has a **stream-ordering checker** (`common/include/sanitizer.h`, the same idea as PyTorch's CUDA sanitizer, `TORCH_CUDA_SANITIZER=1`). It does not look at what actually ran first; it keeps accounts on the host by a GPU's rules:

- each stream counts the ops issued on it and remembers how far into every other stream it "knows" (a **vector clock**);
- recording an event copies into it everything the stream knows at that moment; `wait_event` and `wait_stream` merge it into the waiting stream; a host wait (a synchronize, a blocking copy) merges it into the host, and everything issued afterwards knows it;
- each tensor's storage remembers its last write (which stream, which count, which op) and the reads since.

A read is a race when the last write was made by another stream that the reading stream does not "know" up to that write; a write races with an unordered earlier read or write. A tensor's **allocation** counts as a write on the stream it was allocated for (the previous owner's kernels, or the tests' poison fill, may still be running there on that memory): `alloc.h`'s first rule. When it is freed, a use by another stream that the owning stream does not know of, without `record_stream`, is reported under the second rule.

The checker has three modes, like the sync debug mode: 0 off (the default; each hook then costs one atomic read), 1 warn (report and carry on), 2 error (the op fails before it is issued, with `CT_ERR_RACE`). `CT_STREAM_SANITIZER=1` or `2` in the environment turns it on too. Since it only looks at the runtime's own accounts, the same code run on the CPU reports exactly what it reports on a GPU. It sees the dispatcher's ops (elementwise, reductions, matmul, fills, random numbers, copies between devices, host reads such as `ct_item`); the `nn`, convolution and optimizer kernel tables are not annotated yet, and their accesses go unseen: a race there can be missed, but none is invented.

Below, the pipeline runs on two chunks three times with the checker in error mode: without the wait, the first op of the compute fails, and the report names the tensor, both streams and the op that wrote it; with the wait, silence; with the wait but without `record_stream`, a report when the chunk is freed (a free cannot fail; that report is printed on stderr).
:::
*/
/*md
::: zh
检查器判断“有没有先后”的全部逻辑就是下面这几行：一次访问排在之前那次访问之后，当且仅当两者在同一个流上，或者访问的流对那个流“知道”的计数不小于那次访问的计数。
:::
::: en
All the checker's judgement of "ordered or not" is in these lines: an access comes after an earlier one exactly when both are on the same stream, or when the accessing stream knows the other stream up to at least that access's count.
:::
*/
/*md source common/sanitizer/sanitizer.c ordered*/

static void show_race(ct_device dev, const settings *s, ct_metrics *m) {
  ct_cli_section("race");
  settings small = *s;
  small.chunks = 2;
  workload w;
  workload_make(&w, dev, &small);
  marks k;
  marks_make(&k, dev, w.n);
  timeline tl;
  int mode = ct_sanitizer_mode();
  ok(ct_sanitizer_set_mode(CT_SANITIZER_ERROR));
  uint64_t r0 = ct_sanitizer_reports();
  int rc = run_pipeline(&w, w.n, (schedule){.two_streams = true, .wait = false, .record = true}, &k, &tl);
  printf("without wait_event: %s\n", rc == CT_ERR_RACE ? "refused" : rc == CT_OK ? "ran (no race seen!)" : "failed");
  if (rc == CT_ERR_RACE) printf("  %s\n", ct_last_error());
  uint64_t r1 = ct_sanitizer_reports();
  rc = run_pipeline(&w, w.n, (schedule){.two_streams = true, .wait = true, .record = true}, &k, &tl);
  uint64_t r2 = ct_sanitizer_reports();
  printf("with wait_event and record_stream: %s, %d report(s)\n", rc == CT_OK ? "ran" : "failed", (int)(r2 - r1));
  rc = run_pipeline(&w, w.n, (schedule){.two_streams = true, .wait = true, .record = false}, &k, &tl);
  uint64_t r3 = ct_sanitizer_reports();
  printf("without record_stream: %s, %d report(s) at the frees, the last:\n  %s\n", rc == CT_OK ? "ran" : "failed",
         (int)(r3 - r2), r3 > r2 ? ct_sanitizer_last_report() : "(none)");
  ok(ct_sanitizer_set_mode(mode));
  ct_metrics_num(m, "race_caught", r1 - r0 == 1);
  ct_metrics_num(m, "race_silent_with_wait", r2 == r1);
  ct_metrics_num(m, "free_reports_without_record", (double)(r3 - r2));
  marks_free(&k, w.n);
  workload_free(&w);
}
/*md output race*/
/*md twin race*/

/*md
::: zh
## `record_stream`：释放另一个流用过的内存

缓存分配器按流分配内存（第 3 章）：一块内存在哪个流上分配，释放后就只给这个流上的下一次请求用。这样做不用任何同步就是安全的，因为同一个流上，后来的工作一定在先前的工作之后。问题出在另一个流也用过这块内存的时候：张量 `d` 在 copy 流上分配，在 compute 流上被读；主机释放 `d` 时 compute 流上的计算可能还没做完，而分配器马上就把这块内存交给 copy 流上的下一次分配，下一次拷贝就写进了计算正在读的内存。

`ct_record_stream(d, compute)`（`d.record_stream(s)`）告诉分配器 `d` 也在 compute 流上用过：释放时，分配器在 compute 流上记录一个事件，等它完成之后才重用这块内存，主机不必等待。另一种办法是让 copy 流在释放前等 compute 流（`wait_stream`），但那样 copy 流就不能再跑在前面了。

下面的演示：在 copy 流上分配一块内存、交给 compute 流做一段较长的计算，然后释放，紧接着在 copy 流上再分配同样大小的一块，看拿到的是不是同一块。不调用 `record_stream` 时，拿到的一定是同一块，哪怕计算还在读它；调用之后，在 GPU 上计算还没做完时，分配器会另给一块。在 CPU 上两次都是同一块，而且这是安全的：compute 流上的“计算”在发起时就做完了（下面打印的“compute done by then”说的就是这一点：它是在新的一块分配之后问的）。用 `CT_STREAM_SANITIZER=1 ./ch12` 运行时，检查器会在第一种情况的释放处报告，不管设备是什么。
:::
::: en
## `record_stream`: freeing memory another stream used

The caching allocator hands out memory per stream (chapter 3): a block allocated on a stream goes, once freed, only to that stream's next requests. That is safe without any synchronization, because on one stream later work always comes after earlier work. The trouble starts when another stream used the block too: tensor `d` is allocated on the copy stream and read on the compute stream; when the host frees `d`, the compute may not have finished, yet the allocator at once gives the block to the copy stream's next allocation, and the next copy writes into memory the compute is still reading.

`ct_record_stream(d, compute)` (`d.record_stream(s)`) tells the allocator that `d` was used on the compute stream too: at the free, the allocator records an event on the compute stream and reuses the block only after that event completes, without the host waiting. The other way is to make the copy stream wait for the compute stream before the free (`wait_stream`), but then the copy stream can no longer run ahead.

The demonstration: allocate a block on the copy stream, give it to the compute stream for a longer computation, free it, and at once allocate a block of the same size on the copy stream, to see whether it is the same block. Without `record_stream` it always is, even while the compute still reads it; with it, on a GPU whose compute has not finished, the allocator hands out another block. On the CPU both are the same block, and that is safe: the compute stream's "computation" was done when it was issued (what "compute done by then", asked after the new allocation, says below). Run as `CT_STREAM_SANITIZER=1 ./ch12`, the checker reports the first case's free, whatever the device.
:::
*/
static void show_record_stream(ct_device dev, const settings *s, ct_metrics *m) {
  ct_cli_section("record_stream");
  ct_stream *def = ct_current_stream(dev), *copy = ct_stream_create(dev, 0), *compute = ct_stream_create(dev, 0);
  if (!copy || !compute) ct_cli_die(g_cli);
  ok(ct_sanitizer_name_stream(copy, "copy"));
  ok(ct_sanitizer_name_stream(compute, "compute"));
  long n = dev.type == CT_CUDA && s->width * 4 < 2048 ? 2048 : s->width * 4; // ~ms of GPU work
  ct_tensor *wt = must(ct_ones(CT_SHAPE(n, n), CT_F32, dev));
  ct_event *busy = ct_event_create(dev, false);
  if (!busy) ct_cli_die(g_cli);
  for (int with = 0; with < 2; ++with) {
    ok(ct_stream_wait_stream(copy, def));
    ok(ct_set_stream(copy));
    ct_tensor *d = must(ct_ones(CT_SHAPE(n, n), CT_F32, dev)); // allocated and written on copy
    ok(ct_sanitizer_name_tensor(d, "d"));
    void *first = ct_data_ptr(d);
    ok(ct_stream_wait_stream(compute, copy));
    ok(ct_set_stream(compute));
    ct_tensor *y = must(ct_retain(d));
    for (int r = 0; r < 4; ++r) { // a longer computation reading d
      ct_tensor *z = must(ct_matmul(y, wt));
      ct_free(y);
      y = z;
    }
    ok(ct_event_record(busy, compute));
    if (with) ok(ct_record_stream(d, compute));
    ok(ct_set_stream(copy));
    ct_free(d); // host drops d; its block goes back to copy's pool
    ct_tensor *next = must(ct_empty(CT_SHAPE(n, n), CT_F32, dev));
    bool done = ct_event_query(busy); // asked after the allocation: "no" means it was still reading
    bool same = ct_data_ptr(next) == first;
    printf("%-24s next block on copy is the same: %-3s (compute done by then: %s)\n",
           with ? "with record_stream:" : "without record_stream:", same ? "yes" : "no", done ? "yes" : "no");
    ct_metrics_num(m, with ? "reuse_with_record" : "reuse_without_record", same);
    ct_metrics_num(m, with ? "compute_done_with_record" : "compute_done_without_record", done);
    ok(ct_set_stream(def));
    ok(ct_stream_wait_stream(def, compute));
    ok(ct_stream_wait_stream(def, copy));
    ct_free(y);
    ct_free(next);
  }
  ok(ct_stream_synchronize(def));
  ct_event_free(busy);
  ct_free(wt);
  ct_stream_free(copy);
  ct_stream_free(compute);
}
/*md output record_stream*/

/*md
::: zh
## 主机同步点和 sync debug 模式

有些调用会让主机停下来等 GPU：它要的是主机上的值或字节，而那些值要等流上之前的工作做完才有。`loss.item()` 是最常见的一个（种子教程的训练循环每一步都 `return loss.item()`），打印张量、`.cpu()`、拷进可分页内存（`.numpy()`，`x.to("cpu")`）都是。每一次这样的等待，都让 GPU 的队列在那一刻排空：主机等 GPU 做完，GPU 又等主机发下一批工作。训练循环里每步一次 `item()`，就是每步一次排空。

PyTorch 的 `torch.cuda.set_sync_debug_mode` 帮你找出它们：`"default"`/0 什么都不做；`"warn"`/1 在每个同步的调用上警告（“called a synchronizing CUDA operation”）；`"error"`/2 让它直接失败。运行时的 `ct_set_sync_debug_mode` 一样，区别是警告和报错里写出调用的名字，而且 error 模式下调用在**做任何事之前**失败（`CT_ERR_SYNC`），运行时照常可用。同步点只在一处检查（`common/core/sync_point.h`），清单写在 `sync_debug.h` 里：`ct_item`、`ct_copy_to_host`、`ct_from_host`、打印、`ct_any_nonfinite`、`ct_stream_synchronize`，以及 GPU 上所有阻塞的主机与设备之间的拷贝。和 PyTorch 一样，`ct_event_synchronize`、`ct_cuda_synchronize` 这类明写出来的等待不报告。

CPU 上同样报告：CPU 的工作发起时就做完了，没有什么要等，但同一个程序换到 GPU 上会在哪里等，CPU 上的运行就在哪里报告。唯一的差别是本来就该有的：张量已经在 CPU 上时，`ct_to(x, cpu)` 什么都不拷，所以也不报告。

下面把一串调用在 warn 模式下各跑一次，用钩子（`ct_set_sync_debug_hook`）收下报告，和每个调用应有的结果对照；然后在 error 模式下调用 `ct_item`，再回到 default 模式重试；最后量一量每步一次 `item()` 的代价（两个循环交替跑几遍，各取中位数）。
:::
::: en
## Host sync points and the sync debug mode

Some calls make the host stop and wait for the GPU: they ask for values or bytes on the host, and those values exist only once the stream's earlier work is done. `loss.item()` is the most common (a seed's training loop does `return loss.item()` every step); printing a tensor, `.cpu()` and copies into pageable memory (`.numpy()`, `x.to("cpu")`) are others. Each such wait drains the GPU's queue at that moment: the host waits for the GPU to finish, then the GPU waits for the host to issue more work. One `item()` per training step is one drain per step.

PyTorch's `torch.cuda.set_sync_debug_mode` finds them: `"default"`/0 does nothing; `"warn"`/1 warns at every synchronizing call ("called a synchronizing CUDA operation"); `"error"`/2 makes it fail. The runtime's `ct_set_sync_debug_mode` is the same, except that its warnings and errors name the call, and that in error mode the call fails **before it has done anything** (`CT_ERR_SYNC`), leaving the runtime usable. Sync points are checked in one place (`common/core/sync_point.h`) and listed in `sync_debug.h`: `ct_item`, `ct_copy_to_host`, `ct_from_host`, printing, `ct_any_nonfinite`, `ct_stream_synchronize`, and on a GPU every blocking copy between host and device. As in PyTorch, waits written out on purpose, such as `ct_event_synchronize` and `ct_cuda_synchronize`, are not reported.

The CPU reports too: CPU work is done when issued and there is nothing to wait for, but a CPU run reports the sync points the same program would hit on a GPU. The one difference is inherent: `ct_to(x, cpu)` of a tensor already on the CPU copies nothing, so it reports nothing.

Below, a list of calls runs once each in warn mode, with a hook (`ct_set_sync_debug_hook`) collecting the reports, checked against what each call should do; then `ct_item` is called in error mode and retried in default mode; last, the cost of one `item()` per step is measured (the two loops take turns over several rounds, each keeping its median).
:::
*/
/*md
::: zh
每个同步点进门时只调用一个函数 `cti_sync_begin`，它把这个同步点交给当前挂上的观察者（`common/core/observe.h`）；模式不是 default 时，sync debug 模式就挂在上面，它的检查如下（`common/core/sync_debug.c`）。嵌套的同步点只报告最外层那个调用：`ct_item` 内部的拷贝不再单独报告。
:::
::: en
Every sync point makes one call on its way in, `cti_sync_begin`, which hands it to the observers attached at the time (`common/core/observe.h`); while the mode is not the default, the sync debug mode is one of them, and this is its check (`common/core/sync_debug.c`). Nested sync points report only the outermost call: the copy inside `ct_item` is not reported again.
:::
*/
/*md source common/core/sync_debug.c sync_begin*/

typedef struct probe_env {
  ct_device dev;
  ct_tensor *x, *loss;
  ct_stream *side;
  ct_event *e;
} probe_env;

/*md hide*/
static int p_item(probe_env *p) {
  double v;
  return ct_item(p->loss, &v);
}
static int p_print(probe_env *p) {
  FILE *f = fopen("/dev/null", "w");
  int rc = f ? ct_print(f, p->loss) : CT_ERR_IO;
  if (f) fclose(f);
  return rc;
}
static int p_copy_to_host(probe_env *p) {
  float buf[16];
  return ct_copy_to_host(p->x, buf, sizeof buf);
}
static int p_to_cpu(probe_env *p) {
  ct_tensor *c = ct_to(p->x, ct_device_cpu(), CT_F32, false);
  int rc = c ? CT_OK : (int)ct_last_status();
  ct_free(c);
  return rc;
}
static int p_from_host(probe_env *p) {
  const float v[16] = {0};
  ct_tensor *t = ct_from_host(v, CT_SHAPE(16), CT_F32, p->dev);
  int rc = t ? CT_OK : (int)ct_last_status();
  ct_free(t);
  return rc;
}
static int p_add(probe_env *p) {
  ct_tensor *t = ct_add(p->x, p->x);
  int rc = t ? CT_OK : (int)ct_last_status();
  ct_free(t);
  return rc;
}
static int p_sum(probe_env *p) {
  ct_tensor *t = ct_sum(p->x);
  int rc = t ? CT_OK : (int)ct_last_status();
  ct_free(t);
  return rc;
}
static int p_any_nonfinite(probe_env *p) {
  bool any;
  return ct_any_nonfinite(p->x, &any);
}
static int p_event(probe_env *p) {
  int rc = ct_event_record(p->e, p->side);
  return rc ? rc : ct_stream_wait_event(ct_current_stream(p->dev), p->e);
}
static int p_stream_sync(probe_env *p) { return ct_stream_synchronize(p->side); }
static int p_event_sync(probe_env *p) {
  int rc = ct_event_record(p->e, p->side);
  return rc ? rc : ct_event_synchronize(p->e);
}
/*md show*/

typedef struct probe {
  const char *call;
  int (*run)(probe_env *);
  int syncs; // 1 a sync point, 0 not, -1 only on a GPU (a CPU tensor is already on the host)
} probe;

static const probe probes[] = {
    {"ct_item(loss)", p_item, 1},
    {"ct_print(stdout, loss)", p_print, 1},
    {"ct_copy_to_host(x, buf)", p_copy_to_host, 1},
    {"ct_to(x, cpu)", p_to_cpu, -1},
    {"ct_from_host(buf, dev)", p_from_host, 1},
    {"ct_any_nonfinite(x)", p_any_nonfinite, 1},
    {"ct_add(x, x)", p_add, 0},
    {"ct_sum(x)", p_sum, 0},
    {"ct_event_record + wait_event", p_event, 0},
    {"ct_stream_synchronize(s)", p_stream_sync, 1},
    {"ct_event_synchronize(e)", p_event_sync, 0},
};

typedef struct reports {
  int n;
  char first[48];
} reports;

static void collect(const char *op, ct_device d, int mode, void *ctx) {
  (void)d, (void)mode;
  reports *r = ctx;
  if (r->n++ == 0) snprintf(r->first, sizeof r->first, "%s", op);
}

// One timed loop of steps steps of x = 0.5 x + 1 (two small ops), with an
// item() after every step (every) or only after the last; milliseconds.
static double item_loop_ms(ct_device dev, int steps, bool every) {
  ct_tensor *x = must(ct_ones(CT_SHAPE(1024), CT_F32, dev));
  ok(ct_stream_synchronize(ct_current_stream(dev)));
  double t0 = now_ms();
  for (int i = 0; i < steps; ++i) {
    ok(ct_binary_scalar_out(CT_OP_MUL, x, x, 0.5));
    ok(ct_binary_scalar_out(CT_OP_ADD, x, x, 1.0));
    if (every || i == steps - 1) {
      ct_tensor *s0 = must(ct_narrow(x, 0, 0, 1));
      item(s0); // the host waits for the stream
      ct_free(s0);
    }
  }
  double ms = now_ms() - t0;
  ct_free(x);
  return ms;
}

static void show_sync_points(ct_device dev, const settings *s, ct_metrics *m) {
  ct_cli_section("sync points");
  probe_env p = {.dev = dev};
  p.x = must(ct_ones(CT_SHAPE(16), CT_F32, dev));
  p.loss = must(ct_sum(p.x));
  p.side = ct_stream_create(dev, 0);
  p.e = ct_event_create(dev, false);
  if (!p.side || !p.e) ct_cli_die(g_cli);
  reports r;
  ct_set_sync_debug_hook(collect, &r);
  ok(ct_set_sync_debug_mode_str("warn"));
  int n = (int)(sizeof probes / sizeof probes[0]), as_expected = 0;
  char names[512] = "";
  printf("%-30s %-12s %s\n", "call", "sync point?", "reported in \"warn\" mode");
  for (int i = 0; i < n; ++i) {
    memset(&r, 0, sizeof r);
    ok(probes[i].run(&p));
    bool want = probes[i].syncs == 1 || (probes[i].syncs == -1 && dev.type == CT_CUDA);
    bool got = r.n > 0;
    as_expected += want == got && r.n <= 1;
    if (got) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? "," : "", r.first);
    printf("%-30s %-12s %s\n", probes[i].call, probes[i].syncs == 1 ? "yes" : probes[i].syncs ? "on a GPU" : "no",
           got ? r.first : "-");
  }
  printf("%d of %d calls as expected\n", as_expected, n);
  ct_set_sync_debug_hook(NULL, NULL);
  // Error mode: ct_item fails before it reads anything; default mode again: it works.
  ok(ct_set_sync_debug_mode(CT_SYNC_DEBUG_ERROR));
  double v = -1;
  int rc = ct_item(p.loss, &v);
  printf("\"error\" mode: ct_item -> %s: %s\n", ct_status_name((ct_status)rc), rc ? ct_last_error() : "");
  ok(ct_set_sync_debug_mode(CT_SYNC_DEBUG_DEFAULT));
  ok(ct_item(p.loss, &v));
  printf("\"default\" mode again: ct_item(loss) = %g\n", v);
  // The default warning, on stderr (a hook replaces it).
  ok(ct_set_sync_debug_mode(CT_SYNC_DEBUG_WARN));
  ok(ct_item(p.loss, &v));
  ok(ct_set_sync_debug_mode(CT_SYNC_DEBUG_DEFAULT));
  ct_metrics_num(m, "sync_probes", n);
  ct_metrics_num(m, "sync_as_expected", as_expected);
  ct_metrics_str(m, "sync_reported", names);
  ct_metrics_str(m, "sync_error_status", ct_status_name((ct_status)rc));
  ct_metrics_num(m, "sync_item_after_error", v);

  // The cost of item() every step: the two loops in SYNC_ROUNDS interleaved rounds after a warm-up one.
  int steps = (int)s->chunks * 125;
  double ms[2][SYNC_ROUNDS];
  for (int round = -1; round < SYNC_ROUNDS; ++round)
    for (int every = 0; every < 2; ++every) {
      double t = item_loop_ms(dev, steps, every == 1);
      if (round >= 0) ms[every][round] = t;
    }
  double nosync = ct_cli_median(ms[0], SYNC_ROUNDS), sync = ct_cli_median(ms[1], SYNC_ROUNDS);
  printf("%d steps of two small ops, median of %d rounds: item() once at the end %.3f ms, item() every step %.3f ms "
         "(%.1f us per sync)\n",
         steps, SYNC_ROUNDS, nosync, sync, 1e3 * (sync - nosync) / steps);
  ct_metrics_num(m, "sync_steps", steps);
  ct_metrics_num(m, "nosync_loop_ms", nosync);
  ct_metrics_num(m, "sync_loop_ms", sync);
  ct_metrics_num(m, "sync_cost_us", 1e3 * (sync - nosync) / steps); // what an item() adds to a step
  ct_free(p.x), ct_free(p.loss);
  ct_event_free(p.e);
  ct_stream_free(p.side);
}
/*md output sync points*/
/*md twin sync_points*/

/*md
::: zh
在 GPU 上，每步一次 `item()` 的循环比只在最后 `item()` 一次的循环慢得多：小运算本身只要几微秒，等待却要把流排空再重新填满。训练循环里的办法是把损失留在设备上累加，每隔若干步（或每轮结束时）才 `item()` 一次。{{recorded @run}}中：每步 `item()` 的循环 {{recorded sync_loop_ms %.2f}} 毫秒，只在最后 `item()` 一次的 {{recorded nosync_loop_ms %.2f}} 毫秒。{{if recorded device is cpu and recorded sync_loop_ms < recorded nosync_loop_ms * 1.5}}在 CPU 上没有要排空的流，并没有什么可等的：每步 `item()` 的循环多出的只是这个调用本身（取一个视图、读一个数、释放），每步 {{recorded sync_cost_us %.3f}} 微秒，不到两个小运算的一半。{{elif recorded device is cpu}}在 CPU 上并没有什么可等的，每步 `item()` 的循环本应只多出这个调用本身（取一个视图、读一个数、释放）；这次每步多出 {{recorded sync_cost_us %.3f}} 微秒，超过两个小运算的一半，来自机器上的其他负载，不是同步的代价。{{elif recorded sync_loop_ms > recorded nosync_loop_ms * 1.5}}每步同步的循环明显更慢，正是上面说的等待。{{else}}这次两者相差不大：每步的运算已经够长，等待的代价被摊薄了（试试更小的张量或更多的步数）。{{end}}
:::
::: en
On a GPU the loop with an `item()` every step is much slower than the one with a single `item()` at the end: the small ops themselves take microseconds, but each wait drains the stream and then refills it. In a training loop the cure is to accumulate the loss on the device and call `item()` only every so many steps (or once per epoch). In {{recorded @run}}: {{recorded sync_loop_ms %.2f}} ms for the loop with an `item()` every step, {{recorded nosync_loop_ms %.2f}} ms for the one with a single `item()`. {{if recorded device is cpu and recorded sync_loop_ms < recorded nosync_loop_ms * 1.5}}On a CPU there is no stream to drain and nothing to wait for: the loop with an `item()` every step pays only for the call itself (a view, one read, a free), {{recorded sync_cost_us %.3f}} µs per step, less than half of what the two small ops take.{{elif recorded device is cpu}}On a CPU there is nothing to wait for, and the loop with an `item()` every step should pay only for the call itself (a view, one read, a free); this time it paid {{recorded sync_cost_us %.3f}} µs per step, more than half of what the two small ops take, which comes from other load on the machine, not from the syncs.{{elif recorded sync_loop_ms > recorded nosync_loop_ms * 1.5}}The loop that syncs every step is clearly slower: that is the waiting described above.{{else}}This time the two are close: each step's work is long enough to hide the wait (try smaller tensors or more steps).{{end}}
:::
*/

/*md
::: zh
## main

`main` 选设备，依次演示本章各节。`--chunks`、`--rows`、`--width`、`--layers` 决定流水线的大小：在 GPU 上默认每块 64 MiB（8192×2048），拷贝和两层 2048×2048 的矩阵乘用时相近，最容易看出重叠；在 CPU 上默认小得多。`--quick` 用几块很小的数据，几秒钟跑完。
:::
::: en
## main

`main` picks the device and shows the chapter's parts in turn. `--chunks`, `--rows`, `--width` and `--layers` size the pipeline: on a GPU each chunk defaults to 64 MiB (8192×2048), whose copy takes about as long as two 2048×2048 matrix products, where overlap shows best; on the CPU the defaults are much smaller. `--quick` uses a few tiny chunks and takes seconds.
:::
*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch12", .summary = "Chapter 12: streams and events, overlap, races and sync points."};
  settings s = {0};
  ct_cli_opt opts[] = {
      {"chunks", CT_OPT_INT, &s.chunks, "pipeline chunks (0: 8; --quick: 4)"},
      {"rows", CT_OPT_INT, &s.rows, "rows of each chunk (0: 8192 on a GPU, 1024 on the CPU; --quick: 128)"},
      {"width", CT_OPT_INT, &s.width, "columns of each chunk and size of the square layers (0: 2048 GPU, 256 CPU; --quick: 64)"},
      {"layers", CT_OPT_INT, &s.layers, "matrix products per chunk (0: 2)"},
      {"reps", CT_OPT_INT, &s.reps, "timed runs of each schedule, interleaved, the median kept (0: 7; --quick: 1)"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  g_cli = &cli;
  /*md hide*/
  if (s.chunks < 0 || s.chunks > MAX_CHUNKS || s.chunks == 1 || s.rows < 0 || s.width < 0 || s.layers < 0 ||
      s.layers > MAX_LAYERS || s.reps < 0) {
    fprintf(stderr, "ch12: --chunks must be 2..%d, --layers 1..%d, --rows, --width and --reps >= 1 (0: the default)\n"
                    "usage: ch12 [--help] [--device D] [--quick] [--chunks N] [--rows R] [--width W] [--layers L] [--reps N]\n",
            MAX_CHUNKS, MAX_LAYERS);
    return 2;
  }
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  /*md hide*/
  bool gpu = cli.device.type == CT_CUDA;
  if (!s.chunks) s.chunks = cli.quick ? 4 : 8;
  if (!s.rows) s.rows = cli.quick ? 128 : gpu ? 8192 : 1024;
  if (!s.width) s.width = cli.quick ? 64 : gpu ? 2048 : 256;
  if (!s.layers) s.layers = 2;
  if (!s.reps) s.reps = cli.quick ? 1 : 7;
  // before anything is allocated: the chunks three times (host, device, result), the square layers
  ct_cli_need_memory(&cli, "--chunks x --rows x --width floats (three copies)", 4,
                     (const int64_t[]){s.chunks, s.rows, s.width, 3}, sizeof(float));
  ct_cli_need_memory(&cli, "--layers x --width x --width floats", 3, (const int64_t[]){s.layers, s.width, s.width},
                     sizeof(float));
  ct_cli_need_memory(&cli, "--reps x 2 times (the schedules' runs)", 2, (const int64_t[]){s.reps, 2}, sizeof(double));
  /*md show*/
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded
  show_streams(cli.device, m);
  show_ordering(cli.device, m);
  show_overlap(cli.device, &s, m);
  show_race(cli.device, &s, m);
  show_record_stream(cli.device, &s, m);
  show_sync_points(cli.device, &s, m);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 练习

1. 把流水线里 `ct_stream_wait_event` 那一行去掉，不开检查器，在 GPU 上多跑几次，比较各块的和与串行的结果。错的结果每次都一样吗？再用 `CT_STREAM_SANITIZER=1 ./ch12` 跑一次，读它的报告。
2. 改变 `--layers`（1 到 4），让计算比拷贝短、相当、更长，记下双流的加速比。加速比最大在什么时候？和“省下的是较短的那一项”对得上吗？
3. 把 compute 流的优先级设成 −1（`ct_stream_create(dev, -1)`），时间线有变化吗？这条流水线里只有 compute 流在跑核函数，优先级还能在谁和谁之间做选择？
4. 在 `show_record_stream` 里，把 `ct_record_stream` 换成释放前的 `ct_stream_wait_stream(copy, compute)`。下一块内存还是同一块吗？这样做的代价是什么？
5. 在第 6 章的训练循环里打开 `ct_set_sync_debug_mode(1)`，数一数每一步有几个同步点，各是哪个调用。哪些可以挪到每轮结束时再做？
:::
::: en
## Exercises

1. Remove the `ct_stream_wait_event` line from the pipeline and, with the checker off, run it several times on a GPU, comparing each chunk's sum with the serial result. Is the wrong result the same every time? Then run it once with `CT_STREAM_SANITIZER=1 ./ch12` and read the report.
2. Vary `--layers` (1 to 4) so that the compute is shorter than, about equal to and longer than the copy, and note the two-stream speed-up. When is it largest? Does that agree with "the saving is the shorter of the two"?
3. Give the compute stream priority −1 (`ct_stream_create(dev, -1)`). Does the timeline change? In this pipeline only the compute stream runs kernels: between what is there left for a priority to choose?
4. In `show_record_stream`, replace `ct_record_stream` with `ct_stream_wait_stream(copy, compute)` before the free. Is the next block still the same one? What does this cost?
5. Turn on `ct_set_sync_debug_mode(1)` in chapter 6's training loop and count the sync points per step, and which calls they are. Which of them could wait until the end of the epoch?
:::
*/
