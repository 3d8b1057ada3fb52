// SPDX-License-Identifier: MIT
//
// test_data: the IDX reader, the datasets and the DataLoader.
//
// Invariants checked, each against something the code under test did not
// compute:
//  - ct_idx_read returns, for files this test writes byte by byte (raw and
//    gzip'd with zlib), the dtype, dims and values written, and fails with
//    CT_ERR_IO and a message naming the file for every malformed one;
//  - Fashion-MNIST's sizes, labels and pixels agree with this test's own
//    parse of the gzip files (zlib, not ct_idx_read), and with facts about
//    the data set (60000/10000 samples, 6000/1000 per class, first label 9);
//    when the data set is not installed those tests are skipped;
//  - the DataLoader delivers every sample exactly once per epoch (or all but
//    the dropped tail), in batches of the right shapes on the device under
//    test, with the dataset's values, in an order that is the same for 0, 1
//    or 3 workers and is the documented Philox Fisher-Yates permutation,
//    recomputed here from ct_philox4x32_10;
//  - freeing or restarting a loader mid-epoch is clean (run under ASan).
#define _GNU_SOURCE // mkdtemp, setenv

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

#define FMNIST_DEFAULT "/usr/share/datasets/fashion-mnist"

// ---- a scratch directory -------------------------------------------------------------
static char tmpdir[256];
static char made[64][512]; // files written, removed at the end
static int nmade;

static const char *tmp_path(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static void note_file(const char *path) {
  for (int i = 0; i < nmade; ++i)
    if (!strcmp(made[i], path)) return;
  if (nmade < 64) snprintf(made[nmade++], sizeof made[0], "%s", path);
}

// Writes `n` bytes to path, gzip'd (zlib) or raw.
static void write_bytes(const char *path, const void *data, size_t n, bool gzip) {
  note_file(path);
  if (gzip) {
    gzFile g = gzopen(path, "wb");
    if (!g) fail_msg("gzopen(%s) failed", path);
    if (n && gzwrite(g, data, (unsigned)n) != (int)n) fail_msg("gzwrite(%s) failed", path);
    if (gzclose(g) != Z_OK) fail_msg("gzclose(%s) failed", path);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("fopen(%s) failed", path);
    if (n && fwrite(data, 1, n, f) != n) fail_msg("fwrite(%s) failed", path);
    fclose(f);
  }
}

static size_t put_be(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
  return (size_t)bytes;
}

// An IDX image in memory: header for (code, dims) + payload (already BE).
static uint8_t *idx_image(uint8_t code, int ndim, const uint32_t *dims, const uint8_t *payload,
                          size_t payload_bytes, size_t *total) {
  size_t n = 4 + 4 * (size_t)ndim + payload_bytes;
  uint8_t *b = malloc(n ? n : 1);
  b[0] = 0, b[1] = 0, b[2] = code, b[3] = (uint8_t)ndim;
  for (int i = 0; i < ndim; ++i) put_be(b + 4 + 4 * i, dims[i], 4);
  if (payload_bytes) memcpy(b + 4 + 4 * ndim, payload, payload_bytes);
  *total = n;
  return b;
}

// ---- IDX: every element type, raw and gzip'd -------------------------------------------
typedef struct idx_case {
  uint8_t code;
  int esize;
  ct_dtype dt;
  double lo, hi;
  bool integer;
} idx_case;

static void test_idx_dtypes(void **state) {
  (void)state;
  const idx_case cases[] = {
      {0x08, 1, CT_U8, 0, 256, true},
      {0x09, 1, CT_I32, -128, 128, true},
      {0x0B, 2, CT_I32, -32768, 32768, true},
      {0x0C, 4, CT_I32, -2147483648.0, 2147483648.0, true},
      {0x0D, 4, CT_F32, -1e6, 1e6, false},
      {0x0E, 8, CT_F64, -1e300, 1e300, false},
  };
  const uint32_t dims[3] = {3, 4, 5};
  const int64_t n = 60;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    const idx_case *k = &cases[c];
    double vals[60];
    tu_fill_uniform(vals, n, k->lo, k->hi);
    // Edge values: both ends of the integer ranges.
    if (k->integer) {
      vals[0] = k->lo;
      vals[1] = k->hi - 1;
    }
    uint8_t payload[60 * 8];
    for (int64_t i = 0; i < n; ++i) {
      uint64_t bits;
      if (k->integer) {
        vals[i] = floor(vals[i]);
        bits = (uint64_t)(int64_t)vals[i];
      } else if (k->esize == 4) {
        float f = (float)vals[i];
        vals[i] = f;
        uint32_t u;
        memcpy(&u, &f, 4);
        bits = u;
      } else {
        memcpy(&bits, &vals[i], 8);
      }
      put_be(payload + i * k->esize, bits, k->esize);
    }
    for (int gz = 0; gz < 2; ++gz) {
      size_t total = 0;
      uint8_t *img = idx_image(k->code, 3, dims, payload, (size_t)(n * k->esize), &total);
      char name[64];
      snprintf(name, sizeof name, "t%02x%s.idx", k->code, gz ? ".gz" : "");
      const char *path = tmp_path(name);
      write_bytes(path, img, total, gz);
      free(img);
      ct_tensor *t = ct_idx_read(path);
      TU_CHECK(t);
      assert_int_equal(ct_dtype_of(t), k->dt);
      assert_true(ct_shape_eq(ct_shape_of(t), CT_SHAPE(3, 4, 5)));
      assert_int_equal(ct_device_of(t).type, CT_CPU);
      char what[96];
      snprintf(what, sizeof what, "ct_idx_read type 0x%02x %s", k->code, gz ? "gzip" : "raw");
      tu_assert_close(t, vals, 0, 0, what);
      ct_free(t);
    }
  }
  // A 1-d file with no elements is a valid empty tensor.
  size_t total;
  uint32_t zero = 0;
  uint8_t *img = idx_image(0x08, 1, &zero, NULL, 0, &total);
  write_bytes(tmp_path("empty.idx"), img, total, false);
  free(img);
  ct_tensor *t = ct_idx_read(tmp_path("empty.idx"));
  TU_CHECK(t);
  assert_int_equal(ct_numel(t), 0);
  ct_free(t);
}

