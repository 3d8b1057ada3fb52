// SPDX-License-Identifier: MIT
//
// testutil: what every test binary shares.
//
// A unit test binary runs its cmocka group on one device, chosen by
// `--device cpu|cuda`; a crossdev binary by `--devices cpu[,cuda]`. Asking for
// CUDA where there is none exits 77 (ctest: skipped). Numbers are checked
// against float64 references with tolerances fitted to each dtype. The
// allocator's poison mode is on (CT_POISON_ALLOC=1 from ctest, and tu_init
// turns it on too), so an element an op forgets to write is NaN or -1 and
// fails the comparison.
#ifndef CT_TESTUTIL_H
#define CT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ct.h"

extern ct_device tu_device;          // unit tests: the device under test
extern ct_device tu_devices[2];      // crossdev: cpu, then cuda if asked
extern int tu_ndevices;

// Parses --device / --devices; exits 77 when CUDA is asked for and absent,
// 2 on bad arguments. Seeds ct_manual_seed from the clock (printed, and
// overridable with CT_TEST_SEED) so inputs are fresh each run yet replayable.
void tu_init(int argc, char **argv);
uint64_t tu_seed(void);

// Relative and absolute tolerances for results stored in dtype dt.
double tu_rtol(ct_dtype dt);
double tu_atol(ct_dtype dt);

// n uniform doubles in [lo, hi) from a host-side generator seeded by tu_seed.
void tu_fill_uniform(double *x, int64_t n, double lo, double hi);
// A tensor of dtype dt on dev holding x (n = numel(shape)), values rounded to dt.
ct_tensor *tu_from_f64(const double *x, ct_shape shape, ct_dtype dt, ct_device dev);
// The tensor's elements in row-major order as doubles; caller free()s.
double *tu_to_f64(const ct_tensor *t);
// Fails the test (cmocka) unless every element of t is within
// atol + rtol * |ref| of ref (NaN matches NaN, inf matches same-sign inf);
// the message names `what`, the first bad index and both values.
void tu_assert_close(const ct_tensor *t, const double *ref, double rtol, double atol, const char *what);
// Fails unless `call_result` is NULL/non-zero and the last error contains `needle`.
void tu_assert_error_contains(const char *needle, const char *what);

// Fails the test with the runtime's last error when p is NULL.
#define TU_CHECK(p)                                                            \
  do {                                                                         \
    if (!(p)) fail_msg("%s:%d: %s returned NULL: %s", __FILE__, __LINE__, #p, \
                       ct_last_error());                                       \
  } while (0)
#define TU_OK(call)                                                            \
  do {                                                                         \
    int tu_rc_ = (call);                                                       \
    if (tu_rc_ != 0) fail_msg("%s:%d: %s failed (%d): %s", __FILE__, __LINE__,  \
                              #call, tu_rc_, ct_last_error());                 \
  } while (0)

// Scratch directories. tu_scratch_dir makes a fresh directory named
// "<root>/ct_<tag>_XXXXXX", root being $TMPDIR, else /dev/shm (memory: some
// tests write thousands of small files), else /tmp; it fills dir (n bytes)
// and returns 0, or -1 (a cmocka group setup's failure). tu_scratch_path
// joins dir and a name into one of four rotating static buffers.
// tu_scratch_remove deletes the files directly in dir, then dir; always 0,
// so it serves as a group teardown's return value.
int tu_scratch_dir(char *dir, size_t n, const char *tag);
const char *tu_scratch_path(const char *dir, const char *name);
int tu_scratch_remove(const char *dir);

#endif
