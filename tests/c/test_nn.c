/* test_nn.c -- the neural network kernels (conv2d, pooling, embedding,
** layer and batch norm, dropout, losses): forwards against naive reference
** loops written here, backwards against central finite differences in
** float64 and against the reference loops, at 1 and 2 threads, and the
** errors bad arguments give. */
/*
** Build: cc -std=c11 -Iruntime/include -Iruntime tests/c/test_nn.c -Lbuild
**          -lddplua -Wl,-rpath,$PWD/build -lm -o build/test_nn
** Prints one FAIL line per failed check and "test_nn: N passed, M failed".
*/
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddplua.h"
#include "check.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})

/* -- Helpers ----------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) {  /* xorshift64*, uniform in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-52 - 1.0;
}

static double *rvec(int64_t n) {
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = urand();
  return v;
}

static int64_t numel(const int64_t *s, int nd) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= s[i];
  return n;
}

static dl_tensor *mk(const double *v, const int64_t *shape, int nd, int dtype) {
  dl_tensor *t = dl_from_doubles(v, shape, nd, dtype);
  if (!t) printf("FAIL mk: %s\n", dl_last_error());
  return t;
}

static dl_tensor *mki(const int64_t *v, const int64_t *shape, int nd, int dtype) {
  dl_tensor *t = dl_from_int64s(v, shape, nd, dtype);
  if (!t) printf("FAIL mki: %s\n", dl_last_error());
  return t;
}

/* A random tensor (values in [-1, 1)). */
static dl_tensor *rt(const int64_t *shape, int nd, int dtype) {
  double *v = rvec(numel(shape, nd));
  dl_tensor *t = mk(v, shape, nd, dtype);
  free(v);
  return t;
}

static double *vals(const dl_tensor *t) {
  int64_t n = dl_tensor_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (dl_to_doubles(t, v)) printf("FAIL vals: %s\n", dl_last_error());
  return v;
}

static int same(double a, double b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= tol * (1 + fabs(b));
}

static int has_shape(const dl_tensor *t, const int64_t *s, int nd) {
  if (!t || dl_tensor_dim(t) != nd) return 0;
  for (int i = 0; i < nd; i++)
    if (dl_tensor_size(t, i) != s[i]) return 0;
  return 1;
}

/* Compares t's values with want[] (n of them); names the first mismatch. */
static void expect_vals(const char *what, const dl_tensor *t, const double *want,
                        int64_t n, double tol) {
  if (!t) {
    CHECK(0, "%s: NULL", what);
    return;
  }
  CHECK(dl_tensor_numel(t) == n, "%s: %lld elements, want %lld", what,
        (long long)dl_tensor_numel(t), (long long)n);
  if (dl_tensor_numel(t) != n) return;
  double *got = vals(t);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++)
    if (!same(got[i], want[i], tol)) bad = i;
  CHECK(bad < 0, "%s: element %lld is %.10g, want %.10g", what, (long long)bad,
        bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
  free(got);
}

static void expect_close(const char *what, const dl_tensor *a, const dl_tensor *b,
                         double tol) {
  if (!a || !b) {
    CHECK(0, "%s: NULL", what);
    return;
  }
  double *w = vals(b);
  expect_vals(what, a, w, dl_tensor_numel(b), tol);
  free(w);
}

static void expect_err(const char *what, int line, int failed_, int code,
                       const char *needle) {
  CHECK(failed_, "%s (line %d): expected an error", what, line);
  CHECK(dl_last_error_code() == code, "%s (line %d): code %d, want %d (%s)", what,
        line, dl_last_error_code(), code, dl_last_error());
  CHECK(!needle || strstr(dl_last_error(), needle),
        "%s (line %d): message \"%s\" lacks \"%s\"", what, line, dl_last_error(), needle);
  dl_clear_error();
}
#define EXPECT_ERRP(p, code, needle)                                          \
  do {                                                                        \
    dl_tensor *p_ = (p);                                                      \
    expect_err(#p, __LINE__, p_ == NULL, code, needle);                       \
    if (p_) dl_tensor_release(p_);                                            \
  } while (0)
#define EXPECT_ERRC(rc, code, needle) expect_err(#rc, __LINE__, (rc) < 0, code, needle)

/* -- Finite differences -------------------------------------------------- */

/* A forward under test: the output for inputs in[] (a new tensor). */
typedef dl_tensor *(*fwd_fn)(void *ctx, dl_tensor *const *in);

/* sum(gout * f(in)) */
static double fd_loss(fwd_fn f, void *ctx, dl_tensor *const *in, const double *gout) {
  dl_tensor *o = f(ctx, in);
  if (!o) {
    printf("FAIL fd forward: %s\n", dl_last_error());
    return NAN;
  }
  double *v = vals(o), s = 0;
  for (int64_t i = 0; i < dl_tensor_numel(o); i++) s += v[i] * gout[i];
  free(v);
  dl_tensor_release(o);
  return s;
}

/* Checks grad (the analytic gradient of sum(gout * f) for input k, float64)
** against central differences. */
static void fd_check(const char *what, fwd_fn f, void *ctx, dl_tensor *const *in,
                     int k, const dl_tensor *grad, const double *gout, double tol) {
  if (!grad) {
    CHECK(0, "%s: no gradient (%s)", what, dl_last_error());
    return;
  }
  int64_t n = dl_tensor_numel(in[k]);
  CHECK(dl_tensor_numel(grad) == n, "%s: gradient has %lld elements, want %lld", what,
        (long long)dl_tensor_numel(grad), (long long)n);
  if (dl_tensor_numel(grad) != n) return;
  double *ga = vals(grad), h = 1e-6;
  int64_t bad = -1;
  double num_bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double x0;
    dl_get_double(in[k], i, &x0);
    dl_set_double(in[k], i, x0 + h);
    double lp = fd_loss(f, ctx, in, gout);
    dl_set_double(in[k], i, x0 - h);
    double lm = fd_loss(f, ctx, in, gout);
    dl_set_double(in[k], i, x0);
    double num = (lp - lm) / (2 * h);
    if (bad < 0 && !(fabs(num - ga[i]) <= tol * (1 + fabs(num)))) bad = i, num_bad = num;
  }
  CHECK(bad < 0, "%s: d/d[%lld] analytic %.10g, numeric %.10g", what, (long long)bad,
        bad >= 0 ? ga[bad] : 0.0, num_bad);
  free(ga);
}

/* -- conv2d ---------------------------------------------------------------- */

/* The tests count reductions 0 (none), 1 (mean), 2 (sum); the API's values. */
#define LOSS(red) ((dl_loss_reduction)(DL_LOSS_NONE + (red)))

typedef struct {
  int N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, G, bias, batched;
} conv_cfg;

