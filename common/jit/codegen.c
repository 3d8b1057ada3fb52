// SPDX-License-Identifier: MIT
//
// codegen: a typed AST -> the source of one fused kernel, in C (the CPU:
// OpenMP threads, a loop the compiler can vectorize) or CUDA C++ (NVRTC).
//
// One emitter writes the expression, the same text for both dialects. In
// float op math, exp, log and tanh are the runtime's own (cti_expf, cti_logf,
// cti_tanhf: the regions of core/vecmath.h, pasted into the source), the
// functions the runtime's CPU ops compute, written without a library call so
// that the loop vectorizes; double keeps the math library's (exp, log, ...,
// the same names in C and CUDA). The helpers the runtime's ops define their
// own way (sigmoid, relu, min, max with NaN winning, the float16/bfloat16
// conversions with round to nearest even) are written once, with JIT_FN
// standing for `static inline` or `static __device__ inline`. Only the
// kernel's shell differs: on the CPU, OpenMP threads each run a `simd` loop
// over a contiguous share (compiled for AVX2 and for the baseline, the
// faster picked when loaded); on a GPU, a grid-stride loop.
//
// Invariant: every value is computed in its node's "op math" type (float for
// float16, bfloat16 and float32, double for float64 and for plain numbers),
// with an explicit cast wherever a child's type differs from its parent's;
// the result is rounded to the output dtype once, at the store. The text is
// built bottom-up over the node array (children first), so no recursion
// follows the expression's depth.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h" // CT_CPU_PAR_MIN: the runtime's CPU loops go parallel at the same size
#include "jit_impl.h"

enum { P_ADD = 1, P_MUL, P_UNARY, P_PRIMARY }; // C precedence levels the emitter uses
#define CTI_JIT_NONE (-2) // no type: the canonical spelling

typedef struct piece {
  char *s;
  int prec;
} piece;

static bool is_double(int t) { return t == CTI_JIT_NUM || t == CT_F64; }
static const char *opmath(int t) { return is_double(t) ? "double" : "float"; }
static const char *storage(ct_dtype t) {
  return t == CT_F16 || t == CT_BF16 ? "uint16_t" : t == CT_F64 ? "double" : "float";
}

// The shortest decimal that reads back as v; as a C double literal ("2.0",
// "0.1", "1e-05") when c_literal, else as written in an expression ("2").
static void fmt_number(char *buf, size_t n, double v, bool c_literal) {
  for (int prec = 1; prec <= 17; ++prec) {
    snprintf(buf, n, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (c_literal && !strpbrk(buf, ".en")) strncat(buf, ".0", n - strlen(buf) - 1);
}

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...) {
  cti_strbuf b = {0};
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < (int)sizeof small) {
    cti_sb_puts(&b, small);
  } else {
    char *big = malloc((size_t)n + 1);
    if (!big) return NULL;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    cti_sb_puts(&b, big);
    free(big);
  }
  return cti_sb_take(&b);
}

// s, in parentheses when its precedence is below `need`.
static char *wrap(const piece *p, int need) {
  return p->prec < need ? dup_printf("(%s)", p->s) : dup_printf("%s", p->s);
}

// The child's text in op math type `to`: a literal becomes a float literal
// where float holds it exactly ("0.5f"), anything else gets a cast.
static piece convert(const cti_jit_node *nd, const piece *p, int from, int to) {
  piece r = {NULL, P_UNARY};
  if (is_double(from) == is_double(to) || from == CTI_JIT_NONE) {
    r.s = dup_printf("%s", p->s);
    r.prec = p->prec;
    return r;
  }
  if (nd->kind == CTI_JIT_NUMBER && !is_double(to) && (double)(float)nd->value == nd->value) {
    r.s = dup_printf("%sf", p->s);
    r.prec = P_PRIMARY;
    return r;
  }
  char *inner = wrap(p, P_UNARY);
  r.s = inner ? dup_printf("(%s)%s", opmath(to), inner) : NULL;
  free(inner);
  return r;
}

