/*
** attention_tile.h -- the CPU attention kernel for one float type, included
** by nn/attention_cpu.c once per type with T, SFX, GEMM_FN and EXP_FN set
** (one source for float32 and float64; the tile loops are the same).
*/
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* c = alpha a b + beta c on the calling thread's BLAS (row-major); a
** product over nothing (k = 0) is beta c, which BLAS need not honour. */
static void FN(gemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const T *a, int64_t lda, const T *b, int64_t ldb, double beta, T *c,
                     int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0 ? 0 : (T)beta * c[i * ldc + j];
    return;
  }
  GEMM_FN(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
          (blasint)m, (blasint)n, (blasint)k, (T)alpha, a, (blasint)lda, b, (blasint)ldb,
          (T)beta, c, (blasint)ldc);
}

/* The scores of query rows i0.. (nq) against keys j0.. (nk) of batch b into
** s (row stride nk): q k^T * scale, the mask applied, the causal part -inf.
** Masked scores are -inf, never skipped, so a row with every key masked
** comes out NaN as softmax over -inf gives it. */
static void FN(scores)(const sdpa_ctx *c, int64_t b, int64_t i0, int64_t nq, int64_t j0,
                       int64_t nk, T *s) {
  const sdpa_geom *g = c->g;
  const T *Q = (const T *)c->q + sdpa_offset(g, g->qbs, b) + i0 * g->qrs;
  const T *K = (const T *)c->k + sdpa_offset(g, g->kbs, b) + j0 * g->krs;
  FN(gemm)(0, 1, nq, nk, g->E, g->scale, Q, g->qrs, K, g->krs, 0, s, nk);
  if (g->mask == SDPA_MASK_BOOL) {
    const uint8_t *m = (const uint8_t *)c->mask + sdpa_offset(g, g->mbs, b);
    for (int64_t r = 0; r < nq; r++) {
      const uint8_t *mr = m + (i0 + r) * g->m_ls + j0 * g->m_ss;
      for (int64_t j = 0; j < nk; j++)
        if (!mr[j * g->m_ss]) s[r * nk + j] = -INFINITY;
    }
  } else if (g->mask == SDPA_MASK_ADD) {
    const T *m = (const T *)c->mask + sdpa_offset(g, g->mbs, b);
    for (int64_t r = 0; r < nq; r++) {
      const T *mr = m + (i0 + r) * g->m_ls + j0 * g->m_ss;
      for (int64_t j = 0; j < nk; j++) s[r * nk + j] += mr[j * g->m_ss];
    }
  }
  if (g->causal && j0 + nk - 1 > i0)
    for (int64_t r = 0; r < nq; r++)
      for (int64_t j = nn_max64(0, i0 + r + 1 - j0); j < nk; j++) s[r * nk + j] = -INFINITY;
}

/* The largest of x[0..n) (NaN never wins) and the sum of x[0..n), in 8
** lanes: as single chains these reductions ran scalar, and with the exp
** between them were most of the forward's own time. */
static inline T FN(row_max)(const T *x, int64_t n) {
  T mx[8], m = -INFINITY;
  for (int k = 0; k < 8; k++) mx[k] = -INFINITY;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++) mx[k] = x[j + k] > mx[k] ? x[j + k] : mx[k];
  for (int k = 0; k < 8; k++) m = mx[k] > m ? mx[k] : m;
  for (; j < n; j++) m = x[j] > m ? x[j] : m;
  return m;
}
static inline T FN(row_sum)(const T *x, int64_t n) {
  T sm[8] = {0}, s = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++) sm[k] += x[j + k];
  for (int k = 0; k < 8; k++) s += sm[k];
  for (; j < n; j++) s += x[j];
  return s;
}

/* p[j] *= keep[j] / (1 - p) over a row. */
static void FN(drop_row)(T *p, const uint8_t *keep, int64_t n, double inv) {
  for (int64_t j = 0; j < n; j++) p[j] = keep[j] ? p[j] * (T)inv : 0;
}

/* -- Forward: tasks (batch, query tile), keys in tiles with an online softmax */

