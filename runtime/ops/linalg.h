/*
** linalg.h -- the matmul plan ops/linalg.c hands a device's matmul kernel
** (core/device.h), and the plan steps the kernels share.
*/
#ifndef DL_OPS_LINALG_H
#define DL_OPS_LINALG_H

#include <cblas.h>
#include <limits.h>

#include "core/device.h"

/* The largest size or stride BLAS takes (its integer type). */
#define BLAS_MAX ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))

/* out[i] = alpha * A[i] @ B[i] + beta * out[i] for every batch index i: out
** is contiguous [nbatch, m, n]; A and B are strided, their batch dims
** broadcast (stride 0). */
typedef struct mm_plan {
  int dtype;
  int nb;                                       /* batch dims */
  int64_t bshape[DL_MAX_DIMS];
  int64_t ast[DL_MAX_DIMS], bst[DL_MAX_DIMS];   /* batch strides, elements */
  int64_t nbatch, m, k, n;
  int64_t as0, as1, bs0, bs1;                   /* matrix strides, elements */
  CBLAS_TRANSPOSE ta, tb;                       /* BLAS path only */
  int64_t lda, ldb;
  const char *a, *b;
  char *c;
  double alpha, beta;
} mm_plan;

/* How BLAS-style kernels read a and b (ta, lda, tb, ldb); -1 when a
** matrix's strides fit neither layout or a leading dimension is too large. */
DL_HIDDEN int plan_layouts(mm_plan *p);
/* Folds the batches into one [nbatch * m, k] product where B is the same
** for every batch and A's rows continue at one stride. */
DL_HIDDEN void fold_batches(mm_plan *p);
/* a . b (1-D, checked) as the product [1, n] @ [n, 1]: for devices whose
** dot is their matmul. */
DL_HIDDEN dl_tensor *dot_by_matmul(const char *op, const dl_tensor *a, const dl_tensor *b);
DL_HIDDEN int cpu_matmul(const char *op, int dev, mm_plan *p, int blas);
DL_HIDDEN dl_tensor *cpu_dot(const char *op, const dl_tensor *a, const dl_tensor *b);

#endif
