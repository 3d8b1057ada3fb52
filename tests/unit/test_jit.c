// SPDX-License-Identifier: MIT
//
// test_jit: the runtime-compiled elementwise kernels (jit.h, common/jit/).
//
// Invariants checked, against independent references:
//  - SHA-256 gives the published digests (FIPS 180-2 appendix B: "abc",
//    the 448-bit message, a million 'a'; the empty string), however the
//    message is split into updates;
//  - a bad expression fails at create with a message naming the problem,
//    "column C", and a caret under that column; no input crashes the parser
//    (random bytes and random token soup, the fuzzer's job in miniature);
//  - the emitter keeps the AST's grouping (a - (b - c), -(-x)) and writes
//    literals and casts as documented;
//  - fused, unfused (the runtime's own ops) and a float64 reference computed
//    here from hand-written formulas agree, over float16, bfloat16, float32,
//    float64 and mixes of them, and over contiguous, broadcast, transposed,
//    empty, 0-d and large (multi-threaded) shapes; outputs are poisoned
//    first, so an element the kernel skips fails;
//  - a single operator or function, fused, equals the runtime's op bit for
//    bit on the CPU (special values included), and float16/bfloat16 loads
//    and stores round-trip all 65,536 patterns as dtype.c does;
//  - the result dtype follows ops.c's promotion; bad calls (counts, shapes,
//    an integer input with its caret, the output's dtype) fail in the ops'
//    words; traffic counts are the bytes worked out by hand;
//  - the cache: a second call hits memory, a new process (memory cleared)
//    hits disk without compiling, a different dtype compiles anew; an entry
//    flipped, truncated, with a damaged header, written for another key,
//    or holding another kernel's valid code is rejected and rebuilt (and the
//    foreign code never runs: the result is this expression's); entries are
//    written atomically (no temporaries left);
//  - the directory: $CT_JIT_CACHE, else $XDG_CACHE_HOME/ct-jit, else
//    $HOME/.cache/ct-jit, created 0700; refused when group- or
//    world-writable, a symbolic link, a file, or another user's;
//  - compiling: no shell (a cache path full of shell syntax works and runs
//    nothing), a missing compiler gives a clear error naming the fix, and
//    the compiler's own diagnostics reach the message (a broken source; a
//    compiler that fails);
//  - NVRTC (CUDA builds, no GPU needed): every kernel compiles to PTX for
//    compute_80 and compute_90, which ptxas accepts; NVRTC's log reaches the
//    message of a broken source.
#define _GNU_SOURCE // setenv, mkdtemp, symlink
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jit_impl.h"
#include "testutil.h"

static char tmpdir[256];

static const char *tpath(const char *name) { return tu_scratch_path(tmpdir, name); }

// Points the JIT at a fresh cache directory <tmpdir>/<name> and forgets
// what the process has loaded, as a new process would start.
static const char *fresh_cache(const char *name) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
  setenv("CT_JIT_CACHE", dir, 1);
  ct_jit_clear_memory_cache();
  ct_jit_reset_stats();
  return dir;
}

// ---- SHA-256 ---------------------------------------------------------------------------------
static void test_sha256_vectors(void **state) {
  (void)state;
  static const struct {
    const char *msg, *hex;
  } v[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  char hex[65];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; ++i) {
    cti_sha256_hex(v[i].msg, strlen(v[i].msg), hex);
    assert_string_equal(hex, v[i].hex);
    // the same message in two updates, split at every point
    for (size_t cut = 0; cut <= strlen(v[i].msg); ++cut) {
      cti_sha256 c;
      unsigned char d[32];
      cti_sha256_init(&c);
      cti_sha256_update(&c, v[i].msg, cut);
      cti_sha256_update(&c, v[i].msg + cut, strlen(v[i].msg) - cut);
      cti_sha256_final(&c, d);
      for (int j = 0; j < 32; ++j) snprintf(hex + 2 * j, 3, "%02x", d[j]);
      assert_string_equal(hex, v[i].hex);
    }
  }
  // one million 'a', in updates of 997 bytes (a prime: every block boundary is crossed)
  char *a = malloc(1000000);
  assert_non_null(a);
  memset(a, 'a', 1000000);
  cti_sha256 c;
  unsigned char d[32];
  cti_sha256_init(&c);
  for (size_t at = 0; at < 1000000; at += 997) cti_sha256_update(&c, a + at, at + 997 <= 1000000 ? 997 : 1000000 - at);
  cti_sha256_final(&c, d);
  for (int j = 0; j < 32; ++j) snprintf(hex + 2 * j, 3, "%02x", d[j]);
  assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  free(a);
}

// ---- the parser ---------------------------------------------------------------------------------
// The column the caret of the last error stands under (1-based), or -1.
static int caret_column(void) {
  const char *e = ct_last_error(), *nl1 = strchr(e, '\n');
  const char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  if (!nl2) return -1;
  const char *caret = strchr(nl2 + 1, '^');
  return caret ? (int)(caret - (nl2 + 1)) - 2 + 1 : -1; // the lines are indented by 2
}