// region: func_text
// The function a call becomes, in op math type t.
static const char *func_text(cti_jit_func f, int t) {
  static const char *const fl[CTI_JIT_NUM_FUNCS] = {"cti_expf", "cti_logf", "sqrtf", "cti_tanhf", "jit_sigmoidf",
                                                    "jit_reluf", "fabsf", "jit_minf", "jit_maxf", "powf"};
  static const char *const db[CTI_JIT_NUM_FUNCS] = {"exp", "log", "sqrt", "tanh", "jit_sigmoid", "jit_relu",
                                                    "fabs", "jit_min", "jit_max", "pow"};
  return is_double(t) ? db[f] : fl[f];
}
// endregion
static bool func_is_helper(cti_jit_func f) {
  return f == CTI_JIT_SIGMOID || f == CTI_JIT_RELU || f == CTI_JIT_MIN || f == CTI_JIT_MAX;
}

// The text of node i from its children's pieces: C when S is given, else
// the expression itself in canonical spelling (no casts, the language's
// function names), which names the kernel in its source.
static piece emit_node(const cti_jit_ast *A, const cti_jit_spec *S, int i, piece *pc) {
  const cti_jit_node *nd = &A->nodes[i];
  const int t = S ? S->type[i] : CTI_JIT_NUM;
  piece r = {NULL, P_PRIMARY};
  char num[40];
  switch (nd->kind) {
  case CTI_JIT_INPUT:
    r.s = dup_printf("%s", A->input[nd->index]);
    return r;
  case CTI_JIT_SCALAR:
    r.s = dup_printf("%s", A->scalar[nd->index]);
    return r;
  case CTI_JIT_NUMBER:
    fmt_number(num, sizeof num, nd->value, S != NULL);
    r.s = dup_printf("%s", num);
    return r;
  case CTI_JIT_NEG: {
    piece a = convert(&A->nodes[nd->a], &pc[nd->a], (S ? S->type[nd->a] : CTI_JIT_NONE), t);
    char *inner = a.s ? wrap(&a, P_UNARY) : NULL;
    // "- -x", never "--x" (C's decrement operator); no parentheses, so the
    // canonical spelling nests no deeper than the text it came from
    r.s = inner ? dup_printf(inner[0] == '-' ? "- %s" : "-%s", inner) : NULL;
    r.prec = P_UNARY;
    free(a.s), free(inner);
    return r;
  }
  case CTI_JIT_CALL: {
    piece a = convert(&A->nodes[nd->a], &pc[nd->a], (S ? S->type[nd->a] : CTI_JIT_NONE), t);
    if (nd->b < 0) {
      r.s = a.s ? dup_printf("%s(%s)", S ? func_text(nd->func, t) : cti_jit_func_name(nd->func), a.s) : NULL;
    } else {
      piece b = convert(&A->nodes[nd->b], &pc[nd->b], (S ? S->type[nd->b] : CTI_JIT_NONE), t);
      r.s = a.s && b.s ? dup_printf("%s(%s, %s)", S ? func_text(nd->func, t) : cti_jit_func_name(nd->func), a.s, b.s)
                       : NULL;
      free(b.s);
    }
    free(a.s);
    return r;
  }
  default: {
    const int prec = nd->kind == CTI_JIT_ADD || nd->kind == CTI_JIT_SUB ? P_ADD : P_MUL;
    const char op = nd->kind == CTI_JIT_ADD ? '+' : nd->kind == CTI_JIT_SUB ? '-' : nd->kind == CTI_JIT_MUL ? '*' : '/';
    piece a = convert(&A->nodes[nd->a], &pc[nd->a], (S ? S->type[nd->a] : CTI_JIT_NONE), t);
    piece b = convert(&A->nodes[nd->b], &pc[nd->b], (S ? S->type[nd->b] : CTI_JIT_NONE), t);
    // Left to right, as parsed: a right operand of the same level keeps its
    // parentheses (float addition is not associative).
    char *ta = a.s ? wrap(&a, prec) : NULL, *tb = b.s ? wrap(&b, prec + 1) : NULL;
    r.s = ta && tb ? dup_printf("%s %c %s", ta, op, tb) : NULL;
    r.prec = prec;
    free(a.s), free(b.s), free(ta), free(tb);
    return r;
  }
  }
}

