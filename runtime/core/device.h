/*
** device.h -- the one interface between what an op means and the device
** that runs it.
**
** An op file checks its arguments, works out shapes, dtypes, promotion and
** autograd once, then calls the kernel of the device its tensors lie on
** through this table, as process groups go through pg_ops (dist/pg.h).  Each
** device fills one dl_device: the CPU's (cpu/backend.c, from the kernels of
** the op files) and CUDA's (cuda/backend.c, over libddplua_cuda.so), each
** registered when its library part is loaded.  No op file tests a device
** number, and the core never calls into a device's glue.
**
** Every kernel takes the op's name for its errors, its operands already
** checked, broadcast and of the dtypes it asks for, and returns 0 or -1
** with the error set (a tensor, or NULL with the error set).
*/
#ifndef DL_DEVICE_H
#define DL_DEVICE_H

#include "core/internal.h"

struct mm_plan;    /* ops/linalg.h: a batched product as ops/linalg.c plans it */
struct conv_geom;  /* nn/conv.h: a conv2d as nn/conv.c works it out */
struct pool_geom;  /* nn/pool.h: a pooling as nn/pool.c works it out */
struct sdpa_geom;  /* nn/attention.h: an attention as nn/attention.c works it out */

typedef enum dl_device_kind { DL_DEVICE_CPU = 0, DL_DEVICE_CUDA = 1, DL_DEVICE_KINDS } dl_device_kind;

