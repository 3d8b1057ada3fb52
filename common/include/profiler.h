// SPDX-License-Identifier: MIT
//
// profiler: where a training step's time and memory go, as torch.profiler
// tells it.
//
// A session (ct_profiler_start ... ct_profiler_stop) records, per thread:
//  - ranges: ct_record_function_begin/end (torch.profiler.record_function),
//    each module's forward and backward ("Conv2d.forward"), the optimizer's
//    step and zero_grad ("Optimizer.step#Adam.step", torch's names), the
//    schedule's "ProfilerStep#N", and one op range per backend entry that
//    runs work ("ct::gemm", "ct::im2col", "ct::add": the counterpart of
//    torch's aten:: ops);
//  - on a CUDA device, each op's device time from a pair of CUDA events on
//    its stream, placed on the host's timeline (CT_ACTIVITY_CUDA);
//  - with profile_memory, every allocation and free of the caching
//    allocator: bytes, device, address, and the allocator's totals after it;
//  - with record_shapes, the shapes each op's kernel ran on.
// Ranges are also NVTX ranges in CUDA builds, so Nsight Systems shows them;
// a user's record_function range is pushed to NVTX even when no session runs.
//
// Invariants:
//  - ranges nest on each thread: an op range lies inside the module range
//    that called it, which lies inside the user's ranges; every event carries
//    the thread's id (DataParallel's replica threads and the DataLoader's
//    workers each get their own track);
//  - a row of ct_profiler_key_averages sums the events of one name (and,
//    grouped by input shape, of one shape): its self CPU time is its time
//    minus its children's, so the rows' self times add up to the time of the
//    outermost ranges, and their self memory to the bytes the memory events
//    moved;
//  - with no session running, the hooks in the runtime cost one test of a
//    flag (the dispatcher, modules, the optimizer, the allocator).
// Times are microseconds from the session's start (CLOCK_MONOTONIC).
#ifndef CT_PROFILER_H
#define CT_PROFILER_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

// torch.profiler.ProfilerActivity: bit flags.
typedef enum ct_profiler_activity { CT_ACTIVITY_CPU = 1, CT_ACTIVITY_CUDA = 2 } ct_profiler_activity;

// torch.profiler.schedule(skip_first, wait, warmup, active, repeat): after
// skip_first steps, cycles of `wait` idle steps, `warmup` traced and thrown
// away, `active` recorded; repeat 0 cycles forever. All zero: no schedule,
// everything from start to stop is recorded. ct_profiler_step marks a step.
typedef struct ct_profiler_schedule {
  int skip_first, wait, warmup, active, repeat;
} ct_profiler_schedule;

typedef struct ct_profiler ct_profiler;
// on_trace_ready: called at the end of each recorded cycle (and at stop, for
// an unscheduled session), when the events of that cycle are ready to read.
typedef void (*ct_profiler_handler)(ct_profiler *p, void *ctx);

typedef struct ct_profiler_options {
  unsigned activities; // CT_ACTIVITY_CPU | CT_ACTIVITY_CUDA
  bool record_shapes;
  bool profile_memory;
  ct_profiler_schedule schedule;
  ct_profiler_handler on_trace_ready;
  void *ctx;
} ct_profiler_options;

// CPU and CUDA activities, no shapes, no memory, no schedule.
ct_profiler_options ct_profiler_defaults(void);
// Starts a session (torch.profiler.profile(...).__enter__). One at a time:
// NULL + CT_ERR_VALUE while another runs.
ct_profiler *ct_profiler_start(const ct_profiler_options *o);
// prof.step(): the end of a training step, for the schedule.
int ct_profiler_step(ct_profiler *p);
// Ends the session (__exit__): waits for the device work recorded, resolves
// device times and leaves the last recorded cycle's events readable.
int ct_profiler_stop(ct_profiler *p);
void ct_profiler_free(ct_profiler *p);
bool ct_profiler_enabled(void); // a session is recording right now
// Whether ranges also go to NVTX (a CUDA build with the toolkit's nvtx3 headers).
bool ct_profiler_has_nvtx(void);

// torch.profiler.record_function(name): a named range on this thread, ended
// by the matching ct_record_function_end (ranges nest). The name is copied
// (63 bytes kept). _end without an open range is CT_ERR_VALUE.
void ct_record_function_begin(const char *name);
int ct_record_function_end(void);

