/*
** grad_nn.c -- the differentiable neural network ops (dl_f_*): each runs
** its kernel (in nn/) with grad mode off and records the node of its
** gradient rule (rules.h), whose backward calls the matching *_backward
** kernel.
*/
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "nn/nn.h"

static void pair_store(int64_t *dst, const int64_t *p, int64_t dflt0, int64_t dflt1) {
  dst[0] = p ? p[0] : dflt0;
  dst[1] = p ? p[1] : dflt1;
}

/* -- conv2d -------------------------------------------------------------------- */

DL_HIDDEN int bw_conv2d(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  const int64_t *a = n->iarg;
  return dl_conv2d_backward(g, n->saved[0], n->saved[1], a, a + 2, a + 4, a[6],
                            n->needs[0], n->needs[1], n->needs[2], &gin[0], &gin[1],
                            &gin[2]);
}

DL_API dl_tensor *dl_f_conv2d(const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation,
                              int64_t groups) {
  dl_tensor *out;
  NOGRAD(out = dl_conv2d(x, w, b, stride, padding, dilation, groups));
  dl_tensor *ins[3] = {(dl_tensor *)x, (dl_tensor *)w, (dl_tensor *)b};
  const dl_tensor *save[2] = {x, w};
  ag_node *n;
  out = ag_record(out, AG_CONV2D, ins, 3, save, 2, &n);
  if (n) {
    pair_store(n->iarg, stride, 1, 1);
    pair_store(n->iarg + 2, padding, 0, 0);
    pair_store(n->iarg + 4, dilation, 1, 1);
    n->iarg[6] = groups;
  }
  return out;
}

/* -- Pooling --------------------------------------------------------------------- */

DL_HIDDEN int bw_max_pool2d(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_max_pool2d_backward(g, n->saved[0], n->saved[1]);
  return gin[0] ? 0 : -1;
}

DL_API int dl_f_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                           const int64_t *stride, const int64_t *padding,
                           const int64_t *dilation, int ceil_mode,
                           dl_tensor **out, dl_tensor **indices) {
  int rc;
  NOGRAD(rc = dl_max_pool2d(x, kernel, stride, padding, dilation, ceil_mode, out, indices));
  if (rc) return rc;
  dl_tensor *ins[1] = {(dl_tensor *)x};
  const dl_tensor *save[2] = {x, *indices};
  *out = ag_record(*out, AG_MAX_POOL2D, ins, 1, save, 2, NULL);
  if (!*out) {
    dl_tensor_release(*indices);
    *indices = NULL;
    return -1;
  }
  return 0;
}

DL_HIDDEN int bw_avg_pool2d(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  const int64_t *a = n->iarg;
  gin[0] = dl_avg_pool2d_backward(g, n->saved[0], a, a + 2, a + 4, (int)a[6], (int)a[7],
                                  (int64_t)n->darg[0]);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_f_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                  const int64_t *stride, const int64_t *padding,
                                  int ceil_mode, int count_include_pad,
                                  int64_t divisor_override) {
  dl_tensor *out;
  NOGRAD(out = dl_avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                             divisor_override));
  dl_tensor *ins[1] = {(dl_tensor *)x};
  const dl_tensor *save[1] = {x};
  ag_node *n;
  out = ag_record(out, AG_AVG_POOL2D, ins, 1, save, 1, &n);
  if (n) {
    pair_store(n->iarg, kernel, 1, 1);
    pair_store(n->iarg + 2, stride ? stride : kernel, 1, 1);
    pair_store(n->iarg + 4, padding, 0, 0);
    n->iarg[6] = ceil_mode;
    n->iarg[7] = count_include_pad;
    n->darg[0] = (double)divisor_override;
  }
  return out;
}

/* -- Embedding ------------------------------------------------------------------- */

