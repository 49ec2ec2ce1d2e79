/*
** nn/pool.c -- 2-D max and average pooling, forward and backward, with
** PyTorch's output sizes (ceil_mode included), NaN handling and divisors.
** Each (sample, channel) plane is independent: planes run on the pool.
*/
#include <math.h>
#include <string.h>

#include "core/simd.h"
#include "nn/pool.h"


static int64_t div_floor(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* PyTorch's pooling_output_shape: the last window must start inside the
** input or its left padding. */
static int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t s,
                        int64_t d, int ceil_mode) {
  int64_t o = div_floor(in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pad) o--;
  return o;
}

/* Checks x and the parameters (dilation NULL means 1) and fills g. */
static int pool_setup(const char *op, const dl_tensor *x, const int64_t *kernel,
                      const int64_t *stride, const int64_t *padding,
                      const int64_t *dilation, int ceil_mode, pool_geom *g) {
  static const int64_t ones[2] = {1, 1};
  /* any device: the callers' op_device put the operands on one */
  if (nn_check_float(op, "input", x, -1)) return -1;
  if (nn_check_pair(op, "kernel_size", kernel, 1)) return -1;
  if (!stride) stride = kernel;
  if (!dilation) dilation = ones;
  if (nn_check_pair(op, "stride", stride, 1) ||
      nn_check_pair(op, "padding", padding, 0) ||
      nn_check_pair(op, "dilation", dilation, 1))
    return -1;
  int bt = x->ndim == 4;
  if ((x->ndim != 3 && x->ndim != 4) || x->shape[bt] == 0 ||
      x->shape[bt + 1] == 0 || x->shape[bt + 2] == 0)
    return dl_err(EM_NN_NDIM, op,
                  "a 3-D [C, H, W] or 4-D [N, C, H, W] input with non-empty C, H, W",
                  "an input", fmt_tshape(x));
  if (padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2)
    return dl_err(EM_POOL_PAD, op, fmt_shape(padding, 2), fmt_shape(kernel, 2));
  memset(g, 0, sizeof *g);
  g->f64 = nn_kdtype(x->dtype) == DL_FLOAT64;
  g->NC = (bt ? x->shape[0] : 1) * x->shape[bt];
  g->H = x->shape[bt + 1], g->W = x->shape[bt + 2];
  g->kh = kernel[0], g->kw = kernel[1];
  g->sh = stride[0], g->sw = stride[1];
  g->ph = padding[0], g->pw = padding[1];
  g->dh = dilation[0], g->dw = dilation[1];
  g->ceil_mode = ceil_mode;
  g->Ho = pool_out(g->H, g->kh, g->ph, g->sh, g->dh, ceil_mode);
  g->Wo = pool_out(g->W, g->kw, g->pw, g->sw, g->dw, ceil_mode);
  if (g->Ho < 1 || g->Wo < 1)
    return dl_err(EM_POOL_OUT, op, fmt_tshape(x), (long long)g->Ho,
                  (long long)g->Wo, fmt_shape(kernel, 2), fmt_shape(stride, 2),
                  fmt_shape(padding, 2), fmt_shape(dilation, 2));
  return 0;
}

/* The output shape: x's with H, W replaced. */
DL_HIDDEN void pool_shape(const dl_tensor *x, const pool_geom *g, int64_t *s) {
  for (int i = 0; i < x->ndim; i++) s[i] = x->shape[i];
  s[x->ndim - 2] = g->Ho, s[x->ndim - 1] = g->Wo;
}

static int64_t plane_grain(const pool_geom *g) {
  return nn_max64(1, PAR_GRAIN / nn_max64(1, g->Ho * g->Wo * g->kh * g->kw));
}

/* -- Max pooling ----------------------------------------------------------- */

typedef struct {
  const pool_geom *g;
  const char *x;
  char *out;
  int64_t *idx;
} max_ctx;

