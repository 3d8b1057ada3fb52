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

extern "C" const cti_backend cti_cuda_backend = {
    /* name          */ "cuda",
    /* binary        */ cti_cuda_binary,
    /* binary_scalar */ cti_cuda_binary_scalar,
    /* unary         */ cti_cuda_unary,
    /* copy          */ cti_cuda_copy,
    /* fill          */ cti_cuda_fill,
    /* arange        */ cti_cuda_arange,
    /* random        */ cti_cuda_random,
    /* reduce        */ cti_cuda_reduce,
    /* any_nonfinite */ cti_cuda_any_nonfinite,
    /* found_nonfinite */ cti_cuda_found_nonfinite,
    /* gemm          */ cti_cuda_gemm,
    /* nn            */ &cti_cuda_nn_kernels,
    /* conv          */ &cti_cuda_conv_kernels,
    /* optim         */ &cti_cuda_optim_kernels,
    /* transformer   */ &cti_cuda_transformer_kernels,
    /* amp           */ &cti_cuda_amp_kernels,
};
