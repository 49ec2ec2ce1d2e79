/*
** forward.h -- the ops' computations without autograd (fw_*); the public
** dl_* versions in grad_*.c run them with grad mode off, then record.
*/
#ifndef DL_FORWARD_H
#define DL_FORWARD_H

#include "core/internal.h"

DL_HIDDEN dl_tensor *fw_view(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_reshape(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_transpose(const dl_tensor *t, int d0, int d1);
DL_HIDDEN dl_tensor *fw_permute(const dl_tensor *t, const int *perm, int
    ndim);
DL_HIDDEN dl_tensor *fw_narrow(const dl_tensor *t, int dim, int64_t start,
    int64_t length);
DL_HIDDEN dl_tensor *fw_select(const dl_tensor *t, int dim, int64_t index);
DL_HIDDEN dl_tensor *fw_squeeze(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_squeeze_all(const dl_tensor *t);
DL_HIDDEN dl_tensor *fw_unsqueeze(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_expand(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_flatten(const dl_tensor *t, int start_dim, int
    end_dim);
DL_HIDDEN dl_tensor *fw_as_strided(const dl_tensor *t, const int64_t *shape,
    const int64_t *strides, int ndim, int64_t offset);
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

#endif
