/*
** pool.h -- what the pooling kernels share beyond their geometry
** (core/kernel_args.h): the output's shape.
*/
#ifndef DL_NN_POOL_H
#define DL_NN_POOL_H

#include "nn/nn.h"

/* The output shape: x's with H, W replaced. */
DL_HIDDEN void pool_shape(const dl_tensor *x, const pool_geom *g, int64_t *s);

#endif
