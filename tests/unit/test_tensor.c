// SPDX-License-Identifier: MIT
//
// test_tensor: creation, facts, refcounting, views, copies and casts, on the
// device under test (--device cpu|cuda).
//
// Invariant checked: what a tensor function returns matches what PyTorch
// documents for the same call -- shapes, element strides, storage offsets and
// values -- where the expected values come from the test's own float64
// arithmetic (tu_ref.h) on the same fresh random inputs, never from the
// runtime. Every cast is compared exactly with the reference rounding.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

static const ct_dtype all_dtypes[] = {CT_F32, CT_F64, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8, CT_BOOL};
#define NDT ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static void assert_strides(const ct_tensor *t, int ndim, const int64_t *want, const char *what) {
  assert_int_equal(ct_ndim(t), ndim);
  for (int i = 0; i < ndim; ++i)
    if (ct_stride(t, i) != want[i])
      fail_msg("%s: stride[%d] = %lld, expected %lld", what, i, (long long)ct_stride(t, i),
               (long long)want[i]);
}

// Checks a view against PyTorch's geometry and the base's host values: the
// element at multi-index i of the view is base[offset + sum(i_k * stride_k)].
static void check_view(const ct_tensor *view, const ct_tensor *base, const double *base_host,
                       ct_shape shape, const int64_t *stride, int64_t offset, const char *what) {
  ref_assert_shape(view, shape, what);
  assert_strides(view, shape.ndim, stride, what);
  assert_int_equal(ct_storage_offset(view), offset);
  assert_true(ct_dtype_of(view) == ct_dtype_of(base));
  assert_true(ct_device_eq(ct_device_of(view), ct_device_of(base)));
  // Shares storage: element 0 lies `offset` elements past the base's.
  assert_ptr_equal(ct_data_ptr(view),
                   (char *)ct_data_ptr(base) + offset * (int64_t)ct_dtype_size(ct_dtype_of(base)));
  int64_t n = ct_shape_numel(shape);
  double *ref = ref_alloc(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, off = offset;
    for (int d = shape.ndim - 1; d >= 0; --d) {
      off += (rem % shape.d[d]) * stride[d];
      rem /= shape.d[d];
    }
    ref[i] = base_host[off];
  }
  tu_assert_close(view, ref, 0, 0, what);
  free(ref);
}

// ---- creation and facts ------------------------------------------------------------
static void test_empty_facts(void **state) {
  (void)state;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    ct_tensor *t = ct_empty(CT_SHAPE(2, 3, 4), dt, tu_device);
    TU_CHECK(t);
    assert_int_equal(ct_ndim(t), 3);
    ref_assert_shape(t, CT_SHAPE(2, 3, 4), "empty");
    assert_int_equal(ct_size(t, 0), 2);
    assert_int_equal(ct_size(t, -1), 4);
    assert_int_equal(ct_size(t, -3), 2);
    const int64_t st[] = {12, 4, 1}; // contiguous: stride[i] = prod(shape[i+1:])
    assert_strides(t, 3, st, "empty strides");
    assert_int_equal(ct_numel(t), 24);
    assert_int_equal(ct_nbytes(t), 24 * ct_dtype_size(dt));
    assert_int_equal(ct_storage_offset(t), 0);
    assert_true(ct_dtype_of(t) == dt);
    assert_true(ct_device_eq(ct_device_of(t), tu_device));
    assert_true(ct_is_contiguous(t));
    assert_false(ct_is_pinned(t));
    assert_non_null(ct_data_ptr(t));
    ct_free(t);
  }
  assert_int_equal(ct_dtype_size(CT_F32), 4);
  assert_int_equal(ct_dtype_size(CT_F64), 8);
  assert_int_equal(ct_dtype_size(CT_F16), 2);
  assert_int_equal(ct_dtype_size(CT_BF16), 2);
  assert_int_equal(ct_dtype_size(CT_I32), 4);
  assert_int_equal(ct_dtype_size(CT_I64), 8);
  assert_int_equal(ct_dtype_size(CT_U8), 1);
  assert_int_equal(ct_dtype_size(CT_BOOL), 1);

  // 0-d: one element, no dims.
  ct_tensor *s = ct_empty(CT_SCALAR_SHAPE, CT_F32, tu_device);
  TU_CHECK(s);
  assert_int_equal(ct_ndim(s), 0);
  assert_int_equal(ct_numel(s), 1);
  assert_true(ct_is_contiguous(s));
  ct_free(s);

  // A size-0 dim: no elements, still a valid tensor (torch.empty(2, 0, 3)).
  ct_tensor *z = ct_empty(CT_SHAPE(2, 0, 3), CT_F32, tu_device);
  TU_CHECK(z);
  assert_int_equal(ct_numel(z), 0);
  assert_int_equal(ct_nbytes(z), 0);
  ref_assert_shape(z, CT_SHAPE(2, 0, 3), "empty (2, 0, 3)");
  ct_free(z);
}

static void test_zeros_ones_full(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(3, 5, 7);
  double ref[105];
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    char what[64];
    ct_tensor *z = ct_zeros(s, dt, tu_device);
    TU_CHECK(z);
    for (int i = 0; i < 105; ++i) ref[i] = 0.0;
    snprintf(what, sizeof what, "zeros %s", ct_dtype_name(dt));
    tu_assert_close(z, ref, 0, 0, what);
    ct_tensor *o = ct_ones(s, dt, tu_device);
    TU_CHECK(o);
    for (int i = 0; i < 105; ++i) ref[i] = 1.0;
    snprintf(what, sizeof what, "ones %s", ct_dtype_name(dt));
    tu_assert_close(o, ref, 0, 0, what);
    // full with a value each dtype holds exactly after its own rounding.
    double v = dt == CT_BOOL ? 1.0 : dt == CT_U8 ? 201.0 : ref_is_float(dt) ? -2.71828 : -77.0;
    ct_tensor *f = ct_full(s, v, dt, tu_device);
    TU_CHECK(f);
    for (int i = 0; i < 105; ++i) ref[i] = ref_cast(v, dt);
    snprintf(what, sizeof what, "full(%g) %s", v, ct_dtype_name(dt));
    tu_assert_close(f, ref, 0, 0, what);
    assert_true(ct_dtype_of(f) == dt);
    ref_assert_shape(f, s, what);
    ct_free(z);
    ct_free(o);
    ct_free(f);
  }
}

