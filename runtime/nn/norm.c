/*
** nn/norm.c -- layer normalisation and batch normalisation, forward and
** backward, with PyTorch's statistics (biased variance to normalise, the
** unbiased one for running_var).  Sums run in a fixed order (8 lanes, then
** double), so results do not depend on the thread count.
*/
#include <math.h>
#include <string.h>

#include "core/simd.h"
#include "nn/nn.h"

/* -- Row sums ---------------------------------------------------------------- */

/* Sum of a[i] and of (a[i] - ma) * (b[i] - mb) over a row, in 8 lanes of
** T, then double.  b NULL skips the second sum. */
#define DEF_ROW(T, SFX)                                                      \
  HOT static void row_sums_##SFX(const T *a, const T *b, T ma, T mb, int64_t n, \
                             double *s1, double *s2) {                      \
    typedef T V __attribute__((vector_size(8 * sizeof(T))));                 \
    V x = {0}, y = {0}, va, vb;                                              \
    int64_t i = 0;                                                           \
    for (; i + 8 <= n; i += 8) {                                             \
      memcpy(&va, a + i, sizeof va);                                         \
      x += va;                                                               \
    }                                                                        \
    double r = 0;                                                            \
    for (int k = 0; k < 8; k++) r += x[k];                                   \
    for (; i < n; i++) r += a[i];                                            \
    *s1 += r;                                                                \
    if (!b) return;                                                          \
    for (i = 0; i + 8 <= n; i += 8) {                                        \
      memcpy(&va, a + i, sizeof va);                                         \
      memcpy(&vb, b + i, sizeof vb);                                         \
      y += (va - ma) * (vb - mb);                                            \
    }                                                                        \
    r = 0;                                                                   \
    for (int k = 0; k < 8; k++) r += y[k];                                   \
    for (; i < n; i++) r += (a[i] - ma) * (b[i] - mb);                       \
    *s2 += r;                                                                \
  }
DEF_ROW(float, f32)
DEF_ROW(double, f64)

/* -- Layer norm ---------------------------------------------------------- */

typedef struct {
  int64_t M, N;                 /* rows, elements normalised together */
  double eps;
  const char *x, *w, *b, *gout;
  char *out, *mean, *rstd;      /* forward outputs */
  char *gx;                     /* backward */
  const char *smean, *srstd;    /* saved statistics */
  double *gw, *gb;              /* column sums (double) */
} ln_ctx;

