// SPDX-License-Identifier: MIT
//
// ops: the dispatcher. Every public op passes through here on its way to a
// backend (backend.h), in four steps:
//   1. check: no NULLs, all tensors on one device, dtypes the op supports;
//   2. shape: broadcast (elementwise), drop or keep the reduced dim, or the
//      matmul rules; mismatches fail with PyTorch's wording;
//   3. dtype: promote operands as torch.promote_types does and cast them to
//      the computation dtype (a copy on the device) when they differ;
//   4. run: allocate the result, describe the loop (cti_iter) and call the
//      backend of the device on the device's current stream.
// Enters with valid or NULL handles; leaves with a new tensor (or CT_OK), or
// NULL (non-zero) and a message naming the op and the values at fault.
#include "ops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "observe.h"
#include "stream.h"
#include "sync_point.h"
#include "tensor_impl.h"

static bool allow_tf32 = false;
void ct_set_allow_tf32(bool allow) { allow_tf32 = allow; }
bool ct_get_allow_tf32(void) { return allow_tf32; }

// ---- backends -----------------------------------------------------------------
static const cti_backend *device_backend(const char *op, ct_device d) {
  if (d.type == CT_CPU) return &cti_cpu_backend;
  if (d.type != CT_CUDA) {
    ct_fail(CT_ERR_DEVICE, "%s: unknown device type %d", op, (int)d.type);
    return NULL;
  }
  if (!ct_cuda_is_available()) {
    ct_fail(CT_ERR_UNAVAILABLE, "%s: CUDA unavailable: %s", op, ct_cuda_unavailable_reason());
    return NULL;
  }
  int n = ct_cuda_device_count();
  if (d.index < 0 || d.index >= n) {
    ct_fail(CT_ERR_DEVICE, "%s: CUDA device index %d out of range (%d device%s)", op, d.index, n,
            n == 1 ? "" : "s");
    return NULL;
  }
#ifdef CT_HAVE_CUDA
  // Kernels and cuBLAS run on the calling thread's current device.
  if (ct_cuda_current_device() != d.index && ct_cuda_set_device(d.index) != CT_OK) return NULL;
  return &cti_cuda_backend;
#else
  return NULL;
#endif
}

// region: backend_for
// The attached observers may wrap the device's table (observe.h): while this
// thread captures a graph on d, ops get the recording table instead
// (graph/), the one place where capture meets the dispatcher, and while a
// profiler session records, a table whose entries open an op range around
// the real ones (prof/). One load and a branch when nothing is attached.
// (A profiler session sees a capture's recording table as it is: the
// recorded calls run, and are timed, only at replay's level.)
const cti_backend *cti_backend_for(const char *op, ct_device d) {
  const cti_backend *be = device_backend(op, d);
  return be && cti_observed() ? cti_observe_wrap(op, d, be) : be;
}
// endregion

// ---- loops ------------------------------------------------------------------------
void cti_iter_build(cti_iter *it, int ndim, const int64_t *shape, int noperands,
                   const int64_t *const strides[3]) {
  memset(it, 0, sizeof *it);
  it->noperands = noperands;
  it->numel = 1;
  for (int d = 0; d < ndim; ++d) it->numel *= shape[d];
  if (it->numel == 0) {
    it->ndim = 1;
    it->contiguous = true;
    return;
  }
  // Outer to inner: drop size-1 dims; merge a dim into the previous (outer)
  // one when, for every operand, outer stride == inner stride * inner size.
  int n = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < noperands && merge; ++k)
      merge = it->stride[k][n - 1] == strides[k][d] * shape[d];
    if (merge) {
      it->shape[n - 1] *= shape[d];
      for (int k = 0; k < noperands; ++k) it->stride[k][n - 1] = strides[k][d];
    } else {
      it->shape[n] = shape[d];
      for (int k = 0; k < noperands; ++k) it->stride[k][n] = strides[k][d];
      ++n;
    }
  }
  it->ndim = n;
  it->contiguous = true;
  if (n == 1)
    for (int k = 0; k < noperands; ++k) it->contiguous &= it->stride[k][0] == 1;
  else if (n > 1)
    it->contiguous = false;
}

