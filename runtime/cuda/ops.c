/*
** ops.c -- the CUDA device's elementwise kernels (core/device.h) over the
** launchers of libddplua_cuda.so, the operand preparation the nn kernels
** share, and CUDA's errors turned into the runtime's.
*/
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"
#include "nn/nn.h"


DL_HIDDEN dl_tensor *cuda_prep(const dl_tensor *t, int kd, int dev) {
  if (!t) return NULL;
  if (t->storage->device == dev) return nn_prep(t, kd);
  dl_tensor *m = dl_to_device(t, dev), *r = m ? nn_prep(m, kd) : NULL;
  dl_tensor_release(m);
  return r;
}

DL_HIDDEN int cuda_err(const char *op, int device, int rc) {
  if (rc == 0) return 0;
  DLC_FN(last_error) last = DLC(op, last_error);
  const char *msg = last ? last() : "unknown CUDA error";
  if (rc == DL_ENOMEM) return dl_err(EM_CUDA_OOM, op, device, msg);
  if (rc == DL_EINVAL && strstr(msg, "division by zero")) return dl_err(EM_INT_DIV_ZERO, op, "integer");
  if (rc == DL_EINVAL && strstr(msg, "negative integer power")) return dl_err(EM_INT_NEG_POW, op, "integer");
  if (rc == DL_EDTYPE) return dl_err(EM_BADVALUE, op, msg);
  return dl_err(EM_CUDA_CALL, op, device, msg);
}

DL_HIDDEN int cuda_iter(dlc_iter *d, const iter_t *it, dl_tensor *const *ops) {
  memset(d, 0, sizeof *d);
  d->ndim = it->ndim;
  d->nops = it->nops;
  d->numel = it->numel;
  for (int k = 0; k < it->ndim; k++) d->shape[k] = it->shape[k];
  for (int i = 0; i < it->nops; i++) {
    d->dtype[i] = ops[i]->dtype;
    for (int k = 0; k < it->ndim; k++) d->strides[i][k] = it->strides[i][k];
    if (ops[i]->storage->device < 0) {  /* a CPU scalar: its value rides along */
      memcpy(&d->scalar[i], it->data[i], (size_t)dl_dtype_sizes[ops[i]->dtype]);
      d->scalar_mask |= 1u << i;
      for (int k = 0; k < it->ndim; k++) d->strides[i][k] = 0;
    } else {
      d->data[i] = it->data[i];
    }
  }
  return 0;
}

/* -- Elementwise launchers ------------------------------------------------- */

static int iter_call(const char *op, dl_tensor *const *ops, int nops, dlc_iter *d) {
  iter_t it;
  if (iter_init(&it, op, ops, nops)) return -1;
  return cuda_iter(d, &it, ops);
}

DL_HIDDEN int cuda_cast(const char *op, dl_tensor *dst, const dl_tensor *src) {
  dl_tensor *ops[2] = {dst, (dl_tensor *)src};
  dlc_iter d;
  DLC_FN(cast) f = DLC(op, cast);
  if (!f || iter_call(op, ops, 2, &d)) return -1;
  return cuda_err(op, dst->storage->device, f(dst->storage->device, &d));
}

DL_HIDDEN int cuda_fill(const char *op, dl_tensor *t, uint64_t bytes) {
  dlc_iter d;
  DLC_FN(fill) f = DLC(op, fill);
  if (!f || iter_call(op, &t, 1, &d)) return -1;
  return cuda_err(op, t->storage->device, f(t->storage->device, &d, bytes));
}

DL_HIDDEN int cuda_binary(const char *op, dl_binop binop, dl_dtype dtype, dl_tensor *const *ops) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(binary) f = DLC(op, binary);
  if (!f || iter_call(op, ops, 3, &d)) return -1;
  return cuda_err(op, dev, f(dev, binop, dtype, &d));
}

DL_HIDDEN int cuda_unary(const char *op, dl_unop unop, dl_dtype dtype, dl_tensor *const *ops) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(unary) f = DLC(op, unary);
  if (!f || iter_call(op, ops, 2, &d)) return -1;
  return cuda_err(op, dev, f(dev, unop, dtype, &d));
}

DL_HIDDEN int cuda_clamp(const char *op, dl_dtype dtype, double lo, double hi, dl_tensor *const *ops) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(clamp) f = DLC(op, clamp);
  if (!f || iter_call(op, ops, 2, &d)) return -1;
  return cuda_err(op, dev, f(dev, dtype, lo, hi, &d));
}

DL_HIDDEN int cuda_where(const char *op, dl_tensor *const *ops) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(where) f = DLC(op, where);
  if (!f || iter_call(op, ops, 4, &d)) return -1;
  return cuda_err(op, dev, f(dev, &d));
}

DL_HIDDEN int cuda_act_backward(const char *op, dl_unop act, dl_dtype dtype, dl_tensor *const *ops) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(act_backward) f = DLC(op, act_backward);
  if (!f || iter_call(op, ops, 3, &d)) return -1;
  return cuda_err(op, dev, f(dev, act, dtype, &d));
}
