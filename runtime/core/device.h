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

typedef enum dl_device_kind { DL_DEVICE_CPU = 0, DL_DEVICE_CUDA = 1, DL_DEVICE_KINDS } dl_device_kind;

typedef struct dl_device {
  const char *name;  /* "cpu", "cuda" */
  /* Elementwise kernels read and write bfloat16/float16 themselves (one
  ** rounding, no float32 copies); else the op computes in float32. */
  int half_native;

  /* -- Memory ---------------------------------------------------------- */
  /* A new contiguous tensor on device index dev, uninitialised. */
  dl_tensor *(*new_tensor)(int dev, int dtype, const int64_t *shape, int ndim);
  /* n bytes between host and device memory (dev: whose copy engine). */
  int (*copy_bytes)(const char *op, void *dst, const void *src, size_t n, int dev);
  /* t on device index to (-1: the CPU), a contiguous copy; this device is
  ** the one t or the destination lies on. */
  dl_tensor *(*move)(const dl_tensor *t, int to);

  /* -- Elementwise: ops[0] is the output ---------------------------------- */
  int (*cast)(const char *op, dl_tensor *dst, const dl_tensor *src);
  /* value's bytes in t's dtype into every element of t */
  int (*fill)(const char *op, dl_tensor *t, uint64_t bytes);
  /* binop (dl_binop) computed in dtype; ops = {out, a, b} */
  int (*binary)(const char *op, int binop, int dtype, dl_tensor *const *ops);
  /* unop (dl_unop) computed in dtype; ops = {out, a} */
  int (*unary)(const char *op, int unop, int dtype, dl_tensor *const *ops);
  /* ops = {out, a}; NaN bounds are open */
  int (*clamp)(const char *op, int dtype, double lo, double hi, dl_tensor *const *ops);
  /* ops = {out, cond, a, b}, a and b in out's dtype */
  int (*where)(const char *op, dl_tensor *const *ops);
  /* ops = {out, g, x}: out = g * act'(x), act a dl_unop */
  int (*act_backward)(const char *op, int act, int dtype, dl_tensor *const *ops);
  /* contiguous t[i] = i < split ? start + i * step : end - (n - 1 - i) * step */
  int (*ramp)(const char *op, dl_tensor *t, double start, double step, double end,
              int64_t split);

  /* -- Random numbers -------------------------------------------------------- */
  /* contiguous t from the Philox stream (seed, block base): kind and its
  ** parameters as core/random.c's generators define them */
  int (*philox_fill)(const char *op, dl_tensor *t, int kind, uint64_t seed, uint64_t base,
                     double a, double b, int64_t low, uint64_t range);

  /* -- Optimizer steps (after the op's checks) ------------------------------ */
  int (*sgd)(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *buf, double lr,
             double momentum, double dampening, double wd, int nesterov, int first,
             int maximize);
  int (*adam)(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *m, dl_tensor *v,
              dl_tensor *vmax, double lr, double b1, double b2, double eps, double wd,
              double bc1, double bc2_sqrt, int decoupled, int maximize);
} dl_device;

/* -- The CPU's kernels --------------------------------------------------------
** Defined beside the ops that use them (core/tensor.c, core/random.c,
** ops/elementwise.c, autograd/grad_elementwise.c, nn/optim.c); their table
** is cpu/backend.c's. */
DL_HIDDEN dl_tensor *cpu_new_tensor(int dev, int dtype, const int64_t *shape, int ndim);
DL_HIDDEN int cpu_copy_bytes(const char *op, void *dst, const void *src, size_t n, int dev);
DL_HIDDEN int cpu_cast(const char *op, dl_tensor *dst, const dl_tensor *src);
DL_HIDDEN int cpu_fill(const char *op, dl_tensor *t, uint64_t bytes);
DL_HIDDEN int cpu_binary(const char *op, int binop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cpu_unary(const char *op, int unop, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cpu_clamp(const char *op, int dtype, double lo, double hi, dl_tensor *const *ops);
DL_HIDDEN int cpu_where(const char *op, dl_tensor *const *ops);
DL_HIDDEN int cpu_act_backward(const char *op, int act, int dtype, dl_tensor *const *ops);
DL_HIDDEN int cpu_ramp(const char *op, dl_tensor *t, double start, double step, double end,
                       int64_t split);
DL_HIDDEN int cpu_philox_fill(const char *op, dl_tensor *t, int kind, uint64_t seed,
                              uint64_t base, double a, double b, int64_t low, uint64_t range);
DL_HIDDEN int cpu_sgd(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *buf,
                      double lr, double momentum, double dampening, double wd, int nesterov,
                      int first, int maximize);
DL_HIDDEN int cpu_adam(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *m,
                       dl_tensor *v, dl_tensor *vmax, double lr, double b1, double b2,
                       double eps, double wd, double bc1, double bc2_sqrt, int decoupled,
                       int maximize);

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
