// SPDX-License-Identifier: MIT
//
// test_alloc: the caching allocator's rules, checked from the outside.
//
// Every expected number is worked out here from the rules written in
// alloc.h (512-byte rounding; small pool <= 1 MiB from 2 MiB segments; large
// pool from 20 MiB segments below 10 MiB, else rounded up to 2 MiB; split
// when the remainder is >= 512 B small / > 1 MiB large; best fit; merge on
// free), not read back from the allocator. Statistics are device-wide, so each
// test starts from an emptied cache with no live block on the device and
// measures from there.
#define _POSIX_C_SOURCE 200809L // nanosleep under -std=c11

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

// ---- the documented rules, restated ------------------------------------------
static size_t rule_round(size_t n) {
  if (n == 0) n = 1;
  return (n + 511) / 512 * 512;
}

static size_t rule_segment(size_t n) {
  size_t r = rule_round(n);
  if (r <= 1 * MiB) return 2 * MiB;
  if (r < 10 * MiB) return 20 * MiB;
  return (r + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
}

static ct_memory_stats stats(void) {
  ct_memory_stats s;
  TU_OK(ct_memory_stats_get(tu_device, &s));
  return s;
}

static ct_block *alloc_ok(size_t n, ct_stream *s, ct_mempool *p) {
  ct_block *b = ct_block_alloc(tu_device, n, s, p);
  if (!b) fail_msg("ct_block_alloc(%zu) failed: %s", n, ct_last_error());
  return b;
}

static bool contains(const char *hay, const char *needle) {
  return hay && needle && strstr(hay, needle) != NULL;
}

// Each test starts with no live block on the device and nothing cached.
static int clean_start(void **state) {
  (void)state;
  TU_OK(ct_empty_cache(tu_device));
  if (ct_memory_allocated(tu_device) != 0 || ct_memory_reserved(tu_device) != 0) {
    print_error("test_alloc: the device still holds %zu allocated / %zu reserved bytes from "
                "outside this test; its exact counts need a clean start\n",
                ct_memory_allocated(tu_device), ct_memory_reserved(tu_device));
    return -1;
  }
  ct_reset_peak_memory_stats(tu_device);
  ct_clear_error();
  return 0;
}

// The fraction tests put the fraction back to 1 (all of the device), pass or fail.
static int restore_fraction(void **state) {
  (void)state;
  return ct_set_per_process_memory_fraction(1.0, tu_device) == CT_OK ? 0 : -1;
}

// ---- rounding and the basic statistics ---------------------------------------
static void test_rounding_and_counts(void **state) {
  (void)state;
  const size_t req[] = {1, 512, 513, 0, 1000, 4095};
  const size_t n = sizeof req / sizeof req[0];
  ct_block *b[6];
  ct_memory_stats s0 = stats();
  size_t want_alloc = 0;
  for (size_t i = 0; i < n; ++i) {
    b[i] = alloc_ok(req[i], NULL, NULL);
    assert_int_equal(ct_block_size(b[i]), rule_round(req[i]));
    assert_non_null(ct_block_ptr(b[i]));
    want_alloc += rule_round(req[i]);
  }
  // Literal spot checks of the rounding rule.
  assert_int_equal(ct_block_size(b[0]), 512);
  assert_int_equal(ct_block_size(b[2]), 1024);
  assert_int_equal(ct_block_size(b[3]), 512);
  // All of them fit one small segment of 2 MiB.
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.allocated_bytes, want_alloc);
  assert_int_equal(ct_memory_allocated(tu_device), want_alloc);
  assert_int_equal(s1.reserved_bytes, 2 * MiB);
  assert_int_equal(ct_memory_reserved(tu_device), 2 * MiB);
  assert_int_equal(s1.segments, 1);
  assert_int_equal(s1.active_blocks, n);
  assert_int_equal(s1.num_alloc_calls - s0.num_alloc_calls, n);
  assert_int_equal(s1.num_device_allocs - s0.num_device_allocs, 1);
  assert_int_equal(ct_max_memory_allocated(tu_device), want_alloc);
  assert_int_equal(ct_max_memory_reserved(tu_device), 2 * MiB);
  // The blocks do not overlap.
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      char *pi = ct_block_ptr(b[i]), *pj = ct_block_ptr(b[j]);
      assert_true(pi + ct_block_size(b[i]) <= pj || pj + ct_block_size(b[j]) <= pi);
    }
  for (size_t i = 0; i < n; ++i) ct_block_free(b[i]);
  ct_memory_stats s2 = stats();
  assert_int_equal(s2.allocated_bytes, 0);
  assert_int_equal(s2.active_blocks, 0);
  assert_int_equal(s2.reserved_bytes, 2 * MiB); // cached, not returned
  assert_int_equal(s2.peak_allocated_bytes, want_alloc);
}

// A 1000x1000 float32 tensor's 4,000,000 bytes: 4,000,256 counted, from a
// 20 MiB segment; freeing keeps the segment reserved.
static void test_free_keeps_reserved(void **state) {
  (void)state;
  ct_block *b = alloc_ok(4000000, NULL, NULL);
  assert_int_equal(ct_block_size(b), 4000256);
  assert_int_equal(ct_memory_allocated(tu_device), 4000256);
  assert_int_equal(ct_memory_reserved(tu_device), 20 * MiB);
  ct_block_free(b);
  assert_int_equal(ct_memory_allocated(tu_device), 0);
  assert_int_equal(ct_memory_reserved(tu_device), 20 * MiB);
  assert_int_equal(ct_max_memory_allocated(tu_device), 4000256);
}

