/*
** reduce.c -- reductions (sum, mean, var, norm, amax, ...) and max/min
** with indices.  Scans and softmax along one dim live in scan.c.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "ops/forward.h"

#include "core/simd.h"
#include "core/vmath.h"

/* -- Kernels ------------------------------------------------------------- */

/* The dtype a pass reads: float32, float64, int64, or bool (K_COUNT). */
enum { KD_F32, KD_F64, KD_I64, KD_U8 };

typedef union { double d; int64_t i; } acc_t;
_Static_assert(sizeof(acc_t) == sizeof(double), "OUTER_FN walks acc_t[] as double[]");

typedef struct {
  int op, kd;
  double p;              /* the exponent of K_POW */
  const double *center;  /* per output: the mean (K_SQDEV), the max (K_EXP) */
} kspec;

/* NaN wins, as in PyTorch's max and min. */
static inline double maxd(double a, double b) { return (b > a || b != b) ? b : a; }
static inline double mind(double a, double b) { return (b < a || b != b) ? b : a; }

static acc_t k_identity(const kspec *k) {
  acc_t a;
  if (k->kd >= KD_I64)
    a.i = k->op == K_PROD ? 1 : k->op == K_MAX ? INT64_MIN
        : k->op == K_MIN ? INT64_MAX : 0;
  else
    a.d = k->op == K_PROD ? 1.0 : (k->op == K_MAX || k->op == K_MAXABS) ? -INFINITY
        : (k->op == K_MIN || k->op == K_MINABS) ? INFINITY : 0.0;
  return a;
}

/* Signed overflow is undefined in C; PyTorch wraps, so integers go unsigned. */
static acc_t k_combine(const kspec *k, acc_t a, acc_t b) {
  int op = k->op;
  if (k->kd >= KD_I64) {
    if (op == K_PROD) a.i = (int64_t)((uint64_t)a.i * (uint64_t)b.i);
    else if (op == K_MAX) a.i = b.i > a.i ? b.i : a.i;
    else if (op == K_MIN) a.i = b.i < a.i ? b.i : a.i;
    else a.i = (int64_t)((uint64_t)a.i + (uint64_t)b.i);
  } else if (op == K_PROD) {
    a.d *= b.d;
  } else if (op == K_MAX || op == K_MAXABS) {
    a.d = maxd(a.d, b.d);
  } else if (op == K_MIN || op == K_MINABS) {
    a.d = mind(a.d, b.d);
  } else {
    a.d += b.d;
  }
  return a;
}

/* Sum of MAP(x) over a contiguous run.  Vector lanes add 8 steps each and
** then spill into double lanes, so float32 sums of any length stay accurate
** to about 1e-7 while the loop runs at memory speed (a prefetch 4 KB ahead
** measured 5-10% faster from DRAM). */
#define MAPSUM(NAME, T, VT, IT, W, SPILL, VMAP, SMAP)                         \
  HOT static double NAME(const T *x, int64_t n, T c) {                       \
    const VT cv = (VT){0} + c, one = (VT){0} + (T)1;                         \
    const IT absm = ~(IT)(-(VT){0}); /* clears the sign */                   \
    v4d d0 = {0}, d1 = {0};                                                  \
    VT v, a0, a1, a2, a3;                                                    \
    int64_t i = 0;                                                           \
    (void)cv, (void)one, (void)absm;                                         \
    for (; i + 32 * W <= n; i += 32 * W) {                                   \
      a0 = a1 = a2 = a3 = (VT){0};                                           \
      for (int j = 0; j < 32 * W; j += 4 * W) {                              \
        __builtin_prefetch((const char *)(x + i + j) + 4096);                \
        __builtin_prefetch((const char *)(x + i + j) + 4096 + 64);           \
        LD(v, x + i + j); VMAP; a0 += v;                                     \
        LD(v, x + i + j + W); VMAP; a1 += v;                                 \
        LD(v, x + i + j + 2 * W); VMAP; a2 += v;                             \
        LD(v, x + i + j + 3 * W); VMAP; a3 += v;                             \
      }                                                                      \
      a0 = (a0 + a1) + (a2 + a3);                                            \
      SPILL;                                                                 \
    }                                                                        \
    a0 = (VT){0};                                                            \
    for (; i + W <= n; i += W) { LD(v, x + i); VMAP; a0 += v; }              \
    SPILL;                                                                   \
    d0 += d1;                                                                \
    double s = (d0[0] + d0[1]) + (d0[2] + d0[3]);                            \
    for (; i < n; i++) { T v1 = x[i]; s += (double)(SMAP); }                 \
    return s;                                                                \
  }
