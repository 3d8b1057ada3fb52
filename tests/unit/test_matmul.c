// SPDX-License-Identifier: MIT
//
// test_matmul: mm, bmm, matmul's broadcasting rules and addmm_, for
// float32, float64, float16 and bfloat16, on the device under test.
//
// Invariant checked: C = A @ B matches the float64 product of the same
// (already dtype-rounded) inputs element by element within
//   2 ulp(C_ij) in C's dtype  +  (4 sqrt(k) + 4) eps_acc (|A| @ |B|)_ij
// where eps_acc is float32's unit roundoff for f32/f16/bf16 (they
// accumulate in float32, as the issue specifies) and float64's for f64. The
// second term is the classic dot-product error bound with random-sign
// rounding errors (sqrt(k) growth). With TF32 off (the default), a GPU's f32
// product meets the same bound.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp.h"
#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype mm_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16};

// Values of a tensor view given as (base host values, shape, strides, offset).
static double *gather(const double *base, ct_shape s, const int64_t *st, int64_t off) {
  int64_t n = ct_shape_numel(s);
  double *v = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, o = off;
    for (int d = s.ndim - 1; d >= 0; --d) {
      o += (rem % s.d[d]) * st[d];
      rem /= s.d[d];
    }
    v[i] = base[o];
  }
  return v;
}

// mm of (m, k) @ (k, n) with each operand contiguous, transposed
// (a .t() of a contiguous (k, m)), or a strided slice (every other column
// of a wider matrix, which no BLAS layout covers: a copy).
enum layout { L_CONTIG, L_TRANS, L_LD, L_STRIDED };

static ct_tensor *make_operand(int64_t rows, int64_t cols, ct_dtype dt, enum layout lay, double **vals,
                               ct_tensor **base_out) {
  double *x;
  ct_tensor *base, *t;
  switch (lay) {
  case L_TRANS:
    base = ref_tensor(CT_SHAPE(cols, rows), dt, tu_device, -1, 1, &x);
    t = ct_t(base);
    *vals = gather(x, CT_SHAPE(rows, cols), (int64_t[]){1, rows}, 0);
    break;
  case L_LD: // a column window of a wider matrix: row stride cols + 3
    base = ref_tensor(CT_SHAPE(rows, cols + 3), dt, tu_device, -1, 1, &x);
    t = ct_narrow(base, 1, 2, cols);
    *vals = gather(x, CT_SHAPE(rows, cols), (int64_t[]){cols + 3, 1}, 2);
    break;
  case L_STRIDED:
    base = ref_tensor(CT_SHAPE(rows, cols, 2), dt, tu_device, -1, 1, &x);
    t = ct_select(base, 2, 1);
    *vals = gather(x, CT_SHAPE(rows, cols), (int64_t[]){2 * cols, 2}, 1);
    break;
  default:
    base = ref_tensor(CT_SHAPE(rows, cols), dt, tu_device, -1, 1, &x);
    t = ct_retain(base);
    *vals = gather(x, CT_SHAPE(rows, cols), (int64_t[]){cols, 1}, 0);
    break;
  }
  TU_CHECK(t);
  free(x);
  *base_out = base;
  return t;
}

static void check_mm(ct_dtype dt, int64_t m, int64_t k, int64_t n, enum layout la, enum layout lb) {
  double *x, *y;
  ct_tensor *ba, *bb;
  ct_tensor *a = make_operand(m, k, dt, la, &x, &ba);
  ct_tensor *b = make_operand(k, n, dt, lb, &y, &bb);
  ct_tensor *c = ct_mm(a, b);
  char what[128];
  snprintf(what, sizeof what, "mm %s (%lldx%lld layout %d) @ (%lldx%lld layout %d)", ct_dtype_name(dt),
           (long long)m, (long long)k, la, (long long)k, (long long)n, lb);
  TU_CHECK(c);
  ref_assert_shape(c, CT_SHAPE(m, n), what);
  ref_assert_dtype(c, dt, what);
  double *ref = ref_alloc(m * n), *tol = ref_alloc(m * n);
  ref_matmul(dt, x, 0, y, 0, 1, m, k, n, 1, 0, NULL, ref, tol);
  ref_assert_within(c, ref, tol, what);
  // matmul of 2-d operands is mm.
  ct_tensor *c2 = ct_matmul(a, b);
  TU_CHECK(c2);
  ref_assert_shape(c2, CT_SHAPE(m, n), what);
  ref_assert_within(c2, ref, tol, what);
  ct_free(c2);
  free(ref), free(tol), free(x), free(y);
  ct_free(c), ct_free(a), ct_free(b), ct_free(ba), ct_free(bb);
}

