/*
** attention.h -- scaled dot product attention as nn/attention.c works it
** out (shapes, broadcasting, mask, scale, dropout stream) for the devices'
** fused kernels (the CPU's in nn/attention_cpu.c).
*/
#ifndef DL_ATTENTION_H
#define DL_ATTENTION_H

#include "nn/nn.h"

enum { SDPA_MASK_NONE = 0, SDPA_MASK_BOOL = 1, SDPA_MASK_ADD = 2 };

/* q [..., L, E], k [..., S, E], v [..., S, Ev] and the mask, each
** contiguous in the compute dtype (the mask: bool, or additive in the
** compute dtype), with their batch dims broadcast to bshape (nb = its
** product: the flat batch index b runs over it). */
typedef struct sdpa_geom {
  int kd;                           /* compute dtype: float32 or float64 */
  int bnd;                          /* batch dims */
  int64_t bshape[DL_MAX_DIMS];
  int64_t nb, L, S, E, Ev;
  /* per batch dim, each operand's stride in elements (0: broadcast) */
  int64_t qbs[DL_MAX_DIMS], kbs[DL_MAX_DIMS], vbs[DL_MAX_DIMS], mbs[DL_MAX_DIMS];
  int64_t m_ls, m_ss;               /* the mask's strides along L and S */
  int mask;                         /* SDPA_MASK_* */
  int causal;                       /* row i sees keys j <= i (top-left) */
  double scale;
  /* dropout of the probabilities: kept when philox_unit24 of word j % 4 of
  ** block base + (b * L + i) * ceil(S / 4) + j / 4 under seed < 1 - p */
  double dropout_p;
  uint64_t seed, base;
} sdpa_geom;

/* The element offsets of batch index b in an operand with batch strides bs. */
static inline int64_t sdpa_offset(const sdpa_geom *g, const int64_t *bs, int64_t b) {
  int64_t off = 0;
  for (int d = g->bnd - 1; d >= 0; d--) {
    off += (b % g->bshape[d]) * bs[d];
    b /= g->bshape[d];
  }
  return off;
}

/* [bshape, a] or [bshape, a, b] (b < 0: the former) in the compute dtype,
** uninitialised, on device dev (-1: the CPU): the kernels' outputs. */
static inline dl_tensor *sdpa_batch_tensor(const sdpa_geom *g, int dev, int64_t a, int64_t b) {
  int64_t s[DL_MAX_DIMS + 2];
  int n = g->bnd;
  for (int d = 0; d < n; d++) s[d] = g->bshape[d];
  s[n++] = a;
  if (b >= 0) s[n++] = b;
  return tensor_new_on(dev, g->kd, s, n);
}

/* Philox blocks per row of the dropout stream. */
static inline int64_t sdpa_row_blocks(const sdpa_geom *g) { return (g->S + 3) / 4; }

/* -- The CPU's kernels (core/device.h), nn/attention_cpu.c --------------------- */

/* out [bshape, L, Ev] and lse [bshape, L] (the log-sum-exp of each row's
** scaled, masked scores, in the compute dtype). */
DL_HIDDEN int cpu_sdpa(const char *op, const sdpa_geom *g, const dl_tensor *q,
                       const dl_tensor *k, const dl_tensor *v, const dl_tensor *mask,
                       dl_tensor **out, dl_tensor **lse);
/* The gradients asked for, in the broadcast batch shape (the caller sums
** broadcast dims); grad_out and out as the forward's out, all contiguous. */
DL_HIDDEN int cpu_sdpa_backward(const char *op, const sdpa_geom *g, const dl_tensor *grad_out,
                                const dl_tensor *q, const dl_tensor *k, const dl_tensor *v,
                                const dl_tensor *mask, const dl_tensor *out,
                                const dl_tensor *lse, int need_q, int need_k, int need_v,
                                dl_tensor **gq, dl_tensor **gk, dl_tensor **gv);

#endif
