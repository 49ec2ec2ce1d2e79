/*
** cuda/nn.c -- the CUDA halves of the nn ops, random fills and optimizer
** steps (core/device_slots.h's cuda_<slot>): operands made contiguous in the compute
** dtype on their device, scratch and outputs allocated there, the
** launchers of runtime/cuda/{nn,norm,random,optim}.cu called, results
** cast back to the caller's dtype.  No host syncs except the index range
** checks, which must read the indices back to name a bad one.
*/
#include <stdlib.h>

#include "cuda/cuda.h"
#include "nn/nn.h"


static void *dp(const dl_tensor *t) { return t ? tensor_first(t) : NULL; }

static void release(int n, dl_tensor **ts) {
  for (int i = 0; i < n; i++) dl_tensor_release(ts[i]);
}
#define RELEASE(...)                                            \
  do {                                                          \
    dl_tensor *rel_[] = {__VA_ARGS__};                          \
    release((int)(sizeof rel_ / sizeof rel_[0]), rel_);         \
  } while (0)


/* The first index out of range as the CPU reports it; -1 when any is. */
static int check_indices(const char *op, int dev, const dl_tensor *ci, int64_t rows,
                         int64_t ignore, int use_ignore, int target) {
  DLC_FN(bad_index) f = DLC(op, bad_index);
  if (!f) return -1;
  int64_t pos = -1, val = 0;
  if (cuda_err(op, dev, f(dev, (const int64_t *)dp(ci), dl_tensor_numel(ci), rows, ignore,
                           use_ignore, &pos, &val)))
    return -1;
  if (pos < 0) return 0;
  return dl_err(target ? EM_NN_TARGET_RANGE : EM_NN_INDEX_RANGE, op, (long long)val,
                (long long)rows, (long long)pos);
}

/* -- Losses ---------------------------------------------------------------------- */

DL_HIDDEN dl_tensor *cuda_cls_forward(const char *op, cls_input logits, const dl_tensor *input,
                                      const dl_tensor *target, const dl_tensor *weight,
                                      int64_t ignore, double ls, dl_loss_reduction reduction, int64_t N,
                                      int64_t C, int64_t S, const int64_t *tshape, int tnd) {
  DLC_FN(cls_forward) f = DLC(op, cls_forward);
  if (!f) return NULL;
  int dev = input->storage->device, kd = nn_kdtype(input->dtype);
  int64_t P = N * S, nbuf = nn_max64(3 * P, 1), one = 1;
  dl_tensor *ci = cuda_prep(target, DL_INT64, dev), *cz = NULL, *cw = NULL, *buf = NULL,
            *out = NULL;
  if (!ci || !(cz = cuda_prep(input, kd, dev)) ||
      (weight && !(cw = cuda_prep(weight, DL_FLOAT64, dev))) ||
      !(buf = tensor_new_on(dev, DL_FLOAT64, &nbuf, 1)) ||
      !(out = tensor_new_on(dev, input->dtype, reduction == DL_LOSS_NONE ? tshape : &one,
                            reduction == DL_LOSS_NONE ? tnd : 0)))
    goto fail;
  int64_t pos = -1, val = 0;  /* the targets are checked by the loss kernel itself */
  if (cuda_err(op, dev, f(dev, kd, logits, N, C, S, dp(cz), dp(ci), dp(cw), ignore, ls,
                          reduction, dp(buf), dp(out), input->dtype, &pos, &val)))
    goto fail;
  if (pos >= 0) {
    dl_err(EM_NN_TARGET_RANGE, op, (long long)val, (long long)C, (long long)pos);
    goto fail;
  }
  RELEASE(ci, cz, cw, buf);
  return out;
fail:
  RELEASE(ci, cz, cw, buf, out);
  return NULL;
}