#define DEF_LN(T, SFX)                                                       \
  HOT static void ln_fwd_##SFX(void *p, int64_t r0, int64_t r1) {               \
    const ln_ctx *c = p;                                                     \
    const T *w = (const T *)c->w, *b = (const T *)c->b;                      \
    for (int64_t r = r0; r < r1; r++) {                                      \
      const T *x = (const T *)c->x + r * c->N;                               \
      T *y = (T *)c->out + r * c->N;                                         \
      double s = 0, v = 0;                                                   \
      row_sums_##SFX(x, NULL, 0, 0, c->N, &s, NULL);                         \
      T mean = (T)(s / (double)c->N);                                        \
      s = 0;                                                                 \
      row_sums_##SFX(x, x, mean, mean, c->N, &s, &v);                        \
      T rstd = (T)(1.0 / sqrt(v / (double)c->N + c->eps));                   \
      ((T *)c->mean)[r] = mean;                                              \
      ((T *)c->rstd)[r] = rstd;                                              \
      if (w && b)                                                            \
        for (int64_t j = 0; j < c->N; j++)                                   \
          y[j] = (x[j] - mean) * rstd * w[j] + b[j];                         \
      else if (w)                                                            \
        for (int64_t j = 0; j < c->N; j++) y[j] = (x[j] - mean) * rstd * w[j]; \
      else if (b)                                                            \
        for (int64_t j = 0; j < c->N; j++) y[j] = (x[j] - mean) * rstd + b[j]; \
      else                                                                   \
        for (int64_t j = 0; j < c->N; j++) y[j] = (x[j] - mean) * rstd;      \
    }                                                                        \
  }                                                                          \
  /* grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gout * w */  \
  HOT static void ln_bwd_x_##SFX(void *p, int64_t r0, int64_t r1) {             \
    const ln_ctx *c = p;                                                     \
    const T *w = (const T *)c->w;                                            \
    for (int64_t r = r0; r < r1; r++) {                                      \
      const T *x = (const T *)c->x + r * c->N;                               \
      const T *go = (const T *)c->gout + r * c->N;                           \
      T *gx = (T *)c->gx + r * c->N;                                         \
      T mean = ((const T *)c->smean)[r], rstd = ((const T *)c->srstd)[r];    \
      typedef T V __attribute__((vector_size(8 * sizeof(T))));               \
      V la = {0}, lb = {0}, vg, vw, vx; /* 8 lanes, then double, as row_sums */ \
      int64_t j = 0;                                                         \
      for (; j + 8 <= c->N; j += 8) {                                        \
        memcpy(&vg, go + j, sizeof vg);                                      \
        memcpy(&vx, x + j, sizeof vx);                                       \
        if (w) {                                                             \
          memcpy(&vw, w + j, sizeof vw);                                     \
          vg *= vw;                                                          \
        }                                                                    \
        la += vg;                                                            \
        lb += vg * ((vx - mean) * rstd);                                     \
      }                                                                      \
      double a = 0, bs = 0;                                                  \
      for (int k = 0; k < 8; k++) a += la[k], bs += lb[k];                   \
      for (; j < c->N; j++) {                                                \
        T g = w ? go[j] * w[j] : go[j];                                      \
        a += g;                                                              \
        bs += g * ((x[j] - mean) * rstd);                                    \
      }                                                                      \
      T ma = (T)(a / (double)c->N), mb = (T)(bs / (double)c->N);             \
      if (w)                                                                 \
        for (j = 0; j < c->N; j++)                                           \
          gx[j] = rstd * (go[j] * w[j] - ma - (x[j] - mean) * rstd * mb);    \
      else                                                                   \
        for (j = 0; j < c->N; j++)                                           \
          gx[j] = rstd * (go[j] - ma - (x[j] - mean) * rstd * mb);           \
    }                                                                        \
  }                                                                          \
  /* columns [j0, j1) of grad_w = sum gout * xhat and grad_b = sum gout */   \
  HOT static void ln_bwd_wb_##SFX(void *p, int64_t j0, int64_t j1) {            \
    const ln_ctx *c = p;                                                     \
    for (int64_t j = j0; j < j1; j++) {                                      \
      if (c->gw) c->gw[j] = 0;                                               \
      if (c->gb) c->gb[j] = 0;                                               \
    }                                                                        \
    for (int64_t r = 0; r < c->M; r++) {                                     \
      const T *x = (const T *)c->x + r * c->N;                               \
      const T *go = (const T *)c->gout + r * c->N;                           \
      T mean = ((const T *)c->smean)[r], rstd = ((const T *)c->srstd)[r];    \
      if (c->gw)                                                             \
        for (int64_t j = j0; j < j1; j++)                                    \
          c->gw[j] += (double)(go[j] * ((x[j] - mean) * rstd));              \
      if (c->gb)                                                             \
        for (int64_t j = j0; j < j1; j++) c->gb[j] += (double)go[j];         \
    }                                                                        \
  }
DEF_LN(float, f32)
DEF_LN(double, f64)

