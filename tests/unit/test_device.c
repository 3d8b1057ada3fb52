// SPDX-License-Identifier: MIT
//
// test_device: device strings, "auto" selection and the torch.cuda queries.
//
// Invariant checked: a device string parses the way torch.device's does for
// the forms this runtime accepts ("cpu", "cuda", "cuda:N") and every other
// string fails with CT_ERR_VALUE and the message the header promises; the
// availability answers agree with one another (available <=> count > 0 <=>
// no reason) on every machine; and on a GPU the properties are those of a
// real device (SMs, memory, capability >= 7.0) with the derived peaks
// recomputed here from the raw fields.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"

static const char *expected_bad(const char *s, char *buf, size_t len) {
  snprintf(buf, len,
           "ct_device_parse: expected a device string \"cpu\", \"cuda\" or \"cuda:N\", got \"%s\"", s);
  return buf;
}

static void test_parse_cpu_and_str(void **state) {
  (void)state;
  ct_device d = ct_device_cuda(5);
  TU_OK(ct_device_parse("cpu", &d));
  assert_int_equal(d.type, CT_CPU);
  assert_int_equal(d.index, -1);
  assert_true(ct_device_eq(d, ct_device_cpu()));

  char buf[CT_DEVICE_STR_MAX];
  assert_string_equal(ct_device_str(ct_device_cpu(), buf), "cpu");
  assert_string_equal(ct_device_str(ct_device_cuda(0), buf), "cuda:0");
  assert_string_equal(ct_device_str(ct_device_cuda(3), buf), "cuda:3");
  // The widest index fits the documented buffer size.
  assert_string_equal(ct_device_str(ct_device_cuda(2147483647), buf), "cuda:2147483647");

  assert_true(ct_device_eq(ct_device_cuda(1), ct_device_cuda(1)));
  assert_false(ct_device_eq(ct_device_cuda(0), ct_device_cuda(1)));
  assert_false(ct_device_eq(ct_device_cpu(), ct_device_cuda(0)));
}

static void test_parse_bad_strings(void **state) {
  (void)state;
  const char *bad[] = {"",       "gpu",      "cuda:",     "cuda:-1",  "cuda:1x",
                       "CPU",    "CUDA",     "cuda0",     "cuda:01",  "cuda:00",
                       " cpu",   "cpu ",     "cuda: 1",   "cuda:+1",  "cpu:0",
                       "cuda:0:0", "cuda::0", "cuda:1.0", "cuda:9999999999", "cudax"};
  char want[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ct_device d = ct_device_cuda(7);
    ct_clear_error();
    int rc = ct_device_parse(bad[i], &d);
    if (rc != CT_ERR_VALUE)
      fail_msg("ct_device_parse(\"%s\") returned %d (%s), expected CT_ERR_VALUE", bad[i], rc,
               ct_last_error());
    assert_string_equal(ct_last_error(), expected_bad(bad[i], want, sizeof want));
    assert_int_equal(ct_last_status(), CT_ERR_VALUE);
    // The output is left alone on failure.
    assert_int_equal(d.type, CT_CUDA);
    assert_int_equal(d.index, 7);
  }
  ct_device d;
  assert_int_equal(ct_device_parse(NULL, &d), CT_ERR_VALUE);
  assert_int_equal(ct_device_parse("cpu", NULL), CT_ERR_VALUE);
}

static void test_parse_cuda(void **state) {
  (void)state;
  ct_device d;
  char buf[CT_DEVICE_STR_MAX], want[256];
  if (!ct_cuda_is_available()) {
    const char *asks[] = {"cuda", "cuda:0", "cuda:3"};
    for (int i = 0; i < 3; ++i) {
      assert_int_equal(ct_device_parse(asks[i], &d), CT_ERR_UNAVAILABLE);
      // The message carries CUDA's (or the build's) own reason.
      assert_non_null(strstr(ct_last_error(), ct_cuda_unavailable_reason()));
      assert_non_null(strstr(ct_last_error(), asks[i]));
    }
    return;
  }
  int n = ct_cuda_device_count();
  TU_OK(ct_device_parse("cuda", &d));
  assert_int_equal(d.type, CT_CUDA);
  assert_int_equal(d.index, ct_cuda_current_device());
  // Every device's string parses back to itself.
  for (int i = 0; i < n; ++i) {
    ct_device back;
    TU_OK(ct_device_parse(ct_device_str(ct_device_cuda(i), buf), &back));
    assert_true(ct_device_eq(back, ct_device_cuda(i)));
  }
  int past[] = {n, n + 1, 999};
  for (int i = 0; i < 3; ++i) {
    char s[32];
    snprintf(s, sizeof s, "cuda:%d", past[i]);
    assert_int_equal(ct_device_parse(s, &d), CT_ERR_DEVICE);
    snprintf(want, sizeof want, "ct_device_parse: CUDA device index %d out of range (%d device%s)",
             past[i], n, n == 1 ? "" : "s");
    assert_string_equal(ct_last_error(), want);
  }
}

