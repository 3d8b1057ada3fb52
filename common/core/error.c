// SPDX-License-Identifier: MIT
//
// error: one thread-local slot holds the last failure's status and message.
// Threads do not see each other's errors, so DataParallel's worker threads
// report their own failures.
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef CT_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

#define CT_ERROR_MAX 16384 // room for a message naming two paths of PATH_MAX bytes

static _Thread_local char last_message[CT_ERROR_MAX];
static _Thread_local ct_status last_status = CT_OK;

ct_status ct_fail(ct_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  last_status = status;
  return status;
}

const char *ct_last_error(void) { return last_message; }
ct_status ct_last_status(void) { return last_status; }

void ct_clear_error(void) {
  last_message[0] = '\0';
  last_status = CT_OK;
}

const char *ct_status_name(ct_status s) {
  switch (s) {
  case CT_OK: return "CT_OK";
  case CT_ERR_VALUE: return "CT_ERR_VALUE";
  case CT_ERR_DEVICE: return "CT_ERR_DEVICE";
  case CT_ERR_DTYPE: return "CT_ERR_DTYPE";
  case CT_ERR_SHAPE: return "CT_ERR_SHAPE";
  case CT_ERR_OOM: return "CT_ERR_OOM";
  case CT_ERR_CUDA: return "CT_ERR_CUDA";
  case CT_ERR_UNAVAILABLE: return "CT_ERR_UNAVAILABLE";
  case CT_ERR_IO: return "CT_ERR_IO";
  case CT_ERR_SYNC: return "CT_ERR_SYNC";
  case CT_ERR_RACE: return "CT_ERR_RACE";
  case CT_ERR_CAPTURE: return "CT_ERR_CAPTURE";
  }
  return "CT_ERR_UNKNOWN";
}

#ifdef CT_HAVE_CUDA
// Strips the directories from __FILE__ so messages read "alloc.c:120".
static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

ct_status ct_cuda_fail(int err, const char *call, const char *file, int line) {
  cudaError_t e = (cudaError_t)err;
  ct_status st = (e == cudaErrorMemoryAllocation) ? CT_ERR_OOM : CT_ERR_CUDA;
  // Handled here: take it off the runtime's last-error slot, or the next
  // kernel launch's CT_CUDA_CHECK(cudaGetLastError()) would report it as its
  // own. (A sticky error, one that spoils the context, stays whatever we do.)
  (void)cudaGetLastError();
  return ct_fail(st, "%s failed at %s:%d: %s (%s)", call, base_name(file), line,
                 cudaGetErrorName(e), cudaGetErrorString(e));
}

ct_status ct_cublas_fail(int status, const char *call, const char *file, int line) {
  cublasStatus_t s = (cublasStatus_t)status;
  return ct_fail(CT_ERR_CUDA, "%s failed at %s:%d: %s (%s)", call, base_name(file),
                 line, cublasGetStatusName(s), cublasGetStatusString(s));
}
#endif
