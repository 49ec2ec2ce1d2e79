/*
** ddplua.h -- the one public header of the ddplua runtime.
**
** Read by C programs and, through scripts/gen_cdef.sh, by LuaJIT's ffi.cdef:
** keep it to opaque structs, enums, fixed-width integers and plain
** prototypes (no macros inside prototypes, no inline functions).
**
** Contract of every call: 0 (or a pointer) on success; a negative DL_E* code
** (or NULL) on failure, with a message for dl_last_error().  Functions that
** return a dl_tensor* hand the caller a new reference: release it with
** dl_tensor_release().  Tensor arguments are borrowed.
*/
#ifndef DDPLUA_H
#define DDPLUA_H

#ifndef DL_CDEF
#include <stddef.h>
#include <stdint.h>
#endif

#ifndef DL_CDEF
#ifdef __cplusplus
extern "C" {
#endif
#define DL_API __attribute__((visibility("default")))
#else
#define DL_API
#endif

/* -- Errors -------------------------------------------------------------- */

typedef enum dl_status {
  DL_OK = 0,
  DL_EINVAL = -1,   /* bad argument value */
  DL_ESHAPE = -2,   /* shapes do not fit */
  DL_EDTYPE = -3,   /* dtype not supported or mismatched */
  DL_EINDEX = -4,   /* index or dim out of range */
  DL_ENOMEM = -5,   /* allocation failed */
  DL_EDEVICE = -6,  /* wrong or missing device */
  DL_EIO = -7,      /* file or system call failed */
  DL_ESTATE = -8    /* call not valid in the current state */
} dl_status;

DL_API const char *dl_last_error(void);
DL_API int dl_last_error_code(void);
DL_API void dl_clear_error(void);
DL_API const char *dl_version(void);

/* -- Dtypes -------------------------------------------------------------- */

typedef enum dl_dtype {
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

DL_API const char *dl_dtype_name(int dtype);
DL_API int dl_dtype_from_name(const char *name);  /* -1 if unknown */
DL_API int dl_dtype_size(int dtype);
DL_API int dl_dtype_is_float(int dtype);
DL_API int dl_promote_types(int a, int b);

/* -- Runtime: threads, memory, devices ----------------------------------- */

/* The per-process thread budget, applied to our pool and to OpenBLAS. */
DL_API int dl_set_num_threads(int n);
DL_API int dl_get_num_threads(void);
/* Bytes held by live CPU storages, and the high-water mark. */
DL_API int64_t dl_mem_allocated(void);
DL_API int64_t dl_mem_peak(void);
/* Freed blocks of 64 KiB and more are kept for reuse (fresh ones fault in
** every page); bytes held that way, and a call that returns them all. */
DL_API int64_t dl_mem_cached(void);
DL_API void dl_empty_cache(void);
/* 1 when enough has been allocated since the last dl_gc_done() that the
** Lua side should run its garbage collector (it sees pointers, not bytes). */
DL_API int dl_gc_hint(void);
DL_API void dl_gc_done(void);
/* CUDA: 0 devices when no driver, no device or no CUDA build. */
DL_API int dl_cuda_device_count(void);
DL_API const char *dl_cuda_status(void);
/* Fills out[i] = i * scale on device `device` and copies it back: proves the
** kernel path end to end. */
DL_API int dl_cuda_selftest(int device, float *out, int n, float scale);
/* Device memory (runtime/devalloc.c: a caching allocator per device).
** DL_EDEVICE, with the probe's status line, where CUDA is not available.
** memory_stats fills up to n of: bytes allocated, reserved, peak
** allocated, peak reserved, allocations, cache hits, segments, retries
** after releasing the cache, out-of-memory failures. */
DL_API int dl_cuda_synchronize(int device);
DL_API int dl_cuda_memory_stats(int device, int64_t *out, int n);
DL_API int dl_cuda_empty_cache(int device);
DL_API int dl_cuda_reset_peak_memory_stats(int device);
/* TF32 tensor cores for float32 matmul and conv2d on CUDA: off by default,
** as torch.backends.cuda.matmul.allow_tf32 (PyTorch >= 1.12). */
DL_API void dl_cuda_set_allow_tf32(int on);
DL_API int dl_cuda_get_allow_tf32(void);

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
DL_API int dl_tensor_dtype(const dl_tensor *t);
DL_API int dl_tensor_device(const dl_tensor *t);  /* -1 = cpu, k = cuda:k */
DL_API int dl_tensor_is_contiguous(const dl_tensor *t);
DL_API void *dl_tensor_data(const dl_tensor *t);  /* first element */
DL_API int dl_tensor_same_storage(const dl_tensor *a, const dl_tensor *b);
DL_API int dl_tensor_is_wrapped_number(const dl_tensor *t);

/* -- Creation ------------------------------------------------------------ */

DL_API dl_tensor *dl_empty(const int64_t *shape, int ndim, int dtype);
DL_API dl_tensor *dl_zeros(const int64_t *shape, int ndim, int dtype);
DL_API dl_tensor *dl_full(const int64_t *shape, int ndim, int dtype,
                          double value);
/* A 0-dim tensor standing for a Lua number in an op: it takes part in type
** promotion as a Python scalar does (it never widens a tensor's dtype within
** the same category). */
DL_API dl_tensor *dl_scalar(double value, int is_float);
DL_API dl_tensor *dl_arange(double start, double end, double step, int dtype);
DL_API dl_tensor *dl_linspace(double start, double end, int64_t steps,
                              int dtype);
DL_API dl_tensor *dl_eye(int64_t n, int64_t m, int dtype);
/* The same made on device (-1: the CPU) and filled there, never through
** host memory. */
DL_API dl_tensor *dl_empty_on(const int64_t *shape, int ndim, int dtype, int device);
DL_API dl_tensor *dl_zeros_on(const int64_t *shape, int ndim, int dtype, int device);
DL_API dl_tensor *dl_full_on(const int64_t *shape, int ndim, int dtype, double value,
                             int device);
DL_API dl_tensor *dl_arange_on(double start, double end, double step, int dtype, int device);
DL_API dl_tensor *dl_linspace_on(double start, double end, int64_t steps, int dtype,
                                 int device);
DL_API dl_tensor *dl_eye_on(int64_t n, int64_t m, int dtype, int device);
/* From row-major values (numel of shape), converted to dtype; the int64
** form keeps integers beyond 2^53 exact. */
DL_API dl_tensor *dl_from_doubles(const double *values, const int64_t *shape,
                                  int ndim, int dtype);
DL_API dl_tensor *dl_from_int64s(const int64_t *values, const int64_t *shape,
                                 int ndim, int dtype);
/* Wraps memory owned by someone else, without copying; deleter(ctx, data) runs
** when the last view goes away (deleter may be NULL). strides may be NULL for
** a contiguous layout. */
typedef void (*dl_deleter)(void *ctx, void *data);
DL_API dl_tensor *dl_from_blob(void *data, int dtype, const int64_t *shape,
                               const int64_t *strides, int ndim,
                               dl_deleter deleter, void *ctx);
/* For owners that live in Lua (which C must never call back): when the
** storage dies it queues `anchor`, and Lua drops its reference to the owner
** after popping the id with dl_released_anchors. */
DL_API dl_tensor *dl_from_blob_anchored(void *data, int dtype,
                                        const int64_t *shape,
                                        const int64_t *strides, int ndim,
                                        int64_t anchor);
DL_API int dl_released_anchors(int64_t *out, int max);  /* count popped */
DL_API int dl_anchors_pending(void);
DL_API dl_tensor *dl_clone(const dl_tensor *t);
DL_API dl_tensor *dl_to_dtype(const dl_tensor *t, int dtype); /* new ref */
/* t on device (-1: the CPU): t itself (a new reference) when it is there
** already, else a contiguous copy.  A CUDA source must be contiguous
** until the CUDA kernels come. */
DL_API dl_tensor *dl_to_device(const dl_tensor *t, int device);
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
DL_API dl_tensor *dl_rand(const int64_t *shape, int ndim, int dtype);
DL_API dl_tensor *dl_randn(const int64_t *shape, int ndim, int dtype);
DL_API dl_tensor *dl_randint(int64_t low, int64_t high, const int64_t *shape,
                             int ndim, int dtype);
DL_API dl_tensor *dl_randperm(int64_t n, int dtype);
/* The permutation dl_randperm gives after dl_rng_set_state(seed, offset),
** drawn from that stream of its own: the global generator is untouched.
** (The DataLoader's shuffle: reproducible, and it leaves the script's
** random numbers as they would be without it.) */
DL_API dl_tensor *dl_randperm_stream(int64_t n, uint64_t seed, uint64_t offset,
                                     int dtype);
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

DL_API const char *dl_binop_name(int op);
DL_API const char *dl_unop_name(int op);
DL_API int dl_result_type(const dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_binary(int op, const dl_tensor *a, const dl_tensor *b);
/* In place into a: the result must keep a's shape and dtype. */
DL_API int dl_binary_(int op, dl_tensor *a, const dl_tensor *b);
DL_API dl_tensor *dl_unary(int op, const dl_tensor *a);
DL_API int dl_unary_(int op, dl_tensor *a);
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
DL_API dl_tensor *dl_reduce(int op, const dl_tensor *t, const int *dims,
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
/* reduce: 0 = replace, 1 = add (scatter_add). */
DL_API dl_tensor *dl_scatter(const dl_tensor *t, int dim,
                             const dl_tensor *index, const dl_tensor *src,
                             int reduce);
DL_API int dl_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
                       const dl_tensor *src, int reduce);
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

/* -- Data files ---------------------------------------------------------- */

/* Reads an IDX file (the MNIST format), gzip-compressed or not: a tensor
** with the file's shape, of dtype uint8, int32 (for int8, int16, int32),
** float32 or float64.  NULL with DL_EIO when the file cannot be opened or
** read, DL_EINVAL when it is not a well-formed IDX file (bad magic, sizes
** that disagree with its length); memory follows the data really present,
** never a size the header merely claims. */
DL_API dl_tensor *dl_read_idx(const char *path);

/* -- Neural network kernels (forward and backward, no autograd) -- */

/* Plain functions that autograd wires into forward/backward pairs.  They
** take float32 or float64 (bfloat16 and float16 are computed in float32 and
** rounded once); the float operands of one call share a dtype.  Indices and
** targets are int64 (or int32).  Pairs (kernel, stride, padding, dilation)
** are {height, width}.  Optional tensors may be NULL; backward calls fill
** only the gradients asked for (need_*), setting the others to NULL.  Every
** result is a new contiguous tensor (but dropout's pass-through).  None of
** them records autograd nodes. */

typedef enum dl_reduction {
  DL_REDUCTION_NONE = 0, DL_REDUCTION_MEAN = 1, DL_REDUCTION_SUM = 2
} dl_reduction;

/* x [N, C, H, W] or [C, H, W], w [O, C / groups, kh, kw], b [O] or NULL. */
DL_API dl_tensor *dl_conv2d(const dl_tensor *x, const dl_tensor *w,
                            const dl_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation,
                            int64_t groups);
DL_API int dl_conv2d_backward(const dl_tensor *grad_out, const dl_tensor *x,
                              const dl_tensor *w, const int64_t *stride,
                              const int64_t *padding,
                              const int64_t *dilation, int64_t groups,
                              int need_x, int need_w, int need_b,
                              dl_tensor **grad_x, dl_tensor **grad_w,
                              dl_tensor **grad_b);

/* x [N, C, H, W] or [C, H, W]; stride NULL means stride = kernel.  indices
** (int64) hold each maximum's flat position within its H * W plane. */
DL_API int dl_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                         const int64_t *stride, const int64_t *padding,
                         const int64_t *dilation, int ceil_mode,
                         dl_tensor **out, dl_tensor **indices);
/* x is the forward input (only its shape and dtype are read). */
DL_API dl_tensor *dl_max_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const dl_tensor *indices);
/* divisor_override: 0 for none. */
DL_API dl_tensor *dl_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                const int64_t *stride, const int64_t *padding,
                                int ceil_mode, int count_include_pad,
                                int64_t divisor_override);