// Expects ct_idx_read(path) to fail with CT_ERR_IO, a message naming the
// path, and `needle`.
static void expect_idx_error(const char *path, const char *needle) {
  ct_clear_error();
  ct_tensor *t = ct_idx_read(path);
  if (t) {
    ct_free(t);
    fail_msg("ct_idx_read(%s) succeeded; expected an error with \"%s\"", path, needle);
  }
  assert_int_equal(ct_last_status(), CT_ERR_IO);
  tu_assert_error_contains(path, "the message names the file");
  tu_assert_error_contains(needle, path);
}

static void test_idx_errors(void **state) {
  (void)state;
  uint8_t payload[24];
  for (int i = 0; i < 24; ++i) payload[i] = (uint8_t)i;
  const uint32_t dims[2] = {4, 6};
  size_t total;
  uint8_t *good = idx_image(0x08, 2, dims, payload, 24, &total);

  expect_idx_error(tmp_path("does-not-exist.idx"), "No such file or directory");
  expect_idx_error(tmpdir, "is a directory, not a file");

  for (int gz = 0; gz < 2; ++gz) {
    const char *path = tmp_path(gz ? "bad.idx.gz" : "bad.idx");
    uint8_t b[64];
    // bad magic
    memcpy(b, good, total);
    b[0] = 0x12;
    write_bytes(path, b, total, gz);
    expect_idx_error(path, "not an IDX file");
    // unknown type byte
    memcpy(b, good, total);
    b[2] = 0x0A;
    write_bytes(path, b, total, gz);
    expect_idx_error(path, "unknown IDX element type 0x0a");
    // 0 dims and too many dims
    memcpy(b, good, total);
    b[3] = 0;
    write_bytes(path, b, total, gz);
    expect_idx_error(path, "0 dims");
    b[3] = 9;
    write_bytes(path, b, total, gz);
    expect_idx_error(path, "9 dims");
    // truncated: inside the magic, inside the dims, inside the payload
    write_bytes(path, good, 3, gz);
    expect_idx_error(path, "truncated");
    write_bytes(path, good, 9, gz);
    expect_idx_error(path, "truncated");
    write_bytes(path, good, total - 1, gz);
    expect_idx_error(path, "truncated");
    // dims that do not match the payload: too small (extra bytes)
    memcpy(b, good, total);
    put_be(b + 4, 3, 4);
    write_bytes(path, b, total, gz);
    expect_idx_error(path, gz ? "more data than dims (3, 6)" : "extra bytes");
    // ... and absurdly large (no allocation is attempted)
    memcpy(b, good, total);
    put_be(b + 4, 0xFFFFFFFFu, 4);
    put_be(b + 8, 0xFFFFFFFFu, 4);
    write_bytes(path, b, total, gz);
    expect_idx_error(path, gz ? "claim more data than" : "larger than any file");
    // An empty tensor whose other dims multiply past int64: refused too.
    uint32_t wide[8] = {0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu,
                        0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    size_t wn;
    uint8_t *w = idx_image(0x08, 8, wide, NULL, 0, &wn);
    write_bytes(path, w, wn, gz);
    free(w);
    expect_idx_error(path, gz ? "claim more data than" : "larger than any file");
    memcpy(b, good, total);
    put_be(b + 4, 4000000, 4);
    write_bytes(path, b, total, gz);
    expect_idx_error(path, gz ? "claim more data than" : "truncated");
  }

  // A gzip stream with a damaged CRC: zlib notices at the end of the stream.
  const char *path = tmp_path("crc.idx.gz");
  write_bytes(path, good, total, true);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  fseek(f, -8, SEEK_END); // the CRC32 of the trailer
  int c = fgetc(f);
  fseek(f, -8, SEEK_END);
  fputc(c ^ 0x5a, f);
  fclose(f);
  expect_idx_error(path, "corrupt gzip data");
  free(good);

  // The message names the operation, the path and what was wrong.
  ct_clear_error();
  assert_null(ct_idx_read(NULL));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
}

// ---- Fashion-MNIST -------------------------------------------------------------------
// This test's own reader of an IDX gzip file: header checked, payload bytes.
static uint8_t *own_read_gz(const char *path, int ndim, int64_t *dims) {
  gzFile g = gzopen(path, "rb");
  if (!g) return NULL;
  uint8_t h[16];
  int hn = 4 + 4 * ndim;
  if (gzread(g, h, (unsigned)hn) != hn || h[0] || h[1] || h[2] != 0x08 || h[3] != ndim) {
    gzclose(g);
    return NULL;
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    dims[i] = (int64_t)h[4 + 4 * i] << 24 | h[5 + 4 * i] << 16 | h[6 + 4 * i] << 8 | h[7 + 4 * i];
    n *= dims[i];
  }
  uint8_t *b = malloc((size_t)n);
  if (b && gzread(g, b, (unsigned)n) != n) {
    free(b);
    b = NULL;
  }
  gzclose(g);
  return b;
}

static const char *fmnist_dir(void) {
  const char *d = getenv("CT_FASHION_MNIST_DIR");
  return d && *d ? d : FMNIST_DEFAULT;
}

static bool fmnist_present(void) {
  char p[512];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", fmnist_dir());
  struct stat st;
  if (stat(p, &st) == 0) return true;
  fprintf(stderr, "[  SKIPPED ] Fashion-MNIST is not installed in %s (Debian's dataset-fashion-mnist)\n",
          fmnist_dir());
  return false;
}

static void check_fmnist_split(bool train) {
  const char *pre = train ? "train" : "t10k";
  const int64_t want_n = train ? 60000 : 10000;
  char ip[512], lp[512];
  snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte.gz", fmnist_dir(), pre);
  snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte.gz", fmnist_dir(), pre);
  int64_t idims[3], ldims[1];
  uint8_t *pix = own_read_gz(ip, 3, idims);
  uint8_t *lab = own_read_gz(lp, 1, ldims);
  assert_non_null(pix);
  assert_non_null(lab);
  assert_int_equal(idims[0], want_n);
  assert_int_equal(ldims[0], want_n);
  assert_int_equal(idims[1], 28);
  assert_int_equal(idims[2], 28);
  // Facts about the data set: first label 9 (Ankle boot) in both splits,
  // and balanced classes.
  assert_int_equal(lab[0], 9);
  int64_t counts[10] = {0};
  for (int64_t i = 0; i < want_n; ++i) {
    assert_true(lab[i] < 10);
    counts[lab[i]]++;
  }
  for (int c = 0; c < 10; ++c) assert_int_equal(counts[c], want_n / 10);

  const double mean = 0.2860, sd = 0.3530;
  ct_dataset *ds = ct_fashion_mnist(NULL, train, mean, sd);
  TU_CHECK(ds);
  assert_int_equal(ct_dataset_len(ds), want_n);
  assert_true(ct_shape_eq(ct_dataset_x_shape(ds), CT_SHAPE(1, 28, 28)));
  assert_int_equal(ct_dataset_y_shape(ds).ndim, 0);
  assert_int_equal(ct_dataset_x_dtype(ds), CT_F32);
  assert_int_equal(ct_dataset_y_dtype(ds), CT_I64);

  // Samples 0, the last, and random ones: values as torchvision computes
  // them, (float(p) / 255 - mean) / std in float32.
  enum { K = 16 };
  int64_t idx[K] = {0, want_n - 1};
  double r[K];
  tu_fill_uniform(r, K, 0, (double)want_n);
  for (int i = 2; i < K; ++i) idx[i] = (int64_t)r[i];
  ct_tensor *x = ct_empty(CT_SHAPE(K, 1, 28, 28), CT_F32, ct_device_cpu());
  ct_tensor *y = ct_empty(CT_SHAPE(K), CT_I64, ct_device_cpu());
  TU_OK(ct_dataset_get_batch(ds, idx, K, x, y));
  const float *xv = ct_data_ptr(x);
  const int64_t *yv = ct_data_ptr(y);
  for (int i = 0; i < K; ++i) {
    assert_int_equal(yv[i], lab[idx[i]]);
    for (int p = 0; p < 784; ++p) {
      float v = (float)pix[idx[i] * 784 + p] / 255.0f;
      v = (v - (float)mean) / (float)sd;
      if (xv[i * 784 + p] != v)
        fail_msg("%s sample %" PRId64 " pixel %d: got %.9g, expected %.9g", pre, idx[i], p,
                 xv[i * 784 + p], v);
    }
  }
  ct_dataset_free(ds);

  // ToTensor alone (std 0): pixels in [0, 1], and both ends are reached.
  ds = ct_fashion_mnist(fmnist_dir(), train, 0, 0);
  TU_CHECK(ds);
  enum { M = 64 };
  int64_t idm[M];
  for (int i = 0; i < M; ++i) idm[i] = i;
  ct_tensor *xm = ct_empty(CT_SHAPE(M, 1, 28, 28), CT_F32, ct_device_cpu());
  ct_tensor *ym = ct_empty(CT_SHAPE(M), CT_I64, ct_device_cpu());
  TU_OK(ct_dataset_get_batch(ds, idm, M, xm, ym));
  const float *v = ct_data_ptr(xm);
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < (int64_t)M * 784; ++i) {
    if (v[i] < lo) lo = v[i];
    if (v[i] > hi) hi = v[i];
    assert_true(v[i] == (float)pix[i] / 255.0f);
  }
  assert_true(lo == 0.0f);
  assert_true(hi == 1.0f);
  ct_free(xm);
  ct_free(ym);
  ct_dataset_free(ds);
  ct_free(x);
  ct_free(y);
  free(pix);
  free(lab);
}

