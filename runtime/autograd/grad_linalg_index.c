/*
** grad_linalg_index.c -- the public matmul family and indexing ops (gather,
** scatter, masks, cat, stack): forward with grad mode off, then the
** gradient formula.
*/
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "ops/forward.h"

static dl_tensor *record(dl_tensor *out, const char *name, ag_backward_fn fn,
                         dl_tensor *const *ins, int n, int op,
                         const dl_tensor *const *save, int nsave) {
  ag_node *nd;
  out = ag_record(out, name, fn, ins, n, save, nsave, &nd);
  if (nd) nd->op = op;
  return out;
}

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

static int matmul_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *G = (dl_tensor *)g;
  if (n->op == 1) {  /* addmm: c, a, b */
    if (n->needs[0]) gin[0] = R(&s, dl_binary(DL_MUL, G, NUM(&s, n->darg[0])));
    ag_node sub = *n;
    uint8_t needs[2] = {n->needs[1], n->needs[2]};
    sub.needs = needs;
    matmul_grads(&s, &sub, G, n->saved[0], n->saved[1], n->darg[1], &gin[1], &gin[2]);
  } else if (n->op == 2) {  /* outer: [m] x [n] */
    if (n->needs[0]) gin[0] = R(&s, dl_matmul(G, n->saved[1]));
    if (n->needs[1]) gin[1] = R(&s, dl_matmul(T2(&s, G), n->saved[0]));
  } else {
    matmul_grads(&s, n, G, n->saved[0], n->saved[1], 1, &gin[0], &gin[1]);
  }
  return ag_scope_end(&s);
}

/* The node of a product of a and b, both saved; kind goes to the node's
** iarg (0: matmul family, 2: outer). */
static dl_tensor *product_record(dl_tensor *out, const dl_tensor *a, const dl_tensor *b,
                                 const char *label, int kind) {
  dl_tensor *ins[2] = {(dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[2] = {a, b};
  return record(out, label, matmul_backward, ins, 2, kind, save, 2);
}

DL_API dl_tensor *dl_matmul(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_matmul(a, b));
  return product_record(out, a, b, "MatmulBackward", 0);
}

DL_API dl_tensor *dl_mm(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_mm(a, b));
  return product_record(out, a, b, "MmBackward", 0);
}

DL_API dl_tensor *dl_bmm(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_bmm(a, b));
  return product_record(out, a, b, "BmmBackward", 0);
}

DL_API dl_tensor *dl_dot(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_dot(a, b));
  return product_record(out, a, b, "DotBackward", 0);
}

DL_API dl_tensor *dl_outer(const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *out;
  NOGRAD(out = fw_outer(a, b));
  return product_record(out, a, b, "OuterBackward", 2);
}

