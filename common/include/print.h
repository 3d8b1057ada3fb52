// SPDX-License-Identifier: MIT
//
// print: tensors as PyTorch prints them.
//
// ct_tensor_str gives exactly what Python's str(tensor) gives for the same
// values, default print options (precision 4, threshold 1000, edgeitems 3,
// linewidth 80): "tensor([[1., 2.],\n        [3., 4.]], device='cuda:0')",
// with ", dtype=torch.float64" when the dtype is not the default one for its
// kind (float32, int64, bool are not shown).
#ifndef CT_PRINT_H
#define CT_PRINT_H

#include <stdio.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// A new string the caller free()s; NULL + error on failure.
char *ct_tensor_str(const ct_tensor *t);
// Prints ct_tensor_str(t) and a newline to `f`.
int ct_print(FILE *f, const ct_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