#define SPILL32                                          \
  do {                                                   \
    v4f lo_, hi_;                                        \
    memcpy(&lo_, &a0, 16);                               \
    memcpy(&hi_, (char *)&a0 + 16, 16);                  \
    d0 += __builtin_convertvector(lo_, v4d);             \
    d1 += __builtin_convertvector(hi_, v4d);             \
  } while (0)
#define SPILL64 (d0 += a0)
#define MS32(NAME, VMAP, SMAP) MAPSUM(NAME, float, v8f, v8i, 8, SPILL32, VMAP, SMAP)
#define MS64(NAME, VMAP, SMAP) MAPSUM(NAME, double, v4d, v4l, 4, SPILL64, VMAP, SMAP)
MS32(sum_f32, (void)0, v1)
MS32(abs_f32, v = (v8f)((v8i)v & absm), fabsf(v1))
MS32(sq_f32, v = v * v, v1 * v1)
MS32(nz_f32, v = (v8f)((v != 0) & (v8i)one), v1 != 0)
MS32(sqdev_f32, v = (v - cv) * (v - cv), (v1 - c) * (v1 - c))
MS32(exp_f32, v -= cv; vexp8(&v), vm_expf(v1 - c))
MS64(sum_f64, (void)0, v1)
MS64(abs_f64, v = (v4d)((v4l)v & absm), fabs(v1))
MS64(sq_f64, v = v * v, v1 * v1)
MS64(nz_f64, v = (v4d)((v != 0) & (v4l)one), v1 != 0)
MS64(sqdev_f64, v = (v - cv) * (v - cv), (v1 - c) * (v1 - c))

typedef double (*ms32_fn)(const float *, int64_t, float);
typedef double (*ms64_fn)(const double *, int64_t, double);
static const ms32_fn ms32[] = {sum_f32, abs_f32, sq_f32, nz_f32, sqdev_f32, exp_f32};
static const ms64_fn ms64[] = {sum_f64, abs_f64, sq_f64, nz_f64, sqdev_f64, NULL};

#define EACH(i, n) for (int64_t i = 0; i < (n); i++)
#define SQ(x) ((x) * (x))

/* The passes without a vector kernel, one element at a time. */
#define SCALAR_FN(NAME, T)                                                   \
  static double NAME(const kspec *k, const T *x, int64_t n, double c) {      \
    double a = k_identity(k).d;                                              \
    switch (k->op) {                                                         \
      case K_EXP: EACH(i, n) a += exp(x[i] - c); break;                      \
      case K_POW: EACH(i, n) a += pow(fabs(x[i]), k->p); break;              \
      case K_PROD: EACH(i, n) a *= x[i]; break;                              \
      case K_MAX: EACH(i, n) a = maxd(a, x[i]); break;                       \
      case K_MIN: EACH(i, n) a = mind(a, x[i]); break;                       \
      case K_MAXABS: EACH(i, n) a = maxd(a, fabs(x[i])); break;              \
      case K_MINABS: EACH(i, n) a = mind(a, fabs(x[i])); break;              \
    }                                                                        \
    return a;                                                                \
  }
SCALAR_FN(scalar_f32, float)
SCALAR_FN(scalar_f64, double)

static int64_t inner_int(const kspec *k, const char *x, int64_t n) {
  acc_t a = k_identity(k);
  if (k->kd == KD_U8) {
    int64_t s = 0;
    EACH(i, n) s += ((const uint8_t *)x)[i] != 0;
    return s;
  }
  const int64_t *v = (const int64_t *)x;
  uint64_t u = (uint64_t)a.i;
  switch (k->op) {
    case K_SUM: EACH(i, n) u += (uint64_t)v[i]; return (int64_t)u;
    case K_PROD: EACH(i, n) u *= (uint64_t)v[i]; return (int64_t)u;
    case K_MAX: EACH(i, n) a.i = v[i] > a.i ? v[i] : a.i; break;
    case K_MIN: EACH(i, n) a.i = v[i] < a.i ? v[i] : a.i; break;
  }
  return a.i;
}

/* Reduces n contiguous elements for output m. */
static acc_t inner1(const kspec *k, const char *x, int64_t n, int64_t m) {
  acc_t a;
  double c = k->center ? k->center[m] : 0;
  if (k->kd == KD_F32)
    a.d = k->op <= K_EXP ? ms32[k->op]((const float *)x, n, (float)c)
                         : scalar_f32(k, (const float *)x, n, c);
  else if (k->kd == KD_F64)
    a.d = k->op < K_EXP ? ms64[k->op]((const double *)x, n, c)
                        : scalar_f64(k, (const double *)x, n, c);
  else
    a.i = inner_int(k, x, n);
  return a;
}