DL_API dl_tensor *dl_avg_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const int64_t *kernel,
                                         const int64_t *stride,
                                         const int64_t *padding, int ceil_mode,
                                         int count_include_pad,
                                         int64_t divisor_override);

/* weight [V, D] (any dtype), indices of any shape: out [*indices, D]. */
DL_API dl_tensor *dl_embedding(const dl_tensor *weight,
                               const dl_tensor *indices);
/* grad_weight [num_weights, D], rows added in index order (deterministic).
** padding_idx: the row that gets no gradient, in [0, num_weights), or -1
** for none (turn PyTorch's negative padding_idx into a row first). */
DL_API dl_tensor *dl_embedding_backward(const dl_tensor *grad_out,
                                        const dl_tensor *indices,
                                        int64_t num_weights,
                                        int64_t padding_idx,
                                        int scale_grad_by_freq);

/* Normalises over the last nnorm dims, which must equal normalized_shape;
** w and b (optional) have that shape.  mean and rstd have x's leading dims
** followed by nnorm ones, in float32 (float64 for float64 input). */
DL_API int dl_layer_norm(const dl_tensor *x, const int64_t *normalized_shape,
                         int nnorm, const dl_tensor *w, const dl_tensor *b,
                         double eps, dl_tensor **out, dl_tensor **mean,
                         dl_tensor **rstd);
