// SPDX-License-Identifier: MIT
//
// gemm: batched matrix products through cuBLAS.
//
// cuBLAS is column-major; our matrices are row-major. A row-major (rows,
// cols) matrix with row stride ld is, read column-major with the same ld, its
// transpose. So the row-major product C = op(A) op(B) is computed as the
// column-major product C^T = op(B)^T op(A)^T: hand cuBLAS B where it expects
// its first operand and A as its second, swap m and n, and keep each
// operand's transpose flag (the stored B read column-major already is B^T;
// asking cuBLAS to transpose it again gives op(B)^T when tb). Nothing is
// copied or transposed in memory.
//
// Invariant: one cuBLAS handle per device, created on first use under a
// mutex and kept for the life of the process (PyTorch keeps its handles too;
// destroying them at exit races with the CUDA context's teardown). A second
// mutex per device covers cublasSetStream and the call that follows it, so
// two host threads sharing a device cannot swap each other's stream.
//
// One cuBLAS workspace per stream, as PyTorch keeps: cublasSetStream puts the
// handle back on its one default workspace, which every stream would then
// share, so a gemm on one stream could overwrite the scratch space of a gemm
// still running on another. Each (device, stream) gets its own, made by
// cudaMalloc on that stream's first gemm and kept for the process like the
// handle (so it is not in memory_allocated). A stream that is destroyed is
// synchronized first (stream.h), so a later stream that receives the same
// cudaStream_t may take over its workspace. The first gemm on a stream must
// come before a graph capture on it (cudaMalloc cannot be captured), which
// the usual warm-up run gives.
// f32 runs in full FP32 unless ct_set_allow_tf32(true); f16/bf16 read and
// write their own dtype and accumulate in f32, alpha/beta passed as float.
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#include <cublas_v2.h>

#include "cuda_backend.h"
#include "kernel_util.cuh"

// PyTorch's default CUBLAS_WORKSPACE_CONFIG ":4096:2:16:8": 2 x 4 MiB + 8 x 16 KiB.
#define CT_CUBLAS_WORKSPACE_BYTES ((size_t)4096 * 1024 * 2 + (size_t)16 * 1024 * 8)

struct cublas_workspace {
  cudaStream_t stream;
  void *ptr; // CT_CUBLAS_WORKSPACE_BYTES on the device
  cublas_workspace *next;
};

struct cublas_slot {
  pthread_mutex_t use; // held around cublasSetStream + the gemm, and the workspaces
  cublasHandle_t handle;
  cublas_workspace *workspaces; // one per stream that ran a gemm
};

static pthread_mutex_t cublas_create_mu = PTHREAD_MUTEX_INITIALIZER;
static cublas_slot cublas_slots[CT_MAX_CUDA_DEVICES] = {
#define CT_SLOT {PTHREAD_MUTEX_INITIALIZER, nullptr, nullptr}
    CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT,
    CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT, CT_SLOT,
#undef CT_SLOT
};
static_assert(CT_MAX_CUDA_DEVICES == 16, "one initializer per device slot");

class mutex_guard {
 public:
  explicit mutex_guard(pthread_mutex_t *mu) : mu_(mu) { pthread_mutex_lock(mu_); }
  ~mutex_guard() { pthread_mutex_unlock(mu_); }
  mutex_guard(const mutex_guard &) = delete;
  mutex_guard &operator=(const mutex_guard &) = delete;

 private:
  pthread_mutex_t *mu_;
};

// Enters with `device` current; leaves with *out its handle (created now if
// this is the first call for the device).
static int cublas_handle_for(int device, cublasHandle_t *out) {
  if (device < 0 || device >= CT_MAX_CUDA_DEVICES)
    return ct_fail(CT_ERR_DEVICE, "ct_gemm: CUDA device %d beyond the %d this runtime supports", device,
                   CT_MAX_CUDA_DEVICES);
  mutex_guard lock(&cublas_create_mu);
  cublas_slot *slot = &cublas_slots[device];
  if (!slot->handle) {
    // Created into a local first: a failed cublasCreate must not leave a
    // half-made handle in the slot for the next call to use.
    cublasHandle_t h = nullptr;
    CT_CUBLAS_CHECK(cublasCreate(&h));
    // f16/bf16 accumulate in f32 (backend.h, cpu_gemm.c): by default cuBLAS
    // may do split-K reductions in the output type; forbid that. TF32 stays
    // off (CUBLAS_DEFAULT_MATH; cti_cuda_gemm asks for it per call).
    const cublasStatus_t st =
        cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (st != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(h);
      CT_CUBLAS_CHECK(st);
    }
    slot->handle = h;
  }
  *out = slot->handle;
  return CT_OK;
}