/* Checks x, normalized_shape, w and b; sets *M and *N. */
static int ln_setup(const char *op, const dl_tensor *x, const int64_t *ns,
                    int nnorm, const dl_tensor *w, const dl_tensor *b,
                    int64_t *M, int64_t *N) {
  if (nn_check_float(op, "input", x, -1) ||
      (w && nn_check_float(op, "weight", w, x->dtype)) ||
      (b && nn_check_float(op, "bias", b, x->dtype)))
    return -1;
  if (!ns && nnorm > 0) return dl_err(EM_NULLARG, op, "normalized_shape");
  if (nnorm < 1 || nnorm > x->ndim) {
    char v[64];
    snprintf(v, sizeof v, "%d dims (input of shape %s)", nnorm, fmt_tshape(x));
    return dl_err(EM_NN_PARAM, op, "normalized_shape", "1 to the input's number of dims", v);
  }
  int axis = x->ndim - nnorm;
  if (memcmp(x->shape + axis, ns, sizeof(int64_t) * (size_t)nnorm)) {
    char want[240];
    snprintf(want, sizeof want, "a shape ending in normalized_shape %s",
             fmt_shape(ns, nnorm));
    return dl_err(EM_NN_SHAPE, op, "input", fmt_tshape(x), want);
  }
  if (w && !nn_same_shape(w, ns, nnorm))
    return dl_err(EM_NN_SHAPE, op, "weight", fmt_tshape(w), fmt_shape(ns, nnorm));
  if (b && !nn_same_shape(b, ns, nnorm))
    return dl_err(EM_NN_SHAPE, op, "bias", fmt_tshape(b), fmt_shape(ns, nnorm));
  *N = shape_numel(ns, nnorm);
  *M = *N ? dl_tensor_numel(x) / *N : 0;
  return 0;
}

static int64_t row_grain(int64_t n) {
  return nn_max64(1, PAR_GRAIN / nn_max64(1, n));
}

DL_API int dl_layer_norm(const dl_tensor *x, const int64_t *normalized_shape,
                         int nnorm, const dl_tensor *w, const dl_tensor *b,
                         double eps, dl_tensor **out, dl_tensor **mean,
                         dl_tensor **rstd) {
  const char *op = "layer_norm";
  if (!out || !mean || !rstd) return dl_err(EM_NULLARG, op, "out");
  *out = *mean = *rstd = NULL;
  int64_t M = 0, N = 0;
  if (ln_setup(op, x, normalized_shape, nnorm, w, b, &M, &N)) return -1;
  int axis = x->ndim - nnorm;
  int dev = nn_device(op, x, w, b, NULL, NULL);
  if (dev < -1) return -1;
  int64_t ss[DL_MAX_DIMS];  /* mean and rstd: x's shape, 1 in the normalized dims */
  for (int i = 0; i < x->ndim; i++) ss[i] = i < axis ? x->shape[i] : 1;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->layer_norm(op, x, M, N, ss, w, b, eps, out, mean, rstd) : -1;
}

/* The CPU's kernel (core/device.h): x as M rows of N, mean and rstd of
** shape ss. */
DL_HIDDEN int cpu_layer_norm(const char *op, const dl_tensor *x, int64_t M, int64_t N,
                             const int64_t *ss, const dl_tensor *w, const dl_tensor *b,
                             double eps, dl_tensor **out, dl_tensor **mean, dl_tensor **rstd) {
  (void)op;
  int kd = nn_kdtype(x->dtype);
  dl_tensor *cx = nn_prep(x, kd), *cw = NULL, *cb = NULL, *o = NULL,
            *mu = NULL, *rs = NULL;
  if (!cx || (w && !(cw = nn_prep(w, kd))) || (b && !(cb = nn_prep(b, kd))) ||
      !(o = tensor_new(kd, x->shape, x->ndim)) ||
      !(mu = tensor_new(kd, ss, x->ndim)) || !(rs = tensor_new(kd, ss, x->ndim)))
    goto fail;
  ln_ctx c = {.M = M, .N = N, .eps = eps, .x = tensor_first(cx),
              .w = cw ? tensor_first(cw) : NULL, .b = cb ? tensor_first(cb) : NULL,
              .out = tensor_first(o), .mean = tensor_first(mu), .rstd = tensor_first(rs)};
  parallel_for(M, row_grain(N), kd == DL_FLOAT64 ? ln_fwd_f64 : ln_fwd_f32, &c);
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cb);
  if (!(*out = nn_finish(o, x->dtype))) {
    dl_tensor_release(mu);
    dl_tensor_release(rs);
    return -1;
  }
  *mean = mu, *rstd = rs;
  return 0;
fail:
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cb);
  dl_tensor_release(o);
  dl_tensor_release(mu);
  dl_tensor_release(rs);
  return -1;
}