static char *build(const cti_jit_ast *A, const cti_jit_spec *S) {
  piece *pc = calloc((size_t)A->n, sizeof *pc);
  if (!pc) return NULL;
  bool ok = true;
  for (int i = 0; i < A->n && ok; ++i) {
    pc[i] = emit_node(A, S, i, pc);
    ok = pc[i].s != NULL;
    const cti_jit_node *nd = &A->nodes[i]; // the children are used only by their parent
    if (nd->a >= 0) free(pc[nd->a].s), pc[nd->a].s = NULL;
    if (nd->b >= 0) free(pc[nd->b].s), pc[nd->b].s = NULL;
  }
  char *out = ok ? pc[A->root].s : NULL;
  if (ok) pc[A->root].s = NULL;
  for (int i = 0; i < A->n; ++i) free(pc[i].s);
  free(pc);
  return out;
}

char *cti_jit_codegen_expr(const cti_jit_ast *A, const cti_jit_spec *S) { return build(A, S); }
char *cti_jit_canonical(const cti_jit_ast *A) { return build(A, NULL); }

// ---- the source around the expression ---------------------------------------------
typedef struct uses {
  bool f16, bf16;
  bool helper[2][CTI_JIT_NUM_FUNCS]; // [double?][func]
  bool exp, tanh, log;               // core/vecmath.h's regions (float op math)
} uses;

static uses find_uses(const cti_jit_ast *A, const cti_jit_spec *S) {
  uses u;
  memset(&u, 0, sizeof u);
  for (int k = 0; k < A->n_inputs; ++k)
    if (S->used[k]) u.f16 |= S->in[k] == CT_F16, u.bf16 |= S->in[k] == CT_BF16;
  u.f16 |= S->out == CT_F16;
  u.bf16 |= S->out == CT_BF16;
  for (int i = 0; i < A->n; ++i) {
    const cti_jit_node *nd = &A->nodes[i];
    if (nd->kind != CTI_JIT_CALL) continue;
    if (func_is_helper(nd->func)) u.helper[is_double(S->type[i])][nd->func] = true;
    if (is_double(S->type[i])) continue;
    u.exp |= nd->func == CTI_JIT_EXP || nd->func == CTI_JIT_SIGMOID;
    u.tanh |= nd->func == CTI_JIT_TANH;
    u.log |= nd->func == CTI_JIT_LOG;
  }
  return u;
}

// Pastes the region NAME of core/vecmath.h: the lines after "// jit-region
// NAME" up to "// jit-region end".
static void put_region(cti_strbuf *b, const char *name) {
  char mark[64];
  snprintf(mark, sizeof mark, "// jit-region %s\n", name);
  const char *start = strstr(cti_jit_vecmath_text, mark);
  const char *end = start ? strstr(start, "// jit-region end") : NULL;
  if (!end) return; // the build embeds the header; a missing region fails to compile, named by the compiler
  start += strlen(mark);
  cti_sb_printf(b, "%.*s", (int)(end - start), start);
}

static void put_vecmath(cti_strbuf *b, const uses *u) {
  if (!u->exp && !u->tanh && !u->log) return;
  cti_sb_puts(b, "\n// The runtime's float exp, tanh and log (common/core/vecmath.h): no library call, so\n"
                 "// the loop vectorizes, and the same bits as the runtime's own ops.\n");
  put_region(b, "base");
  if (u->exp) put_region(b, "exp");
  if (u->tanh) put_region(b, "tanh");
  if (u->log) put_region(b, "log");
}

static void put_header(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S, cti_jit_dialect d) {
  cti_sb_printf(b, "// Generated by ct_jit (common/jit/codegen.c) for %s.\n",
                d == CTI_JIT_C ? "the CPU: C with OpenMP, built by the system C compiler"
                               : "CUDA: CUDA C++, compiled by NVRTC to PTX");
  char *canon = cti_jit_canonical(A); // spacing and redundant parentheses do not change the kernel
  cti_sb_printf(b, "// expression: %s\n// inputs:", canon ? canon : "?");
  free(canon);
  for (int k = 0; k < A->n_inputs; ++k)
    cti_sb_printf(b, " %s %s%s", A->input[k], ct_dtype_name(S->in[k]), k + 1 < A->n_inputs ? "," : "");
  if (A->n_scalars) {
    cti_sb_puts(b, "; scalars (double):");
    for (int k = 0; k < A->n_scalars; ++k) cti_sb_printf(b, " %s", A->scalar[k]);
  }
  cti_sb_printf(b, "\n// output: %s\n", ct_dtype_name(S->out));
}

