// SPDX-License-Identifier: MIT
//
// backend_cuda: the CUDA backend's table (backend.h's cti_cuda_backend).
//
// Invariant: every entry is an extern "C" function of cuda_backend.h that
// queues its work on the stream it is handed and reports failure through
// ct_fail; the table itself has C linkage, so the dispatcher (ops.c, C11)
// sees it under its plain name.
#include "amp_kernels.h"
#include "conv_kernels.h"
#include "cuda_backend.h"
#include "nn_kernels.h"
#include "optim_kernels.h"
#include "transformer_kernels.h"

// The plain ops in their list's order (backend.h; nvcc's C++17 has no
// designated initializers): each entry is cti_cuda_<entry>.
#define CTI_OP_CUDA_PREFIX cti_cuda_
extern "C" const cti_backend cti_cuda_backend = {
    /* name          */ "cuda",
    CTI_CORE_OPS(CTI_OP_CUDA_INIT)
    /* nn            */ &cti_cuda_nn_kernels,
    /* conv          */ &cti_cuda_conv_kernels,
    /* optim         */ &cti_cuda_optim_kernels,
    /* transformer   */ &cti_cuda_transformer_kernels,
    /* amp           */ &cti_cuda_amp_kernels,
};
