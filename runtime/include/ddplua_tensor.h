/*
** ddplua_tensor.h -- dtypes, tensors, creation, random numbers, views, and the
** tensor ops: elementwise, reductions, linear algebra, indexing.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_TENSOR_H
#define DDPLUA_TENSOR_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Dtypes -------------------------------------------------------------- */

typedef enum dl_dtype {
  DL_DTYPE_UNKNOWN = -1,  /* what dl_dtype_from_name says of a name it does not know */
  DL_FLOAT32 = 0,
  DL_FLOAT64 = 1,
  DL_INT32 = 2,
  DL_INT64 = 3,
  DL_UINT8 = 4,
  DL_BOOL = 5,
  DL_BFLOAT16 = 6,
  DL_FLOAT16 = 7,
  DL_NDTYPES = 8
} dl_dtype;

enum { DL_MAX_DIMS = 8 };

DL_API const char *dl_dtype_name(dl_dtype dtype);
DL_API dl_dtype dl_dtype_from_name(const char *name);  /* -1 if unknown */
DL_API int dl_dtype_size(dl_dtype dtype);
DL_API int dl_dtype_is_float(dl_dtype dtype);
DL_API dl_dtype dl_promote_types(dl_dtype a, dl_dtype b);

/* -- Runtime: threads, memory ------------------------------------------- */

/* The per-process thread budget, applied to our pool and to OpenBLAS (at
** most dl_blas_thread_cap() of them). */
DL_API int dl_set_num_threads(int n);
/* The OpenBLAS threads an address-space limit (RLIMIT_AS, ulimit -v)
** leaves room for (each keeps a 128 MiB buffer, and waits forever for one
** it cannot have): (limit - 512 MiB) / 256 MiB, at least 1; or
** DL_BLAS_UNLIMITED when no limit is set. */
#define DL_BLAS_UNLIMITED 1024
DL_API int dl_blas_thread_cap(void);
DL_API int dl_get_num_threads(void);
/* Bytes held by live CPU storages, and the high-water mark. */
DL_API int64_t dl_mem_allocated(void);
DL_API int64_t dl_mem_peak(void);
/* The high-water mark of the live bytes since the last call with reset set
** (since the start, at first); reset starts a new window from the bytes
** live now.  Apart from dl_mem_peak, which is the user's
** (ddp.max_memory_allocated): ddp.memory_summary measures each optimizer
** step's peak with this one. */
DL_API int64_t dl_mem_window_peak(int reset);
/* Freed blocks of 64 KiB and more are kept for reuse (fresh ones fault in
** every page); bytes held that way, and a call that returns them all. */
DL_API int64_t dl_mem_cached(void);
DL_API void dl_empty_cache(void);

/* -- Tensors: lifetime and metadata -------------------------------------- */

typedef struct dl_tensor dl_tensor;

DL_API void dl_tensor_retain(dl_tensor *t);
DL_API void dl_tensor_release(dl_tensor *t);
/* Drops t's data now (t:free()): the header stays valid, as a 0-element
** tensor that every op refuses with "tensor was freed", so a handle used
** after free() is an error rather than a crash.  Only when nothing but the
** caller holds the header; otherwise a no-op (the data goes with the last
** reference). */
DL_API void dl_tensor_free_data(dl_tensor *t);
DL_API int dl_tensor_is_freed(const dl_tensor *t);
DL_API int dl_tensor_refcount(const dl_tensor *t);
DL_API int dl_tensor_storage_refcount(const dl_tensor *t);
DL_API int dl_tensor_dim(const dl_tensor *t);
DL_API int64_t dl_tensor_size(const dl_tensor *t, int dim);   /* dim >= 0 */
DL_API int64_t dl_tensor_stride(const dl_tensor *t, int dim); /* elements */
DL_API int64_t dl_tensor_numel(const dl_tensor *t);
DL_API int64_t dl_tensor_offset(const dl_tensor *t);          /* elements */
DL_API dl_dtype dl_tensor_dtype(const dl_tensor *t);
DL_API int dl_tensor_device(const dl_tensor *t);  /* -1 = cpu, k = cuda:k */
DL_API int dl_tensor_is_contiguous(const dl_tensor *t);
DL_API void *dl_tensor_data(const dl_tensor *t);  /* first element */
DL_API int dl_tensor_same_storage(const dl_tensor *a, const dl_tensor *b);
DL_API int dl_tensor_is_wrapped_number(const dl_tensor *t);
/* t's data moves into dst's memory (as PyTorch's `p.data = flat[a:b].view_as(p)`):
** its values are copied there and t, keeping its identity (modules,
** optimizers and the DDP reducer hold it), becomes a view of dst's memory
** with its own shape.  Same dtype, element count and device, both
** contiguous, and no other tensor (a view) on t's memory, which would keep
** the old data; DL_EINVAL/DL_EDTYPE otherwise.  ZeroRedundancyOptimizer
** lays the parameters of a segment out in one flat buffer so. */
DL_API int dl_tensor_rebase(dl_tensor *t, const dl_tensor *dst);

