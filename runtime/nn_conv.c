/*
** nn_conv.c -- 2-D convolution, forward and backward, as PyTorch's conv2d:
** each sample and group is unfolded (im2col) into a [C/g * kh * kw, Ho * Wo]
** matrix and multiplied by the weight with one BLAS gemm.
**
** Threads: OpenBLAS keeps its own pool.  When one sample's product is small
** enough that OpenBLAS would run it on the calling thread anyway, samples
** are split over our pool (each part with its own buffers); otherwise the
** samples run in order on the calling thread, each gemm threaded by OpenBLAS
** and the unfolding by our pool, so the two pools never run at once.
*/
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "nn.h"
#include "simd.h"

/* OpenBLAS (interface/gemm.c: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD)
** runs a gemm of at most this many multiply-adds on the calling thread. */
#define BLAS_SERIAL_MNK (4 * 65536)
#define BLAS_INT_MAX ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))

typedef struct {
  int f64;                      /* double, else float */
  int64_t es;                   /* element size */
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, groups;
  int64_t Cg, Og, K, HW;        /* K = Cg * kh * kw rows of a column matrix */
  int pointwise;                /* 1x1, stride 1, no padding: x is its own */
} conv_geom;

static void fmt_int(char *buf, size_t n, int64_t v) {
  snprintf(buf, n, "%lld", (long long)v);
}

/* Checks every operand and parameter and fills g; the messages name the op
** and the shapes.  b and grad_out may be NULL. */
static int conv_setup(const char *op, const dl_tensor *x, const dl_tensor *w,
                      const dl_tensor *b, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation,
                      int64_t groups, conv_geom *g) {
  if (nn_check_float(op, "input", x, -1) ||
      nn_check_float(op, "weight", w, x->dtype) ||
      (b && nn_check_float(op, "bias", b, x->dtype)))
    return -1;
  if (x->ndim != 3 && x->ndim != 4)
    return dl_err(EM_NN_NDIM, op, "a 3-D [C, H, W] or 4-D [N, C, H, W] input",
                  "an input", fmt_tshape(x));
  if (w->ndim != 4)
    return dl_err(EM_NN_NDIM, op, "a 4-D weight [O, C / groups, kh, kw]",
                  "a weight", fmt_tshape(w));
  if (nn_check_pair(op, "stride", stride, 1) ||
      nn_check_pair(op, "padding", padding, 0) ||
      nn_check_pair(op, "dilation", dilation, 1))
    return -1;
  if (groups < 1) {
    char v[32];
    fmt_int(v, sizeof v, groups);
    return dl_err(EM_NN_PARAM, op, "groups", "positive", v);
  }
  int bt = x->ndim == 4;
  memset(g, 0, sizeof *g);
  g->f64 = nn_kdtype(x->dtype) == DL_FLOAT64;
  g->es = g->f64 ? 8 : 4;
  g->N = bt ? x->shape[0] : 1;
  g->C = x->shape[bt], g->H = x->shape[bt + 1], g->W = x->shape[bt + 2];
  g->O = w->shape[0], g->kh = w->shape[2], g->kw = w->shape[3];
  g->sh = stride[0], g->sw = stride[1];
  g->ph = padding[0], g->pw = padding[1];
  g->dh = dilation[0], g->dw = dilation[1];
  g->groups = groups;
  if (g->O % groups)
    return dl_err(EM_CONV_GROUPS, op, (long long)groups, (long long)g->O,
                  fmt_tshape(w));
  if (w->shape[1] * groups != g->C)
    return dl_err(EM_CONV_CHANNELS, op, fmt_tshape(w), (long long)groups,
                  (long long)(w->shape[1] * groups), fmt_tshape(x),
                  (long long)g->C);
  if (g->kh < 1 || g->kw < 1)
    return dl_err(EM_NN_SHAPE, op, "weight", fmt_tshape(w),
                  "kernel sizes of at least 1");
  if (b && (b->ndim != 1 || b->shape[0] != g->O)) {
    int64_t want = g->O;
    return dl_err(EM_NN_SHAPE, op, "bias", fmt_tshape(b), fmt_shape(&want, 1));
  }
  int64_t ekh = g->dh * (g->kh - 1) + 1, ekw = g->dw * (g->kw - 1) + 1;
  int64_t ih = g->H + 2 * g->ph, iw = g->W + 2 * g->pw;
  if (ih < ekh || iw < ekw)
    return dl_err(EM_CONV_KERNEL, op, (long long)g->kh, (long long)g->kw,
                  (long long)ekh, (long long)ekw, (long long)ih, (long long)iw,
                  fmt_tshape(x), fmt_shape(padding, 2));
  g->Ho = (ih - ekh) / g->sh + 1;
  g->Wo = (iw - ekw) / g->sw + 1;
  g->Cg = g->C / groups, g->Og = g->O / groups;
  g->K = g->Cg * g->kh * g->kw;
  g->HW = g->Ho * g->Wo;
  g->pointwise = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
                 g->ph == 0 && g->pw == 0;
  int64_t big = nn_max64(nn_max64(g->K, g->HW), g->O);
  if (big > BLAS_INT_MAX)
    return dl_err(EM_MM_BLAS_SIZE, op, (long long)big, (long long)BLAS_INT_MAX);
  return 0;
}

