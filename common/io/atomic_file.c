// SPDX-License-Identifier: MIT
//
// atomic_file: the runtime's one temp-file / fsync / rename sequence (the
// invariant is in atomic_file.h). Users: checkpoints (checkpoint.c) and the
// --metrics file (cli.c).
#define _DEFAULT_SOURCE // fsync, fdopen, fileno, O_CLOEXEC, O_DIRECTORY, lstat, readlink

#include "atomic_file.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "error.h"

// The temporary being written, for cti_atomic_unlink_pending (a signal
// handler may read it: a fixed buffer and a flag, no allocation).
static char pending_tmp[4096];
static volatile sig_atomic_t pending_set;

void cti_atomic_unlink_pending(void) {
  if (pending_set) unlink(pending_tmp);
}

static void af_free(cti_atomic_file *af) {
  if (af->tmp) pending_set = 0;
  free(af->target);
  free(af->tmp);
  free(af->dir);
  af->target = af->tmp = af->dir = NULL;
  af->f = NULL;
}

static int af_oom(const cti_atomic_file *af) {
  return ct_fail(CT_ERR_OOM, "%s: %s: out of host memory", af->op, af->path);
}

// af->target := af->path with its symbolic links followed (at most 40 hops,
// the kernel's own limit); a dangling link resolves to the file it names, so
// the write creates that file and the link stays.
static int af_resolve(cti_atomic_file *af) {
  char *cur = strdup(af->path);
  if (!cur) return af_oom(af);
  for (int hop = 0;; hop++) {
    struct stat sb;
    if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
      af->target = cur;
      return CT_OK;
    }
    char link[4096];
    ssize_t n = hop < 40 ? readlink(cur, link, sizeof link - 1) : -1;
    if (n < 0) {
      int rc = ct_fail(CT_ERR_IO, "%s: %s: cannot follow the symbolic link %s: %s", af->op, af->path, cur,
                       hop < 40 ? strerror(errno) : "too many levels of symbolic links");
      free(cur);
      return rc;
    }
    link[n] = '\0';
    const char *slash = strrchr(cur, '/');
    size_t keep = (link[0] == '/' || !slash) ? 0 : (size_t)(slash - cur) + 1; // a relative link is relative to its folder
    char *next = malloc(keep + (size_t)n + 1);
    if (!next) {
      free(cur);
      return af_oom(af);
    }
    memcpy(next, cur, keep);
    memcpy(next + keep, link, (size_t)n + 1);
    free(cur);
    cur = next;
  }
}

// af->tmp := room for "<target>.tmp.XXXXXXXXXXXX" (the suffix is drawn when
// the file is created), af->dir := the directory holding target.
static int af_names(cti_atomic_file *af) {
  const char *target = af->target;
  const char *slash = strrchr(target, '/');
  size_t dlen = slash ? (size_t)(slash - target) : 0;
  size_t cap = strlen(target) + 32;
  af->tmp = malloc(cap);
  af->dir = malloc(dlen + 2);
  if (!af->tmp || !af->dir) return af_oom(af);
  snprintf(af->tmp, cap, "%s", target);
  if (!slash) strcpy(af->dir, ".");
  else if (dlen == 0) strcpy(af->dir, "/"); // "/model.safetensors"
  else {
    memcpy(af->dir, target, dlen);
    af->dir[dlen] = '\0';
  }
  return CT_OK;
}

// 12 characters from [A-Za-z0-9] drawn from the kernel's generator (72
// bits): a name nobody can plant in advance.
static int af_random_suffix(char out[13]) {
  static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[12];
  size_t got = 0;
  while (got < sizeof r) {
    ssize_t n = getrandom(r + got, sizeof r - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)n;
  }
  for (int i = 0; i < 12; i++) out[i] = set[r[i] % (sizeof set - 1)];
  out[12] = '\0';
  return 0;
}

typedef enum { AF_FILE, AF_THROUGH } af_kind;

