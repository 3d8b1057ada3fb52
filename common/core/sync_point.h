// SPDX-License-Identifier: MIT
//
// sync_point: the one call every sync point of the runtime makes, a point
// where the host waits for a device (sync_debug.h says which calls those
// are and what the debug modes do).
//
// Contract: a call that is about to make the host wait for device `d` calls
//   int rc = cti_sync_begin("ct_item", d, how);
//   if (rc) return rc;          // refused: fail before doing anything
//   ... the work, including inner sync points ...
//   cti_sync_end();
// `how` (observe.h) says what kind of wait it is: CTI_SYNC_REPORT when the
// caller asked for values or bytes on the host (the sync debug mode reports
// it, once per outermost call: inner begins inside an open one report
// nothing), CTI_SYNC_REFUSE_IN_CAPTURE when the wait itself is refused while
// this thread captures a graph on d ("operation not permitted when stream is
// capturing"); a copy's capture rule is the copy's own (cti_memcpy). The
// attached observers (observe.h) decide: each may refuse, and the first
// refusal is returned with no scope opened. Every CT_OK from cti_sync_begin
// is matched by exactly one cti_sync_end on the same thread. What the host
// then knows to be done is told separately (cti_observe_host_waits*), since
// a query that answers "done" tells it too.
#ifndef CT_SYNC_POINT_H
#define CT_SYNC_POINT_H

#include "device.h"
#include "observe.h"

int cti_sync_begin(const char *op, ct_device d, unsigned how);
void cti_sync_end(void);

#endif