static void test_select(void **state) {
  (void)state;
  ct_device d;
  char why[256];
  TU_OK(ct_device_select("auto", &d, why, sizeof why));
  if (ct_cuda_is_available()) {
    assert_int_equal(d.type, CT_CUDA);
    assert_int_equal(d.index, ct_cuda_current_device());
    assert_string_equal(why, "");
  } else {
    assert_int_equal(d.type, CT_CPU);
    const char *prefix = "CUDA unavailable: ";
    assert_int_equal(strncmp(why, prefix, strlen(prefix)), 0);
    assert_true(strlen(why) > strlen(prefix));
    // A short buffer is truncated, never overrun.
    char small[8];
    memset(small, 'x', sizeof small);
    TU_OK(ct_device_select("auto", &d, small, sizeof small));
    assert_int_equal(strlen(small), sizeof small - 1);
  }
  TU_OK(ct_device_select(NULL, &d, NULL, 0)); // NULL spec = auto; NULL why is fine

  strcpy(why, "stale");
  TU_OK(ct_device_select("cpu", &d, why, sizeof why));
  assert_int_equal(d.type, CT_CPU);
  assert_string_equal(why, "");

  char want[256];
  assert_int_equal(ct_device_select("gpu", &d, why, sizeof why), CT_ERR_VALUE);
  assert_string_equal(ct_last_error(), expected_bad("gpu", want, sizeof want));
}

// The answers agree with one another on every machine, GPU or not.
static void test_availability_consistent(void **state) {
  (void)state;
  bool avail = ct_cuda_is_available();
  const char *reason = ct_cuda_unavailable_reason();
  int n = ct_cuda_device_count();
  assert_non_null(reason);
  // Asked twice, the same answer (the probe runs once).
  assert_int_equal(ct_cuda_is_available(), avail);
  assert_ptr_equal(ct_cuda_unavailable_reason(), reason);
  if (avail) {
    assert_true(n > 0);
    assert_string_equal(reason, "");
    int cur = ct_cuda_current_device();
    assert_true(cur >= 0 && cur < n);
    return;
  }
  assert_int_equal(n, 0);
  assert_true(strlen(reason) > 0);
  assert_int_equal(ct_cuda_current_device(), -1);
#ifndef CT_HAVE_CUDA
  assert_string_equal(reason, "this build has no CUDA backend (configured without nvcc)");
  assert_int_equal(ct_cuda_runtime_version(), 0);
  assert_int_equal(ct_cuda_driver_version(), 0);
  assert_int_equal(ct_cublas_version(), 0);
#else
  // CUDA's own words: "<cudaGetErrorName>: <cudaGetErrorString>".
  assert_int_equal(strncmp(reason, "cudaError", 9), 0);
  assert_non_null(strstr(reason, ": "));
#endif
  // Every query fails cleanly, prints nothing and leaves outputs sane.
  ct_cuda_device_properties p;
  memset(&p, 0x5a, sizeof p);
  assert_int_equal(ct_cuda_get_device_properties(0, &p), CT_ERR_UNAVAILABLE);
  assert_non_null(strstr(ct_last_error(), reason));
  assert_int_equal(p.multi_processor_count, 0); // zeroed, not left as garbage
  char name[64] = "stale";
  assert_int_equal(ct_cuda_get_device_name(0, name, sizeof name), CT_ERR_UNAVAILABLE);
  assert_string_equal(name, "");
  assert_int_equal(ct_cuda_set_device(0), CT_ERR_UNAVAILABLE);
  assert_int_equal(ct_cuda_synchronize(0), CT_ERR_UNAVAILABLE);
}

