/*
** dlc.h -- the launchers of libddplua_cuda.so (and of its CPU emulation,
** libddplua_cudaemu.so) as the C runtime calls them.  Plain C types only:
** this header is compiled by cc on one side and by nvcc or g++ on the other.
**
** Every launcher returns 0 or a negative DL_E* code; then dlc_last_error()
** (thread-local in the CUDA library) says what CUDA reported.  Launchers
** are asynchronous on the device's compute stream unless they say so.
*/
#ifndef DDPLUA_DLC_H
#define DDPLUA_DLC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { DLC_MAX_DIMS = 8, DLC_MAX_OPS = 4 };

/* An elementwise loop as iter_init (iter.c) lays it out: dims coalesced,
** fastest first, strides in bytes.  Operand i whose bit is set in
** scalar_mask is a host scalar (a Lua number): its bytes are in scalar[i]
** and data[i] is unused. */
typedef struct dlc_iter {
  int ndim, nops;
  int64_t numel;
  int64_t shape[DLC_MAX_DIMS];
  int64_t strides[DLC_MAX_OPS][DLC_MAX_DIMS];
  char *data[DLC_MAX_OPS];
  int dtype[DLC_MAX_OPS];
  unsigned scalar_mask;
  uint64_t scalar[DLC_MAX_OPS];
} dlc_iter;

typedef const char *(*dlc_last_error_fn)(void);
/* out = src cast to out's dtype (dtype[0] <- dtype[1]). */
typedef int (*dlc_cast_fn)(int device, const dlc_iter *it);
/* Operand 0 = the value's bytes (its dtype's size of them). */
typedef int (*dlc_fill_fn)(int device, const dlc_iter *it, uint64_t bytes);
/* op (dl_binop), computed in dtype (float32, float64, int32, int64,
** uint8, bool); the result is dtype, or bool for comparisons.  Integer
** division by zero and negative integer powers: returns DL_EINVAL after
** a stream sync, with the message naming which (these sync; others not). */
typedef int (*dlc_binary_fn)(int device, int op, int dtype, const dlc_iter *it);
/* op (dl_unop) in dtype; bool results for the predicates. */
typedef int (*dlc_unary_fn)(int device, int op, int dtype, const dlc_iter *it);
/* out = clamp(a, lo, hi) in dtype (NaN bounds mean no bound). */
typedef int (*dlc_clamp_fn)(int device, int dtype, double lo, double hi, const dlc_iter *it);
/* out = cond ? a : b; cond bool, a and b already in out's dtype. */
typedef int (*dlc_where_fn)(int device, const dlc_iter *it);
/* out = g * act'(x) for gelu, gelu_tanh, silu, relu (dl_unop), float32/64. */
typedef int (*dlc_act_backward_fn)(int device, int op, int dtype, const dlc_iter *it);

/* -- nn, random, optim -- */
/* Launchers of nn.cu, norm.cu, random.cu and optim.cu.  Operands are
** contiguous device memory; "kd" is the compute dtype (float32 or float64)
** of runtime/nn.h, per-channel and scratch buffers are doubles. */

/* *pos = the first i with idx[i] outside [0, rows) (skipping ignore when
** use_ignore), or -1; *val = idx[*pos].  Syncs the stream. */
typedef int (*dlc_bad_index_fn)(int device, const int64_t *idx, int64_t n, int64_t rows,
                                int64_t ignore, int use_ignore, int64_t *pos, int64_t *val);
/* cross_entropy (logits 1) or nll_loss over z [N, C, S] (kd), targets t [N * S]; w: C
** doubles or NULL; buf: 3 N S doubles; out (out_dtype): [N S] or one element.
** Checks the targets in the same pass and syncs: *bad_pos / *bad_val as
** dlc_bad_index's (out is then garbage). */
typedef int (*dlc_cls_forward_fn)(int device, int kd, int logits, int64_t N, int64_t C,
                                  int64_t S, const void *z, const int64_t *t, const double *w,
                                  int64_t ignore, double ls, int reduction, double *buf,
                                  void *out, int out_dtype, int64_t *bad_pos, int64_t *bad_val);
