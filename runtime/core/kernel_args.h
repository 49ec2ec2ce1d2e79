/*
** kernel_args.h -- what an op works out and hands a device's kernel
** (core/device_slots.h) when plain arguments do not suffice: the plan of a
** batched product, the geometry of a convolution, a pooling and an
** attention.  The op files above fill them (ops/linalg.c, nn/conv.c,
** nn/pool.c, nn/attention.c); the devices only read them, so they live
** here, below both.
*/
#ifndef DL_CORE_KERNEL_ARGS_H
#define DL_CORE_KERNEL_ARGS_H

#include "core/internal.h"

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
  int ta, tb;                                   /* BLAS path only: CblasNoTrans or CblasTrans */
  int64_t lda, ldb;
  const char *a, *b;
  char *c;
  double alpha, beta;
} mm_plan;

/* A conv2d over x [N, C, H, W] with weights [O, Cg, kh, kw]. */
typedef struct conv_geom {
  int f64;                      /* double, else float */
  int64_t es;                   /* element size */
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, groups;
  int64_t Cg, Og, K, HW;        /* K = Cg * kh * kw rows of a column matrix */
  int64_t padn;                 /* elements of the padded input, 0 if none */
  int pointwise;                /* 1x1, stride 1, no padding: x is its own */
} conv_geom;

/* A max or average pooling of NC planes of H x W to Ho x Wo. */
typedef struct pool_geom {
  int f64;
  int64_t NC, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo;
  int ceil_mode, count_include_pad;
  int64_t divisor;  /* 0: none */
} pool_geom;

enum { SDPA_MASK_NONE = 0, SDPA_MASK_BOOL = 1, SDPA_MASK_ADD = 2 };

/* Scaled dot product attention: q [..., L, E], k [..., S, E], v [..., S, Ev]
** and the mask, each contiguous in the compute dtype (the mask: bool, or
** additive in the compute dtype), with their batch dims broadcast to
** bshape (nb = its product: the flat batch index b runs over it). */
typedef struct sdpa_geom {
  int kd;                           /* compute dtype: float32 or float64 */
  int bnd;                          /* batch dims */
  int64_t bshape[DL_MAX_DIMS];
  int64_t nb, L, S, E, Ev;
  /* per batch dim, each operand's stride in elements (0: broadcast) */
  int64_t qbs[DL_MAX_DIMS], kbs[DL_MAX_DIMS], vbs[DL_MAX_DIMS], mbs[DL_MAX_DIMS];
  /* q's, k's and v's row strides (their columns are adjacent): a head's
  ** rows read in place from a fused [B, T, 3C] projection */
  int64_t qrs, krs, vrs;
  int64_t m_ls, m_ss;               /* the mask's strides along L and S */
  int mask;                         /* SDPA_MASK_* */
  int causal;                       /* row i sees keys j <= i (top-left) */
  double scale;
  /* dropout of the probabilities: kept when philox_unit24 of word j % 4 of
  ** block base + (b * L + i) * ceil(S / 4) + j / 4 under seed < 1 - p */
  double dropout_p;
  uint64_t seed, base;
} sdpa_geom;

/* An image resampling: each plane of x [N, C, H, W] (strides in elements),
** its window [top, top + h) x [left, left + w) resized to rh x rw, of
** which rows [otop, otop + oh) and columns [oleft, oleft + ow) are written
** to out [N, C, oh, ow], flipped left-right when flip.  A float32 out gets
** (v * scale - mean[c]) / std[c] of each value v (mean and std NULL: v *
** scale); a dim whose sizes agree (h == rh) is not resampled. */
typedef struct image_geom {
  int64_t N, C, sn, sc, sh, sw;
  int64_t top, left, h, w, rh, rw, otop, oleft, oh, ow;
  dl_interp interp;
  int antialias, flip;
  float scale;
  const float *mean, *std;  /* C values each, or NULL */
} image_geom;

/* One parameter of a multi-tensor optimizer step (nn/optim.c): its
** gradient and state, contiguous, of its shape, dtype and device (every
** item of a call shares the dtype and device); Adam's bias corrections are
** per parameter, as each counts its own steps. */
typedef struct sgd_item {
  dl_tensor *p, *buf;           /* buf: NULL without momentum */
  const dl_tensor *g;
  int first;                    /* the step that starts buf from the gradient */
} sgd_item;
typedef struct adam_item {
  dl_tensor *p, *m, *v, *vmax;  /* vmax: NULL without amsgrad */
  const dl_tensor *g;
  double bc1, bc2_sqrt;         /* 1 - beta1^step, sqrt(1 - beta2^step) */
} adam_item;

#endif
