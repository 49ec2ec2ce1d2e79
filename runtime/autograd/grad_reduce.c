/*
** grad_reduce.c -- the public ops along dims: reductions, softmax and its
** family, values with indices (max, min, sort, topk), scans, triangles.
** Each runs its forward with grad mode off, then records the node of its
** gradient rule (rules.h), whose formula is here.
*/
#include <math.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "ops/forward.h"

/* g of a reduction, with the reduced dims put back (size 1). */
static dl_tensor *unsqueeze_reduced(const dl_tensor *g, const ag_node *n) {
  int keep = (int)n->iarg[0], nd = (int)n->iarg[1], ndim = n->in_ndim[0];
  if (keep) return dl_clone(g);
  int64_t shape[DL_MAX_DIMS];
  int red[DL_MAX_DIMS] = {0};
  for (int i = 0; i < nd; i++) red[n->iarg[2 + i]] = 1;
  if (nd == 0) for (int i = 0; i < ndim; i++) red[i] = 1;
  for (int i = 0; i < ndim; i++) shape[i] = red[i] ? 1 : n->in_shape[0][i];
  return dl_reshape(g, shape, ndim);
}

/* The dims a reduction reduced, into dims (iarg[2..]); returns how many
** were listed (0: all of them, as the forward took none). */
static int reduced_dims(const ag_node *n, int *dims) {
  int nd = (int)n->iarg[1];
  for (int i = 0; i < nd; i++) dims[i] = (int)n->iarg[2 + i];
  return nd;
}

/* How many elements of x went into each result. */
static int64_t reduced_count(const ag_node *n) {
  int64_t count = 1;
  int nd = (int)n->iarg[1];
  for (int i = 0; i < n->in_ndim[0]; i++) {
    int red = nd == 0;
    for (int j = 0; j < nd; j++) red |= n->iarg[2 + j] == i;
    if (red) count *= n->in_shape[0][i];
  }
  return count;
}

/* -- Reductions: x and the result saved; iarg: keepdim, how many dims, the
** dims; darg[0]: the parameter (var's correction, norm's p) ----------------- */

/* g over the whole of x: g (its reduced dims put back) times ones shaped
** like x */
static dl_tensor *expand_reduced(ag_scope *s, ag_node *n, const dl_tensor *g) {
  dl_tensor *ones = K(s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 1.0));
  return dl_binary(DL_MUL, K(s, unsqueeze_reduced(g, n)), ones);
}

DL_HIDDEN int bw_sum(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  gin[0] = R(&s, expand_reduced(&s, n, g));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_mean(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  gin[0] = R(&s, dl_binary(DL_MUL, K(&s, expand_reduced(&s, n, g)),
                           NUM(&s, 1.0 / (double)reduced_count(n))));
  return ag_scope_end(&s);
}

/* g * prod / x (inputs with exact zeros get no gradient) */
DL_HIDDEN int bw_prod(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *gk = K(&s, unsqueeze_reduced(g, n)), *yk = K(&s, unsqueeze_reduced(n->saved[1], n));
  gin[0] = R(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, gk, yk)), n->saved[0]));
  return ag_scope_end(&s);
}

/* amax and amin: split evenly among the elements equal to the result */
DL_HIDDEN int bw_extreme(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *gk = K(&s, unsqueeze_reduced(g, n)), *yk = K(&s, unsqueeze_reduced(n->saved[1], n));
  dl_tensor *hit = K(&s, dl_to_dtype(K(&s, dl_binary(DL_EQ, n->saved[0], yk)), g->dtype));
  int dims[DL_MAX_DIMS], nd = reduced_dims(n, dims);
  dl_tensor *cnt = K(&s, dl_reduce(DL_SUM, hit, dims, nd, 1, 0));
  gin[0] = R(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, hit, gk)), cnt));
  return ag_scope_end(&s);
}

