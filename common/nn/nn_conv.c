// SPDX-License-Identifier: MIT
//
// nn_conv: Conv2d, as torch.nn.Conv2d(in, out, k, stride, padding, bias)
// with a square kernel, no dilation and no groups.
//
// Forward is im2col + GEMM (conv_kernels.h) over a chunk of nb images at a
// time:
//   cols (C_in*k*k, nb*Ho*Wo) = im2col(x[n0 : n0+nb])
//   y[n0 + i] (C_out, Ho*Wo)  = W (C_out, C_in*k*k) @ cols[:, i*Ho*Wo : (i+1)*Ho*Wo]
//                               + bias, for each image i of the chunk
// as one strided batched GEMM (one cuBLAS call) that writes the NCHW output
// in place, on top of the broadcast bias (beta = 1). On the CPU, where that
// would be a BLAS call per image, the chunk is one GEMM into a (C_out,
// nb*Ho*Wo) buffer instead, copied permuted into the NCHW output (chunk_gemm). On the CPU a chunk is sized so that its column matrix (at
// most 4 MiB, or one image) stays in cache between im2col writing it and
// the GEMMs reading it; on CUDA the chunk is the whole batch (up to 512 MiB
// of columns). Backward walks the same chunks, cols computed again from the
// saved input (one im2col more, instead of keeping 9x the input), with gt
// (C_out, nb*Ho*Wo) the chunk's dL/dy laid out channel-major so that both
// GEMMs run over all of the chunk's images at once:
//   dW += gt @ cols^T   (the GEMM sums over the chunk's pixels and images)
//   dx[n0 : n0+nb] = col2im(W^T @ gt)
//   db = the sum of dL/dy over N, Ho, Wo.
// Training forward keeps x; eval forward keeps nothing.
//
// Tensors: own[0] "weight" (C_out, C_in, k, k); own[1] "bias" (C_out) when
// bias is on. Both start U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in =
// C_in*k*k, as torch.nn.Conv2d's reset_parameters.
//
// Under autocast (amp.h) x, W and b are cast to the autocast dtype and the
// whole im2col + GEMM runs there (f32 accumulation inside the GEMMs); y has
// that dtype and the cast W is kept for dx. Backward takes dL/dy in that
// dtype (casting one of another), adds each chunk's dW and the db it
// computes there into the float32 grads, and sums dx's columns (col2im) in
// float32 before handing dx back in x's own dtype.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "autocast_policy.h"
#include "backend.h"
#include "conv_kernels.h"
#include "error.h"
#include "nn_impl.h"
#include "ops.h"
#include "stream.h"

typedef struct conv_state {
  int64_t cin, cout;
  int k, stride, pad;
  bool bias;
  ct_tensor *x;    // the input of the last training forward (contiguous, compute dtype), or NULL
  ct_tensor *w;    // the weight as that forward cast it (autocast), or NULL: the weight itself
  ct_dtype x_dtype; // the input's own dtype, for dx
  cti_conv_geom g; // its geometry
} conv_state;

// Bytes of column matrix per CPU chunk. Measured on a 2-core EPYC (1 MiB L2
// per core, 32 MiB L3) for the Fashion-MNIST CNN, 256 KiB to 1 GiB (the
// whole batch) all ran within 10% of each other: BLAS dominates. 4 MiB
// keeps the columns in L3 and the memory bounded for any batch size.
#define CT_CONV_CHUNK_BYTES ((int64_t)4 << 20)

static void drop_saved(conv_state *st) {
  ct_free(st->x), ct_free(st->w);
  st->x = st->w = NULL;
}

static bool gemm_dtype(ct_dtype dt) { return dt == CT_F32 || dt == CT_F64 || dt == CT_F16 || dt == CT_BF16; }

// On CUDA a chunk is the whole batch up to this many bytes of columns (a
// bound on the workspace for very large inputs; the workbook's never reach it).
#define CT_CONV_CHUNK_BYTES_CUDA ((int64_t)512 << 20)

