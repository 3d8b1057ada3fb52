// SPDX-License-Identifier: MIT
//
// spawn: runs a program with an argument vector, never through a shell, and
// captures what it prints.
//
// Invariant: the program sees exactly argv (no word splitting, no globbing,
// no quoting to get wrong, whatever the bytes of an expression or a path),
// reads /dev/null, and writes stdout and stderr into one pipe that this
// process drains until the program exits, so a chatty compiler cannot block
// on a full pipe. posix_spawnp is safe in a process with threads (OpenMP's,
// the DataLoader's), where fork-then-exec would copy every thread's locks.
#define _GNU_SOURCE // pipe2
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "error.h"
#include "jit_impl.h"

extern char **environ;

int cti_jit_run(const char *op, char *const argv[], char **output, size_t cap, int *exit_code) {
  *output = NULL;
  *exit_code = -1;
  int fd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return ct_fail(CT_ERR_IO, "%s: pipe: %s", op, strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (err != 0) {
    close(fd[0]);
    if (err == ENOENT)
      return ct_fail(CT_ERR_UNAVAILABLE, "%s: %s: not found%s", op, argv[0],
                     strchr(argv[0], '/') ? "" : " on PATH");
    return ct_fail(CT_ERR_IO, "%s: cannot run %s: %s", op, argv[0], strerror(err));
  }
  cti_strbuf out = {0};
  size_t dropped = 0;
  char buf[4096];
  for (;;) {
    ssize_t r = read(fd[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t keep = out.len < cap ? cap - out.len : 0;
    if (keep > (size_t)r) keep = (size_t)r;
    cti_sb_putn(&out, buf, keep);
    dropped += (size_t)r - keep;
  }
  close(fd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      cti_sb_free(&out);
      return ct_fail(CT_ERR_IO, "%s: waiting for %s: %s", op, argv[0], strerror(errno));
    }
  }
  if (dropped) cti_sb_printf(&out, "\n[... %zu more bytes of output]\n", dropped);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  *output = cti_sb_take(&out);
  if (!*output) return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  return CT_OK;
}
