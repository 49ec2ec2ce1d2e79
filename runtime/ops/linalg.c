/*
** linalg.c -- matrix products (matmul, mm, bmm, addmm, dot, outer): float32
** and float64 through OpenBLAS, integers through a plain kernel, bfloat16 and
** float16 computed in float32 and rounded once at the end.
*/
#include <cblas.h>
#include <dnnl.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>

#include "ops/forward.h"
#include "ops/linalg.h"

/* The largest size, leading dim or increment one BLAS call takes. */

/* OpenBLAS runs a gemm of at most 4 * 65536 multiply-adds on the calling
** thread; below this (with margin) batches can run on our pool without two
** thread pools meeting. */
enum { SMALL_MNK = 65536 };

static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

/* -- Plan ------------------------------------------------------------------ */

/* How BLAS can read a rows x cols matrix with strides (s0, s1): as is
** (row-major), transposed (column-major), or not at all (-1: copy it).
** Sizes of 1 leave their stride free, as PyTorch's addmm checks do. */
static int blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1,
                       int *tr, int64_t *ld) {
  if ((cols <= 1 || s1 == 1) && (rows <= 1 || s0 >= max1(cols))) {
    *tr = CblasNoTrans;
    *ld = rows <= 1 ? max1(cols) : s0;
  } else if ((rows <= 1 || s0 == 1) && (cols <= 1 || s1 >= max1(rows))) {
    *tr = CblasTrans;
    *ld = cols <= 1 ? max1(rows) : s1;
  } else {
    return -1;
  }
  return *ld <= BLAS_MAX ? 0 : -1;
}

DL_HIDDEN int plan_layouts(mm_plan *p) {
  return blas_layout(p->m, p->k, p->as0, p->as1, &p->ta, &p->lda) ||
         blas_layout(p->k, p->n, p->bs0, p->bs1, &p->tb, &p->ldb);
}

/* Fills the plan from the (already converted) operands; bshape holds the
** broadcast batch shape of nb dims. */
static void plan_fill(mm_plan *p, const dl_tensor *a, const dl_tensor *b,
                      char *c, const int64_t *bshape, int nb) {
  int na = a->ndim, nbd = b->ndim;
  p->dtype = a->dtype;
  p->nb = nb;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - (na - 2)), ib = i - (nb - (nbd - 2));
    p->bshape[i] = bshape[i];
    p->ast[i] = ia >= 0 && a->shape[ia] != 1 ? a->stride[ia] : 0;
    p->bst[i] = ib >= 0 && b->shape[ib] != 1 ? b->stride[ib] : 0;
  }
  p->nbatch = shape_numel(bshape, nb);
  p->m = a->shape[na - 2], p->k = a->shape[na - 1], p->n = b->shape[nbd - 1];
  p->as0 = a->stride[na - 2], p->as1 = a->stride[na - 1];
  p->bs0 = b->stride[nbd - 2], p->bs1 = b->stride[nbd - 1];
  p->a = tensor_first(a), p->b = tensor_first(b), p->c = c;
}

static void batch_offsets(const mm_plan *p, int64_t i, int64_t *ao,
                          int64_t *bo) {
  int64_t oa = 0, ob = 0;
  for (int d = p->nb - 1; d >= 0; d--) {
    int64_t j = i % p->bshape[d];
    i /= p->bshape[d];
    oa += j * p->ast[d];
    ob += j * p->bst[d];
  }
  *ao = oa, *bo = ob;
}

/* -- BLAS path ------------------------------------------------------------- */

/* -- oneDNN's sgemm ----------------------------------------------------------- */

/* libgomp's (linked for oneDNN: Makefile); omp.h is GCC's only (make fuzz). */
extern void omp_set_num_threads(int n);

/* Products of at least this many multiply-adds go to oneDNN at one thread. */
#define ONEDNN_MIN_MNK (1 << 20)

