// SPDX-License-Identifier: MIT
//
// tensor: handles, storage, creation, views and copies between devices.
//
// Creation asks the device's caching allocator for a block (alloc.h), then a
// backend (backend.h) writes the values on the device itself: ct_zeros on a
// GPU never touches host memory. Moving between devices is cti_memcpy of a
// contiguous buffer; changing dtype is a backend copy on one device. Views
// never copy; functions that may copy say so.
#include "tensor_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "random.h"
#include "observe.h"
#include "stream.h"
#include "sync_point.h"

// ---- shapes ----------------------------------------------------------------
int64_t ct_shape_numel(ct_shape s) {
  int64_t n = 1;
  for (int i = s.ndim - 1; i >= 0; --i) // the order of the strides: each partial product must fit too
    if (__builtin_mul_overflow(n, s.d[i], &n)) return -1;
  return n;
}

bool ct_shape_eq(ct_shape a, ct_shape b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.d[i] != b.d[i]) return false;
  return true;
}

const char *ct_shape_str(ct_shape s, char *buf, size_t len) {
  size_t used = 0;
  used += (size_t)snprintf(buf + used, len - used, "(");
  for (int i = 0; i < s.ndim && used < len; ++i)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", s.d[i]);
  if (s.ndim == 1 && used < len) used += (size_t)snprintf(buf + used, len - used, ",");
  if (used < len) snprintf(buf + used, len - used, ")");
  return buf;
}

int64_t cti_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    stride[i] = n;
    n *= shape[i];
  }
  return n;
}

int cti_wrap_dim(const char *op, int dim, int ndim) {
  int lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;
  if (dim < lo || dim > hi) {
    ct_fail(CT_ERR_VALUE,
            "%s: dimension out of range (expected to be in range of [%d, %d], but got %d)",
            op, lo, hi, dim);
    return -1;
  }
  return dim < 0 ? dim + (ndim > 0 ? ndim : 1) : dim;
}