DL_HIDDEN dl_tensor *cuda_cls_backward(const char *op, cls_input logits, const dl_tensor *grad_out,
                                       const dl_tensor *input, const dl_tensor *target,
                                       const dl_tensor *weight, int64_t ignore, double ls,
                                       dl_loss_reduction reduction, int64_t N, int64_t C, int64_t S,
                                       int checked) {
  DLC_FN(cls_backward) f = DLC(op, cls_backward);
  if (!f) return NULL;
  int dev = input->storage->device, kd = nn_kdtype(input->dtype);
  int64_t two = 2;
  dl_tensor *ci = cuda_prep(target, DL_INT64, dev), *cz = NULL, *cg = NULL, *cw = NULL, *buf = NULL,
            *gi = NULL;
  if (!ci || (!checked && check_indices(op, dev, ci, C, ignore, 1, 1)) ||
      !(cz = cuda_prep(input, kd, dev)) || !(cg = cuda_prep(grad_out, kd, dev)) ||
      (weight && !(cw = cuda_prep(weight, DL_FLOAT64, dev))) ||
      !(buf = tensor_new_on(dev, DL_FLOAT64, &two, 1)) ||
      !(gi = tensor_new_on(dev, kd, input->shape, input->ndim)))
    goto fail;
  if (cuda_err(op, dev, f(dev, kd, logits, N, C, S, dp(cz), dp(ci), dp(cw), ignore, ls,
                          reduction, dp(cg), dp(buf), dp(gi))))
    goto fail;
  RELEASE(ci, cz, cg, cw, buf);
  return nn_finish(gi, input->dtype);
fail:
  RELEASE(ci, cz, cg, cw, buf, gi);
  return NULL;
}

DL_HIDDEN dl_tensor *cuda_mse(const char *op, const dl_tensor *input, const dl_tensor *target,
                              dl_loss_reduction reduction) {
  DLC_FN(mse) f = DLC(op, mse);
  DLC_FN(mse_parts) parts = DLC(op, mse_parts);
  if (!f || !parts) return NULL;
  int dev = input->storage->device, kd = nn_kdtype(input->dtype);
  int64_t n = dl_tensor_numel(input), np = nn_max64(parts(n), 1);
  dl_tensor *ca = cuda_prep(input, kd, dev), *cb = ca ? cuda_prep(target, kd, dev) : NULL,
            *buf = NULL, *out = NULL;
  int none = reduction == DL_LOSS_NONE;
  if (!cb || (!none && !(buf = tensor_new_on(dev, DL_FLOAT64, &np, 1))) ||
      !(out = none ? tensor_new_on(dev, kd, input->shape, input->ndim)
                   : tensor_new_on(dev, input->dtype, &n, 0)))
    goto fail;
  if (cuda_err(op, dev, f(dev, kd, reduction, n, dp(ca), dp(cb), dp(buf), dp(out), input->dtype)))
    goto fail;
  RELEASE(ca, cb, buf);
  return none ? nn_finish(out, input->dtype) : out;
fail:
  RELEASE(ca, cb, buf, out);
  return NULL;
}

DL_HIDDEN dl_tensor *cuda_mse_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *input, const dl_tensor *target,
                                       dl_loss_reduction reduction) {
  DLC_FN(mse_backward) f = DLC(op, mse_backward);
  if (!f) return NULL;
  int dev = input->storage->device, kd = nn_kdtype(input->dtype);
  int64_t n = dl_tensor_numel(input);
  dl_tensor *ca = cuda_prep(input, kd, dev), *cb = ca ? cuda_prep(target, kd, dev) : NULL;
  dl_tensor *cg = cb ? cuda_prep(grad_out, kd, dev) : NULL;
  dl_tensor *out = cg ? tensor_new_on(dev, kd, input->shape, input->ndim) : NULL;
  double norm = reduction == DL_LOSS_MEAN ? 2.0 / (double)n : 2.0;
  if (out && cuda_err(op, dev, f(dev, kd, n, dp(ca), dp(cb), dp(cg),
                                 reduction == DL_LOSS_NONE, norm, dp(out)))) {
    dl_tensor_release(out);
    out = NULL;
  }
  RELEASE(ca, cb, cg);
  return nn_finish(out, input->dtype);
}

/* -- Embedding and dropout ---------------------------------------------------------- */

DL_HIDDEN dl_tensor *cuda_embedding(const char *op, const dl_tensor *weight,
                                    const dl_tensor *indices, const int64_t *shape, int ndim) {
  DLC_FN(embedding) f = DLC(op, embedding);
  if (!f) return NULL;
  int dev = weight->storage->device;
  int64_t V = weight->shape[0], D = weight->shape[1];
  dl_tensor *ci = cuda_prep(indices, DL_INT64, dev), *cw = NULL, *out = NULL;
  if (!ci || check_indices(op, dev, ci, V, 0, 0, 0) ||
      !(cw = cuda_prep(weight, weight->dtype, dev)) ||
      !(out = tensor_new_on(dev, weight->dtype, shape, ndim)))
    goto fail;
  if (cuda_err(op, dev, f(dev, dl_tensor_numel(ci), D * dl_dtype_sizes[weight->dtype], dp(cw),
                          dp(ci), dp(out))))
    goto fail;
  RELEASE(ci, cw);
  return out;
fail:
  RELEASE(ci, cw, out);
  return NULL;
}