/* As PyTorch's CPU kernel: the window's first valid tap starts as the
** index with -inf as the value; a NaN always wins. */
#define DEF_MAX(T, SFX)                                                      \
  static void max_planes_##SFX(void *p, int64_t q0, int64_t q1) {           \
    const max_ctx *c = p;                                                    \
    const pool_geom *g = c->g;                                               \
    for (int64_t q = q0; q < q1; q++) {                                      \
      const T *x = (const T *)c->x + q * g->H * g->W;                        \
      T *out = (T *)c->out + q * g->Ho * g->Wo;                              \
      int64_t *idx = c->idx + q * g->Ho * g->Wo;                             \
      for (int64_t oh = 0; oh < g->Ho; oh++) {                               \
        int64_t h0 = oh * g->sh - g->ph;                                     \
        int64_t h1 = nn_min64(h0 + (g->kh - 1) * g->dh + 1, g->H);           \
        while (h0 < 0) h0 += g->dh;                                          \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                             \
          int64_t w0 = ow * g->sw - g->pw;                                   \
          int64_t w1 = nn_min64(w0 + (g->kw - 1) * g->dw + 1, g->W);         \
          while (w0 < 0) w0 += g->dw;                                        \
          int64_t best = h0 * g->W + w0;                                     \
          T m = -INFINITY;                                                   \
          for (int64_t ih = h0; ih < h1; ih += g->dh)                        \
            for (int64_t iw = w0; iw < w1; iw += g->dw) {                    \
              T v = x[ih * g->W + iw];                                       \
              if (v > m || isnan(v)) m = v, best = ih * g->W + iw;           \
            }                                                                \
          out[oh * g->Wo + ow] = m;                                          \
          idx[oh * g->Wo + ow] = best;                                       \
        }                                                                    \
      }                                                                      \
    }                                                                        \
  }
DEF_MAX(float, f32)
DEF_MAX(double, f64)

/* The common 2x2 window, stride 2, no padding or dilation: the same
** comparisons in the same order as max_planes_f32 without its per-tap
** bounds and index arithmetic (the general loop was 20% of a CNN step). */
HOT static void max2x2_planes_f32(void *p, int64_t q0, int64_t q1) {
  const max_ctx *c = p;
  const pool_geom *g = c->g;
  const int64_t W = g->W, Ho = g->Ho, Wo = g->Wo;
  for (int64_t q = q0; q < q1; q++) {
    const float *x = (const float *)c->x + q * g->H * W;
    float *out = (float *)c->out + q * Ho * Wo;
    int64_t *idx = c->idx + q * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; oh++) {
      const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
      int64_t base = 2 * oh * W;
      for (int64_t ow = 0; ow < Wo; ow++) {
        float a = r0[2 * ow], b = r0[2 * ow + 1], e = r1[2 * ow], f = r1[2 * ow + 1];
        int64_t i = base + 2 * ow, best = i;
        float m = a;  /* as the general loop's first tap, -inf and NaN included */
        if (b > m || b != b) m = b, best = i + 1;
        if (e > m || e != e) m = e, best = i + W;
        if (f > m || f != f) m = f, best = i + W + 1;
        out[oh * Wo + ow] = m;
        idx[oh * Wo + ow] = best;
      }
    }
  }
}

static int is_plain_2x2(const pool_geom *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && !g->ph && !g->pw &&
         g->dh == 1 && g->dw == 1 && 2 * g->Ho <= g->H && 2 * g->Wo <= g->W;
}

DL_API int dl_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                         const int64_t *stride, const int64_t *padding,
                         const int64_t *dilation, int ceil_mode,
                         dl_tensor **out, dl_tensor **indices) {
  const char *op = "max_pool2d";
  if (!out || !indices) return dl_err(EM_NULLARG, op, "out");
  *out = *indices = NULL;
  pool_geom g;
  int dev = op_device(op, 1, &x);
  if (dev < -1 || pool_setup(op, x, kernel, stride, padding, dilation, ceil_mode, &g))
    return -1;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->max_pool(op, dev, &g, x, out, indices) : -1;
}