// "[4, 5]": sizes as PyTorch's messages list them.
static const char *sizes_str(ct_shape s, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < s.ndim && used < len; ++i)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? ", " : "", s.d[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

// A shape storage can be made for, reported under the creator's name
// (ct_zeros, not ct_empty) in torch's words: 0 to CT_MAX_DIMS sizes, none
// negative (torch.zeros(2, -1) says "Trying to create tensor with negative
// dimension -1: [2, -1]"), and (as torch's storage size check) elements
// times `itemsize` bytes, with every stride on the way, inside int64.
static int check_shape(const char *op, ct_shape s, size_t itemsize) {
  char b[CT_MAX_DIMS * 24 + 4];
  if (s.ndim < 0 || s.ndim > CT_MAX_DIMS)
    return ct_fail(CT_ERR_SHAPE, "%s: a tensor has 0 to %d dims, got %d", op, CT_MAX_DIMS, s.ndim);
  for (int i = 0; i < s.ndim; ++i)
    if (s.d[i] < 0)
      return ct_fail(CT_ERR_VALUE, "%s: Trying to create tensor with negative dimension %" PRId64 ": %s", op,
                     s.d[i], sizes_str(s, b, sizeof b));
  int64_t n = ct_shape_numel(s), bytes;
  if (n < 0 || __builtin_mul_overflow(n, (int64_t)(itemsize ? itemsize : 1), &bytes)) {
    return ct_fail(CT_ERR_VALUE, "%s: Storage size calculation overflowed with sizes=%s (more than 2^63 - 1 "
                   "bytes; check the sizes)", op, sizes_str(s, b, sizeof b));
  }
  return CT_OK;
}

// ---- handles and storage ------------------------------------------------------
static void storage_release(cti_storage *st) {
  if (!st || __atomic_sub_fetch(&st->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (st->obs) cti_observe_storage_free(st); // the race checker checks alloc.h's rule 2 first
  if (st->pinned) ct_pinned_free(st->data);
  else if (st->block) ct_block_free(st->block);
  free(st);
}

int ct_record_stream(const ct_tensor *t, ct_stream *s) {
  if (!t || !s) return ct_fail(CT_ERR_VALUE, "ct_record_stream: tensor or stream is NULL");
  cti_storage *st = t->storage;
  if (st->pinned) return ct_pinned_record_stream(st->data, s);
  if (!st->block) return CT_OK; // memory the allocator does not own
  int rc = ct_block_record_stream(st->block, s);
  if (rc == CT_OK) cti_observe_record_stream(t, s);
  return rc;
}

ct_tensor *cti_tensor_new(ct_shape shape, ct_dtype dtype, ct_device device, bool pinned) {
  if (!ct_dtype_valid(dtype)) {
    ct_fail(CT_ERR_DTYPE, "ct_empty: invalid dtype %d", (int)dtype);
    return NULL;
  }
  if (check_shape("ct_empty", shape, ct_dtype_size(dtype))) return NULL;
  if (!cti_backend_for("ct_empty", device)) return NULL;
  cti_storage *st = calloc(1, sizeof *st);
  ct_tensor *t = calloc(1, sizeof *t);
  if (!st || !t) {
    free(st);
    free(t);
    ct_fail(CT_ERR_OOM, "ct_empty: out of host memory for a tensor handle");
    return NULL;
  }
  t->ndim = shape.ndim;
  memcpy(t->shape, shape.d, sizeof(int64_t) * (size_t)shape.ndim);
  int64_t n = cti_contiguous_strides(t->ndim, t->shape, t->stride);
  st->nbytes = (size_t)n * ct_dtype_size(dtype);
  st->device = device;
  st->refcount = 1;
  if (pinned) {
    st->data = ct_pinned_alloc(st->nbytes ? st->nbytes : 1);
    st->pinned = st->data != NULL;
  } else {
    st->block = ct_block_alloc(device, st->nbytes, NULL, NULL);
    if (st->block) st->data = ct_block_ptr(st->block);
  }
  if (!st->data) {
    // Keep the allocator's numbers, prefix the op a reader called.
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_status s = ct_last_status();
    ct_fail(s == CT_OK ? CT_ERR_OOM : s, "%s%s", strncmp(msg, "ct_", 3) ? "ct_empty: " : "", msg);
    free(st);
    free(t);
    return NULL;
  }
  t->storage = st;
  t->dtype = dtype;
  t->refcount = 1;
  if (!pinned) cti_observe_allocated(t, ct_current_stream(device)); // the block's stream (NULL above)
  return t;
}

// The sanitizer's view of an op that reads r and writes w on stream s
// (either may be NULL): CT_OK, or CT_ERR_RACE and the op must not run.
static int san(const char *op, ct_stream *s, const ct_tensor *r, const ct_tensor *w) {
  const ct_tensor *rs[1] = {r}, *ws[1] = {w};
  return cti_observe_access(op, s, rs, r ? 1 : 0, ws, w ? 1 : 0);
}

ct_tensor *cti_tensor_view(const ct_tensor *t, int ndim, const int64_t *shape,
                          const int64_t *stride, int64_t offset) {
  ct_tensor *v = calloc(1, sizeof *v);
  if (!v) {
    ct_fail(CT_ERR_OOM, "ct_view: out of host memory for a tensor handle");
    return NULL;
  }
  v->refcount = 1;
  v->storage = t->storage;
  __atomic_add_fetch(&t->storage->refcount, 1, __ATOMIC_RELAXED);
  v->offset = offset;
  v->ndim = ndim;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
  v->dtype = t->dtype;
  return v;
}

ct_tensor *ct_retain(ct_tensor *t) {
  if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
  return t;
}

void ct_free(ct_tensor *t) {
  if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  storage_release(t->storage);
  free(t);
}

// ---- facts -------------------------------------------------------------------
int ct_ndim(const ct_tensor *t) { return t->ndim; }
ct_shape ct_shape_of(const ct_tensor *t) {
  ct_shape s = {t->ndim, {0}};
  memcpy(s.d, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  return s;
}
int64_t ct_size(const ct_tensor *t, int dim) {
  int d = cti_wrap_dim("ct_size", dim, t->ndim);
  return d < 0 || t->ndim == 0 ? -1 : t->shape[d];
}
int64_t ct_stride(const ct_tensor *t, int dim) {
  int d = cti_wrap_dim("ct_stride", dim, t->ndim);
  return d < 0 || t->ndim == 0 ? -1 : t->stride[d];
}
int64_t ct_numel(const ct_tensor *t) { return ct_shape_numel(ct_shape_of(t)); }
int64_t ct_storage_offset(const ct_tensor *t) { return t->offset; }
ct_dtype ct_dtype_of(const ct_tensor *t) { return t->dtype; }
ct_device ct_device_of(const ct_tensor *t) { return t->storage->device; }
int ct_get_device(const ct_tensor *t) {
  return t->storage->device.type == CT_CUDA ? t->storage->device.index : -1;
}
bool ct_is_pinned(const ct_tensor *t) { return t->storage->pinned; }
size_t ct_nbytes(const ct_tensor *t) { return (size_t)ct_numel(t) * ct_dtype_size(t->dtype); }
void *ct_data_ptr(const ct_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)ct_dtype_size(t->dtype);
}

bool ct_is_contiguous(const ct_tensor *t) {
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] == 0) return true;
    if (t->shape[i] != 1 && t->stride[i] != expected) return false;
    expected *= t->shape[i];
  }
  return true;
}

// ---- creation -------------------------------------------------------------------
ct_tensor *ct_empty(ct_shape shape, ct_dtype dtype, ct_device device) {
  return cti_tensor_new(shape, dtype, device, false);
}

