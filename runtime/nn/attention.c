/*
** nn/attention.c -- scaled dot product attention: what it means, stated
** once (checks, broadcasting, mask, scale, the dropout stream), then the
** device's fused kernel through its table (the CPU's: nn/attention_cpu.c).
**
**   out = dropout(softmax(q k^T * scale + mask)) v
**
** q [..., L, E], k [..., S, E], v [..., S, Ev], batch dims broadcast as
** PyTorch's matmul does; the mask broadcasts to [..., L, S].  Only the
** per-row log-sum-exp is kept for the backward, never the L x S matrix.
*/
#include <math.h>

#include "nn/attention.h"

static const char *const OP = "scaled_dot_product_attention";

/* Batch strides of an operand of shape s and strides st (nd dims, the last
** `inner` of them not batch) against bshape (0 where broadcast). */
static void batch_strides(const sdpa_geom *g, const int64_t *s, const int64_t *st, int nd,
                          int inner, int64_t *bs) {
  for (int d = g->bnd - 1, e = nd - inner - 1; d >= 0; d--, e--)
    bs[d] = (e >= 0 && s[e] != 1) ? st[e] : 0;
}

static void operand_rows(const sdpa_geom *g, const dl_tensor *t, int64_t *bs, int64_t *rs) {
  batch_strides(g, t->shape, t->stride, t->ndim, 2, bs);
  *rs = nn_row_stride(t);
}

/* A new [bshape, rows, cols] tensor in the compute dtype, uninitialised,
** dense with its dims in the order of a source's strides (batch strides
** bs, row stride rs; broadcast dims outermost): PyTorch's empty_like, so
** heads read from [B, T, H, D] memory give results in that memory too and
** the transpose back to [B, T, H, D] is contiguous, copied by no one.  Its
** own batch and row strides go to obs and *ors. */
DL_HIDDEN dl_tensor *sdpa_tensor_like(const sdpa_geom *g, int dev, const int64_t *bs,
                                      int64_t rs, int64_t rows, int64_t cols, int64_t *obs,
                                      int64_t *ors) {
  int n = g->bnd, order[DL_MAX_DIMS + 1];
  int64_t size[DL_MAX_DIMS + 2], key[DL_MAX_DIMS + 1], st[DL_MAX_DIMS + 2];
  for (int d = 0; d <= n; d++) {
    size[d] = d < n ? g->bshape[d] : rows;
    int64_t s = d < n ? bs[d] : rs;
    key[d] = s == 0 || size[d] == 1 ? INT64_MAX : s;
    int i = d;  /* insertion, stable: largest stride first */
    for (; i > 0 && key[order[i - 1]] < key[d]; i--) order[i] = order[i - 1];
    order[i] = d;
  }
  size[n + 1] = cols, st[n + 1] = 1;
  int64_t total = cols;
  for (int i = n; i >= 0; i--) {
    st[order[i]] = total;
    total *= size[order[i]];
  }
  dl_tensor *flat = tensor_new_on(dev, g->kd, &total, 1);
  dl_tensor *t = flat ? tensor_alias(flat, size, st, n + 2, 0) : NULL;
  dl_tensor_release(flat);
  if (!t) return NULL;
  for (int d = 0; d < n; d++) obs[d] = size[d] == 1 ? 0 : st[d];
  *ors = rows <= 1 ? (cols > 1 ? cols : 1) : st[n];
  return t;
}

static int check_ndim(const dl_tensor *t, const char *what, const char *last) {
  if (t->ndim < 2)
    return dl_err(EM_SDPA_NDIM, OP, what, last, fmt_tshape(t));
  return 0;
}