/* -- Unfold and fold ------------------------------------------------------- */

/* Output columns [lo, hi) whose input column ow * sw + off lies inside
** [0, W); the others read padding. */
static void col_range(const conv_geom *g, int64_t off, int64_t *lo,
                      int64_t *hi) {
  int64_t l = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  int64_t h = g->W - 1 - off < 0 ? 0 : (g->W - 1 - off) / g->sw + 1;
  if (h > g->Wo) h = g->Wo;
  if (l > h) l = h;
  *lo = l, *hi = h;
}

/* im2col for channels [c0, c1) of one sample's group (x: [Cg, H, W]):
** row (c, i, j) of col holds, for every output pixel, the input it sees
** through kernel tap (i, j), 0 in the padding.  col2im adds the rows back
** (each channel's rows in a fixed order, so it is deterministic). */
#define DEF_UNFOLD(T, SFX)                                                     \
  static void im2col_##SFX(const conv_geom *g, const T *x, T *col,           \
                           int64_t c0, int64_t c1) {                         \
    for (int64_t c = c0; c < c1; c++)                                        \
      for (int64_t i = 0; i < g->kh; i++)                                    \
        for (int64_t j = 0; j < g->kw; j++) {                                \
          T *dst = col + ((c * g->kh + i) * g->kw + j) * g->HW;              \
          int64_t off = j * g->dw - g->pw, lo, hi;                           \
          col_range(g, off, &lo, &hi);                                       \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                           \
            T *d = dst + oh * g->Wo;                                         \
            int64_t ih = oh * g->sh - g->ph + i * g->dh;                     \
            if (ih < 0 || ih >= g->H) {                                      \
              memset(d, 0, (size_t)g->Wo * sizeof(T));                       \
              continue;                                                      \
            }                                                                \
            const T *src = x + (c * g->H + ih) * g->W;                       \
            for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0;                   \
            if (g->sw == 1)                                                  \
              memcpy(d + lo, src + lo + off, (size_t)(hi - lo) * sizeof(T)); \
            else                                                             \
              for (int64_t ow = lo; ow < hi; ow++)                           \
                d[ow] = src[ow * g->sw + off];                               \
            for (int64_t ow = hi; ow < g->Wo; ow++) d[ow] = 0;               \
          }                                                                  \
        }                                                                    \
  }                                                                          \
  static void col2im_##SFX(const conv_geom *g, const T *col, T *x,           \
                           int64_t c0, int64_t c1) {                         \
    memset(x + c0 * g->H * g->W, 0,                                          \
           (size_t)((c1 - c0) * g->H * g->W) * sizeof(T));                   \
    for (int64_t c = c0; c < c1; c++)                                        \
      for (int64_t i = 0; i < g->kh; i++)                                    \
        for (int64_t j = 0; j < g->kw; j++) {                                \
          const T *s = col + ((c * g->kh + i) * g->kw + j) * g->HW;          \
          int64_t off = j * g->dw - g->pw, lo, hi;                           \
          col_range(g, off, &lo, &hi);                                       \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                           \
            int64_t ih = oh * g->sh - g->ph + i * g->dh;                     \
            if (ih < 0 || ih >= g->H) continue;                              \
            T *dst = x + (c * g->H + ih) * g->W;                             \
            const T *r = s + oh * g->Wo;                                     \
            if (g->sw == 1)                                                  \
              for (int64_t ow = lo; ow < hi; ow++) dst[ow + off] += r[ow];   \
            else                                                             \
              for (int64_t ow = lo; ow < hi; ow++)                           \
                dst[ow * g->sw + off] += r[ow];                              \
          }                                                                  \
        }                                                                    \
  }