DL_API int dl_layer_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x,
                                  const int64_t *normalized_shape, int nnorm,
                                  const dl_tensor *mean, const dl_tensor *rstd,
                                  const dl_tensor *w, int need_x, int need_w,
                                  int need_b, dl_tensor **grad_x,
                                  dl_tensor **grad_w, dl_tensor **grad_b) {
  const char *op = "layer_norm_backward";
  if (grad_x) *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_b) *grad_b = NULL;
  if ((need_x && !grad_x) || (need_w && !grad_w) || (need_b && !grad_b))
    return dl_err(EM_NULLARG, op, "for a needed gradient");
  int64_t M = 0, N = 0;
  if (ln_setup(op, x, normalized_shape, nnorm, w, NULL, &M, &N) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype) ||
      nn_check_float(op, "mean", mean, -1) || nn_check_float(op, "rstd", rstd, -1))
    return -1;
  if (!nn_same_shape(grad_out, x->shape, x->ndim))
    return dl_err(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out), fmt_tshape(x));
  if (dl_tensor_numel(mean) != M || dl_tensor_numel(rstd) != M) {
    char want[64];
    snprintf(want, sizeof want, "%lld elements (one per row)", (long long)M);
    return dl_err(EM_NN_SHAPE, op, "mean", fmt_tshape(mean), want);
  }
  int dev = nn_device(op, x, grad_out, mean, rstd, w);
  if (dev < -1) return -1;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->layer_norm_backward(op, grad_out, x, normalized_shape, nnorm, M, N, mean,
                                      rstd, w, need_x, need_w, need_b, grad_x, grad_w, grad_b)
            : -1;
}

/* The CPU's kernel (core/device.h): the gradients asked for (need_*). */
DL_HIDDEN int cpu_layer_norm_backward(const char *op, const dl_tensor *grad_out,
                                      const dl_tensor *x, const int64_t *normalized_shape,
                                      int nnorm, int64_t M, int64_t N, const dl_tensor *mean,
                                      const dl_tensor *rstd, const dl_tensor *w, int need_x,
                                      int need_w, int need_b, dl_tensor **grad_x,
                                      dl_tensor **grad_w, dl_tensor **grad_b) {
  (void)op;
  int kd = nn_kdtype(x->dtype), rc = -1;
  dl_tensor *cx = NULL, *cg = NULL, *cm = NULL, *cr = NULL, *cw = NULL,
            *gx = NULL, *gw = NULL, *gb = NULL;
  double *sums = NULL;
  if (!(cx = nn_prep(x, kd)) || !(cg = nn_prep(grad_out, kd)) ||
      !(cm = nn_prep(mean, kd)) || !(cr = nn_prep(rstd, kd)) ||
      (w && !(cw = nn_prep(w, kd))))
    goto done;
  ln_ctx c = {.M = M, .N = N, .x = tensor_first(cx), .gout = tensor_first(cg),
              .w = cw ? tensor_first(cw) : NULL, .smean = tensor_first(cm),
              .srstd = tensor_first(cr)};
  if (need_x) {
    if (!(gx = tensor_new(kd, x->shape, x->ndim))) goto done;
    c.gx = tensor_first(gx);
    parallel_for(M, row_grain(N), kd == DL_FLOAT64 ? ln_bwd_x_f64 : ln_bwd_x_f32, &c);
  }
  if (need_w || need_b) {
    int64_t n = 2 * N;
    dl_tensor *buf = tensor_new(DL_FLOAT64, &n, 1);
    if (!buf) goto done;
    sums = (double *)tensor_first(buf);
    c.gw = need_w ? sums : NULL;
    c.gb = need_b ? sums + N : NULL;
    parallel_for(N, nn_max64(64, row_grain(M)),
                 kd == DL_FLOAT64 ? ln_bwd_wb_f64 : ln_bwd_wb_f32, &c);
    if ((need_w && !(gw = dl_from_doubles(sums, normalized_shape, nnorm, x->dtype))) ||
        (need_b && !(gb = dl_from_doubles(sums + N, normalized_shape, nnorm, x->dtype)))) {
      dl_tensor_release(buf);
      goto done;
    }
    dl_tensor_release(buf);
  }
  if (need_x && !(gx = nn_finish(gx, x->dtype))) goto done;
  nn_give_grads(&gx, &gw, &gb, grad_x, grad_w, grad_b);
  rc = 0;
done:
  dl_tensor_release(cx);
  dl_tensor_release(cg);
  dl_tensor_release(cm);
  dl_tensor_release(cr);
  dl_tensor_release(cw);
  dl_tensor_release(gx);
  dl_tensor_release(gw);
  dl_tensor_release(gb);
  return rc;
}

