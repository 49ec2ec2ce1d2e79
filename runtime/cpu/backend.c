/*
** backend.c -- the CPU device (core/device.h): its table of kernels, one
** cpu_<slot> each (core/device_slots.h), which live beside the ops that use
** them, registered when the library loads.
*/
#include "core/device.h"

/* Nothing on the CPU is "another device": dl_to_device asks the device end
** of a copy, which is never the CPU's. */
DL_HIDDEN dl_tensor *cpu_move(const dl_tensor *t, int to) {
  (void)t, (void)to;
  return dl_errp(EM_CUDA_UNAVAIL, "to", "no CUDA device is registered");
}

static const dl_device cpu_device = {
  .name = "cpu",
  .half_native = 0,
  .optim_half = 1,
  .host_memory = 1,
#define DL_SLOT(ret, name, params) .name = cpu_##name,
#include "core/device_slots.h"
#undef DL_SLOT
};

/* At load: every op may run before anything else is called.  (The C tests
** link the archive whole, so this object is always in.) */
__attribute__((constructor)) static void cpu_register(void) {
  device_register(DL_DEVICE_CPU, &cpu_device);
}
