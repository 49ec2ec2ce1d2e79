/*
** cuda/attention.c -- scaled dot-product attention on CUDA tensors: the
** operands nn/attention.c worked out (rows at a stride, batch dims
** broadcast by stride 0) expanded to one [batch x heads, rows, dim] block each, a
** boolean mask turned additive (0 / -inf), and the flash-attention
** launchers of kernels/attention.cu called.  Dropout is not on CUDA yet.
*/
#include <math.h>
#include <string.h>

#include "cuda/cuda.h"
#include "nn/nn.h"
#include "nn/attention.h"
#include "ops/forward.h"

static void *dp(const dl_tensor *t) { return t ? tensor_first(t) : NULL; }

/* t seen as [bshape, rows, cols] with batch strides bs, made contiguous
** (t itself when it already is: no broadcast dim). */
static dl_tensor *expand_full(const sdpa_geom *g, const dl_tensor *t, const int64_t *bs,
                              int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  int64_t shape[DL_MAX_DIMS + 2], stride[DL_MAX_DIMS + 2];
  int n = g->bnd;
  for (int d = 0; d < n; d++) shape[d] = g->bshape[d], stride[d] = bs[d];
  shape[n] = rows, stride[n++] = rs;
  shape[n] = cols, stride[n++] = cs;
  dl_tensor *a = tensor_alias(t, shape, stride, n, t->offset);
  if (!a) return NULL;
  dl_tensor *c = fw_contiguous(a);
  dl_tensor_release(a);
  return c;
}

/* The mask as the kernels take it: additive in the compute dtype, [L, S]
** when no batch dim of it varies (*per_bh 0), else [nb, L, S]. */
static dl_tensor *kernel_mask(const char *op, const sdpa_geom *g, const dl_tensor *mask,
                              int64_t *per_bh) {
  int varies = 0;
  for (int d = 0; d < g->bnd; d++) varies |= g->mbs[d] != 0;
  *per_bh = varies ? g->L * g->S : 0;
  dl_tensor *m;
  if (varies) {
    m = expand_full(g, mask, g->mbs, g->L, g->S, g->m_ls, g->m_ss);
  } else {
    int64_t shape[2] = {g->L, g->S}, stride[2] = {g->m_ls, g->m_ss};
    dl_tensor *a = tensor_alias(mask, shape, stride, 2, mask->offset);
    m = a ? fw_contiguous(a) : NULL;
    dl_tensor_release(a);
  }
  if (!m || g->mask != SDPA_MASK_BOOL) return m;
  /* -inf everywhere, then 0 where the mask says take part */
  dl_tensor *add = tensor_new_on(m->storage->device, g->kd, m->shape, m->ndim);
  double ninf = -INFINITY;
  float ninf32 = -INFINITY;
  uint64_t bytes = 0;
  if (g->kd == DL_FLOAT64) memcpy(&bytes, &ninf, 8);
  else memcpy(&bytes, &ninf32, 4);
  if (!add || cuda_fill(op, add, bytes) || fw_masked_fill_(add, m, 0.0)) {
    dl_tensor_release(add);
    add = NULL;
  }
  dl_tensor_release(m);
  return add;
}

/* q, k, v and the mask expanded for the kernels; 0 or -1 (all released). */
static int operands(const char *op, const sdpa_geom *g, const dl_tensor *q, const dl_tensor *k,
                    const dl_tensor *v, const dl_tensor *mask, dl_tensor **t, int64_t *mask_bh) {
  memset(t, 0, 4 * sizeof *t);
  *mask_bh = 0;
  if ((t[0] = expand_full(g, q, g->qbs, g->L, g->E, g->qrs, 1)) &&
      (t[1] = expand_full(g, k, g->kbs, g->S, g->E, g->krs, 1)) &&
      (t[2] = expand_full(g, v, g->vbs, g->S, g->Ev, g->vrs, 1)) &&
      (!mask || (t[3] = kernel_mask(op, g, mask, mask_bh))))
    return 0;
  for (int i = 0; i < 4; i++) dl_tensor_release(t[i]);
  return -1;
}