/* Accumulates nr rows (rs bytes apart) of bw contiguous columns into acc:
** the column loops vectorise without reassociating anything. */
#define OUTER_FN(NAME, T)                                                    \
  HOT static void NAME(const kspec *k, const char *x, int64_t nr, int64_t rs, \
                   int64_t bw, const double *c, acc_t *acc) {                \
    if (k->op == K_SUM) { /* a bias's gradient: rows added into doubles */   \
      double *ad = &acc[0].d; /* acc_t is one double wide */                 \
      EACH(r, nr) {                                                          \
        const T *v = (const T *)(x + r * rs);                                \
        EACH(b, bw) ad[b] += v[b];                                           \
      }                                                                      \
      return;                                                                \
    }                                                                        \
    EACH(r, nr) {                                                            \
      const T *v = (const T *)(x + r * rs);                                  \
      switch (k->op) {                                                       \
        case K_SUM: EACH(b, bw) acc[b].d += v[b]; break;                     \
        case K_ABS: EACH(b, bw) acc[b].d += fabs(v[b]); break;               \
        case K_SQ: EACH(b, bw) acc[b].d += SQ((double)v[b]); break;          \
        case K_NZ: EACH(b, bw) acc[b].d += v[b] != 0; break;                 \
        case K_SQDEV: EACH(b, bw) acc[b].d += SQ(v[b] - c[b]); break;        \
        case K_EXP: EACH(b, bw) acc[b].d += exp(v[b] - c[b]); break;         \
        case K_POW: EACH(b, bw) acc[b].d += pow(fabs(v[b]), k->p); break;    \
        case K_PROD: EACH(b, bw) acc[b].d *= v[b]; break;                    \
        case K_MAX: EACH(b, bw) acc[b].d = maxd(acc[b].d, v[b]); break;      \
        case K_MIN: EACH(b, bw) acc[b].d = mind(acc[b].d, v[b]); break;      \
        case K_MAXABS: EACH(b, bw) acc[b].d = maxd(acc[b].d, fabs(v[b])); break;\
        case K_MINABS: EACH(b, bw) acc[b].d = mind(acc[b].d, fabs(v[b])); break;\
      }                                                                      \
    }                                                                        \
  }
OUTER_FN(outer_f32, float)
OUTER_FN(outer_f64, double)

static void outer_int(const kspec *k, const char *x, int64_t nr, int64_t rs,
                      int64_t bw, acc_t *acc) {
  for (int64_t r = 0; r < nr; r++) {
    if (k->kd == KD_U8) {
      const uint8_t *v = (const uint8_t *)(x + r * rs);
      for (int64_t b = 0; b < bw; b++) acc[b].i += v[b] != 0;
      continue;
    }
    const int64_t *v = (const int64_t *)(x + r * rs);
    for (int64_t b = 0; b < bw; b++) {
      acc_t e = {.i = v[b]};
      acc[b] = k_combine(k, acc[b], e);
    }
  }
}

/* -- Plans: how the reduced elements lie in memory ----------------------- */

/* Outputs are numbered row-major over the kept dims.  Inner mode (cols ==
** 1): output m reduces n contiguous elements at kept_off(m).  Outer mode:
** the last kept dims are cols contiguous outputs, reduced over n rows rs
** bytes apart; kept_off indexes the other kept dims. */
typedef struct {
  const char *base;
  int esize, nk;
  int64_t ks[DL_MAX_DIMS], kst[DL_MAX_DIMS]; /* kept sizes, strides (bytes) */
  int64_t n, rs, cols, M;
} plan_t;

static inline int64_t kept_off(const plan_t *pl, int64_t m) {
  int64_t off = 0;
  for (int i = pl->nk - 1; i >= 0; i--) {
    off += (m % pl->ks[i]) * pl->kst[i];
    m /= pl->ks[i];
  }
  return off;
}