// One-operand loop over a whole contiguous tensor.
static void iter_1(cti_iter *it, const ct_tensor *t) {
  const int64_t *strides[3] = {t->stride, NULL, NULL};
  cti_iter_build(it, t->ndim, t->shape, 1, strides);
}

int ct_fill_(ct_tensor *t, double value) {
  if (!t) return ct_fail(CT_ERR_VALUE, "ct_fill_: NULL tensor");
  const cti_backend *be = cti_backend_for("ct_fill_", ct_device_of(t));
  if (!be) return ct_last_status();
  cti_iter it;
  iter_1(&it, t);
  if (it.numel == 0) return CT_OK;
  ct_stream *s = ct_current_stream(ct_device_of(t));
  int rc = san("ct_fill_", s, NULL, t);
  return rc ? rc : be->fill(t->dtype, &it, ct_data_ptr(t), value, s);
}

int ct_zero_(ct_tensor *t) { return ct_fill_(t, 0.0); }

// ct_full, ct_zeros and ct_ones: a bad shape or dtype is reported under the
// name the caller used, not ct_empty's.
static ct_tensor *full_named(const char *op, ct_shape shape, double value, ct_dtype dtype,
                             ct_device device) {
  if (!ct_dtype_valid(dtype)) {
    ct_fail(CT_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
    return NULL;
  }
  if (check_shape(op, shape, ct_dtype_size(dtype))) return NULL;
  ct_tensor *t = ct_empty(shape, dtype, device);
  if (t && ct_fill_(t, value) != CT_OK) {
    ct_free(t);
    return NULL;
  }
  return t;
}
ct_tensor *ct_full(ct_shape shape, double value, ct_dtype dtype, ct_device device) {
  return full_named("ct_full", shape, value, dtype, device);
}
ct_tensor *ct_zeros(ct_shape shape, ct_dtype dtype, ct_device device) {
  return full_named("ct_zeros", shape, 0.0, dtype, device);
}
ct_tensor *ct_ones(ct_shape shape, ct_dtype dtype, ct_device device) {
  return full_named("ct_ones", shape, 1.0, dtype, device);
}

ct_tensor *ct_arange(double start, double end, double step, ct_dtype dtype, ct_device device) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
    ct_fail(CT_ERR_VALUE, "ct_arange: step must be nonzero and bounds finite (start %g, end %g, step %g)",
            start, end, step);
    return NULL;
  }
  if ((step > 0 && end < start) || (step < 0 && end > start)) {
    ct_fail(CT_ERR_VALUE,
            "ct_arange: upper bound and larger bound inconsistent with step sign (start %g, end %g, step %g)",
            start, end, step);
    return NULL;
  }
  int64_t n = (int64_t)ceil((end - start) / step);
  ct_tensor *t = ct_empty(CT_SHAPE(n), dtype, device);
  if (!t || n == 0) return t;
  const cti_backend *be = cti_backend_for("ct_arange", device);
  ct_stream *s = ct_current_stream(device);
  if (!be || san("ct_arange", s, NULL, t) || be->arange(dtype, n, ct_data_ptr(t), start, step, s) != CT_OK) {
    ct_free(t);
    return NULL;
  }
  return t;
}

static ct_tensor *random_tensor(const char *op, bool normal, ct_shape shape, ct_dtype dtype,
                                ct_device device) {
  if (check_shape(op, shape, ct_dtype_size(dtype))) return NULL;
  if (!ct_dtype_is_floating(dtype)) {
    ct_fail(CT_ERR_DTYPE, "%s: expected a floating dtype, got %s", op, ct_dtype_name(dtype));
    return NULL;
  }
  ct_tensor *t = ct_empty(shape, dtype, device);
  if (!t) return NULL;
  int64_t n = ct_numel(t);
  if (n == 0) return t;
  uint64_t seed, offset;
  ct_philox_reserve(device, (uint64_t)(n + 3) / 4, &seed, &offset);
  const cti_backend *be = cti_backend_for(op, device);
  ct_stream *s = ct_current_stream(device);
  if (!be || san(op, s, NULL, t) || be->random(normal, dtype, n, ct_data_ptr(t), seed, offset, s) != CT_OK) {
    ct_free(t);
    return NULL;
  }
  return t;
}
ct_tensor *ct_rand(ct_shape shape, ct_dtype dtype, ct_device device) {
  return random_tensor("ct_rand", false, shape, dtype, device);
}
ct_tensor *ct_randn(ct_shape shape, ct_dtype dtype, ct_device device) {
  return random_tensor("ct_randn", true, shape, dtype, device);
}

