// SPDX-License-Identifier: MIT
//
// test_print: ct_tensor_str against PyTorch's own str(tensor).
//
// The reference is tests/fixtures/print/cases.txt, written by
// tools/make_print_fixtures.py from PyTorch (format in that script's
// docstring): for each case the dtype, shape and exact values, and the string
// PyTorch prints for it on the CPU and on cuda:0. Every case is built on the
// device under test (--device cpu|cuda) and its string must match byte for
// byte; a failure shows both strings. The live ctest unit.print_fixtures_live
// checks that the file still is what the installed PyTorch prints.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#ifndef CT_FIXTURE_DIR
#define CT_FIXTURE_DIR "tests/fixtures"
#endif

typedef struct pcase {
  char name[96];
  ct_dtype dtype;
  ct_shape shape;
  bool transpose;   // print the 2-d base transposed (a strided view)
  void *data;       // numel elements of dtype, row-major
  char *cpu, *cuda; // PyTorch's strings
} pcase;

static pcase *cases;
static int ncases;

// ---- reading the fixture file ----------------------------------------------------------
typedef struct reader {
  char *text; // whole file; lines are cut in place
  char *pos;
  int line;
  const char *path;
} reader;

static char *next_line(reader *r) {
  if (!r->pos || !*r->pos) return NULL;
  char *l = r->pos;
  char *nl = strchr(l, '\n');
  if (nl) {
    *nl = '\0';
    r->pos = nl + 1;
  } else {
    r->pos = l + strlen(l);
  }
  r->line++;
  return l;
}

#define BAD(r, ...)                                                             \
  do {                                                                          \
    char m_[256];                                                               \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                       \
    fail_msg("%s:%d: bad fixture: %s", (r)->path, (r)->line, m_);               \
  } while (0)

static char *expect_key(reader *r, const char *key) {
  char *l = next_line(r);
  size_t n = strlen(key);
  if (!l || strncmp(l, key, n) != 0 || (l[n] != ' ' && l[n] != '\0'))
    BAD(r, "expected \"%s\", got \"%s\"", key, l ? l : "<end of file>");
  return l[n] ? l + n + 1 : l + n;
}

// Reads "KEY K" and the K lines after it, joined with '\n'.
static char *read_block(reader *r, const char *key) {
  int k = atoi(expect_key(r, key));
  size_t cap = 1, len = 0;
  char *s = malloc(cap);
  assert_non_null(s);
  s[0] = '\0';
  for (int j = 0; j < k; ++j) {
    char *l = next_line(r);
    if (!l) BAD(r, "%s string ends early", key);
    size_t n = strlen(l);
    cap = len + n + 2;
    s = realloc(s, cap);
    assert_non_null(s);
    if (j) s[len++] = '\n';
    memcpy(s + len, l, n + 1);
    len += n;
  }
  return s;
}

static void store_token(reader *r, const char *tok, ct_dtype dt, void *p) {
  char *end = NULL;
  errno = 0;
  if (ct_dtype_is_floating(dt)) {
    double v = strtod(tok, &end); // decimal, C99 hex float, nan, inf
    if (end == tok || *end) BAD(r, "bad float \"%s\"", tok);
    ct_store_f64(p, dt, v);
    return;
  }
  long long v = strtoll(tok, &end, 10);
  if (end == tok || *end || errno) BAD(r, "bad integer \"%s\"", tok);
  switch (dt) {
  case CT_BOOL:
  case CT_U8: *(uint8_t *)p = (uint8_t)v; break;
  case CT_I32: *(int32_t *)p = (int32_t)v; break;
  default: *(int64_t *)p = (int64_t)v; break;
  }
}

static void parse_case(reader *r, pcase *c) {
  snprintf(c->name, sizeof c->name, "%s", expect_key(r, "case"));
  if (ct_dtype_parse(expect_key(r, "dtype"), &c->dtype) != CT_OK) BAD(r, "dtype");
  char *sh = expect_key(r, "shape");
  c->shape.ndim = 0;
  for (char *tok = strtok(sh, " "); tok; tok = strtok(NULL, " ")) {
    if (c->shape.ndim == CT_MAX_DIMS) BAD(r, "too many dims");
    c->shape.d[c->shape.ndim++] = atoll(tok);
  }
  const char *view = expect_key(r, "view");
  if (strcmp(view, "none") && strcmp(view, "t")) BAD(r, "unknown view \"%s\"", view);
  c->transpose = !strcmp(view, "t");
  int64_t n = atoll(expect_key(r, "values"));
  if (n != ct_shape_numel(c->shape)) BAD(r, "%lld values for the shape", (long long)n);
  size_t es = ct_dtype_size(c->dtype);
  c->data = calloc((size_t)(n ? n : 1), es);
  assert_non_null(c->data);
  int64_t got = 0;
  while (got < n) {
    char *l = next_line(r);
    if (!l) BAD(r, "values end early");
    for (char *tok = strtok(l, " "); tok; tok = strtok(NULL, " ")) {
      if (got == n) BAD(r, "too many values");
      store_token(r, tok, c->dtype, (char *)c->data + (size_t)got * es);
      ++got;
    }
  }
  c->cpu = read_block(r, "cpu");
  c->cuda = read_block(r, "cuda");
  char *sep = next_line(r);
  if (!sep || strcmp(sep, "==")) BAD(r, "expected \"==\"");
}