typedef struct dl_device {
  const char *name;  /* "cpu", "cuda" */
  /* Elementwise kernels read and write bfloat16/float16 themselves (one
  ** rounding, no float32 copies); else the op computes in float32. */
  int half_native;
  /* Its tensors lie in host memory (a shared mapping can hold them). */
  int host_memory;

  /* -- Memory ---------------------------------------------------------- */
  /* A new contiguous tensor on device index dev, uninitialised. */
  dl_tensor *(*new_tensor)(int dev, int dtype, const int64_t *shape, int ndim);
  /* n bytes between host and device memory (dev: whose copy engine). */
  int (*copy_bytes)(const char *op, void *dst, const void *src, size_t n, int dev);
  /* t on device index to (-1: the CPU), a contiguous copy; this device is
  ** the one t or the destination lies on. */
  dl_tensor *(*move)(const dl_tensor *t, int to);

  /* -- Elementwise: ops[0] is the output ---------------------------------- */
  int (*cast)(const char *op, dl_tensor *dst, const dl_tensor *src);
  /* value's bytes in t's dtype into every element of t */
  int (*fill)(const char *op, dl_tensor *t, uint64_t bytes);
  /* binop (dl_binop) computed in dtype; ops = {out, a, b} */
  int (*binary)(const char *op, int binop, int dtype, dl_tensor *const *ops);
  /* unop (dl_unop) computed in dtype; ops = {out, a} */
  int (*unary)(const char *op, int unop, int dtype, dl_tensor *const *ops);
  /* ops = {out, a}; NaN bounds are open */
  int (*clamp)(const char *op, int dtype, double lo, double hi, dl_tensor *const *ops);
  /* ops = {out, cond, a, b}, a and b in out's dtype */
  int (*where)(const char *op, dl_tensor *const *ops);
  /* ops = {out, g, x}: out = g * act'(x), act a dl_unop */
  int (*act_backward)(const char *op, int act, int dtype, dl_tensor *const *ops);
  /* contiguous t[i] = i < split ? start + i * step : end - (n - 1 - i) * step */
  int (*ramp)(const char *op, dl_tensor *t, double start, double step, double end,
              int64_t split);

  /* -- Linear algebra ----------------------------------------------------------- */
  /* the planned batched product, through BLAS-style calls (blas) or the
  ** integer path; out is the plan's contiguous c */
  int (*matmul)(const char *op, int dev, struct mm_plan *p, int blas);
  /* a . b of 1-D a and b (checked) as a 0-dim tensor */
  dl_tensor *(*dot)(const char *op, const dl_tensor *a, const dl_tensor *b);

  /* -- Reductions, scans ------------------------------------------------------ */
  /* out = redop (dl_redop) of x over the dims marked in red, N elements
  ** each, through ops/reduce.c's kernel kop */
  int (*reduce)(const char *op, const dl_tensor *x, const int *red, int kop, int redop,
                double param, int64_t N, dl_tensor *out);
  /* max (mx) or min of x along dim d: values (may be NULL) and int64 indices */
  int (*argreduce)(const char *op, const dl_tensor *x, int d, int mx, dl_tensor *values,
                   dl_tensor *indices);
  /* kind 0 cumsum, 1 cumprod, 2 softmax, 3 log_softmax along the middle dim
  ** of contiguous [outer, n, inner] x into y */
  int (*dimop)(const char *op, int kind, const dl_tensor *x, dl_tensor *y, int64_t outer,
               int64_t n, int64_t inner);

  /* -- Indexing, sorting ------------------------------------------------------ */
  /* every element of index (any layout) in [0, size), else DL_EINDEX naming dim */
  int (*index_check)(const char *op, const dl_tensor *index, int dim, int64_t size);
  /* smallest and largest value of a non-empty index */
  int (*index_minmax)(const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi);
  /* ops = {out, src with stride 0 along the dim, index}: out = src[index] */
  int (*take)(const char *op, dl_tensor *const *ops, int64_t step, int es);
  /* ops = {dst with stride 0 along the dim, src, index}: dst[index] = (+=) src */
  int (*put)(const char *op, dl_tensor *const *ops, int64_t step, int dtype, int reduce);
  /* ops = {t, mask}: value's bytes where mask */
  int (*masked_fill)(const char *op, dl_tensor *const *ops, uint64_t bytes);
  /* src's elements where mask (both contiguous, same numel), or without src
  ** the coordinates of mask's set elements, as nonzero gives them */
  dl_tensor *(*compact)(const char *op, const dl_tensor *src, const dl_tensor *mask);
  /* in contiguous t: zeroes below (upper) or above the diagonal diag */
  int (*tri)(const char *op, dl_tensor *t, int64_t diag, int upper);
  /* the first k of each slice of x along dim d, ascending or descending,
  ** into contiguous values and int64 indices */
  int (*sort)(const char *op, const dl_tensor *x, int d, int desc, int64_t k,
              dl_tensor *values, dl_tensor *indices);

  /* -- Network kernels (nn/, after the op's checks; see there) ---------------- */
  dl_tensor *(*cls_forward)(const char *op, int logits, const dl_tensor *input,
                            const dl_tensor *target, const dl_tensor *weight, int64_t ignore,
                            double ls, int reduction, int64_t N, int64_t C, int64_t S,
                            const int64_t *tshape, int tnd);
  dl_tensor *(*cls_backward)(const char *op, int logits, const dl_tensor *grad_out,
                             const dl_tensor *input, const dl_tensor *target,
                             const dl_tensor *weight, int64_t ignore, double ls, int reduction,
                             int64_t N, int64_t C, int64_t S, int checked);
  dl_tensor *(*mse)(const char *op, const dl_tensor *input, const dl_tensor *target,
                    int reduction);
  dl_tensor *(*mse_backward)(const char *op, const dl_tensor *grad_out, const dl_tensor *input,
                             const dl_tensor *target, int reduction);
  dl_tensor *(*embedding)(const char *op, const dl_tensor *weight, const dl_tensor *indices,
                          const int64_t *shape, int ndim);
  dl_tensor *(*embedding_backward)(const char *op, const dl_tensor *grad_out,
                                   const dl_tensor *indices, int64_t num_weights,
                                   int64_t padding_idx, int scale);
  int (*dropout)(const char *op, const dl_tensor *x, double p, dl_tensor **out, dl_tensor **mask);
  dl_tensor *(*dropout_backward)(const char *op, const dl_tensor *grad_out, const dl_tensor *mask,
                                 double p);
  int (*layer_norm)(const char *op, const dl_tensor *x, int64_t M, int64_t N, const int64_t *ss,
                    const dl_tensor *w, const dl_tensor *b, double eps, dl_tensor **out,
                    dl_tensor **mean, dl_tensor **rstd);
  int (*layer_norm_backward)(const char *op, const dl_tensor *grad_out, const dl_tensor *x,
                             const int64_t *ns, int nnorm, int64_t M, int64_t N,
                             const dl_tensor *mean, const dl_tensor *rstd, const dl_tensor *w,
                             int need_x, int need_w, int need_b, dl_tensor **gx, dl_tensor **gw,
                             dl_tensor **gb);
  int (*batch_norm)(const char *op, const dl_tensor *x, const dl_tensor *w, const dl_tensor *b,
                    dl_tensor *rm, dl_tensor *rv, int training, double momentum, double eps,
                    int64_t N, int64_t C, int64_t S, dl_tensor **out, dl_tensor **save_mean,
                    dl_tensor **save_invstd);
  int (*batch_norm_backward)(const char *op, const dl_tensor *grad_out, const dl_tensor *x,
                             const dl_tensor *w, const dl_tensor *save_mean,
                             const dl_tensor *save_invstd, int training, int need_x, int need_w,
                             int need_b, int64_t N, int64_t C, int64_t S, dl_tensor **gx,
                             dl_tensor **gw, dl_tensor **gb);

  /* conv2d over the geometry g: out, or the gradients asked for (need_*) */
  dl_tensor *(*conv2d)(const char *op, int dev, const struct conv_geom *g, const dl_tensor *x,
                       const dl_tensor *w, const dl_tensor *b);
  int (*conv2d_backward)(const char *op, int dev, const struct conv_geom *g,
                         const dl_tensor *grad_out, const dl_tensor *x, const dl_tensor *w,
                         int need_x, int need_w, int need_b, dl_tensor **grad_x,
                         dl_tensor **grad_w, dl_tensor **grad_b);
  /* pooling over the geometry g: max (values and int64 indices) and average,
  ** and their backwards (max's from the indices) */
  int (*max_pool)(const char *op, int dev, const struct pool_geom *g, const dl_tensor *x,
                  dl_tensor **out, dl_tensor **indices);
  dl_tensor *(*max_pool_backward)(const char *op, int dev, const dl_tensor *grad_out,
                                  const dl_tensor *x, const dl_tensor *indices);
  dl_tensor *(*avg_pool)(const char *op, int dev, const struct pool_geom *g, const dl_tensor *x);
  dl_tensor *(*avg_pool_backward)(const char *op, int dev, const struct pool_geom *g,
                                  const dl_tensor *grad_out, const dl_tensor *x);

  /* fused attention over the geometry g (operands contiguous in g->kd, the
  ** mask bool or g->kd): out and the rows' log-sum-exp, and the gradients
  ** asked for, of the broadcast batch shape */
  int (*sdpa)(const char *op, const struct sdpa_geom *g, const dl_tensor *q, const dl_tensor *k,
              const dl_tensor *v, const dl_tensor *mask, dl_tensor **out, dl_tensor **lse);
  int (*sdpa_backward)(const char *op, const struct sdpa_geom *g, const dl_tensor *grad_out,
                       const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                       const dl_tensor *mask, const dl_tensor *out, const dl_tensor *lse,
                       int need_q, int need_k, int need_v, dl_tensor **gq, dl_tensor **gk,
                       dl_tensor **gv);

  /* -- Random numbers -------------------------------------------------------- */
  /* contiguous t from the Philox stream (seed, block base): kind and its
  ** parameters as core/random.c's generators define them */
  int (*philox_fill)(const char *op, dl_tensor *t, int kind, uint64_t seed, uint64_t base,
                     double a, double b, int64_t low, uint64_t range);

  /* -- Optimizer steps (after the op's checks) ------------------------------ */
  int (*sgd)(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *buf, double lr,
             double momentum, double dampening, double wd, int nesterov, int first,
             int maximize);
  int (*adam)(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v,
              dl_tensor *vmax, double lr, double b1, double b2, double eps, double wd,
              double bc1, double bc2_sqrt, int decoupled, int maximize);
} dl_device;

