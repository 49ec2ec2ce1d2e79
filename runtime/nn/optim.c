/*
** optim.c -- the optimizers' update rules as fused loops: SGD (momentum,
** dampening, Nesterov, weight decay) and Adam/AdamW (amsgrad), for one
** parameter or for a list of them at once (one pass of the thread pool over
** every parameter's elements, or on CUDA one launch per 32 tensors): what
** autograd/optim_foreach.c steps a whole group with (PyTorch's foreach).
** Arithmetic follows PyTorch 1.13's single-tensor code step by step, in
** the parameter's dtype, so trajectories match it closely, and both paths
** give the same bits; bfloat16 and float16 parameters step in float32
** (nn/optim_half.c).
*/
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "nn/nn.h"
#include "nn/optim.h"
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
  if (p->dtype != DL_FLOAT32 && p->dtype != DL_FLOAT64 && !is_half_dtype(p->dtype))
    return dl_err(EM_DTYPE_UNSUP, op, fmt_dtype(p->dtype));
  if (!dl_tensor_is_contiguous(p)) return dl_err(EM_OPT_CONTIG, op, fmt_tshape(p));
  return 0;
}

/* -- A group at once ---------------------------------------------------------- */

/* Runs items of one device and dtype through that device's kernel: a group
** of several kinds (rare: a model half on the GPU) a pass per kind, the
** items reordered so each kind's lie together.  RUN(run, nrun) calls the
** kernel on items [run, run + nrun). */
#define BY_KIND(T, items, n, RUN)                                               \
  for (int done = 0; done < (n);) {                                           \
    int dev = (items)[done].p->storage->device, dt = (items)[done].p->dtype;  \
    int k = done + 1;                                                         \
    for (int j = done + 1; j < (n); j++)                                      \
      if ((items)[j].p->storage->device == dev && (int)(items)[j].p->dtype == dt) { \
        T tmp = (items)[k];                                                   \
        (items)[k++] = (items)[j];                                            \
        (items)[j] = tmp;                                                     \
      }                                                                       \
    const dl_device *d = device_of(op, (items)[done].p);                      \
    if (!d || RUN((items) + done, k - done)) return -1;                       \
    done = k;                                                                 \
  }

/* Steps the half-precision items whose device has no kernel for them
** (dl_device.optim_half 0) through float32 chunks, CHUNKS(d, item) each,
** and moves the others up: n becomes their count. */
#define HALF_APART(items, n, CHUNKS)                                            \
  {                                                                           \
    int kept = 0;                                                             \
    for (int i = 0; i < (n); i++) {                                           \
      int half = is_half_dtype((items)[i].p->dtype);                          \
      const dl_device *hd = half ? device_of(op, (items)[i].p) : NULL;        \
      if (half && !hd) return -1;                                             \
      if (!hd || hd->optim_half) {                                            \
        (items)[kept++] = (items)[i];                                         \
        continue;                                                             \
      }                                                                       \
      if (CHUNKS(hd, &(items)[i])) return -1;                                 \
    }                                                                         \
    (n) = kept;                                                               \
  }

/* One pass of the thread pool over n items' elements end to end: item k
** is [off[k], off[k + 1]) and runs run(ctx k, its own range). */
typedef struct {
  int n;
  const int64_t *off;
  const char *ctxs;
  size_t ctx_size;
  void (*run)(void *ctx, int64_t b, int64_t e);
} multi_pass;