DL_API int dl_layer_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x,
                                  const int64_t *normalized_shape, int nnorm,
                                  const dl_tensor *mean, const dl_tensor *rstd,
                                  const dl_tensor *w, int need_x, int need_w,
                                  int need_b, dl_tensor **grad_x,
                                  dl_tensor **grad_w, dl_tensor **grad_b);

/* x [N, C] or [N, C, *]; w, b, running_mean, running_var [C] or NULL.
** Training normalises with the batch statistics (biased variance) and, when
** given, updates running_mean and running_var in place (unbiased variance,
** weight momentum); eval uses the running statistics, which it needs.
** save_mean and save_invstd [C] (float32, or float64) are what backward
** takes: the batch statistics, or in eval the running ones. */
DL_API int dl_batch_norm(const dl_tensor *x, const dl_tensor *w,
                         const dl_tensor *b, dl_tensor *running_mean,
                         dl_tensor *running_var, int training,
                         double momentum, double eps, dl_tensor **out,
                         dl_tensor **save_mean, dl_tensor **save_invstd);
DL_API int dl_batch_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *save_mean,
                                  const dl_tensor *save_invstd, int training,
                                  int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w,
                                  dl_tensor **grad_b);

/* Training with 0 < p: out = x * mask / (1 - p) with mask (uint8, x's
** shape) drawn from the Philox stream: element i is kept when the i-th
** float32 rand() value of the same state is below 1 - p.  Otherwise out is
** a new header over x's data and mask is NULL. */
DL_API int dl_dropout(const dl_tensor *x, double p, int training,
                      dl_tensor **out, dl_tensor **mask);
