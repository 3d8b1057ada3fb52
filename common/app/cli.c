// SPDX-License-Identifier: MIT
//
// cli: the command line every chapter shares, its first line of output, and
// the --metrics JSON file.
//
// Invariants:
//  - exit codes mean one thing everywhere: 0 done (or --help), 2 the command
//    line was wrong (the message names the flag and the value, then the usage
//    follows on stderr), 1 the run failed (the runtime's message on stderr);
//  - the first line a chapter prints is "device: ...", naming the device it
//    runs on and, when "auto" fell back to the CPU, CUDA's reason why;
//  - a metrics file is either absent, the previous complete file, or the new
//    complete file: the runtime's atomic writer (atomic_file.h) writes it to
//    "<path>.tmp.<random>", fsyncs it and renames it over <path>, so a reader
//    never sees half a JSON object.
//
// The fields of a ct_cli the chapter sets before ct_cli_parse (zero the rest)
// are its defaults: program, summary, and optionally device_spec ("auto" when
// NULL), seed, quick, metrics_path. Flags take their value as "--seed 3" or
// "--seed=3"; a repeated flag keeps its last value, as argparse does.
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE // realpath

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h> // PATH_MAX
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h> // openblas_get_parallel

#include "atomic_file.h"
#include "checked.h"
#include "error.h"
#include "random.h"
#include "strbuf.h"

// ---- parsing ------------------------------------------------------------------

static const char *interrupted_program = "ct"; // who says "interrupted" (set by ct_cli_begin)
static void catch_signals(void); // Ctrl-C and SIGTERM stop at a clean point (below)

static const char *cli_program(const ct_cli *cli) {
  return (cli->program && cli->program[0]) ? cli->program : "ct";
}

static const char *opt_metavar(ct_opt_kind kind) {
  switch (kind) {
  case CT_OPT_INT: return "N";
  case CT_OPT_DOUBLE: return "X";
  case CT_OPT_STRING: return "S";
  case CT_OPT_OUTPUT: return "FILE";
  case CT_OPT_INPUT: return "PATH"; // FILE marks what the program writes (tests/chapter/check_badinput.py)
  case CT_OPT_FLAG: break;
  }
  return "";
}

// One help line: "  --name VALUE" padded to a column, then the help text.
static void usage_line(FILE *f, const char *flag, const char *metavar, const char *help) {
  char left[96];
  snprintf(left, sizeof left, "--%s%s%s", flag, metavar[0] ? " " : "", metavar);
  fprintf(f, "  %-22s %s", left, help ? help : "");
}

static void print_usage(FILE *f, const ct_cli *cli, const ct_cli_opt *opts, int n_opts) {
  fprintf(f, "usage: %s [--device auto|cpu|cuda|cuda:N] [--seed N] [--quick] [--metrics FILE] [--help]",
          cli_program(cli));
  for (int i = 0; i < n_opts; i++) {
    if (!opts[i].name) continue;
    const char *mv = opt_metavar(opts[i].kind);
    fprintf(f, " [--%s%s%s]", opts[i].name, mv[0] ? " " : "", mv);
  }
  fputc('\n', f);
  if (cli->summary && cli->summary[0]) fprintf(f, "\n%s\n", cli->summary);
  fputs("\noptions:\n", f);
  usage_line(f, "device", "D", "auto (the GPU when CUDA is available), cpu, cuda, cuda:N");
  fprintf(f, " (default: %s)\n", cli->device_spec ? cli->device_spec : "auto");
  usage_line(f, "seed", "N", "seed for the random generators, ct_manual_seed");
  fprintf(f, " (default: %llu)\n", (unsigned long long)cli->seed);
  usage_line(f, "quick", "", "a small workload, seconds on a 2-core CPU (used by the tests)");
  fputc('\n', f);
  usage_line(f, "metrics", "FILE", "write the measured figures as JSON to FILE");
  fprintf(f, " (default: %s)\n", cli->metrics_path ? cli->metrics_path : "none, not written");
  usage_line(f, "help", "", "show this help and exit");
  fputc('\n', f);
  fprintf(f, "  integer flags take -2147483647..2147483647; sizes must fit this machine's memory (%.3g GiB)\n",
          (double)ct_cli_memory_bytes() / (1 << 30));
  for (int i = 0; i < n_opts; i++) {
    const ct_cli_opt *o = &opts[i];
    if (!o->name) continue;
    usage_line(f, o->name, opt_metavar(o->kind), o->help);
    if (o->out && !(o->help && strstr(o->help, "(default"))) { // the help may say it better ("8192; --quick 1024")
      switch (o->kind) {
      case CT_OPT_FLAG:
        if (*(const bool *)o->out) fputs(" (default: on)", f);
        break;
      case CT_OPT_INT: fprintf(f, " (default: %ld)", *(const long *)o->out); break;
      case CT_OPT_DOUBLE: fprintf(f, " (default: %g)", *(const double *)o->out); break;
      case CT_OPT_STRING:
      case CT_OPT_OUTPUT:
      case CT_OPT_INPUT: {
        const char *s = *(const char *const *)o->out;
        fprintf(f, " (default: %s)", s ? s : (o->kind == CT_OPT_OUTPUT ? "none, not written" : "none"));
        break;
      }
      }
    }
    fputc('\n', f);
  }
}