// What the resolved target is: absent or a regular file (replaced through a
// temporary), a character device or FIFO (written through), or something
// refused (a directory, a block device, a socket).
static int af_classify(cti_atomic_file *af, af_kind *kind, mode_t *mode, uid_t *uid) {
  struct stat sb;
  *kind = AF_FILE;
  *mode = 0;
  *uid = 0;
  if (stat(af->target, &sb) != 0) return CT_OK; // absent (creating the temporary says why, if it cannot)
  *mode = sb.st_mode;
  *uid = sb.st_uid;
  if (S_ISREG(sb.st_mode)) return CT_OK;
  if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
    *kind = AF_THROUGH;
    return CT_OK;
  }
  const char *what = S_ISDIR(sb.st_mode) ? "a directory" : S_ISBLK(sb.st_mode) ? "a block device" : "a socket";
  return ct_fail(CT_ERR_VALUE, "%s: %s is %s, not a file: give a file's path (nothing was written)", af->op, af->path,
                 what);
}

// Opens the device or FIFO itself; a FIFO without a reader fails at once
// (O_NONBLOCK) instead of blocking the program forever.
static int af_open_through(cti_atomic_file *af, mode_t mode) {
  bool fifo = S_ISFIFO(mode);
  int fd = open(af->target, O_WRONLY | O_CLOEXEC | (fifo ? O_NONBLOCK : 0));
  if (fd < 0) {
    if (fifo && errno == ENXIO)
      return ct_fail(CT_ERR_IO, "%s: %s: no process is reading this FIFO; start the reader first", af->op, af->path);
    return ct_fail(CT_ERR_IO, "%s: %s: cannot open it for writing: %s", af->op, af->path, strerror(errno));
  }
  if (fifo) (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    int rc = ct_fail(CT_ERR_IO, "%s: %s: fdopen: %s", af->op, af->path, strerror(errno));
    close(fd);
    return rc;
  }
  return CT_OK;
}

// The mode the new file gets: an existing regular file that this user owns
// keeps its permission bits (0777; never set-id bits); anything else (a new
// file, or one owned by someone else) gets 0666 less the umask, as a plain
// creat() would. Nothing is copied from a file this user does not own.
static mode_t af_final_mode(mode_t old_mode, uid_t old_uid) {
  if (S_ISREG(old_mode) && old_uid == geteuid()) return old_mode & 0777;
  mode_t mask = umask(022);
  umask(mask);
  return 0666 & ~mask;
}