DEF_UNFOLD(float, f32)
DEF_UNFOLD(double, f64)

typedef struct {
  const conv_geom *g;
  const char *src;
  char *dst;
} fold_ctx;

static void unfold_range(void *p, int64_t c0, int64_t c1) {
  const fold_ctx *f = p;
  if (f->g->f64)
    im2col_f64(f->g, (const double *)f->src, (double *)f->dst, c0, c1);
  else
    im2col_f32(f->g, (const float *)f->src, (float *)f->dst, c0, c1);
}

static void fold_range(void *p, int64_t c0, int64_t c1) {
  const fold_ctx *f = p;
  if (f->g->f64)
    col2im_f64(f->g, (const double *)f->src, (double *)f->dst, c0, c1);
  else
    col2im_f32(f->g, (const float *)f->src, (float *)f->dst, c0, c1);
}

/* Unfolds / folds one group of one sample, over channels on the pool when
** `par` (parallel_for runs inline inside the pool anyway). */
static void unfold(const conv_geom *g, const char *x, char *col, int par) {
  fold_ctx f = {g, x, col};
  int64_t grain = nn_max64(1, PAR_GRAIN / nn_max64(1, g->kh * g->kw * g->HW));
  if (par) parallel_for(g->Cg, grain, unfold_range, &f);
  else unfold_range(&f, 0, g->Cg);
}

static void fold(const conv_geom *g, const char *col, char *x, int par) {
  fold_ctx f = {g, col, x};
  int64_t grain = nn_max64(1, PAR_GRAIN / nn_max64(1, g->kh * g->kw * g->HW));
  if (par) parallel_for(g->Cg, grain, fold_range, &f);
  else fold_range(&f, 0, g->Cg);
}

/* -- Products ------------------------------------------------------------ */

/* c = a @ b + beta * c, row-major, a and b optionally transposed; empty
** products leave beta * c (0 for beta 0). */
static void gemm(const conv_geom *g, int ta, int tb, int64_t m, int64_t n,
                 int64_t k, const char *a, int64_t lda, const char *b,
                 int64_t ldb, double beta, char *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0)
      for (int64_t i = 0; i < m; i++)
        memset(c + i * ldc * g->es, 0, (size_t)(n * g->es));
    return;
  }
  CBLAS_TRANSPOSE A = ta ? CblasTrans : CblasNoTrans;
  CBLAS_TRANSPOSE B = tb ? CblasTrans : CblasNoTrans;
  if (g->f64)
    cblas_dgemm(CblasRowMajor, A, B, (blasint)m, (blasint)n, (blasint)k, 1.0,
                (const double *)a, (blasint)lda, (const double *)b,
                (blasint)ldb, beta, (double *)c, (blasint)ldc);
  else
    cblas_sgemm(CblasRowMajor, A, B, (blasint)m, (blasint)n, (blasint)k, 1.0f,
                (const float *)a, (blasint)lda, (const float *)b,
                (blasint)ldb, (float)beta, (float *)c, (blasint)ldc);
}

/* Splitting the samples over our pool pays when each product is one that
** OpenBLAS runs single-threaded; nparts (at most one per thread) parts. */
static int64_t sample_parts(const conv_geom *g) {
  int threads = parallel_threads();
  if (threads <= 1 || g->N <= 1 || g->Og * g->K * g->HW > BLAS_SERIAL_MNK)
    return 1;
  return nn_min64(threads, g->N);
}

/* -- Forward --------------------------------------------------------------- */

typedef struct {
  const conv_geom *g;
  const char *x, *w, *b;
  char *out, *cols;  /* cols: one K x HW buffer per part */
  int64_t nparts;
} fwd_ctx;

