/*
** backend.c -- the CPU device (core/device.h): its table of kernels, which
** live beside the ops that use them, registered when the library loads.
*/
#include "autograd/autograd.h"
#include "core/device.h"
#include "nn/attention.h"
#include "nn/conv.h"
#include "nn/pool.h"
#include "ops/forward.h"
#include "ops/linalg.h"

/* Nothing on the CPU is "another device": dl_to_device asks the device end
** of a copy, which is never the CPU's. */
static dl_tensor *cpu_move(const dl_tensor *t, int to) {
  (void)t, (void)to;
  return dl_errp(EM_CUDA_UNAVAIL, "to", "no CUDA device is registered");
}

static const dl_device cpu_device = {
  .name = "cpu",
  .half_native = 0,
  .host_memory = 1,
  .new_tensor = cpu_new_tensor,
  .copy_bytes = cpu_copy_bytes,
  .move = cpu_move,
  .cast = cpu_cast,
  .fill = cpu_fill,
  .binary = cpu_binary,
  .unary = cpu_unary,
  .clamp = cpu_clamp,
  .where = cpu_where,
  .act_backward = cpu_act_backward,
  .ramp = cpu_ramp,
  .matmul = cpu_matmul,
  .dot = cpu_dot,
  .reduce = cpu_reduce,
  .argreduce = cpu_argreduce,
  .dimop = cpu_dimop,
  .index_check = cpu_index_check,
  .index_minmax = cpu_index_minmax,
  .take = cpu_take,
  .put = cpu_put,
  .masked_fill = cpu_masked_fill,
  .compact = cpu_compact,
  .tri = cpu_tri,
  .sort = cpu_sort,
  .cls_forward = cpu_cls_forward,
  .cls_backward = cpu_cls_backward,
  .mse = cpu_mse,
  .mse_backward = cpu_mse_backward,
  .embedding = cpu_embedding,
  .embedding_backward = cpu_embedding_backward,
  .dropout = cpu_dropout,
  .dropout_backward = cpu_dropout_backward,
  .layer_norm = cpu_layer_norm,
  .layer_norm_backward = cpu_layer_norm_backward,
  .batch_norm = cpu_batch_norm,
  .batch_norm_backward = cpu_batch_norm_backward,
  .conv2d = cpu_conv2d,
  .conv2d_backward = cpu_conv2d_backward,
  .max_pool = cpu_max_pool,
  .max_pool_backward = cpu_max_pool_backward,
  .avg_pool = cpu_avg_pool,
  .avg_pool_backward = cpu_avg_pool_backward,
  .sdpa = cpu_sdpa,
  .sdpa_backward = cpu_sdpa_backward,
  .philox_fill = cpu_philox_fill,
  .sgd = cpu_sgd,
  .adam = cpu_adam,
};

/* At load: every op may run before anything else is called.  (The C tests
** link the archive whole, so this object is always in.) */
__attribute__((constructor)) static void cpu_register(void) {
  device_register(DL_DEVICE_CPU, &cpu_device);
}