// ---- reuse, best fit ---------------------------------------------------------------
static void test_reuse_cached_block(void **state) {
  (void)state;
  ct_block *a = alloc_ok(4000000, NULL, NULL);
  void *pa = ct_block_ptr(a);
  ct_block_free(a);
  ct_memory_stats s0 = stats();
  ct_block *b = alloc_ok(4000000, NULL, NULL);
  ct_memory_stats s1 = stats();
  assert_ptr_equal(ct_block_ptr(b), pa);
  assert_int_equal(s1.num_device_allocs, s0.num_device_allocs);
  assert_int_equal(s1.num_alloc_calls, s0.num_alloc_calls + 1);
  assert_int_equal(s1.reserved_bytes, 20 * MiB);
  ct_block_free(b);
  TU_OK(ct_empty_cache(tu_device));

  // A block handed out whole (its 0.5 MiB remainder is not worth a split)
  // serves a smaller large request later.
  ct_block *c = alloc_ok(11 * MiB + MiB / 2, NULL, NULL);
  assert_int_equal(ct_memory_reserved(tu_device), rule_segment(11 * MiB + MiB / 2));
  assert_int_equal(rule_segment(11 * MiB + MiB / 2), 12 * MiB);
  void *pc = ct_block_ptr(c);
  ct_block_free(c);
  s0 = stats();
  ct_block *d = alloc_ok(11 * MiB, NULL, NULL);
  s1 = stats();
  assert_int_equal(s1.num_device_allocs, s0.num_device_allocs);
  assert_int_equal(ct_block_size(d), 11 * MiB);
  assert_int_equal(s1.allocated_bytes, 11 * MiB);
  assert_ptr_equal(ct_block_ptr(d), pc);
  ct_block_free(d);
}

static void test_best_fit(void **state) {
  (void)state;
  ct_block *x = alloc_ok(12 * MiB, NULL, NULL); // its own 12 MiB segment
  ct_block *y = alloc_ok(16 * MiB, NULL, NULL); // its own 16 MiB segment
  assert_int_equal(ct_memory_reserved(tu_device), 28 * MiB);
  void *px = ct_block_ptr(x), *py = ct_block_ptr(y);
  ct_block_free(y);
  ct_block_free(x);
  ct_memory_stats s0 = stats();
  ct_block *a = alloc_ok(11 * MiB, NULL, NULL); // fits both: the smaller wins
  ct_block *b = alloc_ok(14 * MiB, NULL, NULL); // fits only the 16 MiB one
  ct_memory_stats s1 = stats();
  assert_ptr_equal(ct_block_ptr(a), px);
  assert_ptr_equal(ct_block_ptr(b), py);
  assert_int_equal(s1.num_device_allocs, s0.num_device_allocs);
  assert_int_equal(s1.allocated_bytes, 25 * MiB);
  ct_block_free(a);
  ct_block_free(b);
  TU_OK(ct_empty_cache(tu_device));

  // Inside one 20 MiB segment: free holes of 4 and 3 MiB kept apart by live
  // blocks. A 3 MiB request takes the 3 MiB hole whichever comes first in
  // memory (both orders are tried).
  for (int order = 0; order < 2; ++order) {
    size_t h1 = order ? 3 * MiB : 4 * MiB, h2 = order ? 4 * MiB : 3 * MiB;
    ct_memory_stats t0 = stats();
    ct_block *hole1 = alloc_ok(h1, NULL, NULL);
    ct_block *wall1 = alloc_ok(2 * MiB, NULL, NULL);
    ct_block *hole2 = alloc_ok(h2, NULL, NULL);
    ct_block *wall2 = alloc_ok(2 * MiB, NULL, NULL);
    ct_block *rest = alloc_ok(9 * MiB, NULL, NULL);
    assert_int_equal(stats().num_device_allocs - t0.num_device_allocs, 1);
    void *p3 = ct_block_ptr(h1 == 3 * MiB ? hole1 : hole2);
    ct_block_free(hole1);
    ct_block_free(hole2);
    ct_block *fit = alloc_ok(3 * MiB, NULL, NULL);
    assert_ptr_equal(ct_block_ptr(fit), p3);
    assert_int_equal(stats().num_device_allocs - t0.num_device_allocs, 1);
    ct_block_free(fit);
    ct_block_free(wall1);
    ct_block_free(wall2);
    ct_block_free(rest);
    TU_OK(ct_empty_cache(tu_device));
  }
}

// ---- splitting and coalescing ---------------------------------------------------------
static void test_split_and_coalesce(void **state) {
  (void)state;
  ct_memory_stats s0 = stats();
  // 6 + 6 + 8 MiB tile one 20 MiB segment exactly: each request is cut from
  // the remainder of the one before.
  ct_block *a = alloc_ok(6 * MiB, NULL, NULL);
  ct_block *b = alloc_ok(6 * MiB, NULL, NULL);
  ct_block *c = alloc_ok(8 * MiB, NULL, NULL);
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.num_device_allocs - s0.num_device_allocs, 1);
  assert_int_equal(s1.reserved_bytes, 20 * MiB);
  assert_int_equal(s1.allocated_bytes, 20 * MiB);
  char *pa = ct_block_ptr(a), *pb = ct_block_ptr(b);
  char *lo = pa < pb ? pa : pb;
  // a and b are neighbours: freed, they merge into one 12 MiB block, which
  // serves a 12 MiB request without a new segment.
  ct_block_free(a);
  ct_block_free(b);
  ct_block *ab = alloc_ok(12 * MiB, NULL, NULL);
  ct_memory_stats s2 = stats();
  assert_int_equal(s2.num_device_allocs, s1.num_device_allocs);
  assert_ptr_equal(ct_block_ptr(ab), lo);
  assert_int_equal(s2.allocated_bytes, 20 * MiB);
  ct_block_free(ab);
  ct_block_free(c);
  // Everything merged back: the segment is whole again and serves 20 MiB.
  ct_block *all = alloc_ok(20 * MiB, NULL, NULL);
  assert_int_equal(stats().num_device_allocs, s1.num_device_allocs);
  ct_block_free(all);

  // Small pool: 512 B and 1 MiB share a 2 MiB segment; a second 1 MiB does
  // not fit the 1 MiB - 512 B left and gets a new segment.
  s0 = stats();
  ct_block *p = alloc_ok(512, NULL, NULL);
  ct_block *q = alloc_ok(1 * MiB, NULL, NULL);
  assert_int_equal(stats().num_device_allocs - s0.num_device_allocs, 1);
  ct_block *r = alloc_ok(1 * MiB, NULL, NULL);
  assert_int_equal(stats().num_device_allocs - s0.num_device_allocs, 2);
  assert_int_equal(ct_memory_reserved(tu_device), 20 * MiB + 2 * 2 * MiB);
  ct_block_free(p);
  ct_block_free(q);
  ct_block_free(r);
  TU_OK(ct_empty_cache(tu_device));

  // A 512 B remainder is worth a split in the small pool: 1 MiB, then
  // 1 MiB - 512 B, then 512 B fill one 2 MiB segment exactly.
  s0 = stats();
  ct_block *u = alloc_ok(1 * MiB, NULL, NULL);
  ct_block *v = alloc_ok(1 * MiB - 512, NULL, NULL);
  ct_block *w = alloc_ok(512, NULL, NULL);
  assert_int_equal(stats().num_device_allocs - s0.num_device_allocs, 1);
  assert_int_equal(ct_memory_allocated(tu_device), 2 * MiB);
  assert_int_equal(ct_memory_reserved(tu_device), 2 * MiB);
  ct_block_free(u);
  ct_block_free(v);
  ct_block_free(w);
}

