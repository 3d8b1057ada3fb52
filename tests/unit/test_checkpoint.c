// SPDX-License-Identifier: MIT
//
// test_checkpoint: safetensors files, byte for byte, and every way a file can
// be wrong.
//
// Invariants checked:
//  - the writer's bytes are the format's (8-byte LE length, compact JSON with
//    keys in the order given and "__metadata__" first, space padding to a
//    multiple of 8, the tensors' LE bytes back to back): the expected header
//    is written out literally here, not produced by the code under test;
//  - every dtype and shape (0-d, empty, strided views) round-trips exactly,
//    onto the device under test;
//  - hand-built files in the format's other legal spellings (whitespace,
//    fields in another order, escapes) load;
//  - no malformed file crashes or loads: every truncation of a valid file,
//    thousands of random byte flips, absurd header lengths, offsets out of
//    range, overlapping or with gaps, unknown dtypes, bad JSON ... each fails
//    with CT_ERR_IO and a message naming the file (the suite runs under ASan
//    in the asan preset);
//  - a save that fails leaves the old file byte-identical and no temporary
//    file behind (the failure is provoked with RLIMIT_FSIZE);
//  - ct_module_save / ct_module_load round-trip a model's state_dict and
//    reject another model's with torch's words, leaving the model untouched.
#define _POSIX_C_SOURCE 200809L // mkdtemp, setrlimit, signal

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include "atomic_file.h"
#include "testutil.h"

static char tmpdir[256];

static const char *tpath(const char *name) { return tu_scratch_path(tmpdir, name); }

// ---- file helpers ---------------------------------------------------------------------------
static unsigned char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)n + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  // A new file each time: ext4 flushes a file truncated and rewritten in
  // place when it is closed (auto_da_alloc), which makes the fuzz loops slow.
  unlink(path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

// A file with header length `hlen` (as written in the first 8 bytes), the
// header text, then `dlen` data bytes.
static void write_raw(const char *path, uint64_t hlen, const char *header, const void *data, size_t dlen) {
  size_t h = strlen(header);
  unsigned char *buf = malloc(8 + h + dlen + 1);
  assert_non_null(buf);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(buf + 8, header, h);
  if (dlen) memcpy(buf + 8 + h, data, dlen);
  write_bytes(path, buf, 8 + h + dlen);
  free(buf);
}

// Loads `path`; fails the test unless it fails with CT_ERR_IO, a message
// naming the file, and (if not NULL) containing `needle`.
static void expect_load_fails(const char *path, const char *needle, const char *what) {
  ct_named_tensor *es = (ct_named_tensor *)(uintptr_t)1;
  int n = -1;
  ct_clear_error();
  int rc = ct_load_safetensors(path, tu_device, &es, &n);
  if (rc == CT_OK) {
    ct_named_tensors_free(es, n);
    fail_msg("%s: loaded %d tensors from a bad file", what, n);
  }
  if (rc != CT_ERR_IO) fail_msg("%s: status %s, expected CT_ERR_IO: %s", what, ct_status_name(rc), ct_last_error());
  if (es != NULL || n != 0) fail_msg("%s: outputs not reset on failure", what);
  if (!strstr(ct_last_error(), path)) fail_msg("%s: message does not name the file: %s", what, ct_last_error());
  if (!strstr(ct_last_error(), "ct_load_safetensors")) fail_msg("%s: message does not name the op: %s", what, ct_last_error());
  if (needle && !strstr(ct_last_error(), needle))
    fail_msg("%s: message lacks \"%s\": %s", what, needle, ct_last_error());
}

// Fails unless t holds exactly `bytes` (its row-major bytes), with `shape` and `dt`.
static void expect_tensor(const ct_tensor *t, ct_dtype dt, ct_shape shape, const void *bytes, const char *what) {
  assert_non_null(t);
  if (ct_dtype_of(t) != dt) fail_msg("%s: dtype %s, expected %s", what, ct_dtype_name(ct_dtype_of(t)), ct_dtype_name(dt));
  if (!ct_shape_eq(ct_shape_of(t), shape)) fail_msg("%s: shape differs", what);
  if (ct_device_of(t).type != tu_device.type) fail_msg("%s: not on the requested device", what);
  size_t nb = ct_nbytes(t);
  if (nb == 0) return;
  unsigned char *h = malloc(nb);
  assert_non_null(h);
  TU_OK(ct_copy_to_host(t, h, nb));
  if (memcmp(h, bytes, nb) != 0) fail_msg("%s: bytes differ", what);
  free(h);
}

static int find(const ct_named_tensor *es, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(es[i].name, name) == 0) return i;
  return -1;
}

static bool temp_left(void) {
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  struct dirent *e;
  bool found = false;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) found = true;
  closedir(d);
  return found;
}

