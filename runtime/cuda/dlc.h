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

/* -- Linear algebra, convolution, pooling -- */

/* C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, in
** cuBLAS's column-major terms (m x n results, k inner; ta/tb 0: as is,
** 1: transposed); dtype float32, float64, bfloat16 or float16 (half types
** accumulate in float32).  tf32: float32 may use TF32 tensor cores.
** Strides in elements; beta 0 never reads C. */
typedef int (*dlc_gemm_fn)(int device, int dtype, int ta, int tb, int m, int n, int k,
                           double alpha, const void *a, int64_t lda, int64_t sa,
                           const void *b, int64_t ldb, int64_t sb, double beta, void *c,
                           int64_t ldc, int64_t sc, int64_t batch, int tf32);

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
typedef int (*dlc_matmul_naive_fn)(int device, const dlc_mm *p);

#ifdef __cplusplus
}
#endif
#endif
