/*
** nn/optim.h -- the optimizers' steps over a list of parameters (items of
** core/kernel_args.h), for autograd/optim_foreach.c, which gathers a
** group's gradients: the checks of an item (op names it in the error;
** formatted by the caller only on failure, as a step checks every
** parameter), Adam's bias corrections, and the run through each device's
** kernel, a pass per device and dtype (items is reordered).
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

#endif
