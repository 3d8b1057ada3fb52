// SPDX-License-Identifier: MIT
//
// ct_sim_runtime.cc: the rest of the CUDA runtime subset that the runtime's
// CUDA backend calls (common/core, common/graph, common/kernels), and its
// cuBLAS calls on OpenBLAS, for the sim build of libct (stage 2,
// tools/sim/README.md). Compiled against the toolkit's declarations
// (CT_SIM_TOOLKIT_VECTOR_TYPES), so every name is the toolkit's own.
//
// The emulated device: one device, named "emulated", whose device memory
// is host memory. Every stream (the legacy one, the per-thread one, created
// ones) is one issue order on the calling thread: an asynchronous call is
// complete when it returns, so a stream or an event is always complete.
// What cannot be emulated is refused with cudaErrorNotSupported and a line
// on stderr saying why: graph capture (not emulated yet), peer copies
// (there is one device). cudaEventElapsedTime gives the host time between
// the two records, the emulator's own time: it says nothing of a GPU's
// speed, and the device's name says "(emulated)" wherever it is printed.
#include "ct_sim.h"
#include "ct_sim_internal.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <vector>

#undef warpSize // ct_sim.h's kernel-side macro; here cudaDeviceProp's field

using ct_sim::set_last_error;

namespace {
// the device's name: a chapter's first line then reads "device: cuda:0 (emulated)"
const char k_name[] = "emulated";

void refuse(const char *call, const char *why) {
  fprintf(stderr, "ct_sim: %s is not emulated: %s\n", call, why);
}

struct SimEvent {
  bool recorded = false;
  double host_ms = 0.0; // the host clock at the record (the emulator's time, not a GPU's)
};

double host_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int g_capture_mode = cudaStreamCaptureModeGlobal; // what cudaThreadExchangeStreamCaptureMode keeps
} // namespace

extern "C" {

// ---- device ------------------------------------------------------------------------------
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
  if (!p) return set_last_error(cudaErrorInvalidValue);
  if (device != 0) return set_last_error(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", k_name);
  p->totalGlobalMem = (size_t)8 << 30; // what cudaMemGetInfo reports; cudaMalloc refuses more
  p->sharedMemPerBlock = 48 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->major = 9, p->minor = 0;
  p->multiProcessorCount = 1;
  p->maxThreadsPerMultiProcessor = 1024;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int device) {
  if (!v) return set_last_error(cudaErrorInvalidValue);
  if (device != 0) return set_last_error(cudaErrorInvalidDevice);
  // The emulated device claims compute capability 9.0 (what the kernels are
  // written for) and one SM; clocks and the memory system are 0: it has none.
  switch (attr) {
  case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
  case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
  case cudaDevAttrMultiProcessorCount: *v = 1; break;
  case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 1024; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *v = 48 * 1024; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 48 * 1024; break;
  case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; break;
  case cudaDevAttrWarpSize: *v = 32; break;
  default: *v = 0; break; // clocks, bus width, L2, PCI, ECC: the emulator has none
  }
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  if (!v) return set_last_error(cudaErrorInvalidValue);
  *v = CUDART_VERSION; // the toolkit headers the emulator was built against
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  if (!v) return set_last_error(cudaErrorInvalidValue);
  *v = 0; // no driver: the device is emulated
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  if (!free_b || !total_b) return set_last_error(cudaErrorInvalidValue);
  *total_b = (size_t)8 << 30;
  *free_b = *total_b;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
  if (!p) return set_last_error(cudaErrorInvalidValue);
  *p = malloc(size ? size : 1);
  return *p ? cudaSuccess : set_last_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n, cudaStream_t) {
  if (dst_dev != 0 || src_dev != 0) return set_last_error(cudaErrorInvalidDevice);
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice);
}

// ---- streams: one issue order --------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int) { return cudaStreamCreate(s); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int, int) { return cudaStreamCreate(s); }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = 0; // one priority: the emulator runs everything in issue order
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned int) {
  return e ? cudaSuccess : set_last_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamGetPriority(cudaStream_t, int *priority) {
  if (!priority) return set_last_error(cudaErrorInvalidValue);
  *priority = 0;
  return cudaSuccess;
}
// Runs fn in issue order: now, or at each replay when the stream captures.
// (A host function that waits for something issued later deadlocks a GPU's
// stream; here it waits on the calling thread.)
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
  if (!fn) return set_last_error(cudaErrorInvalidValue);
  if (ct_sim::capturing(s)) {
    ct_sim::capture(s, [fn, arg]() { fn(arg); });
    return cudaSuccess;
  }
  fn(arg);
  return cudaSuccess;
}