// ---- names ---------------------------------------------------------------------------
static const char *binary_names[CT_NUM_BINARY_OPS] = {
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge"};
static const char *unary_names[CT_NUM_UNARY_OPS] = {"neg", "abs", "exp", "log", "sqrt",
                                                    "relu", "sigmoid", "tanh", "isfinite"};
const char *ct_binary_op_name(ct_binary_op op) {
  return (unsigned)op < CT_NUM_BINARY_OPS ? binary_names[op] : "invalid";
}
const char *ct_unary_op_name(ct_unary_op op) {
  return (unsigned)op < CT_NUM_UNARY_OPS ? unary_names[op] : "invalid";
}

static bool is_comparison(ct_binary_op op) { return op >= CT_OP_EQ && op <= CT_OP_GE; }

// ---- shared checks -------------------------------------------------------------------
static int same_device(const char *op, const ct_tensor *a, const ct_tensor *b) {
  ct_device da = ct_device_of(a), db = ct_device_of(b);
  if (ct_device_eq(da, db)) return CT_OK;
  char x[CT_DEVICE_STR_MAX], y[CT_DEVICE_STR_MAX];
  return ct_fail(CT_ERR_DEVICE,
                 "%s: expected all tensors to be on the same device, but found %s and %s", op,
                 ct_device_str(da, x), ct_device_str(db, y));
}

// Broadcast shape of a and b, PyTorch's rules and message.
static int broadcast_shapes(const char *op, ct_shape a, ct_shape b, ct_shape *out) {
  int n = a.ndim > b.ndim ? a.ndim : b.ndim;
  out->ndim = n;
  for (int i = n - 1; i >= 0; --i) { // from the last dim, so the message names the one PyTorch names
    int ia = a.ndim - n + i, ib = b.ndim - n + i;
    int64_t sa = ia >= 0 ? a.d[ia] : 1, sb = ib >= 0 ? b.d[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return ct_fail(CT_ERR_SHAPE,
                     "%s: The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                     ") at non-singleton dimension %d", op, sa, sb, i);
    out->d[i] = sa == 1 ? sb : sa;
  }
  return CT_OK;
}

// The two checks above, for the JIT's dispatcher (common/jit/jit.c), which
// takes any number of inputs and must word its errors as the ops do.
int cti_broadcast_shapes(const char *op, ct_shape a, ct_shape b, ct_shape *out) {
  return broadcast_shapes(op, a, b, out);
}
int cti_same_device(const char *op, const ct_tensor *a, const ct_tensor *b) { return same_device(op, a, b); }

// A new reference to t in dtype dt (a cast copy when it differs).
static ct_tensor *as_dtype(const ct_tensor *t, ct_dtype dt) {
  return ct_to(t, ct_device_of(t), dt, false);
}

static ct_stream *stream_of(const ct_tensor *t) { return ct_current_stream(ct_device_of(t)); }

// The sanitizer's view of an op on stream s that reads r0, r1 and writes w0,
// w1 (NULLs skipped): CT_OK, or CT_ERR_RACE and the op must not run.
static int san(const char *op, ct_stream *s, const ct_tensor *r0, const ct_tensor *r1,
               const ct_tensor *w0, const ct_tensor *w1) {
  const ct_tensor *r[2] = {r0, r1}, *w[2] = {w0, w1};
  return cti_observe_access(op, s, r, 2, w, 2);
}

// ---- binary ops ---------------------------------------------------------------------------
// The dtype the arithmetic runs in and the dtype of the result.
typedef struct {
  ct_dtype compute, result;
} op_dtypes;

static int binary_dtypes(const char *op_name, ct_binary_op op, ct_dtype promoted, op_dtypes *dt) {
  dt->compute = promoted;
  dt->result = promoted;
  if (is_comparison(op)) {
    dt->result = CT_BOOL;
    return CT_OK;
  }
  if (promoted == CT_BOOL && (op == CT_OP_SUB))
    return ct_fail(CT_ERR_DTYPE, "%s: subtraction with two bool tensors is not supported; "
                   "use logical ops or cast to an integer dtype first", op_name);
  // True division, as torch.div; integer pow stays integer and wraps, as in PyTorch.
  if (!ct_dtype_is_floating(promoted) && op == CT_OP_DIV) dt->compute = dt->result = CT_F32;
  return CT_OK;
}

static int run_binary(const char *name, ct_binary_op op, ct_tensor *out, const ct_tensor *a,
                      const ct_tensor *b, ct_dtype compute) {
  ct_tensor *ea = ct_expand(a, ct_shape_of(out));
  ct_tensor *eb = ct_expand(b, ct_shape_of(out));
  ct_tensor *ca = ea ? as_dtype(ea, compute) : NULL;
  ct_tensor *cb = eb ? as_dtype(eb, compute) : NULL;
  ct_dtype out_compute = is_comparison(op) ? CT_BOOL : compute;
  ct_tensor *res = out->dtype == out_compute ? ct_retain(out) : ct_empty_like(out, out_compute, ct_device_of(out));
  int rc = CT_OK;
  if (!ca || !cb || !res) {
    rc = ct_last_status();
  } else if (ct_numel(out) > 0) {
    const cti_backend *be = cti_backend_for(name, ct_device_of(out));
    if (!be) {
      rc = ct_last_status();
    } else {
      const int64_t *strides[3] = {res->stride, ca->stride, cb->stride};
      cti_iter it;
      cti_iter_build(&it, res->ndim, res->shape, 3, strides);
      rc = san(name, stream_of(out), ca, cb, res, NULL);
      if (rc == CT_OK)
        rc = be->binary(op, compute, &it, ct_data_ptr(res), ct_data_ptr(ca), ct_data_ptr(cb), stream_of(out));
      if (rc == CT_OK && res != out) rc = ct_copy_(out, res, false);
    }
  }
  ct_free(ea), ct_free(eb), ct_free(ca), ct_free(cb), ct_free(res);
  return rc;
}

int ct_binary_out(ct_binary_op op, ct_tensor *out, const ct_tensor *a, const ct_tensor *b) {
  const char *name = "ct_binary_out";
  if ((unsigned)op >= CT_NUM_BINARY_OPS) return ct_fail(CT_ERR_VALUE, "%s: invalid op %d", name, (int)op);
  if (!out || !a || !b) return ct_fail(CT_ERR_VALUE, "ct_%s: NULL tensor", ct_binary_op_name(op));
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_binary_op_name(op));
  if (same_device(full, a, b) || same_device(full, out, a)) return ct_last_status();
  ct_shape shape;
  if (broadcast_shapes(full, ct_shape_of(a), ct_shape_of(b), &shape)) return ct_last_status();
  char x[128], y[128];
  if (!ct_shape_eq(shape, ct_shape_of(out)))
    return ct_fail(CT_ERR_SHAPE, "%s: output has shape %s but the broadcast result has shape %s",
                   full, ct_shape_str(ct_shape_of(out), x, sizeof x), ct_shape_str(shape, y, sizeof y));
  op_dtypes dt;
  if (binary_dtypes(full, op, ct_promote_types(ct_dtype_of(a), ct_dtype_of(b)), &dt)) return ct_last_status();
  if (ct_dtype_of(out) != dt.result)
    return ct_fail(CT_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s",
                   full, ct_dtype_name(dt.result), ct_dtype_name(ct_dtype_of(out)));
  return run_binary(full, op, out, a, b, dt.compute);
}

ct_tensor *ct_binary(ct_binary_op op, const ct_tensor *a, const ct_tensor *b) {
  if ((unsigned)op >= CT_NUM_BINARY_OPS) {
    ct_fail(CT_ERR_VALUE, "ct_binary: invalid op %d", (int)op);
    return NULL;
  }
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_binary_op_name(op));
  if (!a || !b) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", full);
    return NULL;
  }
  if (same_device(full, a, b)) return NULL;
  ct_shape shape;
  if (broadcast_shapes(full, ct_shape_of(a), ct_shape_of(b), &shape)) return NULL;
  op_dtypes dt;
  if (binary_dtypes(full, op, ct_promote_types(ct_dtype_of(a), ct_dtype_of(b)), &dt)) return NULL;
  ct_tensor *out = ct_empty(shape, dt.result, ct_device_of(a));
  if (out && run_binary(full, op, out, a, b, dt.compute) != CT_OK) {
    ct_free(out);
    return NULL;
  }
  return out;
}