static void test_parse_errors(void **state) {
  (void)state;
  static const struct {
    const char *expr, *inputs, *scalars, *needle;
    int column; // 0: no caret expected (a declaration error)
  } bad[] = {
      {"x +", "x,y", NULL, "expected a number, a name or '(', found the end", 4},
      {"x * (y + 2", "x,y", NULL, "expected ')' to close the '(' at column 5", 11},
      {"(x", "x", NULL, "expected ')'", 3},
      {"x)", "x", NULL, "')' without a matching '('", 2},
      {"foo(x)", "x", NULL, "unknown function 'foo'", 1},
      {"x(y)", "x,y", NULL, "it is a variable, not a function", 1},
      {"exp(x, y)", "x,y", NULL, "exp takes 1 argument, got 2", 1},
      {"pow(x)", "x", NULL, "pow takes 2 arguments, got 1", 1},
      {"max()", "x", NULL, "max takes 2 arguments, got 0", 1},
      {"min(x, y", "x,y", NULL, "expected ',' or ')' in the call of min", 9},
      {"x y", "x,y", NULL, "expected an operator (+ - * /) or the end, found 'y'", 3},
      {"x + w", "x,y", "alpha", "unknown name 'w'; the inputs are x and y and the scalars alpha", 5},
      {"1.2.3 + x", "x", NULL, "'1.2.3' is not a number", 1},
      {"2x", "x", NULL, "'2x' is not a number", 1},
      {"x + 2e", "x", NULL, "the exponent of a number needs a digit", 5},
      {"x + 1e999", "x", NULL, "out of range", 5},
      {".", "x", NULL, "a number needs a digit", 1},
      {"", "x", NULL, "the expression is empty", 1},
      {"   ", "x", NULL, "the expression is empty", 4},
      {"exp + x", "x", NULL, "'exp' is a function: write exp(...)", 1},
      {"x $ y", "x,y", NULL, "found '$'", 3},
      {"x * \x01", "x", NULL, "the byte 0x01", 5},
      {"x + y", "x", NULL, "unknown name 'y'", 5},
      {"alpha * 2", "x", "alpha", "uses no input tensor", 1},
      {"x*y", "x,x", NULL, "declared twice", 0},
      {"x", "x,alpha", "alpha", "declared twice", 0},
      {"x", "", NULL, "no inputs declared", 0},
      {"x", "x,for", NULL, "reserved", 0},
      {"x", "x,exp", NULL, "is the name of a function", 0},
      {"x", "x,2y", NULL, "must start with a letter", 0},
      {"x", "x,a-b", NULL, "letters, digits and '_'", 0},
      {"x", "x,NAN", NULL, "all capitals", 0},
      {"x", "x,jit_y", NULL, "prefix", 0},
      {"x", "a,b,c,d,e,f,g,h,k", NULL, "at most 8 inputs", 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ct_clear_error();
    ct_jit_fn *f = ct_jit_create(bad[i].expr, bad[i].inputs, bad[i].scalars);
    if (f) fail_msg("\"%s\" was accepted", bad[i].expr);
    const char *e = ct_last_error();
    if (!strstr(e, bad[i].needle)) fail_msg("\"%s\": the message lacks \"%s\":\n%s", bad[i].expr, bad[i].needle, e);
    if (bad[i].column) {
      char col[32];
      snprintf(col, sizeof col, "column %d:", bad[i].column);
      if (!strstr(e, col) || caret_column() != bad[i].column)
        fail_msg("\"%s\": expected the caret at column %d (caret at %d):\n%s", bad[i].expr, bad[i].column,
                 caret_column(), e);
    }
  }
  // nesting beyond the limit fails cleanly, within it works
  char deep[300];
  memset(deep, '(', 100);
  strcpy(deep + 100, "x");
  memset(deep + 101, ')', 100);
  deep[201] = '\0';
  assert_null(ct_jit_create(deep, "x", NULL));
  assert_non_null(strstr(ct_last_error(), "nests more than"));
  // 40 unary minus in a row: accepted, and its canonical spelling too (fuzz_jit's first find)
  for (int i = 0; i < 40; ++i) deep[2 * i] = '-', deep[2 * i + 1] = ' ';
  strcpy(deep + 80, "x");
  cti_jit_ast da, db;
  TU_OK(cti_jit_parse("t", deep, "x", NULL, &da));
  char *dc = cti_jit_canonical(&da);
  TU_OK(cti_jit_parse("t", dc, "x", NULL, &db));
  free(dc);
  cti_jit_ast_free(&da), cti_jit_ast_free(&db);
  memset(deep, '-', 200);
  strcpy(deep + 200, "x");
  assert_null(ct_jit_create(deep, "x", NULL));
  memset(deep, '(', 30);
  strcpy(deep + 30, "x");
  memset(deep + 31, ')', 30);
  deep[61] = '\0';
  ct_jit_fn *ok = ct_jit_create(deep, "x", NULL);
  TU_CHECK(ok);
  ct_jit_free(ok);
  // too long
  char *longe = malloc(CT_JIT_MAX_EXPR + 2);
  memset(longe, 'x', CT_JIT_MAX_EXPR + 1);
  longe[CT_JIT_MAX_EXPR + 1] = '\0';
  assert_null(ct_jit_create(longe, "x", NULL));
  assert_non_null(strstr(ct_last_error(), "longer than"));
  free(longe);
  // a long expression: the caret window still points at the error
  char wide[400];
  int k = 0;
  for (int i = 0; i < 60; ++i) k += snprintf(wide + k, sizeof wide - (size_t)k, "x + ");
  snprintf(wide + k, sizeof wide - (size_t)k, "q + x");
  assert_null(ct_jit_create(wide, "x", NULL));
  assert_non_null(strstr(ct_last_error(), "unknown name 'q'"));
  const char *e = ct_last_error(), *l2 = strchr(e, '\n') + 1, *l3 = strchr(l2, '\n') + 1;
  assert_int_equal(l2[strchr(l3, '^') - l3], 'q'); // the caret stands under the q in the shown window
}

// Random bytes and random tokens: the parser never crashes, and every
// refusal says something.
static void test_parse_robust(void **state) {
  (void)state;
  static const char *const tok[] = {"x", "y", "alpha", "2", "0.5", "1e-3", "+", "-", "*", "/", "(", ")",
                                    ",", "exp(", "pow(", "max(", "sigmoid(", " ", "..", "e", "_", "\t"};
  uint64_t s = tu_seed() | 1;
  char buf[256];
  for (int it = 0; it < 20000; ++it) {
    int len = 0;
    const int ntok = (int)(s % 24);
    for (int t = 0; t < ntok && len < 200; ++t) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      if (it % 4 == 0) buf[len++] = (char)(s & 0xff ? s & 0xff : 1); // raw bytes
      else len += snprintf(buf + len, sizeof buf - (size_t)len, "%s", tok[s % (sizeof tok / sizeof tok[0])]);
    }
    buf[len] = '\0';
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    ct_clear_error();
    ct_jit_fn *f = ct_jit_create(buf, "x,y", "alpha");
    if (f) {
      // accepted: it types and emits
      ct_dtype dt[2] = {CT_F32, CT_F16};
      char *src = ct_jit_source(f, dt, 2, CT_CPU);
      if (!src) fail_msg("\"%s\" parsed but did not emit: %s", buf, ct_last_error());
      free(src);
      // its canonical spelling parses again, to itself (what fuzz_jit found broken once)
      cti_jit_ast a1, a2;
      TU_OK(cti_jit_parse("t", buf, "x,y", "alpha", &a1));
      char *c1 = cti_jit_canonical(&a1);
      if (cti_jit_parse("t", c1, "x,y", "alpha", &a2) != CT_OK)
        fail_msg("the canonical \"%s\" of \"%s\" does not parse: %s", c1, buf, ct_last_error());
      char *c2 = cti_jit_canonical(&a2);
      assert_string_equal(c1, c2);
      free(c1), free(c2);
      cti_jit_ast_free(&a1), cti_jit_ast_free(&a2);
      ct_jit_free(f);
    } else if (!ct_last_error()[0] || caret_column() < 1) {
      fail_msg("\"%s\" refused without a positioned message: %s", buf, ct_last_error());
    }
  }
}

static char *emitted(const char *expr, const char *inputs, const char *scalars, const ct_dtype *dt) {
  cti_jit_ast ast;
  cti_jit_spec spec;
  if (cti_jit_parse("t", expr, inputs, scalars, &ast)) fail_msg("%s: %s", expr, ct_last_error());
  if (cti_jit_specialize("t", &ast, dt, &spec)) fail_msg("%s: %s", expr, ct_last_error());
  char *s = cti_jit_codegen_expr(&ast, &spec);
  cti_jit_spec_free(&spec);
  cti_jit_ast_free(&ast);
  return s;
}

