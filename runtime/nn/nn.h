/*
** nn.h -- what the neural network kernels (nn/conv.c, nn/pool.c, nn/norm.c,
** nn/loss.c, nn/embedding_dropout.c) and their CUDA halves share: operand checks, the
** compute dtype, pairs of parameters, handing out results.
*/
#ifndef DL_NN_H
#define DL_NN_H

#include <stdio.h>

#include "core/device.h"

/* The dtype a kernel computes in: float64, or float32 for float32 and the
** half types (rounded once at the end). */
static inline int nn_kdtype(int dtype) {
  return dtype == DL_FLOAT64 ? DL_FLOAT64 : DL_FLOAT32;
}

/* Checks that t is a floating point tensor (on any device), of dtype `want`
** when want >= 0; `what` names it in messages ("weight"). */
static inline int nn_check_float(const char *op, const char *what,
                                 const dl_tensor *t, int want) {
  if (!t) return dl_err(EM_NULLARG, op, what);
  if (check_tensor_any(op, t)) return -1;
  if (!dl_dtype_is_float(t->dtype))
    return dl_err(EM_DTYPE_NEED_FLOAT, op, fmt_dtype(t->dtype));
  if (want >= 0 && t->dtype != want)
    return dl_err(EM_DTYPE_MISMATCH, op, fmt_dtype(want), fmt_dtype(t->dtype));
  return 0;
}

/* Indices and targets: int64 or int32. */
static inline int nn_check_index(const char *op, const char *what,
                                 const dl_tensor *t) {
  if (!t) return dl_err(EM_NULLARG, op, what);
  if (check_tensor_any(op, t)) return -1;
  if (t->dtype != DL_INT64 && t->dtype != DL_INT32)
    return dl_err(EM_DTYPE_NEED_INT, op, what, fmt_dtype(t->dtype));
  return 0;
}

/* The device the op on up to five tensors runs on (NULLs skipped), -2 with
** the error set when they lie on different devices. */
static inline int nn_device(const char *op, const dl_tensor *a, const dl_tensor *b,
                            const dl_tensor *c, const dl_tensor *d, const dl_tensor *e) {
  const dl_tensor *ts[5] = {a, b, c, d, e};
  return op_device_opt(op, 5, ts);
}

/* A fresh contiguous copy of t in dtype kd, made with dl_copy_ so that no
** autograd node is recorded (the kernels know nothing of autograd). */
static inline dl_tensor *nn_copy(const dl_tensor *t, int kd) {
  dl_tensor *c = tensor_new_on(t->storage->device, kd, t->shape, t->ndim);
  if (c && fw_copy_(c, t)) {
    dl_tensor_release(c);
    return NULL;
  }
  return c;
}

/* A contiguous tensor of dtype kd with t's values: t itself (retained) when
** it already is one.  NULL with the error set. */
static inline dl_tensor *nn_prep(const dl_tensor *t, int kd) {
  if (t->dtype == kd && dl_tensor_is_contiguous(t)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  return nn_copy(t, kd);
}

/* t in dtype kd with adjacent columns and rows BLAS can step over (row
** stride >= columns, no negative stride): t itself when it is so (a view of
** heads into a fused projection), else a contiguous copy. */
static inline dl_tensor *nn_prep_rows(const dl_tensor *t, int kd) {
  int n = t->ndim, ok = t->dtype == kd && n >= 2;
  for (int d = 0; ok && d < n; d++) ok = t->stride[d] >= 0;
  if (ok) {
    int64_t rows = t->shape[n - 2], cols = t->shape[n - 1];
    ok = (cols <= 1 || t->stride[n - 1] == 1) &&
         (rows <= 1 || (t->stride[n - 2] >= cols && t->stride[n - 2] <= INT32_MAX));
  }
  if (ok) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  return nn_copy(t, kd);
}

/* The row stride of such a t ([..., rows, cols]): any stride of a single
** row is as good, and BLAS wants at least the columns. */
static inline int64_t nn_row_stride(const dl_tensor *t) {
  int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
  return rows <= 1 ? (cols > 1 ? cols : 1) : t->stride[t->ndim - 2];
}

/* Indices as contiguous int64. */
static inline dl_tensor *nn_prep_index(const dl_tensor *t) {
  return nn_prep(t, DL_INT64);
}

/* The result in the caller's dtype: work (of the compute dtype) itself, or
** a converted copy; consumes work either way. */
static inline dl_tensor *nn_finish(dl_tensor *work, int dtype) {
  if (!work || work->dtype == dtype) return work;
  dl_tensor *r = nn_copy(work, dtype);
  dl_tensor_release(work);
  return r;
}

static inline int nn_same_shape(const dl_tensor *a, const int64_t *shape,
                                int ndim) {
  if (a->ndim != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (a->shape[i] != shape[i]) return 0;
  return 1;
}

/* A backward's grads to the caller's pointers (those given), which own them
** from then on; *gx, *gw and *gb are cleared so the cleanup skips them. */
static inline void nn_give_grads(dl_tensor **gx, dl_tensor **gw, dl_tensor **gb,
                                 dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b) {
  if (grad_x) *grad_x = *gx;
  if (grad_w) *grad_w = *gw;
  if (grad_b) *grad_b = *gb;
  *gx = *gw = *gb = NULL;
}

/* Checks a parameter pair v[0], v[1] >= min; names it as "stride" etc. */
static inline int nn_check_pair(const char *op, const char *what,
                                const int64_t *v, int64_t min) {
  if (!v) return dl_err(EM_NULLARG, op, what);
  if (v[0] < min || v[1] < min)
    return dl_err(EM_NN_PARAM, op, what,
                  min > 0 ? "positive" : "non-negative", fmt_shape(v, 2));
  return 0;
}

static inline int nn_check_reduction(const char *op, int reduction) {
  if (reduction < DL_LOSS_NONE || reduction > DL_LOSS_SUM)
    return dl_err(EM_NN_REDUCTION, op, reduction);
  return 0;
}

/* nn/embedding_dropout.c, for the CPU and CUDA embeddings alike: -1 with the error
** set (naming the first) when an index is outside [0, rows). */
DL_HIDDEN int nn_check_rows(const char *op, const int64_t *idx, int64_t n, int64_t rows);
/* The positions 0..n of idx sorted by index with a counting sort, stable
** so each row's come in position order: row v's are order[start[v] ..
** start[v + 1]), with order = start + rows + 1 (n more entries). */
DL_HIDDEN void nn_sort_by_index(const int64_t *idx, int64_t n, int64_t rows, int64_t *start);

static inline int64_t nn_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t nn_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The class losses' backward for their autograd node (grad_nn.c), of
** nll_loss (kind CLS_LOG_PROBS) or cross_entropy (CLS_LOGITS): the
** forward checked the targets already, so a device skips the check and
** its sync (a target changed since then gives NaN gradients, never a
** read out of bounds). */
DL_HIDDEN dl_tensor *nn_class_loss_backward(cls_input kind, const dl_tensor *grad_out,
                                            const dl_tensor *input, const dl_tensor *target,
                                            const dl_tensor *weight, int64_t ignore_index,
                                            double label_smoothing, int reduction);

#endif