// A scalar behaves like a Python number: it does not widen a tensor's dtype,
// except that a non-integral scalar makes an integer tensor float32, and an
// integral one makes a bool tensor int64.
static ct_dtype scalar_promote(ct_dtype t, double s) {
  bool integral = isfinite(s) && s == floor(s);
  if (ct_dtype_is_floating(t)) return t;
  if (!integral) return CT_F32;
  return t == CT_BOOL ? CT_I64 : t;
}

static int scalar_dtypes(const char *name, ct_binary_op op, ct_dtype t, double s, op_dtypes *dt) {
  if (op == CT_OP_POW && !ct_dtype_is_floating(t) && s < 0 && s == floor(s))
    return ct_fail(CT_ERR_VALUE, "%s: Integers to negative integer powers are not allowed "
                   "(a %s tensor to the power %g); use a float tensor", name, ct_dtype_name(t), s);
  if (is_comparison(op)) {
    dt->result = CT_BOOL;
    bool integral = isfinite(s) && s == floor(s);
    dt->compute = ct_dtype_is_floating(t) || integral ? t : CT_F64;
    if (dt->compute == CT_BOOL) dt->compute = CT_I64;
    return CT_OK;
  }
  return binary_dtypes(name, op, scalar_promote(t, s), dt);
}

static int run_binary_scalar(const char *name, ct_binary_op op, ct_tensor *out, const ct_tensor *a,
                             double s, ct_dtype compute) {
  ct_tensor *ca = as_dtype(a, compute);
  ct_dtype out_compute = is_comparison(op) ? CT_BOOL : compute;
  ct_tensor *res = out->dtype == out_compute ? ct_retain(out) : ct_empty_like(out, out_compute, ct_device_of(out));
  int rc = CT_OK;
  if (!ca || !res) {
    rc = ct_last_status();
  } else if (ct_numel(out) > 0) {
    const cti_backend *be = cti_backend_for(name, ct_device_of(out));
    if (!be) {
      rc = ct_last_status();
    } else {
      const int64_t *strides[3] = {res->stride, ca->stride, NULL};
      cti_iter it;
      cti_iter_build(&it, res->ndim, res->shape, 2, strides);
      rc = san(name, stream_of(out), ca, NULL, res, NULL);
      if (rc == CT_OK)
        rc = be->binary_scalar(op, compute, &it, ct_data_ptr(res), ct_data_ptr(ca), s, stream_of(out));
      if (rc == CT_OK && res != out) rc = ct_copy_(out, res, false);
    }
  }
  ct_free(ca), ct_free(res);
  return rc;
}

int ct_binary_scalar_out(ct_binary_op op, ct_tensor *out, const ct_tensor *a, double s) {
  if ((unsigned)op >= CT_NUM_BINARY_OPS) return ct_fail(CT_ERR_VALUE, "ct_binary_scalar_out: invalid op %d", (int)op);
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_binary_op_name(op));
  if (!out || !a) return ct_fail(CT_ERR_VALUE, "%s: NULL tensor", full);
  if (same_device(full, out, a)) return ct_last_status();
  char x[128], y[128];
  if (!ct_shape_eq(ct_shape_of(out), ct_shape_of(a)))
    return ct_fail(CT_ERR_SHAPE, "%s: output has shape %s but the input has shape %s", full,
                   ct_shape_str(ct_shape_of(out), x, sizeof x), ct_shape_str(ct_shape_of(a), y, sizeof y));
  op_dtypes dt;
  if (scalar_dtypes(full, op, ct_dtype_of(a), s, &dt)) return ct_last_status();
  if (ct_dtype_of(out) != dt.result)
    return ct_fail(CT_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s",
                   full, ct_dtype_name(dt.result), ct_dtype_name(ct_dtype_of(out)));
  return run_binary_scalar(full, op, out, a, s, dt.compute);
}

ct_tensor *ct_binary_scalar(ct_binary_op op, const ct_tensor *a, double s) {
  if ((unsigned)op >= CT_NUM_BINARY_OPS) {
    ct_fail(CT_ERR_VALUE, "ct_binary_scalar: invalid op %d", (int)op);
    return NULL;
  }
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_binary_op_name(op));
  if (!a) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", full);
    return NULL;
  }
  op_dtypes dt;
  if (scalar_dtypes(full, op, ct_dtype_of(a), s, &dt)) return NULL;
  ct_tensor *out = ct_empty(ct_shape_of(a), dt.result, ct_device_of(a));
  if (out && run_binary_scalar(full, op, out, a, s, dt.compute) != CT_OK) {
    ct_free(out);
    return NULL;
  }
  return out;
}