static void test_emitter(void **state) {
  (void)state;
  const ct_dtype f32[3] = {CT_F32, CT_F32, CT_F32}, f64[3] = {CT_F64, CT_F64, CT_F64};
  const ct_dtype mix[3] = {CT_F16, CT_F64, CT_F32};
  static const struct {
    const char *expr;
    int which; // 0 f32, 1 f64, 2 mixed
    const char *want;
  } cases[] = {
      {"x - (y - z)", 0, "x - (y - z)"},
      {"x - y - z", 0, "x - y - z"},
      {"(x - y) - z", 0, "x - y - z"},
      {"x / (y * z)", 0, "x / (y * z)"},
      {"x + y * z", 0, "x + y * z"},
      {"(x + y) * z", 0, "(x + y) * z"},
      {"-(-x)", 0, "- -x"},
      {"- - x", 0, "- -x"},
      {"-(x + y)", 0, "-(x + y)"},
      {"+x", 0, "x"},
      {"2 * x", 0, "2.0f * x"},
      {"0.1 * x", 0, "(float)0.1 * x"},
      {"1e-3 + x", 0, "(float)0.001 + x"},
      {"x * 0.5", 1, "x * 0.5"},
      {"alpha * x", 0, "(float)alpha * x"},
      {"(alpha + 1) * x", 0, "(float)(alpha + 1.0) * x"},
      {"sigmoid(x) + relu(y) * min(z, 0) + max(x, y)", 0,
       "jit_sigmoidf(x) + jit_reluf(y) * jit_minf(z, 0.0f) + jit_maxf(x, y)"},
      {"exp(x) + log(y) + sqrt(z) + tanh(x) + abs(y) + pow(z, 2)", 1,
       "exp(x) + log(y) + sqrt(z) + tanh(x) + fabs(y) + pow(z, 2.0)"},
      {"x * y + z", 2, "(double)x * y + (double)z"},
      {"x * z", 2, "x * z"},
      {"exp(alpha) * x", 0, "(float)exp(alpha) * x"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    const ct_dtype *dt = cases[i].which == 0 ? f32 : cases[i].which == 1 ? f64 : mix;
    char *s = emitted(cases[i].expr, "x,y,z", "alpha", dt);
    if (!s || strcmp(s, cases[i].want) != 0)
      fail_msg("\"%s\" emitted \"%s\", expected \"%s\"", cases[i].expr, s ? s : "(null)", cases[i].want);
    free(s);
  }
  // the canonical spelling, which the source names: spacing and redundant parentheses vanish
  cti_jit_ast ast;
  TU_OK(cti_jit_parse("t", " ( x*(y) )+1 - -2.50*exp( alpha ) ", "x,y", "alpha", &ast));
  char *canon = cti_jit_canonical(&ast);
  assert_string_equal(canon, "x * y + 1 - -2.5 * exp(alpha)");
  free(canon);
  cti_jit_ast_free(&ast);
  // the generated C names the expression, the dtypes, and only what it uses
  ct_jit_fn *f = ct_jit_create("x * sigmoid(y) + alpha * z", "x,y,z", "alpha");
  TU_CHECK(f);
  const ct_dtype dt[3] = {CT_F16, CT_F32, CT_BF16};
  char *c = ct_jit_source(f, dt, 3, CT_CPU), *cu = ct_jit_source(f, dt, 3, CT_CUDA);
  TU_CHECK(c);
  TU_CHECK(cu);
  assert_non_null(strstr(c, "// expression: x * sigmoid(y) + alpha * z"));
  assert_non_null(strstr(c, "x float16, y float32, z bfloat16"));
  assert_non_null(strstr(c, "#pragma omp parallel if"));
  assert_non_null(strstr(c, "#pragma omp simd"));
  assert_non_null(strstr(c, "target_clones(\"avx2\", \"default\")"));
  // sigmoid's exp is the runtime's own, pasted from core/vecmath.h, in both dialects; tanh and log are not used
  assert_non_null(strstr(c, "CTI_VM_FN float cti_expf(float y)"));
  assert_non_null(strstr(cu, "CTI_VM_FN float cti_expf(float y)"));
  assert_non_null(strstr(c, "return 1.0f / (1.0f + cti_expf(-v));"));
  assert_null(strstr(c, "cti_tanhf"));
  assert_null(strstr(c, "cti_logf"));
  assert_non_null(strstr(c, "jit_half_to_float(in_x[i])"));
  assert_non_null(strstr(c, "jit_bf16_to_float(in_z[i])"));
  assert_null(strstr(c, "jit_reluf"));
  assert_non_null(strstr(cu, "extern \"C\" __global__ void ct_jit_kernel"));
  // one emitter: the expression's line is the same in both dialects
  const char *ec = strstr(c, "  return x * jit_sigmoidf(y)"), *ecu = strstr(cu, "  return x * jit_sigmoidf(y)");
  assert_non_null(ec);
  assert_non_null(ecu);
  assert_int_equal(strcspn(ec, "\n"), strcspn(ecu, "\n"));
  assert_memory_equal(ec, ecu, strcspn(ec, "\n"));
  free(c), free(cu);
  ct_jit_free(f);
}

// ---- numbers: fused vs unfused vs float64 ------------------------------------------------------
static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }
static double dmin(double a, double b) { return a != a || a <= b ? a : b; }
static double dmax(double a, double b) { return a != a || a >= b ? a : b; }
static double ref0(const double *v, const double *s) { return v[0] * sigm(v[1]) + s[0] * v[2]; }
static double ref1(const double *v, const double *s) { return (void)s, fmax(v[0] - v[1], 0) / (1 + fabs(v[2])); }
static double ref2(const double *v, const double *s) { return (void)s, pow(v[0], 2) - dmax(v[1], 0.5) * dmin(v[2], -0.25); }
static double ref3(const double *v, const double *s) { return (void)s, sqrt(fabs(v[0])) + log(1 + exp(v[1])) - tanh(v[2]); }
static double ref4(const double *v, const double *s) {
  return -v[0] / s[0] + exp(-(v[1] * v[1])) * s[1] - (v[2] - 1) * (v[2] + 1);
}
static double ref5(const double *v, const double *s) { return (void)s, 2 - v[0] / (3 + v[1] * v[1]) + pow(2, v[2]); }
static double ref6(const double *v, const double *s) { return (s[0] * 2 + 1) / (v[0] * v[0] + 1) + v[1] * 0; }

typedef double (*ref_fn)(const double *v, const double *s);
static const struct {
  const char *expr, *scalars;
  double sc[2];
  ref_fn ref;
} cases[] = {
    {"x * sigmoid(y) + alpha * z", "alpha", {0.5, 0}, ref0},
    {"relu(x - y) / (1 + abs(z))", "", {0, 0}, ref1},
    {"pow(x, 2) - max(y, 0.5) * min(z, -0.25)", "", {0, 0}, ref2},
    {"sqrt(abs(x)) + log(1 + exp(y)) - tanh(z)", "", {0, 0}, ref3},
    {"-x / beta + exp(-(y * y)) * gamma - (z - 1) * (z + 1)", "beta,gamma", {1.5, -0.75}, ref4},
    {"2 - x / (3 + y * y) + pow(2, z)", "", {0, 0}, ref5},
    {"(alpha * 2 + 1) / (x * x + 1) + y * 0", "alpha", {0.25, 0}, ref6}, // z unused, still broadcast
};

typedef struct shape3 {
  const char *name;
  ct_shape s[3];
  bool transpose_x; // x is made as its shape's transpose, then viewed transposed
} shape3;

// The row-major index into a tensor of shape `in` of output element i of shape `out` (broadcast).
static int64_t bcast_index(ct_shape out, ct_shape in, int64_t i) {
  int64_t idx = 0, mul = 1;
  for (int d = out.ndim - 1; d >= 0; --d) {
    const int64_t c = i % out.d[d];
    i /= out.d[d];
    const int di = d - (out.ndim - in.ndim);
    if (di >= 0) {
      if (in.d[di] != 1) idx += c * mul;
      mul *= in.d[di];
    }
  }
  return idx;
}

static ct_tensor *random_input(ct_shape s, bool transposed, ct_dtype dt, double **host) {
  ct_shape made = s;
  if (transposed) made.d[0] = s.d[1], made.d[1] = s.d[0];
  const int64_t n = ct_shape_numel(made);
  double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
  tu_fill_uniform(x, n, -2.0, 2.0);
  ct_tensor *t = tu_from_f64(x, made, dt, tu_device);
  free(x);
  if (t && transposed) {
    ct_tensor *v = ct_transpose(t, 0, 1);
    ct_free(t);
    t = v;
  }
  *host = t ? tu_to_f64(t) : NULL; // the values as the dtype holds them, row-major
  return t;
}

// The error bound of a dtype for these tests: looser for the chain, whose
// every op rounds to the (coarsest) dtype of its operands.
static double bound(ct_dtype dt) { return tu_rtol(dt); }
static ct_dtype coarsest(const ct_dtype *dt, int n) {
  ct_dtype c = CT_F64;
  for (int k = 0; k < n; ++k)
    if (bound(dt[k]) > bound(c)) c = dt[k];
  return c;
}

static void check_case(size_t ci, const shape3 *sh, const ct_dtype *dt) {
  char what[256];
  snprintf(what, sizeof what, "\"%s\" on %s, dtypes %s %s %s", cases[ci].expr, sh->name, ct_dtype_name(dt[0]),
           ct_dtype_name(dt[1]), ct_dtype_name(dt[2]));
  ct_jit_fn *f = ct_jit_create(cases[ci].expr, "x,y,z", cases[ci].scalars);
  if (!f) fail_msg("%s: %s", what, ct_last_error());
  double *h[3];
  ct_tensor *in[3];
  for (int k = 0; k < 3; ++k) {
    in[k] = random_input(sh->s[k], k == 0 && sh->transpose_x, dt[k], &h[k]);
    TU_CHECK(in[k]);
  }
  const int ns = cases[ci].scalars[0] ? (strchr(cases[ci].scalars, ',') ? 2 : 1) : 0;
  const ct_tensor *cin[3] = {in[0], in[1], in[2]};
  ct_tensor *fused = ct_jit_call(f, cin, 3, cases[ci].sc, ns);
  if (!fused) fail_msg("%s: fused: %s", what, ct_last_error());
  ct_tensor *unfused = ct_jit_call_unfused(f, cin, 3, cases[ci].sc, ns);
  if (!unfused) fail_msg("%s: unfused: %s", what, ct_last_error());
  ct_dtype want;
  TU_OK(ct_jit_result_dtype(f, dt, 3, &want));
  assert_int_equal(ct_dtype_of(fused), want);
  assert_int_equal(ct_dtype_of(unfused), want);
  ct_shape out = ct_shape_of(fused);
  assert_true(ct_shape_eq(out, ct_shape_of(unfused)));
  const int64_t n = ct_shape_numel(out);
  double *ref = malloc((size_t)(n ? n : 1) * sizeof(double));
  for (int64_t i = 0; i < n; ++i) {
    double v[3];
    for (int k = 0; k < 3; ++k) v[k] = h[k][bcast_index(out, ct_shape_of(in[k]), i)];
    ref[i] = cases[ci].ref(v, cases[ci].sc);
  }
  // fused: op math in float (double where every input is float64), one
  // rounding at the store
  const double fb = 2 * (bound(want) > bound(coarsest(dt, 3) == CT_F64 ? CT_F64 : CT_F32)
                             ? bound(want)
                             : bound(coarsest(dt, 3) == CT_F64 ? CT_F64 : CT_F32));
  char w2[300];
  snprintf(w2, sizeof w2, "%s: fused vs float64", what);
  tu_assert_close(fused, ref, fb, 4 * fb, w2);
  // unfused: a rounding at every op, in the dtype of its operands
  const double ub = 8 * bound(coarsest(dt, 3)) > fb ? 8 * bound(coarsest(dt, 3)) : fb;
  snprintf(w2, sizeof w2, "%s: unfused vs float64", what);
  tu_assert_close(unfused, ref, ub, 4 * ub, w2);
  double *u = tu_to_f64(unfused);
  snprintf(w2, sizeof w2, "%s: fused vs unfused", what);
  tu_assert_close(fused, u, ub, 4 * ub, w2);
  free(u), free(ref);
  for (int k = 0; k < 3; ++k) free(h[k]), ct_free(in[k]);
  ct_free(fused), ct_free(unfused);
  ct_jit_free(f);
}