static void test_fashion_mnist(void **state) {
  (void)state;
  if (!fmnist_present()) skip();
  check_fmnist_split(true);
  check_fmnist_split(false);
  assert_string_equal(ct_fashion_mnist_class_name(9), "Ankle boot");
  assert_string_equal(ct_fashion_mnist_class_name(0), "T-shirt/top");
  assert_string_equal(ct_fashion_mnist_class_name(10), "?");
}

// A fake Fashion-MNIST of 5 samples in a directory of this test's making.
static void write_fake_fmnist(const char *sub, int n_img, int n_lab, uint8_t bad_label) {
  char dir[512], p[600];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, sub);
  mkdir(dir, 0700);
  uint32_t idims[3] = {(uint32_t)n_img, 28, 28}, ldims[1] = {(uint32_t)n_lab};
  uint8_t *pix = malloc((size_t)n_img * 784), lab[16];
  for (int i = 0; i < n_img * 784; ++i) pix[i] = (uint8_t)(i * 7);
  for (int i = 0; i < n_lab; ++i) lab[i] = (uint8_t)(i % 10);
  if (bad_label) lab[n_lab - 1] = bad_label;
  size_t total;
  for (int s = 0; s < 2; ++s) {
    const char *pre = s ? "t10k" : "train";
    uint8_t *img = idx_image(0x08, 3, idims, pix, (size_t)n_img * 784, &total);
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte.gz", dir, pre);
    write_bytes(p, img, total, true);
    free(img);
    img = idx_image(0x08, 1, ldims, lab, (size_t)n_lab, &total);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte.gz", dir, pre);
    write_bytes(p, img, total, true);
    free(img);
  }
  free(pix);
  note_file(dir); // removed last (rmdir)
}

