/*
** nn/image_resize.c -- image resampling as torchvision.transforms.v2 does
** it on tensors: resize (bilinear with or without antialias, nearest) and
** the fused crop -> resize -> center crop -> flip -> to float32 ->
** normalise of a training or evaluation pipeline, in one pass.
**
** The weights are torch's (aten/src/ATen/native/cpu/UpSampleKernel.cpp):
** bilinear with antialias is a triangle filter whose support grows with
** the downscale factor, its weights normalised (PIL's resampling, torch's
** _upsample_bilinear2d_aa); without, the two taps of upsample_bilinear2d.
** Both are separable: a horizontal pass, then a vertical one.  uint8
** follows torch's uint8 kernels: weights computed in double, turned into
** int16 with as many fraction bits as keep the largest below 2^15, each
** pass rounded and clamped to uint8 -- the same bits as torch 2.15 on the
** CPU (tests/golden/make_transforms.py checks them).  float32 computes its
** weights in float as torch does, so results agree within float rounding.
**
** A task is a band of output rows of one plane: the horizontal pass runs
** over the input rows the band needs, into scratch rows (never a whole
** intermediate image), then the vertical pass, and each value goes out
** through the epilogue: uint8, or float32 scaled and normalised.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/simd.h"
#include "nn/image.h"

/* -- The weights of one axis ------------------------------------------------- */

/* Output o (of the resized size n) is the sum over its ntap[o] taps j of
** weight w[o * k + j] times input idx[o * k + j] (an index in the window):
** float weights for float32 images, int16 ones with prec fraction bits for
** uint8. */
typedef struct axis {
  int64_t n;
  int k, prec;
  int32_t *ntap;
  int64_t *idx;
  float *wf;
  int16_t *wi;
} axis;

static int axis_alloc(axis *a, int64_t n, int k) {
  size_t nk = (size_t)n * (size_t)k;
  a->n = n, a->k = k, a->prec = 14;
  a->ntap = malloc(sizeof(int32_t) * (size_t)n);
  a->idx = malloc(sizeof(int64_t) * nk);
  a->wf = malloc(sizeof(float) * nk);
  a->wi = malloc(sizeof(int16_t) * nk);
  return a->ntap && a->idx && a->wf && a->wi ? 0 : -1;
}

static void axis_free(axis *a) {
  free(a->ntap), free(a->idx), free(a->wf), free(a->wi);
}

/* One tap of weight 1 at input i for output o (exact in both forms:
** (v * 2^14 + 2^13) >> 14 == v). */
static void axis_one(axis *a, int64_t o, int64_t i) {
  a->ntap[o] = 1;
  a->idx[o * a->k] = i;
  a->wf[o * a->k] = 1.0f;
  a->wi[o * a->k] = 1 << 14;
}

/* Sizes that agree: output o is input o (torch skips such a pass). */
static void axis_identity(axis *a) {
  for (int64_t o = 0; o < a->n; o++) axis_one(a, o, o);
}

/* Nearest: input floor(o * (in / n)) in float, as torch's "nearest". */
static void axis_nearest(axis *a, int64_t in) {
  float scale = (float)in / (float)a->n;
  for (int64_t o = 0; o < a->n; o++) {
    int64_t i = (int64_t)floorf((float)o * scale);
    axis_one(a, o, i < in - 1 ? i : in - 1);
  }
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* The taps an axis needs: antialias widens the filter's support (1 input
** pixel each side) by the downscale factor. */
static int axis_taps(int64_t in, int64_t n, int antialias, int u8) {
  if (!antialias) return 2;
  if (u8) {
    double scale = (double)in / (double)n;
    return (int)ceil(scale >= 1.0 ? scale : 1.0) * 2 + 1;
  }
  float scale = (float)in / (float)n;
  float support = scale >= 1.0f ? (float)(1.0 * scale) : 1.0f;
  return (int)ceilf(support) * 2 + 1;
}

