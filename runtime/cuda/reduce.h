/*
** cuda/reduce.h -- the reductions, max/min with indices, scans and
** softmax of reduce.c and scan.c on CUDA tensors (cuda/reduce.c hands
** them to runtime/cuda/reduce.cu, scan.cu and sort.cu), and sort.c's sort.
*/
#ifndef DL_CUDA_REDUCE_H
#define DL_CUDA_REDUCE_H

#include "core/internal.h"

/* out = redop (dl_redop) of x over the dims marked in red: kop is reduce.c's
** pass (its K_* order is dlc.h's DLC_K_*), x already in the dtype the pass
** reads, N the number of reduced elements, out contiguous on x's device. */
DL_HIDDEN int cuda_reduce(const char *op, const dl_tensor *x, const int *red, int kop,
                          int redop, double param, int64_t N, dl_tensor *out);
/* Max (mx) or min of x along dim d: values (may be NULL: not wanted) in x's
** dtype and int64 indices, both contiguous on x's device. */
DL_HIDDEN int cuda_argreduce(const char *op, const dl_tensor *x, int d, int mx,
                             dl_tensor *values, dl_tensor *indices);
/* scan.c's dim ops along the middle dim of contiguous [outer, n, inner] x
** and y of dtype (float32, float64, or int64 for the scans): kind 0 cumsum,
** 1 cumprod, 2 softmax, 3 log_softmax. */
DL_HIDDEN int cuda_dimop(const char *op, int kind, const dl_tensor *x, dl_tensor *y,
                         int64_t outer, int64_t n, int64_t inner);
/* sort.c's sort and topk on x's device: the first k of each slice along
** dim d (ascending, or descending when desc) into values and indices. */
DL_HIDDEN int cuda_sort(const char *op, const dl_tensor *x, int d, int desc, int64_t k,
                        dl_tensor *values, dl_tensor *indices);

#endif
