/*
** nn/optim.h -- the optimizers' steps over a list of parameters (items of
** core/kernel_args.h), for autograd/optim_foreach.c, which gathers a
** group's gradients: the checks of an item (op names it in the error;
** formatted by the caller only on failure, as a step checks every
** parameter), Adam's bias corrections, and the run through each device's
** kernel, a pass per device and dtype (items is reordered); bfloat16 and
** float16 parameters step in the device's own half loops, or where it has
** none in float32 chunks through its float32 kernels (nn/optim_half.c).
*/
#ifndef DL_NN_OPTIM_H
#define DL_NN_OPTIM_H

#include "nn/nn.h"

DL_HIDDEN int optim_sgd_check(const char *op, const sgd_item *it, int momentum);
DL_HIDDEN int optim_sgd_items(const char *op, sgd_item *items, int n, double lr, double momentum,
                              double dampening, double wd, int nesterov, int maximize);
DL_HIDDEN int optim_adam_check(const char *op, const adam_item *it, int amsgrad, int64_t step);
DL_HIDDEN void optim_bias_corrections(adam_item *it, int64_t step, double beta1, double beta2);
DL_HIDDEN int optim_adam_items(const char *op, adam_item *items, int n, double lr, double beta1,
                               double beta2, double eps, double wd, int decoupled, int maximize);

/* The CPU kernels' contexts: one item's pointers and the step's options. */
typedef struct {
  char *p, *g, *buf;
  double lr, momentum, dampening, wd;
  int nesterov, first, maximize;
  int bf16;  /* a half-precision item: bfloat16 (1) or float16 (0) */
} sgd_ctx;

typedef struct {
  char *p, *g, *m, *v, *vmax;
  double lr, b1, b2, eps, wd, bc1, bc2_sqrt;
  int decoupled, maximize;
  int bf16;  /* as sgd_ctx's */
} adam_ctx;

/* bfloat16 and float16 items (nn/optim_half.c): the CPU's element loops
** (par_fn over an sgd_ctx / adam_ctx), and for a device without such
** kernels (dl_device.optim_half 0) the step through float32 chunks. */
DL_HIDDEN void optim_sgd_half(void *ctx, int64_t b, int64_t e);
DL_HIDDEN void optim_adam_half(void *ctx, int64_t b, int64_t e);
DL_HIDDEN int optim_chunks_sgd(const char *op, const dl_device *d, const sgd_item *it, double lr,
                             double momentum, double dampening, double wd, int nesterov,
                             int maximize);
DL_HIDDEN int optim_chunks_adam(const char *op, const dl_device *d, const adam_item *it, double lr,
                              double beta1, double beta2, double eps, double wd, int decoupled,
                              int maximize);

#endif
