// SPDX-License-Identifier: MIT
//
// sampler: torch.utils.data.DistributedSampler, index for index.
//
// Invariant: for the same (length, num_replicas, rank, shuffle, seed, epoch,
// drop_last) the shard equals PyTorch's. That needs PyTorch's own shuffle:
// torch.randperm on the CPU under torch.Generator().manual_seed(s) is a
// Fisher-Yates pass whose i-th swap partner is i + (mt19937() % (n - i)),
// with the 32-bit Mersenne Twister seeded by the low 32 bits of s (the
// standard init_genrand). ct's own Philox generator would give another
// permutation, so the sampler carries its own mt19937.
#include <stdlib.h>
#include <string.h>

#include "dist.h"
#include "error.h"

enum { MT_N = 624, MT_M = 397 };

typedef struct mt19937 {
  uint32_t s[MT_N];
  int i;
} mt19937;

static void mt_seed(mt19937 *mt, uint32_t seed) {
  mt->s[0] = seed;
  for (int j = 1; j < MT_N; ++j) mt->s[j] = 1812433253u * (mt->s[j - 1] ^ (mt->s[j - 1] >> 30)) + (uint32_t)j;
  mt->i = MT_N;
}

static uint32_t mt_next(mt19937 *mt) {
  if (mt->i >= MT_N) { // regenerate the whole state
    for (int k = 0; k < MT_N; ++k) {
      uint32_t y = (mt->s[k] & 0x80000000u) | (mt->s[(k + 1) % MT_N] & 0x7fffffffu);
      mt->s[k] = mt->s[(k + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    mt->i = 0;
  }
  uint32_t y = mt->s[mt->i++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

int ct_randperm_torch(int64_t n, uint64_t seed, int64_t *out) {
  if (n < 0 || n >= ((int64_t)1 << 31) || (n > 0 && !out))
    return ct_fail(CT_ERR_VALUE, "ct_randperm_torch: n must be in [0, 2^31), got %lld", (long long)n);
  mt19937 mt;
  mt_seed(&mt, (uint32_t)seed);
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t z = (int64_t)(mt_next(&mt) % (uint64_t)(n - i));
    int64_t t = out[i];
    out[i] = out[z + i];
    out[z + i] = t;
  }
  return CT_OK;
}

static int check(const ct_distributed_sampler *s) {
  if (!s) return ct_fail(CT_ERR_VALUE, "DistributedSampler: NULL sampler");
  if (s->length < 0) return ct_fail(CT_ERR_VALUE, "DistributedSampler: negative dataset length %lld", (long long)s->length);
  if (s->num_replicas < 1)
    return ct_fail(CT_ERR_VALUE, "DistributedSampler: num_replicas must be >= 1, got %d", s->num_replicas);
  if (s->rank < 0 || s->rank >= s->num_replicas)
    return ct_fail(CT_ERR_VALUE, "DistributedSampler: Invalid rank %d, rank should be in the interval [0, %d]",
                   s->rank, s->num_replicas - 1);
  return CT_OK;
}

int64_t ct_distributed_sampler_len(const ct_distributed_sampler *s) {
  if (check(s)) return -1;
  int64_t n = s->length, w = s->num_replicas;
  if (s->drop_last && n % w != 0) return n / w; // ceil((n - w) / w): the incomplete round is dropped
  return (n + w - 1) / w;                        // ceil(n / w): the last round is padded
}

int ct_distributed_sampler_indices(const ct_distributed_sampler *s, int64_t *out) {
  int rc = check(s);
  if (rc) return rc;
  int64_t n = s->length, per = ct_distributed_sampler_len(s), total = per * s->num_replicas;
  if (per == 0) return CT_OK;
  if (!out) return ct_fail(CT_ERR_VALUE, "DistributedSampler: NULL output");
  int64_t *all = malloc((size_t)(n > total ? n : total) * sizeof *all);
  if (!all) return ct_fail(CT_ERR_OOM, "DistributedSampler: out of host memory for %lld indices", (long long)n);
  if (s->shuffle) {
    rc = ct_randperm_torch(n, s->seed + (uint64_t)s->epoch, all);
  } else {
    for (int64_t i = 0; i < n; ++i) all[i] = i;
  }
  for (int64_t i = n; rc == CT_OK && i < total; ++i) all[i] = all[(i - n) % n]; // pad with the start, repeated
  for (int64_t k = 0; rc == CT_OK && k < per; ++k) out[k] = all[s->rank + k * s->num_replicas];
  free(all);
  return rc;
}
