// SPDX-License-Identifier: MIT
//
// cpu_amp: the amp family on the host (amp_kernels.h holds the rules; these
// entries run them at once).
#include "amp_kernels.h"
#include "error.h"

static int update_scale(float *scale, int32_t *tracker, const float *found_inf, double growth_factor,
                        double backoff_factor, int64_t growth_interval, int64_t *skipped, ct_stream *s) {
  (void)s;
  cti_amp_update_scale_rule(scale, tracker, *found_inf, growth_factor, backoff_factor, growth_interval,
                            skipped);
  return CT_OK;
}

static int inv_scale(const float *scale, float *inv, ct_stream *s) {
  (void)s;
  *inv = cti_amp_inv_scale_rule(*scale);
  return CT_OK;
}

// The family's list names every entry; each is the function of its name above.
#define CTI_OP_CPU_PREFIX
const cti_amp_kernels cti_cpu_amp_kernels = {CTI_AMP_OPS(CTI_OP_CPU_INIT)};