/* The CPU's kernels are the cpu_* functions defined beside the ops that use
** them, declared in their layer's private header (core/internal.h,
** ops/forward.h, ops/linalg.h, autograd/autograd.h, nn/nn.h); their table is
** cpu/backend.c's, which sits above every layer. */

/* -- The registry ------------------------------------------------------------ */

/* Makes d the device of its kind (once, when that part of the library is
** ready: the CPU's at load, CUDA's when libddplua_cuda.so is loaded). */
DL_HIDDEN void device_register(dl_device_kind kind, const dl_device *d);
/* The device for index dev (-1: the CPU, k: cuda:k); NULL with DL_EDEVICE
** when that kind of device is not there. */
DL_HIDDEN const dl_device *device_get(const char *op, int dev);
/* The device t lies on (t checked by the caller). */
DL_HIDDEN const dl_device *device_of(const char *op, const dl_tensor *t);

/* The device index an op on ts[0..n) runs on (-1: the CPU); a CPU 0-dim
** tensor (a Lua number) goes with any device, as in PyTorch.  -2 with the
** error set when the tensors lie on different devices, or one is NULL or
** freed; op_device_opt skips NULLs (optional arguments: a bias). */
DL_HIDDEN int op_device(const char *op, int n, const dl_tensor *const *ts);
DL_HIDDEN int op_device_opt(const char *op, int n, const dl_tensor *const *ts);
/* A 0-dim CPU tensor: a scalar that rides along with any device's kernel. */
DL_HIDDEN int is_host_scalar(const dl_tensor *t);
/* A new tensor on device dev (-1: the CPU), uninitialised / filled with v. */
DL_HIDDEN dl_tensor *tensor_new_on(int dev, int dtype, const int64_t *shape, int ndim);
DL_HIDDEN dl_tensor *full_on(int dev, const int64_t *shape, int ndim, int dtype, double v);

/* -- The CPU's kernels (core/device.h), defined in this layer ----------------- */

DL_HIDDEN dl_tensor *cpu_new_tensor(int dev, int dtype, const int64_t *shape, int ndim);
DL_HIDDEN int cpu_copy_bytes(const char *op, void *dst, const void *src, size_t n, int dev);
DL_HIDDEN int cpu_cast(const char *op, dl_tensor *dst, const dl_tensor *src);
DL_HIDDEN int cpu_fill(const char *op, dl_tensor *t, uint64_t bytes);
DL_HIDDEN int cpu_ramp(const char *op, dl_tensor *t, double start, double step, double end,
                       int64_t split);
DL_HIDDEN int cpu_philox_fill(const char *op, dl_tensor *t, int kind, uint64_t seed,
                              uint64_t base, double a, double b, int64_t low, uint64_t range);

#endif
