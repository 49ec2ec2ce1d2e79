/*
** test_streams.cc -- the CUDA emulator's stream checker (streamcheck.cc):
** a kernel or a copy on the default stream that uses what a copy on a side
** stream wrote, with no event between them, fails naming both; the same
** with cudaStreamWaitEvent, a synchronize or a blocking stream is clean;
** and the runtime's launcher, dlc_memcpy_async (kernels/memory.cu),
** orders the compute stream after its copy on the copy stream.
**
** Built as the race checker's library (make: -fsanitize=thread, whose
** hooks racecheck.cc defines) and linked with the emulator, so kernels'
** loads and stores of global memory reach the checker as in the runtime
** under DDPLUA_CUDA_EMU_RACECHECK=1.
*/
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <string>

#include "cuda_runtime.h"

extern "C" int dlc_memcpy_async(void *dst, const void *src, size_t n, int device, void **event,
                                char *err, size_t errlen);
extern "C" int dlc_copy_stream(int device, uintptr_t *stream, char *err, size_t errlen);
extern "C" int dlc_event_done(void *event, int wait);

static int passed, failed;

static void check(bool ok, const char *what, const std::string &detail = "") {
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  }
}

static bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

enum { N = 256 };

/* out[i] = in[i] + 1: reads what the copy wrote. */
static const int READ_LINE = __LINE__ + 2;
__global__ void add_one(const int *in, int *out) {
  for (int i = threadIdx.x; i < N; i += blockDim.x) out[i] = in[i] + 1;
}
/* in[i] = 7: writes over what the copy wrote. */
__global__ void overwrite(int *in, int *) {
  for (int i = threadIdx.x; i < N; i += blockDim.x) in[i] = 7;
}