// ---- the writer's exact bytes ---------------------------------------------------------------
static void test_writer_bytes(void **state) {
  (void)state;
  float w[6] = {0.5f, -1, 2, 3.25f, -4, 5};
  int64_t b[3] = {7, -8, 1LL << 40};
  ct_tensor *tw = ct_from_host(w, CT_SHAPE(2, 3), CT_F32, tu_device);
  ct_tensor *tb = ct_from_host(b, CT_SHAPE(3), CT_I64, tu_device);
  TU_CHECK(tw);
  TU_CHECK(tb);
  ct_named_tensor es[2] = {{"w", tw}, {"b\"\\\n\x01\xc3\xa9", tb}};
  const char *meta[] = {"format", "pt", "note", "a \"q\"", NULL};
  const char *path = tpath("bytes.safetensors");
  TU_OK(ct_save_safetensors(path, es, 2, meta));
  // serde_json's escapes: \" \\ \n, \u0001; UTF-8 as is.
  const char *want = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"a \\\"q\\\"\"},"
                     "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                     "\"b\\\"\\\\\\n\\u0001\xc3\xa9\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[24,48]}}";
  size_t wl = strlen(want), padded = (wl + 7) / 8 * 8, len;
  unsigned char *f = read_file(path, &len);
  assert_non_null(f);
  assert_int_equal(len, 8 + padded + 48);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | f[i];
  assert_int_equal(hl, padded);
  if (memcmp(f + 8, want, wl) != 0) fail_msg("header\n  %.*s\nexpected\n  %s", (int)wl, (const char *)f + 8, want);
  for (size_t i = wl; i < padded; i++) assert_int_equal(f[8 + i], ' ');
  assert_memory_equal(f + 8 + padded, w, 24);
  assert_memory_equal(f + 8 + padded + 24, b, 24);
  free(f);

  // No metadata: no "__metadata__" key at all.
  TU_OK(ct_save_safetensors(path, es, 1, NULL));
  f = read_file(path, &len);
  const char *want2 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  assert_int_equal(len, 8 + (strlen(want2) + 7) / 8 * 8 + 24);
  assert_memory_equal(f + 8, want2, strlen(want2));
  free(f);
  // Zero tensors: "{}" padded to 8.
  TU_OK(ct_save_safetensors(path, NULL, 0, NULL));
  f = read_file(path, &len);
  assert_int_equal(len, 16);
  assert_memory_equal(f, "\x08\0\0\0\0\0\0\0{}      ", 16);
  free(f);
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, 0);
  ct_named_tensors_free(got, n);
  ct_free(tw);
  ct_free(tb);
}

// ---- every dtype and shape round-trips ---------------------------------------------------------
static void test_round_trip(void **state) {
  (void)state;
  enum { K = 11 };
  const struct {
    const char *name;
    ct_dtype dt;
    ct_shape shape;
  } c[K] = {
      {"f64", CT_F64, CT_SHAPE(3, 5)},      {"f32", CT_F32, CT_SHAPE(2, 3, 4)}, {"f16", CT_F16, CT_SHAPE(7)},
      {"bf16", CT_BF16, CT_SHAPE(2, 2, 2, 2)}, {"i64", CT_I64, CT_SHAPE(4, 1)}, {"i32", CT_I32, CT_SHAPE(9)},
      {"u8", CT_U8, CT_SHAPE(3, 3)},        {"bool", CT_BOOL, CT_SHAPE(5)},    {"scalar", CT_F32, CT_SCALAR_SHAPE},
      {"empty", CT_F32, CT_SHAPE(0, 3)},    {"layer.0.weight", CT_F64, CT_SHAPE(1, 1, 1, 1, 1, 1, 1, 2)},
  };
  ct_named_tensor es[K + 1];
  void *bytes[K + 1];
  for (int i = 0; i < K; i++) {
    int64_t numel = ct_shape_numel(c[i].shape);
    double *x = malloc(sizeof(double) * (size_t)(numel + 1));
    tu_fill_uniform(x, numel, -100, 100);
    for (int64_t q = 0; q < numel; q++) {
      if (c[i].dt == CT_BOOL) x[q] = x[q] > 0;
      if (c[i].dt == CT_U8) x[q] = fabs(x[q]) * 2.5;
    }
    es[i].tensor = tu_from_f64(x, c[i].shape, c[i].dt, tu_device);
    TU_CHECK(es[i].tensor);
    snprintf(es[i].name, sizeof es[i].name, "%s", c[i].name);
    bytes[i] = malloc(ct_nbytes(es[i].tensor) + 1);
    TU_OK(ct_copy_to_host(es[i].tensor, bytes[i], ct_nbytes(es[i].tensor) + 1));
    free(x);
  }
  // A strided view is saved row-major: its transpose's bytes.
  ct_tensor *t = ct_t(es[0].tensor);
  TU_CHECK(t);
  es[K].tensor = t;
  snprintf(es[K].name, sizeof es[K].name, "f64_t");
  bytes[K] = malloc(ct_nbytes(t));
  TU_OK(ct_copy_to_host(t, bytes[K], ct_nbytes(t)));
  const char *path = tpath("all.safetensors");
  TU_OK(ct_save_safetensors(path, es, K + 1, NULL));
  assert_false(temp_left());

  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, K + 1);
  for (int i = 0; i <= K; i++) {
    assert_string_equal(got[i].name, es[i].name); // header order kept
    expect_tensor(got[i].tensor, ct_dtype_of(es[i].tensor), ct_shape_of(es[i].tensor), bytes[i], es[i].name);
  }
  ct_named_tensors_free(got, n);
  for (int i = 0; i <= K; i++) {
    ct_free(es[i].tensor);
    free(bytes[i]);
  }
}

// ---- the format's other legal spellings -------------------------------------------------------
static void test_foreign_spellings(void **state) {
  (void)state;
  // Whitespace everywhere JSON allows it, fields in another order, escapes
  // (\u00e9 = e-acute, \/ = /, a surrogate pair for U+1F600), metadata last
  // and holding escapes, offsets listed out of order, no padding.
  const char *h = " {\n\t\"b\\/x\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 8 , 16 ] , \"dtype\" : \"I32\" } ,\r\n"
                  "  \"a\\u00e9\\ud83d\\ude00\":{\"data_offsets\":[0,8],\"dtype\":\"F32\",\"shape\":[1,2]},"
                  "  \"z\":{\"dtype\":\"BOOL\",\"shape\":[0],\"data_offsets\":[16,16]},"
                  "\"__metadata__\" : {\"k\\n\":\"v\\u0041\"} } ";
  float a[2] = {1.5f, -2.0f};
  int32_t bb[2] = {-3, 1 << 30};
  unsigned char data[16];
  memcpy(data, a, 8);
  memcpy(data + 8, bb, 8);
  const char *path = tpath("foreign.safetensors");
  write_raw(path, strlen(h), h, data, 16);
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, 3);
  assert_string_equal(got[0].name, "b/x");
  assert_string_equal(got[1].name, "a\xc3\xa9\xf0\x9f\x98\x80");
  assert_string_equal(got[2].name, "z");
  expect_tensor(got[0].tensor, CT_I32, CT_SHAPE(2), bb, "b/x");
  expect_tensor(got[1].tensor, CT_F32, CT_SHAPE(1, 2), a, "a");
  expect_tensor(got[2].tensor, CT_BOOL, CT_SHAPE(0), NULL, "z");
  ct_named_tensors_free(got, n);
  // "__metadata__": null is what serde writes for an absent map.
  write_raw(path, 21, "{\"__metadata__\":null}", NULL, 0);
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, 0);
  ct_named_tensors_free(got, n);
}

