/*
** nn/conv.c -- 2-D convolution, forward and backward, as PyTorch's conv2d:
** each sample and group is unfolded (im2col) into a [C/g * kh * kw, Ho * Wo]
** matrix and multiplied by the weight with one BLAS gemm; backward adds
** grad_out @ col^T into grad_w and folds w^T @ grad_out back onto grad_x.
** Float32 convs with one group and many input channels run oneDNN's
** kernels instead, where those measured faster (nn/conv_onednn.c).
**
** Threads: OpenBLAS keeps its own pool, and the two must never run at once.
** With a sample per thread or more, the samples are split over our pool
** into parts, each with its own buffers and partial sums, and OpenBLAS is
** held to one thread meanwhile; with fewer samples, they run in order, each
** gemm threaded by OpenBLAS and the unfolding by our pool.
*/
#include <cblas.h>
#include <limits.h>
#include <string.h>

#include "nn/conv.h"
#include "nn/conv_onednn.h"
#include "core/simd.h"

/* OpenBLAS (interface/gemm.c: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD)
** runs a gemm of at most this many multiply-adds on the calling thread. */
#define BLAS_SERIAL_MNK (4 * 65536)
#define BLAS_INT_MAX ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))


static void fmt_int(char *buf, size_t n, int64_t v) {
  snprintf(buf, n, "%lld", (long long)v);
}

/* Checks every operand and parameter and fills g; the messages name the op
** and the shapes.  b and grad_out may be NULL. */
static int conv_setup(const char *op, const dl_tensor *x, const dl_tensor *w,
                      const dl_tensor *b, const int64_t *stride,
                      const int64_t *padding, const int64_t *dilation,
                      int64_t groups, conv_geom *g) {
  /* any device here: the callers' op_device put them all on one */
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
  g->padn = g->ph || g->pw ? g->Cg * ih * iw : 0;
  int64_t big = nn_max64(nn_max64(g->K, g->HW), g->O);
  if (big > BLAS_INT_MAX)
    return dl_err(EM_MM_BLAS_SIZE, op, (long long)big, (long long)BLAS_INT_MAX);
  return 0;
}

/* -- Unfold and fold ------------------------------------------------------- */

/* Both work on the input with its padding made explicit ([Cg, Hp, Wp], zero
** borders), so the inner loops copy whole rows without bounds checks;
** without padding the input itself serves.  Rows are short (Wo is 14 in a
** Fashion-MNIST CNN), so they are copied in overlapping 32-byte pieces
** rather than through memcpy.  Everything runs over a range of channels
** [c0, c1) of one sample's group, so it can be split over the pool. */
#define DEF_UNFOLD(T, SFX)                                                     \
  static inline void copy_row_##SFX(T *d, const T *s, int64_t n) {           \
    enum { V = 32 / sizeof(T) };                                             \
    int64_t i = 0;                                                           \
    for (; i + V <= n; i += V) memcpy(d + i, s + i, 32);                     \
    if (i < n) {                                                             \
      if (n >= V) memcpy(d + n - V, s + n - V, 32);                          \
      else for (; i < n; i++) d[i] = s[i];                                   \
    }                                                                        \
  }                                                                          \
  /* col row (c, i, j) = what kernel tap (i, j) sees at every output pixel */ \
  HOT static void im2col_##SFX(const conv_geom *g, const T *x, T *xp, T *col, \
                               int64_t c0, int64_t c1) {                     \
    int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;                    \
    if (xp) {                                                                \
      for (int64_t c = c0; c < c1; c++) {                                    \
        T *d = xp + c * Hp * Wp;                                             \
        memset(d, 0, (size_t)(g->ph * Wp) * sizeof(T));                      \
        for (int64_t ih = 0; ih < g->H; ih++) {                              \
          T *r = d + (ih + g->ph) * Wp;                                      \
          for (int64_t j = 0; j < g->pw; j++) r[j] = r[g->pw + g->W + j] = 0; \
          copy_row_##SFX(r + g->pw, x + (c * g->H + ih) * g->W, g->W);       \
        }                                                                    \
        memset(d + (g->ph + g->H) * Wp, 0, (size_t)(g->ph * Wp) * sizeof(T)); \
      }                                                                      \
      x = xp;                                                                \
    }                                                                        \
    for (int64_t c = c0; c < c1; c++)                                        \
      for (int64_t i = 0; i < g->kh; i++)                                    \
        for (int64_t j = 0; j < g->kw; j++) {                                \
          T *dst = col + ((c * g->kh + i) * g->kw + j) * g->HW;              \
          const T *src = x + c * Hp * Wp + i * g->dh * Wp + j * g->dw;       \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                           \
            const T *r = src + oh * g->sh * Wp;                              \
            T *d = dst + oh * g->Wo;                                         \
            if (g->sw == 1)                                                  \
              copy_row_##SFX(d, r, g->Wo);                                   \
            else                                                             \
              for (int64_t ow = 0; ow < g->Wo; ow++) d[ow] = r[ow * g->sw];  \
          }                                                                  \
        }                                                                    \
  }                                                                          \
  /* the adjoint: adds every col row back where it was read, then crops */   \
  HOT static void col2im_##SFX(const conv_geom *g, const T *col, T *x, T *xp, \
                               int64_t c0, int64_t c1) {                     \
    int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;                    \
    T *acc = xp ? xp : x;                                                    \
    memset(acc + c0 * Hp * Wp, 0, (size_t)((c1 - c0) * Hp * Wp) * sizeof(T)); \
    for (int64_t c = c0; c < c1; c++)                                        \
      for (int64_t i = 0; i < g->kh; i++)                                    \
        for (int64_t j = 0; j < g->kw; j++) {                                \
          const T *src = col + ((c * g->kh + i) * g->kw + j) * g->HW;        \
          T *dst = acc + c * Hp * Wp + i * g->dh * Wp + j * g->dw;           \
          for (int64_t oh = 0; oh < g->Ho; oh++) {                           \
            T *d = dst + oh * g->sh * Wp;                                    \
            const T *r = src + oh * g->Wo;                                   \
            if (g->sw == 1)                                                  \
              for (int64_t ow = 0; ow < g->Wo; ow++) d[ow] += r[ow];         \
            else                                                             \
              for (int64_t ow = 0; ow < g->Wo; ow++) d[ow * g->sw] += r[ow]; \
          }                                                                  \
        }                                                                    \
    if (!xp) return;                                                         \
    for (int64_t c = c0; c < c1; c++)                                        \
      for (int64_t ih = 0; ih < g->H; ih++)                                  \
        copy_row_##SFX(x + (c * g->H + ih) * g->W,                           \
                       xp + (c * Hp + ih + g->ph) * Wp + g->pw, g->W);       \
  }