DL_API dl_tensor *dl_addmm(const dl_tensor *c, const dl_tensor *a,
                           const dl_tensor *b, double beta, double alpha) {
  dl_tensor *out;
  NOGRAD(out = fw_addmm(c, a, b, beta, alpha));
  dl_tensor *ins[3] = {(dl_tensor *)c, (dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[2] = {a, b};
  out = record(out, "AddmmBackward", matmul_backward, ins, 3, 1, save, 2);
  if (out && out->autograd && !dl_is_leaf(out)) {
    /* the node is reachable only through out: set its scalars now */
    ag_node *nd = ag_grad_fn(out);
    nd->darg[0] = beta;
    nd->darg[1] = alpha;
  }
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

static int index_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *idx = n->saved[0], *G = (dl_tensor *)g;
  switch (n->op) {
    case 0: {  /* index_select */
      dl_tensor *z = K(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
      dl_tensor *gi = G->ndim ? gather_index(&s, idx, G, dim) : idx;
      gin[0] = R(&s, dl_scatter(z, dim, gi, G, 1));
      break;
    }
    case 1: {  /* gather */
      dl_tensor *z = K(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
      gin[0] = R(&s, dl_scatter(z, dim, idx, G, 1));
      break;
    }
    default: {  /* scatter (op 2: replace, 3: add): self, then src */
      if (n->needs[0]) {
        if (n->op == 3) {
          gin[0] = R(&s, dl_clone(G));
        } else {
          dl_tensor *src0 = K(&s, full_on(g->storage->device, idx->shape, idx->ndim, g->dtype, 0.0));
          gin[0] = R(&s, dl_scatter(G, dim, idx, src0, 0));
        }
      }
      if (n->needs[2]) gin[2] = R(&s, dl_gather(G, dim, idx));
      break;
    }
  }
  return ag_scope_end(&s);
}

static dl_tensor *record_index(dl_tensor *out, const char *name, int op, int dim,
                               dl_tensor *const *ins, int nin, const dl_tensor *idx) {
  const dl_tensor *save[1] = {idx};
  out = record(out, name, index_backward, ins, nin, op, save, 1);
  if (out && !dl_is_leaf(out)) {
    int nd = ins[0]->ndim ? ins[0]->ndim : 1;
    ag_grad_fn(out)->iarg[0] = dim < 0 ? dim + nd : dim;
  }
  return out;
}

DL_API dl_tensor *dl_index_select(const dl_tensor *t, int dim, const dl_tensor *index) {
  dl_tensor *out;
  NOGRAD(out = fw_index_select(t, dim, index));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  return record_index(out, "IndexSelectBackward", 0, dim, ins, 1, index);
}

DL_API dl_tensor *dl_gather(const dl_tensor *t, int dim, const dl_tensor *index) {
  dl_tensor *out;
  NOGRAD(out = fw_gather(t, dim, index));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  return record_index(out, "GatherBackward", 1, dim, ins, 1, index);
}

DL_API dl_tensor *dl_scatter(const dl_tensor *t, int dim, const dl_tensor *index,
                             const dl_tensor *src, dl_scatter_reduce reduce) {
  dl_tensor *out;
  NOGRAD(out = fw_scatter(t, dim, index, src, reduce));
  dl_tensor *ins[3] = {(dl_tensor *)t, NULL, (dl_tensor *)src};
  return record_index(out, reduce ? "ScatterAddBackward" : "ScatterBackward",
                      reduce ? 3 : 2, dim, ins, 3, index);
}

DL_API int dl_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
                       const dl_tensor *src, dl_scatter_reduce reduce) {
  const char *op = reduce == 1 ? "scatter_add_" : "scatter_";
  if (check_tensor_any(op, t) || ag_check_inplace(op, t)) return -1;
  return fw_scatter_(t, dim, index, src, reduce);
}

/* -- Masks ------------------------------------------------------------------------- */

static int mask_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *mask = n->saved[0];
  if (n->op == 0) {  /* masked_fill: filled places get no gradient */
    gin[0] = R(&s, dl_masked_fill(g, mask, 0));
  } else {  /* masked_select: g goes back to the selected places */
    int64_t shape[DL_MAX_DIMS];
    int nd;
    if (!broadcast_shape("backward", n->in_shape[0], n->in_ndim[0], mask->shape,
                         mask->ndim, shape, &nd)) {
      int64_t numel = shape_numel(shape, nd), m1 = -1;
      dl_tensor *full = K(&s, dl_expand(mask, shape, nd));
      dl_tensor *flat = K(&s, dl_reshape(full, &numel, 1));
      dl_tensor *pos = K(&s, dl_reshape(K(&s, dl_nonzero(flat)), &m1, 1));
      dl_tensor *z = K(&s, full_on(g->storage->device, &numel, 1, g->dtype, 0.0));
      dl_tensor *sc = K(&s, dl_scatter(z, 0, pos, g, 0));
      gin[0] = R(&s, dl_reshape(sc, shape, nd));
    } else {
      s.err = 1;
    }
  }
  return ag_scope_end(&s);
}

DL_API dl_tensor *dl_masked_fill(const dl_tensor *t, const dl_tensor *mask, double value) {
  dl_tensor *out;
  NOGRAD(out = fw_masked_fill(t, mask, value));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[1] = {mask};
  return record(out, "MaskedFillBackward", mask_backward, ins, 1, 0, save, 1);
}

DL_API int dl_masked_fill_(dl_tensor *t, const dl_tensor *mask, double value) {
  if (check_tensor_any("masked_fill_", t) || ag_check_inplace("masked_fill_", t)) return -1;
  return fw_masked_fill_(t, mask, value);
}

DL_API dl_tensor *dl_masked_select(const dl_tensor *t, const dl_tensor *mask) {
  dl_tensor *out;
  NOGRAD(out = fw_masked_select(t, mask));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[1] = {mask};
  return record(out, "MaskedSelectBackward", mask_backward, ins, 1, 1, save, 1);
}

/* -- Cat and stack ------------------------------------------------------------------ */

static int join_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  int64_t off = 0;
  for (int i = 0; i < n->nin; i++) {
    if (n->op) {  /* stack */
      if (n->needs[i]) gin[i] = R(&s, dl_select(g, dim, i));
      continue;
    }
    if (n->in_ndim[i] == 1 && n->in_shape[i][0] == 0 && g->ndim != 1) continue;  /* skipped [0] */
    int64_t len = n->in_shape[i][dim];
    if (n->needs[i]) gin[i] = R(&s, dl_narrow(g, dim, off, len));
    off += len;
  }
  return ag_scope_end(&s);
}

static dl_tensor *join(int stack, dl_tensor *const *ts, int n, int dim) {
  dl_tensor *out;
  NOGRAD(out = stack ? fw_stack(ts, n, dim) : fw_cat(ts, n, dim));
  if (!out || !dl_dtype_is_float(out->dtype) || !ag_needed(ts, n)) return out;
  ag_node *nd = ag_node_new(stack ? "StackBackward" : "CatBackward", join_backward, ts, n);
  if (nd) {
    nd->op = stack;
    nd->iarg[0] = dim < 0 ? dim + out->ndim : dim;
  }
  if (!nd || ag_attach(out, nd)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

DL_API dl_tensor *dl_cat(dl_tensor *const *ts, int n, int dim) { return join(0, ts, n, dim); }
DL_API dl_tensor *dl_stack(dl_tensor *const *ts, int n, int dim) { return join(1, ts, n, dim); }
