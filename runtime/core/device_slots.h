/*
** device_slots.h -- every kernel of a device (core/device.h), each signature
** written once: DL_SLOT(return type, name, (parameters)).
**
** This file is a list, included with DL_SLOT defined as each user needs
** (no include guard, as LuaJIT's lj_errmsg.h): core/device.h makes it the
** members of dl_device and the CPU's prototypes cpu_<name>, cuda/cuda.h the
** CUDA glue's cuda_<name>, and each backend.c its table with designated
** initializers (.name = cpu_name), so a kernel missing, misnamed or of
** another signature does not compile.  A new kernel: one line here, its
** cpu_<name> beside the op that uses it, its cuda_<name> in cuda/.
**
** Every kernel takes the op's name for its errors and its operands already
** checked, broadcast and of the dtypes it asks for, and returns 0 or -1
** with the error set (a tensor, or NULL with the error set).  "ops" arrays
** hold the output first.
*/

/* -- Memory ------------------------------------------------------------------ */

/* A new contiguous tensor on device index dev, uninitialised. */
DL_SLOT(dl_tensor *, new_tensor, (int dev, dl_dtype dtype, const int64_t *shape, int ndim))
/* n bytes between host and device memory (dev: whose copy engine). */
DL_SLOT(int, copy_bytes, (const char *op, void *dst, const void *src, size_t n, int dev))
/* t on device index to (-1: the CPU), a contiguous copy; this device is the
** one t or the destination lies on. */
DL_SLOT(dl_tensor *, move, (const dl_tensor *t, int to))

/* -- Elementwise ------------------------------------------------------------- */

DL_SLOT(int, cast, (const char *op, dl_tensor *dst, const dl_tensor *src))
/* value's bytes in t's dtype into every element of t */
DL_SLOT(int, fill, (const char *op, dl_tensor *t, uint64_t bytes))
/* ops = {out, a, b}, computed in dtype (bool results for comparisons) */
DL_SLOT(int, binary, (const char *op, dl_binop binop, dl_dtype dtype, dl_tensor *const *ops))
/* ops = {out, a}, computed in dtype */
DL_SLOT(int, unary, (const char *op, dl_unop unop, dl_dtype dtype, dl_tensor *const *ops))
/* ops = {out, a}; NaN bounds are open */
DL_SLOT(int, clamp, (const char *op, dl_dtype dtype, double lo, double hi,
                     dl_tensor *const *ops))
/* ops = {out, cond, a, b}, a and b in out's dtype */
DL_SLOT(int, where, (const char *op, dl_tensor *const *ops))
/* ops = {out, g, x}: out = g * act'(x) for gelu, gelu_tanh, silu, relu */
DL_SLOT(int, act_backward, (const char *op, dl_unop act, dl_dtype dtype,
                            dl_tensor *const *ops))
/* contiguous t[i] = i < split ? start + i * step : end - (n - 1 - i) * step */
DL_SLOT(int, ramp, (const char *op, dl_tensor *t, double start, double step, double end,
                    int64_t split))

/* -- Linear algebra ------------------------------------------------------------ */

/* the planned batched product (core/kernel_args.h), through BLAS-style calls
** (blas) or the integer path; out is the plan's contiguous c */
DL_SLOT(int, matmul, (const char *op, int dev, mm_plan *p, int blas))
/* a . b of 1-D a and b (checked) as a 0-dim tensor */
DL_SLOT(dl_tensor *, dot, (const char *op, const dl_tensor *a, const dl_tensor *b))

/* -- Reductions, scans, softmax ------------------------------------------------ */

/* out = redop of x over the dims marked in red, N elements each, through
** the pass kop (ops/reduce.c plans the passes) */
DL_SLOT(int, reduce, (const char *op, const dl_tensor *x, const int *red, reduce_pass kop,
                      dl_redop redop, double param, int64_t N, dl_tensor *out))
/* which (DL_AMAX or DL_AMIN) of x along dim d: values (may be NULL) and
** int64 indices */
DL_SLOT(int, argreduce, (const char *op, const dl_tensor *x, int d, dl_redop which,
                         dl_tensor *values, dl_tensor *indices))
/* cumsum or cumprod along the middle dim of contiguous [outer, n, inner] x
** into y */
DL_SLOT(int, scan, (const char *op, scan_kind kind, const dl_tensor *x, dl_tensor *y,
                    int64_t outer, int64_t n, int64_t inner))
/* softmax (log: log_softmax) along the middle dim of contiguous
** [outer, n, inner] float x into y */
DL_SLOT(int, softmax, (const char *op, int log, const dl_tensor *x, dl_tensor *y,
                       int64_t outer, int64_t n, int64_t inner))