DL_HIDDEN int bw_embedding(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = dl_embedding_backward(g, n->saved[0], n->in_shape[0][0], n->iarg[0],
                                 (int)n->iarg[1]);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_f_embedding(const dl_tensor *weight, const dl_tensor *indices,
                                 int64_t padding_idx, int scale_grad_by_freq) {
  dl_tensor *out;
  NOGRAD(out = dl_embedding(weight, indices));
  dl_tensor *ins[1] = {(dl_tensor *)weight};
  const dl_tensor *save[1] = {indices};
  ag_node *n;
  out = ag_record(out, AG_EMBEDDING, ins, 1, save, 1, &n);
  if (n) n->iarg[0] = padding_idx, n->iarg[1] = scale_grad_by_freq;
  return out;
}

/* -- Normalisation ---------------------------------------------------------------- */

DL_HIDDEN int bw_layer_norm(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return dl_layer_norm_backward(g, n->saved[0], n->iarg + 1, (int)n->iarg[0],
                                n->saved[2], n->saved[3], n->saved[1], n->needs[0],
                                n->needs[1], n->needs[2], &gin[0], &gin[1], &gin[2]);
}

DL_API dl_tensor *dl_f_layer_norm(const dl_tensor *x, const int64_t *normalized_shape,
                                  int nnorm, const dl_tensor *w, const dl_tensor *b,
                                  double eps) {
  dl_tensor *out = NULL, *mean = NULL, *rstd = NULL;
  int rc;
  if (nnorm < 0 || nnorm > AG_MAX_ARGS - 1)
    return dl_errp(EM_BADVALUE, "layer_norm", "normalized_shape has too many dims");
  NOGRAD(rc = dl_layer_norm(x, normalized_shape, nnorm, w, b, eps, &out, &mean, &rstd));
  if (rc) return NULL;
  dl_tensor *ins[3] = {(dl_tensor *)x, (dl_tensor *)w, (dl_tensor *)b};
  const dl_tensor *save[4] = {x, w, mean, rstd};
  ag_node *n;
  out = ag_record(out, AG_LAYER_NORM, ins, 3, save, 4, &n);
  if (n) {
    n->iarg[0] = nnorm;
    memcpy(n->iarg + 1, normalized_shape, sizeof(int64_t) * (size_t)nnorm);
  }
  dl_tensor_release(mean);
  dl_tensor_release(rstd);
  return out;
}

DL_HIDDEN int bw_batch_norm(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return dl_batch_norm_backward(g, n->saved[0], n->saved[1], n->saved[2], n->saved[3],
                                (int)n->iarg[0], n->needs[0], n->needs[1], n->needs[2],
                                &gin[0], &gin[1], &gin[2]);
}

/* The running statistics are updated in place by the kernel: they are
** buffers, never part of the graph. */
DL_API dl_tensor *dl_f_batch_norm(const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *b, dl_tensor *running_mean,
                                  dl_tensor *running_var, int training,
                                  double momentum, double eps) {
  dl_tensor *out = NULL, *mean = NULL, *invstd = NULL;
  int rc;
  if ((running_mean && tensor_requires_grad(running_mean)) ||
      (running_var && tensor_requires_grad(running_var)))
    return dl_errp(EM_BADVALUE, "batch_norm", "running statistics must not require grad");
  NOGRAD(rc = dl_batch_norm(x, w, b, running_mean, running_var, training, momentum, eps,
                            &out, &mean, &invstd));
  if (rc) return NULL;
  dl_tensor *ins[3] = {(dl_tensor *)x, (dl_tensor *)w, (dl_tensor *)b};
  const dl_tensor *save[4] = {x, w, mean, invstd};
  ag_node *n;
  out = ag_record(out, AG_BATCH_NORM, ins, 3, save, 4, &n);
  if (n) n->iarg[0] = training;
  dl_tensor_release(mean);
  dl_tensor_release(invstd);
  return out;
}

/* -- Dropout ------------------------------------------------------------------------ */

DL_HIDDEN int bw_dropout(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  gin[0] = n->saved[0] ? dl_dropout_backward(g, n->saved[0], n->darg[0]) : dl_clone(g);
  return gin[0] ? 0 : -1;
}

DL_API dl_tensor *dl_f_dropout(const dl_tensor *x, double p, int training) {
  dl_tensor *out = NULL, *mask = NULL;
  int rc;
  NOGRAD(rc = dl_dropout(x, p, training, &out, &mask));
  if (rc) return NULL;
  dl_tensor *ins[1] = {(dl_tensor *)x};
  const dl_tensor *save[1] = {mask};
  ag_node *n;
  out = ag_record(out, AG_DROPOUT, ins, 1, save, 1, &n);
  if (n) n->darg[0] = p;
  dl_tensor_release(mask);
  return out;
}

/* -- Attention ------------------------------------------------------------------------- */

/* The forward's dropout stream rides in the node (seed, first block), so
** the backward draws the mask the forward drew. */
DL_HIDDEN int bw_sdpa(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  uint64_t rng[2] = {(uint64_t)n->iarg[1], (uint64_t)n->iarg[2]};
  return dl_sdpa_backward(g, n->saved[0], n->saved[1], n->saved[2], n->saved[3], n->saved[4],
                          n->saved[5], (int)n->iarg[0], n->darg[0], n->darg[1], rng,
                          n->needs[0], n->needs[1], n->needs[2], &gin[0], &gin[1], &gin[2]);
}

DL_API dl_tensor *dl_f_scaled_dot_product_attention(const dl_tensor *q, const dl_tensor *k,
                                                    const dl_tensor *v,
                                                    const dl_tensor *attn_mask, int is_causal,
                                                    double dropout_p, double scale) {
  if (attn_mask && tensor_requires_grad(attn_mask) && dl_is_grad_enabled())
    return dl_errp(EM_AG_NODIFF, "scaled_dot_product_attention (attn_mask)");
  dl_tensor *out = NULL, *lse = NULL;
  uint64_t rng[2] = {0, 0};
  int rc;
  NOGRAD(rc = dl_sdpa(q, k, v, attn_mask, is_causal, dropout_p, scale, &out, &lse, rng));
  if (rc) return NULL;
  dl_tensor *ins[3] = {(dl_tensor *)q, (dl_tensor *)k, (dl_tensor *)v};
  const dl_tensor *save[6] = {q, k, v, attn_mask, out, lse};
  ag_node *n;
  out = ag_record(out, AG_SDPA, ins, 3, save, 6, &n);
  if (n) {
    n->iarg[0] = is_causal;
    n->iarg[1] = (int64_t)rng[0];
    n->iarg[2] = (int64_t)rng[1];
    n->darg[0] = dropout_p;
    n->darg[1] = scale;
  }
  dl_tensor_release(lse);
  return out;
}

/* -- Losses -------------------------------------------------------------------------- */

/* the class losses: input, target and weight saved; iarg: ignore_index,
** reduction; darg[0]: label smoothing */
static int class_loss_grad(ag_node *n, const dl_tensor *g, dl_tensor **gin, cls_input input) {
  gin[0] = nn_class_loss_backward(input, g, n->saved[0], n->saved[1], n->saved[2], n->iarg[0],
                                  n->darg[0], (int)n->iarg[1]);
  return gin[0] ? 0 : -1;
}

DL_HIDDEN int bw_cross_entropy(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return class_loss_grad(n, g, gin, CLS_LOGITS);
}

DL_HIDDEN int bw_nll_loss(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return class_loss_grad(n, g, gin, CLS_LOG_PROBS);
}

static dl_tensor *class_loss(cls_input input, const dl_tensor *x, const dl_tensor *target,
                             const dl_tensor *weight, int64_t ignore_index,
                             double smoothing, int reduction) {
  dl_tensor *out;
  int nll = input == CLS_LOG_PROBS;
  if (weight && tensor_requires_grad(weight) && dl_is_grad_enabled())
    return dl_errp(EM_AG_NODIFF, nll ? "nll_loss (weight)" : "cross_entropy (weight)");
  NOGRAD(out = nll ? dl_nll_loss(x, target, weight, ignore_index, reduction)
                   : dl_cross_entropy(x, target, weight, ignore_index, smoothing, reduction));
  dl_tensor *ins[1] = {(dl_tensor *)x};
  const dl_tensor *save[3] = {x, target, weight};
  ag_node *n;
  out = ag_record(out, nll ? AG_NLL_LOSS : AG_CROSS_ENTROPY, ins, 1, save, 3, &n);
  if (n) {
    n->iarg[0] = ignore_index;
    n->iarg[1] = reduction;
    n->darg[0] = smoothing;
  }
  return out;
}

DL_API dl_tensor *dl_f_cross_entropy(const dl_tensor *logits, const dl_tensor *target,
                                     const dl_tensor *weight, int64_t ignore_index,
                                     double label_smoothing, dl_loss_reduction reduction) {
  return class_loss(CLS_LOGITS, logits, target, weight, ignore_index, label_smoothing,
                    reduction);
}

DL_API dl_tensor *dl_f_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                                const dl_tensor *weight, int64_t ignore_index,
                                dl_loss_reduction reduction) {
  return class_loss(CLS_LOG_PROBS, logp, target, weight, ignore_index, 0, reduction);
}