static void test_mm_sizes(void **state) {
  (void)state;
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 128, 96}, {1, 33, 17}, {17, 33, 1},
                              {3, 1, 4}, {2, 300, 3},  {31, 2, 29}};
  for (int d = 0; d < 4; ++d)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
      check_mm(mm_dtypes[d], sizes[s][0], sizes[s][1], sizes[s][2], L_CONTIG, L_CONTIG);
}

static void test_mm_layouts(void **state) {
  (void)state;
  for (int d = 0; d < 4; ++d)
    for (int la = 0; la < 4; ++la)
      for (int lb = 0; lb < 4; ++lb) {
        check_mm(mm_dtypes[d], 7, 13, 5, (enum layout)la, (enum layout)lb);
        check_mm(mm_dtypes[d], 1, 9, 6, (enum layout)la, (enum layout)lb);
        check_mm(mm_dtypes[d], 6, 9, 1, (enum layout)la, (enum layout)lb);
      }
}

// bmm and matmul's batched rules: (b,n,k)@(b,k,m), (b,n,k)@(k,m),
// (n,k)@(b,k,m), (1,n,k)@(b,k,m), with transposed batches too.
static void test_batched(void **state) {
  (void)state;
  for (int d = 0; d < 4; ++d) {
    ct_dtype dt = mm_dtypes[d];
    const int64_t B = 4, m = 7, k = 13, n = 5;
    double *x, *y, *x2, *y2, *x1;
    ct_tensor *a = ref_tensor(CT_SHAPE(B, m, k), dt, tu_device, -1, 1, &x);
    ct_tensor *b = ref_tensor(CT_SHAPE(B, k, n), dt, tu_device, -1, 1, &y);
    ct_tensor *a2 = ref_tensor(CT_SHAPE(m, k), dt, tu_device, -1, 1, &x2);
    ct_tensor *b2 = ref_tensor(CT_SHAPE(k, n), dt, tu_device, -1, 1, &y2);
    ct_tensor *a1 = ref_tensor(CT_SHAPE(1, m, k), dt, tu_device, -1, 1, &x1);
    double *ref = ref_alloc(B * m * n), *tol = ref_alloc(B * m * n);
    char what[96];

    ct_tensor *c = ct_bmm(a, b);
    snprintf(what, sizeof what, "bmm %s", ct_dtype_name(dt));
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, m, n), what);
    ref_matmul(dt, x, m * k, y, k * n, B, m, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, what);
    ct_free(c);
    c = ct_matmul(a, b);
    TU_CHECK(c);
    ref_assert_within(c, ref, tol, "matmul 3-d @ 3-d");
    ct_free(c);

    c = ct_matmul(a, b2); // (B, m, k) @ (k, n)
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, m, n), "matmul 3-d @ 2-d");
    ref_matmul(dt, x, m * k, y2, 0, B, m, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul 3-d @ 2-d");
    ct_free(c);

    c = ct_matmul(a2, b); // (m, k) @ (B, k, n)
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, m, n), "matmul 2-d @ 3-d");
    ref_matmul(dt, x2, 0, y, k * n, B, m, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul 2-d @ 3-d");
    ct_free(c);

    c = ct_matmul(a1, b); // (1, m, k) @ (B, k, n): batch 1 broadcasts
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, m, n), "matmul (1,m,k) @ (B,k,n)");
    ref_matmul(dt, x1, 0, y, k * n, B, m, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (1,m,k) @ (B,k,n)");
    ct_free(c);

    // Transposed batches: a from a (B, k, m) tensor, b from a (n, B, k) one.
    double *xt, *yt;
    ct_tensor *abase = ref_tensor(CT_SHAPE(B, k, m), dt, tu_device, -1, 1, &xt);
    ct_tensor *bbase = ref_tensor(CT_SHAPE(n, B, k), dt, tu_device, -1, 1, &yt);
    ct_tensor *at = ct_transpose(abase, 1, 2);                 // (B, m, k)
    ct_tensor *bt = ct_permute(bbase, (int[]){1, 2, 0});       // (B, k, n)
    TU_CHECK(at);
    TU_CHECK(bt);
    double *xv = gather(xt, CT_SHAPE(B, m, k), (int64_t[]){k * m, 1, m}, 0);
    double *yv = gather(yt, CT_SHAPE(B, k, n), (int64_t[]){k, 1, B * k}, 0);
    c = ct_bmm(at, bt);
    snprintf(what, sizeof what, "bmm of transposed batches %s", ct_dtype_name(dt));
    TU_CHECK(c);
    ref_matmul(dt, xv, m * k, yv, k * n, B, m, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, what);
    ct_free(c);
    free(xt), free(yt), free(xv), free(yv);
    ct_free(at), ct_free(bt), ct_free(abase), ct_free(bbase);

    free(ref), free(tol), free(x), free(y), free(x2), free(y2), free(x1);
    ct_free(a), ct_free(b), ct_free(a2), ct_free(b2), ct_free(a1);
  }
}

