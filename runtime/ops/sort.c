/*
** sort.c -- stable sort and top-k along a dim, nonzero, tril and triu.
*/
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "ops/forward.h"
#include "core/internal.h"

/* -- Keys ---------------------------------------------------------------- */

/* Values of every dtype map onto uint64 keys whose unsigned order is the
** sort order (NaN above everything, -0.0 equal to 0.0); descending order
** complements them.  Ties are broken by index, so the order is total and
** any algorithm sorts stably. */
typedef struct { uint64_t key; int64_t idx; } pair_t;

static inline uint64_t fkey(float v) {
  uint32_t u;
  if (v != v) return UINT64_MAX;
  if (v == 0) v = 0;
  memcpy(&u, &v, sizeof u);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static inline uint64_t dkey(double v) {
  uint64_t u;
  if (v != v) return UINT64_MAX;
  if (v == 0) v = 0;
  memcpy(&u, &v, sizeof u);
  return u >> 63 ? ~u : u | UINT64_C(1) << 63;
}

/* Keys and indices of n elements sd bytes apart; flip complements them. */
static void make_keys(pair_t *a, const char *p, int64_t n, int64_t sd,
                      int dtype, uint64_t flip) {
  const uint64_t top = UINT64_C(1) << 63;
#define KEYS(T, KEY)                                                          \
  for (int64_t i = 0; i < n; i++) {                                          \
    T v = *(const T *)(p + i * sd);                                          \
    a[i].key = (KEY) ^ flip;                                                 \
    a[i].idx = i;                                                            \
  }                                                                          \
  break
  switch (dtype) {
    case DL_FLOAT32: KEYS(float, fkey(v));
    case DL_FLOAT64: KEYS(double, dkey(v));
    case DL_INT32: KEYS(int32_t, (uint64_t)(int64_t)v ^ top);
    case DL_INT64: KEYS(int64_t, (uint64_t)v ^ top);
    case DL_BFLOAT16: KEYS(uint16_t, fkey(bf16_to_float(v)));
    case DL_FLOAT16: KEYS(uint16_t, fkey(half_to_float(v)));
    default: KEYS(uint8_t, (uint64_t)v);  /* uint8, bool */
  }
#undef KEYS
}

static inline int pless(const pair_t *a, const pair_t *b) {
  return a->key < b->key || (a->key == b->key && a->idx < b->idx);
}

/* Sorts a[0..n) using tmp[0..n); returns whichever buffer holds the result. */
static pair_t *merge_sort(pair_t *a, pair_t *tmp, int64_t n) {
  enum { RUN = 16 };
  for (int64_t s = 0; s < n; s += RUN) {
    int64_t e = s + RUN < n ? s + RUN : n;
    for (int64_t i = s + 1; i < e; i++) {
      pair_t x = a[i];
      int64_t j = i;
      for (; j > s && pless(&x, &a[j - 1]); j--) a[j] = a[j - 1];
      a[j] = x;
    }
  }
  for (int64_t w = RUN; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = pless(&a[j], &a[i]) ? a[j++] : a[i++];
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
    }
    pair_t *s = a;
    a = tmp, tmp = s;
  }
  return a;
}

/* Stable LSD radix sort by key, a byte a pass; a pass whose byte is the
** same in every key is skipped (the high half of float32 keys, mostly). */
static pair_t *radix_sort(pair_t *a, pair_t *tmp, int64_t n) {
  int64_t cnt[8][256];
  memset(cnt, 0, sizeof cnt);
  for (int64_t i = 0; i < n; i++)
    for (int b = 0; b < 8; b++) cnt[b][a[i].key >> (8 * b) & 255]++;
  for (int b = 0; b < 8; b++) {
    if (cnt[b][a[0].key >> (8 * b) & 255] == n) continue;
    int64_t off = 0;
    for (int d = 0; d < 256; d++) {
      int64_t c = cnt[b][d];
      cnt[b][d] = off;
      off += c;
    }
    for (int64_t i = 0; i < n; i++) tmp[cnt[b][a[i].key >> (8 * b) & 255]++] = a[i];
    pair_t *t = a;
    a = tmp, tmp = t;
  }
  return a;
}

/* Sorts a[0..n) by (key, idx) into whichever buffer it returns. */
static pair_t *sort_pairs(pair_t *a, pair_t *tmp, int64_t n) {
  return n < 256 ? merge_sort(a, tmp, n) : radix_sort(a, tmp, n);
}

static void sift_down(pair_t *h, int64_t k, int64_t i) {
  pair_t x = h[i];
  for (int64_t c; (c = 2 * i + 1) < k; i = c) {
    if (c + 1 < k && pless(&h[c], &h[c + 1])) c++;
    if (!pless(&x, &h[c])) break;
    h[i] = h[c];
  }
  h[i] = x;
}