DL_HIDDEN int bw_mse_loss(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *gi = K(&s, dl_mse_loss_backward(g, n->saved[0], n->saved[1], (int)n->iarg[0]));
  if (n->needs[0]) gin[0] = R(&s, dl_clone(gi));
  if (n->needs[1]) gin[1] = R(&s, dl_unary(DL_NEG, gi));
  return ag_scope_end(&s);
}

DL_API dl_tensor *dl_f_mse_loss(const dl_tensor *input, const dl_tensor *target,
                                dl_loss_reduction reduction) {
  dl_tensor *out;
  NOGRAD(out = dl_mse_loss(input, target, reduction));
  dl_tensor *ins[2] = {(dl_tensor *)input, (dl_tensor *)target};
  const dl_tensor *save[2] = {input, target};
  ag_node *n;
  out = ag_record(out, AG_MSE_LOSS, ins, 2, save, 2, &n);
  if (n) n->iarg[0] = reduction;
  return out;
}

/* -- Linear ---------------------------------------------------------------------------- */

/* y = x @ w^T + b in one node, so the weight's gradient comes out as
** g^T @ x, contiguous in w's own layout (through a transpose node it
** would need a copy every step). */
DL_HIDDEN int bw_linear(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *w = n->saved[1];
  int64_t in = w->shape[1], out = w->shape[0], rows = -1;
  int64_t s2[2] = {rows, out}, x2s[2] = {rows, in};
  dl_tensor *g2 = K(&s, dl_reshape(g, s2, 2));
  if (n->needs[0]) gin[0] = R(&s, dl_matmul(g, w));
  if (n->needs[1]) {
    dl_tensor *x2 = K(&s, dl_reshape(x, x2s, 2));
    gin[1] = R(&s, dl_mm(K(&s, dl_transpose(g2, 0, 1)), x2));
  }
  if (n->needs[2]) {
    int d0 = 0;
    gin[2] = R(&s, dl_reduce(DL_SUM, g2, &d0, 1, 0, 0));
  }
  return ag_scope_end(&s);
}