/* var (op DL_VAR) and std (DL_STD): d var / dx = 2 (x - mean) / (N - correction),
** and d std = d var / (2 std) */
static int var_std_grad(ag_node *n, const dl_tensor *g, dl_tensor **gin, dl_redop op) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *gk = K(&s, unsqueeze_reduced(g, n));
  int dims[DL_MAX_DIMS], nd = reduced_dims(n, dims);
  dl_tensor *mean = K(&s, dl_reduce(DL_MEAN, x, dims, nd, 1, 0));
  dl_tensor *dev = K(&s, dl_binary(DL_SUB, x, mean));
  double den = (double)reduced_count(n) - n->darg[0];
  dl_tensor *t = K(&s, dl_binary(DL_MUL, dev, NUM(&s, (op == DL_VAR ? 2.0 : 1.0) / den)));
  if (op == DL_STD) t = K(&s, dl_binary(DL_DIV, t, K(&s, unsqueeze_reduced(n->saved[1], n))));
  gin[0] = R(&s, dl_binary(DL_MUL, t, gk));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_var(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return var_std_grad(n, g, gin, DL_VAR);
}

DL_HIDDEN int bw_std(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return var_std_grad(n, g, gin, DL_STD);
}

DL_HIDDEN int bw_norm(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *gk = K(&s, unsqueeze_reduced(g, n));
  dl_tensor *yk = K(&s, unsqueeze_reduced(n->saved[1], n));
  double p = n->darg[0];
  dl_tensor *sg = K(&s, dl_unary(DL_SIGN, x)), *t;
  if (p == 0) {
    t = K(&s, dl_binary(DL_MUL, x, NUM(&s, 0)));
  } else if (p == 1) {
    t = sg;
  } else if (isinf(p)) {  /* like amax of |x| */
    dl_tensor *ax = K(&s, dl_unary(DL_ABS, x));
    dl_tensor *hit = K(&s, dl_to_dtype(K(&s, dl_binary(DL_EQ, ax, yk)), g->dtype));
    int dims[DL_MAX_DIMS], nd = reduced_dims(n, dims);
    dl_tensor *cnt = K(&s, dl_reduce(DL_SUM, hit, dims, nd, 1, 0));
    t = K(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, hit, sg)), cnt));
  } else {  /* sign(x) |x|^(p-1) / norm^(p-1), 0 where the norm is 0 */
    dl_tensor *num = K(&s, dl_binary(DL_MUL, sg, K(&s, dl_binary(DL_POW, K(&s, dl_unary(DL_ABS, x)), NUM(&s, p - 1)))));
    dl_tensor *den = K(&s, dl_binary(DL_POW, yk, NUM(&s, p - 1)));
    /* where rather than masked_fill: it runs on CUDA too */
    t = K(&s, dl_where(K(&s, dl_binary(DL_EQ, yk, NUM(&s, 0))), NUM(&s, 0),
                       K(&s, dl_binary(DL_DIV, num, den))));
  }
  gin[0] = R(&s, dl_binary(DL_MUL, t, gk));
  return ag_scope_end(&s);
}

/* -- Softmax's family: logsumexp, softmax, log_softmax -----------------------
** They sit together, with the reductions rather than with the scans their
** forward once shared a file with, because their formulas are each
** other's: log_softmax(x) = x - logsumexp(x), logsumexp's gradient is
** g * softmax(x), and both softmaxes' gradients are sums along the dim, as
** a reduction's are. */

DL_HIDDEN int bw_logsumexp(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *gk = K(&s, unsqueeze_reduced(g, n)), *yk = K(&s, unsqueeze_reduced(n->saved[1], n));
  gin[0] = R(&s, dl_binary(DL_MUL, gk, K(&s, dl_unary(DL_EXP, K(&s, dl_binary(DL_SUB, n->saved[0], yk))))));
  return ag_scope_end(&s);
}

/* softmax and log_softmax: x and the result y saved; iarg[0]: the dim */

/* y * (g - sum(g * y)) */
DL_HIDDEN int bw_softmax(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *y = n->saved[1];
  dl_tensor *dot = K(&s, dl_reduce(DL_SUM, K(&s, dl_binary(DL_MUL, g, y)), &dim, 1, 1, 0));
  gin[0] = R(&s, dl_binary(DL_MUL, y, K(&s, dl_binary(DL_SUB, g, dot))));
  return ag_scope_end(&s);
}

/* g - exp(y) * sum(g) */
DL_HIDDEN int bw_log_softmax(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *sum = K(&s, dl_reduce(DL_SUM, g, &dim, 1, 1, 0));
  gin[0] = R(&s, dl_binary(DL_SUB, g, K(&s, dl_binary(DL_MUL, K(&s, dl_unary(DL_EXP, n->saved[1])), sum))));
  return ag_scope_end(&s);
}

