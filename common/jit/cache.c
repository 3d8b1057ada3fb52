// SPDX-License-Identifier: MIT
//
// cache: where a compiled kernel comes from, fastest first.
//
//   1. memory: a table of the kernels this process has loaded, by key and
//      device (a hit costs a hash of the generated source);
//   2. disk: one file per key in the cache directory, read whole, verified,
//      and only then loaded;
//   3. the compiler (cc.c, nvrtc.c), whose output is written to disk
//      atomically and loaded from the same bytes.
//
// The key is the SHA-256 of a text that names everything the compiled code
// depends on: the backend, the compiler's version, its flags, the target
// (machine or GPU architecture) and the generated source, which itself
// spells the expression, the dtypes and the layout of the arguments.
//
// Invariants of the disk cache:
//   - the directory is ours alone: created 0700, and refused (with the
//     reason and the fix) when it is a symbolic link, not a directory, owned
//     by another user, or writable by group or others;
//   - an entry is `header + payload`; the header repeats the full key and
//     holds the payload's size and a SHA-256 over key and payload. Nothing
//     is loaded from an entry whose header, key, size or hash disagrees: it
//     is counted as rejected, rebuilt and replaced;
//   - entries are replaced whole (io/atomic_file.h), so a reader sees the old
//     entry or the new one, never half of one.
// The entry hash detects corruption and tampering by anything that cannot
// also rewrite the hash; a process running as the same user could do both,
// which is why the directory must be the user's alone.
#define _GNU_SOURCE // uname, getpwuid_r
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "atomic_file.h"
#include "error.h"
#include "jit_impl.h"

#define ENTRY_MAGIC "ct-jit-entry 1\n"
#define ENTRY_MAX_BYTES (256u << 20) // larger files are not entries

// ---- keys ---------------------------------------------------------------------
void cti_jit_key_make(cti_jit_key *k, const char *backend, const char *compiler, const char *flags,
                      const char *target, const char *source) {
  cti_strbuf b = {0};
  char src_hex[65];
  cti_sha256_hex(source, strlen(source), src_hex);
  cti_sb_printf(&b, "ct-jit 1\nbackend %s\ncompiler %s\nflags %s\ntarget %s\nsource-sha256 %s\n", backend, compiler,
                flags, target, src_hex);
  k->text = cti_sb_take(&b);
  if (k->text) cti_sha256_hex(k->text, strlen(k->text), k->hex);
  else k->hex[0] = '\0';
}

void cti_jit_key_free(cti_jit_key *k) {
  free(k->text);
  k->text = NULL;
}

// ---- the directory --------------------------------------------------------------
static int default_dir(const char *op, char *buf, size_t len) {
  const char *e = getenv("CT_JIT_CACHE");
  if (e && *e) return snprintf(buf, len, "%s", e) < (int)len ? CT_OK : ct_fail(CT_ERR_VALUE, "%s: CT_JIT_CACHE is too long", op);
  e = getenv("XDG_CACHE_HOME");
  if (e && e[0] == '/') return snprintf(buf, len, "%s/ct-jit", e) < (int)len ? CT_OK : ct_fail(CT_ERR_VALUE, "%s: XDG_CACHE_HOME is too long", op);
  e = getenv("HOME");
  char pwbuf[1024];
  struct passwd pw, *res = NULL;
  if ((!e || !*e) && getpwuid_r(getuid(), &pw, pwbuf, sizeof pwbuf, &res) == 0 && res) e = res->pw_dir;
  if (!e || !*e)
    return ct_fail(CT_ERR_VALUE, "%s: no cache directory: set CT_JIT_CACHE (or XDG_CACHE_HOME or HOME)", op);
  return snprintf(buf, len, "%s/.cache/ct-jit", e) < (int)len ? CT_OK : ct_fail(CT_ERR_VALUE, "%s: HOME is too long", op);
}

// mkdir -p, every directory it creates with mode 0700.
static int make_dirs(const char *op, const char *path) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return ct_fail(CT_ERR_VALUE, "%s: path too long", op);
  for (char *s = p + 1;; ++s) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, 0700) != 0 && errno != EEXIST)
        return ct_fail(CT_ERR_IO, "%s: cannot create the cache directory %s: %s", op, p, strerror(errno));
      *s = c;
      if (!c) return CT_OK;
    }
  }
}

