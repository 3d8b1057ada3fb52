// SPDX-License-Identifier: MIT
//
// cli: what every chapter's command line and first line of output share.
//
// Flags every chapter takes:
//   --device auto|cpu|cuda|cuda:N   (auto = the GPU if available)
//   --seed N      (default 0; seeds ct_manual_seed)
//   --quick       a small workload: seconds on a 2-core CPU (tests use it)
//   --metrics F   write the measured figures as JSON to F
//   --help
// A chapter adds its own flags with ct_cli_opt entries. A bad flag prints the
// usage to stderr and exits 2; a runtime error prints the message and exits 1.
//
// After parsing, ct_cli_begin prints the chapter's first line:
//   "device: cuda:0 (NVIDIA H100 80GB HBM3)"  or
//   "device: cpu (CUDA unavailable: CUDA driver version is insufficient for CUDA runtime version)"
#ifndef CT_CLI_H
#define CT_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

// CT_OPT_OUTPUT is a string naming a file the program will write (--save):
// after parsing, each one given (and --metrics) is checked as the write
// will go (its folder exists and is writable, it is not a directory), so a
// bad path fails in the first second, exit 1, not after the training.
// CT_OPT_INPUT is a string naming a file the program reads (--resume,
// --load). No two files of one run may be the same file where one of them is
// written: two outputs, or an output and an input, naming one file (the same
// device and inode where it exists, the same resolved path where it does
// not) stop the run before any work, exit 2, with a message naming both
// flags. One pair is allowed: --resume FILE --save FILE continues a run in
// place (the checkpoint read at the start is replaced at the end).
typedef enum ct_opt_kind { CT_OPT_FLAG, CT_OPT_INT, CT_OPT_DOUBLE, CT_OPT_STRING, CT_OPT_OUTPUT, CT_OPT_INPUT } ct_opt_kind;

// A chapter's own flag: "--name VALUE" (or "--name" for CT_OPT_FLAG), stored
// through `out` (bool*, long*, double*, const char**).
typedef struct ct_cli_opt {
  const char *name;   // without the dashes: "epochs"
  ct_opt_kind kind;
  void *out;
  const char *help;   // one line, shown by --help with the default value
} ct_cli_opt;

typedef struct ct_metrics ct_metrics;

typedef struct ct_cli {
  const char *program;     // "ch01"
  const char *summary;     // one line for --help
  const char *device_spec; // as given: "auto" by default
  uint64_t seed;
  bool quick;
  const char *metrics_path; // NULL when not asked for
  ct_device device;         // chosen by ct_cli_begin
  ct_metrics *metrics;      // opened by ct_cli_begin (see "metrics" below); closed by the chapter
  char fallback_reason[256];// why the CPU was chosen under "auto"; "" otherwise. A chapter that
                            // turns "auto" into "cpu" itself (ch08: fewer GPUs than ranks) sets
                            // device_spec = "cpu" and its reason here between ct_cli_parse and
                            // ct_cli_begin, which prints "device: cpu (REASON)"
} ct_cli;

