/* test_reduce.c -- reductions, arg-reductions, scans, softmax, sort, topk,
** nonzero, tril and triu against hand-computed and reference values. */
/*
** Build: cc -std=c11 -Iruntime/include -Iruntime tests/c/test_reduce.c -Lbuild
**          -lddplua -Wl,-rpath,$PWD/build -lm -o build/test_reduce
** Prints one FAIL line per failed check, INFO lines with timings (never
** checked), and "test_reduce: N passed, M failed" last.
*/
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddplua.h"
#include "check.h"



#define S(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})
#define D(...) ((const int[]){__VA_ARGS__})

static dl_tensor *mk(const double *v, const int64_t *shape, int nd, int dtype) {
  dl_tensor *t = dl_from_doubles(v, shape, nd, dtype);
  if (!t) printf("FAIL mk: %s\n", dl_last_error());
  return t;
}

static int same(double a, double b, double tol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= tol * (1 + fabs(b));
}

/* Checks t's shape, dtype (when >= 0) and values; releases t. */
static void expect(const char *what, int line, dl_tensor *t, int dtype,
                   const int64_t *shape, int nd, const double *want,
                   double tol) {
  if (!t) {
    CHECK(0, "%s (line %d): NULL: %s", what, line, dl_last_error());
    return;
  }
  int ok = dl_tensor_dim(t) == nd;
  for (int i = 0; ok && i < nd; i++) ok = dl_tensor_size(t, i) == shape[i];
  CHECK(ok, "%s (line %d): wrong shape (ndim %d, first %lld)", what, line,
        dl_tensor_dim(t), (long long)dl_tensor_size(t, 0));
  CHECK(dtype < 0 || dl_tensor_dtype(t) == dtype, "%s (line %d): dtype %s, want %s",
        what, line, dl_dtype_name(dl_tensor_dtype(t)), dl_dtype_name(dtype));
  int64_t n = dl_tensor_numel(t);
  if (ok && n > 0) {
    double *got = malloc(sizeof(double) * (size_t)n);
    dl_to_doubles(t, got);
    for (int64_t i = 0; i < n; i++) {
      if (!same(got[i], want[i], tol)) {
        CHECK(0, "%s (line %d): element %lld is %.9g, want %.9g", what, line,
              (long long)i, got[i], want[i]);
        break;
      }
    }
    free(got);
  }
  dl_tensor_release(t);
}
#define EXPECT(t, dt, shape, nd, want) expect(#t, __LINE__, t, dt, shape, nd, want, 1e-6)

static void expect_err(const char *what, int line, const void *p, int code,
                       const char *needle) {
  CHECK(p == NULL, "%s (line %d): expected an error", what, line);
  CHECK(dl_last_error_code() == code, "%s (line %d): code %d, want %d (%s)", what,
        line, dl_last_error_code(), code, dl_last_error());
  CHECK(!needle || strstr(dl_last_error(), needle), "%s (line %d): message \"%s\" lacks \"%s\"",
        what, line, dl_last_error(), needle);
  if (p) dl_tensor_release((dl_tensor *)p);
  dl_clear_error();
}
#define EXPECT_ERR(p, code, needle) expect_err(#p, __LINE__, p, code, needle)

static dl_tensor *red(int op, const dl_tensor *t, const int *dims, int nd,
                      int keepdim, double param) {
  return dl_reduce(op, t, dims, nd, keepdim, param);
}

/* -- Reference reductions over any dims ---------------------------------- */

