/*
** cuda.h -- what the CUDA glue's files share: the launchers of
** libddplua_cuda.so, device memory, and the kernels cuda/backend.c puts in
** the CUDA device's table (core/device.h).
*/
#ifndef DL_CUDA_GLUE_H
#define DL_CUDA_GLUE_H

#include "core/device.h"
#include "cuda/dlc.h"

/* The launchers of the loaded libddplua_cuda.so (dlc.h's table, checked
** once at load; probing CUDA first if needed).  NULL with DL_EDEVICE naming
** op and the probe's status line ("no CUDA driver (libcuda.so.1 not
** found)") when there is no library. */
DL_HIDDEN const dlc_api *cuda_api(const char *op);
/* One launcher of the table, or NULL with the error set; DLC_FN(name) is
** its type (DLC_FN(gemm) f = DLC(op, gemm)). */
#define DLC(op, name) (cuda_api(op) ? cuda_api(op)->name : NULL)
#define DLC_FN(name) __typeof__(((const dlc_api *)0)->name)

/* cuda/memory.c: device memory from the device's caching allocator, for use
** on stream (0: the default stream); NULL with DL_ENOMEM naming the
** allocator's statistics, or DL_EDEVICE without CUDA. */
DL_HIDDEN void *cuda_mem_alloc(int device, size_t size, uintptr_t stream);
DL_HIDDEN int cuda_mem_release(int device, void *ptr);

/* The CUDA device's kernels: cuda_<slot> (core/device_slots.h), defined in
** this folder; backend.c's table names each. */
#define DL_SLOT(ret, name, params) DL_HIDDEN ret cuda_##name params;
#include "core/device_slots.h"
#undef DL_SLOT
/* The table (backend.c), registered by the probe once a device is found. */
extern DL_HIDDEN const dl_device cuda_device;
/* cuda/trace.c: the device's spans join the runtime's trace (registered
** with the device). */
DL_HIDDEN void cuda_trace_register(void);

/* -- cuda/ops.c ------------------------------------------------------------ */

/* nn.h's nn_prep on device dev: t itself (retained) or a contiguous copy in
** kd there (a CPU 0-dim operand, which goes with any device, moves over);
** NULL for NULL. */
DL_HIDDEN dl_tensor *cuda_prep(const dl_tensor *t, int kd, int dev);
/* rc of a launcher into the runtime's error (0 stays 0). */
DL_HIDDEN int cuda_err(const char *op, int device, int rc);
/* An iter_t (iter.c) of ops as a launcher takes it. */
DL_HIDDEN int cuda_iter(dlc_iter *d, const iter_t *it, dl_tensor *const *ops);

#endif
