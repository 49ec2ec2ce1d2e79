/*
** backend.c -- the CUDA device (core/device.h): its table of kernels, over
** the glue in this folder, registered by probe.c once libddplua_cuda.so (or
** the emulator) is loaded and has a device.
*/
#include "cuda/cuda.h"
#include "cuda/linalg.h"
#include "cuda/nn.h"
#include "cuda/index.h"
#include "cuda/reduce.h"

DL_HIDDEN const dl_device cuda_device = {
  .name = "cuda",
  .half_native = 1,
  .host_memory = 0,
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
  .matmul = cuda_matmul,
  .dot = cuda_dot,
  .reduce = cuda_reduce,
  .argreduce = cuda_argreduce,
  .dimop = cuda_dimop,
  .index_check = cuda_index_check,
  .index_minmax = cuda_index_minmax,
  .take = cuda_take,
  .put = cuda_put,
  .masked_fill = cuda_masked_fill,
  .compact = cuda_compact,
  .tri = cuda_tri,
  .sort = cuda_sort,
  .cls_forward = cuda_cls_forward,
  .cls_backward = cuda_cls_backward,
  .mse = cuda_mse,
  .mse_backward = cuda_mse_backward,
  .embedding = cuda_embedding,
  .embedding_backward = cuda_embedding_backward,
  .dropout = cuda_dropout,
  .dropout_backward = cuda_dropout_backward,
  .layer_norm = cuda_layer_norm,
  .layer_norm_backward = cuda_layer_norm_backward,
  .batch_norm = cuda_batch_norm,
  .batch_norm_backward = cuda_batch_norm_backward,
  .conv2d = cuda_conv2d,
  .conv2d_backward = cuda_conv2d_grads,
  .max_pool = cuda_max_pool_k,
  .max_pool_backward = cuda_max_pool_backward_k,
  .avg_pool = cuda_avg_pool_k,
  .avg_pool_backward = cuda_avg_pool_backward_k,
  .sdpa = cuda_sdpa,
  .sdpa_backward = cuda_sdpa_backward,
  .philox_fill = cuda_philox_fill,
  .sgd = cuda_sgd,
  .adam = cuda_adam,
};
