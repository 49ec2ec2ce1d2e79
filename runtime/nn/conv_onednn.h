/*
** conv_onednn.h -- the CPU's float32 conv2d through oneDNN, for the
** geometries where it measured faster than im2col + sgemm (nn/conv_onednn.c).
*/
#ifndef DL_NN_CONV_ONEDNN_H
#define DL_NN_CONV_ONEDNN_H

#include "nn/conv.h"

/* What both calls return when oneDNN does not take the conv: the caller
** runs its own kernels (nothing was written, no error is set). */
enum { CONV_ONEDNN_SKIP = 1 };

/* y = conv(x, w) + b over the contiguous float32 operands of g (b may be
** NULL).  0 when done, CONV_ONEDNN_SKIP, or -1 with the error set. */
DL_HIDDEN int conv_onednn_forward(const char *op, const conv_geom *g, const float *x,
                                  const float *w, const float *b, float *y);

/* The gradients whose pointers are not NULL (gx, gw, gb), from grad_out gy.
** Same returns as the forward. */
DL_HIDDEN int conv_onednn_backward(const char *op, const conv_geom *g, const float *gy,
                                   const float *x, const float *w, float *gx, float *gw,
                                   float *gb);

#endif
