// SPDX-License-Identifier: MIT
//
// prof_internal: the profiler's own structures, shared by its files
// (prof.c: session and ranges; prof_backend.c: the op ranges around the
// backend's entries; prof_report.c: collection, key_averages, the trace).
#ifndef CT_PROF_INTERNAL_H
#define CT_PROF_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "prof_impl.h"
#include "stream.h"

// One record: a range (complete when `done`) or a memory event. e.parent is
// a slot of the same buffer while recording.
typedef struct cti_prof_rec {
  ct_profiler_event e;
  ct_stream *stream; // an op's stream
  ct_event *ev0, *ev1; // an op's device events (CUDA activity), or NULL
  bool done;
} cti_prof_rec;

// One thread's records in one session.
typedef struct cti_prof_buf {
  pthread_mutex_t mu;
  int tid;
  cti_prof_rec *recs;
  int n, cap;
  struct cti_prof_buf *next;
} cti_prof_buf;

// Device clock origins: cuda:i in slot i, the CPU (cti_prof_time_cpu_ops_) last.
#define CTI_PROF_SLOTS (CT_MAX_CUDA_DEVICES + 1)
static inline int cti_prof_slot(ct_device d) {
  if (d.type == CT_CPU) return CT_MAX_CUDA_DEVICES;
  return d.index >= 0 && d.index < CT_MAX_CUDA_DEVICES ? d.index : -1;
}

struct ct_profiler {
  ct_profiler_options o;
  uint64_t gen;
  double t0_ns;            // CLOCK_MONOTONIC at start: time 0 of every event
  cti_prof_buf *bufs;      // every thread's buffer (sessions_mu)
  int64_t step_num;
  int action;              // the schedule's action for the current step
  int step_token;          // the open "ProfilerStep#N" range, or -1
  double win_start, win_end; // the active window being recorded (us)
  bool stopped;
  ct_event *base[CTI_PROF_SLOTS]; // device clock origins (device_bases), by cti_prof_slot
  double base_us[CTI_PROF_SLOTS];
  ct_profiler_event *ev;   // the last collected cycle
  int nev;
};

extern atomic_int cti_prof_shapes_on;
extern pthread_mutex_t cti_prof_sessions_mu; // guards each session's list of buffers
 // the live session records shapes

double cti_prof_now_us(const ct_profiler *p);
// Opens a range on this thread; its token for cti_prof_end, or -1 when not
// recording. An op (kind CT_EVENT_OP) on a CUDA stream `s` also gets its
// device events under the CUDA activity.
int cti_prof_range_begin(ct_profiler_event_kind kind, const char *name, const char *shapes,
                         ct_device dev, ct_stream *s);
// "[64, 1, 28, 28]"
const char *cti_prof_shape_str(ct_shape s, char *buf, size_t len);
// Builds p->ev from the buffers: the events inside the window, parents
// remapped, self times, device times, memory attributed. CT_OK or OOM.
int cti_prof_collect(ct_profiler *p);

#endif
