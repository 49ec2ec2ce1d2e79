/*
** nn/loss.c -- cross entropy (with label smoothing), negative log
** likelihood and mean squared error, forward and backward, with PyTorch
** 1.13's formulas.  Per-position terms are computed in double on the pool
** and reduced in position order, so losses do not depend on the threads.
*/
#include <math.h>
#include <string.h>

#include "core/simd.h"
#include "core/vmath.h"
#include "nn/nn.h"

/* -- Class-index losses: shapes and targets ------------------------------ */

/* input viewed as [N, C, S], target as [N, S]; position i = n * S + s. */
typedef struct {
  int64_t N, C, S;
  int64_t tshape[DL_MAX_DIMS];
  int tnd;
} cls_geom;

static int cls_setup(const char *op, const dl_tensor *input,
                     const dl_tensor *target, const dl_tensor *weight,
                     int reduction, cls_geom *g) {
  if (nn_check_float(op, "input", input, -1) ||
      nn_check_index(op, "target", target) ||
      (weight && nn_check_float(op, "weight", weight, input->dtype)) ||
      nn_check_reduction(op, reduction))
    return -1;
  memset(g, 0, sizeof *g);
  if (input->ndim == 0)
    return dl_err(EM_NN_NDIM, op, "an input [N, C], [N, C, d1, ...] or [C]",
                  "an input", fmt_tshape(input));
  if (input->ndim == 1) {  /* one sample, target 0-dim */
    g->N = 1, g->C = input->shape[0], g->S = 1, g->tnd = 0;
  } else {
    g->N = input->shape[0], g->C = input->shape[1];
    g->S = shape_numel(input->shape + 2, input->ndim - 2);
    g->tnd = input->ndim - 1;
    g->tshape[0] = g->N;
    for (int i = 2; i < input->ndim; i++) g->tshape[i - 1] = input->shape[i];
  }
  if (!nn_same_shape(target, g->tshape, g->tnd)) {
    char want[240];
    snprintf(want, sizeof want, "%s (the input's shape %s without the class dim)",
             fmt_shape(g->tshape, g->tnd), fmt_tshape(input));
    return dl_err(EM_NN_SHAPE, op, "target", fmt_tshape(target), want);
  }
  if (weight && (weight->ndim != 1 || weight->shape[0] != g->C))
    return dl_err(EM_NN_SHAPE, op, "weight", fmt_tshape(weight), fmt_shape(&g->C, 1));
  return 0;
}

/* Every target is a class or ignore_index; the first one that is not names
** its position. */
static int check_targets(const char *op, const int64_t *t, int64_t n,
                         int64_t C, int64_t ignore) {
  for (int64_t i = 0; i < n; i++)
    if (t[i] != ignore && (t[i] < 0 || t[i] >= C))
      return dl_err(EM_NN_TARGET_RANGE, op, (long long)t[i], (long long)C,
                    (long long)i);
  return 0;
}

/* Checks grad_out: the loss's shape (reduction none) or one element. */
static int check_grad_out(const char *op, const dl_tensor *go, const int64_t *shape,
                          int nd, int reduction) {
  if (reduction == DL_LOSS_NONE ? !nn_same_shape(go, shape, nd)
                                     : dl_tensor_numel(go) != 1) {
    const char *want = reduction == DL_LOSS_NONE ? fmt_shape(shape, nd)
                                                      : "one element";
    return dl_err(EM_NN_SHAPE, op, "grad_out", fmt_tshape(go), want);
  }
  return 0;
}

/* -- Per-position kernels ------------------------------------------------ */

typedef struct {
  int64_t N, C, S;
  const char *z;      /* logits (cross_entropy) or log-probabilities */
  const int64_t *t;
  const double *w;    /* C class weights, or NULL */
  int64_t ignore;
  int logits, smooth;
  /* forward: per position */
  double *nll, *sm, *wt;
  /* backward */
  const char *g;      /* upstream gradient: per position, or NULL */
  double g0;          /* the one upstream value (mean, sum) */
  double div;         /* mean: the weighted count of targets kept */
  double ls, wsum;    /* label_smoothing, sum of the class weights */
  char *gi;           /* grad input */
} cls_ctx;

