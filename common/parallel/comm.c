// SPDX-License-Identifier: MIT
//
// comm: torch.chunk's split rule and torch.cuda.comm's four collectives of
// one process (broadcast, scatter, gather, reduce_add), on any mix of
// devices. Everything is a ct_to / ct_copy_ / ct_add of the runtime, so
// copies between devices take the transfer paths of chapter 2 (through the
// host between GPUs: ct has no peer-to-peer path yet).
//
// Invariant: every function leaves its outputs complete or returns an error
// with none of them allocated (no half-filled out arrays).
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"

int ct_chunk_sizes(int64_t size, int chunks, int64_t *sizes, int *n) {
  if (n) *n = 0;
  if (!sizes || !n) return ct_fail(CT_ERR_VALUE, "ct_chunk_sizes: NULL output");
  if (chunks < 1 || chunks > CT_MAX_REPLICAS)
    return ct_fail(CT_ERR_VALUE, "ct_chunk_sizes: chunk expects `chunks` to be in [1, %d], but got chunks=%d",
                   CT_MAX_REPLICAS, chunks);
  if (size < 1) return ct_fail(CT_ERR_VALUE, "ct_chunk_sizes: cannot split %lld rows", (long long)size);
  int64_t each = (size + chunks - 1) / chunks; // ceil(size / chunks)
  int k = 0;
  for (int64_t start = 0; start < size; start += each) sizes[k++] = size - start < each ? size - start : each;
  *n = k;
  return CT_OK;
}

static void free_all(ct_tensor **ts, int n) {
  for (int i = 0; i < n; ++i) {
    ct_free(ts[i]);
    ts[i] = NULL;
  }
}

static int check_list(const char *op, const void *list, int n) {
  if (!list) return ct_fail(CT_ERR_VALUE, "%s: NULL list", op);
  if (n < 1 || n > CT_MAX_REPLICAS)
    return ct_fail(CT_ERR_VALUE, "%s: expected 1 to %d devices or tensors, got %d", op, CT_MAX_REPLICAS, n);
  return CT_OK;
}

// A copy of t on d that never shares t's storage.
static ct_tensor *copy_on(const ct_tensor *t, ct_device d) {
  return ct_device_eq(ct_device_of(t), d) ? ct_clone(t) : ct_to_device(t, d);
}

int ct_comm_broadcast(const ct_tensor *t, const ct_device *devices, int n, ct_tensor **out) {
  if (!t || !out) return ct_fail(CT_ERR_VALUE, "ct_comm_broadcast: NULL tensor or output");
  int rc = check_list("ct_comm_broadcast", devices, n);
  if (rc) return rc;
  for (int i = 0; i < n; ++i) {
    if (!(out[i] = copy_on(t, devices[i]))) {
      rc = ct_last_status();
      free_all(out, i);
      return rc;
    }
  }
  return CT_OK;
}

int ct_comm_scatter(const ct_tensor *t, const ct_device *devices, int n, const int64_t *chunk_sizes,
                    ct_tensor **out, int *n_out) {
  if (n_out) *n_out = 0;
  if (!t || !out || !n_out) return ct_fail(CT_ERR_VALUE, "ct_comm_scatter: NULL tensor or output");
  int rc = check_list("ct_comm_scatter", devices, n);
  if (rc) return rc;
  ct_shape s = ct_shape_of(t);
  if (s.ndim < 1) return ct_fail(CT_ERR_SHAPE, "ct_comm_scatter: cannot scatter a 0-d tensor along dim 0");
  int64_t sizes[CT_MAX_REPLICAS];
  int k = n;
  if (chunk_sizes) {
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      if (chunk_sizes[i] < 0)
        return ct_fail(CT_ERR_VALUE, "ct_comm_scatter: chunk_sizes[%d] = %lld is negative", i,
                       (long long)chunk_sizes[i]);
      sizes[i] = chunk_sizes[i];
      sum += chunk_sizes[i];
    }
    if (sum != s.d[0])
      return ct_fail(CT_ERR_VALUE, "ct_comm_scatter: given chunk sizes sum to %lld, but expected %lld",
                     (long long)sum, (long long)s.d[0]);
  } else if ((rc = ct_chunk_sizes(s.d[0], n, sizes, &k))) {
    return rc;
  }
  int64_t start = 0;
  for (int i = 0; i < k; ++i) {
    ct_tensor *view = ct_narrow(t, 0, start, sizes[i]);
    out[i] = view ? ct_to_device(view, devices[i]) : NULL;
    ct_free(view);
    if (!out[i]) {
      rc = ct_last_status();
      free_all(out, i);
      return rc;
    }
    start += sizes[i];
  }
  *n_out = k;
  return CT_OK;
}