/* -- Indexing, sorting ---------------------------------------------------------- */

/* every element of index (any layout) in [0, size), else DL_EINDEX naming dim */
DL_SLOT(int, index_check, (const char *op, const dl_tensor *index, int dim, int64_t size))
/* smallest and largest value of a non-empty index */
DL_SLOT(int, index_minmax, (const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi))
/* ops = {out, src with stride 0 along the dim, index}: out = src[index] */
DL_SLOT(int, take, (const char *op, dl_tensor *const *ops, int64_t step, int es))
/* ops = {dst with stride 0 along the dim, src, index}: dst[index] = src, or
** += src (DL_SCATTER_ADD, in dtype) */
DL_SLOT(int, put, (const char *op, dl_tensor *const *ops, int64_t step, dl_dtype dtype,
                   dl_scatter_reduce reduce))
/* ops = {t, mask}: value's bytes where mask */
DL_SLOT(int, masked_fill, (const char *op, dl_tensor *const *ops, uint64_t bytes))
/* src's elements where mask (both contiguous, same numel), or without src
** the coordinates of mask's set elements, as nonzero gives them */
DL_SLOT(dl_tensor *, compact, (const char *op, const dl_tensor *src, const dl_tensor *mask))
/* in contiguous t: zeroes below (upper) or above the diagonal diag */
DL_SLOT(int, tri, (const char *op, dl_tensor *t, int64_t diag, int upper))
/* the first k of each slice of x along dim d, ascending or descending, into
** contiguous values and int64 indices */
DL_SLOT(int, sort, (const char *op, const dl_tensor *x, int d, int desc, int64_t k,
                    dl_tensor *values, dl_tensor *indices))

/* -- Losses, embedding, dropout, normalisation (nn/, after the op's checks) ---- */

/* nll_loss (CLS_LOG_PROBS) or cross_entropy (CLS_LOGITS) of input over [N, C, S] */
DL_SLOT(dl_tensor *, cls_forward,
        (const char *op, cls_input logits, const dl_tensor *input, const dl_tensor *target,
         const dl_tensor *weight, int64_t ignore, double ls, dl_loss_reduction reduction,
         int64_t N, int64_t C, int64_t S, const int64_t *tshape, int tnd))
DL_SLOT(dl_tensor *, cls_backward,
        (const char *op, cls_input logits, const dl_tensor *grad_out, const dl_tensor *input,
         const dl_tensor *target, const dl_tensor *weight, int64_t ignore, double ls,
         dl_loss_reduction reduction, int64_t N, int64_t C, int64_t S, int checked))
DL_SLOT(dl_tensor *, mse, (const char *op, const dl_tensor *input, const dl_tensor *target,
                           dl_loss_reduction reduction))
DL_SLOT(dl_tensor *, mse_backward,
        (const char *op, const dl_tensor *grad_out, const dl_tensor *input,
         const dl_tensor *target, dl_loss_reduction reduction))
DL_SLOT(dl_tensor *, embedding, (const char *op, const dl_tensor *weight,
                                 const dl_tensor *indices, const int64_t *shape, int ndim))
DL_SLOT(dl_tensor *, embedding_backward,
        (const char *op, const dl_tensor *grad_out, const dl_tensor *indices,
         int64_t num_weights, int64_t padding_idx, int scale))
DL_SLOT(int, dropout, (const char *op, const dl_tensor *x, double p, dl_tensor **out,
                       dl_tensor **mask))
DL_SLOT(dl_tensor *, dropout_backward, (const char *op, const dl_tensor *grad_out,
                                        const dl_tensor *mask, double p))
DL_SLOT(int, layer_norm,
        (const char *op, const dl_tensor *x, int64_t M, int64_t N, const int64_t *ss,
         const dl_tensor *w, const dl_tensor *b, double eps, dl_tensor **out, dl_tensor **mean,
         dl_tensor **rstd))
DL_SLOT(int, layer_norm_backward,
        (const char *op, const dl_tensor *grad_out, const dl_tensor *x, const int64_t *ns,
         int nnorm, int64_t M, int64_t N, const dl_tensor *mean, const dl_tensor *rstd,
         const dl_tensor *w, int need_x, int need_w, int need_b, dl_tensor **gx,
         dl_tensor **gw, dl_tensor **gb))
DL_SLOT(int, batch_norm,
        (const char *op, const dl_tensor *x, const dl_tensor *w, const dl_tensor *b,
         dl_tensor *rm, dl_tensor *rv, int training, double momentum, double eps, int64_t N,
         int64_t C, int64_t S, dl_tensor **out, dl_tensor **save_mean,
         dl_tensor **save_invstd))