/* Whether a float32 product runs in oneDNN's sgemm rather than OpenBLAS's,
** and with how many threads (0: OpenBLAS).  At one thread (a DDP rank,
** ddp.set_num_threads(1)) its AVX-512 kernels took a GPT step 10% faster
** (bench/RESULTS.md).  With more threads, by measurement at 2 threads
** (bench/RESULTS.md, issue 25): oneDNN scales where OpenBLAS gains little
** on products of many rows or a long reduction (a GPT's [2048, 176] x
** [176, 528]: 200-225 against 150-180 GFLOP/s, its weight gradients with k
** = 2048 likewise), while on a few rows OpenBLAS stays ahead (an MLP's
** [64, 1024] x [1024, 1024]^T: 107 against 67) -- so m >= 512 or k >= 2048.
** The rule is by shape alone, never by timing: the same product takes the
** same path in every run and on every rank, so exact resume and DDP equal
** to one process hold.  In a forked child (a loader worker) the parent's
** OpenMP team is gone and a parallel region would hang: one thread there.
** Small products (attention's per-head ones) measured as fast or faster in
** OpenBLAS.  DDPLUA_GEMM=openblas keeps every product in OpenBLAS. */
static int onednn_threads(int64_t m, int64_t n, int64_t k) {
  static int off = -1;  /* read once; a race only computes the same value */
  if (off < 0) {
    const char *env = getenv("DDPLUA_GEMM");
    off = env && strcmp(env, "openblas") == 0;
  }
  if (off || (double)m * (double)n * (double)k < ONEDNN_MIN_MNK) return 0;
  int t = parallel_threads();
  if (t == 1) return 1;
  if (threads_forked() || (m < 512 && k < 2048)) return 0;
  return t;
}

/* One product into c (m x n, row-major, ldc = n). */
static void blas_one(const mm_plan *p, const char *a, const char *b, char *c) {
  int f32 = p->dtype == DL_FLOAT32;
  blasint m = (blasint)p->m, n = (blasint)p->n, k = (blasint)p->k;
  blasint lda = (blasint)p->lda, ldb = (blasint)p->ldb;
  if (m == 1 || n == 1) {
    /* a matrix-vector product: gemv streams the matrix once, where gemm
    ** would pack it for nothing */
    const char *mat = b, *vec = a;
    CBLAS_TRANSPOSE t;
    blasint rows, cols, ld = ldb, inc = p->ta == CblasNoTrans ? 1 : lda, len = n;
    if (n == 1) {  /* y[m] = A x, x the one column of B */
      mat = a, vec = b, ld = lda, len = m;
      inc = p->tb == CblasNoTrans ? ldb : 1;
      t = p->ta;
      rows = t == CblasNoTrans ? m : k;
      cols = t == CblasNoTrans ? k : m;
    } else {  /* y[n] = B^T x, x the one row of A */
      t = p->tb == CblasNoTrans ? CblasTrans : CblasNoTrans;
      rows = t == CblasTrans ? k : n;
      cols = t == CblasTrans ? n : k;
    }
    /* some OpenBLAS versions scale y by beta = 0 as 0 * y, which keeps the
    ** NaNs an uninitialised buffer may hold */
    if (p->beta == 0) memset(c, 0, (size_t)len * (size_t)dl_dtype_sizes[p->dtype]);
    if (f32)
      cblas_sgemv(CblasRowMajor, t, rows, cols, (float)p->alpha,
                  (const float *)mat, ld, (const float *)vec, inc,
                  (float)p->beta, (float *)c, 1);
    else
      cblas_dgemv(CblasRowMajor, t, rows, cols, p->alpha, (const double *)mat,
                  ld, (const double *)vec, inc, p->beta, (double *)c, 1);
    return;
  }
  int dnn = f32 ? onednn_threads(m, n, k) : 0;
  if (dnn) {
    omp_set_num_threads(dnn);  /* this thread's OpenMP count (1: no team) */
    sigset_t mask;
    signals_hold_prof(&mask);
    dnnl_status_t st = dnnl_sgemm(p->ta == CblasNoTrans ? 'N' : 'T', p->tb == CblasNoTrans ? 'N' : 'T',
                                  m, n, k, (float)p->alpha, (const float *)a, lda,
                                  (const float *)b, ldb, (float)p->beta, (float *)c, n);
    signals_restore(&mask);
    if (st == dnnl_success) return;
    /* it refuses only arguments OpenBLAS takes too (it checks the same
    ** sizes and leading dimensions): fall through to OpenBLAS */
  }
  if (f32)
    cblas_sgemm(CblasRowMajor, p->ta, p->tb, m, n, k, (float)p->alpha,
                (const float *)a, lda, (const float *)b, ldb, (float)p->beta,
                (float *)c, n);
  else
    cblas_dgemm(CblasRowMajor, p->ta, p->tb, m, n, k, p->alpha,
                (const double *)a, lda, (const double *)b, ldb, p->beta,
                (double *)c, n);
}

