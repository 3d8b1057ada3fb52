// SPDX-License-Identifier: MIT
//
// tensor_impl: the insides of ct_tensor, for the runtime's own modules only.
// Chapters and tests use the accessors in tensor.h.
//
// Invariant: t->storage->data + t->offset * elsize is element 0, and element
// (i0, ..., in) is at offset + sum(ik * stride[k]) elements, all within the
// storage. Reference counts change atomically, so tensors may be shared
// between threads (DataParallel's one thread per device).
#ifndef CT_TENSOR_IMPL_H
#define CT_TENSOR_IMPL_H

#include "alloc.h"
#include "tensor.h"

typedef struct cti_storage {
  int refcount;
  ct_device device;
  void *data;
  size_t nbytes;
  ct_block *block; // from the device's caching allocator, or NULL
  bool pinned;     // data is from ct_pinned_alloc (then device is the CPU)
  void *obs; // an observer's record of it (the race checker's), or NULL (observe.h)
} cti_storage;

struct ct_tensor {
  int refcount;
  cti_storage *storage;
  int64_t offset; // elements
  int ndim;
  int64_t shape[CT_MAX_DIMS];
  int64_t stride[CT_MAX_DIMS]; // elements
  ct_dtype dtype;
};

// A tensor over fresh storage from the allocator (pinned host memory if
// `pinned`), contiguous, values not set. NULL + error on failure.
ct_tensor *cti_tensor_new(ct_shape shape, ct_dtype dtype, ct_device device, bool pinned);
// A new handle sharing t's storage with the given geometry (a view).
ct_tensor *cti_tensor_view(const ct_tensor *t, int ndim, const int64_t *shape,
                          const int64_t *stride, int64_t offset);
// Contiguous strides for shape, into stride[]; returns numel.
int64_t cti_contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
// Normalizes a possibly negative dim for an ndim-d tensor; -1 and an error
// naming `op` when out of range.
int cti_wrap_dim(const char *op, int dim, int ndim);

#endif
