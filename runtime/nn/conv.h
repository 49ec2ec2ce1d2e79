/*
** conv.h -- the geometry nn/conv.c works out for a conv2d, which it hands
** to its device's kernels (core/device.h), and what those kernels share.
*/
#ifndef DL_NN_CONV_H
#define DL_NN_CONV_H

#include "nn/nn.h"

typedef struct conv_geom {
  int f64;                      /* double, else float */
  int64_t es;                   /* element size */
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, groups;
  int64_t Cg, Og, K, HW;        /* K = Cg * kh * kw rows of a column matrix */
  int64_t padn;                 /* elements of the padded input, 0 if none */
  int pointwise;                /* 1x1, stride 1, no padding: x is its own */
} conv_geom;

/* Where both backwards end: on failure the grads already handed out go;
** the n temporaries go either way.  Returns rc. */
DL_HIDDEN int conv_backward_done(int rc, dl_tensor **grad_x, dl_tensor **grad_w,
                                 dl_tensor **grad_b, dl_tensor *const *tmp, int n);
DL_HIDDEN dl_tensor *cpu_conv2d(const char *op, int dev, const conv_geom *g, const dl_tensor *x,
                                const dl_tensor *w, const dl_tensor *b);
DL_HIDDEN int cpu_conv2d_backward(const char *op, int dev, const conv_geom *g,
                                  const dl_tensor *grad_out, const dl_tensor *x,
                                  const dl_tensor *w, int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b);

#endif