static void fwd_sample(const fwd_ctx *c, int64_t n, char *col, int par) {
  const conv_geom *g = c->g;
  int64_t es = g->es;
  for (int64_t gr = 0; gr < g->groups; gr++) {
    const char *xg = c->x + (n * g->C + gr * g->Cg) * g->H * g->W * es;
    const char *cm = xg;
    if (!g->pointwise) {
      unfold(g, xg, col, par);
      cm = col;
    }
    gemm(g, 0, 0, g->Og, g->HW, g->K, c->w + gr * g->Og * g->K * es, g->K, cm,
         g->HW, 0, c->out + (n * g->O + gr * g->Og) * g->HW * es, g->HW);
  }
  if (!c->b) return;
  for (int64_t o = 0; o < g->O; o++) {
    int64_t base = (n * g->O + o) * g->HW;
    if (g->f64) {
      double *r = (double *)c->out + base, v = ((const double *)c->b)[o];
      for (int64_t i = 0; i < g->HW; i++) r[i] += v;
    } else {
      float *r = (float *)c->out + base, v = ((const float *)c->b)[o];
      for (int64_t i = 0; i < g->HW; i++) r[i] += v;
    }
  }
}

static void fwd_parts(void *p, int64_t p0, int64_t p1) {
  const fwd_ctx *c = p;
  const conv_geom *g = c->g;
  for (int64_t part = p0; part < p1; part++) {
    char *col = c->cols ? c->cols + part * g->K * g->HW * g->es : NULL;
    for (int64_t n = part * g->N / c->nparts; n < (part + 1) * g->N / c->nparts; n++)
      fwd_sample(c, n, col, 0);
  }
}

/* A scratch buffer of n elements of the compute dtype (NULL when n is 0). */
static int scratch(const conv_geom *g, int64_t n, dl_tensor **t) {
  *t = NULL;
  if (n == 0) return 0;
  *t = tensor_new(g->f64 ? DL_FLOAT64 : DL_FLOAT32, &n, 1);
  return *t ? 0 : -1;
}

DL_API dl_tensor *dl_conv2d(const dl_tensor *x, const dl_tensor *w,
                            const dl_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation,
                            int64_t groups) {
  const char *op = "conv2d";
  conv_geom g;
  if (conv_setup(op, x, w, b, stride, padding, dilation, groups, &g))
    return NULL;
  int kd = nn_kdtype(x->dtype), bt = x->ndim == 4;
  dl_tensor *cx = nn_prep(x, kd), *cw = NULL, *cb = NULL, *out = NULL,
            *cols = NULL;
  if (!cx || !(cw = nn_prep(w, kd)) || (b && !(cb = nn_prep(b, kd))))
    goto fail;
  int64_t oshape[4] = {g.N, g.O, g.Ho, g.Wo};
  if (!(out = tensor_new(kd, oshape + !bt, x->ndim))) goto fail;
  fwd_ctx c = {&g, tensor_first(cx), tensor_first(cw),
               cb ? tensor_first(cb) : NULL, tensor_first(out), NULL,
               sample_parts(&g)};
  if (!g.pointwise && scratch(&g, c.nparts * g.K * g.HW, &cols)) goto fail;
  c.cols = cols ? tensor_first(cols) : NULL;
  if (g.N * g.O * g.HW > 0) {
    if (c.nparts > 1) {
      parallel_for(c.nparts, 1, fwd_parts, &c);
    } else {
      for (int64_t n = 0; n < g.N; n++) fwd_sample(&c, n, c.cols, 1);
    }
  }
  dl_tensor_release(cols);
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cb);
  return nn_finish(out, x->dtype);
fail:
  dl_tensor_release(cols);
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cb);
  dl_tensor_release(out);
  return NULL;
}

/* -- Backward -------------------------------------------------------------- */

typedef struct {
  const conv_geom *g;
  const char *x, *w, *gout;
  char *gx;            /* NULL when not needed */
  char *gw;            /* the result (part 0's sum), or NULL */
  char *gwp;           /* parts 1.. : their partial sums */
  char *cols, *gcols;  /* per part: K x HW each */
  int64_t nparts;
} bwd_ctx;

