/*
** scan.c -- cumsum and cumprod along one dim of a tensor, over a contiguous
** [O, N, I] view, and the driver such ops share (ops/softmax.c's too).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "ops/forward.h"

/* The dtype a kernel reads, and a running value of either kind. */
enum { KD_F32, KD_F64, KD_I64 };
typedef union { double d; int64_t i; } acc_t;
/* Columns handled together when the dim is not the last one. */
enum { CBLK = 1024 };

/* -- Ops over one dim of a contiguous [O, N, I] tensor ------------------- */

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
  int kd, flag;  /* flag: cumprod */
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

/* The CPU's kernel (core/device_slots.h): cumsum or cumprod along the
** middle dim of contiguous [O, N, I] x into y. */
DL_HIDDEN int cpu_scan(const char *name, scan_kind kind, const dl_tensor *x, dl_tensor *y,
                       int64_t O, int64_t N, int64_t I) {
  (void)name;
  if (!dl_tensor_numel(y)) return 0;
  int cd = x->dtype;
  dim_ctx c = {tensor_first(x), tensor_first(y), KD_I64, kind == SCAN_CUMPROD, 0, 0, 0};
  c.kd = cd == DL_FLOAT32 ? KD_F32 : cd == DL_FLOAT64 ? KD_F64 : KD_I64;
  c.N = N, c.I = I;
  c.ncb = (c.I + CBLK - 1) / CBLK;
  int64_t work = c.N * (c.I < CBLK ? c.I : CBLK);
  parallel_for(O * c.ncb, PAR_GRAIN / work + 1, cum_body, &c);
  return 0;
}

/* kernel over a contiguous copy of t in dtype cd on t's device, along dim
** (kind: the kernel's own); half results go back to their dtype. */
DL_HIDDEN dl_tensor *fw_along_dim(const char *name, const dl_tensor *t, int dim, int cd,
                                  dim_kernel kernel, int kind) {
  int d;
  if (norm_dim(name, dim, t->ndim, &d)) return NULL;
  const dl_device *dv = device_of(name, t);
  dl_tensor *x = dv ? as_dtype(t, cd) : NULL, *xc = x ? fw_contiguous(x) : NULL;
  dl_tensor *y = xc ? tensor_new_on(t->storage->device, cd, t->shape, t->ndim) : NULL;
  if (y) {
    int64_t O, N, I;
    split_dim(t, d, &O, &N, &I);
    if (kernel(dv, name, kind, xc, y, O, N, I)) {
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

static int scan_kernel(const dl_device *dv, const char *name, int kind, const dl_tensor *x,
                       dl_tensor *y, int64_t O, int64_t N, int64_t I) {
  return dv->scan(name, (scan_kind)kind, x, y, O, N, I);
}

static dl_tensor *cum_op(const char *name, const dl_tensor *t, int dim,
                         int prod) {
  if (check_tensor_any(name, t)) return NULL;
  int dt = t->dtype;
  int cd = is_half_dtype(dt) ? DL_FLOAT32 : dl_dtype_is_float(dt) ? dt : DL_INT64;
  return fw_along_dim(name, t, dim, cd, scan_kernel, prod ? SCAN_CUMPROD : SCAN_CUMSUM);
}

DL_HIDDEN dl_tensor *fw_cumsum(const dl_tensor *t, int dim) {
  return cum_op("cumsum", t, dim, 0);
}

DL_HIDDEN dl_tensor *fw_cumprod(const dl_tensor *t, int dim) {
  return cum_op("cumprod", t, dim, 1);
}

