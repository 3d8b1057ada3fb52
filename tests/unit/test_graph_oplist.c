// SPDX-License-Identifier: MIT
//
// test_graph_oplist: every entry of every op family's list (oplist.h) is
// covered by the graph recorder and by the profiler.
//
// Recorder: each entry of cti_graph_backend is a stand-in (not NULL, not the
// CPU's function); called under a CPU capture with zeroed arguments, an
// entry that issues work appends exactly one node to the graph (recorded,
// not run, so the zeroed pointers are never read); an entry that waits for
// the host is refused (the capture is invalidated, no node); a query
// answers as the CPU's does.
// Profiler: in the profiler's copy of the CPU backend every entry that
// issues work is a wrapper (not the CPU's function), queries are the CPU's;
// and a tiny GPT's forward and backward under a session show the ranges of
// the whole transformer family under aten's names.
#include <string.h>

#include "amp_kernels.h"
#include "backend.h"
#include "conv_kernels.h"
#include "graph_impl.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "prof_impl.h"
#include "testutil.h"
#include "transformer_kernels.h"
#include "tu_gpt.h"

// A zero of each parameter's type; ARG_COPY and ARG_BAD point to one.
#define ZERO(p) ZERO_##p
#define ZERO_ARG(t, n) (t){0}
#define ZERO_ARG_COPY(t, n) &(t){0}
#define ZERO_ARG_BAD(t, n) &(t){0}
#define ZEROS(...) CTI_MAP(ZERO, CTI_SEP_COMMA, __VA_ARGS__)

// The number of entries, counted from the tables' sizes (independent of the
// lists): cti_backend has its name and five family pointers besides.
static int table_entries(void) {
  return (int)((sizeof(cti_backend) - sizeof(const char *) - 5 * sizeof(void *) + sizeof(cti_nn_kernels) +
                sizeof(cti_conv_kernels) + sizeof(cti_optim_kernels) + sizeof(cti_transformer_kernels) +
                sizeof(cti_amp_kernels)) /
               sizeof(void *));
}

// ---- the recorder ---------------------------------------------------------------------------------

