/*
** trace.c -- the spans the runtime records while a trace is on, kept in
** order of their end until lua/ddp/core/trace.lua takes them
** (ddplua_trace.h).  A mutex guards the list: at most a few events per
** autograd node and collective, from the caller's thread and the process
** group's communication thread.  A device that times its own work (CUDA)
** is a source, drained into the list when the events are asked for.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/trace.h"

DL_HIDDEN _Atomic int dl_trace_flag;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dl_trace_event *ev;      /* a ring of cap: events [head, head + n) */
static int64_t cap, head, n, bound = 1000000, dropped;
static const trace_source *_Atomic source;

DL_HIDDEN double trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Room for one more, growing the ring (events in order); 0 when full. */
static int room(void) {
  if (n < cap) return 1;
  if (cap >= bound) return 0;
  int64_t nc = cap ? cap * 2 : 4096;
  if (nc > bound) nc = bound;
  dl_trace_event *ne = malloc((size_t)nc * sizeof *ne);
  if (!ne) return 0;
  for (int64_t k = 0; k < n; k++) ne[k] = ev[(head + k) % cap];
  free(ev);
  ev = ne;
  cap = nc;
  head = 0;
  return 1;
}

DL_HIDDEN void trace_add(const dl_trace_event *e) {
  pthread_mutex_lock(&mu);
  if (room()) ev[(head + n++) % cap] = *e;
  else dropped++;
  pthread_mutex_unlock(&mu);
}

DL_HIDDEN void trace_add_dropped(int64_t k) {
  pthread_mutex_lock(&mu);
  dropped += k;
  pthread_mutex_unlock(&mu);
}

/* A source registered while a trace is on (CUDA is found on first use)
** joins it. */
DL_HIDDEN void trace_set_source(const trace_source *s) {
  atomic_store(&source, s);
  if (s && trace_on()) {
    pthread_mutex_lock(&mu);
    int64_t b = bound;
    pthread_mutex_unlock(&mu);
    s->set(1, b);
  }
}

/* The source's spans into the list (outside the lock: it calls trace_add). */
static void drain(void) {
  const trace_source *s = atomic_load(&source);
  if (s) s->drain();
}

DL_API int dl_trace_set(int on, int64_t max_events) {
  pthread_mutex_lock(&mu);
  if (on) {
    if (max_events > 0) bound = max_events;
    dropped = 0;
  }
  pthread_mutex_unlock(&mu);
  const trace_source *s = atomic_load(&source);
  if (s) s->set(on, max_events > 0 ? max_events : bound);
  atomic_store(&dl_trace_flag, on ? 1 : 0);
  return 0;
}

DL_API int dl_trace_is_on(void) { return trace_on(); }

DL_API int64_t dl_trace_take(dl_trace_event *out, int64_t max) {
  if (!out || max <= 0) return 0;
  drain();
  pthread_mutex_lock(&mu);
  int64_t k = 0;
  for (; k < max && n > 0; k++, n--, head = (head + 1) % cap) out[k] = ev[head];
  if (n == 0) {  /* all taken: the memory goes back */
    free(ev);
    ev = NULL;
    cap = head = 0;
  }
  pthread_mutex_unlock(&mu);
  return k;
}

DL_API int64_t dl_trace_pending(void) {
  drain();
  pthread_mutex_lock(&mu);
  int64_t r = n;
  pthread_mutex_unlock(&mu);
  return r;
}

DL_API int64_t dl_trace_dropped(void) {
  drain();
  pthread_mutex_lock(&mu);
  int64_t r = dropped;
  pthread_mutex_unlock(&mu);
  return r;
}