// Prints "<program>: <problem>" and the usage to stderr, then exits 2.
static _Noreturn __attribute__((format(printf, 4, 5))) void
usage_error(const ct_cli *cli, const ct_cli_opt *opts, int n_opts, const char *fmt, ...) {
  fflush(stdout);
  fprintf(stderr, "%s: ", cli_program(cli));
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  print_usage(stderr, cli, opts, n_opts);
  exit(2);
}

// "auto", "cpu", "cuda" or "cuda:" followed by decimal digits without a
// leading zero (as ct_device_parse spells them). Whether the device exists
// is a runtime question for ct_cli_begin (exit 1), not a usage error.
static bool device_spec_ok(const char *s) {
  if (!strcmp(s, "auto") || !strcmp(s, "cpu") || !strcmp(s, "cuda")) return true;
  if (strncmp(s, "cuda:", 5) != 0 || !s[5] || (s[5] == '0' && s[6])) return false;
  for (const char *p = s + 5; *p; p++)
    if (!isdigit((unsigned char)*p)) return false;
  return strlen(s + 5) <= 4;
}

static bool parse_u64(const char *s, uint64_t *out) {
  if (!isdigit((unsigned char)s[0])) return false;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno == ERANGE || *end) return false;
  *out = (uint64_t)v;
  return true;
}

static bool parse_long(const char *s, long *out) {
  if (!s[0] || isspace((unsigned char)s[0])) return false;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno == ERANGE || *end) return false;
  *out = v;
  return true;
}

static bool parse_double(const char *s, double *out) {
  if (!s[0] || isspace((unsigned char)s[0])) return false;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if ((errno == ERANGE && !(fabs(v) < 1)) || *end || !isfinite(v)) return false; // underflow (1e-320) is a number
  *out = v;
  return true;
}

// OpenMP's idle threads spin while they wait for work. When OpenBLAS keeps
// its own threads (its pthreads build; openblas_get_parallel() == 1), on a
// machine with few cores, or one busy with other work, the spinning threads
// take the cores the BLAS threads need, and small ops slow down 3-20x; with
// that build a chapter restarts itself once with OMP_WAIT_POLICY=passive
// (sleeping waits). With OpenBLAS's OpenMP build (what CMake looks for
// first) nothing competes inside the process, but libgomp's default still
// has each idle thread spin up to 300,000 rounds after every parallel
// region; on a machine busy with other processes that spinning takes the
// time slices the working threads need (ch14's default run on 2 cores at
// load 10: 84% of its CPU time spent spinning, 3-5x slower than sleeping
// waits; libgomp itself spins less only when it has more threads than
// cores, it does not see other processes). So with that build the restart
// sets GOMP_SPINCOUNT=1000 (libgomp's own figure for an oversubscribed
// machine: tens of microseconds, enough for the gap between two ops, then
// sleep); at load 3.5 it trained 9% faster than passive, at the same CPU
// time. A policy the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) is
// kept; libgomp reads the variables only at start-up, hence the exec, and
// if the exec fails the chapter runs on as it is.
static void passive_openmp(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  const bool own_threads = openblas_get_parallel() == OPENBLAS_THREAD;
  if (setenv(own_threads ? "OMP_WAIT_POLICY" : "GOMP_SPINCOUNT", own_threads ? "passive" : "1000", 1) != 0) return;
  fflush(NULL);
  execv("/proc/self/exe", argv);
}

// The thread counts the OpenMP runtime and OpenBLAS read from the
// environment at start-up. libgomp ignores a malformed value with a warning
// but starts as many threads as a huge one asks, and crashes when it cannot
// (OMP_NUM_THREADS=100000: a segfault in the first parallel region). So,
// before any parallel region runs, each must be a list of whole numbers (one
// for all but OMP_NUM_THREADS, which takes one per nesting level) from 1 (0
// too for OpenBLAS's: "all cores") to the limit below, or the run stops,
// exit 1, naming the variable and the limit.
int64_t ct_cli_thread_limit(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t lim = n > 0 ? 8 * (int64_t)n : 256;
  return lim < 256 ? 256 : lim > 4096 ? 4096 : lim;
}