// Images per chunk (see the top of the file).
static int64_t chunk_images(ct_device dev, const cti_conv_geom *g, size_t es) {
  const int64_t per = g->c * g->k * g->k * g->ho * g->wo * (int64_t)es;
  const int64_t limit = dev.type == CT_CPU ? CT_CONV_CHUNK_BYTES : CT_CONV_CHUNK_BYTES_CUDA;
  int64_t nb = per > 0 ? limit / per : g->n;
  if (nb < 1) nb = 1;
  return nb < g->n ? nb : g->n;
}

static char *elem(const ct_tensor *t, int64_t offset) {
  return (char *)ct_data_ptr(t) + offset * (int64_t)ct_dtype_size(ct_dtype_of(t));
}

// One chunk of nb images' forward as a single GEMM (the CPU's way):
// yt (C_out, nb*P) = b + W @ cols, then yt seen as (C_out, nb, P) is copied
// permuted into y[n0 : n0+nb] (nb, C_out, P). A BLAS call per image would
// multiply (C_out, C_in*k*k) by (C_in*k*k, P): for ch06's second convolution
// 32 x 144 by 144 x 196, which OpenBLAS runs several times slower per FLOP
// than the chunk's 144 x (nb*196) (chapter 11's profile: ct::gemm by input
// shape); the permuting copy costs far less than the difference.
static int chunk_gemm(const cti_backend *be, const ct_tensor *wc, const ct_tensor *b, const ct_tensor *cols,
                      ct_tensor *yt, ct_tensor *y, int64_t n0, int64_t nb, ct_stream *s) {
  const int64_t cout = ct_size(y, 1), P = ct_size(y, 2) * ct_size(y, 3), cn = nb * P, kk = ct_numel(wc) / cout;
  ct_tensor *flat = ct_narrow(yt, 0, 0, cout * cn);
  ct_tensor *t2 = flat ? ct_reshape(flat, CT_SHAPE(cout, cn)) : NULL; // a view of yt
  ct_tensor *b2 = t2 && b ? ct_reshape(b, CT_SHAPE(cout, 1)) : NULL;
  int rc = t2 && (!b || b2) ? CT_OK : (int)ct_last_status();
  if (rc == CT_OK && b2) rc = ct_copy_(t2, b2, false); // the bias, broadcast; the GEMM adds onto it
  if (rc == CT_OK)
    rc = be->gemm(ct_dtype_of(y), false, false, cout, cn, kk, 1.0, ct_data_ptr(wc), kk, 0, ct_data_ptr(cols), cn, 0,
                  b ? 1.0 : 0.0, ct_data_ptr(t2), cn, 0, 1, s);
  ct_tensor *t3 = rc == CT_OK ? ct_reshape(t2, CT_SHAPE(cout, nb, P)) : NULL;
  ct_tensor *src = t3 ? ct_permute(t3, (const int[]){1, 0, 2}) : NULL; // (nb, C_out, P)
  ct_tensor *yk = src ? ct_narrow(y, 0, n0, nb) : NULL;
  ct_tensor *dst = yk ? ct_reshape(yk, CT_SHAPE(nb, cout, P)) : NULL;  // a view of y
  if (rc == CT_OK) rc = dst ? ct_copy_(dst, src, false) : (int)ct_last_status();
  ct_free(flat), ct_free(t2), ct_free(b2), ct_free(t3), ct_free(src), ct_free(yk), ct_free(dst);
  return rc;
}

static ct_tensor *conv_forward_cast(ct_module *m, const ct_tensor *x_in, ct_tensor *w, ct_tensor *b);

// Casts the operands for autocast (new references either way), then runs.
static ct_tensor *conv_forward(ct_module *m, const ct_tensor *x_in) {
  conv_state *st = m->state;
  drop_saved(st);
  ct_tensor *xc = cti_autocast_cast(CTI_AC_CONV2D, x_in);
  ct_tensor *wc = xc ? cti_autocast_cast(CTI_AC_CONV2D, m->own[0].value) : NULL;
  ct_tensor *bc = wc && st->bias ? cti_autocast_cast(CTI_AC_CONV2D, m->own[1].value) : NULL;
  ct_tensor *y = wc && (bc || !st->bias) ? conv_forward_cast(m, xc, wc, bc) : NULL;
  if (y && m->training && st->x) {
    st->x_dtype = ct_dtype_of(x_in);
    st->w = wc != m->own[0].value ? ct_retain(wc) : NULL;
  }
  ct_free(xc), ct_free(wc), ct_free(bc);
  return y;
}