static void bwd_sample(const bwd_ctx *c, int64_t n, int first, char *col,
                       char *gcol, char *gw, int par) {
  const conv_geom *g = c->g;
  int64_t es = g->es;
  for (int64_t gr = 0; gr < g->groups; gr++) {
    const char *go = c->gout + (n * g->O + gr * g->Og) * g->HW * es;
    int64_t xoff = (n * g->C + gr * g->Cg) * g->H * g->W * es;
    const char *wg = c->w + gr * g->Og * g->K * es;
    if (gw) {
      /* grad_w[g] (+)= grad_out[n, g] @ col^T */
      const char *cm = c->x + xoff;
      if (!g->pointwise) {
        unfold(g, cm, col, par);
        cm = col;
      }
      gemm(g, 0, 1, g->Og, g->K, g->HW, go, g->HW, cm, g->HW, first ? 0 : 1,
           gw + gr * g->Og * g->K * es, g->K);
    }
    if (c->gx) {
      /* grad_col = w[g]^T @ grad_out[n, g], folded back onto the input */
      char *gxg = c->gx + xoff;
      gemm(g, 1, 0, g->K, g->HW, g->Og, wg, g->K, go, g->HW, 0,
           g->pointwise ? gxg : gcol, g->HW);
      if (!g->pointwise) fold(g, gcol, gxg, par);
    }
  }
}

static void bwd_parts(void *p, int64_t p0, int64_t p1) {
  const bwd_ctx *c = p;
  const conv_geom *g = c->g;
  int64_t kh = g->K * g->HW * g->es;
  for (int64_t part = p0; part < p1; part++) {
    char *col = c->cols ? c->cols + part * kh : NULL;
    char *gcol = c->gcols ? c->gcols + part * kh : NULL;
    char *gw = c->gw && part ? c->gwp + (part - 1) * g->O * g->K * g->es : c->gw;
    int64_t n0 = part * g->N / c->nparts, n1 = (part + 1) * g->N / c->nparts;
    for (int64_t n = n0; n < n1; n++) bwd_sample(c, n, n == n0, col, gcol, gw, 0);
  }
}

/* gw[i] = sum over parts of the partials, in part order. */
typedef struct {
  const conv_geom *g;
  char *gw, *gwp;
  int64_t nparts, len;
} sum_ctx;

static void sum_parts(void *p, int64_t i0, int64_t i1) {
  const sum_ctx *s = p;
  for (int64_t q = 1; q < s->nparts; q++) {
    if (s->g->f64) {
      double *d = (double *)s->gw;
      const double *src = (const double *)s->gwp + (q - 1) * s->len;
      for (int64_t i = i0; i < i1; i++) d[i] += src[i];
    } else {
      float *d = (float *)s->gw;
      const float *src = (const float *)s->gwp + (q - 1) * s->len;
      for (int64_t i = i0; i < i1; i++) d[i] += src[i];
    }
  }
}

/* grad_b[o] = sum of grad_out over samples and pixels, in double. */
typedef struct {
  const conv_geom *g;
  const char *gout;
  char *gb;
} bias_ctx;

static double row_sum_f32(const float *p, int64_t n) {
  v8f acc = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f v;
    LD(v, p + i);
    acc += v;
  }
  double s = 0;
  for (int j = 0; j < 8; j++) s += acc[j];
  for (; i < n; i++) s += p[i];
  return s;
}

static void bias_range(void *p, int64_t o0, int64_t o1) {
  const bias_ctx *c = p;
  const conv_geom *g = c->g;
  for (int64_t o = o0; o < o1; o++) {
    double s = 0;
    for (int64_t n = 0; n < g->N; n++) {
      int64_t base = (n * g->O + o) * g->HW;
      if (g->f64) {
        const double *r = (const double *)c->gout + base;
        for (int64_t i = 0; i < g->HW; i++) s += r[i];
      } else {
        s += row_sum_f32((const float *)c->gout + base, g->HW);
      }
    }
    if (g->f64) ((double *)c->gb)[o] = s;
    else ((float *)c->gb)[o] = (float)s;
  }
}

