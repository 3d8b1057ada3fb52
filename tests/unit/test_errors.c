// SPDX-License-Identifier: MIT
//
// test_errors: every bad call named in the issue returns its error -- NULL
// or a non-zero ct_status, never an abort -- with a message that names the
// operation and the values at fault, in PyTorch's words where PyTorch has
// words for it.
//
// Invariant checked: after a failing call, ct_last_status() is the status
// the error contract (error.h) gives that kind of fault, and ct_last_error()
// contains the op's name and the offending values. Mixed-device errors need
// a GPU: on a machine without one the test checks instead that asking for a
// CUDA tensor fails with CT_ERR_UNAVAILABLE and a message naming CUDA.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tu_ref.h"

// Fails unless the last error message is exactly `want`.
static void assert_message(const char *want, const char *what) {
  if (strcmp(ct_last_error(), want) != 0)
    fail_msg("%s: message\n  \"%s\"\nexpected\n  \"%s\"", what, ct_last_error(), want);
}

// ---- devices ----------------------------------------------------------------------------
static void test_mixed_devices(void **state) {
  (void)state;
  if (!ct_cuda_is_available()) {
    // No GPU here: a CUDA tensor cannot be made, and saying so names CUDA.
    ct_clear_error();
    assert_null(ct_zeros(CT_SHAPE(2), CT_F32, ct_device_cuda(0)));
    ref_assert_error(CT_ERR_UNAVAILABLE, "zeros on cuda:0 without CUDA", "CUDA", NULL);
    assert_true(strlen(ct_last_error()) > 20);
    ct_tensor *c = ct_ones(CT_SHAPE(2), CT_F32, ct_device_cpu());
    TU_CHECK(c);
    ct_clear_error();
    assert_null(ct_to(c, ct_device_cuda(0), CT_F32, false));
    ref_assert_error(CT_ERR_UNAVAILABLE, "ct_to cuda:0 without CUDA", "ct_to", "CUDA", NULL);
    ct_clear_error();
    assert_null(ct_cuda(c, -1));
    ref_assert_error(CT_ERR_UNAVAILABLE, "ct_cuda without CUDA", "CUDA", NULL);
    ct_clear_error();
    assert_null(ct_rand(CT_SHAPE(3), CT_F32, ct_device_cuda(0)));
    ref_assert_error(CT_ERR_UNAVAILABLE, "rand on cuda:0 without CUDA", "CUDA", NULL);
    ct_device d;
    ct_clear_error();
    assert_int_equal(ct_device_parse("cuda:0", &d), CT_ERR_UNAVAILABLE);
    ref_assert_error(CT_ERR_UNAVAILABLE, "parse cuda:0 without CUDA", "CUDA", NULL);
    ct_free(c);
    return;
  }
  ct_device g = tu_device.type == CT_CUDA ? tu_device : ct_device_cuda(0);
  char gs[CT_DEVICE_STR_MAX], want[160];
  ct_device_str(g, gs);
  ct_tensor *a = ct_ones(CT_SHAPE(3), CT_F32, g), *c = ct_ones(CT_SHAPE(3), CT_F32, ct_device_cpu());
  ct_tensor *m = ct_ones(CT_SHAPE(3, 3), CT_F32, g), *mc = ct_ones(CT_SHAPE(3, 3), CT_F32, ct_device_cpu());
  TU_CHECK(a);
  TU_CHECK(c);
  TU_CHECK(m);
  TU_CHECK(mc);
  ct_clear_error();
  assert_null(ct_add(a, c));
  snprintf(want, sizeof want, "ct_add: expected all tensors to be on the same device, but found %s and cpu", gs);
  assert_int_equal(ct_last_status(), CT_ERR_DEVICE);
  assert_message(want, "add(cuda, cpu)");
  assert_null(ct_mul(c, a));
  snprintf(want, sizeof want, "ct_mul: expected all tensors to be on the same device, but found cpu and %s", gs);
  assert_message(want, "mul(cpu, cuda)");
  assert_null(ct_lt(a, c));
  ref_assert_error(CT_ERR_DEVICE, "lt(cuda, cpu)", "ct_lt", gs, "cpu", NULL);
  assert_null(ct_matmul(m, mc));
  ref_assert_error(CT_ERR_DEVICE, "matmul(cuda, cpu)", "ct_matmul", gs, "cpu", NULL);
  assert_null(ct_mm(mc, m));
  ref_assert_error(CT_ERR_DEVICE, "mm(cpu, cuda)", "ct_mm", gs, "cpu", NULL);
  assert_int_not_equal(ct_binary_out(CT_OP_ADD, c, a, a), CT_OK);
  ref_assert_error(CT_ERR_DEVICE, "binary_out into cpu", "ct_add", gs, "cpu", NULL);
  assert_int_not_equal(ct_unary_out(CT_OP_EXP, c, a), CT_OK);
  ref_assert_error(CT_ERR_DEVICE, "unary_out into cpu", "ct_exp", gs, "cpu", NULL);
  assert_int_not_equal(ct_addmm_(mc, m, m, 1, 0), CT_OK);
  ref_assert_error(CT_ERR_DEVICE, "addmm_ into cpu", "ct_addmm_", gs, "cpu", NULL);
  // Pinning a GPU tensor makes no sense.
  assert_null(ct_pin_memory(a));
  ref_assert_error(CT_ERR_DEVICE, "pin_memory of a cuda tensor", "ct_pin_memory", gs, NULL);
  // A device index past the count.
  ct_clear_error();
  assert_null(ct_zeros(CT_SHAPE(2), CT_F32, ct_device_cuda(ct_cuda_device_count())));
  ref_assert_error(CT_ERR_DEVICE, "zeros on a missing GPU", "out of range", NULL);
  // Copies across devices are not errors.
  TU_OK(ct_copy_(c, a, false));
  ct_free(a), ct_free(c), ct_free(m), ct_free(mc);
}