static void check_thread_env(const ct_cli *cli) {
  static const struct { const char *name; bool list; bool zero; } vars[] = {
      {"OMP_NUM_THREADS", true, false}, {"OMP_THREAD_LIMIT", false, false},
      {"OPENBLAS_NUM_THREADS", false, true}, {"GOTO_NUM_THREADS", false, true}};
  int64_t lim = ct_cli_thread_limit();
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i].name);
    if (!v || !v[0]) continue; // unset or empty: the runtime's default
    const char *p = v;
    bool ok = true;
    int items = 0;
    while (ok) {
      while (*p == ' ' || *p == '\t') p++;
      if (!isdigit((unsigned char)*p)) { ok = false; break; }
      int64_t n = 0;
      while (isdigit((unsigned char)*p) && n <= lim) n = n * 10 + (*p++ - '0');
      while (isdigit((unsigned char)*p)) p++;
      ok = n <= lim && (n >= 1 || vars[i].zero);
      items++;
      while (*p == ' ' || *p == '\t') p++;
      if (!*p) break;
      if (*p != ',' || !vars[i].list) ok = false;
      else p++;
    }
    if (ok && items > 0) continue;
    fflush(stdout);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(stderr, "%s: %s=\"%.64s\": expected %s from %d to %lld (this machine has %ld cores); "
            "unset it to use them all\n", cli_program(cli), vars[i].name, v,
            vars[i].list ? "a number of threads (or a comma-separated list, one per nesting level)"
                         : "a number of threads",
            vars[i].zero ? 0 : 1, (long long)lim, cores);
    exit(1);
  }
}

// An output the program cannot write fails now, before any work: exit 1
// with the atomic writer's own reason (nothing is created by the check).
static void check_output(const ct_cli *cli, const char *flag, const char *path) {
  if (!path) return;
  char op[72];
  snprintf(op, sizeof op, "--%s", flag);
  if (cti_atomic_check(op, path) == CT_OK) return;
  fflush(stdout);
  fprintf(stderr, "%s: %s\n", cli_program(cli), ct_last_error());
  exit(1);
}

// The file a path names, for comparing two flags' paths: where it exists,
// its device and inode (links followed, as the writer follows them); where
// it does not, the real path of its folder and its last component.
typedef struct {
  const char *flag, *path;
  bool output, exists, chardev;
  dev_t dev;
  ino_t ino;
  char *resolved; // malloc'd, NULL when it exists or its folder cannot be resolved
} named_file;

static void name_file(named_file *nf) {
  struct stat sb;
  nf->exists = stat(nf->path, &sb) == 0;
  nf->resolved = NULL;
  if (nf->exists) {
    nf->chardev = S_ISCHR(sb.st_mode); // /dev/null for two outputs loses nothing
    nf->dev = sb.st_dev;
    nf->ino = sb.st_ino;
    return;
  }
  const char *slash = strrchr(nf->path, '/');
  const char *base = slash ? slash + 1 : nf->path;
  char *dir = slash ? strndup(nf->path, (size_t)(slash - nf->path) + (slash == nf->path)) : strdup(".");
  char *real = dir ? realpath(dir, NULL) : NULL;
  free(dir);
  if (!real) return;
  size_t n = strlen(real) + strlen(base) + 2;
  nf->resolved = malloc(n);
  if (nf->resolved) snprintf(nf->resolved, n, "%s/%s", real, base);
  free(real);
}

static bool same_file(const named_file *a, const named_file *b) {
  if (a->exists != b->exists) return false;
  if (a->exists) return !a->chardev && a->dev == b->dev && a->ino == b->ino;
  if (a->resolved && b->resolved) return strcmp(a->resolved, b->resolved) == 0;
  return strcmp(a->path, b->path) == 0;
}

// --resume FILE --save FILE: the run continues in place (cli.h).
static bool resume_in_place(const named_file *in, const named_file *out) {
  return !in->output && out->output && !strcmp(in->flag, "resume") && !strcmp(out->flag, "save");
}