/* The CPU's kernel (core/device.h): planes of x across the threads. */
DL_HIDDEN int cpu_max_pool(const char *op, int dev, const pool_geom *gp, const dl_tensor *x,
                           dl_tensor **out, dl_tensor **indices) {
  (void)op, (void)dev;
  pool_geom g = *gp;
  int kd = nn_kdtype(x->dtype);
  int64_t s[4];
  pool_shape(x, &g, s);
  dl_tensor *cx = nn_prep(x, kd);
  dl_tensor *o = cx ? tensor_new(kd, s, x->ndim) : NULL;
  dl_tensor *ix = o ? tensor_new(DL_INT64, s, x->ndim) : NULL;
  if (!ix) goto fail;
  max_ctx c = {&g, tensor_first(cx), tensor_first(o), (int64_t *)tensor_first(ix)};
  par_fn fn = g.f64 ? max_planes_f64 : is_plain_2x2(&g) ? max2x2_planes_f32 : max_planes_f32;
  parallel_for(g.NC, plane_grain(&g), fn, &c);
  dl_tensor_release(cx);
  if (!(*out = nn_finish(o, x->dtype))) {
    dl_tensor_release(ix);
    return -1;
  }
  *indices = ix;
  return 0;
fail:
  dl_tensor_release(cx);
  dl_tensor_release(o);
  dl_tensor_release(ix);
  return -1;
}

typedef struct {
  const pool_geom *g;
  int64_t in_plane, out_plane;
  const char *gout;
  const int64_t *idx;
  char *gx;
  _Atomic int64_t bad;  /* first bad position + 1, or 0 */
} max_bwd_ctx;

#define DEF_MAX_BWD(T, SFX)                                                  \
  static void max_bwd_##SFX(void *p, int64_t q0, int64_t q1) {              \
    max_bwd_ctx *c = p;                                                      \
    for (int64_t q = q0; q < q1; q++) {                                      \
      const T *go = (const T *)c->gout + q * c->out_plane;                   \
      const int64_t *ix = c->idx + q * c->out_plane;                         \
      T *gx = (T *)c->gx + q * c->in_plane;                                  \
      memset(gx, 0, (size_t)c->in_plane * sizeof(T));                        \
      for (int64_t i = 0; i < c->out_plane; i++) {                           \
        if (ix[i] < 0 || ix[i] >= c->in_plane) {                             \
          int64_t zero = 0;                                                  \
          atomic_compare_exchange_strong(&c->bad, &zero,                     \
                                         q * c->out_plane + i + 1);          \
          continue;                                                          \
        }                                                                    \
        gx[ix[i]] += go[i];                                                  \
      }                                                                      \
    }                                                                        \
  }
DEF_MAX_BWD(float, f32)
DEF_MAX_BWD(double, f64)

DL_API dl_tensor *dl_max_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const dl_tensor *indices) {
  const char *op = "max_pool2d_backward";
  int dev = op_device(op, 3, (const dl_tensor *[]){grad_out, x, indices});
  if (dev < -1 || nn_check_float(op, "input", x, -1) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype) ||
      nn_check_index(op, "indices", indices))
    return NULL;
  if (x->ndim != 3 && x->ndim != 4)
    return dl_errp(EM_NN_NDIM, op, "a 3-D or 4-D input", "an input", fmt_tshape(x));
  int nd = x->ndim;
  int64_t s[4];
  for (int i = 0; i < nd; i++) s[i] = x->shape[i];
  s[nd - 2] = grad_out->ndim == nd ? grad_out->shape[nd - 2] : 0;
  s[nd - 1] = grad_out->ndim == nd ? grad_out->shape[nd - 1] : 0;
  if (!nn_same_shape(grad_out, s, nd) || grad_out->ndim != nd)
    return dl_errp(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out),
                   "the input's shape but for H and W");
  if (!nn_same_shape(indices, grad_out->shape, nd))
    return dl_errp(EM_NN_SHAPE, op, "indices", fmt_tshape(indices),
                   fmt_tshape(grad_out));
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->max_pool_backward(op, dev, grad_out, x, indices) : NULL;
}

