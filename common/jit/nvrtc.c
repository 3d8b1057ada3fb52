// SPDX-License-Identifier: MIT
//
// nvrtc: the GPU path, torch.cuda.jiterator's way. NVRTC compiles the
// generated CUDA C++ to PTX for the device's architecture (compute_XY, no GPU
// needed: CI compiles every kernel here); the CUDA driver JIT-compiles the
// PTX to the GPU's code when cuModuleLoadData loads it; cuLaunchKernel runs
// it on the tensors' stream.
//
// The driver API is reached through the CUDA runtime's entry-point query
// (cudaGetDriverEntryPointByVersion), not by linking libcuda: a program
// linked against libcuda's stub would not even start on a machine without
// the driver, and every chapter must run there on the CPU.
//
// NVRTC runs with -fmad=false, so a*b+c rounds twice, as on the CPU; its log
// is the error message when a compilation fails. Every NVRTC and driver call
// goes through one checking macro that names the call, the file and the line.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "jit_impl.h"

#ifdef CT_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <pthread.h>

#include "cuda_check.h"

#define NVRTC_CHECK(call)                                                                                  \
  do {                                                                                                     \
    nvrtcResult st_ = (call);                                                                              \
    if (st_ != NVRTC_SUCCESS)                                                                              \
      return ct_fail(CT_ERR_CUDA, "%s failed at %s:%d: %s", #call, __FILE__, __LINE__, nvrtcGetErrorString(st_)); \
  } while (0)

int cti_jit_nvrtc_identity(const char *op, const char **compiler) {
  static char text[64];
  int major = 0, minor = 0;
  NVRTC_CHECK(nvrtcVersion(&major, &minor));
  snprintf(text, sizeof text, "nvrtc %d.%d", major, minor);
  *compiler = text;
  (void)op;
  return CT_OK;
}

int cti_jit_nvrtc_flags(const char *op, int arch, const char **flags) {
  static _Thread_local char text[128];
  snprintf(text, sizeof text, "--gpu-architecture=compute_%d --std=c++17 -fmad=false", arch);
  *flags = text;
  (void)op;
  return CT_OK;
}

int cti_jit_nvrtc_arch_for(const char *op, int cc, int *arch) {
  int n = 0;
  NVRTC_CHECK(nvrtcGetNumSupportedArchs(&n));
  int archs[128];
  if (n <= 0 || n > 128) return ct_fail(CT_ERR_CUDA, "%s: NVRTC reports %d architectures", op, n);
  NVRTC_CHECK(nvrtcGetSupportedArchs(archs));
  *arch = 0;
  for (int i = 0; i < n; ++i)
    if (archs[i] <= cc && archs[i] > *arch) *arch = archs[i];
  if (*arch == 0)
    return ct_fail(CT_ERR_UNAVAILABLE, "%s: compute capability %d.%d is older than any architecture this NVRTC "
                   "targets (the oldest is sm_%d)", op, cc / 10, cc % 10, archs[0]);
  return CT_OK;
}

int cti_jit_cuda_arch(const char *op, int device, int *arch) {
  int major = 0, minor = 0;
  CT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return cti_jit_nvrtc_arch_for(op, 10 * major + minor, arch);
}

// Compiles; on failure the error holds NVRTC's log (its own diagnostics).
int cti_jit_nvrtc_compile(const char *op, const char *source, int arch, char **ptx, size_t *n) {
  *ptx = NULL;
  *n = 0;
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, source, "ct_jit_kernel.cu", 0, NULL, NULL));
  char archopt[48];
  snprintf(archopt, sizeof archopt, "--gpu-architecture=compute_%d", arch);
  const char *opts[] = {archopt, "--std=c++17", "-fmad=false"};
  nvrtcResult st = nvrtcCompileProgram(prog, 3, opts);
  int rc = CT_OK;
  if (st != NVRTC_SUCCESS) {
    size_t loglen = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &loglen) == NVRTC_SUCCESS && (log = malloc(loglen + 1)) &&
        nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS)
      log[loglen] = '\0';
    rc = ct_fail(CT_ERR_VALUE, "%s: NVRTC failed (%s) on the generated source for compute_%d; it said:\n%.700s", op,
                 nvrtcGetErrorString(st), arch, log ? log : "(no log)");
    free(log);
  } else {
    size_t len = 0;
    if (nvrtcGetPTXSize(prog, &len) != NVRTC_SUCCESS || !(*ptx = malloc(len + 1)) ||
        nvrtcGetPTX(prog, *ptx) != NVRTC_SUCCESS) {
      free(*ptx);
      *ptx = NULL;
      rc = ct_fail(CT_ERR_CUDA, "%s: NVRTC compiled the kernel but its PTX could not be read", op);
    } else {
      (*ptx)[len] = '\0';
      *n = len; // nvrtc counts the terminating NUL
    }
  }
  nvrtcDestroyProgram(&prog);
  return rc;
}