static void test_fashion_mnist_errors(void **state) {
  (void)state;
  ct_clear_error();
  assert_null(ct_fashion_mnist("/nonexistent/fmnist", true, 0, 0));
  assert_int_equal(ct_last_status(), CT_ERR_IO);
  assert_string_equal(ct_last_error(),
                      "ct_fashion_mnist: /nonexistent/fmnist/train-images-idx3-ubyte.gz: No such "
                      "file or directory. Install Debian's dataset-fashion-mnist (tools/bootstrap "
                      "does) or pass --data DIR");

  // The environment variable picks the directory when none is given.
  write_fake_fmnist("fake", 5, 5, 0);
  char dir[512];
  snprintf(dir, sizeof dir, "%s/fake", tmpdir);
  char *old = getenv("CT_FASHION_MNIST_DIR") ? strdup(getenv("CT_FASHION_MNIST_DIR")) : NULL;
  setenv("CT_FASHION_MNIST_DIR", dir, 1);
  ct_dataset *ds = ct_fashion_mnist(NULL, false, 0, 0);
  if (old) setenv("CT_FASHION_MNIST_DIR", old, 1);
  else unsetenv("CT_FASHION_MNIST_DIR");
  free(old);
  TU_CHECK(ds);
  assert_int_equal(ct_dataset_len(ds), 5);
  int64_t idx[2] = {4, 1};
  ct_tensor *x = ct_empty(CT_SHAPE(2, 1, 28, 28), CT_F32, ct_device_cpu());
  ct_tensor *y = ct_empty(CT_SHAPE(2), CT_I64, ct_device_cpu());
  TU_OK(ct_dataset_get_batch(ds, idx, 2, x, y));
  assert_int_equal(((int64_t *)ct_data_ptr(y))[0], 4);
  assert_int_equal(((int64_t *)ct_data_ptr(y))[1], 1);
  assert_true(((float *)ct_data_ptr(x))[3] == (float)(uint8_t)((4 * 784 + 3) * 7) / 255.0f);
  // An index out of range and a wrong output shape are errors, not crashes.
  idx[1] = 5;
  assert_int_equal(ct_dataset_get_batch(ds, idx, 2, x, y), CT_ERR_VALUE);
  tu_assert_error_contains("index 5", "index out of range");
  idx[1] = 0;
  assert_int_equal(ct_dataset_get_batch(ds, idx, 1, x, y), CT_ERR_SHAPE);
  ct_free(x);
  ct_free(y);
  ct_dataset_free(ds);

  // Malformed sets: counts that disagree, a label that is not a class.
  write_fake_fmnist("mismatch", 5, 4, 0);
  snprintf(dir, sizeof dir, "%s/mismatch", tmpdir);
  assert_null(ct_fashion_mnist(dir, true, 0, 0));
  assert_int_equal(ct_last_status(), CT_ERR_IO);
  tu_assert_error_contains("5 images but", "count mismatch");
  write_fake_fmnist("badlabel", 5, 5, 10);
  snprintf(dir, sizeof dir, "%s/badlabel", tmpdir);
  assert_null(ct_fashion_mnist(dir, true, 0, 0));
  tu_assert_error_contains("label 10 at index 4", "bad label");
  assert_null(ct_fashion_mnist(dir, true, 0, -1));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
}

// ---- TensorDataset / RandomDataset -----------------------------------------------------
// Sample i of the loader tests: x[i] = (i, i + 0.25, ..., ) over D features,
// y[i] = i, so every delivered row names its sample.
enum { D = 3 };
static ct_dataset *id_dataset(int64_t n, ct_tensor **xo, ct_tensor **yo) {
  double *xv = malloc(sizeof(double) * (size_t)(n * D + 1));
  double *yv = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < D; ++j) xv[i * D + j] = (double)i + 0.25 * j;
    yv[i] = (double)i;
  }
  ct_tensor *x = tu_from_f64(xv, CT_SHAPE(n, D), CT_F32, ct_device_cpu());
  ct_tensor *y = tu_from_f64(yv, CT_SHAPE(n), CT_I64, ct_device_cpu());
  free(xv);
  free(yv);
  ct_dataset *ds = ct_tensor_dataset(x, y);
  if (xo) *xo = x;
  else ct_free(x);
  if (yo) *yo = y;
  else ct_free(y);
  return ds;
}