DEF_UNFOLD(float, f32)
DEF_UNFOLD(double, f64)

typedef struct {
  const conv_geom *g;
  const char *src;
  char *dst, *pad;  /* pad: a [Cg, Hp, Wp] buffer, NULL without padding */
} fold_ctx;

static void unfold_range(void *p, int64_t c0, int64_t c1) {
  const fold_ctx *f = p;
  if (f->g->f64)
    im2col_f64(f->g, (const double *)f->src, (double *)f->pad, (double *)f->dst, c0, c1);
  else
    im2col_f32(f->g, (const float *)f->src, (float *)f->pad, (float *)f->dst, c0, c1);
}

static void fold_range(void *p, int64_t c0, int64_t c1) {
  const fold_ctx *f = p;
  if (f->g->f64)
    col2im_f64(f->g, (const double *)f->src, (double *)f->dst, (double *)f->pad, c0, c1);
  else
    col2im_f32(f->g, (const float *)f->src, (float *)f->dst, (float *)f->pad, c0, c1);
}

/* Unfolds x (one sample's group) into col / folds col into x, over the
** channels on the pool when `par` (parallel_for runs inline inside the pool
** anyway).  pad: the padded-input buffer, when there is padding. */
static void unfold(const conv_geom *g, const char *x, char *col, char *pad, int par) {
  fold_ctx f = {g, x, col, pad};
  int64_t grain = nn_max64(1, PAR_GRAIN / nn_max64(1, g->kh * g->kw * g->HW));
  if (par) parallel_for(g->Cg, grain, unfold_range, &f);
  else unfold_range(&f, 0, g->Cg);
}

