// SPDX-License-Identifier: MIT
//
// nn_attention: GPT-2's causal multi-head self-attention, as nanoGPT's
// CausalSelfAttention: c_attn = Linear(C, 3C), c_proj = Linear(C, C),
// n_head heads of size hs = C / n_head, and between them
// torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
// without dropout.
//
// Forward, x (B, T, C):
//   qkv = c_attn(x)                               (B, T, 3C) = (B, T, 3, nh, hs)
//   QKV = qkv permuted to (3, B, nh, T, hs)       one contiguous copy: q, k, v by head
//   S   = q @ k^T                                 (B*nh, T, T), batched GEMM
//   P   = softmax(S / sqrt(hs)) under the causal mask (key j > query t: P = 0)
//   Yh  = P @ v                                   (B*nh, T, hs)
//   y   = c_proj(Yh permuted back to (B, T, nh, hs) = (B, T, C))
// The matrix products are the backend's strided-batched GEMM (cuBLAS on
// CUDA, OpenBLAS on the CPU) reading k^T and P^T in place; the softmax is
// the transformer family's kernel, which applies the scale and the mask.
// Training forward keeps QKV and P. Backward, for dy:
//   dYh = c_proj's backward, permuted to (B*nh, T, hs)
//   dP = dYh @ v^T,  dv = P^T @ dYh
//   dS = P * (dP - rowsum(P * dP)) / sqrt(hs)     (masked entries: P = 0, so 0)
//   dq = dS @ k,     dk = dS^T @ q
//   dqkv = (dq, dk, dv) permuted back to (B, T, 3C), then c_attn's backward.
// state_dict: c_attn.weight (3C, C), c_attn.bias, c_proj.weight, c_proj.bias.
//
// Dtypes (autocast_policy.h): c_attn's output sets the products' dtype cdt
// (bfloat16 under autocast(bfloat16), else the input's); S = q k^T and
// Yh = P v run in cdt (matmul's row: P is cast to cdt for its product);
// the softmax runs by its own row: float32 under CUDA autocast, cdt
// otherwise (CPU autocast included: P is then bfloat16, as in PyTorch).
// The softmax kernels are float32/float64, so a float16/bfloat16 S is
// widened to float32 for them and, outside CUDA autocast, P rounded back to cdt
// (what torch's half-precision softmax computes inside). Backward follows the
// same dtypes: dP and dv in cdt, the softmax's backward in its kernel
// dtype, dS rounded to cdt for dq and dk (the backward of S's widening), and
// c_attn's backward hands dx back in x's dtype.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocast_policy.h"
#include "backend.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "transformer_kernels.h"

typedef struct attn_state {
  int64_t c, nh;
  int64_t b, t;   // the saved forward's batch and length
  ct_tensor *qkv; // (3, B, nh, T, hs), or NULL
  ct_tensor *att; // (B*nh, T, T) probabilities in the softmax's dtype, or NULL
} attn_state;

static void drop_saved(attn_state *st) {
  ct_free(st->qkv), ct_free(st->att);
  st->qkv = st->att = NULL;
}

static const cti_module_ops attn_ops;

static ct_module *c_attn(ct_module *m) { return m->children[0]; }
static ct_module *c_proj(ct_module *m) { return m->children[1]; }

// (X, B, T, nh, hs) with X = 3 or 1, the view x (B, T, X*C) read as heads:
// a contiguous (X, B, nh, T, hs) copy.
static ct_tensor *to_heads(const ct_tensor *x, int64_t X, int64_t B, int64_t T, int64_t nh, int64_t hs) {
  ct_tensor *v = ct_reshape(x, CT_SHAPE(B, T, X, nh, hs));
  static const int perm[5] = {2, 0, 3, 1, 4};
  ct_tensor *p = v ? ct_permute(v, perm) : NULL;
  ct_tensor *c = p ? ct_contiguous(p) : NULL;
  ct_free(v), ct_free(p);
  return c;
}

// Head `i` of a (X, B, nh, T, hs) tensor as (B*nh, T, hs), a view.
static ct_tensor *head(const ct_tensor *h, int i) {
  ct_tensor *s = ct_select(h, 0, i);
  ct_shape hs = ct_shape_of(h);
  ct_tensor *r = s ? ct_reshape(s, CT_SHAPE(hs.d[1] * hs.d[2], hs.d[3], hs.d[4])) : NULL;
  ct_free(s);
  return r;
}