// Enters with `device` current and its slot's `use` mutex held; leaves with
// h bound to `stream` and to that stream's own workspace (made now if new).
static int cublas_bind(cublas_slot *slot, cublasHandle_t h, cudaStream_t stream) {
  cublas_workspace *w = slot->workspaces;
  while (w && w->stream != stream) w = w->next;
  if (!w) {
    void *p = nullptr;
    CT_CUDA_CHECK(cudaMalloc(&p, CT_CUBLAS_WORKSPACE_BYTES));
    w = static_cast<cublas_workspace *>(calloc(1, sizeof *w));
    if (!w) {
      (void)cudaFree(p);
      return ct_fail(CT_ERR_OOM, "ct_gemm: out of host memory for a cuBLAS workspace record");
    }
    w->stream = stream;
    w->ptr = p;
    w->next = slot->workspaces;
    slot->workspaces = w;
  }
  CT_CUBLAS_CHECK(cublasSetStream(h, stream)); // resets the workspace: set it after
  CT_CUBLAS_CHECK(cublasSetWorkspace(h, w->ptr, CT_CUBLAS_WORKSPACE_BYTES));
  return CT_OK;
}

// The leading dimension cuBLAS requires of a column-major (rows, cols) view
// is at least max(1, rows). Ours is a row stride, which the dispatcher sets
// sensibly except that a matrix of at most one column (one row-major row)
// may come with any; only then is it raised to what cuBLAS checks for.
static int64_t fix_ld(int64_t ld, int64_t rows, int64_t cols) {
  const int64_t need = rows > 1 ? rows : 1;
  return cols <= 1 && ld < need ? need : ld;
}

extern "C" int cti_cuda_gemm(ct_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            double alpha, const void *A, int64_t lda, int64_t strideA,
                            const void *B, int64_t ldb, int64_t strideB, double beta, void *C,
                            int64_t ldc, int64_t strideC, int64_t batch, ct_stream *s) {
  if (dt != CT_F32 && dt != CT_F64 && dt != CT_F16 && dt != CT_BF16)
    return ct_fail(CT_ERR_DTYPE, "ct_gemm: not supported for %s on cuda (float32, float64, float16, "
                   "bfloat16 only)", cti_dt_name(dt));
  if (m < 0 || n < 0 || k < 0 || batch < 0)
    return ct_fail(CT_ERR_VALUE, "ct_gemm: bad sizes m %lld, n %lld, k %lld, batch %lld", (long long)m,
                   (long long)n, (long long)k, (long long)batch);
  if (m == 0 || n == 0 || batch == 0) return CT_OK;

  // cuBLAS's view (column-major, operands swapped): C' (n, m) = op'(B) (n, k) @ op'(A) (k, m).
  // First operand: B as stored, read column-major: (n, k) if !tb, else (k, n) transposed.
  const cublasOperation_t op1 = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op2 = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ld1 = tb ? fix_ld(ldb, k, n) : fix_ld(ldb, n, k);
  const int64_t ld2 = ta ? fix_ld(lda, m, k) : fix_ld(lda, k, m);
  const int64_t ldc2 = fix_ld(ldc, n, m);
  const int64_t lim = INT_MAX;
  if (m > lim || n > lim || k > lim || ld1 > lim || ld2 > lim || ldc2 > lim || batch > lim)
    return ct_fail(CT_ERR_VALUE, "ct_gemm: sizes beyond cuBLAS's 32-bit limits (m %lld, n %lld, k %lld, "
                   "lda %lld, ldb %lld, ldc %lld, batch %lld)", (long long)m, (long long)n, (long long)k,
                   (long long)lda, (long long)ldb, (long long)ldc, (long long)batch);
  const int M = (int)n, N = (int)m, K = (int)k, nb = (int)batch;

  cti_cuda_scope scope;
  if (int rc = scope.enter(s)) return rc;
  cublasHandle_t h = nullptr;
  if (int rc = cublas_handle_for(scope.device(), &h)) return rc;
  mutex_guard lock(&cublas_slots[scope.device()].use);
  if (int rc = cublas_bind(&cublas_slots[scope.device()], h, scope.stream())) return rc;

  if (dt == CT_F64) {
    CT_CUBLAS_CHECK(cublasDgemmStridedBatched(
        h, op1, op2, M, N, K, &alpha, static_cast<const double *>(B), (int)ld1, (long long)strideB,
        static_cast<const double *>(A), (int)ld2, (long long)strideA, &beta, static_cast<double *>(C),
        (int)ldc2, (long long)strideC, nb));
    return CT_OK;
  }
  const float alpha_f = (float)alpha, beta_f = (float)beta;
  cudaDataType_t type;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dt == CT_F32) {
    type = CUDA_R_32F;
    if (ct_get_allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  } else {
    type = dt == CT_F16 ? CUDA_R_16F : CUDA_R_16BF;
  }
  CT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op1, op2, M, N, K, &alpha_f, B, type, (int)ld1,
                                             (long long)strideB, A, type, (int)ld2, (long long)strideA,
                                             &beta_f, C, type, (int)ldc2, (long long)strideC, nb, compute,
                                             CUBLAS_GEMM_DEFAULT));
  return CT_OK;
}

extern "C" int cti_cublas_get_version(int *version) {
  *version = 0;
  int major = 0, minor = 0, patch = 0;
  CT_CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
  CT_CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
  CT_CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
  *version = major * 10000 + minor * 100 + patch;
  return CT_OK;
}
