// SPDX-License-Identifier: MIT
//
// device: device values, their text form, and the torch.cuda queries.
//
// Invariant: whether CUDA is usable is decided once per process, by the first
// query that needs it (pthread_once, so threads may race to ask). The answer
// and, when it is "no", CUDA's own reason are kept and never change: a
// machine without a driver answers every later query with the same "not
// available" and the same words, and nothing here prints or aborts.
//
// The probe is cudaGetDeviceCount. When it fails (no driver, a driver older
// than the runtime, no device, CUDA_VISIBLE_DEVICES=""), its error is
// remembered as "<cudaGetErrorName>: <cudaGetErrorString>" and cleared with
// cudaGetLastError() so that it does not stick to the thread's next CUDA call.
//
// Properties: CUDA 13 removed cudaDeviceProp.clockRate and memoryClockRate,
// so the clocks, bus width, L2 size and the per-SM limits are read with
// cudaDeviceGetAttribute, which every CUDA version since 5 has; only the name
// and total memory come from cudaGetDeviceProperties.
#include "device.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "sync_point.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "async_error.h"
#include "cuda_check.h"
#include "backend.h" // cti_cublas_get_version (gemm.cu)
#endif

// ---- the availability probe ----------------------------------------------------

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_count;           // devices usable by this process (0..CT_MAX_CUDA_DEVICES)
static char probe_reason[256];    // "<name>: <description>", "" when available
static char probe_description[256]; // the description alone, for "CUDA unavailable: ..."

static void probe(void) {
#ifdef CT_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(probe_reason, sizeof probe_reason, "%s: %s", cudaGetErrorName(e),
             cudaGetErrorString(e));
    snprintf(probe_description, sizeof probe_description, "%s", cudaGetErrorString(e));
    (void)cudaGetLastError(); // clear the (possibly sticky) error
    n = 0;
  } else if (n <= 0) {
    snprintf(probe_reason, sizeof probe_reason, "cudaGetDeviceCount found no CUDA device");
    snprintf(probe_description, sizeof probe_description, "no CUDA device found");
    n = 0;
  }
  // Devices past CT_MAX_CUDA_DEVICES are not addressable by this runtime.
  probe_count = n > CT_MAX_CUDA_DEVICES ? CT_MAX_CUDA_DEVICES : n;
#else
  probe_count = 0;
  snprintf(probe_reason, sizeof probe_reason,
           "this build has no CUDA backend (configured without nvcc)");
  snprintf(probe_description, sizeof probe_description, "%s", probe_reason);
#endif
}

static void probe_run(void) { (void)pthread_once(&probe_once, probe); }

bool ct_cuda_is_available(void) {
  probe_run();
  return probe_count > 0;
}

const char *ct_cuda_unavailable_reason(void) {
  probe_run();
  return probe_reason;
}

int ct_cuda_device_count(void) {
  probe_run();
  return probe_count;
}

// CT_OK when `index` names a usable CUDA device; otherwise records why
// (CT_ERR_UNAVAILABLE without CUDA, CT_ERR_DEVICE for a bad index) under `op`.
static int check_cuda_index(const char *op, int index) {
  probe_run();
  if (probe_count == 0)
    return ct_fail(CT_ERR_UNAVAILABLE, "%s: CUDA device %d asked for, but CUDA is unavailable: %s",
                   op, index, probe_reason);
  if (index < 0 || index >= probe_count)
    return ct_fail(CT_ERR_DEVICE, "%s: CUDA device index %d out of range (%d device%s)", op, index,
                   probe_count, probe_count == 1 ? "" : "s");
  return CT_OK;
}

// ---- device values -----------------------------------------------------------------

ct_device ct_device_cpu(void) { return (ct_device){CT_CPU, -1}; }
ct_device ct_device_cuda(int index) { return (ct_device){CT_CUDA, index}; }

bool ct_device_eq(ct_device a, ct_device b) {
  if (a.type != b.type) return false;
  return a.type == CT_CPU || a.index == b.index; // every CPU is the CPU
}

const char *ct_device_str(ct_device d, char *buf) {
  if (!buf) return "";
  if (d.type == CT_CPU)
    snprintf(buf, CT_DEVICE_STR_MAX, "cpu");
  else if (d.type == CT_CUDA)
    snprintf(buf, CT_DEVICE_STR_MAX, "cuda:%d", d.index);
  else
    snprintf(buf, CT_DEVICE_STR_MAX, "unknown");
  return buf;
}

