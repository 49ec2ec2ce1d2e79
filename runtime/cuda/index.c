/*
** cuda/index.c -- the glue between the indexing ops (index.c, sort.c's
** nonzero and tril/triu, tensor.c's creation) and the launchers of
** runtime/cuda/index.cu: operands laid out as loops, device scratch
** memory, and launcher errors as the runtime's.
*/
#include <string.h>

#include "cuda/cuda.h"

/* Two int64 of device memory for a launcher's results, from the caching
** allocator (no shared static words: ops may run on several threads). */
static dl_tensor *words_on(int device) {
  int64_t two = 2;
  return tensor_new_on(device, DL_INT64, &two, 1);
}

static int loop_of(const char *op, dl_tensor *const *ops, int nops, dlc_iter *d) {
  iter_t it;
  if (iter_init(&it, op, ops, nops)) return -1;
  return cuda_iter(d, &it, ops);
}

DL_HIDDEN int cuda_index_check(const char *op, const dl_tensor *index, int dim, int64_t size) {
  int dev = index->storage->device;
  dlc_iter d;
  DLC_FN(index_check) f = DLC(op, index_check);
  dl_tensor *ops[1] = {(dl_tensor *)index};
  dl_tensor *w;
  if (!f || loop_of(op, ops, 1, &d) || !(w = words_on(dev))) return -1;
  int64_t bad = 0;
  int rc = f(dev, &d, size, (int64_t *)tensor_first(w), &bad);
  dl_tensor_release(w);
  if (rc == 1) return dl_err(EM_INDEX_RANGE, op, (long long)bad, dim, (long long)size);
  return cuda_err(op, dev, rc);
}

DL_HIDDEN int cuda_index_minmax(const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi) {
  int dev = index->storage->device;
  dlc_iter d;
  DLC_FN(index_minmax) f = DLC(op, index_minmax);
  dl_tensor *ops[1] = {(dl_tensor *)index};
  dl_tensor *w;
  if (!f || loop_of(op, ops, 1, &d) || !(w = words_on(dev))) return -1;
  int rc = f(dev, &d, (int64_t *)tensor_first(w), lo, hi);
  dl_tensor_release(w);
  return cuda_err(op, dev, rc);
}

DL_HIDDEN int cuda_take(const char *op, dl_tensor *const *ops, int64_t step, int es) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(take) f = DLC(op, take);
  if (!f || loop_of(op, ops, 3, &d)) return -1;
  return cuda_err(op, dev, f(dev, &d, step, es));
}

DL_HIDDEN int cuda_put(const char *op, dl_tensor *const *ops, int64_t step, dl_dtype dtype, dl_scatter_reduce reduce) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(put) f = DLC(op, put);
  if (!f || loop_of(op, ops, 3, &d)) return -1;
  return cuda_err(op, dev, f(dev, &d, step, dtype, reduce));
}

DL_HIDDEN int cuda_masked_fill(const char *op, dl_tensor *const *ops, uint64_t bytes) {
  int dev = ops[0]->storage->device;
  dlc_iter d;
  DLC_FN(masked_fill) f = DLC(op, masked_fill);
  if (!f || loop_of(op, ops, 2, &d)) return -1;
  return cuda_err(op, dev, f(dev, &d, bytes, dl_dtype_sizes[ops[0]->dtype]));
}

DL_HIDDEN dl_tensor *cuda_compact(const char *op, const dl_tensor *src, const dl_tensor *mask) {
  int dev = mask->storage->device;
  DLC_FN(compact_count) count = DLC(op, compact_count);
  DLC_FN(compact_write) write = count ? DLC(op, compact_write) : NULL;
  if (!write) return NULL;
  int64_t n = dl_tensor_numel(mask), nb = (n + 1023) / 1024 + 1, total = 0;
  /* ceil(n / 1024) chunk counts and their total, as count expects */
  dl_tensor *scratch = tensor_new_on(dev, DL_INT64, &nb, 1);
  if (!scratch) return NULL;
  int64_t *offs = (int64_t *)tensor_first(scratch);
  const uint8_t *m = (const uint8_t *)tensor_first(mask);
  dl_tensor *out = NULL;
  if (cuda_err(op, dev, count(dev, m, n, offs, &total))) goto done;
  int nd = mask->ndim;
  int64_t shape[2] = {total, nd};
  out = src ? tensor_new_on(dev, src->dtype, &total, 1) : tensor_new_on(dev, DL_INT64, shape, 2);
  if (!out || !total) goto done;
  int rc = write(dev, m, n, offs, src ? tensor_first(src) : NULL,
                 src ? dl_dtype_sizes[src->dtype] : 8, nd, mask->shape, tensor_first(out));
  if (cuda_err(op, dev, rc)) {
    dl_tensor_release(out);
    out = NULL;
  }
done:
  dl_tensor_release(scratch);
  return out;
}

DL_HIDDEN int cuda_tri(const char *op, dl_tensor *t, int64_t diag, int upper) {
  int dev = t->storage->device;
  DLC_FN(tri) f = DLC(op, tri);
  if (!f) return -1;
  int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
  int64_t B = R && C ? dl_tensor_numel(t) / (R * C) : 0;
  return cuda_err(op, dev, f(dev, tensor_first(t), B, R, C, diag, upper, dl_dtype_sizes[t->dtype]));
}

DL_HIDDEN int cuda_ramp(const char *op, dl_tensor *t, double start, double step, double end,
                        int64_t split) {
  int dev = t->storage->device;
  DLC_FN(ramp) f = DLC(op, ramp);
  if (!f) return -1;
  return cuda_err(op, dev, f(dev, tensor_first(t), t->dtype, dl_tensor_numel(t), start, step, end, split));
}