static void test_arange(void **state) {
  (void)state;
  static const struct {
    double start, end, step;
    ct_dtype dt;
  } cases[] = {
      {0, 5, 1, CT_I64},       {0, 10, 3, CT_I64},     {-3, 3, 1, CT_I32},
      {5, 0, -1.5, CT_F32},    {1, 2.5, 0.5, CT_F64},  {0, 1, 0.1, CT_F64},
      {10, -10, -3, CT_I64},   {0, 5, 1.5, CT_I64},    {-1, 1, 0.25, CT_F16},
      {0, 300, 7, CT_BF16},    {2, 50, 4, CT_U8},      {0, 1000, 0.5, CT_F32},
      {3, 3, 1, CT_F32},       {-0.5, 0.7, 0.3, CT_F32},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    double a = cases[c].start, b = cases[c].end, st = cases[c].step;
    ct_dtype dt = cases[c].dt;
    int64_t n = (int64_t)ceil((b - a) / st); // torch.arange's length rule
    char what[128];
    snprintf(what, sizeof what, "arange(%g, %g, %g, %s)", a, b, st, ct_dtype_name(dt));
    ct_tensor *t = ct_arange(a, b, st, dt, tu_device);
    TU_CHECK(t);
    ref_assert_shape(t, CT_SHAPE(n), what);
    assert_true(ct_dtype_of(t) == dt);
    double *ref = ref_alloc(n), *tol = ref_alloc(n);
    for (int64_t i = 0; i < n; ++i) {
      ref[i] = ref_cast(a + (double)i * st, dt);
      // start + i * step may be formed in the dtype's own precision (a GPU
      // does, as torch's CUDA arange): a rounding of each term and the sum.
      tol[i] = 2 * ref_eps(dt) * (fabs(a) + fabs((double)i * st) + fabs(ref[i]));
    }
    ref_assert_within(t, ref, tol, what);
    free(ref);
    free(tol);
    ct_free(t);
  }
  // The length rule written out for a negative fractional step:
  // ceil((0 - 1) / -0.3) = ceil(3.33) = 4 elements, 1, 0.7, 0.4, 0.1.
  ct_tensor *t = ct_arange(1, 0, -0.3, CT_F64, tu_device);
  TU_CHECK(t);
  assert_int_equal(ct_numel(t), 4);
  const double ref[] = {1, 0.7, 0.4, 0.1};
  tu_assert_close(t, ref, 1e-15, 1e-15, "arange(1, 0, -0.3)");
  ct_free(t);

  // Zero step and a step of the wrong sign are errors, as in torch.
  ct_clear_error();
  assert_null(ct_arange(0, 5, 0, CT_F32, tu_device));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  assert_non_null(strstr(ct_last_error(), "ct_arange"));
  ct_clear_error();
  assert_null(ct_arange(0, 5, -1, CT_F32, tu_device));
  assert_non_null(strstr(ct_last_error(), "ct_arange"));
}

static void test_from_host(void **state) {
  (void)state;
  const ct_shape s = CT_SHAPE(4, 33);
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    size_t es = ct_dtype_size(dt), nb = 132 * es;
    unsigned char *src = malloc(nb), *back = malloc(nb);
    assert_non_null(src);
    assert_non_null(back);
    // Random bytes that are valid values of dt: f16/bf16 bit patterns with a
    // finite exponent, bools as 0/1.
    double *u = ref_alloc(132 * 8);
    tu_fill_uniform(u, 132 * 8, 0, 256);
    for (size_t i = 0; i < nb; ++i) src[i] = (unsigned char)u[i];
    if (dt == CT_BOOL)
      for (size_t i = 0; i < nb; ++i) src[i] &= 1;
    if (dt == CT_F16 || dt == CT_BF16 || dt == CT_F32 || dt == CT_F64)
      for (size_t i = es - 1; i < nb; i += es) src[i] &= 0x3f; // sign 0, exponent < max
    ct_tensor *t = ct_from_host(src, s, dt, tu_device);
    TU_CHECK(t);
    ref_assert_shape(t, s, "from_host");
    assert_true(ct_dtype_of(t) == dt);
    assert_true(ct_device_eq(ct_device_of(t), tu_device));
    memset(back, 0xA5, nb);
    TU_OK(ct_copy_to_host(t, back, nb));
    if (memcmp(src, back, nb) != 0) fail_msg("from_host/copy_to_host changed bytes of %s", ct_dtype_name(dt));
    // And through the float64 view, against the test's own decoding.
    double *ref = ref_alloc(132);
    for (int i = 0; i < 132; ++i) {
      const unsigned char *p = src + (size_t)i * es;
      switch (dt) {
      case CT_F32: { float f; memcpy(&f, p, 4); ref[i] = f; break; }
      case CT_F64: memcpy(&ref[i], p, 8); break;
      case CT_I32: { int32_t v; memcpy(&v, p, 4); ref[i] = v; break; }
      case CT_I64: { int64_t v; memcpy(&v, p, 8); ref[i] = (double)v; break; }
      case CT_U8: case CT_BOOL: ref[i] = *p; break;
      case CT_BF16: { uint32_t b = (uint32_t)(p[0] | p[1] << 8) << 16; float f; memcpy(&f, &b, 4); ref[i] = f; break; }
      case CT_F16: {
        unsigned h = (unsigned)(p[0] | p[1] << 8), e = (h >> 10) & 31, m = h & 1023;
        ref[i] = (h & 0x8000 ? -1 : 1) * (e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24));
        break;
      }
      default: break;
      }
    }
    tu_assert_close(t, ref, 0, 0, "from_host values");
    free(ref);
    free(u);
    free(src);
    free(back);
    ct_free(t);
  }
  ct_clear_error();
  assert_null(ct_from_host(NULL, CT_SHAPE(2), CT_F32, tu_device));
  assert_true(ct_last_status() != CT_OK);
}

