/*
** ddplua_nn.h -- neural network kernels (forward and backward, no autograd),
** their differentiable forms, the optimizers' fused steps, and the image
** transforms of a data pipeline.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_NN_H
#define DDPLUA_NN_H

#include "ddplua_base.h"
#include "ddplua_tensor.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Neural network kernels (forward and backward, no autograd) -- */

/* Plain functions that autograd wires into forward/backward pairs.  They
** take float32 or float64 (bfloat16 and float16 are computed in float32 and
** rounded once); the float operands of one call share a dtype.  Indices and
** targets are int64 (or int32).  Pairs (kernel, stride, padding, dilation)
** are {height, width}.  Optional tensors may be NULL; backward calls fill
** only the gradients asked for (need_*), setting the others to NULL.  Every
** result is a new contiguous tensor (but dropout's pass-through).  None of
** them records autograd nodes. */

typedef enum dl_loss_reduction {
  /* from 32: see dl_pg_op */
  DL_LOSS_NONE = 32, DL_LOSS_MEAN, DL_LOSS_SUM
} dl_loss_reduction;

/* x [N, C, H, W] or [C, H, W], w [O, C / groups, kh, kw], b [O] or NULL. */
DL_API dl_tensor *dl_conv2d(const dl_tensor *x, const dl_tensor *w,
                            const dl_tensor *b, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation,
                            int64_t groups);
DL_API int dl_conv2d_backward(const dl_tensor *grad_out, const dl_tensor *x,
                              const dl_tensor *w, const int64_t *stride,
                              const int64_t *padding,
                              const int64_t *dilation, int64_t groups,
                              int need_x, int need_w, int need_b,
                              dl_tensor **grad_x, dl_tensor **grad_w,
                              dl_tensor **grad_b);

/* x [N, C, H, W] or [C, H, W]; stride NULL means stride = kernel.  indices
** (int64) hold each maximum's flat position within its H * W plane. */
DL_API int dl_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                         const int64_t *stride, const int64_t *padding,
                         const int64_t *dilation, int ceil_mode,
                         dl_tensor **out, dl_tensor **indices);
/* x is the forward input (only its shape and dtype are read). */
DL_API dl_tensor *dl_max_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const dl_tensor *indices);
/* divisor_override: 0 for none. */
DL_API dl_tensor *dl_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                const int64_t *stride, const int64_t *padding,
                                int ceil_mode, int count_include_pad,
                                int64_t divisor_override);
DL_API dl_tensor *dl_avg_pool2d_backward(const dl_tensor *grad_out,
                                         const dl_tensor *x,
                                         const int64_t *kernel,
                                         const int64_t *stride,
                                         const int64_t *padding, int ceil_mode,
                                         int count_include_pad,
                                         int64_t divisor_override);

/* weight [V, D] (any dtype), indices of any shape: out [*indices, D]. */
DL_API dl_tensor *dl_embedding(const dl_tensor *weight,
                               const dl_tensor *indices);
/* grad_weight [num_weights, D], rows added in index order (deterministic).
** padding_idx: the row that gets no gradient, in [0, num_weights), or -1
** for none (turn PyTorch's negative padding_idx into a row first). */
DL_API dl_tensor *dl_embedding_backward(const dl_tensor *grad_out,
                                        const dl_tensor *indices,
                                        int64_t num_weights,
                                        int64_t padding_idx,
                                        int scale_grad_by_freq);

/* Normalises over the last nnorm dims, which must equal normalized_shape;
** w and b (optional) have that shape.  mean and rstd have x's leading dims
** followed by nnorm ones, in float32 (float64 for float64 input). */
DL_API int dl_layer_norm(const dl_tensor *x, const int64_t *normalized_shape,
                         int nnorm, const dl_tensor *w, const dl_tensor *b,
                         double eps, dl_tensor **out, dl_tensor **mean,
                         dl_tensor **rstd);
DL_API int dl_layer_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x,
                                  const int64_t *normalized_shape, int nnorm,
                                  const dl_tensor *mean, const dl_tensor *rstd,
                                  const dl_tensor *w, int need_x, int need_w,
                                  int need_b, dl_tensor **grad_x,
                                  dl_tensor **grad_w, dl_tensor **grad_b);

