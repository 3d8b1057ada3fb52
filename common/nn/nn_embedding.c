// SPDX-License-Identifier: MIT
//
// nn_embedding: torch.nn.Embedding(num_embeddings, embedding_dim), a table
// of rows looked up by index.
//
// Shapes: indices (*) int64 (int32 is widened), weight (V, C), output
// (*, C): out[..., :] = weight[idx[...], :]. An index outside [0, V) fails
// with torch's "index out of range in self": at once on the CPU, at the
// next call that waits for the device on CUDA (async_error.h).
//
// The indices have no gradient, so backward is ct_module_backward_params:
// for g = dL/dout (*, C),
//   dW[r, :] += sum of g[i, :] over the positions i whose index is r,
// summed in ascending i by a thread that owns the row (transformer_kernels.h),
// so a repeated index gives the same bits on every run and on both devices
// (PyTorch's CUDA embedding backward sorts the indices for the same reason).
// ct_module_backward on an Embedding fails, saying so. Training forward
// keeps the indices (a contiguous int64 copy, or a reference).
//
// The weight is initialized N(0, 1), as torch.nn.Embedding's, from the CPU
// generator. When a Linear is tied to it (ct_module_tie: GPT's lm_head), the
// lookup reads and the gradient adds into the one shared parameter.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "transformer_kernels.h"

typedef struct embedding_state {
  int64_t v, c;
  ct_tensor *idx;  // the last training forward's indices, int64 contiguous
} embedding_state;

static ct_param *weight_of(ct_module *m) { return cti_module_find(m, "weight"); }

// Enters with the failing position `pos` of the contiguous int64 idx (a CPU
// kernel found it); leaves with torch's message, naming the value.
static ct_tensor *bad_index(const embedding_state *st, const ct_tensor *idx, int64_t pos) {
  int64_t value = 0;
  ct_tensor *one = ct_narrow(idx, 0, pos, 1);
  if (one && ct_copy_to_host(one, &value, sizeof value) == CT_OK)
    ct_fail(CT_ERR_VALUE, "Embedding: index out of range in self (index %" PRId64 " at position %" PRId64
            ", num_embeddings %" PRId64 ")", value, pos, st->v);
  ct_free(one);
  return NULL;
}

static ct_tensor *embedding_forward(ct_module *m, const ct_tensor *x) {
  embedding_state *st = m->state;
  ct_tensor *w = weight_of(m)->value;
  const ct_dtype it = ct_dtype_of(x);
  if (it != CT_I64 && it != CT_I32) {
    ct_fail(CT_ERR_DTYPE, "Embedding: Expected tensor for argument #1 'indices' to have one of the following "
            "scalar types: Long, Int; but got %s instead", ct_dtype_name(it));
    return NULL;
  }
  if (ct_ndim(x) >= CT_MAX_DIMS) {
    ct_fail(CT_ERR_SHAPE, "Embedding: indices of %d dims leave no room for the embedding dim", ct_ndim(x));
    return NULL;
  }
  const cti_backend *be = cti_backend_for("Embedding", m->device);
  if (!be) return NULL;
  const int64_t n = ct_numel(x);
  ct_tensor *flat = ct_reshape(x, CT_SHAPE(n));
  ct_tensor *idx = flat ? (it == CT_I64 ? ct_contiguous(flat) : ct_to_dtype(flat, CT_I64)) : NULL;
  ct_free(flat);
  ct_shape ys = ct_shape_of(x);
  ys.d[ys.ndim++] = st->c;
  ct_tensor *y = idx ? ct_empty(ys, ct_dtype_of(w), m->device) : NULL;
  int rc = y ? CT_OK : (int)ct_last_status();
  int64_t bad = -1;
  if (!rc && n > 0)
    rc = be->transformer->embedding(ct_dtype_of(w), n, st->c, st->v, ct_data_ptr(idx), ct_data_ptr(w),
                                    ct_data_ptr(y), &bad, ct_current_stream(m->device));
  if (!rc && bad >= 0) rc = (bad_index(st, idx, bad), (int)ct_last_status());
  ct_free(st->idx);
  st->idx = NULL;
  if (rc) {
    ct_free(idx), ct_free(y);
    return NULL;
  }
  if (m->training) st->idx = idx;
  else ct_free(idx);
  return y;
}