static void test_like(void **state) {
  (void)state;
  ct_device other = tu_device.type == CT_CPU ? tu_device : ct_device_cpu();
  ct_tensor *src = ct_zeros(CT_SHAPE(3, 1, 6), CT_F32, tu_device);
  TU_CHECK(src);
  ct_tensor *t = ct_transpose(src, 0, 2); // a view: *_like uses its shape
  TU_CHECK(t);
  double ref[18];
  struct { ct_dtype dt; ct_device dev; } to[] = {
      {CT_F32, tu_device}, {CT_I64, tu_device}, {CT_BF16, other}, {CT_BOOL, other}, {CT_F64, ct_device_cpu()}};
  for (size_t i = 0; i < sizeof to / sizeof to[0]; ++i) {
    ct_tensor *z = ct_zeros_like(t, to[i].dt, to[i].dev);
    ct_tensor *o = ct_ones_like(t, to[i].dt, to[i].dev);
    ct_tensor *e = ct_empty_like(t, to[i].dt, to[i].dev);
    TU_CHECK(z);
    TU_CHECK(o);
    TU_CHECK(e);
    ct_tensor *all[3] = {z, o, e};
    for (int j = 0; j < 3; ++j) {
      ref_assert_shape(all[j], CT_SHAPE(6, 1, 3), "*_like shape");
      assert_true(ct_dtype_of(all[j]) == to[i].dt);
      assert_true(ct_device_eq(ct_device_of(all[j]), to[i].dev));
      assert_true(ct_is_contiguous(all[j]));
    }
    for (int j = 0; j < 18; ++j) ref[j] = 0;
    tu_assert_close(z, ref, 0, 0, "zeros_like");
    for (int j = 0; j < 18; ++j) ref[j] = 1;
    tu_assert_close(o, ref, 0, 0, "ones_like");
    ct_free(z);
    ct_free(o);
    ct_free(e);
  }
  ct_free(t);
  ct_free(src);
}

// ---- refcounting -----------------------------------------------------------------
static void test_refcount(void **state) {
  (void)state;
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(64, 32), CT_F32, tu_device, -1, 1, &x);
  // ct_retain returns the same handle; two frees are needed.
  assert_ptr_equal(ct_retain(a), a);
  ct_free(a);
  tu_assert_close(a, x, 0, 0, "after one of two frees"); // still alive
  // A view outlives its base: the storage is freed with the last tensor.
  ct_tensor *v = ct_narrow(a, 0, 8, 16);
  TU_CHECK(v);
  ct_tensor *v2 = ct_transpose(v, 0, 1);
  TU_CHECK(v2);
  ct_free(a); // base gone; v and v2 still hold the storage
  // Reuse pressure: allocate and fill blocks of the same size, which the
  // caching allocator would hand out from a wrongly freed segment.
  ct_tensor *junk[4];
  for (int i = 0; i < 4; ++i) {
    junk[i] = ct_full(CT_SHAPE(64, 32), 12345.0, CT_F32, tu_device);
    TU_CHECK(junk[i]);
  }
  const int64_t st[] = {32, 1};
  double *ref = ref_alloc(16 * 32);
  for (int i = 0; i < 16 * 32; ++i) ref[i] = x[8 * 32 + i];
  ref_assert_shape(v, CT_SHAPE(16, 32), "view after base freed");
  assert_strides(v, 2, st, "view after base freed");
  tu_assert_close(v, ref, 0, 0, "view after its base was freed");
  ct_free(v);
  double *reft = ref_alloc(16 * 32);
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 16; ++j) reft[i * 16 + j] = ref[j * 32 + i];
  tu_assert_close(v2, reft, 0, 0, "view of a view after both parents were freed");
  ct_free(v2);
  for (int i = 0; i < 4; ++i) ct_free(junk[i]);
  ct_free(NULL); // allowed
  free(ref);
  free(reft);
  free(x);
}

