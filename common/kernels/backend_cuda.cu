// SPDX-License-Identifier: MIT
//
// backend_cuda: the CUDA backend's table (backend.h's ct_cuda_backend).
//
// Invariant: every entry is an extern "C" function of cuda_backend.h that
// queues its work on the stream it is handed and reports failure through
// ct_fail; the table itself has C linkage, so the dispatcher (ops.c, C11)
// sees it under its plain name.
#include "conv_kernels.h"
#include "cuda_backend.h"
#include "nn_kernels.h"
#include "optim_kernels.h"

extern "C" const ct_backend ct_cuda_backend = {
    /* name          */ "cuda",
    /* binary        */ ct_cuda_binary,
    /* binary_scalar */ ct_cuda_binary_scalar,
    /* unary         */ ct_cuda_unary,
    /* copy          */ ct_cuda_copy,
    /* fill          */ ct_cuda_fill,
    /* arange        */ ct_cuda_arange,
    /* random        */ ct_cuda_random,
    /* reduce        */ ct_cuda_reduce,
    /* any_nonfinite */ ct_cuda_any_nonfinite,
    /* found_nonfinite */ ct_cuda_found_nonfinite,
    /* gemm          */ ct_cuda_gemm,
    /* nn            */ &ct_cuda_nn_kernels,
    /* conv          */ &ct_cuda_conv_kernels,
    /* optim         */ &ct_cuda_optim_kernels,
};
