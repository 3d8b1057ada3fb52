// SPDX-License-Identifier: MIT
//
// test_idx_fuzz: ct_idx_read on damaged files.
//
// Invariant checked: whatever bytes a file holds, ct_idx_read either fails
// cleanly (NULL, CT_ERR_IO, a message that names the file) or returns a
// valid CPU tensor whose dims and dtype are those the (possibly damaged)
// header declares and whose element count fits the bytes that were there.
// It never crashes, reads out of bounds or leaks (the asan preset runs this
// under AddressSanitizer and UBSan).
//
// Mutations of small valid files (u8 3-d, f32 2-d, i16 1-d), raw and gzip'd:
// truncation at every length, every byte XORed with 0x01, 0x80 and 0xFF,
// every byte set to 0x00 and 0xFF, huge dims in every dim slot, and random
// multi-byte mutations (seeded from the test seed: replayable).
#define _GNU_SOURCE // mkdtemp

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "testutil.h"

static char tmpdir[256];
static char path_raw[320], path_gz[320];
static int64_t n_ok, n_fail; // outcomes, for the summary line

static void write_file(const char *path, const uint8_t *b, size_t n, bool gzip) {
  if (gzip) {
    // Compress in memory, so that truncation and flips can hit the gzip
    // stream itself (header, deflate blocks, trailer).
    gzFile g = gzopen(path, "wb");
    if (!g) fail_msg("gzopen(%s)", path);
    if (n && gzwrite(g, b, (unsigned)n) != (int)n) fail_msg("gzwrite(%s)", path);
    gzclose(g);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("fopen(%s)", path);
    if (n && fwrite(b, 1, n, f) != n) fail_msg("fwrite(%s)", path);
    fclose(f);
  }
}

static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("fopen(%s)", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)len + 1);
  if (fread(b, 1, (size_t)len, f) != (size_t)len) fail_msg("fread(%s)", path);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static size_t elsize_of(uint8_t code) {
  switch (code) {
  case 0x08: case 0x09: return 1;
  case 0x0B: return 2;
  case 0x0C: case 0x0D: return 4;
  case 0x0E: return 8;
  default: return 0;
  }
}

// Reads `path` whose bytes on disk are b[0..n) (for a raw file: the IDX
// bytes themselves) and checks the outcome.
static void probe(const char *path, const uint8_t *idx_bytes, size_t idx_n, bool raw) {
  ct_clear_error();
  ct_tensor *t = ct_idx_read(path);
  if (!t) {
    n_fail++;
    if (ct_last_status() != CT_ERR_IO)
      fail_msg("%s: failed with %s, expected CT_ERR_IO: %s", path, ct_status_name(ct_last_status()),
               ct_last_error());
    if (!strstr(ct_last_error(), path))
      fail_msg("the message does not name the file: %s", ct_last_error());
    return;
  }
  n_ok++;
  // A tensor came back: it must be what the header says.
  assert_int_equal(ct_device_of(t).type, CT_CPU);
  assert_true(ct_is_contiguous(t));
  if (raw && idx_n >= 4) {
    size_t es = elsize_of(idx_bytes[2]);
    assert_true(es > 0);
    assert_int_equal(ct_ndim(t), idx_bytes[3]);
    int64_t numel = 1;
    for (int i = 0; i < ct_ndim(t); ++i) {
      const uint8_t *d = idx_bytes + 4 + 4 * i;
      int64_t dim = (int64_t)d[0] << 24 | d[1] << 16 | d[2] << 8 | d[3];
      assert_int_equal(ct_size(t, i), dim);
      numel *= dim;
    }
    assert_int_equal(ct_numel(t), numel);
    assert_int_equal(4 + 4 * (size_t)ct_ndim(t) + (size_t)numel * es, idx_n);
  }
  // Touch every element (ASan sees any bad size).
  volatile uint8_t sink = 0;
  const uint8_t *p = ct_data_ptr(t);
  for (size_t i = 0; i < ct_nbytes(t); ++i) sink ^= p[i];
  (void)sink;
  ct_free(t);
}