/* log-sum-exp of the C values z[c * S], in double */
#define DEF_LSE(T, SFX)                                                      \
  static double lse_##SFX(const T *z, int64_t C, int64_t S) {               \
    double m = -INFINITY, s = 0;                                             \
    for (int64_t c = 0; c < C; c++)                                          \
      if ((double)z[c * S] > m || isnan((double)z[c * S])) m = z[c * S];     \
    if (isinf(m)) return NAN; /* PyTorch: inf - inf */                      \
    for (int64_t c = 0; c < C; c++) s += exp((double)z[c * S] - m);          \
    return m + log(s);                                                       \
  }
DEF_LSE(float, f32s)
DEF_LSE(double, f64)

/* exp(x) in double for x <= 0 (a softmax's z - lse), branch-free so the
** loop below vectorises: x = n ln2 + r (Cody-Waite), e^r by its Taylor
** series to r^13 (|r| <= ln2 / 2: the first term left out is below
** 2^-58), 2^n applied in two halves so the subnormals are right; below
** -745.2 the result is 0, NaN stays NaN.  Within 2 ulp of libm's exp: the
** gradients below are rounded to float32 once, the same as through exp. */
static inline double neg_exp(double x) {
  double xc = x < -745.2 ? 0.0 : x;  /* NaN fails the test and stays */
  double t = xc * 1.4426950408889634 + 6755399441055744.0;  /* round(x / ln2) */
  double n = t - 6755399441055744.0;
  double r = xc - n * 0.6931471803691238;
  r = r - n * 1.9082149292705877e-10;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int64_t ni;
  memcpy(&ni, &t, sizeof ni);
  ni -= 0x4338000000000000LL;  /* n, from the low bits of t */
  int64_t n1 = ni >> 1, n2 = ni - n1;
  uint64_t b1 = (uint64_t)(n1 + 1023) << 52, b2 = (uint64_t)(n2 + 1023) << 52;
  double s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  double y = p * s1 * s2;
  return x < -745.2 ? 0.0 : y;
}

/* The log-sum-exp of a float32 row (S = 1, as [N, C] always is): 8 lanes
** of core/simd.h's float exp (about 1 ulp each), summed in double.  The
** scalar double loop above made a GPT's cross entropy 6x PyTorch's time
** (2048 x 256 fwd+bwd: 9.9 ms against 1.6); the loss moves by ~1e-7
** relative, and the gradients below keep double exps (neg_exp). */
HOT static double lse_row_f32(const float *z, int64_t C) {
  v8f v, mv = (v8f){0} - INFINITY, sv = {0};
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    LD(v, z + c);
    mv = SEL(v > mv, v, mv);
  }
  float m = -INFINITY;
  for (int j = 0; j < 8; j++) m = mv[j] > m ? mv[j] : m;
  for (int64_t i = c; i < C; i++) m = z[i] > m ? z[i] : m;
  /* as lse_f32s: inf - inf is NaN; a NaN, skipped by the max, makes the
  ** sum NaN below */
  if (isinf(m)) return NAN;
  const v8f mm = (v8f){0} + m;
  for (c = 0; c + 8 <= C; c += 8) {
    LD(v, z + c);
    v -= mm;
    vexp8(&v);
    sv += v;
  }
  double s = 0;
  for (int j = 0; j < 8; j++) s += sv[j];
  for (; c < C; c++) s += vm_expf(z[c] - m);
  return m + log(s);
}

static double lse_f32(const float *z, int64_t C, int64_t S) {
  return S == 1 ? lse_row_f32(z, C) : lse_f32s(z, C, S);
}

