// SPDX-License-Identifier: MIT
//
// jit_impl: the JIT's pieces (internal), in the order a call meets them:
//   parse.c    the expression -> one AST (recursive descent), errors with a caret
//   spec.c     the AST + input dtypes -> a dtype per node (ops.c's promotion)
//   codegen.c  the typed AST -> C (OpenMP) or CUDA C++ source: one expression
//              emitter, two kernel shells
//   cache.c    keys, the disk cache (directory checks, verified entries) and
//              the in-memory table of loaded kernels
//   spawn.c    running a program with an argv (no shell), its output captured
//   cc.c       the CPU path: cc -> shared object -> dlopen
//   nvrtc.c    the GPU path: NVRTC -> PTX -> cuModuleLoadData/cuLaunchKernel
//   sha256.c   FIPS 180-4 SHA-256, for keys and entry checks
//   jit.c      the public API: checks, broadcasting, the launch, the unfused chain
#ifndef CT_JIT_IMPL_H
#define CT_JIT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jit.h"
#include "strbuf.h"

#define CTI_JIT_NAME_MAX 32 // identifier bytes, NUL included
#define CTI_JIT_MAX_DEPTH 64 // nesting of parentheses, calls and unary minus
#define CTI_JIT_MAX_OPERANDS (CT_JIT_MAX_INPUTS + 1) // operand 0 is the output

// ---- the AST ------------------------------------------------------------------
typedef enum cti_jit_kind {
  CTI_JIT_INPUT,   // index: which input
  CTI_JIT_SCALAR,  // index: which scalar
  CTI_JIT_NUMBER,  // value
  CTI_JIT_NEG,     // -a
  CTI_JIT_ADD, CTI_JIT_SUB, CTI_JIT_MUL, CTI_JIT_DIV, // a op b
  CTI_JIT_CALL,    // func(a) or func(a, b)
} cti_jit_kind;

typedef enum cti_jit_func {
  CTI_JIT_EXP, CTI_JIT_LOG, CTI_JIT_SQRT, CTI_JIT_TANH, CTI_JIT_SIGMOID, CTI_JIT_RELU, CTI_JIT_ABS,
  CTI_JIT_MIN, CTI_JIT_MAX, CTI_JIT_POW,
  CTI_JIT_NUM_FUNCS
} cti_jit_func;

const char *cti_jit_func_name(cti_jit_func f); // "sigmoid"
int cti_jit_func_arity(cti_jit_func f);        // 1 or 2

typedef struct cti_jit_node {
  cti_jit_kind kind;
  cti_jit_func func; // CTI_JIT_CALL
  int index;         // CTI_JIT_INPUT, CTI_JIT_SCALAR
  double value;      // CTI_JIT_NUMBER
  int a, b;          // children (node indices), -1 when absent
  int pos, len;      // the token in the text: byte offset and length
} cti_jit_node;

// Nodes are stored children first: a node's children have smaller indices,
// and the root is the last node.
typedef struct cti_jit_ast {
  char *text;
  cti_jit_node *nodes;
  int n, cap, root;
  int n_inputs, n_scalars;
  char input[CT_JIT_MAX_INPUTS][CTI_JIT_NAME_MAX];
  char scalar[CT_JIT_MAX_SCALARS][CTI_JIT_NAME_MAX];
} cti_jit_ast;

// Enters with ast uninitialised; leaves it filled (CT_OK) or empty with the
// error recorded: "<op>: column C: <what>", the expression and a caret.
int cti_jit_parse(const char *op, const char *expr, const char *inputs, const char *scalars,
                  cti_jit_ast *ast);