// Vectors, as torch.matmul: (k)@(k) -> 0-d, (k)@(k,n) -> (n), (m,k)@(k) ->
// (m), (B,m,k)@(k) -> (B,m), (k)@(B,k,n) -> (B,n).
static void test_vectors(void **state) {
  (void)state;
  for (int d = 0; d < 4; ++d) {
    ct_dtype dt = mm_dtypes[d];
    const int64_t B = 3, m = 5, k = 11, n = 4;
    double *v, *w, *M, *N, *A3, *B3;
    ct_tensor *tv = ref_tensor(CT_SHAPE(k), dt, tu_device, -1, 1, &v);
    ct_tensor *tw = ref_tensor(CT_SHAPE(k), dt, tu_device, -1, 1, &w);
    ct_tensor *tM = ref_tensor(CT_SHAPE(m, k), dt, tu_device, -1, 1, &M);
    ct_tensor *tN = ref_tensor(CT_SHAPE(k, n), dt, tu_device, -1, 1, &N);
    ct_tensor *tA = ref_tensor(CT_SHAPE(B, m, k), dt, tu_device, -1, 1, &A3);
    ct_tensor *tB = ref_tensor(CT_SHAPE(B, k, n), dt, tu_device, -1, 1, &B3);
    double ref[64], tol[64];

    ct_tensor *c = ct_matmul(tv, tw);
    TU_CHECK(c);
    ref_assert_shape(c, CT_SCALAR_SHAPE, "matmul (k)@(k)");
    ref_matmul(dt, v, 0, w, 0, 1, 1, k, 1, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (k)@(k)");
    ct_free(c);

    c = ct_matmul(tv, tN);
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(n), "matmul (k)@(k,n)");
    ref_matmul(dt, v, 0, N, 0, 1, 1, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (k)@(k,n)");
    ct_free(c);

    c = ct_matmul(tM, tw);
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(m), "matmul (m,k)@(k)");
    ref_matmul(dt, M, 0, w, 0, 1, m, k, 1, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (m,k)@(k)");
    ct_free(c);

    c = ct_matmul(tA, tw);
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, m), "matmul (B,m,k)@(k)");
    ref_matmul(dt, A3, m * k, w, 0, B, m, k, 1, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (B,m,k)@(k)");
    ct_free(c);

    c = ct_matmul(tv, tB);
    TU_CHECK(c);
    ref_assert_shape(c, CT_SHAPE(B, n), "matmul (k)@(B,k,n)");
    ref_matmul(dt, v, 0, B3, k * n, B, 1, k, n, 1, 0, NULL, ref, tol);
    ref_assert_within(c, ref, tol, "matmul (k)@(B,k,n)");
    ct_free(c);

    free(v), free(w), free(M), free(N), free(A3), free(B3);
    ct_free(tv), ct_free(tw), ct_free(tM), ct_free(tN), ct_free(tA), ct_free(tB);
  }
}

