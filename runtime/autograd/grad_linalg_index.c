/*
** grad_linalg_index.c -- the public matmul family and indexing ops (gather,
** scatter, masks, cat, stack): forward with grad mode off, then the node of
** the op's gradient rule (rules.h), whose formula is here.
*/
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "ops/forward.h"

/* -- Matmul family -------------------------------------------------------------- */

static dl_tensor *T2(ag_scope *s, const dl_tensor *t) {  /* swap the last two dims */
  return K(s, dl_transpose(t, -1, -2));
}

/* Gradients of a @ b for every rank combination; the engine sums batch
** dims that were broadcast. */
static void matmul_grads(ag_scope *s, ag_node *n, dl_tensor *G, dl_tensor *a,
                         dl_tensor *b, double alpha, dl_tensor **ga, dl_tensor **gb) {
  int na = a->ndim, nb = b->ndim;
  if (alpha != 1) G = K(s, dl_binary(DL_MUL, G, NUM(s, alpha)));
  if (na == 1 && nb == 1) {
    if (n->needs[0]) *ga = R(s, dl_binary(DL_MUL, G, b));
    if (n->needs[1]) *gb = R(s, dl_binary(DL_MUL, G, a));
  } else if (na == 1) {  /* [k] @ [..., k, n] -> [..., n] */
    dl_tensor *Gu = K(s, dl_unsqueeze(G, -2));
    if (n->needs[0]) {
      int last = -1;
      *ga = R(s, dl_reduce(DL_SUM, K(s, dl_binary(DL_MUL, b, Gu)), &last, 1, 0, 0));
    }
    if (n->needs[1]) *gb = R(s, dl_binary(DL_MUL, K(s, dl_unsqueeze(a, -1)), Gu));
  } else if (nb == 1) {  /* [..., m, k] @ [k] -> [..., m] */
    dl_tensor *Gu = K(s, dl_unsqueeze(G, -1));
    if (n->needs[0]) *ga = R(s, dl_binary(DL_MUL, Gu, b));
    if (n->needs[1]) *gb = R(s, dl_binary(DL_MUL, Gu, a));
  } else {
    if (n->needs[0]) *ga = R(s, dl_matmul(G, T2(s, b)));
    if (n->needs[1]) *gb = R(s, dl_matmul(T2(s, a), G));
  }
}

/* matmul, mm, bmm, dot */
DL_HIDDEN int bw_matmul(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  matmul_grads(&s, n, (dl_tensor *)g, n->saved[0], n->saved[1], 1, &gin[0], &gin[1]);
  return ag_scope_end(&s);
}

/* [m] x [n] */
DL_HIDDEN int bw_outer(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  if (n->needs[0]) gin[0] = R(&s, dl_matmul(g, n->saved[1]));
  if (n->needs[1]) gin[1] = R(&s, dl_matmul(T2(&s, g), n->saved[0]));
  return ag_scope_end(&s);
}

/* beta * c + alpha * a @ b over inputs c, a, b (darg: beta, alpha) */
DL_HIDDEN int bw_addmm(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *G = (dl_tensor *)g;
  if (n->needs[0]) gin[0] = R(&s, dl_binary(DL_MUL, G, NUM(&s, n->darg[0])));
  ag_node sub = *n;  /* the product's view of the node: inputs a and b */
  uint8_t needs[2] = {n->needs[1], n->needs[2]};
  sub.needs = needs;
  matmul_grads(&s, &sub, G, n->saved[0], n->saved[1], n->darg[1], &gin[1], &gin[2]);
  return ag_scope_end(&s);
}

/* The node of a product of a and b, both saved. */
static dl_tensor *product_record(dl_tensor *out, const dl_tensor *a, const dl_tensor *b,
                                 ag_rule_kind kind) {
  dl_tensor *ins[2] = {(dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[2] = {a, b};
  return ag_record(out, kind, ins, 2, save, 2, NULL);
}

DL_API dl_tensor *dl_matmul(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_matmul(a, b));
  return product_record(out, a, b, AG_MATMUL);
}

DL_API dl_tensor *dl_mm(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_mm(a, b));
  return product_record(out, a, b, AG_MM);
}

DL_API dl_tensor *dl_bmm(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_bmm(a, b));
  return product_record(out, a, b, AG_BMM);
}

DL_API dl_tensor *dl_dot(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_dot(a, b));
  return product_record(out, a, b, AG_DOT);
}

DL_API dl_tensor *dl_outer(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_outer(a, b));
  return product_record(out, a, b, AG_OUTER);
}

