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

#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

// Saves the n named tensors (any device; copied to the host), with optional
// string metadata (pairs key, value; NULL-terminated array, may be NULL).
int ct_save_safetensors(const char *path, const ct_named_tensor *entries, int n,
                        const char *const *metadata);
// Loads every tensor of the file onto `device`: *entries gets a new array of
// *n entries (free with ct_named_tensors_free). Bad magic, truncated data,
// overlapping offsets or unknown dtypes fail with CT_ERR_IO naming the file
// and the problem.
int ct_load_safetensors(const char *path, ct_device device, ct_named_tensor **entries, int *n);
void ct_named_tensors_free(ct_named_tensor *entries, int n);
// The file's "__metadata__" as *pairs: key, value, key, value, ..., NULL, in
// the header's order (the shape of ct_save_safetensors's metadata argument);
// an empty list when the file has none. Free with ct_metadata_free. The file
// is checked as ct_load_safetensors checks its header.
int ct_load_safetensors_metadata(const char *path, char ***pairs);
void ct_metadata_free(char **pairs);

// model.state_dict() to a file, and load_state_dict from one (strict).
int ct_module_save(ct_module *m, const char *path);
int ct_module_load(ct_module *m, const char *path);

#ifdef __cplusplus
}
#endif
#endif