/* The positions sorted by index (a counting sort on the host, stable so
** each row adds its gradients in position order, as on the CPU). */
DL_HIDDEN dl_tensor *cuda_embedding_backward(const char *op, const dl_tensor *grad_out,
                                             const dl_tensor *indices, int64_t num_weights,
                                             int64_t padding_idx, int scale) {
  DLC_FN(embedding_backward) f = DLC(op, embedding_backward);
  if (!f) return NULL;
  int dev = grad_out->storage->device, kd = nn_kdtype(grad_out->dtype);
  int nd = indices->ndim;
  int64_t D = grad_out->shape[nd], n = dl_tensor_numel(indices);
  int64_t gs[2] = {num_weights, D}, ns = num_weights + 1 + n;
  dl_tensor *ci = cuda_prep(indices, DL_INT64, dev), *hi = NULL, *tab = NULL, *dtab = NULL,
            *cg = NULL, *gw = NULL;
  if (!ci || !(hi = dl_to_device(ci, -1)) || !(tab = tensor_new(DL_INT64, &ns, 1))) goto fail;
  const int64_t *idx = (const int64_t *)dp(hi);
  if (nn_check_rows(op, idx, n, num_weights)) goto fail;
  nn_sort_by_index(idx, n, num_weights, (int64_t *)dp(tab));
  if (!(dtab = dl_to_device(tab, dev)) || !(cg = cuda_prep(grad_out, kd, dev)) ||
      !(gw = tensor_new_on(dev, kd, gs, 2)))
    goto fail;
  const int64_t *ds = (const int64_t *)dp(dtab);
  if (cuda_err(op, dev, f(dev, kd, num_weights, D, padding_idx, scale, ds, ds + num_weights + 1,
                          dp(cg), dp(gw))))
    goto fail;
  RELEASE(ci, hi, tab, dtab, cg);
  return nn_finish(gw, grad_out->dtype);
fail:
  RELEASE(ci, hi, tab, dtab, cg, gw);
  return NULL;
}

DL_HIDDEN int cuda_dropout(const char *op, const dl_tensor *x, double p, dl_tensor **out,
                           dl_tensor **mask) {
  DLC_FN(dropout) f = DLC(op, dropout);
  if (!f) return -1;
  int dev = x->storage->device, kd = nn_kdtype(x->dtype);
  int64_t n = dl_tensor_numel(x), blocks = (n + 3) / 4;
  dl_tensor *cx = cuda_prep(x, kd, dev), *o = NULL, *m = NULL;
  if (!cx || !(o = tensor_new_on(dev, kd, x->shape, x->ndim)) ||
      !(m = tensor_new_on(dev, DL_UINT8, x->shape, x->ndim)))
    goto fail;
  uint64_t seed, base = rng_reserve((uint64_t)blocks, &seed);
  if (cuda_err(op, dev, f(dev, kd, n, dp(cx), dp(o), (uint8_t *)dp(m), seed, base, 1 - p,
                          p < 1 ? 1 / (1 - p) : 0)))
    goto fail;
  dl_tensor_release(cx);
  if (!(*out = nn_finish(o, x->dtype))) {
    dl_tensor_release(m);
    return -1;
  }
  *mask = m;
  return 0;
fail:
  RELEASE(cx, o, m);
  return -1;
}

DL_HIDDEN dl_tensor *cuda_dropout_backward(const char *op, const dl_tensor *grad_out,
                                           const dl_tensor *mask, double p) {
  DLC_FN(dropout_backward) f = DLC(op, dropout_backward);
  if (!f) return NULL;
  int dev = grad_out->storage->device, kd = nn_kdtype(grad_out->dtype);
  dl_tensor *cg = cuda_prep(grad_out, kd, dev), *cm = cg ? cuda_prep(mask, DL_UINT8, dev) : NULL;
  dl_tensor *o = cm ? tensor_new_on(dev, kd, grad_out->shape, grad_out->ndim) : NULL;
  if (o && cuda_err(op, dev, f(dev, kd, dl_tensor_numel(o), dp(cg), (const uint8_t *)dp(cm),
                               p < 1 ? 1 / (1 - p) : 0, dp(o)))) {
    dl_tensor_release(o);
    o = NULL;
  }
  RELEASE(cg, cm);
  return nn_finish(o, grad_out->dtype);
}