static void test_tensor_dataset(void **state) {
  (void)state;
  ct_tensor *x, *y;
  ct_dataset *ds = id_dataset(10, &x, &y);
  TU_CHECK(ds);
  assert_int_equal(ct_dataset_len(ds), 10);
  assert_true(ct_shape_eq(ct_dataset_x_shape(ds), CT_SHAPE(D)));
  assert_int_equal(ct_dataset_y_shape(ds).ndim, 0);
  int64_t idx[3] = {7, 0, 7};
  ct_tensor *bx = ct_empty(CT_SHAPE(3, D), CT_F32, ct_device_cpu());
  ct_tensor *by = ct_empty(CT_SHAPE(3), CT_I64, ct_device_cpu());
  TU_OK(ct_dataset_get_batch(ds, idx, 3, bx, by));
  double ex[3 * D], ey[3] = {7, 0, 7};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < D; ++j) ex[i * D + j] = (double)idx[i] + 0.25 * j;
  tu_assert_close(bx, ex, 0, 0, "TensorDataset x rows");
  tu_assert_close(by, ey, 0, 0, "TensorDataset y");
  // Wrong dtype / device / shape of the outputs: errors.
  ct_tensor *bad = ct_empty(CT_SHAPE(3, D), CT_F64, ct_device_cpu());
  assert_int_equal(ct_dataset_get_batch(ds, idx, 3, bad, by), CT_ERR_DTYPE);
  ct_free(bad);
  assert_int_equal(ct_dataset_get_batch(ds, idx, -1, bx, by), CT_ERR_VALUE);
  assert_int_equal(ct_dataset_get_batch(NULL, idx, 3, bx, by), CT_ERR_VALUE);
  ct_dataset_free(ds);
  ct_free(bx);
  ct_free(by);

  // The first dims must agree; tensors must be CPU tensors.
  ct_tensor *y9 = ct_zeros(CT_SHAPE(9), CT_I64, ct_device_cpu());
  assert_null(ct_tensor_dataset(x, y9));
  assert_int_equal(ct_last_status(), CT_ERR_SHAPE);
  tu_assert_error_contains("size mismatch", "TensorDataset first dims");
  if (tu_device.type == CT_CUDA) {
    ct_tensor *xd = ct_to_device(x, tu_device);
    assert_null(ct_tensor_dataset(xd, y));
    assert_int_equal(ct_last_status(), CT_ERR_DEVICE);
    ct_free(xd);
  }
  ct_free(y9);
  // A non-contiguous x (a transpose) is gathered by its logical rows.
  ct_tensor *xt_base = ct_arange(0, 12, 1, CT_F32, ct_device_cpu());
  ct_tensor *xt4 = ct_reshape(xt_base, CT_SHAPE(3, 4));
  ct_tensor *xt = ct_t(xt4); // (4, 3): row i = (i, i + 4, i + 8)
  ct_tensor *y4 = ct_zeros(CT_SHAPE(4), CT_I64, ct_device_cpu());
  ds = ct_tensor_dataset(xt, y4);
  TU_CHECK(ds);
  int64_t i2[2] = {3, 1};
  bx = ct_empty(CT_SHAPE(2, 3), CT_F32, ct_device_cpu());
  by = ct_empty(CT_SHAPE(2), CT_I64, ct_device_cpu());
  TU_OK(ct_dataset_get_batch(ds, i2, 2, bx, by));
  const double et[6] = {3, 7, 11, 1, 5, 9};
  tu_assert_close(bx, et, 0, 0, "TensorDataset over a transposed x");
  ct_dataset_free(ds);
  ct_free(bx);
  ct_free(by);
  ct_free(xt);
  ct_free(xt4);
  ct_free(xt_base);
  ct_free(y4);
  ct_free(x);
  ct_free(y);
}

static void test_random_dataset(void **state) {
  (void)state;
  // The seeds' RandomDataset(size=5, length=100) with batch_size 30.
  ct_manual_seed(1234);
  ct_dataset *ds = ct_random_dataset(5, 100);
  TU_CHECK(ds);
  assert_int_equal(ct_dataset_len(ds), 100);
  assert_true(ct_shape_eq(ct_dataset_x_shape(ds), CT_SHAPE(5)));
  assert_int_equal(ct_dataset_y_shape(ds).ndim, 0);
  assert_int_equal(ct_dataset_x_dtype(ds), CT_F32);
  assert_int_equal(ct_dataset_y_dtype(ds), CT_I64);
  // x is randn(100, 5) from the CPU generator at creation.
  ct_manual_seed(1234);
  ct_tensor *ref = ct_randn(CT_SHAPE(100, 5), CT_F32, ct_device_cpu());
  double *rv = tu_to_f64(ref);

  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = 30;
  o.device = tu_device;
  ct_dataloader *dl = ct_dataloader_create(ds, o);
  TU_CHECK(dl);
  assert_int_equal(ct_dataloader_len(dl), 4);
  TU_OK(ct_dataloader_start_epoch(dl));
  ct_tensor *x, *y;
  int64_t seen = 0;
  for (int b = 0; b < 4; ++b) {
    assert_int_equal(ct_dataloader_next(dl, &x, &y), 1);
    int64_t n = b < 3 ? 30 : 10;
    assert_true(ct_shape_eq(ct_shape_of(x), CT_SHAPE(n, 5)));
    assert_true(ct_shape_eq(ct_shape_of(y), CT_SHAPE(n)));
    assert_true(ct_device_eq(ct_device_of(x), tu_device));
    tu_assert_close(x, rv + seen * 5, 0, 0, "RandomDataset batch");
    double zeros[30] = {0};
    tu_assert_close(y, zeros, 0, 0, "RandomDataset labels");
    seen += n;
    ct_free(x);
    ct_free(y);
  }
  assert_int_equal(ct_dataloader_next(dl, &x, &y), 0);
  assert_null(x);
  assert_int_equal(ct_dataloader_next(dl, &x, &y), 0); // stays at the end
  ct_dataloader_free(dl);
  ct_dataset_free(ds);
  ct_free(ref);
  free(rv);
  assert_null(ct_random_dataset(-1, 3));
}