ct_tensor *ct_from_host(const void *data, ct_shape shape, ct_dtype dtype, ct_device device) {
  if (!data) {
    ct_fail(CT_ERR_VALUE, "ct_from_host: NULL data");
    return NULL;
  }
  if (check_shape("ct_from_host", shape, ct_dtype_size(dtype))) return NULL;
  // A blocking copy from the caller's (pageable) memory: a sync point.
  if (!cti_backend_for("ct_from_host", device) || cti_sync_begin("ct_from_host", device, CTI_SYNC_REPORT)) return NULL;
  ct_tensor *t = ct_empty(shape, dtype, device);
  ct_stream *s = ct_current_stream(device); // the copy's, as cti_memcpy picks it
  if (t && (san("ct_from_host", s, NULL, t) ||
            cti_memcpy(device, ct_data_ptr(t), ct_device_cpu(), data, ct_nbytes(t), false, NULL) != CT_OK)) {
    ct_free(t);
    t = NULL;
  }
  if (t) cti_observe_host_waits(s);
  cti_sync_end();
  return t;
}

static bool like_ok(const char *op, const ct_tensor *t) {
  if (!t) ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);
  return t != NULL;
}
ct_tensor *ct_empty_like(const ct_tensor *t, ct_dtype dtype, ct_device device) {
  return like_ok("ct_empty_like", t) ? ct_empty(ct_shape_of(t), dtype, device) : NULL;
}
ct_tensor *ct_zeros_like(const ct_tensor *t, ct_dtype dtype, ct_device device) {
  return like_ok("ct_zeros_like", t) ? ct_zeros(ct_shape_of(t), dtype, device) : NULL;
}
ct_tensor *ct_ones_like(const ct_tensor *t, ct_dtype dtype, ct_device device) {
  return like_ok("ct_ones_like", t) ? ct_ones(ct_shape_of(t), dtype, device) : NULL;
}

// ---- views -------------------------------------------------------------------------
#define CHECK_T(op, t)                                                         \
  do {                                                                         \
    if (!(t)) {                                                                \
      ct_fail(CT_ERR_VALUE, "%s: NULL tensor", op);                            \
      return NULL;                                                             \
    }                                                                          \
  } while (0)

ct_tensor *ct_transpose(const ct_tensor *t, int dim0, int dim1) {
  CHECK_T("ct_transpose", t);
  if (t->ndim == 0 && (dim0 == 0 || dim0 == -1) && (dim1 == 0 || dim1 == -1))
    return ct_retain((ct_tensor *)t);
  int a = cti_wrap_dim("ct_transpose", dim0, t->ndim), b = cti_wrap_dim("ct_transpose", dim1, t->ndim);
  if (a < 0 || b < 0) return NULL;
  int64_t shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  memcpy(stride, t->stride, sizeof stride);
  shape[a] = t->shape[b], shape[b] = t->shape[a];
  stride[a] = t->stride[b], stride[b] = t->stride[a];
  return cti_tensor_view(t, t->ndim, shape, stride, t->offset);
}

ct_tensor *ct_t(const ct_tensor *t) {
  CHECK_T("ct_t", t);
  if (t->ndim > 2) {
    ct_fail(CT_ERR_SHAPE, "ct_t: expects a tensor with <= 2 dimensions, but self is %dD", t->ndim);
    return NULL;
  }
  return t->ndim < 2 ? ct_retain((ct_tensor *)t) : ct_transpose(t, 0, 1);
}

ct_tensor *ct_permute(const ct_tensor *t, const int *dims) {
  CHECK_T("ct_permute", t);
  int64_t shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  bool seen[CT_MAX_DIMS] = {false};
  for (int i = 0; i < t->ndim; ++i) {
    int d = cti_wrap_dim("ct_permute", dims[i], t->ndim);
    if (d < 0) return NULL;
    if (seen[d]) {
      ct_fail(CT_ERR_VALUE, "ct_permute: repeated dim %d in the permutation", dims[i]);
      return NULL;
    }
    seen[d] = true;
    shape[i] = t->shape[d];
    stride[i] = t->stride[d];
  }
  return cti_tensor_view(t, t->ndim, shape, stride, t->offset);
}

ct_tensor *ct_narrow(const ct_tensor *t, int dim, int64_t start, int64_t length) {
  CHECK_T("ct_narrow", t);
  if (t->ndim == 0) {
    ct_fail(CT_ERR_SHAPE, "ct_narrow: cannot be applied to a 0-dim tensor");
    return NULL;
  }
  int d = cti_wrap_dim("ct_narrow", dim, t->ndim);
  if (d < 0) return NULL;
  if (start < 0) start += t->shape[d];
  if (start < 0 || length < 0 || start + length > t->shape[d]) {
    ct_fail(CT_ERR_VALUE, "ct_narrow: start (%" PRId64 ") + length (%" PRId64
            ") exceeds dimension size (%" PRId64 ")", start, length, t->shape[d]);
    return NULL;
  }
  int64_t shape[CT_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[d] = length;
  return cti_tensor_view(t, t->ndim, shape, t->stride, t->offset + start * t->stride[d]);
}

ct_tensor *ct_select(const ct_tensor *t, int dim, int64_t index) {
  CHECK_T("ct_select", t);
  if (t->ndim == 0) {
    ct_fail(CT_ERR_SHAPE, "ct_select: cannot be applied to a 0-dim tensor");
    return NULL;
  }
  int d = cti_wrap_dim("ct_select", dim, t->ndim);
  if (d < 0) return NULL;
  int64_t size = t->shape[d];
  if (index < -size || index >= size) {
    ct_fail(CT_ERR_VALUE, "ct_select: index %" PRId64 " out of range for tensor of size %" PRId64
            " at dimension %d", index, size, dim);
    return NULL;
  }
  if (index < 0) index += size;
  int64_t shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; ++i)
    if (i != d) shape[k] = t->shape[i], stride[k++] = t->stride[i];
  return cti_tensor_view(t, t->ndim - 1, shape, stride, t->offset + index * t->stride[d]);
}

