/*
** cuda_linalg.c -- the CUDA compute steps of the matmul family, conv2d and
** pooling (the kernels in runtime/cuda/blas.cu, conv.cu, pool.cu), and the
** TF32 switch.  Callers did the CPU's checks and allocations already.
*/
#include <limits.h>
#include <stdatomic.h>

#include "cuda_linalg.h"

/* -- TF32 ---------------------------------------------------------------------- */

/* Off by default, as torch.backends.cuda.matmul.allow_tf32 since 1.12:
** float32 products then round like float32, not to a 10-bit mantissa. */
static atomic_int allow_tf32;

DL_API void dl_cuda_set_allow_tf32(int on) { atomic_store(&allow_tf32, on != 0); }
DL_API int dl_cuda_get_allow_tf32(void) { return atomic_load(&allow_tf32); }
DL_HIDDEN int cuda_tf32(void) { return atomic_load(&allow_tf32); }

/* -- Products ------------------------------------------------------------------- */

static int naive(const char *op, int device, const dlc_mm *p) {
  static void *slot;
  dlc_matmul_naive_fn f = cuda_fn(&slot, op, "dlc_matmul_naive");
  return f ? cuda_err(op, device, f(device, p)) : -1;
}

/* Batch dims d-1 and d merge when both operands step through them at one
** stride (the output, contiguous, always does). */
static int merge_batch_dims(int64_t *shape, int64_t *as, int64_t *bs, int nb) {
  int r = 0;
  for (int d = 0; d < nb; d++) {
    if (shape[d] == 1) continue;
    if (r > 0 && as[r - 1] == as[d] * shape[d] && bs[r - 1] == bs[d] * shape[d]) {
      shape[r - 1] *= shape[d];
      as[r - 1] = as[d];
      bs[r - 1] = bs[d];
      continue;
    }
    shape[r] = shape[d], as[r] = as[d], bs[r] = bs[d];
    r++;
  }
  return r;
}

DL_HIDDEN int cuda_mm(const char *op, int device, const dlc_mm *p, int ta, int64_t lda, int tb,
                      int64_t ldb) {
  int dt = p->dtype;
  if (p->nbatch == 0 || p->m == 0 || p->n == 0) return 0;
  if (p->k == 0 || !(dt == DL_FLOAT32 || dt == DL_FLOAT64 || is_half_dtype(dt)))
    return naive(op, device, p);
  int64_t big = p->m > p->n ? p->m : p->n;
  if (p->k > big) big = p->k;
  if (big > INT_MAX) return dl_err(EM_MM_BLAS_SIZE, op, (long long)big, (long long)INT_MAX);
  static void *slot;
  dlc_gemm_fn gemm = cuda_fn(&slot, op, "dlc_gemm");
  if (!gemm) return -1;
  int64_t shape[DLC_MAX_DIMS], as[DLC_MAX_DIMS], bs[DLC_MAX_DIMS];
  for (int d = 0; d < p->nb; d++) shape[d] = p->bshape[d], as[d] = p->ast[d], bs[d] = p->bst[d];
  int nb = merge_batch_dims(shape, as, bs, p->nb);
  /* the innermost batch dim goes to one strided-batched call, the outer
  ** ones (rare: broadcasts cuBLAS cannot stride through) loop here */
  int64_t inner = nb ? shape[nb - 1] : 1, sa = nb ? as[nb - 1] : 0, sb = nb ? bs[nb - 1] : 0;
  int64_t outer = 1;
  for (int d = 0; d + 1 < nb; d++) outer *= shape[d];
  int64_t es = dl_dtype_sizes[dt], mn = p->m * p->n;
  /* Row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS gets B as
  ** its first operand and A as its second, m and n swapped. */
  for (int64_t o = 0; o < outer; o++) {
    int64_t oa = 0, ob = 0, rest = o;
    for (int d = nb - 2; d >= 0; d--) {
      int64_t q = rest % shape[d];
      rest /= shape[d];
      oa += q * as[d], ob += q * bs[d];
    }
    int rc = gemm(device, dt, tb, ta, (int)p->n, (int)p->m, (int)p->k, p->alpha,
                  (const char *)p->b + ob * es, ldb, sb, (const char *)p->a + oa * es, lda, sa,
                  p->beta, (char *)p->c + o * inner * mn * es, p->n, mn, inner, cuda_tf32());
    if (rc) return cuda_err(op, device, rc);
  }
  return 0;
}

/* -- Shared by conv2d and pooling ----------------------------------------------- */

DL_HIDDEN int cuda_check_float(const char *op, const char *what, const dl_tensor *t, int want) {
  if (!t) return dl_err(EM_NULLARG, op, what);
  if (check_tensor_any(op, t)) return -1;
  if (!dl_dtype_is_float(t->dtype)) return dl_err(EM_DTYPE_NEED_FLOAT, op, fmt_dtype(t->dtype));
  if (want >= 0 && t->dtype != want)
    return dl_err(EM_DTYPE_MISMATCH, op, fmt_dtype(want), fmt_dtype(t->dtype));
  return 0;
}

DL_HIDDEN dl_tensor *cuda_prep(const dl_tensor *t, int kd) {
  if (t->dtype == kd && dl_tensor_is_contiguous(t)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  dl_tensor *c = tensor_new_on(t->storage->device, kd, t->shape, t->ndim);
  if (c && dl_copy_(c, t)) {
    dl_tensor_release(c);
    return NULL;
  }
  return c;
}

DL_HIDDEN dl_tensor *cuda_finish(dl_tensor *work, int dtype) {
  if (!work || work->dtype == dtype) return work;
  dl_tensor *r = cuda_prep(work, dtype);
  dl_tensor_release(work);
  return r;
}