// ---- shapes ------------------------------------------------------------------------------
static void test_shape_mismatch(void **state) {
  (void)state;
  ct_tensor *a = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device);
  ct_tensor *b = ct_zeros(CT_SHAPE(2, 4), CT_F32, tu_device);
  ct_tensor *v4 = ct_zeros(CT_SHAPE(4), CT_F32, tu_device);
  ct_tensor *c = ct_zeros(CT_SHAPE(2, 3, 4), CT_F32, tu_device);
  ct_tensor *d = ct_zeros(CT_SHAPE(3, 1, 5), CT_F32, tu_device);
  TU_CHECK(a);
  TU_CHECK(b);
  TU_CHECK(v4);
  TU_CHECK(c);
  TU_CHECK(d);
  ct_clear_error();
  assert_null(ct_add(a, b));
  assert_int_equal(ct_last_status(), CT_ERR_SHAPE);
  assert_message("ct_add: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
                 "add (2,3) + (2,4)");
  assert_null(ct_mul(a, v4));
  assert_message("ct_mul: The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1",
                 "mul (2,3) * (4,)");
  assert_null(ct_ge(v4, a));
  assert_message("ct_ge: The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1",
                 "ge (4,) >= (2,3)");
  // Several mismatching dims: PyTorch names the last one (its infer_size
  // walks from the right): torch.ones(2,3,4) + torch.ones(3,1,5) says
  // "The size of tensor a (4) must match the size of tensor b (5) at
  // non-singleton dimension 2".
  assert_null(ct_sub(c, d));
  assert_message("ct_sub: The size of tensor a (4) must match the size of tensor b (5) at non-singleton dimension 2",
                 "sub (2,3,4) - (3,1,5)");
  // _out: the output must have the broadcast shape.
  ct_tensor *o = ct_zeros(CT_SHAPE(3, 2), CT_F32, tu_device);
  TU_CHECK(o);
  assert_int_not_equal(ct_binary_out(CT_OP_ADD, o, a, a), CT_OK);
  ref_assert_error(CT_ERR_SHAPE, "binary_out shape", "ct_add", "(3, 2)", "(2, 3)", NULL);
  assert_int_not_equal(ct_unary_out(CT_OP_RELU, o, a), CT_OK);
  ref_assert_error(CT_ERR_SHAPE, "unary_out shape", "ct_relu", "(3, 2)", "(2, 3)", NULL);
  // matmul: both shapes named, as torch does.
  assert_null(ct_matmul(a, b));
  assert_int_equal(ct_last_status(), CT_ERR_SHAPE);
  assert_message("ct_matmul: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x4)", "matmul (2,3)@(2,4)");
  assert_null(ct_mm(a, a));
  assert_message("ct_mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x3)", "mm (2,3)@(2,3)");
  // Batched operands, in the words torch 1.13 prints for the same shapes.
  {
    ct_tensor *b234 = ct_zeros(CT_SHAPE(2, 3, 4), CT_F32, tu_device);
    ct_tensor *b256 = ct_zeros(CT_SHAPE(2, 5, 6), CT_F32, tu_device);
    ct_tensor *b346 = ct_zeros(CT_SHAPE(3, 4, 6), CT_F32, tu_device);
    ct_tensor *b134 = ct_zeros(CT_SHAPE(1, 3, 4), CT_F32, tu_device);
    ct_tensor *m56 = ct_zeros(CT_SHAPE(5, 6), CT_F32, tu_device);
    TU_CHECK(b234 && b256 && b346 && b134 && m56);
    assert_null(ct_matmul(b234, m56)); // folded into one mm: the batch joins the rows
    assert_message("ct_matmul: mat1 and mat2 shapes cannot be multiplied (6x4 and 5x6)", "matmul (2,3,4)@(5,6)");
    assert_null(ct_matmul(b234, b256));
    assert_message("ct_matmul: Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: "
                   "[2, 5].", "matmul (2,3,4)@(2,5,6)");
    assert_null(ct_matmul(b134, b256)); // the batch broadcasts first
    assert_message("ct_matmul: Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: "
                   "[2, 5].", "matmul (1,3,4)@(2,5,6)");
    assert_null(ct_matmul(b234, b346));
    assert_message("ct_matmul: The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
                   "dimension 0", "matmul (2,3,4)@(3,4,6)");
    // One operand batched, the other not: torch folds the batch into the rows of an mm
    // or an mv, and for a batched right operand it folds the transposed product, so the
    // sizes it names are flattened ones (torch.matmul(ones(3,4), ones(2,5,6)) says
    // "(12x5 and 4x3)": b.mT is 12x5, a.mT 4x3).
    ct_tensor *m34 = ct_zeros(CT_SHAPE(3, 4), CT_F32, tu_device);
    ct_tensor *v5 = ct_zeros(CT_SHAPE(5), CT_F32, tu_device);
    ct_tensor *v7 = ct_zeros(CT_SHAPE(7), CT_F32, tu_device), *b356 = ct_zeros(CT_SHAPE(3, 5, 6), CT_F32, tu_device);
    TU_CHECK(m34 && v5 && v7 && b356);
    assert_null(ct_matmul(m34, b256));
    assert_message("ct_matmul: mat1 and mat2 shapes cannot be multiplied (12x5 and 4x3)", "matmul (3,4)@(2,5,6)");
    assert_null(ct_matmul(v4, b356));
    assert_message("ct_matmul: size mismatch, got 18, 18x5,4", "matmul (4,)@(3,5,6)");
    assert_null(ct_matmul(b234, v7));
    assert_message("ct_matmul: size mismatch, got 6, 6x4,7", "matmul (2,3,4)@(7,)");
    assert_null(ct_matmul(m34, v5));
    assert_message("ct_matmul: size mismatch, got 3, 3x4,5", "matmul (3,4)@(5,)");
    assert_null(ct_matmul(v4, m56));
    assert_message("ct_matmul: mat1 and mat2 shapes cannot be multiplied (1x4 and 5x6)", "matmul (4,)@(5,6)");
    assert_null(ct_matmul(v7, v5));
    assert_message("ct_matmul: inconsistent tensor size, expected tensor [7] and src [5] to have the same number "
                   "of elements, but got 7 and 5 elements respectively", "matmul (7,)@(5,)");
    assert_null(ct_matmul(b234, b356)); // the batch is checked before the inner sizes
    assert_message("ct_matmul: The size of tensor a (2) must match the size of tensor b (3) at non-singleton "
                   "dimension 0", "matmul (2,3,4)@(3,5,6)");
    ct_free(m34), ct_free(v5), ct_free(v7), ct_free(b356);
    assert_null(ct_bmm(b234, b256));
    assert_message("ct_bmm: Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: "
                   "[2, 5].", "bmm (2,3,4)@(2,5,6)");
    assert_null(ct_bmm(b234, b346));
    assert_message("ct_bmm: Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: "
                   "[3, 4].", "bmm (2,3,4)@(3,4,6)");
    ct_free(b234), ct_free(b256), ct_free(b346), ct_free(b134), ct_free(m56);
  }
  // Views and copies.
  assert_null(ct_reshape(a, CT_SHAPE(5, -1)));
  ref_assert_error(CT_ERR_SHAPE, "reshape", "ct_reshape", "invalid for input of size 6", NULL);
  assert_null(ct_expand(a, CT_SHAPE(2, 5)));
  ref_assert_error(CT_ERR_SHAPE, "expand", "ct_expand", "(3)", "(5)", NULL);
  assert_int_not_equal(ct_copy_(a, b, false), CT_OK);
  ref_assert_error(CT_ERR_SHAPE, "copy_", "ct_copy_", "(2, 4)", "(2, 3)", NULL);
  ct_free(o), ct_free(a), ct_free(b), ct_free(v4), ct_free(c), ct_free(d);
}