// ---- malformed files, one by one ---------------------------------------------------------------
static void bad(const char *header, size_t dlen, const char *needle, const char *what) {
  unsigned char data[64] = {0};
  assert_true(dlen <= sizeof data);
  const char *path = tpath("bad.safetensors");
  write_raw(path, strlen(header), header, data, dlen);
  expect_load_fails(path, needle, what);
}

#define E(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

static void test_malformed(void **state) {
  (void)state;
  // The unknown-dtype message, word for word.
  const char *path = tpath("bad.safetensors");
  bad("{" E("x", "F8_E4M3", "[4]", "0", "4") "}", 4, NULL, "F8");
  char want[512];
  snprintf(want, sizeof want, "ct_load_safetensors: %s: tensor \"x\" has dtype \"F8_E4M3\", which ct does not support", path);
  if (strncmp(ct_last_error(), want, strlen(want)) != 0) fail_msg("message\n  %s\nexpected to start\n  %s", ct_last_error(), want);

  bad("{" E("x", "I8", "[4]", "0", "4") "}", 4, "\"I8\", which ct does not support", "I8");
  bad("{" E("x", "F32", "[2]", "0", "4") "}", 4, "needs 8 bytes", "size mismatch");
  bad("{" E("x", "F32", "[1]", "0", "4") "," E("y", "F32", "[1]", "2", "6") "}", 6, "overlap", "overlap");
  bad("{" E("x", "F32", "[1]", "0", "4") "," E("y", "F32", "[1]", "0", "4") "}", 4, "overlap", "same offsets");
  bad("{" E("x", "F32", "[1]", "4", "8") "}", 8, "gap", "gap at the start");
  bad("{" E("x", "F32", "[1]", "0", "4") "," E("y", "F32", "[1]", "8", "12") "}", 12, "gap", "gap between");
  bad("{" E("x", "F32", "[1]", "0", "4") "}", 6, "trailing", "trailing bytes");
  bad("{" E("x", "F32", "[2]", "0", "8") "}", 6, "truncated", "short data");
  bad("{" E("x", "F32", "[1]", "999999999999999996", "1000000000000000000") "}", 4, "past the end", "far offsets");
  bad("{" E("x", "F32", "[1]", "8", "4") "}", 4, "end before", "reversed offsets");
  bad("{" E("x", "F32", "[4611686018427387904,4611686018427387904]", "0", "4") "}", 4, "too large", "shape overflow");
  bad("{" E("x", "F32", "[0,4611686018427387904,4611686018427387904]", "0", "4") "}", 4, "needs 0 bytes", "empty with huge dims");
  bad("{" E("x", "F32", "[1,1,1,1,1,1,1,1,1]", "0", "4") "}", 4, "more than 8 dimensions", "9 dims");
  bad("{" E("x", "F32", "[-1]", "0", "4") "}", 4, "non-negative integer", "negative dim");
  bad("{" E("x", "F32", "[1.0]", "0", "4") "}", 4, "no fraction", "float dim");
  bad("{" E("x", "F32", "[1e0]", "0", "4") "}", 4, "no fraction", "exponent dim");
  bad("{" E("x", "F32", "[01]", "0", "4") "}", 4, "leading zeros", "leading zero");
  bad("{" E("x", "F32", "[99999999999999999999]", "0", "4") "}", 4, "below 2^63", "dim overflow");
  bad("{" E("x", "F32", "[1]", "0", "4,5") "}", 4, "more than 2 data_offsets", "3 offsets");
  bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "has 1 data_offsets; they must be [begin, end]", "1 offset");
  bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks its \"data_offsets\"", "missing offsets");
  bad("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "lacks its \"dtype\"", "missing dtype");
  bad("{\"x\":{}}", 4, "lacks", "empty entry");
  bad("{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "twice", "dup field");
  bad("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1}}", 4, "unknown field \"extra\"", "extra field");
  bad("{" E("x", "F32", "[1]", "0", "4") "," E("x", "F32", "[1]", "4", "8") "}", 8, "appears twice", "dup name");
  bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice", "dup metadata");
  bad("{\"__metadata__\":{\"a\":1}}", 0, "string value", "metadata number");
  bad("{\"__metadata__\":[\"a\"]}", 0, "__metadata__", "metadata array");
  bad("{" E("", "F32", "[1]", "0", "4") "}", 4, "empty", "empty name");
  bad("{" E("a\\u0000b", "F32", "[1]", "0", "4") "}", 4, "NUL", "NUL in name");
  bad("{" E("0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456",
            "F32", "[1]", "0", "4") "}",
      4, "too long", "name of 97 bytes");
  bad("{" E("a\\ud800", "F32", "[1]", "0", "4") "}", 4, "low surrogate", "lone high surrogate");
  bad("{" E("a\\udc00", "F32", "[1]", "0", "4") "}", 4, "surrogate", "lone low surrogate");
  bad("{" E("a\\x", "F32", "[1]", "0", "4") "}", 4, "bad JSON", "bad escape");
  bad("{" E("a\\u12", "F32", "[1]", "0", "4") "}", 4, "hex digits", "short \\u");
  bad("{\"a\xff\":{}}", 0, "UTF-8", "invalid UTF-8");
  bad("{\"a\xc0\x80\":{}}", 0, "UTF-8", "overlong UTF-8");
  bad("{\"a\xed\xa0\x80\":{}}", 0, "UTF-8", "UTF-8 surrogate");
  bad("{\"a\nb\":{}}", 0, "control bytes", "raw newline in a string");
  bad("{" E("x", "F32", "[1]", "0", "4") "} x", 4, "only spaces", "garbage after the header");
  bad("{" E("x", "F32", "[1]", "0", "4") "}}", 4, "only spaces", "extra brace");
  bad("{" E("x", "F32", "[1]", "0", "4") ",}", 4, "a string", "trailing comma");
  bad("[]", 0, "'{' opening the header", "array header");
  bad("", 0, "'{' opening the header", "empty header");
  bad("   ", 0, "'{'", "blank header");
  bad("{\"x\" \"y\"}", 0, "':'", "missing colon");
  bad("{\"x\":\"F32\"}", 0, "tensor entry", "string entry");
}

