/*
** conv.h -- what the conv2d kernels (nn/conv.c, nn/conv_onednn.c,
** cuda/linalg.c) share beyond their geometry (core/kernel_args.h).
*/
#ifndef DL_NN_CONV_H
#define DL_NN_CONV_H

#include "nn/nn.h"

/* Where both backwards end: on failure the grads already handed out go;
** the n temporaries go either way.  Returns rc. */
DL_HIDDEN int conv_backward_done(int rc, dl_tensor **grad_x, dl_tensor **grad_w,
                                 dl_tensor **grad_b, dl_tensor *const *tmp, int n);

#endif
