/*
** backend.c -- the CUDA device (core/device.h): its table of kernels, over
** the glue in this folder, registered by probe.c once libddplua_cuda.so (or
** the emulator) is loaded and has a device.
*/
#include "cuda/cuda.h"

DL_HIDDEN const dl_device cuda_device = {
  .name = "cuda",
  .half_native = 1,
  .optim_half = 0,  /* bfloat16/float16 parameters step in float32 chunks */
  .host_memory = 0,
#define DL_SLOT(ret, name, params) .name = cuda_##name,
#include "core/device_slots.h"
#undef DL_SLOT
};