static void fold(const conv_geom *g, const char *col, char *x, char *pad, int par) {
  fold_ctx f = {g, col, x, pad};
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

/* How the samples are spread.  With nparts > 1 they are split over our
** pool, each part calling BLAS on its own thread: fine as is when OpenBLAS
** would run each product single-threaded anyway; for larger products
** (force_serial) OpenBLAS is held to one thread for the call, so its pool
** never runs beside ours.  With too few samples to feed every thread, the
** samples run in order and OpenBLAS threads each product. */
typedef struct {
  int64_t nparts;
  int force_serial;
} conv_plan;

extern int openblas_get_num_threads(void);
extern void openblas_set_num_threads(int n);

static conv_plan plan_samples(const conv_geom *g) {
  conv_plan p = {1, 0};
  int threads = parallel_threads();
  if (threads <= 1 || g->N <= 1) return p;
  if (g->Og * g->K * g->HW > BLAS_SERIAL_MNK) {
    if (g->N < threads) return p;
    p.force_serial = 1;
  }
  p.nparts = nn_min64(threads, g->N);
  return p;
}

/* Runs fn over the parts on the pool, OpenBLAS held to one thread when the
** plan says so (restored after). */
static void run_parts(const conv_plan *p, par_fn fn, void *ctx) {
  int prev = p->force_serial ? openblas_get_num_threads() : 0;
  if (prev > 1) openblas_set_num_threads(1);
  parallel_for(p->nparts, 1, fn, ctx);
  if (prev > 1) openblas_set_num_threads(prev);
}

HOT static double row_sum_f32(const float *p, int64_t n) {
  float acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += p[i + j];
  double s = 0;
  for (int j = 0; j < 8; j++) s += acc[j];
  for (; i < n; i++) s += p[i];
  return s;
}

static double row_sum_f64(const double *p, int64_t n) {
  double acc[4] = {0}, s = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; j++) acc[j] += p[i + j];
  for (int j = 0; j < 4; j++) s += acc[j];
  for (; i < n; i++) s += p[i];
  return s;
}

/* -- Forward --------------------------------------------------------------- */

typedef struct {
  const conv_geom *g;
  const char *x, *w, *b;
  char *out, *cols;  /* per part: K x HW, then padn for the padded input */
  int64_t nparts;
} fwd_ctx;

static void fwd_sample(const fwd_ctx *c, int64_t n, char *col, int par) {
  char *pad = col && c->g->padn ? col + c->g->K * c->g->HW * c->g->es : NULL;
  const conv_geom *g = c->g;
  int64_t es = g->es;
  for (int64_t gr = 0; gr < g->groups; gr++) {
    const char *xg = c->x + (n * g->C + gr * g->Cg) * g->H * g->W * es;
    const char *cm = xg;
    if (!g->pointwise) {
      unfold(g, xg, col, pad, par);
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
    char *col = c->cols ? c->cols + part * (g->K * g->HW + g->padn) * g->es : NULL;
    for (int64_t n = part * g->N / c->nparts; n < (part + 1) * g->N / c->nparts; n++)
      fwd_sample(c, n, col, 0);
  }
}

/* A scratch buffer of n elements of dtype (NULL when n is 0). */
static int scratch(int dtype, int64_t n, dl_tensor **t) {
  *t = NULL;
  if (n == 0) return 0;
  *t = tensor_new(dtype, &n, 1);
  return *t ? 0 : -1;
}

/* Where both backwards end: on failure the grads already handed out go;
** the n temporaries go either way.  Returns rc. */
DL_HIDDEN int conv_backward_done(int rc, dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b,
                         dl_tensor *const *tmp, int n) {
  if (rc) {
    dl_tensor **grads[] = {grad_x, grad_w, grad_b};
    for (int i = 0; i < 3; i++)
      if (grads[i] && *grads[i]) dl_tensor_release(*grads[i]), *grads[i] = NULL;
  }
  for (int i = 0; i < n; i++) dl_tensor_release(tmp[i]);
  return rc;
}

/* -- Public ------------------------------------------------------------------------ */

DL_API dl_tensor *dl_conv2d(const dl_tensor *x, const dl_tensor *w,
                            const dl_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation,
                            int64_t groups) {
  const char *op = "conv2d";
  conv_geom g;
  int dev = op_device_opt(op, 3, (const dl_tensor *[]){x, w, b});
  if (dev < -1 || conv_setup(op, x, w, b, stride, padding, dilation, groups, &g))
    return NULL;
  const dl_device *dv = device_get(op, dev);
  return dv ? dv->conv2d(op, dev, &g, x, w, b) : NULL;
}

/* The CPU's kernel (core/device.h): oneDNN where it is faster
** (nn/conv_onednn.c), else im2col (or the 1x1 fast path) and BLAS, by
** samples or by parts of them across the threads. */
DL_HIDDEN dl_tensor *cpu_conv2d(const char *op, int dev, const conv_geom *gp,
                                const dl_tensor *x, const dl_tensor *w, const dl_tensor *b) {
  (void)dev;
  conv_geom g = *gp;
  int kd = nn_kdtype(x->dtype), bt = x->ndim == 4;
  dl_tensor *cx = nn_prep(x, kd), *cw = NULL, *cb = NULL, *out = NULL,
            *cols = NULL;
  if (!cx || !(cw = nn_prep(w, kd)) || (b && !(cb = nn_prep(b, kd))))
    goto fail;
  int64_t oshape[4] = {g.N, g.O, g.Ho, g.Wo};
  if (!(out = tensor_new(kd, oshape + !bt, x->ndim))) goto fail;
  if (!g.f64) {
    int r = conv_onednn_forward(op, &g, (const float *)tensor_first(cx),
                                (const float *)tensor_first(cw),
                                cb ? (const float *)tensor_first(cb) : NULL,
                                (float *)tensor_first(out));
    if (r < 0) goto fail;
    if (r == 0) goto done;
  }
  conv_plan plan = plan_samples(&g);
  fwd_ctx c = {&g, tensor_first(cx), tensor_first(cw),
               cb ? tensor_first(cb) : NULL, tensor_first(out), NULL,
               plan.nparts};
  if (!g.pointwise && scratch(kd, plan.nparts * (g.K * g.HW + g.padn), &cols))
    goto fail;
  c.cols = cols ? tensor_first(cols) : NULL;
  if (g.N * g.O * g.HW > 0) {
    if (plan.nparts > 1) {
      run_parts(&plan, fwd_parts, &c);
    } else {
      for (int64_t n = 0; n < g.N; n++) fwd_sample(&c, n, c.cols, 1);
    }
  }
done:
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

/* Each part sums its samples' grad_w (part 0 into the result, the others
** into gwp) and grad_b (into gbp, in double); the parts are then added in
** order, so the sums do not depend on which thread ran which part. */
typedef struct {
  const conv_geom *g;
  const char *x, *w, *gout;
  char *gx;            /* NULL when not needed */
  char *gw;            /* the result (part 0's sum), or NULL */
  char *gwp;           /* parts 1.. : their partial sums */
  double *gbp;         /* nparts x O partial bias sums, or NULL */
  char *cols;          /* per part: K x HW if grad_w, then padn */
  char *gcols;         /* per part: K x HW if grad_x */
  int64_t colstride;   /* elements per part in cols */
  int64_t nparts;
} bwd_ctx;

static void bwd_sample(const bwd_ctx *c, int64_t n, int first, char *col,
                       char *pad, char *gcol, char *gw, double *gb, int par) {
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
        unfold(g, cm, col, pad, par);
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
      if (!g->pointwise) fold(g, gcol, gxg, pad, par);
    }
  }
  if (gb) {
    for (int64_t o = 0; o < g->O; o++) {
      int64_t base = (n * g->O + o) * g->HW;
      gb[o] += g->f64 ? row_sum_f64((const double *)c->gout + base, g->HW)
                      : row_sum_f32((const float *)c->gout + base, g->HW);
    }
  }
}