/* -- Batch norm ---------------------------------------------------------- */

/* x viewed as [N, C, S]; per-channel sums s1 = sum a and
** s2 = sum (a - ma[c]) * (b - mb[c]) over N and S (ma, mb NULL: 0). */
typedef struct {
  int64_t N, C, S;
  const char *a, *b;
  const double *ma, *mb;
  double *s1, *s2;
} chan_ctx;

#define DEF_CHAN(T, SFX)                                                     \
  static void chan_sums_##SFX(void *p, int64_t c0, int64_t c1) {            \
    const chan_ctx *k = p;                                                   \
    const T *a = (const T *)k->a, *b = (const T *)k->b;                      \
    for (int64_t c = c0; c < c1; c++) {                                      \
      k->s1[c] = 0;                                                          \
      if (k->s2) k->s2[c] = 0;                                               \
    }                                                                        \
    if (k->S == 1) { /* [N, C]: columns, accumulated row by row */           \
      for (int64_t n = 0; n < k->N; n++)                                     \
        for (int64_t c = c0; c < c1; c++) {                                  \
          double va = (double)a[n * k->C + c];                               \
          k->s1[c] += va;                                                    \
          if (k->s2)                                                         \
            k->s2[c] += (va - (k->ma ? k->ma[c] : 0)) *                      \
                        ((double)b[n * k->C + c] - (k->mb ? k->mb[c] : 0));  \
        }                                                                    \
      return;                                                                \
    }                                                                        \
    for (int64_t c = c0; c < c1; c++) {                                      \
      T ma = (T)(k->ma ? k->ma[c] : 0), mb = (T)(k->mb ? k->mb[c] : 0);      \
      for (int64_t n = 0; n < k->N; n++) {                                   \
        int64_t off = (n * k->C + c) * k->S;                                 \
        row_sums_##SFX(a + off, k->s2 ? b + off : NULL, ma, mb, k->S,        \
                       &k->s1[c], k->s2 ? &k->s2[c] : NULL);                 \
      }                                                                      \
    }                                                                        \
  }
DEF_CHAN(float, f32)
DEF_CHAN(double, f64)

/* y = x * scale[c] + shift[c] over [N, C, S] (rows of S on the pool);
** with go: y = (go - shift2[c] - (x - mean[c]) * k2[c]) * scale[c]. */
typedef struct {
  int64_t N, C, S;
  const char *x, *go;
  const double *scale, *shift, *mean, *k2;
  char *y;
} affine_ctx;

#define DEF_AFFINE(T, SFX)                                                   \
  static void affine_##SFX(void *p, int64_t r0, int64_t r1) {               \
    const affine_ctx *k = p;                                                 \
    for (int64_t r = r0; r < r1; r++) { /* r = n * C + c (S > 1) or n */     \
      int64_t c0 = k->S == 1 ? 0 : r % k->C, nc = k->S == 1 ? k->C : 1;      \
      int64_t len = k->S == 1 ? 1 : k->S;                                    \
      for (int64_t ci = 0; ci < nc; ci++) {                                  \
        int64_t c = c0 + ci, off = k->S == 1 ? r * k->C + c : r * k->S;      \
        const T *x = (const T *)k->x + off;                                  \
        T *y = (T *)k->y + off;                                              \
        T sc = (T)k->scale[c], sh = (T)k->shift[c];                          \
        if (!k->go) {                                                        \
          for (int64_t i = 0; i < len; i++) y[i] = x[i] * sc + sh;           \
        } else {                                                             \
          const T *go = (const T *)k->go + off;                              \
          T m = (T)k->mean[c], k2 = (T)k->k2[c];                             \
          for (int64_t i = 0; i < len; i++)                                  \
            y[i] = (go[i] - sh - (x[i] - m) * k2) * sc;                      \
        }                                                                    \
      }                                                                      \
    }                                                                        \
  }