static double ref_one(int op, const double *v, int64_t n, double param) {
  double a = 0, m = -INFINITY;
  switch (op) {
    case DL_SUM: for (int64_t i = 0; i < n; i++) a += v[i]; return a;
    case DL_MEAN: for (int64_t i = 0; i < n; i++) a += v[i]; return a / n;
    case DL_PROD: a = 1; for (int64_t i = 0; i < n; i++) a *= v[i]; return a;
    case DL_AMAX: for (int64_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m; return m;
    case DL_AMIN: m = INFINITY; for (int64_t i = 0; i < n; i++) m = v[i] < m ? v[i] : m; return m;
    case DL_VAR: case DL_STD: {
      double mean = ref_one(DL_MEAN, v, n, 0);
      for (int64_t i = 0; i < n; i++) a += (v[i] - mean) * (v[i] - mean);
      a /= (n - param);
      return op == DL_STD ? sqrt(a) : a;
    }
    case DL_NORM:
      for (int64_t i = 0; i < n; i++) {
        if (isinf(param)) m = fmax(m, fabs(v[i]));
        else a += param == 0 ? v[i] != 0 : pow(fabs(v[i]), param);
      }
      return isinf(param) ? m : param == 0 ? a : pow(a, 1 / param);
    case DL_LOGSUMEXP:
      m = ref_one(DL_AMAX, v, n, 0);
      for (int64_t i = 0; i < n; i++) a += exp(v[i] - m);
      return m + log(a);
  }
  return NAN;
}

/* Reduces t with dl_reduce and compares with the reference computed from
** its values in double. */
static void check_reduce(int line, int op, const dl_tensor *t, const int *dims,
                         int ndims, int keepdim, double param, double tol) {
  int nd = dl_tensor_dim(t), rmask[8] = {0};
  int64_t n = dl_tensor_numel(t), shape[8], oshape[8], M = 1, N = 1;
  int ond = 0;
  for (int i = 0; i < nd; i++) shape[i] = dl_tensor_size(t, i);
  for (int j = 0; j < ndims; j++) rmask[(dims[j] + nd) % nd] = 1;
  if (!ndims) for (int i = 0; i < nd; i++) rmask[i] = 1;
  for (int i = 0; i < nd; i++) {
    if (rmask[i]) N *= shape[i]; else M *= shape[i];
    if (!rmask[i] || keepdim) oshape[ond++] = rmask[i] ? 1 : shape[i];
  }
  double *x = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
  double *want = malloc(sizeof(double) * (size_t)M);
  int64_t *fill = calloc((size_t)M, sizeof(int64_t));
  dl_to_doubles(t, x);
  for (int64_t i = 0; i < n; i++) {  /* gather each output's elements */
    int64_t rem = i, m = 0, mul = 1;
    for (int d = nd - 1; d >= 0; d--) {
      int64_t id = rem % shape[d];
      rem /= shape[d];
      if (!rmask[d]) m += id * mul, mul *= shape[d];
    }
    g[m * N + fill[m]++] = x[i];
  }
  for (int64_t m = 0; m < M; m++) want[m] = ref_one(op, g + m * N, N, param);
  char what[64];
  snprintf(what, sizeof what, "reduce op %d", op);
  expect(what, line, red(op, t, dims, ndims, keepdim, param), -1, oshape, ond, want, tol);
  free(x), free(g), free(want), free(fill);
}

/* -- Tests --------------------------------------------------------------- */

static void test_reduce_small(void) {
  dl_tensor *x = mk(V(1, 2, 3, 4, 5, 6), S(2, 3), 2, DL_FLOAT32);
  EXPECT(red(DL_SUM, x, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(21));
  EXPECT(red(DL_SUM, x, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(5, 7, 9));
  EXPECT(red(DL_SUM, x, D(-1), 1, 1, 0), DL_FLOAT32, S(2, 1), 2, V(6, 15));
  EXPECT(red(DL_SUM, x, D(1, 0), 2, 1, 0), DL_FLOAT32, S(1, 1), 2, V(21));
  EXPECT(red(DL_MEAN, x, D(1), 1, 0, 0), DL_FLOAT32, S(2), 1, V(2, 5));
  EXPECT(red(DL_PROD, x, D(1), 1, 0, 0), DL_FLOAT32, S(2), 1, V(6, 120));
  EXPECT(red(DL_AMAX, x, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(4, 5, 6));
  EXPECT(red(DL_AMIN, x, D(1), 1, 0, 0), DL_FLOAT32, S(2), 1, V(1, 4));
  EXPECT(red(DL_VAR, x, D(1), 1, 0, 1), DL_FLOAT32, S(2), 1, V(1, 1));
  EXPECT(red(DL_VAR, x, D(1), 1, 0, 0), DL_FLOAT32, S(2), 1, V(2.0 / 3, 2.0 / 3));
  EXPECT(red(DL_STD, x, NULL, 0, 0, 1), DL_FLOAT32, S(0), 0, V(sqrt(3.5)));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, 2), DL_FLOAT32, S(0), 0, V(sqrt(91)));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, 1), DL_FLOAT32, S(0), 0, V(21));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, INFINITY), DL_FLOAT32, S(0), 0, V(6));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, -INFINITY), DL_FLOAT32, S(0), 0, V(1));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, 3), DL_FLOAT32, S(0), 0, V(cbrt(441)));
  EXPECT(red(DL_NORM, x, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(6));
  EXPECT(red(DL_LOGSUMEXP, x, D(1), 1, 0, 0), DL_FLOAT32, S(2), 1,
         V(3.40760596444438, 6.40760596444438));
  EXPECT(red(DL_COUNT_NONZERO, x, D(0), 1, 0, 0), DL_INT64, S(3), 1, V(2, 2, 2));
  EXPECT(red(DL_ALL, x, D(1), 1, 0, 0), DL_BOOL, S(2), 1, V(1, 1));
  /* zeros and signs through the vector body (>= 8 elements) and the tail */
  dl_tensor *zs = mk(V(0, -1, 2, 0, -3, 0.5, 0, 0, 0, 1, -0.0, 4, 0, 0, -2, 0, 0, 7, 0, -1), S(20), 1,
                     DL_FLOAT32);
  EXPECT(red(DL_NORM, zs, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(9));
  EXPECT(red(DL_NORM, zs, NULL, 0, 0, 1), DL_FLOAT32, S(0), 0, V(21.5));
  EXPECT(red(DL_NORM, zs, NULL, 0, 0, INFINITY), DL_FLOAT32, S(0), 0, V(7));
  EXPECT(red(DL_COUNT_NONZERO, zs, NULL, 0, 0, 0), DL_INT64, S(0), 0, V(9));
  dl_tensor *zd = dl_to_dtype(zs, DL_FLOAT64);
  EXPECT(red(DL_NORM, zd, NULL, 0, 0, 0), DL_FLOAT64, S(0), 0, V(9));
  EXPECT(red(DL_NORM, zd, NULL, 0, 0, 1), DL_FLOAT64, S(0), 0, V(21.5));
  dl_tensor_release(zs), dl_tensor_release(zd);
  /* a transposed (non-contiguous) view */
  dl_tensor *xt = dl_transpose(x, 0, 1);
  EXPECT(red(DL_SUM, xt, D(0), 1, 0, 0), DL_FLOAT32, S(2), 1, V(6, 15));
  EXPECT(red(DL_SUM, xt, D(1), 1, 0, 0), DL_FLOAT32, S(3), 1, V(5, 7, 9));
  EXPECT(red(DL_MEAN, xt, NULL, 0, 1, 0), DL_FLOAT32, S(1, 1), 2, V(3.5));
  EXPECT(red(DL_VAR, xt, D(0), 1, 0, 1), DL_FLOAT32, S(2), 1, V(1, 1));
  EXPECT(red(DL_AMAX, xt, D(-1), 1, 1, 0), DL_FLOAT32, S(3, 1), 2, V(4, 5, 6));
  dl_tensor_release(xt);
  /* float64 and logsumexp edge cases */
  dl_tensor *y = mk(V(-INFINITY, -INFINITY, INFINITY, 1, NAN, 2), S(3, 2), 2, DL_FLOAT64);
  EXPECT(red(DL_LOGSUMEXP, y, D(1), 1, 0, 0), DL_FLOAT64, S(3), 1, V(-INFINITY, INFINITY, NAN));
  EXPECT(red(DL_AMAX, y, D(1), 1, 0, 0), DL_FLOAT64, S(3), 1, V(-INFINITY, INFINITY, NAN));
  EXPECT(red(DL_AMIN, y, D(0), 1, 0, 0), DL_FLOAT64, S(2), 1, V(NAN, -INFINITY));
  EXPECT(red(DL_ANY, y, D(1), 1, 0, 0), DL_BOOL, S(3), 1, V(1, 1, 1));
  EXPECT(red(DL_COUNT_NONZERO, y, NULL, 0, 0, 0), DL_INT64, S(0), 0, V(6));
  dl_tensor_release(y);
  /* var with N - correction <= 0 */
  dl_tensor *one = mk(V(5), S(1), 1, DL_FLOAT32), *two = mk(V(1, 3), S(2), 1, DL_FLOAT32);
  EXPECT(red(DL_VAR, one, NULL, 0, 0, 1), DL_FLOAT32, S(0), 0, V(NAN));
  EXPECT(red(DL_VAR, two, NULL, 0, 0, 2), DL_FLOAT32, S(0), 0, V(INFINITY));
  EXPECT(red(DL_STD, two, NULL, 0, 0, 3), DL_FLOAT32, S(0), 0, V(INFINITY));
  dl_tensor_release(one);
  dl_tensor_release(two);
  dl_tensor_release(x);
}

static void test_reduce_types(void) {
  dl_tensor *i = mk(V(1, 2, 3, 4), S(2, 2), 2, DL_INT32);
  EXPECT(red(DL_SUM, i, NULL, 0, 0, 0), DL_INT64, S(0), 0, V(10));
  EXPECT(red(DL_PROD, i, D(0), 1, 0, 0), DL_INT64, S(2), 1, V(3, 8));
  EXPECT(red(DL_AMAX, i, D(1), 1, 0, 0), DL_INT32, S(2), 1, V(2, 4));
  EXPECT(red(DL_AMIN, i, D(0), 1, 1, 0), DL_INT32, S(1, 2), 2, V(1, 2));
  EXPECT(red(DL_ANY, i, NULL, 0, 0, 0), DL_BOOL, S(0), 0, V(1));
  EXPECT_ERR(red(DL_MEAN, i, NULL, 0, 0, 0), DL_EDTYPE, "mean");
  EXPECT_ERR(red(DL_VAR, i, NULL, 0, 0, 1), DL_EDTYPE, "var");
  EXPECT_ERR(red(DL_NORM, i, NULL, 0, 0, 2), DL_EDTYPE, "norm");
  /* PyTorch 1.13 promotes integers for logsumexp only */
  EXPECT(red(DL_LOGSUMEXP, i, D(1), 1, 1, 0), DL_FLOAT32, S(2, 1), 2,
         V(2.31326168751822, 4.31326168751822));
  dl_tensor_release(i);
  /* int64 beyond 2^53 stays exact; overflow wraps as in PyTorch */
  int64_t big[2] = {INT64_C(1) << 62, (INT64_C(1) << 62) + 1}, got = 0;
  dl_tensor *l = dl_from_int64s(big, S(2), 1, DL_INT64);
  dl_tensor *s = red(DL_SUM, l, NULL, 0, 0, 0), *mx = red(DL_AMAX, l, NULL, 0, 0, 0);
  CHECK(s && !dl_get_int64(s, 0, &got) && got == INT64_MIN + 1, "int64 sum wraps: %lld", (long long)got);
  CHECK(mx && !dl_get_int64(mx, 0, &got) && got == big[1], "int64 amax exact: %lld", (long long)got);
  dl_tensor_release(s), dl_tensor_release(mx), dl_tensor_release(l);
  dl_tensor *b = mk(V(1, 0, 1, 1, 1, 1), S(2, 3), 2, DL_BOOL);
  EXPECT(red(DL_SUM, b, D(1), 1, 0, 0), DL_INT64, S(2), 1, V(2, 3));
  EXPECT(red(DL_PROD, b, D(1), 1, 0, 0), DL_INT64, S(2), 1, V(0, 1));
  EXPECT(red(DL_ALL, b, D(1), 1, 0, 0), DL_BOOL, S(2), 1, V(0, 1));
  EXPECT(red(DL_ANY, b, D(0), 1, 0, 0), DL_BOOL, S(3), 1, V(1, 1, 1));
  EXPECT(red(DL_AMAX, b, D(0), 1, 0, 0), DL_BOOL, S(3), 1, V(1, 1, 1));
  EXPECT(red(DL_AMIN, b, D(0), 1, 0, 0), DL_BOOL, S(3), 1, V(1, 0, 1));
  EXPECT(red(DL_LOGSUMEXP, b, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(2.6804329406190117));
  dl_tensor *bt = dl_transpose(b, 0, 1);
  EXPECT(red(DL_ALL, bt, D(0), 1, 0, 0), DL_BOOL, S(2), 1, V(0, 1));
  dl_tensor_release(bt), dl_tensor_release(b);
  /* PyTorch 1.13: all/any of uint8 give uint8 */
  dl_tensor *u = mk(V(0, 7, 255), S(3), 1, DL_UINT8);
  EXPECT(red(DL_ANY, u, NULL, 0, 0, 0), DL_UINT8, S(0), 0, V(1));
  EXPECT(red(DL_ALL, u, NULL, 0, 0, 0), DL_UINT8, S(0), 0, V(0));
  EXPECT(red(DL_SUM, u, NULL, 0, 0, 0), DL_INT64, S(0), 0, V(262));
  EXPECT(red(DL_AMAX, u, NULL, 0, 0, 0), DL_UINT8, S(0), 0, V(255));
  dl_tensor_release(u);
  /* half types compute in float32 and keep their dtype */
  dl_tensor *h = mk(V(1, 2, 3, 4.5), S(4), 1, DL_BFLOAT16), *f = mk(V(1, 2, 3, 4.5), S(2, 2), 2, DL_FLOAT16);
  EXPECT(red(DL_SUM, h, NULL, 0, 0, 0), DL_BFLOAT16, S(0), 0, V(10.5));
  EXPECT(red(DL_AMAX, h, NULL, 0, 0, 0), DL_BFLOAT16, S(0), 0, V(4.5));
  EXPECT(red(DL_MEAN, f, D(0), 1, 0, 0), DL_FLOAT16, S(2), 1, V(2, 3.25));
  dl_tensor_release(h), dl_tensor_release(f);
}

static void test_reduce_edges(void) {
  dl_tensor *e = dl_zeros(S(0, 3), 2, DL_FLOAT32);
  EXPECT(red(DL_SUM, e, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(0, 0, 0));
  EXPECT(red(DL_PROD, e, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(1, 1, 1));
  EXPECT(red(DL_MEAN, e, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(NAN, NAN, NAN));
  EXPECT(red(DL_VAR, e, D(0), 1, 0, 1), DL_FLOAT32, S(3), 1, V(NAN, NAN, NAN));
  EXPECT(red(DL_LOGSUMEXP, e, D(0), 1, 0, 0), DL_FLOAT32, S(3), 1, V(-INFINITY, -INFINITY, -INFINITY));
  EXPECT(red(DL_NORM, e, D(0), 1, 0, 2), DL_FLOAT32, S(3), 1, V(0, 0, 0));
  EXPECT(red(DL_ALL, e, D(0), 1, 0, 0), DL_BOOL, S(3), 1, V(1, 1, 1));
  EXPECT(red(DL_ANY, e, D(0), 1, 0, 0), DL_BOOL, S(3), 1, V(0, 0, 0));
  EXPECT(red(DL_SUM, e, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(0));
  EXPECT(red(DL_AMAX, e, D(1), 1, 0, 0), DL_FLOAT32, S(0), 1, V(0));
  EXPECT_ERR(red(DL_AMAX, e, D(0), 1, 0, 0), DL_EINDEX, "amax");
  EXPECT_ERR(red(DL_AMIN, e, NULL, 0, 0, 0), DL_EINDEX, "[0, 3]");
  EXPECT(red(DL_NORM, e, D(0), 1, 0, INFINITY), DL_FLOAT32, S(3), 1, V(0, 0, 0));
  EXPECT(red(DL_NORM, e, NULL, 0, 0, -1), DL_FLOAT32, S(0), 0, V(0));
  dl_tensor *v = NULL, *ix = NULL;
  CHECK(dl_max_dim(e, 0, 0, &v, &ix) == DL_EINDEX && !v && !ix, "max_dim on an empty dim");
  EXPECT_ERR(dl_argmax(e, -100, 0), DL_EINDEX, "argmax");
  EXPECT_ERR(dl_argmin(e, 0, 0), DL_EINDEX, "argmin");
  dl_tensor_release(e);
  /* 0-dim tensors reduce over dim 0 or -1 */
  dl_tensor *z = mk(V(5), NULL, 0, DL_FLOAT32);
  EXPECT(red(DL_SUM, z, D(0), 1, 0, 0), DL_FLOAT32, S(0), 0, V(5));
  EXPECT(red(DL_MEAN, z, D(-1), 1, 1, 0), DL_FLOAT32, S(0), 0, V(5));
  EXPECT(red(DL_AMAX, z, NULL, 0, 0, 0), DL_FLOAT32, S(0), 0, V(5));
  EXPECT(dl_argmax(z, 0, 0), DL_INT64, S(0), 0, V(0));
  EXPECT(dl_cumsum(z, -1), DL_FLOAT32, S(0), 0, V(5));
  EXPECT(dl_softmax(z, 0), DL_FLOAT32, S(0), 0, V(1));
  EXPECT_ERR(red(DL_SUM, z, D(0, -1), 2, 0, 0), DL_EINDEX, "twice");
  EXPECT_ERR(red(DL_SUM, z, D(1), 1, 0, 0), DL_EINDEX, "dim 1");
  dl_tensor_release(z);
  /* user mistakes */
  dl_tensor *x = mk(V(1, 2, 3, 4), S(2, 2), 2, DL_FLOAT32);
  EXPECT_ERR(red(DL_SUM, NULL, NULL, 0, 0, 0), DL_EINVAL, "sum");
  EXPECT_ERR(red(99, x, NULL, 0, 0, 0), DL_EINVAL, "99");
  EXPECT_ERR(red(DL_SUM, x, D(2), 1, 0, 0), DL_EINDEX, "dim 2 out of range");
  EXPECT_ERR(red(DL_SUM, x, D(0, -2), 2, 0, 0), DL_EINDEX, "twice");
  EXPECT_ERR(red(DL_SUM, x, D(0), -1, 0, 0), DL_ESHAPE, "sum");
  CHECK(dl_max_dim(x, 0, 0, NULL, &v) == DL_EINVAL, "max_dim NULL values");
  CHECK(dl_min_dim(x, 3, 0, &v, &ix) == DL_EINDEX && !v && !ix, "min_dim bad dim");
  EXPECT_ERR(dl_cumsum(x, 2), DL_EINDEX, "cumsum");
  EXPECT_ERR(dl_softmax(x, -3), DL_EINDEX, "softmax");
  dl_tensor *xi = mk(V(1, 2), S(2), 1, DL_INT64);
  EXPECT_ERR(dl_softmax(xi, 0), DL_EDTYPE, "softmax");
  EXPECT_ERR(dl_log_softmax(xi, 0), DL_EDTYPE, "int64");
  dl_tensor_release(xi);
  dl_tensor_release(x);
  dl_clear_error();
}

/* Every layout the planner distinguishes, against the reference. */
static void test_reduce_layouts(void) {
  int ops[] = {DL_SUM, DL_MEAN, DL_AMAX, DL_AMIN, DL_VAR, DL_LOGSUMEXP, DL_NORM};
  dl_tensor *a = dl_randn(S(4, 5, 6), 3, DL_FLOAT32);
  dl_tensor *ad = dl_randn(S(3, 4, 5), 3, DL_FLOAT64);
  dl_tensor *p = dl_permute(a, D(2, 0, 1), 3);
  dl_tensor *nw = dl_narrow(a, 2, 1, 4);
  const int dimsets[][3] = {{0}, {1}, {2}, {-1}, {0, 1}, {1, 2}, {0, 2}, {2, 0}, {0, 1, 2}};
  const int ndimsets[] = {1, 1, 1, 1, 2, 2, 2, 2, 3};
  for (int o = 0; o < 7; o++) {
    double param = ops[o] == DL_VAR ? 1 : ops[o] == DL_NORM ? 2.5 : 0;
    for (int s = 0; s < 9; s++) {
      for (int kd = 0; kd < 2; kd++) {
        check_reduce(__LINE__, ops[o], a, dimsets[s], ndimsets[s], kd, param, 1e-5);
        check_reduce(__LINE__, ops[o], ad, dimsets[s], ndimsets[s], kd, param, 1e-12);
        check_reduce(__LINE__, ops[o], p, dimsets[s], ndimsets[s], kd, param, 1e-5);
        check_reduce(__LINE__, ops[o], nw, dimsets[s], ndimsets[s], kd, param, 1e-5);
      }
    }
  }
  /* broadcast (stride 0) views and 8 dims with ones among them */
  dl_tensor *row = dl_randn(S(1, 7), 2, DL_FLOAT32), *ex = dl_expand(row, S(5, 7), 2);
  dl_tensor *e8 = dl_randn(S(2, 1, 3, 1, 2, 2, 1, 3), 8, DL_FLOAT64);
  for (int s = 0; s < 9; s++) {
    if (ndimsets[s] < 3 && dimsets[s][0] != 2 && dimsets[s][ndimsets[s] - 1] != 2)
      check_reduce(__LINE__, DL_SUM, ex, dimsets[s], ndimsets[s], 0, 0, 1e-5);
    check_reduce(__LINE__, DL_VAR, e8, dimsets[s], ndimsets[s], 1, 1, 1e-12);
  }
  check_reduce(__LINE__, DL_MEAN, e8, D(1, 3, 6, 7), 4, 0, 0, 1e-12);
  check_reduce(__LINE__, DL_AMAX, e8, D(-8, 2, 4), 3, 1, 0, 0);
  check_reduce(__LINE__, DL_PROD, e8, D(5), 1, 0, 0, 1e-12);
  dl_tensor_release(row), dl_tensor_release(ex), dl_tensor_release(e8);
  /* every norm kernel, inner and outer, float32 and float64 */
  const double ps[] = {1, 2, 0, INFINITY, 0.5, 3};
  for (int i = 0; i < 6; i++) {
    for (int s = 0; s < 4; s++) {
      check_reduce(__LINE__, DL_NORM, a, dimsets[s], ndimsets[s], 0, ps[i], 1e-5);
      check_reduce(__LINE__, DL_NORM, ad, dimsets[s], ndimsets[s], 0, ps[i], 1e-12);
    }
  }
  dl_tensor_release(a), dl_tensor_release(ad), dl_tensor_release(p), dl_tensor_release(nw);
  /* large enough for blocks, row blocks and threads */
  dl_tensor *big[4] = {dl_rand(S(3, 100001), 2, DL_FLOAT32), dl_rand(S(100001, 3), 2, DL_FLOAT32),
                       dl_randn(S(64, 3001), 2, DL_FLOAT32), dl_randn(S(40, 50, 60), 3, DL_FLOAT64)};
  for (int i = 0; i < 4; i++) {
    for (int d = 0; d < 2; d++) {
      /* float32 sums cancel to ~0.1 here: absolute error ~ eps * sqrt(n) */
      check_reduce(__LINE__, DL_SUM, big[i], D(d), 1, 0, 0, 1e-5);
      check_reduce(__LINE__, DL_VAR, big[i], D(d), 1, 0, 1, 1e-6);
      check_reduce(__LINE__, DL_AMAX, big[i], D(d), 1, 0, 0, 0);
      check_reduce(__LINE__, DL_LOGSUMEXP, big[i], D(d), 1, 0, 0, 1e-6);
    }
    check_reduce(__LINE__, DL_STD, big[i], NULL, 0, 0, 1, 1e-6);
    dl_tensor_release(big[i]);
  }
}

static void test_max_arg(void) {
  dl_tensor *x = mk(V(1, 3, 3, 7, 0, 7), S(2, 3), 2, DL_FLOAT32), *v = NULL, *ix = NULL;
  CHECK(!dl_max_dim(x, 1, 0, &v, &ix), "max_dim: %s", dl_last_error());
  EXPECT(v, DL_FLOAT32, S(2), 1, V(3, 7));
  EXPECT(ix, DL_INT64, S(2), 1, V(1, 0));
  CHECK(!dl_min_dim(x, 0, 1, &v, &ix), "min_dim: %s", dl_last_error());
  EXPECT(v, DL_FLOAT32, S(1, 3), 2, V(1, 0, 3));
  EXPECT(ix, DL_INT64, S(1, 3), 2, V(0, 1, 0));
  EXPECT(dl_argmax(x, -100, 0), DL_INT64, S(0), 0, V(3));
  EXPECT(dl_argmax(x, -100, 1), DL_INT64, S(1, 1), 2, V(3));
  EXPECT(dl_argmin(x, -1, 0), DL_INT64, S(2), 1, V(0, 1));
  dl_tensor *xt = dl_transpose(x, 0, 1);
  EXPECT(dl_argmax(xt, 0, 0), DL_INT64, S(2), 1, V(1, 0));
  EXPECT(dl_argmax(xt, -100, 0), DL_INT64, S(0), 0, V(1));
  dl_tensor_release(xt), dl_tensor_release(x);
  /* NaN is the max and the min, at its first occurrence */
  dl_tensor *n = mk(V(1, NAN, 5, NAN, NAN, 0), S(2, 3), 2, DL_FLOAT64);
  CHECK(!dl_max_dim(n, 1, 0, &v, &ix), "max_dim nan");
  EXPECT(v, DL_FLOAT64, S(2), 1, V(NAN, NAN));
  EXPECT(ix, DL_INT64, S(2), 1, V(1, 0));
  EXPECT(dl_argmin(n, 1, 0), DL_INT64, S(2), 1, V(1, 0));
  EXPECT(dl_argmax(n, 0, 0), DL_INT64, S(3), 1, V(1, 0, 0));
  dl_tensor_release(n);
  dl_tensor *i = mk(V(4, -2, 9, 9), S(4), 1, DL_INT32), *b = mk(V(0, 1, 1), S(3), 1, DL_BOOL);
  dl_tensor *h = mk(V(0.5, 2.5, -1), S(3), 1, DL_FLOAT16);
  CHECK(!dl_max_dim(i, 0, 0, &v, &ix), "max_dim int");
  EXPECT(v, DL_INT32, S(0), 0, V(9));
  EXPECT(ix, DL_INT64, S(0), 0, V(2));
  CHECK(!dl_min_dim(b, 0, 1, &v, &ix), "min_dim bool");
  EXPECT(v, DL_BOOL, S(1), 1, V(0));
  EXPECT(ix, DL_INT64, S(1), 1, V(0));
  CHECK(!dl_max_dim(h, -1, 0, &v, &ix), "max_dim half");
  EXPECT(v, DL_FLOAT16, S(0), 0, V(2.5));
  EXPECT(ix, DL_INT64, S(0), 0, V(1));
  EXPECT(dl_argmax(b, -100, 0), DL_INT64, S(0), 0, V(1));
  dl_tensor_release(i), dl_tensor_release(b), dl_tensor_release(h);
}

static void test_cum(void) {
  dl_tensor *x = mk(V(1, 2, 3, 4, 5, 6), S(2, 3), 2, DL_FLOAT32);
  EXPECT(dl_cumsum(x, 1), DL_FLOAT32, S(2, 3), 2, V(1, 3, 6, 4, 9, 15));
  EXPECT(dl_cumsum(x, 0), DL_FLOAT32, S(2, 3), 2, V(1, 2, 3, 5, 7, 9));
  EXPECT(dl_cumprod(x, -1), DL_FLOAT32, S(2, 3), 2, V(1, 2, 6, 4, 20, 120));
  dl_tensor *xt = dl_transpose(x, 0, 1);
  EXPECT(dl_cumsum(xt, 0), DL_FLOAT32, S(3, 2), 2, V(1, 4, 3, 9, 6, 15));
  dl_tensor_release(xt), dl_tensor_release(x);
  dl_tensor *i = mk(V(1, -2, 3), S(3), 1, DL_INT32), *b = mk(V(1, 0, 1), S(3), 1, DL_BOOL);
  dl_tensor *h = mk(V(0.5, 0.25, 2), S(3), 1, DL_BFLOAT16), *e = dl_zeros(S(2, 0), 2, DL_FLOAT64);
  EXPECT(dl_cumsum(i, 0), DL_INT64, S(3), 1, V(1, -1, 2));
  EXPECT(dl_cumprod(i, 0), DL_INT64, S(3), 1, V(1, -2, -6));
  EXPECT(dl_cumsum(b, 0), DL_INT64, S(3), 1, V(1, 1, 2));
  EXPECT(dl_cumprod(h, 0), DL_BFLOAT16, S(3), 1, V(0.5, 0.125, 0.25));
  EXPECT(dl_cumsum(e, 1), DL_FLOAT64, S(2, 0), 2, V(0));
  dl_tensor_release(i), dl_tensor_release(b), dl_tensor_release(h), dl_tensor_release(e);
  /* a long scan in float32 accumulates in double */
  dl_tensor *o = dl_full(S(3000000), 1, DL_FLOAT32, 0.1), *c = dl_cumsum(o, 0);
  double last = 0;
  CHECK(c && !dl_get_double(c, 2999999, &last) && fabs(last - 300000) < 0.02, "cumsum 3M: %f", last);
  dl_tensor_release(o), dl_tensor_release(c);
}

static void test_softmax(void) {
  dl_tensor *x = mk(V(1, 2, 3, 1, 1, -INFINITY), S(2, 3), 2, DL_FLOAT32);
  EXPECT(dl_softmax(x, 1), DL_FLOAT32, S(2, 3), 2,
         V(0.0900305732, 0.244728471, 0.665240956, 0.5, 0.5, 0));
  EXPECT(dl_log_softmax(x, -1), DL_FLOAT32, S(2, 3), 2,
         V(-2.40760596, -1.40760596, -0.40760596, -M_LN2, -M_LN2, -INFINITY));
  EXPECT(dl_softmax(x, 0), DL_FLOAT32, S(2, 3), 2, V(0.5, 0.731058579, 1, 0.5, 0.268941421, 0));
  dl_tensor *xt = dl_transpose(x, 0, 1);
  EXPECT(dl_softmax(xt, 0), DL_FLOAT32, S(3, 2), 2, V(0.0900305732, 0.5, 0.244728471, 0.5, 0.665240956, 0));
  dl_tensor_release(xt), dl_tensor_release(x);
  dl_tensor *n = mk(V(1, NAN, 3, -INFINITY, -INFINITY, 0), S(2, 3), 2, DL_FLOAT64);
  EXPECT(dl_softmax(n, 1), DL_FLOAT64, S(2, 3), 2, V(NAN, NAN, NAN, 0, 0, 1));
  dl_tensor_release(n);
  dl_tensor *h = mk(V(0, 0), S(2), 1, DL_BFLOAT16);
  EXPECT(dl_softmax(h, 0), DL_BFLOAT16, S(2), 1, V(0.5, 0.5));
  dl_tensor_release(h);
  /* random rows of several lengths (vector body and tails) vs double */
  const int64_t lens[] = {1, 7, 8, 9, 100, 1024, 1031};
  for (int li = 0; li < 7; li++) {
    int64_t L = lens[li], nel = 5 * L;
    dl_tensor *r = dl_randn(S(5, L), 2, DL_FLOAT32), *sc = dl_full(S(1), 1, DL_FLOAT32, 30);
    dl_tensor *rs = dl_binary(DL_MUL, r, sc);
    double *v = malloc(sizeof(double) * (size_t)nel), *w = malloc(sizeof(double) * (size_t)nel);
    double *wl = malloc(sizeof(double) * (size_t)nel);
    dl_to_doubles(rs, v);
    for (int64_t row = 0; row < 5; row++) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < L; j++) m = fmax(m, v[row * L + j]);
      for (int64_t j = 0; j < L; j++) s += exp(v[row * L + j] - m);
      for (int64_t j = 0; j < L; j++) {
        w[row * L + j] = exp(v[row * L + j] - m) / s;
        wl[row * L + j] = v[row * L + j] - m - log(s);
      }
    }
    expect("softmax random", __LINE__, dl_softmax(rs, 1), DL_FLOAT32, S(5, L), 2, w, 3e-6);
    expect("log_softmax random", __LINE__, dl_log_softmax(rs, 1), DL_FLOAT32, S(5, L), 2, wl, 3e-6);
    free(v), free(w), free(wl);
    dl_tensor_release(r), dl_tensor_release(sc), dl_tensor_release(rs);
  }
}

static void test_sort(void) {
  dl_tensor *x = mk(V(3, 1, 2, 1), S(4), 1, DL_FLOAT32), *v = NULL, *ix = NULL;
  CHECK(!dl_sort(x, 0, 0, &v, &ix), "sort: %s", dl_last_error());
  EXPECT(v, DL_FLOAT32, S(4), 1, V(1, 1, 2, 3));
  EXPECT(ix, DL_INT64, S(4), 1, V(1, 3, 2, 0));
  CHECK(!dl_sort(x, -1, 1, &v, &ix), "sort desc");
  EXPECT(v, DL_FLOAT32, S(4), 1, V(3, 2, 1, 1));
  EXPECT(ix, DL_INT64, S(4), 1, V(0, 2, 1, 3));
  dl_tensor_release(x);
  dl_tensor *n = mk(V(2, NAN, 1, NAN, 0, -0.0), S(6), 1, DL_FLOAT64);
  CHECK(!dl_sort(n, 0, 0, &v, &ix), "sort nan");
  EXPECT(v, DL_FLOAT64, S(6), 1, V(0, 0, 1, 2, NAN, NAN));
  EXPECT(ix, DL_INT64, S(6), 1, V(4, 5, 2, 0, 1, 3));
  CHECK(!dl_sort(n, 0, 1, &v, &ix), "sort nan desc");
  EXPECT(ix, DL_INT64, S(6), 1, V(1, 3, 0, 2, 4, 5));
  dl_tensor_release(v);
  dl_tensor_release(n);
  dl_tensor *m = mk(V(5, 1, 4, 2, 6, 3), S(2, 3), 2, DL_INT64);
  CHECK(!dl_sort(m, 0, 1, &v, &ix), "sort dim 0");
  EXPECT(v, DL_INT64, S(2, 3), 2, V(5, 6, 4, 2, 1, 3));
  EXPECT(ix, DL_INT64, S(2, 3), 2, V(0, 1, 0, 1, 0, 1));
  dl_tensor *mt = dl_transpose(m, 0, 1);
  CHECK(!dl_sort(mt, 1, 0, &v, &ix), "sort transposed");
  EXPECT(v, DL_INT64, S(3, 2), 2, V(2, 5, 1, 6, 3, 4));
  EXPECT(ix, DL_INT64, S(3, 2), 2, V(1, 0, 0, 1, 1, 0));
  dl_tensor_release(mt), dl_tensor_release(m);
  dl_tensor *b = mk(V(1, 0, 1, 0), S(4), 1, DL_BOOL), *h = mk(V(-1, 0.5, -2), S(3), 1, DL_BFLOAT16);
  CHECK(!dl_sort(b, 0, 0, &v, &ix), "sort bool");
  EXPECT(v, DL_BOOL, S(4), 1, V(0, 0, 1, 1));
  EXPECT(ix, DL_INT64, S(4), 1, V(1, 3, 0, 2));
  CHECK(!dl_sort(h, 0, 1, &v, &ix), "sort bf16");
  EXPECT(v, DL_BFLOAT16, S(3), 1, V(0.5, -1, -2));
  EXPECT(ix, DL_INT64, S(3), 1, V(1, 0, 2));
  dl_tensor_release(b), dl_tensor_release(h);
  int64_t big[3] = {INT64_C(1) << 60, (INT64_C(1) << 60) + 1, -(INT64_C(1) << 60)}, got = 0;
  dl_tensor *l = dl_from_int64s(big, S(3), 1, DL_INT64);
  CHECK(!dl_sort(l, 0, 1, &v, &ix), "sort int64");
  CHECK(!dl_get_int64(ix, 0, &got) && got == 1, "int64 beyond 2^53 sort: first index %lld", (long long)got);
  dl_tensor_release(v), dl_tensor_release(ix), dl_tensor_release(l);
  /* topk */
  dl_tensor *t = mk(V(1, 5, 3, 5, 2), S(5), 1, DL_FLOAT32);
  CHECK(!dl_topk(t, 2, 0, 1, 1, &v, &ix), "topk: %s", dl_last_error());
  EXPECT(v, DL_FLOAT32, S(2), 1, V(5, 5));
  EXPECT(ix, DL_INT64, S(2), 1, V(1, 3));
  CHECK(!dl_topk(t, 2, -1, 0, 1, &v, &ix), "topk smallest");
  EXPECT(v, DL_FLOAT32, S(2), 1, V(1, 2));
  EXPECT(ix, DL_INT64, S(2), 1, V(0, 4));
  CHECK(!dl_topk(t, 0, 0, 1, 1, &v, &ix), "topk 0");
  EXPECT(v, DL_FLOAT32, S(0), 1, V(0));
  EXPECT(ix, DL_INT64, S(0), 1, V(0));
  CHECK(dl_topk(t, 6, 0, 1, 1, &v, &ix) == DL_EINDEX && !v && strstr(dl_last_error(), "k = 6"),
        "topk k > size: %s", dl_last_error());
  CHECK(dl_topk(t, -1, 0, 1, 1, &v, &ix) == DL_EINDEX, "topk k < 0");
  CHECK(dl_sort(t, 1, 0, &v, &ix) == DL_EINDEX, "sort bad dim");
  CHECK(dl_sort(t, 0, 0, NULL, &ix) == DL_EINVAL, "sort NULL values");
  CHECK(dl_sort(NULL, 0, 0, &v, &ix) == DL_EINVAL, "sort NULL tensor");
  dl_tensor_release(t);
  dl_tensor *t2 = mk(V(1, 9, 4, 7, 3, 8), S(3, 2), 2, DL_INT32);
  CHECK(!dl_topk(t2, 2, 0, 1, 1, &v, &ix), "topk dim 0");
  EXPECT(v, DL_INT32, S(2, 2), 2, V(4, 9, 3, 8));
  EXPECT(ix, DL_INT64, S(2, 2), 2, V(1, 0, 2, 2));
  dl_tensor_release(t2);
  /* large: sorted, a permutation, and topk (selection path) agrees */
  int64_t N = 200003;
  dl_tensor *r = dl_randn(S(2, N), 2, DL_FLOAT32), *tv = NULL, *ti = NULL;
  CHECK(!dl_sort(r, 1, 1, &v, &ix), "sort large");
  CHECK(!dl_topk(r, 50, 1, 1, 0, &tv, &ti), "topk large");
  float *sv = dl_tensor_data(v), *rv = dl_tensor_data(r), *tvv = dl_tensor_data(tv);
  int64_t *si = dl_tensor_data(ix), *tii = dl_tensor_data(ti);
  char *seen = calloc((size_t)N, 1);
  int ok = 1;
  for (int64_t row = 0; row < 2; row++) {
    memset(seen, 0, (size_t)N);
    for (int64_t j = 0; j < N; j++) {
      int64_t k = si[row * N + j];
      ok &= k >= 0 && k < N && !seen[k] && sv[row * N + j] == rv[row * N + k];
      if (k >= 0 && k < N) seen[k] = 1;
      if (j) ok &= sv[row * N + j - 1] >= sv[row * N + j];
    }
    for (int j = 0; j < 50; j++)
      ok &= tvv[row * 50 + j] == sv[row * N + j] && tii[row * 50 + j] == si[row * N + j];
  }
  CHECK(ok, "large sort / topk disagree");
  free(seen);
  dl_tensor_release(r), dl_tensor_release(v), dl_tensor_release(ix);
  dl_tensor_release(tv), dl_tensor_release(ti);
}

static void test_nonzero_tri(void) {
  dl_tensor *x = mk(V(0, 1, 2, 0, NAN, 0), S(2, 3), 2, DL_FLOAT32);
  EXPECT(dl_nonzero(x), DL_INT64, S(3, 2), 2, V(0, 1, 0, 2, 1, 1));
  dl_tensor *xt = dl_transpose(x, 0, 1);
  EXPECT(dl_nonzero(xt), DL_INT64, S(3, 2), 2, V(1, 0, 1, 1, 2, 0));
  dl_tensor_release(xt), dl_tensor_release(x);
  dl_tensor *z = mk(V(3), NULL, 0, DL_INT32), *zz = mk(V(0), NULL, 0, DL_BOOL);
  EXPECT(dl_nonzero(z), DL_INT64, S(1, 0), 2, V(0));
  EXPECT(dl_nonzero(zz), DL_INT64, S(0, 0), 2, V(0));
  dl_tensor_release(z), dl_tensor_release(zz);
  EXPECT_ERR(dl_nonzero(NULL), DL_EINVAL, "nonzero");
  dl_tensor *m = dl_arange(1, 13, 1, DL_INT64), *m34 = dl_reshape(m, S(3, 4), 2);
  EXPECT(dl_tril(m34, 0), DL_INT64, S(3, 4), 2, V(1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0));
  EXPECT(dl_tril(m34, -1), DL_INT64, S(3, 4), 2, V(0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0));
  EXPECT(dl_triu(m34, 1), DL_INT64, S(3, 4), 2, V(0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12));
  EXPECT(dl_triu(m34, -5), DL_INT64, S(3, 4), 2, V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  EXPECT(dl_triu(m34, INT64_MAX), DL_INT64, S(3, 4), 2, V(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT(dl_tril(m34, INT64_MIN), DL_INT64, S(3, 4), 2, V(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  dl_tensor *mt = dl_transpose(m34, 0, 1);
  EXPECT(dl_triu(mt, 0), DL_INT64, S(4, 3), 2, V(1, 5, 9, 0, 6, 10, 0, 0, 11, 0, 0, 0));
  dl_tensor_release(mt), dl_tensor_release(m34), dl_tensor_release(m);
  dl_tensor *bt = dl_full(S(2, 2, 2), 3, DL_BOOL, 1);
  EXPECT(dl_tril(bt, 0), DL_BOOL, S(2, 2, 2), 3, V(1, 0, 1, 1, 1, 0, 1, 1));
  EXPECT_ERR(dl_tril(NULL, 0), DL_EINVAL, "tril");
  dl_tensor *v1 = dl_full(S(3), 1, DL_FLOAT32, 1);
  EXPECT_ERR(dl_triu(v1, 0), DL_ESHAPE, "at least 2 dims");
  dl_tensor_release(v1), dl_tensor_release(bt);
}

/* -- Accuracy and speed on 16M floats ------------------------------------ */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_big_sum(void) {
  int64_t n = 16 << 20;
  dl_tensor *x = dl_rand(S(n), 1, DL_FLOAT32);
  if (!x) {
    CHECK(0, "rand 16M: %s", dl_last_error());
    return;
  }
  const float *p = dl_tensor_data(x);
  long double ref = 0;
  for (int64_t i = 0; i < n; i++) ref += p[i];
  dl_tensor *s = red(DL_SUM, x, NULL, 0, 0, 0), *mn = red(DL_MEAN, x, NULL, 0, 0, 0);
  double got = 0, gm = 0;
  CHECK(s && !dl_get_double(s, 0, &got), "sum 16M");
  CHECK(mn && !dl_get_double(mn, 0, &gm), "mean 16M");
  double rel = fabs(got - (double)ref) / (double)ref;
  CHECK(rel < 1e-6, "sum of 16M float32: %.10g vs %.10Lg (rel %.2e)", got, ref, rel);
  CHECK(fabs(gm - (double)(ref / n)) < 1e-6, "mean of 16M: %.10g", gm);
  printf("INFO: sum of 16M float32 rel error %.2e\n", rel);
  dl_tensor_release(s), dl_tensor_release(mn);
  int64_t rows = 4096, cols = 1024;
  dl_tensor *sm = dl_randn(S(rows, cols), 2, DL_FLOAT32);
  for (int th = 1; th <= 2; th++) {
    dl_set_num_threads(th);
    double best = 1e9, bsm = 1e9;
    for (int r = 0; r < 7; r++) {
      double t0 = now();
      dl_tensor *q = red(DL_SUM, x, NULL, 0, 0, 0);
      double t1 = now();
      dl_tensor *y = dl_softmax(sm, 1);
      double t2 = now();
      dl_tensor_release(q), dl_tensor_release(y);
      best = t1 - t0 < best ? t1 - t0 : best;
      bsm = t2 - t1 < bsm ? t2 - t1 : bsm;
    }
    printf("INFO: %d thread(s): sum 16M float32 %.2f GB/s (%.2f ms); softmax [4096, 1024] "
           "%.0f rows/s (%.2f ms)\n", th, n * 4.0 / best / 1e9, best * 1e3, rows / bsm, bsm * 1e3);
  }
  dl_tensor_release(sm);
  dl_tensor_release(x);
}

int main(int argc, char **argv) {
  int64_t base = dl_mem_allocated();
  dl_set_num_threads(2);
  dl_manual_seed(1234);
  test_reduce_small();
  test_reduce_types();
  test_reduce_edges();
  test_reduce_layouts();
  test_max_arg();
  test_cum();
  test_softmax();
  test_sort();
  test_nonzero_tri();
  if (argc < 2 || strcmp(argv[1], "--quick")) test_big_sum();
  CHECK(dl_mem_allocated() == base, "%lld bytes still allocated at exit",
        (long long)(dl_mem_allocated() - base));
  return check_report("test_reduce");
}
