// SPDX-License-Identifier: MIT
//
// autocast_policy: which dtype each op of the modules computes in under
// autocast (internal). One row per op, written once, in autocast.c; the
// modules ask the table instead of deciding for themselves.
//
// The rows follow PyTorch 2.x's autocast lists (AutocastCPU and
// AutocastCUDA in aten/src/ATen/autocast_mode.cpp), one policy per device
// type, so a CPU region computes what torch.autocast("cpu") computes and a
// CUDA region what torch.autocast("cuda") does:
//   CTI_AC_LOWER  lower_precision_fp: a float32, float16 or bfloat16 input
//                 is cast to the autocast dtype (linear, conv2d,
//                 matmul/mm/bmm/baddbmm, which is attention's two products
//                 and scaled_dot_product_attention's; on both lists);
//   CTI_AC_FP32   fp32: a float16 or bfloat16 input is widened to float32
//                 and the result is float32 (both lists: cross_entropy,
//                 mse_loss; the CUDA list only: layer_norm, softmax,
//                 log_softmax, sum);
//   CTI_AC_FOLLOW on neither list of that device: the op runs in its
//                 input's dtype (gelu, relu, pooling; on the CPU also
//                 softmax and layer_norm, whose bfloat16 input and float32
//                 weight give a bfloat16 result) or its weight's
//                 (embedding); add and the other binary ops promote as
//                 outside autocast (float32 + bfloat16 is float32), which
//                 the dispatcher already does.
// float64 and integer tensors are never cast, and nothing is cast on a
// device type whose autocast is off. tests/fixtures/autocast/ holds what
// torch 2.x answers per op and device type (unit.autocast_lists).
//
// Invariant: a module reads the table once per forward, remembers the
// dtypes it chose, and its backward follows them, inside or outside the
// autocast region: a gradient arriving in another dtype is cast to the
// output's (autograd's engine does the same at every op), and grad_input
// leaves in the input's dtype (the backward of the input's cast).
#ifndef CT_AUTOCAST_POLICY_H
#define CT_AUTOCAST_POLICY_H

#include "device.h"
#include "dtype.h"
#include "tensor.h"

typedef enum cti_autocast_op {
  CTI_AC_LINEAR,
  CTI_AC_CONV2D,
  CTI_AC_MATMUL, // mm, bmm, matmul, baddbmm: attention's q k^T and P v
  CTI_AC_LAYER_NORM,
  CTI_AC_SOFTMAX,
  CTI_AC_CROSS_ENTROPY, // with its log_softmax; ct_cross_entropy_loss and ct_cross_entropy
  CTI_AC_MSE_LOSS,
  CTI_AC_GELU,
  CTI_AC_EMBEDDING,
  CTI_AC_ADD,
  CTI_AC_N_OPS
} cti_autocast_op;

typedef enum cti_autocast_policy { CTI_AC_LOWER, CTI_AC_FP32, CTI_AC_FOLLOW } cti_autocast_policy;

typedef struct cti_autocast_rule {
  const char *torch_name;            // the op's name in PyTorch's lists
  cti_autocast_policy policy[2];     // indexed by ct_device_type: CT_CPU, CT_CUDA
} cti_autocast_rule;

// The table, indexed by cti_autocast_op.
extern const cti_autocast_rule cti_autocast_rules[CTI_AC_N_OPS];

// The dtype `op` computes in, right now on this thread, for an input of
// dtype dt on device d (dt itself when autocast does not apply).
ct_dtype cti_autocast_dtype(cti_autocast_op op, ct_device d, ct_dtype dt);
// t cast to that dtype: a new reference either way, NULL (with an error)
// for a NULL t or a failed cast.
ct_tensor *cti_autocast_cast(cti_autocast_op op, const ct_tensor *t);

#endif