/* The CPU's kernel (core/device.h): each plane's gradient scattered to the
** positions indices name, which are checked as they are read. */
DL_HIDDEN dl_tensor *cpu_max_pool_backward(const char *op, int dev, const dl_tensor *grad_out,
                                           const dl_tensor *x, const dl_tensor *indices) {
  (void)dev;
  int nd = x->ndim, kd = nn_kdtype(x->dtype);
  const int64_t *s = grad_out->shape;
  pool_geom g = {.f64 = kd == DL_FLOAT64};
  dl_tensor *cg = nn_prep(grad_out, kd), *ci = cg ? nn_prep_index(indices) : NULL;
  dl_tensor *gx = ci ? tensor_new(kd, x->shape, nd) : NULL;
  if (!gx) goto fail;
  max_bwd_ctx c = {&g, x->shape[nd - 2] * x->shape[nd - 1], s[nd - 2] * s[nd - 1],
                   tensor_first(cg), (const int64_t *)tensor_first(ci),
                   tensor_first(gx), 0};
  int64_t planes = dl_tensor_numel(x) / nn_max64(1, c.in_plane);
  parallel_for(planes, nn_max64(1, PAR_GRAIN / nn_max64(1, c.in_plane + c.out_plane)),
               g.f64 ? max_bwd_f64 : max_bwd_f32, &c);
  int64_t bad = atomic_load(&c.bad);
  if (bad) {
    int64_t v = ((const int64_t *)tensor_first(ci))[bad - 1];
    dl_err(EM_NN_INDEX_RANGE, op, (long long)v, (long long)c.in_plane,
           (long long)(bad - 1));
    goto fail;
  }
  dl_tensor_release(cg);
  dl_tensor_release(ci);
  return nn_finish(gx, x->dtype);
fail:
  dl_tensor_release(cg);
  dl_tensor_release(ci);
  dl_tensor_release(gx);
  return NULL;
}

/* -- Average pooling ------------------------------------------------------- */

typedef struct {
  const pool_geom *g;
  const char *src;
  char *dst;
} avg_ctx;

/* The window of output (oh, ow) clipped to the input, and its divisor, as
** PyTorch's CPU kernel computes them.  Returns 0 for an empty window. */
static int avg_window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                      int64_t *h1, int64_t *w0, int64_t *w1, double *div) {
  int64_t a0 = oh * g->sh - g->ph, b0 = ow * g->sw - g->pw;
  int64_t a1 = nn_min64(a0 + g->kh, g->H + g->ph);
  int64_t b1 = nn_min64(b0 + g->kw, g->W + g->pw);
  int64_t pool = (a1 - a0) * (b1 - b0);
  a0 = nn_max64(a0, 0), b0 = nn_max64(b0, 0);
  a1 = nn_min64(a1, g->H), b1 = nn_min64(b1, g->W);
  *h0 = a0, *h1 = a1, *w0 = b0, *w1 = b1;
  if (a0 >= a1 || b0 >= b1) return 0;
  *div = (double)(g->divisor ? g->divisor
                  : g->count_include_pad ? pool : (a1 - a0) * (b1 - b0));
  return 1;
}

#define DEF_AVG(T, SFX)                                                      \
  static void avg_fwd_##SFX(void *p, int64_t q0, int64_t q1) {              \
    const avg_ctx *c = p;                                                    \
    const pool_geom *g = c->g;                                               \
    for (int64_t q = q0; q < q1; q++) {                                      \
      const T *x = (const T *)c->src + q * g->H * g->W;                      \
      T *out = (T *)c->dst + q * g->Ho * g->Wo;                              \
      for (int64_t oh = 0; oh < g->Ho; oh++)                                 \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                             \
          int64_t h0, h1, w0, w1;                                            \
          double div;                                                        \
          T s = 0;                                                           \
          if (avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) {             \
            for (int64_t ih = h0; ih < h1; ih++)                             \
              for (int64_t iw = w0; iw < w1; iw++) s += x[ih * g->W + iw];   \
            s = s / (T)div;                                                  \
          }                                                                  \
          out[oh * g->Wo + ow] = s;                                          \
        }                                                                    \
    }                                                                        \
  }                                                                          \
  static void avg_bwd_##SFX(void *p, int64_t q0, int64_t q1) {              \
    const avg_ctx *c = p;                                                    \
    const pool_geom *g = c->g;                                               \
    for (int64_t q = q0; q < q1; q++) {                                      \
      const T *go = (const T *)c->src + q * g->Ho * g->Wo;                   \
      T *gx = (T *)c->dst + q * g->H * g->W;                                 \
      memset(gx, 0, (size_t)(g->H * g->W) * sizeof(T));                      \
      for (int64_t oh = 0; oh < g->Ho; oh++)                                 \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                             \
          int64_t h0, h1, w0, w1;                                            \
          double div;                                                        \
          if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;    \
          T v = go[oh * g->Wo + ow] / (T)div;                                \
          for (int64_t ih = h0; ih < h1; ih++)                               \
            for (int64_t iw = w0; iw < w1; iw++) gx[ih * g->W + iw] += v;    \
        }                                                                    \
    }                                                                        \
  }