static void test_bool_bytes(void **state) {
  (void)state;
  const char *path = tpath("bool.safetensors");
  const char *h = "{" E("m", "BOOL", "[3]", "0", "3") "}";
  write_raw(path, strlen(h), h, "\x01\x00\x02", 3);
  expect_load_fails(path, "holds byte 2 at element 2", "BOOL byte 2");
  write_raw(path, strlen(h), h, "\x01\x00\x01", 3);
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  expect_tensor(got[0].tensor, CT_BOOL, CT_SHAPE(3), "\x01\x00\x01", "bool");
  ct_named_tensors_free(got, n);
}

static void test_header_length(void **state) {
  (void)state;
  const char *path = tpath("len.safetensors");
  const char *h = "{" E("x", "F32", "[1]", "0", "4") "}";
  float v = 1;
  write_raw(path, UINT64_MAX, h, &v, 4);
  expect_load_fails(path, "above the format's limit", "length 2^64-1");
  write_raw(path, 100000001, h, &v, 4);
  expect_load_fails(path, "above the format's limit", "length 1e8+1");
  write_raw(path, 100000000, h, &v, 4);
  expect_load_fails(path, "runs past the end", "length 1e8");
  write_raw(path, strlen(h) + 5, h, &v, 4);
  expect_load_fails(path, "runs past the end", "length past the end by 1");
  write_raw(path, strlen(h) + 4, h, &v, 4);
  expect_load_fails(path, NULL, "length swallowing the data");
  write_raw(path, strlen(h) - 1, h, &v, 4);
  expect_load_fails(path, "bad JSON", "length cutting the header");
  write_raw(path, 0, "", NULL, 0);
  expect_load_fails(path, "bad JSON", "length 0");
  write_bytes(path, "\x02\0\0", 3);
  expect_load_fails(path, "too short", "3-byte file");
  write_bytes(path, "", 0);
  expect_load_fails(path, "too short", "empty file");
  expect_load_fails(tpath("does-not-exist.safetensors"), "cannot open", "missing file");
  expect_load_fails(tmpdir, NULL, "a directory");
}

// ---- fuzz: truncations and byte flips of a valid file -----------------------------------------
static unsigned char *small_valid_file(const char *path, size_t *len) {
  double x[3] = {1, -2.5, 3};
  int64_t ix[2] = {-1, 1LL << 50};
  ct_tensor *a = ct_from_host(x, CT_SHAPE(3), CT_F64, ct_device_cpu());
  ct_tensor *b = ct_from_host(ix, CT_SHAPE(2, 1), CT_I64, ct_device_cpu());
  ct_tensor *c = ct_ones(CT_SHAPE(2), CT_BOOL, ct_device_cpu());
  ct_tensor *d = ct_full(CT_SCALAR_SHAPE, 0.75, CT_BF16, ct_device_cpu());
  TU_CHECK(a && b && c && d);
  ct_named_tensor es[4] = {{"a", a}, {"bb", b}, {"m\\\"", c}, {"s", d}};
  const char *meta[] = {"k", "v", NULL};
  TU_OK(ct_save_safetensors(path, es, 4, meta));
  ct_free(a);
  ct_free(b);
  ct_free(c);
  ct_free(d);
  return read_file(path, len);
}

