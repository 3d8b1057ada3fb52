// SPDX-License-Identifier: MIT
//
// progress: one line per epoch, redrawn in place on a terminal.
//
// A terminal gets "\r" + the line, padded with spaces over what the last draw
// left, at most ten times a second (and always for the first and the last
// step), so a fast loop spends its time training, not printing. Anything else
// (a pipe, a log file, ctest, the book's recorded output) gets nothing while
// the epoch runs and one plain line at the end, so logs stay one line per
// epoch. Nothing is ever written to stderr.
//
// Rates are wall-clock: samples/s is the epoch's samples over the time since
// ct_progress_start (CLOCK_MONOTONIC), and the ETA assumes the remaining
// steps go as fast as the finished ones did.
#define _POSIX_C_SOURCE 200809L // clock_gettime, fileno under -std=c11

#include "progress.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 20
#define REDRAW_SECONDS 0.1

struct ct_progress {
  FILE *out;
  bool tty;
  int epoch, epochs;
  int64_t steps, step, samples;
  double loss;
  bool has_loss;
  double t0, last_draw;
  int last_len; // length of the last line drawn, to blank what is left of it
  char label[48]; // shown instead of "epoch i/n" when set (ct_progress_start_label)
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "m:ss", or "h:mm:ss" from an hour on.
static void clock_text(double s, char *buf, size_t n) {
  if (!isfinite(s) || s < 0 || s > 3.6e8) {
    snprintf(buf, n, "?:??");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

ct_progress *ct_progress_start(FILE *out, int epoch, int epochs, int64_t steps, bool force_tty) {
  ct_progress *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->out = out ? out : stdout;
  p->tty = force_tty || isatty(fileno(p->out));
  p->epoch = epoch;
  p->epochs = epochs;
  p->steps = steps;
  p->t0 = now_seconds();
  p->last_draw = -1;
  return p;
}

ct_progress *ct_progress_start_label(FILE *out, const char *label, int64_t steps) {
  ct_progress *p = ct_progress_start(out, 1, 1, steps, false);
  if (p && label) snprintf(p->label, sizeof p->label, "%s", label);
  return p;
}

void ct_progress_erase(ct_progress *p) {
  if (!p || !p->tty || p->last_len <= 0) return;
  fprintf(p->out, "\r%*s\r", p->last_len, "");
  fflush(p->out);
  p->last_len = 0;
  p->last_draw = -1; // the next step draws the bar again
}

void ct_progress_clear(ct_progress *p) {
  if (!p) return;
  ct_progress_erase(p);
  free(p);
}

static double rate(const ct_progress *p, double elapsed) {
  return elapsed > 0 ? (double)p->samples / elapsed : 0.0;
}

// "\r" + line, then spaces over the rest of the previous line.
static void put_line(ct_progress *p, const char *line) {
  int len = (int)strlen(line);
  fprintf(p->out, "\r%s%*s", line, p->last_len > len ? p->last_len - len : 0, "");
  p->last_len = len;
}

static void draw(ct_progress *p, double t) {
  char line[256], eta[24], bar[BAR_WIDTH + 3];
  double elapsed = t - p->t0;
  int k = p->label[0] ? snprintf(line, sizeof line, "%s ", p->label)
                      : snprintf(line, sizeof line, "epoch %d/%d ", p->epoch, p->epochs);
  if (p->steps > 0) {
    int64_t done = p->step < p->steps ? p->step : p->steps;
    int fill = (int)(done * BAR_WIDTH / p->steps);
    bar[0] = '[';
    for (int i = 0; i < BAR_WIDTH; i++) bar[1 + i] = i < fill ? '#' : '-';
    bar[BAR_WIDTH + 1] = ']';
    bar[BAR_WIDTH + 2] = '\0';
    char total[24];
    int w = snprintf(total, sizeof total, "%" PRId64, p->steps);
    k += snprintf(line + k, sizeof line - (size_t)k, "%s  %*" PRId64 "/%s", bar, w, p->step, total);
  } else {
    k += snprintf(line + k, sizeof line - (size_t)k, "step %" PRId64, p->step);
  }
  if (p->has_loss) k += snprintf(line + k, sizeof line - (size_t)k, " loss %.4g", p->loss);
  k += snprintf(line + k, sizeof line - (size_t)k, "  %.0f samples/s", rate(p, elapsed));
  if (p->steps > 0 && p->step > 0 && p->step < p->steps) {
    clock_text(elapsed / (double)p->step * (double)(p->steps - p->step), eta, sizeof eta);
    snprintf(line + k, sizeof line - (size_t)k, "  ETA %s", eta);
  }
  put_line(p, line);
  fflush(p->out);
  p->last_draw = t;
}

void ct_progress_step(ct_progress *p, double loss, int64_t samples) {
  if (!p) return;
  p->step++;
  p->samples += samples > 0 ? samples : 0;
  // A NaN loss means "not read this step" (reading it would make the host
  // wait for the device every step): the last loss read stays shown.
  if (!isnan(loss)) {
    p->loss = loss;
    p->has_loss = true;
  }
  if (!p->tty) return;
  double t = now_seconds();
  if (p->last_draw < 0 || p->step == p->steps || t - p->last_draw >= REDRAW_SECONDS) draw(p, t);
}

double ct_progress_finish(ct_progress *p, const char *extra) {
  if (!p) return 0.0;
  double elapsed = now_seconds() - p->t0;
  double sps = rate(p, elapsed);
  char line[512];
  int k = snprintf(line, sizeof line, "epoch %d/%d:", p->epoch, p->epochs);
  if (p->has_loss) k += snprintf(line + k, sizeof line - (size_t)k, " loss %.4g,", p->loss);
  // Short epochs (small models) read better in milliseconds.
  if (elapsed < 1.0)
    k += snprintf(line + k, sizeof line - (size_t)k, " %.0f samples/s, %.1f ms", sps, elapsed * 1e3);
  else
    k += snprintf(line + k, sizeof line - (size_t)k, " %.0f samples/s, %.1f s", sps, elapsed);
  if (extra && *extra) snprintf(line + k, sizeof line - (size_t)k, ", %s", extra);
  if (p->tty) put_line(p, line);
  else fputs(line, p->out);
  fputc('\n', p->out);
  fflush(p->out);
  free(p);
  return sps;
}
