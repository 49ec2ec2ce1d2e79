/*
** cuda/reduce.c -- reductions, max/min with indices, scans, softmax and
** sort on CUDA tensors: the strided layout of the input as the launchers of
** kernels/reduce.cu, scan.cu, softmax.cu and sort.cu take it, their
** workspaces, and the second pass of var, std and logsumexp.
*/
#include <string.h>

#include "cuda/cuda.h"

/* Appends (size, stride) to a dim list, fastest first, merging it into the
** previous dim when the two walk memory as one. */
static void push_dim(int64_t *shape, int64_t *stride, int *n, int64_t sz, int64_t st) {
  if (sz == 1) return;
  if (*n && stride[*n - 1] * shape[*n - 1] == st) {
    shape[*n - 1] *= sz;
    return;
  }
  shape[*n] = sz, stride[*n] = st;
  (*n)++;
}

/* Kept dims in the output's order; reduced dims by stride, the smallest
** first, so a row's elements are read in memory order. */
static void layout(dlc_reduce *r, const dl_tensor *x, const int *red) {
  int ord[DL_MAX_DIMS], nr = 0;
  for (int i = x->ndim - 1; i >= 0; i--) {
    if (!red[i]) push_dim(r->kshape, r->kstride, &r->nk, x->shape[i], x->stride[i]);
    else ord[nr++] = i;
  }
  for (int a = 1; a < nr; a++)  /* insertion sort by |stride| */
    for (int b = a; b > 0; b--) {
      int64_t s0 = x->stride[ord[b - 1]], s1 = x->stride[ord[b]];
      if ((s0 < 0 ? -s0 : s0) <= (s1 < 0 ? -s1 : s1)) break;
      int t = ord[b];
      ord[b] = ord[b - 1], ord[b - 1] = t;
    }
  for (int j = 0; j < nr; j++)
    push_dim(r->rshape, r->rstride, &r->nr, x->shape[ord[j]], x->stride[ord[j]]);
}

/* One pass into out (a tensor, or the float64 centres). */
static int run_pass(const char *op, int dev, dlc_reduce *r) {
  DLC_FN(reduce_ws) ws = DLC(op, reduce_ws);
  DLC_FN(reduce_run) run = ws ? DLC(op, reduce_run) : NULL;
  if (!run) return -1;
  size_t bytes = ws(r);
  int64_t nb = (int64_t)bytes;
  dl_tensor *w = bytes ? tensor_new_on(dev, DL_UINT8, &nb, 1) : NULL;
  if (bytes && !w) return -1;
  int rc = cuda_err(op, dev, run(dev, r, w ? tensor_first(w) : NULL));
  dl_tensor_release(w);  /* the allocator keeps it for this stream's next use */
  return rc;
}

DL_HIDDEN int cuda_reduce(const char *op, const dl_tensor *x, const int *red, reduce_pass kop,
                          dl_redop redop, double param, int64_t N, dl_tensor *out) {
  int dev = x->storage->device;
  dlc_reduce r;
  memset(&r, 0, sizeof r);
  r.kop = kop, r.redop = redop, r.in_dtype = x->dtype, r.out_dtype = out->dtype;
  r.param = param, r.M = dl_tensor_numel(out), r.N = N;
  r.x = tensor_first(x), r.out = tensor_first(out);
  if (r.M == 0) return 0;
  if (N > 0) layout(&r, x, red);
  else r.nk = r.nr = 0;  /* nothing to read: every output is the identity */
  int centred = N > 0 && (redop == DL_VAR || redop == DL_STD || redop == DL_LOGSUMEXP);
  if (!centred) return run_pass(op, dev, &r);
  /* a first pass for the centres: the mean, or the max */
  dl_tensor *cen = tensor_new_on(dev, DL_FLOAT64, &r.M, 1);
  if (!cen) return -1;
  dlc_reduce r1 = r;
  r1.kop = redop == DL_LOGSUMEXP ? K_MAX : K_SUM;
  r1.redop = -1, r1.out_dtype = DL_FLOAT64, r1.out = tensor_first(cen);
  int rc = run_pass(op, dev, &r1);
  r.center = (const double *)tensor_first(cen);
  if (!rc) rc = run_pass(op, dev, &r);
  dl_tensor_release(cen);
  return rc;
}

