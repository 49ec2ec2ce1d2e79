/* memory.cu -- raw device memory for the caching allocator (devalloc.c):
** the only place that calls cudaMalloc, cudaFree and a device-wide sync. */
#include <stdio.h>

#include "common.cuh"

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

/* n bytes on the device's compute stream, without waiting; *event is a new
** event recorded after the copy (dlc_event_done tells when it is over). */
DLC_API int dlc_memcpy_async(void *dst, const void *src, size_t n, int device, void **event,
                             char *err, size_t errlen) {
  dlc_on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaStream_t st = dlc_stream(device);
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st);
  if (e != cudaSuccess) return fail(e, "cudaMemcpyAsync", device, err, errlen);
  cudaEvent_t ev;
  if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
    return fail(e, "cudaEventCreate", device, err, errlen);
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