static ct_tensor *conv_forward_cast(ct_module *m, const ct_tensor *x_in, ct_tensor *w, ct_tensor *b) {
  conv_state *st = m->state;
  const ct_device dev = ct_device_of(w);
  const ct_dtype dt = ct_dtype_of(w);
  char sb[128];
  if (ct_ndim(x_in) != 4) {
    ct_fail(CT_ERR_SHAPE, "Conv2d: expected a 4-D input (N, C, H, W), got %s",
            ct_shape_str(ct_shape_of(x_in), sb, sizeof sb));
    return NULL;
  }
  if (ct_size(x_in, 1) != st->cin) {
    ct_fail(CT_ERR_SHAPE,
            "Conv2d: weight of size (%" PRId64 ", %" PRId64 ", %d, %d) expects input %s to have %"
            PRId64 " channels, but got %" PRId64 " channels instead",
            st->cout, st->cin, st->k, st->k, ct_shape_str(ct_shape_of(x_in), sb, sizeof sb),
            st->cin, ct_size(x_in, 1));
    return NULL;
  }
  if (ct_dtype_of(x_in) != dt || (b && ct_dtype_of(b) != dt)) {
    ct_fail(CT_ERR_DTYPE, "Conv2d: input (%s) and weight (%s) must have the same dtype",
            ct_dtype_name(ct_dtype_of(x_in)), ct_dtype_name(dt));
    return NULL;
  }
  if (!gemm_dtype(dt)) {
    ct_fail(CT_ERR_DTYPE, "Conv2d: not implemented for %s (float32, float64, float16 and bfloat16 are)",
            ct_dtype_name(dt));
    return NULL;
  }
  const cti_backend *be = cti_backend_for("Conv2d", dev);
  if (!be) return NULL;
  cti_conv_geom g = {.n = ct_size(x_in, 0), .c = st->cin, .h = ct_size(x_in, 2),
                    .w = ct_size(x_in, 3), .k = st->k, .stride = st->stride, .pad = st->pad};
  if (g.h + 2 * g.pad < g.k || g.w + 2 * g.pad < g.k) {
    ct_fail(CT_ERR_SHAPE,
            "Conv2d: calculated padded input size per channel: (%" PRId64 " x %" PRId64
            "). Kernel size: (%d x %d). Kernel size can't be greater than actual input size",
            g.h + 2 * g.pad, g.w + 2 * g.pad, st->k, st->k);
    return NULL;
  }
  g.ho = (g.h + 2 * g.pad - g.k) / g.stride + 1;
  g.wo = (g.w + 2 * g.pad - g.k) / g.stride + 1;
  const int64_t P = g.ho * g.wo, kk = g.c * g.k * g.k, chw = g.c * g.h * g.w;

  ct_tensor *y = ct_empty(CT_SHAPE(g.n, st->cout, g.ho, g.wo), dt, dev);
  if (!y) return NULL;
  if (g.n == 0) return y;
  const int64_t nb = chunk_images(dev, &g, ct_dtype_size(dt));
  ct_tensor *x = ct_contiguous(x_in);
  ct_tensor *wc = x ? ct_contiguous(w) : NULL; // (C_out, C_in*k*k) as a matrix
  ct_tensor *b3 = wc && b ? ct_reshape(b, CT_SHAPE(st->cout, 1, 1)) : NULL;
  ct_tensor *cols = wc ? ct_empty(CT_SHAPE(kk * nb * P), dt, dev) : NULL; // (C_in*k*k, nb*P)
  // On the CPU, one GEMM per chunk into yt (C_out, nb*P), then y's layout (chunk_gemm).
  ct_tensor *yt = cols && dev.type == CT_CPU && nb > 1 ? ct_empty(CT_SHAPE(st->cout * nb * P), dt, dev) : NULL;
  int rc = cols && (!b || b3) && (yt || dev.type != CT_CPU || nb == 1) ? CT_OK : (int)ct_last_status();
  ct_stream *s = ct_current_stream(dev);
  for (int64_t n0 = 0; rc == CT_OK && n0 < g.n; n0 += nb) {
    cti_conv_geom gk = g;
    gk.n = g.n - n0 < nb ? g.n - n0 : nb;
    const int64_t cn = gk.n * P; // columns of this chunk
    rc = be->conv->im2col(dt, &gk, elem(x, n0 * chw), ct_data_ptr(cols), s);
    if (rc == CT_OK && b3 && !yt) { // y[n0 : n0+nb] := the bias, broadcast; the GEMMs add onto it
      ct_tensor *yk = ct_narrow(y, 0, n0, gk.n);
      rc = yk ? ct_copy_(yk, b3, false) : (int)ct_last_status();
      ct_free(yk);
    }
    // per image i of the chunk: y[n0 + i] (C_out, P) (+)= W @ cols[:, i*P : (i+1)*P]
    if (rc == CT_OK && !yt)
      rc = be->gemm(dt, false, false, st->cout, P, kk, 1.0, ct_data_ptr(wc), kk, 0,
                    ct_data_ptr(cols), cn, P, b3 ? 1.0 : 0.0, elem(y, n0 * st->cout * P), P,
                    st->cout * P, gk.n, s);
    else if (rc == CT_OK)
      rc = chunk_gemm(be, wc, b, cols, yt, y, n0, gk.n, s);
  }
  ct_free(wc), ct_free(b3), ct_free(cols), ct_free(yt);
  if (rc != CT_OK) {
    ct_free(x), ct_free(y);
    return NULL;
  }
  if (m->training) {
    st->x = x;
    st->g = g;
  } else {
    ct_free(x);
  }
  return y;
}

