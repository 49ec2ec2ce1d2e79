/*
** scan.c -- ops along one dim of a tensor: cumsum, cumprod, softmax and
** log_softmax, over a contiguous [O, N, I] view.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "ops/forward.h"
#include "core/simd.h"
#include "core/vmath.h"

/* The dtype a kernel reads, and a running value of either kind. */
enum { KD_F32, KD_F64, KD_I64 };
typedef union { double d; int64_t i; } acc_t;
/* Columns handled together when the dim is not the last one. */
enum { CBLK = 1024 };

/* -- Scans and softmax over one dim of a contiguous [O, N, I] tensor ----- */

static void split_dim(const dl_tensor *t, int d, int64_t *O, int64_t *N,
                      int64_t *I) {
  *O = *N = *I = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (i < d) *O *= t->shape[i];
    else if (i == d) *N = t->shape[i];
    else *I *= t->shape[i];
  }
}

typedef struct {
  const char *x;
  char *y;
  int kd, flag;  /* flag: cumprod, or log_softmax */
  int64_t N, I, ncb;
} dim_ctx;

/* As PyTorch on the cpu, float32 scans accumulate in double. */
#define CUM_LOOP(T, F, EXPR)                                                  \
  do {                                                                       \
    const T *xv = (const T *)c->x + off;                                     \
    T *yv = (T *)c->y + off;                                                 \
    for (int64_t i = 0; i < bw; i++) yv[i] = (T)(acc[i].F = (EXPR));        \
  } while (0)

/* Scans along the last dim, one row per task. */
#define CUM_ROW(T, A, EXPR)                                                   \
  do {                                                                       \
    const T *xv = (const T *)c->x + t * c->N;                                \
    T *yv = (T *)c->y + t * c->N;                                            \
    A a = c->flag;                                                           \
    for (int64_t i = 0; i < c->N; i++) yv[i] = (T)(a = (EXPR));             \
  } while (0)

static void cum_body(void *c_, int64_t b, int64_t e) {
  const dim_ctx *c = c_;
  acc_t acc[CBLK];
  for (int64_t t = b; t < e && c->I == 1; t++) {
    int f = c->flag;
    if (c->kd == KD_F32 && f) CUM_ROW(float, double, a * xv[i]);
    else if (c->kd == KD_F32) CUM_ROW(float, double, a + xv[i]);
    else if (c->kd == KD_F64 && f) CUM_ROW(double, double, a * xv[i]);
    else if (c->kd == KD_F64) CUM_ROW(double, double, a + xv[i]);
    else if (f) CUM_ROW(int64_t, uint64_t, a * (uint64_t)xv[i]);
    else CUM_ROW(int64_t, uint64_t, a + (uint64_t)xv[i]);
  }
  for (int64_t t = b; t < e && c->I > 1; t++) {
    int64_t o = t / c->ncb, i0 = t % c->ncb * CBLK;
    int64_t bw = c->I - i0 < CBLK ? c->I - i0 : CBLK;
    for (int64_t i = 0; i < bw; i++) {
      if (c->kd == KD_I64) acc[i].i = c->flag;
      else acc[i].d = c->flag;
    }
    for (int64_t n = 0; n < c->N; n++) {
      int64_t off = (o * c->N + n) * c->I + i0;
      int f = c->flag;
      if (c->kd == KD_F32 && f) CUM_LOOP(float, d, acc[i].d * xv[i]);
      else if (c->kd == KD_F32) CUM_LOOP(float, d, acc[i].d + xv[i]);
      else if (c->kd == KD_F64 && f) CUM_LOOP(double, d, acc[i].d * xv[i]);
      else if (c->kd == KD_F64) CUM_LOOP(double, d, acc[i].d + xv[i]);
      else if (f) CUM_LOOP(int64_t, i, (int64_t)((uint64_t)acc[i].i * (uint64_t)xv[i]));
      else CUM_LOOP(int64_t, i, (int64_t)((uint64_t)acc[i].i + (uint64_t)xv[i]));
    }
  }
}