/* The gradient row of a float32 row (S = 1) in double, as the general loop
** in cls_bwd computes it, with neg_exp for exp so it vectorises (glibc's
** exp, called per class, made a GPT's cross entropy 6x PyTorch's time):
** gi[c] = p[c] tot - B w[c] - A [c == t], rounded once.  Returns 0 where
** there is no such path (float64, S > 1). */
HOT static int grad_row_f32(float *gi, const float *z, int64_t C, int64_t S, int64_t t,
                            double lse, double tot, double A, double B, const double *w,
                            int smooth) {
  if (S != 1) return 0;
  /* the loops without the target's term vectorise; the target's entry is
  ** then computed alone, in double like the rest */
  if (!smooth)
    for (int64_t c = 0; c < C; c++) gi[c] = (float)(neg_exp((double)z[c] - lse) * tot);
  else
    for (int64_t c = 0; c < C; c++)
      gi[c] = (float)(neg_exp((double)z[c] - lse) * tot - B * (w ? w[c] : 1));
  gi[t] = (float)(neg_exp((double)z[t] - lse) * tot - (smooth ? B * (w ? w[t] : 1) : 0) - A);
  return 1;
}
static int grad_row_f64(double *gi, const double *z, int64_t C, int64_t S, int64_t t,
                        double lse, double tot, double A, double B, const double *w,
                        int smooth) {
  (void)gi, (void)z, (void)C, (void)S, (void)t, (void)lse, (void)tot, (void)A, (void)B,
      (void)w, (void)smooth;
  return 0;
}

#define DEF_CLS(T, SFX)                                                      \
  static void cls_fwd_##SFX(void *p, int64_t i0, int64_t i1) {              \
    const cls_ctx *k = p;                                                    \
    for (int64_t i = i0; i < i1; i++) {                                      \
      int64_t n = i / k->S, s = i % k->S, t = k->t[i];                       \
      const T *z = (const T *)k->z + n * k->C * k->S + s;                    \
      k->nll[i] = k->sm[i] = k->wt[i] = 0;                                   \
      if (t == k->ignore) continue;                                          \
      double lse = k->logits ? lse_##SFX(z, k->C, k->S) : 0;                 \
      double wt = k->w ? k->w[t] : 1;                                        \
      k->wt[i] = wt;                                                         \
      k->nll[i] = -wt * ((double)z[t * k->S] - lse);                         \
      if (k->smooth) {                                                       \
        double sm = 0;                                                       \
        for (int64_t c = 0; c < k->C; c++)                                   \
          sm += (k->w ? k->w[c] : 1) * (lse - (double)z[c * k->S]);          \
        k->sm[i] = sm;                                                       \
      }                                                                      \
    }                                                                        \
  }                                                                          \
  /* d/dz of (1 - ls) a_i nll_i + (ls / C) b_i sm_i: with p = softmax(z),   \
  ** p * (A + B * wsum) - A [c == t] - B w[c], A = (1 - ls) a_i w[t],       \
  ** B = ls / C * b_i; for nll (log-probabilities in) only -A [c == t]. */  \
  static void cls_bwd_##SFX(void *p, int64_t i0, int64_t i1) {              \
    const cls_ctx *k = p;                                                    \
    for (int64_t i = i0; i < i1; i++) {                                      \
      int64_t n = i / k->S, s = i % k->S, t = k->t[i];                       \
      const T *z = (const T *)k->z + n * k->C * k->S + s;                    \
      T *gi = (T *)k->gi + n * k->C * k->S + s;                              \
      if (t == k->ignore) {                                                  \
        for (int64_t c = 0; c < k->C; c++) gi[c * k->S] = 0;                 \
        continue;                                                            \
      }                                                                      \
      double g = k->g ? (double)((const T *)k->g)[i] : k->g0;                \
      double A = (1 - k->ls) * (g / k->div) * (k->w ? k->w[t] : 1);          \
      if (!k->logits) {                                                      \
        for (int64_t c = 0; c < k->C; c++) gi[c * k->S] = 0;                 \
        gi[t * k->S] = (T)-A;                                                \
        continue;                                                            \
      }                                                                      \
      double B = k->smooth ? k->ls / (double)k->C * (g / k->div) : 0;        \
      double lse = lse_##SFX(z, k->C, k->S), tot = A + B * k->wsum;          \
      /* in double, rounded once: the terms cancel as p nears its target  \
      ** (1, or the smoothing's share) */                                  \
      if (grad_row_##SFX(gi, z, k->C, k->S, t, lse, tot, A, B, k->w, k->smooth)) \
        continue;                                                            \
      for (int64_t c = 0; c < k->C; c++) {                                   \
        double pc = exp((double)z[c * k->S] - lse);                          \
        double v = pc * tot - (k->smooth ? B * (k->w ? k->w[c] : 1) : 0);    \
        if (c == t) v -= A;                                                  \
        gi[c * k->S] = (T)v;                                                 \
      }                                                                      \
    }                                                                        \
  }