/* gi [N, C, S] (kd) from g (kd: per position for reduction none, else
** one element); scratch: 2 doubles. */
typedef int (*dlc_cls_backward_fn)(int device, int kd, int logits, int64_t N, int64_t C,
                                   int64_t S, const void *z, const int64_t *t,
                                   const double *w, int64_t ignore, double ls, int reduction,
                                   const void *g, double *scratch, void *gi);
/* The number of partial sums dlc_mse needs room for. */
typedef int64_t (*dlc_mse_parts_fn)(int64_t n);
typedef int (*dlc_mse_fn)(int device, int kd, int reduction, int64_t n, const void *a,
                          const void *b, double *part, void *out, int out_dtype);
typedef int (*dlc_mse_backward_fn)(int device, int kd, int64_t n, const void *a, const void *b,
                                   const void *g, int g_each, double norm, void *out);
/* out row i = w row idx[i] (rows of row_bytes); indices already checked. */
typedef int (*dlc_embedding_fn)(int device, int64_t n, int64_t row_bytes, const void *w,
                                const int64_t *idx, void *out);
/* gw [V, D] (kd): row v sums gout rows order[start[v] .. start[v + 1]). */
typedef int (*dlc_embedding_backward_fn)(int device, int kd, int64_t V, int64_t D,
                                         int64_t padding_idx, int scale, const int64_t *start,
                                         const int64_t *order, const void *gout, void *gw);
typedef int (*dlc_layer_norm_fn)(int device, int kd, int64_t M, int64_t N, double eps,
                                 const void *x, const void *w, const void *b, void *y,
                                 void *mean, void *rstd);
typedef int (*dlc_layer_norm_backward_fn)(int device, int kd, int64_t M, int64_t N,
                                          const void *x, const void *go, const void *w,
                                          const void *mean, const void *rstd, void *gx,
                                          double *gw, double *gb);
/* stats: 4 C doubles out (mean, invstd, scale, shift); rm, rv: running
** statistics as doubles, updated in training (either may be NULL). */
typedef int (*dlc_batch_norm_fn)(int device, int kd, int64_t N, int64_t C, int64_t S,
                                 int training, double momentum, double eps, const void *x,
                                 const double *w, const double *b, double *rm, double *rv,
                                 double *stats, void *y);
/* out: 5 C doubles (grad_b, grad_w, coefficients); gx (kd) or NULL. */
typedef int (*dlc_batch_norm_backward_fn)(int device, int kd, int64_t N, int64_t C, int64_t S,
                                          int training, const void *go, const void *x,
                                          const double *mean, const double *inv,
                                          const double *w, double *out, void *gx);
/* kind 0 uniform [a, b), 1 normal (a, b), 2 integers low + r % range;
** dtype float32, float64 or int64; counter blocks from base. */
typedef int (*dlc_philox_fill_fn)(int device, int kind, int dtype, int64_t n, void *out,
                                  uint64_t seed, uint64_t base, double a, double b,
                                  int64_t low, uint64_t range);
typedef int (*dlc_dropout_fn)(int device, int kd, int64_t n, const void *x, void *out,
                              uint8_t *mask, uint64_t seed, uint64_t base, double keep,
                              double scale);
typedef int (*dlc_dropout_backward_fn)(int device, int kd, int64_t n, const void *g,
                                       const uint8_t *mask, double scale, void *out);
typedef int (*dlc_sgd_fn)(int device, int dtype, int64_t n, void *p, const void *g, void *buf,
                          double lr, double momentum, double dampening, double wd,
                          int nesterov, int first, int maximize);
typedef int (*dlc_adam_fn)(int device, int dtype, int64_t n, void *p, const void *g, void *m,
                           void *v, void *vmax, double lr, double beta1, double beta2,
                           double eps, double wd, double bc1, double bc2_sqrt, int decoupled,
                           int maximize);

#ifdef __cplusplus
}
#endif
#endif
