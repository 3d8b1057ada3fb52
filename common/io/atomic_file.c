// SPDX-License-Identifier: MIT
//
// atomic_file: the runtime's one temp-file / fsync / rename sequence (the
// invariant is in atomic_file.h). Users: checkpoints (checkpoint.c) and the
// --metrics file (cli.c).
#define _POSIX_C_SOURCE 200809L // fsync, fdopen, fileno, O_CLOEXEC, O_DIRECTORY

#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

static void af_free(cti_atomic_file *af) {
  free(af->tmp);
  free(af->dir);
  af->tmp = af->dir = NULL;
  af->f = NULL;
}

// af->tmp := "<path>.tmp.<pid>", af->dir := the directory holding path.
static int af_names(cti_atomic_file *af) {
  const char *path = af->path;
  const char *slash = strrchr(path, '/');
  size_t dlen = slash ? (size_t)(slash - path) : 0;
  size_t cap = strlen(path) + 32;
  af->tmp = malloc(cap);
  af->dir = malloc(dlen + 2);
  if (!af->tmp || !af->dir) {
    af_free(af);
    return ct_fail(CT_ERR_OOM, "%s: %s: out of host memory", af->op, path);
  }
  snprintf(af->tmp, cap, "%s.tmp.%ld", path, (long)getpid());
  if (!slash) strcpy(af->dir, ".");
  else if (dlen == 0) strcpy(af->dir, "/"); // "/model.safetensors"
  else {
    memcpy(af->dir, path, dlen);
    af->dir[dlen] = '\0';
  }
  return CT_OK;
}

int cti_atomic_open(cti_atomic_file *af, const char *op, const char *path) {
  *af = (cti_atomic_file){.op = op, .path = path};
  if (!path || !*path) return ct_fail(CT_ERR_VALUE, "%s: empty path; give a file name", op);
  const char *slash = strrchr(path, '/');
  if (slash && !slash[1])
    return ct_fail(CT_ERR_VALUE, "%s: %s: the path names a directory; give a file name inside it", op, path);
  int rc = af_names(af);
  if (rc != CT_OK) return rc;
  int fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    rc = ct_fail(CT_ERR_IO, "%s: %s: cannot create the temporary file %s: %s (check that the directory exists and is writable)",
                 op, path, af->tmp, strerror(errno));
    af_free(af);
    return rc;
  }
  struct stat old;
  if (stat(path, &old) == 0 && S_ISREG(old.st_mode)) (void)fchmod(fd, old.st_mode & 07777); // keep its permissions
  af->f = fdopen(fd, "wb");
  if (!af->f) {
    rc = ct_fail(CT_ERR_IO, "%s: %s: fdopen of %s: %s", op, path, af->tmp, strerror(errno));
    close(fd);
    unlink(af->tmp);
    af_free(af);
    return rc;
  }
  return CT_OK;
}

int cti_atomic_write(cti_atomic_file *af, const void *p, size_t n) {
  if (af->err) return -1;
  if (n && fwrite(p, 1, n, af->f) != n) {
    af->err = errno ? errno : EIO;
    return -1;
  }
  return 0;
}

void cti_atomic_abort(cti_atomic_file *af) {
  if (af->f) fclose(af->f);
  if (af->tmp) unlink(af->tmp);
  af_free(af);
}

// fflush + fsync + fclose of the temporary; 0 or the errno of the first failure.
static int af_close(cti_atomic_file *af) {
  int e = af->err;
  errno = 0;
  if (!e && (fflush(af->f) != 0 || ferror(af->f))) e = errno ? errno : EIO;
  if (!e && fsync(fileno(af->f)) != 0) e = errno;
  FILE *f = af->f;
  af->f = NULL;
  if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
  return e;
}

int cti_atomic_commit(cti_atomic_file *af) {
  int e = af_close(af);
  if (e) {
    int rc = ct_fail(CT_ERR_IO, "%s: %s: writing %s failed: %s (free some space or pick another directory; %s was left as it was)",
                     af->op, af->path, af->tmp, strerror(e), af->path);
    cti_atomic_abort(af);
    return rc;
  }
  if (rename(af->tmp, af->path) != 0) {
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
