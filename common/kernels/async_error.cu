// SPDX-License-Identifier: MIT
//
// async_error.cu: the host side of async_error.h: one record per CUDA device,
// made on first use and kept for the process (a few bytes), and the check
// that turns a record into an error message.
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "async_error.h"
#include "cuda_check.h"
#include "device.h"
#include "error.h"
#include <cuda_runtime.h>

static cti_async_record *async_records[CT_MAX_CUDA_DEVICES];
// Each device's own non-blocking stream for reading the record: a copy there
// waits for no other work, so the check costs only itself and sees what any
// finished kernel wrote, whichever stream ran it.
static cudaStream_t async_streams[CT_MAX_CUDA_DEVICES];
static pthread_mutex_t async_mu = PTHREAD_MUTEX_INITIALIZER;

// Enters with the lock held and no record for `device`; leaves with a zeroed
// record in *out or an error. The calling thread's device is kept.
static int async_make(int device, cti_async_record **out) {
  int prev = 0;
  CT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != device) CT_CUDA_CHECK(cudaSetDevice(device));
  void *p = NULL;
  cudaStream_t cs = async_streams[device];
  cudaError_t e = cs ? cudaSuccess : cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  const char *call = "cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking)";
  if (e == cudaSuccess) {
    async_streams[device] = cs;
    e = cudaMalloc(&p, sizeof(cti_async_record));
    call = "cudaMalloc(&p, sizeof(cti_async_record))";
  }
  if (e == cudaSuccess) {
    // Zeroed before any kernel can see it: kernels on non-blocking streams
    // do not wait for the legacy stream, so wait here (once per device).
    e = cudaMemset(p, 0, sizeof(cti_async_record));
    call = "cudaMemset(p, 0, sizeof(cti_async_record))";
    if (e == cudaSuccess) {
      e = cudaDeviceSynchronize();
      call = "cudaDeviceSynchronize()";
    }
    if (e != cudaSuccess) (void)cudaFree(p);
  } else {
    p = NULL;
  }
  if (prev != device) (void)cudaSetDevice(prev);
  if (e != cudaSuccess) return ct_cuda_fail((int)e, call, __FILE__, __LINE__);
  *out = static_cast<cti_async_record *>(p);
  return CT_OK;
}

extern "C" cti_async_record *cti_cuda_async_record(int device) {
  if (device < 0 || device >= CT_MAX_CUDA_DEVICES) {
    ct_fail(CT_ERR_DEVICE, "cti_cuda_async_record: invalid CUDA device index %d", device);
    return NULL;
  }
  cti_async_record *r = __atomic_load_n(&async_records[device], __ATOMIC_ACQUIRE);
  if (r) return r;
  pthread_mutex_lock(&async_mu);
  r = async_records[device];
  if (!r && async_make(device, &r) == CT_OK) __atomic_store_n(&async_records[device], r, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&async_mu);
  return r;
}

extern "C" int cti_cuda_async_check(int device, const char *op) {
  if (device < 0 || device >= CT_MAX_CUDA_DEVICES) return CT_OK;
  cti_async_record *r = __atomic_load_n(&async_records[device], __ATOMIC_ACQUIRE);
  if (!r) return CT_OK; // no kernel on this device has ever been given the record
  cudaStream_t s = async_streams[device]; // set before the record was published
  cti_async_record h;
  memset(&h, 0, sizeof h);
  CT_CUDA_CHECK(cudaMemcpyAsync(&h, r, sizeof h, cudaMemcpyDeviceToHost, s));
  CT_CUDA_CHECK(cudaStreamSynchronize(s));
  if (h.code == CT_ASYNC_NONE) return CT_OK;
  CT_CUDA_CHECK(cudaMemsetAsync(r, 0, sizeof *r, s));
  CT_CUDA_CHECK(cudaStreamSynchronize(s));
  switch (h.code) {
  case CT_ASYNC_TARGET_OUT_OF_BOUNDS:
    return ct_fail(CT_ERR_VALUE,
                   "ct_cross_entropy_loss: Target %lld is out of bounds. (row %lld, %lld classes; "
                   "found on cuda:%d by the kernel and reported at %s: a CUDA kernel's error surfaces "
                   "at the next call that waits for the device, so call ct_cuda_synchronize right "
                   "after the loss to find the step)",
                   h.b, h.a, h.c, device, op);
  case CT_ASYNC_INDEX_OUT_OF_RANGE:
    return ct_fail(CT_ERR_VALUE,
                   "Embedding: index out of range in self (index %lld at position %lld, "
                   "num_embeddings %lld; found on cuda:%d by the kernel and reported at %s)",
                   h.b, h.a, h.c, device, op);
  case CT_ASYNC_LM_TARGET_OUT_OF_BOUNDS:
    return ct_fail(CT_ERR_VALUE,
                   "ct_cross_entropy: Target %lld is out of bounds. (row %lld, %lld classes; found "
                   "on cuda:%d by the kernel and reported at %s)",
                   h.b, h.a, h.c, device, op);
  default:
    return ct_fail(CT_ERR_CUDA, "%s: a kernel on cuda:%d reported error code %lld", op, device, h.code);
  }
}