// ---- views ------------------------------------------------------------------------
static void test_views(void **state) {
  (void)state;
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(2, 3, 4), CT_F32, tu_device, -10, 10, &x);

  // transpose(0, 2) swaps sizes and strides: (4, 3, 2) with strides (1, 4, 12).
  ct_tensor *v = ct_transpose(a, 0, 2);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(4, 3, 2), (int64_t[]){1, 4, 12}, 0, "transpose(0, 2)");
  assert_false(ct_is_contiguous(v));
  ct_free(v);
  v = ct_transpose(a, -1, 1); // negative dims count from the end
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 4, 3), (int64_t[]){12, 1, 4}, 0, "transpose(-1, 1)");
  ct_free(v);

  // permute(2, 0, 1): size[i] = old size[p[i]], stride[i] = old stride[p[i]].
  v = ct_permute(a, (int[]){2, 0, 1});
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(4, 2, 3), (int64_t[]){1, 12, 4}, 0, "permute(2, 0, 1)");
  ct_free(v);

  // narrow(2, 1, 2): same strides, offset start * stride[dim].
  v = ct_narrow(a, 2, 1, 2);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 3, 2), (int64_t[]){12, 4, 1}, 1, "narrow(2, 1, 2)");
  ct_free(v);
  v = ct_narrow(a, 1, 1, 2);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 2, 4), (int64_t[]){12, 4, 1}, 4, "narrow(1, 1, 2)");
  ct_free(v);

  // select(1, 2) drops the dim: (2, 4) strides (12, 1), offset 2 * 4.
  v = ct_select(a, 1, 2);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 4), (int64_t[]){12, 1}, 8, "select(1, 2)");
  ct_free(v);
  v = ct_select(a, -1, 3);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 3), (int64_t[]){12, 4}, 3, "select(-1, 3)");
  ct_free(v);
  v = ct_select(a, 0, 1);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(3, 4), (int64_t[]){4, 1}, 12, "select(0, 1)");
  ct_free(v);

  // unsqueeze: the new dim's stride is size[d] * stride[d] (1 at the end).
  v = ct_unsqueeze(a, 0);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(1, 2, 3, 4), (int64_t[]){24, 12, 4, 1}, 0, "unsqueeze(0)");
  ct_free(v);
  v = ct_unsqueeze(a, 2);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 3, 1, 4), (int64_t[]){12, 4, 4, 1}, 0, "unsqueeze(2)");
  ct_free(v);
  v = ct_unsqueeze(a, -1);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(2, 3, 4, 1), (int64_t[]){12, 4, 1, 1}, 0, "unsqueeze(-1)");

  // squeeze(-1) undoes it; squeeze of a dim that is not 1 changes nothing.
  ct_tensor *w = ct_squeeze(v, -1);
  TU_CHECK(w);
  check_view(w, a, x, CT_SHAPE(2, 3, 4), (int64_t[]){12, 4, 1}, 0, "squeeze(-1)");
  ct_free(w);
  w = ct_squeeze(v, 1);
  TU_CHECK(w);
  check_view(w, a, x, CT_SHAPE(2, 3, 4, 1), (int64_t[]){12, 4, 1, 1}, 0, "squeeze of size 3");
  ct_free(w);
  ct_free(v);

  // t() of a 2-d view of a.
  ct_tensor *m = ct_select(a, 0, 1); // (3, 4) strides (4, 1) offset 12
  TU_CHECK(m);
  v = ct_t(m);
  TU_CHECK(v);
  check_view(v, a, x, CT_SHAPE(4, 3), (int64_t[]){1, 4}, 12, "t()");
  ct_free(v);
  ct_free(m);

  // Views share storage: writing through one changes the base.
  v = ct_narrow(a, 2, 1, 2);
  TU_CHECK(v);
  TU_OK(ct_fill_(v, 0.5));
  double *ref = ref_alloc(24);
  for (int i = 0; i < 24; ++i) ref[i] = (i % 4 == 1 || i % 4 == 2) ? 0.5 : x[i];
  tu_assert_close(a, ref, 0, 0, "base after fill_ through a narrow view");
  ct_free(v);
  free(ref);
  ct_free(a);
  free(x);

  // Bad view arguments fail with a message naming the op.
  a = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device);
  TU_CHECK(a);
  ct_clear_error();
  assert_null(ct_narrow(a, 1, 2, 2));
  assert_non_null(strstr(ct_last_error(), "ct_narrow"));
  assert_null(ct_select(a, 0, 2));
  assert_non_null(strstr(ct_last_error(), "ct_select"));
  assert_null(ct_transpose(a, 0, 2));
  assert_non_null(strstr(ct_last_error(), "ct_transpose"));
  assert_null(ct_permute(a, (int[]){0, 0}));
  assert_non_null(strstr(ct_last_error(), "ct_permute"));
  assert_null(ct_unsqueeze(a, 3));
  assert_non_null(strstr(ct_last_error(), "ct_unsqueeze"));
  ct_free(a);
}

static void test_reshape_expand(void **state) {
  (void)state;
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(2, 3, 4), CT_F64, tu_device, -10, 10, &x);
  // Contiguous input: a view, -1 inferred (24 / 4 = 6).
  ct_tensor *r = ct_reshape(a, CT_SHAPE(4, -1));
  TU_CHECK(r);
  check_view(r, a, x, CT_SHAPE(4, 6), (int64_t[]){6, 1}, 0, "reshape(4, -1) view");
  ct_free(r);
  r = ct_reshape(a, CT_SHAPE(-1));
  TU_CHECK(r);
  check_view(r, a, x, CT_SHAPE(24), (int64_t[]){1}, 0, "reshape(-1) view");
  ct_free(r);
  r = ct_reshape(a, CT_SCALAR_SHAPE);
  assert_null(r); // 24 elements do not fit a 0-d tensor
  assert_non_null(strstr(ct_last_error(), "ct_reshape"));
  assert_null(ct_reshape(a, CT_SHAPE(5, -1)));
  assert_non_null(strstr(ct_last_error(), "ct_reshape"));
  assert_null(ct_reshape(a, CT_SHAPE(-1, -1)));
  assert_non_null(strstr(ct_last_error(), "ct_reshape"));

  // Non-contiguous input: a copy in the transposed order.
  ct_tensor *tt = ct_transpose(a, 0, 2); // (4, 3, 2)
  TU_CHECK(tt);
  r = ct_reshape(tt, CT_SHAPE(-1, 2));
  TU_CHECK(r);
  ref_assert_shape(r, CT_SHAPE(12, 2), "reshape of a transpose");
  assert_true(ct_is_contiguous(r));
  assert_true(ct_data_ptr(r) != ct_data_ptr(a));
  double ref[24];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) ref[(i * 3 + j) * 2 + k] = x[k * 12 + j * 4 + i];
  tu_assert_close(r, ref, 0, 0, "reshape of a transpose (copy)");
  // It is a copy: changing it leaves a alone.
  TU_OK(ct_zero_(r));
  tu_assert_close(a, x, 0, 0, "base after zeroing a reshape copy");
  ct_free(r);
  ct_free(tt);
  ct_free(a);
  free(x);

  // expand: size-1 dims and new leading dims get stride 0.
  a = ref_tensor(CT_SHAPE(3, 1), CT_F32, tu_device, -1, 1, &x);
  ct_tensor *e = ct_expand(a, CT_SHAPE(2, 3, 4));
  TU_CHECK(e);
  check_view(e, a, x, CT_SHAPE(2, 3, 4), (int64_t[]){0, 1, 0}, 0, "expand (3,1)->(2,3,4)");
  ct_free(e);
  e = ct_expand(a, CT_SHAPE(-1, 5)); // -1 keeps the size
  TU_CHECK(e);
  check_view(e, a, x, CT_SHAPE(3, 5), (int64_t[]){1, 0}, 0, "expand (-1, 5)");
  ct_free(e);
  ct_clear_error();
  assert_null(ct_expand(a, CT_SHAPE(4, 4)));
  assert_non_null(strstr(ct_last_error(), "ct_expand"));
  ct_free(a);
  free(x);
}