/* Returns 0 when neither mode fits (several reduced groups, or strides that
** are neither inner nor outer); the caller then copies. */
static int plan_build(plan_t *pl, const dl_tensor *x, const int *red) {
  int64_t sz[DL_MAX_DIMS], st[DL_MAX_DIMS];
  int cls[DL_MAX_DIMS], g = 0, nr = 0, ri = -1, last = -1;
  for (int i = 0; i < x->ndim; i++) {  /* drop 1s, merge neighbours */
    if (x->shape[i] == 1) continue;
    if (g && cls[g - 1] == red[i] && st[g - 1] == x->stride[i] * x->shape[i]) {
      sz[g - 1] *= x->shape[i];
      st[g - 1] = x->stride[i];
      continue;
    }
    sz[g] = x->shape[i], st[g] = x->stride[i], cls[g++] = red[i];
  }
  for (int i = 0; i < g; i++) {
    if (cls[i]) nr++, ri = i;
    else last = i;
  }
  pl->base = tensor_first(x);
  pl->esize = dl_dtype_sizes[x->dtype];
  pl->n = nr ? sz[ri] : 1;
  pl->rs = nr ? st[ri] * pl->esize : 0;
  pl->cols = 1;
  if (nr > 1) return 0;
  if (!(nr == 1 && st[ri] == 1)) {
    if (last >= 0 && st[last] == 1) pl->cols = sz[last];
    else if (nr) return 0;
  }
  pl->nk = 0;
  pl->M = pl->cols;
  for (int i = 0; i < g; i++) {
    if (cls[i] || (pl->cols > 1 && i == last)) continue;
    pl->ks[pl->nk] = sz[i];
    pl->kst[pl->nk++] = st[i] * pl->esize;
    pl->M *= sz[i];
  }
  return 1;
}

enum { RBLK = 32768, CBLK = 1024 };

typedef struct {
  const plan_t *pl;
  const kspec *k;
  acc_t *res, *part;
  int64_t nb, ncb, nrb, rbsz;
} run_ctx;

static void run_rows(void *c_, int64_t b, int64_t e) {
  const run_ctx *c = c_;
  const plan_t *pl = c->pl;
  for (int64_t m = b; m < e; m++)
    c->res[m] = inner1(c->k, pl->base + kept_off(pl, m), pl->n, m);
}

static void run_blocks(void *c_, int64_t b, int64_t e) {
  const run_ctx *c = c_;
  const plan_t *pl = c->pl;
  for (int64_t t = b; t < e; t++) {
    int64_t m = t / c->nb, off = (t % c->nb) * RBLK;
    int64_t len = pl->n - off < RBLK ? pl->n - off : RBLK;
    const char *x = pl->base + kept_off(pl, m) + off * pl->esize;
    c->part[t] = inner1(c->k, x, len, m);
  }
}

static void run_cols(void *c_, int64_t b, int64_t e) {
  const run_ctx *c = c_;
  const plan_t *pl = c->pl;
  const kspec *k = c->k;
  for (int64_t t = b; t < e; t++) {
    int64_t rb = t % c->nrb, cb = t / c->nrb % c->ncb, p = t / c->nrb / c->ncb;
    int64_t c0 = cb * CBLK, bw = pl->cols - c0 < CBLK ? pl->cols - c0 : CBLK;
    int64_t r0 = rb * c->rbsz, nr = pl->n - r0 < c->rbsz ? pl->n - r0 : c->rbsz;
    int64_t m0 = p * pl->cols + c0;
    acc_t *acc = (c->nrb > 1 ? c->part + rb * pl->M : c->res) + m0;
    acc_t id = k_identity(k);
    for (int64_t i = 0; i < bw; i++) acc[i] = id;
    const char *x = pl->base + kept_off(pl, p) + c0 * pl->esize + r0 * pl->rs;
    const double *cen = k->center ? k->center + m0 : NULL;
    if (k->kd == KD_F32) outer_f32(k, x, nr, pl->rs, bw, cen, acc);
    else if (k->kd == KD_F64) outer_f64(k, x, nr, pl->rs, bw, cen, acc);
    else outer_int(k, x, nr, pl->rs, bw, acc);
  }
}