// ---- dtypes -------------------------------------------------------------------------------
static void test_dtype_errors(void **state) {
  (void)state;
  ct_tensor *i64 = ct_ones(CT_SHAPE(2, 3), CT_I64, tu_device);
  ct_tensor *i32 = ct_ones(CT_SHAPE(3, 2), CT_I32, tu_device);
  ct_tensor *i32b = ct_ones(CT_SHAPE(2, 3), CT_I32, tu_device);
  ct_tensor *bl = ct_ones(CT_SHAPE(4), CT_BOOL, tu_device);
  ct_tensor *f32 = ct_ones(CT_SHAPE(2, 3), CT_F32, tu_device);
  ct_tensor *f64 = ct_ones(CT_SHAPE(3, 2), CT_F64, tu_device);
  TU_CHECK(i64);
  TU_CHECK(i32);
  TU_CHECK(i32b);
  TU_CHECK(bl);
  TU_CHECK(f32);
  TU_CHECK(f64);
  ct_clear_error();
  // mean needs a floating dtype (torch: "... Got: Long").
  assert_null(ct_mean(i64));
  ref_assert_error(CT_ERR_DTYPE, "mean(int64)", "ct_mean", "floating", "int64", NULL);
  assert_null(ct_mean_dim(i64, 0, false));
  ref_assert_error(CT_ERR_DTYPE, "mean_dim(int64)", "ct_mean_dim", "int64", NULL);
  // Matrix products are floating only, and of one dtype.
  assert_null(ct_matmul(i32b, i32));
  ref_assert_error(CT_ERR_DTYPE, "matmul(int32)", "ct_matmul", "int32", NULL);
  assert_null(ct_mm(i32b, i32));
  ref_assert_error(CT_ERR_DTYPE, "mm(int32)", "ct_mm", "int32", NULL);
  assert_null(ct_matmul(f32, f64));
  ref_assert_error(CT_ERR_DTYPE, "matmul(float32, float64)", "ct_matmul", "float32", "float64", NULL);
  // bool: no subtraction, no negation (torch's rules).
  assert_null(ct_sub(bl, bl));
  ref_assert_error(CT_ERR_DTYPE, "sub(bool, bool)", "ct_sub", "bool", NULL);
  assert_null(ct_neg(bl));
  ref_assert_error(CT_ERR_DTYPE, "neg(bool)", "ct_neg", "bool", NULL);
  // Random numbers are floating.
  assert_null(ct_rand(CT_SHAPE(3), CT_I32, tu_device));
  ref_assert_error(CT_ERR_DTYPE, "rand(int32)", "ct_rand", "int32", NULL);
  assert_null(ct_randn(CT_SHAPE(3), CT_BOOL, tu_device));
  ref_assert_error(CT_ERR_DTYPE, "randn(bool)", "ct_randn", "bool", NULL);
  // An output of the wrong dtype (torch: "result type Float can't be cast to
  // the desired output type Int").
  assert_int_not_equal(ct_binary_out(CT_OP_ADD, i32b, f32, f32), CT_OK);
  ref_assert_error(CT_ERR_DTYPE, "add into int32", "ct_add", "float32", "int32", NULL);
  assert_int_not_equal(ct_unary_out(CT_OP_EXP, i32b, i32b), CT_OK);
  ref_assert_error(CT_ERR_DTYPE, "exp into int32", "ct_exp", "float32", "int32", NULL);
  // Not dtypes at all.
  assert_null(ct_empty(CT_SHAPE(2), (ct_dtype)42, tu_device));
  ref_assert_error(CT_ERR_DTYPE, "empty of dtype 42", "42", NULL);
  assert_null(ct_to(f32, tu_device, (ct_dtype)-3, false));
  ref_assert_error(CT_ERR_DTYPE, "to dtype -3", "ct_to", "-3", NULL);
  // exp of an integer tensor is NOT an error: like torch.exp it gives float32.
  ct_tensor *e = ct_exp(i64);
  TU_CHECK(e);
  ref_assert_dtype(e, CT_F32, "exp(int64)");
  double ee[6];
  for (int i = 0; i < 6; ++i) ee[i] = (double)(float)exp(1.0);
  tu_assert_close(e, ee, tu_rtol(CT_F32), 0, "exp(int64)");
  ct_free(e);
  ct_free(i64), ct_free(i32), ct_free(i32b), ct_free(bl), ct_free(f32), ct_free(f64);
}