static void multi_run(void *ctx, int64_t b, int64_t e) {
  const multi_pass *mp = ctx;
  int lo = 0, hi = mp->n - 1;  /* the last item starting at or before b */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (mp->off[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  for (int k = lo; k < mp->n && mp->off[k] < e; k++) {
    int64_t s = b > mp->off[k] ? b : mp->off[k], t = e < mp->off[k + 1] ? e : mp->off[k + 1];
    if (s < t) mp->run((void *)(mp->ctxs + (size_t)k * mp->ctx_size), s - mp->off[k], t - mp->off[k]);
  }
}

/* Both item types start with their parameter: its size places the item. */
_Static_assert(offsetof(sgd_item, p) == 0 && offsetof(adam_item, p) == 0, "items start with p");

static int multi_for(const char *op, const void *items, size_t item_size, int n, const void *ctxs,
                     size_t ctx_size, void (*run)(void *, int64_t, int64_t)) {
  int64_t *off = malloc(sizeof *off * (size_t)(n + 1));
  if (!off) return dl_err(EM_NOMEM, op, (long long)(sizeof *off * (size_t)(n + 1)), (long long)dl_mem_allocated());
  off[0] = 0;
  for (int k = 0; k < n; k++)
    off[k + 1] = off[k] + dl_tensor_numel(*(dl_tensor *const *)((const char *)items + (size_t)k * item_size));
  multi_pass mp = {n, off, ctxs, ctx_size, run};
  parallel_for(off[n], PAR_GRAIN, multi_run, &mp);
  free(off);
  return 0;
}

/* -- SGD -------------------------------------------------------------------- */

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

DL_HIDDEN int optim_sgd_items(const char *op, sgd_item *items, int n, double lr, double momentum,
                     double dampening, double wd, int nesterov, int maximize) {
  for (int i = 0; i < n; i++) {
    tensor_bump_version(items[i].p);
    if (items[i].buf) tensor_bump_version(items[i].buf);
  }
#define SGD_CHUNKS(d, it) optim_chunks_sgd(op, d, it, lr, momentum, dampening, wd, nesterov, maximize)
  HALF_APART(items, n, SGD_CHUNKS)
#undef SGD_CHUNKS
#define SGD_RUN(run, nrun) d->sgd(op, run, nrun, lr, momentum, dampening, wd, nesterov, maximize)
  BY_KIND(sgd_item, items, n, SGD_RUN)
#undef SGD_RUN
  return 0;
}

DL_API int dl_sgd_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *buf,
                       double lr, double momentum, double dampening,
                       double weight_decay, int nesterov, int first,
                       int maximize) {
  const char *op = "sgd";
  sgd_item it = {p, buf, grad, first};
  if (optim_sgd_check(op, &it, buf != NULL)) return -1;
  return optim_sgd_items(op, &it, 1, lr, momentum, dampening, weight_decay, nesterov, maximize);
}

DL_HIDDEN int optim_sgd_check(const char *op, const sgd_item *it, int momentum) {
  if (check_param(op, it->p) || check_state(op, it->p, it->g, "grad")) return -1;
  if (momentum && !it->buf) return dl_err(EM_BADVALUE, op, "has a gradient but no momentum_buffer");
  return momentum ? check_state(op, it->p, it->buf, "momentum_buffer") : 0;
}

/* The CPU's fused step (core/device.h): one pass over every item. */
DL_HIDDEN int cpu_sgd(const char *op, const sgd_item *items, int n, double lr, double momentum,
                      double dampening, double wd, int nesterov, int maximize) {
  sgd_ctx *cs = malloc(sizeof *cs * (size_t)n);
  if (!cs) return dl_err(EM_NOMEM, op, (long long)(sizeof *cs * (size_t)n), (long long)dl_mem_allocated());
  for (int k = 0; k < n; k++) {
    const sgd_item *it = &items[k];
    cs[k] = (sgd_ctx){tensor_first(it->p), tensor_first(it->g), it->buf ? tensor_first(it->buf) : NULL,
                      lr, momentum, dampening, wd, nesterov, it->first, maximize,
                      it->p->dtype == DL_BFLOAT16};
  }
  int dt = items[0].p->dtype;
  int rc = multi_for(op, items, sizeof *items, n, cs, sizeof *cs,
                     dt == DL_FLOAT32 ? sgd_f32 : dt == DL_FLOAT64 ? sgd_f64 : optim_sgd_half);
  free(cs);
  return rc;
}

/* -- Adam and AdamW ---------------------------------------------------------- */

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

DL_HIDDEN int optim_adam_items(const char *op, adam_item *items, int n, double lr, double beta1,
                      double beta2, double eps, double wd, int decoupled, int maximize) {
  for (int i = 0; i < n; i++) {
    dl_tensor *bump[4] = {items[i].p, items[i].m, items[i].v, items[i].vmax};
    for (int j = 0; j < 4; j++)
      if (bump[j]) tensor_bump_version(bump[j]);
  }
#define ADAM_CHUNKS(d, it) optim_chunks_adam(op, d, it, lr, beta1, beta2, eps, wd, decoupled, maximize)
  HALF_APART(items, n, ADAM_CHUNKS)
#undef ADAM_CHUNKS
#define ADAM_RUN(run, nrun) d->adam(op, run, nrun, lr, beta1, beta2, eps, wd, decoupled, maximize)
  BY_KIND(adam_item, items, n, ADAM_RUN)
#undef ADAM_RUN
  return 0;
}

DL_HIDDEN void optim_bias_corrections(adam_item *it, int64_t step, double beta1, double beta2) {
  it->bc1 = 1 - pow(beta1, (double)step);
  it->bc2_sqrt = sqrt(1 - pow(beta2, (double)step));
}

DL_API int dl_adam_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *exp_avg,
                        dl_tensor *exp_avg_sq, dl_tensor *max_exp_avg_sq,
                        int64_t step, double lr, double beta1, double beta2,
                        double eps, double weight_decay, int decoupled,
                        int maximize) {
  const char *op = decoupled ? "adamw" : "adam";
  adam_item it = {p, exp_avg, exp_avg_sq, max_exp_avg_sq, grad, 0, 0};
  if (optim_adam_check(op, &it, max_exp_avg_sq != NULL, step)) return -1;
  optim_bias_corrections(&it, step, beta1, beta2);
  return optim_adam_items(op, &it, 1, lr, beta1, beta2, eps, weight_decay, decoupled, maximize);
}

