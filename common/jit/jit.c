// SPDX-License-Identifier: MIT
//
// jit: the JIT's dispatcher, what ops.c is to the runtime's ops.
//
// A fused call is checked once here, whatever the device: the counts of
// inputs and scalars, NULLs, one device for all inputs, dtypes the JIT takes
// (spec.c), shapes that broadcast (ops.c's rule and message), the output's
// shape and dtype. Then the kernel is found (its ct_jit_fn remembers the
// last one; else cache.c: memory, disk, compiler) and run over a
// cti_jit_args that describes every operand at the output's shape (stride 0
// where an input is broadcast), with dims that are contiguous in every
// operand merged.
//
// The unfused chain walks the same AST and calls the runtime's public ops,
// one per operator, so the two paths differ only in fusion: same
// broadcasting, same promotion, same errors.
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "jit_impl.h"
#include "ops.h"
#include "stream.h"

_Static_assert(sizeof(cti_jit_args) == 8 + 4 + 4 + 8 * CT_MAX_DIMS * (1 + CTI_JIT_MAX_OPERANDS) +
                                           sizeof(void *) * CTI_JIT_MAX_OPERANDS + 8 * CT_JIT_MAX_SCALARS,
               "cti_jit_args must have no padding: the generated source declares it field for field");

struct ct_jit_fn {
  cti_jit_ast ast;
  pthread_mutex_t lock; // guards the memo
  cti_jit_kernel *memo; // the last call's kernel, valid while memo_gen is the cache's generation
  uint64_t memo_gen;
  ct_dtype memo_in[CT_JIT_MAX_INPUTS];
  ct_device memo_dev;
};

ct_jit_fn *ct_jit_create(const char *expr, const char *inputs, const char *scalars) {
  const char *op = "ct_jit_create";
  ct_jit_fn *fn = calloc(1, sizeof *fn);
  if (!fn) {
    ct_fail(CT_ERR_OOM, "%s: out of memory", op);
    return NULL;
  }
  if (cti_jit_parse(op, expr, inputs, scalars, &fn->ast) != CT_OK) {
    free(fn);
    return NULL;
  }
  bool any_input = false;
  for (int i = 0; i < fn->ast.n; ++i) any_input |= fn->ast.nodes[i].kind == CTI_JIT_INPUT;
  if (!any_input) {
    cti_jit_fail_at(CT_ERR_VALUE, fn->ast.text, 0, (int)strlen(fn->ast.text),
                    "%s: the expression uses no input tensor (the inputs are declared as \"%s\")", op, inputs);
    cti_jit_ast_free(&fn->ast);
    free(fn);
    return NULL;
  }
  pthread_mutex_init(&fn->lock, NULL);
  return fn;
}

void ct_jit_free(ct_jit_fn *fn) {
  if (!fn) return;
  pthread_mutex_destroy(&fn->lock);
  cti_jit_ast_free(&fn->ast);
  free(fn);
}

const char *ct_jit_expr(const ct_jit_fn *fn) { return fn ? fn->ast.text : ""; }

// ---- the checks every call makes -------------------------------------------------
static int check_call(const char *op, const ct_jit_fn *fn, const ct_tensor *const *in, int n, const double *sc,
                      int ns) {
  if (!fn) return ct_fail(CT_ERR_VALUE, "%s: NULL function", op);
  const cti_jit_ast *A = &fn->ast;
  if (n != A->n_inputs || ns != A->n_scalars)
    return ct_fail(CT_ERR_VALUE, "%s: \"%s\" takes %d input%s and %d scalar%s, got %d and %d", op, A->text,
                   A->n_inputs, A->n_inputs == 1 ? "" : "s", A->n_scalars, A->n_scalars == 1 ? "" : "s", n, ns);
  if (!in || (ns > 0 && !sc)) return ct_fail(CT_ERR_VALUE, "%s: NULL input or scalar array", op);
  for (int k = 0; k < n; ++k) {
    if (!in[k]) return ct_fail(CT_ERR_VALUE, "%s: input %d ('%s') is NULL", op, k, A->input[k]);
    if (k > 0 && cti_same_device(op, in[0], in[k])) return ct_last_status();
  }
  return CT_OK;
}

static void dtypes_of(const ct_tensor *const *in, int n, ct_dtype *dt) {
  for (int k = 0; k < n; ++k) dt[k] = ct_dtype_of(in[k]);
}

static int broadcast_all(const char *op, const ct_tensor *const *in, int n, ct_shape *shape) {
  *shape = ct_shape_of(in[0]);
  for (int k = 1; k < n; ++k)
    if (cti_broadcast_shapes(op, *shape, ct_shape_of(in[k]), shape)) return ct_last_status();
  return CT_OK;
}