// Two flags of one run that name one file, where at least one of them
// writes it, lose data (a save overwriting the file another save wrote, or
// the checkpoint being read): refused before any work, exit 2.
static void check_distinct_files(const ct_cli *cli, const ct_cli_opt *opts, int n_opts) {
  named_file files[64];
  int n = 0;
  if (cli->metrics_path) files[n++] = (named_file){.flag = "metrics", .path = cli->metrics_path, .output = true};
  for (int k = 0; k < n_opts && n < 64; k++) {
    const ct_cli_opt *o = &opts[k];
    if ((o->kind != CT_OPT_OUTPUT && o->kind != CT_OPT_INPUT) || !o->out || !o->name) continue;
    const char *p = *(const char *const *)o->out;
    if (!p || !p[0]) continue;
    files[n++] = (named_file){.flag = o->name, .path = p, .output = o->kind == CT_OPT_OUTPUT};
  }
  for (int i = 0; i < n; i++) name_file(&files[i]);
  const named_file *clash[2] = {NULL, NULL};
  for (int i = 0; i < n && !clash[0]; i++)
    for (int j = i + 1; j < n && !clash[0]; j++) {
      const named_file *a = &files[i], *b = &files[j];
      if (!a->output && !b->output) continue; // two inputs may read one file
      if (resume_in_place(a, b) || resume_in_place(b, a)) continue;
      if (same_file(a, b)) clash[0] = a, clash[1] = b;
    }
  if (clash[0]) {
    fflush(stdout);
    const named_file *a = clash[0], *b = clash[1];
    fprintf(stderr, "%s: --%s %s and --%s %s name the same file: %s; give each its own file (nothing was done)\n",
            cli_program(cli), a->flag, a->path, b->flag, b->path,
            a->output && b->output ? "the second write would replace the first"
                                   : "the run would overwrite the file it reads");
  }
  for (int i = 0; i < n; i++) free(files[i].resolved);
  if (clash[0]) exit(2);
}

static void check_outputs(const ct_cli *cli, const ct_cli_opt *opts, int n_opts) {
  check_distinct_files(cli, opts, n_opts);
  check_output(cli, "metrics", cli->metrics_path);
  for (int k = 0; k < n_opts; k++)
    if (opts[k].kind == CT_OPT_OUTPUT && opts[k].out) check_output(cli, opts[k].name, *(const char *const *)opts[k].out);
}

void ct_cli_parse(ct_cli *cli, int argc, char **argv, const ct_cli_opt *opts, int n_opts) {
  if (!cli->program || !cli->program[0]) {
    const char *base = (argc > 0 && argv[0]) ? strrchr(argv[0], '/') : NULL;
    cli->program = base ? base + 1 : (argc > 0 && argv[0] ? argv[0] : "ct");
  }
  check_thread_env(cli);
  if (argc > 0 && argv && argv[0]) passive_openmp(argv);
  if (!cli->device_spec) cli->device_spec = "auto";
  if (n_opts < 0 || !opts) n_opts = 0;
  cli->device = ct_device_cpu();
  cli->fallback_reason[0] = '\0';

  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      print_usage(stdout, cli, opts, n_opts);
      exit(0);
    }
    if (strncmp(arg, "--", 2) != 0 || !arg[2])
      usage_error(cli, opts, n_opts, "unexpected argument \"%s\"", arg);

    // Split "--name=value"; the name is at most 63 characters.
    char name[64];
    const char *eq = strchr(arg + 2, '=');
    size_t len = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
    if (len >= sizeof name) usage_error(cli, opts, n_opts, "unknown flag \"%s\"", arg);
    memcpy(name, arg + 2, len);
    name[len] = '\0';
    const char *inline_value = eq ? eq + 1 : NULL;

    // What kind of flag is it?
    const ct_cli_opt *own = NULL;
    ct_opt_kind kind;
    if (!strcmp(name, "quick")) kind = CT_OPT_FLAG;
    else if (!strcmp(name, "device") || !strcmp(name, "metrics")) kind = CT_OPT_STRING;
    else if (!strcmp(name, "seed")) kind = CT_OPT_INT;
    else {
      for (int k = 0; k < n_opts && !own; k++)
        if (opts[k].name && !strcmp(opts[k].name, name)) own = &opts[k];
      if (!own) usage_error(cli, opts, n_opts, "unknown flag \"--%s\"", name);
      kind = own->kind;
    }

    const char *value = NULL;
    if (kind == CT_OPT_FLAG) {
      if (inline_value) usage_error(cli, opts, n_opts, "--%s takes no value, got \"%s\"", name, inline_value);
    } else if (inline_value) {
      value = inline_value;
    } else {
      // The next word is the value, unless it is missing or is itself a flag.
      if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-' && argv[i + 1][2]))
        usage_error(cli, opts, n_opts, "--%s expects a value", name);
      value = argv[++i];
    }

    if (!own) {
      if (!strcmp(name, "quick")) {
        cli->quick = true;
      } else if (!strcmp(name, "device")) {
        if (!device_spec_ok(value))
          usage_error(cli, opts, n_opts, "--device expects auto, cpu, cuda or cuda:N, got \"%s\"", value);
        cli->device_spec = value;
      } else if (!strcmp(name, "metrics")) {
        if (!value[0]) usage_error(cli, opts, n_opts, "--metrics expects a file path, got \"\"");
        cli->metrics_path = value;
      } else { // seed
        uint64_t s;
        if (!parse_u64(value, &s))
          usage_error(cli, opts, n_opts, "--seed expects a non-negative integer, got \"%s\"", value);
        cli->seed = s;
      }
      continue;
    }

    switch (own->kind) {
    case CT_OPT_FLAG:
      if (own->out) *(bool *)own->out = true;
      break;
    case CT_OPT_INT: {
      long v;
      if (!parse_long(value, &v)) usage_error(cli, opts, n_opts, "--%s expects an integer, got \"%s\"", name, value);
      // Chapters keep sizes and counts in int: nothing past int's range is meant.
      if (v > INT32_MAX || v < -INT32_MAX)
        usage_error(cli, opts, n_opts, "--%s expects an integer from %d to %d, got \"%s\"", name, -INT32_MAX,
                    INT32_MAX, value);
      if (own->out) *(long *)own->out = v;
      break;
    }
    case CT_OPT_DOUBLE: {
      double v;
      if (!parse_double(value, &v)) usage_error(cli, opts, n_opts, "--%s expects a finite number, got \"%s\"", name, value);
      if (own->out) *(double *)own->out = v;
      break;
    }
    case CT_OPT_STRING:
    case CT_OPT_OUTPUT:
    case CT_OPT_INPUT:
      if (own->kind != CT_OPT_STRING && !value[0]) usage_error(cli, opts, n_opts, "--%s expects a file path, got \"\"", name);
      if (own->out) *(const char **)own->out = value;
      break;
    }
  }
  check_outputs(cli, opts, n_opts);
}

