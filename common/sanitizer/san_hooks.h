// SPDX-License-Identifier: MIT
//
// san_hooks: what a graph capture tells the stream-ordering sanitizer
// (sanitizer.h). Everything else the sanitizer sees it sees as an observer
// of the runtime (core/observe.h). Every call returns at once while the
// sanitizer is off.
//
// Graphs: a capture on stream s begins on this thread (returns the capture's
// id, 0 while the sanitizer is off) and ends; ops on s in between are the
// graph's, checked at each replay. cti_san_replay(id, s) before a replay on
// s: CT_OK, or in error mode CT_ERR_RACE recorded and the replay must not run.
#ifndef CT_SAN_HOOKS_H
#define CT_SAN_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "stream.h"

bool cti_san_on(void);

uint32_t cti_san_capture_begin(const ct_stream *s);
void cti_san_capture_end(void);
int cti_san_replay(uint32_t graph, ct_stream *s);

// Referenced by the link (CMakeLists.txt), so that every program that links
// ct has this file and reads CT_STREAM_SANITIZER when it starts.
void cti_sanitizer_linked(void);

#endif