DL_HIDDEN int optim_adam_check(const char *op, const adam_item *it, int amsgrad, int64_t step) {
  if (check_param(op, it->p) || check_state(op, it->p, it->g, "grad")) return -1;
  if (!it->m || !it->v || (amsgrad && !it->vmax))
    return dl_err(EM_BADVALUE, op, "has a gradient but no exp_avg, exp_avg_sq or max_exp_avg_sq");
  if (check_state(op, it->p, it->m, "exp_avg") || check_state(op, it->p, it->v, "exp_avg_sq") ||
      (amsgrad && check_state(op, it->p, it->vmax, "max_exp_avg_sq")))
    return -1;
  return step < 1 ? dl_err(EM_BADVALUE, op, "step must be >= 1") : 0;
}

/* The CPU's fused step (core/device.h): one pass over every item. */
DL_HIDDEN int cpu_adam(const char *op, const adam_item *items, int n, double lr, double b1,
                       double b2, double eps, double wd, int decoupled, int maximize) {
  adam_ctx *cs = malloc(sizeof *cs * (size_t)n);
  if (!cs) return dl_err(EM_NOMEM, op, (long long)(sizeof *cs * (size_t)n), (long long)dl_mem_allocated());
  for (int k = 0; k < n; k++) {
    const adam_item *it = &items[k];
    cs[k] = (adam_ctx){tensor_first(it->p), tensor_first(it->g), tensor_first(it->m), tensor_first(it->v),
                       it->vmax ? tensor_first(it->vmax) : NULL, lr, b1, b2, eps, wd, it->bc1, it->bc2_sqrt,
                       decoupled, maximize, it->p->dtype == DL_BFLOAT16};
  }
  int dt = items[0].p->dtype;
  int rc = multi_for(op, items, sizeof *items, n, cs, sizeof *cs,
                     dt == DL_FLOAT32 ? adam_f32 : dt == DL_FLOAT64 ? adam_f64 : optim_adam_half);
  free(cs);
  return rc;
}
