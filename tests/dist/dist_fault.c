// SPDX-License-Identifier: MIT
// dist_fault MODE: rank 1 fails (MODE exit: exit(3); kill: SIGKILL to itself;
// error: a ct error reported and exit 1) right after joining the group,
// while the other ranks wait in an all-reduce it will never join.
// tests/dist/check_fault.py checks that the whole job ends, non-zero, soon.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct.h"

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  ct_process_group *pg = ct_dist_init_process_group("mpi");
  if (!pg) {
    fprintf(stderr, "dist_fault: %s\n", ct_last_error());
    return 1;
  }
  if (ct_dist_get_rank(pg) == 1) {
    fprintf(stderr, "dist_fault: rank 1 fails now (%s)\n", mode);
    if (strcmp(mode, "kill") == 0) raise(SIGKILL);
    if (strcmp(mode, "error") == 0) {
      ct_tensor *t = ct_zeros(CT_SHAPE(2), CT_BF16, ct_device_cpu());
      if (ct_dist_all_reduce(pg, t, CT_REDUCE_SUM) != CT_OK) fprintf(stderr, "dist_fault: %s\n", ct_last_error());
      return 1;
    }
    exit(3);
  }
  ct_tensor *t = ct_ones(CT_SHAPE(4), CT_F32, ct_device_cpu());
  for (int i = 0; i < 1000000; ++i) // rank 1 never comes: this would wait forever
    if (ct_dist_all_reduce(pg, t, CT_REDUCE_SUM) != CT_OK) {
      fprintf(stderr, "dist_fault: rank %d: %s\n", ct_dist_get_rank(pg), ct_last_error());
      return 1;
    }
  printf("dist_fault: rank %d finished without rank 1 (impossible)\n", ct_dist_get_rank(pg));
  return 0;
}