static void put_prelude(cti_strbuf *b, cti_jit_dialect d) {
  if (d == CTI_JIT_C) {
    cti_sb_puts(b, "#include <math.h>\n#include <omp.h>\n#include <stdint.h>\n#include <string.h>\n\n"
                   "#define JIT_FN static inline\n");
  } else {
    cti_sb_puts(b, "typedef long long int64_t;\ntypedef int int32_t;\ntypedef unsigned int uint32_t;\n"
                   "typedef unsigned short uint16_t;\n\n#define JIT_FN static __device__ inline\n");
  }
  cti_sb_printf(b,
                "\n// The runtime's cti_jit_args, field for field: operand 0 is the output.\n"
                "typedef struct ct_jit_args {\n"
                "  int64_t numel;\n"
                "  int32_t ndim, contiguous;\n"
                "  int64_t shape[%d];\n"
                "  int64_t stride[%d][%d]; // elements; 0 where an operand is broadcast\n"
                "  void *ptr[%d];\n"
                "  double scalar[%d];\n"
                "} ct_jit_args;\n",
                CT_MAX_DIMS, CTI_JIT_MAX_OPERANDS, CT_MAX_DIMS, CTI_JIT_MAX_OPERANDS, CT_JIT_MAX_SCALARS);
}

static void put_helpers(cti_strbuf *b, const uses *u, cti_jit_dialect d) {
  if (u->f16 || u->bf16) {
    if (d == CTI_JIT_C)
      cti_sb_puts(b, "\nJIT_FN uint32_t jit_bits(float f) { uint32_t x; memcpy(&x, &f, 4); return x; }\n"
                     "JIT_FN float jit_float(uint32_t x) { float f; memcpy(&f, &x, 4); return f; }\n");
    else
      cti_sb_puts(b, "\nJIT_FN uint32_t jit_bits(float f) { return __float_as_uint(f); }\n"
                     "JIT_FN float jit_float(uint32_t x) { return __uint_as_float(x); }\n");
  }
  if (u->f16)
    cti_sb_puts(b,
                "\n// float16 <-> float: IEEE binary16, rounded to nearest even (the runtime's dtype.c).\n"
                "JIT_FN float jit_half_to_float(uint16_t h) {\n"
                "  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
                "  if (e == 0) return (h & 0x8000u ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f; // m * 2^-24\n"
                "  return jit_float(sign | (e == 31 ? 0x7f800000u : (e + 112u) << 23) | (m << 13));\n"
                "}\n"
                "JIT_FN uint16_t jit_float_to_half(float f) {\n"
                "  const uint32_t x = jit_bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;\n"
                "  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); // NaN\n"
                "  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                     // to inf\n"
                "  if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)rintf(jit_float(a) * 16777216.0f));\n"
                "  return (uint16_t)(sign | ((a + 0xfffu + ((a >> 13) & 1u) - (112u << 23)) >> 13));\n"
                "}\n");
  if (u->bf16)
    cti_sb_puts(b,
                "\n// bfloat16 <-> float: the top 16 bits, rounded to nearest even.\n"
                "JIT_FN float jit_bf16_to_float(uint16_t v) { return jit_float((uint32_t)v << 16); }\n"
                "JIT_FN uint16_t jit_float_to_bf16(float f) {\n"
                "  const uint32_t x = jit_bits(f);\n"
                "  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); // NaN\n"
                "  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);\n"
                "}\n");
  // [func][double?]: the runtime's definitions (cpu_backend.c, elementwise.cuh)
  static const char *const body[CTI_JIT_NUM_FUNCS][2] = {
      [CTI_JIT_SIGMOID] = {"1.0f / (1.0f + cti_expf(-v))", "1.0 / (1.0 + exp(-v))"},
      [CTI_JIT_RELU] = {"v != v ? v : v > 0.0f ? v : 0.0f", "v != v ? v : v > 0.0 ? v : 0.0"},
      [CTI_JIT_MIN] = {"v != v || v <= w ? v : w", "v != v || v <= w ? v : w"},
      [CTI_JIT_MAX] = {"v != v || v >= w ? v : w", "v != v || v >= w ? v : w"},
  };
  bool any = false;
  for (int dbl = 0; dbl < 2; ++dbl)
    for (int f = 0; f < CTI_JIT_NUM_FUNCS; ++f) {
      if (!u->helper[dbl][f]) continue;
      if (!any)
        cti_sb_puts(b, "\n// The runtime's definitions of what C's math library lacks: NaN stays NaN in relu\n"
                       "// and wins in min and max; on a tie min and max return their first argument.\n");
      any = true;
      const char *T = dbl ? "double" : "float";
      const bool two = cti_jit_func_arity((cti_jit_func)f) == 2;
      cti_sb_printf(b, "JIT_FN %s %s(%s v%s%s%s) { return %s; }\n", T, func_text((cti_jit_func)f, dbl ? CT_F64 : CT_F32),
                    T, two ? ", " : "", two ? T : "", two ? " w" : "", body[f][dbl]);
    }
}

