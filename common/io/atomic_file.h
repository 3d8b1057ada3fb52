// SPDX-License-Identifier: MIT
//
// atomic_file: replace a file so that no reader ever sees half of it
// (internal).
//
// Invariant: at every moment, `path` is either absent, the old complete
// file, or the new complete file. The bytes go to a temporary file beside the
// target, "<path>.tmp.<12 random characters>" (same directory, so the same
// file system, so rename is atomic), created with O_CREAT|O_EXCL|O_NOFOLLOW
// and mode 0600, so that nothing planted there (a file, a symbolic link to
// someone's file) is ever opened, followed or reused; commit flushes and
// fsyncs it, renames it over the target, and fsyncs the directory so the
// rename itself survives a crash. A failure anywhere (open, write, flush,
// fsync, close, rename) removes the temporary and leaves the target as it
// was. The new file's mode: an existing regular target owned by this user
// keeps its permission bits (0777 only); otherwise 0666 less the umask (a
// mode is never copied from another user's file).
//
// Destinations that are not regular files are never replaced:
//  - a symbolic link is followed (a chain of them too): the file it points
//    to is replaced, the link stays a link;
//  - a character device (/dev/null, /dev/stdout, /dev/full) or a FIFO is
//    written through, in place, without a temporary: the bytes go to it and
//    its errors are reported (/dev/full: "No space left on device"); a FIFO
//    that no process reads is an error, not a hang;
//  - a directory, a block device or a socket is refused before anything is
//    written.
//
// Use:
//   cti_atomic_file af;
//   if ((rc = cti_atomic_open(&af, "ct_save_safetensors", path))) return rc;
//   ... cti_atomic_write(&af, p, n) as often as needed (a failed write
//       records its error; later writes do nothing) ...
//   rc = cti_atomic_commit(&af);   // or cti_atomic_abort(&af) to give up
// Messages start with the op and the target: "<op>: <path>: ...".
#ifndef CT_ATOMIC_FILE_H
#define CT_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cti_atomic_file {
  const char *op;   // for messages
  const char *path; // the caller's path (alive until commit/abort), named in messages
  char *target;     // path with symbolic links followed: the file replaced
  char *tmp;        // "<target>.tmp.<random>"; NULL when writing through a device or FIFO
  char *dir;        // the directory to fsync ("." for a bare file name)
  FILE *f;          // the temporary, open for writing
  int err;          // the first write's errno, 0 while all is well
  size_t written;   // bytes written so far
} cti_atomic_file;
// Testing aid, NULL in every program: called after each successful
// cti_atomic_write with the bytes written so far, so a test can stop a save
// in the middle (tests/unit/test_checkpoint.c kills the process there).
extern void (*cti_atomic_write_hook)(cti_atomic_file *af, size_t written);
// Async-signal-safe: removes the temporary of the write in progress, if any
// (the latest one opened). A signal handler that ends the process at once
// (the CLI's second Ctrl-C) calls it so no "<path>.tmp.*" is left behind;
// the target itself is untouched either way.
void cti_atomic_unlink_pending(void);

// Enters with af uninitialised; leaves with the temporary created and open
// (CT_OK), or with nothing created and the error recorded: CT_ERR_VALUE for
// an empty path or one ending in '/', CT_ERR_IO when the temporary cannot be
// created, CT_ERR_OOM.
int cti_atomic_open(cti_atomic_file *af, const char *op, const char *path);

// Appends n bytes to the temporary; 0, or -1 once a write has failed (the
// error is reported by commit).
int cti_atomic_write(cti_atomic_file *af, const void *p, size_t n);

// Enters with an open af; leaves it closed and freed, with the target
// replaced (CT_OK) or, on any failure, the target untouched, the temporary
// removed and CT_ERR_IO recorded ("... <path> was left as it was"). A failed
// fsync of the directory after the rename (the target is already the new
// file) is reported too, except where the file system cannot fsync a
// directory (EINVAL, EROFS).
int cti_atomic_commit(cti_atomic_file *af);

// Closes and removes the temporary and frees af; the target is untouched.
void cti_atomic_abort(cti_atomic_file *af);

// Checks, before any work is done, that path can be written as open and
// commit would write it: the destination kind (above); for a file, that its
// directory exists and lets us create the temporary and write a byte to it
// (a full disk: ENOSPC; created and removed at once); for a character
// device, that a write of zero bytes succeeds (/dev/full: ENOSPC). Leaves
// nothing behind; CT_OK or the error the write would give.
int cti_atomic_check(const char *op, const char *path);

// The whole sequence for a document already in memory.
int cti_write_file_atomically(const char *op, const char *path, const void *data, size_t n);

#ifdef __cplusplus
}
#endif

#endif
