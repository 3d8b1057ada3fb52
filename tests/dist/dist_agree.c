// SPDX-License-Identifier: MIT
// dist_agree MODE: every rank sets up, then calls ct_dist_agree. MODE ok:
// every rank is ok; missing: rank 1 cannot open its corpus; long: rank 1's
// message is 3000 bytes (truncated with "..."); two: ranks 1 and 2 fail (the
// lowest, rank 1, is named). A rank that learns of a failure prints
// "dist_agree: <message>", leaves the group (MPI_Finalize) and exits 1, as a
// chapter does. tests/dist/check_agree.py reads what every rank printed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct.h"

static char long_msg[3001];

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "ok";
  ct_process_group *pg = ct_dist_init_process_group("mpi");
  if (!pg) {
    fprintf(stderr, "dist_agree: %s\n", ct_last_error());
    return 1;
  }
  int r = ct_dist_get_rank(pg), status = CT_OK;
  if ((r == 1 && strcmp(mode, "ok") != 0) || (r == 2 && strcmp(mode, "two") == 0)) {
    if (strcmp(mode, "long") == 0) {
      memset(long_msg, 'x', sizeof long_msg - 1);
      status = ct_fail(CT_ERR_VALUE, "%s", long_msg);
    } else {
      FILE *f = fopen("/nonexistent/corpus.txt", "rb"); // the rank's --corpus is missing
      status = f ? CT_OK : ct_fail(CT_ERR_IO, "cannot open --corpus /nonexistent/corpus.txt (rank %d)", r);
      if (f) fclose(f);
    }
  }
  int rc = ct_dist_agree(pg, status, NULL);
  if (rc != CT_OK) {
    fprintf(stderr, "dist_agree: %s\n", ct_last_error());
    ct_dist_destroy_process_group(pg);
    return 1;
  }
  printf("dist_agree: rank %d agreed\n", r);
  ct_dist_destroy_process_group(pg);
  return 0;
}
