// SPDX-License-Identifier: MIT
//
// nn_avgpool: AdaptiveAvgPool2d with output size 1, the global average pool
// (torch.nn.AdaptiveAvgPool2d(1); the seeds write it x.mean(dim=[2, 3])).
//
//   forward:  y[n][c][0][0] = (1 / (H*W)) sum over h, w of x[n][c][h][w]
//             x (N, C, H, W) -> y (N, C, 1, 1), a mean over the last axis of
//             x viewed as (N, C, H*W) (ct_mean_dim: float32 sums for half
//             precision, the result in x's dtype, as PyTorch);
//   backward: dx[n][c][h][w] = dy[n][c][0][0] / (H*W), each pixel's share.
// Training forward keeps only x's shape and dtype.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "nn_impl.h"
#include "ops.h"

typedef struct avgpool_state {
  ct_shape in; // the last training forward's input shape
  bool saved;
} avgpool_state;

static ct_tensor *avgpool_forward(ct_module *m, const ct_tensor *x) {
  avgpool_state *st = m->state;
  if (ct_ndim(x) != 4) {
    char s[96];
    ct_fail(CT_ERR_SHAPE, "AdaptiveAvgPool2d: expected a 4-D input (N, C, H, W), got %s",
            ct_shape_str(ct_shape_of(x), s, sizeof s));
    return NULL;
  }
  const ct_shape s = ct_shape_of(x);
  ct_tensor *x3 = ct_reshape(x, CT_SHAPE(s.d[0], s.d[1], s.d[2] * s.d[3]));
  ct_tensor *y = x3 ? ct_mean_dim(x3, 2, true) : NULL; // (N, C, 1)
  ct_tensor *y4 = y ? ct_reshape(y, CT_SHAPE(s.d[0], s.d[1], 1, 1)) : NULL;
  ct_free(x3), ct_free(y);
  if (!y4) return NULL;
  st->in = s;
  st->saved = m->training;
  return y4;
}

static ct_tensor *avgpool_backward(ct_module *m, const ct_tensor *g) {
  avgpool_state *st = m->state;
  if (!st->saved) {
    ct_fail(CT_ERR_VALUE, "AdaptiveAvgPool2d: backward needs a forward in training mode first");
    return NULL;
  }
  const ct_shape want = CT_SHAPE(st->in.d[0], st->in.d[1], 1, 1);
  if (!ct_shape_eq(ct_shape_of(g), want)) {
    char a[96], b[96];
    ct_fail(CT_ERR_SHAPE, "AdaptiveAvgPool2d backward: grad_output of shape %s, expected %s",
            ct_shape_str(ct_shape_of(g), a, sizeof a), ct_shape_str(want, b, sizeof b));
    return NULL;
  }
  const double share = 1.0 / (double)(st->in.d[2] * st->in.d[3]);
  ct_tensor *each = ct_mul_scalar(g, share); // (N, C, 1, 1)
  ct_tensor *wide = each ? ct_expand(each, st->in) : NULL;
  ct_tensor *dx = wide ? ct_contiguous(wide) : NULL;
  ct_free(each), ct_free(wide);
  return dx;
}

static void avgpool_describe(const ct_module *m, char *buf, size_t len) {
  (void)m;
  snprintf(buf, len, "output_size=1");
}

static void *avgpool_state_clone(const ct_module *m) {
  avgpool_state *st = cti_state_dup(m->state, sizeof *st);
  if (st) st->saved = false;
  return st;
}

static const cti_module_ops avgpool_ops = {
    .kind = "AdaptiveAvgPool2d",
    .forward = avgpool_forward,
    .backward = avgpool_backward,
    .describe = avgpool_describe,
    .state_clone = avgpool_state_clone,
};

ct_module *ct_nn_adaptive_avgpool2d(int output_size) {
  if (output_size != 1) {
    ct_fail(CT_ERR_VALUE, "ct_nn_adaptive_avgpool2d: only output_size 1 (the global average) is "
            "implemented, got %d", output_size);
    return NULL;
  }
  avgpool_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_adaptive_avgpool2d: out of host memory");
    return NULL;
  }
  ct_module *m = cti_module_new(&avgpool_ops, st);
  if (!m) free(st);
  return m;
}