#define STANDIN_SET(fam, name, kind, ...)                                                            \
  do {                                                                                               \
    ++entries;                                                                                       \
    assert_non_null(CTI_OP_TABLE(fam, &cti_graph_backend)->name);                                    \
    if (CTI_OP_TABLE(fam, &cti_graph_backend)->name == CTI_OP_TABLE(fam, &cti_cpu_backend)->name)    \
      fail_msg("%s.%s: no stand-in in the graph recorder", #fam, #name);                             \
  } while (0);

static void test_every_entry_has_a_stand_in(void **state) {
  (void)state;
  int entries = 0;
  CTI_ALL_OPS(STANDIN_SET)
  assert_int_equal(entries, table_entries());
  assert_int_equal(entries, 0 CTI_ALL_OPS(CTI_OP_COUNT));
}

// One call of each entry of `kind` on stream s: OP and BAD append one node,
// WAIT is refused; QUERY answers as the CPU does.
#define RECORD(want, fam, name, kind, ret, aten, shapes, ...) RECORD_##want##_##kind(fam, name, __VA_ARGS__)
#define RECORD_WORK_OP(fam, name, ...)                                                               \
  {                                                                                                  \
    const int64_t before = ct_cuda_graph_num_nodes(g);                                               \
    int rc = CTI_OP_TABLE(fam, &cti_graph_backend)->name(ZEROS(__VA_ARGS__), side);                  \
    if (rc != CT_OK) fail_msg("%s.%s: recording failed: %s", #fam, #name, ct_last_error());          \
    if (ct_cuda_graph_num_nodes(g) != before + 1)                                                    \
      fail_msg("%s.%s: %lld nodes recorded, not 1", #fam, #name,                                     \
               (long long)(ct_cuda_graph_num_nodes(g) - before));                                    \
    ++recorded;                                                                                      \
  }
#define RECORD_WORK_BAD RECORD_WORK_OP
#define RECORD_WORK_WAIT(fam, name, ...)
#define RECORD_WORK_QUERY(fam, name, ...)                                                            \
  {                                                                                                  \
    assert_true(CTI_OP_TABLE(fam, &cti_graph_backend)->name() == CTI_OP_TABLE(fam, &cti_cpu_backend)->name()); \
    ++queries;                                                                                       \
  }
#define RECORD_WAITS_OP(fam, name, ...)
#define RECORD_WAITS_BAD(fam, name, ...)
#define RECORD_WAITS_QUERY(fam, name, ...)
#define RECORD_WAITS_WAIT(fam, name, ...)                                                            \
  {                                                                                                  \
    const int64_t before = ct_cuda_graph_num_nodes(g);                                               \
    if (CTI_OP_TABLE(fam, &cti_graph_backend)->name(ZEROS(__VA_ARGS__), side) == CT_OK)              \
      fail_msg("%s.%s waits for the host, yet was accepted under capture", #fam, #name);             \
    assert_int_equal(ct_cuda_graph_num_nodes(g), before);                                            \
    ++waits;                                                                                         \
  }
#define RECORD_WORK(...) RECORD(WORK, __VA_ARGS__)
#define RECORD_WAITS(...) RECORD(WAITS, __VA_ARGS__)

static void test_every_entry_is_recorded(void **state) {
  (void)state;
  const ct_device cpu = {CT_CPU, -1};
  ct_stream *side = ct_stream_create(cpu, 0);
  TU_CHECK(side);
  int recorded = 0, waits = 0, queries = 0;

  ct_cuda_graph *g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  CTI_ALL_OPS(RECORD_WORK)
  TU_OK(ct_cuda_graph_capture_end(g));
  ct_cuda_graph_free(g);

  // A refused wait invalidates its capture: one capture for those.
  g = ct_cuda_graph_create();
  TU_CHECK(g);
  TU_OK(ct_cuda_graph_capture_begin(g, side, NULL));
  CTI_ALL_OPS(RECORD_WAITS)
  assert_int_not_equal(ct_cuda_graph_capture_end(g), CT_OK);
  ct_cuda_graph_free(g);
  ct_stream_free(side);

  assert_int_equal(recorded + waits + queries, table_entries());
  assert_true(waits >= 1 && queries >= 1);
}

// ---- the profiler --------------------------------------------------------------------------------

#define WRAPPED(fam, name, kind, ...) WRAPPED_##kind(fam, name)
#define WRAPPED_OP(fam, name)                                                                        \
  {                                                                                                  \
    assert_non_null(CTI_OP_TABLE(fam, prof)->name);                                                  \
    if (CTI_OP_TABLE(fam, prof)->name == CTI_OP_TABLE(fam, &cti_cpu_backend)->name)                  \
      fail_msg("%s.%s: not wrapped by the profiler", #fam, #name);                                   \
    ++wrapped;                                                                                       \
  }
#define WRAPPED_BAD WRAPPED_OP
#define WRAPPED_WAIT WRAPPED_OP
#define WRAPPED_QUERY(fam, name)                                                                     \
  {                                                                                                  \
    assert_true(CTI_OP_TABLE(fam, prof)->name == CTI_OP_TABLE(fam, &cti_cpu_backend)->name);         \
    ++queries;                                                                                       \
  }

static void test_every_entry_is_wrapped(void **state) {
  (void)state;
  const cti_backend *prof = cti_prof_backend(&cti_cpu_backend);
  assert_true(prof != &cti_cpu_backend);
  int wrapped = 0, queries = 0;
  CTI_ALL_OPS(WRAPPED)
  assert_int_equal(wrapped + queries, table_entries());
}

static bool has_range(const ct_profiler_event *ev, int n, const char *name) {
  for (int i = 0; i < n; ++i)
    if (ev[i].kind == CT_EVENT_OP && strcmp(ev[i].name, name) == 0) return true;
  return false;
}

// A tiny GPT's step under a session (tu_gpt builds it on the CPU): every
// transformer entry's range.
static void test_transformer_ranges(void **state) {
  (void)state;
  const ct_device cpu = {CT_CPU, -1};
  ct_manual_seed(3);
  tu_gpt gpt;
  tu_gpt_init(&gpt, 11, 4, 8, 2);
  const int64_t ids[8] = {1, 5, 7, 2, 10, 0, 3, 3}, next[8] = {5, 7, 2, 9, 0, 3, 3, 6};
  ct_tensor *idx = ct_from_host(ids, CT_SHAPE(2, 4), CT_I64, cpu);
  ct_tensor *tgt = ct_from_host(next, CT_SHAPE(2, 4), CT_I64, cpu);
  TU_CHECK(idx);
  TU_CHECK(tgt);
  ct_profiler *p = ct_profiler_start(NULL);
  TU_CHECK(p);
  ct_tensor *loss = NULL, *dlogits = NULL;
  ct_tensor *logits = tu_gpt_forward(&gpt, idx, tgt, &loss, &dlogits);
  tu_gpt_backward(&gpt, dlogits);
  TU_OK(ct_profiler_stop(p));
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  static const char *const want[] = {
      "ct::embedding", "ct::embedding_dense_backward", "ct::native_layer_norm", "ct::native_layer_norm_backward",
      "ct::gelu",      "ct::gelu_backward",            "ct::_softmax",          "ct::_softmax_backward_data",
      "ct::cross_entropy"};
  for (size_t i = 0; i < sizeof want / sizeof *want; ++i)
    if (!has_range(ev, n, want[i])) fail_msg("no %s range in a GPT step", want[i]);
  ct_profiler_free(p);
  ct_free(logits), ct_free(loss), ct_free(dlogits), ct_free(idx), ct_free(tgt);
  ct_module_free(gpt.root);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_entry_has_a_stand_in),
      cmocka_unit_test(test_every_entry_is_wrapped),
      cmocka_unit_test(test_transformer_ranges),
      cmocka_unit_test(test_every_entry_is_recorded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