/* Runs one pass into res[M].  Long rows and tall columns are cut into
** blocks whose partial results are combined in a fixed order, so the result
** does not depend on the number of threads. */
static int run_pass(const char *op, const plan_t *pl, const kspec *k,
                    acc_t *res) {
  run_ctx c = {pl, k, res, NULL, 1, 1, 1, pl->n};
  int64_t M = pl->M, n = pl->n, np = 0, tasks, grain;
  par_fn fn;
  if (pl->cols == 1) {
    c.nb = n > RBLK ? (n + RBLK - 1) / RBLK : 1;
    tasks = M * c.nb, np = c.nb > 1 ? tasks : 0;
    fn = c.nb > 1 ? run_blocks : run_rows;
    grain = c.nb > 1 ? 1 : PAR_GRAIN / (n + 1) + 1;
  } else {
    int64_t P = M / pl->cols;
    c.ncb = (pl->cols + CBLK - 1) / CBLK;
    if (P * c.ncb < 16 && n * M >= 4 * PAR_GRAIN) {
      c.nrb = (16 + P * c.ncb - 1) / (P * c.ncb);
      c.rbsz = (n + c.nrb - 1) / c.nrb;
      c.nrb = (n + c.rbsz - 1) / c.rbsz;
    }
    tasks = P * c.ncb * c.nrb, np = c.nrb > 1 ? c.nrb * M : 0;
    fn = run_cols;
    grain = PAR_GRAIN / (c.rbsz * (pl->cols < CBLK ? pl->cols : CBLK) + 1) + 1;
  }
  if (np && !(c.part = malloc((size_t)np * sizeof(acc_t))))
    return dl_err(EM_NOMEM, op, (long long)(np * 8),
                  (long long)dl_mem_allocated());
  parallel_for(tasks, grain, fn, &c);
  /* partial j of output m: row blocks lie [m][j], column blocks [j][m] */
  int64_t nj = pl->cols == 1 ? c.nb : c.nrb, sm = pl->cols == 1 ? nj : 1;
  int64_t sj = pl->cols == 1 ? 1 : M;
  for (int64_t m = 0; np && m < M; m++) {
    res[m] = c.part[m * sm];
    for (int64_t j = 1; j < nj; j++)
      res[m] = k_combine(k, res[m], c.part[m * sm + j * sj]);
  }
  free(c.part);
  return 0;
}

/* -- dl_reduce ----------------------------------------------------------- */

static const char *const redop_names[DL_NREDOPS] = {
    "sum", "mean", "prod", "amax", "amin", "all", "any", "var", "std", "norm",
    "logsumexp", "count_nonzero"};

/* Marks the reduced dims and computes the result's shape. */
static int reduce_dims(const char *op, const dl_tensor *t, const int *dims,
                       int ndims, int keepdim, int *red, int64_t *oshape,
                       int *ond) {
  int nd = t->ndim, n = 0;
  memset(red, 0, sizeof(int) * DL_MAX_DIMS);
  if (ndims < 0 || ndims > DL_MAX_DIMS) return dl_err(EM_NDIM_MAX, op, ndims);
  for (int j = 0; j < ndims && dims; j++) {
    int d;
    if (norm_dim(op, dims[j], nd, &d)) return -1;
    if (red[d]) return dl_err(EM_DIM_REPEAT, op, dims[j]);
    red[d] = 1;
  }
  if (!dims || !ndims)
    for (int i = 0; i < nd; i++) red[i] = 1;
  for (int i = 0; i < nd; i++)
    if (!red[i] || keepdim) oshape[n++] = red[i] ? 1 : t->shape[i];
  *ond = n;
  return 0;
}

/* Plans the reduction of x over red.  When x's layout fits no plan, *copy
** gets a contiguous copy with the reduced dims last (for the caller to
** release), which always fits. */
static int plan_for(plan_t *pl, const dl_tensor *x, const int *red,
                    dl_tensor **copy) {
  *copy = NULL;
  if (plan_build(pl, x, red)) return 0;
  int perm[DL_MAX_DIMS], red2[DL_MAX_DIMS] = {0}, n = 0;
  for (int i = 0; i < x->ndim; i++)
    if (!red[i]) perm[n++] = i;
  for (int i = 0; i < x->ndim; i++)
    if (red[i]) red2[n] = 1, perm[n++] = i;
  dl_tensor *p = fw_permute(x, perm, x->ndim);
  *copy = p ? fw_contiguous(p) : NULL;
  dl_tensor_release(p);
  if (!*copy) return -1;
  plan_build(pl, *copy, red2);
  return 0;
}

/* The passes of op, the dtype they read (cd) and the result's dtype (od). */
static int reduce_kind(const char *name, int op, int dt, double p, kspec *k,
                       int *cd, int *od) {
  int isf = dl_dtype_is_float(dt);
  *cd = is_half_dtype(dt) ? DL_FLOAT32 : dt, *od = dt;
  switch (op) {
    case DL_MEAN: case DL_VAR: case DL_STD: case DL_NORM: case DL_LOGSUMEXP:
      if (!isf && op == DL_LOGSUMEXP) *cd = *od = DL_FLOAT32; /* 1.13 promotes */
      else if (!isf) return dl_err(EM_DTYPE_NEED_FLOAT, name, fmt_dtype(dt));
      if (op == DL_NORM)
        k->op = p == 2 ? K_SQ : p == 1 ? K_ABS : p == 0 ? K_NZ
              : p == INFINITY ? K_MAXABS : p == -INFINITY ? K_MINABS : K_POW;
      else
        k->op = op == DL_LOGSUMEXP ? K_EXP : op == DL_MEAN ? K_SUM : K_SQDEV;
      break;
    case DL_SUM: case DL_PROD:
      k->op = op == DL_SUM ? K_SUM : K_PROD;
      if (!isf) *cd = *od = DL_INT64;
      break;
    case DL_AMAX: case DL_AMIN:
      k->op = dt == DL_BOOL ? K_COUNT : op == DL_AMAX ? K_MAX : K_MIN;
      if (!isf && dt != DL_BOOL) *cd = DL_INT64;
      break;
    default: /* all, any, count_nonzero: count the nonzeros */
      k->op = K_COUNT;
      *cd = DL_BOOL;
      *od = op == DL_COUNT_NONZERO ? DL_INT64 : dt == DL_UINT8 ? DL_UINT8 : DL_BOOL;
  }
  k->kd = *cd == DL_FLOAT32 ? KD_F32 : *cd == DL_FLOAT64 ? KD_F64
        : *cd == DL_BOOL ? KD_U8 : KD_I64;
  return 0;
}