static void put_expr_fn(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S, const char *expr) {
  cti_sb_printf(b, "\n// One element of the expression, in op math type (float for 16-bit dtypes).\n"
                   "JIT_FN %s jit_expr(", opmath(S->out));
  bool first = true;
  for (int k = 0; k < A->n_inputs; ++k)
    if (S->used[k]) {
      cti_sb_printf(b, "%s%s %s", first ? "" : ", ", opmath(S->in[k]), A->input[k]);
      first = false;
    }
  for (int k = 0; k < A->n_scalars; ++k) cti_sb_printf(b, ", double %s", A->scalar[k]);
  cti_sb_printf(b, ") {\n  return %s;\n}\n", expr);
}

// The element index of operand k (1..) in each loop.
typedef enum { IDX_LINEAR, IDX_ROW, IDX_UNIT_ROW, IDX_OFFSET } idx_mode;
static void put_index(cti_strbuf *b, idx_mode m, int k) {
  if (m == IDX_LINEAR) cti_sb_puts(b, "i");
  else if (m == IDX_ROW) cti_sb_printf(b, "o[%d] + j * s%d", k, k);
  else if (m == IDX_UNIT_ROW) cti_sb_puts(b, "j");
  else cti_sb_printf(b, "o[%d]", k);
}

static const char *load_fn(ct_dtype t) {
  return t == CT_F16 ? "jit_half_to_float" : t == CT_BF16 ? "jit_bf16_to_float" : "";
}
static const char *store_fn(ct_dtype t) {
  return t == CT_F16 ? "jit_float_to_half" : t == CT_BF16 ? "jit_float_to_bf16" : "";
}

// "out[i] = jit_float_to_half(jit_expr(in_x[i], ..., alpha));"
static void put_statement(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S, idx_mode m) {
  const bool row = m == IDX_UNIT_ROW; // the row's own pointers (put_row_pointers)
  cti_sb_puts(b, row ? "ro[" : "out[");
  put_index(b, m, 0);
  cti_sb_printf(b, "] = %s%sjit_expr(", store_fn(S->out), *store_fn(S->out) ? "(" : "");
  bool first = true;
  for (int k = 0; k < A->n_inputs; ++k)
    if (S->used[k]) {
      cti_sb_printf(b, "%s%s%s%s_%s[", first ? "" : ", ", load_fn(S->in[k]), *load_fn(S->in[k]) ? "(" : "",
                    row ? "r" : "in", A->input[k]);
      put_index(b, m, k + 1);
      cti_sb_printf(b, "]%s", *load_fn(S->in[k]) ? ")" : "");
      first = false;
    }
  for (int k = 0; k < A->n_scalars; ++k) cti_sb_printf(b, ", %s", A->scalar[k]);
  cti_sb_printf(b, ")%s;\n", *store_fn(S->out) ? ")" : "");
}

static void put_operands(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S, const char *arg) {
  cti_sb_printf(b, "  %s *out = (%s *)%sptr[0];\n", storage(S->out), storage(S->out), arg);
  for (int k = 0; k < A->n_inputs; ++k)
    if (S->used[k])
      cti_sb_printf(b, "  const %s *in_%s = (const %s *)%sptr[%d];\n", storage(S->in[k]), A->input[k],
                    storage(S->in[k]), arg, k + 1);
  for (int k = 0; k < A->n_scalars; ++k) cti_sb_printf(b, "  const double %s = %sscalar[%d];\n", A->scalar[k], arg, k);
}

