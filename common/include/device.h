// SPDX-License-Identifier: MIT
//
// device: where a tensor lives, and what the machine's GPUs are.
//
// A ct_device is a small value: {CT_CPU, -1} or {CT_CUDA, index}. The
// "cuda" string without an index means the current CUDA device, resolved when
// parsed. The ct_cuda_* queries mirror torch.cuda; on a machine without a GPU
// or driver they answer "not available" (0, false, an error with CUDA's own
// reason such as cudaErrorInsufficientDriver), never crash and print nothing.
#ifndef CT_DEVICE_H
#define CT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_device_type { CT_CPU = 0, CT_CUDA = 1 } ct_device_type;

typedef struct ct_device {
  ct_device_type type;
  int index; // -1 for the CPU, >= 0 for CUDA
} ct_device;

#define CT_MAX_CUDA_DEVICES 16
#define CT_DEVICE_STR_MAX 16

ct_device ct_device_cpu(void);
ct_device ct_device_cuda(int index);
bool ct_device_eq(ct_device a, ct_device b);
// "cpu" | "cuda" | "cuda:N". "cuda" picks the current device. Fails with
// CT_ERR_VALUE for bad text, CT_ERR_UNAVAILABLE when CUDA is asked for and
// absent, CT_ERR_DEVICE for an index past the device count.
int ct_device_parse(const char *s, ct_device *out);
// Writes "cpu" or "cuda:N" into buf (CT_DEVICE_STR_MAX bytes) and returns buf.
const char *ct_device_str(ct_device d, char *buf);

// Picks a device for a chapter's --device flag: "auto" means the current GPU
// when CUDA is available, else the CPU; then `why` (may be NULL) receives the
// reason the CPU was chosen, e.g. "CUDA unavailable: CUDA driver version is
// insufficient for CUDA runtime version", or "" when a GPU was picked.
int ct_device_select(const char *spec, ct_device *out, char *why, size_t why_len);

// ---- torch.cuda ----------------------------------------------------------
bool ct_cuda_is_available(void);
// Why CUDA is unavailable, e.g. "cudaErrorInsufficientDriver: CUDA driver
// version is insufficient for CUDA runtime version", "built without CUDA";
// "" when it is available.
const char *ct_cuda_unavailable_reason(void);
int ct_cuda_device_count(void); // 0 when unavailable
int ct_cuda_current_device(void); // -1 when unavailable
int ct_cuda_set_device(int index); // ct_status
// Writes the device's name into buf; returns CT_OK or an error.
int ct_cuda_get_device_name(int index, char *buf, size_t len);

typedef struct ct_cuda_device_properties {
  char name[256];
  int major, minor;               // compute capability
  size_t total_memory;            // bytes
  int multi_processor_count;
  int clock_rate_khz;             // SM clock
  int memory_clock_rate_khz;
  int memory_bus_width_bits;
  int l2_cache_size;              // bytes
  int max_threads_per_block;
  int max_threads_per_multiprocessor;
  size_t shared_memory_per_block; // bytes (default limit)
  size_t shared_memory_per_multiprocessor;
  int regs_per_multiprocessor;
  int warp_size;
  int pci_bus_id;
  bool ecc_enabled;
  // 2 * memory clock * bus width / 8: double data rate, in GB/s (1e9 B/s).
  double peak_memory_bandwidth_gbs;
  // FP32 peak from SM count, clock and the FP32 lanes per SM of this
  // compute capability, in GFLOP/s; 0 if the capability is unknown.
  double peak_fp32_gflops;
  int fp32_lanes_per_sm;
} ct_cuda_device_properties;

int ct_cuda_get_device_properties(int index, ct_cuda_device_properties *out);

// Versions as CUDA encodes them (12040 = 12.4); 0 when unknown.
int ct_cuda_runtime_version(void);
int ct_cuda_driver_version(void);
int ct_cublas_version(void);
int ct_cuda_synchronize(int index); // waits for all work on the device

#ifdef __cplusplus
}
#endif
#endif
