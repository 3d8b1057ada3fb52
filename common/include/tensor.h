// SPDX-License-Identifier: MIT
//
// tensor: a typed, shaped, strided view of refcounted storage on a device.
//
// Invariants:
//  - strides are in ELEMENTS, not bytes (as torch.Tensor.stride() reports);
//  - a tensor handle is refcounted: every function that returns a tensor
//    returns a new reference the caller owns and drops with ct_free();
//    ct_retain() adds one. A function that may hand back its input (ct_to
//    with nothing to do, ct_contiguous of a contiguous tensor) returns a new
//    reference to the same handle, as PyTorch returns `self`;
//  - views (ct_transpose, ct_narrow, ct_reshape of a contiguous tensor) share
//    the storage; the storage is freed when its last tensor is freed, and then
//    its block goes back to the device's caching allocator (see alloc.h);
//  - functions take `const ct_tensor *` when they do not change the tensor's
//    values; in-place functions end in an underscore (ct_fill_, ct_copy_).
#ifndef CT_TENSOR_H
#define CT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_MAX_DIMS 8

typedef struct ct_shape {
  int ndim;
  int64_t d[CT_MAX_DIMS];
} ct_shape;

// CT_SHAPE(2, 3) is the shape (2, 3); CT_SCALAR_SHAPE is the 0-d shape ().
#define CT_SHAPE(...)                                                        \
  ((ct_shape){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),     \
              {__VA_ARGS__}})
#define CT_SCALAR_SHAPE ((ct_shape){0, {0}})

typedef struct ct_tensor ct_tensor; // opaque

// ---- creation (enters with a shape; leaves with a new tensor or NULL) -----
ct_tensor *ct_empty(ct_shape shape, ct_dtype dtype, ct_device device);
ct_tensor *ct_zeros(ct_shape shape, ct_dtype dtype, ct_device device);
ct_tensor *ct_ones(ct_shape shape, ct_dtype dtype, ct_device device);
ct_tensor *ct_full(ct_shape shape, double value, ct_dtype dtype, ct_device device);
// [start, end) by step, like torch.arange; 1-d.
ct_tensor *ct_arange(double start, double end, double step, ct_dtype dtype, ct_device device);
// Uniform [0, 1) and standard normal from the device's Philox generator
// (random.h): the same seed gives the same numbers on every device.
ct_tensor *ct_rand(ct_shape shape, ct_dtype dtype, ct_device device);
ct_tensor *ct_randn(ct_shape shape, ct_dtype dtype, ct_device device);
// Copies `data` (host memory, contiguous, elements of `dtype`) to a new tensor.
ct_tensor *ct_from_host(const void *data, ct_shape shape, ct_dtype dtype, ct_device device);
// *_like: same shape; dtype and device as given (pass ct_dtype_of(t) and
// ct_device_of(t) to keep them), like torch.ones_like(x, device=...).
ct_tensor *ct_empty_like(const ct_tensor *t, ct_dtype dtype, ct_device device);
ct_tensor *ct_zeros_like(const ct_tensor *t, ct_dtype dtype, ct_device device);
ct_tensor *ct_ones_like(const ct_tensor *t, ct_dtype dtype, ct_device device);

ct_tensor *ct_retain(ct_tensor *t);
void ct_free(ct_tensor *t); // drops one reference; NULL is fine

// ---- facts ---------------------------------------------------------------
int ct_ndim(const ct_tensor *t);
ct_shape ct_shape_of(const ct_tensor *t);
int64_t ct_size(const ct_tensor *t, int dim);   // dim may be negative
int64_t ct_stride(const ct_tensor *t, int dim); // in elements
int64_t ct_numel(const ct_tensor *t);
int64_t ct_storage_offset(const ct_tensor *t);  // in elements
ct_dtype ct_dtype_of(const ct_tensor *t);
ct_device ct_device_of(const ct_tensor *t);
int ct_get_device(const ct_tensor *t); // CUDA index, -1 on the CPU (torch's get_device)
bool ct_is_contiguous(const ct_tensor *t);
bool ct_is_pinned(const ct_tensor *t);
size_t ct_nbytes(const ct_tensor *t); // numel * element size
// Address of element 0 (storage + offset) on the tensor's device.
void *ct_data_ptr(const ct_tensor *t);
int64_t ct_shape_numel(ct_shape s); // the product of the sizes; -1 where it overflows int64
bool ct_shape_eq(ct_shape a, ct_shape b);
// "(2, 3)" into buf; returns buf.
const char *ct_shape_str(ct_shape s, char *buf, size_t len);

