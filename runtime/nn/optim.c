/*
** optim.c -- the optimizers' update rules, one fused loop per parameter:
** SGD (momentum, dampening, Nesterov, weight decay) and Adam/AdamW
** (amsgrad).  Arithmetic follows PyTorch 1.13's single-tensor code step by
** step, in the parameter's dtype, so trajectories match it closely.
*/
#include <math.h>

#include "nn/nn.h"
#include "core/simd.h"

/* Every state tensor must be a contiguous float tensor of p's shape. */
static int check_state(const char *op, const dl_tensor *p, const dl_tensor *t,
                       const char *what) {
  if (check_tensor_any(op, t)) return -1;
  const dl_tensor *pt[2] = {p, t};
  if (op_device(op, 2, pt) < -1) return -1;
  if (t->storage->device != p->storage->device)  /* a CPU 0-dim state is no use either */
    return dl_err(EM_OPT_STATE, op, what, fmt_dtype(t->dtype), fmt_tshape(t),
                  fmt_dtype(p->dtype), fmt_tshape(p));
  if (t->dtype != p->dtype)
    return dl_err(EM_OPT_STATE, op, what, fmt_dtype(t->dtype), fmt_tshape(t),
                  fmt_dtype(p->dtype), fmt_tshape(p));
  if (t->ndim != p->ndim || shape_numel(t->shape, t->ndim) != shape_numel(p->shape, p->ndim) ||
      !dl_tensor_is_contiguous(t))
    return dl_err(EM_OPT_STATE, op, what, fmt_dtype(t->dtype), fmt_tshape(t),
                  fmt_dtype(p->dtype), fmt_tshape(p));
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] != p->shape[i])
      return dl_err(EM_OPT_STATE, op, what, fmt_dtype(t->dtype), fmt_tshape(t),
                    fmt_dtype(p->dtype), fmt_tshape(p));
  return 0;
}

static int check_param(const char *op, const dl_tensor *p) {
  if (check_tensor_any(op, p)) return -1;
  if (p->dtype != DL_FLOAT32 && p->dtype != DL_FLOAT64)
    return dl_err(EM_DTYPE_UNSUP, op, fmt_dtype(p->dtype));
  if (!dl_tensor_is_contiguous(p)) return dl_err(EM_OPT_CONTIG, op, fmt_tshape(p));
  return 0;
}

/* -- SGD -------------------------------------------------------------------- */

typedef struct {
  char *p, *g, *buf;
  double lr, momentum, dampening, wd;
  int nesterov, first, maximize;
} sgd_ctx;

#define SGD_BODY(T)                                                          \
  {                                                                         \
    T *p = (T *)c->p, *buf = (T *)c->buf;                                   \
    const T *g = (const T *)c->g;                                           \
    const T lr = (T)c->lr, mom = (T)c->momentum, damp1 = (T)(1 - c->dampening); \
    const T wd = (T)c->wd;                                                  \
    for (int64_t i = b; i < e; i++) {                                       \
      T d = c->maximize ? -g[i] : g[i];                                     \
      if (c->wd != 0) d = d + p[i] * wd;                                    \
      if (buf) {                                                            \
        buf[i] = c->first ? d : buf[i] * mom + d * damp1;                   \
        d = c->nesterov ? d + buf[i] * mom : buf[i];                        \
      }                                                                     \
      p[i] = p[i] + d * -lr;                                                \
    }                                                                       \
  }

HOT static void sgd_f32(void *ctx, int64_t b, int64_t e) { const sgd_ctx *c = ctx; SGD_BODY(float) }
HOT static void sgd_f64(void *ctx, int64_t b, int64_t e) { const sgd_ctx *c = ctx; SGD_BODY(double) }

DL_API int dl_sgd_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *buf,
                       double lr, double momentum, double dampening,
                       double weight_decay, int nesterov, int first,
                       int maximize) {
  const char *op = "sgd";
  if (check_param(op, p) || check_state(op, p, grad, "grad") ||
      (buf && check_state(op, p, buf, "momentum_buffer")))
    return -1;
  const dl_device *d = device_of(op, p);
  if (!d) return -1;
  tensor_bump_version(p);
  if (buf) tensor_bump_version(buf);
  return d->sgd(op, p, grad, buf, lr, momentum, dampening, weight_decay, nesterov, first,
                maximize);
}

/* The CPU's fused step (core/device.h), over contiguous tensors. */
DL_HIDDEN int cpu_sgd(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *buf,
                      double lr, double momentum, double dampening, double wd, int nesterov,
                      int first, int maximize) {
  (void)op;
  sgd_ctx c = {tensor_first(p), tensor_first(g), buf ? tensor_first(buf) : NULL,
               lr, momentum, dampening, wd, nesterov, first, maximize};
  parallel_for(dl_tensor_numel(p), PAR_GRAIN, p->dtype == DL_FLOAT32 ? sgd_f32 : sgd_f64, &c);
  return 0;
}