/* x [N, C] or [N, C, *]; w, b, running_mean, running_var [C] or NULL.
** Training normalises with the batch statistics (biased variance) and, when
** given, updates running_mean and running_var in place (unbiased variance,
** weight momentum); eval uses the running statistics, which it needs.
** save_mean and save_invstd [C] (float32, or float64) are what backward
** takes: the batch statistics, or in eval the running ones. */
DL_API int dl_batch_norm(const dl_tensor *x, const dl_tensor *w,
                         const dl_tensor *b, dl_tensor *running_mean,
                         dl_tensor *running_var, int training,
                         double momentum, double eps, dl_tensor **out,
                         dl_tensor **save_mean, dl_tensor **save_invstd);
DL_API int dl_batch_norm_backward(const dl_tensor *grad_out,
                                  const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *save_mean,
                                  const dl_tensor *save_invstd, int training,
                                  int need_x, int need_w, int need_b,
                                  dl_tensor **grad_x, dl_tensor **grad_w,
                                  dl_tensor **grad_b);

/* Training with 0 < p: out = x * mask / (1 - p) with mask (uint8, x's
** shape) drawn from the Philox stream: element i is kept when the i-th
** float32 rand() value of the same state is below 1 - p.  Otherwise out is
** a new header over x's data and mask is NULL. */
DL_API int dl_dropout(const dl_tensor *x, double p, int training,
                      dl_tensor **out, dl_tensor **mask);
DL_API dl_tensor *dl_dropout_backward(const dl_tensor *grad_out,
                                      const dl_tensor *mask, double p);

/* Scaled dot product attention, fused (flash-attention manner: key tiles,
** online softmax, causal tiles skipped, no L x S matrix kept):
**   out = dropout(softmax(q k^T * scale + attn_mask)) v
** q [..., L, E], k [..., S, E], v [..., S, Ev] of one float dtype, batch
** dims broadcast (as matmul); attn_mask (NULL: none) bool (true = take
** part) or floating point (added), broadcast to [..., L, S]; is_causal:
** row i sees keys j <= i (top-left, as PyTorch; not with attn_mask); scale
** NaN: 1 / sqrt(E).  A row with every key masked gives NaN, as softmax of
** all -inf.  out [batch, L, Ev] in q's dtype; lse [batch, L] (float32, or
** float64) the log-sum-exp of each row's scores, which the backward takes.
** dropout_p > 0 drops probabilities with a mask drawn from the Philox
** stream, whose seed and first block go to rng[0], rng[1] (the backward
** draws the same mask from them). */
DL_API int dl_sdpa(const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                   const dl_tensor *attn_mask, int is_causal, double dropout_p,
                   double scale, dl_tensor **out, dl_tensor **lse, uint64_t *rng);
/* The gradients asked for, of the broadcast batch shape (sum the dims q,
** k or v was broadcast along to get theirs: autograd does). */
DL_API int dl_sdpa_backward(const dl_tensor *grad_out, const dl_tensor *q,
                            const dl_tensor *k, const dl_tensor *v,
                            const dl_tensor *attn_mask, const dl_tensor *out,
                            const dl_tensor *lse, int is_causal, double dropout_p,
                            double scale, const uint64_t *rng, int need_q,
                            int need_k, int need_v, dl_tensor **grad_q,
                            dl_tensor **grad_k, dl_tensor **grad_v);

/* logits [N, C] or [N, C, d1, ...] (or [C]), target int64 [N] or
** [N, d1, ...] (or 0-dim), weight [C] or NULL; reduction: dl_loss_reduction.
** PyTorch 1.13's formula, label smoothing included. */
DL_API dl_tensor *dl_cross_entropy(const dl_tensor *logits,
                                   const dl_tensor *target,
                                   const dl_tensor *weight,
                                   int64_t ignore_index,
                                   double label_smoothing, dl_loss_reduction reduction);
/* grad_logits; grad_out has the loss's shape. */
DL_API dl_tensor *dl_cross_entropy_backward(const dl_tensor *grad_out,
                                            const dl_tensor *logits,
                                            const dl_tensor *target,
                                            const dl_tensor *weight,
                                            int64_t ignore_index,
                                            double label_smoothing,
                                            dl_loss_reduction reduction);
/* The same from log-probabilities, without smoothing. */
DL_API dl_tensor *dl_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                              const dl_tensor *weight, int64_t ignore_index,
                              dl_loss_reduction reduction);
DL_API dl_tensor *dl_nll_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *logp,
                                       const dl_tensor *target,
                                       const dl_tensor *weight,
                                       int64_t ignore_index, dl_loss_reduction reduction);
/* input and target of one shape; the target's gradient is minus the
** input's. */
DL_API dl_tensor *dl_mse_loss(const dl_tensor *input, const dl_tensor *target,
                              dl_loss_reduction reduction);
