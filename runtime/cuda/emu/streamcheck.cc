/*
** streamcheck.cc -- the emulator's stream checker: is each use of memory
** that an asynchronous copy wrote ordered after the copy, when the two are
** on different streams?
**
** Why: the emulator runs every operation to its end when it is called, so
** a kernel on the compute stream that reads what a copy on a side stream
** is still writing on a GPU gives the right values here.  The order a GPU
** keeps is modelled instead, with vector clocks (one per stream, event
** and the host): an operation on stream s ticks s's clock; an event
** records its stream's clock; cudaStreamWaitEvent joins the event's clock
** into the stream's; a synchronize (stream, event, device, or a cudaMemcpy)
** joins into the host's, and every later operation on any stream starts
** from the host's.  The legacy default stream (0) and the blocking
** streams wait for each other, as CUDA's legacy stream does.
**
** Checked: each asynchronous copy's or memset's destination is an
** in-flight write of its stream until the host's clock passes it.  An
** operation on another stream whose clock has not passed it, touching any
** of its bytes, is a hazard: cudaMemcpy, cudaMemcpyAsync and memsets by
** their ranges always; kernels in the race checker's build (every load
** and store of global memory comes through racecheck.cc's hooks).  The
** first hazard fails the operation (cudaErrorLaunchFailure) with a report
** naming both.
**
** Not checked: a copy that overwrites memory a kernel of another stream
** still reads (kernels' accesses are not remembered after their launch;
** the caching allocator's per-stream pools and release events keep that
** from happening, and tests/c/test_devalloc.c checks them), cuBLAS calls,
** and host code.  A query (cudaEventQuery, cudaStreamQuery) says "done"
** at once here, and orders as a synchronize does: code acts on what it
** says (the caching allocator reuses a block once its event has passed),
** and on a GPU "done" means done.
*/
#include <stdio.h>
#include <string.h>

#include <mutex>
#include <string>
#include <vector>

#include "racecheck.h"
#include "streamcheck.h"

using dlc_emu::sc::vclock;
using dlc_emu::sc::MAX_STREAMS;

namespace dlc_emu {
namespace sc {
int n_unordered;
}
}  // namespace dlc_emu

namespace {

/* An in-flight write: [lo, hi) by `what`, the tick-th operation of stream s. */
struct write_rec { uintptr_t lo, hi; int s; uint32_t tick; const char *what; };

struct hazard { bool found; uintptr_t addr; bool write; const void *pc; write_rec w; };

std::mutex mu;
int nstreams = 1;  /* 0: the legacy stream */
vclock vc[MAX_STREAMS];
bool blocking[MAX_STREAMS] = {true};
vclock host;
std::vector<write_rec> flying;
/* The launch's unordered writes (race checker's build: launches are one
** at a time under its lock) and its first hazard. */
std::vector<write_rec> unordered;
hazard kh;
int launch_s;
enum { MAX_FLYING = 4096 };  /* beyond: the oldest is forgotten (a hazard may go unseen) */

void join(vclock &a, const vclock &b) {
  for (int i = 0; i < nstreams; i++)
    if (b.t[i] > a.t[i]) a.t[i] = b.t[i];
}

/* An operation enqueued on s: s's vclock after what it waits for, ticked. */
uint32_t enqueue(int s) {
  join(vc[s], host);
  if (s == 0) {
    for (int b = 1; b < nstreams; b++)
      if (blocking[b]) join(vc[0], vc[b]);
  } else if (blocking[s]) {
    join(vc[s], vc[0]);
  }
  return ++vc[s].t[s];
}

/* Writes the host has seen the end of are ordered before everything. */
void retire(void) {
  size_t k = 0;
  for (size_t i = 0; i < flying.size(); i++)
    if (host.t[flying[i].s] < flying[i].tick) flying[k++] = flying[i];
  flying.resize(k);
}

bool ordered(int s, const write_rec &w) { return w.s == s || vc[s].t[w.s] >= w.tick; }

std::string stream_name(int s) {
  return s == 0 ? std::string("the default stream") : "stream " + std::to_string(s);
}

/* " byte N of the M bytes that WHAT on S wrote[, at]," and the advice */
std::string tail(const write_rec &w, uintptr_t addr, const std::string &at = "") {
  char b[160];
  snprintf(b, sizeof b, " byte %zu of the %zu bytes that %s on ", (size_t)(addr - w.lo),
           (size_t)(w.hi - w.lo), w.what);
  return b + stream_name(w.s) + " wrote" + (at.empty() ? "" : ", at " + at) +
         ", with nothing ordering it after that write (record an event after the copy"
         " and cudaStreamWaitEvent on it, or synchronize)";
}
}  // namespace