// a @ b^T or a^T @ b for 3-d a, b (the transposed operand read in place).
static ct_tensor *bmm_t(const ct_tensor *a, const ct_tensor *b, bool transpose_a) {
  ct_tensor *t = ct_transpose(transpose_a ? a : b, 1, 2);
  ct_tensor *r = t ? (transpose_a ? ct_bmm(t, b) : ct_bmm(a, t)) : NULL;
  ct_free(t);
  return r;
}

// t cast to dt (a new reference either way).
static ct_tensor *as_dtype(const ct_tensor *t, ct_dtype dt) {
  return !t ? NULL : ct_dtype_of(t) == dt ? ct_retain((ct_tensor *)t) : ct_to_dtype(t, dt);
}

// The dtype the softmax kernels compute in for scores of dtype dt.
static ct_dtype kernel_dtype(ct_dtype dt) { return dt == CT_F64 ? CT_F64 : CT_F32; }

// P = softmax(scale * S) under the causal mask, in the softmax's autocast
// dtype for scores S (B*nh, T, T) of dtype cdt; NULL with the error.
static ct_tensor *causal_softmax(const cti_backend *be, const ct_tensor *S, int64_t rows, int64_t T, double scale,
                                 ct_device dev) {
  const ct_dtype cdt = ct_dtype_of(S), kdt = kernel_dtype(cdt);
  ct_tensor *Sk = as_dtype(S, kdt);
  ct_tensor *Pk = Sk ? ct_empty_like(Sk, kdt, dev) : NULL;
  int rc = Pk ? CT_OK : (int)ct_last_status();
  if (!rc && rows > 0)
    rc = be->transformer->softmax(kdt, rows, T, true, scale, ct_data_ptr(Sk), ct_data_ptr(Pk), ct_current_stream(dev));
  ct_tensor *P = rc ? NULL : as_dtype(Pk, cti_autocast_dtype(CTI_AC_SOFTMAX, dev, cdt));
  ct_free(Sk), ct_free(Pk);
  return P;
}

static ct_tensor *attn_forward(ct_module *m, const ct_tensor *x) {
  attn_state *st = m->state;
  drop_saved(st);
  char sb[96];
  if (ct_ndim(x) != 3 || ct_size(x, 2) != st->c) {
    ct_fail(CT_ERR_SHAPE, "CausalSelfAttention: expected input (B, T, %" PRId64 "), got %s", st->c,
            ct_shape_str(ct_shape_of(x), sb, sizeof sb));
    return NULL;
  }
  if (!ct_dtype_is_floating(ct_dtype_of(x))) {
    ct_fail(CT_ERR_DTYPE, "CausalSelfAttention: expected a floating input, got %s", ct_dtype_name(ct_dtype_of(x)));
    return NULL;
  }
  const cti_backend *be = cti_backend_for("CausalSelfAttention", m->device);
  if (!be) return NULL;
  const int64_t B = ct_size(x, 0), T = ct_size(x, 1), nh = st->nh, hs = st->c / nh;
  ct_tensor *qkv = ct_module_forward(c_attn(m), x); // (B, T, 3C), in cdt
  ct_tensor *QKV = qkv ? to_heads(qkv, 3, B, T, nh, hs) : NULL;
  ct_free(qkv);
  // region: attention_forward
  ct_tensor *q = QKV ? head(QKV, 0) : NULL, *k = QKV ? head(QKV, 1) : NULL, *v = QKV ? head(QKV, 2) : NULL;
  ct_tensor *S = q && k && v ? bmm_t(q, k, false) : NULL; // (B*nh, T, T)
  ct_tensor *P = S ? causal_softmax(be, S, B * nh * T, T, 1.0 / sqrt((double)hs), m->device) : NULL;
  ct_tensor *Pm = P ? as_dtype(P, ct_dtype_of(v)) : NULL;      // matmul's operand
  ct_tensor *Yh = Pm ? ct_bmm(Pm, v) : NULL;                    // (B*nh, T, hs)
  // endregion
  ct_tensor *Y = Yh ? to_heads(Yh, 1, B, nh, T, hs) : NULL;     // (1, B, T, nh, hs): the heads back in place
  ct_tensor *Y3 = Y ? ct_reshape(Y, CT_SHAPE(B, T, st->c)) : NULL;
  ct_tensor *out = Y3 ? ct_module_forward(c_proj(m), Y3) : NULL;
  ct_free(q), ct_free(k), ct_free(v), ct_free(S), ct_free(Pm), ct_free(Yh), ct_free(Y), ct_free(Y3);
  if (out && m->training) {
    st->qkv = QKV, st->att = P, st->b = B, st->t = T;
  } else {
    ct_free(QKV), ct_free(P);
  }
  return out;
}

