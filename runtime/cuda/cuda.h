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
/* One launcher of the table, or NULL with the error set. */
#define DLC(op, name) (cuda_api(op) ? cuda_api(op)->name : NULL)

/* cuda/memory.c: device memory from the device's caching allocator, for use
** on stream (0: the default stream); NULL with DL_ENOMEM naming the
** allocator's statistics, or DL_EDEVICE without CUDA. */
DL_HIDDEN void *cuda_mem_alloc(int device, size_t size, uintptr_t stream);
DL_HIDDEN int cuda_mem_release(int device, void *ptr);

/* The CUDA device's memory kernels (core/device.h): a new contiguous
** tensor there, uninitialised; a tensor moved to or from device. */
DL_HIDDEN dl_tensor *cuda_new_tensor(int device, int dtype, const int64_t *shape, int ndim);
DL_HIDDEN dl_tensor *cuda_move(const dl_tensor *t, int device);
/* The table (backend.c), registered by the probe once a device is found. */
extern DL_HIDDEN const dl_device cuda_device;
/* n bytes between host and device memory (device: whose copy engine). */
DL_HIDDEN int cuda_copy_bytes(const char *op, void *dst, const void *src, size_t n, int device);

/* -- cuda/ops.c ------------------------------------------------------------ */

/* nn.h's nn_prep on device dev: t itself (retained) or a contiguous copy in
** kd there (a CPU 0-dim operand, which goes with any device, moves over);
** NULL for NULL. */
DL_HIDDEN dl_tensor *cuda_prep(const dl_tensor *t, int kd, int dev);
/* rc of a launcher into the runtime's error (0 stays 0). */
DL_HIDDEN int cuda_err(const char *op, int device, int rc);
/* An iter_t (iter.c) of ops as a launcher takes it. */
DL_HIDDEN int cuda_iter(dlc_iter *d, const iter_t *it, dl_tensor *const *ops);
/* The elementwise launchers of runtime/cuda/elementwise.cu over ops. */
DL_HIDDEN int cuda_cast(const char *op, dl_tensor *dst, const dl_tensor *src);
DL_HIDDEN int cuda_fill(const char *op, dl_tensor *t, uint64_t bytes);
DL_HIDDEN int cuda_binary(const char *op, int binop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cuda_unary(const char *op, int unop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cuda_clamp(const char *op, int dtype, double lo, double hi, dl_tensor *const *ops);
DL_HIDDEN int cuda_where(const char *op, dl_tensor *const *ops);
DL_HIDDEN int cuda_act_backward(const char *op, int act, int dtype, dl_tensor *const *ops);

#endif