// Enters with dL/dy of the last training forward; leaves with dW (and db)
// added into the grads and, when dx_out is not NULL, *dx_out = dL/dx. Without
// dx_out the second GEMM (W^T @ gy) and col2im are skipped.
static int conv_grads(ct_module *m, const ct_tensor *gy_in, ct_tensor **dx_out) {
  conv_state *st = m->state;
  if (dx_out) *dx_out = NULL;
  if (!st->x) return ct_fail(CT_ERR_VALUE, "Conv2d: backward needs a forward in training mode first");
  const cti_conv_geom g = st->g;
  const int64_t P = g.ho * g.wo, kk = g.c * g.k * g.k, chw = g.c * g.h * g.w;
  ct_tensor *w = st->w ? st->w : m->own[0].value; // as the forward multiplied
  const ct_device dev = ct_device_of(w);
  const ct_dtype dt = ct_dtype_of(st->x); // the compute dtype
  const bool lowp = dt == CT_F16 || dt == CT_BF16;
  char sa[128], sb[128];
  const ct_shape want = CT_SHAPE(g.n, st->cout, g.ho, g.wo);
  if (!ct_shape_eq(ct_shape_of(gy_in), want) || !ct_dtype_is_floating(ct_dtype_of(gy_in)) ||
      ct_dtype_of(w) != dt) {
    return ct_fail(CT_ERR_SHAPE, "Conv2d: backward expected a %s gradient of shape %s, got %s %s",
                   ct_dtype_name(dt), ct_shape_str(want, sa, sizeof sa),
                   ct_dtype_name(ct_dtype_of(gy_in)), ct_shape_str(ct_shape_of(gy_in), sb, sizeof sb));
  }
  const cti_backend *be = cti_backend_for("Conv2d", dev);
  if (!be) return ct_last_status();
  const int64_t nb = chunk_images(dev, &g, ct_dtype_size(dt));
  // dL/dy in the compute dtype (autograd casts a gradient to its output's dtype)
  ct_tensor *gyc = ct_dtype_of(gy_in) == dt ? ct_retain((ct_tensor *)gy_in) : ct_to_dtype(gy_in, dt);
  ct_tensor *gy = gyc ? ct_contiguous(gyc) : NULL;
  ct_free(gyc);
  ct_tensor *wc = gy ? ct_contiguous(w) : NULL;
  ct_tensor *gt = wc ? ct_empty(CT_SHAPE(st->cout * nb * P), dt, dev) : NULL; // (C_out, nb*P)
  ct_tensor *cols = gt ? ct_empty(CT_SHAPE(kk * nb * P), dt, dev) : NULL;     // (C_in*k*k, nb*P)
  ct_tensor *dw = cols ? ct_empty(CT_SHAPE(st->cout, st->cin, st->k, st->k), dt, dev) : NULL;
  ct_tensor *dcols = NULL, *dcols32 = NULL, *dx = NULL, *db = NULL;
  const ct_dtype sum_dt = lowp ? CT_F32 : dt; // col2im sums in float32 for half precision
  if (dw && dx_out) {
    dcols = ct_empty(CT_SHAPE(kk * nb * P), dt, dev);
    dcols32 = dcols && lowp ? ct_empty(CT_SHAPE(kk * nb * P), CT_F32, dev) : NULL;
    dx = dcols && (dcols32 || !lowp) ? ct_empty(CT_SHAPE(g.n, g.c, g.h, g.w), sum_dt, dev) : NULL;
  }
  int rc = dw && (!dx_out || dx) ? CT_OK : (int)ct_last_status();
  ct_stream *s = ct_current_stream(dev);
  for (int64_t n0 = 0; rc == CT_OK && n0 < g.n; n0 += nb) {
    cti_conv_geom gk = g;
    gk.n = g.n - n0 < nb ? g.n - n0 : nb;
    const int64_t cn = gk.n * P;
    rc = be->conv->cnhw_from_nchw(dt, gk.n, st->cout, P, elem(gy, n0 * st->cout * P),
                                      ct_data_ptr(gt), s);
    if (rc == CT_OK) rc = be->conv->im2col(dt, &gk, elem(st->x, n0 * chw), ct_data_ptr(cols), s);
    // dW (C_out, C_in*k*k) (+)= gt @ cols^T; in half precision each chunk's dW goes
    // into the float32 grad at once, so chunks never add up in half precision
    if (rc == CT_OK)
      rc = be->gemm(dt, false, true, st->cout, kk, cn, 1.0, ct_data_ptr(gt), cn, 0,
                    ct_data_ptr(cols), cn, 0, n0 == 0 || lowp ? 0.0 : 1.0, ct_data_ptr(dw), kk, 0, 1, s);
    if (rc == CT_OK && lowp) rc = cti_param_accumulate_grad(&m->own[0], dw);
    // dcols (C_in*k*k, nb*P) = W^T @ gt, then summed back into the images
    if (rc == CT_OK && dx)
      rc = be->gemm(dt, true, false, kk, cn, st->cout, 1.0, ct_data_ptr(wc), kk, 0,
                    ct_data_ptr(gt), cn, 0, 0.0, ct_data_ptr(dcols), cn, 0, 1, s);
    if (rc == CT_OK && dx && lowp) { // widen this chunk's columns for a float32 col2im
      ct_tensor *src = ct_narrow(dcols, 0, 0, kk * cn), *dst = ct_narrow(dcols32, 0, 0, kk * cn);
      rc = src && dst ? ct_copy_(dst, src, false) : (int)ct_last_status();
      ct_free(src), ct_free(dst);
    }
    if (rc == CT_OK && dx)
      rc = be->conv->col2im(sum_dt, &gk, ct_data_ptr(lowp ? dcols32 : dcols), elem(dx, n0 * chw), s);
  }
  if (rc == CT_OK && !lowp) rc = cti_param_accumulate_grad(&m->own[0], dw);
  if (rc == CT_OK && st->bias) { // db = sum over N, Ho, Wo: (N, C_out, P) -> (N, C_out) -> (C_out)
    ct_tensor *g3 = ct_reshape(gy, CT_SHAPE(g.n, st->cout, P));
    ct_tensor *per = g3 ? ct_sum_dim(g3, 2, false) : NULL;
    db = per ? ct_sum_dim(per, 0, false) : NULL;
    rc = db ? cti_param_accumulate_grad(&m->own[1], db) : (int)ct_last_status();
    ct_free(g3), ct_free(per);
  }
  ct_free(gy), ct_free(wc), ct_free(gt), ct_free(cols), ct_free(dcols), ct_free(dcols32), ct_free(dw),
      ct_free(db);
  if (rc == CT_OK && dx && ct_dtype_of(dx) != st->x_dtype) { // the input cast's backward
    ct_tensor *dxc = ct_to_dtype(dx, st->x_dtype);
    ct_free(dx);
    dx = dxc;
    if (!dx) rc = ct_last_status();
  }
  if (rc != CT_OK) {
    ct_free(dx);
    return rc;
  }
  if (dx_out) *dx_out = dx;
  return CT_OK;
}