// Every directory from / down to the cache (its real path, walked with
// openat(O_NOFOLLOW|O_DIRECTORY), so nothing can be swapped in between two
// checks) must be owned by root or by this user and writable by nobody
// else: otherwise whoever could write there could rename the cache away
// and put their own in its place. One exception, for /tmp and its like: a
// directory with the sticky bit that others may write is accepted, since
// there no one can rename or remove an entry they do not own, and the
// directory below it must itself pass the rule (this user's or root's,
// writable by no one else): a name someone else created first is theirs and
// refused.
static int trusted_path(const char *op, const char *shown, const char *real) {
  int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ct_fail(CT_ERR_IO, "%s: cannot open /: %s", op, strerror(errno));
  uid_t me = geteuid();
  char cur[4096] = "/";
  const char *p = real;
  for (;;) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int e = errno;
      close(fd);
      return ct_fail(CT_ERR_IO, "%s: %s: %s", op, cur, strerror(e));
    }
    bool loose = st.st_mode & (S_IWGRP | S_IWOTH);
    const char *why = NULL;
    if (st.st_uid != me && st.st_uid != 0) why = "belongs to another user";
    else if (loose && !(st.st_mode & S_ISVTX)) why = "is writable by others than you and root";
    if (why) {
      close(fd);
      return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s is not safe: %s (uid %u, mode %04o) %s; refusing to "
                     "load code from it (set CT_JIT_CACHE to a directory of your own, under your home)",
                     op, shown, cur, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), why);
    }
    while (*p == '/') p++;
    if (!*p) break;
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char name[256];
    if (n >= sizeof name) {
      close(fd);
      return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s has a name longer than 255 bytes", op, shown);
    }
    memcpy(name, p, n);
    name[n] = '\0';
    int next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    close(fd);
    size_t cl = strlen(cur);
    snprintf(cur + cl, sizeof cur - cl, "%s%s", cl > 1 ? "/" : "", name);
    if (next < 0)
      return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s: %s: %s (a symbolic link or a file appeared while "
                     "checking it?)", op, shown, cur, strerror(err));
    fd = next;
    p += n;
  }
  close(fd);
  return CT_OK;
}