// ---- segment sizes -----------------------------------------------------------------------
static void test_segment_sizes(void **state) {
  (void)state;
  // Literal cases from the rules, then a sweep against rule_segment.
  const struct {
    size_t req, segment;
  } lit[] = {{4000000, 20 * MiB}, {512, 2 * MiB},         {12 * MiB, 12 * MiB},
             {1 * MiB, 2 * MiB},  {1 * MiB + 1, 20 * MiB}, {10 * MiB - 512, 20 * MiB},
             {10 * MiB, 10 * MiB}, {13 * MiB + 1, 14 * MiB}, {0, 2 * MiB}};
  for (size_t i = 0; i < sizeof lit / sizeof lit[0]; ++i) {
    assert_int_equal(rule_segment(lit[i].req), lit[i].segment);
    ct_memory_stats s0 = stats();
    ct_block *b = alloc_ok(lit[i].req, NULL, NULL);
    ct_memory_stats s1 = stats();
    assert_int_equal(s1.reserved_bytes - s0.reserved_bytes, lit[i].segment);
    assert_int_equal(s1.num_device_allocs - s0.num_device_allocs, 1);
    assert_int_equal(ct_block_size(b), rule_round(lit[i].req));
    ct_block_free(b);
    TU_OK(ct_empty_cache(tu_device));
    assert_int_equal(ct_memory_reserved(tu_device), 0);
  }
  // A 1000x1000 float32 request, the seed tutorials' example.
  assert_int_equal(rule_round(1000 * 1000 * 4), 4000256);
}

// ---- empty_cache ----------------------------------------------------------------------------
static void test_empty_cache_keeps_live_segments(void **state) {
  (void)state;
  ct_block *live = alloc_ok(12 * MiB, NULL, NULL);      // 12 MiB segment, live
  ct_block *gone = alloc_ok(4000000, NULL, NULL);       // 20 MiB segment, freed
  ct_block *small_live = alloc_ok(1000, NULL, NULL);    // 2 MiB segment...
  ct_block *small_gone = alloc_ok(1000, NULL, NULL);    // ...shared, one freed
  ct_block_free(gone);
  ct_block_free(small_gone);
  assert_int_equal(ct_memory_reserved(tu_device), 12 * MiB + 20 * MiB + 2 * MiB);
  ct_memory_stats s0 = stats();
  TU_OK(ct_empty_cache(tu_device));
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.reserved_bytes, 12 * MiB + 2 * MiB);
  assert_int_equal(s1.num_device_frees - s0.num_device_frees, 1);
  assert_int_equal(s1.segments, 2);
  assert_int_equal(s1.allocated_bytes, 12 * MiB + rule_round(1000));
  ct_block_free(live);
  ct_block_free(small_live);
  TU_OK(ct_empty_cache(tu_device));
  assert_int_equal(ct_memory_reserved(tu_device), 0);
  assert_int_equal(stats().segments, 0);
  assert_int_equal(stats().num_device_frees - s0.num_device_frees, 3);
}

static void test_reset_peak(void **state) {
  (void)state;
  ct_block *big = alloc_ok(12 * MiB, NULL, NULL);
  ct_block_free(big);
  ct_block *small = alloc_ok(700, NULL, NULL);
  assert_int_equal(ct_max_memory_allocated(tu_device), 12 * MiB);
  assert_int_equal(ct_max_memory_reserved(tu_device), 14 * MiB);
  TU_OK(ct_empty_cache(tu_device)); // reserved drops to the 2 MiB segment
  assert_int_equal(ct_max_memory_reserved(tu_device), 14 * MiB);
  ct_reset_peak_memory_stats(tu_device);
  assert_int_equal(ct_max_memory_allocated(tu_device), rule_round(700));
  assert_int_equal(ct_max_memory_reserved(tu_device), 2 * MiB);
  ct_memory_stats s = stats();
  assert_int_equal(s.peak_allocated_bytes, s.allocated_bytes);
  assert_int_equal(s.peak_reserved_bytes, s.reserved_bytes);
  ct_block_free(small);
}

// ---- the per-process fraction and OOM ----------------------------------------------------
// Sets the fraction so that fraction * total is `limit` bytes, plus a margin
// under 512 KiB for the rounding of a double.
static void set_limit(size_t limit) {
  size_t free_b = 0, total = 0;
  TU_OK(ct_device_memory_info(tu_device, &free_b, &total));
  assert_true(total > 256 * MiB);
  assert_true(free_b <= total);
  double f = ((double)limit + 256.0 * 1024.0) / (double)total;
  TU_OK(ct_set_per_process_memory_fraction(f, tu_device));
  assert_true(fabs(ct_get_per_process_memory_fraction(tu_device) - f) < 1e-15);
}