// The checks, the spec and the broadcast shape of a call.
static int prepare(const char *op, const ct_jit_fn *fn, const ct_tensor *const *in, int n, const double *sc, int ns,
                   cti_jit_spec *spec, ct_shape *shape) {
  memset(spec, 0, sizeof *spec);
  int rc = check_call(op, fn, in, n, sc, ns);
  if (rc) return rc;
  ct_dtype dt[CT_JIT_MAX_INPUTS];
  dtypes_of(in, n, dt);
  if ((rc = cti_jit_specialize(op, &fn->ast, dt, spec))) return rc;
  if ((rc = broadcast_all(op, in, n, shape))) cti_jit_spec_free(spec);
  return rc;
}

// ---- the fused call ----------------------------------------------------------------
static int kernel_for(const char *op, ct_jit_fn *fn, const cti_jit_spec *spec, ct_device dev, cti_jit_kernel **k) {
  const int n = fn->ast.n_inputs;
  const uint64_t gen = cti_jit_generation();
  pthread_mutex_lock(&fn->lock);
  bool hit = fn->memo && fn->memo_gen == gen && ct_device_eq(fn->memo_dev, dev) &&
             !memcmp(fn->memo_in, spec->in, (size_t)n * sizeof spec->in[0]);
  *k = hit ? fn->memo : NULL;
  pthread_mutex_unlock(&fn->lock);
  cti_jit_count_call(hit);
  if (hit) return CT_OK;
  uint64_t got_gen = 0;
  int rc = cti_jit_kernel_get(op, &fn->ast, spec, dev, k, &got_gen);
  if (rc) return rc;
  pthread_mutex_lock(&fn->lock);
  fn->memo = *k;
  fn->memo_gen = got_gen;
  fn->memo_dev = dev;
  memcpy(fn->memo_in, spec->in, (size_t)n * sizeof spec->in[0]);
  pthread_mutex_unlock(&fn->lock);
  return CT_OK;
}

// Runs the kernel over out (the broadcast shape) and the inputs, on dev's current stream.
static int run_fused(const char *op, ct_jit_fn *fn, ct_tensor *out, const ct_tensor *const *in, const double *sc,
                     const cti_jit_spec *spec) {
  if (ct_numel(out) == 0) return CT_OK;
  const ct_device dev = ct_device_of(out);
  if (!cti_backend_for(op, dev)) return ct_last_status(); // a usable device, current on this thread
  cti_jit_kernel *k = NULL;
  int rc = kernel_for(op, fn, spec, dev, &k);
  if (rc) return rc;
  const int n = fn->ast.n_inputs, nd = ct_ndim(out);
  const ct_shape shape = ct_shape_of(out);
  ct_tensor *ex[CT_JIT_MAX_INPUTS] = {0};
  int64_t st[CTI_JIT_MAX_OPERANDS][CT_MAX_DIMS];
  const int64_t *strides[CTI_JIT_MAX_OPERANDS];
  for (int d = 0; d < nd; ++d) st[0][d] = ct_stride(out, d);
  strides[0] = st[0];
  for (int j = 0; j < n && rc == CT_OK; ++j) {
    ex[j] = ct_expand(in[j], shape); // the input at the output's shape: stride 0 where broadcast
    if (!ex[j]) rc = ct_last_status();
    for (int d = 0; ex[j] && d < nd; ++d) st[j + 1][d] = ct_stride(ex[j], d);
    strides[j + 1] = st[j + 1];
  }
  if (rc == CT_OK) {
    cti_jit_args a;
    cti_jit_args_build(&a, nd, shape.d, n + 1, strides);
    a.ptr[0] = ct_data_ptr(out);
    for (int j = 0; j < n; ++j) a.ptr[j + 1] = ct_data_ptr(ex[j]);
    for (int j = 0; j < fn->ast.n_scalars; ++j) a.scalar[j] = sc[j];
    if (dev.type == CT_CPU) k->cpu(&a);
    else rc = cti_jit_cuda_launch(op, k->cu_function, &a, ct_stream_handle(ct_current_stream(dev)));
  }
  for (int j = 0; j < n; ++j) ct_free(ex[j]);
  return rc;
}