// Parses the N of "cuda:N": 1 to 9 decimal digits, no sign, no leading zero
// (as c10::Device rejects "cuda:01"), nothing after. Enters with the text
// after the colon; leaves with *index set and true, or false.
static bool parse_index(const char *s, int *index) {
  size_t n = strlen(s);
  if (n == 0 || n > 9) return false;
  if (n > 1 && s[0] == '0') return false;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *index = v;
  return true;
}

int ct_device_parse(const char *s, ct_device *out) {
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_device_parse: out is NULL");
  if (!s)
    return ct_fail(CT_ERR_VALUE,
                   "ct_device_parse: expected a device string \"cpu\", \"cuda\" or \"cuda:N\", got NULL");
  if (strcmp(s, "cpu") == 0) {
    *out = ct_device_cpu();
    return CT_OK;
  }
  int index = -1; // -1: "cuda", the current device
  bool ok = strcmp(s, "cuda") == 0 || (strncmp(s, "cuda:", 5) == 0 && parse_index(s + 5, &index));
  if (!ok)
    return ct_fail(CT_ERR_VALUE,
                   "ct_device_parse: expected a device string \"cpu\", \"cuda\" or \"cuda:N\", got \"%s\"",
                   s);
  probe_run();
  if (probe_count == 0)
    return ct_fail(CT_ERR_UNAVAILABLE, "ct_device_parse: \"%s\" asked for, but CUDA is unavailable: %s",
                   s, probe_reason);
  if (index < 0) {
    index = ct_cuda_current_device();
    if (index < 0) return ct_fail(CT_ERR_CUDA, "ct_device_parse: could not read the current CUDA device");
  }
  if (index >= probe_count)
    return ct_fail(CT_ERR_DEVICE, "ct_device_parse: CUDA device index %d out of range (%d device%s)",
                   index, probe_count, probe_count == 1 ? "" : "s");
  *out = ct_device_cuda(index);
  return CT_OK;
}

int ct_device_select(const char *spec, ct_device *out, char *why, size_t why_len) {
  if (why && why_len > 0) why[0] = '\0';
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_device_select: out is NULL");
  if (spec && strcmp(spec, "auto") != 0) return ct_device_parse(spec, out);
  // "auto" (or NULL): the current GPU if there is one, else the CPU.
  if (ct_cuda_is_available()) {
    int index = ct_cuda_current_device();
    *out = ct_device_cuda(index < 0 ? 0 : index);
    return CT_OK;
  }
  *out = ct_device_cpu();
  if (why && why_len > 0) snprintf(why, why_len, "CUDA unavailable: %s", probe_description);
  return CT_OK;
}

// ---- torch.cuda queries ---------------------------------------------------------------