// Parses argv into cli (and the chapter's opts, n_opts of them, may be 0).
// First, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, the program starts
// itself again with OMP_WAIT_POLICY=passive when OpenBLAS keeps its own
// threads, else with GOMP_SPINCOUNT=1000 (see cli.c: spinning OpenMP
// threads starve the working threads on small or busy machines).
// On --help prints usage and exits 0; on a bad flag prints the problem and
// usage to stderr and exits 2; two flags naming one file (CT_OPT_INPUT) print
// "<program>: --save and --save-init name the same file ..." and exit 2; an
// output file (--metrics, CT_OPT_OUTPUT)
// that cannot be written prints "<program>: --save <path>: <why>" and
// exits 1, having created nothing.
void ct_cli_parse(ct_cli *cli, int argc, char **argv, const ct_cli_opt *opts, int n_opts);
// Before that, the thread counts in the environment (OMP_NUM_THREADS,
// OMP_THREAD_LIMIT, OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS) are checked:
// a value that is not a whole number from 1 to ct_cli_thread_limit()
// (OMP_NUM_THREADS: a comma-separated list of them) prints
// "<program>: OMP_NUM_THREADS="abc": expected ..." and exits 1.
// The most threads a variable may ask for: 8 per online core, from 256 to 4096.
int64_t ct_cli_thread_limit(void);
// Selects the device, seeds the generators and prints the "device: ..." line.
// On an error (cuda asked for and absent, bad index) prints it and exits 1.
// Then opens cli->metrics (ct_metrics_open(cli->metrics_path): a sink that
// writes nothing without --metrics, and in a process whose $RANK is set and
// not "0": only rank 0 writes files) and records in it "device" (as
// ct_device_str writes it), "seed" and "quick", the run's first three keys.
void ct_cli_begin(ct_cli *cli);
// Integer flags (CT_OPT_INT) are refused (exit 2) outside [-2^31 + 1, 2^31 - 1].
// Sizes from flags: the machine's memory (sysconf), and a check made before
// anything is allocated: the product of n factors times elsize bytes must
// neither overflow ("<program>: WHAT: Storage size calculation overflowed")
// nor pass the machine's memory ("<program>: WHAT take 3e+03 GiB, more than
// this machine's memory (15.6 GiB)"); either prints that and exits 2. WHAT
// names the flags: "--rows x --width floats".
int64_t ct_cli_memory_bytes(void);
void ct_cli_need_memory(const ct_cli *cli, const char *what, int n, const int64_t *factors, int64_t elsize);
// Prints "<program>: <last error>" to stderr and exits 1. For chapters'
// `if (!x) ct_cli_die(&cli);`.
_Noreturn void ct_cli_die(const ct_cli *cli);
// The same as a statement, for a chapter that checks many calls in a row:
// CT_CLI_MUST(cli, p) when p is NULL, CT_CLI_MUST_OK(cli, rc) when rc is not
// CT_OK. `cli` is a `const ct_cli *`.
#define CT_CLI_MUST(cli, p)                                                    \
  do {                                                                         \
    if (!(p)) ct_cli_die(cli);                                                 \
  } while (0)
#define CT_CLI_MUST_OK(cli, rc)                                                \
  do {                                                                         \
    if ((rc) != CT_OK) ct_cli_die(cli);                                        \
  } while (0)
// For a program of many processes (chapter 8): when RANK is not in the
// environment, runs this same command again under tools/launch with nproc
// processes (as `torchrun --nproc-per-node N prog` would) and does not
// return; under a launcher it returns at once. Ranks other than 0 get their
// stdout sent to /dev/null (only rank 0 logs); stderr stays, so every rank's
// errors are seen. $CT_LAUNCH overrides the launcher's path.
void ct_cli_launch(const char *program, int argc, char **argv, int nproc);
// ---- Ctrl-C: stop at the end of a step -------------------------------------
// After ct_cli_catch_interrupt, the first SIGINT only sets a flag (and says
// "stopping after this step; Ctrl-C again to quit now" on stderr): a training
// loop polls ct_cli_interrupted() after each step, saves what it needs and
// ends. A second SIGINT ends the process at once (exit status 130), removing
// the temporary of a save in progress, so the target file keeps its old
// content. SIGTERM (timeout(1), a scheduler, kill) is handled the same way
// (a second one exits with status 143). A program that never reaches
// ct_cli_begin (nor calls ct_cli_catch_interrupt) keeps the default: Ctrl-C
// ends it. For tests, $CT_TEST_SIGINT_AFTER=N[,M] makes the N-th
// call of ct_cli_interrupted() (and the M-th) raise a real SIGINT first.
// $CT_TEST_SIGNAL=TERM makes that a SIGTERM. ct_cli_interrupt_status() is
// the exit status for a run the first signal stopped: 130 (SIGINT) or 143
// (SIGTERM).
// ct_cli_begin installs the same handlers for every chapter, so the first
// Ctrl-C always stops at a clean point: where a loop polls
// ct_cli_interrupted(), or at the start of the next section, and at the
// latest 5 s after the signal (then "no clean stopping point within 5 s of
// the signal: quitting now", the temporary of a save removed); a program that
// calls ct_cli_catch_interrupt itself (its loop saves and stops: ch06, ch14)
// has no such deadline. At the next section (ct_cli_section says "<program>: interrupted: stopped
// before section "x"; nothing more was run" and exits 130, or 143 after SIGTERM).
void ct_cli_catch_interrupt(void);
bool ct_cli_interrupted(void);
int ct_cli_interrupt_status(void);
// For loops with nothing to save: after Ctrl-C, says "<program>: interrupted:
// stopped after this step; nothing more was run" and exits 130 (143 after
// SIGTERM); else returns.
// cli may be NULL (a helper deep in a chapter): the program ct_cli_begin named.
void ct_cli_exit_if_interrupted(const ct_cli *cli);
// The same question without counting as a poll for $CT_TEST_SIGINT_AFTER: for long loops
// inside a step (an evaluation), which end early on Ctrl-C.
bool ct_cli_interrupt_pending(void);
// ---- a loss that is not a number -------------------------------------------
// A training loop's guard, for the loss it reads anyway (a step's loss, or
// the sum of the steps' losses since the last read): when `loss` is NaN or
// inf, prints "<program>: the loss is nan at step 12: training diverged;
// lower --lr (this run: 10) or check the inputs for NaN/inf" to stderr
// ("between steps 51 and 100" when the read covers several steps: first_step
// < last_step) and exits 1. Returns when the loss is finite.
void ct_cli_check_loss(const ct_cli *cli, double loss, int64_t first_step, int64_t last_step, double lr);

