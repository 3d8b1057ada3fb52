// SPDX-License-Identifier: MIT
//
// cc: the CPU path, Inductor's way. The generated C is written to a
// temporary file in the cache directory, the system C compiler builds a
// shared object from it, and the runtime loads that with dlopen.
//
//   cc -O3 -std=c11 -fPIC -shared -fopenmp -fno-math-errno -fno-trapping-math -ffp-contract=off
//      [$CT_JIT_CFLAGS] -o <dir>/tmp-<pid>-<n>.so <dir>/tmp-<pid>-<n>.c -lm
//
// The compiler is `cc` on PATH, or $CT_JIT_CC. It runs through cti_jit_run:
// an argv, never a shell string, so nothing in a path or an expression is
// ever interpreted. -ffp-contract=off keeps a*b+c two roundings, as the
// runtime's own ops compute it (no fused multiply-add), and no -ffast-math:
// NaN and infinity behave as in the unfused chain; -fno-trapping-math only
// lets the vectorizer turn the clamps of the float math into selects (no
// code reads the floating-point flags; values are unchanged). Not
// -march=native, so an entry runs on any machine of the architecture (and
// under Valgrind): the generated loops carry their own AVX2 clone, picked
// when the entry is loaded (codegen.c); add flags with CT_JIT_CFLAGS (the
// flags are part of the key).
//
// Loading: the verified bytes of an entry are written to a fresh file
// (O_EXCL, 0600) in the cache directory, dlopen'ed, and the file is removed
// at once; so what runs is exactly what was verified. A unique name per load
// matters: dlopen returns an already loaded object for a name it has seen.
#define _GNU_SOURCE // dlopen's RTLD_ flags, mkstemps
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> // memfd_create
#include <unistd.h>

#include "error.h"
#include "jit_impl.h"

#define CC_FLAGS "-O3 -std=c11 -fPIC -shared -fopenmp -fno-math-errno -fno-trapping-math -ffp-contract=off" // and -lm, last
#define MAX_FLAGS 48
#define OUTPUT_CAP (64u << 10)

static const char *cc_program(void) {
  const char *e = getenv("CT_JIT_CC");
  return e && *e ? e : "cc";
}

// The compiler's identity, asked once per program name and CT_JIT_CFLAGS.
static pthread_mutex_t id_lock = PTHREAD_MUTEX_INITIALIZER;
static char id_program[512], id_extra[512], id_text[512], id_flags[1024];

int cti_jit_cc_identity(const char *op, const char **compiler, const char **flags) {
  const char *prog = cc_program(), *extra = getenv("CT_JIT_CFLAGS");
  if (!extra) extra = "";
  int rc = CT_OK;
  pthread_mutex_lock(&id_lock);
  if (strcmp(prog, id_program) != 0 || strcmp(extra, id_extra) != 0 || !id_text[0]) {
    char *argv[] = {(char *)prog, "--version", NULL};
    char *out = NULL;
    int code = 0;
    rc = cti_jit_run(op, argv, &out, 4096, &code);
    if (rc == CT_ERR_UNAVAILABLE) {
      rc = ct_fail(CT_ERR_UNAVAILABLE,
                   "%s: no C compiler: %s was not found%s. The CPU path of ct_jit compiles the generated C "
                   "with the system compiler: install gcc or clang (apt-get install gcc), or set CT_JIT_CC to "
                   "one", op, prog, strchr(prog, '/') ? "" : " on PATH");
    } else if (rc == CT_OK && code != 0) {
      rc = ct_fail(CT_ERR_UNAVAILABLE, "%s: the C compiler %s does not run (`%s --version` exited %d): %.300s", op,
                   prog, prog, code, out);
    }
    if (rc == CT_OK) {
      size_t n = strcspn(out, "\n");
      snprintf(id_text, sizeof id_text, "%s: %.*s", prog, (int)(n < 400 ? n : 400), out);
      snprintf(id_program, sizeof id_program, "%s", prog);
      snprintf(id_extra, sizeof id_extra, "%s", extra);
      snprintf(id_flags, sizeof id_flags, "%s%s%s -o OUT SRC -lm", CC_FLAGS, *extra ? " " : "", extra);
    } else {
      id_text[0] = '\0';
    }
    free(out);
  }
  *compiler = id_text;
  *flags = id_flags;
  pthread_mutex_unlock(&id_lock);
  return rc;
}

