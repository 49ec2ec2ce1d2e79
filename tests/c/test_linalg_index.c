/*
** test_linalg_index.c -- hand-computed checks of the matrix products
** (linalg.c) and the index/join ops (index.c), errors included.  Prints one
** line per failed check and a summary; exits nonzero on any failure.
*/
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddplua.h"
#include "check.h"



#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})
#define NARGS(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static dl_tensor *mk(const double *v, const int64_t *shape, int ndim, int dtype) {
  dl_tensor *t = dl_from_doubles(v, shape, ndim, dtype);
  if (!t) {
    printf("setup failed: %s\n", dl_last_error());
    exit(2);
  }
  return t;
}

/* Checks shape, dtype and values of t (consumed), within tol. */
static void expect_at(int line, const char *what, dl_tensor *t, const int64_t *shape,
                      int ndim, int dtype, const double *vals, double tol) {
  if (!t) {
    failed++;
    printf("FAIL line %d: %s: returned NULL: %s\n", line, what, dl_last_error());
    return;
  }
  int ok = dl_tensor_dim(t) == ndim && dl_tensor_dtype(t) == dtype;
  for (int i = 0; ok && i < ndim; i++) ok = dl_tensor_size(t, i) == shape[i];
  if (!ok) {
    failed++;
    printf("FAIL line %d: %s: got %d-dim %s [", line, what, dl_tensor_dim(t),
           dl_dtype_name(dl_tensor_dtype(t)));
    for (int i = 0; i < dl_tensor_dim(t); i++)
      printf(i ? ", %lld" : "%lld", (long long)dl_tensor_size(t, i));
    printf("]\n");
    dl_tensor_release(t);
    return;
  }
  int64_t n = dl_tensor_numel(t);
  double *got = malloc(sizeof(double) * (size_t)(n ? n : 1));
  dl_to_doubles(t, got);
  for (int64_t i = 0; i < n; i++) {
    double e = vals[i], g = got[i];
    int same = (isnan(e) && isnan(g)) || fabs(e - g) <= tol * (1 + fabs(e));
    if (!same) {
      failed++;
      printf("FAIL line %d: %s: element %lld is %g, expected %g\n", line, what,
             (long long)i, g, e);
      free(got);
      dl_tensor_release(t);
      return;
    }
  }
  passed++;
  free(got);
  dl_tensor_release(t);
}
#define EXPECT(what, t, shape, ndim, dtype, vals, tol) \
  expect_at(__LINE__, what, t, shape, ndim, dtype, vals, tol)

/* Checks that a call failed with code and a message containing msg. */
static void expect_err_at(int line, const char *what, void *r, int rc, int code,
                          const char *msg) {
  if (r || rc == 0) {
    failed++;
    printf("FAIL line %d: %s: expected an error, got success\n", line, what);
    if (r) dl_tensor_release(r);
    return;
  }
  if (dl_last_error_code() != code || (rc != -1 && rc != code) || !strstr(dl_last_error(), msg)) {
    failed++;
    printf("FAIL line %d: %s: got code %d (rc %d) \"%s\", expected %d containing \"%s\"\n",
           line, what, dl_last_error_code(), rc, dl_last_error(), code, msg);
    return;
  }
  passed++;
}
#define EXPECT_ERR(what, r, code, msg) expect_err_at(__LINE__, what, r, -1, code, msg)
#define EXPECT_RC_ERR(what, rc, code, msg) expect_err_at(__LINE__, what, NULL, rc, code, msg)

/* -- Reference matmul ------------------------------------------------------ */

/* Plain double matmul of a [..., m, k] and b [..., k, n] (both >= 2-D) with
** broadcast batch dims, from the logical values of any layout. */
static double *ref_matmul(const dl_tensor *a, const dl_tensor *b, int64_t *nout) {
  int na = dl_tensor_dim(a), nb = dl_tensor_dim(b);
  int64_t m = dl_tensor_size(a, na - 2), k = dl_tensor_size(a, na - 1);
  int64_t n = dl_tensor_size(b, nb - 1);
  int nbt = na > nb ? na - 2 : nb - 2;
  int64_t bs[8], nbatch = 1;
  for (int i = 0; i < nbt; i++) {
    int ia = i - (nbt - (na - 2)), ib = i - (nbt - (nb - 2));
    int64_t sa = ia >= 0 ? dl_tensor_size(a, ia) : 1, sb = ib >= 0 ? dl_tensor_size(b, ib) : 1;
    bs[i] = sa == 1 ? sb : sa;
    nbatch *= bs[i];
  }
  double *va = malloc(sizeof(double) * (size_t)(dl_tensor_numel(a) + 1));
  double *vb = malloc(sizeof(double) * (size_t)(dl_tensor_numel(b) + 1));
  double *out = calloc((size_t)(nbatch * m * n + 1), sizeof(double));
  dl_to_doubles(a, va);
  dl_to_doubles(b, vb);
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t rem = bi, oa = 0, ob = 0, ma = m * k, mb = k * n;
    for (int d = nbt - 1; d >= 0; d--) {
      int64_t j = rem % bs[d];
      rem /= bs[d];
      int ia = d - (nbt - (na - 2)), ib = d - (nbt - (nb - 2));
      if (ia >= 0) {
        if (dl_tensor_size(a, ia) != 1) oa += j * ma;
        ma *= dl_tensor_size(a, ia);
      }
      if (ib >= 0) {
        if (dl_tensor_size(b, ib) != 1) ob += j * mb;
        mb *= dl_tensor_size(b, ib);
      }
    }
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t q = 0; q < k; q++) s += va[oa + i * k + q] * vb[ob + q * n + j];
        out[(bi * m + i) * n + j] = s;
      }
  }
  free(va);
  free(vb);
  *nout = nbatch * m * n;
  return out;
}

/* Compares dl_matmul(a, b) with the reference (a, b consumed). */
static void check_ref_at(int line, const char *what, dl_tensor *a, dl_tensor *b,
                         double tol) {
  int64_t n;
  double *e = ref_matmul(a, b, &n);
  dl_tensor *r = dl_matmul(a, b);
  if (!r) {
    failed++;
    printf("FAIL line %d: %s: %s\n", line, what, dl_last_error());
  } else {
    int64_t shape[8];
    for (int i = 0; i < dl_tensor_dim(r); i++) shape[i] = dl_tensor_size(r, i);
    if (dl_tensor_numel(r) != n) {
      failed++;
      printf("FAIL line %d: %s: %lld elements, expected %lld\n", line, what,
             (long long)dl_tensor_numel(r), (long long)n);
      dl_tensor_release(r);
    } else {
      expect_at(line, what, r, shape, dl_tensor_dim(r), dl_tensor_dtype(a), e, tol);
    }
  }
  free(e);
  dl_tensor_release(a);
  dl_tensor_release(b);
}
#define CHECK_REF(what, a, b, tol) check_ref_at(__LINE__, what, a, b, tol)

static dl_tensor *rnd(const int64_t *shape, int ndim, int dtype) {
  dl_tensor *t = dl_randn(shape, ndim, dtype);
  if (!t) exit(2);
  return t;
}

/* Small integers, exact in every dtype. */
static dl_tensor *irnd(const int64_t *shape, int ndim, int dtype) {
  dl_tensor *t = dl_randint(-4, 5, shape, ndim, dtype);
  if (!t) {
    printf("setup failed: %s\n", dl_last_error());
    exit(2);
  }
  return t;
}

