/*
** trace.h -- the runtime's hooks into the trace (core/trace.c): autograd
** and the process groups add spans while dl_trace_set(1) holds.
*/
#ifndef DL_CORE_TRACE_H
#define DL_CORE_TRACE_H

#include <stdatomic.h>

#include "core/internal.h"
#include "ddplua_trace.h"

DL_HIDDEN extern _Atomic int dl_trace_flag;

/* Whether spans are recorded now: the branch every hook takes first. */
static inline int trace_on(void) { return atomic_load_explicit(&dl_trace_flag, memory_order_relaxed); }

/* CLOCK_REALTIME seconds, the trace's clock. */
DL_HIDDEN double trace_now(void);
/* Appends e (copied); past the bound, counts it dropped. */
DL_HIDDEN void trace_add(const dl_trace_event *e);
/* Counts n events dropped elsewhere (a device's own bound). */
DL_HIDDEN void trace_add_dropped(int64_t n);

/* Spans recorded outside the runtime's hooks: a device's, timed on its
** streams (cuda/trace.c).  set follows dl_trace_set; drain moves what
** the source holds into the trace with trace_add, waiting for the device
** work it times.  One source, registered when its device is (the core
** never calls a device's glue by name). */
typedef struct trace_source {
  void (*set)(int on, int64_t max_events);
  void (*drain)(void);
} trace_source;
DL_HIDDEN void trace_set_source(const trace_source *s);

#endif