static void test_fraction_oom(void **state) {
  (void)state;
  assert_int_equal(ct_set_per_process_memory_fraction(0.0, tu_device), CT_ERR_VALUE);
  assert_int_equal(ct_set_per_process_memory_fraction(1.5, tu_device), CT_ERR_VALUE);
  assert_int_equal(ct_set_per_process_memory_fraction(NAN, tu_device), CT_ERR_VALUE);
  set_limit(30 * MiB);
  ct_memory_stats s0 = stats();
  ct_clear_error();
  ct_block *b = ct_block_alloc(tu_device, 40 * MiB, NULL, NULL);
  assert_null(b);
  assert_int_equal(ct_last_status(), CT_ERR_OOM);
  const char *msg = ct_last_error();
  assert_true(contains(msg, "out of memory"));
  assert_true(contains(msg, "Tried to allocate 40.00 MiB"));
  assert_true(contains(msg, tu_device.type == CT_CPU ? "CPU out of memory" : "CUDA out of memory"));
  // PyTorch 2.x's facts, in its order: "<where> has a total capacity of ...
  // of which ... is free. <limit> allowed; Of the allocated memory ..."
  char where[64];
  if (tu_device.type == CT_CPU)
    snprintf(where, sizeof where, "The CPU has a total capacity of ");
  else
    snprintf(where, sizeof where, "GPU %d has a total capacity of ", tu_device.index);
  assert_true(contains(msg, where));
  assert_true(contains(msg, " is free. "));
  assert_true(contains(msg, " allowed; Of the allocated memory 0 B is allocated by ct"));
  assert_true(contains(msg, "and 0 B is reserved by ct but unallocated."));
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.num_ooms, s0.num_ooms + 1);
  assert_int_equal(s1.num_cache_flushes, s0.num_cache_flushes + 1);
  assert_int_equal(s1.reserved_bytes, 0);
  assert_int_equal(s1.num_alloc_calls, s0.num_alloc_calls);
  // Within the limit it works.
  ct_block *ok = alloc_ok(24 * MiB, NULL, NULL);
  ct_block_free(ok);
  // Raising the fraction lets the same request through.
  TU_OK(ct_set_per_process_memory_fraction(1.0, tu_device));
  b = alloc_ok(40 * MiB, NULL, NULL);
  assert_int_equal(ct_memory_reserved(tu_device), 24 * MiB + 40 * MiB);
  ct_block_free(b);
}

// A request that fits only once the cache is flushed succeeds, and the flush
// is counted.
static void test_oom_flush_and_retry(void **state) {
  (void)state;
  set_limit(30 * MiB);
  ct_block *a = alloc_ok(12 * MiB, NULL, NULL);
  ct_block_free(a); // 12 MiB cached
  ct_memory_stats s0 = stats();
  // 12 + 16 <= 30: no flush needed.
  ct_block *b = alloc_ok(16 * MiB, NULL, NULL);
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.num_cache_flushes, s0.num_cache_flushes);
  assert_int_equal(s1.reserved_bytes, 28 * MiB);
  ct_block_free(b);
  TU_OK(ct_empty_cache(tu_device));
  a = alloc_ok(12 * MiB, NULL, NULL);
  ct_block_free(a);
  s0 = stats();
  // 12 cached + 20 new > 30: the cached 12 MiB is released, then 20 fits.
  b = alloc_ok(20 * MiB, NULL, NULL);
  s1 = stats();
  assert_int_equal(s1.num_cache_flushes, s0.num_cache_flushes + 1);
  assert_int_equal(s1.num_ooms, s0.num_ooms);
  assert_int_equal(s1.num_device_frees, s0.num_device_frees + 1);
  assert_int_equal(s1.num_device_allocs, s0.num_device_allocs + 1);
  assert_int_equal(s1.reserved_bytes, 20 * MiB);
  assert_int_equal(s1.allocated_bytes, 20 * MiB);
  ct_block_free(b);
  TU_OK(ct_set_per_process_memory_fraction(1.0, tu_device));
}

// More than any machine has: the driver (or libc) says no, the cache is
// flushed, the retry fails too, and the error carries the numbers. (This
// runs before any test sets a fraction, so the refusal is the driver's; with
// a fraction of 1 it would be the fraction's, through the same path.)
static void test_oom_driver(void **state) {
  (void)state;
  ct_block *keep = alloc_ok(4000000, NULL, NULL);
  ct_memory_stats s0 = stats();
  size_t huge = (size_t)1 << 50; // 1 PiB
  ct_clear_error();
  assert_null(ct_block_alloc(tu_device, huge, NULL, NULL));
  assert_int_equal(ct_last_status(), CT_ERR_OOM);
  const char *msg = ct_last_error();
  assert_true(contains(msg, "out of memory"));
  assert_true(contains(msg, "Tried to allocate 1048576.00 GiB"));
  // keep's 4,000,256 bytes are allocated; its 20 MiB segment is not wholly
  // free, so the flush keeps it: 20 MiB - 4,000,256 B = 16.19 MiB unallocated.
  assert_true(contains(msg, "Of the allocated memory 3.81 MiB is allocated by ct, and 16.19 MiB is "
                            "reserved by ct but unallocated."));
  assert_true(contains(msg, "has a total capacity of "));
  assert_false(contains(msg, " allowed; ")); // no fraction set yet
  assert_true(contains(msg, "expandable segments"));
  ct_memory_stats s1 = stats();
  assert_int_equal(s1.num_ooms, s0.num_ooms + 1);
  assert_int_equal(s1.num_cache_flushes, s0.num_cache_flushes + 1);
  assert_int_equal(s1.allocated_bytes, 4000256);
  ct_block_free(keep);
}

// ---- pools and streams ----------------------------------------------------------------
static void test_private_pool(void **state) {
  (void)state;
  ct_mempool *pool = ct_mempool_create(tu_device);
  TU_CHECK(pool);
  ct_memory_stats s0 = stats();
  ct_block *a = alloc_ok(512, NULL, pool);
  void *pa = ct_block_ptr(a);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs + 1);
  // Destroying a pool with a live block fails and keeps it.
  assert_int_not_equal(ct_mempool_free(pool), CT_OK);
  ct_block_free(a);
  // The default pool does not take the private pool's cached memory...
  ct_block *d = alloc_ok(512, NULL, NULL);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs + 2);
  char *pd = ct_block_ptr(d);
  assert_true(pd + 512 <= (char *)pa || (char *)pa + 2 * MiB <= pd);
  ct_block_free(d);
  // ...nor empty_cache the private pool's segment.
  TU_OK(ct_empty_cache(tu_device));
  assert_int_equal(ct_memory_reserved(tu_device), 2 * MiB);
  // The pool reuses its own cache.
  ct_block *a2 = alloc_ok(512, NULL, pool);
  assert_ptr_equal(ct_block_ptr(a2), pa);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs + 2);
  assert_int_equal(ct_memory_allocated(tu_device), 512);
  ct_block_free(a2);
  ct_memory_stats s1 = stats();
  TU_OK(ct_mempool_free(pool));
  ct_memory_stats s2 = stats();
  assert_int_equal(s2.reserved_bytes, 0);
  assert_int_equal(s2.num_device_frees, s1.num_device_frees + 1);
  TU_OK(ct_mempool_free(NULL));
}