DL_API dl_tensor *dl_mse_loss_backward(const dl_tensor *grad_out,
                                       const dl_tensor *input,
                                       const dl_tensor *target, dl_loss_reduction reduction);

/* -- Differentiable neural network ops ------------------------------------ */

/* The kernels above with autograd: same arguments, recorded in the graph
** when an input requires grad (what ddp.nn.functional calls). */
/* y = x @ w^T + b (b may be NULL), w [out, in], x [..., in]. */
DL_API dl_tensor *dl_f_linear(const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b);
DL_API dl_tensor *dl_f_conv2d(const dl_tensor *x, const dl_tensor *w,
                              const dl_tensor *b, const int64_t *stride,
                              const int64_t *padding, const int64_t *dilation,
                              int64_t groups);
DL_API int dl_f_max_pool2d(const dl_tensor *x, const int64_t *kernel,
                           const int64_t *stride, const int64_t *padding,
                           const int64_t *dilation, int ceil_mode,
                           dl_tensor **out, dl_tensor **indices);
DL_API dl_tensor *dl_f_avg_pool2d(const dl_tensor *x, const int64_t *kernel,
                                  const int64_t *stride,
                                  const int64_t *padding, int ceil_mode,
                                  int count_include_pad,
                                  int64_t divisor_override);
DL_API dl_tensor *dl_f_embedding(const dl_tensor *weight,
                                 const dl_tensor *indices,
                                 int64_t padding_idx, int scale_grad_by_freq);
DL_API dl_tensor *dl_f_layer_norm(const dl_tensor *x,
                                  const int64_t *normalized_shape, int nnorm,
                                  const dl_tensor *w, const dl_tensor *b,
                                  double eps);
DL_API dl_tensor *dl_f_batch_norm(const dl_tensor *x, const dl_tensor *w,
                                  const dl_tensor *b, dl_tensor *running_mean,
                                  dl_tensor *running_var, int training,
                                  double momentum, double eps);
DL_API dl_tensor *dl_f_dropout(const dl_tensor *x, double p, int training);
/* dl_sdpa with autograd for q, k and v (a float attn_mask gets none). */
DL_API dl_tensor *dl_f_scaled_dot_product_attention(const dl_tensor *q,
                                                    const dl_tensor *k,
                                                    const dl_tensor *v,
                                                    const dl_tensor *attn_mask,
                                                    int is_causal, double dropout_p,
                                                    double scale);
DL_API dl_tensor *dl_f_cross_entropy(const dl_tensor *logits,
                                     const dl_tensor *target,
                                     const dl_tensor *weight,
                                     int64_t ignore_index,
                                     double label_smoothing, dl_loss_reduction reduction);
DL_API dl_tensor *dl_f_nll_loss(const dl_tensor *logp, const dl_tensor *target,
                                const dl_tensor *weight, int64_t ignore_index,
                                dl_loss_reduction reduction);
DL_API dl_tensor *dl_f_mse_loss(const dl_tensor *input, const dl_tensor *target,
                                dl_loss_reduction reduction);

/* -- Image transforms (no autograd) ------------------------------------ */

/* The kernels of torchvision.transforms.v2.functional on tensor images: x
** is uint8 or float32, [C, H, W] or a batch [N, C, H, W], any strides;
** results are new contiguous tensors.  Bilinear resampling is separable
** (the horizontal pass first) with align_corners = false; antialias
** widens the triangle filter by the downscale factor and normalises its
** weights, as torch's _upsample_bilinear2d_aa (without: as
** upsample_bilinear2d).  uint8 is computed as torch's CPU kernels do it:
** int16 fixed-point weights, each pass rounded to uint8.  Nearest takes
** input index floor(i * in / out).  The CPU only: an image on a GPU is an
** error (DL_EDEVICE). */
typedef enum dl_interp { DL_INTERP_NEAREST = 0, DL_INTERP_BILINEAR = 1 } dl_interp;

/* x resized to height x width (F.resize with both sizes given). */
DL_API dl_tensor *dl_image_resize(const dl_tensor *x, int64_t height,
                                  int64_t width, dl_interp interp,
                                  int antialias);