ct_tensor *ct_unsqueeze(const ct_tensor *t, int dim) {
  CHECK_T("ct_unsqueeze", t);
  if (t->ndim == CT_MAX_DIMS) {
    ct_fail(CT_ERR_SHAPE, "ct_unsqueeze: a tensor has at most %d dims", CT_MAX_DIMS);
    return NULL;
  }
  int d = cti_wrap_dim("ct_unsqueeze", dim, t->ndim + 1);
  if (d < 0) return NULL;
  int64_t shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  for (int i = 0, k = 0; i <= t->ndim; ++i) {
    if (i == d) {
      shape[i] = 1;
      stride[i] = d < t->ndim ? t->shape[d] * t->stride[d] : 1;
    } else {
      shape[i] = t->shape[k], stride[i] = t->stride[k];
      ++k;
    }
  }
  return cti_tensor_view(t, t->ndim + 1, shape, stride, t->offset);
}

ct_tensor *ct_squeeze(const ct_tensor *t, int dim) {
  CHECK_T("ct_squeeze", t);
  if (t->ndim == 0) return ct_retain((ct_tensor *)t);
  int d = cti_wrap_dim("ct_squeeze", dim, t->ndim);
  if (d < 0) return NULL;
  if (t->shape[d] != 1) return ct_retain((ct_tensor *)t); // as torch: no-op
  int64_t shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; ++i)
    if (i != d) shape[k] = t->shape[i], stride[k++] = t->stride[i];
  return cti_tensor_view(t, t->ndim - 1, shape, stride, t->offset);
}

ct_tensor *ct_reshape(const ct_tensor *t, ct_shape shape) {
  CHECK_T("ct_reshape", t);
  if (shape.ndim < 0 || shape.ndim > CT_MAX_DIMS) {
    ct_fail(CT_ERR_SHAPE, "ct_reshape: a tensor has 0 to %d dims, got %d", CT_MAX_DIMS, shape.ndim);
    return NULL;
  }
  int infer = -1;
  int64_t known = 1, n = ct_numel(t);
  for (int i = 0; i < shape.ndim; ++i) {
    if (shape.d[i] == -1) {
      if (infer >= 0) {
        ct_fail(CT_ERR_VALUE, "ct_reshape: only one dimension can be inferred");
        return NULL;
      }
      infer = i;
    } else if (shape.d[i] < 0) {
      ct_fail(CT_ERR_VALUE, "ct_reshape: invalid shape dimension %" PRId64, shape.d[i]);
      return NULL;
    } else if (__builtin_mul_overflow(known, shape.d[i], &known)) {
      known = -1; // more elements than int64 holds: invalid for any input
    }
  }
  if (infer >= 0 && known > 0 && n % known == 0) shape.d[infer] = n / known;
  char a[128];
  if ((infer >= 0 && (known <= 0 || n % known != 0)) || ct_shape_numel(shape) != n) {
    ct_fail(CT_ERR_SHAPE, "ct_reshape: shape '%s' is invalid for input of size %" PRId64,
            ct_shape_str(shape, a, sizeof a), n);
    return NULL;
  }
  ct_tensor *c = ct_contiguous(t);
  if (!c) return NULL;
  int64_t stride[CT_MAX_DIMS];
  cti_contiguous_strides(shape.ndim, shape.d, stride);
  ct_tensor *v = cti_tensor_view(c, shape.ndim, shape.d, stride, c->offset);
  ct_free(c);
  return v;
}