/* Slices along dim d: the other dims in order, fastest first. */
static void along_dim(dlc_reduce *r, const dl_tensor *x, int d) {
  memset(r, 0, sizeof *r);
  r->in_dtype = x->dtype, r->x = tensor_first(x);
  r->N = x->ndim ? x->shape[d] : 1;
  r->M = r->N ? dl_tensor_numel(x) / r->N : 0;
  r->nr = 1, r->rshape[0] = r->N, r->rstride[0] = x->ndim ? x->stride[d] : 0;
  for (int i = x->ndim - 1; i >= 0; i--)
    if (i != d) push_dim(r->kshape, r->kstride, &r->nk, x->shape[i], x->stride[i]);
}

DL_HIDDEN int cuda_argreduce(const char *op, const dl_tensor *x, int d, dl_redop which,
                             dl_tensor *values, dl_tensor *indices) {
  int dev = x->storage->device;
  DLC_FN(argreduce_ws) ws = DLC(op, argreduce_ws);
  DLC_FN(argreduce) f = ws ? DLC(op, argreduce) : NULL;
  if (!f) return -1;
  dlc_reduce r;
  along_dim(&r, x, d);
  r.M = dl_tensor_numel(indices);
  int64_t nb = (int64_t)ws(&r);
  dl_tensor *w = nb ? tensor_new_on(dev, DL_UINT8, &nb, 1) : NULL;
  if (nb && !w) return -1;
  void *v = values ? tensor_first(values) : NULL;
  int rc = cuda_err(op, dev, f(dev, which == DL_AMAX, &r, v, (int64_t *)tensor_first(indices),
                               w ? tensor_first(w) : NULL));
  dl_tensor_release(w);
  return rc;
}

/* A launcher along the middle dim of contiguous [outer, n, inner] x into y:
** scan's and softmax's take the same arguments (kind: theirs). */
static int along_middle(const char *op, DLC_FN(scan) f, int kind, const dl_tensor *x,
                        dl_tensor *y, int64_t outer, int64_t n, int64_t inner) {
  int dev = x->storage->device;
  if (!f) return -1;
  return cuda_err(op, dev, f(dev, kind, x->dtype, outer, n, inner, tensor_first(x), tensor_first(y)));
}

DL_HIDDEN int cuda_scan(const char *op, scan_kind kind, const dl_tensor *x, dl_tensor *y,
                        int64_t outer, int64_t n, int64_t inner) {
  return along_middle(op, DLC(op, scan), kind, x, y, outer, n, inner);
}

DL_HIDDEN int cuda_softmax(const char *op, int log, const dl_tensor *x, dl_tensor *y,
                           int64_t outer, int64_t n, int64_t inner) {
  return along_middle(op, DLC(op, softmax), log, x, y, outer, n, inner);
}

DL_HIDDEN int cuda_sort(const char *op, const dl_tensor *x, int d, int desc, int64_t k,
                        dl_tensor *values, dl_tensor *indices) {
  int dev = x->storage->device;
  DLC_FN(sort_ws) ws = DLC(op, sort_ws);
  DLC_FN(sort) run = ws ? DLC(op, sort) : NULL;
  if (!run) return -1;
  dlc_reduce r;
  along_dim(&r, x, d);
  if (r.M == 0 || k == 0) return 0;
  int64_t inner = 1, nb = (int64_t)ws(&r);
  for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
  dl_tensor *w = tensor_new_on(dev, DL_UINT8, &nb, 1);
  if (!w) return -1;
  int rc = cuda_err(op, dev, run(dev, desc, k, inner, &r, tensor_first(values),
                                 (int64_t *)tensor_first(indices), tensor_first(w)));
  dl_tensor_release(w);
  return rc;
}
