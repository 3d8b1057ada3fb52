// SPDX-License-Identifier: MIT
//
// random: the Philox 4x32-10 block function and each device's (seed, offset).
//
// Invariant: every device's generator is the pair (seed, offset) and nothing
// else. A random op reserves ceil(n/4) counters with ct_philox_reserve, which
// hands back the pair to use and advances the offset under one mutex, so two
// threads never get overlapping counters, and the numbers depend only on the
// seed and the order of the reservations, never on who computes them.
//
// Before any ct_manual_seed, every device starts from seed 67280421310721,
// PyTorch's default_rng_seed_val, so a program that never seeds is still
// deterministic from run to run, as it is under PyTorch. The numbers differ
// from PyTorch's anyway: PyTorch's CPU generator is a Mersenne Twister.
#include "random.h"

#include <pthread.h>
#include <stdbool.h>

#include "error.h"
#include "hostdev.h"

#define CT_DEFAULT_SEED UINT64_C(67280421310721)
#define NSLOTS (1 + CT_MAX_CUDA_DEVICES) // slot 0: CPU; 1 + i: cuda:i

typedef struct philox_state {
  uint64_t seed, offset;
} philox_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool initialized; // under lock
static uint64_t initial_seed = CT_DEFAULT_SEED;
static philox_state states[NSLOTS];

// Enters and leaves with `lock` held.
static void reset_all(uint64_t seed) {
  initial_seed = seed;
  for (int i = 0; i < NSLOTS; ++i) states[i] = (philox_state){seed, 0};
  initialized = true;
}

// Slot of d, or -1 (and an error) for a device this runtime cannot address.
static int slot_of(const char *op, ct_device d) {
  if (d.type == CT_CPU) return 0;
  if (d.type == CT_CUDA && d.index >= 0 && d.index < CT_MAX_CUDA_DEVICES) return 1 + d.index;
  ct_fail(CT_ERR_DEVICE, "%s: no generator for device type %d index %d", op, (int)d.type, d.index);
  return -1;
}

void ct_manual_seed(uint64_t seed) {
  pthread_mutex_lock(&lock);
  reset_all(seed);
  pthread_mutex_unlock(&lock);
}

uint64_t ct_initial_seed(void) {
  pthread_mutex_lock(&lock);
  uint64_t s = initial_seed;
  pthread_mutex_unlock(&lock);
  return s;
}

// Enters with any device; leaves with *seed, *offset the start of n_counters
// counters that no other reservation on this device gets, and the device's
// offset advanced past them. A device that has no generator (a bad index)
// records CT_ERR_DEVICE and gets (initial seed, 0) with nothing advanced; the
// ops validate devices before they get here.
void ct_philox_reserve(ct_device d, uint64_t n_counters, uint64_t *seed, uint64_t *offset) {
  int slot = slot_of("ct_philox_reserve", d);
  pthread_mutex_lock(&lock);
  if (!initialized) reset_all(CT_DEFAULT_SEED);
  uint64_t s = initial_seed, o = 0;
  if (slot >= 0) {
    s = states[slot].seed;
    o = states[slot].offset;
    states[slot].offset += n_counters;
  }
  pthread_mutex_unlock(&lock);
  if (seed) *seed = s;
  if (offset) *offset = o;
}

uint64_t ct_philox_offset(ct_device d) {
  int slot = slot_of("ct_philox_offset", d);
  if (slot < 0) return 0;
  pthread_mutex_lock(&lock);
  if (!initialized) reset_all(CT_DEFAULT_SEED);
  uint64_t o = states[slot].offset;
  pthread_mutex_unlock(&lock);
  return o;
}

int ct_get_rng_state(ct_device d, ct_rng_state *out) {
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_get_rng_state: NULL state");
  int slot = slot_of("ct_get_rng_state", d);
  if (slot < 0) return CT_ERR_DEVICE;
  pthread_mutex_lock(&lock);
  if (!initialized) reset_all(CT_DEFAULT_SEED);
  out->seed = states[slot].seed;
  out->offset = states[slot].offset;
  pthread_mutex_unlock(&lock);
  return CT_OK;
}

int ct_set_rng_state(ct_device d, ct_rng_state state) {
  int slot = slot_of("ct_set_rng_state", d);
  if (slot < 0) return CT_ERR_DEVICE;
  pthread_mutex_lock(&lock);
  if (!initialized) reset_all(CT_DEFAULT_SEED);
  states[slot].seed = state.seed;
  states[slot].offset = state.offset;
  pthread_mutex_unlock(&lock);
  return CT_OK;
}

// The block function is hostdev.h's, the one the CUDA kernels run too.
void ct_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  cti_philox4x32_10(ctr, key[0], key[1], out);
}
