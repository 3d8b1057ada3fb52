// SPDX-License-Identifier: MIT
//
// ct_sim_internal.h: what the emulator's own files and tests share (not for
// kernels). See tools/sim/README.md.
#ifndef CT_SIM_INTERNAL_H
#define CT_SIM_INTERNAL_H

#include <stddef.h>

#include <functional>
#include <vector>

namespace ct_sim {
// the running CUDA thread's linear index in its block, -1 outside a kernel
int current_thread(void);
const char *current_kernel(void);
#ifdef CT_SIM_H
// records e (unless cudaSuccess) for cudaGetLastError, and returns it
cudaError_t set_last_error(cudaError_t e);
// stream capture (ct_sim.cc): begin fails when the stream captures already,
// end when it does not; end hands over what was recorded, in issue order
bool capture_begin(cudaStream_t stream);
bool capture_end(cudaStream_t stream, std::vector<std::function<void()>> *ops);
#endif
// prints "ct_sim: kernel K, block B, thread T: what" and counts an error
void report_error(const char *what);
long error_count(void);
long launch_count(const char *name);
void for_each_launched(void (*fn)(const char *name, long count, void *ctx), void *ctx);

// racecheck (ct_sim_racecheck.cc): the scheduler's events, and one memory
// access of the running thread (called by the instrumentation hooks of
// ct_sim_tsan_hooks.cc, in builds whose kernels are compiled for it)
void racecheck_launch(const char *name);
void racecheck_launch_end(void);
void racecheck_block_begin(void);
void racecheck_barrier(void);
void racecheck_warp_sync(int warp);
void racecheck_access(const void *p, size_t n, bool write);
long racecheck_hazards(void);   // hazards found since the program began
long racecheck_accesses(void);  // shared-memory accesses checked
} // namespace ct_sim

#endif
