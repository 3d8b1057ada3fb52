// SPDX-License-Identifier: MIT
//
// sync_point: the one check every sync point of the runtime passes through
// (sync_debug.h says which calls those are and what the modes do).
//
// Contract: a call that is about to make the host wait for device `d`
// because its caller asked for values or bytes on the host calls
//   int rc = cti_sync_begin("ct_item", d);
//   if (rc) return rc;          // error mode: fail before doing anything
//   ... the work, including inner sync points ...
//   cti_sync_end();
// Enters with any mode; leaves with the warning made (warn mode, once per
// outermost call: inner begins inside an open one report nothing) or
// CT_ERR_SYNC recorded (error mode) and no scope opened. Every CT_OK from
// cti_sync_begin is matched by exactly one cti_sync_end on the same thread.
#ifndef CT_SYNC_POINT_H
#define CT_SYNC_POINT_H

#include "device.h"

int cti_sync_begin(const char *op, ct_device d);
void cti_sync_end(void);

#endif
