/*
** forward.h -- the ops' computations without autograd (fw_*); the public
** dl_* versions in grad_*.c run them with grad mode off, then record.
*/
#ifndef DL_FORWARD_H
#define DL_FORWARD_H

#include "core/internal.h"

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

/* -- The CPU's kernels (core/device.h), defined in this layer ----------------- */

DL_HIDDEN int cpu_binary(const char *op, int binop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cpu_unary(const char *op, int unop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cpu_clamp(const char *op, int dtype, double lo, double hi, dl_tensor *const *ops);
DL_HIDDEN int cpu_where(const char *op, dl_tensor *const *ops);
DL_HIDDEN int cpu_reduce(const char *op, const dl_tensor *x, const int *red, int kop, int redop,
                         double param, int64_t N, dl_tensor *out);
DL_HIDDEN int cpu_argreduce(const char *op, const dl_tensor *x, int d, int mx, dl_tensor *values,
                            dl_tensor *indices);
DL_HIDDEN int cpu_dimop(const char *op, int kind, const dl_tensor *x, dl_tensor *y, int64_t outer,
                        int64_t n, int64_t inner);
DL_HIDDEN int cpu_index_check(const char *op, const dl_tensor *index, int dim, int64_t size);
DL_HIDDEN int cpu_index_minmax(const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi);
DL_HIDDEN int cpu_take(const char *op, dl_tensor *const *ops, int64_t step, int es);
DL_HIDDEN int cpu_put(const char *op, dl_tensor *const *ops, int64_t step, int dtype, int reduce);
DL_HIDDEN int cpu_masked_fill(const char *op, dl_tensor *const *ops, uint64_t bytes);
DL_HIDDEN dl_tensor *cpu_compact(const char *op, const dl_tensor *src, const dl_tensor *mask);
DL_HIDDEN int cpu_tri(const char *op, dl_tensor *t, int64_t diag, int upper);
DL_HIDDEN int cpu_sort(const char *op, const dl_tensor *x, int d, int desc, int64_t k,
                       dl_tensor *values, dl_tensor *indices);

#endif