DEF_AVG(float, f32)
DEF_AVG(double, f64)

static int avg_setup(const char *op, const dl_tensor *x, const int64_t *kernel,
                     const int64_t *stride, const int64_t *padding,
                     int ceil_mode, int count_include_pad,
                     int64_t divisor_override, pool_geom *g) {
  if (divisor_override < 0) {
    char v[32];
    snprintf(v, sizeof v, "%lld", (long long)divisor_override);
    return dl_err(EM_NN_PARAM, op, "divisor_override", "positive (or 0 for none)", v);
  }
  if (pool_setup(op, x, kernel, stride, padding, NULL, ceil_mode, g)) return -1;
  g->count_include_pad = count_include_pad;
  g->divisor = divisor_override;
  return 0;
}

DL_API dl_tensor *dl_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                const int64_t *stride, const int64_t *padding,
                                int ceil_mode, int count_include_pad,
                                int64_t divisor_override) {
  const char *op = "avg_pool2d";
  pool_geom g;
  int dev = op_device(op, 1, &x);
  if (dev < -1 || avg_setup(op, x, kernel, stride, padding, ceil_mode, count_include_pad,
                            divisor_override, &g))
    return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->avg_pool(op, dev, &g, x) : NULL;
}

/* The CPU's kernel (core/device.h). */
DL_HIDDEN dl_tensor *cpu_avg_pool(const char *op, int dev, const pool_geom *gp,
                                  const dl_tensor *x) {
  (void)op, (void)dev;
  pool_geom g = *gp;
  int kd = nn_kdtype(x->dtype);
  int64_t s[4];
  pool_shape(x, &g, s);
  dl_tensor *cx = nn_prep(x, kd), *o = cx ? tensor_new(kd, s, x->ndim) : NULL;
  if (o) {
    avg_ctx c = {&g, tensor_first(cx), tensor_first(o)};
    parallel_for(g.NC, plane_grain(&g), g.f64 ? avg_fwd_f64 : avg_fwd_f32, &c);
  }
  dl_tensor_release(cx);
  return nn_finish(o, x->dtype);
}

DL_API dl_tensor *dl_avg_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const int64_t *kernel,
                                         const int64_t *stride,
                                         const int64_t *padding, int ceil_mode,
                                         int count_include_pad,
                                         int64_t divisor_override) {
  const char *op = "avg_pool2d_backward";
  pool_geom g;
  int dev = op_device(op, 2, (const dl_tensor *[]){grad_out, x});
  if (dev < -1 ||
      avg_setup(op, x, kernel, stride, padding, ceil_mode, count_include_pad,
                divisor_override, &g) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype))
    return NULL;
  int64_t s[4];
  pool_shape(x, &g, s);
  if (!nn_same_shape(grad_out, s, x->ndim))
    return dl_errp(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out),
                   fmt_shape(s, x->ndim));
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->avg_pool_backward(op, dev, &g, grad_out, x) : NULL;
}

/* The CPU's kernel (core/device.h). */
DL_HIDDEN dl_tensor *cpu_avg_pool_backward(const char *op, int dev, const pool_geom *gp,
                                           const dl_tensor *grad_out, const dl_tensor *x) {
  (void)op, (void)dev;
  pool_geom g = *gp;
  int kd = nn_kdtype(x->dtype);
  dl_tensor *cg = nn_prep(grad_out, kd);
  dl_tensor *gx = cg ? tensor_new(kd, x->shape, x->ndim) : NULL;
  if (gx) {
    avg_ctx c = {&g, tensor_first(cg), tensor_first(gx)};
    parallel_for(g.NC, plane_grain(&g), g.f64 ? avg_bwd_f64 : avg_bwd_f32, &c);
  }
  dl_tensor_release(cg);
  return nn_finish(gx, x->dtype);
}
