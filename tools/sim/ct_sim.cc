// SPDX-License-Identifier: MIT
//
// ct_sim.cc: the SIMT emulator's scheduler and its CUDA runtime subset.
//
// A launch runs the blocks of the grid one after another on the calling OS
// thread. Within a block every CUDA thread is a fiber (ucontext) with its own
// small stack; the scheduler resumes each runnable fiber in turn until it
// blocks: at __syncthreads() (block barrier), at a warp intrinsic (warp
// barrier), or at its end. When every live thread of a warp named in a warp
// intrinsic's mask has arrived, the values are exchanged and those lanes run
// on; when every live thread of the block waits at __syncthreads(), the
// barrier opens. Threads that returned count as arrived at a block barrier,
// as on Volta and later GPUs. Anything else that can never resume (a barrier
// in divergent code, a mask that names a lane that returned) is a deadlock on
// a GPU: it is reported with the kernel, block and threads, and the launch
// fails with cudaErrorLaunchFailure.
#include <memory> // before ct_sim.h, whose __noinline__ libstdc++ spells as an attribute

#include "ct_sim.h"
#include "ct_sim_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <map>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CT_SIM_ASAN 1
#endif

// The fiber switch. On x86-64 a few instructions that save the callee-saved
// registers on the old stack and pop them from the new one: glibc's
// swapcontext also saves the signal mask with a system call at every
// switch, which made the switches most of an emulated launch's time. Other
// machines keep ucontext.
#if defined(__x86_64__)
extern "C" void ct_sim_switch(void **save_sp, void *to_sp);
__asm__(".pushsection .text\n"
        ".globl ct_sim_switch\n"
        ".type ct_sim_switch,@function\n"
        "ct_sim_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size ct_sim_switch,.-ct_sim_switch\n"
        ".popsection\n");
#define CT_SIM_FAST_SWITCH 1
#endif