// ---- DataLoader ----------------------------------------------------------------------
// One epoch: the order of samples (y values) into order[], checking shapes,
// device and that each x row is its sample's. Returns the number of samples.
static int64_t run_epoch(ct_dataloader *dl, int64_t len, int64_t bs, bool drop_last, int64_t *order) {
  TU_OK(ct_dataloader_start_epoch(dl));
  int64_t got = 0, batches = 0;
  ct_tensor *x, *y;
  int rc;
  while ((rc = ct_dataloader_next(dl, &x, &y)) == 1) {
    int64_t n = ct_size(y, 0);
    assert_true(ct_device_eq(ct_device_of(x), tu_device));
    assert_true(ct_device_eq(ct_device_of(y), tu_device));
    assert_true(ct_shape_eq(ct_shape_of(x), CT_SHAPE(n, D)));
    assert_int_equal(ct_ndim(y), 1);
    assert_int_equal(ct_dtype_of(y), CT_I64);
    // Full batches, then (without drop_last) the remainder.
    if (drop_last || got + bs <= len) assert_int_equal(n, bs);
    else assert_int_equal(n, len - got);
    double *xv = tu_to_f64(x), *yv = tu_to_f64(y);
    for (int64_t i = 0; i < n; ++i) {
      order[got + i] = (int64_t)yv[i];
      for (int j = 0; j < D; ++j)
        if (xv[i * D + j] != yv[i] + 0.25 * j)
          fail_msg("batch %" PRId64 " row %" PRId64 ": x[%d] = %g for sample %g", batches, i, j,
                   xv[i * D + j], yv[i]);
    }
    free(xv);
    free(yv);
    ct_free(x);
    ct_free(y);
    got += n;
    batches++;
  }
  assert_int_equal(rc, 0);
  assert_int_equal(batches, ct_dataloader_len(dl));
  return got;
}

static void check_once(const int64_t *order, int64_t got, int64_t len, int64_t bs, bool drop_last) {
  int64_t want = drop_last ? len / bs * bs : len;
  assert_int_equal(got, want);
  char *seen = calloc((size_t)len + 1, 1);
  for (int64_t i = 0; i < got; ++i) {
    assert_true(order[i] >= 0 && order[i] < len);
    if (seen[order[i]]) fail_msg("sample %" PRId64 " delivered twice", order[i]);
    seen[order[i]] = 1;
  }
  free(seen);
}

static void test_loader_exactly_once(void **state) {
  (void)state;
  const int64_t lens[] = {0, 1, 7, 100};
  const int64_t bss[] = {1, 3, 32, 100, 128};
  const int workers[] = {0, 1, 3};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; ++li) {
    int64_t len = lens[li];
    ct_dataset *ds = id_dataset(len, NULL, NULL);
    TU_CHECK(ds);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)(len + 1));
    for (size_t bi = 0; bi < sizeof bss / sizeof bss[0]; ++bi)
      for (int sh = 0; sh < 2; ++sh)
        for (int dr = 0; dr < 2; ++dr)
          for (size_t wi = 0; wi < sizeof workers / sizeof workers[0]; ++wi) {
            ct_dataloader_options o = ct_dataloader_defaults();
            o.batch_size = bss[bi];
            o.shuffle = sh;
            o.drop_last = dr;
            o.num_workers = workers[wi];
            o.prefetch_factor = 1 + (int)(bi % 3);
            o.seed = 42;
            o.device = tu_device;
            o.pin_memory = tu_device.type == CT_CUDA && (bi % 2 == 0);
            ct_dataloader *dl = ct_dataloader_create(ds, o);
            TU_CHECK(dl);
            int64_t nb = dr ? len / o.batch_size : (len + o.batch_size - 1) / o.batch_size;
            assert_int_equal(ct_dataloader_len(dl), nb);
            for (int epoch = 0; epoch < 2; ++epoch) {
              int64_t got = run_epoch(dl, len, o.batch_size, dr, order);
              check_once(order, got, len, o.batch_size, dr);
              if (!sh)
                for (int64_t i = 0; i < got; ++i) assert_int_equal(order[i], i);
            }
            ct_dataloader_free(dl);
          }
    free(order);
    ct_dataset_free(ds);
  }
}

// The documented permutation, recomputed here: Fisher-Yates over Philox
// words with key seed + epoch, u64 draws reduced by multiply-and-reject.
typedef struct ref_rng {
  uint32_t key[2], buf[4];
  uint64_t block;
  int pos;
} ref_rng;

static uint32_t ref_word(ref_rng *r) {
  if (r->pos == 4) {
    uint32_t ctr[4] = {(uint32_t)r->block, (uint32_t)(r->block >> 32), 0, 0};
    ct_philox4x32_10(ctr, r->key, r->buf);
    r->block++;
    r->pos = 0;
  }
  return r->buf[r->pos++];
}

