/*
** cuda/image.c -- the CUDA halves of the image transforms (nn/image_*.c):
** none yet.  A data pipeline transforms each sample on the CPU, in the
** loader, before the batch moves to the GPU; an image already there gets
** an error saying so rather than a silent copy back and forth.
*/
#include <stdio.h>

#include "cuda/cuda.h"

static int on_gpu(const char *op, const dl_tensor *x) {
  char where[32];
  snprintf(where, sizeof where, "cuda:%d", x->storage->device);
  return dl_err(EM_IMG_CPU, op, where);
}

DL_HIDDEN int cuda_image_resample(const char *op, const dl_tensor *x, const image_geom *g,
                                  dl_tensor *out) {
  (void)g, (void)out;
  return on_gpu(op, x);
}

DL_HIDDEN int cuda_image_hflip(const char *op, const dl_tensor *x, dl_tensor *out) {
  (void)out;
  return on_gpu(op, x);
}

DL_HIDDEN int cuda_image_convert(const char *op, const dl_tensor *x, float scale,
                                 const float *mean, const float *std, dl_tensor *out) {
  (void)scale, (void)mean, (void)std, (void)out;
  return on_gpu(op, x);
}

DL_HIDDEN int cuda_image_adjust(const char *op, dl_adjust_kind kind, double factor,
                                const dl_tensor *x, dl_tensor *out) {
  (void)kind, (void)factor, (void)out;
  return on_gpu(op, x);
}