int ct_jit_call_out(ct_jit_fn *fn, ct_tensor *out, const ct_tensor *const *inputs, int n_inputs,
                    const double *scalars, int n_scalars) {
  const char *op = "ct_jit_call_out";
  cti_jit_spec spec;
  ct_shape shape;
  if (!out) return ct_fail(CT_ERR_VALUE, "%s: NULL output", op);
  int rc = prepare(op, fn, inputs, n_inputs, scalars, n_scalars, &spec, &shape);
  if (rc) return rc;
  char x[128], y[128];
  if (cti_same_device(op, out, inputs[0])) rc = ct_last_status();
  else if (!ct_shape_eq(shape, ct_shape_of(out)))
    rc = ct_fail(CT_ERR_SHAPE, "%s: output has shape %s but the broadcast result has shape %s", op,
                 ct_shape_str(ct_shape_of(out), x, sizeof x), ct_shape_str(shape, y, sizeof y));
  else if (ct_dtype_of(out) != spec.out)
    rc = ct_fail(CT_ERR_DTYPE, "%s: result type %s can't be cast to the desired output type %s", op,
                 ct_dtype_name(spec.out), ct_dtype_name(ct_dtype_of(out)));
  else
    rc = run_fused(op, fn, out, inputs, scalars, &spec);
  cti_jit_spec_free(&spec);
  return rc;
}

ct_tensor *ct_jit_call(ct_jit_fn *fn, const ct_tensor *const *inputs, int n_inputs, const double *scalars,
                       int n_scalars) {
  const char *op = "ct_jit_call";
  cti_jit_spec spec;
  ct_shape shape;
  if (prepare(op, fn, inputs, n_inputs, scalars, n_scalars, &spec, &shape)) return NULL;
  ct_tensor *out = ct_empty(shape, spec.out, ct_device_of(inputs[0]));
  if (out && run_fused(op, fn, out, inputs, scalars, &spec) != CT_OK) {
    ct_free(out);
    out = NULL;
  }
  cti_jit_spec_free(&spec);
  return out;
}

// ---- the unfused chain ---------------------------------------------------------------
static const ct_unary_op unary_op[CTI_JIT_NUM_FUNCS] = {
    [CTI_JIT_EXP] = CT_OP_EXP,         [CTI_JIT_LOG] = CT_OP_LOG,   [CTI_JIT_SQRT] = CT_OP_SQRT,
    [CTI_JIT_TANH] = CT_OP_TANH,       [CTI_JIT_SIGMOID] = CT_OP_SIGMOID,
    [CTI_JIT_RELU] = CT_OP_RELU,       [CTI_JIT_ABS] = CT_OP_ABS};

static ct_binary_op binary_op(const cti_jit_node *nd) {
  switch (nd->kind) {
  case CTI_JIT_ADD: return CT_OP_ADD;
  case CTI_JIT_SUB: return CT_OP_SUB;
  case CTI_JIT_MUL: return CT_OP_MUL;
  case CTI_JIT_DIV: return CT_OP_DIV;
  default: return nd->func == CTI_JIT_MIN ? CT_OP_MINIMUM : nd->func == CTI_JIT_MAX ? CT_OP_MAXIMUM : CT_OP_POW;
  }
}

// Plain numbers are computed as the generated code computes them: in double.
static double number_unary(const cti_jit_node *nd, double v) {
  if (nd->kind == CTI_JIT_NEG) return -v;
  switch (nd->func) {
  case CTI_JIT_EXP: return exp(v);
  case CTI_JIT_LOG: return log(v);
  case CTI_JIT_SQRT: return sqrt(v);
  case CTI_JIT_TANH: return tanh(v);
  case CTI_JIT_SIGMOID: return 1.0 / (1.0 + exp(-v));
  case CTI_JIT_RELU: return v != v ? v : v > 0 ? v : 0.0;
  default: return fabs(v);
  }
}
static double number_binary(ct_binary_op op, double a, double b) {
  switch (op) {
  case CT_OP_ADD: return a + b;
  case CT_OP_SUB: return a - b;
  case CT_OP_MUL: return a * b;
  case CT_OP_DIV: return a / b;
  case CT_OP_MINIMUM: return a != a || a <= b ? a : b;
  case CT_OP_MAXIMUM: return a != a || a >= b ? a : b;
  default: return pow(a, b);
  }
}

typedef struct value {
  ct_tensor *t; // NULL: a plain number
  double v;
} value;

