/*
** trace.c -- the CUDA device as a source of the runtime's trace
** (core/trace.h): while a trace is on, libddplua_cuda.so times each op's
** work on the device's streams with CUDA events (kernels/trace.cu); here
** those spans become the trace's DL_TK_DEVICE events, named by the op the
** glue labelled (cuda_api: the op of each launcher it takes), noted with
** the launcher, on the row of their device and stream.
*/
#include <pthread.h>
#include <string.h>

#include "cuda/cuda.h"
#include "core/trace.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t reported;  /* the library's dropped spans already counted */

static void src_set(int on, int64_t max_events) {
  const dlc_api *api = cuda_api("trace");
  char err[256];
  if (!api) return;
  pthread_mutex_lock(&mu);
  api->trace_set(on, max_events, err, sizeof err);
  if (on) reported = 0;
  pthread_mutex_unlock(&mu);
}

static void put(const dlc_trace_span *s) {
  dl_trace_event e;
  memset(&e, 0, sizeof e);
  e.t0 = s->t0;
  e.t1 = s->t1;
  e.seq = -1;
  e.kind = DL_TK_DEVICE;
  e.thread = s->stream;
  e.bucket = -1;
  e.group = s->device;
  /* both are NUL-terminated and shorter than the event's fields */
  memcpy(e.name, s->name[0] ? s->name : s->kernel, s->name[0] ? sizeof s->name : sizeof s->kernel);
  memcpy(e.note, s->kernel, sizeof s->kernel);
  trace_add(&e);
}

static void src_drain(void) {
  const dlc_api *api = cuda_api("trace");
  if (!api) return;
  dlc_trace_span buf[128];
  int64_t k, dropped = 0;
  char err[256];
  pthread_mutex_lock(&mu);
  while ((k = api->trace_take(buf, 128, &dropped, err, sizeof err)) > 0)
    for (int64_t i = 0; i < k; i++) put(&buf[i]);
  if (dropped > reported) {
    trace_add_dropped(dropped - reported);
    reported = dropped;
  }
  pthread_mutex_unlock(&mu);
}

static const trace_source cuda_source = { src_set, src_drain };

DL_HIDDEN void cuda_trace_register(void) { trace_set_source(&cuda_source); }