HOT static void FN(forward)(void *p, int64_t t0, int64_t t1) {
  const sdpa_ctx *c = p;
  const sdpa_geom *g = c->g;
  int64_t L = g->L, S = g->S, Ev = g->Ev, nqt = (L + BQ - 1) / BQ;
  size_t need = sizeof(T) * (size_t)(BQ * BK + BQ * Ev + 2 * BQ) + BK;
  T *s = malloc(need);
  if (!s) {
    atomic_store(&((sdpa_ctx *)c)->nomem, (long long)need);
    return;
  }
  T *acc = s + BQ * BK, *m = acc + BQ * Ev, *l = m + BQ;
  uint8_t *keep = (uint8_t *)(l + BQ);
  for (int64_t t = t0; t < t1; t++) {
    int64_t b = t / nqt, i0 = (t % nqt) * BQ, nq = nn_min64(BQ, L - i0);
    const T *V = (const T *)c->v + sdpa_offset(g, g->vbs, b);
    for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, sizeof(T) * (size_t)(nq * Ev));
    /* causal: the tiles right of the last row's diagonal are skipped */
    int64_t kend = g->causal ? nn_min64(S, i0 + nq) : S;
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
      int64_t nk = nn_min64(BK, kend - j0);
      FN(scores)(c, b, i0, nq, j0, nk, s);
      for (int64_t r = 0; r < nq; r++) {
        T *row = s + r * nk, mx = FN(row_max)(row, nk);
        T mnew = mx > m[r] ? mx : m[r];
        if (mnew == -INFINITY) {  /* nothing seen yet: no weight */
          memset(row, 0, sizeof(T) * (size_t)nk);
          continue;
        }
        T alpha = EXP_FN(m[r] - mnew);
        for (int64_t j = 0; j < nk; j++) row[j] = EXP_FN(row[j] - mnew);
        T sum = FN(row_sum)(row, nk);
        l[r] = l[r] * alpha + sum;
        m[r] = mnew;
        if (alpha != 1)
          for (int64_t e = 0; e < Ev; e++) acc[r * Ev + e] *= alpha;
        if (g->dropout_p > 0) {  /* the sum above is the undropped softmax's */
          sdpa_keep(g, b, i0 + r, j0, nk, keep);
          FN(drop_row)(row, keep, nk, c->inv_keep);
        }
      }
      FN(gemm)(0, 0, nq, Ev, nk, 1, s, nk, V + j0 * g->vrs, g->vrs, 1, acc, Ev);
    }
    const rows_at *ao = &c->at_out;
    T *o = (T *)c->out + sdpa_offset(g, ao->bs, b) + i0 * ao->rs;
    T *ls = (T *)c->lse + b * L + i0;
    for (int64_t r = 0; r < nq; r++) {
      /* l = 0: every key masked (NaN, as softmax), or no keys at all (0, as
      ** an empty product) */
      T inv = S == 0 ? 0 : 1 / l[r];
      for (int64_t e = 0; e < Ev; e++) o[r * ao->rs + e] = acc[r * Ev + e] * inv;
      ls[r] = m[r] + (T)log((double)l[r]);
    }
  }
  free(s);
}

/* -- Backward ------------------------------------------------------------------ */

/* D[row] = sum(grad_out * out) over the row (the softmax backward's
** correction; with dropout it is the same sum). */
HOT static void FN(row_dots)(void *p, int64_t r0, int64_t r1) {
  const sdpa_ctx *c = p;
  const sdpa_geom *g = c->g;
  int64_t Ev = g->Ev, L = g->L;
  const rows_at *ag = &c->at_gout, *ao = &c->at_out;
  const T *go = (const T *)c->gout, *o = (const T *)c->out;
  T *D = (T *)c->D;
  for (int64_t r = r0; r < r1; r++) {
    T dl[8] = {0}, d = 0;  /* 8 lanes, as row_sum */
    int64_t b = r / L, i = r % L;
    const T *a = go + sdpa_offset(g, ag->bs, b) + i * ag->rs;
    const T *bo = o + sdpa_offset(g, ao->bs, b) + i * ao->rs;
    int64_t e = 0;
    for (; e + 8 <= Ev; e += 8)
      for (int k = 0; k < 8; k++) dl[k] += a[e + k] * bo[e + k];
    for (int k = 0; k < 8; k++) d += dl[k];
    for (; e < Ev; e++) d += a[e] * bo[e];
    D[r] = d;
  }
}