static int embedding_backward_params(ct_module *m, const ct_tensor *g) {
  embedding_state *st = m->state;
  if (!st->idx)
    return ct_fail(CT_ERR_VALUE, "Embedding backward: no saved indices (run forward in training mode first)");
  ct_param *pw = weight_of(m);
  const ct_dtype dt = ct_dtype_of(pw->value);
  const int64_t n = ct_numel(st->idx);
  ct_shape want = ct_shape_of(g); // (*, C) with * the indices' shape: checked by count and last dim
  if (ct_ndim(g) < 1 || ct_size(g, -1) != st->c || ct_numel(g) != n * st->c) {
    char a[96];
    return ct_fail(CT_ERR_SHAPE, "Embedding backward: grad_output of shape %s does not match %" PRId64
                   " indices of dim %" PRId64, ct_shape_str(want, a, sizeof a), n, st->c);
  }
  ct_tensor *gd = cti_nn_grad_as("Embedding", g, want, dt); // the output's (the weight's) dtype
  const cti_backend *be = gd ? cti_backend_for("Embedding backward", m->device) : NULL;
  ct_tensor *gc = be ? ct_contiguous(gd) : NULL;
  ct_free(gd);
  if (!gc) return ct_last_status();
  ct_tensor *dw = ct_empty(CT_SHAPE(st->v, st->c), dt, m->device);
  int rc = dw ? CT_OK : (int)ct_last_status();
  if (!rc)
    rc = be->transformer->embedding_backward(dt, n, st->c, st->v, ct_data_ptr(st->idx), ct_data_ptr(gc),
                                             ct_data_ptr(dw), ct_current_stream(m->device));
  if (!rc) rc = cti_param_accumulate_grad(pw, dw);
  ct_free(gc), ct_free(dw);
  return rc;
}

static ct_tensor *embedding_backward(ct_module *m, const ct_tensor *g) {
  (void)m, (void)g;
  ct_fail(CT_ERR_VALUE, "Embedding backward: the indices have no gradient; use ct_module_backward_params, "
          "which accumulates the weight's");
  return NULL;
}

static void embedding_describe(const ct_module *m, char *buf, size_t len) {
  const embedding_state *st = m->state;
  snprintf(buf, len, "%" PRId64 ", %" PRId64, st->v, st->c);
}

static int embedding_state_to(ct_module *m, ct_device device) {
  return cti_nn_move(&((embedding_state *)m->state)->idx, device);
}

static void embedding_state_free(ct_module *m) {
  embedding_state *st = m->state;
  if (st) ct_free(st->idx);
  free(st);
  m->state = NULL;
}

static void *embedding_state_clone(const ct_module *m) {
  embedding_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->idx = NULL;
  return st;
}

static const cti_module_ops embedding_ops = {
    .kind = "Embedding",
    .forward = embedding_forward,
    .backward = embedding_backward,
    .backward_params = embedding_backward_params,
    .describe = embedding_describe,
    .state_to = embedding_state_to,
    .state_free = embedding_state_free,
    .state_clone = embedding_state_clone,
};

ct_module *ct_nn_embedding(int64_t num_embeddings, int64_t embedding_dim) {
  if (num_embeddings < 0 || embedding_dim < 0) {
    ct_fail(CT_ERR_VALUE, "ct_nn_embedding: num_embeddings and embedding_dim must be >= 0, got %" PRId64
            " and %" PRId64, num_embeddings, embedding_dim);
    return NULL;
  }
  embedding_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_embedding: out of host memory");
    return NULL;
  }
  st->v = num_embeddings;
  st->c = embedding_dim;
  ct_module *m = cti_module_new(&embedding_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  ct_tensor *w = ct_randn(CT_SHAPE(num_embeddings, embedding_dim), CT_F32, ct_device_cpu()); // init.normal_
  if (!w || !cti_module_register(m, "weight", w, false)) { // register takes w even when it fails
    ct_module_free(m);
    return NULL;
  }
  return m;
}