namespace ct_sim {

uint3 g_thread_idx, g_block_idx;
dim3 g_block_dim, g_grid_dim;

namespace {

enum State { RUN, AT_BAR, AT_WARP, DONE };

struct Fiber {
#ifdef CT_SIM_FAST_SWITCH
  void *sp = nullptr; // saved stack pointer while switched out
#else
  ucontext_t ctx;
#endif
  bool dirty = false; // abandoned mid-kernel (a deadlock): its stack keeps ASan's poison
  char *stack = nullptr;
  size_t stack_size = 0;
  uint3 tid{0, 0, 0};
  int linear = 0;
  State state = DONE;
  // a pending warp intrinsic
  int op = 0, arg = 0, width = 32;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int pred = 0; // __syncthreads_count/and/or
  void *fake_stack = nullptr;
};

#ifdef CT_SIM_FAST_SWITCH
void *g_sched_sp = nullptr;
#else
ucontext_t g_sched;
#endif
std::vector<Fiber> g_fibers;
Fiber *g_cur = nullptr;
int g_nthreads = 0;
Trampoline g_run = nullptr;
void *g_run_ctx = nullptr;
const char *g_kernel = nullptr;
bool g_in_kernel = false;
bool g_failed = false;
cudaError_t g_last_error = cudaSuccess;
std::map<std::string, long> g_launches;
long g_errors = 0;
const void *g_sched_stack_bottom = nullptr;
size_t g_sched_stack_size = 0;

size_t stack_bytes() {
  static size_t n = 0;
  if (!n) {
    const char *e = getenv("CT_SIM_STACK_KB");
    long kb = e ? atol(e) : 0;
#ifdef CT_SIM_ASAN
    if (kb <= 0) kb = 256;
#else
    if (kb <= 0) kb = 64;
#endif
    n = (size_t)kb * 1024;
  }
  return n;
}

void switch_to(Fiber *f) {
  g_cur = f;
  g_thread_idx = f->tid;
#ifdef CT_SIM_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_size);
#endif
#ifdef CT_SIM_FAST_SWITCH
  ct_sim_switch(&g_sched_sp, f->sp);
#else
  swapcontext(&g_sched, &f->ctx);
#endif
#ifdef CT_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  g_cur = nullptr;
}

// From a fiber back to the scheduler; returns when the scheduler resumes it.
void yield_to_scheduler(bool dying) {
  Fiber *f = g_cur;
#ifdef CT_SIM_ASAN
  __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake_stack, g_sched_stack_bottom,
                                 g_sched_stack_size);
#else
  (void)dying;
#endif
#ifdef CT_SIM_FAST_SWITCH
  ct_sim_switch(&f->sp, g_sched_sp);
#else
  swapcontext(&f->ctx, &g_sched);
#endif
#ifdef CT_SIM_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &g_sched_stack_bottom, &g_sched_stack_size);
#endif
}

void fiber_main() {
#ifdef CT_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_sched_stack_bottom, &g_sched_stack_size);
#endif
  g_run(g_run_ctx);
  g_cur->state = DONE;
  yield_to_scheduler(true);
  abort(); // a finished fiber is never resumed
}

void fmt3(char *buf, size_t n, uint3 v) { snprintf(buf, n, "(%u,%u,%u)", v.x, v.y, v.z); }

void report(const char *what) {
  char b[40], t[40];
  fmt3(b, sizeof b, g_block_idx);
  if (g_cur) fmt3(t, sizeof t, g_cur->tid);
  fprintf(stderr, "ct_sim: kernel %s, block %s%s%s: %s\n", g_kernel ? g_kernel : "?", b,
          g_cur ? ", thread " : "", g_cur ? t : "", what);
  ++g_errors;
}

bool resolve_warp(int w) {
  const int base = w * 32;
  const int lanes = g_nthreads - base < 32 ? g_nthreads - base : 32;
  for (int l = 0; l < lanes; ++l) {
    Fiber &f = g_fibers[base + l];
    if (f.state != AT_WARP) continue;
    const unsigned mask = f.mask;
    // every lane the mask names must have arrived with the same mask
    bool ready = true;
    for (int k = 0; k < lanes && ready; ++k) {
      if (!(mask >> k & 1u)) continue;
      Fiber &g = g_fibers[base + k];
      if (g.state == DONE) continue; // judged below
      if (g.state != AT_WARP || g.mask != mask) ready = false;
    }
    if (!ready) continue;
    unsigned have = 0; // lanes that take part
    for (int k = 0; k < lanes; ++k)
      if ((mask >> k & 1u) && g_fibers[base + k].state == AT_WARP) have |= 1u << k;
    if (have != mask) {
      char msg[200];
      snprintf(msg, sizeof msg,
               "warp %d: a *_sync intrinsic's mask 0x%08x names lanes 0x%08x that have returned or "
               "do not exist (undefined behaviour on a GPU)",
               w, mask, mask & ~have);
      g_cur = &f;
      report(msg);
      g_cur = nullptr;
    }
    for (int k = 0; k < lanes; ++k) {
      if (!(have >> k & 1u)) continue;
      Fiber &g = g_fibers[base + k];
      const int width = g.width > 0 && g.width <= 32 ? g.width : 32;
      const int seg = k / width * width;
      int src = k;
      switch (g.op) {
      case W_IDX: src = seg + (((g.arg % width) + width) % width); break;
      case W_UP: src = (k - seg) >= g.arg ? k - g.arg : k; break;
      case W_DOWN: src = (k - seg) + g.arg < width ? k + g.arg : k; break;
      case W_XOR: src = k ^ g.arg; if (src / width > k / width || src >= 32) src = k; break;
      default: break;
      }
      switch (g.op) {
      case W_BALLOT: case W_ANY: case W_ALL: {
        unsigned bits = 0;
        for (int j = 0; j < lanes; ++j)
          if ((have >> j & 1u) && g_fibers[base + j].value) bits |= 1u << j;
        g.result = g.op == W_BALLOT ? bits : g.op == W_ANY ? bits != 0 : bits == have;
        break;
      }
      case W_SYNC: g.result = 0; break;
      default:
        if (!(have >> src & 1u)) {
          char msg[160];
          snprintf(msg, sizeof msg, "warp %d lane %d: shuffle reads lane %d, which is not taking part", w,
                   k, src);
          report(msg);
          src = k;
        }
        g.result = g_fibers[base + src].value;
      }
    }
    for (int k = 0; k < lanes; ++k)
      if (have >> k & 1u) g_fibers[base + k].state = RUN;
    racecheck_warp_sync(w);
    return true;
  }
  return false;
}

void run_block() {
  racecheck_block_begin();
  for (int i = 0; i < g_nthreads; ++i) {
    Fiber &f = g_fibers[i];
    f.linear = i;
    f.tid = uint3{(unsigned)i % g_block_dim.x, (unsigned)i / g_block_dim.x % g_block_dim.y,
                  (unsigned)i / (g_block_dim.x * g_block_dim.y)};
    f.state = RUN;
#ifdef CT_SIM_ASAN
    // A thread that returned left its stack unpoisoned (every frame unpoisons
    // its redzones as it returns); one abandoned at a deadlock did not.
    if (f.dirty) __asan_unpoison_memory_region(f.stack, f.stack_size);
#endif
    f.dirty = false;
#ifdef CT_SIM_FAST_SWITCH
    // the first switch to the fiber pops 6 registers and the FP control words
    // (taken from the scheduler's) and returns into fiber_main, with the
    // stack aligned as at a function's entry
    uintptr_t top = ((uintptr_t)f.stack + f.stack_size) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                   // fiber_main's return address (it never returns)
    *--sp = (void *)&fiber_main;       // where ct_sim_switch returns to
    for (int r = 0; r < 6; ++r) *--sp = nullptr;
    uint32_t fpctl[2] = {0, 0};
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(fpctl[0]), "=m"(fpctl[1]));
    *--sp = nullptr;
    memcpy(sp, fpctl, sizeof fpctl);
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = f.stack_size;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
#endif
  }
  for (;;) {
    bool any_run = false;
    for (int i = 0; i < g_nthreads; ++i)
      if (g_fibers[i].state == RUN) { any_run = true; switch_to(&g_fibers[i]); }
    if (any_run) continue;
    bool progress = false;
    for (int w = 0; w * 32 < g_nthreads; ++w)
      while (resolve_warp(w)) progress = true;
    if (progress) continue;
    int done = 0, bar = 0, cnt = 0, all = 1, anyp = 0;
    for (int i = 0; i < g_nthreads; ++i) {
      const Fiber &f = g_fibers[i];
      if (f.state == DONE) ++done;
      else if (f.state == AT_BAR) { ++bar; cnt += f.pred != 0; all &= f.pred != 0; anyp |= f.pred != 0; }
    }
    if (done == g_nthreads) return;
    if (done + bar == g_nthreads) { // the barrier opens
      racecheck_barrier();
      for (int i = 0; i < g_nthreads; ++i) {
        Fiber &f = g_fibers[i];
        if (f.state == AT_BAR) {
          f.state = RUN;
          f.result = f.op == 0 ? (uint64_t)cnt : f.op == 1 ? (uint64_t)all : (uint64_t)anyp;
        }
      }
      continue;
    }
    // Nothing can move: describe who waits where, and give up on this launch.
    char msg[400];
    int off = snprintf(msg, sizeof msg, "deadlock: %d threads at __syncthreads(), %d returned, %d in a warp "
                       "intrinsic waiting for lanes that never arrive; first waiting:", bar, done,
                       g_nthreads - bar - done);
    for (int i = 0, shown = 0; i < g_nthreads && shown < 4 && off < 300; ++i)
      if (g_fibers[i].state == AT_WARP) {
        off += snprintf(msg + off, sizeof msg - off, " thread %d (mask 0x%08x)", i, g_fibers[i].mask);
        ++shown;
      }
    report(msg);
    g_failed = true;
    for (int i = 0; i < g_nthreads; ++i)
      if (g_fibers[i].state != DONE) g_fibers[i].dirty = true;
    return; // the fibers are abandoned; their stacks are reset by the next block
  }
}

} // namespace

