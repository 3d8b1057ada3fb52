// SPDX-License-Identifier: MIT
//
// ct_sim_racecheck.cc: the emulator's shared-memory race check, in the manner
// of compute-sanitizer's racecheck. Between two openings of the block barrier
// (__syncthreads()), two accesses to one byte of __shared__ memory by
// different threads, at least one a write, are a hazard: their order is the
// scheduler's choice on a GPU. Two threads of one warp are ordered when a
// warp intrinsic (__syncwarp, a shuffle, a vote) of that warp completed
// between the accesses.
//
// Which addresses are shared memory: __shared__ is `static thread_local` in
// ct_sim.h, so the kernels' shared variables live in the main program's TLS
// block, and the emulator keeps its own state out of TLS. The accesses come
// from the instrumentation hooks (ct_sim_tsan_hooks.cc) in the racecheck
// build of a kernel file; without them the check sees nothing and costs
// nothing.
#include "ct_sim_internal.h"

#include <link.h>
#include <stdint.h>
#include <stdio.h>

#include <unordered_map>
#include <vector>

namespace ct_sim {
namespace {

struct Cell {
  int writer = -1;        // thread that wrote since the barrier, -1 none
  unsigned writer_ws = 0; // its warp's sync count at the write
  int reader = -1;        // -1 none, a thread, or -2 for several
  unsigned reader_ws = 0;
};

uintptr_t g_lo = 0, g_hi = 0; // this OS thread's copy of the main program's TLS
std::unordered_map<uintptr_t, Cell> g_cells;
std::vector<unsigned> g_warp_syncs;
long g_hazards = 0, g_accesses = 0, g_launch_hazards = 0;
const char *g_name = nullptr;

int find_tls(struct dl_phdr_info *info, size_t, void *) {
  if (info->dlpi_name && info->dlpi_name[0]) return 0; // the main program comes first, nameless
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS && info->dlpi_tls_data) {
      g_lo = (uintptr_t)info->dlpi_tls_data;
      g_hi = g_lo + info->dlpi_phdr[i].p_memsz;
    }
  return 1;
}

bool ordered(int a, unsigned ws, int t) {
  return a / 32 == t / 32 && (size_t)(t / 32) < g_warp_syncs.size() && g_warp_syncs[t / 32] > ws;
}

void hazard(const char *kind, uintptr_t addr, int other) {
  ++g_hazards;
  if (++g_launch_hazards > 5) return; // the first few are enough to find it
  char msg[200];
  snprintf(msg, sizeof msg,
           "racecheck: %s hazard on __shared__ memory (byte %#lx of the block's shared variables) with "
           "thread %d (linear index; -1: several) since the last __syncthreads()",
           kind, (unsigned long)(addr - g_lo), other);
  report_error(msg);
}

} // namespace

void racecheck_launch(const char *name) {
  g_name = name;
  g_launch_hazards = 0;
  if (!g_lo) dl_iterate_phdr(find_tls, nullptr);
}

void racecheck_block_begin(void) {
  g_cells.clear();
  g_warp_syncs.assign(32, 0);
}

void racecheck_barrier(void) { g_cells.clear(); }

void racecheck_warp_sync(int warp) {
  if ((size_t)warp >= g_warp_syncs.size()) g_warp_syncs.resize(warp + 1, 0);
  ++g_warp_syncs[warp];
}

void racecheck_access(const void *p, size_t n, bool write) {
  const uintptr_t a = (uintptr_t)p;
  if (a < g_lo || a >= g_hi) return;
  const int t = current_thread();
  if (t < 0) return;
  ++g_accesses;
  const unsigned ws = (size_t)(t / 32) < g_warp_syncs.size() ? g_warp_syncs[t / 32] : 0;
  const char *kind = nullptr; // the first hazard of this access, if any
  uintptr_t at = 0;
  int other = -1;
  const uintptr_t end = a + (n > 64 ? 64 : n); // a wide access: its first bytes tell
  for (uintptr_t b = a; b < end; ++b) {
    Cell &c = g_cells[b];
    const char *k = nullptr;
    int o = -1;
    if (write) {
      if (c.writer >= 0 && c.writer != t && !ordered(c.writer, c.writer_ws, t)) k = "write-after-write", o = c.writer;
      else if (c.reader >= 0 && c.reader != t && !ordered(c.reader, c.reader_ws, t)) k = "write-after-read", o = c.reader;
      else if (c.reader == -2) k = "write-after-read", o = -1;
      c.writer = t;
      c.writer_ws = ws;
      c.reader = -1;
    } else {
      if (c.writer >= 0 && c.writer != t && !ordered(c.writer, c.writer_ws, t)) k = "read-after-write", o = c.writer;
      if (c.reader == -1 || c.reader == t) { c.reader = t; c.reader_ws = ws; }
      else if (!ordered(c.reader, c.reader_ws, t)) c.reader = -2;
      else { c.reader = t; c.reader_ws = ws; }
    }
    if (k && !kind) kind = k, at = b, other = o;
  }
  if (kind) hazard(kind, at, other);
}

void racecheck_launch_end(void) {
  if (g_launch_hazards > 5)
    fprintf(stderr, "ct_sim: racecheck: %ld hazards in all in kernel %s\n", g_launch_hazards, g_name);
}

long racecheck_hazards(void) { return g_hazards; }
long racecheck_accesses(void) { return g_accesses; }

} // namespace ct_sim