ct_tensor *ct_expand(const ct_tensor *t, ct_shape shape) {
  CHECK_T("ct_expand", t);
  char a[128], b[128];
  if (shape.ndim < t->ndim || shape.ndim > CT_MAX_DIMS) {
    ct_fail(CT_ERR_SHAPE, "ct_expand: the number of sizes provided (%d) must be greater or equal "
            "to the number of dimensions in the tensor (%d)", shape.ndim, t->ndim);
    return NULL;
  }
  int64_t out_shape[CT_MAX_DIMS], stride[CT_MAX_DIMS];
  int lead = shape.ndim - t->ndim;
  for (int i = 0; i < shape.ndim; ++i) {
    int j = i - lead;
    int64_t want = shape.d[i];
    if (j < 0) {
      if (want < 0) {
        ct_fail(CT_ERR_SHAPE, "ct_expand: -1 is not allowed in a leading, non-existing dimension");
        return NULL;
      }
      out_shape[i] = want, stride[i] = 0;
      continue;
    }
    int64_t have = t->shape[j];
    if (want == -1 || want == have) {
      out_shape[i] = have, stride[i] = t->stride[j];
    } else if (have == 1 && want >= 0) {
      out_shape[i] = want, stride[i] = 0;
    } else {
      ct_fail(CT_ERR_SHAPE, "ct_expand: the expanded size of the tensor (%" PRId64
              ") must match the existing size (%" PRId64 ") at non-singleton dimension %d. "
              "Target sizes: %s. Tensor sizes: %s", want, have, i,
              ct_shape_str(shape, a, sizeof a), ct_shape_str(ct_shape_of(t), b, sizeof b));
      return NULL;
    }
  }
  ct_shape out = {shape.ndim, {0}};
  memcpy(out.d, out_shape, sizeof(int64_t) * (size_t)shape.ndim);
  if (ct_shape_numel(out) < 0) {
    ct_fail(CT_ERR_VALUE, "ct_expand: numel: integer multiplication overflow (sizes=%s; check the sizes)",
            sizes_str(out, a, sizeof a));
    return NULL;
  }
  return cti_tensor_view(t, shape.ndim, out_shape, stride, t->offset);
}

// ---- copies ----------------------------------------------------------------------------
// dst := src on one device, same shape, any strides and dtypes.
static int copy_same_device(ct_tensor *dst, const ct_tensor *src) {
  ct_device d = ct_device_of(dst);
  const cti_backend *be = cti_backend_for("ct_copy_", d);
  if (!be) return ct_last_status();
  const int64_t *strides[3] = {dst->stride, src->stride, NULL};
  cti_iter it;
  cti_iter_build(&it, dst->ndim, dst->shape, 2, strides);
  if (it.numel == 0) return CT_OK;
  ct_stream *s = ct_current_stream(d);
  int rc = san("ct_copy_", s, src, dst);
  return rc ? rc : be->copy(dst->dtype, src->dtype, &it, ct_data_ptr(dst), ct_data_ptr(src), s);
}

ct_tensor *ct_contiguous(const ct_tensor *t) {
  CHECK_T("ct_contiguous", t);
  if (ct_is_contiguous(t)) return ct_retain((ct_tensor *)t);
  return ct_clone(t);
}

ct_tensor *ct_clone(const ct_tensor *t) {
  CHECK_T("ct_clone", t);
  ct_tensor *c = ct_empty(ct_shape_of(t), t->dtype, ct_device_of(t));
  if (c && copy_same_device(c, t) != CT_OK) {
    ct_free(c);
    return NULL;
  }
  return c;
}

// The CUDA side of a host<->device pair, whose current stream carries the copy
// (the destination when both are GPUs).
static ct_device gpu_side(ct_device a, ct_device b) { return a.type == CT_CUDA ? a : b; }
static ct_stream *transfer_stream(ct_device a, ct_device b) { return ct_current_stream(gpu_side(a, b)); }

ct_tensor *ct_to(const ct_tensor *t, ct_device device, ct_dtype dtype, bool non_blocking) {
  CHECK_T("ct_to", t);
  if (!cti_backend_for("ct_to", device)) return NULL;
  if (!ct_dtype_valid(dtype)) {
    ct_fail(CT_ERR_DTYPE, "ct_to: invalid dtype %d", (int)dtype);
    return NULL;
  }
  ct_device src_dev = ct_device_of(t);
  if (ct_device_eq(src_dev, device)) {
    if (dtype == t->dtype) return ct_retain((ct_tensor *)t);
    ct_tensor *out = ct_empty(ct_shape_of(t), dtype, device);
    if (out && copy_same_device(out, t) != CT_OK) {
      ct_free(out);
      return NULL;
    }
    return out;
  }
  // Across devices: move the bytes of a contiguous copy, then cast where the
  // result lives. A device->host copy that needs no host-side cast may stay
  // asynchronous; it lands in pinned memory, as PyTorch's does.
  ct_tensor *src = ct_contiguous(t);
  if (!src) return NULL;
  bool cast_after = dtype != t->dtype;
  bool to_host = device.type == CT_CPU;
  bool async = non_blocking && !(to_host && cast_after) &&
               (to_host || ct_is_pinned(src));
  // A blocking copy waits for the GPU side's stream: a sync point.
  if (!async && cti_sync_begin("ct_to", gpu_side(device, src_dev), CTI_SYNC_REPORT) != CT_OK) {
    ct_free(src);
    return NULL;
  }
  ct_tensor *moved = cti_tensor_new(ct_shape_of(t), t->dtype, device, to_host && async);
  ct_stream *s = transfer_stream(device, src_dev);
  int rc = moved ? san("ct_to", s, src, moved) : (int)ct_last_status();
  if (rc == CT_OK) rc = cti_memcpy(device, ct_data_ptr(moved), src_dev, ct_data_ptr(src), ct_nbytes(src), async, s);
  if (rc == CT_OK && !async) cti_observe_host_waits(s);
  if (!async) cti_sync_end();
  ct_free(src);
  if (rc != CT_OK) {
    ct_free(moved);
    return NULL;
  }
  if (!cast_after) return moved;
  ct_tensor *out = ct_to(moved, device, dtype, false);
  ct_free(moved);
  return out;
}