static void test_fused_vs_unfused(void **state) {
  (void)state;
  fresh_cache("agree");
  const shape3 shapes[] = {
      {"(3,4,5) x3", {CT_SHAPE(3, 4, 5), CT_SHAPE(3, 4, 5), CT_SHAPE(3, 4, 5)}, false},
      {"(3,4,5) (4,5) (1)", {CT_SHAPE(3, 4, 5), CT_SHAPE(4, 5), CT_SHAPE(1)}, false},
      {"(2,1,6) (1,3,1) (6)", {CT_SHAPE(2, 1, 6), CT_SHAPE(1, 3, 1), CT_SHAPE(6)}, false},
      {"x transposed (5,4) (5,4) (4)", {CT_SHAPE(5, 4), CT_SHAPE(5, 4), CT_SHAPE(4)}, true},
      {"empty (0,3) (3) (1)", {CT_SHAPE(0, 3), CT_SHAPE(3), CT_SHAPE(1)}, false},
      {"0-d", {CT_SCALAR_SHAPE, CT_SCALAR_SHAPE, CT_SCALAR_SHAPE}, false},
  };
  const ct_dtype dts[][3] = {{CT_F32, CT_F32, CT_F32}, {CT_F64, CT_F64, CT_F64}, {CT_F16, CT_F16, CT_F16},
                             {CT_BF16, CT_BF16, CT_BF16}, {CT_F16, CT_F32, CT_BF16}, {CT_F64, CT_F16, CT_F32}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (size_t d = 0; d < sizeof dts / sizeof dts[0]; ++d) check_case(c, &shapes[s], dts[d]);
  // large enough for the parallel loops, contiguous and broadcast
  const shape3 big[] = {
      {"(40000) x3", {CT_SHAPE(40000), CT_SHAPE(40000), CT_SHAPE(40000)}, false},
      {"(300,200) (200) (300,1)", {CT_SHAPE(300, 200), CT_SHAPE(200), CT_SHAPE(300, 1)}, false},
  };
  for (size_t s = 0; s < 2; ++s) {
    check_case(0, &big[s], dts[0]);
    check_case(4, &big[s], dts[2]);
  }
  ct_jit_stats st = ct_jit_get_stats();
  // every (expression, dtypes) pair compiled once; every other call was a hit
  assert_int_equal(st.compiles, (int64_t)(sizeof cases / sizeof cases[0] * sizeof dts / sizeof dts[0]));
  assert_int_equal(st.disk_hits, 0);
}

// One operator or function, fused, is the runtime's op: bit for bit on the
// CPU, special values included.
static void test_single_ops_exact(void **state) {
  (void)state;
  fresh_cache("single");
  static const double special[] = {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-30, -1e-30, 1e-41, 1e30, -1e30,
                                   70000.0, 6e-8, -6e-8, 1e-5, 88.0, -104.0, 1e300};
  const int64_t n = 4096;
  double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
  tu_fill_uniform(a, n, -4, 4);
  tu_fill_uniform(b, n, -4, 4);
  const int ns = (int)(sizeof special / sizeof special[0]);
  for (int i = 0; i < ns * ns; ++i) a[i] = special[i % ns], b[i] = special[i / ns];
  a[ns * ns] = NAN, b[ns * ns + 1] = NAN, a[ns * ns + 2] = INFINITY, b[ns * ns + 2] = -INFINITY;
  a[ns * ns + 3] = -INFINITY, b[ns * ns + 4] = INFINITY;
  static const struct {
    const char *expr;
    int unary, op; // op: ct_unary_op or ct_binary_op
  } ops[] = {
      {"x + y", 0, CT_OP_ADD},        {"x - y", 0, CT_OP_SUB},       {"x * y", 0, CT_OP_MUL},
      {"x / y", 0, CT_OP_DIV},        {"min(x, y)", 0, CT_OP_MINIMUM}, {"max(x, y)", 0, CT_OP_MAXIMUM},
      {"pow(x, y)", 0, CT_OP_POW},    {"-x", 1, CT_OP_NEG},          {"abs(x)", 1, CT_OP_ABS},
      {"exp(x)", 1, CT_OP_EXP},       {"log(x)", 1, CT_OP_LOG},      {"sqrt(x)", 1, CT_OP_SQRT},
      {"relu(x)", 1, CT_OP_RELU},     {"sigmoid(x)", 1, CT_OP_SIGMOID}, {"tanh(x)", 1, CT_OP_TANH},
  };
  const ct_dtype dts[] = {CT_F16, CT_BF16, CT_F32, CT_F64};
  for (size_t d = 0; d < 4; ++d) {
    ct_tensor *x = tu_from_f64(a, CT_SHAPE(n), dts[d], tu_device), *y = tu_from_f64(b, CT_SHAPE(n), dts[d], tu_device);
    TU_CHECK(x);
    TU_CHECK(y);
    const ct_tensor *in[2] = {x, y};
    const size_t es = ct_dtype_size(dts[d]);
    unsigned char *pf = malloc(n * es), *pr = malloc(n * es);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
      ct_jit_fn *f = ct_jit_create(ops[o].expr, "x,y", NULL);
      TU_CHECK(f);
      ct_tensor *fu = ct_jit_call(f, in, 2, NULL, 0);
      ct_tensor *rt = ops[o].unary ? ct_unary((ct_unary_op)ops[o].op, x) : ct_binary((ct_binary_op)ops[o].op, x, y);
      TU_CHECK(fu);
      TU_CHECK(rt);
      TU_OK(ct_copy_to_host(fu, pf, n * es));
      TU_OK(ct_copy_to_host(rt, pr, n * es));
      if (tu_device.type == CT_CPU) {
        for (int64_t i = 0; i < n; ++i) {
          const double vf = ct_load_f64(pf + i * es, dts[d]), vr = ct_load_f64(pr + i * es, dts[d]);
          if (memcmp(pf + i * es, pr + i * es, es) != 0 && !(isnan(vf) && isnan(vr)))
            fail_msg("%s in %s at %" PRId64 " (x=%.17g, y=%.17g): fused %.17g, ct op %.17g", ops[o].expr,
                     ct_dtype_name(dts[d]), i, a[i], b[i], vf, vr);
        }
      } else { // another compiler's math library: within the dtype's rounding
        double *r = tu_to_f64(rt);
        tu_assert_close(fu, r, bound(dts[d]), bound(dts[d]), ops[o].expr);
        free(r);
      }
      ct_free(fu), ct_free(rt);
      ct_jit_free(f);
    }
    free(pf), free(pr);
    ct_free(x), ct_free(y);
  }
  free(a), free(b);
}