// ---- dims ------------------------------------------------------------------------------------
static void test_bad_dims(void **state) {
  (void)state;
  ct_tensor *a = ct_zeros(CT_SHAPE(2, 3), CT_F32, tu_device);
  TU_CHECK(a);
  ct_clear_error();
  assert_null(ct_sum_dim(a, 2, false));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  assert_message("ct_sum_dim: dimension out of range (expected to be in range of [-2, 1], but got 2)",
                 "sum_dim(2) of 2-d");
  assert_null(ct_mean_dim(a, -3, true));
  assert_message("ct_mean_dim: dimension out of range (expected to be in range of [-2, 1], but got -3)",
                 "mean_dim(-3) of 2-d");
  ct_tensor *idx = a; // must come back NULL
  assert_null(ct_max_dim(a, 5, false, &idx));
  assert_null(idx);
  assert_message("ct_max_dim: dimension out of range (expected to be in range of [-2, 1], but got 5)",
                 "max_dim(5) of 2-d");
  assert_null(ct_argmax_dim(a, -7, false));
  ref_assert_error(CT_ERR_VALUE, "argmax_dim(-7)", "ct_argmax_dim", "[-2, 1]", "-7", NULL);
  assert_null(ct_transpose(a, 0, 2));
  ref_assert_error(CT_ERR_VALUE, "transpose(0, 2)", "ct_transpose", "[-2, 1]", "2", NULL);
  assert_null(ct_unsqueeze(a, 3)); // unsqueeze accepts [-3, 2] on a 2-d tensor
  ref_assert_error(CT_ERR_VALUE, "unsqueeze(3)", "ct_unsqueeze", "[-3, 2]", "3", NULL);
  assert_null(ct_squeeze(a, -3));
  ref_assert_error(CT_ERR_VALUE, "squeeze(-3)", "ct_squeeze", "[-2, 1]", "-3", NULL);
  assert_null(ct_select(a, 2, 0));
  ref_assert_error(CT_ERR_VALUE, "select(2, 0)", "ct_select", "[-2, 1]", NULL);
  assert_null(ct_select(a, 1, 3));
  ref_assert_error(CT_ERR_VALUE, "select(1, 3)", "ct_select", "3", NULL);
  assert_null(ct_narrow(a, 1, 1, 5));
  ref_assert_error(CT_ERR_VALUE, "narrow(1, 1, 5)", "ct_narrow", "5", "3", NULL);
  assert_null(ct_permute(a, (int[]){0, 2}));
  ref_assert_error(CT_ERR_VALUE, "permute(0, 2)", "ct_permute", "2", NULL);
  assert_null(ct_permute(a, (int[]){1, -1}));
  ref_assert_error(CT_ERR_VALUE, "permute(1, -1)", "ct_permute", "repeated", NULL);
  ct_free(a);
}