// ---- copies ------------------------------------------------------------------------
static void test_contiguous_clone(void **state) {
  (void)state;
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(5, 7), CT_BF16, tu_device, -4, 4, &x);
  ct_tensor *c = ct_contiguous(a);
  assert_ptr_equal(c, a); // already contiguous: the same handle, a new reference
  ct_free(c);
  tu_assert_close(a, x, 0, 0, "a after freeing its contiguous() reference");

  ct_tensor *t = ct_t(a);
  TU_CHECK(t);
  c = ct_contiguous(t);
  TU_CHECK(c);
  assert_true(c != t);
  assert_true(ct_is_contiguous(c));
  ref_assert_shape(c, CT_SHAPE(7, 5), "contiguous of t()");
  const int64_t st[] = {5, 1};
  assert_strides(c, 2, st, "contiguous of t()");
  assert_true(ct_dtype_of(c) == CT_BF16);
  double ref[35];
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) ref[i * 5 + j] = x[j * 7 + i];
  tu_assert_close(c, ref, 0, 0, "contiguous of t()");

  ct_tensor *k = ct_clone(a);
  TU_CHECK(k);
  assert_true(k != a);
  assert_true(ct_data_ptr(k) != ct_data_ptr(a));
  tu_assert_close(k, x, 0, 0, "clone");
  TU_OK(ct_fill_(k, 3.0));
  tu_assert_close(a, x, 0, 0, "original after filling its clone");
  ct_tensor *k2 = ct_clone(t);
  TU_CHECK(k2);
  tu_assert_close(k2, ref, 0, 0, "clone of t()");
  ct_free(k2);
  ct_free(k);
  ct_free(c);
  ct_free(t);
  ct_free(a);
  free(x);
}

static void test_copy_broadcast_cast(void **state) {
  (void)state;
  double *x;
  ct_device other = ct_device_cpu();
  // src (4,) f64 broadcast into dst (3, 4) f32.
  ct_tensor *src = ref_tensor(CT_SHAPE(4), CT_F64, tu_device, -100, 100, &x);
  ct_tensor *dst = ct_zeros(CT_SHAPE(3, 4), CT_F32, tu_device);
  TU_CHECK(dst);
  TU_OK(ct_copy_(dst, src, false));
  double ref[12];
  for (int i = 0; i < 12; ++i) ref[i] = ref_cast(x[i % 4], CT_F32);
  tu_assert_close(dst, ref, 0, 0, "copy_ broadcast (4,)->(3,4) with f64->f32");
  ct_free(dst);
  ct_free(src);
  free(x);

  // (3, 1) i32 into a transposed (non-contiguous) f16 view of a (4, 3) tensor.
  src = ref_tensor(CT_SHAPE(3, 1), CT_I32, other, -500, 500, &x);
  ct_tensor *base = ct_zeros(CT_SHAPE(4, 3), CT_F16, tu_device);
  TU_CHECK(base);
  ct_tensor *bt = ct_t(base); // (3, 4)
  TU_CHECK(bt);
  TU_OK(ct_copy_(bt, src, false)); // bt[i][j] = src[i] -> base[j][i] = src[i]
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 3; ++i) ref[j * 3 + i] = ref_cast(x[i], CT_F16);
  tu_assert_close(base, ref, 0, 0, "copy_ of (3,1) i32 into a transposed f16 view, across devices");
  ct_free(bt);
  ct_free(base);
  ct_free(src);
  free(x);

  // Device -> CPU, same dtype, narrowed destination: only the window changes.
  src = ref_tensor(CT_SHAPE(2, 5), CT_I64, tu_device, -1e6, 1e6, &x);
  dst = ct_full(CT_SHAPE(2, 9), -1.0, CT_I64, other);
  TU_CHECK(dst);
  ct_tensor *win = ct_narrow(dst, 1, 3, 5);
  TU_CHECK(win);
  TU_OK(ct_copy_(win, src, false));
  double ref2[18];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 9; ++j) ref2[i * 9 + j] = (j >= 3 && j < 8) ? x[i * 5 + j - 3] : -1.0;
  tu_assert_close(dst, ref2, 0, 0, "copy_ into a narrowed window");
  ct_free(win);
  ct_free(dst);

  // Shapes that do not broadcast are an error.
  dst = ct_zeros(CT_SHAPE(3, 4), CT_F32, tu_device);
  TU_CHECK(dst);
  ct_clear_error();
  assert_int_not_equal(ct_copy_(dst, src, false), CT_OK);
  assert_non_null(strstr(ct_last_error(), "ct_copy_"));
  ct_free(dst);
  ct_free(src);
  free(x);
}

