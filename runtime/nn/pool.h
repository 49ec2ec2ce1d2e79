/*
** pool.h -- the geometry nn/pool.c works out for a pooling, which it hands
** to its device's kernels (core/device.h).
*/
#ifndef DL_NN_POOL_H
#define DL_NN_POOL_H

#include "nn/nn.h"

typedef struct pool_geom {
  int f64;
  int64_t NC, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo;
  int ceil_mode, count_include_pad;
  int64_t divisor;  /* 0: none */
} pool_geom;

/* The output shape: x's with H, W replaced. */
DL_HIDDEN void pool_shape(const dl_tensor *x, const pool_geom *g, int64_t *s);
DL_HIDDEN int cpu_max_pool(const char *op, int dev, const pool_geom *g, const dl_tensor *x,
                           dl_tensor **out, dl_tensor **indices);
DL_HIDDEN dl_tensor *cpu_max_pool_backward(const char *op, int dev, const dl_tensor *grad_out,
                                           const dl_tensor *x, const dl_tensor *indices);
DL_HIDDEN dl_tensor *cpu_avg_pool(const char *op, int dev, const pool_geom *g,
                                  const dl_tensor *x);
DL_HIDDEN dl_tensor *cpu_avg_pool_backward(const char *op, int dev, const pool_geom *g,
                                           const dl_tensor *grad_out, const dl_tensor *x);

#endif
