/*
** trace.cu -- device work on its streams while a trace is on: a span per
** traced launcher call (the table's trampolines), copy-stream copy and
** NCCL collective, each between two CUDA events recorded on its stream,
** and dlc_trace_take turning the events into host-clock times for the
** runtime's trace (cuda/trace.c hands them to core/trace.c).
**
** The clock: at the first span on a device, an anchor event is recorded
** on its compute stream and waited for, and the host's CLOCK_REALTIME
** read at once; a span's times are the anchor's plus the events' elapsed
** time from it.  The wait costs one synchronisation per device and trace;
** the error is the time from the event passing to the host seeing it
** (microseconds).  cudaEventElapsedTime is a float of milliseconds, which
** would lose microseconds minutes from the anchor, so the anchor moves to
** the end of a span once it is a second behind.
**
** Spans whose end event has passed are harvested every 256 spans (a query,
** no wait), so the events in use stay those of the work in flight; the
** harvested ones go back to a per-device pool.  A trace never fails an op:
** a CUDA error on the way drops the span and clears itself.  (On the
** emulator the anchor's and take's waits tell the stream checker that the
** host waited, which a traced run then relies on: hazards are checked in
** untraced runs, as the specs run.)
*/
#include <string.h>
#include <time.h>

#include <deque>
#include <mutex>
#include <vector>

#include "common.cuh"
#include "trace.cuh"

std::atomic<int> dlc_tr_flag;