// out = alpha * a @ b + beta * out; beta = 0 ignores out, NaN included
// (torch.addmm: "If beta is 0, then input will be ignored").
static void test_addmm(void **state) {
  (void)state;
  const double ab[][2] = {{1, 1}, {1.5, -0.5}, {-2, 0}, {0.25, 2}};
  for (int d = 0; d < 4; ++d)
    for (int p = 0; p < 4; ++p)
      for (int lay = 0; lay < 2; ++lay) {
        ct_dtype dt = mm_dtypes[d];
        const int64_t m = 9, k = 21, n = 6;
        double *x, *y, *c0, alpha = ab[p][0], beta = ab[p][1];
        ct_tensor *ba, *bb;
        ct_tensor *a = make_operand(m, k, dt, lay ? L_TRANS : L_CONTIG, &x, &ba);
        ct_tensor *b = make_operand(k, n, dt, lay ? L_LD : L_CONTIG, &y, &bb);
        ct_tensor *out;
        if (beta == 0) {
          out = ct_empty(CT_SHAPE(m, n), dt, tu_device); // poisoned: NaN must not leak
          TU_CHECK(out);
          TU_OK(ct_fill_(out, NAN));
          c0 = NULL;
        } else {
          out = ref_tensor(CT_SHAPE(m, n), dt, tu_device, -1, 1, &c0);
        }
        TU_OK(ct_addmm_(out, a, b, alpha, beta));
        double ref[9 * 6], tol[9 * 6];
        ref_matmul(dt, x, 0, y, 0, 1, m, k, n, alpha, beta, c0, ref, tol);
        char what[96];
        snprintf(what, sizeof what, "addmm_ %s alpha %g beta %g layout %d", ct_dtype_name(dt), alpha,
                 beta, lay);
        ref_assert_within(out, ref, tol, what);
        free(x), free(y), free(c0);
        ct_free(out), ct_free(a), ct_free(b), ct_free(ba), ct_free(bb);
      }
}

// Whether /proc/cpuinfo lists the AVX-512 BF16 instructions (flag avx512_bf16).
static bool cpu_has_avx512_bf16(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    if (strncmp(line, "flags", 5) == 0 && strstr(line, " avx512_bf16")) found = true;
  fclose(f);
  return found;
}

// bf16 products on the CPU take two paths (oneDNN with the CPU's AVX-512
// BF16 instructions, or widening to float32 for sgemm): both meet the same
// float64 bound, over every size, layout and batch rule above. Where the
// CPU has the instructions and the build has oneDNN, the native path is the
// one taken (its kernel named), and switching it off takes the other.
static void test_bf16_paths(void **state) {
  (void)state;
  if (tu_device.type != CT_CPU) skip();
  const bool built = strstr(ct_cpu_bf16_gemm_info(), "no oneDNN") == NULL;
  assert_int_equal(ct_cpu_bf16_native_available(), built && cpu_has_avx512_bf16());
  for (int on = 1; on >= 0; --on) {
    ct_cpu_bf16_native_set_enabled(on);
    for (int la = 0; la < 4; ++la)
      for (int lb = 0; lb < 4; ++lb) check_mm(CT_BF16, 37, 70, 29, (enum layout)la, (enum layout)lb);
    check_mm(CT_BF16, 128, 256, 64, L_CONTIG, L_CONTIG);
    const char *info = ct_cpu_bf16_gemm_info();
    if (on && ct_cpu_bf16_native_available())
      assert_non_null(strstr(info, "oneDNN")), assert_non_null(strstr(info, "kernel"));
    else
      assert_non_null(strstr(info, "widening"));
  }
  ct_cpu_bf16_native_set_enabled(true);
}