// ---- views (share storage) ------------------------------------------------
ct_tensor *ct_transpose(const ct_tensor *t, int dim0, int dim1);
ct_tensor *ct_t(const ct_tensor *t); // 2-d transpose
ct_tensor *ct_permute(const ct_tensor *t, const int *dims);
ct_tensor *ct_narrow(const ct_tensor *t, int dim, int64_t start, int64_t length);
ct_tensor *ct_select(const ct_tensor *t, int dim, int64_t index); // drops dim
ct_tensor *ct_unsqueeze(const ct_tensor *t, int dim);
ct_tensor *ct_squeeze(const ct_tensor *t, int dim);
// A view where possible (contiguous input), else a contiguous copy; one
// entry of `shape` may be -1 (inferred).
ct_tensor *ct_reshape(const ct_tensor *t, ct_shape shape);
// Broadcast view to `shape` (stride 0 on expanded dims), like Tensor.expand.
ct_tensor *ct_expand(const ct_tensor *t, ct_shape shape);

// ---- copies ----------------------------------------------------------------
// Same tensor if already contiguous (new reference), else a contiguous copy.
ct_tensor *ct_contiguous(const ct_tensor *t);
ct_tensor *ct_clone(const ct_tensor *t);
// x.to(device, dtype, non_blocking). Nothing to do: returns a new reference
// to `t`. non_blocking copies run on the current stream without waiting when
// the host side is pinned (a device->host non_blocking copy lands in new
// pinned memory, as in PyTorch); read the result only after synchronizing.
ct_tensor *ct_to(const ct_tensor *t, ct_device device, ct_dtype dtype, bool non_blocking);
ct_tensor *ct_to_device(const ct_tensor *t, ct_device device);
ct_tensor *ct_to_dtype(const ct_tensor *t, ct_dtype dtype);
ct_tensor *ct_cpu(const ct_tensor *t);             // x.cpu()
ct_tensor *ct_cuda(const ct_tensor *t, int index); // x.cuda(index); -1 = current
// dst[...] = src, broadcasting src to dst's shape, casting, across devices.
int ct_copy_(ct_tensor *dst, const ct_tensor *src, bool non_blocking);
int ct_fill_(ct_tensor *t, double value);
int ct_zero_(ct_tensor *t);
// A copy in page-locked (pinned) host memory; fails with CT_ERR_UNAVAILABLE
// where there is no CUDA, as torch does.
ct_tensor *ct_pin_memory(const ct_tensor *t);

// t.record_stream(s): t's memory is being used on stream s as well as on the
// stream it was allocated for, so when its storage is freed the allocator
// waits (without blocking the host) until the work queued on s by then has
// finished before handing the memory out again. For device memory the event
// is recorded at free time (PyTorch's CUDACachingAllocator); for a pinned
// host tensor at this call, after the copy just issued on s (PyTorch's host
// allocator); plain host memory needs nothing. See alloc.h for the rule.
struct ct_stream;
int ct_record_stream(const ct_tensor *t, struct ct_stream *s);

// Copies the tensor's elements, in row-major order and its own dtype, into
// host memory `dst` of `dst_bytes` bytes (must be >= ct_nbytes). Waits for
// the copy.
int ct_copy_to_host(const ct_tensor *t, void *dst, size_t dst_bytes);
// The value of a one-element tensor, like Tensor.item().
int ct_item(const ct_tensor *t, double *out);

#ifdef __cplusplus
}
#endif
#endif