DEF_AFFINE(float, f32)
DEF_AFFINE(double, f64)

static void run_affine(affine_ctx *k, int f64) {
  int64_t rows = k->S == 1 ? k->N : k->N * k->C;
  int64_t per = k->S == 1 ? k->C : k->S;
  parallel_for(rows, row_grain(per), f64 ? affine_f64 : affine_f32, k);
}

static void run_chan(chan_ctx *k, int f64) {
  int64_t per = k->N * k->S;
  int64_t grain = nn_max64(k->S == 1 ? 64 : 1, row_grain(per));
  parallel_for(k->C, grain, f64 ? chan_sums_f64 : chan_sums_f32, k);
}

/* Checks a per-channel tensor: [C] (numel C, any layout). */
static int bn_check_vec(const char *op, const char *what, const dl_tensor *t,
                        int64_t C) {
  if (!t) return 0;
  if (nn_check_float(op, what, t, -1)) return -1;
  if (t->ndim != 1 || t->shape[0] != C)
    return dl_err(EM_NN_SHAPE, op, what, fmt_tshape(t), fmt_shape(&C, 1));
  return 0;
}

/* Reads a per-channel tensor as C doubles into out (1 when t is NULL and
** dflt is 1, etc.). */
static int read_vec(const dl_tensor *t, int64_t C, double dflt, double *out) {
  if (!t) {
    for (int64_t c = 0; c < C; c++) out[c] = dflt;
    return 0;
  }
  return dl_to_doubles(t, out);
}

static int bn_setup(const char *op, const dl_tensor *x, const dl_tensor *w,
                    int64_t *N, int64_t *C, int64_t *S) {
  if (nn_check_float(op, "input", x, -1)) return -1;
  if (x->ndim < 2)
    return dl_err(EM_NN_NDIM, op, "an input of 2 or more dims [N, C, ...]",
                  "an input", fmt_tshape(x));
  *N = x->shape[0], *C = x->shape[1];
  *S = shape_numel(x->shape + 2, x->ndim - 2);
  return bn_check_vec(op, "weight", w, *C);
}

DL_API int dl_batch_norm(const dl_tensor *x, const dl_tensor *w,
                         const dl_tensor *b, dl_tensor *running_mean,
                         dl_tensor *running_var, int training,
                         double momentum, double eps, dl_tensor **out,
                         dl_tensor **save_mean, dl_tensor **save_invstd) {
  const char *op = "batch_norm";
  if (!out || !save_mean || !save_invstd) return dl_err(EM_NULLARG, op, "out");
  *out = *save_mean = *save_invstd = NULL;
  int64_t N = 0, C = 0, S = 0;
  if (bn_setup(op, x, w, &N, &C, &S) || bn_check_vec(op, "bias", b, C) ||
      bn_check_vec(op, "running_mean", running_mean, C) ||
      bn_check_vec(op, "running_var", running_var, C))
    return -1;
  if (!training && (!running_mean || !running_var))
    return dl_err(EM_NULLARG, op, "running_mean/running_var (needed in eval mode)");
  int64_t count = N * S;
  if (training && count == 1) return dl_err(EM_BN_ONE_VALUE, op, fmt_tshape(x));
  const dl_tensor *ts[5] = {x, w, b, running_mean, running_var};
  int dev = op_device_opt(op, 5, ts);
  if (dev < -1) return -1;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->batch_norm(op, x, w, b, running_mean, running_var, training, momentum, eps,
                             N, C, S, out, save_mean, save_invstd)
            : -1;
}