DEF_CLS(float, f32)
DEF_CLS(double, f64)

static int64_t pos_grain(int64_t C) {
  return nn_max64(1, PAR_GRAIN / 8 / nn_max64(1, C));
}

/* -- Class-index losses: drivers ----------------------------------------- */

/* Shared by cross_entropy (logits = 1) and nll_loss (logits = 0). */
static dl_tensor *cls_forward(const char *op, int logits, const dl_tensor *input,
                              const dl_tensor *target, const dl_tensor *weight,
                              int64_t ignore_index, double ls, int reduction) {
  cls_geom g;
  if (cls_setup(op, input, target, weight, reduction, &g)) return NULL;
  if (!(ls >= 0 && ls <= 1)) return dl_errp(EM_NN_PROB, op, "label_smoothing", ls);
  int dev = nn_device(op, input, target, weight, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->cls_forward(op, logits, input, target, weight, ignore_index, ls, reduction, g.N, g.C, g.S, g.tshape, g.tnd) : NULL;
}

/* The CPU's kernel (core/device.h), after the op's checks. */
DL_HIDDEN dl_tensor *cpu_cls_forward(const char *op, cls_input logits, const dl_tensor *input, const dl_tensor *target, const dl_tensor *weight, int64_t ignore, double ls, dl_loss_reduction reduction, int64_t N, int64_t C, int64_t S, const int64_t *tshape, int tnd) {
  int kd = nn_kdtype(input->dtype);
  int64_t P = N * S, nbuf = 3 * P + C + 1;
  dl_tensor *ci = nn_prep_index(target), *cz = NULL, *buf = NULL, *out = NULL;
  if (!ci || check_targets(op, (const int64_t *)tensor_first(ci), P, C, ignore) ||
      !(cz = nn_prep(input, kd)) || !(buf = tensor_new(DL_FLOAT64, &nbuf, 1)))
    goto done;
  double *nll = (double *)tensor_first(buf), *sm = nll + P, *wt = sm + P, *w = wt + P;
  if (weight && dl_to_doubles(weight, w)) goto done;
  cls_ctx k = {.N = N, .C = C, .S = S, .z = tensor_first(cz),
               .t = (const int64_t *)tensor_first(ci), .w = weight ? w : NULL,
               .ignore = ignore, .logits = logits, .smooth = ls > 0,
               .nll = nll, .sm = sm, .wt = wt};
  parallel_for(P, pos_grain(C), kd == DL_FLOAT64 ? cls_fwd_f64 : cls_fwd_f32, &k);
  double a = 1 - ls, b = ls / (double)C;
  if (reduction == DL_LOSS_NONE) {
    for (int64_t i = 0; i < P; i++) nll[i] = ls > 0 ? a * nll[i] + b * sm[i] : nll[i];
    out = dl_from_doubles(nll, tshape, tnd, input->dtype);
  } else {
    double sn = 0, ss = 0, sw = 0;
    for (int64_t i = 0; i < P; i++) sn += nll[i], ss += sm[i], sw += wt[i];
    double v;
    if (reduction == DL_LOSS_SUM)
      v = ls > 0 ? a * sn + b * ss : sn;
    else  /* both terms over the (weighted) count of targets not ignored */
      v = ls > 0 ? a * (sn / sw) + b * (ss / sw) : sn / sw;
    out = dl_from_doubles(&v, &P, 0, input->dtype);
  }
done:
  dl_tensor_release(ci);
  dl_tensor_release(cz);
  dl_tensor_release(buf);
  return out;
}

static dl_tensor *cls_backward(const char *op, int logits, const dl_tensor *grad_out,
                               const dl_tensor *input, const dl_tensor *target,
                               const dl_tensor *weight, int64_t ignore_index,
                               double ls, int reduction, int checked) {
  cls_geom g;
  if (cls_setup(op, input, target, weight, reduction, &g) ||
      nn_check_float(op, "grad_out", grad_out, input->dtype) ||
      check_grad_out(op, grad_out, g.tshape, g.tnd, reduction))
    return NULL;
  if (!(ls >= 0 && ls <= 1)) return dl_errp(EM_NN_PROB, op, "label_smoothing", ls);
  int dev = nn_device(op, input, target, weight, grad_out, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->cls_backward(op, logits, grad_out, input, target, weight, ignore_index, ls, reduction, g.N, g.C, g.S, checked) : NULL;
}

/* The CPU's kernel (core/device.h), after the op's checks. */
DL_HIDDEN dl_tensor *cpu_cls_backward(const char *op, cls_input logits, const dl_tensor *grad_out, const dl_tensor *input, const dl_tensor *target, const dl_tensor *weight, int64_t ignore, double ls, dl_loss_reduction reduction, int64_t N, int64_t C, int64_t S, int checked) {
  (void)checked;
  int kd = nn_kdtype(input->dtype);
  int64_t P = N * S, nbuf = C + 1;
  dl_tensor *ci = nn_prep_index(target), *cz = NULL, *cg = NULL, *buf = NULL,
            *gi = NULL;
  if (!ci || check_targets(op, (const int64_t *)tensor_first(ci), P, C, ignore) ||
      !(cz = nn_prep(input, kd)) || !(cg = nn_prep(grad_out, kd)) ||
      !(buf = tensor_new(DL_FLOAT64, &nbuf, 1)) ||
      !(gi = tensor_new(kd, input->shape, input->ndim)))
    goto fail;
  double *w = (double *)tensor_first(buf), wsum = 0;
  if (weight && dl_to_doubles(weight, w)) goto fail;
  for (int64_t c = 0; c < C; c++) wsum += weight ? w[c] : 1;
  const int64_t *t = (const int64_t *)tensor_first(ci);
  cls_ctx k = {.N = N, .C = C, .S = S, .z = tensor_first(cz), .t = t,
               .w = weight ? w : NULL, .ignore = ignore, .logits = logits,
               .smooth = ls > 0, .ls = ls, .wsum = wsum, .div = 1,
               .gi = tensor_first(gi)};
  if (reduction == DL_LOSS_NONE) {
    k.g = tensor_first(cg);
  } else {
    double g0;
    if (dl_get_double(cg, 0, &g0)) goto fail;
    k.g0 = g0;
    if (reduction == DL_LOSS_MEAN) {
      double sw = 0;
      for (int64_t i = 0; i < P; i++)
        if (t[i] != ignore) sw += weight ? w[t[i]] : 1;
      k.div = sw;
    }
  }
  parallel_for(P, pos_grain(C), kd == DL_FLOAT64 ? cls_bwd_f64 : cls_bwd_f32, &k);
  dl_tensor_release(ci);
  dl_tensor_release(cz);
  dl_tensor_release(cg);
  dl_tensor_release(buf);
  return nn_finish(gi, input->dtype);
fail:
  dl_tensor_release(ci);
  dl_tensor_release(cz);
  dl_tensor_release(cg);
  dl_tensor_release(buf);
  dl_tensor_release(gi);
  return NULL;
}

DL_API dl_tensor *dl_cross_entropy(const dl_tensor *logits,
                                   const dl_tensor *target,
                                   const dl_tensor *weight,
                                   int64_t ignore_index,
                                   double label_smoothing, dl_loss_reduction reduction) {
  return cls_forward("cross_entropy", 1, logits, target, weight, ignore_index,
                     label_smoothing, reduction);
}

DL_API dl_tensor *dl_cross_entropy_backward(const dl_tensor *grad_out,
                                            const dl_tensor *logits,
                                            const dl_tensor *target,
                                            const dl_tensor *weight,
                                            int64_t ignore_index,
                                            double label_smoothing,
                                            dl_loss_reduction reduction) {
  return cls_backward("cross_entropy_backward", 1, grad_out, logits, target,
                      weight, ignore_index, label_smoothing, reduction, 0);
}

DL_API dl_tensor *dl_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                              const dl_tensor *weight, int64_t ignore_index,
                              dl_loss_reduction reduction) {
  return cls_forward("nll_loss", 0, logp, target, weight, ignore_index, 0,
                     reduction);
}

DL_API dl_tensor *dl_nll_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *logp,
                                       const dl_tensor *target,
                                       const dl_tensor *weight,
                                       int64_t ignore_index, dl_loss_reduction reduction) {
  return cls_backward("nll_loss_backward", 0, grad_out, logp, target, weight,
                      ignore_index, 0, reduction, 0);
}