static void put_offsets_fn(cti_strbuf *b) {
  cti_sb_puts(b, "\n// The offsets (elements) of the nops operands at linear index i, row-major.\n"
                 "JIT_FN void jit_offsets(const ct_jit_args *a, int nops, int64_t i, int64_t *o) {\n"
                 "  for (int k = 0; k < nops; ++k) o[k] = 0;\n"
                 "  for (int d = a->ndim - 1; d >= 0; --d) {\n"
                 "    const int64_t idx = i % a->shape[d];\n"
                 "    i /= a->shape[d];\n"
                 "    for (int k = 0; k < nops; ++k) o[k] += idx * a->stride[k][d];\n"
                 "  }\n"
                 "}\n");
}

#define JIT_PARALLEL_MIN CT_CPU_PAR_MIN // elements below which one thread runs the loop

// The operands' pointers at element ptr offsets o[] (IDX_ROW's pointers).
static void put_row_pointers(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S) {
  cti_sb_printf(b, "        %s *ro = out + o[0];\n", storage(S->out));
  for (int k = 0; k < A->n_inputs; ++k)
    if (S->used[k])
      cti_sb_printf(b, "        const %s *r_%s = in_%s + o[%d];\n", storage(S->in[k]), A->input[k], A->input[k], k + 1);
}

// The CPU kernel: ct_jit_kernel runs the OpenMP threads, each of which calls
// a loop over its contiguous share. The loops are compiled twice, for AVX2
// and for baseline x86-64 (target_clones; the loader picks the one the
// processor runs), so a kernel built once runs on any x86-64 and uses 8
// floats a step where it can (CT_JIT_CFLAGS=-DCT_JIT_BASELINE leaves the
// clone out: chapter 13's exercise). Elementwise arithmetic gives the same
// bits in either (no fused multiply-add: -ffp-contract=off).
static void put_c_kernel(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S) {
  const int nops = A->n_inputs + 1;
  cti_sb_puts(b, "\n#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(CT_JIT_BASELINE)\n"
                 "#define JIT_CLONES __attribute__((target_clones(\"avx2\", \"default\")))\n"
                 "#else\n#define JIT_CLONES\n#endif\n"
                 "\n// Elements [lo, hi) when every operand is dense: one loop the compiler vectorizes.\n"
                 "JIT_CLONES static void jit_dense(const ct_jit_args *a, int64_t lo, int64_t hi) {\n");
  put_operands(b, A, S, "a->");
  cti_sb_puts(b, "#pragma omp simd\n  for (int64_t i = lo; i < hi; ++i)\n    ");
  put_statement(b, A, S, IDX_LINEAR);
  cti_sb_puts(b, "}\n\n// Rows [r0, r1) along the innermost dim (strided or broadcast operands), each\n"
                 "// row's start found once; a row where every operand steps by one element is dense.\n"
                 "JIT_CLONES static void jit_rows(const ct_jit_args *a, int64_t r0, int64_t r1) {\n");
  put_operands(b, A, S, "a->");
  cti_sb_puts(b, "  const int last = a->ndim - 1;\n  const int64_t inner = a->shape[last];\n  const int64_t");
  for (int k = 0; k < nops; ++k)
    if (k == 0 || S->used[k - 1]) cti_sb_printf(b, "%s s%d = a->stride[%d][last]", k ? "," : "", k, k);
  cti_sb_puts(b, ";\n  const int unit = 1");
  for (int k = 0; k < nops; ++k)
    if (k == 0 || S->used[k - 1]) cti_sb_printf(b, " && s%d == 1", k);
  cti_sb_printf(b, ";\n  for (int64_t r = r0; r < r1; ++r) {\n"
                   "    int64_t o[%d];\n"
                   "    jit_offsets(a, %d, r * inner, o);\n"
                   "    if (unit) {\n",
                nops, nops);
  put_row_pointers(b, A, S);
  cti_sb_puts(b, "#pragma omp simd\n        for (int64_t j = 0; j < inner; ++j)\n          ");
  put_statement(b, A, S, IDX_UNIT_ROW);
  cti_sb_puts(b, "    } else {\n      for (int64_t j = 0; j < inner; ++j)\n        ");
  put_statement(b, A, S, IDX_ROW);
  cti_sb_printf(b, "    }\n  }\n}\n\n"
                   "// This thread's share of [0, n): whole blocks of `align` items, in order.\n"
                   "static void jit_share(int64_t n, int64_t align, int64_t *lo, int64_t *hi) {\n"
                   "  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();\n"
                   "  const int64_t blocks = (n + align - 1) / align, per = (blocks + nt - 1) / nt;\n"
                   "  *lo = t * per * align < n ? t * per * align : n;\n"
                   "  *hi = (t + 1) * per * align < n ? (t + 1) * per * align : n;\n"
                   "}\n\n"
                   "void " CTI_JIT_KERNEL_NAME "(const ct_jit_args *a) {\n"
                   "  const int64_t n = a->numel;\n"
                   "  if (n <= 0) return;\n"
                   "  const int64_t items = a->contiguous ? n : n / a->shape[a->ndim - 1];\n"
                   "#pragma omp parallel if (n >= %d)\n"
                   "  {\n"
                   "    int64_t lo, hi;\n"
                   "    jit_share(items, a->contiguous ? 64 : 1, &lo, &hi);\n"
                   "    if (lo < hi) {\n"
                   "      if (a->contiguous) jit_dense(a, lo, hi);\n"
                   "      else jit_rows(a, lo, hi);\n"
                   "    }\n"
                   "  }\n"
                   "}\n",
                JIT_PARALLEL_MIN);
}