/* -- Normalisation -------------------------------------------------------------------- */

DL_HIDDEN int cuda_layer_norm(const char *op, const dl_tensor *x, int64_t M, int64_t N,
                              const int64_t *ss, const dl_tensor *w, const dl_tensor *b,
                              double eps, dl_tensor **out, dl_tensor **mean, dl_tensor **rstd) {
  DLC_FN(layer_norm) f = DLC(op, layer_norm);
  if (!f) return -1;
  int dev = x->storage->device, kd = nn_kdtype(x->dtype);
  dl_tensor *cx = cuda_prep(x, kd, dev), *cw = NULL, *cb = NULL, *o = NULL, *mu = NULL, *rs = NULL;
  if (!cx || (w && !(cw = cuda_prep(w, kd, dev))) || (b && !(cb = cuda_prep(b, kd, dev))) ||
      !(o = tensor_new_on(dev, kd, x->shape, x->ndim)) ||
      !(mu = tensor_new_on(dev, kd, ss, x->ndim)) || !(rs = tensor_new_on(dev, kd, ss, x->ndim)))
    goto fail;
  if (cuda_err(op, dev, f(dev, kd, M, N, eps, dp(cx), dp(cw), dp(cb), dp(o), dp(mu), dp(rs))))
    goto fail;
  RELEASE(cx, cw, cb);
  if (!(*out = nn_finish(o, x->dtype))) {
    RELEASE(mu, rs);
    return -1;
  }
  *mean = mu, *rstd = rs;
  return 0;
fail:
  RELEASE(cx, cw, cb, o, mu, rs);
  return -1;
}

DL_HIDDEN int cuda_layer_norm_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *x, const int64_t *ns, int nnorm,
                                       int64_t M, int64_t N, const dl_tensor *mean,
                                       const dl_tensor *rstd, const dl_tensor *w, int need_x,
                                       int need_w, int need_b, dl_tensor **grad_x,
                                       dl_tensor **grad_w, dl_tensor **grad_b) {
  DLC_FN(layer_norm_backward) f = DLC(op, layer_norm_backward);
  if (!f) return -1;
  int dev = x->storage->device, kd = nn_kdtype(x->dtype), rc = -1;
  (void)N;
  dl_tensor *cx = NULL, *cg = NULL, *cm = NULL, *cr = NULL, *cw = NULL, *gx = NULL, *gw = NULL,
            *gb = NULL;
  if (!(cx = cuda_prep(x, kd, dev)) || !(cg = cuda_prep(grad_out, kd, dev)) ||
      !(cm = cuda_prep(mean, kd, dev)) || !(cr = cuda_prep(rstd, kd, dev)) ||
      (w && !(cw = cuda_prep(w, kd, dev))) ||
      (need_x && !(gx = tensor_new_on(dev, kd, x->shape, x->ndim))) ||
      (need_w && !(gw = tensor_new_on(dev, DL_FLOAT64, ns, nnorm))) ||
      (need_b && !(gb = tensor_new_on(dev, DL_FLOAT64, ns, nnorm))))
    goto done;
  if (cuda_err(op, dev, f(dev, kd, M, N, dp(cx), dp(cg), dp(cw), dp(cm), dp(cr), dp(gx),
                          dp(gw), dp(gb))))
    goto done;
  if ((need_x && !(gx = nn_finish(gx, x->dtype))) ||
      (need_w && !(gw = nn_finish(gw, x->dtype))) ||
      (need_b && !(gb = nn_finish(gb, x->dtype))))
    goto done;
  nn_give_grads(&gx, &gw, &gb, grad_x, grad_w, grad_b);
  rc = 0;
done:
  RELEASE(cx, cg, cm, cr, cw, gx, gw, gb);
  return rc;
}