int ct_cuda_current_device(void) {
  if (!ct_cuda_is_available()) return -1;
#ifdef CT_HAVE_CUDA
  int index = -1;
  if (cudaGetDevice(&index) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return index;
#else
  return -1;
#endif
}

int ct_cuda_set_device(int index) {
  int rc = check_cuda_index("ct_cuda_set_device", index);
  if (rc) return rc;
#ifdef CT_HAVE_CUDA
  CT_CUDA_CHECK(cudaSetDevice(index)); // for the calling thread only
#endif
  return CT_OK;
}

int ct_cuda_get_device_name(int index, char *buf, size_t len) {
  if (!buf || len == 0) return ct_fail(CT_ERR_VALUE, "ct_cuda_get_device_name: buf is NULL or len is 0");
  buf[0] = '\0';
  int rc = check_cuda_index("ct_cuda_get_device_name", index);
  if (rc) return rc;
#ifdef CT_HAVE_CUDA
  struct cudaDeviceProp p;
  CT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  snprintf(buf, len, "%s", p.name);
#endif
  return CT_OK;
}

#ifdef CT_HAVE_CUDA
// FP32 lanes (CUDA cores) per SM, from the CUDA C Programming Guide's table of
// arithmetic throughput per compute capability; 0 when not known here.
static int fp32_lanes(int major, int minor) {
  switch (major) {
  case 7: return 64;                     // Volta 7.0, Turing 7.5 (7.2 Xavier too)
  case 8: return minor == 0 ? 64 : 128;  // A100 8.0: 64; GA10x 8.6, Orin 8.7, Ada 8.9: 128
  case 9: return 128;                    // Hopper 9.0
  case 10: case 11: case 12: return 128; // Blackwell (11.0 is Thor under CUDA 13)
  default: return 0;
  }
}
#endif

int ct_cuda_get_device_properties(int index, ct_cuda_device_properties *out) {
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_cuda_get_device_properties: out is NULL");
  memset(out, 0, sizeof *out);
  int rc = check_cuda_index("ct_cuda_get_device_properties", index);
  if (rc) return rc;
#ifdef CT_HAVE_CUDA
  struct cudaDeviceProp p;
  CT_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  snprintf(out->name, sizeof out->name, "%s", p.name);
  out->total_memory = p.totalGlobalMem;

  int v = 0;
#define CT_ATTR(field, attr)                                   \
  do {                                                         \
    CT_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, index));    \
    out->field = v;                                            \
  } while (0)
  CT_ATTR(major, cudaDevAttrComputeCapabilityMajor);
  CT_ATTR(minor, cudaDevAttrComputeCapabilityMinor);
  CT_ATTR(multi_processor_count, cudaDevAttrMultiProcessorCount);
  CT_ATTR(clock_rate_khz, cudaDevAttrClockRate);
  CT_ATTR(memory_clock_rate_khz, cudaDevAttrMemoryClockRate);
  CT_ATTR(memory_bus_width_bits, cudaDevAttrGlobalMemoryBusWidth);
  CT_ATTR(l2_cache_size, cudaDevAttrL2CacheSize);
  CT_ATTR(max_threads_per_block, cudaDevAttrMaxThreadsPerBlock);
  CT_ATTR(max_threads_per_multiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor);
  CT_ATTR(shared_memory_per_block, cudaDevAttrMaxSharedMemoryPerBlock);
  CT_ATTR(shared_memory_per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  CT_ATTR(regs_per_multiprocessor, cudaDevAttrMaxRegistersPerMultiprocessor);
  CT_ATTR(warp_size, cudaDevAttrWarpSize);
  CT_ATTR(pci_bus_id, cudaDevAttrPciBusId);
  CT_ATTR(ecc_enabled, cudaDevAttrEccEnabled);
#undef CT_ATTR

  // Double data rate: two transfers per memory clock, bus_width/8 bytes each.
  out->peak_memory_bandwidth_gbs =
      2.0 * (double)out->memory_clock_rate_khz * 1e3 * (out->memory_bus_width_bits / 8.0) / 1e9;
  out->fp32_lanes_per_sm = fp32_lanes(out->major, out->minor);
  // One FMA = 2 flops per lane per clock.
  out->peak_fp32_gflops = 2.0 * out->fp32_lanes_per_sm * out->multi_processor_count *
                          ((double)out->clock_rate_khz * 1e3) / 1e9;
#endif
  return CT_OK;
}

int ct_cuda_runtime_version(void) {
#ifdef CT_HAVE_CUDA
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
#else
  return 0;
#endif
}

int ct_cuda_driver_version(void) {
#ifdef CT_HAVE_CUDA
  int v = 0; // cudaDriverGetVersion gives 0 when no driver is installed
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
#else
  return 0;
#endif
}

int ct_cublas_version(void) {
#ifdef CT_HAVE_CUDA
  int v = 0;
  if (cti_cublas_get_version(&v) != 0) return 0;
  return v;
#else
  return 0;
#endif
}

int ct_cuda_synchronize(int index) {
  int rc = check_cuda_index("ct_cuda_synchronize", index);
  // A wait written on purpose: refused during capture, not reported (sync_debug.h).
  if (rc == CT_OK) rc = cti_sync_begin("ct_cuda_synchronize", ct_device_cuda(index), CTI_SYNC_REFUSE_IN_CAPTURE);
  if (rc) return rc;
  cti_sync_end(); // nothing below is a sync point
#ifdef CT_HAVE_CUDA
  // Enters on the thread's current device; leaves on it again.
  int prev = 0;
  CT_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != index) CT_CUDA_CHECK(cudaSetDevice(index));
  cudaError_t e = cudaDeviceSynchronize();
  // All work is done: a kernel's deferred error (async_error.h) surfaces here.
  rc = e == cudaSuccess ? cti_cuda_async_check(index, "ct_cuda_synchronize") : CT_OK;
  if (prev != index) (void)cudaSetDevice(prev);
  if (e != cudaSuccess) return ct_cuda_fail((int)e, "cudaDeviceSynchronize()", __FILE__, __LINE__);
  if (rc != CT_OK) return rc;
  cti_observe_host_waits_device(ct_device_cuda(index)); // every stream of the device is done
#endif
  return CT_OK;
}