static void blas_batches(void *ctx, int64_t b0, int64_t b1) {
  const mm_plan *p = ctx;
  int64_t es = dl_dtype_sizes[p->dtype];
  for (int64_t i = b0; i < b1; i++) {
    int64_t ao, bo;
    batch_offsets(p, i, &ao, &bo);
    blas_one(p, p->a + ao * es, p->b + bo * es, p->c + i * p->m * p->n * es);
  }
}

/* When B is the same matrix for every batch and A's batch dims continue its
** rows at one stride, the whole product is a single [nbatch*m, k] @ [k, n]
** gemm, which BLAS blocks and threads far better than many small ones. */
DL_HIDDEN void fold_batches(mm_plan *p) {
  if (p->nbatch <= 1 || p->ta != CblasNoTrans) return;
  for (int d = 0; d < p->nb; d++)
    if (p->bst[d] != 0) return;
  int64_t stride = 0, span = 0;
  for (int d = p->nb; d >= 0; d--) {  /* the row dim, then batch dims */
    int64_t size = d == p->nb ? p->m : p->bshape[d];
    int64_t st = d == p->nb ? p->as0 : p->ast[d];
    if (size == 1) continue;
    if (!span) {
      stride = st, span = st * size;
      if (stride < max1(p->k)) return;
    } else if (st != span) {
      return;
    } else {
      span *= size;
    }
  }
  int64_t rows = p->nbatch * p->m;
  if (rows > BLAS_MAX || stride > BLAS_MAX) return;
  p->m = rows, p->lda = stride, p->nbatch = 1, p->nb = 0;
}

/* Writes beta * out (or zeros): the whole product when k is 0. */
static void scale_out(const mm_plan *p) {
  int64_t total = p->nbatch * p->m * p->n;
  if (p->beta == 0) {
    memset(p->c, 0, (size_t)total * (size_t)dl_dtype_sizes[p->dtype]);
  } else if (p->dtype == DL_FLOAT32) {
    float *c = (float *)p->c, beta = (float)p->beta;
    for (int64_t i = 0; i < total; i++) c[i] *= beta;
  } else {
    double *c = (double *)p->c;
    for (int64_t i = 0; i < total; i++) c[i] *= p->beta;
  }
}

static int run_blas(const char *op, mm_plan *p) {
  if (p->k == 0) {
    scale_out(p);
    return 0;
  }
  int64_t big = p->m > p->n ? p->m : p->n;
  if (p->k > big) big = p->k;
  /* after blas_ready the layouts only fail for sizes BLAS cannot take */
  if (big > BLAS_MAX || plan_layouts(p))
    return dl_err(EM_MM_BLAS_SIZE, op, (long long)big, (long long)BLAS_MAX);
  fold_batches(p);
  int64_t mnk = p->m * p->n * p->k;
  if (p->nbatch > 1 && p->m > 1 && p->n > 1 && mnk <= SMALL_MNK &&
      parallel_threads() > 1)
    parallel_for(p->nbatch, max1(SMALL_MNK / mnk), blas_batches, p);
  else
    blas_batches(p, 0, p->nbatch);
  return 0;
}

/* -- Integer path ---------------------------------------------------------- */

/* alpha and beta as integers: PyTorch truncates them (Scalar::to<int>). */
static int64_t int_scalar(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return (int64_t)v;
}

/* Rows [i0, i1) of one batch in ikj order, so B and out stream by rows.
** Arithmetic is unsigned: overflow wraps as in PyTorch, never UB. */
#define INT_MM(NAME, T, U)                                                   \
  static void NAME(const mm_plan *p, const char *a_, const char *b_,        \
                   char *c_, int64_t i0, int64_t i1) {                      \
    const T *a = (const T *)a_, *b = (const T *)b_;                         \
    const U alpha = (U)int_scalar(p->alpha), beta = (U)int_scalar(p->beta); \
    const int64_t n = p->n, bs1 = p->bs1;                                   \
    for (int64_t i = i0; i < i1; i++) {                                     \
      T *row = (T *)c_ + i * n;                                             \
      if (beta == 0) {                                                      \
        memset(row, 0, (size_t)n * sizeof(T));                              \
      } else if (beta != 1) {                                               \
        for (int64_t j = 0; j < n; j++) row[j] = (T)((U)row[j] * beta);     \
      }                                                                     \
      for (int64_t q = 0; q < p->k; q++) {                                  \
        U x = (U)a[i * p->as0 + q * p->as1] * alpha;                        \
        if (!x) continue;                                                   \
        const T *brow = b + q * p->bs0;                                     \
        if (bs1 == 1) {                                                     \
          for (int64_t j = 0; j < n; j++)                                   \
            row[j] = (T)((U)row[j] + x * (U)brow[j]);                       \
        } else {                                                            \
          for (int64_t j = 0; j < n; j++)                                   \
            row[j] = (T)((U)row[j] + x * (U)brow[j * bs1]);                 \
        }                                                                   \
      }                                                                     \
    }                                                                       \
  }
