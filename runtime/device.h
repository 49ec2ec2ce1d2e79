/*
** device.h -- what device.c offers the rest of the runtime beyond the
** dl_cuda_* calls of ddplua.h: the launchers of libddplua_cuda.so by name.
*/
#ifndef DL_DEVICE_H
#define DL_DEVICE_H

#include "internal.h"
#include "cuda/dlc.h"

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

/* A new contiguous tensor on device (-1: the CPU), uninitialised. */
DL_HIDDEN dl_tensor *tensor_new_on(int device, int dtype, const int64_t *shape, int ndim);
/* n bytes between host and device memory (device: whose copy engine). */
DL_HIDDEN int cuda_copy_bytes(const char *op, void *dst, const void *src, size_t n, int device);

/* -- cuda_ops.c ------------------------------------------------------------ */

/* The device an op on ts[0..n) runs on (-1: the CPU); CPU 0-dim tensors
** go with any device.  -2 with the error set when the tensors are on
** different devices, or one is NULL or freed. */
DL_HIDDEN int op_device(const char *op, int n, const dl_tensor *const *ts);
/* The same where NULLs are optional arguments (a bias), skipped. */
DL_HIDDEN int op_device_opt(const char *op, int n, const dl_tensor *const *ts);
/* nn.h's nn_check_float for an op that runs where its operands are: any
** device.  want < 0: any float dtype, else that one. */
DL_HIDDEN int cuda_check_float(const char *op, const char *what, const dl_tensor *t, int want);
/* nn.h's nn_prep on device dev: t itself (retained) or a contiguous copy in
** kd there (a CPU 0-dim operand, which goes with any device, moves over);
** NULL for NULL. */
DL_HIDDEN dl_tensor *cuda_prep(const dl_tensor *t, int kd, int dev);
/* nn.h's nn_finish on work's device: work itself or a copy in dtype;
** consumes work either way. */
DL_HIDDEN dl_tensor *cuda_finish(dl_tensor *work, int dtype);
/* The launcher sym, looked up once into *slot; NULL with the error set. */
DL_HIDDEN void *cuda_fn(void **slot, const char *op, const char *sym);
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
/* A new tensor on device filled with v (dl_full's device-aware twin). */
DL_HIDDEN dl_tensor *full_on(int device, const int64_t *shape, int ndim, int dtype, double v);

#endif