DL_SLOT(int, batch_norm_backward,
        (const char *op, const dl_tensor *grad_out, const dl_tensor *x, const dl_tensor *w,
         const dl_tensor *save_mean, const dl_tensor *save_invstd, int training, int need_x,
         int need_w, int need_b, int64_t N, int64_t C, int64_t S, dl_tensor **gx,
         dl_tensor **gw, dl_tensor **gb))

/* -- Convolution, pooling, attention (geometries: core/kernel_args.h) --------- */

/* conv2d over the geometry g: out, or the gradients asked for (need_*) */
DL_SLOT(dl_tensor *, conv2d, (const char *op, int dev, const conv_geom *g, const dl_tensor *x,
                              const dl_tensor *w, const dl_tensor *b))
DL_SLOT(int, conv2d_backward,
        (const char *op, int dev, const conv_geom *g, const dl_tensor *grad_out,
         const dl_tensor *x, const dl_tensor *w, int need_x, int need_w, int need_b,
         dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b))
/* max pooling (values and int64 indices) and average pooling over the
** geometry g, and their backwards (max's from the indices) */
DL_SLOT(int, max_pool, (const char *op, int dev, const pool_geom *g, const dl_tensor *x,
                        dl_tensor **out, dl_tensor **indices))
DL_SLOT(dl_tensor *, max_pool_backward, (const char *op, int dev, const dl_tensor *grad_out,
                                         const dl_tensor *x, const dl_tensor *indices))
DL_SLOT(dl_tensor *, avg_pool, (const char *op, int dev, const pool_geom *g,
                                const dl_tensor *x))
DL_SLOT(dl_tensor *, avg_pool_backward, (const char *op, int dev, const pool_geom *g,
                                         const dl_tensor *grad_out, const dl_tensor *x))
/* fused attention over the geometry g (operands contiguous in g->kd, the
** mask bool or g->kd): out and the rows' log-sum-exp, and the gradients
** asked for, of the broadcast batch shape (the caller sums broadcast dims) */
DL_SLOT(int, sdpa, (const char *op, const sdpa_geom *g, const dl_tensor *q, const dl_tensor *k,
                    const dl_tensor *v, const dl_tensor *mask, dl_tensor **out,
                    dl_tensor **lse))
DL_SLOT(int, sdpa_backward,
        (const char *op, const sdpa_geom *g, const dl_tensor *grad_out, const dl_tensor *q,
         const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask, const dl_tensor *out,
         const dl_tensor *lse, int need_q, int need_k, int need_v, dl_tensor **gq,
         dl_tensor **gk, dl_tensor **gv))

/* -- Images (nn/image_resize.c, nn/image_color.c; CPU only) ------------------- */

/* out [N, C, oh, ow] (contiguous, uint8 or float32) = the resampling g of
** the planes of x (uint8 or float32, strided) */
DL_SLOT(int, image_resample, (const char *op, const dl_tensor *x, const image_geom *g,
                              dl_tensor *out))
/* out (contiguous, x's shape and dtype) = x flipped along its last dim */
DL_SLOT(int, image_hflip, (const char *op, const dl_tensor *x, dl_tensor *out))
/* out (x's shape, strided; may be x) = (x * scale - mean[c]) / std[c] along
** dim -3 (mean, std: NULL for none), uint8 or float32 to float32, or float32
** to uint8 (truncated, clamped to [0, 255]) */
DL_SLOT(int, image_convert, (const char *op, const dl_tensor *x, float scale, const float *mean,
                             const float *std, dl_tensor *out))
/* out (contiguous, x's shape and dtype) = x of 1 or 3 channels adjusted by
** factor (checked) */
DL_SLOT(int, image_adjust, (const char *op, dl_adjust_kind kind, double factor,
                            const dl_tensor *x, dl_tensor *out))

/* -- Random numbers, optimizer steps ------------------------------------------- */

/* contiguous t from the Philox stream (seed, block base) */
DL_SLOT(int, philox_fill, (const char *op, dl_tensor *t, philox_kind kind, uint64_t seed,
                           uint64_t base, double a, double b, int64_t low, uint64_t range))
/* the optimizers' steps over n parameters at once (PyTorch's foreach):
** one pass over every element of them */
DL_SLOT(int, sgd, (const char *op, const sgd_item *items, int n, double lr, double momentum,
                   double dampening, double wd, int nesterov, int maximize))
DL_SLOT(int, adam, (const char *op, const adam_item *items, int n, double lr, double b1,
                    double b2, double eps, double wd, int decoupled, int maximize))