DL_API dl_tensor *dl_dropout_backward(const dl_tensor *grad_out,
                                      const dl_tensor *mask, double p);

/* logits [N, C] or [N, C, d1, ...] (or [C]), target int64 [N] or
** [N, d1, ...] (or 0-dim), weight [C] or NULL; reduction: dl_reduction.
** PyTorch 1.13's formula, label smoothing included. */
DL_API dl_tensor *dl_cross_entropy(const dl_tensor *logits,
                                   const dl_tensor *target,
                                   const dl_tensor *weight,
                                   int64_t ignore_index,
                                   double label_smoothing, int reduction);
/* grad_logits; grad_out has the loss's shape. */
DL_API dl_tensor *dl_cross_entropy_backward(const dl_tensor *grad_out,
                                            const dl_tensor *logits,
                                            const dl_tensor *target,
                                            const dl_tensor *weight,
                                            int64_t ignore_index,
                                            double label_smoothing,
                                            int reduction);
/* The same from log-probabilities, without smoothing. */
DL_API dl_tensor *dl_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                              const dl_tensor *weight, int64_t ignore_index,
                              int reduction);
DL_API dl_tensor *dl_nll_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *logp,
                                       const dl_tensor *target,
                                       const dl_tensor *weight,
                                       int64_t ignore_index, int reduction);
/* input and target of one shape; the target's gradient is minus the
** input's. */
DL_API dl_tensor *dl_mse_loss(const dl_tensor *input, const dl_tensor *target,
                              int reduction);
DL_API dl_tensor *dl_mse_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *input,
                                       const dl_tensor *target, int reduction);

/* -- Differentiable neural network ops ------------------------------------ */

/* The kernels above with autograd: same arguments, recorded in the graph
** when an input requires grad (what ddp.nn.functional calls). */
/* y = x @ w^T + b (b may be NULL), w [out, in], x [..., in]. */
DL_API dl_tensor *dl_f_linear(const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b);
DL_API dl_tensor *dl_f_conv2d(const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation,
                              int64_t groups);