DL_HIDDEN int cuda_batch_norm(const char *op, const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b, dl_tensor *rm, dl_tensor *rv, int training,
                              double momentum, double eps, int64_t N, int64_t C, int64_t S,
                              dl_tensor **out, dl_tensor **save_mean, dl_tensor **save_invstd) {
  DLC_FN(batch_norm) f = DLC(op, batch_norm);
  if (!f) return -1;
  int dev = x->storage->device, kd = nn_kdtype(x->dtype), rc = -1;
  int64_t n4 = nn_max64(4 * C, 1);
  dl_tensor *cx = cuda_prep(x, kd, dev), *cw = NULL, *cb = NULL, *crm = NULL, *crv = NULL,
            *st = NULL, *o = NULL, *sm = NULL, *si = NULL, *vm = NULL, *vi = NULL;
  if (!cx || (w && !(cw = cuda_prep(w, DL_FLOAT64, dev))) ||
      (b && !(cb = cuda_prep(b, DL_FLOAT64, dev))) ||
      (rm && !(crm = cuda_prep(rm, DL_FLOAT64, dev))) ||
      (rv && !(crv = cuda_prep(rv, DL_FLOAT64, dev))) ||
      !(st = tensor_new_on(dev, DL_FLOAT64, &n4, 1)) ||
      !(o = tensor_new_on(dev, kd, x->shape, x->ndim)))
    goto done;
  /* the running statistics update in place when they are contiguous
  ** float64 already, else through copies written back */
  if (cuda_err(op, dev, f(dev, kd, N, C, S, training, momentum, eps, dp(cx), dp(cw), dp(cb),
                          dp(crm), dp(crv), dp(st), dp(o))))
    goto done;
  if (training &&
      ((rm && crm != rm && fw_copy_(rm, crm)) || (rv && crv != rv && fw_copy_(rv, crv))))
    goto done;
  if (training) {
    if (rm && crm == rm) tensor_bump_version(rm);
    if (rv && crv == rv) tensor_bump_version(rv);
  }
  int64_t off0 = 0, off1 = C, one = 1;
  if (!(vm = tensor_alias(st, &C, &one, 1, st->offset + off0)) ||
      !(vi = tensor_alias(st, &C, &one, 1, st->offset + off1)) ||
      !(sm = cuda_prep(vm, kd, dev)) || !(si = cuda_prep(vi, kd, dev)))
    goto done;
  if (!(*out = nn_finish(o, x->dtype))) {
    o = NULL;
    goto done;
  }
  o = NULL;
  *save_mean = sm, *save_invstd = si;
  sm = si = NULL;
  rc = 0;
done:
  RELEASE(cx, cw, cb, crm, crv, st, o, sm, si, vm, vi);
  return rc;
}

DL_HIDDEN int cuda_batch_norm_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *x, const dl_tensor *w,
                                       const dl_tensor *save_mean, const dl_tensor *save_invstd,
                                       int training, int need_x, int need_w, int need_b,
                                       int64_t N, int64_t C, int64_t S, dl_tensor **grad_x,
                                       dl_tensor **grad_w, dl_tensor **grad_b) {
  DLC_FN(batch_norm_backward) f = DLC(op, batch_norm_backward);
  if (!f) return -1;
  int dev = x->storage->device, kd = nn_kdtype(x->dtype), rc = -1;
  int64_t n5 = nn_max64(5 * C, 1), one = 1;
  dl_tensor *cx = NULL, *cg = NULL, *cm = NULL, *ci = NULL, *cw = NULL, *buf = NULL, *gx = NULL,
            *gw = NULL, *gb = NULL, *vb = NULL, *vw = NULL;
  if (!(cx = cuda_prep(x, kd, dev)) || !(cg = cuda_prep(grad_out, kd, dev)) ||
      !(cm = cuda_prep(save_mean, DL_FLOAT64, dev)) ||
      !(ci = cuda_prep(save_invstd, DL_FLOAT64, dev)) ||
      (w && !(cw = cuda_prep(w, DL_FLOAT64, dev))) ||
      !(buf = tensor_new_on(dev, DL_FLOAT64, &n5, 1)) ||
      (need_x && !(gx = tensor_new_on(dev, kd, x->shape, x->ndim))))
    goto done;
  if (cuda_err(op, dev, f(dev, kd, N, C, S, training, dp(cg), dp(cx), dp(cm), dp(ci), dp(cw),
                          dp(buf), dp(gx))))
    goto done;
  if ((need_b && (!(vb = tensor_alias(buf, &C, &one, 1, buf->offset)) ||
                  !(gb = cuda_prep(vb, x->dtype, dev)))) ||
      (need_w && (!(vw = tensor_alias(buf, &C, &one, 1, buf->offset + C)) ||
                  !(gw = cuda_prep(vw, x->dtype, dev)))) ||
      (need_x && !(gx = nn_finish(gx, x->dtype))))
    goto done;
  nn_give_grads(&gx, &gw, &gb, grad_x, grad_w, grad_b);
  rc = 0;
done:
  RELEASE(cx, cg, cm, ci, cw, buf, gx, gw, gb, vb, vw);
  return rc;
}

