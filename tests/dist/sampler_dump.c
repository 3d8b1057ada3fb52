// SPDX-License-Identifier: MIT
// sampler_dump: reads queries "LEN WORLD RANK SHUFFLE SEED EPOCH DROP_LAST",
// one per line, from stdin and prints each rank's DistributedSampler shard as
// one line of indices (or "error: MESSAGE"). tests/dist/check_sampler.py
// compares them with PyTorch's.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "ct.h"

int main(void) {
  long long len, epoch;
  int world, rank, shuffle, drop;
  unsigned long long seed;
  while (scanf("%lld %d %d %d %llu %lld %d", &len, &world, &rank, &shuffle, &seed, &epoch, &drop) == 7) {
    ct_distributed_sampler s = {.length = len, .num_replicas = world, .rank = rank, .shuffle = shuffle != 0,
                                .seed = seed, .epoch = epoch, .drop_last = drop != 0};
    int64_t n = ct_distributed_sampler_len(&s);
    int64_t *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (n < 0 || !idx || ct_distributed_sampler_indices(&s, idx) != CT_OK) {
      printf("error: %s\n", ct_last_error());
    } else {
      for (int64_t i = 0; i < n; ++i) printf("%s%" PRId64, i ? " " : "", idx[i]);
      printf("\n");
    }
    free(idx);
  }
  return 0;
}
