/*
** nn/image_color.c -- the per-pixel image transforms of
** torchvision.transforms.v2.functional on tensors: horizontal_flip,
** to_dtype (with scale), normalize, and the colour jitter primitives
** adjust_brightness, adjust_contrast, adjust_saturation and adjust_hue.
**
** Each computes in float32 in torchvision's order of operations (its
** grayscale weights 0.2989, 0.587, 0.114, floored for uint8; _blend's
** image * ratio + other * (1 - ratio) clamped to the dtype's range and
** truncated to uint8; hue through _rgb_to_hsv and _hsv_to_rgb), so uint8
** results agree with torchvision's within one level and float32 ones
** within float rounding (tests/transforms_spec.lua).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/simd.h"
#include "nn/image.h"

/* x's element i (a uint8 or float32 one) as float. */
static inline float ld(const char *x, int u8, int64_t i) {
  return u8 ? (float)((const uint8_t *)x)[i] : ((const float *)x)[i];
}

static inline float clampf(float v, float lo, float hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* A float32 result into uint8 as tensor.to(torch.uint8) for values in
** range: truncated toward zero (clamped; NaN gives 0). */
static inline uint8_t to_u8(float v) {
  return v >= 255.0f ? 255 : v > 0.0f ? (uint8_t)v : 0;
}

/* Rows of an image: row r of N * C * H (or of N * H for the colour ops,
** which read every channel of a pixel) starts at element row_off. */
typedef struct img_ctx {
  const image_dims *d;
  const char *x;
  char *out;
  int u8, out_u8;
  /* convert */
  float scale;
  const float *mean, *std;
  const image_dims *od;  /* the output's layout (strided: may be x) */
  /* adjust */
  dl_adjust_kind kind;
  float factor, alpha;
  const float *means;  /* contrast: each image's mean of its grayscale */
  atomic_llong nomem;  /* bytes a task's scratch rows failed to get */
} img_ctx;

/* -- Horizontal flip ------------------------------------------------------------ */

static void flip_rows(void *p, int64_t r0, int64_t r1) {
  const img_ctx *c = p;
  const image_dims *d = c->d;
  int64_t W = d->W, es = c->u8 ? 1 : 4;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / (d->C * d->H), ch = r / d->H % d->C, y = r % d->H;
    const char *src = c->x + (n * d->sn + ch * d->sc + y * d->sh) * es;
    char *dst = c->out + r * W * es;
    if (c->u8)
      for (int64_t x = 0; x < W; x++) dst[W - 1 - x] = src[x * d->sw];
    else
      for (int64_t x = 0; x < W; x++)
        memcpy(dst + (W - 1 - x) * 4, src + x * d->sw * 4, 4);
  }
}

DL_HIDDEN int cpu_image_hflip(const char *op, const dl_tensor *x, dl_tensor *out) {
  image_dims d;
  if (image_check(op, x, 0, &d)) return -1;
  img_ctx c = {.d = &d, .x = tensor_first(x), .out = tensor_first(out), .u8 = x->dtype == DL_UINT8};
  parallel_for(d.N * d.C * d.H, nn_max64(1, PAR_GRAIN / nn_max64(1, d.W)), flip_rows, &c);
  return 0;
}

DL_API dl_tensor *dl_image_hflip(const dl_tensor *x) {
  const char *op = "image_hflip";
  image_dims d;
  if (image_check(op, x, 0, &d)) return NULL;
  const dl_device *dv = device_of(op, x);
  dl_tensor *out = dv ? image_new(x, x->dtype, d.H, d.W) : NULL;
  if (!out || dl_tensor_numel(out) == 0) return out;
  return image_done(out, dv->image_hflip(op, x, out));
}

/* -- Conversion and normalisation ------------------------------------------------ */

