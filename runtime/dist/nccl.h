/*
** nccl.h -- the NCCL transport (nccl.c over runtime/cuda/kernels/nccl.cu): one
** communicator per process group, collectives on raw device pointers.
**
** Contract: every call returns 0 (or a pointer), or a negative DL_E* code
** (or NULL) with the message in dl_last_error(): DL_EDEVICE when CUDA or
** NCCL is missing or fails (NCCL's own text), DL_EINVAL / DL_EDTYPE for bad
** arguments, DL_ESTATE for a timeout (the message says "timed out") or a
** communicator aborted by an earlier error.  Nothing here exits or aborts.
**
** Ordering, as llm.c does it: each collective runs on the communicator's
** own CUDA stream after the work already queued on the caller's `stream`
** (NULL: the legacy default stream), and returns once queued.  Then either
** nccl_stream_wait (a stream waits on the device, the host goes on) or
** nccl_wait (the host blocks, bounded by the timeout) before the result is
** read.  Every rank makes the same calls in the same order; one thread at
** a time per communicator.
*/
#ifndef DL_NCCL_H
#define DL_NCCL_H

#include <stdint.h>

#include "ddplua.h"

/* Internal to the library (tests/c/test_nccl.c links build/libddplua.a). */
#define DLN_API __attribute__((visibility("hidden")))

typedef struct nccl_comm nccl_comm;

/* Rank 0 makes NCCL's unique id and publishes it in store under
** "<prefix>/nccl_id" (or, when it cannot, a message the other ranks
** report at once); the others fetch it; then all join one communicator on
** cuda:device.  timeout_s (<= 0: the store's) bounds the fetch and every
** later nccl_wait.  NULL with DL_EDEVICE ("nccl: CUDA is not available:
** no CUDA driver (libcuda.so.1 not found)", or naming libnccl.so.2) when
** CUDA or NCCL is missing, DL_ESTATE when the id does not come in time.
** store may be NULL for a world of one. */
DLN_API nccl_comm *nccl_new(dl_store *store, const char *prefix, int rank,
                            int world, int device, double timeout_s);
/* Destroys the communicator (aborts it when work is still running). */
DLN_API void nccl_free(nccl_comm *c);
DLN_API void nccl_set_timeout(nccl_comm *c, double timeout_s);
DLN_API int nccl_rank(const nccl_comm *c);
DLN_API int nccl_world(const nccl_comm *c);

/* out = the reduction over all ranks of in, n elements of dtype (a
** dl_dtype; out may equal in).  op: a dl_pg_op; avg is for floating
** dtypes; for bool, sum and max are or, prod and min are and. */
DLN_API int nccl_all_reduce(nccl_comm *c, void *out, const void *in, int64_t n,
                            int dtype, int op, void *stream);
/* out on every rank = in of rank src, nbytes (out may equal in). */
DLN_API int nccl_broadcast(nccl_comm *c, void *out, const void *in,
                           int64_t nbytes, int src, void *stream);
/* out: world * nbytes, the ranks' in in rank order. */
DLN_API int nccl_all_gather(nccl_comm *c, void *out, const void *in,
                            int64_t nbytes, void *stream);
/* in: world * n_per_rank elements; out gets block `rank` of the reduction. */
DLN_API int nccl_reduce_scatter(nccl_comm *c, void *out, const void *in,
                                int64_t n_per_rank, int dtype, int op,
                                void *stream);
/* The k-th send from a to b meets the k-th recv at b from a (same nbytes);
** a pair of ranks exchanging both ways brackets the calls in a group. */
DLN_API int nccl_send(nccl_comm *c, const void *buf, int64_t nbytes, int dst,
                      void *stream);
DLN_API int nccl_recv(nccl_comm *c, void *buf, int64_t nbytes, int src,
                      void *stream);
DLN_API int nccl_group_start(nccl_comm *c);
DLN_API int nccl_group_end(nccl_comm *c);

/* stream (NULL: the legacy default stream) waits for every collective
** queued so far, without blocking the host. */
DLN_API int nccl_stream_wait(nccl_comm *c, void *stream);
/* The host waits for every collective queued so far; past the timeout, or
** on an asynchronous NCCL error (a dead peer), the communicator is aborted
** and every later call fails with the reason. */
DLN_API int nccl_wait(nccl_comm *c);

/* NCCL's version code (22809 = 2.28.9; 0 if it does not say), or a
** negative DL_E* code when CUDA or NCCL cannot be loaded. */
DLN_API int nccl_version(void);

/* Plain cudaMalloc / cudaFree / cudaMemcpy (either side host or device),
** for tests that have no CUDA tensors: not the allocator. */
DLN_API void *nccl_dev_alloc(int device, int64_t nbytes);
DLN_API int nccl_dev_free(int device, void *p);
DLN_API int nccl_dev_copy(int device, void *dst, const void *src, int64_t nbytes);

#endif /* DL_NCCL_H */