DL_HIDDEN dl_tensor *nn_class_loss_backward(cls_input kind, const dl_tensor *grad_out,
                                            const dl_tensor *input, const dl_tensor *target,
                                            const dl_tensor *weight, int64_t ignore_index,
                                            double label_smoothing, int reduction) {
  return kind == CLS_LOG_PROBS
             ? cls_backward("nll_loss_backward", 0, grad_out, input, target, weight,
                            ignore_index, 0, reduction, 1)
             : cls_backward("cross_entropy_backward", 1, grad_out, input, target, weight,
                            ignore_index, label_smoothing, reduction, 1);
}

/* -- Mean squared error ---------------------------------------------------- */

/* Fixed blocks, so the sum's order does not depend on the threads. */
enum { MSE_BLOCK = 4096 };

typedef struct {
  int64_t n;
  const char *a, *b, *g;
  double g0, norm;
  char *out;       /* none: elementwise (a - b)^2; backward: the gradient */
  double *part;    /* sums of blocks */
} mse_ctx;

#define DEF_MSE(T, SFX)                                                      \
  static void mse_sq_##SFX(void *p, int64_t i0, int64_t i1) {               \
    const mse_ctx *k = p;                                                    \
    const T *a = (const T *)k->a, *b = (const T *)k->b;                      \
    T *o = (T *)k->out;                                                      \
    for (int64_t i = i0; i < i1; i++) {                                      \
      T d = a[i] - b[i];                                                     \
      o[i] = d * d;                                                          \
    }                                                                        \
  }                                                                          \
  static void mse_blocks_##SFX(void *p, int64_t b0, int64_t b1) {           \
    const mse_ctx *k = p;                                                    \
    const T *a = (const T *)k->a, *b = (const T *)k->b;                      \
    for (int64_t blk = b0; blk < b1; blk++) {                                \
      int64_t i0 = blk * MSE_BLOCK, i1 = nn_min64(i0 + MSE_BLOCK, k->n);     \
      double acc[8] = {0};                                                   \
      int64_t i = i0;                                                        \
      for (; i + 8 <= i1; i += 8)                                            \
        for (int j = 0; j < 8; j++) {                                        \
          double d = (double)a[i + j] - (double)b[i + j];                    \
          acc[j] += d * d;                                                   \
        }                                                                    \
      double s = 0;                                                          \
      for (int j = 0; j < 8; j++) s += acc[j];                               \
      for (; i < i1; i++) {                                                  \
        double d = (double)a[i] - (double)b[i];                              \
        s += d * d;                                                          \
      }                                                                      \
      k->part[blk] = s;                                                      \
    }                                                                        \
  }                                                                          \
  static void mse_grad_##SFX(void *p, int64_t i0, int64_t i1) {             \
    const mse_ctx *k = p;                                                    \
    const T *a = (const T *)k->a, *b = (const T *)k->b;                      \
    const T *g = (const T *)k->g;                                            \
    T *o = (T *)k->out, norm = (T)k->norm, g0 = (T)k->g0;                    \
    for (int64_t i = i0; i < i1; i++)                                        \
      o[i] = norm * (a[i] - b[i]) * (g ? g[i] : g0);                         \
  }
