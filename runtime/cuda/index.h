/*
** cuda/index.h -- the indexing, mask, joining and creation launchers of
** runtime/cuda/index.cu as index.c, sort.c and tensor.c call them.  Each
** returns 0 (or a tensor) with the runtime's error set on failure.
*/
#ifndef DL_CUDA_INDEX_H
#define DL_CUDA_INDEX_H

#include "cuda/cuda.h"

/* index's values (on a device) lie in [0, size): else EM_INDEX_RANGE for
** dim; waits for the device. */
DL_HIDDEN int cuda_index_check(const char *op, const dl_tensor *index, int dim, int64_t size);
/* Smallest and largest value of a non-empty index on a device. */
DL_HIDDEN int cuda_index_minmax(const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi);
/* ops = {out, src with stride 0 along dim, index}: out = src[index]. */
DL_HIDDEN int cuda_take(const char *op, dl_tensor *const *ops, int64_t step, int es);
/* ops = {dst with stride 0 along dim, src, index}: dst[index] = (+=) src. */
DL_HIDDEN int cuda_put(const char *op, dl_tensor *const *ops, int64_t step, int dtype, int reduce);
/* ops = {t, mask}: t = value (its bytes in t's dtype) where mask. */
DL_HIDDEN int cuda_masked_fill(const char *op, dl_tensor *const *ops, uint64_t bytes);
/* The elements of src where mask is set (both contiguous, same numel), or
** without src their coordinates in mask's shape, as nonzero gives them. */
DL_HIDDEN dl_tensor *cuda_compact(const char *op, const dl_tensor *src, const dl_tensor *mask);
/* In contiguous t: zeroes below (upper) or above the diagonal diag. */
DL_HIDDEN int cuda_tri(const char *op, dl_tensor *t, int64_t diag, int upper);
/* Contiguous t[i] = i < split ? start + i * step : end - (n - 1 - i) * step. */
DL_HIDDEN int cuda_ramp(const char *op, dl_tensor *t, double start, double step, double end,
                        int64_t split);

#endif
