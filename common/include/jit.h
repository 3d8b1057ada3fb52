// SPDX-License-Identifier: MIT
//
// jit: an elementwise expression compiled at run time into one fused kernel,
// as torch.cuda.jiterator does on a GPU and torch.compile's Inductor does on
// a CPU.
//
//   ct_jit_fn *f = ct_jit_create("x * sigmoid(y) + alpha * z", "x,y,z", "alpha");
//   ct_tensor *out = ct_jit_call(f, (const ct_tensor *[]){x, y, z}, 3, (double[]){0.5}, 1);
//
// Invariant: a call computes, in one pass over memory, what the same
// expression computes as a chain of the runtime's ops (ct_jit_call_unfused),
// with the same broadcasting, the same result dtype (ops.c's promotion) and
// the same error messages; only the rounding of intermediates differs
// (a fused kernel keeps them in float, or double for float64, where the
// chain rounds each op's result to its dtype).
//
// The language: + - * / and unary minus, parentheses, numbers (2, 0.5,
// 1e-3), the declared inputs (tensors) and scalars (numbers given at each
// call), and the functions exp, log, sqrt, tanh, sigmoid, relu, abs (one
// argument), min, max, pow (two). Inputs are float16, bfloat16, float32 or
// float64 tensors on one device; they broadcast as in PyTorch. A scalar is a
// Python number: it never widens a tensor's dtype.
//
// Compilation happens at the first call for each combination of input
// dtypes and device, and is cached twice: in memory (the process's later
// calls) and on disk (later processes), keyed by the generated source (which
// spells the expression and the dtypes), the compiler and the device. On a
// GPU NVRTC compiles CUDA C++ to PTX and the driver loads it; on the CPU the
// system C compiler (cc, or $CT_JIT_CC) builds a shared object from
// generated C with OpenMP loops and the runtime loads it with dlopen.
//
// The disk cache is a directory only the user may write: $CT_JIT_CACHE,
// else $XDG_CACHE_HOME/ct-jit, else $HOME/.cache/ct-jit, created with mode
// 0700. A directory that another user owns, or that group or others may
// write, is refused with a message naming it. Each entry carries its key and
// a SHA-256 of its content, checked before anything in it is loaded; an
// entry that fails the check is rebuilt, never executed. Entries are written
// atomically (temporary file and rename).
//
// Errors: a bad expression fails at ct_jit_create with the column and a
// caret under it; a failed compilation reports the compiler's own
// diagnostics; nothing aborts.
#ifndef CT_JIT_H
#define CT_JIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CT_JIT_MAX_INPUTS 8
#define CT_JIT_MAX_SCALARS 8
#define CT_JIT_MAX_EXPR 4096 // bytes of expression text

typedef struct ct_jit_fn ct_jit_fn;

// Parses `expr` over the inputs and scalars it may name, each a
// comma-separated list of identifiers ("x,y,z"; scalars may be NULL or "").
// Returns NULL and a message with the column and a caret on a bad
// expression: a syntax error, an unknown name or function, a wrong number
// of arguments.
ct_jit_fn *ct_jit_create(const char *expr, const char *inputs, const char *scalars);
void ct_jit_free(ct_jit_fn *fn);
const char *ct_jit_expr(const ct_jit_fn *fn); // the expression as given

// The fused kernel: compiled (or found in a cache) for these input dtypes
// and this device, then run on the device's current stream. n_inputs and
// n_scalars must match the declared lists. Returns a new tensor of the
// broadcast shape and the result dtype.
ct_tensor *ct_jit_call(ct_jit_fn *fn, const ct_tensor *const *inputs, int n_inputs,
                       const double *scalars, int n_scalars);
// The same into `out`, which must have the broadcast shape and the result
// dtype, on the inputs' device (it may alias an input of the same shape).
int ct_jit_call_out(ct_jit_fn *fn, ct_tensor *out, const ct_tensor *const *inputs, int n_inputs,
                    const double *scalars, int n_scalars);
// The expression run as a chain of the runtime's own ops, one kernel per
// operator (what eager PyTorch does): the unfused baseline.
ct_tensor *ct_jit_call_unfused(const ct_jit_fn *fn, const ct_tensor *const *inputs, int n_inputs,
                               const double *scalars, int n_scalars);

// The result dtype for these input dtypes (n_inputs of them), or an error
// naming the input whose dtype the JIT does not take (with its caret).
int ct_jit_result_dtype(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_dtype *out);
// The source the JIT generates for these dtypes: C for CT_CPU, CUDA C++ for
// CT_CUDA (generated here, whether or not a GPU or nvcc exists). The caller
// frees it; NULL on error.
char *ct_jit_source(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_device_type backend);

// Memory traffic of one call, from the shapes and dtypes of the inputs: the
// bytes read and written and the kernels launched, fused or as the unfused
// chain (which also counts the dtype casts ops.c makes before an op).
typedef struct ct_jit_traffic {
  int kernels;
  int64_t bytes;
} ct_jit_traffic;
int ct_jit_traffic_of(const ct_jit_fn *fn, const ct_tensor *const *inputs, int n_inputs, bool fused,
                      ct_jit_traffic *out);

// ---- the caches -----------------------------------------------------------
typedef struct ct_jit_stats {
  int64_t calls;         // fused calls
  int64_t memory_hits;   // served by a kernel already loaded in this process
  int64_t disk_hits;     // loaded from a verified disk entry
  int64_t compiles;      // compiled (no entry, or a rejected one)
  int64_t rejected;      // disk entries that failed verification (then rebuilt)
  double compile_seconds; // total time in the compiler
  double load_seconds;    // total time reading, verifying and loading disk entries
  char last_rejection[256]; // why the last rejected entry was rejected ("" if none)
} ct_jit_stats;
ct_jit_stats ct_jit_get_stats(void);
void ct_jit_reset_stats(void);
// Forgets every loaded kernel, as a new process would start: the next call
// goes to the disk cache. Not while another thread is in a fused call (a GPU
// is synchronized before its modules are unloaded).
void ct_jit_clear_memory_cache(void);
// The disk cache's directory, created (0700) and checked; CT_OK and the path
// in buf, or an error naming the directory and what is wrong with it.
int ct_jit_cache_dir(char *buf, size_t len);
// The disk entry that a call with these input dtypes on `device` uses (it
// may not exist yet); for CT_CUDA it depends on the device's architecture,
// so the device must exist.
int ct_jit_cache_entry_path(const ct_jit_fn *fn, const ct_dtype *dtypes, int n_inputs, ct_device device,
                            char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