// ---- sizes ------------------------------------------------------------------------------------
static void test_negative_sizes(void **state) {
  (void)state;
  // Each creator names itself (not ct_empty, which they all call) and says it
  // in torch 1.13's words: torch.zeros(-5) raises "Trying to create tensor
  // with negative dimension -5: [-5]"; the shape is listed whole.
  ct_clear_error();
  assert_null(ct_empty(CT_SHAPE(2, -1), CT_F32, tu_device));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  assert_message("ct_empty: Trying to create tensor with negative dimension -1: [2, -1]", "empty(2, -1)");
  ct_clear_error();
  assert_null(ct_zeros(CT_SHAPE(-5), CT_F64, tu_device));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  assert_message("ct_zeros: Trying to create tensor with negative dimension -5: [-5]", "zeros(-5)");
  ct_clear_error();
  assert_null(ct_ones(CT_SHAPE(3, 4, -2), CT_I32, tu_device));
  assert_int_equal(ct_last_status(), CT_ERR_VALUE);
  assert_message("ct_ones: Trying to create tensor with negative dimension -2: [3, 4, -2]", "ones(3, 4, -2)");
  ct_clear_error();
  assert_null(ct_full(CT_SHAPE(-1, -3), 2.0, CT_F32, tu_device)); // the first negative one is named
  assert_message("ct_full: Trying to create tensor with negative dimension -1: [-1, -3]", "full(-1, -3)");
  ct_clear_error();
  assert_null(ct_rand(CT_SHAPE(-3), CT_F32, tu_device));
  assert_message("ct_rand: Trying to create tensor with negative dimension -3: [-3]", "rand(-3)");
  ct_clear_error();
  assert_null(ct_randn(CT_SHAPE(2, -3), CT_F32, tu_device));
  assert_message("ct_randn: Trying to create tensor with negative dimension -3: [2, -3]", "randn(2, -3)");
  ct_clear_error();
  float buf[4] = {0};
  assert_null(ct_from_host(buf, CT_SHAPE(-4), CT_F32, tu_device));
  assert_message("ct_from_host: Trying to create tensor with negative dimension -4: [-4]", "from_host(-4)");
  // More dims than CT_MAX_DIMS.
  ct_shape big = {CT_MAX_DIMS + 1, {0}};
  ct_clear_error();
  assert_null(ct_empty(big, CT_F32, tu_device));
  assert_true(ct_last_status() != CT_OK);
  assert_non_null(strstr(ct_last_error(), "9"));
  // arange: zero step, wrong direction.
  ct_clear_error();
  assert_null(ct_arange(0, 1, 0, CT_F32, tu_device));
  ref_assert_error(CT_ERR_VALUE, "arange step 0", "ct_arange", NULL);
  // narrow with a negative length; reshape with a negative size.
  ct_tensor *a = ct_zeros(CT_SHAPE(4), CT_F32, tu_device);
  TU_CHECK(a);
  ct_clear_error();
  assert_null(ct_narrow(a, 0, 1, -1));
  ref_assert_error(CT_ERR_VALUE, "narrow length -1", "ct_narrow", "-1", NULL);
  assert_null(ct_reshape(a, CT_SHAPE(-2, -2)));
  ref_assert_error(CT_ERR_VALUE, "reshape(-2, -2)", "ct_reshape", "-2", NULL);
  ct_free(a);
}