/* k on one block of 64 threads on stream st; the error text, "" when clean. */
static std::string run(void (*k)(int *, int *), int *a, int *b, cudaStream_t st) {
  cudaGetLastError();
  dlc_emu::launch(dim3(1), dim3(64), 0, st, reinterpret_cast<const void *>(k), [=]() { k(a, b); });
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}
static std::string run_read(int *a, int *b, cudaStream_t st) {
  cudaGetLastError();
  dlc_emu::launch(dim3(1), dim3(64), 0, st, reinterpret_cast<const void *>(add_one),
                  [=]() { add_one(a, b); });
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

struct bufs { int *host, *dst, *out; };

static bufs fresh(void) {
  bufs b;
  cudaHostAlloc((void **)&b.host, N * sizeof(int), cudaHostAllocDefault);
  cudaMalloc((void **)&b.dst, N * sizeof(int));
  cudaMalloc((void **)&b.out, N * sizeof(int));
  for (int i = 0; i < N; i++) b.host[i] = 3 * i;
  return b;
}
static void done(bufs &b) {
  cudaDeviceSynchronize();  /* nothing is left in flight for the next case */
  cudaFreeHost(b.host);
  cudaFree(b.dst);
  cudaFree(b.out);
}
static bool values_ok(const bufs &b) {
  int h[N];
  if (cudaMemcpy(h, b.out, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (int i = 0; i < N; i++)
    if (h[i] != 3 * i + 1) return false;
  return true;
}

int main(void) {
  cudaStream_t side, blocking;
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess, "a side stream");
  check(cudaStreamCreate(&blocking) == cudaSuccess, "a blocking stream");
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);

  /* 1. copy on the side stream, kernel on the default stream, nothing between */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    std::string r = run_read(b.dst, b.out, 0);
    check(has(r, "emulator stream checker: kernel") && has(r, "add_one") &&
              has(r, "on the default stream reads byte") &&
              has(r, (", at tests/emu/test_streams.cc:" + std::to_string(READ_LINE)).c_str()) &&
              has(r, "cudaMemcpyAsync on stream") && has(r, "1024 bytes") &&
              has(r, "nothing ordering it"),
          "an unordered read of the copy's bytes is a hazard, named", r);
    /* the same kernel again: still unordered, still caught */
    check(!run_read(b.dst, b.out, 0).empty(), "caught on every launch until something orders it");
    done(b);
  }
  /* 2. a write over the copy's bytes, unordered */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    std::string r = run(overwrite, b.dst, b.out, 0);
    check(has(r, "overwrite") && has(r, "on the default stream writes byte"), "an unordered write is a hazard too", r);
    done(b);
  }
  /* 3. a copy to the host on the default stream, unordered: caught without
  ** the kernels' hooks (cudaMemcpy's ranges) */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    int h[N];
    cudaGetLastError();
    cudaError_t e = cudaMemcpy(h, b.dst + 10, 16, cudaMemcpyDeviceToHost);
    std::string r = e == cudaSuccess ? "" : cudaGetErrorString(e);
    check(e == cudaErrorLaunchFailure && has(r, "cudaMemcpy on the default stream reads byte 40"),
          "an unordered cudaMemcpy of the copy's bytes is a hazard", r);
    done(b);
  }
  /* 4. ordered by an event: clean, right values */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    cudaEventRecord(ev, side);
    cudaStreamWaitEvent(0, ev, 0);
    std::string r = run_read(b.dst, b.out, 0);
    check(r.empty(), "cudaStreamWaitEvent orders the kernel after the copy", r);
    check(values_ok(b), "and it reads the copied values");
    done(b);
  }
  /* 5. an event recorded before the copy orders nothing */
  {
    bufs b = fresh();
    cudaEventRecord(ev, side);
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    cudaStreamWaitEvent(0, ev, 0);
    check(!run_read(b.dst, b.out, 0).empty(), "an event from before the copy does not order it");
    done(b);
  }
  /* 6. ordered by the host: a stream synchronize, or an event synchronize */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    cudaStreamSynchronize(side);
    check(run_read(b.dst, b.out, 0).empty(), "after cudaStreamSynchronize of the copy's stream");
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    cudaEventRecord(ev, side);
    cudaEventSynchronize(ev);
    check(run_read(b.dst, b.out, 0).empty(), "after cudaEventSynchronize of an event after it");
    done(b);
  }
  /* 7. a blocking stream and the legacy default stream wait for each other */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, blocking);
    check(run_read(b.dst, b.out, 0).empty(), "the legacy stream waits for a blocking stream");
    done(b);
  }
  /* 8. the same stream needs no event */
  {
    bufs b = fresh();
    cudaMemcpyAsync(b.dst, b.host, N * sizeof(int), cudaMemcpyHostToDevice, side);
    check(run_read(b.dst, b.out, side).empty(), "a kernel on the copy's own stream is ordered");
    done(b);
  }
  /* 9. the runtime's launcher: the copy on the device's copy stream (not
  ** the default one), the compute stream made to wait on its event */
  {
    bufs b = fresh();
    char err[256] = "";
    uintptr_t cs = 0;
    check(dlc_copy_stream(0, &cs, err, sizeof err) == 0 && cs != 0, "a copy stream of its own", err);
    uintptr_t again = 0;
    dlc_copy_stream(0, &again, err, sizeof err);
    check(again == cs, "one copy stream per device, made once");
    void *e = NULL;
    check(dlc_memcpy_async(b.dst, b.host, N * sizeof(int), 0, &e, err, sizeof err) == 0 && e,
          "dlc_memcpy_async", err);
    std::string r = run_read(b.dst, b.out, 0);
    check(r.empty(), "a kernel on the compute stream after dlc_memcpy_async is ordered", r);
    check(values_ok(b), "and reads the copied values");
    check(dlc_event_done(e, 0) == 1, "the copy's event has passed");
    /* another stream that did not wait: the copy is not on the default
    ** stream's order for it (so it is on a stream of its own) */
    cudaStream_t other;
    cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
    dlc_memcpy_async(b.dst, b.host, N * sizeof(int), 0, &e, err, sizeof err);
    r = run_read(b.dst, b.out, other);
    check(has(r, "emulator stream checker"), "a stream that did not wait is not ordered", r);
    /* ordered after the compute stream, it is: the compute stream waited */
    cudaEventRecord(ev, 0);
    cudaStreamWaitEvent(other, ev, 0);
    r = run_read(b.dst, b.out, other);
    check(r.empty(), "after the compute stream, which waited on the copy, it is", r);
    check(dlc_event_done(e, 1) == 1, "the copy's event passes");
    cudaStreamDestroy(other);
    done(b);
  }
  cudaEventDestroy(ev);
  cudaStreamDestroy(side);
  cudaStreamDestroy(blocking);
  printf("test_streams: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