/* t (consumed) with the same values, stored with dims d0 and d1 swapped. */
static dl_tensor *tr(dl_tensor *t, int d0, int d1) {
  dl_tensor *r = dl_transpose(t, d0, d1);
  dl_tensor *c = dl_contiguous(r);  /* storage laid out transposed */
  dl_tensor_release(r);
  dl_tensor_release(t);
  r = dl_transpose(c, d0, d1);
  dl_tensor_release(c);
  return r;
}

/* -- Matmul ---------------------------------------------------------------- */

static void test_matmul(void) {
  dl_tensor *a, *b, *c;
  /* 1-D x 1-D */
  a = mk(VALS(1, 2, 3), SHAPE(3), 1, DL_FLOAT32);
  b = mk(VALS(4, 5, 6), SHAPE(3), 1, DL_FLOAT32);
  EXPECT("dot via matmul", dl_matmul(a, b), NULL, 0, DL_FLOAT32, VALS(32), 0);
  EXPECT("dot", dl_dot(a, b), NULL, 0, DL_FLOAT32, VALS(32), 0);
  dl_tensor_release(a);
  dl_tensor_release(b);
  /* 2-D x 2-D */
  a = mk(VALS(1, 2, 3, 4, 5, 6), SHAPE(2, 3), 2, DL_FLOAT32);
  b = mk(VALS(7, 8, 9, 10, 11, 12), SHAPE(3, 2), 2, DL_FLOAT32);
  EXPECT("mm", dl_matmul(a, b), SHAPE(2, 2), 2, DL_FLOAT32, VALS(58, 64, 139, 154), 0);
  EXPECT("dl_mm", dl_mm(a, b), SHAPE(2, 2), 2, DL_FLOAT32, VALS(58, 64, 139, 154), 0);
  /* transposed operands: b^T @ a^T = (a @ b)^T */
  dl_tensor *at = dl_transpose(a, 0, 1), *bt = dl_transpose(b, 0, 1);
  EXPECT("mm of transposes", dl_matmul(bt, at), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(58, 139, 64, 154), 0);
  /* 1-D x 2-D and 2-D x 1-D */
  c = mk(VALS(1, 2), SHAPE(2), 1, DL_FLOAT32);
  EXPECT("vec @ mat", dl_matmul(c, a), SHAPE(3), 1, DL_FLOAT32, VALS(9, 12, 15), 0);
  EXPECT("vec @ mat^T", dl_matmul(c, bt), SHAPE(3), 1, DL_FLOAT32, VALS(23, 29, 35), 0);
  EXPECT("mat @ vec", dl_matmul(b, c), SHAPE(3), 1, DL_FLOAT32, VALS(23, 29, 35), 0);
  EXPECT("mat^T @ vec", dl_matmul(at, c), SHAPE(3), 1, DL_FLOAT32, VALS(9, 12, 15), 0);
  dl_tensor_release(c);
  /* a strided vector: column 1 of b, [8, 10, 12] */
  c = dl_select(b, 1, 1);
  EXPECT("mat @ strided vec", dl_matmul(a, c), SHAPE(2), 1, DL_FLOAT32, VALS(64, 154), 0);
  EXPECT("strided dot", dl_dot(c, c), NULL, 0, DL_FLOAT32, VALS(308), 0);
  dl_tensor_release(c);
  /* float64, and bfloat16 / float16 through float32 */
  int dts[3] = {DL_FLOAT64, DL_BFLOAT16, DL_FLOAT16};
  for (int i = 0; i < 3; i++) {
    dl_tensor *x = dl_to_dtype(a, dts[i]), *y = dl_to_dtype(b, dts[i]);
    EXPECT(dl_dtype_name(dts[i]), dl_matmul(x, y), SHAPE(2, 2), 2, dts[i],
           VALS(58, 64, 139, 154), 0);
    dl_tensor *xt = dl_transpose(x, 0, 1);
    dl_tensor *v = dl_select(xt, 1, 0);  /* [1, 2, 3] */
    EXPECT("dot (dtype)", dl_dot(v, v), NULL, 0, dts[i], VALS(14), 0);
    dl_tensor_release(v);
    dl_tensor_release(xt);
    dl_tensor_release(x);
    dl_tensor_release(y);
  }
  /* batched: [2, 2, 3] @ [3, 2] folds into one gemm */
  dl_tensor *a3 = mk(VALS(1, 2, 3, 4, 5, 6, -1, 0, 1, 2, 0, -2), SHAPE(2, 2, 3), 3, DL_FLOAT32);
  EXPECT("3-D @ 2-D", dl_matmul(a3, b), SHAPE(2, 2, 2), 3, DL_FLOAT32,
         VALS(58, 64, 139, 154, 4, 4, -8, -8), 0);
  dl_tensor_release(at);
  dl_tensor_release(bt);
  /* vector with a batch */
  c = mk(VALS(1, 0, -1), SHAPE(3), 1, DL_FLOAT32);
  EXPECT("3-D @ vec", dl_matmul(a3, c), SHAPE(2, 2), 2, DL_FLOAT32, VALS(-2, -2, -2, 4), 0);
  dl_tensor *d = mk(VALS(1, -1), SHAPE(2), 1, DL_FLOAT32);
  EXPECT("vec @ 3-D", dl_matmul(d, a3), SHAPE(2, 3), 2, DL_FLOAT32,
         VALS(-3, -3, -3, -3, 0, 3), 0);
  dl_tensor_release(c);
  dl_tensor_release(d);
  dl_tensor_release(a3);
  dl_tensor_release(a);
  dl_tensor_release(b);

  /* random shapes against the reference, layouts included */
  dl_manual_seed(7);
  CHECK_REF("bcast batch", rnd(SHAPE(2, 1, 4, 3), 4, DL_FLOAT32),
            rnd(SHAPE(3, 3, 5), 3, DL_FLOAT32), 1e-5);
  CHECK_REF("bcast batch f64", rnd(SHAPE(1, 3, 4, 3), 4, DL_FLOAT64),
            rnd(SHAPE(2, 1, 3, 5), 4, DL_FLOAT64), 1e-12);
  CHECK_REF("2-D @ 3-D", rnd(SHAPE(4, 3), 2, DL_FLOAT32), rnd(SHAPE(5, 3, 6), 3, DL_FLOAT32), 1e-5);
  CHECK_REF("A^T batched", tr(rnd(SHAPE(3, 4, 5), 3, DL_FLOAT32), 1, 2),
            rnd(SHAPE(3, 5, 6), 3, DL_FLOAT32), 1e-5);
  CHECK_REF("B^T batched", rnd(SHAPE(3, 4, 5), 3, DL_FLOAT32),
            tr(rnd(SHAPE(3, 5, 6), 3, DL_FLOAT32), 1, 2), 1e-5);
  CHECK_REF("batch dims permuted", tr(rnd(SHAPE(3, 2, 4, 5), 4, DL_FLOAT64), 0, 1),
            rnd(SHAPE(5, 2), 2, DL_FLOAT64), 1e-12);
  CHECK_REF("A^T folded", tr(rnd(SHAPE(2, 3, 7, 5), 4, DL_FLOAT32), 2, 3),
            rnd(SHAPE(5, 6), 2, DL_FLOAT32), 1e-5);
  CHECK_REF("many small batches", rnd(SHAPE(300, 8, 8), 3, DL_FLOAT32),
            rnd(SHAPE(300, 8, 8), 3, DL_FLOAT32), 1e-5);
  CHECK_REF("many small f64 T", tr(rnd(SHAPE(33, 5, 6), 3, DL_FLOAT64), 1, 2),
            tr(rnd(SHAPE(33, 6, 7), 3, DL_FLOAT64), 1, 2), 1e-12);
  CHECK_REF("larger", rnd(SHAPE(70, 130), 2, DL_FLOAT64), rnd(SHAPE(130, 90), 2, DL_FLOAT64), 1e-10);
  CHECK_REF("gemv batched T", tr(rnd(SHAPE(4, 3, 5), 3, DL_FLOAT32), 1, 2),
            rnd(SHAPE(4, 5, 1), 3, DL_FLOAT32), 1e-5);
  CHECK_REF("row gemv batched", rnd(SHAPE(4, 1, 5), 3, DL_FLOAT32),
            tr(rnd(SHAPE(4, 5, 6), 3, DL_FLOAT32), 1, 2), 1e-5);
  {
    /* layouts BLAS cannot read: every other column, and expanded matrices */
    dl_tensor *x = rnd(SHAPE(4, 10), 2, DL_FLOAT32);
    dl_tensor *y = dl_as_strided(x, SHAPE(4, 5), SHAPE(10, 2), 2, 0);
    dl_tensor *r = rnd(SHAPE(1, 3), 2, DL_FLOAT32);
    dl_tensor *e = dl_expand(r, SHAPE(5, 3), 2);
    CHECK_REF("strided cols", y, e, 1e-5);
    dl_tensor *z = rnd(SHAPE(3, 4), 2, DL_FLOAT32);
    dl_tensor *ze = dl_expand(z, SHAPE(6, 3, 4), 3);
    dl_tensor *w = rnd(SHAPE(6, 4, 2), 3, DL_FLOAT32);
    CHECK_REF("expanded batch", ze, w, 1e-5);
    dl_tensor *w2 = rnd(SHAPE(1, 4, 2), 3, DL_FLOAT32);
    dl_tensor *we = dl_expand(w2, SHAPE(6, 4, 2), 3);
    dl_tensor *z2 = rnd(SHAPE(6, 3, 4), 3, DL_FLOAT32);
    CHECK_REF("expanded B folds", z2, we, 1e-5);
    dl_tensor_release(x);
    dl_tensor_release(r);
    dl_tensor_release(z);
    dl_tensor_release(w2);
  }
  /* integers: exact, any layout */
  int ids[3] = {DL_INT32, DL_INT64, DL_UINT8};
  for (int i = 0; i < 3; i++) {
    if (ids[i] == DL_UINT8) continue;  /* randint -4..4 does not fit uint8 */
    CHECK_REF("int bcast", irnd(SHAPE(2, 1, 3, 4), 4, ids[i]), irnd(SHAPE(3, 4, 2), 3, ids[i]), 0);
    CHECK_REF("int T", tr(irnd(SHAPE(5, 3), 2, ids[i]), 0, 1), tr(irnd(SHAPE(3, 2), 2, ids[i]), 0, 1), 0);
  }
  /* rows of several batches in one parallel chunk */
  CHECK_REF("int many rows", irnd(SHAPE(3, 700, 4), 3, DL_INT64), irnd(SHAPE(4, 5), 2, DL_INT64), 0);
  CHECK_REF("int strided B", irnd(SHAPE(2, 6, 4), 3, DL_INT32),
            tr(irnd(SHAPE(2, 4, 5), 3, DL_INT32), 1, 2), 0);
  a = mk(VALS(1, 2, 3, 4, 5, 6), SHAPE(2, 3), 2, DL_INT32);
  b = mk(VALS(7, 8, 9, 10, 11, 12), SHAPE(3, 2), 2, DL_INT32);
  EXPECT("int mm", dl_mm(a, b), SHAPE(2, 2), 2, DL_INT32, VALS(58, 64, 139, 154), 0);
  c = mk(VALS(1, 2, 3), SHAPE(3), 1, DL_INT32);
  EXPECT("int mv", dl_matmul(a, c), SHAPE(2), 1, DL_INT32, VALS(14, 32), 0);
  EXPECT("int dot", dl_matmul(c, c), NULL, 0, DL_INT32, VALS(14), 0);
  dl_tensor_release(a);
  dl_tensor_release(b);
  dl_tensor_release(c);
  a = mk(VALS(16, 1), SHAPE(1, 2), 2, DL_UINT8);
  b = mk(VALS(16, 3), SHAPE(2, 1), 2, DL_UINT8);
  EXPECT("uint8 wraps", dl_mm(a, b), SHAPE(1, 1), 2, DL_UINT8, VALS(3), 0);
  dl_tensor_release(a);
  dl_tensor_release(b);
  a = mk(VALS(2147483647, 1), SHAPE(1, 2), 2, DL_INT32);
  b = mk(VALS(1, 1), SHAPE(2, 1), 2, DL_INT32);
  EXPECT("int32 wraps", dl_mm(a, b), SHAPE(1, 1), 2, DL_INT32, VALS(-2147483648.0), 0);
  dl_tensor_release(a);
  dl_tensor_release(b);


  /* empty dims: k = 0 gives zeros, m or n = 0 gives empty */
  int edts[3] = {DL_FLOAT32, DL_INT64, DL_BFLOAT16};
  for (int i = 0; i < 3; i++) {
    a = dl_zeros(SHAPE(2, 0), 2, edts[i]);
    b = dl_zeros(SHAPE(0, 3), 2, edts[i]);
    dl_fill_(a, NAN);  /* no element, so nothing to read */
    EXPECT("k = 0", dl_matmul(a, b), SHAPE(2, 3), 2, edts[i], VALS(0, 0, 0, 0, 0, 0), 0);
    dl_tensor_release(a);
    dl_tensor_release(b);
  }
  a = dl_zeros(SHAPE(0, 3), 2, DL_FLOAT32);
  b = dl_zeros(SHAPE(3, 4), 2, DL_FLOAT32);
  EXPECT("m = 0", dl_matmul(a, b), SHAPE(0, 4), 2, DL_FLOAT32, NULL, 0);
  c = dl_zeros(SHAPE(4, 0), 2, DL_FLOAT32);
  EXPECT("n = 0", dl_matmul(b, c), SHAPE(3, 0), 2, DL_FLOAT32, NULL, 0);
  dl_tensor_release(c);
  c = dl_zeros(SHAPE(0, 3, 4), 3, DL_FLOAT32);
  d = dl_zeros(SHAPE(4, 2), 2, DL_FLOAT32);
  EXPECT("batch = 0", dl_matmul(c, d), SHAPE(0, 3, 2), 3, DL_FLOAT32, NULL, 0);
  dl_tensor_release(c);
  dl_tensor_release(d);
  c = dl_zeros(SHAPE(0), 1, DL_FLOAT32);
  EXPECT("empty dot", dl_dot(c, c), NULL, 0, DL_FLOAT32, VALS(0), 0);
  dl_tensor_release(c);
  dl_tensor_release(a);
  dl_tensor_release(b);
}

