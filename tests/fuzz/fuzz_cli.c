// SPDX-License-Identifier: MIT
// fuzz_cli: the chapters' flag parser (common/app/cli.c) on arbitrary command
// lines: NUL-separated arguments. The parser exits on --help (0) and on a bad
// flag (2); this target compiles cli.c with exit() redirected to a longjmp
// back here, so those exits are outcomes, and checks the codes: 0 only for
// --help/-h, 1 only for an unwritable output path, 2 otherwise.
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static jmp_buf back;
static int exit_code;

_Noreturn void cti_fuzz_exit(int code) {
  exit_code = code;
  longjmp(back, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char buf[4096];
  if (size >= sizeof buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[64] = {"fuzz"};
  int argc = 1;
  for (size_t i = 0; i < size && argc < 63;) { // NUL-separated arguments
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  long epochs = 10;
  double lr = 0.1;
  bool flag = false;
  const char *name = "x", *out = NULL;
  ct_cli_opt opts[] = {{"epochs", CT_OPT_INT, &epochs, "an int"},
                       {"lr", CT_OPT_DOUBLE, &lr, "a double"},
                       {"flag", CT_OPT_FLAG, &flag, "a flag"},
                       {"name", CT_OPT_STRING, &name, "a string"},
                       {"save", CT_OPT_OUTPUT, &out, "an output path"}};
  ct_cli cli = {.program = "fuzz", .summary = "the fuzzer's flags"};
  FILE *null = fopen("/dev/null", "w");
  FILE *old_out = stdout, *old_err = stderr;
  stdout = stderr = null; // usage text is not the point
  exit_code = -1;
  if (setjmp(back) == 0) ct_cli_parse(&cli, argc, argv, opts, 5);
  stdout = old_out, stderr = old_err;
  fclose(null);
  bool help = false;
  for (int i = 1; i < argc; ++i) help |= strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
  if (exit_code == 0 && !help) abort();         // exit 0 only for --help
  if (exit_code != -1 && exit_code != 0 && exit_code != 1 && exit_code != 2) abort();
  return 0;
}