// float16 and bfloat16 loads and stores: all 65,536 patterns through "x".
static void test_half_patterns(void **state) {
  (void)state;
  fresh_cache("half");
  uint16_t *bits = malloc(65536 * sizeof(uint16_t)), *got = malloc(65536 * sizeof(uint16_t));
  for (int i = 0; i < 65536; ++i) bits[i] = (uint16_t)i;
  ct_jit_fn *f = ct_jit_create("x", "x", NULL);
  TU_CHECK(f);
  const ct_dtype dts[2] = {CT_F16, CT_BF16};
  for (int d = 0; d < 2; ++d) {
    ct_tensor *x = ct_from_host(bits, CT_SHAPE(65536), dts[d], tu_device);
    TU_CHECK(x);
    const ct_tensor *in[1] = {x};
    ct_tensor *y = ct_jit_call(f, in, 1, NULL, 0);
    TU_CHECK(y);
    TU_OK(ct_copy_to_host(y, got, 65536 * sizeof(uint16_t)));
    for (int i = 0; i < 65536; ++i) {
      const uint16_t want = dts[d] == CT_F16 ? ct_f32_to_f16(ct_f16_to_f32(bits[i])) : ct_f32_to_bf16(ct_bf16_to_f32(bits[i]));
      if (got[i] != want) fail_msg("%s pattern 0x%04x: jit 0x%04x, dtype.c 0x%04x", ct_dtype_name(dts[d]), i, got[i], want);
    }
    ct_free(x), ct_free(y);
  }
  ct_jit_free(f);
  free(bits), free(got);
}

// ---- calls that must fail, result dtypes, traffic ------------------------------------------------------
static void test_call_errors(void **state) {
  (void)state;
  fresh_cache("errors");
  ct_jit_fn *f = ct_jit_create("x * y + alpha", "x,y", "alpha");
  TU_CHECK(f);
  ct_tensor *x = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device), *y = ct_zeros(CT_SHAPE(4), CT_F32, tu_device);
  ct_tensor *i = ct_zeros(CT_SHAPE(3), CT_I64, tu_device), *ok = ct_zeros(CT_SHAPE(3), CT_F32, tu_device);
  double a = 1;
  const ct_tensor *two[2] = {x, y};
  assert_null(ct_jit_call(f, two, 1, &a, 1));
  tu_assert_error_contains("takes 2 inputs and 1 scalar, got 1 and 1", "count");
  assert_null(ct_jit_call(f, two, 2, NULL, 0));
  tu_assert_error_contains("got 2 and 0", "scalars");
  assert_null(ct_jit_call(f, two, 2, &a, 1));
  tu_assert_error_contains("The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
                           "broadcast");
  const ct_tensor *withnull[2] = {x, NULL};
  assert_null(ct_jit_call(f, withnull, 2, &a, 1));
  tu_assert_error_contains("input 1 ('y') is NULL", "null");
  const ct_tensor *withint[2] = {ok, i};
  assert_null(ct_jit_call(f, withint, 2, &a, 1));
  tu_assert_error_contains("input 'y' is int64", "integer input");
  assert_int_equal(caret_column(), 5); // under the y of "x * y + alpha"
  assert_int_equal(ct_last_status(), CT_ERR_DTYPE);
  const ct_tensor *good[2] = {x, ok};
  ct_tensor *out16 = ct_zeros(CT_SHAPE(2, 3), CT_F16, tu_device), *out_bad = ct_zeros(CT_SHAPE(3, 3), CT_F32, tu_device);
  assert_int_not_equal(ct_jit_call_out(f, out16, good, 2, &a, 1), CT_OK);
  tu_assert_error_contains("result type float32 can't be cast to the desired output type float16", "out dtype");
  assert_int_not_equal(ct_jit_call_out(f, out_bad, good, 2, &a, 1), CT_OK);
  tu_assert_error_contains("output has shape (3, 3) but the broadcast result has shape (2, 3)", "out shape");
  assert_null(ct_jit_call_unfused(f, two, 2, &a, 1));
  tu_assert_error_contains("must match", "unfused broadcast");
  // the right call works, in place too (out aliases x)
  TU_OK(ct_fill_(x, 2.0));
  TU_OK(ct_fill_(ok, 3.0));
  TU_OK(ct_jit_call_out(f, x, good, 2, &a, 1));
  double v;
  ct_tensor *e = ct_select(x, 0, 1), *e2 = e ? ct_select(e, 0, 2) : NULL;
  TU_OK(ct_item(e2, &v));
  assert_true(v == 7.0);
  ct_free(e), ct_free(e2);
  if (ct_cuda_is_available() && tu_device.type == CT_CPU) {
    ct_tensor *g = ct_zeros(CT_SHAPE(3), CT_F32, ct_device_cuda(0));
    const ct_tensor *mixed[2] = {ok, g};
    assert_null(ct_jit_call(f, mixed, 2, &a, 1));
    tu_assert_error_contains("expected all tensors to be on the same device", "devices");
    ct_free(g);
  }
  ct_free(x), ct_free(y), ct_free(i), ct_free(ok), ct_free(out16), ct_free(out_bad);
  ct_jit_free(f);
}

static void test_result_dtype_and_traffic(void **state) {
  (void)state;
  ct_jit_fn *f = ct_jit_create("x * sigmoid(y) + alpha * z", "x,y,z", "alpha");
  TU_CHECK(f);
  const ct_dtype all[4] = {CT_F16, CT_BF16, CT_F32, CT_F64};
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 4; ++c) {
        ct_dtype dt[3] = {all[a], all[b], all[c]}, got;
        TU_OK(ct_jit_result_dtype(f, dt, 3, &got));
        assert_int_equal(got, ct_promote_types(ct_promote_types(all[a], all[b]), all[c]));
      }
  // traffic, worked out by hand for N float32 elements: fused reads x, y, z
  // and writes out (16N bytes); the chain is sigmoid(y) 8N, x*s 12N,
  // alpha*z 8N, add 12N = 40N in 4 kernels.
  const int64_t N = 1000;
  ct_tensor *t[3];
  for (int k = 0; k < 3; ++k) t[k] = ct_zeros(CT_SHAPE(N), CT_F32, tu_device);
  const ct_tensor *in[3] = {t[0], t[1], t[2]};
  ct_jit_traffic tf, tu;
  TU_OK(ct_jit_traffic_of(f, in, 3, true, &tf));
  TU_OK(ct_jit_traffic_of(f, in, 3, false, &tu));
  assert_int_equal(tf.kernels, 1);
  assert_int_equal(tf.bytes, 16 * N);
  assert_int_equal(tu.kernels, 4);
  assert_int_equal(tu.bytes, 40 * N);
  // x float16: x * s casts x to float32 first (2N read, 4N written), then reads 4N + 4N
  ct_free(t[0]);
  t[0] = ct_zeros(CT_SHAPE(N), CT_F16, tu_device);
  in[0] = t[0];
  TU_OK(ct_jit_traffic_of(f, in, 3, true, &tf));
  TU_OK(ct_jit_traffic_of(f, in, 3, false, &tu));
  assert_int_equal(tf.bytes, 14 * N);
  assert_int_equal(tu.kernels, 5);
  assert_int_equal(tu.bytes, (8 + 2 + 4 + 4 + 4 + 4 + 8 + 12) * N);
  // a broadcast input is read once by the fused kernel
  ct_free(t[2]);
  t[2] = ct_zeros(CT_SHAPE(1), CT_F32, tu_device);
  in[2] = t[2];
  TU_OK(ct_jit_traffic_of(f, in, 3, true, &tf));
  assert_int_equal(tf.bytes, (2 + 4 + 4) * N + 4);
  for (int k = 0; k < 3; ++k) ct_free(t[k]);
  ct_jit_free(f);
}

// ---- the caches -----------------------------------------------------------------------------------
static ct_tensor *arange_on(int64_t n, ct_dtype dt) {
  return ct_arange(0, (double)n, 1, dt, tu_device);
}

