// SPDX-License-Identifier: MIT
//
// prof_backend: op ranges from one place, the backend table.
//
// Every op reaches its device through cti_backend_for (ops.c), which, while
// a session records, hands out a copy of the device's table whose entries
// are the wrappers below. A wrapper opens a range named after the entry
// ("ct::gemm", "ct::im2col", "ct::add" from the op code it is given), with
// the shapes the kernel runs on, calls the real entry of the stream's
// device, and closes the range; on a CUDA stream the range also brackets the
// work with two events (prof.c). The range is the counterpart of torch's
// aten:: op at the level where work is issued.
//
// Why the entry's name and not the name the caller gave cti_backend_for: a
// caller may ask for the backend twice before it runs an entry (Conv2d asks,
// then ct_empty asks for its workspace), so the caller's name is not reliably
// the one of the work that follows; the entry is.
//
// The wrappers are generated from the op families' lists (oplist.h): each
// entry's list line gives its range name (aten's where one fits) and its
// shapes, so every entry that issues work is wrapped, and an entry added to
// a list is profiled with no line written here. Only QUERY entries, which
// issue no work, keep their real function.
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "amp_kernels.h"
#include "backend.h"
#include "conv_kernels.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "transformer_kernels.h"
#include "prof_internal.h"

atomic_int cti_prof_shapes_on;

// region: wrapper
static const cti_backend *real_of(const ct_stream *s) {
#ifdef CT_HAVE_CUDA
  if (ct_stream_device(s).type == CT_CUDA) return &cti_cuda_backend;
#endif
  return &cti_cpu_backend;
}

static int op_begin(const char *name, const char *shapes, ct_stream *s) {
  char full[64] = "ct::";
  size_t n = strlen(name);
  if (n > sizeof full - 5) n = sizeof full - 5;
  memcpy(full + 4, name, n);
  full[4 + n] = '\0';
  return cti_prof_range_begin(CT_EVENT_OP, full, shapes, ct_stream_device(s), s);
}

// The shapes string, built only under record_shapes: SH("[[%" PRId64 "]]", n).
#define SH(...) (atomic_load_explicit(&cti_prof_shapes_on, memory_order_relaxed) \
                     ? (snprintf(sh, sizeof sh, __VA_ARGS__), sh) : NULL)
#define I64 "%" PRId64

// "[[d0, d1], [d0, d1]]": the loop's shape once per input.
static const char *iter_shapes(char *sh, size_t len, const cti_iter *it, int inputs) {
  if (!atomic_load_explicit(&cti_prof_shapes_on, memory_order_relaxed)) return NULL;
  ct_shape shape = {it->ndim, {0}};
  for (int d = 0; d < it->ndim; ++d) shape.d[d] = it->shape[d];
  char one[80];
  cti_prof_shape_str(shape, one, sizeof one);
  size_t k = (size_t)snprintf(sh, len, "[");
  for (int i = 0; i < inputs && k < len; ++i) k += (size_t)snprintf(sh + k, len - k, "%s%s", i ? ", " : "", one);
  if (k < len) snprintf(sh + k, len - k, "]");
  return sh;
}

// The shapes the lists name (CTI_SH_*), written into the wrapper's `sh`.
#define CTI_SH_ITER(it, inputs) iter_shapes(sh, sizeof sh, it, inputs)
#define CTI_SH_1(a) SH("[[" I64 "]]", a)
#define CTI_SH_2(a, b) SH("[[" I64 ", " I64 "]]", a, b)
#define CTI_SH_3(a, b, c) SH("[[" I64 ", " I64 ", " I64 "]]", a, b, c)
#define CTI_SH_1_1(a, b) SH("[[" I64 "], [" I64 "]]", a, b)
#define CTI_SH_2_1(a, b, c) SH("[[" I64 ", " I64 "], [" I64 "]]", a, b, c)
#define CTI_SH_GEOM(g) SH("[[" I64 ", " I64 ", " I64 ", " I64 "]]", (g)->n, (g)->c, (g)->h, (g)->w)
#define CTI_SH_CONST(str) (str)
// torch's aten::mm shows [[m, k], [k, n]]; a batch adds its leading size.
#define CTI_SH_GEMM(batch, m, n, k)                                                                  \
  ((batch) > 1 ? SH("[[" I64 ", " I64 ", " I64 "], [" I64 ", " I64 ", " I64 "]]", batch, m, k, batch, k, n) \
               : SH("[[" I64 ", " I64 "], [" I64 ", " I64 "]]", m, k, k, n))