static void test_stream_isolation(void **state) {
  (void)state;
  ct_stream *other = ct_stream_create(tu_device, 0);
  TU_CHECK(other);
  ct_block *a = alloc_ok(4000000, NULL, NULL); // the current stream
  void *pa = ct_block_ptr(a);
  ct_block_free(a);
  ct_memory_stats s0 = stats();
  ct_block *b = alloc_ok(4000000, other, NULL);
  assert_ptr_not_equal(ct_block_ptr(b), pa);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs + 1);
  assert_int_equal(ct_memory_reserved(tu_device), 40 * MiB);
  ct_block_free(b);
  // Passing the current stream explicitly is the same as NULL.
  ct_block *c = alloc_ok(4000000, ct_current_stream(tu_device), NULL);
  assert_ptr_equal(ct_block_ptr(c), pa);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs + 1);
  ct_block_free(c);
  TU_OK(ct_stream_synchronize(other));
  ct_stream_free(other);
}

// Destroying a stream hands its segments to the default stream: its cached
// block serves default-stream requests without a new segment, and a block
// still live when its stream went is freed safely (poisoned in the tests,
// which writes through the segment's stream on CUDA).
static void test_stream_destroy_retires(void **state) {
  (void)state;
  TU_OK(ct_empty_cache(tu_device));
  ct_stream *other = ct_stream_create(tu_device, 0);
  TU_CHECK(other);
  ct_block *live = alloc_ok(4000000, other, NULL);     // a 20 MiB segment cut for `other`
  ct_block *cached = alloc_ok(30000000, other, NULL);  // its own segment
  void *pc = ct_block_ptr(cached);
  ct_block_free(cached);
  TU_OK(ct_stream_synchronize(other));
  ct_stream_free(other);
  ct_memory_stats s0 = stats();
  ct_block *again = alloc_ok(30000000, NULL, NULL); // the default stream
  assert_ptr_equal(ct_block_ptr(again), pc);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs);
  ct_block_free(again);
  ct_block_free(live);
  assert_int_equal(ct_memory_allocated(tu_device), 0);
  TU_OK(ct_empty_cache(tu_device));
}

// ---- summary ----------------------------------------------------------------------------
static void test_memory_summary(void **state) {
  (void)state;
  ct_block *b = alloc_ok(4000000, NULL, NULL);
  char *sum = ct_memory_summary(tu_device);
  TU_CHECK(sum);
  char dev[CT_DEVICE_STR_MAX], want[64];
  assert_true(contains(sum, ct_device_str(tu_device, dev)));
  if (tu_device.type == CT_CUDA) {
    char name[256];
    TU_OK(ct_cuda_get_device_name(tu_device.index, name, sizeof name));
    assert_true(contains(sum, name));
  }
  // 4,000,256 B = 3.81 MiB (the seed tutorials' number); 20 MiB reserved.
  snprintf(want, sizeof want, "%.2f MiB", 4000256.0 / 1048576.0);
  assert_string_equal(want, "3.81 MiB");
  assert_true(contains(sum, want));
  assert_true(contains(sum, "20.00 MiB"));
  assert_true(contains(sum, "Allocated memory"));
  assert_true(contains(sum, "Reserved memory"));
  assert_true(contains(sum, "Segments"));
  fputs(sum, stdout);
  free(sum);
  ct_block_free(b);
}

// ---- poison ---------------------------------------------------------------------------------
static void read_back(const ct_block *b, unsigned char *host, size_t n) {
  if (tu_device.type == CT_CPU) {
    memcpy(host, ct_block_ptr(b), n);
    return;
  }
#ifdef CT_HAVE_CUDA
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemcpy(host, ct_block_ptr(b), n, cudaMemcpyDeviceToHost), cudaSuccess);
#else
  fail_msg("CUDA device without CT_HAVE_CUDA");
#endif
}

static void write_zeros(ct_block *b, size_t n) {
  if (tu_device.type == CT_CPU) {
    memset(ct_block_ptr(b), 0, n);
    return;
  }
#ifdef CT_HAVE_CUDA
  assert_int_equal(cudaMemset(ct_block_ptr(b), 0, n), cudaSuccess);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
#endif
}

static void test_poison(void **state) {
  (void)state;
  assert_true(ct_alloc_poison()); // testutil and CT_POISON_ALLOC=1 turn it on
  const size_t n = 3000;
  unsigned char *host = malloc(n);
  assert_non_null(host);
  ct_block *b = alloc_ok(n, NULL, NULL);
  read_back(b, host, n);
  for (size_t i = 0; i < n; ++i) assert_int_equal(host[i], 0xFF);
  void *p = ct_block_ptr(b);
  write_zeros(b, n);
  ct_block_free(b);
  // The same block, reused from the cache, is poisoned again.
  b = alloc_ok(n, NULL, NULL);
  assert_ptr_equal(ct_block_ptr(b), p);
  read_back(b, host, n);
  for (size_t i = 0; i < n; ++i) assert_int_equal(host[i], 0xFF);
  // Off: the block keeps what was written.
  write_zeros(b, n);
  ct_block_free(b);
  ct_alloc_set_poison(false);
  assert_false(ct_alloc_poison());
  b = alloc_ok(n, NULL, NULL);
  read_back(b, host, n);
  ct_alloc_set_poison(true);
  for (size_t i = 0; i < n; ++i) assert_int_equal(host[i], 0);
  ct_block_free(b);
  free(host);
}

