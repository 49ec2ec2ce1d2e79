/*
** device.c -- the registry of devices (device.h): which dl_device runs an op
** on given tensors, and new tensors there.  It knows no device itself: the
** CPU's table and CUDA's register here when their parts of the library load.
*/
#include <stdio.h>
#include <string.h>

#include "core/device.h"

static const dl_device *_Atomic registry[DL_DEVICE_KINDS];

DL_HIDDEN void device_register(dl_device_kind kind, const dl_device *d) {
  if (kind >= 0 && kind < DL_DEVICE_KINDS) atomic_store(&registry[kind], d);
}

DL_HIDDEN const dl_device *device_get(const char *op, int dev) {
  const dl_device *d = atomic_load(&registry[dev < 0 ? DL_DEVICE_CPU : DL_DEVICE_CUDA]);
  if (d) return d;
  if (dev < 0) return dl_errp(EM_BADVALUE, op, "the CPU backend is not registered (a build without cpu/backend.c)");
  /* a device tensor exists only once its device registered: only a test
  ** hook's fake one gets here (ddp.cuda.status() says why CUDA is absent) */
  return dl_errp(EM_CUDA_UNAVAIL, op, "no CUDA device is registered");
}

DL_HIDDEN const dl_device *device_of(const char *op, const dl_tensor *t) {
  return device_get(op, t->storage->device);
}

DL_HIDDEN int is_host_scalar(const dl_tensor *t) {
  return t->ndim == 0 && t->storage->device < 0;
}

static void device_label(char *out, size_t cap, int dev) {
  if (dev < 0) snprintf(out, cap, "cpu");
  else snprintf(out, cap, "cuda:%d", dev);
}

static int common_device(const char *op, int n, const dl_tensor *const *ts, int optional) {
  int dev = -1, first = -1;
  for (int i = 0; i < n; i++) {
    const dl_tensor *t = ts[i];
    if (!t && optional) continue;
    if (check_tensor_any(op, t)) return -2;
    int d = t->storage->device;
    /* A CPU scalar (a Lua number, a 0-dim tensor) goes with any device,
    ** as in PyTorch. */
    if (is_host_scalar(t)) continue;
    if (first < 0) {
      first = i;
      dev = d;
    } else if (d != dev) {
      char a[16], b[16];
      device_label(a, sizeof a, dev);
      device_label(b, sizeof b, d);
      dl_err(EM_DEVICE_MIX, op, a, first + 1, b, i + 1);
      return -2;
    }
  }
  return dev;  /* -1 also when all were CPU scalars */
}

DL_HIDDEN int op_device(const char *op, int n, const dl_tensor *const *ts) {
  return common_device(op, n, ts, 0);
}

DL_HIDDEN int op_device_opt(const char *op, int n, const dl_tensor *const *ts) {
  return common_device(op, n, ts, 1);
}

DL_HIDDEN dl_tensor *tensor_new_on(int dev, int dtype, const int64_t *shape, int ndim) {
  const dl_device *d = device_get("alloc", dev);
  return d ? d->new_tensor(dev, dtype, shape, ndim) : NULL;
}

DL_HIDDEN dl_tensor *full_on(int dev, const int64_t *shape, int ndim, int dtype, double v) {
  dl_tensor *t = tensor_new_on(dev, dtype, shape, ndim);
  if (t && fw_fill_(t, v)) {
    dl_tensor_release(t);
    return NULL;
  }
  return t;
}

DL_API dl_tensor *dl_to_device(const dl_tensor *t, int device) {
  if (check_tensor_any("to", t)) return NULL;
  if (t->storage->device == device) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  /* the device end of the copy does it, whichever way it goes */
  const dl_device *d = device_get("to", device >= 0 ? device : t->storage->device);
  return d ? d->move(t, device) : NULL;
}
