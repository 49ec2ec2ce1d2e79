/*
** cuda/nn.h -- the CUDA halves of the nn ops (nn/loss.c, nn/norm.c,
** nn/embedding_dropout.c), of the random fills (random.c) and of the optimizer steps
** (optim.c): each CPU op checks its arguments, then hands device tensors
** to these, which run the kernels of runtime/cuda/{nn,norm,random,optim}.cu.
*/
#ifndef DL_CUDA_NN_H
#define DL_CUDA_NN_H

#include "cuda/cuda.h"
#include "nn/nn.h"



/* Losses (nn/loss.c): input viewed as [N, C, S], out of tshape[tnd]. */
DL_HIDDEN dl_tensor *cuda_cls_forward(const char *op, int logits, const dl_tensor *input,
                                      const dl_tensor *target, const dl_tensor *weight,
                                      int64_t ignore, double ls, int reduction, int64_t N,
                                      int64_t C, int64_t S, const int64_t *tshape, int tnd);
DL_HIDDEN dl_tensor *cuda_cls_backward(const char *op, int logits, const dl_tensor *grad_out,
                                       const dl_tensor *input, const dl_tensor *target,
                                       const dl_tensor *weight, int64_t ignore, double ls,
                                       int reduction, int64_t N, int64_t C, int64_t S,
                                       int checked);
DL_HIDDEN dl_tensor *cuda_mse(const char *op, const dl_tensor *input, const dl_tensor *target,
                              int reduction);
DL_HIDDEN dl_tensor *cuda_mse_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *input, const dl_tensor *target,
                                       int reduction);

/* Embedding and dropout (nn/embedding_dropout.c). */
DL_HIDDEN dl_tensor *cuda_embedding(const char *op, const dl_tensor *weight,
                                    const dl_tensor *indices, const int64_t *shape, int ndim);
DL_HIDDEN dl_tensor *cuda_embedding_backward(const char *op, const dl_tensor *grad_out,
                                             const dl_tensor *indices, int64_t num_weights,
                                             int64_t padding_idx, int scale);
DL_HIDDEN int cuda_dropout(const char *op, const dl_tensor *x, double p, dl_tensor **out,
                           dl_tensor **mask);
DL_HIDDEN dl_tensor *cuda_dropout_backward(const char *op, const dl_tensor *grad_out,
                                           const dl_tensor *mask, double p);

/* Normalisation (nn/norm.c), after the CPU's checks; layer_norm's mean and rstd
** have shape ss (nn/norm.c works it out for both). */
DL_HIDDEN int cuda_layer_norm(const char *op, const dl_tensor *x, int64_t M, int64_t N,
                              const int64_t *ss, const dl_tensor *w, const dl_tensor *b,
                              double eps, dl_tensor **out, dl_tensor **mean, dl_tensor **rstd);
DL_HIDDEN int cuda_layer_norm_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *x, const int64_t *ns, int nnorm,
                                       int64_t M, int64_t N, const dl_tensor *mean,
                                       const dl_tensor *rstd, const dl_tensor *w, int need_x,
                                       int need_w, int need_b, dl_tensor **gx, dl_tensor **gw,
                                       dl_tensor **gb);
DL_HIDDEN int cuda_batch_norm(const char *op, const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b, dl_tensor *rm, dl_tensor *rv, int training,
                              double momentum, double eps, int64_t N, int64_t C, int64_t S,
                              dl_tensor **out, dl_tensor **save_mean, dl_tensor **save_invstd);
DL_HIDDEN int cuda_batch_norm_backward(const char *op, const dl_tensor *grad_out,
                                       const dl_tensor *x, const dl_tensor *w,
                                       const dl_tensor *save_mean, const dl_tensor *save_invstd,
                                       int training, int need_x, int need_w, int need_b,
                                       int64_t N, int64_t C, int64_t S, dl_tensor **gx,
                                       dl_tensor **gw, dl_tensor **gb);

/* Attention (nn/attention.c), in cuda/attention.c: the flash-attention
** kernels of kernels/attention.cu (core/device.h's signatures). */
struct sdpa_geom;
DL_HIDDEN int cuda_sdpa(const char *op, const struct sdpa_geom *g, const dl_tensor *q,
                        const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                        dl_tensor **out, dl_tensor **lse);
DL_HIDDEN int cuda_sdpa_backward(const char *op, const struct sdpa_geom *g,
                                 const dl_tensor *grad_out, const dl_tensor *q,
                                 const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                                 const dl_tensor *out, const dl_tensor *lse, int need_q,
                                 int need_k, int need_v, dl_tensor **gq, dl_tensor **gk,
                                 dl_tensor **gv);

/* random.c: fills contiguous t (float32, float64 or int64) on its device
** from counter blocks base.. of seed (kind: 0 uniform, 1 normal, 2 int). */
DL_HIDDEN int cuda_philox_fill(const char *op, dl_tensor *t, int kind, uint64_t seed,
                               uint64_t base, double a, double b, int64_t low, uint64_t range);

/* optim.c, after its checks: the fused steps on the parameter's device. */
DL_HIDDEN int cuda_sgd(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *buf,
                       double lr, double momentum, double dampening, double wd, int nesterov,
                       int first, int maximize);
DL_HIDDEN int cuda_adam(const char *op, dl_tensor *p, const dl_tensor *g, dl_tensor *m,
                        dl_tensor *v, dl_tensor *vmax, double lr, double b1, double b2,
                        double eps, double wd, double bc1, double bc2_sqrt, int decoupled,
                        int maximize);

#endif