// ---- pinned host memory ------------------------------------------------------------------
static void test_pinned(void **state) {
  (void)state;
  if (!ct_cuda_is_available()) {
    ct_clear_error();
    assert_null(ct_pinned_alloc(1000));
    assert_int_equal(ct_last_status(), CT_ERR_UNAVAILABLE);
    assert_true(contains(ct_last_error(), "ct_pinned_alloc"));
    assert_int_equal(ct_pinned_memory_reserved(), 0);
    assert_false(ct_is_pinned_ptr(&state));
    TU_OK(ct_pinned_empty_cache());
    return;
  }
  TU_OK(ct_pinned_empty_cache());
  assert_int_equal(ct_pinned_memory_reserved(), 0);
  unsigned char *p = ct_pinned_alloc(1000); // rounded up to 1024
  TU_CHECK(p);
  assert_int_equal(ct_pinned_memory_reserved(), 1024);
  assert_true(ct_is_pinned_ptr(p));
  assert_false(ct_is_pinned_ptr(p + 1));
  for (size_t i = 0; i < 1000; ++i) assert_int_equal(p[i], 0xFF); // poisoned
  ct_pinned_free(p);
  assert_false(ct_is_pinned_ptr(p));
  unsigned char *q = ct_pinned_alloc(600); // same power-of-two bucket: reused
  assert_ptr_equal(q, p);
  assert_int_equal(ct_pinned_memory_reserved(), 1024);
  unsigned char *r = ct_pinned_alloc(0); // 512 B minimum
  TU_CHECK(r);
  assert_int_equal(ct_pinned_memory_reserved(), 1024 + 512);
  unsigned char *s = ct_pinned_alloc(1025); // the next power of two
  TU_CHECK(s);
  assert_int_equal(ct_pinned_memory_reserved(), 1024 + 512 + 2048);
  ct_pinned_free(q);
  ct_pinned_free(r);
  TU_OK(ct_pinned_empty_cache()); // s is live and stays
  assert_int_equal(ct_pinned_memory_reserved(), 2048);
  assert_true(ct_is_pinned_ptr(s));
  ct_pinned_free(s);
  TU_OK(ct_pinned_empty_cache());
  assert_int_equal(ct_pinned_memory_reserved(), 0);
}

// ---- devices that are not there ------------------------------------------------------
static void test_unavailable_device(void **state) {
  (void)state;
  int n = ct_cuda_device_count();
  ct_device bad = ct_device_cuda(n < CT_MAX_CUDA_DEVICES ? n : CT_MAX_CUDA_DEVICES);
  assert_int_equal(ct_memory_allocated(bad), 0);
  assert_int_equal(ct_memory_reserved(bad), 0);
  assert_int_equal(ct_max_memory_allocated(bad), 0);
  assert_int_equal(ct_max_memory_reserved(bad), 0);
  ct_reset_peak_memory_stats(bad); // does nothing, does not crash
  assert_int_not_equal(ct_empty_cache(bad), CT_OK);
  ct_clear_error();
  assert_null(ct_block_alloc(bad, 512, NULL, NULL));
  assert_int_not_equal(ct_last_status(), CT_OK);
  assert_true(contains(ct_last_error(), "ct_block_alloc"));
  assert_null(ct_memory_summary(bad));
  assert_null(ct_mempool_create(bad));
  ct_memory_stats s;
  assert_int_not_equal(ct_memory_stats_get(bad, &s), CT_OK);
  assert_int_not_equal(ct_set_per_process_memory_fraction(0.5, bad), CT_OK);
  size_t f, t;
  assert_int_not_equal(ct_device_memory_info(bad, &f, &t), CT_OK);
  assert_int_equal(ct_cuda_memory_allocated(n), 0);
  if (n == 0) assert_int_not_equal(ct_cuda_empty_cache(), CT_OK);
  // A pool of one device cannot serve another.
  if (tu_device.type == CT_CUDA) {
    ct_mempool *cpu_pool = ct_mempool_create(ct_device_cpu());
    TU_CHECK(cpu_pool);
    assert_null(ct_block_alloc(tu_device, 512, NULL, cpu_pool));
    assert_int_equal(ct_last_status(), CT_ERR_DEVICE);
    TU_OK(ct_mempool_free(cpu_pool));
  }
}

static void test_cuda_names(void **state) {
  (void)state;
  if (tu_device.type != CT_CUDA) skip();
  int i = tu_device.index;
  ct_block *b = alloc_ok(4000000, NULL, NULL);
  assert_int_equal(ct_cuda_memory_allocated(i), 4000256);
  assert_int_equal(ct_cuda_memory_reserved(i), 20 * MiB);
  assert_int_equal(ct_cuda_max_memory_allocated(i), 4000256);
  assert_int_equal(ct_cuda_max_memory_reserved(i), 20 * MiB);
  ct_block_free(b);
  ct_cuda_reset_peak_memory_stats(i);
  assert_int_equal(ct_cuda_max_memory_allocated(i), 0);
  TU_OK(ct_cuda_set_device(i));
  TU_OK(ct_cuda_empty_cache());
  assert_int_equal(ct_cuda_memory_reserved(i), 0);
}

// ---- threads ------------------------------------------------------------------------------
#define NTHREADS 4
#define NITER 300

static void *churn(void *arg) {
  unsigned x = (unsigned)(uintptr_t)arg * 2654435761u + 1u;
  ct_block *held[8] = {0};
  for (int it = 0; it < NITER; ++it) {
    x = x * 1664525u + 1013904223u;
    int k = (int)(x >> 28) & 7;
    if (held[k]) {
      ct_block_free(held[k]);
      held[k] = NULL;
    } else {
      size_t n = (x >> 8) % (3 * MiB); // both pools
      held[k] = ct_block_alloc(tu_device, n, NULL, NULL);
      if (!held[k]) return (void *)1;
      if (ct_block_size(held[k]) != rule_round(n)) return (void *)2;
    }
  }
  for (int k = 0; k < 8; ++k) ct_block_free(held[k]);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  pthread_t th[NTHREADS];
  for (uintptr_t i = 0; i < NTHREADS; ++i)
    assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)i), 0);
  for (int i = 0; i < NTHREADS; ++i) {
    void *ret = NULL;
    assert_int_equal(pthread_join(th[i], &ret), 0);
    assert_null(ret);
  }
  ct_memory_stats s = stats();
  assert_int_equal(s.allocated_bytes, 0);
  assert_int_equal(s.active_blocks, 0);
  TU_OK(ct_empty_cache(tu_device));
  assert_int_equal(ct_memory_reserved(tu_device), 0);
  assert_int_equal(stats().segments, 0);
}

