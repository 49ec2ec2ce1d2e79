/*
** device.h -- what device.c offers the rest of the runtime beyond the
** dl_cuda_* calls of ddplua.h: the launchers of libddplua_cuda.so by name.
*/
#ifndef DL_DEVICE_H
#define DL_DEVICE_H

#include "internal.h"

/* dlsym of the loaded libddplua_cuda.so (probing CUDA first if needed).
** NULL when the library is not loaded (*why: the probe's status line, as
** "no CUDA driver (libcuda.so.1 not found)") or lacks name (*why says so
** and to rebuild).  *why is set only on failure and may be NULL; it stays
** valid until this thread's next call. */
DL_HIDDEN void *cuda_sym(const char *name, const char **why);

/* cuda_mem.c: device memory from the device's caching allocator, for use
** on stream (0: the default stream); NULL with DL_ENOMEM naming the
** allocator's statistics, or DL_EDEVICE without CUDA. */
/* Default visibility (not in the public header) for tests/c/test_devalloc.c. */
__attribute__((visibility("default"))) void *cuda_mem_alloc(int device, size_t size,
                                                            uintptr_t stream);
__attribute__((visibility("default"))) int cuda_mem_release(int device, void *ptr);

#endif