DL_API int dl_f_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                           const int64_t *stride, const int64_t *padding,
                           const int64_t *dilation, int ceil_mode,
                           dl_tensor **out, dl_tensor **indices);
DL_API dl_tensor *dl_f_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                  const int64_t *stride,
                                  const int64_t *padding, int ceil_mode,
                                  int count_include_pad,
                                  int64_t divisor_override);
DL_API dl_tensor *dl_f_embedding(const dl_tensor *weight,
                                 const dl_tensor *indices,
                                 int64_t padding_idx, int scale_grad_by_freq);
DL_API dl_tensor *dl_f_layer_norm(const dl_tensor *x,
                                  const int64_t *normalized_shape, int nnorm,
                                  const dl_tensor *w, const dl_tensor *b,
                                  double eps);
DL_API dl_tensor *dl_f_batch_norm(const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *b, dl_tensor *running_mean,
                                  dl_tensor *running_var, int training,
                                  double momentum, double eps);
DL_API dl_tensor *dl_f_dropout(const dl_tensor *x, double p, int training);
DL_API dl_tensor *dl_f_cross_entropy(const dl_tensor *logits,
                                     const dl_tensor *target,
                                     const dl_tensor *weight,
                                     int64_t ignore_index,
                                     double label_smoothing, int reduction);
DL_API dl_tensor *dl_f_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                                const dl_tensor *weight, int64_t ignore_index,
                                int reduction);
DL_API dl_tensor *dl_f_mse_loss(const dl_tensor *input, const dl_tensor *target,
                                int reduction);

/* -- Checkpoints (safetensors) ------------------------------------------ */

/* Writes n named tensors and nmeta string pairs to path in the safetensors
** format (any layout; written row-major, little-endian).  Atomic: the data
** goes to a temporary file beside path, is fsynced and renamed over path, so
** path holds the old file or the new one, never a mix.  Temporary files left
** by writers that died are removed by the next save of the same path.
** Returns DL_EIO naming the path and the system's reason on failure. */
DL_API int dl_st_save(const char *path, const char *const *names,
                      dl_tensor *const *tensors, int n,
                      const char *const *meta_keys,
                      const char *const *meta_values, int nmeta);
/* Opens and validates a safetensors file, memory-mapped (copy-on-write:
** changing a loaded tensor never changes the file).  NULL with a message
** naming the file and the problem when it is not a valid file. */
typedef struct dl_st_file dl_st_file;
DL_API dl_st_file *dl_st_open(const char *path);
/* Tensors in file order, 0 <= i < dl_st_count. */
DL_API int dl_st_count(const dl_st_file *f);
DL_API const char *dl_st_name(const dl_st_file *f, int i);
/* A new tensor viewing the mapping (no copy, unless the data is not
** aligned to its element size); valid after dl_st_close. */
DL_API dl_tensor *dl_st_tensor(dl_st_file *f, int i);
DL_API int dl_st_meta_count(const dl_st_file *f);
DL_API const char *dl_st_meta_key(const dl_st_file *f, int i);
DL_API const char *dl_st_meta_value(const dl_st_file *f, int i);
/* The mapping goes when the file and every tensor from it are gone. */
DL_API void dl_st_close(dl_st_file *f);

/* -- Optimizer steps (in place, no autograd) --------------------------- */

/* One parameter's update as torch.optim.SGD: buf may be NULL (no momentum);
** first: the step that initialises buf from the gradient. */
DL_API int dl_sgd_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *buf,
                       double lr, double momentum, double dampening,
                       double weight_decay, int nesterov, int first,
                       int maximize);
/* As torch.optim.Adam, or AdamW when decoupled; max_exp_avg_sq non-NULL
** turns on amsgrad; step counts from 1. */
DL_API int dl_adam_step(dl_tensor *p, const dl_tensor *grad,
                        dl_tensor *exp_avg, dl_tensor *exp_avg_sq,
                        dl_tensor *max_exp_avg_sq, int64_t step, double lr,
                        double beta1, double beta2, double eps,
                        double weight_decay, int decoupled, int maximize);

/* -- Rendezvous store -------------------------------------------------- */