namespace {

struct span_rec {
  long long id;
  int device, stream;
  cudaEvent_t e0, e1;
  bool ended;
  char name[48];
  char kernel[32];
};

struct anchor {
  cudaEvent_t ev = nullptr;
  double host = 0;
};

std::mutex mu;
std::deque<span_rec> live;               /* in the order they began */
long long next_id;                       /* never reset: stale handles miss */
std::vector<dlc_trace_span> done;        /* harvested, oldest first */
std::vector<anchor> anchors;             /* per device */
std::vector<std::vector<cudaEvent_t>> pools;
int64_t bound = 1000000, dropped;
unsigned since_harvest;
thread_local char label[48];

double now_real(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void copy_str(char *dst, size_t cap, const char *src) {
  size_t n = src ? strnlen(src, cap - 1) : 0;
  if (n) memcpy(dst, src, n);
  dst[n] = 0;
}

/* A timing event of device (current), from the pool or new; NULL on an
** error, which is cleared. */
cudaEvent_t event_get(int device) {
  if ((size_t)device >= pools.size()) pools.resize((size_t)device + 1);
  std::vector<cudaEvent_t> &p = pools[(size_t)device];
  if (!p.empty()) {
    cudaEvent_t e = p.back();
    p.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

void event_put(int device, cudaEvent_t e) {
  if (e) pools[(size_t)device].push_back(e);
}

/* The device's anchor, recorded and waited for on first use (device
** current); false when CUDA failed. */
bool anchor_of(int device) {
  if ((size_t)device >= anchors.size()) anchors.resize((size_t)device + 1);
  anchor &a = anchors[(size_t)device];
  if (a.ev) return true;
  cudaEvent_t e = event_get(device);
  if (!e) return false;
  if (cudaEventRecord(e, dlc_stream(device)) != cudaSuccess || cudaEventSynchronize(e) != cudaSuccess) {
    cudaGetLastError();
    event_put(device, e);
    return false;
  }
  a.host = now_real();
  a.ev = e;
  return true;
}

/* Turns the oldest ended spans into times: those whose end has passed
** (wait: every ended one, waiting for it).  Stops at a span still open. */
void harvest(bool wait) {
  while (!live.empty() && live.front().ended) {
    span_rec &r = live.front();
    dlc_on_device on(r.device);
    cudaError_t e = wait ? cudaEventSynchronize(r.e1) : cudaEventQuery(r.e1);
    if (e == cudaErrorNotReady) break;
    anchor &a = anchors[(size_t)r.device];
    float ms0 = 0, ms1 = 0;
    if (e != cudaSuccess || cudaEventElapsedTime(&ms0, a.ev, r.e0) != cudaSuccess ||
        cudaEventElapsedTime(&ms1, a.ev, r.e1) != cudaSuccess) {
      cudaGetLastError();
      dropped++;
    } else {
      dlc_trace_span s;
      s.t0 = a.host + ms0 * 1e-3;
      s.t1 = a.host + ms1 * 1e-3;
      s.device = r.device;
      s.stream = r.stream;
      memcpy(s.name, r.name, sizeof s.name);
      memcpy(s.kernel, r.kernel, sizeof s.kernel);
      done.push_back(s);
      if (ms1 > 1000.0f) {  /* the anchor moves to this span's end */
        event_put(r.device, a.ev);
        a.ev = r.e1;
        a.host = s.t1;
        r.e1 = nullptr;
      }
    }
    event_put(r.device, r.e0);
    event_put(r.device, r.e1);
    live.pop_front();
  }
}

}  // namespace

long long dlc_tr_begin(int device, int stream, cudaStream_t st, const char *kernel) {
  if (!dlc_tr_on()) return -1;
  char name[48];
  memcpy(name, label, sizeof name);
  label[0] = 0;
  dlc_on_device on(device);
  if (on.e != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  std::lock_guard<std::mutex> g(mu);
  if (!dlc_tr_on()) return -1;
  if ((int64_t)(live.size() + done.size()) >= bound || !anchor_of(device)) {
    dropped++;
    return -1;
  }
  cudaEvent_t e0 = event_get(device);
  if (!e0 || cudaEventRecord(e0, st) != cudaSuccess) {
    cudaGetLastError();
    if (e0) event_put(device, e0);
    dropped++;
    return -1;
  }
  span_rec r;
  r.id = next_id++;
  r.device = device;
  r.stream = stream;
  r.e0 = e0;
  r.e1 = nullptr;
  r.ended = false;
  memcpy(r.name, name, sizeof r.name);
  copy_str(r.kernel, sizeof r.kernel, kernel);
  live.push_back(r);
  if (++since_harvest >= 256) {
    since_harvest = 0;
    harvest(false);
  }
  return r.id;
}

void dlc_tr_end(long long span, cudaStream_t st) {
  if (span < 0) return;
  std::lock_guard<std::mutex> g(mu);
  if (live.empty() || span < live.front().id || span > live.back().id) return;  /* cleared since */
  span_rec &r = live[(size_t)(span - live.front().id)];
  dlc_on_device on(r.device);
  cudaEvent_t e1 = on.e == cudaSuccess ? event_get(r.device) : nullptr;
  if (!e1 || cudaEventRecord(e1, st) != cudaSuccess) {
    cudaGetLastError();
    if (e1) event_put(r.device, e1);
    /* a span with no end: let it end where it began */
    e1 = event_get(r.device);
    if (!e1 || cudaEventRecord(e1, st) != cudaSuccess) cudaGetLastError();
  }
  r.e1 = e1;
  r.ended = true;
}

/* The runtime op whose launcher this thread calls next (the glue labels
** each launcher it takes from the table while a trace is on): the name of
** the span that call makes. */
DLC_API int dlc_trace_label(const char *op) {
  copy_str(label, sizeof label, op);
  return 0;
}

/* Starts (on = 1: earlier spans are forgotten; max_spans > 0 bounds what
** is kept, past it spans are counted dropped) or stops recording; spans
** recorded stay until taken. */
DLC_API int dlc_trace_set(int on, int64_t max_spans, char *err, size_t errlen) {
  (void)err;
  (void)errlen;
  std::lock_guard<std::mutex> g(mu);
  if (on) {
    harvest(true);
    for (span_rec &r : live) event_put(r.device, r.e0);  /* still open: dropped */
    live.clear();
    done.clear();
    for (size_t d = 0; d < anchors.size(); d++) {
      event_put((int)d, anchors[d].ev);
      anchors[d].ev = nullptr;
    }
    dropped = 0;
    since_harvest = 0;
    if (max_spans > 0) bound = max_spans;
  }
  dlc_tr_flag.store(on ? 1 : 0);
  return 0;
}

/* Up to max of the oldest spans into out, waiting for the device work
** they time; *ndropped: how many were dropped since the trace started.
** Returns how many were written. */
DLC_API int64_t dlc_trace_take(dlc_trace_span *out, int64_t max, int64_t *ndropped, char *err,
                               size_t errlen) {
  (void)err;
  (void)errlen;
  std::lock_guard<std::mutex> g(mu);
  harvest(true);
  int64_t n = 0;
  if (out && max > 0) {
    n = (int64_t)done.size() < max ? (int64_t)done.size() : max;
    memcpy(out, done.data(), (size_t)n * sizeof *out);
    done.erase(done.begin(), done.begin() + n);
  }
  if (ndropped) *ndropped = dropped;
  return n;
}