// ---- events ---------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int) {
  if (!e) return set_last_error(cudaErrorInvalidValue);
  *e = (cudaEvent_t) new SimEvent();
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete (SimEvent *)e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return set_last_error(cudaErrorInvalidResourceHandle);
  SimEvent *x = (SimEvent *)e;
  x->recorded = true;
  x->host_ms = host_ms();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  return e ? cudaSuccess : set_last_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e ? cudaSuccess : set_last_error(cudaErrorInvalidResourceHandle);
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms || !a || !b) return set_last_error(cudaErrorInvalidValue);
  SimEvent *x = (SimEvent *)a, *y = (SimEvent *)b;
  if (!x->recorded || !y->recorded) return set_last_error(cudaErrorInvalidResourceHandle);
  *ms = (float)(y->host_ms - x->host_ms); // the emulator's host time (see the top of this file)
  return cudaSuccess;
}

// ---- graphs: capture and replay of what was issued ------------------------------------------
// A captured graph is the list of what was issued to the capturing stream
// (kernel launches with copies of their arguments, async copies and memsets,
// cuBLAS calls), in order; an instantiated graph is a copy of it, and a
// graph launch runs it on the calling thread.
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (!mode) return set_last_error(cudaErrorInvalidValue);
  int old = g_capture_mode;
  g_capture_mode = *mode;
  *mode = (enum cudaStreamCaptureMode)old;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode) {
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    refuse("cudaStreamBeginCapture on the default stream", "a GPU refuses it too");
    return set_last_error(cudaErrorStreamCaptureUnsupported);
  }
  if (!ct_sim::capture_begin(s)) return set_last_error(cudaErrorIllegalState);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
  if (!g) return set_last_error(cudaErrorInvalidValue);
  *g = nullptr;
  CUgraph_st *graph = new CUgraph_st();
  if (!ct_sim::capture_end(s, &graph->ops)) {
    delete graph;
    return set_last_error(cudaErrorIllegalState);
  }
  *g = graph;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  if (!st) return set_last_error(cudaErrorInvalidValue);
  *st = ct_sim::capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
  if (!g || !n) return set_last_error(cudaErrorInvalidValue);
  if (nodes) { // the emulator's nodes have no handles
    refuse("cudaGraphGetNodes with a node array", "the emulated graph's nodes have no handles");
    return set_last_error(cudaErrorNotSupported);
  }
  *n = g->ops.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long) {
  if (!x || !g) return set_last_error(cudaErrorInvalidValue);
  *x = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  if (!x) return set_last_error(cudaErrorInvalidValue);
  if (ct_sim::capturing(s)) {
    refuse("cudaGraphLaunch into a capturing stream", "child graphs are not emulated");
    return set_last_error(cudaErrorNotSupported);
  }
  for (auto &op : x->ops) op();
  return cudaPeekAtLastError() == cudaSuccess ? cudaSuccess : cudaErrorLaunchFailure;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  delete x;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

} // extern "C"

// ---- cuBLAS on OpenBLAS ---------------------------------------------------------------------
// Column-major as cuBLAS; the handle holds nothing the emulator needs.
struct cublasContext {
  int math_mode = 0;
  cudaStream_t stream = nullptr; // a gemm on a capturing stream is recorded, not run
};

extern "C" {
cublasStatus_t cublasCreate(cublasHandle_t *h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math_mode = (int)m;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *, size_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasGetProperty(libraryPropertyType t, int *v) {
  if (!v) return CUBLAS_STATUS_INVALID_VALUE;
  *v = t == MAJOR_VERSION ? CUBLAS_VER_MAJOR : t == MINOR_VERSION ? CUBLAS_VER_MINOR : CUBLAS_VER_PATCH;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "the operation is not supported (by the SIMT emulator's cuBLAS on OpenBLAS)";
  case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
  default: return "cuBLAS error (the SIMT emulator)";
  }
}

} // extern "C"