/* -- Creation ------------------------------------------------------------ */

DL_API dl_tensor *dl_empty(const int64_t *shape, int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_zeros(const int64_t *shape, int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_full(const int64_t *shape, int ndim, dl_dtype dtype,
                          double value);
/* A 0-dim tensor standing for a Lua number in an op: it takes part in type
** promotion as a Python scalar does (it never widens a tensor's dtype within
** the same category). */
DL_API dl_tensor *dl_scalar(double value, int is_float);
DL_API dl_tensor *dl_arange(double start, double end, double step, dl_dtype dtype);
DL_API dl_tensor *dl_linspace(double start, double end, int64_t steps,
                              dl_dtype dtype);
DL_API dl_tensor *dl_eye(int64_t n, int64_t m, dl_dtype dtype);
/* The same made on device (-1: the CPU) and filled there, never through
** host memory. */
DL_API dl_tensor *dl_empty_on(const int64_t *shape, int ndim, dl_dtype dtype, int device);
DL_API dl_tensor *dl_zeros_on(const int64_t *shape, int ndim, dl_dtype dtype, int device);
DL_API dl_tensor *dl_full_on(const int64_t *shape, int ndim, dl_dtype dtype, double value,
                             int device);
DL_API dl_tensor *dl_arange_on(double start, double end, double step, dl_dtype dtype, int device);
DL_API dl_tensor *dl_linspace_on(double start, double end, int64_t steps, dl_dtype dtype,
                                 int device);
DL_API dl_tensor *dl_eye_on(int64_t n, int64_t m, dl_dtype dtype, int device);
/* From row-major values (numel of shape), converted to dtype; the int64
** form keeps integers beyond 2^53 exact. */
DL_API dl_tensor *dl_from_doubles(const double *values, const int64_t *shape,
                                  int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_from_int64s(const int64_t *values, const int64_t *shape,
                                 int ndim, dl_dtype dtype);
/* Wraps memory owned by someone else, without copying; deleter(ctx, data) runs
** when the last view goes away (deleter may be NULL). strides may be NULL for
** a contiguous layout. */
typedef void (*dl_deleter)(void *ctx, void *data);
DL_API dl_tensor *dl_from_blob(void *data, dl_dtype dtype, const int64_t *shape,
                               const int64_t *strides, int ndim,
                               dl_deleter deleter, void *ctx);
DL_API dl_tensor *dl_clone(const dl_tensor *t);
DL_API dl_tensor *dl_to_dtype(const dl_tensor *t, dl_dtype dtype); /* new ref */
/* t on device (-1: the CPU): t itself (a new reference) when it is there
** already, else a contiguous copy there. */
DL_API dl_tensor *dl_to_device(const dl_tensor *t, int device);
/* t:to(device, {non_blocking = true}): from a pinned, contiguous CPU
** tensor the copy runs on the device's copy stream while the host goes on
** and the compute stream's queued kernels run; the compute stream waits
** for it (an event, on the device) before any later op, so every op on
** the result sees the copied values, and t is kept alive until the copy
** is over.  Otherwise the same as dl_to_device.  NULL with the error set
** as dl_to_device, or naming the CUDA call that failed. */
DL_API dl_tensor *dl_to_device_async(const dl_tensor *t, int device);
/* A copy of a CPU tensor in page-locked memory (t itself if it is one). */
DL_API dl_tensor *dl_pin_memory(const dl_tensor *t);
DL_API int dl_tensor_is_pinned(const dl_tensor *t);
/* Copies src into dst (broadcast to dst's shape, cast to dst's dtype). */
DL_API int dl_copy_(dl_tensor *dst, const dl_tensor *src);
DL_API int dl_fill_(dl_tensor *t, double value);
/* Reads element `linear` (row-major over the shape) as a double / int64. */
DL_API int dl_get_double(const dl_tensor *t, int64_t linear, double *out);
DL_API int dl_get_int64(const dl_tensor *t, int64_t linear, int64_t *out);
DL_API int dl_set_double(dl_tensor *t, int64_t linear, double value);
/* Copies all elements, row-major, into out (numel doubles). */
DL_API int dl_to_doubles(const dl_tensor *t, double *out);

/* -- Random numbers (Philox4x32-10, counter based) ----------------------- */

DL_API void dl_manual_seed(uint64_t seed);
DL_API uint64_t dl_rng_seed(void);
DL_API uint64_t dl_rng_offset(void);
DL_API void dl_rng_set_state(uint64_t seed, uint64_t offset);
DL_API dl_tensor *dl_rand(const int64_t *shape, int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_randn(const int64_t *shape, int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_randint(int64_t low, int64_t high, const int64_t *shape,
                             int ndim, dl_dtype dtype);
DL_API dl_tensor *dl_randperm(int64_t n, dl_dtype dtype);
/* The permutation dl_randperm gives after dl_rng_set_state(seed, offset),
** drawn from that stream of its own: the global generator is untouched.
** (The DataLoader's shuffle: reproducible, and it leaves the script's
** random numbers as they would be without it.) */
DL_API dl_tensor *dl_randperm_stream(int64_t n, uint64_t seed, uint64_t offset,
                                     dl_dtype dtype);
/* n uniform doubles in [0, 1) of the stream (seed, stream), from draw
** `first` on: a pure function of its arguments (no global state), so a
** data worker thread draws a sample's augmentation from (seed, epoch,
** sample index) whatever thread or rank it runs on.  Returns 0, or
** DL_EINVAL when out is NULL with n > 0. */
DL_API int dl_rng_uniforms(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double *out);
/* Fills with uniform [low, high) / normal(mean, std), in place. */
DL_API int dl_uniform_(dl_tensor *t, double low, double high);
DL_API int dl_normal_(dl_tensor *t, double mean, double std);

/* -- Views (share storage) ----------------------------------------------- */

DL_API dl_tensor *dl_view(const dl_tensor *t, const int64_t *shape, int ndim);
DL_API dl_tensor *dl_reshape(const dl_tensor *t, const int64_t *shape,
                             int ndim);
DL_API dl_tensor *dl_transpose(const dl_tensor *t, int d0, int d1);
DL_API dl_tensor *dl_permute(const dl_tensor *t, const int *perm, int ndim);
DL_API dl_tensor *dl_narrow(const dl_tensor *t, int dim, int64_t start,
                            int64_t length);
DL_API dl_tensor *dl_select(const dl_tensor *t, int dim, int64_t index);
DL_API dl_tensor *dl_squeeze(const dl_tensor *t, int dim);
DL_API dl_tensor *dl_squeeze_all(const dl_tensor *t);
DL_API dl_tensor *dl_unsqueeze(const dl_tensor *t, int dim);
DL_API dl_tensor *dl_expand(const dl_tensor *t, const int64_t *shape,
                            int ndim);
DL_API dl_tensor *dl_flatten(const dl_tensor *t, int start_dim, int end_dim);
/* Returns t itself (a new reference) when already contiguous. */
DL_API dl_tensor *dl_contiguous(const dl_tensor *t);
/* Shape, dtype and strides of a view of t's storage (for as_strided). */
DL_API dl_tensor *dl_as_strided(const dl_tensor *t, const int64_t *shape,
                                const int64_t *strides, int ndim,
                                int64_t offset);

/* -- Elementwise --------------------------------------------------------- */

typedef enum dl_binop {
  DL_ADD = 0, DL_SUB, DL_MUL, DL_DIV, DL_POW, DL_MAXIMUM, DL_MINIMUM,
  DL_EQ, DL_NE, DL_LT, DL_LE, DL_GT, DL_GE,
  DL_LOGICAL_AND, DL_LOGICAL_OR, DL_FMOD, DL_REMAINDER, DL_ATAN2,
  DL_NBINOPS
} dl_binop;

typedef enum dl_unop {
  DL_NEG = 0, DL_ABS, DL_EXP, DL_LOG, DL_SQRT, DL_RSQRT, DL_SIN, DL_COS,
  DL_TANH, DL_SIGMOID, DL_RELU, DL_GELU, DL_GELU_TANH, DL_LOGICAL_NOT,
  DL_SIGN, DL_FLOOR, DL_CEIL, DL_ROUND, DL_TRUNC, DL_RECIPROCAL, DL_SQUARE,
  DL_LOG1P, DL_EXPM1, DL_LOG2, DL_SILU, DL_ISNAN, DL_ISINF, DL_ISFINITE,
  DL_NUNOPS
} dl_unop;

DL_API const char *dl_binop_name(dl_binop op);
DL_API const char *dl_unop_name(dl_unop op);
DL_API dl_dtype dl_result_type(const dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_binary(dl_binop op, const dl_tensor *a, const dl_tensor *b);
/* In place into a: the result must keep a's shape and dtype. */
DL_API int dl_binary_(dl_binop op, dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_unary(dl_unop op, const dl_tensor *a);
DL_API int dl_unary_(dl_unop op, dl_tensor *a);
/* min/max may be NaN to leave that side open. */
DL_API dl_tensor *dl_clamp(const dl_tensor *a, double min, double max);
DL_API int dl_clamp_(dl_tensor *a, double min, double max);
DL_API dl_tensor *dl_where(const dl_tensor *cond, const dl_tensor *a,
                           const dl_tensor *b);

/* -- Reductions ---------------------------------------------------------- */

typedef enum dl_redop {
  DL_SUM = 0, DL_MEAN, DL_PROD, DL_AMAX, DL_AMIN, DL_ALL, DL_ANY,
  DL_VAR, DL_STD, DL_NORM, DL_LOGSUMEXP, DL_COUNT_NONZERO,
  DL_NREDOPS
} dl_redop;

/* dims == NULL or ndims == 0 reduces over every dim.  param: the correction
** of var/std (1 = unbiased), p of norm; ignored otherwise. */
DL_API dl_tensor *dl_reduce(dl_redop op, const dl_tensor *t, const int *dims,
                            int ndims, int keepdim, double param);
/* Values and int64 indices of max/min along one dim. */
DL_API int dl_max_dim(const dl_tensor *t, int dim, int keepdim,
                      dl_tensor **values, dl_tensor **indices);
DL_API int dl_min_dim(const dl_tensor *t, int dim, int keepdim,
                      dl_tensor **values, dl_tensor **indices);
/* dim < -DL_MAX_DIMS flattens first, as torch.argmax without dim. */
DL_API dl_tensor *dl_argmax(const dl_tensor *t, int dim, int keepdim);
DL_API dl_tensor *dl_argmin(const dl_tensor *t, int dim, int keepdim);
DL_API dl_tensor *dl_cumsum(const dl_tensor *t, int dim);
DL_API dl_tensor *dl_cumprod(const dl_tensor *t, int dim);
DL_API dl_tensor *dl_softmax(const dl_tensor *t, int dim);
DL_API dl_tensor *dl_log_softmax(const dl_tensor *t, int dim);

/* -- Linear algebra (OpenBLAS) ------------------------------------------- */

DL_API dl_tensor *dl_matmul(const dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_mm(const dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_bmm(const dl_tensor *a, const dl_tensor *b);
/* beta * c + alpha * (a @ b) */
DL_API dl_tensor *dl_addmm(const dl_tensor *c, const dl_tensor *a,
                           const dl_tensor *b, double beta, double alpha);
DL_API dl_tensor *dl_outer(const dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_dot(const dl_tensor *a, const dl_tensor *b);

/* -- Indexing, joining, sorting ------------------------------------------ */

DL_API dl_tensor *dl_index_select(const dl_tensor *t, int dim,
                                  const dl_tensor *index);
DL_API dl_tensor *dl_gather(const dl_tensor *t, int dim,
                            const dl_tensor *index);
/* How scatter combines src with what is there: replace, or add
** (scatter_add). */
typedef enum dl_scatter_reduce {
  DL_SCATTER_REPLACE = 0, DL_SCATTER_ADD = 1
} dl_scatter_reduce;
DL_API dl_tensor *dl_scatter(const dl_tensor *t, int dim,
                             const dl_tensor *index, const dl_tensor *src,
                             dl_scatter_reduce reduce);
DL_API int dl_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
                       const dl_tensor *src, dl_scatter_reduce reduce);
DL_API dl_tensor *dl_masked_fill(const dl_tensor *t, const dl_tensor *mask,
                                 double value);
DL_API int dl_masked_fill_(dl_tensor *t, const dl_tensor *mask, double value);
DL_API dl_tensor *dl_masked_select(const dl_tensor *t, const dl_tensor *mask);
DL_API dl_tensor *dl_cat(dl_tensor *const *ts, int n, int dim);
DL_API dl_tensor *dl_stack(dl_tensor *const *ts, int n, int dim);
DL_API dl_tensor *dl_one_hot(const dl_tensor *t, int64_t num_classes);
/* Stable sort along dim; values and int64 indices. */
DL_API int dl_sort(const dl_tensor *t, int dim, int descending,
                   dl_tensor **values, dl_tensor **indices);
DL_API int dl_topk(const dl_tensor *t, int64_t k, int dim, int largest,
                   int sorted, dl_tensor **values, dl_tensor **indices);
DL_API dl_tensor *dl_nonzero(const dl_tensor *t);
DL_API dl_tensor *dl_tril(const dl_tensor *t, int64_t diagonal);
DL_API dl_tensor *dl_triu(const dl_tensor *t, int64_t diagonal);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_TENSOR_H */