/* A TCP key-value store as PyTorch's TCPStore, for rendezvous: a server
** (its event loop on its own thread) and blocking clients.  Keys are
** strings (at most 64 KiB), values bytes (at most 256 MiB).  A connection
** must present the server's token first, or it is closed.  Every call
** waits at most the handle's timeout (300 s unless set); a timeout is a
** DL_ESTATE error naming the operation and the key.  A handle serves one
** request at a time; use one per thread for concurrency. */
typedef struct dl_store dl_store;
/* Listens on host ("127.0.0.1" when NULL or empty) and port (0: a free
** port, see dl_store_port).  token NULL or "" accepts any client.  The
** handle is also a client of its own server.  NULL with DL_EIO when the
** address cannot be bound. */
DL_API dl_store *dl_store_server(const char *host, int port, const char *token);
/* Connects, retrying until timeout_s (the server may start later); the
** timeout becomes the handle's.  NULL with DL_EIO when nothing answered,
** DL_ESTATE when the server refused the token. */
DL_API dl_store *dl_store_connect(const char *host, int port, const char *token,
                                  double timeout_s);
DL_API int dl_store_port(const dl_store *s);
DL_API int dl_store_set_timeout(dl_store *s, double timeout_s);
/* The local address (text) of a client's connection: the interface through
** which this host reaches the store's, which other nodes can reach back. */
DL_API int dl_store_local_addr(dl_store *s, char *out, int cap);
DL_API double dl_store_timeout(const dl_store *s);
/* A server handle stops its thread and closes every connection. */
DL_API void dl_store_close(dl_store *s);
DL_API int dl_store_set(dl_store *s, const char *key, const void *value, int64_t len);
/* Waits until key exists (timeout_s <= 0: the handle's timeout) and returns
** its value, NUL-terminated, length in *len; free it with dl_store_free. */
DL_API void *dl_store_get(dl_store *s, const char *key, double timeout_s, int64_t *len);
DL_API void dl_store_free(void *p);
/* Adds delta to the counter key (decimal text; missing counts as 0) and
** stores the new value in *out (may be NULL).  Atomic across clients. */
DL_API int dl_store_add(dl_store *s, const char *key, int64_t delta, int64_t *out);
/* Sets key to desired when it holds expected (or is missing and expected
** is empty); returns the value now stored (empty when missing), as get. */
DL_API void *dl_store_compare_set(dl_store *s, const char *key, const void *expected,
                                  int64_t elen, const void *desired, int64_t dlen,
                                  int64_t *len);
/* Waits until all n keys exist, within timeout_s in all (<= 0: the
** handle's timeout). */
DL_API int dl_store_wait(dl_store *s, const char *const *keys, int n, double timeout_s);
/* 1 when all n keys exist now, 0 when not, without waiting. */
DL_API int dl_store_check(dl_store *s, const char *const *keys, int n);
/* 1 when key existed and was deleted, 0 when it did not exist. */
DL_API int dl_store_delete(dl_store *s, const char *key);
DL_API int64_t dl_store_num_keys(dl_store *s);
/* Returns when world_size callers have reached the barrier called name;
** reusable (each round of world_size arrivals is one generation). */
DL_API int dl_store_barrier(dl_store *s, const char *name, int world_size, double timeout_s);

/* -- Node lists ---------------------------------------------------------- */

/* SLURM's compressed host lists, as in SLURM_JOB_NODELIST:
** "gpu[001-004,010],cpu7" names gpu001..gpu004, gpu010 and cpu7 (zero
** padding kept).  The number of hosts, or DL_EINVAL on a malformed list. */
DL_API int dl_nodelist_count(const char *list);
/* Writes host number index (0-based) of list to out (cap bytes, NUL
** included); DL_EINVAL when the list is malformed, index is out of range
** or the name does not fit. */
DL_API int dl_nodelist_host(char *out, int cap, const char *list, int index);

/* -- Process groups and collectives -------------------------------------- */