ct_tensor *ct_to_device(const ct_tensor *t, ct_device device) {
  CHECK_T("ct_to", t);
  return ct_to(t, device, t->dtype, false);
}
ct_tensor *ct_to_dtype(const ct_tensor *t, ct_dtype dtype) {
  CHECK_T("ct_to", t);
  return ct_to(t, ct_device_of(t), dtype, false);
}
ct_tensor *ct_cpu(const ct_tensor *t) { return ct_to_device(t, ct_device_cpu()); }
ct_tensor *ct_cuda(const ct_tensor *t, int index) {
  if (index < 0) {
    if (!ct_cuda_is_available()) {
      ct_fail(CT_ERR_UNAVAILABLE, "ct_cuda: CUDA unavailable: %s", ct_cuda_unavailable_reason());
      return NULL;
    }
    index = ct_cuda_current_device();
  }
  return ct_to_device(t, ct_device_cuda(index));
}

// Element range [lo, hi] of t in its storage (numel > 0).
static void elem_range(const ct_tensor *t, int64_t *lo, int64_t *hi) {
  *lo = *hi = t->offset;
  for (int i = 0; i < t->ndim; ++i) {
    const int64_t reach = t->stride[i] * (t->shape[i] - 1);
    if (reach < 0) *lo += reach;
    else *hi += reach;
  }
}

// Whether t's elements tile a block of its storage exactly once, in some
// order of its dims (PyTorch's is_non_overlapping_and_dense): sorted by
// stride, each stride is the product of the sizes before it.
static bool dense_in_some_order(const ct_tensor *t) {
  int order[CT_MAX_DIMS], n = 0;
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] != 1) order[n++] = i;
  for (int a = 1; a < n; ++a) // insertion sort by stride
    for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]]; --b) {
      int tmp = order[b];
      order[b] = order[b - 1];
      order[b - 1] = tmp;
    }
  int64_t want = 1;
  for (int k = 0; k < n; ++k) {
    if (t->stride[order[k]] != want) return false;
    want *= t->shape[order[k]];
  }
  return true;
}

// How dst and src (same device, src already expanded to dst's shape) share
// memory: 0 none, 1 the same elements in the same places, 2 partly.
static int copy_overlap(const ct_tensor *dst, const ct_tensor *src) {
  if (dst->storage != src->storage || ct_numel(dst) == 0) return 0;
  int64_t dl, dh, sl, sh;
  elem_range(dst, &dl, &dh);
  elem_range(src, &sl, &sh);
  if (dh < sl || sh < dl) return 0;
  if (dst->offset == src->offset && !memcmp(dst->stride, src->stride, sizeof(int64_t) * (size_t)dst->ndim))
    return 1;
  return 2;
}