DL_API dl_tensor *dl_addmm(const dl_tensor *c, const dl_tensor *a,
                           const dl_tensor *b, double beta, double alpha) {
  dl_tensor *out;
  NOGRAD(out = fw_addmm(c, a, b, beta, alpha));
  dl_tensor *ins[3] = {(dl_tensor *)c, (dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[2] = {a, b};
  ag_node *n;
  out = ag_record(out, AG_ADDMM, ins, 3, save, 2, &n);
  if (n) n->darg[0] = beta, n->darg[1] = alpha;
  return out;
}

/* -- Gather and scatter ---------------------------------------------------------- */

/* index_select's index as a gather index: shaped like g along dim. */
static dl_tensor *gather_index(ag_scope *s, const dl_tensor *idx, const dl_tensor *g, int dim) {
  int64_t shape[DL_MAX_DIMS];
  for (int i = 0; i < g->ndim; i++) shape[i] = i == dim ? -1 : 1;
  dl_tensor *v = K(s, dl_reshape(idx, shape, g->ndim));
  return K(s, dl_expand(v, g->shape, g->ndim));
}

/* A zero tensor shaped like input 0, of g's dtype on g's device. */
static dl_tensor *zeros_like_input(ag_scope *s, const ag_node *n, const dl_tensor *g) {
  return K(s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
}

/* iarg[0]: the dim of the index ops (normalised) */
DL_HIDDEN int bw_index_select(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *idx = n->saved[0], *G = (dl_tensor *)g;
  dl_tensor *z = zeros_like_input(&s, n, g);
  dl_tensor *gi = G->ndim ? gather_index(&s, idx, G, dim) : idx;
  gin[0] = R(&s, dl_scatter(z, dim, gi, G, DL_SCATTER_ADD));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_gather(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *z = zeros_like_input(&s, n, g);
  gin[0] = R(&s, dl_scatter(z, (int)n->iarg[0], n->saved[0], g, DL_SCATTER_ADD));
  return ag_scope_end(&s);
}

/* scatter and scatter_add: inputs self, (index,) src; src's gradient is
** gathered from where it went */
static dl_tensor *scattered_src_grad(ag_scope *s, const ag_node *n, const dl_tensor *g) {
  return R(s, dl_gather(g, (int)n->iarg[0], n->saved[0]));
}

/* self's gradient: none where src replaced it */
DL_HIDDEN int bw_scatter(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *idx = n->saved[0];
  if (n->needs[0]) {
    dl_tensor *src0 = K(&s, full_on(g->storage->device, idx->shape, idx->ndim, g->dtype, 0.0));
    gin[0] = R(&s, dl_scatter(g, (int)n->iarg[0], idx, src0, DL_SCATTER_REPLACE));
  }
  if (n->needs[2]) gin[2] = scattered_src_grad(&s, n, g);
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_scatter_add(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  if (n->needs[0]) gin[0] = R(&s, dl_clone(g));
  if (n->needs[2]) gin[2] = scattered_src_grad(&s, n, g);
  return ag_scope_end(&s);
}

static dl_tensor *record_index(dl_tensor *out, ag_rule_kind kind, int dim,
                               dl_tensor *const *ins, int nin, const dl_tensor *idx) {
  const dl_tensor *save[1] = {idx};
  ag_node *n;
  out = ag_record(out, kind, ins, nin, save, 1, &n);
  if (n) {
    int nd = ins[0]->ndim ? ins[0]->ndim : 1;
    n->iarg[0] = dim < 0 ? dim + nd : dim;
  }
  return out;
}

DL_API dl_tensor *dl_index_select(const dl_tensor *t, int dim, const dl_tensor *index) {
  dl_tensor *out;
  NOGRAD(out = fw_index_select(t, dim, index));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  return record_index(out, AG_INDEX_SELECT, dim, ins, 1, index);
}

DL_API dl_tensor *dl_gather(const dl_tensor *t, int dim, const dl_tensor *index) {
  dl_tensor *out;
  NOGRAD(out = fw_gather(t, dim, index));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  return record_index(out, AG_GATHER, dim, ins, 1, index);
}

DL_API dl_tensor *dl_scatter(const dl_tensor *t, int dim, const dl_tensor *index,
                             const dl_tensor *src, dl_scatter_reduce reduce) {
  dl_tensor *out;
  NOGRAD(out = fw_scatter(t, dim, index, src, reduce));
  dl_tensor *ins[3] = {(dl_tensor *)t, NULL, (dl_tensor *)src};
  return record_index(out, reduce != DL_SCATTER_REPLACE ? AG_SCATTER_ADD : AG_SCATTER, dim,
                      ins, 3, index);
}

DL_API int dl_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
                       const dl_tensor *src, dl_scatter_reduce reduce) {
  const char *op = reduce == DL_SCATTER_ADD ? "scatter_add_" : "scatter_";
  if (check_tensor_any(op, t) || ag_check_inplace(op, t)) return -1;
  return fw_scatter_(t, dim, index, src, reduce);
}

/* -- Masks ------------------------------------------------------------------------- */

/* filled places get no gradient */
DL_HIDDEN int bw_masked_fill(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_masked_fill(g, n->saved[0], 0);
  return gin[0] ? 0 : -1;
}

/* g goes back to the selected places */
DL_HIDDEN int bw_masked_select(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *mask = n->saved[0];
  int64_t shape[DL_MAX_DIMS];
  int nd;
  if (!broadcast_shape("backward", n->in_shape[0], n->in_ndim[0], mask->shape,
                       mask->ndim, shape, &nd)) {
    int64_t numel = shape_numel(shape, nd), m1 = -1;
    dl_tensor *full = K(&s, dl_expand(mask, shape, nd));
    dl_tensor *flat = K(&s, dl_reshape(full, &numel, 1));
    dl_tensor *pos = K(&s, dl_reshape(K(&s, dl_nonzero(flat)), &m1, 1));
    dl_tensor *z = K(&s, full_on(g->storage->device, &numel, 1, g->dtype, 0.0));
    dl_tensor *sc = K(&s, dl_scatter(z, 0, pos, g, DL_SCATTER_REPLACE));
    gin[0] = R(&s, dl_reshape(sc, shape, nd));
  } else {
    s.err = 1;
  }
  return ag_scope_end(&s);
}

/* The node of a mask op over t, the mask saved. */
static dl_tensor *record_mask(dl_tensor *out, ag_rule_kind kind, const dl_tensor *t,
                              const dl_tensor *mask) {
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[1] = {mask};
  return ag_record(out, kind, ins, 1, save, 1, NULL);
}

DL_API dl_tensor *dl_masked_fill(const dl_tensor *t, const dl_tensor *mask, double value) {
  dl_tensor *out;
  NOGRAD(out = fw_masked_fill(t, mask, value));
  return record_mask(out, AG_MASKED_FILL, t, mask);
}

DL_API int dl_masked_fill_(dl_tensor *t, const dl_tensor *mask, double value) {
  if (check_tensor_any("masked_fill_", t) || ag_check_inplace("masked_fill_", t)) return -1;
  return fw_masked_fill_(t, mask, value);
}

DL_API dl_tensor *dl_masked_select(const dl_tensor *t, const dl_tensor *mask) {
  dl_tensor *out;
  NOGRAD(out = fw_masked_select(t, mask));
  return record_mask(out, AG_MASKED_SELECT, t, mask);
}

/* -- Cat and stack ------------------------------------------------------------------ */

/* iarg[0]: the dim joined along (normalised) */
DL_HIDDEN int bw_cat(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  int64_t off = 0;
  for (int i = 0; i < n->nin; i++) {
    if (n->in_ndim[i] == 1 && n->in_shape[i][0] == 0 && g->ndim != 1) continue;  /* skipped [0] */
    int64_t len = n->in_shape[i][dim];
    if (n->needs[i]) gin[i] = R(&s, dl_narrow(g, dim, off, len));
    off += len;
  }
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_stack(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  for (int i = 0; i < n->nin; i++)
    if (n->needs[i]) gin[i] = R(&s, dl_select(g, (int)n->iarg[0], i));
  return ag_scope_end(&s);
}

static dl_tensor *record_join(dl_tensor *out, ag_rule_kind kind, dl_tensor *const *ts, int n,
                              int dim) {
  ag_node *nd;
  out = ag_record(out, kind, ts, n, NULL, 0, &nd);
  if (nd) nd->iarg[0] = dim < 0 ? dim + out->ndim : dim;
  return out;
}

DL_API dl_tensor *dl_cat(dl_tensor *const *ts, int n, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_cat(ts, n, dim));
  return record_join(out, AG_CAT, ts, n, dim);
}

DL_API dl_tensor *dl_stack(dl_tensor *const *ts, int n, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_stack(ts, n, dim));
  return record_join(out, AG_STACK, ts, n, dim);
}