static void put_cuda_kernel(cti_strbuf *b, const cti_jit_ast *A, const cti_jit_spec *S) {
  const int nops = A->n_inputs + 1;
  cti_sb_puts(b, "\n// A grid-stride loop: any grid covers any n.\n"
                 "extern \"C\" __global__ void " CTI_JIT_KERNEL_NAME "(const ct_jit_args a) {\n");
  put_operands(b, A, S, "a.");
  cti_sb_puts(b, "  const int64_t n = a.numel, step = (int64_t)gridDim.x * blockDim.x;\n"
                 "  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {\n"
                 "    if (a.contiguous) {\n      ");
  put_statement(b, A, S, IDX_LINEAR);
  cti_sb_printf(b, "    } else {\n      int64_t o[%d];\n      jit_offsets(&a, %d, i, o);\n      ", nops, nops);
  put_statement(b, A, S, IDX_OFFSET);
  cti_sb_puts(b, "    }\n  }\n}\n");
}

char *cti_jit_codegen(const cti_jit_ast *A, const cti_jit_spec *S, cti_jit_dialect d) {
  char *expr = cti_jit_codegen_expr(A, S);
  if (!expr) return NULL;
  uses u = find_uses(A, S);
  cti_strbuf b = {0};
  put_header(&b, A, S, d);
  put_prelude(&b, d);
  put_vecmath(&b, &u);
  put_helpers(&b, &u, d);
  put_offsets_fn(&b);
  put_expr_fn(&b, A, S, expr);
  if (d == CTI_JIT_C) put_c_kernel(&b, A, S);
  else put_cuda_kernel(&b, A, S);
  free(expr);
  return cti_sb_take(&b);
}

void cti_jit_args_build(cti_jit_args *a, int ndim, const int64_t *shape, int noperands,
                        const int64_t *const *strides) {
  memset(a, 0, sizeof *a);
  a->numel = 1;
  for (int d = 0; d < ndim; ++d) a->numel *= shape[d];
  // Outer to inner: drop size-1 dims; merge a dim into the previous (outer)
  // one when, for every operand, outer stride == inner stride * inner size.
  int n = 0;
  for (int d = 0; d < ndim && a->numel > 0; ++d) {
    if (shape[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < noperands && merge; ++k) merge = a->stride[k][n - 1] == strides[k][d] * shape[d];
    if (merge) {
      a->shape[n - 1] *= shape[d];
      for (int k = 0; k < noperands; ++k) a->stride[k][n - 1] = strides[k][d];
    } else {
      a->shape[n] = shape[d];
      for (int k = 0; k < noperands; ++k) a->stride[k][n] = strides[k][d];
      ++n;
    }
  }
  if (n == 0) { // a single element (or none)
    a->shape[0] = a->numel > 0 ? 1 : 0;
    n = 1;
  }
  a->ndim = n;
  a->contiguous = n == 1;
  for (int k = 0; k < noperands && a->contiguous; ++k) a->contiguous = a->stride[k][0] == 1 || a->numel == 1;
}