// ---- the first line -------------------------------------------------------------

// The run's metrics, opened with the three facts every run records. Only
// rank 0 of a launched program (tools/launch sets $RANK) writes the file.
static void begin_metrics(ct_cli *cli) {
  const char *rank = getenv("RANK");
  bool rank0 = !rank || !strcmp(rank, "0");
  cli->metrics = ct_metrics_open(rank0 ? cli->metrics_path : NULL);
  if (!cli->metrics) ct_cli_die(cli);
  char dev[CT_DEVICE_STR_MAX];
  ct_metrics_str(cli->metrics, "device", ct_device_str(cli->device, dev));
  ct_metrics_num(cli->metrics, "seed", (double)cli->seed);
  ct_metrics_num(cli->metrics, "quick", cli->quick);
}

void ct_cli_begin(ct_cli *cli) {
  // Ctrl-C ends every chapter at a clean point: the end of a training step
  // (loops that poll ct_cli_interrupted) or the start of the next section.
  interrupted_program = cli_program(cli);
  catch_signals();
  const char *spec = cli->device_spec ? cli->device_spec : "auto";
  char why[sizeof cli->fallback_reason] = "";
  char preset[sizeof cli->fallback_reason]; // a chapter's own reason for "cpu" (set after ct_cli_parse)
  snprintf(preset, sizeof preset, "%s", cli->fallback_reason);
  int st = ct_device_select(spec, &cli->device, why, sizeof why);
  if (st != CT_OK) {
    fflush(stdout);
    const char *reason = ct_cuda_unavailable_reason();
    if (st == CT_ERR_UNAVAILABLE && reason && reason[0])
      fprintf(stderr, "%s: --device %s: CUDA unavailable: %s\n", cli_program(cli), spec, reason);
    else
      fprintf(stderr, "%s: --device %s: %s\n", cli_program(cli), spec, ct_last_error());
    exit(1);
  }

  cli->fallback_reason[0] = '\0';
  if (cli->device.type == CT_CUDA) {
    // Make the chosen GPU the current one, so that work issued without naming
    // a device (a chapter's own kernels, ct_cuda_current_device) lands there.
    if (ct_cuda_set_device(cli->device.index) != CT_OK) ct_cli_die(cli);
    char name[256];
    if (ct_cuda_get_device_name(cli->device.index, name, sizeof name) != CT_OK) ct_cli_die(cli);
    ct_manual_seed(cli->seed);
    printf("device: cuda:%d (%s)\n", cli->device.index, name);
  } else {
    ct_manual_seed(cli->seed);
    if (!strcmp(spec, "cpu") && preset[0]) { // the chapter chose the CPU itself and says why
      snprintf(cli->fallback_reason, sizeof cli->fallback_reason, "%s", preset);
      printf("device: cpu (%s)\n", cli->fallback_reason);
    } else if (!strcmp(spec, "cpu")) {
      printf("device: cpu\n");
    } else {
      // "auto" fell back: say why, in CUDA's own words.
      if (why[0]) {
        snprintf(cli->fallback_reason, sizeof cli->fallback_reason, "%s", why);
      } else {
        const char *reason = ct_cuda_unavailable_reason();
        snprintf(cli->fallback_reason, sizeof cli->fallback_reason, "CUDA unavailable: %s",
                 (reason && reason[0]) ? reason : "unknown reason");
      }
      printf("device: cpu (%s)\n", cli->fallback_reason);
    }
  }
  fflush(stdout);
  begin_metrics(cli);
}

