/*
** nn/attention_cpu.c -- the CPU's fused attention kernel (core/device.h),
** in the flash-attention manner: the forward runs over (batch, query tile)
** tasks, each sweeping the key tiles with an online softmax and keeping
** only the rows' log-sum-exp; the backward recomputes each block's
** probabilities from it.  Causal tiles are skipped, never computed.  Tile
** products go to BLAS (OpenBLAS held to one thread inside our pool).
*/
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "core/simd.h"
#include "core/vmath.h"
#include "nn/attention.h"

/* Query and key tile sizes: a tile of scores (and its exp) stays in L1/L2
** beside the q, k and v rows it reads. */
enum { BQ = 64, BK = 64 };

enum { SDPA_BY_HEAD, SDPA_BY_KEYS, SDPA_BY_QUERIES };

/* Where an operand's rows lie: strides per batch dim (0: broadcast) and
** between rows; columns are adjacent. */
typedef struct rows_at {
  int64_t bs[DL_MAX_DIMS];
  int64_t rs;
} rows_at;

typedef struct sdpa_ctx {
  const sdpa_geom *g;
  const void *q, *k, *v, *mask;
  void *out, *lse;                /* forward: written; backward: read */
  const void *gout;               /* backward */
  void *D, *gq, *gk, *gv;         /* backward (gq, gk, gv NULL when not asked) */
  rows_at at_out, at_gout, at_gq, at_gk, at_gv;  /* lse and D are [nb, L] */
  double inv_keep;                /* 1 / (1 - p), 0 for p = 1 */
  int mode;
  atomic_llong nomem;             /* bytes a task failed to get */
} sdpa_ctx;

/* keep[j] for keys j0..j0 + n of row i of batch b (j0 a multiple of 4):
** each row draws from its own blocks (nn/attention.h), so forward and
** backward, any tiling and any thread count see one mask. */
static void sdpa_keep(const sdpa_geom *g, int64_t b, int64_t i, int64_t j0, int64_t n,
                      uint8_t *keep) {
  double kp = 1 - g->dropout_p;
  uint64_t blk = g->base + (uint64_t)((b * g->L + i) * sdpa_row_blocks(g) + j0 / 4);
  uint32_t w[4];
  for (int64_t j = 0; j < n; j += 4, blk++) {
    philox(g->seed, blk, w);
    for (int64_t u = 0; u < 4 && j + u < n; u++) keep[j + u] = philox_unit24(w[u]) < kp;
  }
}

static float exp_f32(float x) { return vm_expf(x); }

#define T float
#define SFX f32
#define GEMM_FN cblas_sgemm
#define EXP_FN exp_f32
#include "nn/attention_tile.h"
#undef T
#undef SFX
#undef GEMM_FN
#undef EXP_FN

#define T double
#define SFX f64
#define GEMM_FN cblas_dgemm
#define EXP_FN exp
#include "nn/attention_tile.h"
#undef T
#undef SFX
#undef GEMM_FN
#undef EXP_FN

extern int openblas_get_num_threads(void);
extern void openblas_set_num_threads(int n);

/* fn over n tasks on our pool with OpenBLAS on the calling thread of each
** (its own threads beside ours would oversubscribe the cores); -1 with the
** error set when a task found no memory for its tiles. */
static int run_tasks(const char *op, sdpa_ctx *c, int64_t n, par_fn fn) {
  int prev = openblas_get_num_threads();
  if (prev > 1) openblas_set_num_threads(1);
  atomic_store(&c->nomem, 0);
  parallel_for(n, 1, fn, c);
  if (prev > 1) openblas_set_num_threads(prev);
  long long need = atomic_load(&c->nomem);
  return need ? dl_err(EM_NOMEM, op, need, (long long)dl_mem_allocated()) : 0;
}

static void base_ctx(sdpa_ctx *c, const sdpa_geom *g, const dl_tensor *q, const dl_tensor *k,
                     const dl_tensor *v, const dl_tensor *mask) {
  memset(c, 0, sizeof *c);
  c->g = g;
  c->q = tensor_first(q), c->k = tensor_first(k), c->v = tensor_first(v);
  c->mask = mask ? tensor_first(mask) : NULL;
  c->inv_keep = g->dropout_p < 1 ? 1 / (1 - g->dropout_p) : 0;
}

static dl_tensor *batch_tensor(const sdpa_geom *g, int64_t a, int64_t b) {
  return sdpa_batch_tensor(g, -1, a, b);
}

/* A result laid out as the operand it belongs to (q for out and dQ). */
static dl_tensor *like(const sdpa_geom *g, const int64_t *bs, int64_t rs, int64_t rows,
                       int64_t cols, rows_at *at) {
  return sdpa_tensor_like(g, -1, bs, rs, rows, cols, at->bs, &at->rs);
}