// One operator of the chain: one op of the runtime (a number on the left of
// a non-commutative op becomes a 0-d tensor of the other side's dtype).
static int eval_node(const cti_jit_node *nd, value *va, value *vb, const ct_tensor *const *in, const double *sc,
                     value *r) {
  r->t = NULL;
  switch (nd->kind) {
  case CTI_JIT_INPUT:
    r->t = ct_retain((ct_tensor *)in[nd->index]);
    return CT_OK;
  case CTI_JIT_SCALAR:
    r->v = sc[nd->index];
    return CT_OK;
  case CTI_JIT_NUMBER:
    r->v = nd->value;
    return CT_OK;
  default:
    break;
  }
  const bool unary = nd->kind == CTI_JIT_NEG || (nd->kind == CTI_JIT_CALL && nd->b < 0);
  if (unary) {
    if (!va->t) r->v = number_unary(nd, va->v);
    else if (!(r->t = ct_unary(nd->kind == CTI_JIT_NEG ? CT_OP_NEG : unary_op[nd->func], va->t))) return ct_last_status();
    return CT_OK;
  }
  const ct_binary_op op = binary_op(nd);
  if (!va->t && !vb->t) {
    r->v = number_binary(op, va->v, vb->v);
  } else if (va->t && vb->t) {
    r->t = ct_binary(op, va->t, vb->t);
  } else if (va->t) {
    r->t = ct_binary_scalar(op, va->t, vb->v);
  } else if (op == CT_OP_ADD || op == CT_OP_MUL) {
    r->t = ct_binary_scalar(op, vb->t, va->v);
  } else {
    ct_tensor *num = ct_full((ct_shape){.ndim = 0}, va->v, ct_dtype_of(vb->t), ct_device_of(vb->t));
    r->t = num ? ct_binary(op, num, vb->t) : NULL;
    ct_free(num);
  }
  return r->t || (!va->t && !vb->t) ? CT_OK : ct_last_status();
}

ct_tensor *ct_jit_call_unfused(const ct_jit_fn *fn, const ct_tensor *const *inputs, int n_inputs,
                               const double *scalars, int n_scalars) {
  const char *op = "ct_jit_call_unfused";
  cti_jit_spec spec;
  ct_shape shape;
  if (prepare(op, fn, inputs, n_inputs, scalars, n_scalars, &spec, &shape)) return NULL;
  cti_jit_spec_free(&spec);
  const cti_jit_ast *A = &fn->ast;
  value *v = calloc((size_t)A->n, sizeof *v);
  if (!v) {
    ct_fail(CT_ERR_OOM, "%s: out of memory", op);
    return NULL;
  }
  int rc = CT_OK;
  for (int i = 0; i < A->n && rc == CT_OK; ++i) { // children first: each value is used once, by its parent
    const cti_jit_node *nd = &A->nodes[i];
    value none = {NULL, 0};
    rc = eval_node(nd, nd->a >= 0 ? &v[nd->a] : &none, nd->b >= 0 ? &v[nd->b] : &none, inputs, scalars, &v[i]);
    if (nd->a >= 0) ct_free(v[nd->a].t), v[nd->a].t = NULL;
    if (nd->b >= 0) ct_free(v[nd->b].t), v[nd->b].t = NULL;
  }
  ct_tensor *out = rc == CT_OK ? v[A->root].t : NULL;
  if (rc == CT_OK) v[A->root].t = NULL;
  for (int i = 0; i < A->n; ++i) ct_free(v[i].t);
  free(v);
  // A broadcast input that the expression never reads still shapes the result.
  if (out && !ct_shape_eq(ct_shape_of(out), shape)) {
    ct_tensor *e = ct_expand(out, shape), *c = e ? ct_contiguous(e) : NULL;
    ct_free(out), ct_free(e);
    out = c;
  }
  return out;
}

// ---- what the caller may ask ------------------------------------------------------------
int ct_jit_result_dtype(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_dtype *out) {
  const char *op = "ct_jit_result_dtype";
  if (!fn || !dtypes || !out) return ct_fail(CT_ERR_VALUE, "%s: NULL argument", op);
  if (n_inputs != fn->ast.n_inputs)
    return ct_fail(CT_ERR_VALUE, "%s: \"%s\" takes %d inputs, got %d dtypes", op, fn->ast.text, fn->ast.n_inputs,
                   n_inputs);
  cti_jit_spec spec;
  int rc = cti_jit_specialize(op, &fn->ast, dtypes, &spec);
  if (rc == CT_OK) *out = spec.out;
  cti_jit_spec_free(&spec);
  return rc;
}

char *ct_jit_source(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_device_type backend) {
  ct_dtype out;
  if (ct_jit_result_dtype(fn, dtypes, n_inputs, &out) != CT_OK) return NULL;
  cti_jit_spec spec;
  if (cti_jit_specialize("ct_jit_source", &fn->ast, dtypes, &spec) != CT_OK) return NULL;
  char *s = cti_jit_codegen(&fn->ast, &spec, backend == CT_CUDA ? CTI_JIT_CUDA : CTI_JIT_C);
  if (!s) ct_fail(CT_ERR_OOM, "ct_jit_source: out of memory");
  cti_jit_spec_free(&spec);
  return s;
}

