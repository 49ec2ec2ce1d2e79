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

/* -- Indexing and joining -- */

/* Checks the index it (one operand, int32 or int64, any layout) lies in
** [0, size): 0 when it does, 1 with *bad an offending value when not (both
** after a stream sync).  words: 2 int64 of device memory to work in. */
typedef int (*dlc_index_check_fn)(int device, const dlc_iter *it, int64_t size, int64_t *words,
                                  int64_t *bad);
/* Smallest and largest value of a non-empty index (one operand), with
** words as above; syncs. */
typedef int (*dlc_index_minmax_fn)(int device, const dlc_iter *it, int64_t *words, int64_t *lo,
                                   int64_t *hi);
/* out = src[index] (index_select, gather): it = {out, src with stride 0
** along dim, index}; step: src's stride along dim in bytes; es: element
** size. */
typedef int (*dlc_take_fn)(int device, const dlc_iter *it, int64_t step, int es);
/* dst[index] = src (reduce 0) or += src (reduce 1, atomically in dtype):
** it = {dst with stride 0 along dim, src (or a scalar), index}. */
typedef int (*dlc_put_fn)(int device, const dlc_iter *it, int64_t step, int dtype, int reduce);
/* t = value where mask: it = {t, bool mask}; bytes: the value's es bytes. */
typedef int (*dlc_masked_fill_fn)(int device, const dlc_iter *it, uint64_t bytes, int es);
/* Compaction of a contiguous bool mask of n bytes: counts the set bytes
** into scratch (ceil(n / 1024) + 1 int64 of device memory) and returns
** their number in *total (after a stream sync). */
typedef int (*dlc_compact_count_fn)(int device, const uint8_t *mask, int64_t n, int64_t *scratch,
                                    int64_t *total);
/* Then writes, in order, the elements of contiguous src (es bytes each)
** where mask is set into out; without src, their coordinates in shape
** (nd dims, row-major) as int64 rows of nd (nonzero). */
typedef int (*dlc_compact_write_fn)(int device, const uint8_t *mask, int64_t n,
                                    const int64_t *scratch, const char *src, int es, int nd,
                                    const int64_t *shape, char *out);
/* Zeroes, in contiguous p (B matrices R x C of es bytes), the elements
** below diagonal diag (upper: triu) or above it (tril). */
typedef int (*dlc_tri_fn)(int device, char *p, int64_t B, int64_t R, int64_t C, int64_t diag,
                          int upper, int es);
/* Contiguous out[i] = i < split ? start + i * step : end - (n - 1 - i) * step,
** stored in dtype as store_double does (arange: split = n; linspace). */
typedef int (*dlc_ramp_fn)(int device, char *out, int dtype, int64_t n, double start, double step,
                           double end, int64_t split);

#ifdef __cplusplus
}
#endif
#endif