/* The CPU's kernel (core/device.h): x as [N, C, S]. */
DL_HIDDEN int cpu_batch_norm(const char *op, const dl_tensor *x, const dl_tensor *w,
                             const dl_tensor *b, dl_tensor *running_mean,
                             dl_tensor *running_var, int training, double momentum,
                             double eps, int64_t N, int64_t C, int64_t S, dl_tensor **out,
                             dl_tensor **save_mean, dl_tensor **save_invstd) {
  (void)op;
  int64_t count = N * S;
  int kd = nn_kdtype(x->dtype), f64 = kd == DL_FLOAT64, rc = -1;
  int64_t n6 = 6 * C > 0 ? 6 * C : 1;
  dl_tensor *buf = tensor_new(DL_FLOAT64, &n6, 1), *cx = NULL, *o = NULL,
            *sm = NULL, *si = NULL;
  if (!buf) return -1;
  double *mean = (double *)tensor_first(buf), *var = mean + C, *wv = var + C,
         *bv = wv + C, *scale = bv + C, *shift = scale + C;
  if (!(cx = nn_prep(x, kd)) || read_vec(w, C, 1, wv) || read_vec(b, C, 0, bv))
    goto done;
  if (training) {
    chan_ctx k = {N, C, S, tensor_first(cx), NULL, NULL, NULL, mean, NULL};
    run_chan(&k, f64);
    for (int64_t c = 0; c < C; c++) mean[c] /= (double)count;
    k.b = k.a, k.ma = k.mb = mean, k.s1 = scale, k.s2 = var;
    run_chan(&k, f64);
    for (int64_t c = 0; c < C; c++) var[c] /= (double)count;
    if (running_mean || running_var) {
      /* shift holds the old running values while they are updated */
      if (running_mean) {
        if (read_vec(running_mean, C, 0, shift)) goto done;
        for (int64_t c = 0; c < C; c++)
          shift[c] = (1 - momentum) * shift[c] + momentum * mean[c];
        dl_tensor *t = dl_from_doubles(shift, &C, 1, running_mean->dtype);
        int e = !t || fw_copy_(running_mean, t);
        dl_tensor_release(t);
        if (e) goto done;
      }
      if (running_var) {
        if (read_vec(running_var, C, 0, shift)) goto done;
        double unb = count > 1 ? (double)count / (double)(count - 1) : NAN;
        for (int64_t c = 0; c < C; c++)
          shift[c] = (1 - momentum) * shift[c] + momentum * var[c] * unb;
        dl_tensor *t = dl_from_doubles(shift, &C, 1, running_var->dtype);
        int e = !t || fw_copy_(running_var, t);
        dl_tensor_release(t);
        if (e) goto done;
      }
    }
  } else if (read_vec(running_mean, C, 0, mean) || read_vec(running_var, C, 0, var)) {
    goto done;
  }
  /* var now holds invstd */
  for (int64_t c = 0; c < C; c++) {
    var[c] = 1.0 / sqrt(var[c] + eps);
    scale[c] = var[c] * wv[c];
    shift[c] = bv[c] - mean[c] * scale[c];
  }
  if (!(o = tensor_new(kd, x->shape, x->ndim)) ||
      !(sm = dl_from_doubles(mean, &C, 1, kd)) ||
      !(si = dl_from_doubles(var, &C, 1, kd)))
    goto done;
  affine_ctx a = {N, C, S, tensor_first(cx), NULL, scale, shift, NULL, NULL,
                  tensor_first(o)};
  run_affine(&a, f64);
  if (!(*out = nn_finish(o, x->dtype))) {
    o = NULL;
    goto done;
  }
  o = NULL;
  *save_mean = sm, *save_invstd = si;
  sm = si = NULL;
  rc = 0;
done:
  dl_tensor_release(buf);
  dl_tensor_release(cx);
  dl_tensor_release(o);
  dl_tensor_release(sm);
  dl_tensor_release(si);
  return rc;
}