// Shape and dtype errors name the op and the values.
static void test_errors(void **state) {
  (void)state;
  ct_tensor *a = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device);
  ct_tensor *b = ct_zeros(CT_SHAPE(4, 5), CT_F32, tu_device);
  ct_tensor *b64 = ct_zeros(CT_SHAPE(3, 5), CT_F64, tu_device);
  ct_tensor *ai = ct_zeros(CT_SHAPE(2, 3), CT_I32, tu_device);
  ct_tensor *bi = ct_zeros(CT_SHAPE(3, 2), CT_I32, tu_device);
  ct_tensor *a3 = ct_zeros(CT_SHAPE(2, 2, 3), CT_F32, tu_device);
  ct_tensor *b3 = ct_zeros(CT_SHAPE(3, 3, 2), CT_F32, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  TU_CHECK(b64);
  TU_CHECK(ai);
  TU_CHECK(bi);
  TU_CHECK(a3);
  TU_CHECK(b3);
  ct_clear_error();
  assert_null(ct_mm(a, b));
  ref_assert_error(CT_ERR_SHAPE, "mm shapes", "ct_mm", "2x3", "4x5", NULL);
  assert_null(ct_matmul(a, b));
  ref_assert_error(CT_ERR_SHAPE, "matmul shapes", "ct_matmul", "2x3", "4x5", NULL);
  assert_null(ct_matmul(a3, b));
  ref_assert_error(CT_ERR_SHAPE, "matmul 3-d @ 2-d shapes", "ct_matmul", "3", "4", NULL);
  assert_null(ct_bmm(a3, b3));
  ref_assert_error(CT_ERR_SHAPE, "bmm batch sizes", "ct_bmm", "2", "3", NULL);
  assert_null(ct_bmm(a, b));
  ref_assert_error(CT_ERR_SHAPE, "bmm of 2-d", "ct_bmm", NULL);
  assert_null(ct_mm(a3, b));
  ref_assert_error(CT_ERR_SHAPE, "mm of 3-d", "ct_mm", NULL);
  assert_null(ct_mm(ai, bi));
  ref_assert_error(CT_ERR_DTYPE, "mm of int32", "ct_mm", "int32", NULL);
  assert_null(ct_matmul(ai, bi));
  ref_assert_error(CT_ERR_DTYPE, "matmul of int32", "ct_matmul", "int32", NULL);
  assert_null(ct_mm(a, b64));
  ref_assert_error(CT_ERR_DTYPE, "mm of float32 and float64", "ct_mm", "float32", "float64", NULL);
  ct_tensor *o = ct_zeros(CT_SHAPE(2, 4), CT_F32, tu_device);
  TU_CHECK(o);
  ct_tensor *bb = ct_zeros(CT_SHAPE(3, 5), CT_F32, tu_device);
  TU_CHECK(bb);
  assert_int_not_equal(ct_addmm_(o, a, bb, 1, 1), CT_OK);
  ref_assert_error(CT_ERR_SHAPE, "addmm_ out shape", "ct_addmm_", "2x4", "2x5", NULL);
  ct_free(o), ct_free(bb);
  ct_free(a), ct_free(b), ct_free(b64), ct_free(ai), ct_free(bi), ct_free(a3), ct_free(b3);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mm_sizes),
      cmocka_unit_test(test_mm_layouts),
      cmocka_unit_test(test_batched),
      cmocka_unit_test(test_vectors),
      cmocka_unit_test(test_addmm),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_bf16_paths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