// ---- the driver API, without linking libcuda -------------------------------------
typedef CUresult (*pfn_load)(CUmodule *, const void *);
typedef CUresult (*pfn_get)(CUfunction *, CUmodule, const char *);
typedef CUresult (*pfn_unload)(CUmodule);
typedef CUresult (*pfn_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
typedef CUresult (*pfn_errstr)(CUresult, const char **);
static struct {
  pfn_load load;
  pfn_get get;
  pfn_unload unload;
  pfn_launch launch;
  pfn_errstr errname, errstr;
  int status;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static int entry(const char *sym, void **p) {
  enum cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  CT_CUDA_CHECK(cudaGetDriverEntryPointByVersion(sym, p, 12000, cudaEnableDefault, &q));
#else
  CT_CUDA_CHECK(cudaGetDriverEntryPoint(sym, p, cudaEnableDefault, &q));
#endif
  if (q != cudaDriverEntryPointSuccess || !*p)
    return ct_fail(CT_ERR_CUDA, "ct_jit: the CUDA driver has no %s (query result %d)", sym, (int)q);
  return CT_OK;
}

static void drv_init(void) {
  drv.status = entry("cuModuleLoadData", (void **)&drv.load);
  if (!drv.status) drv.status = entry("cuModuleGetFunction", (void **)&drv.get);
  if (!drv.status) drv.status = entry("cuModuleUnload", (void **)&drv.unload);
  if (!drv.status) drv.status = entry("cuLaunchKernel", (void **)&drv.launch);
  if (!drv.status) drv.status = entry("cuGetErrorName", (void **)&drv.errname);
  if (!drv.status) drv.status = entry("cuGetErrorString", (void **)&drv.errstr);
}

static int cu_fail(CUresult r, const char *call, const char *file, int line) {
  const char *name = "?", *str = "?";
  if (drv.errname) drv.errname(r, &name);
  if (drv.errstr) drv.errstr(r, &str);
  return ct_fail(r == CUDA_ERROR_INVALID_PTX || r == CUDA_ERROR_INVALID_IMAGE ? CT_ERR_VALUE : CT_ERR_CUDA,
                 "%s failed at %s:%d: %s (%s)", call, file, line, name, str);
}
#define CU_CHECK(call)                                                   \
  do {                                                                   \
    CUresult r_ = (call);                                                \
    if (r_ != CUDA_SUCCESS) return cu_fail(r_, #call, __FILE__, __LINE__); \
  } while (0)

static int driver(const char *op) {
  pthread_once(&drv_once, drv_init);
  if (drv.status) return ct_fail(CT_ERR_CUDA, "%s: the CUDA driver API is unavailable: %s", op, ct_last_error());
  return CT_OK;
}

int cti_jit_cuda_load(const char *op, int device, const char *ptx, size_t n, void **module, void **function) {
  *module = *function = NULL;
  if (n == 0 || ptx[n - 1] != '\0') return ct_fail(CT_ERR_VALUE, "%s: the PTX is not NUL-terminated", op);
  int rc = driver(op);
  if (rc) return rc;
  CT_CUDA_CHECK(cudaSetDevice(device));
  CT_CUDA_CHECK(cudaFree(0)); // the device's primary context, current on this thread
  CUmodule m;
  CUfunction f;
  CU_CHECK(drv.load(&m, ptx));
  CUresult r = drv.get(&f, m, CTI_JIT_KERNEL_NAME);
  if (r != CUDA_SUCCESS) {
    drv.unload(m);
    return cu_fail(r, "cuModuleGetFunction(&f, m, \"" CTI_JIT_KERNEL_NAME "\")", __FILE__, __LINE__);
  }
  *module = m;
  *function = f;
  return CT_OK;
}

void cti_jit_cuda_unload(int device, void *module) {
  if (!module || driver("ct_jit") != CT_OK) return;
  int cur = -1;
  cudaGetDevice(&cur);
  // a launch still queued may run the module's code: let the device finish first
  if (cudaSetDevice(device) == cudaSuccess) cudaDeviceSynchronize();
  drv.unload((CUmodule)module);
  if (cur >= 0) cudaSetDevice(cur);
}

int cti_jit_cuda_launch(const char *op, void *function, const cti_jit_args *a, void *stream) {
  int rc = driver(op);
  if (rc) return rc;
  const int64_t threads = 256;
  int64_t blocks = (a->numel + threads - 1) / threads;
  if (blocks > 65536) blocks = 65536; // the grid-stride loop covers the rest
  void *params[] = {(void *)a};
  CU_CHECK(drv.launch((CUfunction)function, (unsigned)blocks, 1, 1, (unsigned)threads, 1, 1, 0, (CUstream)stream,
                      params, NULL));
  return CT_OK;
}

#else // a CPU-only build: NVRTC is absent, and says so

static int no_cuda(const char *op) {
  return ct_fail(CT_ERR_UNAVAILABLE, "%s: the GPU path needs NVRTC: this build has no CUDA", op);
}
int cti_jit_nvrtc_identity(const char *op, const char **compiler) {
  *compiler = "";
  return no_cuda(op);
}
int cti_jit_nvrtc_flags(const char *op, int arch, const char **flags) {
  (void)arch;
  *flags = "";
  return no_cuda(op);
}
int cti_jit_nvrtc_arch_for(const char *op, int cc, int *arch) {
  (void)cc;
  *arch = 0;
  return no_cuda(op);
}
int cti_jit_cuda_arch(const char *op, int device, int *arch) {
  (void)device;
  *arch = 0;
  return no_cuda(op);
}
int cti_jit_nvrtc_compile(const char *op, const char *source, int arch, char **ptx, size_t *n) {
  (void)source, (void)arch;
  *ptx = NULL;
  *n = 0;
  return no_cuda(op);
}
int cti_jit_cuda_load(const char *op, int device, const char *ptx, size_t n, void **module, void **function) {
  (void)device, (void)ptx, (void)n;
  *module = *function = NULL;
  return no_cuda(op);
}
void cti_jit_cuda_unload(int device, void *module) { (void)device, (void)module; }
int cti_jit_cuda_launch(const char *op, void *function, const cti_jit_args *a, void *stream) {
  (void)function, (void)a, (void)stream;
  return no_cuda(op);
}
#endif