// ---- what the kernels call -------------------------------------------------------------
void syncthreads(void) { (void)syncthreads_count(1, 0); }

int syncthreads_count(int pred, int how) {
  Fiber *f = g_cur;
  if (!f) { fprintf(stderr, "ct_sim: __syncthreads() outside a kernel\n"); abort(); }
  f->state = AT_BAR;
  f->pred = pred;
  f->op = how;
  yield_to_scheduler(false);
  return (int)f->result;
}

uint64_t warp_op(int op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber *f = g_cur;
  if (!f) { fprintf(stderr, "ct_sim: warp intrinsic outside a kernel\n"); abort(); }
  const int lane = f->linear % 32;
  if (!(mask >> lane & 1u)) {
    char msg[120];
    snprintf(msg, sizeof msg, "lane %d calls a *_sync intrinsic with mask 0x%08x that leaves it out", lane,
             mask);
    report(msg);
    mask |= 1u << lane;
  }
  f->state = AT_WARP;
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->arg = arg;
  f->width = width;
  yield_to_scheduler(false);
  return f->result;
}

// ---- stream capture --------------------------------------------------------------------------
namespace {
std::mutex g_capture_mu;
std::map<cudaStream_t, std::vector<std::function<void()>>> g_captures;
} // namespace
bool capturing(cudaStream_t stream) {
  std::lock_guard<std::mutex> l(g_capture_mu);
  return !g_captures.empty() && g_captures.count(stream);
}
void capture(cudaStream_t stream, std::function<void()> op) {
  std::lock_guard<std::mutex> l(g_capture_mu);
  g_captures[stream].push_back(std::move(op));
}
void capture_launch(cudaStream_t stream, const char *name, dim3 grid, dim3 block, size_t smem,
                    Trampoline run, void *ctx, void (*destroy)(void *ctx)) {
  // the arguments' copy lives as long as the last copy of the record (the graph's)
  std::shared_ptr<void> args(ctx, destroy);
  capture(stream, [=]() {
    // a replay runs on the stream the graph is launched on (one issue order)
    launch(name, grid, block, smem, nullptr, run, args.get());
  });
}
bool capture_begin(cudaStream_t stream) {
  std::lock_guard<std::mutex> l(g_capture_mu);
  return g_captures.emplace(stream, std::vector<std::function<void()>>()).second;
}
bool capture_end(cudaStream_t stream, std::vector<std::function<void()>> *ops) {
  std::lock_guard<std::mutex> l(g_capture_mu);
  auto it = g_captures.find(stream);
  if (it == g_captures.end()) return false;
  *ops = std::move(it->second);
  g_captures.erase(it);
  return true;
}

