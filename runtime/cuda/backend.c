/*
** backend.c -- the CUDA device (core/device.h): its table of kernels, over
** the glue in this folder, registered by probe.c once libddplua_cuda.so (or
** the emulator) is loaded and has a device.
*/
#include "cuda/cuda.h"
#include "cuda/nn.h"
#include "cuda/index.h"

DL_HIDDEN const dl_device cuda_device = {
  .name = "cuda",
  .half_native = 1,
  .new_tensor = cuda_new_tensor,
  .copy_bytes = cuda_copy_bytes,
  .move = cuda_move,
  .cast = cuda_cast,
  .fill = cuda_fill,
  .binary = cuda_binary,
  .unary = cuda_unary,
  .clamp = cuda_clamp,
  .where = cuda_where,
  .act_backward = cuda_act_backward,
  .ramp = cuda_ramp,
  .philox_fill = cuda_philox_fill,
  .sgd = cuda_sgd,
  .adam = cuda_adam,
};