void ct_cli_check_loss(const ct_cli *cli, double loss, int64_t first_step, int64_t last_step, double lr) {
  if (isfinite(loss)) return;
  fflush(stdout);
  char at[80];
  if (first_step < last_step)
    snprintf(at, sizeof at, "between steps %lld and %lld", (long long)first_step, (long long)last_step);
  else
    snprintf(at, sizeof at, "at step %lld", (long long)last_step);
  fprintf(stderr, "%s: the loss is %s %s: training diverged; lower --lr (this run: %g) or check the inputs "
          "for NaN/inf\n", cli_program(cli), isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf", at, lr);
  exit(1);
}

int64_t ct_cli_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t b;
  if (pages <= 0 || page <= 0 || !ct_checked_mul(pages, page, &b)) return INT64_MAX;
  return b;
}

void ct_cli_need_memory(const ct_cli *cli, const char *what, int n, const int64_t *factors, int64_t elsize) {
  int64_t bytes;
  bool ok = ct_checked_product(n, factors, &bytes) && ct_checked_mul(bytes, elsize, &bytes);
  int64_t mem = ct_cli_memory_bytes();
  if (ok && bytes <= mem) return;
  fflush(stdout);
  if (!ok)
    fprintf(stderr, "%s: %s: Storage size calculation overflowed (more than 2^63 - 1 bytes); use smaller values\n",
            cli_program(cli), what);
  else
    fprintf(stderr, "%s: %s take %.3g GiB, more than this machine's memory (%.3g GiB); use smaller values\n",
            cli_program(cli), what, (double)bytes / (1 << 30), (double)mem / (1 << 30));
  exit(2);
}

_Noreturn void ct_cli_die(const ct_cli *cli) {
  fflush(stdout);
  const char *msg = ct_last_error();
  if (!msg || !msg[0]) msg = "unknown error";
  // One prefix per message: a chapter's own message that already starts
  // "<program>: " is printed as it is (no "ch14: ch14: ...").
  const char *prog = cli_program(cli);
  size_t pl = strlen(prog);
  if (!strncmp(msg, prog, pl) && msg[pl] == ':' && msg[pl + 1] == ' ') fprintf(stderr, "%s\n", msg);
  else fprintf(stderr, "%s: %s\n", prog, msg);
  exit(1);
}

void ct_cli_launch(const char *program, int argc, char **argv, int nproc) {
  const char *rank = getenv("RANK");
  if (rank && *rank) {
    if (strcmp(rank, "0") != 0 && !freopen("/dev/null", "w", stdout)) {
      fprintf(stderr, "%s: rank %s: cannot silence stdout\n", program, rank);
      exit(1);
    }
    return;
  }
  const char *launch = getenv("CT_LAUNCH");
  char path[4096];
  if (!launch || !*launch) {
    snprintf(path, sizeof path, "%s/tools/launch", CT_SOURCE_DIR);
    launch = path;
  }
  if (nproc < 1 || nproc > 64) {
    fprintf(stderr, "%s: --nproc must be in [1, 64], got %d\n", program, nproc);
    exit(2);
  }
  char n[16];
  snprintf(n, sizeof n, "%d", nproc);
  char **args = calloc((size_t)argc + 4, sizeof *args);
  if (!args) {
    fprintf(stderr, "%s: out of memory\n", program);
    exit(1);
  }
  args[0] = (char *)launch;
  args[1] = "--nproc-per-node";
  args[2] = n;
  for (int i = 0; i < argc; ++i) args[3 + i] = argv[i];
  fflush(stdout);
  execv(launch, args);
  fprintf(stderr, "%s: cannot start the launcher %s: %s (set CT_LAUNCH, or run tools/launch --nproc-per-node %d %s)\n",
          program, launch, strerror(errno), nproc, argv[0]);
  exit(1);
}

// ---- Ctrl-C ------------------------------------------------------------------------------------
static volatile sig_atomic_t interrupts; // SIGINTs and SIGTERMs received since ct_cli_catch_interrupt

// SIGTERM (what `timeout`, schedulers and `kill` send) is handled as Ctrl-C
// is: the first ends the run after this step, the second at once.
static volatile sig_atomic_t first_signal = SIGINT;

// A chapter whose loop saves and stops by itself (ct_cli_catch_interrupt)
// gets all the time it needs. Every other program (ct_cli_begin's default)
// stops at its next poll or section, and at the latest CT_STOP_GRACE_S
// seconds after the first signal: a loop that never polls is not deaf to
// Ctrl-C (the flag fuzzer found ch12 --reps 2147483647 running on).
#define CT_STOP_GRACE_S 5
#define CTI_STR_(x) #x
#define CTI_STR(x) CTI_STR_(x)
static volatile sig_atomic_t managed;

