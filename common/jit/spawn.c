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
//
// The program runs in a process group of its own, with a time limit
// ($CT_JIT_CC_TIMEOUT seconds, default 60): past it the whole group is
// killed (SIGKILL) and the call fails with a message saying so. When the
// program itself exits, whatever it left running in its group (a
// background child holding the pipe open) is killed too, so nothing it
// started can hang the caller or outlive it.
#define _GNU_SOURCE // pipe2
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0); // a group of its own, led by the program
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (err != 0) {
    close(fd[0]);
    if (err == ENOENT)
      return ct_fail(CT_ERR_UNAVAILABLE, "%s: %s: not found%s", op, argv[0],
                     strchr(argv[0], '/') ? "" : " on PATH");
    return ct_fail(CT_ERR_IO, "%s: cannot run %s: %s", op, argv[0], strerror(err));
  }
  double limit = 60;
  const char *env = getenv("CT_JIT_CC_TIMEOUT");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (!*end && v > 0 && v <= 86400) limit = v;
  }
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cti_strbuf out = {0};
  size_t dropped = 0;
  char buf[4096];
  bool exited = false, timed_out = false, open_pipe = true;
  while (!exited) {
    struct pollfd pf = {.fd = fd[0], .events = POLLIN};
    int pr = open_pipe ? poll(&pf, 1, 50) : (nanosleep(&(struct timespec){0, 50000000}, NULL), 0);
    if (pr > 0) {
      ssize_t r = read(fd[0], buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) open_pipe = false; // every writer closed it
      else {
        size_t keep = out.len < cap ? cap - out.len : 0;
        if (keep > (size_t)r) keep = (size_t)r;
        cti_sb_putn(&out, buf, keep);
        dropped += (size_t)r - keep;
      }
    }
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid) exited = true;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (!exited && (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > limit) {
      timed_out = true;
      break;
    }
  }
  kill(-pid, SIGKILL); // the group: what the program left behind, or all of it on a timeout
  for (;;) { // what is already in the pipe
    struct pollfd pf = {.fd = fd[0], .events = POLLIN};
    if (!open_pipe || poll(&pf, 1, 0) <= 0) break;
    ssize_t r = read(fd[0], buf, sizeof buf);
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
  if (timed_out) {
    cti_sb_free(&out);
    return ct_fail(CT_ERR_VALUE, "%s: %s did not finish within %g s and was killed (with everything it started); "
                   "check the compiler (CT_JIT_CC), or raise CT_JIT_CC_TIMEOUT", op, argv[0], limit);
  }
  if (dropped) cti_sb_printf(&out, "\n[... %zu more bytes of output]\n", dropped);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  *output = cti_sb_take(&out);
  if (!*output) return ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  return CT_OK;
}
