/*
** dlc.h -- the launchers of libddplua_cuda.so (and of its CPU emulation,
** libddplua_cudaemu.so) as the C runtime calls them: the structs they take
** and their table.  Plain C types only: this header is compiled by cc on
** one side and by nvcc or g++ on the other.  Each launcher's contract is
** written beside its definition in kernels/<file>.cu.
**
** Every launcher returns 0 or a negative DL_E* code; then dlc_last_error()
** (thread-local in the CUDA library) says what CUDA reported.  Launchers
** are asynchronous on the device's compute stream unless they say so.
*/
#ifndef DDPLUA_DLC_H
#define DDPLUA_DLC_H

#include <stddef.h>
#include <stdint.h>

#include "core/kinds.h"

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

/* -- What the launchers of blas.cu, conv.cu and pool.cu take ------------------- */

/* A plain batched product for what cuBLAS does not take (integers, k = 0):
** row-major out [nbatch, m, n] contiguous = alpha * A @ B + beta * out, A
** and B strided in elements, their nb batch dims broadcast (stride 0).
** Integers wrap as on the CPU (alpha, beta truncated to integers). */
typedef struct dlc_mm {
  int dtype, nb;
  int64_t bshape[DLC_MAX_DIMS], ast[DLC_MAX_DIMS], bst[DLC_MAX_DIMS];
  int64_t nbatch, m, k, n, as0, as1, bs0, bs1;
  const void *a, *b;
  void *c;
  double alpha, beta;
} dlc_mm;

/* A conv2d's geometry (nn/conv.c: conv_geom).  Column matrices of
** samples [n0, n0 + nchunk) are laid out [groups][K][nchunk][HW], K = Cg *
** kh * kw rows (c, i, j), so one group's columns are a K x nchunk*HW matrix
** and one sample's a K x HW matrix at leading dim nchunk*HW. */
typedef struct dlc_conv {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, groups, Cg, Og, K, HW;
} dlc_conv;

/* A pooling's geometry (nn/pool.c: pool_geom): NC planes of H x W to Ho x Wo. */
typedef struct dlc_pool {
  int64_t NC, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo;
  int count_include_pad;
  int64_t divisor;  /* 0: none */
} dlc_pool;

/* The launchers of nn.cu, norm.cu, random.cu and optim.cu take contiguous
** device memory; "kd" is the compute dtype (float32 or float64) of
** nn/nn.h, per-channel and scratch buffers are doubles. */

/* -- What the launchers of reduce.cu and sort.cu take -------------------------- */

/* M outputs (the kept dims, in the output's order, fastest first) each
** over N elements (the reduced dims, fastest first); strides in elements.
** kop is the pass (core/kinds.h's reduce_pass).  x is float32, float64 or
** int64, or bool/uint8 for K_COUNT (as reduce.c reads them); out is
** contiguous in out_dtype and gets reduce.c's finalised result of redop
** (dl_redop) -- or, for redop -1, the centre of a second pass as float64:
** the mean (K_SUM) or the max, infinities as 0 (K_MAX).  center: per
** output, for K_SQDEV and K_EXP. */
typedef struct dlc_reduce {
  int kop, redop, in_dtype, out_dtype;
  double param;
  int nk, nr;
  int64_t M, N;
  int64_t kshape[DLC_MAX_DIMS], kstride[DLC_MAX_DIMS];
  int64_t rshape[DLC_MAX_DIMS], rstride[DLC_MAX_DIMS];
  const void *x;
  void *out;
  const double *center;
} dlc_reduce;

/* -- What the launchers of trace.cu give ------------------------------------------ */

/* A span of device work while a trace was on: CLOCK_REALTIME seconds (the
** runtime trace's clock), the device, the stream (trace.cuh: 0 compute, 1
** copy, 2 NCCL), the runtime op that the glue labelled (empty: none) and
** the launcher or call that ran. */
typedef struct dlc_trace_span {
  double t0, t1;
  int device, stream;
  char name[48];
  char kernel[32];
} dlc_trace_span;

/* -- The library's one entry point ---------------------------------------------
** libddplua_cuda.so (and the emulator) export dlc_api_get(): a table of
** every launcher, with the ABI version and the table's own size, which
** cuda/probe.c checks once when it loads the library, so a library of
** another build is refused with a message instead of calling a launcher
** whose arguments changed.  The table is generated from the launchers'
** definitions (scripts/gen_dlc_api.sh: each `DLC_API ... dlc_<name>(...)` of
** kernels/<file>.cu is member <name>, DLC_ABI_VERSION a checksum of every
** signature), so a new launcher is written once, where it is defined.  The
** emulator has no NCCL: its nccl_* members are NULL. */
typedef struct dlc_nccl dlc_nccl;
#include "dlc_api.h"
typedef const dlc_api *(*dlc_api_get_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