// dS = softmax's backward for P (in its saved dtype) and dP (cdt), returned
// in cdt; NULL with the error.
static ct_tensor *causal_softmax_backward(const cti_backend *be, const ct_tensor *P, const ct_tensor *dP,
                                          int64_t rows, int64_t T, double scale, ct_device dev) {
  const ct_dtype cdt = ct_dtype_of(dP), kdt = kernel_dtype(cdt);
  ct_tensor *Pk = as_dtype(P, kdt), *dPk = Pk ? as_dtype(dP, kdt) : NULL;
  ct_tensor *dSk = dPk ? ct_empty_like(dPk, kdt, dev) : NULL;
  int rc = dSk ? CT_OK : (int)ct_last_status();
  if (!rc && rows > 0)
    rc = be->transformer->softmax_backward(kdt, rows, T, scale, ct_data_ptr(Pk), ct_data_ptr(dPk), ct_data_ptr(dSk),
                                           ct_current_stream(dev));
  ct_tensor *dS = rc ? NULL : as_dtype(dSk, cdt);
  ct_free(Pk), ct_free(dPk), ct_free(dSk);
  return dS;
}

// Enters with dL/dy of the last training forward; leaves with c_proj's and
// c_attn's grads accumulated and, when dx is not NULL, *dx = dL/dx.
static int attn_grads(ct_module *m, const ct_tensor *g, ct_tensor **dx) {
  attn_state *st = m->state;
  if (!st->qkv) return ct_fail(CT_ERR_VALUE, "CausalSelfAttention backward: no saved tensors (run forward in training mode first)");
  const cti_backend *be = cti_backend_for("CausalSelfAttention backward", m->device);
  if (!be) return ct_last_status();
  const ct_dtype dt = ct_dtype_of(st->qkv); // cdt
  const int64_t B = st->b, T = st->t, nh = st->nh, hs = st->c / nh, C = st->c;
  if (cti_nn_check_grad("CausalSelfAttention", g, CT_SHAPE(B, T, C), ct_dtype_of(g))) return ct_last_status();
  ct_tensor *dY = ct_module_backward(c_proj(m), g); // (B, T, C) in cdt: c_proj casts g to its output's dtype
  ct_tensor *dYh5 = dY ? to_heads(dY, 1, B, T, nh, hs) : NULL;
  ct_tensor *dYh = dYh5 ? head(dYh5, 0) : NULL; // (B*nh, T, hs)
  ct_free(dY), ct_free(dYh5);
  // region: attention_backward
  ct_tensor *q = head(st->qkv, 0), *k = head(st->qkv, 1), *v = head(st->qkv, 2); // (B*nh, T, hs) each
  ct_tensor *Pm = as_dtype(st->att, dt);                       // P as the forward multiplied it
  ct_tensor *dP = NULL, *dv = NULL, *dS = NULL, *dq = NULL, *dk = NULL;
  int rc = dYh && q && k && v && Pm ? CT_OK : (int)ct_last_status();
  /* LAB BEGIN: from dYh, P (st->att; Pm in the products' dtype), q, k, v: dP = dYh v^T, dv = P^T dYh, dS with causal_softmax_backward, dq = dS k, dk = dS^T q (rc non-zero on a failure) | stub: rc = ct_fail(CT_ERR_VALUE, "CausalSelfAttention backward: exercise not written"); | test: unit.transformer_gradcheck, unit.transformer_torch, chapter.ch14 */
  dP = rc ? NULL : bmm_t(dYh, v, false);      // dYh @ v^T
  dv = rc ? NULL : bmm_t(Pm, dYh, true);      // P^T @ dYh
  dS = dP ? causal_softmax_backward(be, st->att, dP, B * nh * T, T, 1.0 / sqrt((double)hs), m->device) : NULL;
  if (!rc && !(dS && dv)) rc = ct_last_status();
  dq = rc ? NULL : ct_bmm(dS, k);             // dS @ k
  dk = dq ? bmm_t(dS, q, true) : NULL;        // dS^T @ q
  /* LAB END */
  // endregion
  // (dq, dk, dv) into dqkv (B, T, 3C), through its (3, B, nh, T, hs) view
  ct_tensor *dqkv = dk ? ct_empty(CT_SHAPE(B, T, 3 * C), dt, m->device) : NULL;
  ct_tensor *v5 = dqkv ? ct_reshape(dqkv, CT_SHAPE(B, T, 3, nh, hs)) : NULL;
  static const int perm[5] = {2, 0, 3, 1, 4};
  ct_tensor *pv = v5 ? ct_permute(v5, perm) : NULL;
  rc = pv ? CT_OK : (int)ct_last_status();
  ct_tensor *parts[3] = {dq, dk, dv};
  for (int i = 0; i < 3 && !rc; ++i) {
    ct_tensor *dst = ct_select(pv, 0, i);
    ct_tensor *src = dst ? ct_reshape(parts[i], CT_SHAPE(B, nh, T, hs)) : NULL;
    rc = src ? ct_copy_(dst, src, false) : (int)ct_last_status();
    ct_free(dst), ct_free(src);
  }
  ct_free(q), ct_free(k), ct_free(v), ct_free(Pm), ct_free(dYh), ct_free(dP), ct_free(dv), ct_free(dS), ct_free(dq);
  ct_free(dk);
  ct_free(v5), ct_free(pv);
  if (!rc) {
    if (dx) {
      *dx = ct_module_backward(c_attn(m), dqkv);
      if (!*dx) rc = ct_last_status();
    } else {
      rc = ct_module_backward_params(c_attn(m), dqkv);
    }
  }
  ct_free(dqkv);
  return rc;
}