static void test_fuzz_truncations(void **state) {
  (void)state;
  const char *path = tpath("fuzz.safetensors");
  size_t len;
  unsigned char *f = small_valid_file(path, &len);
  assert_non_null(f);
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, 4);
  ct_named_tensors_free(got, n);
  for (size_t k = 0; k < len; k++) {
    write_bytes(path, f, k);
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", k, len);
    expect_load_fails(path, NULL, what);
  }
  // And with bytes appended.
  unsigned char *g = malloc(len + 8);
  memcpy(g, f, len);
  memset(g + len, 0, 8);
  for (size_t k = 1; k <= 8; k++) {
    write_bytes(path, g, len + k);
    expect_load_fails(path, "trailing", "bytes appended");
  }
  free(g);
  free(f);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void test_fuzz_flips(void **state) {
  (void)state;
  rng ^= tu_seed() * 0x9E3779B97F4A7C15ull;
  if (!rng) rng = 1;
  const char *path = tpath("flip.safetensors");
  size_t len;
  unsigned char *f = small_valid_file(path, &len);
  assert_non_null(f);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | f[i];
  unsigned char *g = malloc(len);
  int loaded = 0, failed = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(g, f, len);
    int flips = 1 + (int)(next_rand() % 3);
    bool header_changed = false;
    for (int q = 0; q < flips; q++) {
      size_t pos = (size_t)(next_rand() % len);
      unsigned char v = (unsigned char)(next_rand() % 4 == 0 ? next_rand() : g[pos] ^ (1u << (next_rand() % 8)));
      // Bytes 40 and 41 of the data are the BOOL tensor's: a flip there may
      // make a byte other than 0 or 1, which is rejected too.
      if (v != g[pos] && (pos < 8 + hl || pos == 8 + hl + 40 || pos == 8 + hl + 41)) header_changed = true;
      g[pos] = v;
    }
    write_bytes(path, g, len);
    ct_named_tensor *got = NULL;
    int n = 0;
    ct_clear_error();
    int rc = ct_load_safetensors(path, tu_device, &got, &n);
    if (rc == CT_OK) {
      loaded++;
      assert_true(n >= 0);
      for (int i = 0; i < n; i++) assert_non_null(got[i].tensor);
      ct_named_tensors_free(got, n);
    } else {
      failed++;
      if (rc != CT_ERR_IO) fail_msg("flip %d: status %s: %s", it, ct_status_name(rc), ct_last_error());
      if (!strstr(ct_last_error(), path)) fail_msg("flip %d: message does not name the file: %s", it, ct_last_error());
      assert_null(got);
      // A flip in the data only changes values: the file must still load.
      if (!header_changed) fail_msg("flip %d: only data bytes changed, yet: %s", it, ct_last_error());
    }
  }
  printf("byte flips: %d loaded (data or padding changed), %d rejected\n", loaded, failed);
  assert_true(failed > 0);

  // Bytes deleted from or inserted into the header, with the length field
  // fixed up so the parser, not the length check, meets the damage.
  unsigned char *h = malloc(len + 8);
  static const char tokens[] = "{}[],:\"\\u0123456789 \tabcdefxyzFIUB_-.e+";
  int inserted_ok = 0;
  for (int it = 0; it < 3000; it++) {
    size_t pos = 8 + (size_t)(next_rand() % hl), hl2;
    if (it % 2) { // delete pos
      memcpy(h, f, pos);
      memcpy(h + pos, f + pos + 1, len - pos - 1);
      hl2 = hl - 1;
    } else { // insert a JSON-ish byte before pos
      memcpy(h, f, pos);
      h[pos] = (unsigned char)tokens[next_rand() % (sizeof tokens - 1)];
      memcpy(h + pos + 1, f + pos, len - pos);
      hl2 = hl + 1;
    }
    for (int i = 0; i < 8; i++) h[i] = (unsigned char)(hl2 >> (8 * i));
    write_bytes(path, h, it % 2 ? len - 1 : len + 1);
    ct_named_tensor *got = NULL;
    int n = 0;
    ct_clear_error();
    int rc = ct_load_safetensors(path, tu_device, &got, &n);
    if (rc == CT_OK) {
      inserted_ok++; // e.g. a space inserted, or a name changed
      ct_named_tensors_free(got, n);
    } else if (rc != CT_ERR_IO || !strstr(ct_last_error(), path)) {
      fail_msg("edit %d: status %s: %s", it, ct_status_name(rc), ct_last_error());
    }
  }
  printf("header edits: %d of 3000 still loaded\n", inserted_ok);
  free(h);
  free(g);
  free(f);
}

// ---- atomic saves ------------------------------------------------------------------------------
static void test_atomic_save(void **state) {
  (void)state;
  const char *path = tpath("atomic.safetensors");
  ct_tensor *small = ct_ones(CT_SHAPE(4), CT_F32, tu_device);
  TU_CHECK(small);
  ct_named_tensor one = {"w", small};
  TU_OK(ct_save_safetensors(path, &one, 1, NULL));
  assert_int_equal(chmod(path, 0640), 0);
  size_t len0;
  unsigned char *before = read_file(path, &len0);

  // A write that fails halfway (the file-size limit stops it at 64 KiB):
  // the old file stays byte-identical and no temporary is left.
  ct_tensor *big = ct_zeros(CT_SHAPE(256, 1024), CT_F32, tu_device); // 1 MiB
  TU_CHECK(big);
  ct_named_tensor two[2] = {{"w", small}, {"big", big}};
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 64 * 1024;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  ct_clear_error();
  int rc = ct_save_safetensors(path, two, 2, NULL);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, prev);
  assert_int_equal(rc, CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), path));
  assert_non_null(strstr(ct_last_error(), "left as it was"));
  size_t len1;
  unsigned char *after = read_file(path, &len1);
  assert_int_equal(len0, len1);
  assert_memory_equal(before, after, len0);
  free(after);
  assert_false(temp_left());

  // Bad arguments fail before any file is touched.
  ct_named_tensor dup[2] = {{"w", small}, {"w", big}};
  assert_int_equal(ct_save_safetensors(path, dup, 2, NULL), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "unique"));
  ct_named_tensor null_t = {"w", NULL};
  assert_int_not_equal(ct_save_safetensors(path, &null_t, 1, NULL), CT_OK);
  ct_named_tensor reserved = {"__metadata__", small};
  assert_int_not_equal(ct_save_safetensors(path, &reserved, 1, NULL), CT_OK);
  ct_named_tensor empty = {"", small};
  assert_int_not_equal(ct_save_safetensors(path, &empty, 1, NULL), CT_OK);
  const char *odd[] = {"k", NULL, NULL};
  assert_int_not_equal(ct_save_safetensors(path, &one, 1, odd), CT_OK);
  const char *dupk[] = {"k", "1", "k", "2", NULL};
  assert_int_not_equal(ct_save_safetensors(path, &one, 1, dupk), CT_OK);
  const char *bad_utf8[] = {"k", "\xff", NULL};
  assert_int_not_equal(ct_save_safetensors(path, &one, 1, bad_utf8), CT_OK);
  assert_int_not_equal(ct_save_safetensors(NULL, &one, 1, NULL), CT_OK);
  assert_int_not_equal(ct_save_safetensors(path, NULL, 1, NULL), CT_OK);
  assert_int_not_equal(ct_save_safetensors(path, &one, -1, NULL), CT_OK);
  after = read_file(path, &len1);
  assert_int_equal(len0, len1);
  assert_memory_equal(before, after, len0);
  free(after);

  // A directory that does not exist: the message says where and why.
  ct_clear_error();
  const char *nodir = tpath("no/such/dir/x.safetensors");
  assert_int_equal(ct_save_safetensors(nodir, &one, 1, NULL), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), nodir));
  assert_non_null(strstr(ct_last_error(), "No such file or directory"));
  assert_int_not_equal(ct_save_safetensors(tpath(""), &one, 1, NULL), CT_OK); // a directory
  assert_non_null(strstr(ct_last_error(), "names a directory"));

  // A successful overwrite replaces the file and keeps its permissions.
  TU_OK(ct_save_safetensors(path, two, 2, NULL));
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0640);
  assert_false(temp_left());
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, tu_device, &got, &n));
  assert_int_equal(n, 2);
  assert_int_equal(find(got, n, "big"), 1);
  ct_named_tensors_free(got, n);
  // A bare file name saves into the working directory.
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmpdir), 0);
  TU_OK(ct_save_safetensors("bare.safetensors", &one, 1, NULL));
  assert_int_equal(chdir(cwd), 0);
  assert_int_equal(access(tpath("bare.safetensors"), R_OK), 0);
  free(before);
  ct_free(small);
  ct_free(big);
}

