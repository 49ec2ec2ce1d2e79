/*
** grad_reduce.c -- the public reductions, scans, sorts, matmuls and indexing
** ops: each runs its forward with grad mode off, then records its
** gradient formula.
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

/* -- Reductions ------------------------------------------------------------- */

static int reduce_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *y = n->saved[1];
  dl_tensor *gk = K(&s, unsqueeze_reduced(g, n));
  dl_tensor *yk = y ? K(&s, unsqueeze_reduced(y, n)) : NULL;
  int64_t count = 1;
  int nd = (int)n->iarg[1];
  for (int i = 0; i < n->in_ndim[0]; i++) {
    int red = nd == 0;
    for (int j = 0; j < nd; j++) red |= n->iarg[2 + j] == i;
    if (red) count *= n->in_shape[0][i];
  }
  double p = n->darg[0];
  dl_tensor *ones = K(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 1.0));
  switch (n->op) {
    case DL_SUM:
      gin[0] = R(&s, dl_binary(DL_MUL, gk, ones));
      break;
    case DL_MEAN:
      gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, gk, ones)),
                               NUM(&s, 1.0 / (double)count)));
      break;
    case DL_PROD:  /* g * prod / x (inputs with exact zeros get no gradient) */
      gin[0] = R(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, gk, yk)), x));
      break;
    case DL_AMAX:
    case DL_AMIN: {  /* split evenly among the elements equal to the result */
      dl_tensor *hit = K(&s, dl_to_dtype(K(&s, dl_binary(DL_EQ, x, yk)), g->dtype));
      int dims[DL_MAX_DIMS];
      for (int i = 0; i < nd; i++) dims[i] = (int)n->iarg[2 + i];
      dl_tensor *cnt = K(&s, dl_reduce(DL_SUM, hit, dims, nd, 1, 0));
      gin[0] = R(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, hit, gk)), cnt));
      break;
    }
    case DL_VAR:
    case DL_STD: {  /* d var / dx = 2 (x - mean) / (N - correction) */
      int dims[DL_MAX_DIMS];
      for (int i = 0; i < nd; i++) dims[i] = (int)n->iarg[2 + i];
      dl_tensor *mean = K(&s, dl_reduce(DL_MEAN, x, dims, nd, 1, 0));
      dl_tensor *dev = K(&s, dl_binary(DL_SUB, x, mean));
      double den = (double)count - p;
      dl_tensor *t = K(&s, dl_binary(DL_MUL, dev, NUM(&s, (n->op == DL_VAR ? 2.0 : 1.0) / den)));
      if (n->op == DL_STD) t = K(&s, dl_binary(DL_DIV, t, yk));
      gin[0] = R(&s, dl_binary(DL_MUL, t, gk));
      break;
    }
    case DL_NORM: {
      dl_tensor *sg = K(&s, dl_unary(DL_SIGN, x)), *t;
      if (p == 0) {
        t = K(&s, dl_binary(DL_MUL, x, NUM(&s, 0)));
      } else if (p == 1) {
        t = sg;
      } else if (isinf(p)) {  /* like amax of |x| */
        dl_tensor *ax = K(&s, dl_unary(DL_ABS, x));
        dl_tensor *hit = K(&s, dl_to_dtype(K(&s, dl_binary(DL_EQ, ax, yk)), g->dtype));
        int dims[DL_MAX_DIMS];
        for (int i = 0; i < nd; i++) dims[i] = (int)n->iarg[2 + i];
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
      break;
    }
    case DL_LOGSUMEXP:
      gin[0] = R(&s, dl_binary(DL_MUL, gk, K(&s, dl_unary(DL_EXP, K(&s, dl_binary(DL_SUB, x, yk))))));
      break;
    default:
      s.err = 1;
      dl_err(EM_AG_NODIFF, "reduction");
  }
  return ag_scope_end(&s);
}

