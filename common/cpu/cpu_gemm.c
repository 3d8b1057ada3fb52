// SPDX-License-Identifier: MIT
//
// cpu_gemm: matrix products on the host through OpenBLAS.
//
// Row-major batched GEMM, C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b],
// as backend.h describes it. float32 and float64 go straight to
// cblas_sgemm/cblas_dgemm with CblasRowMajor, one call per batch (OpenBLAS
// threads inside each call). float16 and bfloat16 have no BLAS routine: the
// operands are widened to float32 scratch matrices (exact), multiplied by
// sgemm with float32 accumulation, and the result is rounded back to nearest
// even, the way cuBLAS's f16 GEMM with f32 compute behaves. beta is applied
// in float32 to C widened the same way. bfloat16 goes first to oneDNN
// (cpu_dnnl.c), whose kernels multiply bf16 pairs into float32 sums with the
// CPU's AVX-512 BF16 instructions and round once, the same numbers up to the
// order of the sums; where the build or the CPU has no such kernel, it takes
// the widening path too.
//
// Enters with lda/ldb/ldc as the row strides of the matrices as stored;
// leaves C written, or an error and C untouched when an argument is invalid
// (BLAS itself would print to stderr and return, which we never let it do).
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "dtype.h"
#include "error.h"

// Widens a rows x cols matrix with row stride ld (f16 or bf16) into a
// compact float32 matrix.
static void widen(ct_dtype dt, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld,
                  float *dst) {
#pragma omp parallel for if (rows * cols >= CT_CPU_PAR_MIN) schedule(static)
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t *s = src + i * ld;
    float *d = dst + i * cols;
    if (dt == CT_F16)
      for (int64_t j = 0; j < cols; ++j) d[j] = cti_cpu_f16_to_f32(s[j]);
    else
      for (int64_t j = 0; j < cols; ++j) d[j] = cti_cpu_bf16_to_f32(s[j]);
  }
}

// Rounds a compact float32 m x n matrix back into C (row stride ldc).
static void narrow(ct_dtype dt, const float *src, int64_t m, int64_t n, uint16_t *dst,
                   int64_t ldc) {
#pragma omp parallel for if (m * n >= CT_CPU_PAR_MIN) schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    const float *s = src + i * n;
    uint16_t *d = dst + i * ldc;
    if (dt == CT_F16)
      for (int64_t j = 0; j < n; ++j) d[j] = cti_cpu_f32_to_f16(s[j]);
    else
      for (int64_t j = 0; j < n; ++j) d[j] = cti_cpu_f32_to_bf16(s[j]);
  }
}

// C := beta * C for k == 0 (an empty sum); beta == 0 writes zeros without
// reading C, as BLAS does.
static void scale_c(ct_dtype dt, double beta, void *C, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t at = i * ldc + j;
      switch (dt) {
      case CT_F64: {
        double *c = C;
        c[at] = beta == 0 ? 0.0 : beta * c[at];
        break;
      }
      case CT_F32: {
        float *c = C;
        c[at] = beta == 0 ? 0.0f : (float)beta * c[at];
        break;
      }
      case CT_F16: {
        uint16_t *c = C;
        c[at] = cti_cpu_f32_to_f16(beta == 0 ? 0.0f : (float)beta * cti_cpu_f16_to_f32(c[at]));
        break;
      }
      default: {
        uint16_t *c = C;
        c[at] = cti_cpu_f32_to_bf16(beta == 0 ? 0.0f : (float)beta * cti_cpu_bf16_to_f32(c[at]));
        break;
      }
      }
    }
}

static int gemm_half(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     double alpha, const uint16_t *A, int64_t lda, int64_t strideA,
                     const uint16_t *B, int64_t ldb, int64_t strideB, double beta,
                     uint16_t *C, int64_t ldc, int64_t strideC, int64_t batch) {
  const int64_t ar = ta ? k : m, ac = ta ? m : k; // A as stored
  const int64_t br = tb ? n : k, bc = tb ? k : n; // B as stored
  float *fa = malloc((size_t)(ar * ac) * sizeof(float));
  float *fb = malloc((size_t)(br * bc) * sizeof(float));
  float *fc = malloc((size_t)(m * n) * sizeof(float));
  if (!fa || !fb || !fc) {
    free(fa);
    free(fb);
    free(fc);
    return ct_fail(CT_ERR_OOM,
                   "ct_matmul: cannot allocate float32 scratch for a %s (%lld x %lld x %lld) "
                   "product on the host",
                   ct_dtype_name(dt), (long long)m, (long long)k, (long long)n);
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (b == 0 || strideA != 0) widen(dt, A + b * strideA, ar, ac, lda, fa);
    if (b == 0 || strideB != 0) widen(dt, B + b * strideB, br, bc, ldb, fb);
    if (beta != 0) widen(dt, C + b * strideC, m, n, ldc, fc);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, (float)alpha, fa, (int)ac, fb,
                (int)bc, beta != 0 ? (float)beta : 0.0f, fc, (int)n);
    narrow(dt, fc, m, n, C + b * strideC, ldc);
  }
  free(fa);
  free(fb);
  free(fc);
  return CT_OK;
}