/* The rows of t, [bshape, rows, cols] with adjacent columns. */
static void rows_of(const sdpa_geom *g, const dl_tensor *t, rows_at *at) {
  for (int d = 0; d < g->bnd; d++) at->bs[d] = t->shape[d] == 1 ? 0 : t->stride[d];
  at->rs = nn_row_stride(t);
}

DL_HIDDEN int cpu_sdpa(const char *op, const sdpa_geom *g, const dl_tensor *q,
                       const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                       dl_tensor **out, dl_tensor **lse) {
  sdpa_ctx c;
  base_ctx(&c, g, q, k, v, mask);
  dl_tensor *o = like(g, g->qbs, g->qrs, g->L, g->Ev, &c.at_out);
  dl_tensor *ls = o ? batch_tensor(g, g->L, -1) : NULL;
  int rc = ls ? 0 : -1;
  if (!rc) {
    c.out = tensor_first(o), c.lse = tensor_first(ls);
    rc = run_tasks(op, &c, g->nb * ((g->L + BQ - 1) / BQ),
                   g->kd == DL_FLOAT64 ? forward_f64 : forward_f32);
  }
  if (rc) {
    dl_tensor_release(o);
    dl_tensor_release(ls);
    return -1;
  }
  *out = o, *lse = ls;
  return 0;
}

static dl_tensor *zeros(const sdpa_geom *g, const int64_t *bs, int64_t rs, int64_t rows,
                        int64_t cols, rows_at *at) {
  dl_tensor *t = like(g, bs, rs, rows, cols, at);  /* dense: numel elements from the first */
  if (t) memset(tensor_first(t), 0, (size_t)dl_tensor_numel(t) * (size_t)dl_dtype_sizes[g->kd]);
  return t;
}

DL_HIDDEN int cpu_sdpa_backward(const char *op, const sdpa_geom *g, const dl_tensor *grad_out,
                                const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                                const dl_tensor *mask, const dl_tensor *out,
                                const dl_tensor *lse, int need_q, int need_k, int need_v,
                                dl_tensor **gq, dl_tensor **gk, dl_tensor **gv) {
  sdpa_ctx c;
  base_ctx(&c, g, q, k, v, mask);
  int f64 = g->kd == DL_FLOAT64;
  dl_tensor *D = batch_tensor(g, g->L, -1), *tq = NULL, *tk = NULL, *tv = NULL;
  int rc = !D || (need_q && !(tq = zeros(g, g->qbs, g->qrs, g->L, g->E, &c.at_gq))) ||
           (need_k && !(tk = zeros(g, g->kbs, g->krs, g->S, g->E, &c.at_gk))) ||
           (need_v && !(tv = zeros(g, g->vbs, g->vrs, g->S, g->Ev, &c.at_gv)));
  if (!rc) {
    rows_of(g, out, &c.at_out);
    rows_of(g, grad_out, &c.at_gout);
    c.out = tensor_first(out), c.lse = tensor_first(lse), c.gout = tensor_first(grad_out);
    c.D = tensor_first(D);
    c.gq = tq ? tensor_first(tq) : NULL;
    c.gk = tk ? tensor_first(tk) : NULL;
    c.gv = tv ? tensor_first(tv) : NULL;
    parallel_for(g->nb * g->L, nn_max64(1, PAR_GRAIN / nn_max64(1, g->Ev)),
                 f64 ? row_dots_f64 : row_dots_f32, &c);
    int64_t nqt = (g->L + BQ - 1) / BQ, nkt = (g->S + BK - 1) / BK;
    par_fn fn = f64 ? backward_f64 : backward_f32;
    /* Whole entries when they feed every thread (fewest products: each
    ** block's scores once); else keys and queries in two passes, which
    ** split the entries into tiles at the cost of the scores twice. */
    if (g->nb >= 2 * parallel_threads() || (nqt <= 1 && nkt <= 1)) {
      c.mode = SDPA_BY_HEAD;
      rc = run_tasks(op, &c, g->nb, fn);
    } else {
      c.mode = SDPA_BY_KEYS;
      if (tk || tv) rc = run_tasks(op, &c, g->nb * nkt, fn);
      c.mode = SDPA_BY_QUERIES;
      if (!rc && tq) rc = run_tasks(op, &c, g->nb * nqt, fn);
    }
  }
  dl_tensor_release(D);
  if (rc) {
    dl_tensor_release(tq);
    dl_tensor_release(tk);
    dl_tensor_release(tv);
    return -1;
  }
  *gq = tq, *gk = tk, *gv = tv;
  return 0;
}