/* -- Random fills and optimizer steps ----------------------------------------------------- */

DL_HIDDEN int cuda_philox_fill(const char *op, dl_tensor *t, philox_kind kind, uint64_t seed,
                               uint64_t base, double a, double b, int64_t low, uint64_t range) {
  DLC_FN(philox_fill) f = DLC(op, philox_fill);
  if (!f) return -1;
  int dev = t->storage->device;
  return cuda_err(op, dev, f(dev, kind, t->dtype, dl_tensor_numel(t), dp(t), seed, base, a, b,
                             low, range));
}

/* The optimizers' steps over a group (items of one device and dtype): the
** host arrays of pointers the launcher packs into its kernels' arguments. */
DL_HIDDEN int cuda_sgd(const char *op, const sgd_item *items, int n, double lr, double momentum,
                       double dampening, double wd, int nesterov, int maximize) {
  DLC_FN(sgd) f = DLC(op, sgd);
  if (!f) return -1;
  void **ptrs = malloc(sizeof *ptrs * 3 * (size_t)n);
  int *first = malloc(sizeof *first * (size_t)n);
  int64_t *numel = malloc(sizeof *numel * (size_t)n);
  if (!ptrs || !first || !numel) {
    free(ptrs);
    free(first);
    free(numel);
    return dl_err(EM_NOMEM, op, (long long)(sizeof *ptrs * 3 * (size_t)n), (long long)dl_mem_allocated());
  }
  void **p = ptrs, **g = ptrs + n, **buf = ptrs + 2 * n;
  for (int k = 0; k < n; k++) {
    p[k] = dp(items[k].p);
    g[k] = dp(items[k].g);
    buf[k] = items[k].buf ? dp(items[k].buf) : NULL;
    first[k] = items[k].first;
    numel[k] = dl_tensor_numel(items[k].p);
  }
  int dev = items[0].p->storage->device;
  int rc = cuda_err(op, dev, f(dev, items[0].p->dtype, n, p, (const void *const *)g, items[0].buf ? buf : NULL,
                               first, numel, lr, momentum, dampening, wd, nesterov, maximize));
  free(ptrs);
  free(first);
  free(numel);
  return rc;
}

DL_HIDDEN int cuda_adam(const char *op, const adam_item *items, int n, double lr, double b1,
                        double b2, double eps, double wd, int decoupled, int maximize) {
  DLC_FN(adam) f = DLC(op, adam);
  if (!f) return -1;
  void **ptrs = malloc(sizeof *ptrs * 5 * (size_t)n);
  double *bc = malloc(sizeof *bc * 2 * (size_t)n);
  int64_t *numel = malloc(sizeof *numel * (size_t)n);
  if (!ptrs || !bc || !numel) {
    free(ptrs);
    free(bc);
    free(numel);
    return dl_err(EM_NOMEM, op, (long long)(sizeof *ptrs * 5 * (size_t)n), (long long)dl_mem_allocated());
  }
  void **p = ptrs, **g = ptrs + n, **m = ptrs + 2 * n, **v = ptrs + 3 * n, **vmax = ptrs + 4 * n;
  double *bc1 = bc, *bc2 = bc + n;
  for (int k = 0; k < n; k++) {
    p[k] = dp(items[k].p);
    g[k] = dp(items[k].g);
    m[k] = dp(items[k].m);
    v[k] = dp(items[k].v);
    vmax[k] = items[k].vmax ? dp(items[k].vmax) : NULL;
    bc1[k] = items[k].bc1;
    bc2[k] = items[k].bc2_sqrt;
    numel[k] = dl_tensor_numel(items[k].p);
  }
  int dev = items[0].p->storage->device;
  int rc = cuda_err(op, dev, f(dev, items[0].p->dtype, n, p, (const void *const *)g, m, v,
                               items[0].vmax ? vmax : NULL, numel, bc1, bc2, lr, b1, b2, eps, wd,
                               decoupled, maximize));
  free(ptrs);
  free(bc);
  free(numel);
  return rc;
}

/* -- Attention: the CUDA kernel is still to come ---------------------------- */
