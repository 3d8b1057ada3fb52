// SPDX-License-Identifier: MIT
//
// progress: what a long loop shows while it runs.
//
// On a terminal: one line redrawn in place, e.g.
//   epoch 3/10 [########------------]  412/938 loss 0.4123  8123 samples/s  ETA 0:06
// When stdout is not a terminal (logs, tests, the book): nothing while the
// epoch runs, then one plain line per epoch:
//   epoch 3/10: loss 0.4123, 8123 samples/s, 7.7 s   (ms below a second)
#ifndef CT_PROGRESS_H
#define CT_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_progress ct_progress;

// Starts an epoch of `steps` steps; `out` NULL means stdout. Redraws only when
// `out` is a terminal (or force_tty).
ct_progress *ct_progress_start(FILE *out, int epoch, int epochs, int64_t steps, bool force_tty);
// After each step: the running loss (NaN when the step did not read it) and
// the samples in this step.
void ct_progress_step(ct_progress *p, double loss, int64_t samples);
// Ends the epoch: prints the epoch's line (with `extra`, e.g. "test acc
// 0.8812", may be NULL) and frees p. Returns the epoch's samples/s.
double ct_progress_finish(ct_progress *p, const char *extra);
// A bar for a loop that is not an epoch ("one device [####--]  120/300 ..."):
// drawn on a terminal only; ct_progress_clear erases it and frees p, leaving
// the output exactly as it would be without a terminal.
ct_progress *ct_progress_start_label(FILE *out, const char *label, int64_t steps);
void ct_progress_clear(ct_progress *p);
// Erases the bar from the terminal before the loop prints a line of its own;
// the next ct_progress_step draws it again below that line.
void ct_progress_erase(ct_progress *p);

#ifdef __cplusplus
}
#endif
#endif