static double finalize(int op, double a, int64_t N, double param, double c) {
  double div;
  switch (op) {
    case DL_MEAN: return a / (double)N;
    case DL_VAR:
    case DL_STD:
      div = (double)N - param;
      a /= div > 0 ? div : 0;
      return op == DL_STD ? sqrt(a) : a;
    case DL_NORM:  /* torch.norm: 0 over nothing, whatever p */
      if (N == 0) return 0;
      if (param == 2) return sqrt(a);
      if (param == 1 || param == 0 || isinf(param)) return a;
      return pow(a, 1.0 / param);
    case DL_LOGSUMEXP: return c + log(a);
  }
  return a;
}

/* Writes the results, in the output's dtype, into the contiguous out. */
static void store_results(dl_tensor *out, int op, const kspec *k,
                          const acc_t *res, const double *cen, int64_t N,
                          double param) {
  char *o = tensor_first(out);
  int od = out->dtype, es = dl_dtype_sizes[od];
  int64_t M = dl_tensor_numel(out);
  for (int64_t m = 0; m < M; m++, o += es) {
    if (k->kd < KD_I64) {
      store_double(o, od, finalize(op, res[m].d, N, param, cen ? cen[m] : 0));
      continue;
    }
    int64_t v = res[m].i;
    if (k->kd == KD_U8 && (op == DL_ALL || op == DL_AMIN)) v = v == N;
    else if (k->kd == KD_U8 && op != DL_COUNT_NONZERO) v = v > 0;
    if (od == DL_INT64) *(int64_t *)o = v;
    else if (od == DL_INT32) *(int32_t *)o = (int32_t)v;
    else *(uint8_t *)o = (uint8_t)v;
  }
}

