// SPDX-License-Identifier: MIT
// Included first into fuzz_cli's sources: the declaration of the jump that
// stands in for exit() in common/app/cli.c (see fuzz_cli.c).
#ifndef CT_FUZZ_EXIT_H
#define CT_FUZZ_EXIT_H
_Noreturn void cti_fuzz_exit(int code);
#endif