// ---- modules ----------------------------------------------------------------------------------
static ct_module *mlp(int64_t in, int64_t hidden, int64_t out) {
  ct_module *layers[3] = {ct_nn_linear(in, hidden, true), ct_nn_relu(), ct_nn_linear(hidden, out, true)};
  for (int i = 0; i < 3; i++) TU_CHECK(layers[i]);
  ct_module *m = ct_nn_sequential(3, layers);
  TU_CHECK(m);
  TU_OK(ct_module_to(m, tu_device));
  return m;
}

static double *state_values(ct_module *m, int64_t *total) {
  int ns;
  ct_param **st = ct_module_state(m, &ns);
  int64_t n = 0;
  for (int i = 0; i < ns; i++) n += ct_numel(st[i]->value);
  double *v = malloc(sizeof(double) * (size_t)(n + 1)), *p = v;
  for (int i = 0; i < ns; i++) {
    double *x = tu_to_f64(st[i]->value);
    memcpy(p, x, sizeof(double) * (size_t)ct_numel(st[i]->value));
    p += ct_numel(st[i]->value);
    free(x);
  }
  *total = n;
  return v;
}


// A symbolic link planted at every name the writer's temporary once had
// ("<path>.tmp.<pid>" for this process and the pids near it), pointing at a
// victim file: a save never writes through it, the victim keeps its bytes
// and its mode, the new file gets this user's default mode (not the
// victim's), and only the planted links are left beside it.
static void test_planted_temp_links(void **state) {
  (void)state;
  const char *victim = tpath("victim.txt");
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs("victim", f);
  fclose(f);
  assert_int_equal(chmod(victim, 0604), 0);
  char path[4096], link[4160];
  snprintf(path, sizeof path, "%s", tpath("planted.safetensors"));
  long pid = (long)getpid();
  for (long p = pid > 64 ? pid - 64 : 1; p <= pid + 64; p++) {
    snprintf(link, sizeof link, "%s.tmp.%ld", path, p);
    assert_int_equal(symlink(victim, link), 0);
  }
  mode_t mask = umask(022);
  umask(mask);
  ct_tensor *w = ct_randn(CT_SHAPE(16), CT_F32, ct_device_cpu());
  ct_named_tensor one = {"w", w};
  TU_OK(ct_save_safetensors(path, &one, 1, NULL));
  size_t n;
  unsigned char *v = read_file(victim, &n);
  assert_int_equal(n, 6);
  assert_memory_equal(v, "victim", 6);
  free(v);
  struct stat st;
  assert_int_equal(stat(victim, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0604);
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0666 & ~mask);
  // An existing file of ours keeps its permission bits.
  assert_int_equal(chmod(path, 0640), 0);
  TU_OK(ct_save_safetensors(path, &one, 1, NULL));
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);
  for (long p = pid > 64 ? pid - 64 : 1; p <= pid + 64; p++) {
    snprintf(link, sizeof link, "%s.tmp.%ld", path, p);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); // still the planted link, never replaced or followed
    assert_int_equal(unlink(link), 0);
  }
  assert_false(temp_left());
  unlink(path);
  unlink(victim);
  ct_free(w);
}

