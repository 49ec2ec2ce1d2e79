/*
** cuda/linalg.c -- the CUDA compute steps of the matmul family, conv2d and
** pooling (the kernels in runtime/cuda/blas.cu, conv.cu, pool.cu), and the
** TF32 switch.  Callers did the CPU's checks and allocations already.
*/
#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "cuda/cuda.h"
#include "ops/linalg.h"
#include "nn/conv.h"
#include "nn/pool.h"

/* -- TF32 ---------------------------------------------------------------------- */

/* Off by default, as torch.backends.cuda.matmul.allow_tf32 since 1.12:
** float32 products then round like float32, not to a 10-bit mantissa. */
static atomic_int allow_tf32;

DL_API void dl_cuda_set_allow_tf32(int on) { atomic_store(&allow_tf32, on != 0); }
DL_API int dl_cuda_get_allow_tf32(void) { return atomic_load(&allow_tf32); }
static int cuda_tf32(void) { return atomic_load(&allow_tf32); }

/* -- Products ------------------------------------------------------------------- */

static int naive(const char *op, int device, const dlc_mm *p) {
  DLC_FN(matmul_naive) f = DLC(op, matmul_naive);
  return f ? cuda_err(op, device, f(device, p)) : -1;
}

/* Batch dims d-1 and d merge when both operands step through them at one
** stride (the output, contiguous, always does). */
static int merge_batch_dims(int64_t *shape, int64_t *as, int64_t *bs, int nb) {
  int r = 0;
  for (int d = 0; d < nb; d++) {
    if (shape[d] == 1) continue;
    if (r > 0 && as[r - 1] == as[d] * shape[d] && bs[r - 1] == bs[d] * shape[d]) {
      shape[r - 1] *= shape[d];
      as[r - 1] = as[d];
      bs[r - 1] = bs[d];
      continue;
    }
    shape[r] = shape[d], as[r] = as[d], bs[r] = bs[d];
    r++;
  }
  return r;
}

static int cuda_mm(const char *op, int device, const dlc_mm *p, int ta, int64_t lda, int tb,
                      int64_t ldb) {
  int dt = p->dtype;
  if (p->nbatch == 0 || p->m == 0 || p->n == 0) return 0;
  if (p->k == 0 || !(dt == DL_FLOAT32 || dt == DL_FLOAT64 || is_half_dtype(dt)))
    return naive(op, device, p);
  int64_t big = p->m > p->n ? p->m : p->n;
  if (p->k > big) big = p->k;
  if (big > INT_MAX) return dl_err(EM_MM_BLAS_SIZE, op, (long long)big, (long long)INT_MAX);
  DLC_FN(gemm) gemm = DLC(op, gemm);
  if (!gemm) return -1;
  int64_t shape[DLC_MAX_DIMS], as[DLC_MAX_DIMS], bs[DLC_MAX_DIMS];
  for (int d = 0; d < p->nb; d++) shape[d] = p->bshape[d], as[d] = p->ast[d], bs[d] = p->bst[d];
  int nb = merge_batch_dims(shape, as, bs, p->nb);
  /* the innermost batch dim goes to one strided-batched call, the outer
  ** ones (rare: broadcasts cuBLAS cannot stride through) loop here */
  int64_t inner = nb ? shape[nb - 1] : 1, sa = nb ? as[nb - 1] : 0, sb = nb ? bs[nb - 1] : 0;
  int64_t outer = 1;
  for (int d = 0; d + 1 < nb; d++) outer *= shape[d];
  int64_t es = dl_dtype_sizes[dt], mn = p->m * p->n;
  /* Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS gets B as
  ** its first operand and A as its second, m and n swapped. */
  for (int64_t o = 0; o < outer; o++) {
    int64_t oa = 0, ob = 0, rest = o;
    for (int d = nb - 2; d >= 0; d--) {
      int64_t q = rest % shape[d];
      rest /= shape[d];
      oa += q * as[d], ob += q * bs[d];
    }
    int rc = gemm(device, dt, tb, ta, (int)p->n, (int)p->m, (int)p->k, p->alpha,
                  (const char *)p->b + ob * es, ldb, sb, (const char *)p->a + oa * es, lda, sa,
                  p->beta, (char *)p->c + o * inner * mn * es, p->n, mn, inner, cuda_tf32());
    if (rc) return cuda_err(op, device, rc);
  }
  return 0;
}