static ct_tensor *attn_backward(ct_module *m, const ct_tensor *g) {
  ct_tensor *dx = NULL;
  return attn_grads(m, g, &dx) == CT_OK ? dx : NULL;
}

static int attn_backward_params(ct_module *m, const ct_tensor *g) { return attn_grads(m, g, NULL); }

const ct_tensor *cti_attention_probs(const ct_module *m) {
  return m && m->ops == &attn_ops ? ((const attn_state *)m->state)->att : NULL;
}

static int attn_state_to(ct_module *m, ct_device device) {
  (void)device;
  drop_saved(m->state);
  return CT_OK;
}

static void attn_state_free(ct_module *m) {
  if (!m->state) return;
  drop_saved(m->state);
  free(m->state);
  m->state = NULL;
}

static void *attn_state_clone(const ct_module *m) {
  attn_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->qkv = st->att = NULL;
  return st;
}

static const cti_module_ops attn_ops = {
    .kind = "CausalSelfAttention",
    .forward = attn_forward,
    .backward = attn_backward,
    .backward_params = attn_backward_params,
    .state_to = attn_state_to,
    .state_free = attn_state_free,
    .state_clone = attn_state_clone,
};

ct_module *ct_nn_causal_self_attention(int64_t n_embd, int64_t n_head, bool bias) {
  if (n_embd <= 0 || n_head <= 0 || n_embd % n_head) {
    ct_fail(CT_ERR_VALUE, "ct_nn_causal_self_attention: n_embd (%" PRId64 ") must be a positive multiple of "
            "n_head (%" PRId64 ")", n_embd, n_head);
    return NULL;
  }
  attn_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_causal_self_attention: out of host memory");
    return NULL;
  }
  st->c = n_embd, st->nh = n_head;
  ct_module *m = cti_module_new(&attn_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  ct_module *kids[2] = {ct_nn_linear(n_embd, 3 * n_embd, bias), ct_nn_linear(n_embd, n_embd, bias)};
  static const char *const names[2] = {"c_attn", "c_proj"};
  if (!kids[0] || !kids[1] || cti_module_adopt(m, 2, kids, names) != CT_OK) {
    ct_module_free(kids[0]), ct_module_free(kids[1]);
    ct_module_free(m);
    return NULL;
  }
  return m;
}