static void test_matmul_errors(void) {
  dl_tensor *a = dl_zeros(SHAPE(2, 3), 2, DL_FLOAT32);
  dl_tensor *b = dl_zeros(SHAPE(4, 5), 2, DL_FLOAT32);
  dl_tensor *v3 = dl_zeros(SHAPE(3), 1, DL_FLOAT32);
  dl_tensor *v4 = dl_zeros(SHAPE(4), 1, DL_FLOAT32);
  dl_tensor *s = dl_zeros(NULL, 0, DL_FLOAT32);
  dl_tensor *a64 = dl_zeros(SHAPE(3, 2), 2, DL_FLOAT64);
  dl_tensor *ab = dl_zeros(SHAPE(2, 2), 2, DL_BOOL);
  dl_tensor *b3 = dl_zeros(SHAPE(2, 3, 4), 3, DL_FLOAT32);
  dl_tensor *c3 = dl_zeros(SHAPE(3, 4, 5), 3, DL_FLOAT32);
  EXPECT_ERR("matmul shapes", dl_matmul(a, b), DL_ESHAPE,
             "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 vs 4)");
  EXPECT_ERR("mm shapes", dl_mm(a, b), DL_ESHAPE,
             "mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 vs 4)");
  EXPECT_ERR("matmul vec shapes", dl_matmul(v4, a), DL_ESHAPE,
             "matmul: shapes [4] and [2, 3] cannot be multiplied (4 vs 2)");
  EXPECT_ERR("matmul mat vec", dl_matmul(a, v4), DL_ESHAPE,
             "matmul: shapes [2, 3] and [4] cannot be multiplied (3 vs 4)");
  EXPECT_ERR("matmul vec vec", dl_matmul(v3, v4), DL_ESHAPE,
             "matmul: shapes [3] and [4] cannot be multiplied (3 vs 4)");
  EXPECT_ERR("dot lengths", dl_dot(v3, v4), DL_ESHAPE, "dot: shapes [3] and [4]");
  EXPECT_ERR("matmul 0-dim", dl_matmul(s, a), DL_ESHAPE, "matmul: both arguments need at least 1 dim");
  EXPECT_ERR("matmul dtypes", dl_matmul(a, a64), DL_EDTYPE,
             "matmul: dtypes float32 and float64 do not match");
  EXPECT_ERR("matmul bool", dl_matmul(ab, ab), DL_EDTYPE, "matmul: not supported for dtype bool");
  dl_tensor *vb = dl_zeros(SHAPE(3), 1, DL_BOOL);
  EXPECT_ERR("dot bool", dl_dot(vb, vb), DL_EDTYPE, "dot: not supported for dtype bool");
  EXPECT_ERR("dot dtypes", dl_dot(v3, vb), DL_EDTYPE, "dot: dtypes float32 and bool do not match");
  dl_tensor_release(vb);
  EXPECT_ERR("mm 3-D", dl_mm(b3, a), DL_ESHAPE, "mm: expected 2-D tensors, got shapes [2, 3, 4] and [2, 3]");
  EXPECT_ERR("bmm 2-D", dl_bmm(a, b3), DL_ESHAPE, "bmm: expected 3-D tensors");
  EXPECT_ERR("bmm batch", dl_bmm(b3, c3), DL_ESHAPE,
             "bmm: batch dims of shapes [2, 3, 4] and [3, 4, 5] do not match (2 vs 3)");
  EXPECT_ERR("matmul batch", dl_matmul(b3, c3), DL_ESHAPE,
             "matmul: batch dims of shapes [2, 3, 4] and [3, 4, 5] do not match (2 vs 3)");
  EXPECT_ERR("dot 2-D", dl_dot(a, a), DL_ESHAPE, "dot: expected 1-D tensors");
  EXPECT_ERR("outer 2-D", dl_outer(a, v3), DL_ESHAPE, "outer: expected 1-D tensors");
  dl_tensor *a32 = dl_zeros(SHAPE(3, 2), 2, DL_FLOAT32);
  EXPECT_ERR("addmm c shape", dl_addmm(v4, a, a32, 1, 1), DL_ESHAPE,
             "addmm: shape [4] cannot be broadcast to [2, 2]");
  EXPECT_ERR("addmm c shape (beta 0)", dl_addmm(b3, a, a32, 0, 1), DL_ESHAPE,
             "addmm: shape [2, 3, 4] cannot be broadcast to [2, 2]");
  dl_tensor *c64 = dl_zeros(SHAPE(2, 2), 2, DL_FLOAT64);
  EXPECT_ERR("addmm c dtype", dl_addmm(c64, a, a32, 1, 1), DL_EDTYPE,
             "addmm: dtypes float64 and float32 do not match");
  dl_tensor_release(c64);
  EXPECT_ERR("addmm shapes", dl_addmm(v4, a, a, 1, 1), DL_ESHAPE,
             "addmm: shapes [2, 3] and [2, 3] cannot be multiplied (3 vs 2)");
  dl_tensor_release(a32);
  EXPECT_ERR("matmul NULL", dl_matmul(NULL, a), DL_EINVAL, "matmul: argument tensor is nil");
  dl_tensor_release(a);
  dl_tensor_release(b);
  dl_tensor_release(v3);
  dl_tensor_release(v4);
  dl_tensor_release(s);
  dl_tensor_release(a64);
  dl_tensor_release(ab);
  dl_tensor_release(b3);
  dl_tensor_release(c3);
}