int ct_copy_(ct_tensor *dst, const ct_tensor *src, bool non_blocking) {
  if (!dst || !src) return ct_fail(CT_ERR_VALUE, "ct_copy_: NULL tensor");
  ct_tensor *b = ct_expand(src, ct_shape_of(dst));
  if (!b) {
    char x[128], y[128];
    return ct_fail(CT_ERR_SHAPE, "ct_copy_: source of shape %s cannot be broadcast to %s",
                   ct_shape_str(ct_shape_of(src), x, sizeof x),
                   ct_shape_str(ct_shape_of(dst), y, sizeof y));
  }
  int rc;
  ct_device dd = ct_device_of(dst), sd = ct_device_of(src);
  if (ct_device_eq(dd, sd)) {
    const int overlap = copy_overlap(dst, b);
    if (overlap == 2 && dense_in_some_order(dst) && dense_in_some_order(b)) {
      // torch's words for x[1:].copy_(x[:-1]) and a.copy_(a.t())
      rc = ct_fail(CT_ERR_VALUE, "ct_copy_: unsupported operation: some elements of the input tensor and "
                   "the written-to tensor refer to a single memory location. Please clone() the tensor "
                   "before performing the operation.");
    } else if (overlap == 2) {
      // Overlap torch does not detect (it then reads elements it has already
      // written): read everything first, through a copy.
      ct_tensor *c = ct_clone(b);
      rc = c ? copy_same_device(dst, c) : (int)ct_last_status();
      ct_free(c);
    } else {
      rc = overlap == 1 && dst->dtype == b->dtype ? CT_OK : copy_same_device(dst, b);
    }
  } else {
    // Across devices: one copy of the bytes when the layouts agree, else a
    // blocking ct_to and a copy on dst's device. Unless the bytes may go
    // asynchronously (pinned host memory, non_blocking) this waits: a sync point.
    bool direct = ct_is_contiguous(dst) && ct_is_contiguous(b) && ct_numel(src) == ct_numel(dst) &&
                  dst->dtype == src->dtype;
    bool host_pinned = dd.type == CT_CPU ? ct_is_pinned(dst) : ct_is_pinned(src);
    bool async = direct && non_blocking && host_pinned;
    rc = async ? CT_OK : cti_sync_begin("ct_copy_", gpu_side(dd, sd), CTI_SYNC_REPORT);
    bool opened = !async && rc == CT_OK;
    if (rc == CT_OK && direct) {
      ct_stream *s = transfer_stream(dd, sd);
      rc = san("ct_copy_", s, b, dst);
      if (rc == CT_OK) rc = cti_memcpy(dd, ct_data_ptr(dst), sd, ct_data_ptr(b), ct_nbytes(dst), async, s);
      if (rc == CT_OK && !async) cti_observe_host_waits(s);
    } else if (rc == CT_OK) {
      ct_tensor *moved = ct_to(b, dd, dst->dtype, false);
      rc = moved ? copy_same_device(dst, moved) : (int)ct_last_status();
      ct_free(moved);
    }
    if (opened) cti_sync_end();
  }
  ct_free(b);
  return rc;
}

ct_tensor *ct_pin_memory(const ct_tensor *t) {
  CHECK_T("ct_pin_memory", t);
  if (ct_device_of(t).type != CT_CPU) {
    char d[CT_DEVICE_STR_MAX];
    ct_fail(CT_ERR_DEVICE, "ct_pin_memory: only CPU tensors can be pinned, got a tensor on %s",
            ct_device_str(ct_device_of(t), d));
    return NULL;
  }
  if (!ct_cuda_is_available()) {
    ct_fail(CT_ERR_UNAVAILABLE, "ct_pin_memory: pinned memory needs CUDA, which is unavailable: %s",
            ct_cuda_unavailable_reason());
    return NULL;
  }
  ct_tensor *src = ct_contiguous(t);
  if (!src) return NULL;
  ct_tensor *p = cti_tensor_new(ct_shape_of(t), t->dtype, ct_device_cpu(), true);
  if (p) memcpy(ct_data_ptr(p), ct_data_ptr(src), ct_nbytes(src));
  ct_free(src);
  return p;
}

int ct_copy_to_host(const ct_tensor *t, void *dst, size_t dst_bytes) {
  if (!t || !dst) return ct_fail(CT_ERR_VALUE, "ct_copy_to_host: NULL argument");
  if (dst_bytes < ct_nbytes(t))
    return ct_fail(CT_ERR_VALUE, "ct_copy_to_host: destination holds %zu bytes, the tensor needs %zu",
                   dst_bytes, ct_nbytes(t));
  // The host waits for the values.
  int rc = cti_sync_begin("ct_copy_to_host", ct_device_of(t), CTI_SYNC_REFUSE_IN_CAPTURE | CTI_SYNC_REPORT);
  if (rc) return rc;
  ct_tensor *c = ct_contiguous(t);
  ct_stream *s = transfer_stream(ct_device_cpu(), ct_device_of(t));
  rc = c ? san("ct_copy_to_host", s, c, NULL) : (int)ct_last_status();
  if (rc == CT_OK) rc = cti_memcpy(ct_device_cpu(), dst, ct_device_of(c), ct_data_ptr(c), ct_nbytes(c), false, s);
  if (rc == CT_OK) cti_observe_host_waits(s);
  ct_free(c);
  cti_sync_end();
  return rc;
}

int ct_item(const ct_tensor *t, double *out) {
  if (!t || !out) return ct_fail(CT_ERR_VALUE, "ct_item: NULL argument");
  if (ct_numel(t) != 1)
    return ct_fail(CT_ERR_VALUE, "ct_item: a Tensor with %" PRId64
                   " elements cannot be converted to Scalar", ct_numel(t));
  // Tensor.item() waits for the value.
  int rc = cti_sync_begin("ct_item", ct_device_of(t), CTI_SYNC_REFUSE_IN_CAPTURE | CTI_SYNC_REPORT);
  if (rc) return rc;
  unsigned char buf[8];
  rc = ct_copy_to_host(t, buf, sizeof buf);
  if (rc == CT_OK) *out = ct_load_f64(buf, t->dtype);
  cti_sync_end();
  return rc;
}