static const char *const reduce_names[DL_NREDOPS] = {
    [DL_SUM] = "SumBackward", [DL_MEAN] = "MeanBackward", [DL_PROD] = "ProdBackward",
    [DL_AMAX] = "AmaxBackward", [DL_AMIN] = "AminBackward", [DL_VAR] = "VarBackward",
    [DL_STD] = "StdBackward", [DL_NORM] = "NormBackward",
    [DL_LOGSUMEXP] = "LogsumexpBackward"};

DL_API dl_tensor *dl_reduce(dl_redop op, const dl_tensor *t, const int *dims,
                            int ndims, int keepdim, double param) {
  dl_tensor *out;
  NOGRAD(out = fw_reduce(op, t, dims, ndims, keepdim, param));
  if (!out || op < 0 || op >= DL_NREDOPS || !reduce_names[op]) return out;
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[2] = {t, out};
  ag_node *n;
  out = ag_record(out, reduce_names[op], reduce_backward, ins, 1, save, 2, &n);
  if (n) {
    n->op = op;
    n->darg[0] = param;
    n->iarg[0] = keepdim != 0;
    n->iarg[1] = dims ? ndims : 0;
    for (int i = 0; dims && i < ndims; i++)  /* the forward checked them */
      n->iarg[2 + i] = dims[i] < 0 ? dims[i] + t->ndim : dims[i];
  }
  return out;
}

/* max/min along a dim: the gradient goes to the index each value came from. */
static int index_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *idx = n->saved[0], *G = (dl_tensor *)g;
  if (!n->iarg[1]) {  /* values lost the dim: put it back */
    idx = K(&s, dl_unsqueeze(idx, dim));
    G = K(&s, dl_unsqueeze(G, dim));
  }
  dl_tensor *z = K(&s, full_on(g->storage->device, n->in_shape[0], n->in_ndim[0], g->dtype, 0.0));
  gin[0] = R(&s, dl_scatter(z, dim, idx, G, n->op));
  return ag_scope_end(&s);
}

static int record_indexed(const char *name, const dl_tensor *t, int dim, int keep,
                          int add, dl_tensor **values, dl_tensor *indices) {
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[1] = {indices};
  ag_node *n;
  *values = ag_record(*values, name, index_backward, ins, 1, save, 1, &n);
  if (!*values) return -1;
  if (n) {
    n->iarg[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
    n->iarg[1] = keep;
    n->op = add;
  }
  return 0;
}

/* Records the node of an op with values and indices (rc its forward's
** result); on failure both results go and -1 is returned. */
static int indexed_done(int rc, const char *label, const dl_tensor *t, int dim, int keep,
                        dl_tensor **values, dl_tensor **indices) {
  if (rc || record_indexed(label, t, dim, keep, 0, values, *indices) == 0) return rc;
  dl_tensor_release(*values);
  dl_tensor_release(*indices);
  *values = *indices = NULL;
  return -1;
}

DL_API int dl_max_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_max_dim(t, dim, keepdim, values, indices));
  return indexed_done(rc, "MaxBackward", t, dim, keepdim, values, indices);
}

DL_API int dl_min_dim(const dl_tensor *t, int dim, int keepdim, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_min_dim(t, dim, keepdim, values, indices));
  return indexed_done(rc, "MinBackward", t, dim, keepdim, values, indices);
}

DL_API int dl_sort(const dl_tensor *t, int dim, int descending, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_sort(t, dim, descending, values, indices));
  return indexed_done(rc, "SortBackward", t, dim, 1, values, indices);
}

DL_API int dl_topk(const dl_tensor *t, int64_t k, int dim, int largest, int sorted, dl_tensor **values, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = fw_topk(t, k, dim, largest, sorted, values, indices));
  return indexed_done(rc, "TopkBackward", t, dim, 1, values, indices);
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


/* -- Along one dim: scans and softmax ------------------------------------------ */