static void test_module_round_trip(void **state) {
  (void)state;
  const char *path = tpath("mlp.safetensors");
  ct_manual_seed(tu_seed());
  ct_module *a = mlp(5, 7, 3);
  ct_manual_seed(tu_seed() + 1);
  ct_module *b = mlp(5, 7, 3);
  TU_OK(ct_module_save(a, path));
  // The file is the state_dict: its names, shapes, float32.
  ct_named_tensor *got;
  int n;
  TU_OK(ct_load_safetensors(path, ct_device_cpu(), &got, &n));
  assert_int_equal(n, 4);
  const char *names[4] = {"0.weight", "0.bias", "2.weight", "2.bias"};
  for (int i = 0; i < 4; i++) assert_string_equal(got[i].name, names[i]);
  assert_true(ct_shape_eq(ct_shape_of(got[0].tensor), CT_SHAPE(7, 5)));
  assert_true(ct_shape_eq(ct_shape_of(got[3].tensor), CT_SHAPE(3)));
  ct_named_tensors_free(got, n);

  int64_t na, nb;
  double *va = state_values(a, &na), *vb = state_values(b, &nb);
  assert_int_equal(na, nb);
  assert_true(memcmp(va, vb, sizeof(double) * (size_t)na) != 0);
  TU_OK(ct_module_load(b, path));
  free(vb);
  vb = state_values(b, &nb);
  assert_memory_equal(va, vb, sizeof(double) * (size_t)na);
  assert_int_equal(ct_module_device(b).type, tu_device.type);

  // Another model's file: refused with torch's words, b untouched.
  ct_module *c = mlp(5, 4, 3);
  const char *other = tpath("other.safetensors");
  TU_OK(ct_module_save(c, other));
  ct_clear_error();
  assert_int_equal(ct_module_load(b, other), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "size mismatch for 0.weight"));
  assert_non_null(strstr(ct_last_error(), other));
  double *vb2 = state_values(b, &nb);
  assert_memory_equal(va, vb2, sizeof(double) * (size_t)na);
  free(vb2);
  ct_module *lin = ct_nn_linear(5, 7, true);
  TU_CHECK(lin);
  const char *lpath = tpath("linear.safetensors");
  TU_OK(ct_module_save(lin, lpath));
  ct_clear_error();
  assert_int_equal(ct_module_load(b, lpath), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Missing key(s) in state_dict: \"0.weight\", \"0.bias\", \"2.weight\", \"2.bias\""));
  assert_non_null(strstr(ct_last_error(), "Unexpected key(s) in state_dict: \"weight\", \"bias\""));
  vb2 = state_values(b, &nb);
  assert_memory_equal(va, vb2, sizeof(double) * (size_t)na);
  free(vb2);
  // A wrapper's state_dict ("module." + each name, as DataParallel's): the
  // message lists the keys in torch's words and says how to strip the prefix.
  char apath[640]; // a's file (tpath's buffers are reused)
  snprintf(apath, sizeof apath, "%s", path);
  int nw = 0;
  ct_named_tensor *wrapped = ct_module_state_dict(a, "module.", &nw);
  TU_CHECK(wrapped);
  const char *wpath = tpath("wrapper.safetensors");
  TU_OK(ct_save_safetensors(wpath, wrapped, nw, NULL));
  ct_named_tensors_free(wrapped, nw);
  ct_module *fresh = mlp(5, 7, 3);
  int64_t nf;
  double *vf = state_values(fresh, &nf);
  ct_clear_error();
  assert_int_equal(ct_module_load(fresh, wpath), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Missing key(s) in state_dict: \"0.weight\""));
  assert_non_null(strstr(ct_last_error(), "Unexpected key(s) in state_dict: \"module.0.weight\""));
  assert_non_null(strstr(ct_last_error(), "the file's keys carry the prefix \"module.\""));
  assert_non_null(strstr(ct_last_error(), "ct_consume_prefix_in_state_dict_if_present(entries, n, \"module.\")"));
  vb2 = state_values(fresh, &nf);
  assert_memory_equal(vf, vb2, sizeof(double) * (size_t)nf); // untouched
  free(vb2);
  // ... and the other way: a model one level deeper ("0." + each name)
  // given the bare model's file.
  ct_module *inner = mlp(5, 7, 3), *outer = ct_nn_sequential(1, &inner);
  TU_CHECK(outer);
  ct_clear_error();
  assert_int_equal(ct_module_load(outer, apath), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Missing key(s) in state_dict: \"0.0.weight\""));
  assert_non_null(strstr(ct_last_error(), "the model's keys carry the prefix \"0.\" that the file's lack"));
  // A key missing from the file, nothing extra: incomplete, not another model.
  ct_named_tensor part[3];
  int np2 = 0;
  ct_named_tensor *all = ct_module_state_dict(a, "", &np2);
  TU_CHECK(all);
  memcpy(part, all, sizeof part);
  const char *ppath = tpath("part.safetensors");
  TU_OK(ct_save_safetensors(ppath, part, 3, NULL));
  ct_named_tensors_free(all, np2);
  ct_clear_error();
  assert_int_equal(ct_module_load(fresh, ppath), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Missing key(s) in state_dict: \"2.bias\"."));
  assert_null(strstr(ct_last_error(), "Unexpected"));
  assert_non_null(strstr(ct_last_error(), "the file lacks tensors this model has"));
  // Another model altogether: every missing and unexpected key and the
  // size mismatch in one message, as torch lists them.
  ct_module *l1 = ct_nn_linear(5, 7, true), *l2 = ct_nn_relu(), *l3 = ct_nn_linear(3, 3, true);
  ct_module *shifted_layers[4] = {ct_nn_relu(), l1, l2, l3};
  ct_module *shifted = ct_nn_sequential(4, shifted_layers); // 1.weight (7, 5), 3.weight (3, 3)
  TU_CHECK(shifted);
  ct_clear_error();
  assert_int_equal(ct_module_load(shifted, apath), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "Missing key(s) in state_dict: \"1.weight\", \"1.bias\", \"3.weight\", \"3.bias\"."));
  assert_non_null(strstr(ct_last_error(), "Unexpected key(s) in state_dict: \"0.weight\", \"0.bias\", \"2.weight\", \"2.bias\"."));
  assert_non_null(strstr(ct_last_error(), "another model's state_dict"));
  ct_module_free(shifted);
  ct_module_free(outer);
  ct_module_free(fresh);
  free(vf);
  // A missing file fails as a load does.
  assert_int_equal(ct_module_load(b, tpath("nothing.safetensors")), CT_ERR_IO);
  free(va);
  free(vb);
  ct_module_free(a);
  ct_module_free(b);
  ct_module_free(c);
  ct_module_free(lin);
}

static int make_tmpdir(void **state) {
  (void)state;
  return tu_scratch_dir(tmpdir, sizeof tmpdir, "ckpt");
}

