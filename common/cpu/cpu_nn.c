// SPDX-License-Identifier: MIT
//
// cpu_nn: the nn family's fused kernels on the host (see nn_kernels.h).
//
// Every loop is split by element or by row, never by "one piece per thread",
// so a result does not depend on the number of OpenMP threads; below
// CT_CPU_PAR_MIN elements a loop stays on the calling thread. Cross-entropy
// works in double whatever the dtype (each row: max, sum of exp(x - max),
// log), so its float32 results are the correctly rounded values of the exact
// ones up to a few ulps.
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "error.h"
#include "nn_kernels.h"

static int unsupported(const char *op, ct_dtype dt) {
  return ct_fail(CT_ERR_DTYPE, "%s: not implemented for %s on cpu", op,
                 ct_dtype_valid(dt) ? ct_dtype_name(dt) : "an invalid dtype");
}

// ---- ReLU backward --------------------------------------------------------------------------
// out = y <= 0 ? 0 : g. g's bits are copied, so no rounding can happen.
// g[i] is loaded whatever y[i] is: a load under the condition kept the loop
// scalar (one branch per element), an unconditional one lets it vectorize as
// a compare and a select.
#define RELU_BWD(SUF, ZERO)                                                      \
  static void relu_bwd_##SUF(int64_t n, const ST_##SUF *y, const ST_##SUF *g,   \
                             ST_##SUF *out) {                                   \
    _Pragma("omp parallel for simd if (n >= CT_CPU_PAR_MIN) schedule(static)")  \
    for (int64_t i = 0; i < n; ++i) {                                            \
      const ST_##SUF gi = g[i];                                                  \
      out[i] = LD_##SUF(y[i]) <= 0 ? ZERO : gi;                                  \
    }                                                                            \
  }
RELU_BWD(f32, 0.0f)
RELU_BWD(f64, 0.0)
RELU_BWD(f16, (uint16_t)0)
RELU_BWD(bf16, (uint16_t)0)

static int relu_backward(ct_dtype dt, int64_t n, const void *y, const void *g, void *out,
                         ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: relu_bwd_f32(n, y, g, out); return CT_OK;
  case CT_F64: relu_bwd_f64(n, y, g, out); return CT_OK;
  case CT_F16: relu_bwd_f16(n, y, g, out); return CT_OK;
  case CT_BF16: relu_bwd_bf16(n, y, g, out); return CT_OK;
  default: return unsupported("cti_relu_backward", dt);
  }
}

// ---- dropout ----------------------------------------------------------------------------------
// mask = u >= p ? scale : 0 in the dtype; y = x * mask computed in the
// compute type (float for f16/bf16/f32, double for f64) and rounded once.
#define ST_OUT_f32(v) (v)
#define ST_OUT_f64(v) (v)
#define ST_OUT_f16(v) cti_cpu_f32_to_f16(v)
#define ST_OUT_bf16(v) cti_cpu_f32_to_bf16(v)
#define DROPOUT(SUF)                                                             \
  static void dropout_##SUF(int64_t n, const ST_##SUF *x, const float *u, double p, \
                            double scale, ST_##SUF *y, ST_##SUF *mask) {        \
    const ST_##SUF keep = ST_OUT_##SUF((CT_##SUF)scale);                         \
    const ST_##SUF drop = ST_OUT_##SUF((CT_##SUF)0);                             \
    const CT_##SUF keep_c = LD_##SUF(keep);                                      \
    _Pragma("omp parallel for if (n >= CT_CPU_PAR_MIN) schedule(static)")       \
    for (int64_t i = 0; i < n; ++i) {                                            \
      const bool k = (double)u[i] >= p;                                          \
      mask[i] = k ? keep : drop;                                                 \
      y[i] = ST_OUT_##SUF(LD_##SUF(x[i]) * (k ? keep_c : (CT_##SUF)0));           \
    }                                                                            \
  }
DROPOUT(f32)
DROPOUT(f64)
DROPOUT(f16)
DROPOUT(bf16)

static int dropout(ct_dtype dt, int64_t n, const void *x, const float *u, double p, double scale,
                   void *y, void *mask, ct_stream *s) {
  (void)s;
  switch (dt) {
  case CT_F32: dropout_f32(n, x, u, p, scale, y, mask); return CT_OK;
  case CT_F64: dropout_f64(n, x, u, p, scale, y, mask); return CT_OK;
  case CT_F16: dropout_f16(n, x, u, p, scale, y, mask); return CT_OK;
  case CT_BF16: dropout_bf16(n, x, u, p, scale, y, mask); return CT_OK;
  default: return unsupported("cti_dropout", dt);
  }
}

// ---- cross-entropy ----------------------------------------------------------------------------
// Row i of x (c values) with target t: the loss in *loss_i, and the gradient
// row when g is not NULL. All in double.
#define CE_ROWS(SUF)                                                              \
  static void ce_rows_##SUF(int64_t n, int64_t c, const ST_##SUF *x,             \
                            const int64_t *target, ST_##SUF *loss, ST_##SUF *g, \
                            double inv_n) {                                       \
    _Pragma("omp parallel for if (n * c >= CT_CPU_PAR_MIN) schedule(static)")    \
    for (int64_t i = 0; i < n; ++i) {                                             \
      const ST_##SUF *xi = x + i * c;                                             \
      double m = -INFINITY;                                                       \
      for (int64_t j = 0; j < c; ++j)                                             \
        if ((double)xi[j] > m || xi[j] != xi[j]) m = xi[j];                       \
      /* all -inf (or a +inf): shift by 0 so that exp sees the real values */     \
      const double shift = isfinite(m) ? m : 0.0;                                 \
      double s = 0;                                                               \
      for (int64_t j = 0; j < c; ++j) s += exp((double)xi[j] - shift);            \
      /* log_softmax_j = (x_j - shift) - log(s): nothing cancels */              \
      const double ls = log(s);                                                   \
      const int64_t t = target[i];                                                \
      loss[i] = (ST_##SUF)(ls - ((double)xi[t] - shift));                         \
      if (g) {                                                                    \
        ST_##SUF *gi = g + i * c;                                                 \
        for (int64_t j = 0; j < c; ++j)                                           \
          gi[j] = (ST_##SUF)((exp(((double)xi[j] - shift) - ls) - (j == t ? 1.0 : 0.0)) * inv_n); \
      }                                                                           \
    }                                                                             \
  }
CE_ROWS(f32)
CE_ROWS(f64)

static int cross_entropy(ct_dtype dt, int64_t n, int64_t c, const void *logits,
                         const int64_t *target, void *loss, void *grad, double inv_n,
                         int64_t *bad_row, ct_stream *s) {
  (void)s;
  *bad_row = -1;
  if (dt != CT_F32 && dt != CT_F64) return unsupported("ct_cross_entropy_loss", dt);
  for (int64_t i = 0; i < n; ++i)
    if (target[i] < 0 || target[i] >= c) {
      *bad_row = i;
      return CT_OK;
    }
  if (dt == CT_F32) ce_rows_f32(n, c, logits, target, loss, grad, inv_n);
  else ce_rows_f64(n, c, logits, target, loss, grad, inv_n);
  return CT_OK;
}

// The family's list names every entry; each is the function of its name above.
#define CTI_OP_CPU_PREFIX
const cti_nn_kernels cti_cpu_nn_kernels = {CTI_NN_OPS(CTI_OP_CPU_INIT)};