// Shapes whose element count (or byte count) does not fit in int64: torch's
// words ("Storage size calculation overflowed with sizes=[...]"), never a
// wrapped count that allocates a small buffer for a huge tensor. The limits
// are worked out here: 2^62 float32 elements are 2^64 bytes, one past
// int64; 2^61 elements of one byte fit (and fail only as out of memory).
static void test_size_overflow(void **state) {
  (void)state;
  const int64_t big = INT64_C(1) << 32;
  struct {
    ct_shape shape;
    ct_dtype dt;
    const char *sizes;
  } over[] = {
      {CT_SHAPE(INT64_MAX, 2), CT_F32, "sizes=[9223372036854775807, 2]"},
      {CT_SHAPE(big, big), CT_U8, "sizes=[4294967296, 4294967296]"}, // 2^64 elements: wraps to 0
      {CT_SHAPE(INT64_C(1) << 31, INT64_C(1) << 31), CT_F32, "sizes=[2147483648, 2147483648]"}, // 2^64 bytes
      {CT_SHAPE(INT64_C(1) << 61, 2, 2), CT_U8, "sizes=[2305843009213693952, 2, 2]"},        // 2^63 elements
      {CT_SHAPE(0, INT64_MAX, INT64_MAX), CT_F32, "sizes=[0, 9223372036854775807"},          // its strides overflow
  };
  for (size_t i = 0; i < sizeof over / sizeof over[0]; ++i) {
    ct_clear_error();
    assert_null(ct_empty(over[i].shape, over[i].dt, tu_device));
    ref_assert_error(CT_ERR_VALUE, over[i].sizes, "ct_empty: Storage size calculation overflowed", over[i].sizes,
                     "check the sizes", NULL);
    ct_clear_error();
    assert_null(ct_zeros(over[i].shape, over[i].dt, tu_device));
    ref_assert_error(CT_ERR_VALUE, over[i].sizes, "ct_zeros: Storage size calculation overflowed", NULL);
    assert_int_equal(ct_shape_numel(over[i].shape) < 0, i != 2); // 2^62 elements fit; their bytes do not
  }
  // Just inside: 2^61 one-byte elements is a size, refused only as memory.
  ct_clear_error();
  assert_null(ct_empty(CT_SHAPE(INT64_C(1) << 61), CT_U8, tu_device));
  assert_int_equal(ct_last_status(), CT_ERR_OOM);
  assert_non_null(strstr(ct_last_error(), "out of memory"));
  assert_int_equal(ct_shape_numel(CT_SHAPE(INT64_C(1) << 61, 3)), 3 * (INT64_C(1) << 61));
  assert_int_equal(ct_shape_numel(CT_SHAPE(INT64_C(1) << 61, 4)), -1);

  // Views: a reshape whose count wraps to the input's is refused; an expand
  // past int64 elements is torch's "numel: integer multiplication overflow".
  ct_tensor *a = ct_zeros(CT_SHAPE(4), CT_F32, tu_device);
  TU_CHECK(a);
  ct_clear_error();
  assert_null(ct_reshape(a, CT_SHAPE((INT64_C(1) << 62) + 1, 4))); // 2^64 + 4 elements: wraps to 4
  ref_assert_error(CT_ERR_SHAPE, "reshape (2^62 + 1, 4)", "ct_reshape", "is invalid for input of size 4", NULL);
  ct_clear_error();
  assert_null(ct_reshape(a, CT_SHAPE(INT64_C(1) << 62, 4, -1))); // -1 inferred from an overflowed count
  ref_assert_error(CT_ERR_SHAPE, "reshape 2^64 x -1", "ct_reshape", "is invalid for input of size 4", NULL);
  ct_clear_error();
  assert_null(ct_expand(a, CT_SHAPE(INT64_C(1) << 40, INT64_C(1) << 40, 4)));
  ref_assert_error(CT_ERR_VALUE, "expand 2^82", "ct_expand: numel: integer multiplication overflow",
                   "sizes=[1099511627776, 1099511627776, 4]", NULL);
  ct_tensor *e = ct_expand(a, CT_SHAPE(INT64_C(1) << 40, 4)); // 2^42 elements: a view, no memory
  TU_CHECK(e);
  assert_int_equal(ct_numel(e), INT64_C(1) << 42);
  ct_free(e);
  ct_free(a);
}