/* -- Recording ---------------------------------------------------------------- */

/* The node of each reduction (the integer counts have none). */
static const ag_rule *const reduce_rules[DL_NREDOPS] = {
    [DL_SUM] = &ag_rules[AG_SUM], [DL_MEAN] = &ag_rules[AG_MEAN],
    [DL_PROD] = &ag_rules[AG_PROD], [DL_AMAX] = &ag_rules[AG_AMAX],
    [DL_AMIN] = &ag_rules[AG_AMIN], [DL_VAR] = &ag_rules[AG_VAR],
    [DL_STD] = &ag_rules[AG_STD], [DL_NORM] = &ag_rules[AG_NORM],
    [DL_LOGSUMEXP] = &ag_rules[AG_LOGSUMEXP]};

DL_API dl_tensor *dl_reduce(dl_redop op, const dl_tensor *t, const int *dims,
                            int ndims, int keepdim, double param) {
  dl_tensor *out;
  NOGRAD(out = fw_reduce(op, t, dims, ndims, keepdim, param));
  if (!out || op < 0 || op >= DL_NREDOPS || !reduce_rules[op]) return out;
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[2] = {t, out};
  ag_node *n;
  out = ag_record(out, reduce_rules[op]->kind, ins, 1, save, 2, &n);
  if (n) {
    n->darg[0] = param;
    n->iarg[0] = keepdim != 0;
    n->iarg[1] = dims ? ndims : 0;
    for (int i = 0; dims && i < ndims; i++)  /* the forward checked them */
      n->iarg[2 + i] = dims[i] < 0 ? dims[i] + t->ndim : dims[i];
  }
  return out;
}

/* softmax, log_softmax and the scans: x and the result saved, the dim in
** iarg[0] (normalised). */
static dl_tensor *record_along(dl_tensor *out, ag_rule_kind kind, const dl_tensor *t, int dim) {
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[2] = {t, out};
  ag_node *n;
  out = ag_record(out, kind, ins, 1, save, 2, &n);
  if (n) n->iarg[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
  return out;
}

DL_API dl_tensor *dl_softmax(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_softmax(t, dim));
  return record_along(out, AG_SOFTMAX, t, dim);
}

DL_API dl_tensor *dl_log_softmax(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_log_softmax(t, dim));
  return record_along(out, AG_LOG_SOFTMAX, t, dim);
}

/* -- Values with their indices: max and min along a dim, sort, topk ---------- */

/* The gradient goes to the index each value came from; indices saved, iarg:
** the dim (normalised), whether the values kept it. */
DL_HIDDEN int bw_indices(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *idx = n->saved[0], *G = (dl_tensor *)g;
  if (!n->iarg[1]) {  /* values lost the dim: put it back */
    idx = K(&s, dl_unsqueeze(idx, dim));
    G = K(&s, dl_unsqueeze(G, dim));
  }
  dl_tensor *z = K(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
  gin[0] = R(&s, dl_scatter(z, dim, idx, G, DL_SCATTER_REPLACE));
  return ag_scope_end(&s);
}

static int record_indexed(ag_rule_kind kind, const dl_tensor *t, int dim, int keep,
                          dl_tensor **values, dl_tensor *indices) {
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[1] = {indices};
  ag_node *n;
  *values = ag_record(*values, kind, ins, 1, save, 1, &n);
  if (!*values) return -1;
  if (n) {
    n->iarg[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
    n->iarg[1] = keep;
  }
  return 0;
}

/* Records the node of an op with values and indices (rc its forward's
** result); on failure both results go and -1 is returned. */
static int indexed_done(int rc, ag_rule_kind kind, const dl_tensor *t, int dim, int keep,
                        dl_tensor **values, dl_tensor **indices) {
  if (rc || record_indexed(kind, t, dim, keep, values, *indices) == 0) return rc;
  dl_tensor_release(*values);
  dl_tensor_release(*indices);
  *values = *indices = NULL;
  return -1;
}

DL_API int dl_max_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_max_dim(t, dim, keepdim, values, indices));
  return indexed_done(rc, AG_MAX, t, dim, keepdim, values, indices);
}