int dlc_emu::sc::stream_new(bool is_blocking) {
  std::lock_guard<std::mutex> g(mu);
  if (nstreams == MAX_STREAMS) return -1;
  int s = nstreams++;
  blocking[s] = is_blocking;
  memset(&vc[s], 0, sizeof vc[s]);
  return s;
}

void dlc_emu::sc::record(int s, vclock *ev) {
  std::lock_guard<std::mutex> g(mu);
  enqueue(s);
  *ev = vc[s];
}

void dlc_emu::sc::wait(int s, const vclock &ev) {
  std::lock_guard<std::mutex> g(mu);
  join(vc[s], ev);
}

void dlc_emu::sc::host_wait(int s) {
  std::lock_guard<std::mutex> g(mu);
  for (int i = 0; i < nstreams; i++)
    if (s < 0 || i == s) join(host, vc[i]);
  retire();
}

void dlc_emu::sc::host_wait_event(const vclock &ev) {
  std::lock_guard<std::mutex> g(mu);
  join(host, ev);
  retire();
}

const char *dlc_emu::sc::op(int s, const char *what, const void *dst, size_t dn, const void *src,
                            size_t sn, bool async, bool host_waits) {
  thread_local std::string report;
  std::lock_guard<std::mutex> g(mu);
  uint32_t tick = enqueue(s);
  const char *r = NULL;
  uintptr_t d = (uintptr_t)dst, sr = (uintptr_t)src;
  for (const write_rec &w : flying) {
    if (ordered(s, w)) continue;
    bool hit_d = dn && d < w.hi && w.lo < d + dn, hit_s = sn && sr < w.hi && w.lo < sr + sn;
    if (!hit_d && !hit_s) continue;
    uintptr_t at = hit_d ? (d > w.lo ? d : w.lo) : (sr > w.lo ? sr : w.lo);
    report = std::string("emulator stream checker: ") + what + " on " + stream_name(s) +
             (hit_d ? " writes" : " reads") + tail(w, at);
    r = report.c_str();
    break;
  }
  if (async && dn) {
    if (flying.size() >= MAX_FLYING) flying.erase(flying.begin());
    flying.push_back({d, d + dn, s, tick, what});
  }
  if (host_waits) {
    join(host, vc[s]);
    retire();
  }
  return r;
}

void dlc_emu::sc::launch_begin(int s) {
  std::lock_guard<std::mutex> g(mu);
  enqueue(s);
  launch_s = s;
  kh.found = false;
  unordered.clear();
  if (rc::enabled())
    for (const write_rec &w : flying)
      if (!ordered(s, w)) unordered.push_back(w);
  n_unordered = (int)unordered.size();
}

void dlc_emu::sc::kernel_access(const void *p, size_t n, bool write, const void *pc) {
  if (kh.found) return;
  uintptr_t a = (uintptr_t)p;
  for (const write_rec &w : unordered)
    if (a < w.hi && w.lo < a + n) {
      kh = {true, a > w.lo ? a : w.lo, write, pc, w};
      return;
    }
}

const char *dlc_emu::sc::launch_end(const void *kernel) {
  thread_local std::string report;
  n_unordered = 0;
  if (!kh.found) return NULL;
  kh.found = false;
  report = "emulator stream checker: kernel " + rc::site(kernel, false) + " on " +
           stream_name(launch_s) + " " +
           (kh.write ? "writes" : "reads") + tail(kh.w, kh.addr, rc::site(kh.pc, true));
  return report.c_str();
}