// ---- NULL arguments: an error, never a crash ------------------------------------------
#define EXPECT_NULL_RESULT(call, name)                                                     \
  do {                                                                                     \
    ct_clear_error();                                                                      \
    if ((call) != NULL) fail_msg("%s returned a tensor for a NULL argument", #call);       \
    if (ct_last_status() == CT_OK || !strstr(ct_last_error(), name))                       \
      fail_msg("%s: status %s, message \"%s\" (expected one naming %s)", #call,            \
               ct_status_name(ct_last_status()), ct_last_error(), name);                   \
  } while (0)
#define EXPECT_FAIL_STATUS(call, name)                                                     \
  do {                                                                                     \
    ct_clear_error();                                                                      \
    if ((call) == CT_OK) fail_msg("%s succeeded with a NULL argument", #call);             \
    if (!strstr(ct_last_error(), name))                                                    \
      fail_msg("%s: message \"%s\" does not name %s", #call, ct_last_error(), name);       \
  } while (0)

static void test_null_arguments(void **state) {
  (void)state;
  ct_tensor *a = ct_ones(CT_SHAPE(2, 2), CT_F32, tu_device);
  TU_CHECK(a);
  bool flag;
  double v;
  float buf[4];
  ct_tensor *idx = a;
  EXPECT_NULL_RESULT(ct_add(NULL, a), "ct_add");
  EXPECT_NULL_RESULT(ct_add(a, NULL), "ct_add");
  EXPECT_NULL_RESULT(ct_binary(CT_OP_POW, NULL, NULL), "ct_pow");
  EXPECT_NULL_RESULT(ct_binary_scalar(CT_OP_MUL, NULL, 2.0), "ct_mul");
  EXPECT_NULL_RESULT(ct_mul_scalar(NULL, 2.0), "ct_mul");
  EXPECT_NULL_RESULT(ct_eq(a, NULL), "ct_eq");
  EXPECT_FAIL_STATUS(ct_binary_out(CT_OP_ADD, NULL, a, a), "ct_add");
  EXPECT_FAIL_STATUS(ct_binary_out(CT_OP_ADD, a, NULL, a), "ct_add");
  EXPECT_FAIL_STATUS(ct_binary_scalar_out(CT_OP_ADD, NULL, a, 1.0), "ct_add");
  EXPECT_NULL_RESULT(ct_unary(CT_OP_EXP, NULL), "ct_exp");
  EXPECT_NULL_RESULT(ct_sigmoid(NULL), "ct_sigmoid");
  EXPECT_NULL_RESULT(ct_isfinite(NULL), "ct_isfinite");
  EXPECT_FAIL_STATUS(ct_unary_out(CT_OP_EXP, NULL, a), "ct_exp");
  EXPECT_FAIL_STATUS(ct_unary_out(CT_OP_EXP, a, NULL), "ct_exp");
  EXPECT_FAIL_STATUS(ct_any_nonfinite(NULL, &flag), "ct_any_nonfinite");
  EXPECT_FAIL_STATUS(ct_any_nonfinite(a, NULL), "ct_any_nonfinite");
  EXPECT_NULL_RESULT(ct_sum(NULL), "ct_sum");
  EXPECT_NULL_RESULT(ct_mean(NULL), "ct_mean");
  EXPECT_NULL_RESULT(ct_max(NULL), "ct_max");
  EXPECT_NULL_RESULT(ct_argmax(NULL), "ct_argmax");
  EXPECT_NULL_RESULT(ct_sum_dim(NULL, 0, false), "ct_sum_dim");
  EXPECT_NULL_RESULT(ct_mean_dim(NULL, 0, true), "ct_mean_dim");
  EXPECT_NULL_RESULT(ct_max_dim(NULL, 0, false, &idx), "ct_max_dim");
  assert_null(idx);
  EXPECT_NULL_RESULT(ct_argmax_dim(NULL, 0, false), "ct_argmax_dim");
  EXPECT_NULL_RESULT(ct_matmul(NULL, a), "ct_matmul");
  EXPECT_NULL_RESULT(ct_mm(a, NULL), "ct_mm");
  EXPECT_NULL_RESULT(ct_bmm(NULL, NULL), "ct_bmm");
  EXPECT_FAIL_STATUS(ct_addmm_(NULL, a, a, 1, 0), "ct_addmm_");
  EXPECT_FAIL_STATUS(ct_addmm_(a, NULL, a, 1, 0), "ct_addmm_");
  EXPECT_NULL_RESULT(ct_transpose(NULL, 0, 1), "ct_transpose");
  EXPECT_NULL_RESULT(ct_t(NULL), "ct_t");
  EXPECT_NULL_RESULT(ct_permute(NULL, (int[]){1, 0}), "ct_permute");
  EXPECT_NULL_RESULT(ct_narrow(NULL, 0, 0, 1), "ct_narrow");
  EXPECT_NULL_RESULT(ct_select(NULL, 0, 0), "ct_select");
  EXPECT_NULL_RESULT(ct_unsqueeze(NULL, 0), "ct_unsqueeze");
  EXPECT_NULL_RESULT(ct_squeeze(NULL, 0), "ct_squeeze");
  EXPECT_NULL_RESULT(ct_reshape(NULL, CT_SHAPE(4)), "ct_reshape");
  EXPECT_NULL_RESULT(ct_expand(NULL, CT_SHAPE(2, 2)), "ct_expand");
  EXPECT_NULL_RESULT(ct_contiguous(NULL), "ct_contiguous");
  EXPECT_NULL_RESULT(ct_clone(NULL), "ct_clone");
  EXPECT_NULL_RESULT(ct_to(NULL, tu_device, CT_F32, false), "ct_to");
  EXPECT_NULL_RESULT(ct_to_device(NULL, tu_device), "ct_to");
  EXPECT_NULL_RESULT(ct_to_dtype(NULL, CT_F64), "ct_to");
  EXPECT_NULL_RESULT(ct_cpu(NULL), "ct_to");
  EXPECT_NULL_RESULT(ct_pin_memory(NULL), "ct_pin_memory");
  EXPECT_NULL_RESULT(ct_from_host(NULL, CT_SHAPE(2), CT_F32, tu_device), "ct_from_host");
  EXPECT_FAIL_STATUS(ct_copy_(NULL, a, false), "ct_copy_");
  EXPECT_FAIL_STATUS(ct_copy_(a, NULL, false), "ct_copy_");
  EXPECT_FAIL_STATUS(ct_fill_(NULL, 1.0), "ct_fill_");
  EXPECT_FAIL_STATUS(ct_zero_(NULL), "ct_");
  EXPECT_FAIL_STATUS(ct_copy_to_host(NULL, buf, sizeof buf), "ct_copy_to_host");
  EXPECT_FAIL_STATUS(ct_copy_to_host(a, NULL, sizeof buf), "ct_copy_to_host");
  EXPECT_FAIL_STATUS(ct_item(NULL, &v), "ct_item");
  EXPECT_FAIL_STATUS(ct_item(a, NULL), "ct_item");
  ct_retain(NULL); // allowed, like ct_free(NULL)
  ct_free(NULL);
  ct_free(a);
}

// The *_like constructors read their template's shape: NULL is an error.
static void test_null_like(void **state) {
  (void)state;
  EXPECT_NULL_RESULT(ct_empty_like(NULL, CT_F32, tu_device), "_like");
  EXPECT_NULL_RESULT(ct_zeros_like(NULL, CT_F32, tu_device), "_like");
  EXPECT_NULL_RESULT(ct_ones_like(NULL, CT_F32, tu_device), "_like");
}

// Invalid op codes through the generic entry points.
static void test_invalid_ops(void **state) {
  (void)state;
  ct_tensor *a = ct_ones(CT_SHAPE(2), CT_F32, tu_device);
  TU_CHECK(a);
  ct_clear_error();
  assert_null(ct_binary((ct_binary_op)99, a, a));
  ref_assert_error(CT_ERR_VALUE, "binary op 99", "99", NULL);
  assert_null(ct_binary_scalar((ct_binary_op)-1, a, 1));
  ref_assert_error(CT_ERR_VALUE, "binary_scalar op -1", "-1", NULL);
  assert_null(ct_unary((ct_unary_op)CT_NUM_UNARY_OPS, a));
  ref_assert_error(CT_ERR_VALUE, "unary op past the end", "ct_unary", NULL);
  assert_int_not_equal(ct_unary_out((ct_unary_op)77, a, a), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "unary_out op 77", "77", NULL);
  assert_string_equal(ct_binary_op_name((ct_binary_op)99), "invalid");
  assert_string_equal(ct_binary_op_name(CT_OP_ADD), "add");
  assert_string_equal(ct_unary_op_name(CT_OP_SIGMOID), "sigmoid");
  ct_free(a);
}

// One-element and size errors of the host-side helpers.
static void test_item_and_host_copy(void **state) {
  (void)state;
  ct_tensor *a = ct_ones(CT_SHAPE(2, 3), CT_F64, tu_device);
  TU_CHECK(a);
  double v, buf[6];
  ct_clear_error();
  assert_int_not_equal(ct_item(a, &v), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "item of 6 elements", "ct_item", "6", NULL);
  assert_int_not_equal(ct_copy_to_host(a, buf, 47), CT_OK);
  ref_assert_error(CT_ERR_VALUE, "copy_to_host into 47 bytes", "ct_copy_to_host", "47", "48", NULL);
  ct_free(a);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mixed_devices),
      cmocka_unit_test(test_shape_mismatch),
      cmocka_unit_test(test_dtype_errors),
      cmocka_unit_test(test_bad_dims),
      cmocka_unit_test(test_negative_sizes),
      cmocka_unit_test(test_size_overflow),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_null_like),
      cmocka_unit_test(test_invalid_ops),
      cmocka_unit_test(test_item_and_host_copy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
