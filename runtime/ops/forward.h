/*
** forward.h -- the ops' computations without autograd (fw_*); the public
** dl_* versions in grad_*.c run them with grad mode off, then record.
*/
#ifndef DL_FORWARD_H
#define DL_FORWARD_H

#include "core/device.h"

/* Elementwise (ops/elementwise.c); the in-place forms take the check the
** public op hands down (inplace_check_fn, core/internal.h). */
DL_HIDDEN dl_tensor *fw_binary(int op, const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN int fw_binary_(int op, dl_tensor *a, const dl_tensor *b, inplace_check_fn check);
DL_HIDDEN dl_tensor *fw_unary(int op, const dl_tensor *a);
DL_HIDDEN int fw_unary_(int op, dl_tensor *a, inplace_check_fn check);
DL_HIDDEN dl_tensor *fw_clamp(const dl_tensor *a, double lo, double hi);
DL_HIDDEN int fw_clamp_(dl_tensor *a, double lo, double hi, inplace_check_fn check);
DL_HIDDEN dl_tensor *fw_where(const dl_tensor *cond, const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_reduce(int op, const dl_tensor *t, const int *dims,
    int ndims, int keepdim, double param);
DL_HIDDEN int fw_max_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor
    **values, dl_tensor **indices);
DL_HIDDEN int fw_min_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor
    **values, dl_tensor **indices);
DL_HIDDEN dl_tensor *fw_argmax(const dl_tensor *t, int dim, int keepdim);
DL_HIDDEN dl_tensor *fw_argmin(const dl_tensor *t, int dim, int keepdim);
/* kernel (a device's scan or softmax, by a wrapper of this signature) over
** a contiguous copy of t in dtype cd, along dim, as [outer, n, inner]
** (ops/scan.c; no parameter is called I: complex.h, which cblas.h includes,
** defines it). */
typedef int (*dim_kernel)(const dl_device *dv, const char *op, int kind, const dl_tensor *x,
                          dl_tensor *y, int64_t outer, int64_t n, int64_t inner);
DL_HIDDEN dl_tensor *fw_along_dim(const char *name, const dl_tensor *t, int dim, int cd,
                                  dim_kernel kernel, int kind);
DL_HIDDEN dl_tensor *fw_cumsum(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_cumprod(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_softmax(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_log_softmax(const dl_tensor *t, int dim);
DL_HIDDEN int fw_sort(const dl_tensor *t, int dim, int descending, dl_tensor
    **values, dl_tensor **indices);
DL_HIDDEN int fw_topk(const dl_tensor *t, int64_t k, int dim, int largest,
    int sorted, dl_tensor **values, dl_tensor **indices);
DL_HIDDEN dl_tensor *fw_nonzero(const dl_tensor *t);
DL_HIDDEN dl_tensor *fw_tril(const dl_tensor *t, int64_t diagonal);
DL_HIDDEN dl_tensor *fw_triu(const dl_tensor *t, int64_t diagonal);
DL_HIDDEN dl_tensor *fw_matmul(const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_mm(const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_bmm(const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_addmm(const dl_tensor *c, const dl_tensor *a, const
    dl_tensor *b, double beta, double alpha);
DL_HIDDEN dl_tensor *fw_outer(const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_dot(const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN dl_tensor *fw_index_select(const dl_tensor *t, int dim, const
    dl_tensor *index);
DL_HIDDEN dl_tensor *fw_gather(const dl_tensor *t, int dim, const dl_tensor
    *index);
DL_HIDDEN int fw_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
    const dl_tensor *src, int reduce);
DL_HIDDEN dl_tensor *fw_scatter(const dl_tensor *t, int dim, const dl_tensor
    *index, const dl_tensor *src, int reduce);
DL_HIDDEN int fw_masked_fill_(dl_tensor *t, const dl_tensor *mask, double
    value);
DL_HIDDEN dl_tensor *fw_masked_fill(const dl_tensor *t, const dl_tensor
    *mask, double value);
DL_HIDDEN dl_tensor *fw_masked_select(const dl_tensor *t, const dl_tensor
    *mask);
DL_HIDDEN dl_tensor *fw_cat(dl_tensor *const *ts, int n, int dim);
DL_HIDDEN dl_tensor *fw_stack(dl_tensor *const *ts, int n, int dim);
DL_HIDDEN dl_tensor *fw_one_hot(const dl_tensor *t, int64_t num_classes);
/* g * act'(x) for gelu, gelu_tanh, silu, relu (ops/act_backward.c). */
DL_HIDDEN dl_tensor *fw_act_backward(dl_unop op, const dl_tensor *g, const dl_tensor *x);

#endif