DL_HIDDEN dl_tensor *fw_reduce(int op, const dl_tensor *t, const int *dims,
                            int ndims, int keepdim, double param) {
  if (op < 0 || op >= DL_NREDOPS) return dl_errp(EM_REDUCE_OP, "reduce", op);
  const char *name = redop_names[op];
  int red[DL_MAX_DIMS], ond = 0, cd, od;
  int64_t oshape[DL_MAX_DIMS], N = 1;
  kspec k = {K_SUM, KD_F32, param, NULL};
  if (check_tensor_any(name, t) ||
      reduce_dims(name, t, dims, ndims, keepdim, red, oshape, &ond) ||
      reduce_kind(name, op, t->dtype, param, &k, &cd, &od))
    return NULL;
  for (int i = 0; i < t->ndim; i++) {
    if (!red[i]) continue;
    N *= t->shape[i];
    if (!t->shape[i] && (op == DL_AMAX || op == DL_AMIN))
      return dl_errp(EM_REDUCE_EMPTY, name, i, fmt_tshape(t));
  }
  int dev = t->storage->device;
  const dl_device *dv = device_get(name, dev);
  dl_tensor *x = dv ? as_dtype(t, cd) : NULL;
  dl_tensor *out = x ? tensor_new_on(dev, od, oshape, ond) : NULL;
  int rc = out ? dv->reduce(name, x, red, k.op, op, param, N, out) : -1;
  dl_tensor_release(x);
  if (rc) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

/* The CPU's kernel (core/device.h): out = redop of x over the dims marked
** in red (N elements each), through kernel kop. */
DL_HIDDEN int cpu_reduce(const char *name, const dl_tensor *x, const int *red, reduce_pass kop,
                         dl_redop op, double param, int64_t N, dl_tensor *out) {
  int cd = x->dtype;
  kspec k = {kop, cd == DL_FLOAT32 ? KD_F32 : cd == DL_FLOAT64 ? KD_F64 : cd == DL_BOOL ? KD_U8
                                                                                  : KD_I64,
             param, NULL};
  dl_tensor *copy = NULL;
  int64_t M = dl_tensor_numel(out);
  int work = N > 0 && M > 0, rc = -1;
  int centred = work && (op == DL_VAR || op == DL_STD || op == DL_LOGSUMEXP);
  acc_t *res = malloc(sizeof(acc_t) * (size_t)(M + 1));
  double *cen = centred ? malloc(sizeof(double) * (size_t)M) : NULL;
  plan_t pl;
  if (!res || (centred && !cen)) {
    dl_err(EM_NOMEM, name, (long long)(M * 16), (long long)dl_mem_allocated());
    goto done;
  }
  if (work && plan_for(&pl, x, red, &copy)) goto done;
  acc_t id = k_identity(&k);
  for (int64_t m = 0; m < M; m++) res[m] = id;  /* what empty dims give */
  if (centred) {  /* a first pass for the mean, or the max */
    kspec k1 = k;
    k1.op = op == DL_LOGSUMEXP ? K_MAX : K_SUM;
    if (run_pass(name, &pl, &k1, res)) goto done;
    for (int64_t m = 0; m < M; m++) {
      cen[m] = op == DL_LOGSUMEXP ? res[m].d : res[m].d / (double)N;
      if (op == DL_LOGSUMEXP && isinf(cen[m])) cen[m] = 0; /* as PyTorch */
    }
    k.center = cen;
  }
  if (work && run_pass(name, &pl, &k, res)) goto done;
  store_results(out, op, &k, res, op == DL_LOGSUMEXP ? cen : NULL, N, param);
  rc = 0;
done:
  free(res);
  free(cen);
  dl_tensor_release(copy);
  return rc;
}

/* -- Max and min with indices -------------------------------------------- */

/* PyTorch's scan: ties keep the first; a NaN wins and ends the scan. */
#define ARG_LOOP(T, ISNAN, BETTER)                                            \
  for (int64_t i = 0; i < n; i++) {                                          \
    T v = *(const T *)(p + i * st);                                          \
    if (BETTER) {                                                            \
      best = v, bi = i;                                                      \
      if (ISNAN(v)) break;                                                   \
    }                                                                        \
  }
#define ARG_FN(NAME, T, ISNAN)                                                \
  static int64_t NAME(const char *p, int64_t n, int64_t st, int mx,          \
                      char *val) {                                           \
    T best = *(const T *)p;                                                  \
    int64_t bi = 0;                                                          \
    if (mx) ARG_LOOP(T, ISNAN, !(v <= best))                                 \
    else ARG_LOOP(T, ISNAN, !(v >= best))                                    \
    if (val) memcpy(val, &best, sizeof best);                                \
    return bi;                                                               \
  }
#define ISNAN_F(v) ((v) != (v))
#define ISNAN_I(v) 0
ARG_FN(arg_f32, float, ISNAN_F)
ARG_FN(arg_f64, double, ISNAN_F)
ARG_FN(arg_i32, int32_t, ISNAN_I)
ARG_FN(arg_i64, int64_t, ISNAN_I)
ARG_FN(arg_u8, uint8_t, ISNAN_I)

typedef int64_t (*arg_fn)(const char *, int64_t, int64_t, int, char *);
typedef struct {
  const plan_t *pl;
  arg_fn fn;
  int mx;
  char *vals;
  int64_t *idx;
} arg_ctx;

static void arg_body(void *c_, int64_t b, int64_t e) {
  const arg_ctx *c = c_;
  const plan_t *pl = c->pl;
  for (int64_t m = b; m < e; m++)
    c->idx[m] = c->fn(pl->base + kept_off(pl, m), pl->n, pl->rs, c->mx,
                      c->vals ? c->vals + m * pl->esize : NULL);
}

/* Values (when values is not NULL) and indices of the max or min along dim. */
static int arg_reduce(const char *name, const dl_tensor *t, int dim, int keepdim,
                      int mx, dl_tensor **values, dl_tensor **indices) {
  int d, ond = 0;
  if (check_tensor_any(name, t) || norm_dim(name, dim, t->ndim, &d))
    return dl_last_error_code();
  if ((t->ndim ? t->shape[d] : 1) == 0) return dl_err(EM_REDUCE_EMPTY, name, d, fmt_tshape(t));
  dl_tensor *x = as_dtype(t, is_half_dtype(t->dtype) ? DL_FLOAT32 : t->dtype);
  if (!x) return dl_last_error_code();
  int64_t oshape[DL_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++)
    if (i != d || keepdim) oshape[ond++] = i == d ? 1 : t->shape[i];
  int dev = t->storage->device;
  const dl_device *dv = device_get(name, dev);
  dl_tensor *v = dv && values ? tensor_new_on(dev, x->dtype, oshape, ond) : NULL;
  dl_tensor *ix = !dv || (values && !v) ? NULL : tensor_new_on(dev, DL_INT64, oshape, ond);
  int rc = ix ? dv->argreduce(name, x, d, mx ? DL_AMAX : DL_AMIN, v, ix) : -1;
  if (!rc && v && v->dtype != t->dtype) {  /* half types went through float32 */
    dl_tensor *vh = fw_to_dtype(v, t->dtype);
    dl_tensor_release(v);
    v = vh;
    rc = vh ? 0 : -1;
  }
  dl_tensor_release(x);
  if (rc) {
    dl_tensor_release(v);
    dl_tensor_release(ix);
    return dl_last_error_code();
  }
  if (values) *values = v;
  *indices = ix;
  return 0;
}

static int max_min_dim(const char *name, const dl_tensor *t, int dim,
                       int keepdim, int mx, dl_tensor **values,
                       dl_tensor **indices) {
  if (!values || !indices)
    return dl_err(EM_NULLARG, name, values ? "indices" : "values");
  *values = *indices = NULL;
  return arg_reduce(name, t, dim, keepdim, mx, values, indices);
}

DL_HIDDEN int fw_max_dim(const dl_tensor *t, int dim, int keepdim,
                      dl_tensor **values, dl_tensor **indices) {
  return max_min_dim("max", t, dim, keepdim, 1, values, indices);
}

DL_HIDDEN int fw_min_dim(const dl_tensor *t, int dim, int keepdim,
                      dl_tensor **values, dl_tensor **indices) {
  return max_min_dim("min", t, dim, keepdim, 0, values, indices);
}

/* Without a dim: the index into the flattened tensor; keepdim then gives a
** shape of all ones, as PyTorch 1.13 does. */
static dl_tensor *argmaxmin(const char *name, const dl_tensor *t, int dim,
                            int keepdim, int mx) {
  dl_tensor *ix = NULL;
  if (check_tensor_any(name, t)) return NULL;
  if (dim >= -DL_MAX_DIMS) {
    arg_reduce(name, t, dim, keepdim, mx, NULL, &ix);
    return ix;
  }
  int64_t n = dl_tensor_numel(t), ones[DL_MAX_DIMS];
  if (n == 0) return dl_errp(EM_REDUCE_NUMEL0, name, fmt_tshape(t));
  dl_tensor *flat = fw_reshape(t, &n, 1);
  if (flat && !arg_reduce(name, flat, 0, 0, mx, NULL, &ix) && keepdim) {
    for (int i = 0; i < t->ndim; i++) ones[i] = 1;
    dl_tensor *r = fw_reshape(ix, ones, t->ndim);
    dl_tensor_release(ix);
    ix = r;
  }
  dl_tensor_release(flat);
  return ix;
}

DL_HIDDEN dl_tensor *fw_argmax(const dl_tensor *t, int dim, int keepdim) {
  return argmaxmin("argmax", t, dim, keepdim, 1);
}

DL_HIDDEN dl_tensor *fw_argmin(const dl_tensor *t, int dim, int keepdim) {
  return argmaxmin("argmin", t, dim, keepdim, 0);
}

/* The CPU's kernel (core/device.h): the max (DL_AMAX) or min of x along dim d,
** values (may be NULL) and int64 indices, contiguous. */
DL_HIDDEN int cpu_argreduce(const char *name, const dl_tensor *x, int d, dl_redop which,
                            dl_tensor *values, dl_tensor *indices) {
  (void)name;
  static const arg_fn fns[DL_NDTYPES] = {arg_f32, arg_f64, arg_i32, arg_i64,
                                         arg_u8, arg_u8, NULL, NULL};
  plan_t pl = {.n = x->ndim ? x->shape[d] : 1};
  pl.base = tensor_first(x);
  pl.esize = dl_dtype_sizes[x->dtype];
  pl.rs = x->ndim ? x->stride[d] * pl.esize : 0;
  for (int i = 0; i < x->ndim; i++)
    if (i != d) pl.ks[pl.nk] = x->shape[i], pl.kst[pl.nk++] = x->stride[i] * pl.esize;
  arg_ctx c = {&pl, fns[x->dtype], which == DL_AMAX, values ? tensor_first(values) : NULL,
               (int64_t *)tensor_first(indices)};
  parallel_for(dl_tensor_numel(indices), PAR_GRAIN / pl.n + 1, arg_body, &c);
  return 0;
}