/* crop -> resize -> center crop -> flip -> to_dtype -> normalize in one
** pass, no image in between: crop = {top, left, height, width} inside x
** (NULL: all of x) resized to size = {height, width}, of which window =
** {top, left, height, width} (NULL: all of it) comes out, flipped
** left-right when flip.  dtype: x's, or DL_FLOAT32 (uint8 times 1 / 255
** when scale, as ToDtype(scale=True)); mean and std: NULL, or nstat
** values (1, or one per channel) for (v - mean) / std (float32 only).
** The same values as the unfused ops, within float32 rounding. */
DL_API dl_tensor *dl_image_resized_crop(const dl_tensor *x, const int64_t *crop,
                                        const int64_t *size, const int64_t *window,
                                        dl_interp interp, int antialias, int flip,
                                        dl_dtype dtype, int scale, const double *mean,
                                        const double *std, int64_t nstat);
/* x flipped left-right (F.horizontal_flip). */
DL_API dl_tensor *dl_image_hflip(const dl_tensor *x);
/* uint8 -> float32 (times 1 / 255 when scale) or float32 -> uint8 (times
** 255.999 when scale, then truncated; clamped to [0, 255]), as
** F.to_dtype; float32 -> float32 is a copy. */
DL_API dl_tensor *dl_image_to_dtype(const dl_tensor *x, dl_dtype dtype, int scale);
/* (x - mean[c]) / std[c] along the channels of float32 x, nstat values
** each (1 or C), as F.normalize; inplace writes x and returns it. */
DL_API dl_tensor *dl_image_normalize(dl_tensor *x, const double *mean,
                                     const double *std, int64_t nstat,
                                     int inplace);

typedef enum dl_adjust_kind {
  DL_ADJUST_BRIGHTNESS = 0, DL_ADJUST_CONTRAST, DL_ADJUST_SATURATION, DL_ADJUST_HUE
} dl_adjust_kind;
/* F.adjust_brightness, adjust_contrast, adjust_saturation (factor >= 0),
** adjust_hue (factor in [-0.5, 0.5]) of an image of 1 or 3 channels
** (saturation and hue return a 1-channel image unchanged, as
** torchvision). */
DL_API dl_tensor *dl_image_adjust(const dl_tensor *x, dl_adjust_kind kind,
                                  double factor);

/* -- Optimizer steps (in place, no autograd) --------------------------- */

/* One parameter's update as torch.optim.SGD: buf may be NULL (no momentum);
** first: the step that initialises buf from the gradient. */
DL_API int dl_sgd_step(dl_tensor *p, const dl_tensor *grad, dl_tensor *buf,
                       double lr, double momentum, double dampening,
                       double weight_decay, int nesterov, int first,
                       int maximize);
/* As torch.optim.Adam, or AdamW when decoupled; max_exp_avg_sq non-NULL
** turns on amsgrad; step counts from 1. */
DL_API int dl_adam_step(dl_tensor *p, const dl_tensor *grad,
                        dl_tensor *exp_avg, dl_tensor *exp_avg_sq,
                        dl_tensor *max_exp_avg_sq, int64_t step, double lr,
                        double beta1, double beta2, double eps,
                        double weight_decay, int decoupled, int maximize);
/* The same steps for n parameters of one group at once (PyTorch's
** foreach): one pass over all their elements, the same bits as a call per
** parameter.  Each parameter's gradient is its own (.grad); parameters
** without one are skipped, and their state entries may be NULL.  bufs
** NULL: SGD without momentum; first[i]: the step that starts bufs[i] from
** the gradient; max_exp_avg_sq NULL: no amsgrad; steps[i]: parameter i's
** step count, this step included.  Errors name the parameter's 0-based
** index in the arrays.  dl_grads_present sets mask[i] to whether params[i]
** has a gradient and returns how many do. */
DL_API int dl_grads_present(dl_tensor *const *params, int n, uint8_t *mask);
/* GradScaler's unscale_ (torch's _amp_foreach_non_finite_check_and_unscale_):
** every gradient of params multiplied in place by inv_scale (as float32),
** and *found_inf set when any element of any was inf or NaN (read once a
** device).  A float16 gradient is refused, as PyTorch does, unless
** allow_fp16. */
DL_API int dl_amp_unscale_grads(dl_tensor *const *params, int n, double inv_scale, int allow_fp16,
                                int *found_inf);
DL_API int dl_sgd_step_foreach(dl_tensor *const *params, dl_tensor *const *bufs,
                               const uint8_t *first, int n, double lr, double momentum,
                               double dampening, double weight_decay, int nesterov,
                               int maximize);
DL_API int dl_adam_step_foreach(dl_tensor *const *params, dl_tensor *const *exp_avg,
                                dl_tensor *const *exp_avg_sq, dl_tensor *const *max_exp_avg_sq,
                                const int64_t *steps, int n, double lr, double beta1,
                                double beta2, double eps, double weight_decay, int decoupled,
                                int maximize);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_NN_H */