DEF_MSE(float, f32)
DEF_MSE(double, f64)

static int mse_setup(const char *op, const dl_tensor *input,
                     const dl_tensor *target, int reduction) {
  if (nn_check_float(op, "input", input, -1) ||
      nn_check_float(op, "target", target, input->dtype) ||
      nn_check_reduction(op, reduction))
    return -1;
  if (!nn_same_shape(target, input->shape, input->ndim))
    return dl_err(EM_NN_SHAPE, op, "target", fmt_tshape(target), fmt_tshape(input));
  return 0;
}

DL_API dl_tensor *dl_mse_loss(const dl_tensor *input, const dl_tensor *target,
                              dl_loss_reduction reduction) {
  const char *op = "mse_loss";
  if (mse_setup(op, input, target, reduction)) return NULL;
  int dev = nn_device(op, input, target, NULL, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->mse(op, input, target, reduction) : NULL;
}

/* The CPU's kernel (core/device.h), after the op's checks. */
DL_HIDDEN dl_tensor *cpu_mse(const char *op, const dl_tensor *input, const dl_tensor *target, dl_loss_reduction reduction) {
  (void)op;
  int kd = nn_kdtype(input->dtype), f64 = kd == DL_FLOAT64;
  int64_t n = dl_tensor_numel(input), nb = (n + MSE_BLOCK - 1) / MSE_BLOCK;
  dl_tensor *ca = nn_prep(input, kd), *cb = ca ? nn_prep(target, kd) : NULL;
  dl_tensor *out = NULL, *buf = NULL;
  if (!cb) goto done;
  mse_ctx k = {.n = n, .a = tensor_first(ca), .b = tensor_first(cb)};
  if (reduction == DL_LOSS_NONE) {
    if (!(out = tensor_new(kd, input->shape, input->ndim))) goto done;
    k.out = tensor_first(out);
    parallel_for(n, PAR_GRAIN, f64 ? mse_sq_f64 : mse_sq_f32, &k);
    out = nn_finish(out, input->dtype);
  } else {
    int64_t m = nn_max64(nb, 1);
    if (!(buf = tensor_new(DL_FLOAT64, &m, 1))) goto done;
    k.part = (double *)tensor_first(buf);
    parallel_for(nb, nn_max64(1, PAR_GRAIN / MSE_BLOCK), f64 ? mse_blocks_f64 : mse_blocks_f32, &k);
    double s = 0;
    for (int64_t i = 0; i < nb; i++) s += k.part[i];
    if (reduction == DL_LOSS_MEAN) s /= (double)n;
    out = dl_from_doubles(&s, &n, 0, input->dtype);
  }
done:
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(buf);
  return out;
}

DL_API dl_tensor *dl_mse_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *input,
                                       const dl_tensor *target, dl_loss_reduction reduction) {
  const char *op = "mse_loss_backward";
  if (mse_setup(op, input, target, reduction) ||
      nn_check_float(op, "grad_out", grad_out, input->dtype) ||
      check_grad_out(op, grad_out, input->shape, input->ndim, reduction))
    return NULL;
  int dev = nn_device(op, input, target, grad_out, NULL, NULL);
  if (dev < -1) return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->mse_backward(op, grad_out, input, target, reduction) : NULL;
}