ct_tensor *ct_add(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_ADD, a, b); }
ct_tensor *ct_sub(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_SUB, a, b); }
ct_tensor *ct_mul(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_MUL, a, b); }
ct_tensor *ct_div(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_DIV, a, b); }
ct_tensor *ct_maximum(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_MAXIMUM, a, b); }
ct_tensor *ct_minimum(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_MINIMUM, a, b); }
ct_tensor *ct_pow(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_POW, a, b); }
ct_tensor *ct_add_scalar(const ct_tensor *a, double s) { return ct_binary_scalar(CT_OP_ADD, a, s); }
ct_tensor *ct_sub_scalar(const ct_tensor *a, double s) { return ct_binary_scalar(CT_OP_SUB, a, s); }
ct_tensor *ct_mul_scalar(const ct_tensor *a, double s) { return ct_binary_scalar(CT_OP_MUL, a, s); }
ct_tensor *ct_div_scalar(const ct_tensor *a, double s) { return ct_binary_scalar(CT_OP_DIV, a, s); }
ct_tensor *ct_pow_scalar(const ct_tensor *a, double s) { return ct_binary_scalar(CT_OP_POW, a, s); }
ct_tensor *ct_eq(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_EQ, a, b); }
ct_tensor *ct_ne(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_NE, a, b); }
ct_tensor *ct_lt(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_LT, a, b); }
ct_tensor *ct_le(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_LE, a, b); }
ct_tensor *ct_gt(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_GT, a, b); }
ct_tensor *ct_ge(const ct_tensor *a, const ct_tensor *b) { return ct_binary(CT_OP_GE, a, b); }

// ---- unary ops -------------------------------------------------------------------------------
static bool unary_needs_float(ct_unary_op op) {
  return op == CT_OP_EXP || op == CT_OP_LOG || op == CT_OP_SQRT || op == CT_OP_SIGMOID ||
         op == CT_OP_TANH;
}

static int unary_dtypes(const char *name, ct_unary_op op, ct_dtype in, op_dtypes *dt) {
  dt->compute = in;
  dt->result = in;
  if (op == CT_OP_ISFINITE) {
    dt->result = CT_BOOL;
  } else if (unary_needs_float(op) && !ct_dtype_is_floating(in)) {
    dt->compute = dt->result = CT_F32; // integers promote to the default float, as torch.exp
  } else if (in == CT_BOOL && (op == CT_OP_NEG || op == CT_OP_ABS || op == CT_OP_RELU)) {
    return ct_fail(CT_ERR_DTYPE, "%s: not supported for a bool tensor; cast it first", name);
  }
  return CT_OK;
}

static int run_unary(const char *name, ct_unary_op op, ct_tensor *out, const ct_tensor *a, ct_dtype compute) {
  ct_tensor *ca = as_dtype(a, compute);
  if (!ca) return ct_last_status();
  int rc = CT_OK;
  if (ct_numel(out) > 0) {
    const cti_backend *be = cti_backend_for(name, ct_device_of(out));
    if (!be) {
      rc = ct_last_status();
    } else {
      const int64_t *strides[3] = {out->stride, ca->stride, NULL};
      cti_iter it;
      cti_iter_build(&it, out->ndim, out->shape, 2, strides);
      rc = san(name, stream_of(out), ca, NULL, out, NULL);
      if (rc == CT_OK) rc = be->unary(op, compute, &it, ct_data_ptr(out), ct_data_ptr(ca), stream_of(out));
    }
  }
  ct_free(ca);
  return rc;
}

int ct_unary_out(ct_unary_op op, ct_tensor *out, const ct_tensor *a) {
  if ((unsigned)op >= CT_NUM_UNARY_OPS) return ct_fail(CT_ERR_VALUE, "ct_unary_out: invalid op %d", (int)op);
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_unary_op_name(op));
  if (!out || !a) return ct_fail(CT_ERR_VALUE, "%s: NULL tensor", full);
  if (same_device(full, out, a)) return ct_last_status();
  char x[128], y[128];
  if (!ct_shape_eq(ct_shape_of(out), ct_shape_of(a)))
    return ct_fail(CT_ERR_SHAPE, "%s: output has shape %s but the input has shape %s", full,
                   ct_shape_str(ct_shape_of(out), x, sizeof x), ct_shape_str(ct_shape_of(a), y, sizeof y));
  op_dtypes dt;
  if (unary_dtypes(full, op, ct_dtype_of(a), &dt)) return ct_last_status();
  if (ct_dtype_of(out) != dt.result)
    return ct_fail(CT_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s",
                   full, ct_dtype_name(dt.result), ct_dtype_name(ct_dtype_of(out)));
  return run_unary(full, op, out, a, dt.compute);
}

ct_tensor *ct_unary(ct_unary_op op, const ct_tensor *a) {
  if ((unsigned)op >= CT_NUM_UNARY_OPS) {
    ct_fail(CT_ERR_VALUE, "ct_unary: invalid op %d", (int)op);
    return NULL;
  }
  char full[32];
  snprintf(full, sizeof full, "ct_%s", ct_unary_op_name(op));
  if (!a) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", full);
    return NULL;
  }
  op_dtypes dt;
  if (unary_dtypes(full, op, ct_dtype_of(a), &dt)) return NULL;
  ct_tensor *out = ct_empty(ct_shape_of(a), dt.result, ct_device_of(a));
  if (out && run_unary(full, op, out, a, dt.compute) != CT_OK) {
    ct_free(out);
    return NULL;
  }
  return out;
}

ct_tensor *ct_neg(const ct_tensor *a) { return ct_unary(CT_OP_NEG, a); }
ct_tensor *ct_abs(const ct_tensor *a) { return ct_unary(CT_OP_ABS, a); }
ct_tensor *ct_exp(const ct_tensor *a) { return ct_unary(CT_OP_EXP, a); }
ct_tensor *ct_log(const ct_tensor *a) { return ct_unary(CT_OP_LOG, a); }
ct_tensor *ct_sqrt(const ct_tensor *a) { return ct_unary(CT_OP_SQRT, a); }
ct_tensor *ct_relu(const ct_tensor *a) { return ct_unary(CT_OP_RELU, a); }
ct_tensor *ct_sigmoid(const ct_tensor *a) { return ct_unary(CT_OP_SIGMOID, a); }
ct_tensor *ct_tanh(const ct_tensor *a) { return ct_unary(CT_OP_TANH, a); }
ct_tensor *ct_isfinite(const ct_tensor *a) { return ct_unary(CT_OP_ISFINITE, a); }

