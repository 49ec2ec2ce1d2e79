/*
** ddplua_trace.h -- the trace's C half: spans the runtime records itself
** while a trace is on (each autograd node's backward, each collective on
** the thread that runs it, each wait for an asynchronous one, on
** CUDA each op's work on the device's streams), handed to
** lua/ddp/core/trace.lua, which adds its own spans (modules, the loader,
** the optimizer, checkpoints) and writes the rank's Chrome trace file.
**
** Off (the default) a hook costs one load and a branch.  Times are
** CLOCK_REALTIME seconds, the clock of the flight recorder and ddp.time().
*/
#ifndef DDPLUA_TRACE_H
#define DDPLUA_TRACE_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

typedef enum dl_trace_kind {
  DL_TK_NODE = 0,     /* an autograd node's backward: name its grad_fn, seq its creation number */
  DL_TK_COLLECTIVE,   /* a collective: name "all_reduce(sum) #3 float32 x10", seq its number */
  DL_TK_WAIT,         /* the caller waiting for an asynchronous collective (seq: its number) */
  DL_TK_DEVICE        /* device work timed by CUDA events on its stream: name the op (or the
                      ** call), note the launcher, group the device index, thread the stream */
} dl_trace_kind;

/* The streams of DL_TK_DEVICE spans (their `thread`). */
typedef enum dl_trace_stream {
  DL_TS_COMPUTE = 0,  /* kernels and cuBLAS calls, in the order the ops ran */
  DL_TS_COPY,         /* host-to-device copies from pinned memory ({non_blocking = true}) */
  DL_TS_NCCL          /* NCCL's collectives, on their communicator's stream */
} dl_trace_stream;

typedef struct dl_trace_event {
  double t0, t1;
  int64_t seq;
  int32_t kind;       /* dl_trace_kind */
  int32_t thread;     /* 0: the thread that called; 1: the process group's communication
                      ** thread; DL_TK_DEVICE: its dl_trace_stream */
  int32_t bucket;     /* the DDP bucket of a collective, -1: none */
  int32_t group;      /* the process group of a collective, in creation order */
  char name[64];
  char note[88];      /* a DDP bucket's parameters */
} dl_trace_event;

/* Starts (1) or stops (0) recording; events recorded stay until taken.
** max_events (> 0) bounds what is kept; past it, events are counted as
** dropped.  Returns 0. */
DL_API int dl_trace_set(int on, int64_t max_events);
DL_API int dl_trace_is_on(void);
/* Moves up to max of the oldest events into out; returns how many. */
DL_API int64_t dl_trace_take(dl_trace_event *out, int64_t max);
/* Events waiting to be taken, and those dropped since the last dl_trace_set(1). */
DL_API int64_t dl_trace_pending(void);
DL_API int64_t dl_trace_dropped(void);
/* The creation number the next autograd node will get: a module's nodes
** are those numbered from its call's start to its end.  A double (exact to
** 2^53), so LuaJIT reads it without boxing a 64-bit integer. */
DL_API double dl_autograd_next_seq(void);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_TRACE_H */