int cti_jit_cache_dir(const char *op, char *buf, size_t len) {
  int rc = default_dir(op, buf, len);
  if (rc) return rc;
  size_t n = strlen(buf);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
  if ((rc = make_dirs(op, buf))) return rc;
  struct stat st;
  if (lstat(buf, &st) != 0) return ct_fail(CT_ERR_IO, "%s: cache directory %s: %s", op, buf, strerror(errno));
  if (S_ISLNK(st.st_mode))
    return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s is a symbolic link; refusing it (point CT_JIT_CACHE "
                   "at a directory of your own)", op, buf);
  if (!S_ISDIR(st.st_mode))
    return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s is not a directory", op, buf);
  if (st.st_uid != geteuid())
    return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s belongs to uid %u, not to you (uid %u); refusing "
                   "to load code from it (set CT_JIT_CACHE to a directory of your own)", op, buf,
                   (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return ct_fail(CT_ERR_VALUE, "%s: the cache directory %s is writable by %s (mode %04o); refusing to load "
                   "code from it (chmod 700 %s)", op, buf,
                   (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "group and others"
                   : st.st_mode & S_IWGRP                           ? "its group"
                                                                    : "others",
                   (unsigned)(st.st_mode & 07777), buf);
  char *real = realpath(buf, NULL);
  if (!real) return ct_fail(CT_ERR_IO, "%s: cache directory %s: %s", op, buf, strerror(errno));
  int rc2 = trusted_path(op, buf, real);
  free(real);
  return rc2;
}

int cti_jit_entry_path(const char *op, const cti_jit_key *k, ct_device_type type, char *buf, size_t len) {
  char dir[4096];
  int rc = cti_jit_cache_dir(op, dir, sizeof dir);
  if (rc) return rc;
  if (snprintf(buf, len, "%s/%.32s.%s", dir, k->hex, type == CT_CPU ? "so.ctjit" : "ptx.ctjit") >= (int)len)
    return ct_fail(CT_ERR_VALUE, "%s: cache path too long", op);
  return CT_OK;
}

// ---- entries -----------------------------------------------------------------------
// SHA-256 over the key's hex digits and the payload.
static void entry_hash(const cti_jit_key *k, const void *payload, size_t n, char hex[65]) {
  cti_sha256 c;
  unsigned char d[32];
  cti_sha256_init(&c);
  cti_sha256_update(&c, k->hex, 64);
  cti_sha256_update(&c, payload, n);
  cti_sha256_final(&c, d);
  for (int i = 0; i < 32; ++i) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

int cti_jit_entry_write(const char *op, const char *path, const cti_jit_key *k, const void *payload, size_t n) {
  char hex[65];
  entry_hash(k, payload, n, hex);
  cti_strbuf b = {0};
  cti_sb_printf(&b, ENTRY_MAGIC "key %s\nsha256 %s\nbytes %zu\n\n", k->hex, hex, n);
  cti_sb_putn(&b, payload, n);
  if (b.oom) {
    cti_sb_free(&b);
    return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  }
  int rc = cti_write_file_atomically(op, path, b.s, b.len);
  cti_sb_free(&b);
  return rc;
}

// Reads a whole regular file (not following a final symbolic link).
static int read_all(const char *op, const char *path, unsigned char **data, size_t *n) {
  *data = NULL;
  *n = 0;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); // a FIFO: no wait for a writer
  if (fd < 0) {
    if (errno == ENOENT) return 1;
    if (errno == ELOOP) return ct_fail(CT_ERR_VALUE, "%s: %s is a symbolic link, not an entry", op, path);
    return ct_fail(CT_ERR_IO, "%s: %s: %s", op, path, strerror(errno));
  }
  struct stat st;
  int rc = CT_OK;
  if (fstat(fd, &st) != 0) rc = ct_fail(CT_ERR_IO, "%s: %s: %s", op, path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = ct_fail(CT_ERR_VALUE, "%s: %s is not a regular file (%s)", op, path,
                 S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
  else if ((uint64_t)st.st_size > ENTRY_MAX_BYTES)
    rc = ct_fail(CT_ERR_VALUE, "%s: %s is larger than any entry (%lld bytes)", op, path, (long long)st.st_size);
  unsigned char *p = rc ? NULL : malloc((size_t)st.st_size + 1);
  if (!rc && !p) rc = ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  size_t got = 0;
  while (!rc && got < (size_t)st.st_size) {
    ssize_t r = read(fd, p + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = ct_fail(CT_ERR_IO, "%s: reading %s: %s", op, path, strerror(errno));
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (rc) {
    free(p);
    return rc;
  }
  *data = p;
  *n = got;
  return CT_OK;
}

// The value of header line "<name> <value>\n" at *at, advancing *at; NULL if absent.
static const char *header_field(const unsigned char *d, size_t n, size_t *at, const char *name, char *val,
                                size_t vlen) {
  size_t nl = strlen(name);
  if (*at + nl + 1 > n || memcmp(d + *at, name, nl) != 0 || d[*at + nl] != ' ') return NULL;
  size_t i = *at + nl + 1, j = 0;
  while (i < n && d[i] != '\n' && j + 1 < vlen) val[j++] = (char)d[i++];
  if (i >= n || d[i] != '\n') return NULL;
  val[j] = '\0';
  *at = i + 1;
  return val;
}

int cti_jit_entry_read(const char *op, const char *path, const cti_jit_key *k, unsigned char **payload, size_t *n) {
  *payload = NULL;
  *n = 0;
  unsigned char *d;
  size_t len;
  int rc = read_all(op, path, &d, &len);
  if (rc) return rc;
  size_t at = strlen(ENTRY_MAGIC);
  char key[80], hash[80], bytes[32];
  const char *why = NULL;
  if (len < at || memcmp(d, ENTRY_MAGIC, at) != 0) why = "it does not start as a ct-jit entry";
  else if (!header_field(d, len, &at, "key", key, sizeof key) || !header_field(d, len, &at, "sha256", hash, sizeof hash) ||
           !header_field(d, len, &at, "bytes", bytes, sizeof bytes) || at >= len || d[at] != '\n')
    why = "its header is damaged";
  else if (strcmp(key, k->hex) != 0) why = "it was written for another key";
  unsigned long long want = 0;
  if (!why) {
    ++at; // the blank line
    char *end;
    errno = 0;
    want = strtoull(bytes, &end, 10);
    if (*end || errno || want != len - at) why = "its size is wrong (truncated or extended)";
  }
  if (!why) {
    char got[65];
    entry_hash(k, d + at, len - at, got);
    if (strcmp(got, hash) != 0) why = "its content does not match its SHA-256 (changed after it was written)";
  }
  if (why) {
    free(d);
    return ct_fail(CT_ERR_VALUE, "%s: cache entry %s rejected: %s", op, path, why);
  }
  memmove(d, d + at, len - at); // the payload to the front: one buffer for the caller to free
  *payload = d;
  *n = len - at;
  return CT_OK;
}

// ---- the memory table and the counters ----------------------------------------------
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cti_jit_kernel *table;
static uint64_t generation = 1;
static ct_jit_stats stats;

ct_jit_stats ct_jit_get_stats(void) {
  pthread_mutex_lock(&lock);
  ct_jit_stats s = stats;
  pthread_mutex_unlock(&lock);
  return s;
}

void ct_jit_reset_stats(void) {
  pthread_mutex_lock(&lock);
  memset(&stats, 0, sizeof stats);
  pthread_mutex_unlock(&lock);
}

static void unload(cti_jit_kernel *k) {
  if (k->device.type == CT_CPU) cti_jit_cc_unload(k->handle);
  else cti_jit_cuda_unload(k->device.index, k->handle);
  free(k);
}

void ct_jit_clear_memory_cache(void) {
  pthread_mutex_lock(&lock);
  cti_jit_kernel *k = table;
  table = NULL;
  ++generation;
  pthread_mutex_unlock(&lock);
  while (k) {
    cti_jit_kernel *next = k->next;
    unload(k);
    k = next;
  }
}

uint64_t cti_jit_generation(void) {
  pthread_mutex_lock(&lock);
  uint64_t g = generation;
  pthread_mutex_unlock(&lock);
  return g;
}

void cti_jit_count_call(bool memory_hit) {
  pthread_mutex_lock(&lock);
  stats.calls++;
  stats.memory_hits += memory_hit;
  pthread_mutex_unlock(&lock);
}

static cti_jit_kernel *find(const char *hex, ct_device dev) {
  for (cti_jit_kernel *k = table; k; k = k->next)
    if (!strcmp(k->hex, hex) && ct_device_eq(k->device, dev)) return k;
  return NULL;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---- where a kernel comes from ---------------------------------------------------------
int cti_jit_key_for(const char *op, const cti_jit_ast *ast, const cti_jit_spec *spec, ct_device device,
                    cti_jit_key *key, char **source) {
  memset(key, 0, sizeof *key);
  *source = cti_jit_codegen(ast, spec, device.type == CT_CUDA ? CTI_JIT_CUDA : CTI_JIT_C);
  if (!*source) return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  const char *compiler = NULL, *flags = NULL;
  char target[128];
  int rc;
  if (device.type == CT_CPU) {
    struct utsname u;
    rc = cti_jit_cc_identity(op, &compiler, &flags);
    snprintf(target, sizeof target, "cpu %s", uname(&u) == 0 ? u.machine : "unknown");
  } else {
    int arch = 0;
    rc = cti_jit_nvrtc_identity(op, &compiler);
    if (rc == CT_OK) rc = cti_jit_cuda_arch(op, device.index, &arch);
    if (rc == CT_OK) rc = cti_jit_nvrtc_flags(op, arch, &flags);
    snprintf(target, sizeof target, "compute_%d", arch);
  }
  if (rc == CT_OK) {
    cti_jit_key_make(key, device.type == CT_CPU ? "cpu" : "cuda", compiler, flags, target, *source);
    if (!key->text) rc = ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  }
  if (rc) {
    free(*source);
    *source = NULL;
  }
  return rc;
}

// Compiles the source for the device: the payload of its entry.
static int compile(const char *op, ct_device dev, const char *dir, const char *source, unsigned char **payload,
                   size_t *n) {
  if (dev.type == CT_CPU) return cti_jit_cc_compile(op, dir, source, payload, n);
  int arch;
  int rc = cti_jit_cuda_arch(op, dev.index, &arch);
  char *ptx = NULL;
  if (rc == CT_OK) rc = cti_jit_nvrtc_compile(op, source, arch, &ptx, n);
  *payload = (unsigned char *)ptx;
  return rc;
}

static int load(const char *op, ct_device dev, const char *dir, const unsigned char *payload, size_t n,
                cti_jit_kernel *k) {
  k->device = dev;
  if (dev.type == CT_CPU) return cti_jit_cc_load(op, dir, payload, n, &k->handle, &k->cpu);
  return cti_jit_cuda_load(op, dev.index, (const char *)payload, n, &k->handle, &k->cu_function);
}

static void note_rejection(void) {
  pthread_mutex_lock(&lock);
  stats.rejected++;
  snprintf(stats.last_rejection, sizeof stats.last_rejection, "%s", ct_last_error());
  pthread_mutex_unlock(&lock);
}

// From the disk entry at path, or (when it is absent or rejected) from the compiler.
static int from_disk_or_compiler(const char *op, ct_device dev, const cti_jit_key *key, const char *source,
                                 cti_jit_kernel *k) {
  char path[4200], dir[4096];
  int rc = cti_jit_cache_dir(op, dir, sizeof dir);
  if (rc == CT_OK) rc = cti_jit_entry_path(op, key, dev.type, path, sizeof path);
  if (rc) return rc;
  unsigned char *payload = NULL;
  size_t n = 0;
  double t0 = now();
  rc = cti_jit_entry_read(op, path, key, &payload, &n);
  if (rc == CT_OK) {
    rc = load(op, dev, dir, payload, n, k);
    free(payload);
    payload = NULL;
    if (rc == CT_OK) {
      pthread_mutex_lock(&lock);
      stats.disk_hits++;
      stats.load_seconds += now() - t0;
      pthread_mutex_unlock(&lock);
      return CT_OK;
    }
  }
  if (rc == CT_ERR_VALUE) { // failed verification, or did not load: rebuilt below
    note_rejection();
    unlink(path); // whatever it was (a damaged file, a link): the new entry replaces it
  } else if (rc != 1 && rc != CT_OK) {
    return rc;
  }
  t0 = now();
  if ((rc = compile(op, dev, dir, source, &payload, &n))) return rc;
  const double seconds = now() - t0;
  pthread_mutex_lock(&lock);
  stats.compiles++;
  stats.compile_seconds += seconds;
  pthread_mutex_unlock(&lock);
  // An entry that cannot be written (something that is not a file sits at its
  // name) costs the next process a compile, not this one its kernel.
  if (cti_jit_entry_write(op, path, key, payload, n) != CT_OK) note_rejection();
  rc = load(op, dev, dir, payload, n, k);
  free(payload);
  return rc;
}

int cti_jit_kernel_get(const char *op, const cti_jit_ast *ast, const cti_jit_spec *spec, ct_device device,
                       cti_jit_kernel **out, uint64_t *gen) {
  *out = NULL;
  cti_jit_key key;
  char *source = NULL;
  int rc = cti_jit_key_for(op, ast, spec, device, &key, &source);
  if (rc) return rc;
  pthread_mutex_lock(&lock);
  cti_jit_kernel *k = find(key.hex, device);
  *gen = generation;
  if (k) stats.memory_hits++;
  pthread_mutex_unlock(&lock);
  if (!k) {
    k = calloc(1, sizeof *k);
    if (!k) rc = ct_fail(CT_ERR_OOM, "%s: out of memory", op);
    if (!rc) {
      memcpy(k->hex, key.hex, sizeof k->hex);
      rc = from_disk_or_compiler(op, device, &key, source, k);
    }
    if (!rc) {
      pthread_mutex_lock(&lock);
      cti_jit_kernel *other = find(key.hex, device); // another thread was quicker: keep one
      if (!other) {
        k->next = table;
        table = k;
      }
      *gen = generation;
      pthread_mutex_unlock(&lock);
      if (other) {
        unload(k);
        k = other;
      }
    } else if (k) {
      if (k->handle) unload(k);
      else free(k);
      k = NULL;
    }
  }
  cti_jit_key_free(&key);
  free(source);
  *out = k;
  return rc;
}