// copy_ between views of one storage: x[1:].copy_(x[:-1]) and a.copy_(a.t())
// fail with torch's message and leave dst alone; an overlap torch cannot
// detect (non-dense views) reads everything before writing, so the result
// is that of copying from a clone; a tensor onto itself and disjoint views
// are plain copies.
static void test_copy_overlap(void **state) {
  (void)state;
  ct_tensor *x = ct_arange(0, 6, 1, CT_F32, tu_device); // (6,)
  TU_CHECK(x);
  ct_tensor *tail = ct_narrow(x, 0, 1, 5), *head = ct_narrow(x, 0, 0, 5);
  TU_CHECK(tail && head);
  assert_int_not_equal(ct_copy_(tail, head, false), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "x[1:].copy_(x[:-1])", "ct_copy_", "refer to a single memory location",
                   "clone()", NULL);
  const double x0[6] = {0, 1, 2, 3, 4, 5};
  tu_assert_close(x, x0, 0, 0, "a refused overlapping copy_ leaves dst alone");
  TU_OK(ct_copy_(x, x, false));
  tu_assert_close(x, x0, 0, 0, "x.copy_(x)");
  ct_tensor *lo = ct_narrow(x, 0, 0, 3), *hi = ct_narrow(x, 0, 3, 3);
  TU_CHECK(lo && hi);
  TU_OK(ct_copy_(lo, hi, false));
  const double x1[6] = {3, 4, 5, 3, 4, 5};
  tu_assert_close(x, x1, 0, 0, "x[:3].copy_(x[3:])");
  ct_free(tail), ct_free(head), ct_free(lo), ct_free(hi), ct_free(x);

  ct_tensor *a9 = ct_arange(0, 9, 1, CT_F32, tu_device), *a = a9 ? ct_reshape(a9, CT_SHAPE(3, 3)) : NULL;
  ct_tensor *at = a ? ct_t(a) : NULL;
  TU_CHECK(at);
  assert_int_not_equal(ct_copy_(a, at, false), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "a.copy_(a.t())", "refer to a single memory location", NULL);
  ct_free(a9), ct_free(a), ct_free(at);

  ct_tensor *b12 = ct_arange(0, 12, 1, CT_F32, tu_device), *b = b12 ? ct_reshape(b12, CT_SHAPE(3, 4)) : NULL;
  ct_tensor *mid = b ? ct_narrow(b, 1, 1, 2) : NULL, *left = b ? ct_narrow(b, 1, 0, 2) : NULL;
  TU_CHECK(mid && left);
  TU_OK(ct_copy_(mid, left, false)); // b[:, 1:3] = b[:, 0:2], as if from a clone
  const double b1[12] = {0, 0, 1, 3, 4, 4, 5, 7, 8, 8, 9, 11};
  tu_assert_close(b, b1, 0, 0, "b[:, 1:3].copy_(b[:, 0:2])");
  ct_free(b12), ct_free(b), ct_free(mid), ct_free(left);
}

static void test_fill_zero(void **state) {
  (void)state;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double *x;
    ct_tensor *a = ref_tensor(CT_SHAPE(6, 5), dt, tu_device, 0, 100, &x);
    // fill_ a strided window (rows 1..3, columns 2..3, via a transpose).
    ct_tensor *n1 = ct_narrow(a, 0, 1, 3);
    TU_CHECK(n1);
    ct_tensor *n2 = ct_narrow(n1, 1, 2, 2);
    TU_CHECK(n2);
    ct_tensor *w = ct_t(n2);
    TU_CHECK(w);
    double v = dt == CT_BOOL ? 1.0 : ref_is_float(dt) ? 3.14159 : 42.0;
    TU_OK(ct_fill_(w, v));
    double ref[30];
    for (int i = 0; i < 30; ++i) {
      int r = i / 5, c = i % 5;
      ref[i] = (r >= 1 && r < 4 && c >= 2 && c < 4) ? ref_cast(v, dt) : x[i];
    }
    char what[64];
    snprintf(what, sizeof what, "fill_ of a window, %s", ct_dtype_name(dt));
    tu_assert_close(a, ref, 0, 0, what);
    TU_OK(ct_zero_(n1));
    for (int i = 5; i < 20; ++i) ref[i] = 0.0;
    snprintf(what, sizeof what, "zero_ of rows 1..3, %s", ct_dtype_name(dt));
    tu_assert_close(a, ref, 0, 0, what);
    ct_free(w);
    ct_free(n2);
    ct_free(n1);
    ct_free(a);
    free(x);
  }
}

// Values every (src, dst) pair can carry without leaving dst's range.
static void cast_inputs(double *x, int64_t n, ct_dtype src, ct_dtype dst) {
  bool unsigned_side = src == CT_U8 || dst == CT_U8;
  double lo = unsigned_side ? 0 : -300, hi = unsigned_side ? 250 : 300;
  ref_random(x, n, src, lo, hi);
  for (int64_t i = 0; i < n; i += 7) x[i] = 0.0; // zeros for the bool side
  if (ref_is_float(src))                         // fractions that truncate
    for (int64_t i = 3; i < n; i += 11) x[i] = ref_cast(x[i] < 0 ? -0.75 : 0.75, src);
}

static void test_to_all_pairs(void **state) {
  (void)state;
  ct_device cpu = ct_device_cpu();
  ct_device pairs[3][2] = {{tu_device, tu_device}, {cpu, tu_device}, {tu_device, cpu}};
  int npairs = tu_device.type == CT_CPU ? 1 : 3;
  const int64_t n = 257;
  double *x = ref_alloc(n), *ref = ref_alloc(n);
  for (int p = 0; p < npairs; ++p)
    for (int i = 0; i < NDT; ++i)
      for (int j = 0; j < NDT; ++j) {
        ct_dtype s = all_dtypes[i], d = all_dtypes[j];
        cast_inputs(x, n, s, d);
        ct_tensor *a = tu_from_f64(x, CT_SHAPE(n), s, pairs[p][0]);
        TU_CHECK(a);
        tu_assert_close(a, x, 0, 0, "cast input");
        ct_tensor *b = ct_to(a, pairs[p][1], d, false);
        TU_CHECK(b);
        char what[128], d0[16], d1[16];
        snprintf(what, sizeof what, "ct_to %s:%s -> %s:%s", ct_device_str(pairs[p][0], d0),
                 ct_dtype_name(s), ct_device_str(pairs[p][1], d1), ct_dtype_name(d));
        assert_true(ct_dtype_of(b) == d);
        assert_true(ct_device_eq(ct_device_of(b), pairs[p][1]));
        ref_assert_shape(b, CT_SHAPE(n), what);
        for (int64_t k = 0; k < n; ++k) ref[k] = ref_cast(x[k], d);
        tu_assert_close(b, ref, 0, 0, what);
        ct_free(b);
        ct_free(a);
      }
  free(x);
  free(ref);
}

