// SPDX-License-Identifier: MIT
//
// train_checkpoint (internal): what checkpoint.c and train_checkpoint.c share
// about the resumable training checkpoint's layout.
#ifndef CT_TRAIN_CHECKPOINT_H
#define CT_TRAIN_CHECKPOINT_H

#include <stdbool.h>

#include "nn.h"

#define CTI_TRAIN_FORMAT "ct-train/1"   // metadata "ct.format" of a training checkpoint
#define CTI_TRAIN_MODEL_PREFIX "model." // the model's state_dict entries
#define CTI_TRAIN_OPTIM_PREFIX "optimizer."

// Keeps the entries whose names start with prefix, with the prefix removed,
// in their order at the front of es (the others are freed); returns how many.
int cti_keep_prefixed(ct_named_tensor *es, int n, const char *prefix);
// Whether metadata (key, value, ..., NULL) marks a training checkpoint.
bool cti_is_train_checkpoint(char *const *metadata);

#endif