int ct_any_nonfinite(const ct_tensor *a, bool *out) {
  if (!a || !out) return ct_fail(CT_ERR_VALUE, "ct_any_nonfinite: NULL argument");
  *out = false;
  if (!ct_dtype_is_floating(ct_dtype_of(a)) || ct_numel(a) == 0) return CT_OK;
  const cti_backend *be = cti_backend_for("ct_any_nonfinite", ct_device_of(a));
  if (!be) return ct_last_status();
  // The answer is a host bool: the host waits for it (a sync point).
  int rc = cti_sync_begin("ct_any_nonfinite", ct_device_of(a), CTI_SYNC_REPORT);
  if (rc) return rc;
  ct_tensor *c = ct_contiguous(a);
  rc = c ? san("ct_any_nonfinite", stream_of(c), c, NULL, NULL, NULL) : (int)ct_last_status();
  if (rc == CT_OK) rc = be->any_nonfinite(ct_dtype_of(c), ct_numel(c), ct_data_ptr(c), out, stream_of(c));
  if (rc == CT_OK) cti_observe_host_waits(stream_of(c)); // the answer came back to the host
  ct_free(c);
  cti_sync_end();
  return rc;
}

int ct_amp_non_finite_check_(const ct_tensor *t, ct_tensor *found_inf) {
  static const char op[] = "ct_amp_non_finite_check_";
  if (!t || !found_inf) return ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
  if (ct_dtype_of(found_inf) != CT_F32)
    return ct_fail(CT_ERR_DTYPE, "%s: found_inf must be a float tensor, got %s", op,
                   ct_dtype_name(ct_dtype_of(found_inf)));
  if (ct_numel(found_inf) != 1)
    return ct_fail(CT_ERR_SHAPE, "%s: found_inf must be a one-element tensor, got %lld elements",
                   op, (long long)ct_numel(found_inf));
  if (!ct_device_eq(ct_device_of(t), ct_device_of(found_inf))) {
    char a[CT_DEVICE_STR_MAX], b[CT_DEVICE_STR_MAX];
    return ct_fail(CT_ERR_DEVICE, "%s: found_inf is on %s but the tensor is on %s", op,
                   ct_device_str(ct_device_of(found_inf), a), ct_device_str(ct_device_of(t), b));
  }
  if (!ct_dtype_is_floating(ct_dtype_of(t)) || ct_numel(t) == 0) return CT_OK;
  const cti_backend *be = cti_backend_for(op, ct_device_of(t));
  if (!be) return ct_last_status();
  ct_tensor *c = ct_contiguous(t);
  if (!c) return ct_last_status();
  int rc = san(op, stream_of(c), c, found_inf, found_inf, NULL);
  if (rc == CT_OK)
    rc = be->found_nonfinite(ct_dtype_of(c), ct_numel(c), ct_data_ptr(c), (float *)ct_data_ptr(found_inf),
                             stream_of(c));
  ct_free(c);
  return rc;
}

// ---- reductions ----------------------------------------------------------------------------------
static const char *reduce_names[CT_NUM_REDUCE_OPS] = {"sum", "mean", "max", "argmax"};

// Result dtype of a reduction, or an error.
static int reduce_dtype(const char *name, ct_reduce_op op, ct_dtype in, ct_dtype *out) {
  switch (op) {
  case CT_OP_SUM: *out = ct_dtype_is_floating(in) ? in : CT_I64; return CT_OK;
  case CT_OP_MEAN:
    if (!ct_dtype_is_floating(in))
      return ct_fail(CT_ERR_DTYPE, "%s: could not infer output dtype. Input dtype must be a "
                     "floating point dtype. Got: %s", name, ct_dtype_name(in));
    *out = in;
    return CT_OK;
  case CT_OP_MAX: *out = in; return CT_OK;
  case CT_OP_ARGMAX: *out = CT_I64; return CT_OK;
  default: return ct_fail(CT_ERR_VALUE, "%s: invalid reduction %d", name, (int)op);
  }
}

// Reduces contiguous `a` viewed as (outer, r, inner) into out (and idx).
static int run_reduce(const char *name, ct_reduce_op op, const ct_tensor *a, ct_tensor *out,
                      ct_tensor *idx, int64_t outer, int64_t r, int64_t inner) {
  if (ct_numel(out) == 0) return CT_OK;
  if (r == 0) {
    if (op == CT_OP_MAX || op == CT_OP_ARGMAX)
      return ct_fail(CT_ERR_SHAPE, "%s: Expected reduction dim to have non-zero size", name);
    return ct_fill_(out, op == CT_OP_MEAN ? NAN : 0.0);
  }
  const cti_backend *be = cti_backend_for(name, ct_device_of(a));
  if (!be) return ct_last_status();
  ct_tensor *c = ct_contiguous(a);
  if (!c) return ct_last_status();
  int rc = san(name, stream_of(c), c, NULL, out, idx);
  if (rc == CT_OK)
    rc = be->reduce(op, ct_dtype_of(c), ct_dtype_of(out), ct_data_ptr(c), ct_data_ptr(out),
                    idx ? (int64_t *)ct_data_ptr(idx) : NULL, outer, r, inner, stream_of(c));
  ct_free(c);
  return rc;
}

static ct_tensor *reduce_all(ct_reduce_op op, const ct_tensor *a) {
  char name[32];
  snprintf(name, sizeof name, "ct_%s", reduce_names[op]);
  if (!a) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", name);
    return NULL;
  }
  ct_dtype dt;
  if (reduce_dtype(name, op, ct_dtype_of(a), &dt)) return NULL;
  if (ct_numel(a) == 0 && (op == CT_OP_MAX || op == CT_OP_ARGMAX)) {
    ct_fail(CT_ERR_SHAPE, "%s: Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument.", name);
    return NULL;
  }
  ct_tensor *out = ct_empty(CT_SCALAR_SHAPE, dt, ct_device_of(a));
  if (out && run_reduce(name, op, a, out, NULL, 1, ct_numel(a), 1) != CT_OK) {
    ct_free(out);
    return NULL;
  }
  return out;
}