static void bwd_parts(void *p, int64_t p0, int64_t p1) {
  const bwd_ctx *c = p;
  const conv_geom *g = c->g;
  int64_t kh = g->K * g->HW * g->es;
  for (int64_t part = p0; part < p1; part++) {
    char *col = c->cols ? c->cols + part * c->colstride * g->es : NULL;
    char *pad = col && g->padn ? col + (c->colstride - g->padn) * g->es : NULL;
    char *gcol = c->gcols ? c->gcols + part * kh : NULL;
    char *gw = c->gw && part ? c->gwp + (part - 1) * g->O * g->K * g->es : c->gw;
    double *gb = c->gbp ? c->gbp + part * g->O : NULL;
    int64_t n0 = part * g->N / c->nparts, n1 = (part + 1) * g->N / c->nparts;
    for (int64_t n = n0; n < n1; n++)
      bwd_sample(c, n, n == n0, col, pad, gcol, gw, gb, c->nparts == 1);
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
  int dev = op_device(op, 3, (const dl_tensor *[]){grad_out, x, w});
  if (dev < -1 || conv_setup(op, x, w, NULL, stride, padding, dilation, groups, &g) ||
      nn_check_float(op, "grad_out", grad_out, x->dtype))
    return -1;
  int bt = x->ndim == 4;
  int64_t oshape[4] = {g.N, g.O, g.Ho, g.Wo};
  if (!nn_same_shape(grad_out, oshape + !bt, x->ndim))
    return dl_err(EM_NN_SHAPE, op, "grad_out", fmt_tshape(grad_out),
                  fmt_shape(oshape + !bt, x->ndim));
  const dl_device *dv = device_get(op, dev);
  if (!dv) return -1;
  return dv->conv2d_backward(op, dev, &g, grad_out, x, w, need_x, need_w, need_b, grad_x,
                             grad_w, grad_b);
}

/* The CPU's kernel (core/device.h): the gradients asked for (need_*),
** through oneDNN where it is faster (nn/conv_onednn.c), else ours. */
DL_HIDDEN int cpu_conv2d_backward(const char *op, int dev, const conv_geom *gp,
                                  const dl_tensor *grad_out, const dl_tensor *x,
                                  const dl_tensor *w, int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b) {
  (void)dev;
  conv_geom g = *gp;
  int kd = nn_kdtype(x->dtype);
  dl_tensor *cx = NULL, *cw = NULL, *cg = NULL, *gx = NULL, *gw = NULL,
            *gb = NULL, *cols = NULL, *gcols = NULL, *gwp = NULL, *gbp = NULL;
  int rc = -1;
  conv_plan plan = plan_samples(&g);
  bwd_ctx c = {&g, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0,
               plan.nparts};
  int64_t wn = g.O * g.K;
  if (!(cg = nn_prep(grad_out, kd))) goto done;
  c.gout = tensor_first(cg);
  if (need_x || need_w) {
    if (!(cx = nn_prep(x, kd)) || !(cw = nn_prep(w, kd))) goto done;
    c.x = tensor_first(cx), c.w = tensor_first(cw);
  }
  if ((need_x && !(gx = tensor_new(kd, x->shape, x->ndim))) ||
      (need_w && !(gw = tensor_new(kd, w->shape, 4))) ||
      (need_b && !(gb = tensor_new(kd, &g.O, 1))))
    goto done;
  if (!g.f64) {
    int r = conv_onednn_backward(op, &g, (const float *)c.gout, (const float *)c.x,
                                 (const float *)c.w, gx ? (float *)tensor_first(gx) : NULL,
                                 gw ? (float *)tensor_first(gw) : NULL,
                                 gb ? (float *)tensor_first(gb) : NULL);
    if (r < 0) goto done;
    if (r == 0) goto finish;
  }
  if (need_x) {
    c.gx = tensor_first(gx);
    if (!g.pointwise && scratch(kd, c.nparts * g.K * g.HW, &gcols)) goto done;
  }
  c.colstride = (need_w ? g.K * g.HW : 0) + (need_x || need_w ? g.padn : 0);
  if (need_w) {
    c.gw = tensor_first(gw);
    if (g.N == 0) memset(c.gw, 0, (size_t)(wn * g.es));
    if (scratch(kd, (c.nparts - 1) * wn, &gwp)) goto done;
    c.gwp = gwp ? tensor_first(gwp) : NULL;
  }
  if (!g.pointwise && scratch(kd, c.nparts * c.colstride, &cols)) goto done;
  if (need_b) {
    if (scratch(DL_FLOAT64, nn_max64(1, c.nparts * g.O), &gbp)) goto done;
    c.gbp = (double *)tensor_first(gbp);
    memset(c.gbp, 0, sizeof(double) * (size_t)(c.nparts * g.O));
  }
  c.cols = cols ? tensor_first(cols) : NULL;
  c.gcols = gcols ? tensor_first(gcols) : NULL;
  if (g.N > 0 && (need_x || need_w || need_b)) {
    if (c.nparts > 1) run_parts(&plan, bwd_parts, &c);
    else bwd_parts(&c, 0, 1);
    if (gw && c.nparts > 1) {
      sum_ctx s = {&g, c.gw, c.gwp, c.nparts, wn};
      parallel_for(wn, PAR_GRAIN / 4, sum_parts, &s);
    }
  }
  if (need_b) {
    for (int64_t o = 0; o < g.O; o++) {
      double v = 0;
      for (int64_t q = 0; q < c.nparts; q++) v += c.gbp[q * g.O + o];
      if (g.f64) ((double *)tensor_first(gb))[o] = v;
      else ((float *)tensor_first(gb))[o] = (float)v;
    }
  }
finish:
  /* nn_finish consumes its argument, result or not */
  if (need_x && (*grad_x = nn_finish(gx, x->dtype), gx = NULL, !*grad_x)) goto done;
  if (need_w && (*grad_w = nn_finish(gw, x->dtype), gw = NULL, !*grad_w)) goto done;
  if (need_b && (*grad_b = nn_finish(gb, x->dtype), gb = NULL, !*grad_b)) goto done;
  rc = 0;
done:
  return conv_backward_done(rc, grad_x, grad_w, grad_b,
                       (dl_tensor *[]){cx, cw, cg, gx, gw, gb, cols, gcols, gwp, gbp}, 10);
}