DL_API int dl_conv2d_backward(const dl_tensor *grad_out, const dl_tensor *x,
                              const dl_tensor *w, const int64_t *stride,
                              const int64_t *padding,
                              const int64_t *dilation, int64_t groups,
                              int need_x, int need_w, int need_b,
                              dl_tensor **grad_x, dl_tensor **grad_w,
                              dl_tensor **grad_b) {
  const char *op = "conv2d_backward";
  if (grad_x) *grad_x = NULL;
  if (grad_w) *grad_w = NULL;
  if (grad_b) *grad_b = NULL;
  if ((need_x && !grad_x) || (need_w && !grad_w) || (need_b && !grad_b))
    return dl_err(EM_NULLARG, op, "for a needed gradient");
  conv_geom g;
  if (conv_setup(op, x, w, NULL, stride, padding, dilation, groups, &g) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype))
    return -1;
  int kd = nn_kdtype(x->dtype), bt = x->ndim == 4;
  int64_t oshape[4] = {g.N, g.O, g.Ho, g.Wo};
  if (!nn_same_shape(grad_out, oshape + !bt, x->ndim))
    return dl_err(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out),
                  fmt_shape(oshape + !bt, x->ndim));
  dl_tensor *cx = NULL, *cw = NULL, *cg = NULL, *gx = NULL, *gw = NULL,
            *gb = NULL, *cols = NULL, *gcols = NULL, *gwp = NULL;
  int rc = -1;
  if (!(cg = nn_prep(grad_out, kd))) goto done;
  if (need_x || need_w) {
    if (!(cx = nn_prep(x, kd)) || !(cw = nn_prep(w, kd))) goto done;
    bwd_ctx c = {&g, tensor_first(cx), tensor_first(cw), tensor_first(cg),
                 NULL, NULL, NULL, NULL, NULL, sample_parts(&g)};
    int64_t wn = g.O * g.K;
    if (need_x) {
      if (!(gx = tensor_new(kd, x->shape, x->ndim))) goto done;
      c.gx = tensor_first(gx);
      if (!g.pointwise && scratch(&g, c.nparts * g.K * g.HW, &gcols)) goto done;
    }
    if (need_w) {
      if (!(gw = tensor_new(kd, w->shape, 4))) goto done;
      c.gw = tensor_first(gw);
      if (g.N == 0) memset(c.gw, 0, (size_t)(wn * g.es));
      if (scratch(&g, (c.nparts - 1) * wn, &gwp)) goto done;
      c.gwp = gwp ? tensor_first(gwp) : NULL;
      if (!g.pointwise && scratch(&g, c.nparts * g.K * g.HW, &cols)) goto done;
    }
    c.cols = cols ? tensor_first(cols) : NULL;
    c.gcols = gcols ? tensor_first(gcols) : NULL;
    if (g.N > 0) {
      if (c.nparts > 1) {
        parallel_for(c.nparts, 1, bwd_parts, &c);
        if (gw) {
          sum_ctx s = {&g, c.gw, c.gwp, c.nparts, wn};
          parallel_for(wn, PAR_GRAIN / 4, sum_parts, &s);
        }
      } else {
        for (int64_t n = 0; n < g.N; n++)
          bwd_sample(&c, n, n == 0, c.cols, c.gcols, c.gw, 1);
      }
    }
  }
  if (need_b) {
    if (!(gb = tensor_new(kd, &g.O, 1))) goto done;
    bias_ctx bc = {&g, tensor_first(cg), tensor_first(gb)};
    int64_t per = nn_max64(1, g.N * g.HW);
    parallel_for(g.O, nn_max64(1, PAR_GRAIN / per), bias_range, &bc);
  }
  if (need_x && !(*grad_x = nn_finish(gx, x->dtype))) {
    gx = NULL;
    goto done;
  }
  gx = NULL;
  if (need_w && !(*grad_w = nn_finish(gw, x->dtype))) {
    gw = NULL;
    goto done;
  }
  gw = NULL;
  if (need_b && !(*grad_b = nn_finish(gb, x->dtype))) {
    gb = NULL;
    goto done;
  }
  gb = NULL;
  rc = 0;
done:
  if (rc) {
    if (grad_x && *grad_x) dl_tensor_release(*grad_x), *grad_x = NULL;
    if (grad_w && *grad_w) dl_tensor_release(*grad_w), *grad_w = NULL;
    if (grad_b && *grad_b) dl_tensor_release(*grad_b), *grad_b = NULL;
  }
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cg);
  dl_tensor_release(gx);
  dl_tensor_release(gw);
  dl_tensor_release(gb);
  dl_tensor_release(cols);
  dl_tensor_release(gcols);
  dl_tensor_release(gwp);
  return rc;
}