/* One (query tile, key tile) block of batch b: the probabilities again from
** the saved log-sum-exp, then the dQ (do_q) and dK, dV (do_kv) products. */
HOT static void FN(block)(const sdpa_ctx *c, int64_t b, int64_t it, int64_t jt, int do_q,
                          int do_kv, T *P, T *Pd, T *dS, uint8_t *keep) {
  const sdpa_geom *g = c->g;
  int64_t L = g->L, S = g->S, E = g->E, Ev = g->Ev;
  int64_t i0 = it * BQ, nq = nn_min64(BQ, L - i0), j0 = jt * BK, nk = nn_min64(BK, S - j0);
  if (g->causal && j0 > i0 + nq - 1) return;  /* every score of the block masked */
  int want_q = do_q && c->gq, want_k = do_kv && c->gk, want_v = do_kv && c->gv;
  if (!want_q && !want_k && !want_v) return;
  FN(scores)(c, b, i0, nq, j0, nk, P);
  const T *lse = (const T *)c->lse + b * L + i0, *D = (const T *)c->D + b * L + i0;
  for (int64_t r = 0; r < nq; r++) {
    T *row = P + r * nk, mr = lse[r];
    for (int64_t j = 0; j < nk; j++) row[j] = EXP_FN(row[j] - mr);
  }
  int drop = g->dropout_p > 0;
  if (drop) {
    for (int64_t r = 0; r < nq; r++) {
      sdpa_keep(g, b, i0 + r, j0, nk, keep + r * nk);
      memcpy(Pd + r * nk, P + r * nk, sizeof(T) * (size_t)nk);
      FN(drop_row)(Pd + r * nk, keep + r * nk, nk, c->inv_keep);
    }
  }
  int64_t grs = c->at_gout.rs;
  const T *gO = (const T *)c->gout + sdpa_offset(g, c->at_gout.bs, b) + i0 * grs;
  const T *V = (const T *)c->v + sdpa_offset(g, g->vbs, b) + j0 * g->vrs;
  if (want_v) {
    const rows_at *at = &c->at_gv;
    T *dV = (T *)c->gv + sdpa_offset(g, at->bs, b) + j0 * at->rs;
    FN(gemm)(1, 0, nk, Ev, nq, 1, drop ? Pd : P, nk, gO, grs, 1, dV, at->rs);
  }
  if (!want_q && !want_k) return;
  /* dS = P * (dP - D), dP = grad_out v^T through the dropout */
  FN(gemm)(0, 1, nq, nk, Ev, 1, gO, grs, V, g->vrs, 0, dS, nk);
  for (int64_t r = 0; r < nq; r++) {
    T *ds = dS + r * nk;
    const T *pr = P + r * nk;
    if (lse[r] == -INFINITY && g->mask != SDPA_MASK_ADD) {
      /* every key masked by masked_fill: PyTorch's formula passes no
      ** gradient through filled scores (its probabilities, and so dV,
      ** are NaN; an added -inf mask passes NaN on, as here) */
      memset(ds, 0, sizeof(T) * (size_t)nk);
      continue;
    }
    if (drop) FN(drop_row)(ds, keep + r * nk, nk, c->inv_keep);
    for (int64_t j = 0; j < nk; j++) ds[j] = pr[j] * (ds[j] - D[r]);
  }
  if (want_q) {
    const rows_at *at = &c->at_gq;
    const T *K = (const T *)c->k + sdpa_offset(g, g->kbs, b) + j0 * g->krs;
    T *dQ = (T *)c->gq + sdpa_offset(g, at->bs, b) + i0 * at->rs;
    FN(gemm)(0, 0, nq, E, nk, g->scale, dS, nk, K, g->krs, 1, dQ, at->rs);
  }
  if (want_k) {
    const rows_at *at = &c->at_gk;
    const T *Q = (const T *)c->q + sdpa_offset(g, g->qbs, b) + i0 * g->qrs;
    T *dK = (T *)c->gk + sdpa_offset(g, at->bs, b) + j0 * at->rs;
    FN(gemm)(1, 0, nk, E, nq, g->scale, dS, nk, Q, g->qrs, 1, dK, at->rs);
  }
}

/* Tasks by c->mode: SDPA_BY_HEAD a whole batch entry each (every block, so
** dQ, dK and dV of the entry have one writer); SDPA_BY_KEYS (batch, key
** tile) for dK and dV; SDPA_BY_QUERIES (batch, query tile) for dQ. */
static void FN(backward)(void *p, int64_t t0, int64_t t1) {
  const sdpa_ctx *c = p;
  const sdpa_geom *g = c->g;
  int64_t nqt = (g->L + BQ - 1) / BQ, nkt = (g->S + BK - 1) / BK;
  size_t need = (3 * sizeof(T) + 1) * (size_t)(BQ * BK);
  T *P = malloc(need);
  if (!P) {
    atomic_store(&((sdpa_ctx *)c)->nomem, (long long)need);
    return;
  }
  T *Pd = P + BQ * BK, *dS = Pd + BQ * BK;
  uint8_t *keep = (uint8_t *)(dS + BQ * BK);
  for (int64_t t = t0; t < t1; t++) {
    if (c->mode == SDPA_BY_HEAD) {
      for (int64_t jt = 0; jt < nkt; jt++)
        for (int64_t it = 0; it < nqt; it++) FN(block)(c, t, it, jt, 1, 1, P, Pd, dS, keep);
    } else if (c->mode == SDPA_BY_KEYS) {
      for (int64_t it = 0; it < nqt; it++)
        FN(block)(c, t / nkt, it, t % nkt, 0, 1, P, Pd, dS, keep);
    } else {
      for (int64_t jt = 0; jt < nkt; jt++)
        FN(block)(c, t / nqt, t % nqt, jt, 1, 0, P, Pd, dS, keep);
    }
  }
  free(P);
}

#undef FN
#undef CAT
#undef CAT_
