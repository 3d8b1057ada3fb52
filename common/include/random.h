// SPDX-License-Identifier: MIT
//
// random: one counter-based generator, Philox 4x32-10 (Salmon et al., SC'11),
// for every device.
//
// Invariant: element i of the n-th random tensor made on a device after
// ct_manual_seed(s) depends only on (s, the generator's offset, i), never on
// the device, the thread or the block that computed it. So the same seed
// gives the same numbers on the CPU and on a GPU:
//   key     = (lo32(seed), hi32(seed))
//   counter = (lo32(offset + i/4), hi32(offset + i/4), 0, 0)
//   u32     = philox4x32_10(counter, key)[i % 4]
//   uniform = (u32 >> (32 - p)) * 2^-p            in [0, 1), p the dtype's
//             significand bits: 11 for float16, 8 for bfloat16, 24 for
//             float32 and float64, so every value is exact in the dtype and
//             none rounds up to 1 (as PyTorch draws half-precision uniforms)
//   normal  = Box-Muller on the 24-bit uniforms ((u32 >> 8) * 2^-24) of
//             elements 2j and 2j+1, computed in float64, rounded to the
//             dtype: z0 = r cos(theta), z1 = r sin(theta) with
//             r = sqrt(-2 log(1 - u0)), theta = 2 pi u1; an odd n uses z0
//             for its last element.
// After a tensor of n elements the offset advances by ceil(n / 4).
// Each device keeps its own (seed, offset) state, all set by ct_manual_seed.
#ifndef CT_RANDOM_H
#define CT_RANDOM_H

#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

void ct_manual_seed(uint64_t seed); // seeds the CPU and every CUDA device
uint64_t ct_initial_seed(void);
// Reserves `n_counters` counters of the device's stream and returns the
// (seed, offset) to use for them; the ops call this.
void ct_philox_reserve(ct_device d, uint64_t n_counters, uint64_t *seed, uint64_t *offset);
uint64_t ct_philox_offset(ct_device d);

// A device's generator state, as torch.get_rng_state / torch.cuda.get_rng_state
// (there a byte tensor holding Philox's seed and offset on CUDA): setting a
// state read earlier makes the following random tensors repeat exactly. What
// a resumable checkpoint saves for dropout.
typedef struct ct_rng_state {
  uint64_t seed, offset;
} ct_rng_state;
int ct_get_rng_state(ct_device d, ct_rng_state *out);
int ct_set_rng_state(ct_device d, ct_rng_state state);

// One Philox 4x32-10 block: 10 rounds on counter `ctr` with key `key`.
void ct_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#ifdef __cplusplus
}
#endif
#endif