// One launch at a time: the scheduler's state is the process's (a program
// that launches from several OS threads has its launches run one by one).
static std::recursive_mutex g_launch_mu;

void launch(const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Trampoline run, void *ctx) {
  (void)stream;
  std::lock_guard<std::recursive_mutex> launch_lock(g_launch_mu);
  if (g_in_kernel) { fprintf(stderr, "ct_sim: %s launched from inside a kernel (dynamic parallelism is not emulated)\n", name); abort(); }
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 ||
      grid.y > 65535 || grid.z > 65535 || smem > 48 * 1024) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (smem > 0) { // no `extern __shared__` storage yet (no kernel in the tree asks for it)
    fprintf(stderr, "ct_sim: %s launched with %zu bytes of dynamic shared memory, which the SIMT "
            "emulator does not provide yet (tools/sim/README.md)\n", name, smem);
    g_last_error = cudaErrorNotSupported;
    return;
  }
  ++g_launches[name];
  g_nthreads = (int)threads;
  if ((int)g_fibers.size() < g_nthreads) {
    size_t old = g_fibers.size();
    g_fibers.resize(g_nthreads);
    for (size_t i = old; i < g_fibers.size(); ++i) {
      Fiber &f = g_fibers[i];
      f.stack_size = stack_bytes();
      void *p = mmap(nullptr, f.stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) { perror("ct_sim: mmap of a fiber stack"); abort(); }
      f.stack = (char *)p;
    }
  }
  g_run = run;
  g_run_ctx = ctx;
  g_kernel = name;
  g_in_kernel = true;
  g_failed = false;
  g_grid_dim = grid;
  g_block_dim = block;
  racecheck_launch(name);
  for (unsigned z = 0; z < grid.z && !g_failed; ++z)
    for (unsigned y = 0; y < grid.y && !g_failed; ++y)
      for (unsigned x = 0; x < grid.x && !g_failed; ++x) {
        g_block_idx = uint3{x, y, z};
        run_block();
      }
  racecheck_launch_end();
  g_in_kernel = false;
  g_kernel = nullptr;
  if (g_failed) g_last_error = cudaErrorLaunchFailure;
}

// ---- for the racecheck and the tests (ct_sim_internal.h) ---------------------------------
int current_thread(void) { return g_in_kernel && g_cur ? g_cur->linear : -1; }
const char *current_kernel(void) { return g_kernel; }
cudaError_t set_last_error(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}
void report_error(const char *what) { report(what); }
long error_count(void) { return g_errors; }
long launch_count(const char *name) {
  auto it = g_launches.find(name);
  return it == g_launches.end() ? 0 : it->second;
}
void for_each_launched(void (*fn)(const char *name, long count, void *ctx), void *ctx) {
  for (auto &kv : g_launches) fn(kv.first.c_str(), kv.second, ctx);
}

} // namespace ct_sim