static int conv_out(int in, int k, int s, int p, int d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* Naive loops: out (and, with go, the three gradients). */
static void conv_ref(const conv_cfg *c, const double *x, const double *w,
                     const double *b, double *out, const double *go, double *gx,
                     double *gw, double *gb) {
  int Ho = conv_out(c->H, c->kh, c->sh, c->ph, c->dh);
  int Wo = conv_out(c->W, c->kw, c->sw, c->pw, c->dw);
  int Cg = c->C / c->G, Og = c->O / c->G;
  if (go) {
    memset(gx, 0, sizeof(double) * (size_t)(c->N * c->C * c->H * c->W));
    memset(gw, 0, sizeof(double) * (size_t)(c->O * Cg * c->kh * c->kw));
    memset(gb, 0, sizeof(double) * (size_t)c->O);
  }
  for (int n = 0; n < c->N; n++)
    for (int o = 0; o < c->O; o++)
      for (int oh = 0; oh < Ho; oh++)
        for (int ow = 0; ow < Wo; ow++) {
          int oi = ((n * c->O + o) * Ho + oh) * Wo + ow;
          double s = b ? b[o] : 0, g = go ? go[oi] : 0;
          if (go) gb[o] += g;
          for (int cc = 0; cc < Cg; cc++) {
            int ci = (o / Og) * Cg + cc;
            for (int i = 0; i < c->kh; i++)
              for (int j = 0; j < c->kw; j++) {
                int ih = oh * c->sh - c->ph + i * c->dh, iw = ow * c->sw - c->pw + j * c->dw;
                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                int xi = ((n * c->C + ci) * c->H + ih) * c->W + iw;
                int wi = ((o * Cg + cc) * c->kh + i) * c->kw + j;
                s += x[xi] * w[wi];
                if (go) {
                  gx[xi] += g * w[wi];
                  gw[wi] += g * x[xi];
                }
              }
          }
          if (out) out[oi] = s;
        }
}

typedef struct {
  const conv_cfg *c;
} conv_fd;

static dl_tensor *conv_fwd(void *p, dl_tensor *const *in) {
  const conv_cfg *c = ((conv_fd *)p)->c;
  return dl_conv2d(in[0], in[1], c->bias ? in[2] : NULL, S(c->sh, c->sw),
                   S(c->ph, c->pw), S(c->dh, c->dw), c->G);
}

static void test_conv_cfg(const conv_cfg *c, int dtype, int fd) {
  char what[160];
  snprintf(what, sizeof what, "conv2d N%d C%d %dx%d O%d k%dx%d s%d,%d p%d,%d d%d,%d g%d b%d %s",
           c->N, c->C, c->H, c->W, c->O, c->kh, c->kw, c->sh, c->sw, c->ph, c->pw,
           c->dh, c->dw, c->G, c->bias, dl_dtype_name(dtype));
  int Ho = conv_out(c->H, c->kh, c->sh, c->ph, c->dh);
  int Wo = conv_out(c->W, c->kw, c->sw, c->pw, c->dw);
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C / c->G, c->kh, c->kw};
  int64_t os[4] = {c->N, c->O, Ho, Wo};
  int64_t nx = numel(xs, 4), nw = numel(ws, 4), no = numel(os, 4);
  double *x = rvec(nx), *w = rvec(nw), *b = rvec(c->O), *go = rvec(no);
  double *out = malloc(sizeof(double) * (size_t)no), *gx = malloc(sizeof(double) * (size_t)nx);
  double *gw = malloc(sizeof(double) * (size_t)nw), *gb = malloc(sizeof(double) * (size_t)c->O);
  conv_ref(c, x, w, c->bias ? b : NULL, out, go, gx, gw, gb);
  int ub = !c->batched;  /* unbatched: drop N (== 1) */
  dl_tensor *in[3] = {mk(x, xs + ub, 4 - ub, dtype), mk(w, ws, 4, dtype), mk(b, S(c->O), 1, dtype)};
  dl_tensor *y = conv_fwd(&(conv_fd){c}, in);
  double tol = dtype == DL_FLOAT64 ? 1e-12 : dtype == DL_FLOAT32 ? 1e-5 : 3e-2;
  CHECK(has_shape(y, os + ub, 4 - ub), "%s: output shape", what);
  char w2[200];
  snprintf(w2, sizeof w2, "%s forward", what);
  expect_vals(w2, y, out, no, tol);
  dl_tensor *gout = mk(go, os + ub, 4 - ub, dtype), *tgx, *tgw, *tgb;
  int rc = dl_conv2d_backward(gout, in[0], in[1], S(c->sh, c->sw), S(c->ph, c->pw),
                              S(c->dh, c->dw), c->G, 1, 1, c->bias, &tgx, &tgw, &tgb);
  CHECK(rc == 0, "%s: backward failed", what);
  if (rc == 0) {
    snprintf(w2, sizeof w2, "%s grad_x", what);
    expect_vals(w2, tgx, gx, nx, tol);
    snprintf(w2, sizeof w2, "%s grad_w", what);
    expect_vals(w2, tgw, gw, nw, tol);
    CHECK(has_shape(tgw, ws, 4) && has_shape(tgx, xs + ub, 4 - ub), "%s: grad shapes", what);
    if (c->bias) {
      snprintf(w2, sizeof w2, "%s grad_b", what);
      expect_vals(w2, tgb, gb, c->O, tol);
    } else {
      CHECK(tgb == NULL, "%s: grad_b not asked for", what);
    }
    if (fd && dtype == DL_FLOAT64) {
      conv_fd ctx = {c};
      snprintf(w2, sizeof w2, "%s fd x", what);
      fd_check(w2, conv_fwd, &ctx, in, 0, tgx, go, 1e-6);
      snprintf(w2, sizeof w2, "%s fd w", what);
      fd_check(w2, conv_fwd, &ctx, in, 1, tgw, go, 1e-6);
      if (c->bias) {
        snprintf(w2, sizeof w2, "%s fd b", what);
        fd_check(w2, conv_fwd, &ctx, in, 2, tgb, go, 1e-6);
      }
    }
    dl_tensor_release(tgx);
    dl_tensor_release(tgw);
    dl_tensor_release(tgb);
  }
  /* only some gradients */
  rc = dl_conv2d_backward(gout, in[0], in[1], S(c->sh, c->sw), S(c->ph, c->pw),
                          S(c->dh, c->dw), c->G, 0, 1, 0, &tgx, &tgw, &tgb);
  CHECK(rc == 0 && !tgx && tgw && !tgb, "%s: grad_w alone", what);
  if (rc == 0) {
    snprintf(w2, sizeof w2, "%s grad_w alone", what);
    expect_vals(w2, tgw, gw, nw, tol);
    dl_tensor_release(tgw);
  }
  dl_tensor_release(gout);
  dl_tensor_release(y);
  for (int i = 0; i < 3; i++) dl_tensor_release(in[i]);
  free(x), free(w), free(b), free(go), free(out), free(gx), free(gw), free(gb);
}