/* One row of W values of x (element i on, stride sw) as float. */
static void load_row(const char *x, int u8, int64_t i, int64_t sw, int64_t W, float *v) {
  if (u8) {
    const uint8_t *p = (const uint8_t *)x + i;
    if (sw == 1)
      for (int64_t k = 0; k < W; k++) v[k] = (float)p[k];
    else
      for (int64_t k = 0; k < W; k++) v[k] = (float)p[k * sw];
  } else {
    const float *p = (const float *)x + i;
    if (sw == 1) memcpy(v, p, sizeof(float) * (size_t)W);
    else
      for (int64_t k = 0; k < W; k++) v[k] = p[k * sw];
  }
}

/* The row back, into uint8 (truncated) or float32 (element i on, stride sw). */
static void store_row(char *out, int u8, int64_t i, int64_t sw, int64_t W, const float *v) {
  if (u8) {
    uint8_t *o = (uint8_t *)out + i;
    for (int64_t k = 0; k < W; k++) o[k * sw] = to_u8(v[k]);
  } else {
    float *o = (float *)out + i;
    if (sw == 1) memcpy(o, v, sizeof(float) * (size_t)W);
    else
      for (int64_t k = 0; k < W; k++) o[k * sw] = v[k];
  }
}

/* Scratch rows of a task, or NULL with the need noted for the caller. */
static float *scratch_rows(const img_ctx *c, int64_t n) {
  float *v = malloc(sizeof(float) * (size_t)n);
  if (!v) atomic_store(&((img_ctx *)c)->nomem, (long long)(sizeof(float) * (size_t)n));
  return v;
}

static void convert_rows(void *p, int64_t r0, int64_t r1) {
  const img_ctx *c = p;
  const image_dims *d = c->d, *od = c->od;
  int64_t W = d->W;
  float s = c->scale, *v = scratch_rows(c, W);
  if (!v) return;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / (d->C * d->H), ch = r / d->H % d->C, y = r % d->H;
    load_row(c->x, c->u8, n * d->sn + ch * d->sc + y * d->sh, d->sw, W, v);
    if (c->mean) {
      float m = c->mean[ch], sd = c->std[ch];
      for (int64_t k = 0; k < W; k++) v[k] = (v[k] * s - m) / sd;
    } else if (s != 1.0f) {
      for (int64_t k = 0; k < W; k++) v[k] *= s;
    }
    store_row(c->out, c->out_u8, n * od->sn + ch * od->sc + y * od->sh, od->sw, W, v);
  }
  free(v);
}

DL_HIDDEN int cpu_image_convert(const char *op, const dl_tensor *x, float scale, const float *mean,
                                const float *std, dl_tensor *out) {
  image_dims d, od;
  if (image_check(op, x, 0, &d) || image_check(op, out, 0, &od)) return -1;
  img_ctx c = {.d = &d, .od = &od, .x = tensor_first(x), .out = tensor_first(out),
               .u8 = x->dtype == DL_UINT8, .out_u8 = out->dtype == DL_UINT8,
               .scale = scale, .mean = mean, .std = std};
  parallel_for(d.N * d.C * d.H, nn_max64(1, PAR_GRAIN / nn_max64(1, d.W)), convert_rows, &c);
  long long need = atomic_load(&c.nomem);
  return need ? dl_err(EM_NOMEM, op, need, (long long)dl_mem_allocated()) : 0;
}

/* out = x converted (into a new tensor of dtype, or into x itself). */
static dl_tensor *convert(const char *op, dl_tensor *x, const image_dims *d, int dtype, float scale,
                          const float *mean, const float *std, int inplace) {
  const dl_device *dv = device_of(op, x);
  if (!dv) return NULL;
  dl_tensor *out;
  if (inplace) {
    if (tensor_check_overlap(op, x)) return NULL;
    dl_tensor_retain(x);
    out = x;
  } else if (!(out = image_new(x, dtype, d->H, d->W))) {
    return NULL;
  }
  if (dl_tensor_numel(out) == 0) return out;
  int rc = dv->image_convert(op, x, scale, mean, std, out);
  if (!rc && inplace) tensor_bump_version(x);
  return image_done(out, rc);
}

