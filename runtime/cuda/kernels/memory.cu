/* memory.cu -- raw device memory for the caching allocator (devalloc.c),
** the only place that calls cudaMalloc, cudaFree and a device-wide sync;
** pinned host memory and the copy stream its copies run on. */
#include <stdio.h>

#include <mutex>

#include "common.cuh"
#include "trace.cuh"

static int fail(cudaError_t e, const char *call, int device, char *err, size_t errlen) {
  if (err && errlen) {
    if (device >= 0)
      snprintf(err, errlen, "%s on cuda:%d: %s: %s", call, device, cudaGetErrorName(e),
               cudaGetErrorString(e));
    else
      snprintf(err, errlen, "%s: %s: %s", call, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  return e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_EDEVICE;
}


DLC_API int dlc_mem_alloc(int device, size_t size, void **ptr, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess) {
    cudaGetLastError();  /* an allocation failure must not stick to later calls */
    return fail(e, "cudaMalloc", device, err, errlen);
  }
  return 0;
}

DLC_API int dlc_mem_free(int device, void *ptr, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? 0 : fail(e, "cudaFree", device, err, errlen);
}

DLC_API int dlc_device_sync(int device, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? 0 : fail(e, "cudaDeviceSynchronize", device, err, errlen);
}

DLC_API int dlc_mem_info(int device, size_t *free_b, size_t *total_b, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMemGetInfo(free_b, total_b);
  return e == cudaSuccess ? 0 : fail(e, "cudaMemGetInfo", device, err, errlen);
}

/* n bytes between host and device memory or two devices (unified
** addressing tells which); synchronous. */
DLC_API int dlc_memcpy(void *dst, const void *src, size_t n, int device, char *err, size_t errlen) {
  if (n == 0) return 0;
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
  return e == cudaSuccess ? 0 : fail(e, "cudaMemcpy", device, err, errlen);
}

/* -- Page-locked host memory and asynchronous copies ------------------------- */

/* Page-locked ("pinned") host memory: the copy engine reads it directly,
** so a copy from it can run asynchronously while the host goes on. */
DLC_API int dlc_host_alloc(size_t size, void **ptr, char *err, size_t errlen) {
  cudaError_t e = cudaHostAlloc(ptr, size ? size : 1, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return fail(e, "cudaHostAlloc", -1, err, errlen);
  }
  return 0;
}

DLC_API int dlc_host_free(void *ptr, char *err, size_t errlen) {
  cudaError_t e = cudaFreeHost(ptr);
  return e == cudaSuccess ? 0 : fail(e, "cudaFreeHost", -1, err, errlen);
}

/* Each device's copy stream, made on first use: host-to-device copies from
** pinned memory run there, so a prefetched batch's copy overlaps the
** kernels already queued on the compute stream instead of queueing behind
** them.  Non-blocking: the legacy default stream (the compute stream,
** common.cu) would otherwise wait for it and make it wait, which is the
** queueing this stream exists to avoid.  Never destroyed (one per device). */
static cudaStream_t copy_streams[64];
static std::mutex copy_mu;

static int copy_stream(int device, cudaStream_t *st, char *err, size_t errlen) {
  if (device < 0 || device >= 64) return fail(cudaErrorInvalidDevice, "copy stream", device, err, errlen);
  std::lock_guard<std::mutex> g(copy_mu);
  if (!copy_streams[device]) {
    cudaError_t e = cudaStreamCreateWithFlags(&copy_streams[device], cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      copy_streams[device] = 0;
      return fail(e, "cudaStreamCreateWithFlags", device, err, errlen);
    }
  }
  *st = copy_streams[device];
  return 0;
}

/* The device's copy stream as the caching allocator names streams: its
** blocks are kept apart from the compute stream's (devalloc.c). */
DLC_API int dlc_copy_stream(int device, uintptr_t *stream, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaStream_t st;
  if (int rc = copy_stream(device, &st, err, errlen)) return rc;
  *stream = (uintptr_t)st;
  return 0;
}

/* n bytes on the device's copy stream, without waiting; *event is a new
** event recorded after the copy (dlc_event_done tells when it is over),
** and the compute stream waits on it before anything enqueued there later
** -- a wait on the device: the host goes on -- so every kernel that can
** see dst runs after the copy, while the copy overlaps the kernels queued
** before it.  On an error no event is left and nothing waits. */
DLC_API int dlc_memcpy_async(void *dst, const void *src, size_t n, int device, void **event,
                             char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaStream_t st;
  if (int rc = copy_stream(device, &st, err, errlen)) return rc;
  long long span = dlc_tr_on() ? dlc_tr_begin(device, DLC_TR_COPY, st, "memcpy_async") : -1;
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st);
  dlc_tr_end(span, st);
  if (e != cudaSuccess) return fail(e, "cudaMemcpyAsync", device, err, errlen);
  cudaEvent_t ev;
  if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
    return fail(e, "cudaEventCreate", device, err, errlen);
  const char *what = "cudaEventRecord";
  if ((e = cudaEventRecord(ev, st)) == cudaSuccess) {
    what = "cudaStreamWaitEvent";
    e = cudaStreamWaitEvent(dlc_stream(device), ev, 0);
  }
  if (e != cudaSuccess) {
    /* nothing orders the copy before the compute stream: wait for it here */
    cudaStreamSynchronize(st);
    cudaEventDestroy(ev);
    return fail(e, what, device, err, errlen);
  }
  *event = (void *)ev;
  return 0;
}

/* A new event recorded now on stream (0: the compute stream) of device,
** for the caching allocator: a block used there is reused on another
** stream only once the work queued before its release has passed. */
DLC_API int dlc_event_record(int device, uintptr_t stream, void **event, char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaStream_t st = stream ? (cudaStream_t)stream : dlc_stream(device);
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return fail(e, "cudaEventCreate", device, err, errlen);
  if ((e = cudaEventRecord(ev, st)) != cudaSuccess) {
    cudaEventDestroy(ev);
    return fail(e, "cudaEventRecord", device, err, errlen);
  }
  *event = (void *)ev;
  return 0;
}

/* 1 when the work before the event is over (the event is then destroyed),
** 0 while it runs, 1 also on an error (nothing is left to wait for). */
DLC_API int dlc_event_done(void *event, int wait) {
  cudaEvent_t ev = (cudaEvent_t)event;
  cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
  if (e == cudaErrorNotReady) return 0;
  cudaGetLastError();
  cudaEventDestroy(ev);
  return 1;
}
