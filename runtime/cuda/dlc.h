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
** uint8, bool); the result is dtype, or bool for comparisons.  dtype
** bfloat16 / float16: operands of that dtype or float32 host scalars,
** computed in float32 registers and rounded once into the result.  Integer
** division by zero and negative integer powers: returns DL_EINVAL after
** a stream sync, with the message naming which (these sync; others not). */
typedef int (*dlc_binary_fn)(int device, int op, int dtype, const dlc_iter *it);
/* op (dl_unop) in dtype; bool results for the predicates (bfloat16 and
** float16 in float32 registers, as for dlc_binary). */
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

/* A conv2d's geometry (nn/conv.c: conv_geom).  Column matrices of
** samples [n0, n0 + nchunk) are laid out [groups][K][nchunk][HW], K = Cg *
** kh * kw rows (c, i, j), so one group's columns are a K x nchunk*HW matrix
** and one sample's a K x HW matrix at leading dim nchunk*HW. */
typedef struct dlc_conv {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo, groups, Cg, Og, K, HW;
} dlc_conv;
/* x [N, C, H, W] to columns (zeros where the window is in the padding);
** dtype float32 or float64 (also for the ones below). */
typedef int (*dlc_im2col_fn)(int device, int dtype, const dlc_conv *g, const void *x, void *col,
                             int64_t n0, int64_t nchunk);
/* The adjoint: x[n0 .. n0 + nchunk) = the sum of every column entry read
** from it (written, not accumulated). */
typedef int (*dlc_col2im_fn)(int device, int dtype, const dlc_conv *g, const void *col, void *x,
                             int64_t n0, int64_t nchunk);
/* out [N, O, HW] += b[o]. */
typedef int (*dlc_bias_add_fn)(int device, int dtype, void *out, const void *b, int64_t N,
                               int64_t O, int64_t HW);
/* gb[o] = the sum of g [N, O, HW] over N and HW (accumulated in double). */
typedef int (*dlc_bias_grad_fn)(int device, int dtype, const void *g, void *gb, int64_t N,
                                int64_t O, int64_t HW);
/* dst [B, A, R] = src [A, B, R] with its first two dims swapped. */
typedef int (*dlc_swap01_fn)(int device, int dtype, const void *src, void *dst, int64_t A,
                             int64_t B, int64_t R);

/* A pooling's geometry (nn/pool.c: pool_geom): NC planes of H x W to Ho x Wo. */
typedef struct dlc_pool {
  int64_t NC, H, W, kh, kw, sh, sw, ph, pw, dh, dw, Ho, Wo;
  int count_include_pad;
  int64_t divisor;  /* 0: none */
} dlc_pool;
/* Max pooling, float32 / float64: out and idx (int64, into each H x W
** plane) as PyTorch's CPU kernel (a NaN wins; the first tap on ties). */
typedef int (*dlc_max_pool_fn)(int device, int dtype, const dlc_pool *g, const void *x,
                               void *out, int64_t *idx);
/* gx (planes x in_plane, zeroed here) += gout at idx; indices outside a
** plane are skipped (the CPU reports them; here that would need a sync). */
typedef int (*dlc_max_pool_backward_fn)(int device, int dtype, int64_t planes, int64_t in_plane,
                                        int64_t out_plane, const void *gout, const int64_t *idx,
                                        void *gx);
/* Average pooling and its gradient (as a gather: deterministic). */
typedef int (*dlc_avg_pool_fn)(int device, int dtype, const dlc_pool *g, const void *x, void *out);
typedef int (*dlc_avg_pool_backward_fn)(int device, int dtype, const dlc_pool *g,
                                        const void *gout, void *gx);

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
/* Along the middle dim of a contiguous [outer, n, inner] tensor, y the
** same: op 0 cumsum, 1 cumprod (dtype float32, float64, int64), 2 softmax,
** 3 log_softmax (float32, float64).  (No parameter is called I: complex.h,
** which cblas.h includes, defines it.) */
typedef int (*dlc_dimop_fn)(int device, int op, int dtype, int64_t outer, int64_t n,
                            int64_t inner, const void *x, void *y);