// f(x) for x = 0..n-1: checks out[i] == formula(i).
static void call_and_check(ct_jit_fn *f, ct_dtype dt, double (*formula)(double), const char *what) {
  ct_tensor *x = arange_on(64, dt);
  const ct_tensor *in[1] = {x};
  ct_tensor *y = ct_jit_call(f, in, 1, NULL, 0);
  if (!y) fail_msg("%s: %s", what, ct_last_error());
  double ref[64];
  for (int i = 0; i < 64; ++i) ref[i] = formula(i);
  tu_assert_close(y, ref, 0, 0, what);
  ct_free(x), ct_free(y);
}
static double plus1(double v) { return v + 1; }
static double plus2(double v) { return v + 2; }
static double times5(double v) { return v * 5; }

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name), s = strlen(suffix);
    n += l >= s && strcmp(e->d_name + l - s, suffix) == 0 && e->d_name[0] != '.';
  }
  if (d) closedir(d);
  return n;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long len = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)len + 1);
  *n = fread(p, 1, (size_t)len, fp);
  fclose(fp);
  return p;
}
static void spit(const char *path, const unsigned char *p, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(p, 1, n, fp), n);
  fclose(fp);
}

static void entry_of(ct_jit_fn *f, ct_dtype dt, char *path, size_t len) {
  ct_dtype d[1] = {dt};
  TU_OK(ct_jit_cache_entry_path(f, d, 1, tu_device, path, len));
}

static void test_cache_hits(void **state) {
  (void)state;
  const char *dir = fresh_cache("hits");
  ct_jit_fn *f = ct_jit_create("x + 1", "x", NULL);
  TU_CHECK(f);
  call_and_check(f, CT_F32, plus1, "first call");
  ct_jit_stats s = ct_jit_get_stats();
  assert_int_equal(s.compiles, 1);
  assert_int_equal(s.memory_hits, 0);
  call_and_check(f, CT_F32, plus1, "second call");
  s = ct_jit_get_stats();
  assert_int_equal(s.compiles, 1);
  assert_int_equal(s.memory_hits, 1);
  // another function object, the same expression: the process's table
  ct_jit_fn *g = ct_jit_create("x+1", "x", NULL); // other spelling, same AST, same source
  TU_CHECK(g);
  call_and_check(g, CT_F32, plus1, "same kernel, other fn");
  s = ct_jit_get_stats();
  assert_int_equal(s.compiles, 1);
  assert_int_equal(s.memory_hits, 2);
  // a new process: the disk, no compiler run
  ct_jit_clear_memory_cache();
  call_and_check(f, CT_F32, plus1, "after a restart");
  s = ct_jit_get_stats();
  assert_int_equal(s.compiles, 1);
  assert_int_equal(s.disk_hits, 1);
  // another dtype is another kernel
  call_and_check(f, CT_F64, plus1, "float64");
  s = ct_jit_get_stats();
  assert_int_equal(s.compiles, 2);
  assert_int_equal(s.calls, 5);
  // one entry per kernel, no temporaries left behind (atomic writes)
  assert_int_equal(count_files(dir, ".ctjit"), 2);
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (e->d_name[0] != '.' && !strstr(e->d_name, ".ctjit")) fail_msg("left behind in the cache: %s", e->d_name);
  if (d) closedir(d);
  // the entry's mode: the directory's 0700 protects it; the directory is 0700
  struct stat st;
  assert_int_equal(stat(dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  ct_jit_free(f), ct_jit_free(g);
}

typedef void (*damage_fn)(const char *path, unsigned char *p, size_t n, const char *other);
static void flip_payload(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)other;
  p[n - 100] ^= 0x40;
  spit(path, p, n);
}
static void truncate_entry(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)other;
  spit(path, p, n / 2);
}
static void damage_header(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)other;
  p[3] = 'X';
  spit(path, p, n);
}
static void empty_entry(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)other, (void)p, (void)n;
  spit(path, p, 0);
}
// Another key's whole, valid entry copied over this one.
static void other_key(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)p, (void)n;
  size_t m;
  unsigned char *q = slurp(other, &m);
  assert_non_null(q);
  spit(path, q, m);
  free(q);
}
// This entry's header, the other kernel's code (valid, loadable, and wrong
// for this expression): only the hash can tell.
static void foreign_code(const char *path, unsigned char *p, size_t n, const char *other) {
  size_t m;
  unsigned char *q = slurp(other, &m);
  assert_non_null(q);
  const unsigned char *hp = (unsigned char *)strstr((char *)p, "\n\n"), *hq = (unsigned char *)strstr((char *)q, "\n\n");
  assert_non_null(hp);
  assert_non_null(hq);
  size_t head = (size_t)(hp + 2 - p), qhead = (size_t)(hq + 2 - q);
  // keep this entry's header, with the size line made to match the foreign payload
  char hdr[512];
  int k = snprintf(hdr, sizeof hdr, "%.*s", (int)head, (const char *)p);
  char *bytes = strstr(hdr, "bytes ");
  assert_non_null(bytes);
  snprintf(bytes, sizeof hdr - (size_t)(bytes - hdr), "bytes %zu\n\n", m - qhead);
  k = (int)strlen(hdr);
  unsigned char *out = malloc((size_t)k + m);
  memcpy(out, hdr, (size_t)k);
  memcpy(out + k, q + qhead, m - qhead);
  spit(path, out, (size_t)k + m - qhead);
  free(out), free(q);
  (void)n;
}
static void symlink_entry(const char *path, unsigned char *p, size_t n, const char *other) {
  (void)p, (void)n;
  unlink(path);
  assert_int_equal(symlink(other, path), 0);
}