// Creates the temporary "<target>.tmp.<12 random characters>" in the
// target's directory with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600: a file or a
// symbolic link planted at any name is never opened, followed or reused (a
// name taken draws another, 100 tries). Signals are blocked while the file
// is created and its name recorded, so a Ctrl-C cannot leave it behind.
static int af_open_temp(cti_atomic_file *af, mode_t old_mode, uid_t old_uid) {
  int rc = af_names(af);
  if (rc != CT_OK) return rc;
  size_t base = strlen(af->target);
  sigset_t all, old;
  sigfillset(&all);
  int fd = -1, e = EEXIST;
  for (int attempt = 0; attempt < 100 && fd < 0 && e == EEXIST; attempt++) {
    char sfx[13];
    if (af_random_suffix(sfx) != 0) {
      e = errno;
      break;
    }
    snprintf(af->tmp + base, 32, ".tmp.%s", sfx);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    e = fd < 0 ? errno : 0;
    if (fd >= 0 && strlen(af->tmp) < sizeof pending_tmp) {
      pending_set = 0;
      memcpy(pending_tmp, af->tmp, strlen(af->tmp) + 1);
      pending_set = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (fd < 0) {
    af->tmp[base] = '\0';
    int rc2 = ct_fail(CT_ERR_IO,
                      "%s: %s: cannot create the temporary file %s.tmp.*: %s (check that the directory exists "
                      "and is writable)",
                      af->op, af->path, af->tmp, strerror(e));
    free(af->tmp);
    af->tmp = NULL;
    return rc2;
  }
  if (fchmod(fd, af_final_mode(old_mode, old_uid)) != 0) {
    rc = ct_fail(CT_ERR_IO, "%s: %s: fchmod of %s: %s", af->op, af->path, af->tmp, strerror(errno));
    close(fd);
    unlink(af->tmp);
    return rc;
  }
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    rc = ct_fail(CT_ERR_IO, "%s: %s: fdopen of %s: %s", af->op, af->path, af->tmp, strerror(errno));
    close(fd);
    unlink(af->tmp);
    return rc;
  }
  return CT_OK;
}

// The checks open and check share: the path's spelling, the links, the kind.
static int af_prepare(cti_atomic_file *af, const char *op, const char *path, af_kind *kind, mode_t *mode,
                      uid_t *uid) {
  *af = (cti_atomic_file){.op = op, .path = path};
  if (!path || !*path) return ct_fail(CT_ERR_VALUE, "%s: empty path; give a file name", op);
  const char *slash = strrchr(path, '/');
  if (slash && !slash[1])
    return ct_fail(CT_ERR_VALUE, "%s: %s: the path names a directory; give a file name inside it", op, path);
  int rc = af_resolve(af);
  return rc != CT_OK ? rc : af_classify(af, kind, mode, uid);
}

int cti_atomic_open(cti_atomic_file *af, const char *op, const char *path) {
  af_kind kind;
  mode_t mode;
  uid_t uid;
  int rc = af_prepare(af, op, path, &kind, &mode, &uid);
  if (rc == CT_OK) rc = kind == AF_THROUGH ? af_open_through(af, mode) : af_open_temp(af, mode, uid);
  if (rc != CT_OK) af_free(af);
  return rc;
}

// A write of zero bytes to a character device: nothing reaches it, but a
// device that refuses every write says so (/dev/full: ENOSPC).
static int af_probe_device(const cti_atomic_file *af) {
  int fd = open(af->target, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return ct_fail(CT_ERR_IO, "%s: %s: cannot open it for writing: %s", af->op, af->path, strerror(errno));
  int e = write(fd, "", 0) < 0 ? errno : 0;
  close(fd);
  return e ? ct_fail(CT_ERR_IO, "%s: %s: cannot write to it: %s (nothing was written)", af->op, af->path, strerror(e))
           : CT_OK;
}

// One byte into the fresh temporary, flushed: a full disk refuses it now
// (ENOSPC), not after the work whose result was to be saved.
static int af_probe_space(cti_atomic_file *af) {
  errno = 0;
  if (fputc(0, af->f) != EOF && fflush(af->f) == 0) return CT_OK;
  return ct_fail(CT_ERR_IO, "%s: %s: cannot write there: %s (free some space or pick another directory; nothing "
                 "was written)", af->op, af->path, strerror(errno ? errno : EIO));
}

int cti_atomic_check(const char *op, const char *path) {
  cti_atomic_file af;
  af_kind kind;
  mode_t mode;
  uid_t uid;
  int rc = af_prepare(&af, op, path, &kind, &mode, &uid);
  if (rc == CT_OK && kind == AF_THROUGH) {
    // Opening a FIFO's write end and closing it would hand its reader an
    // end of file: ask for permission only.
    if (access(af.target, W_OK) != 0)
      rc = ct_fail(CT_ERR_IO, "%s: %s: cannot write to it: %s", op, path, strerror(errno));
    else if (S_ISCHR(mode))
      rc = af_probe_device(&af);
  } else if (rc == CT_OK) {
    rc = af_open_temp(&af, mode, uid);
    if (rc == CT_OK) {
      rc = af_probe_space(&af);
      cti_atomic_abort(&af);
      return rc;
    }
  }
  af_free(&af);
  return rc;
}

void (*cti_atomic_write_hook)(cti_atomic_file *af, size_t written) = NULL;

int cti_atomic_write(cti_atomic_file *af, const void *p, size_t n) {
  if (af->err) return -1;
  if (n && fwrite(p, 1, n, af->f) != n) {
    af->err = errno ? errno : EIO;
    return -1;
  }
  af->written += n;
  if (cti_atomic_write_hook) cti_atomic_write_hook(af, af->written);
  return 0;
}

void cti_atomic_abort(cti_atomic_file *af) {
  if (af->f) fclose(af->f);
  if (af->tmp) {
    pending_set = 0; // first, so a signal now cannot unlink the name again
    unlink(af->tmp);
  }
  af_free(af);
}

// fflush + fsync + fclose of the temporary (a device or FIFO is not
// fsynced); 0 or the errno of the first failure.
static int af_close(cti_atomic_file *af) {
  int e = af->err;
  errno = 0;
  if (!e && (fflush(af->f) != 0 || ferror(af->f))) e = errno ? errno : EIO;
  if (!e && af->tmp && fsync(fileno(af->f)) != 0) e = errno;
  FILE *f = af->f;
  af->f = NULL;
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
  return e;
}

int cti_atomic_commit(cti_atomic_file *af) {
  int e = af_close(af);
  if (!af->tmp) { // written through a device or FIFO: nothing to rename
    int rc = e ? ct_fail(CT_ERR_IO, "%s: %s: writing failed: %s", af->op, af->path, strerror(e)) : CT_OK;
    af_free(af);
    return rc;
  }
  if (e) {
    int rc = ct_fail(CT_ERR_IO, "%s: %s: writing %s failed: %s (free some space or pick another directory; %s was left as it was)",
                     af->op, af->path, af->tmp, strerror(e), af->path);
    cti_atomic_abort(af);
    return rc;
  }
  if (rename(af->tmp, af->target) != 0) {
    int rc = ct_fail(CT_ERR_IO, "%s: %s: renaming %s over it failed: %s (%s was left as it was)", af->op, af->path,
                     af->tmp, strerror(errno), af->path);
    cti_atomic_abort(af);
    return rc;
  }
  // The rename is durable once the directory entry is.
  int rc = CT_OK;
  int dfd = open(af->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    e = fsync(dfd) == 0 ? 0 : errno;
    close(dfd);
    if (e && e != EINVAL && e != EROFS)
      rc = ct_fail(CT_ERR_IO, "%s: %s: written, but fsync of its directory %s failed: %s", af->op, af->path, af->dir,
                   strerror(e));
  }
  af_free(af);
  return rc;
}

int cti_write_file_atomically(const char *op, const char *path, const void *data, size_t n) {
  cti_atomic_file af;
  int rc = cti_atomic_open(&af, op, path);
  if (rc != CT_OK) return rc;
  cti_atomic_write(&af, data, n);
  return cti_atomic_commit(&af);
}

int ct_write_file(const char *op, const char *path, const void *data, size_t n) {
  return cti_write_file_atomically(op, path, data, n);
}

// ---- inputs ------------------------------------------------------------------------------------

FILE *ct_open_input(const char *op, const char *path, const char *want) {
  if (!path || !*path) {
    ct_fail(CT_ERR_VALUE, "%s: empty path; %s", op, want);
    return NULL;
  }
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) { // errno stays the open's, for a caller that words it its own way
    int e = errno;
    if (e == EISDIR) ct_fail(CT_ERR_IO, "%s: %s is a directory, not a file: %s", op, path, want);
    else ct_fail(CT_ERR_IO, "%s: %s: %s", op, path, strerror(e));
    errno = e;
    return NULL;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    ct_fail(CT_ERR_IO, "%s: %s: cannot stat: %s", op, path, strerror(errno));
    close(fd);
    errno = 0;
    return NULL;
  }
  if (!S_ISREG(sb.st_mode)) {
    const char *what = S_ISDIR(sb.st_mode)    ? "a directory"
                       : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(sb.st_mode)  ? (isatty(fd) ? "a terminal" : "a character device")
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                                              : "not a regular file";
    if (S_ISDIR(sb.st_mode)) ct_fail(CT_ERR_IO, "%s: %s is a directory, not a file: %s", op, path, want);
    else ct_fail(CT_ERR_IO, "%s: %s is %s, not a regular file: %s", op, path, what, want);
    close(fd);
    errno = 0; // not an open error
    return NULL;
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    ct_fail(CT_ERR_IO, "%s: %s: fdopen: %s", op, path, strerror(errno));
    close(fd);
    errno = 0;
  }
  return f;
}