// ASan calls this when it finds an error: say which CUDA thread was running.
extern "C" void __asan_on_error(void) {
  using namespace ct_sim;
  if (!g_in_kernel) return;
  char b[40], t[40] = "?";
  fmt3(b, sizeof b, g_block_idx);
  if (g_cur) fmt3(t, sizeof t, g_cur->tid);
  fprintf(stderr, "ct_sim: AddressSanitizer's report below is from kernel %s, block %s, thread %s (gridDim (%u,%u,%u), blockDim (%u,%u,%u))\n",
          g_kernel, b, t, g_grid_dim.x, g_grid_dim.y, g_grid_dim.z, g_block_dim.x, g_block_dim.y, g_block_dim.z);
}

// ---- the CUDA runtime subset ---------------------------------------------------------------
// Device memory is host memory (malloc, so that ASan watches its bounds); a
// copy of any kind is memcpy; every stream is the one issue order, so every
// asynchronous call is complete when it returns.
extern "C" {
static cudaError_t ct_sim_set(cudaError_t e) {
  if (e != cudaSuccess) ct_sim::g_last_error = e;
  return e;
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = ct_sim::g_last_error;
  ct_sim::g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return ct_sim::g_last_error; }
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInitializationError: return "cudaErrorInitializationError";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorNotSupported: return "cudaErrorNotSupported";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  default: return "cudaErrorUnknown";
  }
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorNotSupported: return "operation not supported (by the SIMT emulator)";
  case cudaErrorLaunchFailure: return "unspecified launch failure (the SIMT emulator reported why above)";
  default: return "unknown error";
  }
}
cudaError_t cudaGetDeviceCount(int *count) {
  if (!count) return ct_sim_set(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : ct_sim_set(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int *device) {
  if (!device) return ct_sim_set(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
  if (!p) return ct_sim_set(cudaErrorInvalidValue);
  *p = nullptr;
  if (!bytes) return cudaSuccess;
  // the emulated device's memory, as cudaMemGetInfo reports it (ct_sim_runtime.cc):
  // a larger request fails as it does on a GPU, before the host is asked
  if (bytes > ((size_t)8 << 30)) return ct_sim_set(cudaErrorMemoryAllocation);
  *p = malloc(bytes);
  return *p ? cudaSuccess : ct_sim_set(cudaErrorMemoryAllocation);
}
cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  if ((unsigned)kind > cudaMemcpyDefault || (bytes && (!dst || !src))) return ct_sim_set(cudaErrorInvalidValue);
  if (bytes) memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (ct_sim::capturing(s)) {
    if ((unsigned)kind > cudaMemcpyDefault || (bytes && (!dst || !src))) return ct_sim_set(cudaErrorInvalidValue);
    ct_sim::capture(s, [=]() { (void)cudaMemcpy(dst, src, bytes, kind); });
    return cudaSuccess;
  }
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
  if (bytes && !p) return ct_sim_set(cudaErrorInvalidValue);
  if (bytes) memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
  if (ct_sim::capturing(s)) {
    if (bytes && !p) return ct_sim_set(cudaErrorInvalidValue);
    ct_sim::capture(s, [=]() { (void)cudaMemset(p, value, bytes); });
    return cudaSuccess;
  }
  return cudaMemset(p, value, bytes);
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  if (!s) return ct_sim_set(cudaErrorInvalidValue);
  *s = (cudaStream_t)malloc(1);
  return *s ? cudaSuccess : ct_sim_set(cudaErrorMemoryAllocation);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  free(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device) {
  if (!buf || len < 13 || device != 0) return ct_sim_set(cudaErrorInvalidValue);
  snprintf(buf, (size_t)len, "0000:00:00.0"); // the emulated device has no PCI address
  return cudaSuccess;
}
}

// ---- the launch log, for the "kernels executed: N of M" listing ----------------------------
// At exit, when CT_SIM_LAUNCH_LOG names a file, each launched kernel is
// appended to it as "name<TAB>launches" (tools/sim/kernels_executed.py reads it).
namespace {
struct LaunchLog {
  ~LaunchLog() {
    const char *path = getenv("CT_SIM_LAUNCH_LOG");
    if (!path || !*path || ct_sim::g_launches.empty()) return;
    FILE *f = fopen(path, "a");
    if (!f) { perror(path); return; }
    for (auto &kv : ct_sim::g_launches) fprintf(f, "%s\t%ld\n", kv.first.c_str(), kv.second);
    fclose(f);
  }
} g_launch_log;
} // namespace