INT_MM(mm_i32, int32_t, uint32_t)
INT_MM(mm_i64, int64_t, uint64_t)
INT_MM(mm_u8, uint8_t, uint32_t)

/* Rows [r0, r1) of all batches, rows of consecutive batches back to back. */
static void int_rows(void *ctx, int64_t r0, int64_t r1) {
  const mm_plan *p = ctx;
  int64_t es = dl_dtype_sizes[p->dtype];
  while (r0 < r1) {
    int64_t bi = r0 / p->m, i0 = r0 % p->m;
    int64_t i1 = p->m < i0 + (r1 - r0) ? p->m : i0 + (r1 - r0);
    int64_t ao, bo;
    batch_offsets(p, bi, &ao, &bo);
    const char *a = p->a + ao * es, *b = p->b + bo * es;
    char *c = p->c + bi * p->m * p->n * es;
    if (p->dtype == DL_INT32) mm_i32(p, a, b, c, i0, i1);
    else if (p->dtype == DL_INT64) mm_i64(p, a, b, c, i0, i1);
    else mm_u8(p, a, b, c, i0, i1);
    r0 += i1 - i0;
  }
}

/* -- Driver ---------------------------------------------------------------- */

/* A contiguous copy of t's matrices; batch dims that were broadcast (stride
** 0) stay at size 1, so an expanded operand is not copied once per batch. */
static dl_tensor *compact(const dl_tensor *t) {
  int64_t s[DL_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++)
    s[i] = i < t->ndim - 2 && t->stride[i] == 0 ? 1 : t->shape[i];
  dl_tensor *v = tensor_alias(t, s, t->stride, t->ndim, t->offset);
  dl_tensor *r = v ? fw_clone(v) : NULL;
  dl_tensor_release(v);
  return r;
}

/* Replaces *t by a compact copy when BLAS cannot read its matrices. */
static int blas_ready(dl_tensor **t) {
  const dl_tensor *x = *t;
  int tr;
  int64_t ld;
  if (!blas_layout(x->shape[x->ndim - 2], x->shape[x->ndim - 1],
                   x->stride[x->ndim - 2], x->stride[x->ndim - 1], &tr, &ld))
    return 0;
  dl_tensor *c = compact(x);
  if (!c) return -1;
  dl_tensor_release(*t);
  *t = c;
  return 0;
}

static int check_same_dtype(const char *op, const dl_tensor *a,
                            const dl_tensor *b) {
  if (a->dtype != b->dtype)
    return dl_err(EM_DTYPE_MISMATCH, op, fmt_dtype(a->dtype), fmt_dtype(b->dtype));
  if (a->dtype == DL_BOOL) return dl_err(EM_DTYPE_UNSUP, op, fmt_dtype(a->dtype));
  return 0;
}

