// SPDX-License-Identifier: MIT
//
// graph_backend: the recording table, cti_graph_backend, that the dispatcher
// hands out instead of a device's backend while the calling thread captures
// a graph on that device (graph.c says why the recorder sits here).
//
// Invariant: every entry of cti_backend and of the nn, conv, optim,
// transformer and amp family tables has a stand-in here with the same
// signature, generated from the family's list (oplist.h): it packs its
// arguments by value into a struct (a cti_iter or a geometry is copied, not
// pointed to) and hands them, with a call function that unpacks them into
// the real entry, to cti_graph_issue. That routes the call by its stream:
// recorded (CPU capture stream), run (CUDA capture stream, where CUDA
// records the launch, or any other stream), or refused (the default
// stream). An entry that waits for its answer on the host (kind WAIT) is
// refused while capturing; one that issues no work (QUERY) is passed on.
// The tables below are built from the same lists, so no entry can lack its
// stand-in.
#include <string.h>

#include "amp_kernels.h"
#include "conv_kernels.h"
#include "graph_impl.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "transformer_kernels.h"

// ---- what the lists generate ---------------------------------------------------------------------

// region: standin
// A recorded parameter: its member of the argument struct, how the stand-in
// packs it, and how the replay call passes it on.
#define REC_FIELD(p) REC_FIELD_##p
#define REC_FIELD_ARG(t, n) t n;
#define REC_FIELD_ARG_COPY(t, n) t n;
#define REC_FIELD_ARG_BAD(t, n) t *n; // NULL when recorded
#define REC_PACK(p) REC_PACK_##p
#define REC_PACK_ARG(t, n) rec_.n = n;
#define REC_PACK_ARG_COPY(t, n) rec_.n = *n;
#define REC_PACK_ARG_BAD(t, n)                                                                       \
  if (recorded_) *n = -1;                                                                            \
  rec_.n = recorded_ ? NULL : n;
#define REC_PASS(p) REC_PASS_##p
#define REC_PASS_ARG(t, n) rec_->n
#define REC_PASS_ARG_COPY(t, n) &rec_->n
#define REC_PASS_ARG_BAD(t, n) (rec_->n ? rec_->n : &bad_)

// Pass 1: the argument struct <family>_<entry>_args of each recorded entry.
#define GRAPH_ARGS(fam, name, kind, ret, aten, shapes, ...) GRAPH_ARGS_##kind(fam, name, __VA_ARGS__)
#define GRAPH_ARGS_OP(fam, name, ...)                                                                \
  typedef struct { CTI_MAP(REC_FIELD, CTI_SEP_NONE, __VA_ARGS__) } fam##_##name##_args;
#define GRAPH_ARGS_BAD GRAPH_ARGS_OP
#define GRAPH_ARGS_WAIT(fam, name, ...)
#define GRAPH_ARGS_QUERY(fam, name, ...)

// Pass 2: the replay call <family>_<entry>_call and the stand-in
// <family>_<entry>_rec.
#define GRAPH_STANDIN(fam, name, kind, ret, aten, shapes, ...)                                      \
  GRAPH_STANDIN_##kind(fam, name, ret, __VA_ARGS__)
#define GRAPH_STANDIN_OP(fam, name, ret, ...)                                                        \
  static int fam##_##name##_call(const cti_backend *be, const void *args_, ct_stream *s) {          \
    const fam##_##name##_args *rec_ = args_;                                                         \
    return CTI_OP_TABLE(fam, be)->name(CTI_MAP(REC_PASS, CTI_SEP_COMMA, __VA_ARGS__), s);            \
  }                                                                                                  \
  static ret fam##_##name##_rec(CTI_OP_PARAMS(__VA_ARGS__), ct_stream *s) {                         \
    fam##_##name##_args rec_;                                                                        \
    memset(&rec_, 0, sizeof rec_);                                                                   \
    CTI_MAP(REC_PACK, CTI_SEP_NONE, __VA_ARGS__)                                                     \
    return cti_graph_issue(s, fam##_##name##_call, &rec_, sizeof rec_);                              \
  }