/* Checks everything and fills g (but the dropout stream); the prepared
** operands go to c[0..3] (q, k, v, mask), released by the caller. */
static int setup(const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                 const dl_tensor *mask, int is_causal, double dropout_p, double scale,
                 sdpa_geom *g, dl_tensor **c) {
  c[0] = c[1] = c[2] = c[3] = NULL;
  if (nn_check_float(OP, "q", q, -1) || nn_check_float(OP, "k", k, -1) ||
      nn_check_float(OP, "v", v, -1))
    return -1;
  if (k->dtype != q->dtype)
    return dl_err(EM_SDPA_DTYPE, OP, "q", fmt_dtype(q->dtype), "k", fmt_dtype(k->dtype));
  if (v->dtype != q->dtype)
    return dl_err(EM_SDPA_DTYPE, OP, "q", fmt_dtype(q->dtype), "v", fmt_dtype(v->dtype));
  if (mask) {
    if (check_tensor_any(OP, mask)) return -1;
    if (mask->dtype != DL_BOOL && !dl_dtype_is_float(mask->dtype))
      return dl_err(EM_SDPA_MASK_DTYPE, OP, fmt_dtype(mask->dtype));
    if (is_causal) return dl_err(EM_SDPA_CAUSAL_MASK, OP);
  }
  if (nn_device(OP, q, k, v, mask, NULL) < -1) return -1;
  if (check_ndim(q, "q", "L, E") || check_ndim(k, "k", "S, E") || check_ndim(v, "v", "S, Ev"))
    return -1;
  if (!(dropout_p >= 0 && dropout_p <= 1)) return dl_err(EM_NN_PROB, OP, "dropout_p", dropout_p);
  int qn = q->ndim, kn = k->ndim, vn = v->ndim;
  g->L = q->shape[qn - 2], g->E = q->shape[qn - 1];
  g->S = k->shape[kn - 2], g->Ev = v->shape[vn - 1];
  if (k->shape[kn - 1] != g->E)
    return dl_err(EM_SDPA_DIM, OP, "q", "E", (long long)g->E, "k", "E",
                  (long long)k->shape[kn - 1]);
  if (v->shape[vn - 2] != g->S)
    return dl_err(EM_SDPA_DIM, OP, "k", "S", (long long)g->S, "v", "S",
                  (long long)v->shape[vn - 2]);
  int64_t b1[DL_MAX_DIMS];
  int n1;
  if (broadcast_shape("scaled_dot_product_attention (batch dims of q and k)", q->shape, qn - 2,
                      k->shape, kn - 2, b1, &n1) ||
      broadcast_shape("scaled_dot_product_attention (batch dims of q, k and v)", b1, n1,
                      v->shape, vn - 2, g->bshape, &g->bnd))
    return -1;
  g->nb = shape_numel(g->bshape, g->bnd);
  int64_t sshape[DL_MAX_DIMS + 2];  /* the scores' shape, for the mask */
  for (int d = 0; d < g->bnd; d++) sshape[d] = g->bshape[d];
  sshape[g->bnd] = g->L, sshape[g->bnd + 1] = g->S;
  g->mask = SDPA_MASK_NONE;
  g->m_ls = g->m_ss = 0;
  if (mask) {
    int mn = mask->ndim, sn = g->bnd + 2;
    int ok = mn <= sn;
    for (int d = 0; ok && d < mn; d++) {
      int64_t ms = mask->shape[mn - 1 - d];
      ok = ms == 1 || ms == sshape[sn - 1 - d];
    }
    if (!ok) return dl_err(EM_SDPA_MASK_SHAPE, OP, fmt_tshape(mask), fmt_shape(sshape, sn));
  }
  g->kd = nn_kdtype(q->dtype);
  g->causal = is_causal != 0;
  g->scale = isnan(scale) ? 1 / sqrt((double)g->E) : scale;
  g->dropout_p = dropout_p;
  g->seed = g->base = 0;
  /* q, k and v are read where they lie when their rows allow it */
  if (!(c[0] = nn_prep_rows(q, g->kd)) || !(c[1] = nn_prep_rows(k, g->kd)) ||
      !(c[2] = nn_prep_rows(v, g->kd)))
    return -1;
  operand_rows(g, c[0], g->qbs, &g->qrs);
  operand_rows(g, c[1], g->kbs, &g->krs);
  operand_rows(g, c[2], g->vbs, &g->vrs);
  if (mask) {
    g->mask = mask->dtype == DL_BOOL ? SDPA_MASK_BOOL : SDPA_MASK_ADD;
    if (!(c[3] = nn_prep(mask, g->mask == SDPA_MASK_BOOL ? DL_BOOL : g->kd))) return -1;
    /* the mask padded with leading 1s to the scores' dims */
    int64_t ms[DL_MAX_DIMS + 2], mst[DL_MAX_DIMS + 2];
    int sn = g->bnd + 2, pad = sn - mask->ndim;
    for (int d = 0; d < sn; d++) {
      ms[d] = d < pad ? 1 : mask->shape[d - pad];
      mst[d] = d < pad ? 0 : c[3]->stride[d - pad];
    }
    batch_strides(g, ms, mst, sn, 2, g->mbs);
    g->m_ss = ms[sn - 1] == 1 ? 0 : mst[sn - 1];
    g->m_ls = ms[sn - 2] == 1 ? 0 : mst[sn - 2];
  }
  return 0;
}

static void release4(dl_tensor **c) {
  for (int i = 0; i < 4; i++) dl_tensor_release(c[i]);
}