/* alpha * (a @ b) + beta * c for a [..., m, k] and b [..., k, n], both at
** least 2-D with batch dims broadcast.  c (NULL, or ignored when beta is 0,
** NaNs included) must broadcast to the result; the caller checks that.  ua
** and ub are the caller's operands, named in messages; drop_m / drop_n
** remove the dims matmul added to a vector.  Returns a new tensor, or NULL
** with the error set. */
static dl_tensor *matmul_nd(const char *op, const dl_tensor *a,
                            const dl_tensor *b, const dl_tensor *c,
                            double beta, double alpha, const dl_tensor *ua,
                            const dl_tensor *ub, int drop_m, int drop_n) {
  if (check_same_dtype(op, a, b) || (c && check_same_dtype(op, c, a)))
    return NULL;
  int na = a->ndim, nb = b->ndim, dt = a->dtype;
  int64_t k = a->shape[na - 1], kb = b->shape[nb - 2];
  if (k != kb)
    return dl_errp(EM_MM_SHAPE, op, fmt_tshape(ua), fmt_tshape(ub),
                   (long long)k, (long long)kb);
  int64_t bshape[DL_MAX_DIMS], rshape[DL_MAX_DIMS];
  int nbt = na > nb ? na - 2 : nb - 2, rn = 0;
  for (int i = 0; i < nbt; i++) {
    int ia = i - (nbt - (na - 2)), ib = i - (nbt - (nb - 2));
    int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return dl_errp(EM_MM_BATCH, op, fmt_tshape(ua), fmt_tshape(ub),
                     (long long)sa, (long long)sb);
    bshape[i] = rshape[rn++] = sa == 1 ? sb : sa;
  }
  if (!drop_m) rshape[rn++] = a->shape[na - 2];
  if (!drop_n) rshape[rn++] = b->shape[nb - 1];

  /* a device whose kernels take the half types (cuBLAS) gets them as they
  ** are (float32 accumulation, one rounding: as here) */
  int dev = a->storage->device;
  const dl_device *d = device_get(op, dev);
  if (!d) return NULL;
  int kd = is_half_dtype(dt) && !d->half_native ? DL_FLOAT32 : dt;
  dl_tensor *out = tensor_new_on(dev, dt, rshape, rn), *work = NULL, *ca = NULL, *cb = NULL;
  if (!out) return NULL;
  if (kd == dt) {
    dl_tensor_retain(out);
    work = out;
  } else if (!(work = tensor_new_on(dev, kd, rshape, rn))) {
    goto fail;
  }
  int use_c = c && beta != 0;
  if (use_c && fw_copy_(work, c)) goto fail;
  if (!(ca = as_dtype(a, kd)) || !(cb = as_dtype(b, kd))) goto fail;
  int blas = kd == DL_FLOAT32 || kd == DL_FLOAT64 || is_half_dtype(kd);
  if (blas && k && dl_tensor_numel(out) && (blas_ready(&ca) || blas_ready(&cb)))
    goto fail;

  mm_plan p;
  memset(&p, 0, sizeof p);
  plan_fill(&p, ca, cb, tensor_first(work), bshape, nbt);
  p.alpha = alpha, p.beta = use_c ? beta : 0;
  if (p.nbatch && p.m && p.n && d->matmul(op, dev, &p, blas)) goto fail;
  if (work != out && fw_copy_(out, work)) goto fail;
  dl_tensor_release(work);
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  return out;
fail:
  dl_tensor_release(work);
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(out);
  return NULL;
}

/* -- Dot ------------------------------------------------------------------- */

#define INT_DOT(NAME, T, U)                                                  \
  static void NAME(const char *a, int64_t sa, const char *b, int64_t sb,    \
                   int64_t n, char *out) {                                  \
    U acc = 0;                                                              \
    for (int64_t i = 0; i < n; i++)                                         \
      acc += (U)((const T *)a)[i * sa] * (U)((const T *)b)[i * sb];          \
    *(T *)out = (T)acc;                                                     \
  }
INT_DOT(dot_i32, int32_t, uint32_t)
INT_DOT(dot_i64, int64_t, uint64_t)
INT_DOT(dot_u8, uint8_t, uint32_t)

/* BLAS increments must be positive (a negative one walks backwards from the
** far end) and fit blasint; otherwise copy.  */
static int blas_vector(dl_tensor **t) {
  int64_t s = (*t)->stride[0];
  if ((*t)->shape[0] <= 1 || (s >= 1 && s <= BLAS_MAX)) return 0;
  dl_tensor *c = fw_clone(*t);
  if (!c) return -1;
  dl_tensor_release(*t);
  *t = c;
  return 0;
}

static dl_tensor *as_matrix(const dl_tensor *t, int col);
static dl_tensor *matmul_nd(const char *op, const dl_tensor *a, const dl_tensor *b,
                            const dl_tensor *c, double beta, double alpha, const dl_tensor *ua,
                            const dl_tensor *ub, int drop_m, int drop_n);

/* A row [1, n] times a column [n, 1] with both dims dropped: the product
** path (or zeros for n = 0), for devices without a dot kernel of their own. */
DL_HIDDEN dl_tensor *dot_by_matmul(const char *op, const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *ra = as_matrix(a, 0), *cb = ra ? as_matrix(b, 1) : NULL, *r = NULL;
  if (cb) r = matmul_nd(op, ra, cb, NULL, 0, 1, a, b, 1, 1);
  dl_tensor_release(ra);
  dl_tensor_release(cb);
  return r;
}