DL_API dl_tensor *dl_image_to_dtype(const dl_tensor *x, dl_dtype dtype, int scale) {
  const char *op = "image_to_dtype";
  image_dims d;
  if (image_check(op, x, 0, &d)) return NULL;
  float s = 1.0f;
  if (x->dtype == DL_UINT8 && dtype == DL_FLOAT32) {
    if (scale) s = (float)(1.0 / 255);  /* to(float).mul_(1 / 255), as torchvision */
  } else if (x->dtype == DL_FLOAT32 && dtype == DL_UINT8) {
    if (scale) s = (float)(255 + 1.0 - 1e-3);  /* mul(255.999).to(uint8): 1.0 reaches 255 */
  } else if (x->dtype != dtype) {
    return dl_errp(EM_IMG_CONVERT, op, fmt_dtype(x->dtype), fmt_dtype(dtype));
  }
  return convert(op, (dl_tensor *)x, &d, dtype, s, NULL, NULL, 0);
}

DL_API dl_tensor *dl_image_normalize(dl_tensor *x, const double *mean, const double *std,
                                     int64_t nstat, int inplace) {
  const char *op = "image_normalize";
  image_dims d;
  if (image_check(op, x, 1, &d)) return NULL;
  if (!mean || !std) return dl_errp(EM_NULLARG, op, mean ? "std" : "mean");
  float *ms = malloc(sizeof(float) * (size_t)(2 * d.C + 1));
  if (!ms) return dl_errp(EM_NOMEM, op, (long long)(8 * d.C), (long long)dl_mem_allocated());
  dl_tensor *out = NULL;
  if (!image_stats(op, mean, std, nstat, d.C, ms, ms + d.C))
    out = convert(op, x, &d, DL_FLOAT32, 1.0f, ms, ms + d.C, inplace);
  free(ms);
  return out;
}

/* -- Colour adjustments ------------------------------------------------------------ */

/* torchvision's _rgb_to_grayscale_image, in its order: r * 0.2989, plus
** g * 0.587, plus b * 0.114.  Its adds are add_(other, alpha=), which
** torch's CPU kernels compute as one fused multiply-add: so are these
** (else 1% of uint8 results, truncated, fall on the other side). */
static inline float gray(float r, float g, float b) {
  float l = r * 0.2989f;
  l = fmaf(g, 0.587f, l);
  return fmaf(b, 0.114f, l);
}

/* _blend(a, b, ratio): a * ratio + b * (1 - ratio) (add_ with alpha: fused
** as above), clamped to [0, bound]. */
static inline float blend(float a, float b, float ratio, float alpha, float bound) {
  return clampf(fmaf(b, alpha, a * ratio), 0.0f, bound);
}