int cti_cpu_gemm(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                double alpha, const void *A, int64_t lda, int64_t strideA,
                const void *B, int64_t ldb, int64_t strideB, double beta, void *C,
                int64_t ldc, int64_t strideC, int64_t batch, ct_stream *s) {
  (void)s;
  if (dt != CT_F32 && dt != CT_F64 && dt != CT_F16 && dt != CT_BF16)
    return ct_fail(CT_ERR_DTYPE,
                   "ct_matmul: the CPU backend multiplies float32, float64, float16 and "
                   "bfloat16 matrices, got %s",
                   (unsigned)dt < (unsigned)CT_NUM_DTYPES ? ct_dtype_name(dt) : "(invalid)");
  if (m < 0 || n < 0 || k < 0 || batch < 0 || strideA < 0 || strideB < 0 || strideC < 0)
    return ct_fail(CT_ERR_VALUE,
                   "ct_matmul: negative size m=%lld n=%lld k=%lld batch=%lld or stride",
                   (long long)m, (long long)n, (long long)k, (long long)batch);
  if (m == 0 || n == 0 || batch == 0) return CT_OK;
  // Row strides BLAS accepts: at least the stored row length (and 1). A
  // matrix stored as a single row never uses its row stride, so any value
  // is fine there (a vector's view may carry a small one); BLAS still
  // checks it, so it is raised to the row length.
  const int64_t need_a = (ta ? m : k) > 1 ? (ta ? m : k) : 1;
  const int64_t need_b = (tb ? k : n) > 1 ? (tb ? k : n) : 1;
  if ((ta ? k : m) == 1 && lda < need_a) lda = need_a;
  if ((tb ? n : k) == 1 && ldb < need_b) ldb = need_b;
  if (m == 1 && ldc < n) ldc = n;
  if (k > 0 && (lda < need_a || ldb < need_b))
    return ct_fail(CT_ERR_VALUE, "ct_matmul: row strides lda=%lld ldb=%lld below %lld, %lld",
                   (long long)lda, (long long)ldb, (long long)need_a, (long long)need_b);
  if (ldc < n)
    return ct_fail(CT_ERR_VALUE, "ct_matmul: row stride ldc=%lld below n=%lld",
                   (long long)ldc, (long long)n);
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX ||
      ldc > INT_MAX)
    return ct_fail(CT_ERR_VALUE,
                   "ct_matmul: size m=%lld n=%lld k=%lld (lda=%lld ldb=%lld ldc=%lld) "
                   "exceeds the BLAS integer range %d",
                   (long long)m, (long long)n, (long long)k, (long long)lda, (long long)ldb,
                   (long long)ldc, INT_MAX);
  const size_t es = dt == CT_F64 ? 8 : dt == CT_F32 ? 4 : 2;
  if (k == 0) { // an empty sum: C = beta * C
    for (int64_t b = 0; b < batch; ++b)
      scale_c(dt, beta, (char *)C + (size_t)(b * strideC) * es, m, n, ldc);
    return CT_OK;
  }
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE opb = tb ? CblasTrans : CblasNoTrans;
  // OpenBLAS multiplies a product of m*n*k <= 65536 * 4 on one thread (its
  // SMP_THRESHOLD_MIN times GEMM_MULTITHREAD_THRESHOLD), so a batch of such
  // products (attention's per-head q k^T, P v) left the other threads idle,
  // one call after the other; the batch is shared out instead, each call
  // still on one thread (OpenBLAS's OpenMP build runs single-threaded inside
  // a parallel region): the same kernels, the same bits.
  const bool small = (double)m * (double)n * (double)k <= 65536.0 * 4;
  const bool par = small && batch > 1 && (double)batch * m * n * k >= CT_CPU_PAR_MIN * 8.0;
  if (dt == CT_F32) {
#pragma omp parallel for if (par) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, (float)alpha,
                  (const float *)A + b * strideA, (int)lda, (const float *)B + b * strideB,
                  (int)ldb, (float)beta, (float *)C + b * strideC, (int)ldc);
    return CT_OK;
  }
  if (dt == CT_F64) {
#pragma omp parallel for if (par) schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      cblas_dgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, alpha,
                  (const double *)A + b * strideA, (int)lda,
                  (const double *)B + b * strideB, (int)ldb, beta,
                  (double *)C + b * strideC, (int)ldc);
    return CT_OK;
  }
  if (dt == CT_BF16) {
    int rc = cti_cpu_gemm_bf16_native(ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,
                                     beta, C, ldc, strideC, batch);
    if (rc != CTI_GEMM_FALLBACK) return rc;
  }
  return gemm_half(dt, ta, tb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                   strideC, batch);
}