/* a . b for 1-D a and b (checked by the caller) as a 0-dim tensor. */
static dl_tensor *dot_impl(const char *op, const dl_tensor *a,
                           const dl_tensor *b) {
  if (check_same_dtype(op, a, b)) return NULL;
  int64_t n = a->shape[0];
  if (n != b->shape[0])
    return dl_errp(EM_MM_SHAPE, op, fmt_tshape(a), fmt_tshape(b), (long long)n,
                   (long long)b->shape[0]);
  if (n > BLAS_MAX)
    return dl_errp(EM_MM_BLAS_SIZE, op, (long long)n, (long long)BLAS_MAX);
  const dl_device *d = device_of(op, a);
  return d ? d->dot(op, a, b) : NULL;
}

/* The CPU's kernel (core/device.h): BLAS for floats, a loop for integers. */
DL_HIDDEN dl_tensor *cpu_dot(const char *op, const dl_tensor *a, const dl_tensor *b) {
  (void)op;
  int64_t n = a->shape[0];
  int dt = a->dtype, kd = is_half_dtype(dt) ? DL_FLOAT32 : dt;
  dl_tensor *ca = as_dtype(a, kd), *cb = ca ? as_dtype(b, kd) : NULL;
  dl_tensor *r = NULL, *out = NULL;
  int blas = kd == DL_FLOAT32 || kd == DL_FLOAT64;
  if (!cb || (blas && (blas_vector(&ca) || blas_vector(&cb)))) goto done;
  if (!(r = tensor_new(kd, NULL, 0))) goto done;
  const char *pa = tensor_first(ca), *pb = tensor_first(cb);
  int64_t sa = n > 1 ? ca->stride[0] : 1, sb = n > 1 ? cb->stride[0] : 1;
  char *pr = tensor_first(r);
  switch (kd) {
    case DL_FLOAT32:
      *(float *)pr = n ? cblas_sdot((blasint)n, (const float *)pa, (blasint)sa,
                                    (const float *)pb, (blasint)sb) : 0.0f;
      break;
    case DL_FLOAT64:
      *(double *)pr = n ? cblas_ddot((blasint)n, (const double *)pa, (blasint)sa,
                                     (const double *)pb, (blasint)sb) : 0.0;
      break;
    case DL_INT32: dot_i32(pa, sa, pb, sb, n, pr); break;
    case DL_INT64: dot_i64(pa, sa, pb, sb, n, pr); break;
    default: dot_u8(pa, sa, pb, sb, n, pr); break;
  }
  if (kd == dt) {
    out = r;
    r = NULL;
  } else if ((out = tensor_new(dt, NULL, 0)) && fw_copy_(out, r)) {
    dl_tensor_release(out);
    out = NULL;
  }
done:
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(r);
  return out;
}

/* -- Public ---------------------------------------------------------------- */

/* A view of the 1-D t as a [1, k] row (col = 0) or a [k, 1] column. */
static dl_tensor *as_matrix(const dl_tensor *t, int col) {
  int64_t s[2] = {1, t->shape[0]}, st[2] = {t->shape[0] * t->stride[0], t->stride[0]};
  if (col) {
    s[0] = t->shape[0], s[1] = 1;
    st[0] = t->stride[0], st[1] = 1;
  }
  return tensor_alias(t, s, st, 2, t->offset);
}

/* torch.matmul: vectors become a row (left) or column (right) matrix for
** the product and lose that dim again; batch dims broadcast. */
DL_HIDDEN dl_tensor *fw_matmul(const dl_tensor *a, const dl_tensor *b) {
  if (op_device("matmul", 2, (const dl_tensor *[]){a, b}) < -1) return NULL;
  if (a->ndim == 0 || b->ndim == 0)
    return dl_errp(EM_MM_ZERO_DIM, "matmul", fmt_tshape(a), fmt_tshape(b));
  if (a->ndim == 1 && b->ndim == 1) return dot_impl("matmul", a, b);
  dl_tensor *ma = a->ndim == 1 ? as_matrix(a, 0) : (dl_tensor *)a;
  dl_tensor *mb = b->ndim == 1 ? as_matrix(b, 1) : (dl_tensor *)b;
  dl_tensor *r = NULL;
  if (ma && mb)
    r = matmul_nd("matmul", ma, mb, NULL, 0, 1, a, b, a->ndim == 1, b->ndim == 1);
  if (ma != a) dl_tensor_release(ma);
  if (mb != b) dl_tensor_release(mb);
  return r;
}