/* -- Adam and AdamW ---------------------------------------------------------- */

typedef struct {
  char *p, *g, *m, *v, *vmax;
  double lr, b1, b2, eps, wd, bc1, bc2_sqrt;
  int decoupled, maximize;
} adam_ctx;

/* Branch-free in the element loop (the flags become multipliers that are
** exact: x * 1, x + 0) so GCC vectorises it; amsgrad has its own loop. */
#define ADAM_BODY(T, SQRT)                                                   \
  {                                                                         \
    T *p = (T *)c->p, *m = (T *)c->m, *v = (T *)c->v, *vmax = (T *)c->vmax; \
    const T *g = (const T *)c->g;                                           \
    const T b1 = (T)c->b1, b2 = (T)c->b2, a1 = (T)(1 - c->b1), a2 = (T)(1 - c->b2); \
    const T sg = c->maximize ? (T)-1 : (T)1, eps = (T)c->eps;               \
    const T wd = c->decoupled ? (T)0 : (T)c->wd;                            \
    const T decay = c->decoupled ? (T)(1 - c->lr * c->wd) : (T)1;           \
    const T step = (T)(-(c->lr / c->bc1)), bc2s = (T)c->bc2_sqrt;           \
    if (!vmax) {                                                            \
      for (int64_t i = b; i < e; i++) {                                     \
        T pi = p[i] * decay;                                                \
        T d = g[i] * sg + pi * wd;                                          \
        T mi = m[i] * b1 + d * a1;                                          \
        T vi = v[i] * b2 + a2 * d * d; /* addcmul's order */                \
        m[i] = mi;                                                          \
        v[i] = vi;                                                          \
        p[i] = pi + (mi / (SQRT(vi) / bc2s + eps)) * step;                  \
      }                                                                     \
    } else {                                                                \
      for (int64_t i = b; i < e; i++) {                                     \
        T pi = p[i] * decay;                                                \
        T d = g[i] * sg + pi * wd;                                          \
        T mi = m[i] * b1 + d * a1;                                          \
        T vi = v[i] * b2 + a2 * d * d;                                      \
        T a = vmax[i];                                                      \
        T s = (a > vi || a != a) ? a : vi; /* torch.maximum: NaN wins */    \
        m[i] = mi;                                                          \
        v[i] = vi;                                                          \
        vmax[i] = s;                                                        \
        p[i] = pi + (mi / (SQRT(s) / bc2s + eps)) * step;                   \
      }                                                                     \
    }                                                                       \
  }

HOT static void adam_f32(void *ctx, int64_t b, int64_t e) { const adam_ctx *c = ctx; ADAM_BODY(float, sqrtf) }
HOT static void adam_f64(void *ctx, int64_t b, int64_t e) { const adam_ctx *c = ctx; ADAM_BODY(double, sqrt) }

DL_API int dl_adam_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *exp_avg,
                        dl_tensor *exp_avg_sq, dl_tensor *max_exp_avg_sq,
                        int64_t step, double lr, double beta1, double beta2,
                        double eps, double weight_decay, int decoupled,
                        int maximize) {
  const char *op = decoupled ? "adamw" : "adam";
  if (check_param(op, p) || check_state(op, p, grad, "grad") ||
      check_state(op, p, exp_avg, "exp_avg") || check_state(op, p, exp_avg_sq, "exp_avg_sq") ||
      (max_exp_avg_sq && check_state(op, p, max_exp_avg_sq, "max_exp_avg_sq")))
    return -1;
  if (step < 1) return dl_err(EM_BADVALUE, op, "step must be >= 1");
  const dl_device *d = device_of(op, p);
  if (!d) return -1;
  dl_tensor *bump[4] = {p, exp_avg, exp_avg_sq, max_exp_avg_sq};
  for (int i = 0; i < 4; i++)
    if (bump[i]) tensor_bump_version(bump[i]);
  return d->adam(op, p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, beta1, beta2, eps,
                 weight_decay, 1 - pow(beta1, (double)step), sqrt(1 - pow(beta2, (double)step)),
                 decoupled, maximize);
}

/* The CPU's fused step (core/device.h), over contiguous tensors. */
DL_HIDDEN int cpu_adam(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *m,
                       dl_tensor *v, dl_tensor *vmax, double lr, double b1, double b2,
                       double eps, double wd, double bc1, double bc2_sqrt, int decoupled,
                       int maximize) {
  (void)op;
  adam_ctx c = {tensor_first(p), tensor_first(g), tensor_first(m), tensor_first(v),
                vmax ? tensor_first(vmax) : NULL, lr, b1, b2, eps, wd, bc1, bc2_sqrt,
                decoupled, maximize};
  parallel_for(dl_tensor_numel(p), PAR_GRAIN, p->dtype == DL_FLOAT32 ? adam_f32 : adam_f64, &c);
  return 0;
}