/* The CPU's kernel (core/device.h), after the op's checks. */
DL_HIDDEN dl_tensor *cpu_mse_backward(const char *op, const dl_tensor *grad_out, const dl_tensor *input, const dl_tensor *target, dl_loss_reduction reduction) {
  (void)op;
  int kd = nn_kdtype(input->dtype), f64 = kd == DL_FLOAT64;
  int64_t n = dl_tensor_numel(input);
  dl_tensor *ca = nn_prep(input, kd), *cb = ca ? nn_prep(target, kd) : NULL;
  dl_tensor *cg = cb ? nn_prep(grad_out, kd) : NULL;
  dl_tensor *out = cg ? tensor_new(kd, input->shape, input->ndim) : NULL;
  if (out) {
    mse_ctx k = {.n = n, .a = tensor_first(ca), .b = tensor_first(cb),
                 .norm = reduction == DL_LOSS_MEAN ? 2.0 / (double)n : 2.0,
                 .out = tensor_first(out)};
    if (reduction == DL_LOSS_NONE) k.g = tensor_first(cg);
    else if (dl_get_double(cg, 0, &k.g0)) goto fail;
    parallel_for(n, PAR_GRAIN, f64 ? mse_grad_f64 : mse_grad_f32, &k);
  }
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(cg);
  return nn_finish(out, input->dtype);
fail:
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(cg);
  dl_tensor_release(out);
  return NULL;
}
