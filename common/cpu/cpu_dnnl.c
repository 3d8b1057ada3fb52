// SPDX-License-Identifier: MIT
//
// cpu_dnnl: bfloat16 matrix products on the host through oneDNN's matmul
// primitive, the library PyTorch's CPU autocast uses for the same job.
//
// Why it exists: Debian's OpenBLAS has no bf16 GEMM, so without it a bf16
// product is two widening passes, an sgemm and a rounding pass (cpu_gemm.c);
// the bf16 inputs save memory but no time. CPUs with AVX-512 BF16 (or AMX)
// have an instruction that multiplies pairs of bf16 values and adds them to
// a float32 accumulator (vdpbf16ps); oneDNN's "brgemm" kernels are built on
// it. The result is rounded to bf16 once, from the float32 sum, as cuBLAS's
// bf16 GEMM with float32 compute does.
//
// Invariant: cti_cpu_gemm_bf16_native either computes the whole product and
// returns CT_OK, or touches nothing and returns CTI_GEMM_FALLBACK, so the
// caller can always fall back to the convert-and-f32 path. It falls back
// when the build has no oneDNN (CMake found no libdnnl-dev), when the CPU
// lacks the bf16 instructions (oneDNN would only emulate them), when it is
// switched off (ct_cpu_bf16_native_set_enabled(false), for measuring), and
// when oneDNN offers only its reference kernel for a layout ("ref:any", e.g.
// a batch stride of 0).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "amp.h"
#include "cpu_kernels.h"
#include "error.h"

static atomic_bool g_enabled = true;

void ct_cpu_bf16_native_set_enabled(bool enabled) { atomic_store(&g_enabled, enabled); }
bool ct_cpu_bf16_native_enabled(void) { return atomic_load(&g_enabled); }

#ifdef CT_HAVE_DNNL
#include <dnnl.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static bool g_native;      // engine made and the CPU has the bf16 instructions
static char g_why[160];    // why not, when !g_native
static _Thread_local char t_impl[64]; // the kernel oneDNN picked for this thread's last product

static void init_once(void) {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  const dnnl_version_t *v = dnnl_version();
  if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
    snprintf(g_why, sizeof g_why, "oneDNN %d.%d.%d is built in, but this CPU lacks AVX-512 BF16",
             v->major, v->minor, v->patch);
    return;
  }
  if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) {
    snprintf(g_why, sizeof g_why, "oneDNN %d.%d.%d could not create its CPU engine", v->major,
             v->minor, v->patch);
    return;
  }
  g_native = true;
}

bool ct_cpu_bf16_native_available(void) {
  pthread_once(&g_once, init_once);
  return g_native;
}

const char *ct_cpu_bf16_gemm_info(void) {
  static _Thread_local char buf[224];
  pthread_once(&g_once, init_once);
  const dnnl_version_t *v = dnnl_version();
  if (!g_native)
    snprintf(buf, sizeof buf, "float32 widening + OpenBLAS sgemm (%s)", g_why);
  else if (!ct_cpu_bf16_native_enabled())
    snprintf(buf, sizeof buf, "float32 widening + OpenBLAS sgemm (oneDNN %d.%d.%d switched off)",
             v->major, v->minor, v->patch);
  else
    snprintf(buf, sizeof buf, "oneDNN %d.%d.%d matmul, AVX-512 BF16%s%s", v->major, v->minor,
             v->patch, t_impl[0] ? ", kernel " : "", t_impl);
  return buf;
}

// A (batch, rows, cols) bf16/f32 memory descriptor for a matrix stored with
// row stride ld (or transposed: column stride ld) and batch stride sb.
static dnnl_status_t matrix_md(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int64_t batch,
                               int64_t rows, int64_t cols, bool trans, int64_t ld, int64_t sb) {
  dnnl_dims_t dims = {batch, rows, cols};
  dnnl_dims_t strides = {sb, trans ? 1 : ld, trans ? ld : 1};
  if (batch == 1) strides[0] = rows * cols; // any value; 0 sends oneDNN to its reference kernel
  return dnnl_memory_desc_init_by_strides(md, 3, dims, dt, strides);
}