static int dimop_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  int dim = (int)n->iarg[0];
  dl_tensor *x = n->saved[0], *y = n->saved[1], *G = (dl_tensor *)g;
  switch (n->op) {
    case 0: {  /* cumsum: reversed cumsum of g = total - cumsum + g */
      dl_tensor *tot = K(&s, dl_reduce(DL_SUM, G, &dim, 1, 1, 0));
      gin[0] = R(&s, dl_binary(DL_ADD, K(&s, dl_binary(DL_SUB, tot, K(&s, dl_cumsum(G, dim)))), G));
      break;
    }
    case 1: {  /* cumprod: reversed cumsum of g * y, over x (x != 0) */
      dl_tensor *gy = K(&s, dl_binary(DL_MUL, G, y));
      dl_tensor *tot = K(&s, dl_reduce(DL_SUM, gy, &dim, 1, 1, 0));
      dl_tensor *rev = K(&s, dl_binary(DL_ADD, K(&s, dl_binary(DL_SUB, tot, K(&s, dl_cumsum(gy, dim)))), gy));
      gin[0] = R(&s, dl_binary(DL_DIV, rev, x));
      break;
    }
    case 2: {  /* softmax: y * (g - sum(g * y)) */
      dl_tensor *dot = K(&s, dl_reduce(DL_SUM, K(&s, dl_binary(DL_MUL, G, y)), &dim, 1, 1, 0));
      gin[0] = R(&s, dl_binary(DL_MUL, y, K(&s, dl_binary(DL_SUB, G, dot))));
      break;
    }
    default: {  /* log_softmax: g - exp(y) * sum(g) */
      dl_tensor *sum = K(&s, dl_reduce(DL_SUM, G, &dim, 1, 1, 0));
      gin[0] = R(&s, dl_binary(DL_SUB, G, K(&s, dl_binary(DL_MUL, K(&s, dl_unary(DL_EXP, y)), sum))));
      break;
    }
  }
  return ag_scope_end(&s);
}

static dl_tensor *dim_op(int kind, const char *name, const dl_tensor *t, int dim) {
  static dl_tensor *(*const fw[4])(const dl_tensor *, int) = {
      fw_cumsum, fw_cumprod, fw_softmax, fw_log_softmax};
  dl_tensor *out;
  NOGRAD(out = fw[kind](t, dim));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  const dl_tensor *save[2] = {t, out};
  ag_node *n;
  out = ag_record(out, name, dimop_backward, ins, 1, save, 2, &n);
  if (n) {
    n->op = kind;
    n->iarg[0] = dim < 0 ? dim + (t->ndim ? t->ndim : 1) : dim;
  }
  return out;
}

DL_API dl_tensor *dl_cumsum(const dl_tensor *t, int dim) { return dim_op(0, "CumsumBackward", t, dim); }
DL_API dl_tensor *dl_cumprod(const dl_tensor *t, int dim) { return dim_op(1, "CumprodBackward", t, dim); }
DL_API dl_tensor *dl_softmax(const dl_tensor *t, int dim) { return dim_op(2, "SoftmaxBackward", t, dim); }
DL_API dl_tensor *dl_log_softmax(const dl_tensor *t, int dim) {
  return dim_op(3, "LogSoftmaxBackward", t, dim);
}

static int tri_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = n->op ? dl_triu(g, n->iarg[0]) : dl_tril(g, n->iarg[0]);
  return gin[0] ? 0 : -1;
}

static dl_tensor *tri(int upper, const dl_tensor *t, int64_t k) {
  dl_tensor *out;
  NOGRAD(out = upper ? fw_triu(t, k) : fw_tril(t, k));
  dl_tensor *ins[1] = {(dl_tensor *)t};
  ag_node *n;
  out = ag_record(out, upper ? "TriuBackward" : "TrilBackward", tri_backward, ins, 1, NULL, 0, &n);
  if (n) n->op = upper, n->iarg[0] = k;
  return out;
}
DL_API dl_tensor *dl_tril(const dl_tensor *t, int64_t k) { return tri(0, t, k); }
DL_API dl_tensor *dl_triu(const dl_tensor *t, int64_t k) { return tri(1, t, k); }