/* adjust_hue of one pixel in [0, 1]: _rgb_to_hsv, h + factor modulo 1,
** _hsv_to_rgb, each step as torchvision writes it. */
static void hue_pixel(float *rgb, float factor) {
  float r = rgb[0], g = rgb[1], b = rgb[2];
  float maxc = fmaxf(fmaxf(r, g), b), minc = fminf(fminf(r, g), b);
  int eqc = maxc == minc;
  float range = maxc - minc;
  float s = range / (eqc ? 1.0f : maxc), div = eqc ? 1.0f : range;
  float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
  int neq_r = maxc != r, eq_g = maxc == g;
  float hg = ((rc + 2.0f) - bc) * (float)(eq_g && neq_r);
  float hr = (bc - gc) * (float)!neq_r;
  float hb = ((gc + 4.0f) - rc) * (float)(neq_r && !eq_g);
  float h = (hr + hg) + hb;
  h = fmodf(h * (float)(1.0 / 6.0) + 1.0f, 1.0f);
  h = fmodf(h + factor, 1.0f);  /* torch's remainder: the sign of the divisor */
  if (h != 0 && h < 0) h += 1.0f;
  float v = maxc, h6 = h * 6.0f, fi = floorf(h6), f = h6 - fi;
  int i = (int)fi % 6;
  if (i < 0) i += 6;
  float sxf = s * f, oms = 1.0f - s;
  float q = clampf((1.0f - sxf) * v, 0.0f, 1.0f);
  float t = clampf((sxf + oms) * v, 0.0f, 1.0f);
  float p = clampf(oms * v, 0.0f, 1.0f);
  /* (v, p, q, t) picked per channel as _hsv_to_rgb's select table */
  const float vpqt[4] = {v, p, q, t};
  static const int8_t sel[3][6] = {{0, 2, 1, 1, 3, 0}, {3, 0, 0, 2, 1, 1}, {1, 1, 3, 0, 0, 2}};
  for (int k = 0; k < 3; k++) rgb[k] = vpqt[sel[k][i]];
}

/* The adjustments of one row of each channel (r, g, b: W values; C of
** them), in place.  Their only multiply-adds are the explicit fmaf's, so
** the clones for newer CPUs (HOT) give the same bits. */
HOT static void brightness_row(float *v, int64_t n, float f, float bound) {
  for (int64_t k = 0; k < n; k++) v[k] = clampf(v[k] * f, 0.0f, bound);
}

HOT static void contrast_row(float *v, int64_t n, float m, float f, float a, float bound) {
  for (int64_t k = 0; k < n; k++) v[k] = blend(v[k], m, f, a, bound);
}

HOT static void saturation_row(float *r, float *g, float *b, int64_t n, int u8, float f, float a,
                               float bound) {
  for (int64_t k = 0; k < n; k++) {
    float l = gray(r[k], g[k], b[k]);
    if (u8) l = floorf(l);
    r[k] = blend(r[k], l, f, a, bound);
    g[k] = blend(g[k], l, f, a, bound);
    b[k] = blend(b[k], l, f, a, bound);
  }
}

/* (not HOT: h * (1 / 6) + 1 must stay two roundings, as torchvision's) */
static void hue_row(float *r, float *g, float *b, int64_t n, int u8, float f) {
  for (int64_t k = 0; k < n; k++) {
    float px[3] = {r[k], g[k], b[k]};
    if (u8)
      for (int j = 0; j < 3; j++) px[j] *= (float)(1.0 / 255);
    hue_pixel(px, f);
    if (u8)
      for (int j = 0; j < 3; j++) px[j] *= (float)(255 + 1.0 - 1e-3);
    r[k] = px[0], g[k] = px[1], b[k] = px[2];
  }
}

/* Rows r of N * H: every channel of the row's pixels. */
static void adjust_rows(void *p, int64_t r0, int64_t r1) {
  const img_ctx *c = p;
  const image_dims *d = c->d;
  int64_t C = d->C, H = d->H, W = d->W;
  float bound = c->u8 ? 255.0f : 1.0f, f = c->factor, a = c->alpha;
  float *v = scratch_rows(c, C * W);
  if (!v) return;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / H, y = r % H, xi = n * d->sn + y * d->sh;
    for (int64_t k = 0; k < C; k++) load_row(c->x, c->u8, xi + k * d->sc, d->sw, W, v + k * W);
    switch (c->kind) {
    case DL_ADJUST_BRIGHTNESS: brightness_row(v, C * W, f, bound); break;
    case DL_ADJUST_CONTRAST: contrast_row(v, C * W, c->means[n], f, a, bound); break;
    case DL_ADJUST_SATURATION: saturation_row(v, v + W, v + 2 * W, W, c->u8, f, a, bound); break;
    case DL_ADJUST_HUE: hue_row(v, v + W, v + 2 * W, W, c->u8, f); break;
    }
    for (int64_t k = 0; k < C; k++) store_row(c->out, c->u8, ((n * C + k) * H + y) * W, 1, W, v + k * W);
  }
  free(v);
}