static ct_tensor *conv_backward(ct_module *m, const ct_tensor *gy) {
  ct_tensor *dx = NULL;
  return conv_grads(m, gy, &dx) == CT_OK ? dx : NULL;
}

static int conv_backward_params(ct_module *m, const ct_tensor *gy) { return conv_grads(m, gy, NULL); }

static void conv_describe(const ct_module *m, char *buf, size_t len) {
  const conv_state *st = m->state;
  int n = snprintf(buf, len, "%" PRId64 ", %" PRId64 ", kernel_size=(%d, %d), stride=(%d, %d)",
                   st->cin, st->cout, st->k, st->k, st->stride, st->stride);
  if (n >= 0 && (size_t)n < len && st->pad != 0)
    n += snprintf(buf + n, len - (size_t)n, ", padding=(%d, %d)", st->pad, st->pad);
  if (n >= 0 && (size_t)n < len && !st->bias) snprintf(buf + n, len - (size_t)n, ", bias=False");
}

// Saved activations are dropped on a move: the next forward makes new ones.
static int conv_state_to(ct_module *m, ct_device device) {
  (void)device;
  drop_saved(m->state);
  return CT_OK;
}

static void conv_state_free(ct_module *m) {
  if (!m->state) return;
  drop_saved(m->state);
  free(m->state);
  m->state = NULL;
}