DL_HIDDEN int cuda_sdpa(const char *op, const struct sdpa_geom *g, const dl_tensor *q,
                        const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                        dl_tensor **out, dl_tensor **lse) {
  if (g->dropout_p > 0) return dl_err(EM_SDPA_CUDA_DROPOUT, op);
  int (*f)(int, int, int64_t, int64_t, int64_t, int, int, double, int, const void *,
           const void *, const void *, const void *, int64_t, void *, void *) = DLC(op, sdpa_forward);
  if (!f) return -1;
  int dev = q->storage->device;
  dl_tensor *t[4], *o = NULL, *ls = NULL;
  int64_t mask_bh;
  if (operands(op, g, q, k, v, mask, t, &mask_bh)) return -1;
  int rc = !(o = sdpa_batch_tensor(g, dev, g->L, g->Ev)) || !(ls = sdpa_batch_tensor(g, dev, g->L, -1)) ||
           cuda_err(op, dev, f(dev, g->kd, g->nb, g->L, g->S, (int)g->E, (int)g->Ev, g->scale,
                               g->causal, dp(t[0]), dp(t[1]), dp(t[2]), dp(t[3]), mask_bh, dp(o),
                               dp(ls)));
  for (int i = 0; i < 4; i++) dl_tensor_release(t[i]);
  if (rc) {
    dl_tensor_release(o);
    dl_tensor_release(ls);
    return -1;
  }
  *out = o, *lse = ls;
  return 0;
}

DL_HIDDEN int cuda_sdpa_backward(const char *op, const struct sdpa_geom *g,
                                 const dl_tensor *grad_out, const dl_tensor *q,
                                 const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                                 const dl_tensor *out, const dl_tensor *lse, int need_q,
                                 int need_k, int need_v, dl_tensor **gq, dl_tensor **gk,
                                 dl_tensor **gv) {
  if (g->dropout_p > 0) return dl_err(EM_SDPA_CUDA_DROPOUT, op);
  int (*f)(int, int, int64_t, int64_t, int64_t, int, int, double, int, const void *, const void *,
           const void *, const void *, int64_t, const void *, const void *, const void *, void *,
           void *, void *, void *) = DLC(op, sdpa_backward);
  if (!f) return -1;
  int dev = q->storage->device;
  dl_tensor *t[4], *ds = NULL, *tq = NULL, *tk = NULL, *tv = NULL, *co = NULL, *cg = NULL;
  int64_t mask_bh;
  if (operands(op, g, q, k, v, mask, t, &mask_bh)) return -1;
  /* the kernels read out and grad_out as [nb, L, Ev] blocks */
  int rc = !(co = fw_contiguous(out)) || !(cg = fw_contiguous(grad_out));
  /* the kernels write all three; the ones not asked for are dropped */
  rc = rc || !(ds = sdpa_batch_tensor(g, dev, g->L, -1)) || !(tq = sdpa_batch_tensor(g, dev, g->L, g->E)) ||
           !(tk = sdpa_batch_tensor(g, dev, g->S, g->E)) || !(tv = sdpa_batch_tensor(g, dev, g->S, g->Ev)) ||
           cuda_err(op, dev, f(dev, g->kd, g->nb, g->L, g->S, (int)g->E, (int)g->Ev, g->scale,
                               g->causal, dp(t[0]), dp(t[1]), dp(t[2]), dp(t[3]), mask_bh, dp(co),
                               dp(cg), dp(lse), dp(ds), dp(tq), dp(tk), dp(tv)));
  for (int i = 0; i < 4; i++) dl_tensor_release(t[i]);
  dl_tensor_release(co);
  dl_tensor_release(cg);
  dl_tensor_release(ds);
  if (rc) {
    dl_tensor_release(tq), dl_tensor_release(tk), dl_tensor_release(tv);
    return -1;
  }
  if (!need_q) dl_tensor_release(tq), tq = NULL;
  if (!need_k) dl_tensor_release(tk), tk = NULL;
  if (!need_v) dl_tensor_release(tv), tv = NULL;
  *gq = tq, *gk = tk, *gv = tv;
  return 0;
}