// ---- through tensors -------------------------------------------------------------------------
static void test_tensor_storage(void **state) {
  (void)state;
  ct_tensor *t = ct_empty(CT_SHAPE(1000, 1000), CT_F32, tu_device);
  TU_CHECK(t);
  assert_int_equal(ct_memory_allocated(tu_device), 4000256);
  assert_int_equal(ct_memory_reserved(tu_device), 20 * MiB);
  ct_tensor *v = ct_t(t); // a view: no new memory
  TU_CHECK(v);
  assert_int_equal(ct_memory_allocated(tu_device), 4000256);
  ct_free(t);
  assert_int_equal(ct_memory_allocated(tu_device), 4000256); // v keeps the storage
  ct_free(v);
  assert_int_equal(ct_memory_allocated(tu_device), 0);
  assert_int_equal(ct_memory_reserved(tu_device), 20 * MiB);
  // A second tensor of the same size takes the cached block.
  ct_memory_stats s0 = stats();
  ct_tensor *u = ct_zeros(CT_SHAPE(1000, 1000), CT_F32, tu_device);
  TU_CHECK(u);
  assert_int_equal(stats().num_device_allocs, s0.num_device_allocs);
  ct_free(u);
  TU_OK(ct_empty_cache(tu_device));
  assert_int_equal(ct_memory_reserved(tu_device), 0);
}

// ---- record_stream: memory used on other streams -------------------------------------
// hold(s) makes the work queued on s from now on unfinished until release(s):
// on CUDA a host callback queued on s spins until released (capped at 30 s so
// that a failing test cannot hang); on the CPU, whose work is done when
// issued, the events recorded meanwhile stay pending (ct_cpu_events_hold).
#ifdef CT_HAVE_CUDA
static atomic_int hold_released;

static void CUDART_CB spin_until_released(void *arg) {
  (void)arg;
  const struct timespec ms = {0, 1000000};
  for (int i = 0; i < 30000 && !atomic_load(&hold_released); ++i) nanosleep(&ms, NULL);
}
#endif

static void hold(ct_stream *s) {
  if (tu_device.type == CT_CPU) {
    ct_cpu_events_hold(true);
    return;
  }
#ifdef CT_HAVE_CUDA
  atomic_store(&hold_released, 0);
  assert_int_equal(cudaLaunchHostFunc((cudaStream_t)ct_stream_handle(s), spin_until_released, NULL),
                   cudaSuccess);
#else
  (void)s;
#endif
}

static void release(ct_stream *s) {
  if (tu_device.type == CT_CPU) {
    ct_cpu_events_hold(false);
    return;
  }
#ifdef CT_HAVE_CUDA
  atomic_store(&hold_released, 1);
  TU_OK(ct_stream_synchronize(s));
#else
  (void)s;
#endif
}

// A block used on a second stream, freed while that stream's work is still
// queued, is not handed out again until the work is done; the statistics
// count it freed at once (PyTorch does the same).
static void test_record_stream_defers(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_block *a = alloc_ok(4000, NULL, NULL);
  void *pa = ct_block_ptr(a);
  TU_OK(ct_block_record_stream(a, side));
  TU_OK(ct_block_record_stream(a, side)); // twice is once
  hold(side);
  ct_block_free(a);
  assert_int_equal(ct_memory_allocated(tu_device), 0);
  assert_int_equal(stats().active_blocks, 0);
  ct_block *b = alloc_ok(4000, NULL, NULL); // side still busy: not the same memory
  assert_ptr_not_equal(ct_block_ptr(b), pa);
  release(side);
  ct_block *c = alloc_ok(4000, NULL, NULL); // polled: a's memory is free again
  assert_ptr_equal(ct_block_ptr(c), pa);
  ct_block_free(b);
  ct_block_free(c);
  ct_stream_free(side);
}

// Recording the block's own stream adds nothing: its free is immediate.
static void test_record_stream_own_stream(void **state) {
  (void)state;
  ct_stream *cur = ct_current_stream(tu_device);
  ct_block *a = alloc_ok(4000, NULL, NULL);
  void *pa = ct_block_ptr(a);
  TU_OK(ct_block_record_stream(a, cur));
  hold(cur);
  ct_block_free(a);
  ct_block *b = alloc_ok(4000, NULL, NULL);
  assert_ptr_equal(ct_block_ptr(b), pa);
  release(cur);
  ct_block_free(b);
}

// empty_cache waits for the events of pending blocks and then releases their
// segments (PyTorch: synchronize_and_free_events). On CUDA the held stream is
// released first, since this thread is the one that would release it.
static void test_record_stream_empty_cache(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_block *a = alloc_ok(4000, NULL, NULL);
  TU_OK(ct_block_record_stream(a, side));
  hold(side);
  ct_block_free(a);
  assert_int_equal(ct_memory_reserved(tu_device), 2 * MiB);
  if (tu_device.type != CT_CPU) release(side);
  TU_OK(ct_empty_cache(tu_device));
  assert_int_equal(ct_memory_reserved(tu_device), 0);
  if (tu_device.type == CT_CPU) release(side);
  ct_stream_free(side);
}

// A destroyed stream (its work done by then) leaves the blocks that recorded
// it: their free is immediate, and no event is recorded on freed memory.
static void test_record_stream_destroyed_stream(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_block *a = alloc_ok(4000, NULL, NULL);
  void *pa = ct_block_ptr(a);
  TU_OK(ct_block_record_stream(a, side));
  ct_stream_free(side);
  ct_stream *cur = ct_current_stream(tu_device);
  hold(cur);
  ct_block_free(a);
  ct_block *b = alloc_ok(4000, NULL, NULL);
  assert_ptr_equal(ct_block_ptr(b), pa);
  release(cur);
  ct_block_free(b);
}