/* float32 bilinear weights, in torch's float arithmetic (its casts
** between float and double included, so the taps' ranges agree). */
static void axis_linear_f32(axis *a, int64_t in, int antialias) {
  float scale = (float)in / (float)a->n;
  if (!antialias) {
    for (int64_t o = 0; o < a->n; o++) {
      float real = scale * ((float)o + 0.5f) - 0.5f;
      if (real < 0) real = 0;
      int64_t i0 = (int64_t)real, i1 = i0 + (i0 < in - 1 ? 1 : 0);
      float l1 = real - (float)i0;
      a->ntap[o] = 2;
      a->idx[o * a->k] = i0, a->idx[o * a->k + 1] = i1;
      a->wf[o * a->k] = 1.0f - l1, a->wf[o * a->k + 1] = l1;
    }
    return;
  }
  float support = scale >= 1.0f ? (float)(1.0 * scale) : 1.0f;
  float invscale = scale >= 1.0f ? (float)(1.0 / scale) : 1.0f;
  for (int64_t o = 0; o < a->n; o++) {
    float center = (float)(scale * (o + 0.5));
    int64_t xmin = nn_max64((int64_t)((double)(center - support) + 0.5), 0);
    int64_t xsize = nn_min64((int64_t)((double)(center + support) + 0.5), in) - xmin;
    xsize = clamp64(xsize, 0, a->k);
    float *w = a->wf + o * a->k, total = 0;
    for (int64_t j = 0; j < xsize; j++) {
      float x = fabsf((float)(((double)((float)(j + xmin) - center) + 0.5) * (double)invscale));
      w[j] = x < 1.0f ? (float)(1.0 - x) : 0.0f;
      total += w[j];
      a->idx[o * a->k + j] = xmin + j;
    }
    if (total != 0)
      for (int64_t j = 0; j < xsize; j++) w[j] /= total;
    a->ntap[o] = (int32_t)xsize;
  }
}