DL_API int dl_batch_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *save_mean,
                                  const dl_tensor *save_invstd, int training,
                                  int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w,
                                  dl_tensor **grad_b) {
  const char *op = "batch_norm_backward";
  if (grad_x) *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_b) *grad_b = NULL;
  if ((need_x && !grad_x) || (need_w && !grad_w) || (need_b && !grad_b))
    return dl_err(EM_NULLARG, op, "for a needed gradient");
  int64_t N = 0, C = 0, S = 0;
  if (bn_setup(op, x, w, &N, &C, &S) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype))
    return -1;
  if (!save_mean || !save_invstd)
    return dl_err(EM_NULLARG, op, "save_mean/save_invstd");
  if (bn_check_vec(op, "save_mean", save_mean, C) ||
      bn_check_vec(op, "save_invstd", save_invstd, C))
    return -1;
  if (!nn_same_shape(grad_out, x->shape, x->ndim))
    return dl_err(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out), fmt_tshape(x));
  int dev = nn_device(op, x, grad_out, w, save_mean, save_invstd);
  if (dev < -1) return -1;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->batch_norm_backward(op, grad_out, x, w, save_mean, save_invstd, training,
                                      need_x, need_w, need_b, N, C, S, grad_x, grad_w, grad_b)
            : -1;
}

/* The CPU's kernel (core/device.h): x as [N, C, S]. */
DL_HIDDEN int cpu_batch_norm_backward(const char *op, const dl_tensor *grad_out,
                                      const dl_tensor *x, const dl_tensor *w,
                                      const dl_tensor *save_mean, const dl_tensor *save_invstd,
                                      int training, int need_x, int need_w, int need_b,
                                      int64_t N, int64_t C, int64_t S, dl_tensor **grad_x,
                                      dl_tensor **grad_w, dl_tensor **grad_b) {
  (void)op;
  int kd = nn_kdtype(x->dtype), f64 = kd == DL_FLOAT64, rc = -1;
  int64_t n8 = 8 * C > 0 ? 8 * C : 1, count = N * S;
  dl_tensor *buf = tensor_new(DL_FLOAT64, &n8, 1), *cx = NULL, *cg = NULL,
            *gx = NULL, *gw = NULL, *gb = NULL;
  if (!buf) return -1;
  double *mean = (double *)tensor_first(buf), *inv = mean + C, *wv = inv + C,
         *sdy = wv + C, *sdx = sdy + C, *scale = sdx + C, *shift = scale + C,
         *k2 = shift + C;
  if (!(cx = nn_prep(x, kd)) || !(cg = nn_prep(grad_out, kd)) ||
      read_vec(save_mean, C, 0, mean) || read_vec(save_invstd, C, 1, inv) ||
      read_vec(w, C, 1, wv))
    goto done;
  /* sdy = sum gout, sdx = sum gout * (x - mean) */
  chan_ctx k = {N, C, S, tensor_first(cg), tensor_first(cx), NULL, mean, sdy, sdx};
  run_chan(&k, f64);
  if (need_x) {
    /* training: gx = (gout - sdy / n - (x - mean) * inv^2 * sdx / n) * inv * w
    ** (the batch statistics depend on x); eval: gx = gout * inv * w */
    int batch = training && count > 0;
    for (int64_t c = 0; c < C; c++) {
      scale[c] = inv[c] * wv[c];
      shift[c] = batch ? sdy[c] / (double)count : 0;
      k2[c] = batch ? inv[c] * inv[c] * sdx[c] / (double)count : 0;
    }
    if (!(gx = tensor_new(kd, x->shape, x->ndim))) goto done;
    affine_ctx a = {N, C, S, tensor_first(cx), tensor_first(cg), scale, shift,
                    mean, k2, tensor_first(gx)};
    run_affine(&a, f64);
  }
  if (need_w) {
    for (int64_t c = 0; c < C; c++) scale[c] = sdx[c] * inv[c];
    if (!(gw = dl_from_doubles(scale, &C, 1, x->dtype))) goto done;
  }
  if (need_b && !(gb = dl_from_doubles(sdy, &C, 1, x->dtype))) goto done;
  if (need_x && !(gx = nn_finish(gx, x->dtype))) goto done;
  nn_give_grads(&gx, &gw, &gb, grad_x, grad_w, grad_b);
  rc = 0;
done:
  dl_tensor_release(buf);
  dl_tensor_release(cx);
  dl_tensor_release(cg);
  dl_tensor_release(gx);
  dl_tensor_release(gw);
  dl_tensor_release(gb);
  return rc;
}