/* Collectives among the ranks of a job, as PyTorch's ProcessGroup: blocking,
** in place where PyTorch's are, every rank making the same calls in the same
** order.  Tensors must be CPU tensors (a non-contiguous one is reduced
** through a contiguous copy).  Each wait is bounded by the group's timeout;
** a timeout is a DL_ESTATE error naming the collective, its call number and
** the ranks that had not arrived, and leaves the group unusable, as does a
** rank that exits (noticed within a second).  Within a node every call
** that moves data checks that all ranks called the same collective on the
** same dtype and size; DDP_DEBUG=1 checks every call, also over Gloo. */
typedef struct dl_pg dl_pg;
typedef enum dl_reduce_op {
  DL_RED_SUM = 0, DL_RED_AVG, DL_RED_MAX, DL_RED_MIN, DL_RED_PROD
} dl_reduce_op;
/* The group of a job: rank of world, local_world ranks per node (ranks
** node * local_world .. numbered by node, as the launcher does).  backend:
** "auto" or "cpu" (shared memory on one node; across nodes shared memory
** within each node and Gloo between one leader per node), "shm", "gloo"
** (TCP between all ranks) or "hier" (the multi-node scheme, also on one
** node).  NULL with DL_EINVAL for a bad choice, DL_EIO or DL_ESTATE when the
** ranks cannot connect within timeout_s. */
DL_API dl_pg *dl_pg_new(dl_store *store, int rank, int world, int local_world,
                        const char *backend, const char *job_id, double timeout_s);
/* All ranks of one node through a shared-memory arena: rank 0 creates
** "/ddplua-<job_id>-<n>" and publishes it through the store; every rank maps
** it; rank 0 unlinks it once all have (nothing stays in /dev/shm). */
DL_API dl_pg *dl_pg_shm_new(dl_store *store, int rank, int world,
                            const char *job_id, double timeout_s);
/* Waits for the group's asynchronous calls to finish first. */
DL_API void dl_pg_free(dl_pg *pg);
DL_API int dl_pg_rank(const dl_pg *pg);
DL_API int dl_pg_world_size(const dl_pg *pg);
/* "shm", "gloo" or "hier". */
DL_API const char *dl_pg_backend(const dl_pg *pg);
/* Seconds each later call may wait (asynchronous calls keep the timeout
** they were started with). */
DL_API double dl_pg_timeout(const dl_pg *pg);
DL_API int dl_pg_set_timeout(dl_pg *pg, double seconds);
/* In place.  avg is sum / world (floating dtypes only); for bool, sum and
** max act as or, prod and min as and; bfloat16/float16 reduce in float32. */
DL_API int dl_pg_all_reduce(dl_pg *pg, dl_tensor *t, int op);
/* In place: src's t on every rank (shapes and dtypes must match). */
DL_API int dl_pg_broadcast(dl_pg *pg, dl_tensor *t, int src);
/* A new tensor [world * t.shape[0], ...]: the ranks' t along dim 0 (a
** 0-dim t gives [world]). */
DL_API dl_tensor *dl_pg_all_gather(dl_pg *pg, const dl_tensor *t);
/* A new tensor [t.shape[0] / world, ...]: this rank's slice of the
** reduction; DL_ESHAPE unless world divides t.shape[0]. */
DL_API dl_tensor *dl_pg_reduce_scatter(dl_pg *pg, const dl_tensor *t, int op);
DL_API int dl_pg_barrier(dl_pg *pg);
/* Point to point: t's bytes to rank dst / into t from rank src.  Sizes
** must agree (DL_ESHAPE otherwise); the k-th send from a to b meets the
** k-th recv at b from a. */
DL_API int dl_pg_send(dl_pg *pg, const dl_tensor *t, int dst);
DL_API int dl_pg_recv(dl_pg *pg, dl_tensor *t, int src);
/* A zeroed 1-D tensor that an all-reduce reduces in place without copying
** it through the arena: with the shm backend it lies in memory every rank
** of the node maps (private memory otherwise, or when /dev/shm is short).
** Collective: every rank calls it in the same order with the same size. */
DL_API dl_tensor *dl_pg_shared_zeros(dl_pg *pg, int64_t numel, int dtype);
/* Asynchronous all-reduce: queued behind earlier asynchronous calls and
** run on the group's own thread; t must not be used until the handle is
** done.  wait returns 0 or the call's error; done is 1 once it finished
** (failed or not); free drops the handle (the call still completes). */
typedef struct dl_work dl_work;
DL_API dl_work *dl_pg_all_reduce_async(dl_pg *pg, dl_tensor *t, int op);
DL_API int dl_work_wait(dl_work *w);
DL_API int dl_work_done(const dl_work *w);
DL_API void dl_work_free(dl_work *w);