ct_tensor *ct_sum(const ct_tensor *a) { return reduce_all(CT_OP_SUM, a); }
ct_tensor *ct_mean(const ct_tensor *a) { return reduce_all(CT_OP_MEAN, a); }
ct_tensor *ct_max(const ct_tensor *a) { return reduce_all(CT_OP_MAX, a); }
ct_tensor *ct_argmax(const ct_tensor *a) { return reduce_all(CT_OP_ARGMAX, a); }

static ct_tensor *reduce_dim(ct_reduce_op op, const ct_tensor *a, int dim, bool keepdim,
                             ct_tensor **indices) {
  char name[32];
  snprintf(name, sizeof name, "ct_%s_dim", reduce_names[op]);
  if (indices) *indices = NULL;
  if (!a) {
    ct_fail(CT_ERR_VALUE, "%s: NULL tensor", name);
    return NULL;
  }
  int d = cti_wrap_dim(name, dim, ct_ndim(a));
  if (d < 0) return NULL;
  ct_dtype dt;
  if (reduce_dtype(name, op, ct_dtype_of(a), &dt)) return NULL;
  ct_shape in = ct_shape_of(a), shape = {0, {0}};
  int64_t outer = 1, r = in.ndim ? in.d[d] : 1, inner = 1;
  for (int i = 0; i < in.ndim; ++i) {
    if (i < d) outer *= in.d[i];
    if (i > d) inner *= in.d[i];
    if (i != d) shape.d[shape.ndim++] = in.d[i];
    else if (keepdim) shape.d[shape.ndim++] = 1;
  }
  ct_tensor *out = ct_empty(shape, dt, ct_device_of(a));
  ct_tensor *idx = indices ? ct_empty(shape, CT_I64, ct_device_of(a)) : NULL;
  if (!out || (indices && !idx) || run_reduce(name, op, a, out, idx, outer, r, inner) != CT_OK) {
    ct_free(out);
    ct_free(idx);
    return NULL;
  }
  if (indices) *indices = idx;
  return out;
}

ct_tensor *ct_sum_dim(const ct_tensor *a, int dim, bool keepdim) {
  return reduce_dim(CT_OP_SUM, a, dim, keepdim, NULL);
}
ct_tensor *ct_mean_dim(const ct_tensor *a, int dim, bool keepdim) {
  return reduce_dim(CT_OP_MEAN, a, dim, keepdim, NULL);
}
ct_tensor *ct_max_dim(const ct_tensor *a, int dim, bool keepdim, ct_tensor **indices) {
  return reduce_dim(CT_OP_MAX, a, dim, keepdim, indices);
}
ct_tensor *ct_argmax_dim(const ct_tensor *a, int dim, bool keepdim) {
  return reduce_dim(CT_OP_ARGMAX, a, dim, keepdim, NULL);
}

// ---- matrix products ------------------------------------------------------------------------------
static bool gemm_dtype(ct_dtype dt) {
  return dt == CT_F32 || dt == CT_F64 || dt == CT_F16 || dt == CT_BF16;
}

static int check_gemm_operands(const char *name, const ct_tensor *a, const ct_tensor *b) {
  if (!a || !b) return ct_fail(CT_ERR_VALUE, "%s: NULL tensor", name);
  if (same_device(name, a, b)) return ct_last_status();
  if (ct_dtype_of(a) != ct_dtype_of(b))
    return ct_fail(CT_ERR_DTYPE, "%s: expected both operands to have the same dtype, but got %s and %s",
                   name, ct_dtype_name(ct_dtype_of(a)), ct_dtype_name(ct_dtype_of(b)));
  if (!gemm_dtype(ct_dtype_of(a)))
    return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s (supported: float32, float64, "
                   "float16, bfloat16)", name, ct_dtype_name(ct_dtype_of(a)));
  return CT_OK;
}

// How a backend reads matrix (rows, cols) with strides (s_row, s_col): as
// stored (row-major, ld = row stride) or transposed (column-major). False
// when neither holds and a copy is needed.
static bool matrix_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, bool *trans, int64_t *ld) {
  if ((s_col == 1 || cols == 1) && (rows == 1 || s_row >= (cols > 1 ? cols : 1))) {
    *trans = false;
    *ld = rows == 1 ? (cols > 1 ? cols : 1) : s_row;
    return *ld >= 1;
  }
  if ((s_row == 1 || rows == 1) && (cols == 1 || s_col >= (rows > 1 ? rows : 1))) {
    *trans = true;
    *ld = cols == 1 ? (rows > 1 ? rows : 1) : s_col;
    return *ld >= 1;
  }
  return false;
}

// C (batch, m, n) [contiguous, in out] = alpha * A (batch, m, k) @ B (batch, k, n) + beta * C.
// A and B are 3-d (batch stride may be 0); copies them when their layout needs it.
static int run_gemm(const char *name, const ct_tensor *A, const ct_tensor *B, ct_tensor *C,
                    double alpha, double beta) {
  int64_t batch = A->shape[0], m = A->shape[1], k = A->shape[2], n = B->shape[2];
  if (batch == 0 || m == 0 || n == 0) return CT_OK;
  if (k == 0) return beta == 0 ? ct_zero_(C) : (beta == 1 ? CT_OK : ct_binary_scalar_out(CT_OP_MUL, C, C, beta));
  const cti_backend *be = cti_backend_for(name, ct_device_of(C));
  if (!be) return ct_last_status();
  ct_tensor *a = ct_retain((ct_tensor *)A), *b = ct_retain((ct_tensor *)B);
  bool ta, tb;
  int64_t lda, ldb;
  if (!matrix_layout(m, k, a->stride[1], a->stride[2], &ta, &lda)) {
    ct_tensor *c = ct_clone(a);
    ct_free(a);
    if (!(a = c)) return ct_free(b), ct_last_status();
    matrix_layout(m, k, a->stride[1], a->stride[2], &ta, &lda);
  }
  if (!matrix_layout(k, n, b->stride[1], b->stride[2], &tb, &ldb)) {
    ct_tensor *c = ct_clone(b);
    ct_free(b);
    if (!(b = c)) return ct_free(a), ct_last_status();
    matrix_layout(k, n, b->stride[1], b->stride[2], &tb, &ldb);
  }
  int64_t sa = batch > 1 ? a->stride[0] : 0, sb = batch > 1 ? b->stride[0] : 0;
  // C is read too unless beta is 0; a write after a read on one stream is ordered anyway.
  int rc = san(name, stream_of(C), a, b, C, NULL);
  if (rc == CT_OK)
    rc = be->gemm(ct_dtype_of(C), ta, tb, m, n, k, alpha, ct_data_ptr(a), lda, sa, ct_data_ptr(b), ldb, sb,
                  beta, ct_data_ptr(C), n, m * n, batch, stream_of(C));
  ct_free(a);
  ct_free(b);
  return rc;
}