/* -- conv2d ----------------------------------------------------------------------- */

/* Column buffers are made for this many elements at most (256 MiB of
** float32): the samples go through in chunks that fit. */
#define COL_BUDGET ((int64_t)1 << 26)


/* 1x1, stride 1, no padding: each sample's group is its own K x HW column
** matrix (leading dim HW, C * HW apart), so no unfolding / folding. */
static int pointwise(const dlc_conv *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

static int64_t conv_chunk(const dlc_conv *g) {
  int64_t per = g->C * g->kh * g->kw * g->HW;
  int64_t n = per > 0 ? COL_BUDGET / per : g->N;
  return n < 1 ? 1 : n > g->N ? g->N : n;
}

/* A scratch device buffer of n elements of dtype. */
static dl_tensor *scratch(int dev, int dtype, int64_t n) {
  return tensor_new_on(dev, dtype, &n, 1);
}

static int64_t es_of(int dtype) { return dl_dtype_sizes[dtype]; }

static int cuda_conv2d_raw(const char *op, int dev, int kd, const dlc_conv *g,
                                  const void *x, const void *w, const void *b, void *out) {
  if (g->N * g->O * g->HW == 0) return 0;
  DLC_FN(gemm) gemm = DLC(op, gemm);
  DLC_FN(im2col) im2col = DLC(op, im2col);
  int64_t nc = conv_chunk(g), es = es_of(kd);
  int rc = 0;
  dl_tensor *col = NULL;
  if (pointwise(g)) {  /* as below, x itself the columns (ld HW, C * HW per sample) */
    for (int64_t gr = 0; !rc && gr < g->groups; gr++)
      rc = gemm(dev, kd, 0, 0, (int)g->HW, (int)g->Og, (int)g->K, 1.0,
                (const char *)x + gr * g->Cg * g->HW * es, g->HW, g->C * g->HW,
                (const char *)w + gr * g->Og * g->K * es, g->K, 0, 0.0,
                (char *)out + gr * g->Og * g->HW * es, g->HW, g->O * g->HW, g->N, cuda_tf32());
    nc = g->N;  /* the loop below has nothing left */
  } else if (!(col = scratch(dev, kd, g->groups * g->K * nc * g->HW))) {
    return -1;
  }
  for (int64_t n0 = 0; !rc && col && n0 < g->N; n0 += nc) {
    int64_t cnt = g->N - n0 < nc ? g->N - n0 : nc;
    const char *cp = tensor_first(col);
    rc = im2col(dev, kd, g, x, (void *)cp, n0, cnt);
    /* per group, per sample: out[n, group] (Og x HW) = W[group] @ col[group][., n, .];
    ** column-major: out^T (HW x Og) = col^T (HW x K, ld cnt*HW) @ W^T */
    for (int64_t gr = 0; !rc && gr < g->groups; gr++)
      rc = gemm(dev, kd, 0, 0, (int)g->HW, (int)g->Og, (int)g->K, 1.0,
                cp + gr * g->K * cnt * g->HW * es, cnt * g->HW, g->HW,
                (const char *)w + gr * g->Og * g->K * es, g->K, 0, 0.0,
                (char *)out + (n0 * g->O + gr * g->Og) * g->HW * es, g->HW, g->O * g->HW, cnt,
                cuda_tf32());
  }
  if (!rc && b) {
    DLC_FN(bias_add) bias = DLC(op, bias_add);
    rc = bias(dev, kd, out, b, g->N, g->O, g->HW);
  }
  dl_tensor_release(col);
  return cuda_err(op, dev, rc);
}

/* rc = a launcher's result as the runtime's error (0 stays 0). */
#define LAUNCH(expr) (rc = cuda_err(op, dev, (expr)))

static int cuda_conv2d_backward_raw(const char *op, int dev, int kd, const dlc_conv *g,
                                   const void *x, const void *w, const void *gout, void *gx,
                                   void *gw, void *gb) {
  DLC_FN(gemm) gemm = DLC(op, gemm);
  int rc = 0;
  if (gb) {
    DLC_FN(bias_grad) bgrad = DLC(op, bias_grad);
    if (LAUNCH(bgrad(dev, kd, gout, gb, g->N, g->O, g->HW))) return rc;
  }
  if (!gx && !gw) return 0;
  int64_t es = es_of(kd), wn = g->O * g->K;
  if (gw && (g->N == 0 || g->HW == 0)) {  /* nothing to sum: zeros, as on the CPU */
    dlc_mm z = {.dtype = kd, .nbatch = 1, .m = 1, .n = wn, .k = 0, .c = gw};
    if ((rc = naive(op, dev, &z))) return rc;
    gw = NULL;
  }
  if (g->N == 0 || (!gx && !gw)) return 0;
  if (gx && pointwise(g)) {  /* gx[n, group] = W[group]^T @ g[n, group] straight into gx */
    for (int64_t gr = 0; !rc && gr < g->groups; gr++)
      LAUNCH(gemm(dev, kd, 0, 1, (int)g->HW, (int)g->K, (int)g->Og, 1.0,
                  (const char *)gout + gr * g->Og * g->HW * es, g->HW, g->O * g->HW,
                  (const char *)w + gr * g->Og * g->K * es, g->K, 0, 0.0,
                  (char *)gx + gr * g->Cg * g->HW * es, g->HW, g->C * g->HW, g->N, cuda_tf32()));
    if (rc) return rc;
    gx = NULL;
    if (!gw) return 0;
  }
  DLC_FN(im2col) im2col = DLC(op, im2col);
  DLC_FN(col2im) col2im = DLC(op, col2im);
  DLC_FN(swap01) swap = DLC(op, swap01);
  int64_t nc = conv_chunk(g), coln = g->groups * g->K * nc * g->HW;
  dl_tensor *col = gw ? scratch(dev, kd, coln) : NULL;
  dl_tensor *gcol = gx ? scratch(dev, kd, coln) : NULL;
  dl_tensor *gt = gw ? scratch(dev, kd, g->O * nc * g->HW) : NULL;
  if ((gw && (!col || !gt)) || (gx && !gcol)) rc = -1;
  for (int64_t n0 = 0; !rc && n0 < g->N; n0 += nc) {
    int64_t cnt = g->N - n0 < nc ? g->N - n0 : nc, ld = cnt * g->HW;
    const char *go = (const char *)gout + n0 * g->O * g->HW * es;
    if (gw) {
      char *cp = tensor_first(col), *tp = tensor_first(gt);
      /* g^T [O, cnt, HW], so a group's rows are one Og x cnt*HW matrix */
      if (LAUNCH(im2col(dev, kd, g, x, cp, n0, cnt)) ||
          LAUNCH(swap(dev, kd, go, tp, cnt, g->O, g->HW)))
        break;
      /* gw[group] (Og x K) += gT[group] @ col[group]^T; column-major:
      ** gw^T (K x Og) = col (K x ld, read transposed) @ gT^T */
      for (int64_t gr = 0; !rc && gr < g->groups; gr++)
        LAUNCH(gemm(dev, kd, 1, 0, (int)g->K, (int)g->Og, (int)ld, 1.0,
                    cp + gr * g->K * ld * es, ld, 0, tp + gr * g->Og * ld * es, ld, 0,
                    n0 ? 1.0 : 0.0, (char *)gw + gr * g->Og * g->K * es, g->K, 0, 1,
                    cuda_tf32()));
    }
    if (gx && !rc) {
      char *cp = tensor_first(gcol);
      /* per sample: gcol[group][., n, .] (K x HW) = W[group]^T @ g[n, group];
      ** column-major: gcol^T (HW x K) = g^T (HW x Og) @ W (Og x K, read
      ** transposed from its K x Og column-major form) */
      for (int64_t gr = 0; !rc && gr < g->groups; gr++)
        LAUNCH(gemm(dev, kd, 0, 1, (int)g->HW, (int)g->K, (int)g->Og, 1.0,
                    go + gr * g->Og * g->HW * es, g->HW, g->O * g->HW,
                    (const char *)w + gr * g->Og * g->K * es, g->K, 0, 0.0,
                    cp + gr * g->K * ld * es, ld, g->HW, cnt, cuda_tf32()));
      if (!rc) LAUNCH(col2im(dev, kd, g, cp, gx, n0, cnt));
    }
  }
  dl_tensor_release(col);
  dl_tensor_release(gcol);
  dl_tensor_release(gt);
  return rc;
}

/* -- Pooling ------------------------------------------------------------------------ */

static int cuda_max_pool_raw(const char *op, int dev, int kd, const dlc_pool *g, const void *x,
                            void *out, int64_t *idx) {
  DLC_FN(max_pool) f = DLC(op, max_pool);
  return cuda_err(op, dev, f(dev, kd, g, x, out, idx));
}

static int cuda_max_pool_backward_raw(const char *op, int dev, int kd, int64_t planes,
                                     int64_t in_plane, int64_t out_plane, const void *gout,
                                     const int64_t *idx, void *gx) {
  DLC_FN(max_pool_backward) f = DLC(op, max_pool_backward);
  return cuda_err(op, dev, f(dev, kd, planes, in_plane, out_plane, gout, idx, gx));
}

static int cuda_avg_pool_raw(const char *op, int dev, int kd, const dlc_pool *g, const void *x,
                            void *out) {
  DLC_FN(avg_pool) f = DLC(op, avg_pool);
  return cuda_err(op, dev, f(dev, kd, g, x, out));
}

static int cuda_avg_pool_backward_raw(const char *op, int dev, int kd, const dlc_pool *g,
                                     const void *gout, void *gx) {
  DLC_FN(avg_pool_backward) f = DLC(op, avg_pool_backward);
  return cuda_err(op, dev, f(dev, kd, g, gout, gx));
}

/* -- The device kernels of ops/linalg.c ------------------------------------------ */

/* The CUDA device's matmul kernel (core/device.h): ops/linalg.c's plan as
** the launchers take it, through cuBLAS (blas) or a plain kernel. */
DL_HIDDEN int cuda_matmul(const char *op, int dev, mm_plan *p, int blas) {
  if (blas && p->k && plan_layouts(p))
    return dl_err(EM_MM_BLAS_SIZE, op, (long long)p->k, (long long)BLAS_MAX);
  if (blas && p->k) fold_batches(p);
  dlc_mm d;
  memset(&d, 0, sizeof d);
  d.dtype = p->dtype, d.nb = p->nb;
  for (int i = 0; i < p->nb; i++) d.bshape[i] = p->bshape[i], d.ast[i] = p->ast[i], d.bst[i] = p->bst[i];
  d.nbatch = p->nbatch, d.m = p->m, d.k = p->k, d.n = p->n;
  d.as0 = p->as0, d.as1 = p->as1, d.bs0 = p->bs0, d.bs1 = p->bs1;
  d.a = p->a, d.b = p->b, d.c = p->c;
  d.alpha = p->alpha, d.beta = p->beta;
  return cuda_mm(op, dev, &d, p->ta != CblasNoTrans, p->lda, p->tb != CblasNoTrans, p->ldb);
}

DL_HIDDEN dl_tensor *cuda_dot(const char *op, const dl_tensor *a, const dl_tensor *b) {
  return dot_by_matmul(op, a, b);
}

/* -- On a device --------------------------------------------------------------- */

static void to_dlc(const conv_geom *g, dlc_conv *d) {
  *d = (dlc_conv){g->N, g->C, g->H, g->W, g->O, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw,
                  g->dh, g->dw, g->Ho, g->Wo, g->groups, g->Cg, g->Og, g->K, g->HW};
}

/* dl_conv2d's compute on dev: the same compute dtype and result rounding. */
DL_HIDDEN dl_tensor *cuda_conv2d(const char *op, int dev, const conv_geom *g, const dl_tensor *x,
                                 const dl_tensor *w, const dl_tensor *b) {
  int kd = nn_kdtype(x->dtype), bt = x->ndim == 4;
  dlc_conv d;
  to_dlc(g, &d);
  int64_t oshape[4] = {g->N, g->O, g->Ho, g->Wo};
  dl_tensor *cx = cuda_prep(x, kd, dev), *cw = cx ? cuda_prep(w, kd, dev) : NULL, *cb = NULL,
            *out = NULL;
  if (cw && (!b || (cb = cuda_prep(b, kd, dev))) &&
      (out = tensor_new_on(dev, kd, oshape + !bt, x->ndim)) &&
      cuda_conv2d_raw(op, dev, kd, &d, tensor_first(cx), tensor_first(cw),
                          cb ? tensor_first(cb) : NULL, tensor_first(out))) {
    dl_tensor_release(out);
    out = NULL;
  }
  dl_tensor_release(cx);
  dl_tensor_release(cw);
  dl_tensor_release(cb);
  return nn_finish(out, x->dtype);
}

DL_HIDDEN int cuda_conv2d_backward(const char *op, int dev, const conv_geom *g,
                                  const dl_tensor *grad_out, const dl_tensor *x,
                                  const dl_tensor *w, int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w, dl_tensor **grad_b) {
  int kd = nn_kdtype(x->dtype), rc = -1;
  dlc_conv d;
  to_dlc(g, &d);
  dl_tensor *cx = NULL, *cw = NULL, *cg = cuda_prep(grad_out, kd, dev), *gx = NULL, *gw = NULL,
            *gb = NULL;
  if (!cg) goto done;
  if ((need_x || need_w) && (!(cx = cuda_prep(x, kd, dev)) || !(cw = cuda_prep(w, kd, dev))))
    goto done;
  if ((need_x && !(gx = tensor_new_on(dev, kd, x->shape, x->ndim))) ||
      (need_w && !(gw = tensor_new_on(dev, kd, w->shape, 4))) ||
      (need_b && !(gb = tensor_new_on(dev, kd, &g->O, 1))))
    goto done;
  if (cuda_conv2d_backward_raw(op, dev, kd, &d, cx ? tensor_first(cx) : NULL,
                           cw ? tensor_first(cw) : NULL, tensor_first(cg),
                           gx ? tensor_first(gx) : NULL, gw ? tensor_first(gw) : NULL,
                           gb ? tensor_first(gb) : NULL))
    goto done;
  /* nn_finish consumes its argument, result or not */
  if (need_x && (*grad_x = nn_finish(gx, x->dtype), gx = NULL, !*grad_x)) goto done;
  if (need_w && (*grad_w = nn_finish(gw, x->dtype), gw = NULL, !*grad_w)) goto done;
  if (need_b && (*grad_b = nn_finish(gb, x->dtype), gb = NULL, !*grad_b)) goto done;
  rc = 0;
done:
  return conv_backward_done(rc, grad_x, grad_w, grad_b, (dl_tensor *[]){cx, cw, cg, gx, gw, gb}, 6);
}

/* -- Pooling: the CUDA device's kernels (core/device.h) for nn/pool.c ------------- */

static dlc_pool pool_to_dlc(const pool_geom *g) {
  return (dlc_pool){g->NC, g->H, g->W, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw,
                    g->Ho, g->Wo, g->count_include_pad, g->divisor};
}

/* The result of a device pooling in the caller's dtype; NULL (work
** released) when rc says the launch failed. */
static dl_tensor *pool_done(int rc, dl_tensor *work, int dtype) {
  if (rc) {
    dl_tensor_release(work);
    return NULL;
  }
  return nn_finish(work, dtype);
}

DL_HIDDEN int cuda_max_pool(const char *op, int dev, const pool_geom *g, const dl_tensor *x,
                              dl_tensor **out, dl_tensor **indices) {
  int kd = nn_kdtype(x->dtype);
  int64_t s[4];
  pool_shape(x, g, s);
  dlc_pool d = pool_to_dlc(g);
  dl_tensor *cx = cuda_prep(x, kd, dev), *o = cx ? tensor_new_on(dev, kd, s, x->ndim) : NULL;
  dl_tensor *ix = o ? tensor_new_on(dev, DL_INT64, s, x->ndim) : NULL;
  int rc = ix ? cuda_max_pool_raw(op, dev, kd, &d, tensor_first(cx), tensor_first(o),
                              (int64_t *)tensor_first(ix))
              : -1;
  dl_tensor_release(cx);
  if (!(*out = pool_done(rc, o, x->dtype))) {
    dl_tensor_release(ix);
    return -1;
  }
  *indices = ix;
  return 0;
}

DL_HIDDEN dl_tensor *cuda_max_pool_backward(const char *op, int dev, const dl_tensor *grad_out,
                                              const dl_tensor *x, const dl_tensor *indices) {
  int nd = x->ndim, kd = nn_kdtype(x->dtype);
  int64_t in_plane = x->shape[nd - 2] * x->shape[nd - 1];
  int64_t out_plane = grad_out->shape[nd - 2] * grad_out->shape[nd - 1];
  int64_t planes = dl_tensor_numel(x) / nn_max64(1, in_plane);
  dl_tensor *cg = cuda_prep(grad_out, kd, dev),
            *ci = cg ? cuda_prep(indices, DL_INT64, dev) : NULL;
  dl_tensor *gx = ci ? tensor_new_on(dev, kd, x->shape, nd) : NULL;
  int rc = gx ? cuda_max_pool_backward_raw(op, dev, kd, planes, in_plane, out_plane,
                                       tensor_first(cg), (const int64_t *)tensor_first(ci),
                                       tensor_first(gx))
              : -1;
  dl_tensor_release(cg);
  dl_tensor_release(ci);
  return pool_done(rc, gx, x->dtype);
}

DL_HIDDEN dl_tensor *cuda_avg_pool(const char *op, int dev, const pool_geom *g,
                                     const dl_tensor *x) {
  int kd = nn_kdtype(x->dtype);
  int64_t s[4];
  pool_shape(x, g, s);
  dlc_pool d = pool_to_dlc(g);
  dl_tensor *cx = cuda_prep(x, kd, dev), *o = cx ? tensor_new_on(dev, kd, s, x->ndim) : NULL;
  int rc = o ? cuda_avg_pool_raw(op, dev, kd, &d, tensor_first(cx), tensor_first(o)) : -1;
  dl_tensor_release(cx);
  return pool_done(rc, o, x->dtype);
}

DL_HIDDEN dl_tensor *cuda_avg_pool_backward(const char *op, int dev, const pool_geom *g,
                                              const dl_tensor *grad_out, const dl_tensor *x) {
  int kd = nn_kdtype(x->dtype);
  dlc_pool d = pool_to_dlc(g);
  dl_tensor *cg = cuda_prep(grad_out, kd, dev),
            *gx = cg ? tensor_new_on(dev, kd, x->shape, x->ndim) : NULL;
  int rc = gx ? cuda_avg_pool_backward_raw(op, dev, kd, &d, tensor_first(cg), tensor_first(gx)) : -1;
  dl_tensor_release(cg);
  return pool_done(rc, gx, x->dtype);
}