static const conv_cfg conv_cfgs[] = {
  /* N C H W  O kh kw sh sw ph pw dh dw G bias batched */
  {2, 3, 5, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 1},
  {2, 4, 6, 5, 6, 3, 2, 2, 1, 1, 2, 1, 1, 2, 1, 1},
  {1, 2, 7, 7, 2, 3, 3, 2, 2, 1, 1, 2, 2, 1, 0, 1},
  {2, 4, 5, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1},   /* pointwise */
  {3, 6, 4, 5, 6, 2, 2, 1, 1, 1, 1, 1, 2, 3, 1, 1},
  {2, 4, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, 1, 1},   /* depthwise x2 */
  {1, 3, 5, 5, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0},   /* unbatched */
  {2, 2, 4, 4, 3, 4, 4, 1, 1, 0, 0, 1, 1, 1, 1, 1},   /* kernel = input */
  {2, 2, 3, 8, 2, 1, 3, 3, 3, 2, 0, 1, 3, 2, 0, 1},   /* stride > kernel, pad only H */
  {2, 4, 4, 4, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2, 0, 1},   /* pointwise, groups */
};
static const conv_cfg conv_big[] = {
  {8, 3, 10, 10, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},       /* samples on the pool */
  {3, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* OpenBLAS threads */
  {4, 8, 12, 12, 8, 3, 3, 2, 2, 1, 1, 1, 1, 2, 1, 1},
  {5, 32, 9, 9, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1},
  {1, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},     /* one sample: OpenBLAS threads */
};

static void test_conv(void) {
  int nc = (int)(sizeof conv_cfgs / sizeof conv_cfgs[0]);
  for (int i = 0; i < nc; i++) {
    test_conv_cfg(&conv_cfgs[i], DL_FLOAT64, 1);
    test_conv_cfg(&conv_cfgs[i], DL_FLOAT32, 0);
  }
  for (int t = 1; t <= 2; t++) {
    dl_set_num_threads(t);
    for (size_t i = 0; i < sizeof conv_big / sizeof conv_big[0]; i++) {
      test_conv_cfg(&conv_big[i], DL_FLOAT32, 0);
      test_conv_cfg(&conv_big[i], DL_FLOAT64, 0);
    }
  }
  test_conv_cfg(&conv_cfgs[1], DL_FLOAT16, 0);
  test_conv_cfg(&conv_cfgs[4], DL_BFLOAT16, 0);

  /* a non-contiguous input gives the same as its contiguous copy */
  dl_tensor *x = rt(S(2, 3, 6, 5), 4, DL_FLOAT32), *w = rt(S(4, 3, 3, 3), 4, DL_FLOAT32);
  dl_tensor *xt = dl_transpose(x, 2, 3), *xc = dl_contiguous(xt);
  dl_tensor *a = dl_conv2d(xt, w, NULL, S(1, 1), S(1, 1), S(1, 1), 1);
  dl_tensor *b = dl_conv2d(xc, w, NULL, S(1, 1), S(1, 1), S(1, 1), 1);
  expect_close("conv2d non-contiguous input", a, b, 0);
  dl_tensor_release(a), dl_tensor_release(b), dl_tensor_release(xt), dl_tensor_release(xc);

  /* errors */
  dl_tensor *w5 = rt(S(4, 2, 3, 3), 4, DL_FLOAT32), *big = rt(S(4, 3, 7, 7), 4, DL_FLOAT32);
  dl_tensor *w64 = rt(S(4, 3, 3, 3), 4, DL_FLOAT64), *bias = rt(S(5), 1, DL_FLOAT32);
  dl_tensor *x2 = rt(S(3, 6), 2, DL_FLOAT32);
  EXPECT_ERRP(dl_conv2d(x, w5, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_ESHAPE,
              "conv2d: weight of shape [4, 2, 3, 3] with groups = 1 expects 2 input channels, but the input of shape [2, 3, 6, 5] has 3");
  EXPECT_ERRP(dl_conv2d(x, w, NULL, S(1, 1), S(0, 0), S(1, 1), 3), DL_ESHAPE,
              "groups = 3 must divide the 4 output channels");
  EXPECT_ERRP(dl_conv2d(x, big, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_ESHAPE,
              "conv2d: kernel 7x7 (dilated 7x7) is larger than the padded input 6x5");
  EXPECT_ERRP(dl_conv2d(x, w, NULL, S(1, 1), S(0, 0), S(3, 1), 1), DL_ESHAPE,
              "kernel 3x3 (dilated 7x3)");
  EXPECT_ERRP(dl_conv2d(x, w64, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_EDTYPE, "conv2d");
  EXPECT_ERRP(dl_conv2d(x, w, bias, S(1, 1), S(0, 0), S(1, 1), 1), DL_ESHAPE,
              "conv2d: bias has shape [5], expected [4]");
  EXPECT_ERRP(dl_conv2d(x, w, NULL, S(0, 1), S(0, 0), S(1, 1), 1), DL_EINVAL,
              "conv2d: stride must be positive, got [0, 1]");
  EXPECT_ERRP(dl_conv2d(x, w, NULL, S(1, 1), S(-1, 0), S(1, 1), 1), DL_EINVAL, "padding");
  EXPECT_ERRP(dl_conv2d(x, w, NULL, S(1, 1), S(0, 0), S(1, 1), 0), DL_EINVAL, "groups");
  EXPECT_ERRP(dl_conv2d(x2, w, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_ESHAPE,
              "conv2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got an input of shape [3, 6]");
  EXPECT_ERRP(dl_conv2d(x, x2, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_ESHAPE, "4-D weight");
  EXPECT_ERRP(dl_conv2d(NULL, w, NULL, S(1, 1), S(0, 0), S(1, 1), 1), DL_EINVAL, "conv2d");
  dl_tensor *gx, *gw, *gb, *go = rt(S(2, 4, 3, 3), 4, DL_FLOAT32);
  EXPECT_ERRC(dl_conv2d_backward(go, x, w, S(1, 1), S(0, 0), S(1, 1), 1, 1, 1, 1,
                                 &gx, &gw, &gb),
              DL_ESHAPE, "conv2d_backward: grad_out has shape [2, 4, 3, 3], expected [2, 4, 4, 3]");
  CHECK(!gx && !gw && !gb);
  dl_tensor_release(go);
  /* empty batch */
  dl_tensor *x0 = dl_zeros(S(0, 3, 6, 5), 4, DL_FLOAT32);
  dl_tensor *y0 = dl_conv2d(x0, w, NULL, S(1, 1), S(1, 1), S(1, 1), 1);
  CHECK(has_shape(y0, S(0, 4, 6, 5), 4), "conv2d of an empty batch");
  dl_tensor_release(x0), dl_tensor_release(y0);
  dl_tensor_release(x), dl_tensor_release(w), dl_tensor_release(w5);
  dl_tensor_release(big), dl_tensor_release(w64), dl_tensor_release(bias);
  dl_tensor_release(x2);
}

/* -- Pooling --------------------------------------------------------------- */

typedef struct {
  int N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, ceil, incl, div;
} pool_cfg;

static int pool_out(int in, int k, int p, int s, int d, int ceil_mode) {
  int num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) o--;
  return o;
}

static void maxpool_ref(const pool_cfg *c, const double *x, double *out, int64_t *idx) {
  int Ho = pool_out(c->H, c->kh, c->ph, c->sh, c->dh, c->ceil);
  int Wo = pool_out(c->W, c->kw, c->pw, c->sw, c->dw, c->ceil);
  for (int q = 0; q < c->N * c->C; q++)
    for (int oh = 0; oh < Ho; oh++)
      for (int ow = 0; ow < Wo; ow++) {
        double m = -INFINITY;
        int64_t best = -1;
        for (int i = 0; i < c->kh; i++)
          for (int j = 0; j < c->kw; j++) {
            int ih = oh * c->sh - c->ph + i * c->dh, iw = ow * c->sw - c->pw + j * c->dw;
            if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
            double v = x[(q * c->H + ih) * c->W + iw];
            if (best < 0) best = ih * c->W + iw;
            if (v > m || isnan(v)) m = v, best = ih * c->W + iw;
          }
        out[(q * Ho + oh) * Wo + ow] = m;
        idx[(q * Ho + oh) * Wo + ow] = best;
      }
}

static void avgpool_ref(const pool_cfg *c, const double *x, double *out) {
  int Ho = pool_out(c->H, c->kh, c->ph, c->sh, 1, c->ceil);
  int Wo = pool_out(c->W, c->kw, c->pw, c->sw, 1, c->ceil);
  for (int q = 0; q < c->N * c->C; q++)
    for (int oh = 0; oh < Ho; oh++)
      for (int ow = 0; ow < Wo; ow++) {
        double s = 0;
        int cnt = 0, pad_cnt = 0;
        for (int i = 0; i < c->kh; i++)
          for (int j = 0; j < c->kw; j++) {
            int ih = oh * c->sh - c->ph + i, iw = ow * c->sw - c->pw + j;
            /* taps in the padding count; taps past it (ceil_mode) do not */
            if (ih < c->H + c->ph && iw < c->W + c->pw) pad_cnt++;
            if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
            s += x[(q * c->H + ih) * c->W + iw];
            cnt++;
          }
        double d = c->div ? c->div : c->incl ? pad_cnt : cnt;
        out[(q * Ho + oh) * Wo + ow] = cnt ? s / d : 0;
      }
}

typedef struct {
  const pool_cfg *c;
  int avg;
} pool_fd;

static dl_tensor *pool_fwd(void *p, dl_tensor *const *in) {
  const pool_fd *f = p;
  const pool_cfg *c = f->c;
  if (f->avg)
    return dl_avg_pool2d(in[0], S(c->kh, c->kw), S(c->sh, c->sw), S(c->ph, c->pw),
                         c->ceil, c->incl, c->div);
  dl_tensor *o, *ix;
  if (dl_max_pool2d(in[0], S(c->kh, c->kw), S(c->sh, c->sw), S(c->ph, c->pw),
                    S(c->dh, c->dw), c->ceil, &o, &ix))
    return NULL;
  dl_tensor_release(ix);
  return o;
}

static void test_pool_cfg(const pool_cfg *c, int avg, int dtype) {
  char what[160];
  snprintf(what, sizeof what, "%s_pool2d %dx%dx%dx%d k%dx%d s%d,%d p%d,%d d%d,%d ceil%d incl%d div%d %s",
           avg ? "avg" : "max", c->N, c->C, c->H, c->W, c->kh, c->kw, c->sh, c->sw,
           c->ph, c->pw, c->dh, c->dw, c->ceil, c->incl, c->div, dl_dtype_name(dtype));
  int d = avg ? 1 : 0;
  int Ho = pool_out(c->H, c->kh, c->ph, c->sh, d ? 1 : c->dh, c->ceil);
  int Wo = pool_out(c->W, c->kw, c->pw, c->sw, d ? 1 : c->dw, c->ceil);
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, os[4] = {c->N, c->C, Ho, Wo};
  int64_t nx = numel(xs, 4), no = numel(os, 4);
  double *x = rvec(nx), *go = rvec(no), *out = malloc(sizeof(double) * (size_t)no);
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)no);
  if (avg) avgpool_ref(c, x, out);
  else maxpool_ref(c, x, out, idx);
  dl_tensor *in[1] = {mk(x, xs, 4, dtype)};
  pool_fd ctx = {c, avg};
  dl_tensor *y, *ix = NULL, *gx;
  if (avg) {
    y = pool_fwd(&ctx, in);
  } else {
    int rc = dl_max_pool2d(in[0], S(c->kh, c->kw), S(c->sh, c->sw), S(c->ph, c->pw),
                           S(c->dh, c->dw), c->ceil, &y, &ix);
    CHECK(rc == 0, "%s", what);
  }
  CHECK(has_shape(y, os, 4), "%s: output shape", what);
  double tol = dtype == DL_FLOAT64 ? 1e-12 : 1e-6;
  expect_vals(what, y, out, no, tol);
  if (ix) {
    double *iv = malloc(sizeof(double) * (size_t)no);
    for (int64_t i = 0; i < no; i++) iv[i] = (double)idx[i];
    char w2[200];
    snprintf(w2, sizeof w2, "%s indices", what);
    CHECK(dl_tensor_dtype(ix) == DL_INT64, "%s: int64", w2);
    expect_vals(w2, ix, iv, no, 0);
    free(iv);
  }
  dl_tensor *gout = mk(go, os, 4, dtype);
  if (avg)
    gx = dl_avg_pool2d_backward(gout, in[0], S(c->kh, c->kw), S(c->sh, c->sw),
                                S(c->ph, c->pw), c->ceil, c->incl, c->div);
  else
    gx = dl_max_pool2d_backward(gout, in[0], ix);
  CHECK(has_shape(gx, xs, 4), "%s: grad shape", what);
  if (dtype == DL_FLOAT64) {
    char w2[200];
    snprintf(w2, sizeof w2, "%s fd", what);
    fd_check(w2, pool_fwd, &ctx, in, 0, gx, go, 1e-6);
  }
  dl_tensor_release(gx), dl_tensor_release(gout), dl_tensor_release(y);
  dl_tensor_release(ix), dl_tensor_release(in[0]);
  free(x), free(go), free(out), free(idx);
}

static const pool_cfg pool_cfgs[] = {
  /* N C H W kh kw sh sw ph pw dh dw ceil incl div */
  {2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 0},
  {2, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0},
  {1, 2, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0, 0},
  {2, 2, 5, 8, 2, 3, 1, 2, 1, 1, 1, 1, 1, 1, 0},
  {1, 3, 8, 7, 3, 2, 3, 2, 0, 1, 1, 1, 1, 0, 0},
  {1, 2, 6, 6, 3, 3, 3, 3, 1, 1, 1, 1, 0, 1, 5},
  {2, 1, 9, 9, 3, 3, 2, 1, 1, 0, 1, 1, 1, 1, 0},
  {1, 1, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, 0, 0, 0},
};
static const pool_cfg maxpool_dil[] = {
  {2, 2, 9, 9, 3, 3, 2, 1, 1, 1, 2, 2, 0, 0, 0},
  {1, 2, 10, 8, 2, 3, 2, 2, 1, 1, 3, 2, 1, 0, 0},
};

static void test_pool(void) {
  for (size_t i = 0; i < sizeof pool_cfgs / sizeof pool_cfgs[0]; i++)
    for (int avg = 0; avg < 2; avg++) {
      test_pool_cfg(&pool_cfgs[i], avg, DL_FLOAT64);
      test_pool_cfg(&pool_cfgs[i], avg, DL_FLOAT32);
    }
  for (size_t i = 0; i < sizeof maxpool_dil / sizeof maxpool_dil[0]; i++) {
    test_pool_cfg(&maxpool_dil[i], 0, DL_FLOAT64);
    test_pool_cfg(&maxpool_dil[i], 0, DL_FLOAT32);
  }
  /* NaN wins, -inf windows keep their first tap, stride NULL = kernel, 3-D */
  dl_tensor *x = mk((const double[]){1, NAN, 3, 4, -INFINITY, -INFINITY, 2, NAN, 5},
                    S(1, 3, 3), 3, DL_FLOAT32);
  dl_tensor *y, *ix;
  CHECK(dl_max_pool2d(x, S(2, 2), NULL, S(0, 0), S(1, 1), 0, &y, &ix) == 0);
  CHECK(has_shape(y, S(1, 1, 1), 3));
  expect_vals("max_pool2d NaN", y, (const double[]){NAN}, 1, 0);
  expect_vals("max_pool2d NaN index", ix, (const double[]){1}, 1, 0);
  dl_tensor_release(y), dl_tensor_release(ix);
  CHECK(dl_max_pool2d(x, S(2, 2), S(1, 1), S(0, 0), S(1, 1), 0, &y, &ix) == 0);
  expect_vals("max_pool2d NaN 2", y, (const double[]){NAN, NAN, NAN, NAN}, 4, 0);
  expect_vals("max_pool2d NaN 2 index", ix, (const double[]){1, 1, 7, 7}, 4, 0);
  dl_tensor_release(y), dl_tensor_release(ix), dl_tensor_release(x);
  x = mk((const double[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY}, S(1, 1, 2, 2), 4, DL_FLOAT64);
  CHECK(dl_max_pool2d(x, S(2, 2), NULL, S(1, 1), S(1, 1), 0, &y, &ix) == 0);
  expect_vals("max_pool2d -inf", y, (const double[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY}, 4, 0);
  expect_vals("max_pool2d -inf index", ix, (const double[]){0, 1, 2, 3}, 4, 0);
  dl_tensor_release(y), dl_tensor_release(ix);
  /* errors */
  EXPECT_ERRC(dl_max_pool2d(x, S(2, 2), NULL, S(2, 0), S(1, 1), 0, &y, &ix), DL_EINVAL,
              "max_pool2d: padding [2, 0] must be at most half the kernel size [2, 2]");
  EXPECT_ERRC(dl_max_pool2d(x, S(3, 3), NULL, S(0, 0), S(1, 1), 0, &y, &ix), DL_ESHAPE,
              "max_pool2d: input of shape [1, 1, 2, 2] gives an output of 0x0, which is too small");
  EXPECT_ERRC(dl_max_pool2d(x, S(0, 2), NULL, S(0, 0), S(1, 1), 0, &y, &ix), DL_EINVAL,
              "kernel_size must be positive");
  EXPECT_ERRP(dl_avg_pool2d(x, S(3, 3), S(1, 1), S(0, 0), 0, 1, 0), DL_ESHAPE, "avg_pool2d");
  EXPECT_ERRP(dl_avg_pool2d(x, S(2, 2), S(1, 1), S(0, 0), 0, 1, -1), DL_EINVAL, "divisor_override");
  dl_tensor *bad = mki((const int64_t[]){9}, S(1, 1, 1, 1), 4, DL_INT64), *g1 = dl_zeros(S(1, 1, 1, 1), 4, DL_FLOAT64);
  EXPECT_ERRP(dl_max_pool2d_backward(g1, x, bad), DL_EINDEX, "max_pool2d_backward: index 9 out of range");
  dl_tensor_release(bad), dl_tensor_release(g1), dl_tensor_release(x);
}

/* -- Embedding ------------------------------------------------------------- */

static void test_embedding(void) {
  int64_t V = 7, D = 5;
  double *wv = rvec(V * D);
  dl_tensor *w = mk(wv, S(V, D), 2, DL_FLOAT32);
  const int64_t iv[] = {3, 0, 6, 3, 3, 1};
  for (int dt = 0; dt < 2; dt++) {
    dl_tensor *idx = mki(iv, S(2, 3), 2, dt ? DL_INT32 : DL_INT64);
    dl_tensor *y = dl_embedding(w, idx);
    CHECK(has_shape(y, S(2, 3, 5), 3), "embedding shape");
    double want[30];
    for (int i = 0; i < 6; i++)
      for (int j = 0; j < D; j++) want[i * D + j] = (float)wv[iv[i] * D + j];
    expect_vals("embedding forward", y, want, 30, 0);
    dl_tensor_release(y);
    /* backward: rows summed; padding_idx row 3 gets none; freq scaling */
    double *go = rvec(30);
    dl_tensor *g = mk(go, S(2, 3, 5), 3, DL_FLOAT64);
    for (int pad = -1; pad <= 3; pad += 4)
      for (int freq = 0; freq < 2; freq++) {
        dl_tensor *gw = dl_embedding_backward(g, idx, V, pad, freq);
        double gref[35] = {0};
        int cnt[7] = {0};
        for (int i = 0; i < 6; i++) cnt[iv[i]]++;
        for (int i = 0; i < 6; i++)
          for (int j = 0; j < D; j++)
            if (iv[i] != pad) gref[iv[i] * D + j] += go[i * D + j] / (freq ? cnt[iv[i]] : 1);
        CHECK(has_shape(gw, S(7, 5), 2) && dl_tensor_dtype(gw) == DL_FLOAT64);
        char what[64];
        snprintf(what, sizeof what, "embedding_backward pad %d freq %d", pad, freq);
        expect_vals(what, gw, gref, 35, 1e-14);
        dl_tensor_release(gw);
      }
    free(go);
    dl_tensor_release(g);
    dl_tensor_release(idx);
  }
  /* any dtype for the weight; 0-dim indices */
  dl_tensor *wi = mki((const int64_t[]){10, 11, 20, 21}, S(2, 2), 2, DL_INT64);
  dl_tensor *i0 = mki((const int64_t[]){1}, S(1), 0, DL_INT64);
  dl_tensor *y = dl_embedding(wi, i0);
  CHECK(has_shape(y, S(2), 1));
  expect_vals("embedding int64 weight", y, (const double[]){20, 21}, 2, 0);
  dl_tensor_release(y), dl_tensor_release(wi), dl_tensor_release(i0);
  /* errors */
  dl_tensor *badi = mki((const int64_t[]){0, 1, 2, 7}, S(4), 1, DL_INT64);
  EXPECT_ERRP(dl_embedding(w, badi), DL_EINDEX,
              "embedding: index 7 out of range for a weight of 7 rows (at position 3)");
  dl_tensor *fi = mk((const double[]){1}, S(1), 1, DL_FLOAT32);
  EXPECT_ERRP(dl_embedding(w, fi), DL_EDTYPE, "embedding");
  dl_tensor *g = dl_zeros(S(4, 5), 2, DL_FLOAT32);
  EXPECT_ERRP(dl_embedding_backward(g, badi, 7, -1, 0), DL_EINDEX, "at position 3");
  EXPECT_ERRP(dl_embedding_backward(g, badi, 8, 8, 0), DL_EINVAL, "padding_idx");
  dl_tensor *g3 = dl_zeros(S(3, 5), 2, DL_FLOAT32);
  EXPECT_ERRP(dl_embedding_backward(g3, badi, 8, -1, 0), DL_ESHAPE, "embedding_backward: grad_out");
  dl_tensor_release(g), dl_tensor_release(g3), dl_tensor_release(fi), dl_tensor_release(badi);
  dl_tensor_release(w);
  free(wv);
}

/* -- Layer norm ---------------------------------------------------------- */

typedef struct {
  int nnorm, hw, hb;
  const int64_t *ns;
} ln_fd;

static dl_tensor *ln_fwd(void *p, dl_tensor *const *in) {
  const ln_fd *f = p;
  dl_tensor *o, *m, *r;
  if (dl_layer_norm(in[0], f->ns, f->nnorm, f->hw ? in[1] : NULL, f->hb ? in[2] : NULL,
                    1e-5, &o, &m, &r))
    return NULL;
  dl_tensor_release(m), dl_tensor_release(r);
  return o;
}

static void test_layer_norm(void) {
  const int64_t xs[3] = {3, 4, 5};
  for (int nnorm = 1; nnorm <= 2; nnorm++)
    for (int aff = 0; aff < 4; aff++) {
      const int64_t *ns = xs + 3 - nnorm;
      int64_t N = numel(ns, nnorm), M = 60 / N;
      ln_fd f = {nnorm, aff & 1, aff >> 1, ns};
      double *x = rvec(60), *w = rvec(N), *b = rvec(N), *go = rvec(60);
      dl_tensor *in[3] = {mk(x, xs, 3, DL_FLOAT64), mk(w, ns, nnorm, DL_FLOAT64),
                          mk(b, ns, nnorm, DL_FLOAT64)};
      dl_tensor *o, *m, *r;
      char what[64];
      snprintf(what, sizeof what, "layer_norm nnorm %d w %d b %d", nnorm, f.hw, f.hb);
      CHECK(dl_layer_norm(in[0], ns, nnorm, f.hw ? in[1] : NULL, f.hb ? in[2] : NULL,
                          1e-5, &o, &m, &r) == 0, "%s", what);
      double want[60], mw[12], rw[12];
      for (int64_t i = 0; i < M; i++) {
        double mu = 0, var = 0;
        for (int64_t j = 0; j < N; j++) mu += x[i * N + j];
        mu /= (double)N;
        for (int64_t j = 0; j < N; j++) var += (x[i * N + j] - mu) * (x[i * N + j] - mu);
        var /= (double)N;
        mw[i] = mu, rw[i] = 1 / sqrt(var + 1e-5);
        for (int64_t j = 0; j < N; j++)
          want[i * N + j] = (x[i * N + j] - mu) * rw[i] * (f.hw ? w[j] : 1) + (f.hb ? b[j] : 0);
      }
      expect_vals(what, o, want, 60, 1e-12);
      CHECK(has_shape(m, nnorm == 1 ? S(3, 4, 1) : S(3, 1, 1), 3), "%s: mean shape", what);
      expect_vals("layer_norm mean", m, mw, M, 1e-12);
      expect_vals("layer_norm rstd", r, rw, M, 1e-12);
      dl_tensor *gout = mk(go, xs, 3, DL_FLOAT64), *gx, *gw, *gb;
      CHECK(dl_layer_norm_backward(gout, in[0], ns, nnorm, m, r, f.hw ? in[1] : NULL, 1,
                                   f.hw, f.hb, &gx, &gw, &gb) == 0, "%s backward", what);
      fd_check(what, ln_fwd, &f, in, 0, gx, go, 1e-6);
      if (f.hw) fd_check(what, ln_fwd, &f, in, 1, gw, go, 1e-6);
      if (f.hb) fd_check(what, ln_fwd, &f, in, 2, gb, go, 1e-6);
      CHECK(f.hw ? has_shape(gw, ns, nnorm) : gw == NULL, "%s: grad_w", what);
      dl_tensor_release(gx), dl_tensor_release(gw), dl_tensor_release(gb);
      /* float32 agrees */
      dl_tensor *x32 = mk(x, xs, 3, DL_FLOAT32), *o32, *m32, *r32;
      dl_tensor *w32 = mk(w, ns, nnorm, DL_FLOAT32), *b32 = mk(b, ns, nnorm, DL_FLOAT32);
      CHECK(dl_layer_norm(x32, ns, nnorm, f.hw ? w32 : NULL, f.hb ? b32 : NULL, 1e-5,
                          &o32, &m32, &r32) == 0);
      expect_vals("layer_norm float32", o32, want, 60, 1e-5);
      dl_tensor *g32 = mk(go, xs, 3, DL_FLOAT32), *gx32, *gx64;
      CHECK(dl_layer_norm_backward(g32, x32, ns, nnorm, m32, r32, f.hw ? w32 : NULL, 1, 0, 0,
                                   &gx32, NULL, NULL) == 0);
      CHECK(dl_layer_norm_backward(gout, in[0], ns, nnorm, m, r, f.hw ? in[1] : NULL, 1, 0, 0,
                                   &gx64, NULL, NULL) == 0);
      expect_close("layer_norm float32 grad", gx32, gx64, 1e-4);
      dl_tensor_release(gx32), dl_tensor_release(gx64), dl_tensor_release(g32);
      dl_tensor_release(x32), dl_tensor_release(o32), dl_tensor_release(m32);
      dl_tensor_release(r32), dl_tensor_release(w32), dl_tensor_release(b32);
      dl_tensor_release(gout), dl_tensor_release(o), dl_tensor_release(m), dl_tensor_release(r);
      for (int i = 0; i < 3; i++) dl_tensor_release(in[i]);
      free(x), free(w), free(b), free(go);
    }
  dl_tensor *x = rt(S(2, 3), 2, DL_FLOAT32), *o, *m, *r;
  EXPECT_ERRC(dl_layer_norm(x, S(4), 1, NULL, NULL, 1e-5, &o, &m, &r), DL_ESHAPE,
              "layer_norm: input has shape [2, 3], expected a shape ending in normalized_shape [4]");
  dl_tensor *w = rt(S(2), 1, DL_FLOAT32);
  EXPECT_ERRC(dl_layer_norm(x, S(3), 1, w, NULL, 1e-5, &o, &m, &r), DL_ESHAPE,
              "layer_norm: weight has shape [2], expected [3]");
  EXPECT_ERRC(dl_layer_norm(x, S(2, 3, 4), 3, NULL, NULL, 1e-5, &o, &m, &r), DL_EINVAL,
              "normalized_shape");
  dl_tensor_release(x), dl_tensor_release(w);
}

/* -- Batch norm ---------------------------------------------------------- */

typedef struct {
  int training;
  dl_tensor *rm, *rv;
} bn_fd;

static dl_tensor *bn_fwd(void *p, dl_tensor *const *in) {
  const bn_fd *f = p;
  dl_tensor *o, *m, *s;
  /* running stats are passed only in eval, so probing does not move them */
  if (dl_batch_norm(in[0], in[1], in[2], f->training ? NULL : f->rm,
                    f->training ? NULL : f->rv, f->training, 0.1, 1e-5, &o, &m, &s))
    return NULL;
  dl_tensor_release(m), dl_tensor_release(s);
  return o;
}

static void test_batch_norm_shape(const int64_t *xs, int nd) {
  int64_t n = numel(xs, nd), C = xs[1], per = n / C;
  double *x = rvec(n), *w = rvec(C), *b = rvec(C), *go = rvec(n);
  double rmv[16], rvv[16];
  for (int c = 0; c < C; c++) rmv[c] = urand(), rvv[c] = 1 + 0.5 * urand();
  for (int training = 1; training >= 0; training--) {
    char what[96];
    snprintf(what, sizeof what, "batch_norm %s %s", training ? "train" : "eval",
             nd == 2 ? "[N, C]" : "[N, C, H, W]");
    dl_tensor *in[3] = {mk(x, xs, nd, DL_FLOAT64), mk(w, S(C), 1, DL_FLOAT64), mk(b, S(C), 1, DL_FLOAT64)};
    dl_tensor *rm = mk(rmv, S(C), 1, DL_FLOAT32), *rv = mk(rvv, S(C), 1, DL_FLOAT32);
    dl_tensor *o, *sm, *si;
    CHECK(dl_batch_norm(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5, &o, &sm, &si) == 0,
          "%s", what);
    double mean[16], var[16], want[512], nrm[16], nrv[16];
    for (int c = 0; c < C; c++) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < n; i++)
        if ((i / (per / xs[0])) % C == c) s += x[i];
      mean[c] = s / (double)per;
      for (int64_t i = 0; i < n; i++)
        if ((i / (per / xs[0])) % C == c) q += (x[i] - mean[c]) * (x[i] - mean[c]);
      var[c] = q / (double)per;
      nrm[c] = training ? 0.9 * (float)rmv[c] + 0.1 * mean[c] : (float)rmv[c];
      nrv[c] = training ? 0.9 * (float)rvv[c] + 0.1 * var[c] * (double)per / (double)(per - 1)
                        : (float)rvv[c];
      if (!training) mean[c] = (float)rmv[c], var[c] = (float)rvv[c];
    }
    for (int64_t i = 0; i < n; i++) {
      int c = (int)((i / (per / xs[0])) % C);
      want[i] = (x[i] - mean[c]) / sqrt(var[c] + 1e-5) * w[c] + b[c];
    }
    expect_vals(what, o, want, n, 1e-12);
    expect_vals("batch_norm running_mean", rm, nrm, C, 1e-6);
    expect_vals("batch_norm running_var", rv, nrv, C, 1e-6);
    bn_fd f = {training, rm, rv};
    dl_tensor *gout = mk(go, xs, nd, DL_FLOAT64), *gx, *gw, *gb;
    CHECK(dl_batch_norm_backward(gout, in[0], in[1], sm, si, training, 1, 1, 1, &gx, &gw, &gb) == 0,
          "%s backward", what);
    fd_check(what, bn_fwd, &f, in, 0, gx, go, 1e-6);
    fd_check(what, bn_fwd, &f, in, 1, gw, go, 1e-6);
    fd_check(what, bn_fwd, &f, in, 2, gb, go, 1e-6);
    dl_tensor_release(gx), dl_tensor_release(gw), dl_tensor_release(gb);
    /* float32 and threads agree */
    dl_tensor *x32 = mk(x, xs, nd, DL_FLOAT32), *o32, *m32, *s32;
    CHECK(dl_batch_norm(x32, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &o32, &m32, &s32) == 0);
    dl_tensor *o64, *m64, *s64;
    CHECK(dl_batch_norm(in[0], NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &o64, &m64, &s64) == 0);
    expect_close("batch_norm float32", o32, o64, 1e-5);
    dl_tensor_release(x32), dl_tensor_release(o32), dl_tensor_release(m32), dl_tensor_release(s32);
    dl_tensor_release(o64), dl_tensor_release(m64), dl_tensor_release(s64);
    dl_tensor_release(gout), dl_tensor_release(o), dl_tensor_release(sm), dl_tensor_release(si);
    dl_tensor_release(rm), dl_tensor_release(rv);
    for (int i = 0; i < 3; i++) dl_tensor_release(in[i]);
  }
  free(x), free(w), free(b), free(go);
}

static void test_batch_norm(void) {
  test_batch_norm_shape(S(6, 3), 2);
  test_batch_norm_shape(S(2, 3, 4, 5), 4);
  test_batch_norm_shape(S(3, 2, 7), 3);
  dl_tensor *x = rt(S(1, 3), 2, DL_FLOAT32), *o, *m, *s, *w = rt(S(4), 1, DL_FLOAT32);
  EXPECT_ERRC(dl_batch_norm(x, NULL, NULL, NULL, NULL, 1, 0.1, 1e-5, &o, &m, &s), DL_EINVAL,
              "batch_norm: expected more than 1 value per channel when training, got input of shape [1, 3]");
  EXPECT_ERRC(dl_batch_norm(x, NULL, NULL, NULL, NULL, 0, 0.1, 1e-5, &o, &m, &s), DL_EINVAL,
              "running_mean");
  EXPECT_ERRC(dl_batch_norm(x, w, NULL, NULL, NULL, 1, 0.1, 1e-5, &o, &m, &s), DL_ESHAPE,
              "batch_norm: weight has shape [4], expected [3]");
  dl_tensor_release(x), dl_tensor_release(w);
}

/* -- Dropout --------------------------------------------------------------- */

static void test_dropout(void) {
  int64_t n = 10001;
  dl_tensor *x = rt(S(n), 1, DL_FLOAT32), *y, *mask;
  for (int t = 1; t <= 2; t++) {
    dl_set_num_threads(t);
    dl_manual_seed(1234);
    CHECK(dl_dropout(x, 0.3, 1, &y, &mask) == 0);
    CHECK(dl_tensor_dtype(mask) == DL_UINT8 && has_shape(mask, S(n), 1));
    uint64_t off = dl_rng_offset();
    dl_manual_seed(1234);
    dl_tensor *u = dl_rand(S(n), 1, DL_FLOAT32);
    CHECK(dl_rng_offset() == off, "dropout reserves the stream as rand does");
    double *uv = vals(u), *xv = vals(x), *yv = vals(y), *mv = vals(mask);
    int64_t kept = 0, bad = -1;
    for (int64_t i = 0; i < n; i++) {
      int keep = uv[i] < 0.7;
      kept += keep;
      float want = (float)((float)xv[i] * (float)keep) * (float)(1 / 0.7);
      if (bad < 0 && (mv[i] != keep || yv[i] != want)) bad = i;
    }
    CHECK(bad < 0, "dropout element %lld", (long long)bad);
    CHECK(kept > 6700 && kept < 7300, "dropout kept %lld of %lld", (long long)kept, (long long)n);
    dl_tensor *g = rt(S(n), 1, DL_FLOAT32), *gx = dl_dropout_backward(g, mask, 0.3);
    double *gv = vals(g), *gxv = vals(gx);
    bad = -1;
    for (int64_t i = 0; i < n; i++)
      if (bad < 0 && gxv[i] != (float)((float)gv[i] * (float)mv[i]) * (float)(1 / 0.7)) bad = i;
    CHECK(bad < 0, "dropout_backward element %lld", (long long)bad);
    free(uv), free(xv), free(yv), free(mv), free(gv), free(gxv);
    dl_tensor_release(u), dl_tensor_release(y), dl_tensor_release(mask);
    dl_tensor_release(g), dl_tensor_release(gx);
  }
  /* same seed, same mask, also in float64 */
  dl_tensor *x64 = rt(S(3, 5), 2, DL_FLOAT64), *m1, *m2, *y1, *y2;
  dl_manual_seed(7);
  dl_dropout(x64, 0.5, 1, &y1, &m1);
  dl_manual_seed(7);
  dl_dropout(x64, 0.5, 1, &y2, &m2);
  expect_close("dropout same seed", m1, m2, 0);
  expect_close("dropout same seed out", y1, y2, 0);
  dl_tensor_release(y1), dl_tensor_release(y2), dl_tensor_release(m1), dl_tensor_release(m2);
  /* eval and p = 0: the same data, no mask; p = 1: zeros */
  CHECK(dl_dropout(x64, 0.5, 0, &y1, &m1) == 0 && m1 == NULL && y1 != x64 &&
        dl_tensor_data(y1) == dl_tensor_data(x64), "dropout eval");
  dl_tensor_release(y1);
  CHECK(dl_dropout(x64, 0, 1, &y1, &m1) == 0 && m1 == NULL, "dropout p = 0");
  dl_tensor_release(y1);
  CHECK(dl_dropout(x64, 1, 1, &y1, &m1) == 0);
  double z[15] = {0};
  expect_vals("dropout p = 1", y1, z, 15, 0);
  dl_tensor_release(y1), dl_tensor_release(m1);
  EXPECT_ERRC(dl_dropout(x64, 1.5, 1, &y1, &m1), DL_EINVAL, "dropout: p must be in [0, 1], got 1.5");
  dl_tensor_release(x64), dl_tensor_release(x);
}

/* -- Losses ---------------------------------------------------------------- */

typedef struct {
  int kind;  /* 0 cross_entropy, 1 nll_loss, 2 mse_loss */
  dl_tensor *target, *weight;
  int64_t ignore;
  double ls;
  int red;
} loss_fd;

static dl_tensor *loss_fwd(void *p, dl_tensor *const *in) {
  const loss_fd *f = p;
  if (f->kind == 0) return dl_cross_entropy(in[0], f->target, f->weight, f->ignore, f->ls, LOSS(f->red));
  if (f->kind == 1) return dl_nll_loss(in[0], f->target, f->weight, f->ignore, LOSS(f->red));
  return dl_mse_loss(in[0], f->target, LOSS(f->red));
}

/* PyTorch 1.13's formula, step by step: log_softmax, nll, smoothing. */
static void ce_ref(const double *z, const int64_t *t, const double *w, int64_t N, int64_t C,
                   int64_t Sp, int64_t ignore, double ls, int red, int logits, double *out) {
  int64_t P = N * Sp;
  double *nll = calloc((size_t)P, sizeof(double)), *sm = calloc((size_t)P, sizeof(double));
  double wsum = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t s = 0; s < Sp; s++) {
      int64_t i = n * Sp + s;
      double lp[64], m = -INFINITY, se = 0;
      for (int64_t c = 0; c < C; c++) m = fmax(m, z[(n * C + c) * Sp + s]);
      for (int64_t c = 0; c < C; c++) se += exp(z[(n * C + c) * Sp + s] - m);
      for (int64_t c = 0; c < C; c++)
        lp[c] = logits ? z[(n * C + c) * Sp + s] - m - log(se) : z[(n * C + c) * Sp + s];
      if (t[i] == ignore) continue;
      double wt = w ? w[t[i]] : 1;
      nll[i] = -wt * lp[t[i]];
      wsum += wt;
      for (int64_t c = 0; c < C; c++) sm[i] -= (w ? w[c] : 1) * lp[c];
    }
  double a = 0, b = 0;
  for (int64_t i = 0; i < P; i++) a += nll[i], b += sm[i];
  if (red == 0)
    for (int64_t i = 0; i < P; i++) out[i] = (1 - ls) * nll[i] + ls / (double)C * sm[i];
  else if (red == 2)
    out[0] = (1 - ls) * a + ls / (double)C * b;
  else
    out[0] = (1 - ls) * a / wsum + ls / (double)C * b / wsum;
  free(nll), free(sm);
}

static void test_ce_case(int kind, const int64_t *xs, int nd, int hw, int ign, double ls, int red) {
  int64_t n = numel(xs, nd), C = nd == 1 ? xs[0] : xs[1], N = nd == 1 ? 1 : xs[0];
  int64_t Sp = n / (N * C), P = N * Sp;
  double *z = rvec(n), *w = rvec(C), *go = rvec(P);
  int64_t *t = malloc(sizeof(int64_t) * (size_t)P);
  for (int c = 0; c < C; c++) w[c] = 0.5 + 0.5 * (w[c] + 1);
  for (int64_t i = 0; i < P; i++) t[i] = (int64_t)((urand() + 1) / 2 * (double)C) % C;
  if (ign) t[P / 2] = -100, t[0] = -100;
  if (kind == 1)  /* log-probabilities */
    for (int64_t q = 0; q < N * Sp; q++) {
      int64_t nn = q / Sp, s = q % Sp;
      double m = -INFINITY, se = 0;
      for (int64_t c = 0; c < C; c++) m = fmax(m, z[(nn * C + c) * Sp + s]);
      for (int64_t c = 0; c < C; c++) se += exp(z[(nn * C + c) * Sp + s] - m);
      for (int64_t c = 0; c < C; c++) z[(nn * C + c) * Sp + s] -= m + log(se);
    }
  int64_t ts[DL_MAX_DIMS];
  int tnd = nd == 1 ? 0 : nd - 1;
  if (nd > 1) {
    ts[0] = xs[0];
    for (int i = 2; i < nd; i++) ts[i - 1] = xs[i];
  }
  double *want = malloc(sizeof(double) * (size_t)P);
  ce_ref(z, t, hw ? w : NULL, N, C, Sp, -100, ls, red, kind == 0, want);
  dl_tensor *in[1] = {mk(z, xs, nd, DL_FLOAT64)};
  dl_tensor *tt = mki(t, ts, tnd, DL_INT64), *wt = hw ? mk(w, S(C), 1, DL_FLOAT64) : NULL;
  loss_fd f = {kind, tt, wt, -100, ls, red};
  char what[128];
  snprintf(what, sizeof what, "%s %s weight %d ignore %d ls %g reduction %d",
           kind ? "nll_loss" : "cross_entropy", nd == 1 ? "[C]" : nd == 2 ? "[N, C]" : "[N, C, d...]",
           hw, ign, ls, red);
  dl_tensor *y = loss_fwd(&f, in);
  CHECK(red ? has_shape(y, NULL, 0) : has_shape(y, ts, tnd), "%s: shape", what);
  expect_vals(what, y, want, red ? 1 : P, 1e-12);
  dl_tensor *gout = mk(go, ts, red ? 0 : tnd, DL_FLOAT64);
  dl_tensor *gx = kind == 0 ? dl_cross_entropy_backward(gout, in[0], tt, wt, -100, ls, LOSS(red))
                            : dl_nll_loss_backward(gout, in[0], tt, wt, -100, LOSS(red));
  fd_check(what, loss_fwd, &f, in, 0, gx, go, 1e-6);
  /* float32 agrees */
  dl_tensor *z32 = mk(z, xs, nd, DL_FLOAT32), *w32 = hw ? mk(w, S(C), 1, DL_FLOAT32) : NULL;
  dl_tensor *y32 = kind == 0 ? dl_cross_entropy(z32, tt, w32, -100, ls, LOSS(red))
                             : dl_nll_loss(z32, tt, w32, -100, LOSS(red));
  CHECK(y32 && dl_tensor_dtype(y32) == DL_FLOAT32);
  expect_vals("float32 loss", y32, want, red ? 1 : P, 1e-5);
  dl_tensor *g32 = mk(go, ts, red ? 0 : tnd, DL_FLOAT32);
  dl_tensor *gx32 = kind == 0 ? dl_cross_entropy_backward(g32, z32, tt, w32, -100, ls, LOSS(red))
                              : dl_nll_loss_backward(g32, z32, tt, w32, -100, LOSS(red));
  expect_close("float32 loss grad", gx32, gx, 1e-5);
  dl_tensor_release(z32), dl_tensor_release(w32), dl_tensor_release(y32);
  dl_tensor_release(g32), dl_tensor_release(gx32);
  dl_tensor_release(gx), dl_tensor_release(gout), dl_tensor_release(y);
  dl_tensor_release(in[0]), dl_tensor_release(tt), dl_tensor_release(wt);
  free(z), free(w), free(go), free(t), free(want);
}

static void test_losses(void) {
  for (int red = 0; red < 3; red++)
    for (int hw = 0; hw < 2; hw++)
      for (int ign = 0; ign < 2; ign++) {
        test_ce_case(0, S(5, 4), 2, hw, ign, 0, red);
        test_ce_case(0, S(5, 4), 2, hw, ign, 0.2, red);
        test_ce_case(0, S(3, 4, 2, 3), 4, hw, ign, 0.1, red);
        test_ce_case(1, S(5, 4), 2, hw, ign, 0, red);
        test_ce_case(1, S(2, 3, 5), 3, hw, ign, 0, red);
      }
  test_ce_case(0, S(6), 1, 1, 0, 0.3, 1);
  test_ce_case(0, S(6), 1, 0, 0, 0, 0);

  /* all targets ignored: mean is NaN (0 / 0), the gradient zero */
  dl_tensor *z = rt(S(2, 3), 2, DL_FLOAT32);
  dl_tensor *t = mki((const int64_t[]){-100, -100}, S(2), 1, DL_INT64);
  dl_tensor *y = dl_cross_entropy(z, t, NULL, -100, 0, DL_LOSS_MEAN);
  expect_vals("cross_entropy all ignored", y, (const double[]){NAN}, 1, 0);
  dl_tensor *g1 = dl_full(S(1), 0, DL_FLOAT32, 1.0);
  dl_tensor *gz = dl_cross_entropy_backward(g1, z, t, NULL, -100, 0, DL_LOSS_MEAN);
  expect_vals("cross_entropy all ignored grad", gz, (const double[]){0, 0, 0, 0, 0, 0}, 6, 0);
  dl_tensor_release(y), dl_tensor_release(gz), dl_tensor_release(t);

  /* errors */
  int64_t tv[4] = {1, 2, 3, 12};
  dl_tensor *z10 = rt(S(4, 10), 2, DL_FLOAT32), *tb = mki(tv, S(4), 1, DL_INT64);
  EXPECT_ERRP(dl_cross_entropy(z10, tb, NULL, -100, 0, DL_LOSS_MEAN), DL_EINDEX,
              "cross_entropy: target 12 out of range for 10 classes (at position 3)");
  EXPECT_ERRP(dl_nll_loss(z10, tb, NULL, -100, DL_LOSS_MEAN), DL_EINDEX,
              "nll_loss: target 12 out of range for 10 classes (at position 3)");
  dl_tensor *tneg = mki((const int64_t[]){-1}, S(1), 1, DL_INT64), *z1 = rt(S(1, 10), 2, DL_FLOAT32);
  EXPECT_ERRP(dl_cross_entropy(z1, tneg, NULL, -100, 0, DL_LOSS_MEAN), DL_EINDEX, "target -1 out of range");
  EXPECT_ERRP(dl_cross_entropy(z10, tneg, NULL, -100, 0, DL_LOSS_MEAN), DL_ESHAPE,
              "cross_entropy: target has shape [1], expected [4]");
  EXPECT_ERRP(dl_cross_entropy(z10, tb, NULL, 12, 0, 5), DL_EINVAL,
              "cross_entropy: unknown reduction 5");
  EXPECT_ERRP(dl_cross_entropy(z10, tb, NULL, 12, 1.5, DL_LOSS_MEAN), DL_EINVAL, "label_smoothing");
  dl_tensor *wbad = rt(S(9), 1, DL_FLOAT32);
  EXPECT_ERRP(dl_cross_entropy(z10, tb, wbad, 12, 0, DL_LOSS_MEAN), DL_ESHAPE, "weight has shape [9], expected [10]");
  dl_tensor *tf = mk((const double[]){1, 2, 3, 4}, S(4), 1, DL_FLOAT32);
  EXPECT_ERRP(dl_cross_entropy(z10, tf, NULL, -100, 0, DL_LOSS_MEAN), DL_EDTYPE, "target");
  /* ignore_index makes 12 fine */
  y = dl_cross_entropy(z10, tb, NULL, 12, 0, DL_LOSS_MEAN);
  CHECK(y != NULL, "ignore_index 12");
  dl_tensor_release(y);
  dl_tensor_release(z10), dl_tensor_release(tb), dl_tensor_release(tneg), dl_tensor_release(z1);
  dl_tensor_release(wbad), dl_tensor_release(tf), dl_tensor_release(z), dl_tensor_release(g1);

  /* mse_loss */
  for (int red = 0; red < 3; red++) {
    double *a = rvec(24), *b = rvec(24), *go = rvec(24), want[24], s = 0;
    for (int i = 0; i < 24; i++) want[i] = (a[i] - b[i]) * (a[i] - b[i]), s += want[i];
    if (red) want[0] = red == 1 ? s / 24 : s;
    dl_tensor *in[1] = {mk(a, S(2, 3, 4), 3, DL_FLOAT64)}, *tb2 = mk(b, S(2, 3, 4), 3, DL_FLOAT64);
    loss_fd f = {2, tb2, NULL, 0, 0, red};
    dl_tensor *yy = loss_fwd(&f, in);
    char what[32];
    snprintf(what, sizeof what, "mse_loss reduction %d", red);
    expect_vals(what, yy, want, red ? 1 : 24, 1e-14);
    dl_tensor *gout = mk(go, S(2, 3, 4), red ? 0 : 3, DL_FLOAT64);
    dl_tensor *gx = dl_mse_loss_backward(gout, in[0], tb2, LOSS(red));
    fd_check(what, loss_fwd, &f, in, 0, gx, go, 1e-6);
    dl_tensor_release(gx), dl_tensor_release(gout), dl_tensor_release(yy);
    dl_tensor_release(in[0]), dl_tensor_release(tb2);
    free(a), free(b), free(go);
  }
  dl_tensor *a = rt(S(2, 3), 2, DL_FLOAT32), *b = rt(S(3, 2), 2, DL_FLOAT32);
  EXPECT_ERRP(dl_mse_loss(a, b, DL_LOSS_MEAN), DL_ESHAPE, "mse_loss: target has shape [3, 2], expected [2, 3]");
  dl_tensor_release(a), dl_tensor_release(b);
  /* a large mean, summed in fixed blocks: the same at 1 and 2 threads */
  dl_tensor *la = rt(S(100000), 1, DL_FLOAT32), *lb = rt(S(100000), 1, DL_FLOAT32), *l1, *l2;
  dl_set_num_threads(1);
  l1 = dl_mse_loss(la, lb, DL_LOSS_MEAN);
  dl_set_num_threads(2);
  l2 = dl_mse_loss(la, lb, DL_LOSS_MEAN);
  expect_close("mse_loss threads", l1, l2, 0);
  dl_tensor_release(la), dl_tensor_release(lb), dl_tensor_release(l1), dl_tensor_release(l2);
}

int main(void) {
  int threads = dl_get_num_threads();
  int64_t live = dl_mem_allocated();
  test_conv();
  dl_set_num_threads(threads);
  test_pool();
  test_embedding();
  test_layer_norm();
  test_batch_norm();
  test_dropout();
  test_losses();
  CHECK(dl_mem_allocated() == live, "%lld bytes still live (leaked tensors)",
        (long long)(dl_mem_allocated() - live));
  return check_report("test_nn");
}