// Splits the flags (spaces and tabs only; no quoting: each word is one argument).
static int split_flags(const char *op, char *flags, char **argv, int max) {
  int n = 0;
  char *save = NULL;
  for (char *s = strtok_r(flags, " \t", &save); s; s = strtok_r(NULL, " \t", &save)) {
    if (n == max) return ct_fail(CT_ERR_VALUE, "%s: more than %d compiler flags", op, max), -1;
    argv[n++] = s;
  }
  return n;
}

// A fresh file "<dir>/<prefix>-<pid>-XXXXXX<suffix>", created 0600; its fd.
static int fresh_file(const char *op, const char *dir, const char *prefix, const char *suffix, char *path,
                      size_t len) {
  if (snprintf(path, len, "%s/%s-%ld-XXXXXX%s", dir, prefix, (long)getpid(), suffix) >= (int)len)
    return ct_fail(CT_ERR_VALUE, "%s: cache path too long", op), -1;
  int fd = mkstemps(path, (int)strlen(suffix)); // O_EXCL, mode 0600
  if (fd < 0) return ct_fail(CT_ERR_IO, "%s: cannot create a file in %s: %s", op, dir, strerror(errno)), -1;
  return fd;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

static int read_file(const char *op, const char *path, unsigned char **data, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return ct_fail(CT_ERR_IO, "%s: %s: %s", op, path, strerror(errno));
  cti_strbuf b = {0};
  char buf[65536];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) cti_sb_putn(&b, buf, r);
  int bad = ferror(f);
  fclose(f);
  if (bad || b.oom) {
    cti_sb_free(&b);
    return ct_fail(bad ? CT_ERR_IO : CT_ERR_OOM, "%s: reading %s failed", op, path);
  }
  *n = b.len;
  *data = (unsigned char *)cti_sb_take(&b);
  return *data ? CT_OK : ct_fail(CT_ERR_OOM, "%s: out of memory", op);
}

int cti_jit_cc_compile(const char *op, const char *dir, const char *source, unsigned char **so, size_t *n) {
  *so = NULL;
  *n = 0;
  const char *compiler, *flags;
  int rc = cti_jit_cc_identity(op, &compiler, &flags);
  if (rc) return rc;
  // A fresh private directory (mkdtemp: mode 0700, a new name) for the
  // source and the object: no file of the build can be planted or swapped.
  char bdir[4200], src[4300], obj[4300];
  if (snprintf(bdir, sizeof bdir, "%s/build-%ld-XXXXXX", dir, (long)getpid()) >= (int)sizeof bdir)
    return ct_fail(CT_ERR_VALUE, "%s: cache path too long", op);
  if (!mkdtemp(bdir)) return ct_fail(CT_ERR_IO, "%s: cannot create a directory in %s: %s", op, dir, strerror(errno));
  int fd = fresh_file(op, bdir, "tmp", ".c", src, sizeof src);
  if (fd < 0) {
    rmdir(bdir);
    return ct_last_status();
  }
  int werr = write_all(fd, source, strlen(source));
  close(fd);
  if (werr) {
    unlink(src);
    rmdir(bdir);
    return ct_fail(CT_ERR_IO, "%s: writing %s: %s", op, src, strerror(errno));
  }
  snprintf(obj, sizeof obj, "%.*s.so", (int)(strlen(src) - 2), src); // tmp-<pid>-XXXXXX.so beside it
  char flagbuf[1024]; // the flags before " -o OUT SRC -lm" (the key spells the whole command)
  snprintf(flagbuf, sizeof flagbuf, "%.*s", (int)(strstr(flags, " -o OUT SRC") - flags), flags);
  char *argv[MAX_FLAGS + 6];
  int k = 0;
  argv[k++] = (char *)cc_program();
  int nf = split_flags(op, flagbuf, argv + k, MAX_FLAGS);
  if (nf < 0) {
    unlink(src);
    rmdir(bdir);
    return ct_last_status();
  }
  k += nf;
  argv[k++] = "-o";
  argv[k++] = obj;
  argv[k++] = src;
  argv[k++] = "-lm"; // after the source: expf binds to libm's current version, not its old errno-setting wrapper
  argv[k] = NULL;
  char *out = NULL;
  int code = 0;
  rc = cti_jit_run(op, argv, &out, OUTPUT_CAP, &code);
  if (rc == CT_OK && code != 0)
    rc = ct_fail(CT_ERR_VALUE, "%s: the C compiler failed (%s, exit %d) on the generated source; it said:\n%.700s",
                 op, argv[0], code, out);
  if (rc == CT_OK) rc = read_file(op, obj, so, n);
  free(out);
  unlink(src);
  unlink(obj);
  rmdir(bdir);
  return rc;
}