// ---- paths never cut short -----------------------------------------------------
// Writes "DIR/NAME" into buf (cap bytes). A path that does not fit is never
// truncated: CT_ERR_VALUE, "--out-dir: the path of NAME in this folder would
// be N bytes, more than the M this program takes; use a shorter folder than
// DIR" (flag names the
// flag DIR came from). Chapters check their output folders with it right
// after ct_cli_parse, so a long path is refused before any work.
int ct_path_join(char *buf, size_t cap, const char *flag, const char *dir, const char *name);
// The same check, and that the folder exists and lets the file be written
// there (the writer's own check: nothing is created), exiting 1 with the message
// (for main, after ct_cli_parse: a bad --out-dir fails before the work).
void ct_cli_check_path(const ct_cli *cli, const char *flag, const char *dir, const char *name);

// Prints a section header "== name ==" that the book uses to place output;
// after a Ctrl-C it stops the run instead (exit 130, see above).
void ct_cli_section(const char *name);

// ---- metrics: a flat JSON object written atomically --------------------------
// Usage: m = cli.metrics (ct_cli_begin opened it; or ct_metrics_open(path):
// a NULL path gives a sink that writes nothing); ct_metrics_num(m, "gflops",
// x); ct_metrics_series(m, "bandwidth_gbs", xs, n); ct_metrics_close(m)
// writes the file (temp + rename).
ct_metrics *ct_metrics_open(const char *path);
void ct_metrics_num(ct_metrics *m, const char *key, double value);
void ct_metrics_str(ct_metrics *m, const char *key, const char *value);
void ct_metrics_series(ct_metrics *m, const char *key, const double *values, int n);
int ct_metrics_close(ct_metrics *m); // CT_OK or CT_ERR_IO
// One figure, printed and recorded: prints fmt with its arguments (printf's
// rules; the line's text is the chapter's) and records the first argument,
// the figure, under key in m (m may be NULL or a sink): the same fact on the
// screen and in the JSON, written once. fmt's first conversion takes that
// double (%g, %.1f, %.0f, ...); one that does not (%d, %s) records nothing.
//   ct_metrics_print(m, "compile_ms", "compiled in %.1f ms\n", ms);
void ct_metrics_print(ct_metrics *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- timing: what every chapter that times work shares ----------------------
// Seconds on CLOCK_MONOTONIC (time.perf_counter()): only differences mean something.
double ct_cli_seconds(void);
// Waits for all the work queued on device d (torch.cuda.synchronize(d)):
// ct_cuda_synchronize on a GPU; on the CPU work has already run: CT_OK.
// Returns the status, which a caller checks (an asynchronous kernel error
// shows up here).
int ct_cli_synchronize(ct_device d);
// The threads the CPU work of this process uses (torch.get_num_threads()):
// OpenMP's maximum, 1 in a build without OpenMP.
int ct_cli_threads(void);
// qsort's comparison for doubles, ascending.
int ct_cli_cmp_double(const void *a, const void *b);
// The median of v[0..n) (the mean of the middle two when n is even); v is
// left as it is. NAN when n < 1 or a copy of v cannot be allocated.
double ct_cli_median(const double *v, int n);

#ifdef __cplusplus
}
#endif
#endif
