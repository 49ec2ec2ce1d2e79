/*
** device.h -- the one interface between what an op means and the device
** that runs it.
**
** An op file checks its arguments, works out shapes, dtypes, promotion and
** autograd once, then calls the kernel of the device its tensors lie on
** through this table, as process groups go through pg_ops (dist/pg.h).  Each
** device fills one dl_device: the CPU's (cpu/backend.c, from the kernels of
** the op files) and CUDA's (cuda/backend.c, over libddplua_cuda.so), each
** registered when its library part is loaded.  No op file tests a device
** number, and the core never calls into a device's glue.
**
** Every kernel takes the op's name for its errors, its operands already
** checked, broadcast and of the dtypes it asks for, and returns 0 or -1
** with the error set (a tensor, or NULL with the error set).
*/
#ifndef DL_DEVICE_H
#define DL_DEVICE_H

#include "core/internal.h"

#include "core/kinds.h"
#include "core/kernel_args.h"

typedef enum dl_device_kind { DL_DEVICE_CPU = 0, DL_DEVICE_CUDA = 1, DL_DEVICE_KINDS } dl_device_kind;

typedef struct dl_device {
  const char *name;  /* "cpu", "cuda" */
  /* Elementwise kernels read and write bfloat16/float16 themselves (one
  ** rounding, no float32 copies); else the op computes in float32. */
  int half_native;
  /* Its optimizer kernels (sgd, adam) step bfloat16/float16 parameters
  ** themselves, rounding after each op as PyTorch's CPU steps do; else
  ** such a parameter steps in float32 chunks (nn/optim_half.c). */
  int optim_half;
  /* Its tensors lie in host memory (a shared mapping can hold them). */
  int host_memory;
  /* The kernels, one member each (core/device_slots.h). */
#define DL_SLOT(ret, name, params) ret(*name) params;
#include "core/device_slots.h"
#undef DL_SLOT
} dl_device;

/* The CPU's kernels: cpu_<slot>, defined beside the ops that use them (or
** in cpu/backend.c); cpu/backend.c's table, which sits above every layer,
** names each. */
#define DL_SLOT(ret, name, params) DL_HIDDEN ret cpu_##name params;
#include "core/device_slots.h"
#undef DL_SLOT

/* -- The registry ------------------------------------------------------------ */

/* Makes d the device of its kind (once, when that part of the library is
** ready: the CPU's at load, CUDA's when libddplua_cuda.so is loaded). */
DL_HIDDEN void device_register(dl_device_kind kind, const dl_device *d);
/* The device for index dev (-1: the CPU, k: cuda:k); NULL with DL_EDEVICE
** when that kind of device is not there. */
DL_HIDDEN const dl_device *device_get(const char *op, int dev);
/* The device t lies on (t checked by the caller). */
DL_HIDDEN const dl_device *device_of(const char *op, const dl_tensor *t);

/* The device index an op on ts[0..n) runs on (-1: the CPU); a CPU 0-dim
** tensor (a Lua number) goes with any device, as in PyTorch.  -2 with the
** error set when the tensors lie on different devices, or one is NULL or
** freed; op_device_opt skips NULLs (optional arguments: a bias). */
DL_HIDDEN int op_device(const char *op, int n, const dl_tensor *const *ts);
DL_HIDDEN int op_device_opt(const char *op, int n, const dl_tensor *const *ts);
/* A 0-dim CPU tensor: a scalar that rides along with any device's kernel. */
DL_HIDDEN int is_host_scalar(const dl_tensor *t);
/* A new tensor on device dev (-1: the CPU), uninitialised / filled with v. */
DL_HIDDEN dl_tensor *tensor_new_on(int dev, int dtype, const int64_t *shape, int ndim);
DL_HIDDEN dl_tensor *full_on(int dev, const int64_t *shape, int ndim, int dtype, double v);

#endif