DL_HIDDEN dl_tensor *fw_mm(const dl_tensor *a, const dl_tensor *b) {
  if (op_device("mm", 2, (const dl_tensor *[]){a, b}) < -1) return NULL;
  if (a->ndim != 2 || b->ndim != 2)
    return dl_errp(EM_MM_NDIM, "mm", "2-D tensors", fmt_tshape(a), fmt_tshape(b));
  return matmul_nd("mm", a, b, NULL, 0, 1, a, b, 0, 0);
}

DL_HIDDEN dl_tensor *fw_bmm(const dl_tensor *a, const dl_tensor *b) {
  if (op_device("bmm", 2, (const dl_tensor *[]){a, b}) < -1) return NULL;
  if (a->ndim != 3 || b->ndim != 3)
    return dl_errp(EM_MM_NDIM, "bmm", "3-D tensors", fmt_tshape(a), fmt_tshape(b));
  if (a->shape[0] != b->shape[0])
    return dl_errp(EM_MM_BATCH, "bmm", fmt_tshape(a), fmt_tshape(b),
                   (long long)a->shape[0], (long long)b->shape[0]);
  return matmul_nd("bmm", a, b, NULL, 0, 1, a, b, 0, 0);
}

DL_HIDDEN dl_tensor *fw_addmm(const dl_tensor *c, const dl_tensor *a,
                           const dl_tensor *b, double beta, double alpha) {
  if (op_device("addmm", 3, (const dl_tensor *[]){c, a, b}) < -1) return NULL;
  if (a->ndim != 2 || b->ndim != 2)
    return dl_errp(EM_MM_NDIM, "addmm", "2-D matrices", fmt_tshape(a), fmt_tshape(b));
  if (a->shape[1] != b->shape[0])
    return dl_errp(EM_MM_SHAPE, "addmm", fmt_tshape(a), fmt_tshape(b),
                   (long long)a->shape[1], (long long)b->shape[0]);
  /* c must fit [m, n] even when beta = 0 makes its values irrelevant */
  int64_t rs[2] = {a->shape[0], b->shape[1]};
  int ok = c->ndim <= 2;
  for (int i = 0; ok && i < c->ndim; i++) {
    int64_t have = c->shape[i], want = rs[2 - c->ndim + i];
    ok = have == want || have == 1;
  }
  if (!ok) return dl_errp(EM_BCAST_TO, "addmm", fmt_tshape(c), fmt_shape(rs, 2));
  return matmul_nd("addmm", a, b, c, beta, alpha, a, b, 0, 0);
}

/* As PyTorch: a.reshape(-1, 1) * b, so dtypes promote and bool works. */
DL_HIDDEN dl_tensor *fw_outer(const dl_tensor *a, const dl_tensor *b) {
  if (op_device("outer", 2, (const dl_tensor *[]){a, b}) < -1) return NULL;
  if (a->ndim != 1 || b->ndim != 1)
    return dl_errp(EM_MM_NDIM, "outer", "1-D tensors", fmt_tshape(a), fmt_tshape(b));
  dl_tensor *col = as_matrix(a, 1);
  dl_tensor *r = col ? fw_binary(DL_MUL, col, b) : NULL;
  dl_tensor_release(col);
  return r;
}

DL_HIDDEN dl_tensor *fw_dot(const dl_tensor *a, const dl_tensor *b) {
  if (op_device("dot", 2, (const dl_tensor *[]){a, b}) < -1) return NULL;
  if (a->ndim != 1 || b->ndim != 1)
    return dl_errp(EM_MM_NDIM, "dot", "1-D tensors", fmt_tshape(a), fmt_tshape(b));
  return dot_impl("dot", a, b);
}

/* The CPU's kernel (core/device.h): the planned product through BLAS
** (blas) or the integer loop. */
DL_HIDDEN int cpu_matmul(const char *op, int dev, mm_plan *p, int blas) {
  (void)dev;
  if (blas) return run_blas(op, p);
  int64_t work_per_row = max1(p->k * p->n);
  parallel_for(p->nbatch * p->m, max1(PAR_GRAIN / work_per_row), int_rows, p);
  return 0;
}