// ---- the wrappers, one per entry: w_<family>_<entry> ------------------------------------------
#define PROF_WRAPPER(fam, name, kind, ret, aten, shapes, ...)                                       \
  PROF_WRAPPER_##kind(fam, name, ret, aten, shapes, __VA_ARGS__)
#define PROF_WRAPPER_OP(fam, name, ret, aten, shapes, ...)                                          \
  static ret w_##fam##_##name(CTI_OP_PARAMS(__VA_ARGS__), ct_stream *s) {                           \
    char sh[96];                                                                                     \
    (void)sh;                                                                                        \
    int t_ = op_begin(aten, shapes, s);                                                              \
    ret rc_ = CTI_OP_TABLE(fam, real_of(s))->name(CTI_OP_ARGS(__VA_ARGS__), s);                      \
    cti_prof_end(t_);                                                                                \
    return rc_;                                                                                      \
  }
#define PROF_WRAPPER_BAD PROF_WRAPPER_OP
#define PROF_WRAPPER_WAIT PROF_WRAPPER_OP
#define PROF_WRAPPER_QUERY(fam, name, ret, aten, shapes, ...)
// endregion

CTI_ALL_OPS(PROF_WRAPPER)

// ---- the copies ---------------------------------------------------------------------------
typedef struct proxy {
  cti_backend be;
  cti_nn_kernels nn;
  cti_conv_kernels conv;
  cti_optim_kernels optim;
  cti_transformer_kernels transformer;
  cti_amp_kernels amp;
} proxy;

enum { PROXY_CPU, PROXY_CUDA, NPROXIES };
static proxy proxies[NPROXIES];
static pthread_once_t proxies_once = PTHREAD_ONCE_INIT;

// Replaces an entry the real table has (NULL stays NULL; a family the real
// backend lacks stays absent).
#define PROF_WRAP(fam, name, kind, ...) PROF_WRAP_##kind(fam, name)
#define PROF_WRAP_OP(fam, name)                                                                      \
  if (CTI_OP_TABLE(fam, real) && CTI_OP_TABLE(fam, real)->name) view.fam->name = w_##fam##_##name;
#define PROF_WRAP_BAD PROF_WRAP_OP
#define PROF_WRAP_WAIT PROF_WRAP_OP
#define PROF_WRAP_QUERY(fam, name)

static void make_proxy(proxy *p, const cti_backend *real) {
  p->be = *real;
  if (real->nn) p->nn = *real->nn, p->be.nn = &p->nn;
  if (real->conv) p->conv = *real->conv, p->be.conv = &p->conv;
  if (real->optim) p->optim = *real->optim, p->be.optim = &p->optim;
  if (real->transformer) p->transformer = *real->transformer, p->be.transformer = &p->transformer;
  if (real->amp) p->amp = *real->amp, p->be.amp = &p->amp;
  // The proxy's tables by family name, as the lists name them.
  const struct {
    cti_backend *core;
    cti_nn_kernels *nn;
    cti_conv_kernels *conv;
    cti_optim_kernels *optim;
    cti_transformer_kernels *transformer;
    cti_amp_kernels *amp;
  } view = {&p->be, &p->nn, &p->conv, &p->optim, &p->transformer, &p->amp};
  CTI_ALL_OPS(PROF_WRAP)
}

static void make_proxies(void) {
  make_proxy(&proxies[PROXY_CPU], &cti_cpu_backend);
#ifdef CT_HAVE_CUDA
  make_proxy(&proxies[PROXY_CUDA], &cti_cuda_backend);
#endif
}

const cti_backend *cti_prof_backend(const cti_backend *real) {
  pthread_once(&proxies_once, make_proxies);
  if (real == &cti_cpu_backend) return &proxies[PROXY_CPU].be;
#ifdef CT_HAVE_CUDA
  if (real == &cti_cuda_backend) return &proxies[PROXY_CUDA].be;
#endif
  return real;
}