// The tensor-level call, as x.record_stream(s).
static void test_record_stream_tensor(void **state) {
  (void)state;
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_tensor *t = ct_zeros(CT_SHAPE(1000), CT_F32, tu_device);
  TU_CHECK(t);
  void *pt = ct_data_ptr(t);
  TU_OK(ct_record_stream(t, side));
  hold(side);
  ct_free(t);
  ct_tensor *u = ct_empty(CT_SHAPE(1000), CT_F32, tu_device);
  TU_CHECK(u);
  assert_ptr_not_equal(ct_data_ptr(u), pt);
  release(side);
  ct_tensor *v = ct_empty(CT_SHAPE(1000), CT_F32, tu_device);
  TU_CHECK(v);
  assert_ptr_equal(ct_data_ptr(v), pt);
  ct_clear_error();
  assert_int_equal(ct_record_stream(v, NULL), CT_ERR_VALUE);
  assert_true(contains(ct_last_error(), "ct_record_stream"));
  ct_free(u);
  ct_free(v);
  ct_stream_free(side);
}

// The ordering rule of alloc.h: the poison fill is queued on the stream the
// block is allocated for. Made and filled on a side stream while the default
// stream is held, the tensor reads back its values once both are done; had
// the fill been queued on the held default stream, it would land last and
// the values would read as NaN.
static void test_poison_on_allocating_stream(void **state) {
  (void)state;
  ct_stream *def = ct_default_stream(tu_device);
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  TU_OK(ct_set_stream(side));
  ct_tensor *warm = ct_empty(CT_SHAPE(4096), CT_F32, tu_device); // side's segment, made
  ct_free(warm);                                                 // before the hold
  hold(def);
  ct_tensor *t = ct_full(CT_SHAPE(4096), 2.5, CT_F32, tu_device);
  TU_OK(ct_set_stream(def));
  TU_CHECK(t);
  TU_OK(ct_stream_synchronize(side));
  release(def);
  float *host = malloc(4096 * sizeof *host);
  assert_non_null(host);
  TU_OK(ct_copy_to_host(t, host, 4096 * sizeof *host));
  for (int i = 0; i < 4096; ++i) assert_true(host[i] == 2.5f);
  free(host);
  TU_OK(ct_record_stream(t, def)); // read on def above: free after it
  ct_free(t);
  ct_stream_free(side);
}

// A pinned tensor freed while a non-blocking copy from it is still queued:
// its block is not handed out again until the copy is done (transfer.c
// records the copy; CUDA only, since pinned memory needs it).
static void test_pinned_record_stream(void **state) {
  (void)state;
  if (tu_device.type == CT_CPU) skip();
  TU_OK(ct_pinned_empty_cache());
  ct_stream *def = ct_current_stream(tu_device);
  ct_stream *side = ct_stream_create(tu_device, 0);
  TU_CHECK(side);
  ct_tensor *h = ct_full(CT_SHAPE(1000), 3.0, CT_F32, ct_device_cpu());
  TU_CHECK(h);
  ct_tensor *pinned = ct_pin_memory(h); // 4000 bytes: the 4 KiB bucket
  TU_CHECK(pinned);
  void *pp = ct_data_ptr(pinned);
  // A second cached block of the bucket, so that no cudaHostAlloc (which may
  // wait for the device) runs while the side stream is held.
  void *w = ct_pinned_alloc(4000);
  TU_CHECK(w);
  ct_pinned_free(w);
  TU_OK(ct_set_stream(side));
  ct_tensor *d = ct_empty(CT_SHAPE(1000), CT_F32, tu_device);
  hold(side);
  int rc = d ? (int)ct_copy_(d, pinned, true) : (int)ct_last_status();
  TU_OK(ct_set_stream(def));
  TU_OK(rc);
  ct_free(pinned);
  void *q = ct_pinned_alloc(4000);
  TU_CHECK(q);
  assert_ptr_equal(q, w); // not pp: the copy still reads it
  release(side);
  void *r = ct_pinned_alloc(4000);
  assert_ptr_equal(r, pp); // the copy is done: the block is free again
  ct_pinned_free(q);
  ct_pinned_free(r);
  float back[1000];
  TU_OK(ct_set_stream(side));
  TU_OK(ct_copy_to_host(d, back, sizeof back));
  TU_OK(ct_set_stream(def));
  for (int i = 0; i < 1000; ++i) assert_true(back[i] == 3.0f);
  ct_free(d);
  ct_free(h);
  ct_stream_free(side);
  TU_OK(ct_pinned_empty_cache());
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_rounding_and_counts, clean_start),
      cmocka_unit_test_setup(test_free_keeps_reserved, clean_start),
      cmocka_unit_test_setup(test_reuse_cached_block, clean_start),
      cmocka_unit_test_setup(test_best_fit, clean_start),
      cmocka_unit_test_setup(test_split_and_coalesce, clean_start),
      cmocka_unit_test_setup(test_segment_sizes, clean_start),
      cmocka_unit_test_setup(test_empty_cache_keeps_live_segments, clean_start),
      cmocka_unit_test_setup(test_reset_peak, clean_start),
      cmocka_unit_test_setup(test_oom_driver, clean_start),
      cmocka_unit_test_setup_teardown(test_fraction_oom, clean_start, restore_fraction),
      cmocka_unit_test_setup_teardown(test_oom_flush_and_retry, clean_start, restore_fraction),
      cmocka_unit_test_setup(test_private_pool, clean_start),
      cmocka_unit_test_setup(test_stream_isolation, clean_start),
      cmocka_unit_test_setup(test_stream_destroy_retires, clean_start),
      cmocka_unit_test_setup(test_memory_summary, clean_start),
      cmocka_unit_test_setup(test_poison, clean_start),
      cmocka_unit_test_setup(test_pinned, clean_start),
      cmocka_unit_test_setup(test_unavailable_device, clean_start),
      cmocka_unit_test_setup(test_cuda_names, clean_start),
      cmocka_unit_test_setup(test_threads, clean_start),
      cmocka_unit_test_setup(test_tensor_storage, clean_start),
      cmocka_unit_test_setup(test_record_stream_defers, clean_start),
      cmocka_unit_test_setup(test_record_stream_own_stream, clean_start),
      cmocka_unit_test_setup(test_record_stream_empty_cache, clean_start),
      cmocka_unit_test_setup(test_record_stream_destroyed_stream, clean_start),
      cmocka_unit_test_setup(test_record_stream_tensor, clean_start),
      cmocka_unit_test_setup(test_poison_on_allocating_stream, clean_start),
      cmocka_unit_test_setup(test_pinned_record_stream, clean_start),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
