/* selftest.cu -- device query and a fill kernel that prove the CUDA path end to end. */
/*
** Only the dlc_* launchers below are exported (NVFLAGS has
** -fvisibility=hidden): runtime/cuda/probe.c finds them with dlsym, so
** libddplua.so itself never links cudart or libcuda.  Each launcher
** returns 0, or a negative DL_E* code with the CUDA error text written
** into the caller's err buffer (err may be NULL, errlen may be 0).
*/
#include <stdio.h>
#include <stddef.h>

#include "common.cuh"

/* -- Errors -------------------------------------------------------------- */

/* "cudaMalloc: cudaErrorMemoryAllocation: out of memory"; the call names
** which step failed, the rest is CUDA's own text. */
static int cuda_fail(cudaError_t e, const char *call, char *err,
                     size_t errlen) {
  if (err && errlen)
    snprintf(err, errlen, "%s: %s: %s", call, cudaGetErrorName(e),
             cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_EDEVICE;
}

static int arg_fail(const char *what, char *err, size_t errlen) {
  if (err && errlen) snprintf(err, errlen, "%s", what);
  return DL_EINVAL;
}

/* -- Device query -------------------------------------------------------- */

/* No driver or no device come back as errors from cudaGetDeviceCount
** (cudaErrorInsufficientDriver, cudaErrorNoDevice), with *count = 0. */
DLC_API int dlc_device_count(int *count, char *err, size_t errlen) {
  if (!count) return arg_fail("dlc_device_count: count is NULL", err, errlen);
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) {
    *count = 0;
    return cuda_fail(e, "cudaGetDeviceCount", err, errlen);
  }
  return 0;
}

DLC_API int dlc_device_info(int device, char *name, size_t namelen,
                            int *major, int *minor, char *err,
                            size_t errlen) {
  if (!name || !namelen || !major || !minor)
    return arg_fail("dlc_device_info: NULL output", err, errlen);
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaGetDeviceProperties", err, errlen);
  snprintf(name, namelen, "%s", prop.name);
  *major = prop.major;
  *minor = prop.minor;
  return 0;
}

/* Versions as CUDA encodes them: 1000 * major + 10 * minor (13000 = 13.0). */
DLC_API int dlc_versions(int *driver, int *runtime, char *err,
                         size_t errlen) {
  if (!driver || !runtime)
    return arg_fail("dlc_versions: NULL output", err, errlen);
  cudaError_t e = cudaDriverGetVersion(driver);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaDriverGetVersion", err, errlen);
  e = cudaRuntimeGetVersion(runtime);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaRuntimeGetVersion", err, errlen);
  return 0;
}

/* -- Fill kernel --------------------------------------------------------- */

/* Grid-stride so any n works with a capped grid; a 64-bit index so the
** last stride past an n near INT_MAX cannot overflow. */
static __global__ void dlc_iota_kernel(float *out, int n, float scale) {
  long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    out[i] = (float)i * scale;
}

/* out[i] = i * scale for i < n, computed on `device` and copied into the
** host buffer out.  Allocates and frees its own device memory (a selftest,
** not the allocator), and puts the calling thread's current device back
** as it was, so it never disturbs a caller's CUDA context. */
DLC_API int dlc_iota(int device, float *out, int n, float scale, char *err,
                     size_t errlen) {
  if (!out || n < 0)
    return arg_fail("dlc_iota: out is NULL or n < 0", err, errlen);
  if (n == 0) return 0;

  int prev = -1, rc = 0;
  float *d = NULL;
  const char *call = "cudaGetDevice";
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) goto fail;
  call = "cudaSetDevice";
  if ((e = cudaSetDevice(device)) != cudaSuccess) goto fail;
  call = "cudaMalloc";
  if ((e = cudaMalloc((void **)&d, (size_t)n * sizeof *d)) != cudaSuccess)
    goto fail;
  {
    int threads = 256;
    int blocks = (int)(((long long)n + threads - 1) / threads);
    if (blocks > 65535) blocks = 65535;
    DLC_LAUNCH(dlc_iota_kernel, blocks, threads, 0, 0, d, n, scale);
  }
  /* Launch errors (bad config, no kernel image for this arch) show here;
  ** faults while running show at the synchronous copy below. */
  call = "dlc_iota_kernel launch";
  if ((e = cudaGetLastError()) != cudaSuccess) goto fail;
  call = "cudaMemcpy";
  if ((e = cudaMemcpy(out, d, (size_t)n * sizeof *d,
                      cudaMemcpyDeviceToHost)) != cudaSuccess)
    goto fail;
  call = "cudaFree";
  e = cudaFree(d);
  d = NULL;
  if (e != cudaSuccess) goto fail;
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  return 0;

fail:
  rc = cuda_fail(e, call, err, errlen);
  if (d) cudaFree(d);  /* keep the first error, not the cleanup's */
  if (prev >= 0 && prev != device) cudaSetDevice(prev);
  return rc;
}