typedef struct cc_handle {
  void *dl; // dlopen's handle
  int fd;   // the memory file it was loaded from, open while it is loaded; -1 if none
} cc_handle;

int cti_jit_cc_load(const char *op, const char *dir, const unsigned char *so, size_t n, void **handle,
                    cti_jit_cpu_fn *fn) {
  *handle = NULL;
  *fn = NULL;
  // The verified bytes go into an anonymous memory file that only this
  // process can reach, loaded by its descriptor: no path anyone could
  // change between the check and the load. (Without memfd_create: a fresh
  // 0600 file in the trusted cache directory.)
  char path[4200];
  int fd = memfd_create("ct-jit-kernel", MFD_CLOEXEC);
  bool by_fd = fd >= 0;
  if (!by_fd) fd = fresh_file(op, dir, "load", ".so", path, sizeof path);
  else snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (fd < 0) return ct_last_status();
  int werr = write_all(fd, so, n);
  if (werr) {
    int e = errno;
    close(fd);
    if (!by_fd) unlink(path);
    return ct_fail(CT_ERR_IO, "%s: writing %s: %s", op, path, strerror(e));
  }
  if (!by_fd) close(fd);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  const char *why = h ? NULL : dlerror();
  char msg[512];
  if (why) snprintf(msg, sizeof msg, "%s", why);
  if (!by_fd) unlink(path);
  else if (!h) close(fd);
  // A loaded kernel keeps its memory file open: the loader knows a library
  // by its name, /proc/self/fd/N, so N must not be reused while it is loaded.
  if (!h) return ct_fail(CT_ERR_VALUE, "%s: the compiled kernel does not load: %s", op, msg);
  void *sym = dlsym(h, CTI_JIT_KERNEL_NAME);
  if (!sym) {
    dlclose(h);
    if (by_fd) close(fd);
    return ct_fail(CT_ERR_VALUE, "%s: the compiled object has no %s", op, CTI_JIT_KERNEL_NAME);
  }
  cc_handle *ch = malloc(sizeof *ch);
  if (!ch) {
    dlclose(h);
    if (by_fd) close(fd);
    return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  }
  ch->dl = h;
  ch->fd = by_fd ? fd : -1;
  *handle = ch;
  memcpy(fn, &sym, sizeof sym); // object pointer -> function pointer, as POSIX allows
  return CT_OK;
}

void cti_jit_cc_unload(void *handle) {
  cc_handle *ch = handle;
  if (!ch) return;
  dlclose(ch->dl);
  if (ch->fd >= 0) close(ch->fd);
  free(ch);
}