void cti_jit_ast_free(cti_jit_ast *ast);
// Records an error about the text at [pos, pos+len) of the expression,
// fmt giving "<op>: <what>": "<op>: column C: <what>", then the expression
// (or a window of it) and ^~~ under the token. Returns `status`.
int cti_jit_fail_at(int status, const char *text, int pos, int len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

// ---- dtypes -------------------------------------------------------------------
// A node's type: a tensor dtype, or CTI_JIT_NUM for a plain number (a
// literal, a scalar, or arithmetic on them only), which is computed in
// double and, like a Python number, never widens a tensor's dtype.
#define CTI_JIT_NUM (-1)
typedef struct cti_jit_spec {
  int8_t *type;     // per node: a ct_dtype or CTI_JIT_NUM
  ct_dtype in[CT_JIT_MAX_INPUTS];
  ct_dtype out;     // the root's dtype
  bool used[CT_JIT_MAX_INPUTS];
} cti_jit_spec;
// Types every node for these input dtypes. Fails (CT_ERR_DTYPE, caret at the
// input's first use) for an input dtype the JIT does not take, and when the
// expression uses no input at all.
int cti_jit_specialize(const char *op, const cti_jit_ast *ast, const ct_dtype *dtypes, cti_jit_spec *spec);
void cti_jit_spec_free(cti_jit_spec *spec);

// ---- code generation ------------------------------------------------------------
// The arguments of every generated kernel, laid out the same in the runtime
// and in the generated C and CUDA source (codegen.c spells it out there).
typedef struct cti_jit_args {
  int64_t numel;
  int32_t ndim;       // >= 1
  int32_t contiguous; // every operand dense with stride 1: the simple loop
  int64_t shape[CT_MAX_DIMS];
  int64_t stride[CTI_JIT_MAX_OPERANDS][CT_MAX_DIMS]; // elements; 0 where broadcast
  void *ptr[CTI_JIT_MAX_OPERANDS];                   // element 0 of each operand
  double scalar[CT_JIT_MAX_SCALARS];
} cti_jit_args;

typedef enum cti_jit_dialect { CTI_JIT_C, CTI_JIT_CUDA } cti_jit_dialect;
#define CTI_JIT_KERNEL_NAME "ct_jit_kernel"
// The whole source of the kernel for (ast, spec) in a dialect; NULL on OOM.
char *cti_jit_codegen(const cti_jit_ast *ast, const cti_jit_spec *spec, cti_jit_dialect d);
// The text of core/vecmath.h (jit/embed.cmake writes it at build time):
// the regions the generated kernels paste.
extern const char cti_jit_vecmath_text[];
// The expression alone as the emitter writes it in C (tests).
char *cti_jit_codegen_expr(const cti_jit_ast *ast, const cti_jit_spec *spec);
// The expression in canonical spelling ("x*(y)+1" -> "x * y + 1"): what the
// generated source names, so spacing never makes another kernel.
char *cti_jit_canonical(const cti_jit_ast *ast);

// Merges dims of `shape` that are contiguous in every operand (as
// cti_iter_build does for 3 operands) into a; strides[k] are operand k's.
void cti_jit_args_build(cti_jit_args *a, int ndim, const int64_t *shape, int noperands,
                        const int64_t *const *strides);

// ---- SHA-256 ---------------------------------------------------------------------
typedef struct cti_sha256 {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char buf[64];
  size_t nbuf;
} cti_sha256;
void cti_sha256_init(cti_sha256 *c);
void cti_sha256_update(cti_sha256 *c, const void *p, size_t n);
void cti_sha256_final(cti_sha256 *c, unsigned char out[32]);
// One call: the digest of p[0..n) as 64 lowercase hex digits and a NUL.
void cti_sha256_hex(const void *p, size_t n, char hex[65]);

// ---- running a program -----------------------------------------------------------
// Runs argv[0] (looked up on PATH when it has no '/') with argv, stdin from
// /dev/null, stdout and stderr captured together into *output (the caller
// frees it; at most `cap` bytes kept, the rest counted and dropped). No
// shell is involved. Returns CT_OK with *exit_code set (the program's exit
// status, or 128 + the signal that ended it), or an error when it could not
// be started: CT_ERR_UNAVAILABLE for ENOENT (the message says what was
// looked for), CT_ERR_IO otherwise.
int cti_jit_run(const char *op, char *const argv[], char **output, size_t cap, int *exit_code);

// ---- keys and the disk cache -------------------------------------------------------
// A kernel's identity: the source and everything that changes what the
// compiler makes of it. key_hex = SHA-256 of the key text.
typedef struct cti_jit_key {
  char hex[65];
  char *text; // "ct-jit 1\nbackend ...\n...", owned
} cti_jit_key;
void cti_jit_key_make(cti_jit_key *k, const char *backend, const char *compiler, const char *flags,
                      const char *target, const char *source);
void cti_jit_key_free(cti_jit_key *k);

// The directory (created 0700 when absent), checked: a directory, not a
// symbolic link, owned by this user, not writable by group or others.
int cti_jit_cache_dir(const char *op, char *buf, size_t len);
// "<dir>/<first 32 hex of the key>.so.ctjit" (CPU) or ".ptx.ctjit" (CUDA).
int cti_jit_entry_path(const char *op, const cti_jit_key *k, ct_device_type type, char *buf, size_t len);
// Reads the entry at path and verifies it (magic, version, the key, the
// size, SHA-256 over key and payload). CT_OK with the payload (caller
// frees); 1 when there is no entry; CT_ERR_VALUE when it exists but fails
// verification (the reason in the message); CT_ERR_IO on a read error.
int cti_jit_entry_read(const char *op, const char *path, const cti_jit_key *k, unsigned char **payload,
                       size_t *n);
// Writes the entry atomically (io/atomic_file.h).
int cti_jit_entry_write(const char *op, const char *path, const cti_jit_key *k, const void *payload,
                        size_t n);

// A loaded kernel, shared by every ct_jit_fn whose call has its key; the
// memory cache owns it (freed by ct_jit_clear_memory_cache).
typedef struct cti_jit_kernel cti_jit_kernel;
typedef void (*cti_jit_cpu_fn)(const struct cti_jit_args *a);
struct cti_jit_kernel {
  char hex[65];
  ct_device device;
  void *handle;       // dlopen's handle (CPU) or the CUmodule (CUDA)
  cti_jit_cpu_fn cpu; // the CPU kernel
  void *cu_function;  // the CUfunction
  cti_jit_kernel *next;
};
// The kernel for (ast, spec) on device: from memory, else a verified disk
// entry, else compiled (and written to disk). *generation receives the
// memory cache's generation, which ct_jit_clear_memory_cache bumps (a
// kernel pointer is valid while the generation is unchanged).
int cti_jit_kernel_get(const char *op, const cti_jit_ast *ast, const cti_jit_spec *spec, ct_device device,
                       cti_jit_kernel **out, uint64_t *generation);
uint64_t cti_jit_generation(void);
// The key of (ast, spec) on device, and the generated source (caller frees).
int cti_jit_key_for(const char *op, const cti_jit_ast *ast, const cti_jit_spec *spec, ct_device device,
                    cti_jit_key *key, char **source);
// Counts a fused call; memory_hit when the caller already held its kernel.
void cti_jit_count_call(bool memory_hit);

// ---- the CPU path (cc.c) ---------------------------------------------------------
// The compiler's identity for the key ("cc: gcc (Debian 14.2.0-19) 14.2.0")
// and the flags it is run with; cached per process.
int cti_jit_cc_identity(const char *op, const char **compiler, const char **flags);
// Compiles C source into a shared object in dir; the bytes of the .so in
// *so (caller frees). The compiler's output is in the error on failure.
int cti_jit_cc_compile(const char *op, const char *dir, const char *source, unsigned char **so,
                       size_t *n);
// Loads a shared object from memory (the verified bytes themselves) and
// finds the kernel; *handle is for dlclose.
// CT_ERR_VALUE when the bytes do not load (the entry is then rebuilt).
int cti_jit_cc_load(const char *op, const char *dir, const unsigned char *so, size_t n, void **handle,
                    cti_jit_cpu_fn *fn);
void cti_jit_cc_unload(void *handle);

// ---- the GPU path (nvrtc.c) --------------------------------------------------------
// The NVRTC version ("nvrtc 13.0"); the options it is run with for an
// architecture (part of the key).
int cti_jit_nvrtc_identity(const char *op, const char **compiler);
int cti_jit_nvrtc_flags(const char *op, int arch, const char **flags);
// The architecture to compile for on CUDA device `device`: its compute
// capability, capped at the newest NVRTC supports.
int cti_jit_cuda_arch(const char *op, int device, int *arch);
// Compiles CUDA source to PTX for compute_<arch> (80, 90, ...); NVRTC's log
// is in the error on failure. Needs no GPU.
int cti_jit_nvrtc_compile(const char *op, const char *source, int arch, char **ptx, size_t *n);
// The highest architecture NVRTC supports that is <= cc (a device's
// compute capability as 10*major+minor), or an error.
int cti_jit_nvrtc_arch_for(const char *op, int cc, int *arch);
// Loads PTX on a device (CT_ERR_VALUE when the driver refuses the PTX) (the driver API, reached through the CUDA runtime's
// entry-point query, so nothing links libcuda) and finds the kernel.
int cti_jit_cuda_load(const char *op, int device, const char *ptx, size_t n, void **module, void **function);
// Unloads a module, after the device has finished what was queued on it.
void cti_jit_cuda_unload(int device, void *module);
// Launches the kernel over a->numel elements on stream `stream` (a cudaStream_t).
int cti_jit_cuda_launch(const char *op, void *function, const cti_jit_args *a, void *stream);
#endif
