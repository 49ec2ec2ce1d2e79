/*
** linalg.h -- the steps of a matmul plan (core/kernel_args.h: mm_plan)
** that ops/linalg.c and the devices' matmul kernels share.
*/
#ifndef DL_OPS_LINALG_H
#define DL_OPS_LINALG_H

#include <cblas.h>
#include <limits.h>

#include "core/device.h"

/* The largest size or stride BLAS takes (its integer type). */
#define BLAS_MAX ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))

/* How BLAS-style kernels read a and b (ta, lda, tb, ldb); -1 when a
** matrix's strides fit neither layout or a leading dimension is too large. */
DL_HIDDEN int plan_layouts(mm_plan *p);
/* Folds the batches into one [nbatch * m, k] product where B is the same
** for every batch and A's rows continue at one stride. */
DL_HIDDEN void fold_batches(mm_plan *p);
/* a . b (1-D, checked) as the product [1, n] @ [n, 1]: for devices whose
** dot is their matmul. */
DL_HIDDEN dl_tensor *dot_by_matmul(const char *op, const dl_tensor *a, const dl_tensor *b);

#endif
