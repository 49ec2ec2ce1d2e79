/* memory.cu -- raw device memory for the caching allocator (devalloc.c):
** the only place that calls cudaMalloc, cudaFree and a device-wide sync. */
#include <stdio.h>

#include "common.cuh"

static int fail(cudaError_t e, const char *call, int device, char *err, size_t errlen) {
  if (err && errlen)
    snprintf(err, errlen, "%s on cuda:%d: %s: %s", call, device, cudaGetErrorName(e),
             cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_EDEVICE;
}

/* Runs on `device` and puts the caller's current device back. */
struct on_device {
  int prev = -1;
  cudaError_t e;
  explicit on_device(int device) {
    e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != device) e = cudaSetDevice(device);
  }
  ~on_device() {
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev) cudaSetDevice(prev);
  }
};

DLC_API int dlc_mem_alloc(int device, size_t size, void **ptr, char *err, size_t errlen) {
  on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess) {
    cudaGetLastError();  /* an allocation failure must not stick to later calls */
    return fail(e, "cudaMalloc", device, err, errlen);
  }
  return 0;
}

DLC_API int dlc_mem_free(int device, void *ptr, char *err, size_t errlen) {
  on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? 0 : fail(e, "cudaFree", device, err, errlen);
}

DLC_API int dlc_device_sync(int device, char *err, size_t errlen) {
  on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? 0 : fail(e, "cudaDeviceSynchronize", device, err, errlen);
}

DLC_API int dlc_mem_info(int device, size_t *free_b, size_t *total_b, char *err, size_t errlen) {
  on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMemGetInfo(free_b, total_b);
  return e == cudaSuccess ? 0 : fail(e, "cudaMemGetInfo", device, err, errlen);
}

/* n bytes between host and device memory or two devices (unified
** addressing tells which); synchronous. */
DLC_API int dlc_memcpy(void *dst, const void *src, size_t n, int device, char *err, size_t errlen) {
  if (n == 0) return 0;
  on_device d(device);
  if (d.e != cudaSuccess) return fail(d.e, "cudaSetDevice", device, err, errlen);
  cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDefault);
  return e == cudaSuccess ? 0 : fail(e, "cudaMemcpy", device, err, errlen);
}
