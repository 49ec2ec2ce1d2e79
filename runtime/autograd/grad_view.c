/*
** grad_view.c -- the public view ops: each runs its forward (view.c) with
** grad mode off, then records its gradient rule (rules.h), how to route the
** gradient back.
*/
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "ops/forward.h"

/* A view of a: the node has a as its one input and saves nothing. */
static dl_tensor *view_record(dl_tensor *out, const dl_tensor *a, ag_rule_kind kind,
                              ag_node **made) {
  dl_tensor *ins[1] = {(dl_tensor *)a};
  return ag_record(out, kind, ins, 1, NULL, 0, made);
}

/* -- Reshapes: the gradient is reshaped back ------------------------------- */

DL_HIDDEN int bw_reshape(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_reshape(g, n->in_shape[0], n->in_ndim[0]);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_view(const dl_tensor *t, const int64_t *shape, int ndim) {
  dl_tensor *out;
  NOGRAD(out = fw_view(t, shape, ndim));
  return view_record(out, t, AG_VIEW, NULL);
}

DL_API dl_tensor *dl_reshape(const dl_tensor *t, const int64_t *shape, int ndim) {
  dl_tensor *out;
  NOGRAD(out = fw_reshape(t, shape, ndim));
  return view_record(out, t, AG_RESHAPE, NULL);
}

DL_API dl_tensor *dl_squeeze(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_squeeze(t, dim));
  return view_record(out, t, AG_SQUEEZE, NULL);
}

DL_API dl_tensor *dl_squeeze_all(const dl_tensor *t) {
  dl_tensor *out;
  NOGRAD(out = fw_squeeze_all(t));
  return view_record(out, t, AG_SQUEEZE, NULL);
}

DL_API dl_tensor *dl_unsqueeze(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_unsqueeze(t, dim));
  return view_record(out, t, AG_UNSQUEEZE, NULL);
}

DL_API dl_tensor *dl_flatten(const dl_tensor *t, int start_dim, int end_dim) {
  dl_tensor *out;
  NOGRAD(out = fw_flatten(t, start_dim, end_dim));
  return view_record(out, t, AG_FLATTEN, NULL);
}


/* expand: bw_identity (grad_elementwise.c), the engine sums the gradient
** back over the expanded dims */
DL_API dl_tensor *dl_expand(const dl_tensor *t, const int64_t *shape, int ndim) {
  dl_tensor *out;
  NOGRAD(out = fw_expand(t, shape, ndim));
  return view_record(out, t, AG_EXPAND, NULL);
}

/* -- Transpose and permute -------------------------------------------------- */

DL_HIDDEN int bw_transpose(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_transpose(g, (int)n->iarg[0], (int)n->iarg[1]);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_transpose(const dl_tensor *t, int d0, int d1) {
  dl_tensor *out;
  NOGRAD(out = fw_transpose(t, d0, d1));
  ag_node *n;
  out = view_record(out, t, AG_TRANSPOSE, &n);
  if (n) n->iarg[0] = d0, n->iarg[1] = d1;
  return out;
}

DL_HIDDEN int bw_permute(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  int inv[DL_MAX_DIMS];
  for (int i = 0; i < n->in_ndim[0]; i++) inv[n->iarg[i]] = i;
  gin[0] = dl_permute(g, inv, n->in_ndim[0]);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_permute(const dl_tensor *t, const int *perm, int ndim) {
  dl_tensor *out;
  NOGRAD(out = fw_permute(t, perm, ndim));
  ag_node *n;
  out = view_record(out, t, AG_PERMUTE, &n);
  for (int i = 0; n && i < ndim; i++)  /* normalised: the forward checked them */
    n->iarg[i] = perm[i] < 0 ? perm[i] + ndim : perm[i];
  return out;
}

/* -- Narrow and select: the gradient lands in a zero tensor ------------------ */

/* The part of t the node took: narrow's iarg holds dim, start, length;
** select's dim, index. */
static dl_tensor *narrowed(const ag_node *n, const dl_tensor *t) {
  return dl_narrow(t, (int)n->iarg[0], n->iarg[1], n->iarg[2]);
}

static dl_tensor *selected(const ag_node *n, const dl_tensor *t) {
  return dl_select(t, (int)n->iarg[0], n->iarg[1]);
}

static int slice_grad(ag_node *n, const dl_tensor *g, dl_tensor **gin,
                      dl_tensor *(*part_of)(const ag_node *, const dl_tensor *)) {
  ag_scope s = {0};
  dl_tensor *z = R(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
  dl_tensor *part = z ? K(&s, part_of(n, z)) : NULL;
  if (part && dl_copy_(part, g)) s.err = 1;
  gin[0] = z;
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_narrow(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return slice_grad(n, g, gin, narrowed);
}

DL_HIDDEN int bw_select(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return slice_grad(n, g, gin, selected);
}

DL_HIDDEN int ag_is_slice(const ag_node *n) {
  return n->rule->kind == AG_NARROW || n->rule->kind == AG_SELECT;
}

/* The engine's short cut for a slice node whose input already has a
** gradient sum of its own: g is added into that sum's slice in place,
** instead of a zero tensor of the whole input being made, filled in and
** added (split's pieces: 3 fills and 2 whole adds per q, k, v in a GPT). */
DL_HIDDEN int ag_slice_add(const ag_node *n, dl_tensor *acc, const dl_tensor *g) {
  dl_tensor *part = n->rule->kind == AG_SELECT ? selected(n, acc) : narrowed(n, acc);
  int rc = part ? dl_binary_(DL_ADD, part, g) : -1;
  dl_tensor_release(part);
  return rc;
}

DL_API dl_tensor *dl_narrow(const dl_tensor *t, int dim, int64_t start,
                            int64_t length) {
  dl_tensor *out;
  NOGRAD(out = fw_narrow(t, dim, start, length));
  ag_node *n;
  out = view_record(out, t, AG_NARROW, &n);
  if (n) {  /* normalised as the forward did, which checked them */
    int d = dim < 0 ? dim + t->ndim : dim;
    n->iarg[0] = d;
    n->iarg[1] = start < 0 ? start + t->shape[d] : start;
    n->iarg[2] = length;
  }
  return out;
}

DL_API dl_tensor *dl_select(const dl_tensor *t, int dim, int64_t index) {
  dl_tensor *out;
  NOGRAD(out = fw_select(t, dim, index));
  ag_node *n;
  out = view_record(out, t, AG_SELECT, &n);
  if (n) {
    int d = dim < 0 ? dim + t->ndim : dim;
    n->iarg[0] = d;
    n->iarg[1] = index < 0 ? index + t->shape[d] : index;
  }
  return out;
}

DL_API dl_tensor *dl_as_strided(const dl_tensor *t, const int64_t *shape,
                                const int64_t *strides, int ndim,
                                int64_t offset) {
  if (ag_needed1(t)) return dl_errp(EM_AG_NODIFF, "as_strided");
  return fw_as_strided(t, shape, strides, ndim, offset);
}
