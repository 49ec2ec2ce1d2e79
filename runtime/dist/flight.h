/*
** flight.h -- the flight recorder's hooks for the collectives (pg.c, the
** reducer): an entry per call, started and ended; the public side and the
** file layout are include/ddplua_flight.h.
*/
#ifndef DL_FLIGHT_H
#define DL_FLIGHT_H

#include "core/internal.h"

/* Records call seq of group (dl_flight_kind kind); queued: an asynchronous
** call not yet started.  The record number for fr_start / fr_end, -1 when
** nothing could be recorded (they then do nothing). */
DL_HIDDEN int64_t fr_begin(int group, int64_t seq, int kind, int arg, int dtype, int64_t numel,
                           int bucket, const char *note, int queued);
DL_HIDDEN void fr_start(int64_t k);
/* blocking: a call of the caller's thread (its time counts as communication). */
DL_HIDDEN void fr_end(int64_t k, int rc, int blocking);
/* The caller's thread waits for the asynchronous call of entry k (on 1)
** or stopped waiting (on 0). */
DL_HIDDEN void fr_wait(int64_t k, int on);
/* Time the caller was blocked waiting for asynchronous calls. */
DL_HIDDEN void fr_add_comm(double seconds);

#endif