static int remove_tmpdir(void **state) {
  (void)state;
  return tu_scratch_remove(tmpdir);
}

// ---- killed in the middle of a save ----------------------------------------------------------
// The child stops here once a megabyte of the new checkpoint is on disk: it tells the
// parent through the pipe, then waits to be killed.
static int kill_pipe = -1;
static void stop_mid_save(cti_atomic_file *af, size_t written) {
  if (written < (1u << 20)) return;
  fflush(af->f);
  size_t n = strlen(af->tmp) + 1; // the temporary's (random) name, for the parent to look at
  if (write(kill_pipe, af->tmp, n) != (ssize_t)n) _exit(3);
  for (;;) pause();
}

// SIGKILL while a new checkpoint is half written: the previous one stays byte-identical
// and loadable. What a kill leaves behind is the temporary "<path>.tmp.<random>" (no code of
// ours runs after SIGKILL to remove it); the target itself is never touched.
static void test_sigkill_mid_save(void **state) {
  (void)state;
  const char *path = tpath("killed.safetensors");
  ct_device cpu = ct_device_cpu(); // the child forks: CPU tensors only
  ct_tensor *w = ct_randn(CT_SHAPE(64), CT_F32, cpu);
  ct_named_tensor old = {"w", w};
  TU_OK(ct_save_safetensors(path, &old, 1, NULL));
  size_t len0;
  unsigned char *before = read_file(path, &len0);
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    close(fds[0]);
    kill_pipe = fds[1];
    cti_atomic_write_hook = stop_mid_save;
    // No OpenMP in a forked child (libgomp's pool does not survive fork): host copies only.
    float *data = calloc(512 * 1024, sizeof *data);
    ct_tensor *a = data ? ct_from_host(data, CT_SHAPE(512, 1024), CT_F32, cpu) : NULL;
    ct_tensor *b = data ? ct_from_host(data, CT_SHAPE(512, 1024), CT_F32, cpu) : NULL;
    if (!a || !b) _exit(5);
    ct_named_tensor two[2] = {{"a", a}, {"b", b}}; // 4 MiB: the hook stops it after the first tensor
    ct_save_safetensors(path, two, 2, NULL);
    _exit(4); // the hook never returned: reaching here means the save finished
  }
  close(fds[1]);
  char tmp[4096] = "";
  struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
  ssize_t got = poll(&pfd, 1, 30000) == 1 ? read(fds[0], tmp, sizeof tmp - 1) : -1;
  bool mid_save = got > 0 && memchr(tmp, 0, (size_t)got) != NULL; // the child is mid-save
  close(fds[0]);
  if (!mid_save) {
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    fail_msg("the child did not reach the middle of its save within 30 s");
  }
  assert_true(strncmp(tmp, path, strlen(path)) == 0 && strncmp(tmp + strlen(path), ".tmp.", 5) == 0);
  struct stat st;
  int stat_rc = stat(tmp, &st);
  assert_int_equal(kill(child, SIGKILL), 0);
  int status = 0;
  assert_int_equal(waitpid(child, &status, 0), child);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  assert_int_equal(stat_rc, 0); // the half-written temporary existed...
  assert_true(st.st_size >= (1 << 20) && st.st_size < 4 * (1 << 20));
  size_t len1;
  unsigned char *after = read_file(path, &len1); // ...and the target is the old file
  assert_int_equal(len0, len1);
  assert_memory_equal(before, after, len0);
  ct_named_tensor *e = NULL;
  int n = 0;
  TU_OK(ct_load_safetensors(path, cpu, &e, &n));
  assert_int_equal(n, 1);
  assert_string_equal(e[0].name, "w");
  double *want = tu_to_f64(w);
  tu_assert_close(e[0].tensor, want, 0, 0, "the checkpoint after the kill");
  free(want);
  ct_named_tensors_free(e, n);
  assert_int_equal(unlink(tmp), 0);
  free(before), free(after);
  ct_free(w);
}

// A training checkpoint's progress past any count a run could reach (a
// damaged or hostile file: 2^63 - 1 steps) is refused on load, so that the
// resumed loop's arithmetic on it cannot overflow (BADINPUT 129).
static void test_train_progress_limits(void **state) {
  (void)state;
  ct_module *lin = ct_nn_linear(3, 2, true);
  TU_CHECK(lin);
  int np = 0;
  ct_param **ps = ct_module_parameters(lin, &np);
  ct_optimizer *opt = ct_optim_sgd(ps, np, ct_sgd_defaults(0.1));
  TU_CHECK(opt);
  const char *path = tpath("progress.safetensors");
  ct_train_progress p = {.epoch = 1, .batch = 2, .step = INT64_MAX}, got = {0};
  TU_OK(ct_save_train_checkpoint(path, lin, opt, &p, NULL));
  assert_int_equal(ct_load_train_checkpoint(path, lin, opt, &got, NULL), CT_ERR_IO);
  assert_non_null(strstr(ct_last_error(), "metadata \"step\" is \"9223372036854775807\", expected a count"));
  p.step = 12;
  TU_OK(ct_save_train_checkpoint(path, lin, opt, &p, NULL));
  TU_OK(ct_load_train_checkpoint(path, lin, opt, &got, NULL));
  assert_true(got.step == 12 && got.epoch == 1 && got.batch == 2);
  ct_optimizer_free(opt);
  ct_module_free(lin);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_writer_bytes),     cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_foreign_spellings), cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_bool_bytes),       cmocka_unit_test(test_header_length),
      cmocka_unit_test(test_fuzz_truncations), cmocka_unit_test(test_fuzz_flips),
      cmocka_unit_test(test_atomic_save),      cmocka_unit_test(test_sigkill_mid_save),
      cmocka_unit_test(test_planted_temp_links),      cmocka_unit_test(test_module_round_trip),
      cmocka_unit_test(test_train_progress_limits),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