DL_API int dl_min_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_min_dim(t, dim, keepdim, values, indices));
  return indexed_done(rc, AG_MIN, t, dim, keepdim, values, indices);
}

DL_API int dl_sort(const dl_tensor *t, int dim, int descending, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_sort(t, dim, descending, values, indices));
  return indexed_done(rc, AG_SORT, t, dim, 1, values, indices);
}

DL_API int dl_topk(const dl_tensor *t, int64_t k, int dim, int largest, int sorted, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_topk(t, k, dim, largest, sorted, values, indices));
  return indexed_done(rc, AG_TOPK, t, dim, 1, values, indices);
}


/* Integer results: no gradient, only grad mode off while computing. */
DL_API dl_tensor *dl_argmax(const dl_tensor *t, int dim, int keepdim) {
  dl_tensor *out;
  NOGRAD(out = fw_argmax(t, dim, keepdim));
  return out;
}

DL_API dl_tensor *dl_argmin(const dl_tensor *t, int dim, int keepdim) {
  dl_tensor *out;
  NOGRAD(out = fw_argmin(t, dim, keepdim));
  return out;
}

DL_API dl_tensor *dl_nonzero(const dl_tensor *t) {
  dl_tensor *out;
  NOGRAD(out = fw_nonzero(t));
  return out;
}

DL_API dl_tensor *dl_one_hot(const dl_tensor *t, int64_t num_classes) {
  dl_tensor *out;
  NOGRAD(out = fw_one_hot(t, num_classes));
  return out;
}


/* -- Scans: x and the result saved, the dim in iarg[0] ------------------------ */

/* the reversed cumsum of g = total - cumsum + g */
DL_HIDDEN int bw_cumsum(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *tot = K(&s, dl_reduce(DL_SUM, g, &dim, 1, 1, 0));
  gin[0] = R(&s, dl_binary(DL_ADD, K(&s, dl_binary(DL_SUB, tot, K(&s, dl_cumsum(g, dim)))), g));
  return ag_scope_end(&s);
}

/* the reversed cumsum of g * y, over x (x != 0) */
DL_HIDDEN int bw_cumprod(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *gy = K(&s, dl_binary(DL_MUL, g, n->saved[1]));
  dl_tensor *tot = K(&s, dl_reduce(DL_SUM, gy, &dim, 1, 1, 0));
  dl_tensor *rev = K(&s, dl_binary(DL_ADD, K(&s, dl_binary(DL_SUB, tot, K(&s, dl_cumsum(gy, dim)))), gy));
  gin[0] = R(&s, dl_binary(DL_DIV, rev, n->saved[0]));
  return ag_scope_end(&s);
}

DL_API dl_tensor *dl_cumsum(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_cumsum(t, dim));
  return record_along(out, AG_CUMSUM, t, dim);
}

DL_API dl_tensor *dl_cumprod(const dl_tensor *t, int dim) {
  dl_tensor *out;
  NOGRAD(out = fw_cumprod(t, dim));
  return record_along(out, AG_CUMPROD, t, dim);
}

/* -- Triangles: nothing saved, the diagonal k in iarg[0] ---------------------- */

DL_HIDDEN int bw_tril(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_tril(g, n->iarg[0]);
  return gin[0] ? 0 : -1;
}

DL_HIDDEN int bw_triu(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_triu(g, n->iarg[0]);
  return gin[0] ? 0 : -1;
}

static dl_tensor *record_tri(dl_tensor *out, ag_rule_kind kind, const dl_tensor *t, int64_t k) {
  dl_tensor *ins[1] = {(dl_tensor *)t};
  ag_node *n;
  out = ag_record(out, kind, ins, 1, NULL, 0, &n);
  if (n) n->iarg[0] = k;
  return out;
}

DL_API dl_tensor *dl_tril(const dl_tensor *t, int64_t k) {
  dl_tensor *out;
  NOGRAD(out = fw_tril(t, k));
  return record_tri(out, AG_TRIL, t, k);
}

DL_API dl_tensor *dl_triu(const dl_tensor *t, int64_t k) {
  dl_tensor *out;
  NOGRAD(out = fw_triu(t, k));
  return record_tri(out, AG_TRIU, t, k);
}