// Runs every mutation of one valid IDX image `v` (n bytes).
static void fuzz_one(const uint8_t *v, size_t n) {
  uint8_t *b = malloc(n + 16);
  // 1. Raw file: truncation at every length (0..n-1), and one byte too many.
  for (size_t len = 0; len <= n + 1; ++len) {
    memcpy(b, v, n);
    b[n] = 0x42;
    write_file(path_raw, b, len, false);
    probe(path_raw, b, len, true);
  }
  // 2. Raw file: every byte flipped or overwritten.
  const int xors[3] = {0x01, 0x80, 0xFF};
  const int sets[2] = {0x00, 0xFF};
  for (size_t i = 0; i < n; ++i) {
    for (int k = 0; k < 5; ++k) {
      memcpy(b, v, n);
      b[i] = (uint8_t)(k < 3 ? b[i] ^ xors[k] : sets[k - 3]);
      write_file(path_raw, b, n, false);
      probe(path_raw, b, n, true);
      if (i < 4 + 4 * 8 || k == 0) { // gzip'd too: headers are where it matters
        write_file(path_gz, b, n, true);
        probe(path_gz, b, n, false);
      }
    }
  }
  // 3. Huge dims in each dim slot, raw and gzip'd.
  const uint32_t huge[4] = {0xFFFFFFFFu, 0x80000000u, 0x7FFFFFFFu, 0x01000000u};
  int ndim = v[3];
  for (int d = 0; d < ndim; ++d)
    for (int h = 0; h < 4; ++h) {
      memcpy(b, v, n);
      uint8_t *p = b + 4 + 4 * d;
      p[0] = (uint8_t)(huge[h] >> 24), p[1] = (uint8_t)(huge[h] >> 16);
      p[2] = (uint8_t)(huge[h] >> 8), p[3] = (uint8_t)huge[h];
      write_file(path_raw, b, n, false);
      probe(path_raw, b, n, true);
      write_file(path_gz, b, n, true);
      probe(path_gz, b, n, false);
    }
  // 4. The gzip stream itself: truncated at every length, every byte flipped.
  write_file(path_gz, v, n, true);
  size_t gn = 0;
  uint8_t *g = read_file(path_gz, &gn);
  uint8_t *gb = malloc(gn + 1);
  for (size_t len = 0; len < gn; ++len) {
    write_file(path_raw /* not gzip'd again: these are the gzip bytes */, g, len, false);
    probe(path_raw, g, len, false);
  }
  for (size_t i = 0; i < gn; ++i)
    for (int k = 0; k < 3; ++k) {
      memcpy(gb, g, gn);
      gb[i] ^= (uint8_t)xors[k];
      write_file(path_raw, gb, gn, false);
      probe(path_raw, gb, gn, false);
    }
  // 5. Random multi-byte mutations of the raw image (replayable seed).
  for (int r = 0; r < 300; ++r) {
    memcpy(b, v, n);
    double u[9];
    tu_fill_uniform(u, 9, 0, 1);
    int flips = 1 + (int)(u[0] * 4);
    for (int f = 0; f < flips; ++f)
      b[(size_t)(u[1 + 2 * f] * (double)n)] = (uint8_t)(u[2 + 2 * f] * 256);
    size_t len = u[0] < 0.3 ? (size_t)(u[8] * (double)(n + 1)) : n;
    write_file(path_raw, b, len, false);
    probe(path_raw, b, len, true);
  }
  free(gb);
  free(g);
  free(b);
}

static size_t make_idx(uint8_t *b, uint8_t code, int ndim, const uint32_t *dims) {
  b[0] = 0, b[1] = 0, b[2] = code, b[3] = (uint8_t)ndim;
  size_t numel = 1;
  for (int i = 0; i < ndim; ++i) {
    uint8_t *p = b + 4 + 4 * i;
    p[0] = (uint8_t)(dims[i] >> 24), p[1] = (uint8_t)(dims[i] >> 16);
    p[2] = (uint8_t)(dims[i] >> 8), p[3] = (uint8_t)dims[i];
    numel *= dims[i];
  }
  size_t off = 4 + 4 * (size_t)ndim, bytes = numel * elsize_of(code);
  for (size_t i = 0; i < bytes; ++i) b[off + i] = (uint8_t)(i * 37 + 11);
  return off + bytes;
}

static void test_fuzz_u8_3d(void **state) {
  (void)state;
  uint8_t v[256];
  const uint32_t dims[3] = {2, 3, 4};
  size_t n = make_idx(v, 0x08, 3, dims);
  ct_tensor *t = (write_file(path_raw, v, n, false), ct_idx_read(path_raw));
  TU_CHECK(t); // the unmutated file is valid
  ct_free(t);
  fuzz_one(v, n);
}

static void test_fuzz_f32_2d(void **state) {
  (void)state;
  uint8_t v[256];
  const uint32_t dims[2] = {3, 2};
  size_t n = make_idx(v, 0x0D, 2, dims);
  fuzz_one(v, n);
}

static void test_fuzz_i16_1d(void **state) {
  (void)state;
  uint8_t v[256];
  const uint32_t dims[1] = {5};
  size_t n = make_idx(v, 0x0B, 1, dims);
  fuzz_one(v, n);
  printf("idx fuzz: %" PRId64 " files read as valid tensors, %" PRId64 " rejected cleanly\n", n_ok,
         n_fail);
  assert_true(n_ok > 0 && n_fail > 0);
}

static int setup(void **state) {
  (void)state;
  if (tu_scratch_dir(tmpdir, sizeof tmpdir, "idx_fuzz")) return -1;
  snprintf(path_raw, sizeof path_raw, "%s/f.idx", tmpdir);
  snprintf(path_gz, sizeof path_gz, "%s/f.idx.gz", tmpdir);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(path_raw);
  unlink(path_gz);
  rmdir(tmpdir);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fuzz_u8_3d),
      cmocka_unit_test(test_fuzz_f32_2d),
      cmocka_unit_test(test_fuzz_i16_1d),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