int ct_jit_cache_dir(char *buf, size_t len) {
  if (!buf) return ct_fail(CT_ERR_VALUE, "ct_jit_cache_dir: NULL buffer");
  return cti_jit_cache_dir("ct_jit_cache_dir", buf, len);
}

int ct_jit_cache_entry_path(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_device device, char *buf,
                            size_t len) {
  const char *op = "ct_jit_cache_entry_path";
  ct_dtype out;
  int rc = ct_jit_result_dtype(fn, dtypes, n_inputs, &out);
  if (rc) return rc;
  if (!buf) return ct_fail(CT_ERR_VALUE, "%s: NULL buffer", op);
  if (device.type == CT_CUDA && !cti_backend_for(op, device)) return ct_last_status();
  cti_jit_spec spec;
  cti_jit_key key;
  char *source = NULL;
  if ((rc = cti_jit_specialize(op, &fn->ast, dtypes, &spec))) return rc;
  rc = cti_jit_key_for(op, &fn->ast, &spec, device, &key, &source);
  if (rc == CT_OK) rc = cti_jit_entry_path(op, &key, device.type, buf, len);
  cti_jit_key_free(&key);
  free(source);
  cti_jit_spec_free(&spec);
  return rc;
}

// ---- traffic ----------------------------------------------------------------------------
typedef struct tinfo {
  bool tensor;
  ct_shape shape;
  ct_dtype dt;
} tinfo;

static int64_t nbytes(ct_shape s, ct_dtype dt) { return ct_shape_numel(s) * (int64_t)ct_dtype_size(dt); }

int ct_jit_traffic_of(const ct_jit_fn *fn, const ct_tensor *const *in, int n, bool fused, ct_jit_traffic *out) {
  const char *op = "ct_jit_traffic_of";
  if (!out) return ct_fail(CT_ERR_VALUE, "%s: NULL output", op);
  memset(out, 0, sizeof *out);
  const double zeros[CT_JIT_MAX_SCALARS] = {0};
  cti_jit_spec spec;
  ct_shape shape;
  int rc = prepare(op, fn, in, n, zeros, fn ? fn->ast.n_scalars : 0, &spec, &shape);
  if (rc) return rc;
  const cti_jit_ast *A = &fn->ast;
  if (fused) {
    out->kernels = 1;
    for (int k = 0; k < n; ++k)
      if (spec.used[k]) out->bytes += nbytes(ct_shape_of(in[k]), ct_dtype_of(in[k]));
    out->bytes += nbytes(shape, spec.out);
    cti_jit_spec_free(&spec);
    return CT_OK;
  }
  tinfo *t = calloc((size_t)A->n, sizeof *t);
  if (!t) rc = ct_fail(CT_ERR_OOM, "%s: out of memory", op);
  for (int i = 0; rc == CT_OK && i < A->n; ++i) {
    const cti_jit_node *nd = &A->nodes[i];
    tinfo *r = &t[i];
    if (nd->kind == CTI_JIT_INPUT) {
      *r = (tinfo){true, ct_shape_of(in[nd->index]), ct_dtype_of(in[nd->index])};
      continue;
    }
    if (nd->a < 0) continue; // a number
    const tinfo *a = &t[nd->a], *b = nd->b >= 0 ? &t[nd->b] : NULL;
    if (!a->tensor && !(b && b->tensor)) continue;
    r->tensor = true;
    r->dt = (ct_dtype)spec.type[i];
    r->shape = a->tensor ? a->shape : b->shape;
    if (a->tensor && b && b->tensor && (rc = cti_broadcast_shapes(op, a->shape, b->shape, &r->shape))) break;
    const tinfo *kids[2] = {a, b};
    for (int c = 0; c < 2; ++c) {
      const tinfo *k = kids[c];
      if (!k || !k->tensor) continue;
      if (k->dt != r->dt && b && a->tensor && b->tensor) { // ops.c casts the operand at the result's shape first
        out->kernels++;
        out->bytes += nbytes(k->shape, k->dt) + nbytes(r->shape, r->dt);
        out->bytes += nbytes(r->shape, r->dt);
      } else {
        out->bytes += nbytes(k->shape, k->dt);
      }
    }
    out->kernels++;
    out->bytes += nbytes(r->shape, r->dt);
  }
  free(t);
  cti_jit_spec_free(&spec);
  return rc;
}