// Rounding of full-precision values: f64 -> f32 and f32 -> f16/bf16 must give
// the nearest value, ties to even, including subnormals and overflow.
static void test_to_rounding(void **state) {
  (void)state;
  const int64_t n = 4096;
  double *x = ref_alloc(n), *ref = ref_alloc(n);
  tu_fill_uniform(x, n, -1, 1);
  for (int64_t i = 0; i < n; ++i) x[i] = ldexp(x[i], (int)(i % 80) - 40); // many binades
  ct_tensor *a = tu_from_f64(x, CT_SHAPE(n), CT_F64, tu_device);
  TU_CHECK(a);
  ct_tensor *b = ct_to_dtype(a, CT_F32);
  TU_CHECK(b);
  for (int64_t i = 0; i < n; ++i) ref[i] = (double)(float)x[i];
  tu_assert_close(b, ref, 0, 0, "f64 -> f32 rounding");
  // f32 values (b) to f16 and bf16: one rounding from the float.
  for (int64_t i = 0; i < n; ++i) x[i] = ref[i];
  // Planted cases: f16 ties (to even), overflow to inf, subnormals.
  x[0] = 1.0 + ldexp(1, -11);             // tie between 1 and 1+2^-10: stays 1
  x[1] = 1.0 + 3 * ldexp(1, -11);         // tie: rounds up to even 1+2^-9
  x[2] = 65519.0;                         // largest below the overflow threshold
  x[3] = 65520.0;                         // rounds to inf in f16
  x[4] = ldexp(1, -25);                   // half the smallest subnormal: 0
  x[5] = ldexp(3, -26);                   // 0.75 * 2^-24: the smallest subnormal
  x[6] = -ldexp(1, -20) * 1.5;            // a subnormal
  x[7] = 1.0 + ldexp(1, -8);              // bf16 tie: stays 1
  x[8] = (double)(float)3e38;             // near bf16's max (~3.39e38): finite
  x[9] = -ldexp(1, -130);                 // bf16 subnormal
  ct_tensor *c = tu_from_f64(x, CT_SHAPE(n), CT_F32, tu_device);
  TU_CHECK(c);
  ct_tensor *h = ct_to_dtype(c, CT_F16);
  TU_CHECK(h);
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_round_f16(x[i]);
  assert_true(ref[0] == 1.0 && ref[1] == 1.0 + ldexp(1, -9) && isinf(ref[3]) && ref[4] == 0.0);
  tu_assert_close(h, ref, 0, 0, "f32 -> f16 rounding");
  ct_tensor *bf = ct_to_dtype(c, CT_BF16);
  TU_CHECK(bf);
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_round_bf16(x[i]);
  tu_assert_close(bf, ref, 0, 0, "f32 -> bf16 rounding");
  // And back: f16/bf16 -> f64 is exact.
  ct_tensor *h64 = ct_to_dtype(h, CT_F64), *bf64 = ct_to_dtype(bf, CT_F64);
  TU_CHECK(h64);
  TU_CHECK(bf64);
  tu_assert_close(bf64, ref, 0, 0, "bf16 -> f64");
  for (int64_t i = 0; i < n; ++i) ref[i] = ref_round_f16(x[i]);
  tu_assert_close(h64, ref, 0, 0, "f16 -> f64");
  ct_free(h64);
  ct_free(bf64);
  ct_free(h);
  ct_free(bf);
  ct_free(c);
  ct_free(b);
  ct_free(a);
  free(x);
  free(ref);
}

static void test_to_noop_and_helpers(void **state) {
  (void)state;
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(3, 4), CT_F32, tu_device, -1, 1, &x);
  ct_tensor *b = ct_to(a, tu_device, CT_F32, false);
  assert_ptr_equal(b, a); // nothing to do: `self`, as PyTorch returns
  ct_free(b);             // a new reference: a survives
  tu_assert_close(a, x, 0, 0, "after freeing the no-op ct_to result");
  b = ct_to_dtype(a, CT_F32);
  assert_ptr_equal(b, a);
  ct_free(b);
  b = ct_to_device(a, tu_device);
  assert_ptr_equal(b, a);
  ct_free(b);
  // A transposed view: still nothing to do, even though not contiguous.
  ct_tensor *t = ct_t(a);
  TU_CHECK(t);
  b = ct_to(t, tu_device, CT_F32, true);
  assert_ptr_equal(b, t);
  ct_free(b);
  // ct_cpu gives a CPU tensor with the same values.
  ct_tensor *c = ct_cpu(a);
  TU_CHECK(c);
  assert_int_equal(ct_get_device(c), -1);
  tu_assert_close(c, x, 0, 0, "ct_cpu");
  if (tu_device.type == CT_CPU) assert_ptr_equal(c, a);
  ct_free(c);
  // ct_to of a non-contiguous view to another dtype keeps the logical order.
  b = ct_to(t, ct_device_cpu(), CT_F64, false);
  TU_CHECK(b);
  double ref[12];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) ref[i * 3 + j] = x[j * 4 + i];
  tu_assert_close(b, ref, 0, 0, "ct_to of a transposed view");
  ct_free(b);
  ct_free(t);
  ct_free(a);
  free(x);
}