static void test_cache_tampering(void **state) {
  (void)state;
  static const struct {
    const char *name;
    damage_fn damage;
    const char *why;
  } harm[] = {
      {"a flipped bit", flip_payload, "does not match its SHA-256"},
      {"a truncated entry", truncate_entry, "size is wrong"},
      {"a damaged header", damage_header, "does not start as a ct-jit entry"},
      {"an empty file", empty_entry, "does not start as a ct-jit entry"},
      {"another key's entry", other_key, "written for another key"},
      {"another kernel's code under this header", foreign_code, "does not match its SHA-256"},
      {"a symbolic link", symlink_entry, "symbolic link"},
  };
  for (size_t h = 0; h < sizeof harm / sizeof harm[0]; ++h) {
    fresh_cache("tamper");
    ct_jit_fn *f1 = ct_jit_create("x + 1", "x", NULL), *f2 = ct_jit_create("x + 2", "x", NULL);
    TU_CHECK(f1);
    TU_CHECK(f2);
    call_and_check(f1, CT_F32, plus1, "x + 1");
    call_and_check(f2, CT_F32, plus2, "x + 2");
    char p1[4300], p2[4300];
    entry_of(f1, CT_F32, p1, sizeof p1);
    entry_of(f2, CT_F32, p2, sizeof p2);
    size_t n;
    unsigned char *bytes = slurp(p2, &n);
    assert_non_null(bytes);
    harm[h].damage(p2, bytes, n, p1); // x + 2's entry gets x + 1's in some way
    free(bytes);
    ct_jit_clear_memory_cache();
    ct_jit_reset_stats();
    call_and_check(f2, CT_F32, plus2, harm[h].name); // x + 2, not x + 1: the bad entry never ran
    ct_jit_stats s = ct_jit_get_stats();
    if (s.rejected != 1 || s.compiles != 1 || s.disk_hits != 0)
      fail_msg("%s: rejected %" PRId64 ", compiles %" PRId64 ", disk hits %" PRId64, harm[h].name, s.rejected,
               s.compiles, s.disk_hits);
    if (!strstr(s.last_rejection, harm[h].why))
      fail_msg("%s: the rejection says \"%s\", expected \"%s\"", harm[h].name, s.last_rejection, harm[h].why);
    // rebuilt: the next process finds a good entry
    struct stat st;
    assert_int_equal(lstat(p2, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    ct_jit_clear_memory_cache();
    ct_jit_reset_stats();
    call_and_check(f2, CT_F32, plus2, "after the rebuild");
    s = ct_jit_get_stats();
    assert_int_equal(s.disk_hits, 1);
    assert_int_equal(s.rejected, 0);
    ct_jit_free(f1), ct_jit_free(f2);
  }
}

static void expect_refused(const char *dir, const char *needle) {
  setenv("CT_JIT_CACHE", dir, 1);
  ct_jit_clear_memory_cache();
  char buf[4096];
  if (ct_jit_cache_dir(buf, sizeof buf) == CT_OK) fail_msg("%s was accepted as a cache (%s expected)", dir, needle);
  if (!strstr(ct_last_error(), needle) || !strstr(ct_last_error(), dir))
    fail_msg("%s: the message lacks \"%s\" or the path: %s", dir, needle, ct_last_error());
  // and a call fails with the same message, having run nothing
  ct_jit_fn *f = ct_jit_create("x * 3", "x", NULL);
  ct_tensor *x = arange_on(4, CT_F32);
  const ct_tensor *in[1] = {x};
  ct_tensor *y = ct_jit_call(f, in, 1, NULL, 0);
  if (y) fail_msg("a call ran with the cache %s", dir);
  tu_assert_error_contains(needle, dir);
  ct_free(x);
  ct_jit_free(f);
}

static void test_cache_directory(void **state) {
  (void)state;
  char buf[4096], want[600];
  // the default places
  const char *xdg = tpath("xdg"), *home = tpath("home");
  unsetenv("CT_JIT_CACHE");
  setenv("XDG_CACHE_HOME", xdg, 1);
  TU_OK(ct_jit_cache_dir(buf, sizeof buf));
  snprintf(want, sizeof want, "%s/ct-jit", xdg);
  assert_string_equal(buf, want);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", home, 1);
  TU_OK(ct_jit_cache_dir(buf, sizeof buf));
  snprintf(want, sizeof want, "%s/.cache/ct-jit", home);
  assert_string_equal(buf, want);
  struct stat st;
  assert_int_equal(stat(buf, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700); // created 0700 (and so were its new parents)
  snprintf(want, sizeof want, "%s/.cache", home);
  assert_int_equal(stat(want, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  // CT_JIT_CACHE wins, nested directories are created
  const char *nested = tpath("a/b/c");
  setenv("CT_JIT_CACHE", nested, 1);
  TU_OK(ct_jit_cache_dir(buf, sizeof buf));
  assert_string_equal(buf, nested);
  // refusals
  const char *loose = tpath("loose");
  assert_int_equal(mkdir(loose, 0700), 0);
  assert_int_equal(chmod(loose, 0770), 0);
  expect_refused(loose, "writable by its group (mode 0770)");
  assert_int_equal(chmod(loose, 0707), 0);
  expect_refused(loose, "writable by others");
  assert_int_equal(chmod(loose, 0777), 0);
  expect_refused(loose, "chmod 700");
  const char *link = tpath("link");
  assert_int_equal(symlink(nested, link), 0);
  expect_refused(link, "is a symbolic link");
  const char *file = tpath("file");
  spit(file, (const unsigned char *)"x", 1);
  expect_refused(file, "is not a directory");
  // another user's directory
  const char *theirs = tpath("theirs");
  if (geteuid() == 0) {
    assert_int_equal(mkdir(theirs, 0700), 0);
    assert_int_equal(chown(theirs, 12345, 12345), 0);
    expect_refused(theirs, "belongs to uid 12345, not to you");
  } else {
    expect_refused("/", "not to you"); // root's
  }
  fresh_cache("after-refusals");
}

// The cache directory's name is full of shell syntax: nothing runs it.
static void test_no_shell(void **state) {
  (void)state;
  const char *dir = fresh_cache("it's a \"dir\"; touch PWNED; $(touch PWNED2) `touch PWNED3` &&x|y");
  ct_jit_fn *f = ct_jit_create("x + 1", "x", NULL);
  call_and_check(f, CT_F32, plus1, "a path with shell syntax");
  assert_int_equal(ct_jit_get_stats().compiles, 1);
  assert_int_equal(count_files(dir, ".ctjit"), 1);
  assert_int_not_equal(access("PWNED", F_OK), 0);
  assert_int_not_equal(access("PWNED2", F_OK), 0);
  assert_int_not_equal(access("PWNED3", F_OK), 0);
  assert_int_not_equal(access(tpath("PWNED"), F_OK), 0);
  ct_jit_free(f);
}

static void test_compiler_errors(void **state) {
  (void)state;
  if (tu_device.type != CT_CPU) skip();
  const char *dir = fresh_cache("compiler");
  ct_jit_fn *f = ct_jit_create("x + 1", "x", NULL);
  call_and_check(f, CT_F32, plus1, "with cc"); // its entry is now on disk
  // no compiler: a clear error (the key names the compiler's version, so
  // even a cached kernel needs to ask it)
  setenv("CT_JIT_CC", tpath("no-such-cc"), 1);
  ct_jit_clear_memory_cache();
  ct_jit_fn *g = ct_jit_create("x * 5", "x", NULL);
  ct_tensor *x = arange_on(8, CT_F32);
  const ct_tensor *in[1] = {x};
  assert_null(ct_jit_call(g, in, 1, NULL, 0));
  tu_assert_error_contains("no C compiler", "missing cc");
  tu_assert_error_contains("set CT_JIT_CC", "missing cc");
  assert_int_equal(ct_last_status(), CT_ERR_UNAVAILABLE);
  setenv("CT_JIT_CC", "no-such-compiler-on-path", 1);
  assert_null(ct_jit_call(g, in, 1, NULL, 0));
  tu_assert_error_contains("no-such-compiler-on-path was not found on PATH", "not on PATH");
  // a compiler that fails: its own words reach the message
  const char *fake = tpath("fakecc");
  FILE *fp = fopen(fake, "w");
  fprintf(fp, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fakecc 1.0'; exit 0; fi\n"
              "echo 'fakecc: error: this compiler compiles nothing' >&2\nexit 3\n");
  fclose(fp);
  chmod(fake, 0700);
  setenv("CT_JIT_CC", fake, 1);
  assert_null(ct_jit_call(g, in, 1, NULL, 0));
  tu_assert_error_contains("exit 3", "fake compiler");
  tu_assert_error_contains("fakecc: error: this compiler compiles nothing", "fake compiler");
  unsetenv("CT_JIT_CC");
  // the real compiler on a broken source: its diagnostics, file and line
  unsigned char *so = NULL;
  size_t n = 0;
  char d[4096];
  TU_OK(cti_jit_cache_dir("t", d, sizeof d));
  assert_int_not_equal(cti_jit_cc_compile("t", d, "int f(void) { return undefined_thing; }\n", &so, &n), CT_OK);
  tu_assert_error_contains("undefined_thing", "cc diagnostics");
  tu_assert_error_contains("error", "cc diagnostics");
  assert_null(so);
  assert_int_equal(count_files(dir, ".c") + count_files(dir, ".so"), 0); // temporaries removed
  // now it works again, under the real compiler
  call_and_check(g, CT_F32, times5, "x * 5 under the real compiler");
  ct_free(x);
  ct_jit_free(f), ct_jit_free(g);
}

// ---- issue 23: a cache no one else can swap, entries that cannot block, a compiler that hangs -------
static void test_cache_hardening(void **state) {
  (void)state;
  char buf[4096], p[700];
  // a directory above the cache that another user owns: they could rename the cache away
  if (geteuid() == 0) {
    const char *foreign = tpath("foreign");
    assert_int_equal(mkdir(foreign, 0755), 0);
    snprintf(p, sizeof p, "%s/cache", foreign);
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(chown(foreign, 65534, 65534), 0); // nobody's
    expect_refused(p, "belongs to another user");
  }
  // a directory above it that others may write (no sticky bit)
  const char *open_dir = tpath("open");
  assert_int_equal(mkdir(open_dir, 0700), 0);
  assert_int_equal(chmod(open_dir, 0777), 0);
  snprintf(p, sizeof p, "%s/cache", open_dir);
  assert_int_equal(mkdir(p, 0700), 0);
  expect_refused(p, "writable by others than you and root");
  // a sticky one (like /tmp): accepted above a directory of the user's that no one else may write
  // (a checkout under /tmp, 0755), refused above one others may write or another user created
  const char *sticky = tpath("sticky");
  assert_int_equal(mkdir(sticky, 0700), 0);
  assert_int_equal(chmod(sticky, 01777), 0);
  snprintf(p, sizeof p, "%s/mine", sticky);
  assert_int_equal(mkdir(p, 0700), 0);
  assert_int_equal(chmod(p, 0775), 0);
  expect_refused(p, "writable by its group");
  assert_int_equal(chmod(p, 0755), 0);
  if (geteuid() == 0) {
    assert_int_equal(chown(p, 65534, 65534), 0); // a name nobody created first
    expect_refused(p, "not to you");
    assert_int_equal(chown(p, 0, 0), 0);
  }
  assert_int_equal(chmod(p, 0755), 0);
  setenv("CT_JIT_CACHE", p, 1);
  TU_OK(ct_jit_cache_dir(buf, sizeof buf));
  assert_int_equal(chmod(p, 0700), 0);
  TU_OK(ct_jit_cache_dir(buf, sizeof buf));
  // a FIFO (or a directory) planted as an entry: refused at once, the kernel compiled and run
  fresh_cache("fifo");
  ct_jit_fn *f = ct_jit_create("x + 1", "x", NULL);
  char e[4300];
  entry_of(f, CT_F32, e, sizeof e);
  assert_int_equal(mkfifo(e, 0600), 0);
  alarm(60); // a hang ends the test (SIGALRM) instead of the suite waiting forever
  call_and_check(f, CT_F32, plus1, "a FIFO at the entry's name");
  alarm(0);
  ct_jit_stats st = ct_jit_get_stats();
  if (!strstr(st.last_rejection, "FIFO")) fail_msg("the FIFO entry's rejection: \"%s\"", st.last_rejection);
  ct_jit_free(f);
}

static void test_compiler_timeout(void **state) {
  (void)state;
  if (tu_device.type != CT_CPU) skip();
  fresh_cache("hang");
  const char *fake = tpath("hangcc"), *pidfile = tpath("hangcc.pid");
  FILE *fp = fopen(fake, "w");
  fprintf(fp, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'hangcc 1.0'; exit 0; fi\n"
              "sleep 300 & echo $! > '%s'\nexec sleep 300\n", pidfile);
  fclose(fp);
  chmod(fake, 0700);
  setenv("CT_JIT_CC", fake, 1);
  setenv("CT_JIT_CC_TIMEOUT", "1", 1);
  ct_jit_fn *g = ct_jit_create("x * 5", "x", NULL);
  ct_tensor *x = arange_on(8, CT_F32);
  const ct_tensor *in[1] = {x};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  alarm(60);
  assert_null(ct_jit_call(g, in, 1, NULL, 0));
  alarm(0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  tu_assert_error_contains("did not finish within 1 s", "a hanging compiler");
  tu_assert_error_contains("CT_JIT_CC_TIMEOUT", "a hanging compiler");
  if (secs > 20) fail_msg("the hanging compiler held the call for %.1f s (limit 1 s)", secs);
  // its background child was killed with it
  FILE *pf = fopen(pidfile, "r");
  assert_non_null(pf);
  long bg = 0;
  assert_int_equal(fscanf(pf, "%ld", &bg), 1);
  fclose(pf);
  char stat_path[64], line[256] = "";
  snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", bg);
  for (int i = 0; i < 50; ++i) { // SIGKILL is delivered asynchronously
    FILE *sf = fopen(stat_path, "r");
    if (!sf) break;
    if (!fgets(line, sizeof line, sf)) line[0] = '\0';
    fclose(sf);
    const char *close_paren = strrchr(line, ')');
    if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z') break; // a zombie: dead
    line[0] = '\0';
    usleep(100000);
  }
  FILE *sf = fopen(stat_path, "r");
  if (sf) {
    char l2[256] = "";
    if (!fgets(l2, sizeof l2, sf)) l2[0] = '\0';
    fclose(sf);
    const char *cp = strrchr(l2, ')');
    if (!(cp && cp[1] == ' ' && cp[2] == 'Z')) fail_msg("the compiler's background child %ld still runs: %s", bg, l2);
  }
  unsetenv("CT_JIT_CC");
  unsetenv("CT_JIT_CC_TIMEOUT");
  ct_free(x);
  ct_jit_free(g);
}

// ---- NVRTC: compiled to PTX here, no GPU needed ----------------------------------------------------
static void test_nvrtc_ptx(void **state) {
  (void)state;
#ifndef CT_HAVE_CUDA
  skip(); // a CPU-only build has no NVRTC
#else
  const char *exprs[] = {"x * sigmoid(y) + alpha * z", "pow(x, 2) - max(y, 0.5) * min(z, -0.25)",
                         "sqrt(abs(x)) + log(1 + exp(y)) - tanh(z) + relu(x)"};
  const ct_dtype dts[][3] = {{CT_F32, CT_F32, CT_F32}, {CT_F16, CT_BF16, CT_F32}, {CT_F64, CT_F16, CT_F32}};
  const char *ptxas = CT_PTXAS;
  const bool have_ptxas = access(ptxas, X_OK) == 0;
  for (size_t e = 0; e < 3; ++e)
    for (size_t d = 0; d < 3; ++d) {
      ct_jit_fn *f = ct_jit_create(exprs[e], "x,y,z", "alpha");
      TU_CHECK(f);
      char *src = ct_jit_source(f, dts[d], 3, CT_CUDA);
      TU_CHECK(src);
      const int archs[2] = {80, 90};
      for (int a = 0; a < 2; ++a) {
        char *ptx = NULL;
        size_t n = 0;
        if (cti_jit_nvrtc_compile("t", src, archs[a], &ptx, &n) != CT_OK)
          fail_msg("%s for compute_%d: %s\n%s", exprs[e], archs[a], ct_last_error(), src);
        assert_non_null(strstr(ptx, ".entry ct_jit_kernel"));
        char target[32];
        snprintf(target, sizeof target, ".target sm_%d", archs[a]);
        assert_non_null(strstr(ptx, target));
        if (have_ptxas) { // the PTX assembles for the real architecture
          char pf[600], of[600], arch[32];
          snprintf(pf, sizeof pf, "%s", tpath("k.ptx"));
          snprintf(of, sizeof of, "%s", tpath("k.cubin"));
          spit(pf, (unsigned char *)ptx, strlen(ptx));
          snprintf(arch, sizeof arch, "-arch=sm_%d", archs[a]);
          char *argv[] = {(char *)ptxas, arch, "-o", of, pf, NULL};
          char *out = NULL;
          int code = -1;
          TU_OK(cti_jit_run("t", argv, &out, 1 << 16, &code));
          if (code != 0) fail_msg("ptxas refused the PTX of %s: %s", exprs[e], out);
          free(out);
        }
        free(ptx);
      }
      free(src);
      ct_jit_free(f);
    }
  if (!have_ptxas) print_message("note: %s not found; the PTX was not assembled\n", ptxas);
  int arch = 0;
  TU_OK(cti_jit_nvrtc_arch_for("t", 90, &arch));
  assert_int_equal(arch, 90);
  TU_OK(cti_jit_nvrtc_arch_for("t", 89, &arch));
  assert_true(arch <= 89 && arch >= 80);
  char *ptx = NULL;
  size_t n = 0;
  assert_int_not_equal(cti_jit_nvrtc_compile("t", "extern \"C\" __global__ void k() { undefined_thing = 1; }", 90, &ptx, &n), CT_OK);
  tu_assert_error_contains("undefined_thing", "NVRTC log");
  tu_assert_error_contains("NVRTC failed", "NVRTC log");
#endif
}

static int setup(void **state) {
  (void)state;
  if (tu_scratch_dir(tmpdir, sizeof tmpdir, "jit")) return -1;
  fresh_cache("default");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s", tmpdir);
  // the scratch tree has subdirectories: remove it with rm -r, argv only
  char *argv[] = {"rm", "-rf", cmd, NULL};
  char *out = NULL;
  int code;
  chmod(tpath("loose"), 0700);
  cti_jit_run("teardown", argv, &out, 4096, &code);
  free(out);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_vectors),   cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_parse_robust),     cmocka_unit_test(test_emitter),
      cmocka_unit_test(test_fused_vs_unfused), cmocka_unit_test(test_single_ops_exact),
      cmocka_unit_test(test_half_patterns),    cmocka_unit_test(test_call_errors),
      cmocka_unit_test(test_result_dtype_and_traffic), cmocka_unit_test(test_cache_hits),
      cmocka_unit_test(test_cache_tampering),  cmocka_unit_test(test_cache_directory),
      cmocka_unit_test(test_no_shell),         cmocka_unit_test(test_compiler_errors),
      cmocka_unit_test(test_cache_hardening),  cmocka_unit_test(test_compiler_timeout),
      cmocka_unit_test(test_nvrtc_ptx),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