static CBLAS_TRANSPOSE ct_sim_op(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

extern "C" cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                         int n, int k, const double *alpha, const double *A, int lda,
                                         long long sa, const double *B, int ldb, long long sb,
                                         const double *beta, double *C, int ldc, long long sc, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (ct_sim::capturing(h->stream)) {
    const double al = *alpha, be = *beta;
    ct_sim::capture(h->stream, [=]() {
      for (int b = 0; b < batch; ++b)
        cblas_dgemm(CblasColMajor, ct_sim_op(ta), ct_sim_op(tb), m, n, k, al, A + b * sa, lda, B + b * sb, ldb,
                    be, C + b * sc, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  for (int b = 0; b < batch; ++b)
    cblas_dgemm(CblasColMajor, ct_sim_op(ta), ct_sim_op(tb), m, n, k, *alpha, A + b * sa, lda, B + b * sb, ldb,
                *beta, C + b * sc, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

// f32, f16 and bf16 operands with f32 accumulation: each matrix is widened
// to float, multiplied by cblas_sgemm, and C rounded back to its type
// (round to nearest even). TF32 is not emulated: f32 products are full f32.
template <class T> static float ct_sim_to_f(T v);
template <> float ct_sim_to_f<float>(float v) { return v; }
template <> float ct_sim_to_f<__half>(__half v) { return __half2float(v); }
template <> float ct_sim_to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> static T ct_sim_from_f(float v);
template <> float ct_sim_from_f<float>(float v) { return v; }
template <> __half ct_sim_from_f<__half>(float v) { return __float2half_rn(v); }
template <> __nv_bfloat16 ct_sim_from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// a column-major rows x cols matrix with leading dimension ld, widened
template <class T> static void ct_sim_widen(const T *p, int rows, int cols, int ld, std::vector<float> &out) {
  out.assign((size_t)rows * cols, 0.0f);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) out[(size_t)j * rows + i] = ct_sim_to_f<T>(p[(size_t)j * ld + i]);
}

template <class T>
static void ct_sim_gemm_ex(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                           const T *A, int lda, long long sa, const T *B, int ldb, long long sb, float beta,
                           T *C, int ldc, long long sc, int batch) {
  std::vector<float> a, b, c;
  const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
  const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
  for (int z = 0; z < batch; ++z) {
    ct_sim_widen(A + z * sa, ar, ac, lda, a);
    ct_sim_widen(B + z * sb, br, bc, ldb, b);
    T *cz = C + z * sc;
    c.assign((size_t)m * n, 0.0f);
    if (beta != 0.0f) ct_sim_widen<T>(cz, m, n, ldc, c); // beta == 0: C is not read (may hold NaN)
    cblas_sgemm(CblasColMajor, ct_sim_op(ta), ct_sim_op(tb), m, n, k, alpha, a.data(), ar > 0 ? ar : 1,
                b.data(), br > 0 ? br : 1, beta, c.data(), m > 0 ? m : 1);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) cz[(size_t)j * ldc + i] = ct_sim_from_f<T>(c[(size_t)j * m + i]);
  }
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                                          long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                                          long long sc, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (at != bt || at != ct || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float al = *(const float *)alpha, be = *(const float *)beta;
  if (ct_sim::capturing(h->stream)) {
    cudaStream_t none = nullptr;
    ct_sim::capture(h->stream, [=]() {
      cublasContext run;
      run.stream = none;
      (void)cublasGemmStridedBatchedEx(&run, ta, tb, m, n, k, &al, A, at, lda, sa, B, bt, ldb, sb, &be, C, ct, ldc,
                                       sc, batch, compute, CUBLAS_GEMM_DEFAULT);
    });
    return CUBLAS_STATUS_SUCCESS;
  }
  switch (at) {
  case CUDA_R_32F:
    for (int z = 0; z < batch; ++z)
      cblas_sgemm(CblasColMajor, ct_sim_op(ta), ct_sim_op(tb), m, n, k, al, (const float *)A + z * sa, lda,
                  (const float *)B + z * sb, ldb, be, (float *)C + z * sc, ldc);
    return CUBLAS_STATUS_SUCCESS;
  case CUDA_R_16F:
    ct_sim_gemm_ex(ta, tb, m, n, k, al, (const __half *)A, lda, sa, (const __half *)B, ldb, sb, be, (__half *)C, ldc,
                   sc, batch);
    return CUBLAS_STATUS_SUCCESS;
  case CUDA_R_16BF:
    ct_sim_gemm_ex(ta, tb, m, n, k, al, (const __nv_bfloat16 *)A, lda, sa, (const __nv_bfloat16 *)B, ldb, sb, be,
                   (__nv_bfloat16 *)C, ldc, sc, batch);
    return CUBLAS_STATUS_SUCCESS;
  default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