/* -- DDP reducer ------------------------------------------------------------ */

/* The gradients of params (n leaves, registration order) in flat buckets
** of at most bucket_cap bytes (the first first_cap), all-reduced (avg) on
** pg while backward runs; see runtime/reducer.c.  comm: DL_COMM_NONE, or
** BF16/FP16 to send buckets compressed, or CUSTOM to leave the reduction
** to the caller after backward (dl_reducer_bucket). */
typedef struct dl_reducer dl_reducer;
enum { DL_COMM_NONE = 0, DL_COMM_BF16, DL_COMM_FP16, DL_COMM_CUSTOM };
/* dl_reducer_stats slots: synced passes, buckets, buckets launched before
** backward ended (last pass), parameters no rank used (last pass),
** buckets rebuilt (0/1), ns from the first launch to the end of backward. */
enum { DL_RS_SYNCS = 0, DL_RS_BUCKETS, DL_RS_EARLY, DL_RS_UNUSED, DL_RS_REBUILT,
       DL_RS_OVERLAP_NS, DL_REDUCER_NSTATS };
DL_API dl_reducer *dl_reducer_new(dl_pg *pg, dl_tensor *const *params, int n,
                                  int64_t bucket_cap, int64_t first_cap, int comm);
DL_API void dl_reducer_free(dl_reducer *r);
/* Before each forward of the wrapped model. */
DL_API int dl_reducer_prepare(dl_reducer *r);
/* Accumulate locally (no all-reduce) while on; returns the previous state. */
DL_API int dl_reducer_set_no_sync(dl_reducer *r, int on);
/* All-reduce every k-th backward pass only (gradient accumulation). */
DL_API int dl_reducer_set_accum(dl_reducer *r, int k);
DL_API int dl_reducer_stats(const dl_reducer *r, int64_t *out, int n);
DL_API int dl_reducer_num_buckets(const dl_reducer *r);
DL_API dl_tensor *dl_reducer_bucket(const dl_reducer *r, int b);
DL_API int dl_reducer_bucket_of(const dl_reducer *r, int i);

/* -- Autograd ------------------------------------------------------------- */

/* Ops record a graph while grad mode is on and an input requires grad;
** dl_backward walks it in reverse.  Returns the previous mode. */
DL_API int dl_set_grad_enabled(int enabled);
DL_API int dl_is_grad_enabled(void);
/* Only floating point leaves (tensors no op produced) can require grad. */
DL_API int dl_requires_grad_(dl_tensor *t, int requires);
DL_API int dl_requires_grad(const dl_tensor *t);
DL_API int dl_is_leaf(const dl_tensor *t);
/* The accumulated gradient (new reference), or NULL without an error. */
DL_API dl_tensor *dl_grad(const dl_tensor *t);
/* Replaces the gradient (g == NULL clears it).  Later backward passes add
** into g in place, so g may be a view (of a DDP bucket, say). */
DL_API int dl_set_grad(dl_tensor *t, dl_tensor *g);
/* A tensor sharing t's data, outside any graph. */
DL_API dl_tensor *dl_detach(const dl_tensor *t);
/* Name of the op that produced t ("MulBackward"), or "" for leaves. */
DL_API const char *dl_grad_fn_name(const dl_tensor *t);
/* Backpropagates from root; grad may be NULL for a one-element root.  The
** graph is freed unless retain_graph. */
DL_API int dl_backward(dl_tensor *root, const dl_tensor *grad,
                       int retain_graph);
/* Called (in C, on the thread running backward) once a leaf's gradient of
** this backward pass has been fully accumulated into its .grad. */
typedef void (*dl_grad_hook)(void *ctx, dl_tensor *leaf);
DL_API int dl_add_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx);
DL_API int dl_remove_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx);
DL_API int dl_clear_grad_hooks(dl_tensor *leaf);
/* Called at the end of every successful backward pass, in the order
** added; a nonzero return (with the error set) fails that dl_backward. */
typedef int (*dl_backward_hook)(void *ctx);
DL_API int dl_add_backward_hook(dl_backward_hook fn, void *ctx);
DL_API int dl_remove_backward_hook(dl_backward_hook fn, void *ctx);

#ifndef DL_CDEF
#ifdef __cplusplus
}
#endif
#endif

#endif /* DDPLUA_H */