/* One row of floats: max, then exp(x - max) and its sum, then a scale.  A
** row of 1024 is 4 KB, so the second and third sweeps run from L1. */
HOT static void softmax_row_f32(float *y, const float *x, int64_t n, int lg) {
  v8f v, w, mv = (v8f){0} - INFINITY, mw = mv, sv = {0};
  int64_t i = 0;
  float m = -INFINITY;
  for (; i + 16 <= n; i += 16) {  /* two chains: the compare-select is slow */
    LD(v, x + i);
    LD(w, x + i + 8);
    mv = SEL(v > mv, v, mv);
    mw = SEL(w > mw, w, mw);
  }
  for (; i + 8 <= n; i += 8) {
    LD(v, x + i);
    mv = SEL(v > mv, v, mv);
  }
  mv = SEL(mw > mv, mw, mv);
  for (int j = 0; j < 8; j++) m = mv[j] > m ? mv[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  const v8f mm = (v8f){0} + m;
  for (i = 0; i + 8 <= n; i += 8) {
    LD(v, x + i);
    v -= mm;
    vexp8(&v);
    if (!lg) ST(y + i, v);
    sv += v;
  }
  double s = 0;
  for (int j = 0; j < 8; j++) s += sv[j];
  for (; i < n; i++) {
    float ex = expf(x[i] - m);
    if (!lg) y[i] = ex;
    s += ex;
  }
  if (lg) {
    float ls = logf((float)s);
    for (i = 0; i < n; i++) y[i] = x[i] - m - ls;
  } else {
    float inv = 1.0f / (float)s;
    for (i = 0; i < n; i++) y[i] *= inv;
  }
}

/* The other layouts: bw columns of N rows, I apart (I = 1: one row). */
#define SOFTMAX_COLS(NAME, T, EXP, LOG)                                       \
  HOT static void NAME(T *y, const T *x, int64_t N, int64_t I, int64_t bw,        \
                   int lg) {                                                 \
    T mx[CBLK], sm[CBLK];                                                    \
    for (int64_t b = 0; b < bw; b++) mx[b] = -INFINITY, sm[b] = 0;           \
    for (int64_t n = 0; n < N; n++)                                          \
      for (int64_t b = 0; b < bw; b++)                                       \
        mx[b] = x[n * I + b] > mx[b] ? x[n * I + b] : mx[b];                 \
    for (int64_t n = 0; n < N; n++)                                          \
      for (int64_t b = 0; b < bw; b++) {                                     \
        T ex = EXP(x[n * I + b] - mx[b]);                                    \
        if (!lg) y[n * I + b] = ex;                                          \
        sm[b] += ex;                                                         \
      }                                                                      \
    for (int64_t b = 0; b < bw; b++) sm[b] = lg ? LOG(sm[b]) : 1 / sm[b];    \
    for (int64_t n = 0; n < N; n++)                                          \
      for (int64_t b = 0; b < bw; b++)                                       \
        y[n * I + b] = lg ? x[n * I + b] - mx[b] - sm[b] : y[n * I + b] * sm[b]; \
  }
SOFTMAX_COLS(softmax_cols_f32, float, vm_expf, vm_logf)
SOFTMAX_COLS(softmax_cols_f64, double, exp, log)

static void softmax_body(void *c_, int64_t b, int64_t e) {
  const dim_ctx *c = c_;
  for (int64_t t = b; t < e; t++) {
    int64_t o = t / c->ncb, i0 = t % c->ncb * CBLK;
    int64_t bw = c->I - i0 < CBLK ? c->I - i0 : CBLK, off = o * c->N * c->I + i0;
    float *yf = (float *)c->y + off;
    const float *xf = (const float *)c->x + off;
    if (c->kd == KD_F32 && c->I == 1)
      softmax_row_f32(yf, xf, c->N, c->flag);
    else if (c->kd == KD_F32)
      softmax_cols_f32(yf, xf, c->N, c->I, bw, c->flag);
    else
      softmax_cols_f64((double *)c->y + off, (const double *)c->x + off, c->N,
                       c->I, bw, c->flag);
  }
}

/* The CPU's kernel (core/device.h): kind 0 cumsum, 1 cumprod, 2 softmax,
** 3 log_softmax along the middle dim of contiguous [O, N, I] x into y. */
DL_HIDDEN int cpu_dimop(const char *name, int kind, const dl_tensor *x, dl_tensor *y,
                        int64_t O, int64_t N, int64_t I) {
  (void)name;
  if (!dl_tensor_numel(y)) return 0;
  int cd = x->dtype;
  dim_ctx c = {tensor_first(x), tensor_first(y), KD_I64, kind & 1, 0, 0, 0};
  c.kd = cd == DL_FLOAT32 ? KD_F32 : cd == DL_FLOAT64 ? KD_F64 : KD_I64;
  c.N = N, c.I = I;
  c.ncb = (c.I + CBLK - 1) / CBLK;
  int64_t work = c.N * (c.I < CBLK ? c.I : CBLK);
  parallel_for(O * c.ncb, PAR_GRAIN / work + 1, kind >= 2 ? softmax_body : cum_body, &c);
  return 0;
}

/* Runs dim op kind over a contiguous copy of t in dtype cd on t's device;
** half results go back to their dtype. */
static dl_tensor *dim_op(const char *name, const dl_tensor *t, int dim, int cd, int kind) {
  int d;
  if (norm_dim(name, dim, t->ndim, &d)) return NULL;
  const dl_device *dv = device_of(name, t);
  dl_tensor *x = dv ? as_dtype(t, cd) : NULL, *xc = x ? fw_contiguous(x) : NULL;
  dl_tensor *y = xc ? tensor_new_on(t->storage->device, cd, t->shape, t->ndim) : NULL;
  if (y) {
    int64_t O, N, I;
    split_dim(t, d, &O, &N, &I);
    if (dv->dimop(name, kind, xc, y, O, N, I)) {
      dl_tensor_release(y);
      y = NULL;
    }
  }
  dl_tensor_release(x);
  dl_tensor_release(xc);
  if (y && is_half_dtype(t->dtype)) {
    dl_tensor *r = fw_to_dtype(y, t->dtype);
    dl_tensor_release(y);
    y = r;
  }
  return y;
}

static dl_tensor *cum_op(const char *name, const dl_tensor *t, int dim,
                         int prod) {
  if (check_tensor_any(name, t)) return NULL;
  int dt = t->dtype;
  int cd = is_half_dtype(dt) ? DL_FLOAT32 : dl_dtype_is_float(dt) ? dt : DL_INT64;
  return dim_op(name, t, dim, cd, prod ? 1 : 0);
}

DL_HIDDEN dl_tensor *fw_cumsum(const dl_tensor *t, int dim) {
  return cum_op("cumsum", t, dim, 0);
}

DL_HIDDEN dl_tensor *fw_cumprod(const dl_tensor *t, int dim) {
  return cum_op("cumprod", t, dim, 1);
}

static dl_tensor *softmax_op(const char *name, const dl_tensor *t, int dim,
                             int lg) {
  if (check_tensor_any(name, t)) return NULL;
  if (!dl_dtype_is_float(t->dtype) && dl_tensor_numel(t) == 0)
    return fw_clone(t);  /* as PyTorch, which checks dtypes in the kernel */
  if (!dl_dtype_is_float(t->dtype))
    return dl_errp(EM_DTYPE_NEED_FLOAT, name, fmt_dtype(t->dtype));
  int cd = t->dtype == DL_FLOAT64 ? DL_FLOAT64 : DL_FLOAT32;
  return dim_op(name, t, dim, cd, lg ? 3 : 2);
}

DL_HIDDEN dl_tensor *fw_softmax(const dl_tensor *t, int dim) {
  return softmax_op("softmax", t, dim, 0);
}

DL_HIDDEN dl_tensor *fw_log_softmax(const dl_tensor *t, int dim) {
  return softmax_op("log_softmax", t, dim, 1);
}
