// SPDX-License-Identifier: MIT
// fuzz_file: the fuzzers' one helper: the input as a file, for readers that
// take a path (the IDX reader, the safetensors loader). The file lives in a
// per-process directory under /dev/shm when it exists (memory, not disk).
#ifndef CT_FUZZ_FILE_H
#define CT_FUZZ_FILE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *fuzz_file(const char *suffix, const uint8_t *data, size_t size) {
  static char path[256];
  snprintf(path, sizeof path, "%s/ct-fuzz-%d%s", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid(),
           suffix);
  FILE *f = fopen(path, "wb");
  if (!f) abort(); // the harness, not the code under test, is broken
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  return path;
}
#endif