/* x @ w^T + b without a graph.  With a bias, any input is [rows, in] for
** one addmm (the bias in the GEMM's C): a separate broadcast add over
** [B, T, out] cost a GPT step ~5%. */
static dl_tensor *linear_forward(const dl_tensor *x, const dl_tensor *w, const dl_tensor *b) {
  dl_tensor *wt = dl_transpose(w, 0, 1), *out = NULL;
  if (!wt) return NULL;
  if (!b) out = dl_matmul(x, wt);
  else if (x->ndim == 2) out = dl_addmm(b, x, wt, 1, 1);
  else {
    int64_t s2[2] = {-1, w->shape[1]}, so[DL_MAX_DIMS];
    for (int i = 0; i < x->ndim - 1; i++) so[i] = x->shape[i];
    so[x->ndim - 1] = w->shape[0];
    dl_tensor *x2 = dl_reshape(x, s2, 2);
    dl_tensor *o2 = x2 ? dl_addmm(b, x2, wt, 1, 1) : NULL;
    out = o2 ? dl_reshape(o2, so, x->ndim) : NULL;
    dl_tensor_release(x2);
    dl_tensor_release(o2);
  }
  dl_tensor_release(wt);
  return out;
}

DL_API dl_tensor *dl_f_linear(const dl_tensor *x, const dl_tensor *w, const dl_tensor *b) {
  if (op_device_opt("linear", 3, (const dl_tensor *[]){x, w, b}) < -1) return NULL;
  if (w->ndim != 2)
    return dl_errp(EM_BADVALUE, "linear", "weight must be 2-D [out_features, in_features]");
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
    return dl_errp(EM_MM_SHAPE, "linear", fmt_tshape(x), fmt_tshape(w),
                   (long long)(x->ndim ? x->shape[x->ndim - 1] : 0), (long long)w->shape[1]);
  dl_tensor *out;
  NOGRAD(out = linear_forward(x, w, b));
  dl_tensor *ins[3] = {(dl_tensor *)x, (dl_tensor *)w, (dl_tensor *)b};
  const dl_tensor *save[2] = {x, w};
  return ag_record(out, AG_LINEAR, ins, 3, save, 2, NULL);
}