/* Moves the k smallest of a[0..n) to a[0..k), in any order, through a
** max-heap of the best so far: on most data the test against its top is
** almost always false, so the scan costs about a compare per element. */
static void select_k(pair_t *a, int64_t n, int64_t k) {
  for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(a, k, i);
  for (int64_t i = k; i < n; i++) {
    if (pless(&a[i], &a[0])) {
      a[0] = a[i];
      sift_down(a, k, 0);
    }
  }
}

/* -- Sort and topk ------------------------------------------------------- */

typedef struct {
  const char *base;
  int dtype, esize, nk;
  int64_t ks[DL_MAX_DIMS], kst[DL_MAX_DIMS]; /* the other dims (bytes) */
  int64_t n, sd, k, I;                       /* I: elements after dim */
  uint64_t flip;                             /* ~0 when descending */
  char *vals;
  int64_t *idx;
  atomic_int err;
} sort_ctx;

static void sort_body(void *c_, int64_t b, int64_t e) {
  sort_ctx *c = c_;
  int64_t n = c->n, k = c->k;
  pair_t *a = malloc(sizeof(pair_t) * (size_t)n * 2);
  if (!a) {
    atomic_store(&c->err, 1);
    return;
  }
  for (int64_t s = b; s < e; s++) {
    const char *p = c->base;
    int64_t m = s;
    for (int i = c->nk - 1; i >= 0; i--) {
      p += (m % c->ks[i]) * c->kst[i];
      m /= c->ks[i];
    }
    make_keys(a, p, n, c->sd, c->dtype, c->flip);
    pair_t *r;
    if (k * 8 < n) {  /* few wanted: select them, then sort only those */
      select_k(a, n, k);
      r = sort_pairs(a, a + n, k);
    } else {
      r = sort_pairs(a, a + n, n);
    }
    int64_t o = (s / c->I) * k * c->I + s % c->I;
    for (int64_t j = 0; j < k; j++, o += c->I) {
      const char *src = p + r[j].idx * c->sd;
      char *dst = c->vals + o * c->esize;
      c->idx[o] = r[j].idx;
      switch (c->esize) {  /* a constant size lets memcpy inline */
        case 1: *dst = *src; break;
        case 2: memcpy(dst, src, 2); break;
        case 4: memcpy(dst, src, 4); break;
        default: memcpy(dst, src, 8);
      }
    }
  }
  free(a);
}

/* topk keeps the first k (sort: all); it returns them sorted whatever
** `sorted` says, as PyTorch allows any order when it is false. */
static int sort_op(const char *name, const dl_tensor *t, int dim, int desc,
                   int topk, int64_t k, dl_tensor **values,
                   dl_tensor **indices) {
  if (!values || !indices)
    return dl_err(EM_NULLARG, name, values ? "indices" : "values");
  *values = *indices = NULL;
  int d;
  if (check_tensor_any(name, t) || norm_dim(name, dim, t->ndim, &d))
    return dl_last_error_code();
  int64_t n = t->ndim ? t->shape[d] : 1;
  if (topk && (k < 0 || k > n))
    return dl_err(EM_TOPK_RANGE, name, (long long)k, d, (long long)n,
                  fmt_tshape(t));
  if (!topk || !t->ndim) k = n;  /* PyTorch: a 0-dim topk(0) is the value */
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  if (t->ndim) shape[d] = k;
  int dev = t->storage->device;
  const dl_device *dv = device_get(name, dev);
  dl_tensor *v = dv ? tensor_new_on(dev, t->dtype, shape, t->ndim) : NULL;
  dl_tensor *ix = v ? tensor_new_on(dev, DL_INT64, shape, t->ndim) : NULL;
  if (!ix || dv->sort(name, t, d, desc, k, v, ix)) {
    dl_tensor_release(v);
    dl_tensor_release(ix);
    return dl_last_error_code();
  }
  *values = v;
  *indices = ix;
  return 0;
}

/* The CPU's kernel (core/device.h): the first k of each slice of t along
** dim d into contiguous values v and int64 indices ix. */
DL_HIDDEN int cpu_sort(const char *name, const dl_tensor *t, int d, int desc, int64_t k,
                       dl_tensor *v, dl_tensor *ix) {
  int64_t n = t->ndim ? t->shape[d] : 1;
  sort_ctx c = {.base = tensor_first(t), .dtype = t->dtype,
                .esize = dl_dtype_sizes[t->dtype], .n = n, .k = k, .I = 1,
                .flip = desc ? UINT64_MAX : 0, .vals = tensor_first(v),
                .idx = (int64_t *)tensor_first(ix)};
  c.sd = t->ndim ? t->stride[d] * c.esize : 0;
  for (int i = 0; i < t->ndim; i++) {
    if (i == d) continue;
    c.ks[c.nk] = t->shape[i];
    c.kst[c.nk++] = t->stride[i] * c.esize;
    if (i > d) c.I *= t->shape[i];
  }
  atomic_init(&c.err, 0);
  int64_t slices = n ? dl_tensor_numel(t) / n : 0;
  if (slices && k) parallel_for(slices, PAR_GRAIN / (4 * n) + 1, sort_body, &c);
  if (atomic_load(&c.err))
    return dl_err(EM_NOMEM, name, (long long)(n * 32), (long long)dl_mem_allocated());
  return 0;
}