static void test_bad_arguments(void **state) {
  (void)state;
  assert_int_equal(ct_cuda_get_device_properties(0, NULL), CT_ERR_VALUE);
  assert_int_equal(ct_cuda_get_device_name(0, NULL, 10), CT_ERR_VALUE);
  if (ct_cuda_is_available()) {
    int n = ct_cuda_device_count();
    ct_cuda_device_properties p;
    assert_int_equal(ct_cuda_get_device_properties(-1, &p), CT_ERR_DEVICE);
    assert_int_equal(ct_cuda_get_device_properties(n, &p), CT_ERR_DEVICE);
    assert_int_equal(ct_cuda_set_device(n), CT_ERR_DEVICE);
    assert_int_equal(ct_cuda_synchronize(-1), CT_ERR_DEVICE);
  }
}

// On the GPU under test: numbers a real device has.
static void test_properties(void **state) {
  (void)state;
  if (tu_device.type != CT_CUDA) {
    skip(); // the CPU has no CUDA properties; test_availability_consistent covers it
    return;
  }
  int idx = tu_device.index;
  ct_cuda_device_properties p;
  TU_OK(ct_cuda_get_device_properties(idx, &p));
  print_message("%s: cc %d.%d, %d SMs, %.1f GiB, SM clock %d kHz, mem clock %d kHz, bus %d bits, "
                "L2 %d B, %.0f GB/s, %.0f GFLOP/s fp32\n",
                p.name, p.major, p.minor, p.multi_processor_count,
                (double)p.total_memory / (1 << 30), p.clock_rate_khz, p.memory_clock_rate_khz,
                p.memory_bus_width_bits, p.l2_cache_size, p.peak_memory_bandwidth_gbs,
                p.peak_fp32_gflops);
  assert_true(strlen(p.name) > 0);
  char name[256];
  TU_OK(ct_cuda_get_device_name(idx, name, sizeof name));
  assert_string_equal(name, p.name);
  assert_true(p.major * 10 + p.minor >= 70);
  assert_true(p.multi_processor_count > 0);
  assert_true(p.total_memory > ((size_t)1 << 30));
  assert_true(p.clock_rate_khz > 100000);       // > 100 MHz
  assert_true(p.memory_clock_rate_khz > 100000);
  assert_true(p.memory_bus_width_bits >= 64);
  assert_true(p.l2_cache_size > 0);
  assert_int_equal(p.warp_size, 32);
  assert_true(p.max_threads_per_block >= 1024);
  assert_true(p.max_threads_per_multiprocessor >= p.max_threads_per_block);
  assert_true(p.shared_memory_per_block >= 48 * 1024);
  assert_true(p.shared_memory_per_multiprocessor >= p.shared_memory_per_block);
  assert_true(p.regs_per_multiprocessor >= 65536);
  // Derived peaks, recomputed from the raw fields.
  double bw = 2.0 * p.memory_clock_rate_khz * 1e3 * p.memory_bus_width_bits / 8.0 / 1e9;
  assert_true(p.peak_memory_bandwidth_gbs > 0);
  assert_true(fabs(p.peak_memory_bandwidth_gbs - bw) <= 1e-9 * bw);
  int cc = p.major * 10 + p.minor;
  int lanes = (cc == 70 || cc == 72 || cc == 75 || cc == 80) ? 64
              : (cc >= 86 && cc < 130)                      ? 128
                                                            : -1;
  if (lanes > 0) {
    assert_int_equal(p.fp32_lanes_per_sm, lanes);
    double gf = 2.0 * lanes * p.multi_processor_count * p.clock_rate_khz * 1e3 / 1e9;
    assert_true(fabs(p.peak_fp32_gflops - gf) <= 1e-9 * gf);
  }
  // Versions: a driver new enough for this runtime, and cuBLAS answering.
  int rt = ct_cuda_runtime_version(), drv = ct_cuda_driver_version();
  print_message("runtime %d, driver %d, cuBLAS %d\n", rt, drv, ct_cublas_version());
  assert_true(rt >= 11000);
  assert_true(drv >= 11000);
  assert_true(ct_cublas_version() > 0);

  // set_device / current_device round trip, restored afterwards.
  int cur = ct_cuda_current_device();
  TU_OK(ct_cuda_set_device(idx));
  assert_int_equal(ct_cuda_current_device(), idx);
  TU_OK(ct_cuda_synchronize(idx));
  TU_OK(ct_cuda_set_device(cur));
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_cpu_and_str),
      cmocka_unit_test(test_parse_bad_strings),
      cmocka_unit_test(test_parse_cuda),
      cmocka_unit_test(test_select),
      cmocka_unit_test(test_availability_consistent),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_properties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
