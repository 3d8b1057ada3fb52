// SPDX-License-Identifier: MIT
//
// checkpoint: tensors to and from safetensors files
// (https://github.com/huggingface/safetensors: an 8-byte little-endian
// header length, a JSON header {"name": {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// little-endian bytes), the format PyTorch users read with
// safetensors.torch.load_file.
//
// Invariant: a save never leaves a broken file in place. It writes a
// temporary file beside the target, fsyncs it, renames it over the target and
// fsyncs the directory; on any failure the temporary is removed and the old
// file (if any) is untouched.
#ifndef CT_CHECKPOINT_H
#define CT_CHECKPOINT_H

#include <stdio.h>

#include "nn.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

// Opens an input file for reading ("rb") without ever blocking: the path is
// opened with O_NONBLOCK|O_NOCTTY, and anything but a regular file (a FIFO,
// a terminal, a device, a directory, a socket) is refused, closed and
// reported: "<op>: <path> is a FIFO (named pipe), not a regular file:
// <want>" (want: what to give instead, e.g. "give the path of a safetensors
// file"). NULL and ct_last_error() on failure; when open itself failed
// ("<op>: <path>: <strerror>"), errno is its errno.
FILE *ct_open_input(const char *op, const char *path, const char *want);

// Writes n bytes to path as the checkpoints are written (a temporary with a
// random name beside it, created O_EXCL|O_NOFOLLOW, fsync, rename): path is
// absent, the old file or the new one, never half of one. Messages start
// "<op>: <path>: ". CT_OK or CT_ERR_IO/CT_ERR_VALUE/CT_ERR_OOM.
int ct_write_file(const char *op, const char *path, const void *data, size_t n);

// Saves the n named tensors (any device; copied to the host), with optional
// string metadata (pairs key, value; NULL-terminated array, may be NULL).
int ct_save_safetensors(const char *path, const ct_named_tensor *entries, int n,
                        const char *const *metadata);
// Loads every tensor of the file onto `device`: *entries gets a new array of
// *n entries (free with ct_named_tensors_free, nn.h). Bad magic, truncated data,
// overlapping offsets or unknown dtypes fail with CT_ERR_IO naming the file
// and the problem.
int ct_load_safetensors(const char *path, ct_device device, ct_named_tensor **entries, int *n);
// The same, also returning the header's "__metadata__" as a new
// NULL-terminated array key, value, key, value, ..., NULL (empty when the
// file has none; free with ct_metadata_free).
int ct_load_safetensors_with_metadata(const char *path, ct_device device, ct_named_tensor **entries, int *n,
                                 char ***metadata);
void ct_metadata_free(char **metadata);
// The value of `key` in such an array, or NULL.
const char *ct_metadata_get(char *const *metadata, const char *key);

// model.state_dict() to a file, and load_state_dict from one (strict).
int ct_module_save(ct_module *m, const char *path);
int ct_module_load(ct_module *m, const char *path);


// ---- resumable training (torch.save({"model", "optimizer", "epoch", ...})) --------------------
// Where a run stands: `epoch` epochs were started before the one in
// progress (its index from 0), `batch` of its batches were trained, `step`
// optimizer steps in all.
typedef struct ct_train_progress {
  int64_t epoch, batch, step;
} ct_train_progress;
// One safetensors file: "model.<name>" (the state_dict), the optimizer's
// state as "optimizer.state.<i>.<key>", and metadata: ct.format "ct-train/1",
// the optimizer's name and lr, the progress, the CPU's and the model
// device's generator states, and `extra` (key, value, ..., NULL; may be
// NULL) for what the caller adds. Written atomically like every save.
int ct_save_train_checkpoint(const char *path, ct_module *m, ct_optimizer *opt, const ct_train_progress *p,
                             const char *const *extra);
// Restores the model (strict), the optimizer's state and the generators, and
// fills *p; *metadata (may be NULL) gets the whole metadata for the caller's
// own keys (free with ct_metadata_free). A weights-only file, another
// optimizer or another model fails with a message saying which; do not go
// on training after a failed load. ct_module_load also reads the model
// part of such a file, so --load evaluates an interrupted run.
int ct_load_train_checkpoint(const char *path, ct_module *m, ct_optimizer *opt, ct_train_progress *p,
                             char ***metadata);

#ifdef __cplusplus
}
#endif
#endif
