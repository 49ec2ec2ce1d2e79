/*
** nn/image.h -- what the image transforms (nn/image_resize.c,
** nn/image_color.c) share: the check of an image operand and its layout as
** planes [N, C, H, W], and handing results to the caller.
*/
#ifndef DL_NN_IMAGE_H
#define DL_NN_IMAGE_H

#include "nn/nn.h"

/* An image [C, H, W] or batch [N, C, H, W] as N * C planes of H x W, with
** its strides in elements (a 3-dim image has N = 1). */
typedef struct image_dims {
  int64_t N, C, H, W;
  int64_t sn, sc, sh, sw;
} image_dims;

/* x checked as an image of a dtype the transforms take (uint8 or float32;
** float32 only when need_float), its layout into d. */
static inline int image_check(const char *op, const dl_tensor *x, int need_float,
                              image_dims *d) {
  *d = (image_dims){0};
  if (!x) return dl_err(EM_NULLARG, op, "image");
  if (check_tensor_any(op, x)) return -1;
  if (x->ndim != 3 && x->ndim != 4) return dl_err(EM_IMG_SHAPE, op, fmt_tshape(x));
  if (need_float && x->dtype != DL_FLOAT32)
    return dl_err(EM_IMG_NEED_FLOAT, op, fmt_dtype(x->dtype));
  if (x->dtype != DL_UINT8 && x->dtype != DL_FLOAT32)
    return dl_err(EM_IMG_DTYPE, op, fmt_dtype(x->dtype));
  int b = x->ndim == 4;
  d->N = b ? x->shape[0] : 1;
  d->sn = b ? x->stride[0] : 0;
  d->C = x->shape[b], d->sc = x->stride[b];
  d->H = x->shape[b + 1], d->sh = x->stride[b + 1];
  d->W = x->shape[b + 2], d->sw = x->stride[b + 2];
  return 0;
}

/* The images of 1 or 3 channels that the colour adjustments take. */
static inline int image_check_channels(const char *op, const dl_tensor *x, const image_dims *d) {
  if (d->C != 1 && d->C != 3) return dl_err(EM_IMG_CHANNELS, op, fmt_tshape(x));
  return 0;
}

/* A new tensor shaped as x with its last two dims h x w, on x's device. */
static inline dl_tensor *image_new(const dl_tensor *x, int dtype, int64_t h, int64_t w) {
  int64_t s[4];
  for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
  s[x->ndim - 2] = h, s[x->ndim - 1] = w;
  return tensor_new_on(x->storage->device, dtype, s, x->ndim);
}

/* mean and std (nstat values: 1 or C) as float32 per channel into m and
** s (C each), std checked nonzero; with mean NULL, none (nn/image_resize.c). */
DL_HIDDEN int image_stats(const char *op, const double *mean, const double *std, int64_t nstat,
                          int64_t C, float *m, float *s);

/* out, or NULL (out released) when the kernel's rc failed. */
static inline dl_tensor *image_done(dl_tensor *out, int rc) {
  if (rc) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

#endif