int cti_cpu_gemm_bf16_native(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                            const uint16_t *A, int64_t lda, int64_t strideA, const uint16_t *B,
                            int64_t ldb, int64_t strideB, double beta, uint16_t *C, int64_t ldc,
                            int64_t strideC, int64_t batch) {
  if (!ct_cpu_bf16_native_enabled() || !ct_cpu_bf16_native_available()) return CTI_GEMM_FALLBACK;
  // A matrix shared by every batch (stride 0) is a batch of one, which
  // oneDNN broadcasts; C always has its own matrices.
  const int64_t ba = strideA == 0 ? 1 : batch, bb = strideB == 0 ? 1 : batch;
  dnnl_memory_desc_t amd, bmd, cmd;
  if (matrix_md(&amd, dnnl_bf16, ba, m, k, ta, lda, strideA) != dnnl_success ||
      matrix_md(&bmd, dnnl_bf16, bb, k, n, tb, ldb, strideB) != dnnl_success ||
      matrix_md(&cmd, dnnl_bf16, batch, m, n, false, ldc, strideC) != dnnl_success)
    return CTI_GEMM_FALLBACK;
  dnnl_matmul_desc_t desc;
  if (dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd) != dnnl_success) return CTI_GEMM_FALLBACK;
  // C = alpha * A @ B (+ beta * C: the "sum" post-op adds beta times the old C)
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post = NULL;
  const float falpha = (float)alpha;
  int rc = CTI_GEMM_FALLBACK;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  dnnl_memory_t ma = NULL, mb = NULL, mc = NULL;
  dnnl_stream_t stream = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) goto out;
  if (falpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &falpha) != dnnl_success) goto out;
  if (beta != 0.0) {
    if (dnnl_post_ops_create(&post) != dnnl_success || dnnl_post_ops_append_sum(post, (float)beta) != dnnl_success ||
        dnnl_primitive_attr_set_post_ops(attr, post) != dnnl_success)
      goto out;
  }
  if (dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL) != dnnl_success) goto out;
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
      strncmp(impl, "ref", 3) == 0)
    goto out; // only the reference loop: the widening path is faster
  snprintf(t_impl, sizeof t_impl, "%s", impl);
  if (dnnl_primitive_create(&prim, pd) != dnnl_success ||
      dnnl_memory_create(&ma, &amd, g_engine, (void *)A) != dnnl_success ||
      dnnl_memory_create(&mb, &bmd, g_engine, (void *)B) != dnnl_success ||
      dnnl_memory_create(&mc, &cmd, g_engine, C) != dnnl_success ||
      dnnl_stream_create(&stream, g_engine, dnnl_stream_default_flags) != dnnl_success)
    goto out;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  if (dnnl_primitive_execute(prim, stream, 3, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success) {
    // C may be half-written: no silent fallback over it.
    rc = ct_fail(CT_ERR_OOM, "ct_matmul: oneDNN's bf16 matmul (%s) failed for a (%lld x %lld x %lld) product "
                 "(out of memory for its scratchpad?)",
                 impl, (long long)m, (long long)k, (long long)n);
    goto out;
  }
  rc = CT_OK;
out:
  if (stream) dnnl_stream_destroy(stream);
  if (ma) dnnl_memory_destroy(ma);
  if (mb) dnnl_memory_destroy(mb);
  if (mc) dnnl_memory_destroy(mc);
  if (prim) dnnl_primitive_destroy(prim);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (post) dnnl_post_ops_destroy(post);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

#else // no oneDNN in this build

bool ct_cpu_bf16_native_available(void) { return false; }

const char *ct_cpu_bf16_gemm_info(void) {
  return "float32 widening + OpenBLAS sgemm (this build has no oneDNN: install libdnnl-dev and "
         "configure again)";
}

int cti_cpu_gemm_bf16_native(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                            const uint16_t *A, int64_t lda, int64_t strideA, const uint16_t *B,
                            int64_t ldb, int64_t strideB, double beta, uint16_t *C, int64_t ldc,
                            int64_t strideC, int64_t batch) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)strideA;
  (void)B, (void)ldb, (void)strideB, (void)beta, (void)C, (void)ldc, (void)strideC, (void)batch;
  return CTI_GEMM_FALLBACK;
}

#endif