static void test_addmm_outer(void) {
  dl_tensor *a = mk(VALS(1, 2, 3, 4, 5, 6), SHAPE(2, 3), 2, DL_FLOAT32);
  dl_tensor *b = mk(VALS(7, 8, 9, 10, 11, 12), SHAPE(3, 2), 2, DL_FLOAT32);
  dl_tensor *cn = mk(VALS(NAN, NAN, NAN, NAN), SHAPE(2, 2), 2, DL_FLOAT32);
  dl_tensor *row = mk(VALS(1, -1), SHAPE(2), 1, DL_FLOAT32);
  dl_tensor *col = mk(VALS(1, -1), SHAPE(2, 1), 2, DL_FLOAT32);
  dl_tensor *one = mk(VALS(10), NULL, 0, DL_FLOAT32);
  EXPECT("addmm beta 0 ignores NaN", dl_addmm(cn, a, b, 0, 1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(58, 64, 139, 154), 0);
  EXPECT("addmm beta 1 keeps NaN", dl_addmm(cn, a, b, 1, 1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(NAN, NAN, NAN, NAN), 0);
  EXPECT("addmm row", dl_addmm(row, a, b, 2, 3), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(176, 190, 419, 460), 0);
  EXPECT("addmm col", dl_addmm(col, a, b, 1, 1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(59, 65, 138, 153), 0);
  EXPECT("addmm 0-dim", dl_addmm(one, a, b, 0.5, -1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(-53, -59, -134, -149), 0);
  dl_tensor *bt = dl_transpose(b, 0, 1), *btc = dl_contiguous(bt);
  dl_tensor *btt = dl_transpose(btc, 0, 1);
  EXPECT("addmm B^T", dl_addmm(row, a, btt, 1, 1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(59, 63, 140, 153), 0);
  dl_tensor *z = dl_zeros(SHAPE(2, 0), 2, DL_FLOAT32), *z2 = dl_zeros(SHAPE(0, 2), 2, DL_FLOAT32);
  EXPECT("addmm k = 0", dl_addmm(row, z, z2, 3, 1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(3, -3, 3, -3), 0);
  dl_tensor *h = dl_to_dtype(a, DL_BFLOAT16), *hb = dl_to_dtype(b, DL_BFLOAT16);
  dl_tensor *hr = dl_to_dtype(row, DL_BFLOAT16);
  EXPECT("addmm bf16", dl_addmm(hr, h, hb, 1, 1), SHAPE(2, 2), 2, DL_BFLOAT16,
         VALS(59, 63, 140, 153), 0);
  dl_tensor *ia = dl_to_dtype(a, DL_INT64), *ib = dl_to_dtype(b, DL_INT64);
  dl_tensor *ir = dl_to_dtype(row, DL_INT64);
  EXPECT("addmm int", dl_addmm(ir, ia, ib, 2, 3), SHAPE(2, 2), 2, DL_INT64,
         VALS(176, 190, 419, 460), 0);
  EXPECT("addmm int truncates alpha", dl_addmm(ir, ia, ib, 2.7, 3.9), SHAPE(2, 2), 2,
         DL_INT64, VALS(176, 190, 419, 460), 0);
  /* outer: a.reshape(-1, 1) * b, so dtypes promote */
  dl_tensor *v = mk(VALS(1, 2), SHAPE(2), 1, DL_INT64);
  dl_tensor *w = mk(VALS(3, 4, 5), SHAPE(3), 1, DL_FLOAT32);
  EXPECT("outer", dl_outer(v, w), SHAPE(2, 3), 2, DL_FLOAT32, VALS(3, 4, 5, 6, 8, 10), 0);
  EXPECT("outer int", dl_outer(v, v), SHAPE(2, 2), 2, DL_INT64, VALS(1, 2, 2, 4), 0);
  dl_tensor *vs[] = {a, b, cn, row, col, one, bt, btc, btt, z, z2, h, hb, hr, ia, ib, ir, v, w};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Timing only: printed, never a failure. */
static void time_matmul(void) {
  int saved = dl_get_num_threads();
  for (int threads = 1; threads <= saved && threads <= 2; threads++) {
    dl_set_num_threads(threads);
    int64_t sizes[3] = {512, 1024, 2048};
    for (int s = 0; s < 3; s++) {
      int64_t n = sizes[s];
      if (threads == 1 && n == 2048) continue;
      dl_tensor *a = rnd(SHAPE(n, n), 2, DL_FLOAT32), *b = rnd(SHAPE(n, n), 2, DL_FLOAT32);
      dl_tensor_release(dl_matmul(a, b));  /* warm up */
      int reps = n <= 512 ? 10 : n <= 1024 ? 4 : 2;
      double t0 = now();
      for (int r = 0; r < reps; r++) dl_tensor_release(dl_matmul(a, b));
      double dt = (now() - t0) / reps;
      printf("timing: matmul %lldx%lld float32, %d thread(s): %.1f GFLOP/s\n",
             (long long)n, (long long)n, threads, 2.0 * (double)n * n * n / dt / 1e9);
      dl_tensor_release(a);
      dl_tensor_release(b);
    }
  }
  dl_set_num_threads(saved);
}

/* -- Indexing -------------------------------------------------------------- */

static void test_index_select(void) {
  dl_tensor *t = mk(VALS(0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32), SHAPE(4, 3), 2, DL_FLOAT32);
  dl_tensor *i64 = mk(VALS(2, 0, 2), SHAPE(3), 1, DL_INT64);
  dl_tensor *i32 = mk(VALS(1, 2), SHAPE(2), 1, DL_INT32);
  dl_tensor *i0 = mk(VALS(3), NULL, 0, DL_INT64);
  EXPECT("rows", dl_index_select(t, 0, i64), SHAPE(3, 3), 2, DL_FLOAT32,
         VALS(20, 21, 22, 0, 1, 2, 20, 21, 22), 0);
  EXPECT("cols int32", dl_index_select(t, 1, i32), SHAPE(4, 2), 2, DL_FLOAT32,
         VALS(1, 2, 11, 12, 21, 22, 31, 32), 0);
  EXPECT("dim -1", dl_index_select(t, -1, i64), SHAPE(4, 3), 2, DL_FLOAT32,
         VALS(2, 0, 2, 12, 10, 12, 22, 20, 22, 32, 30, 32), 0);
  EXPECT("0-dim index", dl_index_select(t, 0, i0), SHAPE(1, 3), 2, DL_FLOAT32,
         VALS(30, 31, 32), 0);
  dl_tensor *tt = dl_transpose(t, 0, 1);  /* [3, 4], not contiguous */
  EXPECT("transposed rows", dl_index_select(tt, 0, i32), SHAPE(2, 4), 2, DL_FLOAT32,
         VALS(1, 11, 21, 31, 2, 12, 22, 32), 0);
  dl_tensor *sel = dl_select(i64, 0, 0);  /* a 0-dim view */
  EXPECT("0-dim view index", dl_index_select(t, 0, sel), SHAPE(1, 3), 2, DL_FLOAT32,
         VALS(20, 21, 22), 0);
  EXPECT("transposed cols", dl_index_select(tt, 1, i64), SHAPE(3, 3), 2, DL_FLOAT32,
         VALS(20, 0, 20, 21, 1, 21, 22, 2, 22), 0);
  dl_tensor *ev = dl_narrow(i64, 0, 0, 0);
  EXPECT("empty index", dl_index_select(t, 0, ev), SHAPE(0, 3), 2, DL_FLOAT32, NULL, 0);
  /* wide rows take the memcpy path, also from a strided index */
  dl_tensor *wide = dl_arange(0, 64, 1, DL_FLOAT64);
  dl_tensor *w2 = dl_view(wide, SHAPE(4, 16), 2);
  dl_tensor *ist = dl_as_strided(i64, SHAPE(2), SHAPE(2), 1, 0);  /* [2, 2] */
  double wv[32];
  for (int i = 0; i < 32; i++) wv[i] = 32 + i % 16;
  EXPECT("memcpy rows", dl_index_select(w2, 0, ist), SHAPE(2, 16), 2, DL_FLOAT64, wv, 0);
  /* every element size */
  int dts[4] = {DL_BOOL, DL_FLOAT16, DL_INT64, DL_UINT8};
  dl_tensor *one1 = mk(VALS(1), SHAPE(1), 1, DL_INT32);
  for (int i = 0; i < 4; i++) {
    dl_tensor *x = mk(VALS(0, 1, 1, 0, 2, 3), SHAPE(3, 2), 2, dts[i]);
    double e = dts[i] == DL_BOOL ? 1 : 3;
    EXPECT(dl_dtype_name(dts[i]), dl_index_select(x, 1, one1),
           SHAPE(3, 1), 2, dts[i], ((const double[]){1, 0, e}), 0);
    dl_tensor_release(x);
  }
  /* large enough to run on several threads */
  {
    dl_tensor *big = dl_arange(0, 5000 * 16, 1, DL_FLOAT32);
    dl_tensor *b2 = dl_view(big, SHAPE(5000, 16), 2);
    dl_tensor *rev = dl_arange(4999, -1, -1, DL_INT64);
    double *e = malloc(sizeof(double) * 5000 * 16);
    for (int i = 0; i < 5000 * 16; i++) e[i] = (4999 - i / 16) * 16 + i % 16;
    EXPECT("big row gather", dl_index_select(b2, 0, rev), SHAPE(5000, 16), 2, DL_FLOAT32, e, 0);
    dl_tensor *g = dl_view(big, SHAPE(320, 250), 2);
    dl_tensor *gi = dl_randint(0, 250, SHAPE(320, 250), 2, DL_INT64);
    for (int i = 0; i < 320 * 250; i++) {
      int64_t v;
      dl_get_int64(gi, i, &v);
      e[i] = (double)((i / 250) * 250 + v);
    }
    EXPECT("big gather", dl_gather(g, 1, gi), SHAPE(320, 250), 2, DL_FLOAT32, e, 0);
    dl_tensor *gt = dl_transpose(g, 0, 1);  /* [250, 320] */
    dl_tensor *ci = dl_narrow(rev, 0, 4999 - 249, 250);  /* 249 .. 0 */
    for (int i = 0; i < 250 * 320; i++) e[i] = (double)((i % 320) * 250 + 249 - i / 320);
    EXPECT("big strided select", dl_index_select(gt, 0, ci), SHAPE(250, 320), 2, DL_FLOAT32, e, 0);
    free(e);
    dl_tensor *vs[] = {big, b2, rev, g, gi, gt, ci};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
  }
  /* 0-dim source */
  dl_tensor *s = mk(VALS(5), NULL, 0, DL_FLOAT32);
  dl_tensor *z = mk(VALS(0), SHAPE(1), 1, DL_INT64);
  EXPECT("0-dim source", dl_index_select(s, 0, z), NULL, 0, DL_FLOAT32, VALS(5), 0);
  EXPECT_ERR("0-dim source, index 1", dl_index_select(s, 0, i32), DL_EINDEX,
             "index_select: a 0-dim tensor takes exactly 1 index, got 2");
  EXPECT_ERR("0-dim source, index 3", dl_index_select(s, 0, i0), DL_EINDEX,
             "index_select: index 3 out of range for dim 0 of size 1");
  /* errors */
  dl_tensor *neg = mk(VALS(0, -1), SHAPE(2), 1, DL_INT64);
  dl_tensor *big = mk(VALS(0, 4), SHAPE(2), 1, DL_INT32);
  dl_tensor *fi = mk(VALS(0), SHAPE(1), 1, DL_FLOAT32);
  dl_tensor *i2 = mk(VALS(0, 1), SHAPE(1, 2), 2, DL_INT64);
  dl_tensor *t5 = dl_zeros(SHAPE(5), 1, DL_FLOAT32);
  EXPECT_ERR("negative", dl_index_select(t5, 0, neg), DL_EINDEX,
             "index_select: index -1 out of range for dim 0 of size 5");
  EXPECT_ERR("too big", dl_index_select(t, 0, big), DL_EINDEX,
             "index_select: index 4 out of range for dim 0 of size 4");
  EXPECT_ERR("float index", dl_index_select(t, 0, fi), DL_EDTYPE,
             "index_select: expected an integer tensor (int64 or int32) for index, got float32");
  EXPECT_ERR("2-D index", dl_index_select(t, 0, i2), DL_ESHAPE,
             "index_select: index must be 0-dim or 1-D, got shape [1, 2]");
  EXPECT_ERR("bad dim", dl_index_select(t, 2, i64), DL_EINDEX, "index_select: dim 2 out of range");
  dl_tensor *vs[] = {t, i64, i32, i0, tt, sel, ev, wide, w2, ist, s, z, neg, big, fi, i2, t5, one1};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

static void test_gather_scatter(void) {
  dl_tensor *t = mk(VALS(1, 2, 3, 4), SHAPE(2, 2), 2, DL_FLOAT32);
  dl_tensor *ix = mk(VALS(0, 0, 1, 0), SHAPE(2, 2), 2, DL_INT64);
  dl_tensor *ix0 = mk(VALS(1, 0), SHAPE(1, 2), 2, DL_INT64);
  EXPECT("gather dim 1", dl_gather(t, 1, ix), SHAPE(2, 2), 2, DL_FLOAT32, VALS(1, 1, 4, 3), 0);
  EXPECT("gather dim 0", dl_gather(t, 0, ix0), SHAPE(1, 2), 2, DL_FLOAT32, VALS(3, 2), 0);
  dl_tensor *tt = dl_transpose(t, 0, 1);  /* [[1, 3], [2, 4]] */
  EXPECT("gather transposed", dl_gather(tt, -1, ix), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(1, 1, 4, 2), 0);
  dl_tensor *t23 = mk(VALS(1, 2, 3, 4, 5, 6), SHAPE(2, 3), 2, DL_INT64);
  dl_tensor *ic = mk(VALS(2, 0), SHAPE(2, 1), 2, DL_INT32);
  EXPECT("gather smaller index", dl_gather(t23, 1, ic), SHAPE(2, 1), 2, DL_INT64, VALS(3, 4), 0);
  dl_tensor *s = mk(VALS(5), NULL, 0, DL_FLOAT64), *z = mk(VALS(0), NULL, 0, DL_INT64);
  EXPECT("gather 0-dim", dl_gather(s, 0, z), NULL, 0, DL_FLOAT64, VALS(5), 0);
  dl_tensor *i31 = dl_zeros(SHAPE(3, 1), 2, DL_INT64), *i1 = dl_zeros(SHAPE(2), 1, DL_INT64);
  dl_tensor *bad = mk(VALS(0, 2, 1, 0), SHAPE(2, 2), 2, DL_INT64);
  EXPECT_ERR("gather shape", dl_gather(t23, 1, i31), DL_ESHAPE,
             "gather: index shape [3, 1] exceeds input shape [2, 3] at dim 0 (3 > 2)");
  EXPECT_ERR("gather ndim", dl_gather(t, 1, i1), DL_ESHAPE,
             "gather: index (shape [2]) must have as many dims as input (shape [2, 2])");
  EXPECT_ERR("gather range", dl_gather(t, 1, bad), DL_EINDEX,
             "gather: index 2 out of range for dim 1 of size 2");

  /* scatter, torch docs' examples */
  dl_tensor *src = dl_arange(1, 11, 1, DL_FLOAT32), *src2 = dl_view(src, SHAPE(2, 5), 2);
  dl_tensor *z35 = dl_zeros(SHAPE(3, 5), 2, DL_FLOAT32);
  dl_tensor *si = mk(VALS(0, 1, 2, 0), SHAPE(1, 4), 2, DL_INT64);
  EXPECT("scatter dim 0", dl_scatter(z35, 0, si, src2, 0), SHAPE(3, 5), 2, DL_FLOAT32,
         VALS(1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0), 0);
  dl_tensor *z25 = dl_zeros(SHAPE(2, 5), 2, DL_FLOAT32);
  dl_tensor *si1 = mk(VALS(0, 1, 2, 0, 1, 4), SHAPE(2, 3), 2, DL_INT64);
  EXPECT("scatter dim 1", dl_scatter(z25, 1, si1, src2, 0), SHAPE(2, 5), 2, DL_FLOAT32,
         VALS(1, 2, 3, 0, 0, 6, 7, 0, 0, 8), 0);
  dl_tensor *ones = dl_full(SHAPE(2, 5), 2, DL_FLOAT32, 1);
  dl_tensor *sa = mk(VALS(0, 1, 2, 0, 0, 1, 2, 0, 0, 2), SHAPE(2, 5), 2, DL_INT64);
  EXPECT("scatter_add", dl_scatter(z35, 0, sa, ones, 1), SHAPE(3, 5), 2, DL_FLOAT32,
         VALS(1, 0, 1, 2, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1), 0);
  dl_tensor *onesi = dl_full(SHAPE(2, 5), 2, DL_INT64, 1), *zi = dl_zeros(SHAPE(3, 5), 2, DL_INT64);
  EXPECT("scatter_add int", dl_scatter(zi, 0, sa, onesi, 1), SHAPE(3, 5), 2, DL_INT64,
         VALS(1, 0, 1, 2, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1), 0);
  dl_tensor *hz = dl_zeros(SHAPE(3, 5), 2, DL_FLOAT16), *ho = dl_full(SHAPE(2, 5), 2, DL_FLOAT16, 1);
  EXPECT("scatter_add half", dl_scatter(hz, 0, sa, ho, 1), SHAPE(3, 5), 2, DL_FLOAT16,
         VALS(1, 0, 1, 2, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1), 0);
  dl_tensor *bz = dl_zeros(SHAPE(3), 1, DL_BOOL), *bs = mk(VALS(1, 0), SHAPE(2), 1, DL_BOOL);
  dl_tensor *b00 = mk(VALS(0, 0), SHAPE(2), 1, DL_INT64);
  EXPECT("scatter_add bool", dl_scatter(bz, 0, b00, bs, 1), SHAPE(3), 1, DL_BOOL, VALS(1, 0, 0), 0);
  /* a Lua number as src scatters the value */
  dl_tensor *val = dl_scalar(7, 1), *z23 = dl_zeros(SHAPE(2, 3), 2, DL_FLOAT32);
  dl_tensor *iv = mk(VALS(0, 2), SHAPE(2, 1), 2, DL_INT64);
  EXPECT("scatter value", dl_scatter(z23, 1, iv, val, 0), SHAPE(2, 3), 2, DL_FLOAT32,
         VALS(7, 0, 0, 0, 0, 7), 0);
  CHECK(dl_scatter_(z23, 1, iv, val, 1) == 0, "scatter_ value add");
  EXPECT("scatter_ in place", (dl_tensor_retain(z23), z23), SHAPE(2, 3), 2, DL_FLOAT32,
         VALS(7, 0, 0, 0, 0, 7), 0);
  /* the index is the tensor written: it is read as it was */
  dl_tensor *self = mk(VALS(1, 0), SHAPE(2), 1, DL_INT64), *s59 = mk(VALS(5, 9), SHAPE(2), 1, DL_INT64);
  CHECK(dl_scatter_(self, 0, self, s59, 0) == 0, "scatter_ self index: %s", dl_last_error());
  EXPECT("scatter_ self index", (dl_tensor_retain(self), self), SHAPE(2), 1, DL_INT64, VALS(9, 5), 0);
  /* errors leave the tensor as it was */
  dl_tensor *one35 = dl_full(SHAPE(3, 5), 2, DL_FLOAT32, 1);
  dl_tensor *sbad = mk(VALS(0, 3), SHAPE(1, 2), 2, DL_INT64);
  EXPECT_RC_ERR("scatter_ range", dl_scatter_(one35, 0, sbad, src2, 0), DL_EINDEX,
                "scatter_: index 3 out of range for dim 0 of size 3");
  EXPECT("unchanged", (dl_tensor_retain(one35), one35), SHAPE(3, 5), 2, DL_FLOAT32,
         VALS(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1), 0);
  dl_tensor *s64 = dl_zeros(SHAPE(2, 5), 2, DL_FLOAT64);
  EXPECT_RC_ERR("scatter_ dtype", dl_scatter_(one35, 0, si, s64, 0), DL_EDTYPE,
                "scatter_: dtypes float32 and float64 do not match");
  EXPECT_RC_ERR("scatter_ reduce", dl_scatter_(one35, 0, si, src2, 2), DL_EINVAL,
                "scatter_: reduce must be 0 (replace) or 1 (add)");
  dl_tensor *wide = dl_zeros(SHAPE(1, 6), 2, DL_INT64);
  EXPECT_RC_ERR("scatter_ src shape", dl_scatter_(one35, 0, wide, src2, 0), DL_ESHAPE,
                "scatter_: index shape [1, 6] exceeds src shape [2, 5] at dim 1 (6 > 5)");
  dl_tensor *tall = dl_zeros(SHAPE(2, 2), 2, DL_INT64), *z32 = dl_zeros(SHAPE(3, 1), 2, DL_FLOAT32);
  EXPECT_RC_ERR("scatter_ self shape", dl_scatter_(z32, 0, tall, src2, 0), DL_ESHAPE,
                "scatter_: index shape [2, 2] exceeds self shape [3, 1] at dim 1 (2 > 1)");
  EXPECT_ERR("scatter index dtype", dl_scatter(one35, 0, src2, src2, 0), DL_EDTYPE,
             "scatter: expected an integer tensor (int64 or int32) for index, got float32");
  dl_tensor *vs[] = {t, ix, ix0, tt, t23, ic, s, z, i31, i1, bad, src, src2, z35, si, z25, si1,
                     ones, sa, onesi, zi, hz, ho, bz, bs, b00, val, z23, iv, self, s59, one35,
                     sbad, s64, wide, tall, z32};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

static void test_masks(void) {
  dl_tensor *t = mk(VALS(1, 2, 3, 4, 5, 6), SHAPE(2, 3), 2, DL_FLOAT32);
  dl_tensor *m = mk(VALS(1, 0, 1), SHAPE(3), 1, DL_BOOL);
  EXPECT("masked_fill bcast mask", dl_masked_fill(t, m, -1), SHAPE(2, 3), 2, DL_FLOAT32,
         VALS(-1, 2, -1, -1, 5, -1), 0);
  dl_tensor *v = mk(VALS(1, 2, 3), SHAPE(3), 1, DL_INT32);
  dl_tensor *m2 = mk(VALS(1, 0, 0, 0, 0, 1), SHAPE(2, 3), 2, DL_BOOL);
  EXPECT("masked_fill bcast self", dl_masked_fill(v, m2, 0), SHAPE(2, 3), 2, DL_INT32,
         VALS(0, 2, 3, 1, 2, 0), 0);
  EXPECT_RC_ERR("masked_fill_ bcast", dl_masked_fill_(v, m2, 0), DL_ESHAPE,
                "masked_fill_: shape [2, 3] cannot be broadcast to [3]");
  dl_tensor *mu = dl_zeros(SHAPE(3), 1, DL_UINT8);
  EXPECT_ERR("masked_fill uint8 mask", dl_masked_fill(t, mu, 0), DL_EDTYPE,
             "masked_fill: expected a bool tensor for mask, got uint8");
  CHECK(dl_masked_fill_(t, m, 9.5) == 0, "masked_fill_: %s", dl_last_error());
  EXPECT("masked_fill_", (dl_tensor_retain(t), t), SHAPE(2, 3), 2, DL_FLOAT32,
         VALS(9.5, 2, 9.5, 9.5, 5, 9.5), 0);
  dl_tensor *b = mk(VALS(1, 0, 1), SHAPE(3), 1, DL_BOOL);
  CHECK(dl_masked_fill_(b, b, 0) == 0, "masked_fill_ self mask");
  EXPECT("masked_fill_ self mask", (dl_tensor_retain(b), b), SHAPE(3), 1, DL_BOOL, VALS(0, 0, 0), 0);
  dl_tensor *h = dl_zeros(SHAPE(3), 1, DL_BFLOAT16);
  EXPECT("masked_fill bf16", dl_masked_fill(h, m, 2.5), SHAPE(3), 1, DL_BFLOAT16, VALS(2.5, 0, 2.5), 0);

  dl_tensor *q = mk(VALS(1, 2, 3, 4), SHAPE(2, 2), 2, DL_INT64);
  dl_tensor *qm = mk(VALS(1, 0, 0, 1), SHAPE(2, 2), 2, DL_BOOL);
  dl_tensor *qr = mk(VALS(0, 1), SHAPE(2), 1, DL_BOOL);
  EXPECT("masked_select", dl_masked_select(q, qm), SHAPE(2), 1, DL_INT64, VALS(1, 4), 0);
  EXPECT("masked_select bcast", dl_masked_select(q, qr), SHAPE(2), 1, DL_INT64, VALS(2, 4), 0);
  dl_tensor *qt = dl_transpose(q, 0, 1);  /* [[1, 3], [2, 4]] */
  dl_tensor *qm3 = mk(VALS(1, 1, 0, 1), SHAPE(2, 2), 2, DL_BOOL);
  EXPECT("masked_select transposed", dl_masked_select(qt, qm3), SHAPE(3), 1, DL_INT64,
         VALS(1, 3, 4), 0);
  dl_tensor *none = dl_zeros(SHAPE(2, 2), 2, DL_BOOL);
  EXPECT("masked_select none", dl_masked_select(q, none), SHAPE(0), 1, DL_INT64, NULL, 0);
  dl_tensor *s = mk(VALS(5), NULL, 0, DL_FLOAT32), *st = mk(VALS(1), NULL, 0, DL_BOOL);
  EXPECT("masked_select 0-dim", dl_masked_select(s, st), SHAPE(1), 1, DL_FLOAT32, VALS(5), 0);
  dl_tensor *m3 = dl_zeros(SHAPE(3), 1, DL_BOOL);
  EXPECT_ERR("masked_select bcast", dl_masked_select(q, m3), DL_ESHAPE,
             "masked_select: shapes [2, 2] and [3] cannot be broadcast");
  dl_tensor *vs[] = {t, m, v, m2, mu, b, h, q, qm, qr, qt, qm3, none, s, st, m3};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

static void test_join(void) {
  dl_tensor *a = mk(VALS(1, 2, 3, 4), SHAPE(2, 2), 2, DL_INT64);
  dl_tensor *b = mk(VALS(5, 6), SHAPE(1, 2), 2, DL_INT64);
  dl_tensor *c = mk(VALS(7, 8), SHAPE(2, 1), 2, DL_FLOAT32);
  dl_tensor *e = dl_zeros(SHAPE(0), 1, DL_FLOAT64);
  dl_tensor *at = dl_transpose(a, 0, 1);
  EXPECT("cat dim 0", dl_cat((dl_tensor *[]){a, b}, 2, 0), SHAPE(3, 2), 2, DL_INT64,
         VALS(1, 2, 3, 4, 5, 6), 0);
  EXPECT("cat dim -1 promotes", dl_cat((dl_tensor *[]){a, c}, 2, -1), SHAPE(2, 3), 2,
         DL_FLOAT32, VALS(1, 2, 7, 3, 4, 8), 0);
  EXPECT("cat skips legacy empty", dl_cat((dl_tensor *[]){e, at, e, b}, 4, 0), SHAPE(3, 2), 2,
         DL_FLOAT64, VALS(1, 3, 2, 4, 5, 6), 0);
  EXPECT("cat all empty", dl_cat((dl_tensor *[]){e, e}, 2, 3), SHAPE(0), 1, DL_FLOAT64, NULL, 0);
  EXPECT("cat one", dl_cat(&a, 1, 1), SHAPE(2, 2), 2, DL_INT64, VALS(1, 2, 3, 4), 0);
  dl_tensor *s = mk(VALS(1), NULL, 0, DL_INT64), *v = dl_zeros(SHAPE(2), 1, DL_INT64);
  dl_tensor *w = dl_zeros(SHAPE(1, 3), 2, DL_INT64);
  EXPECT_ERR("cat 0-dim", dl_cat((dl_tensor *[]){a, s}, 2, 0), DL_ESHAPE,
             "cat: tensor 1 is 0-dim and cannot be concatenated");
  EXPECT_ERR("cat ndim", dl_cat((dl_tensor *[]){a, v}, 2, 0), DL_ESHAPE,
             "cat: tensor 1 has 1 dims (shape [2]) but tensor 0 has 2 (shape [2, 2])");
  EXPECT_ERR("cat shapes", dl_cat((dl_tensor *[]){a, w}, 2, 0), DL_ESHAPE,
             "cat: shapes [2, 2] (tensor 0) and [1, 3] (tensor 1) must match except in dim 0 (dim 1: 2 vs 3)");
  EXPECT_ERR("cat dim", dl_cat((dl_tensor *[]){a, b}, 2, 2), DL_EINDEX, "cat: dim 2 out of range");
  EXPECT_ERR("cat none", dl_cat(NULL, 0, 0), DL_EINVAL, "cat: expected a non-empty list of tensors");
  EXPECT_ERR("cat NULL entry", dl_cat((dl_tensor *[]){a, NULL}, 2, 0), DL_EINVAL, "cat: argument tensor is nil");

  dl_tensor *p = mk(VALS(1, 2), SHAPE(2), 1, DL_FLOAT32), *q = mk(VALS(3, 4), SHAPE(2), 1, DL_INT32);
  EXPECT("stack 0", dl_stack((dl_tensor *[]){p, q}, 2, 0), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(1, 2, 3, 4), 0);
  EXPECT("stack -1", dl_stack((dl_tensor *[]){p, q}, 2, -1), SHAPE(2, 2), 2, DL_FLOAT32,
         VALS(1, 3, 2, 4), 0);
  EXPECT("stack 2-D dim 1", dl_stack((dl_tensor *[]){a, at, a}, 3, 1), SHAPE(2, 3, 2), 3, DL_INT64,
         VALS(1, 2, 1, 3, 1, 2, 3, 4, 2, 4, 3, 4), 0);
  EXPECT("stack 0-dim", dl_stack((dl_tensor *[]){s, s}, 2, 0), SHAPE(2), 1, DL_INT64, VALS(1, 1), 0);
  dl_tensor *r = dl_zeros(SHAPE(3), 1, DL_FLOAT32);
  EXPECT_ERR("stack shapes", dl_stack((dl_tensor *[]){p, r}, 2, 0), DL_ESHAPE,
             "stack: all tensors must have the same shape, got [2] (tensor 0) and [3] (tensor 1)");
  EXPECT_ERR("stack dim", dl_stack((dl_tensor *[]){p, q}, 2, 2), DL_EINDEX,
             "stack: dim 2 out of range for a 1-dim tensor (expected -2 to 1)");
  dl_tensor *vs[] = {a, b, c, e, at, s, v, w, p, q, r};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

static void test_one_hot(void) {
  dl_tensor *t = mk(VALS(0, 2, 1), SHAPE(3), 1, DL_INT64);
  EXPECT("one_hot infer", dl_one_hot(t, -1), SHAPE(3, 3), 2, DL_INT64,
         VALS(1, 0, 0, 0, 0, 1, 0, 1, 0), 0);
  EXPECT("one_hot 4", dl_one_hot(t, 4), SHAPE(3, 4), 2, DL_INT64,
         VALS(1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0), 0);
  dl_tensor *t2 = mk(VALS(1, 0), SHAPE(2, 1), 2, DL_INT64);
  EXPECT("one_hot 2-D", dl_one_hot(t2, 2), SHAPE(2, 1, 2), 3, DL_INT64, VALS(0, 1, 1, 0), 0);
  dl_tensor *e = dl_zeros(SHAPE(0), 1, DL_INT64);
  EXPECT("one_hot empty", dl_one_hot(e, 2), SHAPE(0, 2), 2, DL_INT64, NULL, 0);
  EXPECT_ERR("one_hot range", dl_one_hot(t, 2), DL_EINDEX,
             "one_hot: class value 2 out of range for num_classes 2");
  dl_tensor *n = mk(VALS(0, -1), SHAPE(2), 1, DL_INT64);
  EXPECT_ERR("one_hot negative", dl_one_hot(n, 3), DL_EINDEX,
             "one_hot: class value -1 out of range for num_classes 3");
  EXPECT_ERR("one_hot empty infer", dl_one_hot(e, -1), DL_EINVAL,
             "one_hot: cannot infer num_classes from an empty tensor");
  dl_tensor *f = dl_zeros(SHAPE(2), 1, DL_FLOAT32);
  EXPECT_ERR("one_hot float", dl_one_hot(f, 3), DL_EDTYPE, "one_hot: expected an integer tensor");
  EXPECT_ERR("one_hot classes", dl_one_hot(t, -2), DL_EINVAL, "one_hot: num_classes must be");
  dl_tensor *vs[] = {t, t2, e, n, f};
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) dl_tensor_release(vs[i]);
}

int main(int argc, char **argv) {
  int timing = !(argc > 1 && !strcmp(argv[1], "--no-timing"));
  test_matmul();
  test_matmul_errors();
  test_addmm_outer();
  /* again on one thread: the batch loop and int kernel run inline */
  int threads = dl_get_num_threads();
  dl_set_num_threads(1);
  test_matmul();
  dl_set_num_threads(threads < 2 ? 2 : threads);
  test_index_select();
  test_gather_scatter();
  test_masks();
  test_join();
  test_one_hot();
  dl_set_num_threads(threads);
  if (timing) time_matmul();
  return check_report("test_linalg_index");
}