/* uint8 bilinear weights: computed in double as torch's
** _compute_index_ranges_weights, then int16 (see the file's comment). */
static void axis_linear_u8(axis *a, int64_t in, int antialias, double *wd) {
  double scale = (double)in / (double)a->n, wmax = 0;
  int k = a->k;
  for (int64_t o = 0; o < a->n; o++) {
    double *w = wd + o * k;
    int64_t xmin, xsize;
    if (antialias) {
      double support = scale >= 1.0 ? scale : 1.0;
      double center = scale * (o + 0.5), invscale = scale >= 1.0 ? 1.0 / scale : 1.0, total = 0;
      xmin = nn_max64((int64_t)(center - support + 0.5), 0);
      xsize = clamp64(nn_min64((int64_t)(center + support + 0.5), in) - xmin, 0, k);
      for (int64_t j = 0; j < xsize; j++) {
        double x = fabs((j + xmin - center + 0.5) * invscale);
        w[j] = x < 1.0 ? 1.0 - x : 0.0;
        total += w[j];
      }
      if (total != 0)
        for (int64_t j = 0; j < xsize; j++) {
          w[j] /= total;
          if (w[j] > wmax) wmax = w[j];
        }
    } else {
      /* the source index clamped at 0 and lambda as guard_index_and_lambda
      ** (floorf of the double, as torch); the taps outside the image add
      ** into the edge pixel's weight */
      double real = scale * (o + 0.5) - 0.5;
      if (real < 0) real = 0;
      int64_t i = nn_min64((int64_t)floorf((float)real), in - 1);
      double lambda = real - (double)i;
      lambda = lambda < 0 ? 0 : lambda > 1 ? 1 : lambda;
      xmin = nn_max64(i, 0);
      xsize = clamp64(nn_min64(i + 2, in) - xmin, 0, 2);
      int wi = 0;
      for (int j = 0; j < 2; j++) {
        w[j] = 0;
        double x = fabs((double)j - lambda);
        double v = x < 1.0 ? 1.0 - x : 0.0;
        if (i + j <= 0) wi = 0;
        else if (i + j >= in - 1) wi = (int)xsize - 1;
        w[wi] += v;
        if (w[wi] > wmax) wmax = w[wi];
        wi++;
      }
    }
    a->ntap[o] = (int32_t)xsize;
    for (int64_t j = 0; j < xsize; j++) a->idx[o * k + j] = xmin + j;
  }
  int prec = 0;
  for (; prec < 22; prec++)
    if ((int)(0.5 + wmax * (1 << (prec + 1))) >= (1 << 15)) break;
  a->prec = prec;
  for (int64_t o = 0; o < a->n; o++)
    for (int j = 0; j < a->ntap[o]; j++) {
      double v = wd[o * k + j] * (1 << prec);
      a->wi[o * k + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
}

/* The axis from a window of `in` pixels to n: -1 when out of memory. */
static int axis_make(axis *a, int64_t in, int64_t n, dl_interp interp, int antialias, int u8) {
  int same = in == n, k = same || interp == DL_INTERP_NEAREST ? 1 : axis_taps(in, n, antialias, u8);
  if (axis_alloc(a, n, k)) return -1;
  if (same) axis_identity(a);
  else if (interp == DL_INTERP_NEAREST) axis_nearest(a, in);
  else if (!u8) axis_linear_f32(a, in, antialias);
  else {
    double *wd = malloc(sizeof(double) * (size_t)n * (size_t)k);
    if (!wd) return -1;
    axis_linear_u8(a, in, antialias, wd);
    free(wd);
  }
  return 0;
}

/* -- The kernel -------------------------------------------------------------- */

enum { BAND_ROWS = 16 };  /* output rows a task makes */

typedef struct rs_ctx {
  const image_geom *g;
  axis ax, ay;          /* horizontal, vertical */
  const char *x;
  char *out;
  int u8, f32out;
  int64_t nblk, band;   /* bands of a plane; input rows of the largest */
  atomic_llong nomem;
} rs_ctx;

/* The input rows [lo, hi) that output rows [r0, r1) of the window read. */
static void band_rows(const rs_ctx *c, int64_t r0, int64_t r1, int64_t *lo, int64_t *hi) {
  const axis *a = &c->ay;
  int64_t l = INT64_MAX, h = 0;
  for (int64_t r = r0; r < r1; r++) {
    int64_t o = c->g->otop + r;
    for (int j = 0; j < a->ntap[o]; j++) {
      int64_t i = a->idx[o * a->k + j];
      if (i < l) l = i;
      if (i + 1 > h) h = i + 1;
    }
  }
  *lo = l, *hi = h > l ? h : l;
}

static inline uint8_t sat_u8(int32_t s) { return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s); }

/* Horizontal passes: window columns of input rows into n values each
** (reversed when flip).  uint8 taps are contiguous (idx[o * k + j] =
** idx[o * k] + j); four rows at a time share each output's weights. */
static void h_u8(const uint8_t *src, int64_t sw, int64_t sh, int rows, const axis *a, int64_t o0,
                 int64_t n, int flip, uint8_t *dst) {
  const int k = a->k, prec = a->prec;
  const int32_t bias = 1 << (prec - 1);
  for (int64_t x = 0; x < n; x++) {
    int64_t o = o0 + x, at = flip ? n - 1 - x : x;
    const uint8_t *p = src + a->idx[o * k] * sw;
    const int16_t *w = a->wi + o * k;
    int nt = a->ntap[o];
    if (rows == 4 && sw == 1) {
      int32_t s0 = bias, s1 = bias, s2 = bias, s3 = bias;
      for (int j = 0; j < nt; j++) {
        int32_t wj = w[j];
        s0 += wj * p[j], s1 += wj * p[j + sh], s2 += wj * p[j + 2 * sh], s3 += wj * p[j + 3 * sh];
      }
      dst[at] = sat_u8(s0 >> prec), dst[at + n] = sat_u8(s1 >> prec);
      dst[at + 2 * n] = sat_u8(s2 >> prec), dst[at + 3 * n] = sat_u8(s3 >> prec);
      continue;
    }
    for (int r = 0; r < rows; r++) {
      const uint8_t *q = p + r * sh;
      int32_t s = bias;
      for (int j = 0; j < nt; j++) s += (int32_t)w[j] * q[j * sw];
      dst[at + r * n] = sat_u8(s >> prec);
    }
  }
}

static void h_f32(const float *src, int64_t sw, const axis *a, int64_t o0, int64_t n, int flip,
                  float *dst) {
  const int k = a->k;
  for (int64_t x = 0; x < n; x++) {
    int64_t o = o0 + x;
    const int64_t *ix = a->idx + o * k;
    const float *w = a->wf + o * k;
    float s = 0;
    if (a->ntap[o] > 0) s = src[ix[0] * sw] * w[0];
    for (int j = 1; j < a->ntap[o]; j++) s += src[ix[j] * sw] * w[j];
    dst[flip ? n - 1 - x : x] = s;
  }
}

/* Vertical passes: one output row from the band's rows (row i of the band
** is input row lo + i). */
HOT static void v_u8(const uint8_t *band, int64_t lo, int64_t n, const axis *a, int64_t o,
                     int32_t *acc, uint8_t *dst) {
  const int64_t *ix = a->idx + o * a->k;
  const int16_t *w = a->wi + o * a->k;
  const int prec = a->prec;
  for (int64_t x = 0; x < n; x++) acc[x] = 1 << (prec - 1);
  for (int j = 0; j < a->ntap[o]; j++) {
    const uint8_t *b = band + (ix[j] - lo) * n;
    int32_t wj = w[j];
    for (int64_t x = 0; x < n; x++) acc[x] += wj * b[x];
  }
  for (int64_t x = 0; x < n; x++) {
    int32_t s = acc[x] >> prec;
    dst[x] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
  }
}

HOT static void v_f32(const float *band, int64_t lo, int64_t n, const axis *a, int64_t o,
                      float *dst) {
  const int64_t *ix = a->idx + o * a->k;
  const float *w = a->wf + o * a->k;
  if (a->ntap[o] == 0) {
    memset(dst, 0, sizeof(float) * (size_t)n);
    return;
  }
  const float *b = band + (ix[0] - lo) * n;
  float w0 = w[0];
  for (int64_t x = 0; x < n; x++) dst[x] = b[x] * w0;
  for (int j = 1; j < a->ntap[o]; j++) {
    b = band + (ix[j] - lo) * n;
    float wj = w[j];
    for (int64_t x = 0; x < n; x++) dst[x] += b[x] * wj;
  }
}

/* The epilogue into float32: (v * scale - mean) / std. */
static void to_f32(const image_geom *g, int64_t c, const float *v, float *dst, int64_t n) {
  float s = g->scale;
  if (g->mean) {
    float m = g->mean[c], d = g->std[c];
    for (int64_t x = 0; x < n; x++) dst[x] = (v[x] * s - m) / d;
  } else {
    for (int64_t x = 0; x < n; x++) dst[x] = v[x] * s;
  }
}

static void resample_tasks(void *p, int64_t t0, int64_t t1) {
  rs_ctx *c = p;
  const image_geom *g = c->g;
  int64_t ow = g->ow, es = c->u8 ? 1 : 4;
  /* the band, a row of sums, a row of values before the epilogue */
  size_t need = (size_t)(c->band * ow * es) + (size_t)ow * 8 + 64;
  char *scratch = malloc(need);
  if (!scratch) {
    atomic_store(&c->nomem, (long long)need);
    return;
  }
  void *band = scratch;
  int32_t *acc = (int32_t *)(scratch + ((c->band * ow * es + 15) & ~(int64_t)15));
  float *vals = (float *)(acc + ow);
  for (int64_t t = t0; t < t1; t++) {
    int64_t plane = t / c->nblk, r0 = (t % c->nblk) * BAND_ROWS;
    int64_t r1 = nn_min64(r0 + BAND_ROWS, g->oh), n = plane / g->C, ch = plane % g->C, lo, hi;
    band_rows(c, r0, r1, &lo, &hi);
    int64_t base = n * g->sn + ch * g->sc + g->left * g->sw;
    for (int64_t y = lo; y < hi;) {
      int64_t off = base + (g->top + y) * g->sh;
      if (c->u8) {
        int rows = hi - y >= 4 ? 4 : 1;
        h_u8((const uint8_t *)c->x + off, g->sw, g->sh, rows, &c->ax, g->oleft, ow, g->flip,
             (uint8_t *)band + (y - lo) * ow);
        y += rows;
      } else {
        h_f32((const float *)c->x + off, g->sw, &c->ax, g->oleft, ow, g->flip,
              (float *)band + (y - lo) * ow);
        y++;
      }
    }
    for (int64_t r = r0; r < r1; r++) {
      int64_t o = g->otop + r, orow = (plane * g->oh + r) * ow;
      if (c->u8) {
        if (!c->f32out) {
          v_u8(band, lo, ow, &c->ay, o, acc, (uint8_t *)c->out + orow);
          continue;
        }
        uint8_t *u = (uint8_t *)vals;
        v_u8(band, lo, ow, &c->ay, o, acc, u);
        for (int64_t x = ow - 1; x >= 0; x--) vals[x] = (float)u[x];  /* widened in place */
      } else {
        v_f32(band, lo, ow, &c->ay, o, vals);
      }
      to_f32(g, ch, vals, (float *)c->out + orow, ow);
    }
  }
  free(scratch);
}

/* The CPU's kernel (core/device.h). */
DL_HIDDEN int cpu_image_resample(const char *op, const dl_tensor *x, const image_geom *g,
                                 dl_tensor *out) {
  rs_ctx c;
  memset(&c, 0, sizeof c);
  c.g = g, c.x = tensor_first(x), c.out = tensor_first(out);
  c.u8 = x->dtype == DL_UINT8, c.f32out = out->dtype == DL_FLOAT32;
  int rc = -1;
  if (axis_make(&c.ax, g->w, g->rw, g->interp, g->antialias, c.u8) ||
      axis_make(&c.ay, g->h, g->rh, g->interp, g->antialias, c.u8)) {
    rc = dl_err(EM_NOMEM, op, (long long)(g->rh + g->rw) * 64, (long long)dl_mem_allocated());
    goto done;
  }
  c.nblk = (g->oh + BAND_ROWS - 1) / BAND_ROWS;
  for (int64_t b = 0; b < c.nblk; b++) {
    int64_t lo, hi;
    band_rows(&c, b * BAND_ROWS, nn_min64((b + 1) * BAND_ROWS, g->oh), &lo, &hi);
    c.band = nn_max64(c.band, hi - lo);
  }
  atomic_store(&c.nomem, 0);
  /* a task's work: its band's horizontal taps and its rows' vertical ones */
  int64_t work = (c.band * c.ax.k + BAND_ROWS * c.ay.k) * g->ow + 1;
  parallel_for(g->N * g->C * c.nblk, nn_max64(1, PAR_GRAIN / work), resample_tasks, &c);
  long long need = atomic_load(&c.nomem);
  rc = need ? dl_err(EM_NOMEM, op, need, (long long)dl_mem_allocated()) : 0;
done:
  axis_free(&c.ax), axis_free(&c.ay);
  return rc;
}

/* -- The ops ------------------------------------------------------------------ */

/* A window {top, left, height, width} checked inside an h x w image. */
static int check_window(const char *op, const char *what, const int64_t *win, const char *of,
                        int64_t h, int64_t w) {
  if (win[2] <= 0 || win[3] <= 0) return dl_err(EM_IMG_SIZE, op, what, (long long)win[2], (long long)win[3]);
  if (win[0] < 0 || win[1] < 0 || win[0] + win[2] > h || win[1] + win[3] > w)
    return dl_err(EM_IMG_WINDOW, op, what, (long long)win[0], (long long)win[1], (long long)win[2],
                  (long long)win[3], of, (long long)h, (long long)w);
  return 0;
}

DL_HIDDEN int image_stats(const char *op, const double *mean, const double *std, int64_t nstat,
                          int64_t C, float *m, float *s) {
  if (!mean || !std) return mean || std ? dl_err(EM_NULLARG, op, mean ? "std" : "mean") : 0;
  if (nstat != 1 && nstat != C) return dl_err(EM_IMG_STATS, op, (long long)C, (long long)nstat);
  for (int64_t c = 0; c < C; c++) {
    int64_t i = nstat == 1 ? 0 : c;
    if (std[i] == 0) return dl_err(EM_IMG_STD_ZERO, op, (long long)i);
    m[c] = (float)mean[i], s[c] = (float)std[i];
  }
  return 0;
}

static dl_tensor *resample(const char *op, const dl_tensor *x, const int64_t *crop,
                           const int64_t *size, const int64_t *window, dl_interp interp,
                           int antialias, int flip, int dtype, int scale, const double *mean,
                           const double *std, int64_t nstat) {
  image_dims d;
  if (image_check(op, x, 0, &d)) return NULL;
  if (interp != DL_INTERP_NEAREST && interp != DL_INTERP_BILINEAR)
    return dl_errp(EM_IMG_INTERP, op, (int)interp);
  if (d.H <= 0 || d.W <= 0) return dl_errp(EM_IMG_SIZE, op, "the image's size", (long long)d.H, (long long)d.W);
  if (!size) return dl_errp(EM_NULLARG, op, "size");
  int64_t cr[4] = {0, 0, d.H, d.W}, win[4] = {0, 0, size[0], size[1]};
  if (crop) memcpy(cr, crop, sizeof cr);
  if (window) memcpy(win, window, sizeof win);
  if (size[0] <= 0 || size[1] <= 0)
    return dl_errp(EM_IMG_SIZE, op, "size", (long long)size[0], (long long)size[1]);
  if (check_window(op, "crop", cr, "image", d.H, d.W) ||
      check_window(op, "window", win, "resized image", size[0], size[1]))
    return NULL;
  if (dtype != x->dtype && dtype != DL_FLOAT32)
    return dl_errp(EM_IMG_CONVERT, op, fmt_dtype(x->dtype), fmt_dtype(dtype));
  if (mean && dtype != DL_FLOAT32)
    return dl_errp(EM_BADVALUE, op, "mean and std need a float32 result (dtype DL_FLOAT32)");
  float *ms = mean ? malloc(sizeof(float) * (size_t)(2 * d.C + 1)) : NULL;
  if (mean && !ms) return dl_errp(EM_NOMEM, op, (long long)(8 * d.C), (long long)dl_mem_allocated());
  dl_tensor *out = NULL;
  if (image_stats(op, mean, std, nstat, d.C, ms, ms ? ms + d.C : NULL)) goto done;
  image_geom g = {
      .N = d.N, .C = d.C, .sn = d.sn, .sc = d.sc, .sh = d.sh, .sw = d.sw,
      .top = cr[0], .left = cr[1], .h = cr[2], .w = cr[3], .rh = size[0], .rw = size[1],
      .otop = win[0], .oleft = win[1], .oh = win[2], .ow = win[3],
      .interp = interp, .antialias = antialias != 0, .flip = flip != 0,
      /* ToDtype(scale=True) divides integers only; a float image stays */
      .scale = x->dtype == DL_UINT8 && scale ? (float)(1.0 / 255) : 1.0f,
      .mean = ms, .std = ms ? ms + d.C : NULL,
  };
  const dl_device *dv = device_of(op, x);
  if (!dv || !(out = image_new(x, dtype, g.oh, g.ow))) goto done;
  if (dl_tensor_numel(out) > 0) out = image_done(out, dv->image_resample(op, x, &g, out));
done:
  free(ms);
  return out;
}

DL_API dl_tensor *dl_image_resize(const dl_tensor *x, int64_t height, int64_t width,
                                  dl_interp interp, int antialias) {
  int64_t size[2] = {height, width};
  return resample("image_resize", x, NULL, size, NULL, interp, antialias, 0, x ? x->dtype : 0, 0,
                  NULL, NULL, 0);
}

DL_API dl_tensor *dl_image_resized_crop(const dl_tensor *x, const int64_t *crop,
                                        const int64_t *size, const int64_t *window,
                                        dl_interp interp, int antialias, int flip,
                                        dl_dtype dtype, int scale, const double *mean,
                                        const double *std, int64_t nstat) {
  return resample("image_resized_crop", x, crop, size, window, interp, antialias, flip, dtype,
                  scale, mean, std, nstat);
}