static void on_deadline(int sig) {
  (void)sig;
  static const char msg[] = "no clean stopping point within " CTI_STR(CT_STOP_GRACE_S) " s of the signal: quitting now\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
  cti_atomic_unlink_pending(); // a save cut short leaves no temporary; its target is intact
  _exit(128 + first_signal);
}

static void on_sigint(int sig) {
  if (interrupts++ == 0) {
    first_signal = sig;
    if (!managed) alarm(CT_STOP_GRACE_S);
    static const char msg_int[] = "\ninterrupted: stopping after this step (Ctrl-C again to quit now)\n";
    static const char msg_term[] = "\nterminated (SIGTERM): stopping after this step (a second SIGTERM or Ctrl-C quits now)\n";
    ssize_t w = sig == SIGTERM ? write(STDERR_FILENO, msg_term, sizeof msg_term - 1)
                               : write(STDERR_FILENO, msg_int, sizeof msg_int - 1);
    (void)w;
    return;
  }
  cti_atomic_unlink_pending(); // a save cut short leaves no temporary; its target is intact
  _exit(128 + sig);             // 130 for SIGINT, 143 for SIGTERM, what a shell reports
}

static void catch_signals(void) {
  struct sigaction al;
  memset(&al, 0, sizeof al);
  al.sa_handler = on_deadline;
  sigemptyset(&al.sa_mask);
  sigaction(SIGALRM, &al, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART; // reads and waits go on; the loop polls the flag
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

void ct_cli_catch_interrupt(void) {
  managed = 1; // this program's loop stops and saves by itself: no deadline
  alarm(0);
  catch_signals();
}

// The test aid: counts calls and raises SIGINT (SIGTERM with $CT_TEST_SIGNAL=TERM) at the ones
// $CT_TEST_SIGINT_AFTER names.
static void test_sigint(void) {
  static long calls;
  const char *spec = getenv("CT_TEST_SIGINT_AFTER");
  if (!spec) return;
  ++calls;
  for (const char *p = spec; *p;) {
    char *end;
    long at = strtol(p, &end, 10);
    if (end == p) return;
    if (at == calls) raise(getenv("CT_TEST_SIGNAL") && !strcmp(getenv("CT_TEST_SIGNAL"), "TERM") ? SIGTERM : SIGINT);
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return;
  }
}

int ct_cli_interrupt_status(void) { return 128 + first_signal; }

bool ct_cli_interrupted(void) {
  test_sigint();
  return interrupts > 0;
}

bool ct_cli_interrupt_pending(void) { return interrupts > 0; }

// Stops the run now: after Ctrl-C (or SIGTERM), at a point where nothing is
// half-written; exit 130 (143 for SIGTERM), what a shell reports.
static _Noreturn void stop_now(const char *program, const char *where) {
  fflush(stdout);
  fprintf(stderr, "%s: %s: stopped %s; nothing more was run\n", program,
          first_signal == SIGTERM ? "terminated" : "interrupted", where);
  cti_atomic_unlink_pending();
  exit(ct_cli_interrupt_status());
}

void ct_cli_exit_if_interrupted(const ct_cli *cli) {
  if (ct_cli_interrupted()) stop_now(cli ? cli_program(cli) : interrupted_program, "after this step");
}

int ct_path_join(char *buf, size_t cap, const char *flag, const char *dir, const char *name) {
  int n = snprintf(buf, cap, "%s/%s", dir, name);
  if (n >= 0 && (size_t)n < cap) return CT_OK;
  if (cap) buf[0] = '\0';
  // The fix first: the folder, which may be very long, goes last.
  return ct_fail(CT_ERR_VALUE, "%s: the path of %s in this folder would be %d bytes, more than the %zu this "
                 "program takes; use a shorter folder than %s", flag, name, n, cap ? cap - 1 : 0, dir);
}

void ct_cli_check_path(const ct_cli *cli, const char *flag, const char *dir, const char *name) {
  char buf[PATH_MAX];
  if (!dir) return;
  if (ct_path_join(buf, sizeof buf, flag, dir, name) != CT_OK) ct_cli_die(cli);
  // and the folder can take the file, as the writer will write it (nothing is created)
  if (cti_atomic_check(flag, buf) != CT_OK) ct_cli_die(cli);
}

void ct_cli_section(const char *name) {
  // A section starts with nothing in flight: the place to honour a Ctrl-C
  // (the flag is read directly, so the test aid's call count is unchanged).
  if (interrupts > 0) {
    char where[160];
    snprintf(where, sizeof where, "before section \"%.120s\"", name);
    stop_now(interrupted_program, where);
  }
  printf("== %s ==\n", name);
  fflush(stdout);
}

// ---- metrics ------------------------------------------------------------------------

// Values are rendered by the runtime's JSON writer (strbuf.h) and the file
// is written by its atomic writer (atomic_file.h).
typedef struct metric {
  char *key;
  char *json; // the value, already rendered as JSON
} metric;

struct ct_metrics {
  char *path; // NULL: a sink that writes nothing
  metric *items;
  int n, cap;
  bool oom;
};

ct_metrics *ct_metrics_open(const char *path) {
  ct_metrics *m = calloc(1, sizeof *m);
  if (!m) {
    ct_fail(CT_ERR_OOM, "ct_metrics_open: out of memory");
    return NULL;
  }
  if (path) {
    m->path = strdup(path);
    if (!m->path) {
      free(m);
      ct_fail(CT_ERR_OOM, "ct_metrics_open: out of memory");
      return NULL;
    }
  }
  return m;
}

// Takes ownership of the rendered value; a key given twice keeps its first
// place and its last value.
static void metrics_put(ct_metrics *m, const char *key, cti_strbuf *value) {
  char *json = cti_sb_take(value);
  if (!json) {
    m->oom = true;
    return;
  }
  for (int i = 0; i < m->n; i++) {
    if (!strcmp(m->items[i].key, key)) {
      free(m->items[i].json);
      m->items[i].json = json;
      return;
    }
  }
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 16;
    metric *p = realloc(m->items, (size_t)cap * sizeof *p);
    if (!p) {
      m->oom = true;
      free(json);
      return;
    }
    m->items = p;
    m->cap = cap;
  }
  char *k = strdup(key);
  if (!k) {
    m->oom = true;
    free(json);
    return;
  }
  m->items[m->n].key = k;
  m->items[m->n].json = json;
  m->n++;
}

void ct_metrics_num(ct_metrics *m, const char *key, double value) {
  if (!m || !m->path || !key) return;
  cti_strbuf v = {0};
  cti_json_number(&v, value);
  metrics_put(m, key, &v);
}

void ct_metrics_str(ct_metrics *m, const char *key, const char *value) {
  if (!m || !m->path || !key) return;
  cti_strbuf v = {0};
  cti_json_string(&v, value);
  metrics_put(m, key, &v);
}

void ct_metrics_series(ct_metrics *m, const char *key, const double *values, int n) {
  if (!m || !m->path || !key) return;
  cti_strbuf v = {0};
  cti_sb_puts(&v, "[");
  for (int i = 0; values && i < n; i++) {
    if (i) cti_sb_puts(&v, ", ");
    cti_json_number(&v, values[i]);
  }
  cti_sb_puts(&v, "]");
  metrics_put(m, key, &v);
}

// Whether fmt's first conversion takes a double (no length modifier): %f %e %g %a, any case.
static bool first_conversion_is_double(const char *fmt) {
  for (const char *p = fmt; (p = strchr(p, '%')); ) {
    if (p[1] == '%') {
      p += 2;
      continue;
    }
    ++p;
    p += strspn(p, "-+ #0'");   // flags
    p += strspn(p, "0123456789*"); // width
    if (*p == '.') ++p, p += strspn(p, "0123456789*");
    return *p && strchr("fFeEgGaA", *p);
  }
  return false;
}

void ct_metrics_print(ct_metrics *m, const char *key, const char *fmt, ...) {
  va_list ap, first;
  va_start(ap, fmt);
  va_copy(first, ap);
  vprintf(fmt, ap);
  if (first_conversion_is_double(fmt)) ct_metrics_num(m, key, va_arg(first, double));
  va_end(first);
  va_end(ap);
}

static void metrics_free(ct_metrics *m) {
  for (int i = 0; i < m->n; i++) {
    free(m->items[i].key);
    free(m->items[i].json);
  }
  free(m->items);
  free(m->path);
  free(m);
}

int ct_metrics_close(ct_metrics *m) {
  if (!m) return CT_OK;
  if (!m->path) {
    metrics_free(m);
    return CT_OK;
  }
  cti_strbuf doc = {0};
  cti_sb_puts(&doc, "{");
  for (int i = 0; i < m->n; i++) {
    cti_sb_puts(&doc, i ? ",\n  " : "\n  ");
    cti_json_string(&doc, m->items[i].key);
    cti_sb_puts(&doc, ": ");
    cti_sb_puts(&doc, m->items[i].json);
  }
  cti_sb_puts(&doc, m->n ? "\n}\n" : "}\n");

  int rc;
  if (m->oom || doc.oom)
    rc = ct_fail(CT_ERR_OOM, "ct_metrics_close: %s: out of host memory building the JSON", m->path);
  else
    rc = cti_write_file_atomically("ct_metrics_close", m->path, doc.s, doc.len);
  cti_sb_free(&doc);
  metrics_free(m);
  return rc;
}