DL_HIDDEN int cpu_image_adjust(const char *op, dl_adjust_kind kind, double factor,
                               const dl_tensor *x, dl_tensor *out) {
  image_dims d;
  if (image_check(op, x, 0, &d) || image_check_channels(op, x, &d)) return -1;
  img_ctx c = {.d = &d, .x = tensor_first(x), .out = tensor_first(out),
               .u8 = x->dtype == DL_UINT8, .kind = kind, .factor = (float)factor,
               .alpha = (float)(1.0 - factor)};
  float *means = NULL;
  if (kind == DL_ADJUST_CONTRAST) {
    /* each image's mean gray level (floored per pixel for uint8) */
    if (!(means = malloc(sizeof(float) * (size_t)d.N)))
      return dl_err(EM_NOMEM, op, (long long)(4 * d.N), (long long)dl_mem_allocated());
    for (int64_t n = 0; n < d.N; n++) {
      double sum = 0;
      for (int64_t y = 0; y < d.H; y++)
        for (int64_t x0 = 0; x0 < d.W; x0++) {
          int64_t i = n * d.sn + y * d.sh + x0 * d.sw;
          if (d.C == 1) {
            sum += ld(c.x, c.u8, i);
            continue;
          }
          float l = gray(ld(c.x, c.u8, i), ld(c.x, c.u8, i + d.sc), ld(c.x, c.u8, i + 2 * d.sc));
          sum += c.u8 ? floorf(l) : l;
        }
      means[n] = (float)(sum / (double)(d.H * d.W));
    }
    c.means = means;
  }
  atomic_store(&c.nomem, 0);
  parallel_for(d.N * d.H, nn_max64(1, PAR_GRAIN / nn_max64(1, d.W * d.C * 8)), adjust_rows, &c);
  free(means);
  long long need = atomic_load(&c.nomem);
  return need ? dl_err(EM_NOMEM, op, need, (long long)dl_mem_allocated()) : 0;
}

DL_API dl_tensor *dl_image_adjust(const dl_tensor *x, dl_adjust_kind kind, double factor) {
  const char *op = kind == DL_ADJUST_BRIGHTNESS   ? "adjust_brightness"
                   : kind == DL_ADJUST_CONTRAST   ? "adjust_contrast"
                   : kind == DL_ADJUST_SATURATION ? "adjust_saturation"
                   : kind == DL_ADJUST_HUE        ? "adjust_hue"
                                                  : "image_adjust";
  image_dims d;
  if (image_check(op, x, 0, &d) || image_check_channels(op, x, &d)) return NULL;
  if (kind < DL_ADJUST_BRIGHTNESS || kind > DL_ADJUST_HUE)
    return dl_errp(EM_BADVALUE, op, "unknown adjustment (DL_ADJUST_BRIGHTNESS to DL_ADJUST_HUE)");
  if (kind == DL_ADJUST_HUE ? !(factor >= -0.5 && factor <= 0.5) : !(factor >= 0))
    return dl_errp(EM_IMG_FACTOR, op, kind == DL_ADJUST_HUE ? "hue_factor" : "the factor",
                   kind == DL_ADJUST_HUE ? "in [-0.5, 0.5]" : "non-negative", factor);
  const dl_device *dv = device_of(op, x);
  dl_tensor *out = dv ? image_new(x, x->dtype, d.H, d.W) : NULL;
  if (!out || dl_tensor_numel(out) == 0) return out;
  /* saturation and hue leave one channel as it is, as torchvision */
  int copy = d.C == 1 && (kind == DL_ADJUST_SATURATION || kind == DL_ADJUST_HUE);
  return image_done(out, copy ? fw_copy_(out, x) : dv->image_adjust(op, kind, factor, x, out));
}
