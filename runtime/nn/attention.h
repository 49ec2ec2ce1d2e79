/*
** attention.h -- what the fused attention kernels (the CPU's in
** nn/attention_cpu.c, CUDA's in cuda/attention.c) share beyond the geometry
** nn/attention.c works out (core/kernel_args.h: sdpa_geom): batch offsets,
** output tensors, the dropout stream's rows.
*/
#ifndef DL_ATTENTION_H
#define DL_ATTENTION_H

#include "nn/nn.h"

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

/* [bshape, rows, cols] laid out as a source with batch strides bs and row
** stride rs (nn/attention.c); its own strides to obs and *ors. */
DL_HIDDEN dl_tensor *sdpa_tensor_like(const sdpa_geom *g, int dev, const int64_t *bs,
                                      int64_t rs, int64_t rows, int64_t cols, int64_t *obs,
                                      int64_t *ors);

/* Philox blocks per row of the dropout stream. */
static inline int64_t sdpa_row_blocks(const sdpa_geom *g) { return (g->S + 3) / 4; }

#endif