// endregion
// A host variable for a bad index: the caller's while the call runs at once;
// a recorded call has none, so its replay checks a variable of its own and
// fails with the eager message (<family>_<entry>_bad, below).
#define GRAPH_STANDIN_BAD(fam, name, ret, ...)                                                       \
  static int fam##_##name##_call(const cti_backend *be, const void *args_, ct_stream *s) {          \
    const fam##_##name##_args *rec_ = args_;                                                         \
    int64_t bad_ = -1;                                                                               \
    int rc_ = CTI_OP_TABLE(fam, be)->name(CTI_MAP(REC_PASS, CTI_SEP_COMMA, __VA_ARGS__), s);         \
    return rc_ == CT_OK && bad_ >= 0 ? fam##_##name##_bad(rec_, bad_) : rc_;                         \
  }                                                                                                  \
  static ret fam##_##name##_rec(CTI_OP_PARAMS(__VA_ARGS__), ct_stream *s) {                         \
    const bool recorded_ = cti_graph_records(s);                                                     \
    fam##_##name##_args rec_;                                                                        \
    memset(&rec_, 0, sizeof rec_);                                                                   \
    CTI_MAP(REC_PACK, CTI_SEP_NONE, __VA_ARGS__)                                                     \
    return cti_graph_issue(s, fam##_##name##_call, &rec_, sizeof rec_);                              \
  }
// Waits for its answer on the host: never part of a graph.
#define GRAPH_STANDIN_WAIT(fam, name, ret, ...)                                                      \
  static ret fam##_##name##_rec(CTI_OP_PARAMS(__VA_ARGS__), ct_stream *s) {                         \
    int rc_ = cti_graph_refuse_wait();                                                               \
    return rc_ ? rc_ : CTI_OP_TABLE(fam, cti_graph_real_backend())->name(CTI_OP_ARGS(__VA_ARGS__), s); \
  }
// Issues no work: answered by the real backend.
#define GRAPH_STANDIN_QUERY(fam, name, ret, ...)                                                     \
  static ret fam##_##name##_rec(void) { return CTI_OP_TABLE(fam, cti_graph_real_backend())->name(); }

// The tables' initializers.
#define GRAPH_INIT(fam, name, ...) .name = fam##_##name##_rec,

CTI_ALL_OPS(GRAPH_ARGS)

// ---- the eager messages of a bad index found at replay --------------------------------------------

static int nn_cross_entropy_bad(const nn_cross_entropy_args *x, int64_t bad) {
  return ct_fail(CT_ERR_VALUE, "ct_cross_entropy_loss: Target %lld is out of bounds.",
                 (long long)x->target[bad]);
}

static int transformer_embedding_bad(const transformer_embedding_args *x, int64_t bad) {
  return ct_fail(CT_ERR_VALUE, "Embedding: index out of range in self (index %lld at position %lld, "
                 "num_embeddings %lld)", (long long)x->idx[bad], (long long)bad, (long long)x->v);
}

static int transformer_cross_entropy_bad(const transformer_cross_entropy_args *x, int64_t bad) {
  return ct_fail(CT_ERR_VALUE, "ct_cross_entropy: Target %lld is out of bounds.", (long long)x->target[bad]);
}

// ---- the stand-ins and the tables ---------------------------------------------------------------

CTI_ALL_OPS(GRAPH_STANDIN)

static const cti_nn_kernels graph_nn = {CTI_NN_OPS(GRAPH_INIT)};
static const cti_conv_kernels graph_conv = {CTI_CONV_OPS(GRAPH_INIT)};
static const cti_optim_kernels graph_optim = {CTI_OPTIM_OPS(GRAPH_INIT)};
static const cti_amp_kernels graph_amp = {CTI_AMP_OPS(GRAPH_INIT)};
static const cti_transformer_kernels graph_transformer = {CTI_TRANSFORMER_OPS(GRAPH_INIT)};

const cti_backend cti_graph_backend = {
    .name = "graph",
    CTI_CORE_OPS(GRAPH_INIT)
    .nn = &graph_nn,
    .conv = &graph_conv,
    .optim = &graph_optim,
    .transformer = &graph_transformer,
    .amp = &graph_amp,
};
