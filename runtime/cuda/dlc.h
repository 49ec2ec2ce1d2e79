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

/* -- Reductions (reduce.cu) -- */

/* What a reduction maps and combines, in the order of reduce.c's passes. */
enum { DLC_K_SUM, DLC_K_ABS, DLC_K_SQ, DLC_K_NZ, DLC_K_SQDEV, DLC_K_EXP, DLC_K_POW,
       DLC_K_PROD, DLC_K_MAX, DLC_K_MIN, DLC_K_MAXABS, DLC_K_MINABS, DLC_K_COUNT };

/* M outputs (the kept dims, in the output's order, fastest first) each
** over N elements (the reduced dims, fastest first); strides in elements.
** x is float32, float64 or int64, or bool/uint8 for DLC_K_COUNT (as
** reduce.c reads them); out is contiguous in out_dtype and gets reduce.c's
** finalised result of redop (dl_redop) -- or, for redop -1, the centre of
** a second pass as float64: the mean (DLC_K_SUM) or the max, infinities
** as 0 (DLC_K_MAX).  center: per output, for DLC_K_SQDEV and DLC_K_EXP. */
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
/* Bytes of device workspace the reduction needs (0: none). */
typedef size_t (*dlc_reduce_ws_fn)(const dlc_reduce *r);
typedef int (*dlc_reduce_fn)(int device, const dlc_reduce *r, void *ws);
/* Max (max != 0) or min over r's one reduced dim, ties to the first and a
** NaN winning, as reduce.c: values (NULL: not wanted) in in_dtype (any
** but the half types) and int64 indices, both contiguous; ws: the bytes
** dlc_argreduce_ws(r) says of device memory (NULL when 0). */
typedef size_t (*dlc_argreduce_ws_fn)(const dlc_reduce *r);
typedef int (*dlc_argreduce_fn)(int device, int max, const dlc_reduce *r, void *values,
                                int64_t *indices, void *ws);
/* Along N of a contiguous [O, N, I] tensor, y the same: op 0 cumsum,
** 1 cumprod (dtype float32, float64, int64), 2 softmax, 3 log_softmax
** (float32, float64). */
typedef int (*dlc_dimop_fn)(int device, int op, int dtype, int64_t O, int64_t N, int64_t I,
                            const void *x, void *y);
/* Stable sort (sort.cu) of r's M slices along its one reduced dim (any
** dtype; desc: descending, NaN first), the first k of each into values
** (in_dtype) and int64 indices, contiguous with k in the dim's place and
** `inner` elements after it.  ws: dlc_sort_ws(r) bytes of device memory. */
typedef size_t (*dlc_sort_ws_fn)(const dlc_reduce *r);
typedef int (*dlc_sort_fn)(int device, int desc, int64_t k, int64_t inner, const dlc_reduce *r,
                           void *values, int64_t *indices, void *ws);

#ifdef __cplusplus
}
#endif
#endif