static void ref_permutation(int64_t *p, int64_t n, uint64_t key) {
  ref_rng r = {.key = {(uint32_t)key, (uint32_t)(key >> 32)}, .pos = 4};
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t bound = (uint64_t)i + 1, j;
    for (;;) {
      uint64_t lo = ref_word(&r);
      uint64_t v = lo | (uint64_t)ref_word(&r) << 32;
      unsigned __int128 m = (unsigned __int128)v * bound;
      // accept unless the low half falls in the biased zone
      if ((uint64_t)m >= (0 - bound) % bound) {
        j = (uint64_t)(m >> 64);
        break;
      }
    }
    int64_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

static void test_loader_order(void **state) {
  (void)state;
  const int64_t len = 257;
  ct_dataset *ds = id_dataset(len, NULL, NULL);
  TU_CHECK(ds);
  int64_t ref[257], got[257], first[2][257];
  const int workers[] = {0, 1, 3};
  for (size_t wi = 0; wi < 3; ++wi) {
    ct_dataloader_options o = ct_dataloader_defaults();
    o.batch_size = 16;
    o.shuffle = true;
    o.seed = 7;
    o.num_workers = workers[wi];
    o.device = tu_device;
    ct_dataloader *dl = ct_dataloader_create(ds, o);
    TU_CHECK(dl);
    for (int e = 0; e < 2; ++e) {
      assert_int_equal(run_epoch(dl, len, 16, false, got), len);
      ref_permutation(ref, len, 7 + (uint64_t)e);
      for (int64_t i = 0; i < len; ++i)
        if (got[i] != ref[i])
          fail_msg("workers %d epoch %d: position %" PRId64 " holds %" PRId64 ", expected %" PRId64,
                   workers[wi], e, i, got[i], ref[i]);
      if (wi == 0) memcpy(first[e], got, sizeof got);
    }
    ct_dataloader_free(dl);
  }
  // Epochs differ, and so do seeds.
  assert_true(memcmp(first[0], first[1], sizeof first[0]) != 0);
  ref_permutation(ref, len, 1000);
  assert_true(memcmp(first[0], ref, sizeof ref) != 0);
  // The permutation does not depend on the global generator.
  ct_manual_seed(99);
  ct_dataloader_options o = ct_dataloader_defaults();
  o.batch_size = 50;
  o.shuffle = true;
  o.seed = 7;
  o.device = tu_device;
  ct_dataloader *dl = ct_dataloader_create(ds, o);
  run_epoch(dl, len, 50, false, got);
  assert_memory_equal(got, first[0], sizeof got);
  ct_dataloader_free(dl);
  ct_dataset_free(ds);
}

static void test_loader_pin_memory(void **state) {
  (void)state;
  ct_dataset *ds = id_dataset(20, NULL, NULL);
  // On the CPU: pinned batches where CUDA exists; elsewhere PyTorch's
  // behaviour: a warning, and pageable batches.
  for (int w = 0; w < 2; ++w) {
    ct_dataloader_options o = ct_dataloader_defaults();
    o.batch_size = 8;
    o.pin_memory = true;
    o.num_workers = w;
    ct_dataloader *dl = ct_dataloader_create(ds, o);
    TU_CHECK(dl);
    ct_tensor *x, *y;
    assert_int_equal(ct_dataloader_next(dl, &x, &y), 1); // epoch 0 starts by itself
    assert_int_equal(ct_device_of(x).type, CT_CPU);
    assert_int_equal(ct_is_pinned(x), ct_cuda_is_available());
    assert_int_equal(ct_is_pinned(y), ct_cuda_is_available());
    ct_free(x);
    ct_free(y);
    ct_dataloader_free(dl);
  }
  // Batches asked for on a GPU that is not there: a clear error.
  if (!ct_cuda_is_available()) {
    ct_dataloader_options o = ct_dataloader_defaults();
    o.device = ct_device_cuda(0);
    assert_null(ct_dataloader_create(ds, o));
    assert_int_equal(ct_last_status(), CT_ERR_UNAVAILABLE);
  }
  ct_dataset_free(ds);
}

static void test_loader_early_free(void **state) {
  (void)state;
  const int64_t len = 1000;
  ct_dataset *ds = id_dataset(len, NULL, NULL);
  int64_t *order = malloc(sizeof(int64_t) * len);
  for (int pin = 0; pin < 2; ++pin) {
    ct_dataloader_options o = ct_dataloader_defaults();
    o.batch_size = 10;
    o.shuffle = true;
    o.num_workers = 3;
    o.prefetch_factor = 2;
    o.device = tu_device;
    o.pin_memory = pin;
    // Never started; started and never read; freed after a few batches.
    ct_dataloader *dl = ct_dataloader_create(ds, o);
    ct_dataloader_free(dl);
    dl = ct_dataloader_create(ds, o);
    TU_OK(ct_dataloader_start_epoch(dl));
    ct_dataloader_free(dl);
    dl = ct_dataloader_create(ds, o);
    TU_OK(ct_dataloader_start_epoch(dl));
    ct_tensor *x, *y;
    for (int i = 0; i < 3; ++i) {
      assert_int_equal(ct_dataloader_next(dl, &x, &y), 1);
      ct_free(x);
      ct_free(y);
    }
    ct_dataloader_free(dl);
    // Restarted mid-epoch: the new epoch is whole.
    dl = ct_dataloader_create(ds, o);
    TU_OK(ct_dataloader_start_epoch(dl));
    for (int i = 0; i < 5; ++i) {
      assert_int_equal(ct_dataloader_next(dl, &x, &y), 1);
      ct_free(x);
      ct_free(y);
    }
    int64_t got = run_epoch(dl, len, 10, false, order);
    check_once(order, got, len, 10, false);
    ct_dataloader_free(dl);
  }
  free(order);
  ct_dataset_free(ds);
}

static void test_loader_errors(void **state) {
  (void)state;
  ct_dataset *ds = id_dataset(5, NULL, NULL);
  ct_dataloader_options o = ct_dataloader_defaults();
  assert_int_equal(o.batch_size, 1);
  assert_int_equal(o.prefetch_factor, 2);
  assert_int_equal(o.device.type, CT_CPU);
  assert_null(ct_dataloader_create(NULL, o));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  o.batch_size = 0;
  assert_null(ct_dataloader_create(ds, o));
  tu_assert_error_contains("batch_size", "batch_size 0");
  o.batch_size = 2;
  o.num_workers = -1;
  assert_null(ct_dataloader_create(ds, o));
  tu_assert_error_contains("num_workers", "negative workers");
  o.num_workers = 2;
  o.prefetch_factor = 0;
  assert_null(ct_dataloader_create(ds, o));
  tu_assert_error_contains("prefetch_factor", "prefetch 0");
  o.prefetch_factor = 2;
  ct_dataloader *dl = ct_dataloader_create(ds, o);
  TU_CHECK(dl);
  ct_tensor *x;
  assert_true(ct_dataloader_next(dl, &x, NULL) < 0);
  assert_int_equal(ct_dataloader_start_epoch(NULL), CT_ERR_VALUE);
  assert_int_equal(ct_dataloader_len(dl), 3);
  ct_dataloader_free(dl);
  ct_dataloader_free(NULL);
  ct_dataset_free(ds);
  ct_dataset_free(NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Fashion-MNIST through the loader as ch06 uses it: batch 256, shuffled,
// 2 workers (and 0 for comparison), pinned, on the device under test. Every
// training sample once per epoch; the rate is printed (the loader must keep
// far ahead of a training step).
static void test_loader_fashion_mnist(void **state) {
  (void)state;
  if (!fmnist_present()) skip();
  ct_dataset *ds = ct_fashion_mnist(NULL, true, 0.2860, 0.3530);
  TU_CHECK(ds);
  for (int w = 2; w >= 0; w -= 2) {
    ct_dataloader_options o = ct_dataloader_defaults();
    o.batch_size = 256;
    o.shuffle = true;
    o.num_workers = w;
    o.pin_memory = true;
    o.seed = 3;
    o.device = tu_device;
    ct_dataloader *dl = ct_dataloader_create(ds, o);
    TU_CHECK(dl);
    assert_int_equal(ct_dataloader_len(dl), 235);
    TU_OK(ct_dataloader_start_epoch(dl));
    int64_t counts[10] = {0}, n = 0, batches = 0;
    double t0 = now_s();
    ct_tensor *x, *y;
    int rc;
    while ((rc = ct_dataloader_next(dl, &x, &y)) == 1) {
      assert_true(ct_shape_eq(ct_shape_of(x), CT_SHAPE(ct_size(y, 0), 1, 28, 28)));
      int64_t lab[256];
      TU_OK(ct_copy_to_host(y, lab, sizeof lab));
      for (int64_t i = 0; i < ct_size(y, 0); ++i) {
        assert_true(lab[i] >= 0 && lab[i] < 10);
        counts[lab[i]]++;
      }
      n += ct_size(y, 0);
      batches++;
      ct_free(x);
      ct_free(y);
    }
    double dt = now_s() - t0;
    assert_int_equal(rc, 0);
    assert_int_equal(n, 60000);
    for (int c = 0; c < 10; ++c) assert_int_equal(counts[c], 6000);
    char d[CT_DEVICE_STR_MAX];
    printf("loader: Fashion-MNIST train, batch 256, %d workers, to %s: %" PRId64
           " batches in %.3f s = %.0f batches/s (%.0f images/s)\n",
           w, ct_device_str(tu_device, d), batches, dt, batches / dt, n / dt);
    assert_true(batches / dt > 20); // a training step of ch06 takes far longer
    ct_dataloader_free(dl);
  }
  ct_dataset_free(ds);
}

static int setup(void **state) {
  (void)state;
  return tu_scratch_dir(tmpdir, sizeof tmpdir, "test_data");
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < nmade; ++i)
    if (remove(made[i]) != 0) rmdir(made[i]);
  for (int i = 0; i < nmade; ++i) rmdir(made[i]); // fake data set dirs
  rmdir(tmpdir);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_idx_dtypes),
      cmocka_unit_test(test_idx_errors),
      cmocka_unit_test(test_fashion_mnist),
      cmocka_unit_test(test_fashion_mnist_errors),
      cmocka_unit_test(test_tensor_dataset),
      cmocka_unit_test(test_random_dataset),
      cmocka_unit_test(test_loader_exactly_once),
      cmocka_unit_test(test_loader_order),
      cmocka_unit_test(test_loader_pin_memory),
      cmocka_unit_test(test_loader_early_free),
      cmocka_unit_test(test_loader_errors),
      cmocka_unit_test(test_loader_fashion_mnist),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