// ---- the events (prof.events()) ------------------------------------------------------------
typedef enum ct_profiler_event_kind {
  CT_EVENT_USER,   // ct_record_function_begin/end
  CT_EVENT_STEP,   // "ProfilerStep#N" from the schedule
  CT_EVENT_MODULE, // "Conv2d.forward", "Optimizer.step#Adam.step"
  CT_EVENT_OP,     // a backend entry: "ct::gemm"
  CT_EVENT_KERNEL, // an op's device time on a CUDA stream
  CT_EVENT_MEMORY  // an allocation (bytes > 0) or a free (bytes < 0)
} ct_profiler_event_kind;

typedef struct ct_profiler_event {
  char name[64];
  char shapes[96];            // record_shapes: "[[64, 1, 28, 28]]"; "" otherwise
  ct_profiler_event_kind kind;
  int tid;                    // the thread's id (gettid); a kernel: its stream's number
  ct_device device;           // where the op ran / the memory lives
  int parent;                 // index of the enclosing range in the array, -1 at the root
  int depth;                  // 0 at the root of its thread
  double ts_us, dur_us;       // begin and length (0 for memory)
  double self_cpu_us;         // dur minus the children's durations (ranges)
  double device_us;           // an op: its kernel's device time; a kernel: its own
  double device_total_us;     // device time of the op's kernels and its children's
  int64_t self_mem[2], mem[2];// net bytes allocated inside: [0] CPU, [1] CUDA (self: not in children)
  int correlation;            // a kernel: index of the op that ran it; else -1
  // memory events
  int64_t bytes;
  uint64_t total_allocated, total_reserved, addr;
} ct_profiler_event;

// The last recorded cycle's events: each thread's ranges in begin order
// (parents before children), memory events among them, kernels last. Valid
// until the next cycle or ct_profiler_free.
const ct_profiler_event *ct_profiler_events(const ct_profiler *p, int *n);

// ---- key_averages ------------------------------------------------------------------------
typedef struct ct_profiler_row {
  char name[64];
  char shapes[96]; // when grouped by input shape
  int64_t count;
  double self_cpu_us, cpu_total_us, self_device_us, device_total_us;
  int64_t self_cpu_mem, cpu_mem, self_device_mem, device_mem;
} ct_profiler_row;

typedef struct ct_profiler_averages {
  int n;
  ct_profiler_row *rows;
  double self_cpu_total_us, self_device_total_us; // sums of the rows' self times
  bool has_device, has_memory, by_shape; // columns: CUDA time, memory (CUDA memory too when
                                         // has_device or a CUDA memory event), input shapes
  bool has_device_memory;
} ct_profiler_averages;

// prof.key_averages(group_by_input_shape): one row per name (and shape),
// ranges and ops only, in order of first appearance. NULL + error on OOM.
ct_profiler_averages *ct_profiler_key_averages(const ct_profiler *p, bool group_by_input_shape);
// Sorts the rows by one of torch's sort_by keys, descending (name ascending):
// self_cpu_time_total, cpu_time_total, cpu_time (average), self_cuda_time_total,
// cuda_time_total, cuda_time, count, cpu_memory_usage, self_cpu_memory_usage,
// cuda_memory_usage, self_cuda_memory_usage, name, input_shapes ("device"
// may stand for "cuda", as torch 2.4 writes it). Unknown key: CT_ERR_VALUE.
int ct_profiler_averages_sort(ct_profiler_averages *a, const char *sort_by);
// key_averages().table(sort_by, row_limit): torch's columns (the CUDA ones
// when device time was recorded, memory with profile_memory, input shapes
// when grouped by them), then "Self CPU time total: ...". sort_by NULL keeps
// the order; row_limit <= 0 shows all. Caller free()s; NULL + error.
char *ct_profiler_table(ct_profiler_averages *a, const char *sort_by, int row_limit);
void ct_profiler_averages_free(ct_profiler_averages *a);

// prof.export_chrome_trace(path): the Trace Event Format (JSON object form)
// that chrome://tracing and Perfetto open: complete events ("ph":"X") for
// ranges, ops and kernels, instant events ("ph":"i") named "[memory]" with
// torch's args, and metadata naming processes and threads. Written
// atomically (a temporary renamed into place).
int ct_profiler_export_chrome_trace(const ct_profiler *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif
