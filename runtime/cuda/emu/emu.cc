/*
** emu.cc -- runs the CUDA runtime and cuBLAS calls of the runtime/cuda kernel files on
** the CPU, for libddplua_cudaemu.so (DDPLUA_CUDA_EMU=N: N fake devices).
**
** Why: CI has the CUDA toolkit but no GPU.  Built with g++ against the
** headers in this folder, the very kernel sources nvcc compiles run here:
** each block's threads are fibers on one OS thread, switched at
** __syncthreads and warp shuffles, so barrier, shared-memory and warp
** logic is exercised, not just the arithmetic.  Streams and events are
** synchronous, but keep the order a GPU would (streamcheck.cc), so a use
** on one stream of what a copy on another wrote, with no event between
** them, fails as a hazard.  "Device" memory is host memory, filled with 0xA5 on
** allocation so kernels that read before writing show it.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <time.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cublas_v2.h"
#include "racecheck.h"
#include "streamcheck.h"

namespace dlc_emu {
thread_local fiber_state *cur;
thread_local uint3 block_idx;
thread_local dim3 block_dim, grid_dim;
thread_local unsigned char *dyn_smem;
}

/* -- Devices and errors ---------------------------------------------------- */

static thread_local cudaError_t last_error = cudaSuccess;
static thread_local char launch_why[1024];
static thread_local int cur_device = 0;

static int ndevices(void) {
  const char *e = getenv("DDPLUA_CUDA_EMU");
  int n = e ? atoi(e) : 0;
  return n > 0 ? (n > 8 ? 8 : n) : 1;
}

static cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

cudaError_t cudaGetDeviceCount(int *n) { *n = ndevices(); return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) { *d = cur_device; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= ndevices()) return fail(cudaErrorInvalidDevice);
  cur_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
  if (d < 0 || d >= ndevices()) return fail(cudaErrorInvalidDevice);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "ddplua CPU emulator");
  p->totalGlobalMem = (size_t)16 << 30;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int d) {
  if (d < 0 || d >= ndevices()) return fail(cudaErrorInvalidDevice);
  *v = attr == cudaDevAttrMultiProcessorCount ? 4 : 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return last_error; }
cudaError_t cudaFuncSetAttribute(const void *, int, int) { return cudaSuccess; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorLaunchFailure: return launch_why[0] ? launch_why : "unspecified launch failure";
    default: return "emulated CUDA error";
  }
}

/* -- Memory ---------------------------------------------------------------- */

static std::mutex mem_mu;
static std::unordered_map<void *, size_t> live;
static size_t live_bytes;

/* DDPLUA_CUDA_EMU_MEM (bytes, default 16 GiB) bounds each run's "device
** memory", so out-of-memory paths can be tested. */
static size_t mem_limit(void) {
  const char *e = getenv("DDPLUA_CUDA_EMU_MEM");
  return e && *e ? (size_t)strtoull(e, NULL, 10) : (size_t)16 << 30;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  std::lock_guard<std::mutex> g(mem_mu);
  *p = NULL;
  if (live_bytes + n > mem_limit()) return fail(cudaErrorMemoryAllocation);
  void *q = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  if (!q) return fail(cudaErrorMemoryAllocation);
  memset(q, 0xA5, n);
  live[q] = n;
  live_bytes += n;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> g(mem_mu);
  auto it = live.find(p);
  if (it == live.end()) return fail(cudaErrorInvalidValue);
  live_bytes -= it->second;
  live.erase(it);
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) { return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
  std::lock_guard<std::mutex> g(mem_mu);
  *total_b = mem_limit();
  *free_b = *total_b - live_bytes;
  return cudaSuccess;
}

/* -- Streams and events: everything is done when it returns, in the order
** a GPU keeps (streamcheck.cc) -------------------------------------------- */

struct dlc_emu_stream { int id; };
/* t: when it was recorded, which is when its stream passed it (the work
** before it ran in the calls that queued it), for cudaEventElapsedTime. */
struct dlc_emu_event { dlc_emu::sc::vclock c; double t; };
static double emu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static int sid(cudaStream_t s) { return s ? s->id : 0; }

/* A hazard the stream checker found fails the call, as a launch would. */
static cudaError_t checked(const char *report) {
  if (!report) return cudaSuccess;
  snprintf(launch_why, sizeof launch_why, "%s", report);
  return fail(cudaErrorLaunchFailure);
}

cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  if (n) memmove(d, s, n);
  return checked(dlc_emu::sc::op(0, "cudaMemcpy", d, n, s, n, false, true));
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t st) {
  if (n) memmove(d, s, n);
  return checked(dlc_emu::sc::op(sid(st), "cudaMemcpyAsync", d, n, s, n, true, false));
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
  memset(p, v, n);
  return checked(dlc_emu::sc::op(0, "cudaMemset", p, n, NULL, 0, true, false));
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
  memset(p, v, n);
  return checked(dlc_emu::sc::op(sid(st), "cudaMemsetAsync", p, n, NULL, 0, true, false));
}
cudaError_t cudaDeviceSynchronize(void) { dlc_emu::sc::host_wait(-1); return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  int id = dlc_emu::sc::stream_new(!(flags & cudaStreamNonBlocking));
  if (id < 0) return fail(cudaErrorMemoryAllocation);  /* the checker's clocks are full */
  *s = new dlc_emu_stream{id};
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { dlc_emu::sc::host_wait(sid(s)); return cudaSuccess; }
/* a query says "done" at once, and then the host knows it is, as on a GPU */
cudaError_t cudaStreamQuery(cudaStream_t s) { dlc_emu::sc::host_wait(sid(s)); return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  if (!e) return fail(cudaErrorInvalidValue);
  dlc_emu::sc::wait(sid(s), e->c);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new dlc_emu_event(); (*e)->t = -1; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!e) return fail(cudaErrorInvalidValue);
  dlc_emu::sc::record(sid(s), &e->c);
  e->t = emu_now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!e) return fail(cudaErrorInvalidValue);
  dlc_emu::sc::host_wait_event(e->c);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (!a || !b || !ms) return fail(cudaErrorInvalidValue);
  if (a->t < 0 || b->t < 0) return fail(cudaErrorInvalidResourceHandle);  /* never recorded */
  *ms = (float)((b->t - a->t) * 1e3);
  return cudaSuccess;
}

/* -- float16 ----------------------------------------------------------------- */

__half __float2half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  __half h;
  if (mag > 0x7f800000u) { h.x = (uint16_t)(sign | 0x7e00u); return h; }
  if (mag >= 0x477ff000u) { h.x = (uint16_t)(sign | 0x7c00u); return h; }  /* rounds to inf */
  if (mag < 0x38800000u) {  /* subnormal half: round mag * 2^24 to an integer */
    float a;
    memcpy(&a, &mag, 4);
    float s = a * 16777216.0f;
    uint32_t q = (uint32_t)s;
    float rem = s - (float)q;
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) q++;
    h.x = (uint16_t)(sign | q);
    return h;
  }
  uint32_t e = (mag >> 23) - 112, m = mag & 0x7fffffu;
  uint32_t r = (e << 10) | (m >> 13);
  uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) r++;
  h.x = (uint16_t)(sign | r);
  return h;
}
float __half2float(__half h) {
  uint32_t sign = (uint32_t)(h.x & 0x8000u) << 16, e = (h.x >> 10) & 0x1fu, m = h.x & 0x3ffu;
  float f;
  if (e == 0) {
    f = (float)m / 16777216.0f;
    return sign ? -f : f;
  }
  uint32_t u = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  memcpy(&f, &u, 4);
  return f;
}

/* -- Kernels: blocks in order, each block's threads as fibers ---------------- */

namespace {
enum { STACK = 128 << 10, FREE = 0, RUN = 1, DONE = 2 };

/* -- Context switch: a few instructions on x86-64, ucontext elsewhere
** (whose signal-mask system calls make it ~50x slower). */
#if defined(__x86_64__)
extern "C" void dlc_emu_switch(void **save_sp, void *to_sp);
asm(".text\n.globl dlc_emu_switch\n.hidden dlc_emu_switch\n.type dlc_emu_switch,@function\n"
    "dlc_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n.size dlc_emu_switch,.-dlc_emu_switch\n");
struct ctx { void *sp; };
void ctx_switch(ctx *from, ctx *to) { dlc_emu_switch(&from->sp, to->sp); }
/* A stack whose first switch "returns" into entry, aligned as after a call. */
void ctx_make(ctx *c, char *stack, size_t size, void (*entry)(void)) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = NULL;             /* entry's return address: it never returns */
  *--sp = (void *)entry;    /* popped by ret */
  for (int i = 0; i < 6; i++) *--sp = NULL;  /* rbp rbx r12-r15 */
  c->sp = sp;
}
#else
struct ctx { ucontext_t uc; };
void ctx_switch(ctx *from, ctx *to) { swapcontext(&from->uc, &to->uc); }
void ctx_make(ctx *c, char *stack, size_t size, void (*entry)(void)) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = NULL;
  makecontext(&c->uc, entry, 0);
}
#endif

/* A barrier: the block's (__syncthreads) or a warp's (__syncwarp and
** shuffles).  site/site_idx: where and by whom the current generation's
** first arrival came, for the race checker's divergent-barrier report. */
struct group { int live, arrived; unsigned gen; const void *site; int site_idx; };

struct fiber {
  dlc_emu::fiber_state st;
  ctx c;
  char *stack;
  int state;
};

struct block_run {
  std::vector<fiber> f;
  std::vector<group> warps;
  group all;
  ctx sched;
  const std::function<void()> *body;
  int current;
  int exited;              /* a thread that has finished, or -1 */
  unsigned long progress;  /* bumps at every arrival and finish */
};

thread_local block_run *br;
thread_local std::vector<char *> stack_pool;

char *stack_get(void) {
  if (!stack_pool.empty()) {
    char *s = stack_pool.back();
    stack_pool.pop_back();
    return s;
  }
  void *p = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : (char *)p;
}

void yield_to_sched(void) { ctx_switch(&br->f[br->current].c, &br->sched); }

/* warp: the warp's number, or -1 for the block's barrier. */
void arrive_wait(group &g, int warp, const void *site) {
  unsigned gen = g.gen;
  br->progress++;
  if (dlc_emu::rc::enabled() && warp < 0) {
    /* __syncthreads in divergent code: arrivals from two call sites, or
    ** a thread of the block gone while others wait (see leave). */
    if (g.arrived == 0) {
      g.site = site;
      g.site_idx = br->current;
      if (br->exited >= 0) dlc_emu::rc::divergent(br->current, site, br->exited, NULL);
    } else if (site != g.site) {
      dlc_emu::rc::divergent(br->current, site, g.site_idx, g.site);
    }
  }
  if (++g.arrived >= g.live) {
    g.arrived = 0;
    g.gen++;
    dlc_emu::rc::synced(warp);
    return;
  }
  while (g.gen == gen) yield_to_sched();
}

void leave(group &g, int warp) {
  g.live--;
  if (g.arrived > 0 && g.arrived >= g.live) {
    g.arrived = 0;
    g.gen++;
    dlc_emu::rc::synced(warp);
  }
}

/* Every fiber starts here; it ends by switching back for good. */
void fiber_entry(void) {
  int idx = br->current;
  (*br->body)();
  br->f[idx].state = DONE;
  br->progress++;
  if (dlc_emu::rc::enabled() && br->all.arrived > 0)
    dlc_emu::rc::divergent(br->all.site_idx, br->all.site, idx, NULL);
  br->exited = idx;
  leave(br->all, -1);
  leave(br->warps[idx / 32], idx / 32);
  ctx_switch(&br->f[idx].c, &br->sched);
  abort();  /* a finished fiber is never resumed */
}

/* -- Scheduling: the order in which a block's threads move ------------------
** DDPLUA_CUDA_EMU_SCHED picks it, read at every launch:
**   shuffle   (default) every live thread once per round, in a new random
**             order each round (a round ends when each has reached a barrier)
**   runahead  one warp at a time runs until all its threads wait at the
**             block's barrier or have finished, then the next (warps in a
**             random order each round): a fast warp gets as far ahead of
**             the others as a GPU may let it
**   reverse   every round in descending thread order
**   linear    every round in ascending order (DDPLUA_CUDA_EMU_ORDER=linear
**             too: for debugging)
** DDPLUA_CUDA_EMU_SEED seeds the random orders (each OS thread's sequence
** starts from it), so an order that fails can be replayed. */
enum sched_mode { SCHED_SHUFFLE, SCHED_RUNAHEAD, SCHED_REVERSE, SCHED_LINEAR };

sched_mode sched_from_env(void) {
  const char *e = getenv("DDPLUA_CUDA_EMU_SCHED");
  const char *o = getenv("DDPLUA_CUDA_EMU_ORDER");
  if (e && !strcmp(e, "runahead")) return SCHED_RUNAHEAD;
  if (e && !strcmp(e, "reverse")) return SCHED_REVERSE;
  if ((e && !strcmp(e, "linear")) || (o && !strcmp(o, "linear"))) return SCHED_LINEAR;
  return SCHED_SHUFFLE;
}

thread_local uint64_t rng_state;
thread_local bool rng_seeded;

uint64_t rng_next(void) {
  if (!rng_seeded) {
    const char *e = getenv("DDPLUA_CUDA_EMU_SEED");
    rng_state = 0x9e3779b97f4a7c15ull ^ (e && *e ? strtoull(e, NULL, 0) * 0xbf58476d1ce4e5b9ull : 0);
    if (!rng_state) rng_state = 1;
    rng_seeded = true;
  }
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}

void shuffle(std::vector<int> &v) {
  for (size_t i = v.size(); i > 1; i--) {
    size_t j = (size_t)(rng_next() % i);
    int t = v[i - 1];
    v[i - 1] = v[j];
    v[j] = t;
  }
}
}  // namespace

void dlc_emu::syncthreads() { arrive_wait(br->all, -1, __builtin_return_address(0)); }
void dlc_emu::syncwarp() {
  int w = br->current / 32;
  arrive_wait(br->warps[(size_t)w], w, __builtin_return_address(0));
}

uint64_t dlc_emu::shfl(uint64_t v, int mode, int arg, int width) {
  thread_local static uint64_t slots[32][32];  /* [warp][lane] of this block */
  int idx = br->current, w = idx / 32, lane = idx % 32;
  group &g = br->warps[(size_t)w];
  int nlanes = (int)br->f.size() - w * 32;
  if (nlanes > 32) nlanes = 32;
  slots[w][lane] = v;
  arrive_wait(g, w, NULL);
  int base = lane / width * width, s;
  switch (mode) {
    case 0: s = lane + arg; if (s >= base + width) s = lane; break;
    case 1: s = lane - arg; if (s < base) s = lane; break;
    case 2: s = lane ^ arg; if (s >= base + width) s = lane; break;
    default: s = base + ((arg % width) + width) % width; break;
  }
  uint64_t r = s < nlanes ? slots[w][s] : v;
  arrive_wait(g, w, NULL);
  return r;
}

static int fiber_start(fiber &f) {
  f.stack = stack_get();
  if (!f.stack) return -1;
  ctx_make(&f.c, f.stack, STACK, fiber_entry);
  f.state = RUN;
  return 0;
}

/* Resumes thread i until it next waits or ends; -1 when no stack is left. */
static int step(block_run &b, int i, int &live_n) {
  fiber &f = b.f[(size_t)i];
  if (f.state == DONE) return 0;
  if (f.state == FREE && fiber_start(f)) return -1;
  b.current = i;
  dlc_emu::cur = &f.st;
  ctx_switch(&b.sched, &f.c);
  if (f.state == DONE) {
    stack_pool.push_back(f.stack);
    f.stack = NULL;
    live_n--;
  }
  return 0;
}

static int run_block(const std::function<void()> &body, int nthreads, sched_mode mode) {
  block_run b;
  b.f.resize((size_t)nthreads);
  b.warps.resize((size_t)(nthreads + 31) / 32);
  for (size_t w = 0; w < b.warps.size(); w++) {
    int n = nthreads - (int)w * 32;
    b.warps[w] = {n > 32 ? 32 : n, 0, 0, NULL, -1};
  }
  b.all = {nthreads, 0, 0, NULL, -1};
  b.body = &body;
  b.progress = 0;
  b.exited = -1;
  block_run *saved = br;
  br = &b;
  int live_n = nthreads, rc = 0, nwarps = (int)b.warps.size();
  unsigned bx = dlc_emu::block_dim.x, by = dlc_emu::block_dim.y;
  for (int i = 0; i < nthreads; i++) {
    b.f[(size_t)i].state = FREE;
    b.f[(size_t)i].st.tid = {(unsigned)i % bx, (unsigned)i / bx % by, (unsigned)i / (bx * by)};
    b.f[(size_t)i].st.idx = i;
    b.f[(size_t)i].stack = NULL;
  }
  dlc_emu::rc::block_begin(nthreads);
  std::vector<int> order((size_t)(mode == SCHED_RUNAHEAD ? nwarps : nthreads));
  while (live_n > 0) {
    unsigned long before = b.progress;
    for (size_t i = 0; i < order.size(); i++)
      order[i] = mode == SCHED_REVERSE ? (int)(order.size() - 1 - i) : (int)i;
    if (mode == SCHED_SHUFFLE || mode == SCHED_RUNAHEAD) shuffle(order);
    if (mode == SCHED_RUNAHEAD) {
      /* each warp in turn, its threads resumed until none of them moves:
      ** all wait at the block's barrier (or a warp barrier a finished
      ** lane left unreachable, which the deadlock check below ends) */
      for (int w : order) {
        unsigned long p;
        do {
          p = b.progress;
          for (int i = w * 32; i < nthreads && i < w * 32 + 32; i++)
            if (step(b, i, live_n)) { rc = -1; goto out; }
        } while (b.progress != p);
      }
    } else {
      for (int i : order)
        if (step(b, i, live_n)) { rc = -1; goto out; }
    }
    if (live_n > 0 && b.progress == before) { rc = -1; break; }  /* nobody can move */
  }
out:
  for (auto &f : b.f)
    if (f.stack) stack_pool.push_back(f.stack);  /* a deadlocked fiber is abandoned */
  dlc_emu::rc::block_end();
  br = saved;
  return rc;
}

void dlc_emu::launch(dim3 grid, dim3 block, size_t smem, cudaStream_t st, const void *kernel,
                     const std::function<void()> &body) {
  long nthreads = (long)block.x * block.y * block.z;
  if (nthreads <= 0 || nthreads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535 || smem > (size_t)(228 << 10)) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  std::vector<unsigned char> shm(smem ? smem : 1, 0xA5);
  dim3 saved_b = block_dim, saved_g = grid_dim;
  uint3 saved_i = block_idx;
  fiber_state *saved_cur = cur;
  unsigned char *saved_smem = dyn_smem;
  sched_mode mode = sched_from_env();
  const char *report;
  block_dim = block;
  grid_dim = grid;
  dyn_smem = shm.data();
  rc::launch_begin(kernel, shm.data(), smem);
  sc::launch_begin(sid(st));
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        block_idx = {x, y, z};
        if (run_block(body, (int)nthreads, mode)) {
          snprintf(launch_why, sizeof launch_why,
                   "unspecified launch failure (emulator: a kernel deadlocked in block (%u,%u,%u))",
                   x, y, z);
          sc::launch_end(kernel);
          rc::launch_end();
          fail(cudaErrorLaunchFailure);
          goto done;
        }
      }
  /* a hazard fails the launch once the kernel has run to its end: the
  ** stream checker's, read before the race checker's lock goes */
  report = sc::launch_end(kernel);
  if (const char *shared = rc::launch_end()) report = shared;
  if (report) {
    snprintf(launch_why, sizeof launch_why, "%s", report);
    fail(cudaErrorLaunchFailure);
  }
done:
  block_dim = saved_b;
  grid_dim = saved_g;
  block_idx = saved_i;
  cur = saved_cur;
  dyn_smem = saved_smem;
}

/* -- cuBLAS ------------------------------------------------------------------ */

struct dlc_emu_cublas { int math; };
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new dlc_emu_cublas{0}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

static double ld(const void *p, cudaDataType t, long long i) {
  switch (t) {
    case CUDA_R_32F: return ((const float *)p)[i];
    case CUDA_R_64F: return ((const double *)p)[i];
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    default: return 0;
  }
}
static void st(void *p, cudaDataType t, long long i, double v) {
  switch (t) {
    case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16((float)v); break;
    case CUDA_R_16F: ((__half *)p)[i] = __float2half((float)v); break;
    default: break;
  }
}
static int type_ok(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

/* Column-major, as cuBLAS: element (r, c) of an ld-strided matrix is
** at r + c * ld; op(A) is m x k, op(B) is k x n, C is m x n. */
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType at, int lda, long long sa,
    const void *B, cudaDataType bt, int ldb, long long sb, const void *beta, void *C,
    cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t comp,
    cublasGemmAlgo_t) {
  if (!h || m < 0 || n < 0 || k < 0 || batch < 0 || !type_ok(at) || !type_ok(bt) || !type_ok(ct))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < ((ta == CUBLAS_OP_N ? m : k) > 1 ? (ta == CUBLAS_OP_N ? m : k) : 1) ||
      ldb < ((tb == CUBLAS_OP_N ? k : n) > 1 ? (tb == CUBLAS_OP_N ? k : n) : 1) ||
      ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  int dbl = comp == CUBLAS_COMPUTE_64F;
  if (dbl != (ct == CUDA_R_64F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  double al = dbl ? *(const double *)alpha : *(const float *)alpha;
  double be = dbl ? *(const double *)beta : *(const float *)beta;
  for (int b = 0; b < batch; b++) {
    const long long oa = b * sa, ob = b * sb, oc = b * sc;
    for (int j = 0; j < n; j++)
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int p = 0; p < k; p++) {
          long long ia = ta == CUBLAS_OP_N ? i + (long long)p * lda : p + (long long)i * lda;
          long long ib = tb == CUBLAS_OP_N ? p + (long long)j * ldb : j + (long long)p * ldb;
          acc += ld(A, at, oa + ia) * ld(B, bt, ob + ib);
        }
        long long ic = oc + i + (long long)j * ldc;
        double v = al * acc + (be != 0 ? be * ld(C, ct, ic) : 0);
        st(C, ct, ic, v);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const void *alpha, const void *A,
                            cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                            const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t comp, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0,
                                    beta, C, ct, ldc, 0, 1, comp, algo);
}