static int shape_mismatch(const char *name, int64_t r1, int64_t c1, int64_t r2, int64_t c2) {
  return ct_fail(CT_ERR_SHAPE, "%s: mat1 and mat2 shapes cannot be multiplied (%" PRId64 "x%" PRId64
                 " and %" PRId64 "x%" PRId64 ")", name, r1, c1, r2, c2);
}

// 3-d product with batch broadcasting (1 stretches); leaves the result (batch, m, n).
static ct_tensor *batched(const char *name, const ct_tensor *a, const ct_tensor *b) {
  int64_t ba = a->shape[0], bb = b->shape[0];
  if (a->shape[2] != b->shape[1]) {
    shape_mismatch(name, a->shape[1], a->shape[2], b->shape[1], b->shape[2]);
    return NULL;
  }
  if (ba != bb && ba != 1 && bb != 1) {
    ct_fail(CT_ERR_SHAPE, "%s: batch sizes %" PRId64 " and %" PRId64 " do not broadcast", name, ba, bb);
    return NULL;
  }
  int64_t batch = ba == 1 ? bb : ba;
  ct_tensor *ea = ct_expand(a, CT_SHAPE(batch, a->shape[1], a->shape[2]));
  ct_tensor *eb = ct_expand(b, CT_SHAPE(batch, b->shape[1], b->shape[2]));
  ct_tensor *out = ea && eb ? ct_empty(CT_SHAPE(batch, a->shape[1], b->shape[2]), ct_dtype_of(a), ct_device_of(a)) : NULL;
  if (out && run_gemm(name, ea, eb, out, 1.0, 0.0) != CT_OK) {
    ct_free(out);
    out = NULL;
  }
  ct_free(ea);
  ct_free(eb);
  return out;
}

ct_tensor *ct_mm(const ct_tensor *a, const ct_tensor *b) {
  if (check_gemm_operands("ct_mm", a, b)) return NULL;
  if (ct_ndim(a) != 2 || ct_ndim(b) != 2) {
    ct_fail(CT_ERR_SHAPE, "ct_mm: expected 2-D tensors, got %dD and %dD", ct_ndim(a), ct_ndim(b));
    return NULL;
  }
  if (a->shape[1] != b->shape[0]) {
    shape_mismatch("ct_mm", a->shape[0], a->shape[1], b->shape[0], b->shape[1]);
    return NULL;
  }
  ct_tensor *a3 = ct_unsqueeze(a, 0), *b3 = ct_unsqueeze(b, 0);
  ct_tensor *o3 = a3 && b3 ? batched("ct_mm", a3, b3) : NULL;
  ct_tensor *out = o3 ? ct_squeeze(o3, 0) : NULL;
  ct_free(a3), ct_free(b3), ct_free(o3);
  return out;
}

ct_tensor *ct_bmm(const ct_tensor *a, const ct_tensor *b) {
  if (check_gemm_operands("ct_bmm", a, b)) return NULL;
  if (ct_ndim(a) != 3 || ct_ndim(b) != 3) {
    ct_fail(CT_ERR_SHAPE, "ct_bmm: expected 3-D tensors, got %dD and %dD", ct_ndim(a), ct_ndim(b));
    return NULL;
  }
  if (a->shape[0] != b->shape[0] || a->shape[2] != b->shape[1]) { // torch.bmm's words
    ct_fail(CT_ERR_SHAPE, "ct_bmm: Expected size for first two dimensions of batch2 tensor to be: [%" PRId64
            ", %" PRId64 "] but got: [%" PRId64 ", %" PRId64 "].", a->shape[0], a->shape[2], b->shape[0],
            b->shape[1]);
    return NULL;
  }
  return batched("ct_bmm", a, b);
}

// torch.matmul's messages for operands that do not fit, by the route torch
// 1.13 takes (its _matmul_impl), so that the sizes named are the ones it names:
//   vector . vector            dot: "inconsistent tensor size ..."
//   matrix @ vector            mv:  "size mismatch, got ROWS, ROWSxK,N"
//   vector/matrix @ matrix     mm:  "mat1 and mat2 shapes cannot be multiplied (MxK and NxP)"
//   batch @ vector or matrix   the batch is folded into the rows first (2,3,4)@(5,) is
//                              mv of 6x4 and 5; (2,3,4)@(5,6) is mm of 6x4 and 5x6
//   vector or matrix @ batch   the transposed product is folded the same way:
//                              (3,4)@(2,5,6) is mm of b.mT (12x5) and a.mT (4x3)
//   batch @ batch              the batch dim broadcasts, then bmm's message
// shape_mismatch (mm's) and mv_message write the messages the routes end in.
static int mv_message(int64_t rows, int64_t k, int64_t n) {
  return ct_fail(CT_ERR_SHAPE, "ct_matmul: size mismatch, got %" PRId64 ", %" PRId64 "x%" PRId64 ",%" PRId64,
                 rows, rows, k, n);
}

