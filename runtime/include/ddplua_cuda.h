/*
** ddplua_cuda.h -- CUDA devices: the probe, synchronisation, device memory.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_CUDA_H
#define DDPLUA_CUDA_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- CUDA devices ------------------------------------------------------- */

/* CUDA: 0 devices when no driver, no device or no CUDA build. */
DL_API int dl_cuda_device_count(void);
DL_API const char *dl_cuda_status(void);
/* Fills out[i] = i * scale on device `device` and copies it back: proves the
** kernel path end to end. */
DL_API int dl_cuda_selftest(int device, float *out, int n, float scale);
/* Device memory (runtime/cuda/devalloc.c: a caching allocator per device).
** DL_EDEVICE, with the probe's status line, where CUDA is not available.
** memory_stats fills up to n of: bytes allocated, reserved, peak
** allocated, peak reserved, allocations, cache hits, segments, retries
** after releasing the cache, out-of-memory failures. */
DL_API int dl_cuda_synchronize(int device);
DL_API int dl_cuda_memory_stats(int device, int64_t *out, int n);
DL_API int dl_cuda_empty_cache(int device);
DL_API int dl_cuda_reset_peak_memory_stats(int device);
/* The high-water mark of device's allocated bytes since the last call with
** reset set, as dl_mem_window_peak on the CPU (apart from the user's peak
** above); -1, with no error, when nothing was ever allocated there. */
DL_API int64_t dl_cuda_memory_window_peak(int device, int reset);
/* TF32 tensor cores for float32 matmul and conv2d on CUDA: off by default,
** as torch.backends.cuda.matmul.allow_tf32 (PyTorch >= 1.12). */
DL_API void dl_cuda_set_allow_tf32(int on);
DL_API int dl_cuda_get_allow_tf32(void);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_CUDA_H */