static int load_fixtures(void **state) {
  (void)state;
  const char *path = getenv("CT_PRINT_FIXTURES");
  static char def[4096];
  if (!path) {
    snprintf(def, sizeof def, "%s/print/cases.txt", CT_FIXTURE_DIR);
    path = def;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "test_print: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  reader r = {malloc((size_t)sz + 1), NULL, 0, path};
  if (!r.text || fread(r.text, 1, (size_t)sz, f) != (size_t)sz) {
    fclose(f);
    return -1;
  }
  fclose(f);
  r.text[sz] = '\0';
  r.pos = r.text;
  int cap = 0;
  for (;;) {
    // skip comments and blank lines between records
    while (*r.pos == '#' || *r.pos == '\n') {
      next_line(&r);
      if (!*r.pos) break;
    }
    if (!*r.pos) break;
    if (ncases == cap) {
      cap = cap ? 2 * cap : 64;
      cases = realloc(cases, (size_t)cap * sizeof *cases);
      if (!cases) return -1;
    }
    memset(&cases[ncases], 0, sizeof cases[ncases]);
    parse_case(&r, &cases[ncases]);
    ++ncases;
  }
  free(r.text);
  return 0;
}

static int free_fixtures(void **state) {
  (void)state;
  for (int i = 0; i < ncases; ++i) {
    free(cases[i].data);
    free(cases[i].cpu);
    free(cases[i].cuda);
  }
  free(cases);
  cases = NULL;
  ncases = 0;
  return 0;
}

// ---- helpers -------------------------------------------------------------------------------------
static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  assert_non_null(d);
  memcpy(d, s, n);
  return d;
}

static ct_tensor *build(const pcase *c) {
  ct_tensor *base = ct_from_host(c->data, c->shape, c->dtype, tu_device);
  TU_CHECK(base);
  if (!c->transpose) return base;
  ct_tensor *v = ct_t(base);
  TU_CHECK(v);
  ct_free(base);
  return v;
}

// What PyTorch prints for case c on the device under test: the cuda:0 string
// with the device's own index ("cuda:0" and "cuda:N" are the same length
// for N < 10, so the line wrapping is the same).
static char *expected_for(const pcase *c) {
  if (tu_device.type != CT_CUDA) return dup_str(c->cpu);
  char *s = dup_str(c->cuda);
  char *at = strstr(s, "device='cuda:0'");
  if (at && tu_device.index != 0) {
    assert_true(tu_device.index < 10);
    at[strlen("device='cuda:")] = (char)('0' + tu_device.index);
  }
  return s;
}

static const pcase *find_case(const char *name) {
  for (int i = 0; i < ncases; ++i)
    if (!strcmp(cases[i].name, name)) return &cases[i];
  fail_msg("fixture case %s is missing", name);
  return NULL;
}

// ---- tests ------------------------------------------------------------------------------------------
static void test_fixture_cases(void **state) {
  (void)state;
  assert_true(ncases >= 40);
  int bad = 0;
  for (int i = 0; i < ncases; ++i) {
    const pcase *c = &cases[i];
    ct_tensor *t = build(c);
    char *got = ct_tensor_str(t);
    if (!got) fail_msg("case %s: ct_tensor_str failed: %s", c->name, ct_last_error());
    char *want = expected_for(c);
    if (strcmp(got, want) != 0) {
      ++bad;
      print_error("case %s (%s): strings differ\n--- PyTorch:\n%s\n--- ct_tensor_str:\n%s\n---\n",
                  c->name, ct_dtype_name(c->dtype), want, got);
    }
    free(want);
    free(got);
    ct_free(t);
  }
  if (bad) fail_msg("%d of %d print cases differ from PyTorch", bad, ncases);
}

// The fixtures cover what the brief promises: a spot check that the file
// holds each rule's case, so a trimmed file cannot pass silently.
static void test_fixture_coverage(void **state) {
  (void)state;
  static const char *names[] = {
      "f32_randn_3d", "f32_scalar", "f32_integral", "f32_small_sci", "f32_nan_inf_fraction",
      "f32_neg_zero_fixed", "f32_randn_30_wrap", "f32_summary_2000", "f32_summary_40x40",
      "f16_randn", "bf16_randn", "f64_randn", "i32_2d", "u8_values", "bool_1d",
      "f32_empty_0x3", "f64_wrap_suffix", "f32_transposed"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) find_case(names[i]);
  // the suffix order PyTorch uses: device before dtype
  const pcase *c = find_case("f64_randn");
  const char *dev = strstr(c->cuda, "device='cuda:0'");
  const char *dt = strstr(c->cuda, "dtype=torch.float64");
  assert_non_null(dev);
  assert_non_null(dt);
  assert_true(dev < dt);
}

static void test_print_writes_string_and_newline(void **state) {
  (void)state;
  const pcase *c = find_case("f32_randn_2d");
  ct_tensor *t = build(c);
  FILE *f = tmpfile();
  assert_non_null(f);
  TU_OK(ct_print(f, t));
  long n = ftell(f);
  rewind(f);
  char *buf = calloc((size_t)n + 1, 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  char *want = expected_for(c);
  size_t wl = strlen(want);
  assert_int_equal((size_t)n, wl + 1);
  assert_memory_equal(buf, want, wl);
  assert_int_equal(buf[wl], '\n');
  free(want);
  free(buf);
  ct_free(t);
}

static void test_errors(void **state) {
  (void)state;
  assert_null(ct_tensor_str(NULL));
  tu_assert_error_contains("ct_tensor_str", "ct_tensor_str(NULL)");
  assert_int_not_equal(ct_print(stdout, NULL), CT_OK);
  tu_assert_error_contains("ct_tensor_str", "ct_print(stdout, NULL)");
  const pcase *c = find_case("f32_scalar");
  ct_tensor *t = build(c);
  assert_int_not_equal(ct_print(NULL, t), CT_OK);
  tu_assert_error_contains("ct_print", "ct_print(NULL, t)");
  ct_free(t);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixture_cases),
      cmocka_unit_test(test_fixture_coverage),
      cmocka_unit_test(test_print_writes_string_and_newline),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, load_fixtures, free_fixtures);
}