static int matmul_shape_error(const ct_tensor *a, const ct_tensor *b) {
  const int na = a->ndim, nb = b->ndim;
  const int64_t *sa = a->shape, *sb = b->shape;
  if (na == 3 && nb == 3 && sa[0] != sb[0] && sa[0] != 1 && sb[0] != 1)
    return ct_fail(CT_ERR_SHAPE, "ct_matmul: The size of tensor a (%" PRId64 ") must match the size of "
                   "tensor b (%" PRId64 ") at non-singleton dimension 0", sa[0], sb[0]);
  const int64_t ka = sa[na - 1], kb = nb == 1 ? sb[0] : sb[nb - 2];
  if (ka == kb) return CT_OK;
  if (na == 1 && nb == 1)
    return ct_fail(CT_ERR_SHAPE, "ct_matmul: inconsistent tensor size, expected tensor [%" PRId64 "] and src [%"
                   PRId64 "] to have the same number of elements, but got %" PRId64 " and %" PRId64
                   " elements respectively", ka, kb, ka, kb);
  if (nb == 1) // a's rows (a batch folded into them) times a vector
    return mv_message(na == 3 ? sa[0] * sa[1] : sa[0], ka, kb);
  if (na == 3 && nb == 2) return shape_mismatch("ct_matmul", sa[0] * sa[1], ka, kb, sb[1]);
  if (nb == 3 && na == 2) return shape_mismatch("ct_matmul", sb[0] * sb[2], kb, ka, sa[0]); // b.mT folded @ a.mT
  if (nb == 3 && na == 1) return mv_message(sb[0] * sb[2], kb, ka); // b.mT folded @ a
  if (nb == 3) { // both batched: bmm after the batch broadcast
    const int64_t batch = sa[0] != 1 ? sa[0] : sb[0];
    return ct_fail(CT_ERR_SHAPE, "ct_matmul: Expected size for first two dimensions of batch2 tensor to be: [%" PRId64
                   ", %" PRId64 "] but got: [%" PRId64 ", %" PRId64 "].", batch, ka, batch, kb);
  }
  return shape_mismatch("ct_matmul", na == 1 ? 1 : sa[0], ka, kb, sb[1]); // vector or matrix @ matrix
}

ct_tensor *ct_matmul(const ct_tensor *a, const ct_tensor *b) {
  if (check_gemm_operands("ct_matmul", a, b)) return NULL;
  int na = ct_ndim(a), nb = ct_ndim(b);
  if (na == 0 || nb == 0 || na > 3 || nb > 3) {
    ct_fail(CT_ERR_SHAPE, "ct_matmul: supports 1-D to 3-D operands, got %dD and %dD", na, nb);
    return NULL;
  }
  if (matmul_shape_error(a, b)) return NULL;
  // Vectors become matrices (a: a row, b: a column); the added dim goes away after.
  ct_tensor *a2 = na == 1 ? ct_unsqueeze(a, 0) : ct_retain((ct_tensor *)a);
  ct_tensor *b2 = nb == 1 ? ct_unsqueeze(b, 1) : ct_retain((ct_tensor *)b);
  ct_tensor *a3 = a2 && a2->ndim == 2 ? ct_unsqueeze(a2, 0) : ct_retain(a2);
  ct_tensor *b3 = b2 && b2->ndim == 2 ? ct_unsqueeze(b2, 0) : ct_retain(b2);
  ct_tensor *o3 = a3 && b3 ? batched("ct_matmul", a3, b3) : NULL;
  ct_tensor *out = NULL;
  if (o3) {
    // Result shape: batch dims if any, then n (unless a was a vector), m (unless b was).
    ct_shape s = {0, {0}};
    if (na == 3 || nb == 3) s.d[s.ndim++] = o3->shape[0];
    if (na > 1) s.d[s.ndim++] = o3->shape[1];
    if (nb > 1) s.d[s.ndim++] = o3->shape[2];
    out = ct_reshape(o3, s);
  }
  ct_free(a2), ct_free(b2), ct_free(a3), ct_free(b3), ct_free(o3);
  return out;
}

int ct_addmm_(ct_tensor *out, const ct_tensor *a, const ct_tensor *b, double alpha, double beta) {
  if (!out) return ct_fail(CT_ERR_VALUE, "ct_addmm_: NULL tensor");
  if (check_gemm_operands("ct_addmm_", a, b) || check_gemm_operands("ct_addmm_", out, a))
    return ct_last_status();
  if (ct_ndim(a) != 2 || ct_ndim(b) != 2 || ct_ndim(out) != 2)
    return ct_fail(CT_ERR_SHAPE, "ct_addmm_: expected 2-D tensors, got %dD, %dD and out %dD",
                   ct_ndim(a), ct_ndim(b), ct_ndim(out));
  if (a->shape[1] != b->shape[0])
    return shape_mismatch("ct_addmm_", a->shape[0], a->shape[1], b->shape[0], b->shape[1]);
  if (out->shape[0] != a->shape[0] || out->shape[1] != b->shape[1])
    return ct_fail(CT_ERR_SHAPE, "ct_addmm_: out is %" PRId64 "x%" PRId64 " but the product is %"
                   PRId64 "x%" PRId64, out->shape[0], out->shape[1], a->shape[0], b->shape[1]);
  if (!ct_is_contiguous(out))
    return ct_fail(CT_ERR_VALUE, "ct_addmm_: out must be contiguous");
  ct_tensor *a3 = ct_unsqueeze(a, 0), *b3 = ct_unsqueeze(b, 0), *o3 = ct_unsqueeze(out, 0);
  int rc = a3 && b3 && o3 ? run_gemm("ct_addmm_", a3, b3, o3, alpha, beta) : (int)ct_last_status();
  ct_free(a3), ct_free(b3), ct_free(o3);
  return rc;
}