DL_HIDDEN int fw_sort(const dl_tensor *t, int dim, int descending,
                   dl_tensor **values, dl_tensor **indices) {
  return sort_op("sort", t, dim, descending, 0, 0, values, indices);
}

DL_HIDDEN int fw_topk(const dl_tensor *t, int64_t k, int dim, int largest,
                   int sorted, dl_tensor **values, dl_tensor **indices) {
  (void)sorted;
  return sort_op("topk", t, dim, largest, 1, k, values, indices);
}

/* -- Nonzero, tril, triu ------------------------------------------------- */

DL_HIDDEN dl_tensor *fw_nonzero(const dl_tensor *t) {
  if (check_tensor_any("nonzero", t)) return NULL;
  dl_tensor *b = as_dtype(t, DL_BOOL), *c = b ? fw_contiguous(b) : NULL;
  dl_tensor_release(b);
  if (!c) return NULL;
  const dl_device *d = device_of("nonzero", c);
  dl_tensor *out = d ? d->compact("nonzero", NULL, c) : NULL;
  dl_tensor_release(c);
  return out;
}

/* Zeroes, in a copy, the elements below (triu) or above (tril) the
** diagonal offset of the last two dims; zero bytes are 0 in every dtype. */
static dl_tensor *tri_op(const char *name, const dl_tensor *t, int64_t diag,
                         int upper) {
  if (check_tensor_any(name, t)) return NULL;
  if (t->ndim < 2) return dl_errp(EM_NDIM_MIN, name, 2, fmt_tshape(t));
  dl_tensor *out = fw_clone(t);
  if (!out) return NULL;
  int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
  if (diag > C) diag = C + 1;  /* keeps i + diag from overflowing */
  if (diag < -R) diag = -R - 1;
  const dl_device *d = device_of(name, out);
  if (!d || d->tri(name, out, diag, upper)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

/* The CPU's kernel (core/device.h): in contiguous t, zeroes below (upper)
** or above the diagonal diag of the last two dims; zero bytes are 0 in
** every dtype. */
DL_HIDDEN int cpu_tri(const char *op, dl_tensor *t, int64_t diag, int upper) {
  (void)op;
  int64_t R = t->shape[t->ndim - 2], C = t->shape[t->ndim - 1];
  int64_t B = R && C ? dl_tensor_numel(t) / (R * C) : 0;
  int es = dl_dtype_sizes[t->dtype];
  char *p = tensor_first(t);
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < R; i++, p += C * es) {
      int64_t lo = upper ? 0 : i + diag + 1, hi = upper ? i + diag : C;
      lo = lo < 0 ? 0 : lo > C ? C : lo;
      hi = hi < 0 ? 0 : hi > C ? C : hi;
      if (hi > lo) memset(p + lo * es, 0, (size_t)((hi - lo) * es));
    }
  }
  return 0;
}

DL_HIDDEN dl_tensor *fw_tril(const dl_tensor *t, int64_t diagonal) {
  return tri_op("tril", t, diagonal, 0);
}

DL_HIDDEN dl_tensor *fw_triu(const dl_tensor *t, int64_t diagonal) {
  return tri_op("triu", t, diagonal, 1);
}

/* -- The CPU's compaction (core/device.h) ------------------------------------ */

/* The elements of src where mask is set (both contiguous, same numel), or
** without src the coordinates of the set elements in mask's shape, row by
** row of the last dim, as nonzero gives them. */
DL_HIDDEN dl_tensor *cpu_compact(const char *op, const dl_tensor *src, const dl_tensor *mask) {
  (void)op;
  const uint8_t *p = (const uint8_t *)tensor_first(mask);
  int64_t n = dl_tensor_numel(mask), nnz = 0, idx[DL_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) nnz += p[i] != 0;
  if (src) {
    dl_tensor *out = tensor_new(src->dtype, &nnz, 1);
    if (!out) return NULL;
    size_t es = (size_t)dl_dtype_sizes[src->dtype];
    const char *s = tensor_first(src);
    char *o = tensor_first(out);
    for (int64_t i = 0; i < n; i++)
      if (p[i]) memcpy(o, s + (size_t)i * es, es), o += es;
    return out;
  }
  int nd = mask->ndim;
  int64_t shape[2] = {nnz, nd};
  dl_tensor *out = tensor_new(DL_INT64, shape, 2);
  if (out && nd && nnz) {
    int64_t *o = (int64_t *)tensor_first(out), C = mask->shape[nd - 1];
    for (int64_t r = 0; r < n / C; r++, p += C) {
      for (int64_t i = 0; i < C; i++) {
        if (!p[i]) continue;
        memcpy(o, idx, sizeof(int64_t) * (size_t)(nd - 1));
        o[nd - 1] = i;
        o += nd;
      }
      for (int j = nd - 2; j >= 0 && ++idx[j] == mask->shape[j]; j--) idx[j] = 0;
    }
  }
  return out;
}