/* Stable sort (sort.cu) of r's M slices along its one reduced dim (any
** dtype; desc: descending, NaN first), the first k of each into values
** (in_dtype) and int64 indices, contiguous with k in the dim's place and
** `inner` elements after it.  ws: dlc_sort_ws(r) bytes of device memory. */
typedef size_t (*dlc_sort_ws_fn)(const dlc_reduce *r);
typedef int (*dlc_sort_fn)(int device, int desc, int64_t k, int64_t inner, const dlc_reduce *r,
                           void *values, int64_t *indices, void *ws);

/* -- The library's one entry point ---------------------------------------------
** libddplua_cuda.so (and the emulator) export dlc_api_get(): a table of
** every launcher, with the ABI version and the table's own size, which
** cuda/probe.c checks once when it loads the library, so a library of
** another build is refused with a message instead of calling a launcher
** whose arguments changed.  A new launcher: its field at the end of its
** file's group here, its entry in kernels/api.cu, and DLC_ABI_VERSION + 1.
** The emulator has no NCCL: its nccl_* fields are NULL. */
enum { DLC_ABI_VERSION = 2 };
typedef struct dlc_nccl dlc_nccl;
typedef struct dlc_api {
  uint32_t abi_version, size;
  /* blas.cu */
  int (*gemm)(int device, int dtype, int ta, int tb, int m, int n, int k, double alpha,
              const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb,
              double beta, void *c, int64_t ldc, int64_t sc, int64_t batch, int tf32);
  int (*matmul_naive)(int device, const dlc_mm *p);
  /* common.cu */
  const char *(*last_error)(void);
  /* conv.cu */
  int (*im2col)(int device, int dtype, const dlc_conv *g, const void *x, void *col, int64_t n0,
                int64_t nchunk);
  int (*col2im)(int device, int dtype, const dlc_conv *g, const void *col, void *x, int64_t n0,
                int64_t nchunk);
  int (*bias_add)(int device, int dtype, void *out, const void *b, int64_t N, int64_t O,
                  int64_t HW);
  int (*bias_grad)(int device, int dtype, const void *g, void *gb, int64_t N, int64_t O,
                   int64_t HW);
  int (*swap01)(int device, int dtype, const void *src, void *dst, int64_t A, int64_t B,
                int64_t R);
  /* elementwise.cu */
  int (*binary)(int device, int op, int dtype, const dlc_iter *it);
  int (*unary)(int device, int op, int dtype, const dlc_iter *it);
  int (*cast)(int device, const dlc_iter *it);
  int (*fill)(int device, const dlc_iter *it, uint64_t bytes);
  int (*clamp)(int device, int dtype, double lo, double hi, const dlc_iter *it);
  int (*where)(int device, const dlc_iter *it);
  int (*act_backward)(int device, int op, int dtype, const dlc_iter *it);
  /* index.cu */
  int (*index_check)(int device, const dlc_iter *it, int64_t size, int64_t *words, int64_t *bad);
  int (*index_minmax)(int device, const dlc_iter *it, int64_t *words, int64_t *lo, int64_t *hi);
  int (*take)(int device, const dlc_iter *it, int64_t step, int es);
  int (*put)(int device, const dlc_iter *it, int64_t step, int dtype, int reduce);
  int (*masked_fill)(int device, const dlc_iter *it, uint64_t bytes, int es);
  int (*compact_count)(int device, const uint8_t *mask, int64_t n, int64_t *scratch_nb1,
                       int64_t *total);
  int (*compact_write)(int device, const uint8_t *mask, int64_t n, const int64_t *offsets,
                       const char *src, int es, int nd, const int64_t *shape, char *out);
  int (*tri)(int device, char *p, int64_t B, int64_t R, int64_t C, int64_t diag, int upper,
             int es);
  int (*ramp)(int device, char *out, int dtype, int64_t n, double start, double step, double end,
              int64_t split);
  /* memory.cu */
  int (*mem_alloc)(int device, size_t size, void **ptr, char *err, size_t errlen);
  int (*mem_free)(int device, void *ptr, char *err, size_t errlen);
  int (*device_sync)(int device, char *err, size_t errlen);
  int (*mem_info)(int device, size_t *free_b, size_t *total_b, char *err, size_t errlen);
  int (*memcpy)(void *dst, const void *src, size_t n, int device, char *err, size_t errlen);
  int (*host_alloc)(size_t size, void **ptr, char *err, size_t errlen);
  int (*host_free)(void *ptr, char *err, size_t errlen);
  int (*memcpy_async)(void *dst, const void *src, size_t n, int device, void **event, char *err,
                      size_t errlen);
  int (*event_done)(void *event, int wait);
  /* nccl.cu */
  int (*nccl_get_id)(void *id, size_t idlen, char *err, size_t errlen);
  int (*nccl_version)(int *version, char *err, size_t errlen);
  int (*nccl_init)(dlc_nccl **out, int device, int rank, int world, const void *id, size_t idlen,
                   char *err, size_t errlen);
  void (*nccl_destroy)(dlc_nccl *c);
  int (*nccl_all_reduce)(dlc_nccl *c, void *out, const void *in, int64_t n, int dtype, int op,
                         void *stream, char *err, size_t errlen);
  int (*nccl_broadcast)(dlc_nccl *c, void *out, const void *in, int64_t nbytes, int root,
                        void *stream, char *err, size_t errlen);
  int (*nccl_all_gather)(dlc_nccl *c, void *out, const void *in, int64_t nbytes, void *stream,
                         char *err, size_t errlen);
  int (*nccl_reduce_scatter)(dlc_nccl *c, void *out, const void *in, int64_t n, int dtype, int op,
                             void *stream, char *err, size_t errlen);
  int (*nccl_send)(dlc_nccl *c, const void *buf, int64_t nbytes, int peer, void *stream,
                   char *err, size_t errlen);
  int (*nccl_recv)(dlc_nccl *c, void *buf, int64_t nbytes, int peer, void *stream, char *err,
                   size_t errlen);
  int (*nccl_group_start)(dlc_nccl *c, char *err, size_t errlen);
  int (*nccl_group_end)(dlc_nccl *c, char *err, size_t errlen);
  int (*nccl_stream_wait)(dlc_nccl *c, void *stream, char *err, size_t errlen);
  int (*nccl_wait)(dlc_nccl *c, double timeout_s, char *err, size_t errlen);
  int (*nccl_alloc)(int device, int64_t nbytes, void **out, char *err, size_t errlen);
  int (*nccl_free)(int device, void *p, char *err, size_t errlen);
  int (*nccl_copy)(int device, void *dst, const void *src, int64_t nbytes, char *err,
                   size_t errlen);
  /* nn.cu */
  int (*bad_index)(int device, const int64_t *idx, int64_t n, int64_t rows, int64_t ignore,
                   int use_ignore, int64_t *pos, int64_t *val);
  int (*cls_forward)(int device, int kd, int logits, int64_t N, int64_t C, int64_t S,
                     const void *z, const int64_t *t, const double *w, int64_t ignore, double ls,
                     int reduction, double *buf, void *out, int out_dtype, int64_t *bad_pos,
                     int64_t *bad_val);
  int (*cls_backward)(int device, int kd, int logits, int64_t N, int64_t C, int64_t S,
                      const void *z, const int64_t *t, const double *w, int64_t ignore, double ls,
                      int reduction, const void *g, double *scratch, void *gi);
  int64_t (*mse_parts)(int64_t n);
  int (*mse)(int device, int kd, int reduction, int64_t n, const void *a, const void *b,
             double *part, void *out, int out_dtype);
  int (*mse_backward)(int device, int kd, int64_t n, const void *a, const void *b, const void *g,
                      int g_each, double norm, void *out);
  int (*embedding)(int device, int64_t n, int64_t row_bytes, const void *w, const int64_t *idx,
                   void *out);
  int (*embedding_backward)(int device, int kd, int64_t V, int64_t D, int64_t padding_idx,
                            int scale, const int64_t *start, const int64_t *order,
                            const void *gout, void *gw);
  /* norm.cu */
  int (*layer_norm)(int device, int kd, int64_t M, int64_t N, double eps, const void *x,
                    const void *w, const void *b, void *y, void *mean, void *rstd);
  int (*layer_norm_backward)(int device, int kd, int64_t M, int64_t N, const void *x,
                             const void *go, const void *w, const void *mean, const void *rstd,
                             void *gx, double *gw, double *gb);
  int (*batch_norm)(int device, int kd, int64_t N, int64_t C, int64_t S, int training,
                    double momentum, double eps, const void *x, const double *w, const double *b,
                    double *rm, double *rv, double *stats, void *y);
  int (*batch_norm_backward)(int device, int kd, int64_t N, int64_t C, int64_t S, int training,
                             const void *go, const void *x, const double *mean, const double *inv,
                             const double *w, double *out, void *gx);
  /* optim.cu */
  int (*sgd)(int device, int dtype, int64_t n, void *p, const void *g, void *buf, double lr,
             double momentum, double dampening, double wd, int nesterov, int first, int maximize);
  int (*adam)(int device, int dtype, int64_t n, void *p, const void *g, void *m, void *v,
              void *vmax, double lr, double beta1, double beta2, double eps, double wd,
              double bc1, double bc2_sqrt, int decoupled, int maximize);
  /* pool.cu */
  int (*max_pool)(int device, int dtype, const dlc_pool *g, const void *x, void *out,
                  int64_t *idx);
  int (*max_pool_backward)(int device, int dtype, int64_t planes, int64_t in_plane,
                           int64_t out_plane, const void *gout, const int64_t *idx, void *gx);
  int (*avg_pool)(int device, int dtype, const dlc_pool *g, const void *x, void *out);
  int (*avg_pool_backward)(int device, int dtype, const dlc_pool *g, const void *gout, void *gx);
  /* random.cu */
  int (*philox_fill)(int device, int kind, int dtype, int64_t n, void *out, uint64_t seed,
                     uint64_t base, double a, double b, int64_t low, uint64_t range);
  int (*dropout)(int device, int kd, int64_t n, const void *x, void *out, uint8_t *mask,
                 uint64_t seed, uint64_t base, double keep, double scale);
  int (*dropout_backward)(int device, int kd, int64_t n, const void *g, const uint8_t *mask,
                          double scale, void *out);
  /* reduce.cu */
  size_t (*reduce_ws)(const dlc_reduce *r);
  int (*reduce_run)(int device, const dlc_reduce *r, void *ws);
  size_t (*argreduce_ws)(const dlc_reduce *r);
  int (*argreduce)(int device, int max, const dlc_reduce *r, void *values, int64_t *indices,
                   void *ws);
  /* scan.cu */
  int (*dimop)(int device, int op, int dtype, int64_t O, int64_t N, int64_t I, const void *x,
               void *y);
  /* selftest.cu */
  int (*device_count)(int *count, char *err, size_t errlen);
  int (*device_info)(int device, char *name, size_t namelen, int *major, int *minor, char *err,
                     size_t errlen);
  int (*versions)(int *driver, int *runtime, char *err, size_t errlen);
  int (*iota)(int device, float *out, int n, float scale, char *err, size_t errlen);
  /* sort.cu */
  size_t (*sort_ws)(const dlc_reduce *r);
  int (*sort)(int device, int desc, int64_t k, int64_t inner, const dlc_reduce *r, void *values,
              int64_t *indices, void *ws);
  /* attention.cu: q [BH, L, E], k [BH, S, E], v [BH, S, Ev] contiguous in
  ** kd (float32/64), head dims 1-128; mask additive in kd, [L, S] per
  ** (batch, head) at mask + bh * mask_bh (mask_bh 0: one for all), or
  ** NULL; causal: row i sees keys j <= i.  Forward: out [BH, L, Ev] and
  ** lse [BH, L].  Backward: dsum [BH, L] scratch; dq, dk, dv all written. */
  int (*sdpa_forward)(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                      double scale, int causal, const void *q, const void *k, const void *v,
                      const void *mask, int64_t mask_bh, void *out, void *lse);
  int (*sdpa_backward)(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                       double scale, int causal, const void *q, const void *k, const void *v,
                       const void *mask, int64_t mask_bh, const void *out, const void *dout,
                       const void *lse, void *dsum, void *dq, void *dk, void *dv);
} dlc_api;
typedef const dlc_api *(*dlc_api_get_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