ct_tensor *ct_comm_gather(ct_tensor *const *tensors, int n, ct_device destination) {
  if (check_list("ct_comm_gather", tensors, n)) return NULL;
  ct_shape first = tensors[0] ? ct_shape_of(tensors[0]) : (ct_shape){0};
  if (!tensors[0] || first.ndim < 1) {
    ct_fail(CT_ERR_SHAPE, "ct_comm_gather: tensor 0 is NULL or 0-d");
    return NULL;
  }
  ct_dtype dt = ct_dtype_of(tensors[0]);
  ct_shape total = first;
  total.d[0] = 0;
  for (int i = 0; i < n; ++i) {
    ct_shape si = tensors[i] ? ct_shape_of(tensors[i]) : (ct_shape){0};
    bool same = tensors[i] && si.ndim == first.ndim && ct_dtype_of(tensors[i]) == dt;
    for (int d = 1; same && d < si.ndim; ++d) same = si.d[d] == first.d[d];
    if (!same) {
      char a[128], b[128];
      ct_fail(CT_ERR_SHAPE, "ct_comm_gather: tensor %d %s does not match tensor 0 %s %s but for dim 0", i,
              tensors[i] ? ct_shape_str(si, a, sizeof a) : "NULL", ct_shape_str(first, b, sizeof b),
              ct_dtype_name(dt));
      return NULL;
    }
    total.d[0] += si.d[0];
  }
  ct_tensor *out = ct_empty(total, dt, destination);
  int64_t start = 0;
  for (int i = 0; out && i < n; ++i) {
    int64_t rows = ct_shape_of(tensors[i]).d[0];
    ct_tensor *dst = ct_narrow(out, 0, start, rows);
    int rc = dst ? ct_copy_(dst, tensors[i], false) : (int)ct_last_status();
    ct_free(dst);
    if (rc) {
      ct_free(out);
      return NULL;
    }
    start += rows;
  }
  return out;
}

ct_tensor *ct_comm_reduce_add(ct_tensor *const *tensors, int n, ct_device destination) {
  if (check_list("ct_comm_reduce_add", tensors, n)) return NULL;
  for (int i = 0; i < n; ++i) {
    if (!tensors[i]) {
      ct_fail(CT_ERR_VALUE, "ct_comm_reduce_add: tensor %d is NULL", i);
      return NULL;
    }
    if (!ct_shape_eq(ct_shape_of(tensors[i]), ct_shape_of(tensors[0]))) { // a sum, never a broadcast
      char a[128], b[128];
      ct_fail(CT_ERR_SHAPE, "ct_comm_reduce_add: tensor %d has shape %s, tensor 0 has %s", i,
              ct_shape_str(ct_shape_of(tensors[i]), a, sizeof a), ct_shape_str(ct_shape_of(tensors[0]), b, sizeof b));
      return NULL;
    }
  }
  ct_tensor *sum = copy_on(tensors[0], destination);
  for (int i = 1; sum && i < n; ++i) {
    ct_tensor *here = ct_to_device(tensors[i], destination);
    ct_tensor *next = here ? ct_add(sum, here) : NULL; // checks shape and dtype, in PyTorch's words
    ct_free(here);
    ct_free(sum);
    sum = next;
  }
  return sum;
}