static void test_to_non_blocking(void **state) {
  (void)state;
  double *x;
  ct_tensor *h = ref_tensor(CT_SHAPE(1000), CT_F32, ct_device_cpu(), -5, 5, &x);
  if (tu_device.type == CT_CUDA) {
    // Host (pinned) -> device on the current stream, then synchronize.
    ct_tensor *p = ct_pin_memory(h);
    TU_CHECK(p);
    assert_true(ct_is_pinned(p));
    ct_tensor *d = ct_to(p, tu_device, CT_F32, true);
    TU_CHECK(d);
    TU_OK(ct_cuda_synchronize(tu_device.index));
    assert_true(ct_device_eq(ct_device_of(d), tu_device));
    tu_assert_close(d, x, 0, 0, "non_blocking pinned host -> device");
    // Device -> host non_blocking lands in pinned memory; read after sync.
    ct_tensor *back = ct_to(d, ct_device_cpu(), CT_F32, true);
    TU_CHECK(back);
    TU_OK(ct_cuda_synchronize(tu_device.index));
    assert_true(ct_is_pinned(back));
    tu_assert_close(back, x, 0, 0, "non_blocking device -> host");
    // A non_blocking copy_ into a pinned host tensor.
    ct_tensor *dst = ct_pin_memory(h);
    TU_CHECK(dst);
    TU_OK(ct_zero_(dst));
    TU_OK(ct_copy_(dst, d, true));
    TU_OK(ct_cuda_synchronize(tu_device.index));
    tu_assert_close(dst, x, 0, 0, "non_blocking copy_ device -> pinned host");
    ct_free(dst);
    ct_free(back);
    ct_free(d);
    ct_free(p);
  } else {
    // On the CPU non_blocking is a plain copy, done when ct_to returns.
    ct_tensor *d = ct_to(h, tu_device, CT_F64, true);
    TU_CHECK(d);
    tu_assert_close(d, x, 0, 0, "non_blocking on the CPU");
    ct_free(d);
  }
  ct_free(h);
  free(x);
}

static void test_pin_memory(void **state) {
  (void)state;
  double *x;
  ct_tensor *h = ref_tensor(CT_SHAPE(7, 9), CT_I32, ct_device_cpu(), -50, 50, &x);
  ct_clear_error();
  ct_tensor *p = ct_pin_memory(h);
  if (!ct_cuda_is_available()) {
    // torch: "Cannot access accelerator device when none is available."
    assert_null(p);
    assert_int_equal(ct_last_status(), CT_ERR_UNAVAILABLE);
    assert_non_null(strstr(ct_last_error(), "ct_pin_memory"));
    assert_true(strlen(ct_last_error()) > strlen("ct_pin_memory: "));
  } else {
    TU_CHECK(p);
    assert_true(ct_is_pinned(p));
    assert_false(ct_is_pinned(h));
    assert_int_equal(ct_get_device(p), -1);
    tu_assert_close(p, x, 0, 0, "pinned copy");
    ct_free(p);
  }
  ct_free(h);
  free(x);
}

static void test_item_and_copy_to_host(void **state) {
  (void)state;
  for (int k = 0; k < NDT; ++k) {
    ct_dtype dt = all_dtypes[k];
    double v;
    ref_random(&v, 1, dt, 0, 200);
    ct_tensor *s = tu_from_f64(&v, CT_SCALAR_SHAPE, dt, tu_device);
    TU_CHECK(s);
    double got = -1;
    TU_OK(ct_item(s, &got));
    if (got != v) fail_msg("ct_item %s: got %.17g, expected %.17g", ct_dtype_name(dt), got, v);
    ct_free(s);
  }
  // A one-element view of a bigger tensor.
  double *x;
  ct_tensor *a = ref_tensor(CT_SHAPE(3, 4), CT_F64, tu_device, -1, 1, &x);
  ct_tensor *row = ct_select(a, 0, 2);
  TU_CHECK(row);
  ct_tensor *e = ct_narrow(row, 0, 3, 1);
  TU_CHECK(e);
  double got;
  TU_OK(ct_item(e, &got));
  assert_true(got == x[11]);
  ct_free(e);
  // Many elements: an error, like Tensor.item().
  ct_clear_error();
  assert_int_not_equal(ct_item(a, &got), CT_OK);
  assert_non_null(strstr(ct_last_error(), "ct_item"));

  // copy_to_host: the destination must hold ct_nbytes.
  double buf[12];
  ct_clear_error();
  assert_int_not_equal(ct_copy_to_host(a, buf, sizeof buf - 1), CT_OK);
  assert_non_null(strstr(ct_last_error(), "ct_copy_to_host"));
  assert_non_null(strstr(ct_last_error(), "96")); // names the bytes needed
  TU_OK(ct_copy_to_host(a, buf, sizeof buf));
  for (int i = 0; i < 12; ++i) assert_true(buf[i] == x[i]);
  // Of a non-contiguous view: row-major order of the view.
  TU_OK(ct_copy_to_host(row, buf, 4 * sizeof(double)));
  for (int i = 0; i < 4; ++i) assert_true(buf[i] == x[8 + i]);
  ct_tensor *t = ct_t(a);
  TU_CHECK(t);
  TU_OK(ct_copy_to_host(t, buf, sizeof buf));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) assert_true(buf[i * 3 + j] == x[j * 4 + i]);
  ct_free(t);
  ct_free(row);
  ct_free(a);
  free(x);
}

static void test_get_device(void **state) {
  (void)state;
  ct_tensor *a = ct_zeros(CT_SHAPE(2), CT_F32, tu_device);
  TU_CHECK(a);
  assert_int_equal(ct_get_device(a), tu_device.type == CT_CPU ? -1 : tu_device.index);
  ct_tensor *c = ct_zeros(CT_SHAPE(2), CT_F32, ct_device_cpu());
  TU_CHECK(c);
  assert_int_equal(ct_get_device(c), -1); // torch: get_device() is -1 on the CPU
  assert_int_equal(ct_device_of(c).type, CT_CPU);
  ct_free(c);
  ct_free(a);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_facts),
      cmocka_unit_test(test_zeros_ones_full),
      cmocka_unit_test(test_arange),
      cmocka_unit_test(test_from_host),
      cmocka_unit_test(test_like),
      cmocka_unit_test(test_refcount),
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_reshape_expand),
      cmocka_unit_test(test_contiguous_clone),
      cmocka_unit_test(test_copy_broadcast_cast),
      cmocka_unit_test(test_copy_overlap),
      cmocka_unit_test(test_fill_zero),
      cmocka_unit_test(test_to_all_pairs),
      cmocka_unit_test(test_to_rounding),
      cmocka_unit_test(test_to_noop_and_helpers),
      cmocka_unit_test(test_to_non_blocking),
      cmocka_unit_test(test_pin_memory),
      cmocka_unit_test(test_item_and_copy_to_host),
      cmocka_unit_test(test_get_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
