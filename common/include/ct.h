// SPDX-License-Identifier: MIT
//
// ct.h: the whole runtime in one include. Chapters write `#include "ct.h"`.
#ifndef CT_H
#define CT_H

#include "alloc.h"
#include "amp.h"
#include "checkpoint.h"
#include "cli.h"
#include "data.h"
#include "device.h"
#include "dtype.h"
#include "graph.h"
#include "error.h"
#include "jit.h"
#include "nn.h"
#include "ops.h"
#include "optim.h"
#include "dist.h"
#include "parallel.h"
#include "print.h"
#include "profiler.h"
#include "progress.h"
#include "random.h"
#include "sanitizer.h"
#include "stream.h"
#include "sync_debug.h"
#include "tensor.h"

#endif
