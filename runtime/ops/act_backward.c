/*
** act_backward.c -- the gradients of the activations with no short form in
** other ops (gelu, gelu_tanh, silu) and of relu: out = g * act'(x), one pass,
** the forward autograd's rules call (fw_act_backward) and the CPU's kernel.
*/
#include <math.h>

#include "core/device.h"
#include "core/simd.h"
#include "core/vmath.h"
#include "ops/forward.h"

/* gelu, gelu_tanh and silu have no short form in other ops: one loop each,
** over (grad_in, g, x) in float or double. */
typedef struct { int op; } act_ctx;

static double act_grad(int op, double x) {
  switch (op) {
    case DL_GELU: {
      double cdf = 0.5 * (1.0 + erf(x * M_SQRT1_2));
      return cdf + x * exp(-0.5 * x * x) * 0.3989422804014327;
    }
    case DL_GELU_TANH: {
      const double k = 0.7978845608028654, c = 0.044715;
      double u = k * (x + c * x * x * x), t = tanh(u);
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    }
    default: {  /* silu */
      double sg = 1.0 / (1.0 + exp(-x));
      return sg * (1 + x * (1 - sg));
    }
  }
}

#define ACT_LOOP(NAME, T)                                                   \
  static void NAME(char **d, const int64_t *st, int64_t n, void *c) {      \
    int op = ((const act_ctx *)c)->op;                                     \
    for (int64_t i = 0; i < n; i++)                                        \
      *(T *)(d[0] + i * st[0]) =                                           \
          (T)(*(const T *)(d[1] + i * st[1]) *                             \
              act_grad(op, *(const T *)(d[2] + i * st[2])));               \
  }
ACT_LOOP(act_any_f32, float)
ACT_LOOP(act_f64, double)

/* float32, all three contiguous (the usual case): one loop per op in float
** with core/vmath.h, which vectorises; the double loop above was most of
** GELU's backward time. */
static inline float gelu_grad_f(float x) {
  float cdf = 0.5f * (1.0f + vm_erff(x * (float)M_SQRT1_2));
  return cdf + x * vm_expf(-0.5f * x * x) * 0.3989422804f;
}
static inline float gelu_tanh_grad_f(float x) {
  const float k = 0.7978845608f, c = 0.044715f;
  float t = vm_tanhf(k * (x + c * x * x * x));
  return 0.5f * (1 + t) + 0.5f * x * (1 - t * t) * k * (1 + 3 * c * x * x);
}
static inline float silu_grad_f(float x) {
  float sg = vm_sigmoidf(x);
  return sg * (1 + x * (1 - sg));
}
HOT static void act_f32(char **d, const int64_t *st, int64_t n, void *c) {
  int op = ((const act_ctx *)c)->op;
  if (st[0] != 4 || st[1] != 4 || st[2] != 4) {
    act_any_f32(d, st, n, c);
    return;
  }
  float *o = (float *)d[0];
  const float *g = (const float *)d[1], *x = (const float *)d[2];
  if (op == DL_GELU)
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * gelu_grad_f(x[i]);
  else if (op == DL_GELU_TANH)
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * gelu_tanh_grad_f(x[i]);
  else
    for (int64_t i = 0; i < n; i++) o[i] = g[i] * silu_grad_f(x[i]);
}

/* relu: g where the result is > 0 (or NaN, as PyTorch's threshold_backward),
** else 0 -- one pass instead of a mask, a clone and a fill.  The contiguous
** case gets its own loop the compiler vectorises: the strided one ran
** scalar and was 12% of a CNN training step. */
#define RELU_LOOP(NAME, T)                                                  \
  HOT static void NAME(char **d, const int64_t *st, int64_t n, void *c) {  \
    (void)c;                                                               \
    if (st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) {  \
      T *o = (T *)d[0];                                                    \
      const T *g = (const T *)d[1], *y = (const T *)d[2];                  \
      for (int64_t i = 0; i < n; i++) o[i] = y[i] <= 0 ? (T)0 : g[i];      \
      return;                                                              \
    }                                                                      \
    for (int64_t i = 0; i < n; i++) {                                      \
      T y = *(const T *)(d[2] + i * st[2]);                                \
      *(T *)(d[0] + i * st[0]) = y <= 0 ? (T)0 : *(const T *)(d[1] + i * st[1]); \
    }                                                                      \
  }
RELU_LOOP(relu_f32, float)
RELU_LOOP(relu_f64, double)

/* The CPU's kernel (core/device_slots.h): ops = {out, g, x} in dtype. */
DL_HIDDEN int cpu_act_backward(const char *op, dl_unop act, dl_dtype dtype, dl_tensor *const *ops) {
  loop_fn fn = act == DL_RELU ? (dtype == DL_FLOAT64 ? relu_f64 : relu_f32)
                              : (dtype == DL_FLOAT64 ? act_f64 : act_f32);
  iter_t it;
  act_ctx c = {act};
  if (iter_init(&it, op, ops, 3)) return -1;
  iter_run(&it, fn, &c);
  return 0;
}

/* g * act'(x), in float32 or float64 (g's), on g's device: the gradient
** of an activation (autograd/grad_elementwise.c). */
DL_HIDDEN dl_tensor *fw_act_backward(dl_unop op, const dl_tensor *g, const dl_tensor *x) {
  int cd = g->dtype == DL_FLOAT64 ? DL_FLOAT64 : DL_FLOAT32;
  const dl_device *d = device_of("backward", g);
  dl_tensor *gc = d ? as_dtype(g, cd) : NULL, *xc = gc ? as_dtype(x, cd) : NULL;
  dl_tensor *out = xc ? tensor_new_on(g->storage->device, cd, g->shape, g->ndim) : NULL;
  if (out) {
    dl_tensor *ops[3] = {out, gc, xc};
    if (d->act_backward("backward", op, cd, ops)) {
      dl_tensor_release(out);
      out = NULL;
    }
  }
  dl_tensor_release(gc);
  dl_tensor_release(xc);
  return out;
}