DL_API int dl_sdpa(const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                   const dl_tensor *attn_mask, int is_causal, double dropout_p, double scale,
                   dl_tensor **out, dl_tensor **lse, uint64_t *rng) {
  if (!out || !lse) return dl_err(EM_NULLARG, OP, "out");
  *out = *lse = NULL;
  if (dropout_p > 0 && !rng) return dl_err(EM_NULLARG, OP, "rng");
  sdpa_geom g;
  dl_tensor *c[4];
  int rc = setup(q, k, v, attn_mask, is_causal, dropout_p, scale, &g, c);
  const dl_device *dv = rc ? NULL : device_of(OP, q);
  if (dv && dropout_p > 0) {
    /* every row's own blocks: the mask depends on neither tiles nor threads */
    g.base = rng_reserve((uint64_t)(g.nb * g.L * sdpa_row_blocks(&g)), &g.seed);
    rng[0] = g.seed, rng[1] = g.base;
  }
  rc = dv ? dv->sdpa(OP, &g, c[0], c[1], c[2], c[3], out, lse) : -1;
  release4(c);
  if (!rc && !(*out = nn_finish(*out, q->dtype))) rc = -1;
  if (rc) {
    dl_tensor_release(*lse);
    *lse = NULL;
  }
  return rc;
}

/* t is [bshape, rows, cols] (cols < 0: [bshape, rows]). */
static int check_like(const sdpa_geom *g, const char *what, const dl_tensor *t, int64_t rows,
                      int64_t cols) {
  int64_t s[DL_MAX_DIMS + 2];
  int n = g->bnd;
  for (int d = 0; d < n; d++) s[d] = g->bshape[d];
  s[n++] = rows;
  if (cols >= 0) s[n++] = cols;
  if (!t) return dl_err(EM_NULLARG, OP, what);
  if (check_tensor_any(OP, t)) return -1;
  if (!nn_same_shape(t, s, n)) return dl_err(EM_NN_SHAPE, OP, what, fmt_tshape(t), fmt_shape(s, n));
  return 0;
}

DL_API int dl_sdpa_backward(const dl_tensor *grad_out, const dl_tensor *q, const dl_tensor *k,
                            const dl_tensor *v, const dl_tensor *attn_mask, const dl_tensor *out,
                            const dl_tensor *lse, int is_causal, double dropout_p, double scale,
                            const uint64_t *rng, int need_q, int need_k, int need_v,
                            dl_tensor **grad_q, dl_tensor **grad_k, dl_tensor **grad_v) {
  const char *op = "scaled_dot_product_attention_backward";
  dl_tensor *gq = NULL, *gk = NULL, *gv = NULL, *c[4], *cg = NULL, *co = NULL, *cl = NULL;
  if (grad_q) *grad_q = NULL;
  if (grad_k) *grad_k = NULL;
  if (grad_v) *grad_v = NULL;
  if (dropout_p > 0 && !rng) return dl_err(EM_SDPA_RNG, op);
  sdpa_geom g;
  int rc = setup(q, k, v, attn_mask, is_causal, dropout_p, scale, &g, c);
  if (!rc)
    rc = check_like(&g, "grad_out", grad_out, g.L, g.Ev) || check_like(&g, "out", out, g.L, g.Ev) ||
         check_like(&g, "lse", lse, g.L, -1) ||
         nn_check_float(op, "grad_out", grad_out, q->dtype) ||
         nn_device(op, q, grad_out, out, lse, NULL) < -1;
  const dl_device *dv = rc ? NULL : device_of(op, q);
  if (dv && dropout_p > 0) g.seed = rng[0], g.base = rng[1];
  if (dv && (cg = nn_prep_rows(grad_out, g.kd)) && (co = nn_prep_rows(out, g.kd)) &&
      (cl = nn_prep(lse, g.kd)))
    rc = dv->sdpa_backward(op, &g, cg, c[0], c[1], c[2], c[3], co, cl, need_q && grad_q,
                           need_k && grad_k, need_v && grad_v, &gq, &gk, &gv);
  else
    rc = -1;
  release4(c);
  dl_tensor_release(cg);
  dl_tensor_release(co);
  dl_tensor_release(cl);
  if (!rc && ((gq && !(gq = nn_finish(gq, q->dtype))) || (gk && !(gk = nn_finish(gk, q->dtype))) ||
              (gv && !(gv = nn_finish(gv, q->dtype)))))
    rc = -1;
  if (rc) {
    dl_tensor_release(gq);
    dl_tensor_release(gk);
    dl_tensor_release(gv);
    return -1;
  }
  dl_tensor *unused = NULL;
  nn_give_grads(&gq, &gk, &gv, grad_q ? grad_q : &unused, grad_k ? grad_k : &unused,
                grad_v ? grad_v : &unused);
  return 0;
}
