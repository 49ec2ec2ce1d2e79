/*
** softmax.c -- softmax and log_softmax along one dim: the op (dtypes; the
** driver is ops/scan.c's) and the CPU's kernels, a row at a time in 8 float
** lanes when the dim is the last, else in blocks of columns.
*/
#include <math.h>

#include "core/device.h"
#include "core/simd.h"
#include "core/vmath.h"
#include "ops/forward.h"

/* The dtype a kernel reads. */
enum { KD_F32, KD_F64 };
/* Columns handled together when the dim is not the last one. */
enum { CBLK = 1024 };

typedef struct {
  const char *x;
  char *y;
  int kd, lg;  /* lg: log_softmax */
  int64_t N, I, ncb;
} softmax_ctx;

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
  const softmax_ctx *c = c_;
  for (int64_t t = b; t < e; t++) {
    int64_t o = t / c->ncb, i0 = t % c->ncb * CBLK;
    int64_t bw = c->I - i0 < CBLK ? c->I - i0 : CBLK, off = o * c->N * c->I + i0;
    float *yf = (float *)c->y + off;
    const float *xf = (const float *)c->x + off;
    if (c->kd == KD_F32 && c->I == 1)
      softmax_row_f32(yf, xf, c->N, c->lg);
    else if (c->kd == KD_F32)
      softmax_cols_f32(yf, xf, c->N, c->I, bw, c->lg);
    else
      softmax_cols_f64((double *)c->y + off, (const double *)c->x + off, c->N,
                       c->I, bw, c->lg);
  }
}

/* The CPU's kernel (core/device_slots.h): softmax (log: log_softmax) along
** the middle dim of contiguous float [O, N, I] x into y. */
DL_HIDDEN int cpu_softmax(const char *name, int log, const dl_tensor *x, dl_tensor *y,
                          int64_t O, int64_t N, int64_t I) {
  (void)name;
  if (!dl_tensor_numel(y)) return 0;
  softmax_ctx c = {tensor_first(x), tensor_first(y), x->dtype == DL_FLOAT32 ? KD_F32 : KD_F64,
                   log != 0, N, I, (I + CBLK - 1) / CBLK};
  int64_t work = c.N * (c.I < CBLK ? c.I : CBLK);
  parallel_for(O * c.ncb, PAR_GRAIN / work + 1, softmax_body, &c);
  return 0;
}

static int softmax_kernel(const dl_device *dv, const char *name, int log, const dl_tensor *x,
                          dl_tensor *y, int64_t O, int64_t N, int64_t I) {
  return dv->softmax(name, log, x, y, O, N, I);
}

static dl_tensor *softmax_op(const char *name, const dl_tensor *t, int dim,
                             int lg) {
  if (check_tensor_any(name, t)) return NULL;
  if (!dl_dtype_is_float(t->dtype) && dl_tensor_numel(t) == 0)
    return fw_clone(t);  /* as PyTorch, which checks dtypes in the kernel */
  if (!dl_dtype_is_float(t->dtype))
    return dl_errp(EM_DTYPE_NEED_FLOAT, name, fmt_dtype(t->dtype));
  int cd = t->dtype == DL_FLOAT64 ? DL_FLOAT64 : DL_FLOAT32;
  return fw_along_dim(name, t, dim, cd, softmax_kernel, lg);
}

DL_HIDDEN dl_tensor *fw_softmax(const dl_tensor *t, int dim) {
  return softmax_op("softmax", t, dim, 0);
}

DL_HIDDEN dl_tensor *fw_log_softmax(const dl_tensor *t, int dim) {
  return softmax_op("log_softmax", t, dim, 1);
}
