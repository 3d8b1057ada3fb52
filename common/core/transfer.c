// SPDX-License-Identifier: MIT
//
// transfer: cti_memcpy, the one place bytes cross between devices.
//
// Invariant: a copy that involves a GPU is issued on one CUDA stream of a
// device that takes part in it (the caller's `s`, or else the current stream
// of the CUDA side; for GPU->GPU the source's, as PyTorch does), with that
// device current while the call is made, and the thread's current device is
// restored afterwards. Unless non_blocking, cti_memcpy returns only when the
// bytes have arrived. The CPU side is plain host memory, pinned or not (a
// non_blocking copy overlaps with the host only when it is pinned; CUDA
// stages pageable memory itself).
//
// GPU->GPU across two devices with no stream given follows
// torch's copy_device_to_device: the source's current stream first waits for
// the destination's current stream (earlier work may still read or write the
// destination), the copy runs on the source's stream with
// cudaMemcpyPeerAsync, and the destination's stream then waits for it, so
// work queued on either device afterwards sees the bytes.
#include <string.h>

#include "alloc.h"
#include "backend.h"
#include "error.h"
#include "observe.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "async_error.h"
#include "cuda_check.h"
#endif

// CT_OK when d is the CPU or a usable CUDA device; else records why.
static int check_device(ct_device d) {
  char buf[CT_DEVICE_STR_MAX];
  if (d.type == CT_CPU) return CT_OK;
  if (d.type != CT_CUDA) return ct_fail(CT_ERR_DEVICE, "cti_memcpy: unknown device type %d", (int)d.type);
  if (!ct_cuda_is_available())
    return ct_fail(CT_ERR_UNAVAILABLE, "cti_memcpy: %s asked for, but CUDA is unavailable: %s",
                   ct_device_str(d, buf), ct_cuda_unavailable_reason());
  int n = ct_cuda_device_count();
  if (d.index < 0 || d.index >= n)
    return ct_fail(CT_ERR_DEVICE, "cti_memcpy: CUDA device index %d out of range (%d device%s)", d.index,
                   n, n == 1 ? "" : "s");
  return CT_OK;
}

#ifdef CT_HAVE_CUDA
// Issues one copy on stream s (a stream of device s_dev) with s_dev current,
// then waits for it unless non_blocking. Enters with any current device;
// leaves with the same one.
static int issue(ct_device dst_dev, void *dst, ct_device src_dev, const void *src, size_t nbytes,
                 bool non_blocking, ct_stream *s) {
  int dev = ct_stream_device(s).index;
  int prev = 0;
  CT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != dev) CT_CUDA_CHECK(cudaSetDevice(dev));
  cudaStream_t h = (cudaStream_t)ct_stream_handle(s);
  cudaError_t e;
  const char *call;
  if (dst_dev.type == CT_CUDA && src_dev.type == CT_CUDA && dst_dev.index != src_dev.index) {
    call = "cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, nbytes, s)";
    e = cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, h);
  } else {
    enum cudaMemcpyKind kind = dst_dev.type == CT_CPU   ? cudaMemcpyDeviceToHost
                               : src_dev.type == CT_CPU ? cudaMemcpyHostToDevice
                                                        : cudaMemcpyDeviceToDevice;
    call = "cudaMemcpyAsync(dst, src, nbytes, kind, s)";
    e = cudaMemcpyAsync(dst, src, nbytes, kind, h);
  }
  if (e == cudaSuccess && !non_blocking) {
    call = "cudaStreamSynchronize(s)";
    e = cudaStreamSynchronize(h);
  }
  int rc = e == cudaSuccess ? CT_OK : ct_cuda_fail((int)e, call, __FILE__, __LINE__);
  // A copy still in flight from or to pinned memory: the pinned block must
  // not be handed out again before it lands (alloc.h, pinned host memory).
  const void *host = dst_dev.type == CT_CPU ? dst : src_dev.type == CT_CPU ? src : NULL;
  if (rc == CT_OK && non_blocking && host && ct_pinned_contains(host))
    rc = ct_pinned_record_stream((void *)host, s);
  // A copy to the host has waited for the stream: a kernel's deferred error
  // (async_error.h) surfaces here.
  if (rc == CT_OK && !non_blocking && dst_dev.type == CT_CPU)
    rc = cti_cuda_async_check(dev, "a copy to the host (ct_item, ct_copy_to_host, ct_to)");
  if (prev != dev) (void)cudaSetDevice(prev);
  return rc;
}
#endif

int cti_memcpy(ct_device dst_dev, void *dst, ct_device src_dev, const void *src, size_t nbytes,
              bool non_blocking, ct_stream *s) {
  int rc = check_device(dst_dev);
  if (rc == CT_OK) rc = check_device(src_dev);
  if (rc == CT_OK) rc = cti_observe_copy(dst_dev, src_dev, non_blocking); // a capture's copy rule
  if (rc) return rc;
  if (nbytes == 0) return CT_OK;
  if (!dst || !src)
    return ct_fail(CT_ERR_VALUE, "cti_memcpy: NULL %s pointer for a copy of %zu bytes",
                   dst ? "source" : "destination", nbytes);

  if (dst_dev.type == CT_CPU && src_dev.type == CT_CPU) {
    memcpy(dst, src, nbytes); // the CPU runs work when issued, whatever s is
    return CT_OK;
  }

#ifdef CT_HAVE_CUDA
  if (s) {
    // The caller's stream must belong to a GPU taking part in the copy.
    ct_device sd = ct_stream_device(s);
    bool ok = sd.type == CT_CUDA && (ct_device_eq(sd, dst_dev) || ct_device_eq(sd, src_dev));
    if (!ok) {
      char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX], c[CT_DEVICE_STR_MAX];
      return ct_fail(CT_ERR_DEVICE,
                     "cti_memcpy: the stream is on %s, but the copy is from %s to %s; pass a stream "
                     "of a CUDA device taking part, or NULL",
                     ct_device_str(sd, a), ct_device_str(src_dev, b), ct_device_str(dst_dev, c));
    }
    return issue(dst_dev, dst, src_dev, src, nbytes, non_blocking, s);
  }

  bool cross = dst_dev.type == CT_CUDA && src_dev.type == CT_CUDA && dst_dev.index != src_dev.index;
  ct_device side = src_dev.type == CT_CUDA ? src_dev : dst_dev; // the source's GPU when both are
  ct_stream *stream = ct_current_stream(side);
  if (!stream) return ct_last_status();
  if (!cross) return issue(dst_dev, dst, src_dev, src, nbytes, non_blocking, stream);

  ct_stream *dst_stream = ct_current_stream(dst_dev);
  if (!dst_stream) return ct_last_status();
  rc = ct_stream_wait_stream(stream, dst_stream);
  if (rc == CT_OK) rc = issue(dst_dev, dst, src_dev, src, nbytes, non_blocking, stream);
  if (rc == CT_OK) rc = ct_stream_wait_stream(dst_stream, stream);
  return rc;
#else
  (void)non_blocking;
  (void)s;
  return ct_fail(CT_ERR_UNAVAILABLE, "cti_memcpy: CUDA is unavailable: %s", ct_cuda_unavailable_reason());
#endif
}