// The configuration without the saved tensors (ct_module_replicate).
static void *conv_state_clone(const ct_module *m) {
  conv_state *st = cti_state_dup(m->state, sizeof *st);
  if (!st) return NULL;
  st->x = st->w = NULL;
  return st;
}

static const cti_module_ops conv_ops = {
    .kind = "Conv2d",
    .forward = conv_forward,
    .backward = conv_backward,
    .backward_params = conv_backward_params,
    .describe = conv_describe,
    .state_to = conv_state_to,
    .state_free = conv_state_free,
    .state_clone = conv_state_clone,
};

ct_module *ct_nn_conv2d(int64_t in_channels, int64_t out_channels, int kernel_size, int stride,
                        int padding, bool bias) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size <= 0 || stride <= 0 || padding < 0) {
    ct_fail(CT_ERR_VALUE,
            "ct_nn_conv2d: expected positive in_channels, out_channels, kernel_size and stride "
            "and padding >= 0, got %" PRId64 ", %" PRId64 ", %d, %d, %d",
            in_channels, out_channels, kernel_size, stride, padding);
    return NULL;
  }
  conv_state *st = calloc(1, sizeof *st);
  if (!st) {
    ct_fail(CT_ERR_OOM, "ct_nn_conv2d: out of host memory");
    return NULL;
  }
  *st = (conv_state){.cin = in_channels, .cout = out_channels, .k = kernel_size,
                     .stride = stride, .pad = padding, .bias = bias};
  ct_module *m = cti_module_new(&conv_ops, st);
  if (!m) {
    free(st);
    return NULL;
  }
  const double bound = 1.0 / sqrt((double)(in_channels * kernel_size * kernel_size));
  const ct_device cpu = ct_device_cpu();
  // weight first, then bias, as reset_parameters draws them
  ct_tensor *w = ct_empty(CT_SHAPE(out_channels, in_channels, kernel_size, kernel_size), CT_F32, cpu);
  if (w && cti_nn_init_uniform(w, bound) != CT_OK) ct_free(w), w = NULL;
  if (!w || !cti_module_register(m, "weight", w, false)) { // register takes w even when it fails
    ct_module_free(m);
    return NULL;
  }
  if (bias) {
    ct_tensor *b = ct_empty(CT_SHAPE(out_channels), CT_F32, cpu);
    if (b && cti_nn_init_uniform(b, bound) != CT_OK) ct_free(b), b = NULL;
    if (!b || !cti_module_register(m, "bias", b, false)) {
      ct_module_free(m);
      return NULL;
    }
  }
  return m;
}
