/*
** index.c -- moving elements by index tensors and masks (index_select,
** gather, scatter, masked_fill, masked_select), joining (cat, stack) and
** one_hot.  Every index is checked before any element moves, so a bad one
** never reads or writes out of bounds and an in-place op fails unchanged.
** The checks and shapes are stated once; the element moves are the
** device's kernels (core/device.h), the CPU's defined here.
*/
#include <string.h>

#include "core/device.h"
#include "ops/forward.h"

/* -- Helpers --------------------------------------------------------------- */

/* A header over t's storage with another layout, for iteration and copies
** only: it lives on the caller's stack and is never retained or released. */
static void view_of(dl_tensor *v, const dl_tensor *t, const int64_t *shape,
                    const int64_t *stride, int ndim, int64_t offset) {
  memcpy(v, t, sizeof *v);
  v->ndim = (int8_t)ndim;
  for (int i = 0; i < ndim; i++) v->shape[i] = shape[i], v->stride[i] = stride[i];
  v->offset = offset;
}

/* Shape and strides with a 0-dim tensor seen as [1], as PyTorch's gather
** and scatter do (ensure_nonempty_dim). */
static int ne_dims(const dl_tensor *t, int64_t *shape, int64_t *stride) {
  if (t->ndim == 0) {
    shape[0] = 1, stride[0] = 0;
    return 1;
  }
  memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  memcpy(stride, t->stride, sizeof(int64_t) * (size_t)t->ndim);
  return t->ndim;
}

/* t's strides over the broadcast shape (0 where t is broadcast). */
static void expand_view(dl_tensor *v, const dl_tensor *t, const int64_t *shape,
                        int ndim) {
  int64_t st[DL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int j = i - (ndim - t->ndim);
    st[i] = j >= 0 && t->shape[j] == shape[i] ? t->stride[j] : 0;
  }
  view_of(v, t, shape, st, ndim, t->offset);
}

static int check_index_dtype(const char *op, const dl_tensor *index) {
  if (index->dtype != DL_INT64 && index->dtype != DL_INT32)
    return dl_err(EM_DTYPE_NEED_INT, op, "index", fmt_dtype(index->dtype));
  return 0;
}

static inline int64_t load_index(const char *p, int is64) {
  return is64 ? *(const int64_t *)p : *(const int32_t *)p;
}

typedef struct { int64_t size, bad; int is64, found; } range_ctx;

static void range_loop(char **d, const int64_t *s, int64_t n, void *ctx) {
  range_ctx *c = ctx;
  const char *p = d[0];
  for (int64_t i = 0; i < n && !c->found; i++, p += s[0]) {
    int64_t v = load_index(p, c->is64);
    if (v < 0 || v >= c->size) c->found = 1, c->bad = v;
  }
}

/* Checks every element of index (any layout) lies in [0, size); negative
** indices are errors, as in PyTorch's index_select, gather and scatter. */
static int check_range(const char *op, const dl_tensor *index, int dim,
                       int64_t size) {
  const dl_device *d = device_of(op, index);
  return d ? d->index_check(op, index, dim, size) : -1;
}

/* The CPU's kernels (core/device.h): the range check, and the smallest
** and largest index (one_hot), over index in any layout. */
DL_HIDDEN int cpu_index_check(const char *op, const dl_tensor *index, int dim, int64_t size) {
  range_ctx c = {size, 0, index->dtype == DL_INT64, 0};
  iter_t it;
  dl_tensor *ops[1] = {(dl_tensor *)index};
  if (iter_init(&it, op, ops, 1)) return -1;
  iter_run_serial(&it, range_loop, &c);
  if (c.found)
    return dl_err(EM_INDEX_RANGE, op, (long long)c.bad, dim, (long long)size);
  return 0;
}

/* The device of an op on a, b (and c), -2 with the error set; *ix becomes
** index on that device (a CPU 0-dim index with a CUDA input moves there,
** as op_device lets such a scalar go with any device). */
static int index_device(const char *op, const dl_tensor *a, const dl_tensor *c,
                        const dl_tensor *index, dl_tensor **ix) {
  const dl_tensor *ts[3] = {a, index, c};
  int dev = op_device_opt(op, 3, ts);
  if (dev == -2) return -2;
  if (!(*ix = dl_to_device(index, dev))) return -2;
  return dev;
}

/* -- Element loops --------------------------------------------------------- */

/* step: the source's (take) or destination's (put) stride along dim, bytes. */
typedef struct { int64_t step; int is64; } step_ctx;

/* out = src[index]: data = {out, src with stride 0 along dim, index}. */
#define TAKE_LOOP(NAME, T)                                                   \
  static void NAME(char **d, const int64_t *s, int64_t n, void *ctx) {       \
    const step_ctx *c = ctx;                                                 \
    char *o = d[0];                                                          \
    const char *src = d[1], *ix = d[2];                                      \
    for (int64_t i = 0; i < n; i++, o += s[0], src += s[1], ix += s[2])      \
      *(T *)o = *(const T *)(src + load_index(ix, c->is64) * c->step);       \
  }
TAKE_LOOP(take1, uint8_t)
TAKE_LOOP(take2, uint16_t)
TAKE_LOOP(take4, uint32_t)
TAKE_LOOP(take8, uint64_t)
static const loop_fn take_loops[9] = {0, take1, take2, 0, take4, 0, 0, 0, take8};

/* dst[index] = src (or += src): data = {dst with stride 0 along dim, src,
** index}. */
#define PUT_LOOP(NAME, T, STORE)                                             \
  static void NAME(char **d, const int64_t *s, int64_t n, void *ctx) {       \
    const step_ctx *c = ctx;                                                 \
    char *o = d[0];                                                          \
    const char *src = d[1], *ix = d[2];                                      \
    for (int64_t i = 0; i < n; i++, o += s[0], src += s[1], ix += s[2]) {    \
      T *p = (T *)(o + load_index(ix, c->is64) * c->step);                   \
      T x = *(const T *)src;                                                 \
      STORE;                                                                 \
    }                                                                        \
  }
PUT_LOOP(put1, uint8_t, *p = x)
PUT_LOOP(put2, uint16_t, *p = x)
PUT_LOOP(put4, uint32_t, *p = x)
PUT_LOOP(put8, uint64_t, *p = x)
PUT_LOOP(add_f32, float, *p += x)
PUT_LOOP(add_f64, double, *p += x)
PUT_LOOP(add_i32, int32_t, *p = (int32_t)((uint32_t)*p + (uint32_t)x))
PUT_LOOP(add_i64, int64_t, *p = (int64_t)((uint64_t)*p + (uint64_t)x))
PUT_LOOP(add_u8, uint8_t, *p = (uint8_t)(*p + x))
PUT_LOOP(add_b, uint8_t, *p = (*p | x) != 0)
PUT_LOOP(add_bf16, uint16_t, *p = float_to_bf16(bf16_to_float(*p) + bf16_to_float(x)))
PUT_LOOP(add_f16, uint16_t, *p = float_to_half(half_to_float(*p) + half_to_float(x)))
static const loop_fn put_loops[9] = {0, put1, put2, 0, put4, 0, 0, 0, put8};
static const loop_fn add_loops[DL_NDTYPES] = {
    [DL_FLOAT32] = add_f32, [DL_FLOAT64] = add_f64, [DL_INT32] = add_i32,
    [DL_INT64] = add_i64,   [DL_UINT8] = add_u8,    [DL_BOOL] = add_b,
    [DL_BFLOAT16] = add_bf16, [DL_FLOAT16] = add_f16};

/* -- index_select ---------------------------------------------------------- */

typedef struct {
  const char *src, *idx;
  char *dst;
  int64_t istride, nidx, size, row;  /* istride and row in bytes */
  int is64;
} rows_ctx;

/* Output rows [r0, r1) of a contiguous source: whole slices by memcpy. */
static void copy_rows(void *ctx, int64_t r0, int64_t r1) {
  const rows_ctx *c = ctx;
  for (int64_t r = r0; r < r1; r++) {
    int64_t o = r / c->nidx, j = r % c->nidx;
    int64_t v = load_index(c->idx + j * c->istride, c->is64);
    memcpy(c->dst + r * c->row, c->src + (o * c->size + v) * c->row, (size_t)c->row);
  }
}

/* Runs the take loop over (destination, source, index) views; out is
** returned, or released on failure. */
static dl_tensor *run_take(const char *op, dl_tensor *out, dl_tensor *dst,
                           dl_tensor *src, dl_tensor *idx, int64_t step_bytes,
                           int es) {
  dl_tensor *ops[3] = {dst, src, idx};
  const dl_device *d = device_of(op, out);
  if (!d || d->take(op, ops, step_bytes, es)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

/* The CPU's take kernel (core/device.h): ops = {out, src with stride 0
** along the dim, index}. */
DL_HIDDEN int cpu_take(const char *op, dl_tensor *const *ops, int64_t step, int es) {
  step_ctx c = {step, ops[2]->dtype == DL_INT64};
  iter_t it;
  if (iter_init(&it, op, ops, 3)) return -1;
  iter_run(&it, take_loops[es], &c);
  return 0;
}

/* The CPU's put kernel: ops = {dst with stride 0 along the dim, src,
** index}, serial, since duplicate indices would race. */
DL_HIDDEN int cpu_put(const char *op, dl_tensor *const *ops, int64_t step, dl_dtype dtype, dl_scatter_reduce reduce) {
  step_ctx c = {step, ops[2]->dtype == DL_INT64};
  iter_t it;
  if (iter_init(&it, op, ops, 3)) return -1;
  iter_run_serial(&it, reduce ? add_loops[dtype] : put_loops[dl_dtype_sizes[dtype]], &c);
  return 0;
}

static dl_tensor *index_select_on(int dev, const dl_tensor *t, int dim,
                                  const dl_tensor *index) {
  const char *op = "index_select";
  int d;
  if (check_index_dtype(op, index) || norm_dim(op, dim, t->ndim, &d))
    return NULL;
  if (index->ndim > 1) return dl_errp(EM_IDX_VECTOR, op, fmt_tshape(index));
  int64_t nidx = dl_tensor_numel(index);
  if (t->ndim == 0) {  /* PyTorch: one index, 0, and a 0-dim result */
    if (nidx != 1) return dl_errp(EM_IDX_SCALAR, op, (long long)nidx);
    return check_range(op, index, 0, 1) ? NULL : fw_clone(t);
  }
  if (check_range(op, index, d, t->shape[d])) return NULL;
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[d] = nidx;
  dl_tensor *out = tensor_new_on(dev, t->dtype, shape, t->ndim);
  if (!out || !dl_tensor_numel(out)) return out;
  int es = dl_dtype_sizes[t->dtype], ies = dl_dtype_sizes[index->dtype];
  int64_t inner = 1;
  for (int i = d + 1; i < t->ndim; i++) inner *= t->shape[i];
  const dl_device *dv = device_get(op, dev);
  if (!dv) {
    dl_tensor_release(out);
    return NULL;
  }
  if (dv->host_memory && dl_tensor_is_contiguous(t) && inner * es >= 16) {
    /* the DataLoader's batch gather: whole rows, memcpy'd in host memory */
    rows_ctx c = {tensor_first(t), tensor_first(index), tensor_first(out),
                  index->ndim ? index->stride[0] * ies : 0, nidx, t->shape[d],
                  inner * es, index->dtype == DL_INT64};
    int64_t rows = dl_tensor_numel(out) / inner;
    parallel_for(rows, 1 + (PAR_GRAIN * 4) / c.row, copy_rows, &c);
    return out;
  }
  int64_t sst[DL_MAX_DIMS], ist[DL_MAX_DIMS] = {0};
  memcpy(sst, t->stride, sizeof sst);
  sst[d] = 0;
  ist[d] = index->ndim ? index->stride[0] : 0;
  dl_tensor sv, iv;
  view_of(&sv, t, shape, sst, t->ndim, t->offset);
  view_of(&iv, index, shape, ist, t->ndim, index->offset);
  return run_take(op, out, out, &sv, &iv, t->stride[d] * es, es);
}

DL_HIDDEN dl_tensor *fw_index_select(const dl_tensor *t, int dim,
                                  const dl_tensor *index) {
  dl_tensor *ix;
  if (check_tensor_any("index_select", t) || check_tensor_any("index_select", index)) return NULL;
  int dev = index_device("index_select", t, NULL, index, &ix);
  if (dev == -2) return NULL;
  dl_tensor *out = index_select_on(dev, t, dim, ix);
  dl_tensor_release(ix);
  return out;
}

/* -- gather and scatter ---------------------------------------------------- */

/* index.size(d) <= t.size(d) for every d (but skip, unless skip < 0). */
static int check_fits(const char *op, const dl_tensor *index, const char *what,
                      const dl_tensor *t, int skip) {
  int64_t is[DL_MAX_DIMS], ts[DL_MAX_DIMS], st[DL_MAX_DIMS];
  int n = ne_dims(index, is, st);
  ne_dims(t, ts, st);
  for (int i = 0; i < n; i++)
    if (i != skip && is[i] > ts[i])
      return dl_err(EM_IDX_SHAPE, op, fmt_tshape(index), what, fmt_tshape(t), i,
                    (long long)is[i], (long long)ts[i]);
  return 0;
}

static int check_ndims(const char *op, const dl_tensor *index, const char *what,
                       const dl_tensor *t) {
  int ni = index->ndim ? index->ndim : 1, nt = t->ndim ? t->ndim : 1;
  if (ni != nt)
    return dl_err(EM_IDX_NDIM, op, fmt_tshape(index), what, fmt_tshape(t));
  return 0;
}

static dl_tensor *gather_on(int dev, const dl_tensor *t, int dim, const dl_tensor *index) {
  const char *op = "gather";
  int d;
  if (check_index_dtype(op, index) || norm_dim(op, dim, t->ndim, &d) ||
      check_ndims(op, index, "input", t))
    return NULL;
  int64_t ts[DL_MAX_DIMS], tst[DL_MAX_DIMS], is[DL_MAX_DIMS], ist[DL_MAX_DIMS];
  ne_dims(t, ts, tst);
  int n = ne_dims(index, is, ist);
  /* as PyTorch, an empty index skips the size checks */
  if (dl_tensor_numel(index) &&
      (check_fits(op, index, "input", t, d) || check_range(op, index, d, ts[d])))
    return NULL;
  dl_tensor *out = tensor_new_on(dev, t->dtype, index->shape, index->ndim);
  if (!out || !dl_tensor_numel(out)) return out;
  int64_t ost[DL_MAX_DIMS];
  contiguous_strides(is, n, ost);
  int64_t step = tst[d];
  tst[d] = 0;
  dl_tensor ov, sv, iv;
  view_of(&ov, out, is, ost, n, 0);
  view_of(&sv, t, is, tst, n, t->offset);
  view_of(&iv, index, is, ist, n, index->offset);
  int es = dl_dtype_sizes[t->dtype];
  return run_take(op, out, &ov, &sv, &iv, step * es, es);
}

DL_HIDDEN dl_tensor *fw_gather(const dl_tensor *t, int dim, const dl_tensor *index) {
  dl_tensor *ix;
  if (check_tensor_any("gather", t) || check_tensor_any("gather", index)) return NULL;
  int dev = index_device("gather", t, NULL, index, &ix);
  if (dev == -2) return NULL;
  dl_tensor *out = gather_on(dev, t, dim, ix);
  dl_tensor_release(ix);
  return out;
}

/* A Lua number as src (a wrapped 0-dim tensor) scatters that value, as
** torch's scatter(dim, index, value); a tensor src must match t's dtype and
** cover index. */
static int scatter_on(const char *op, dl_tensor *t, int dim,
                      const dl_tensor *index, const dl_tensor *src,
                      int reduce) {
  int d;
  if (check_index_dtype(op, index) || norm_dim(op, dim, t->ndim, &d) ||
      check_ndims(op, index, "self", t))
    return dl_last_error_code();
  if (reduce != 0 && reduce != 1)
    return dl_err(EM_BADVALUE, op, "reduce must be 0 (replace) or 1 (add)");
  int value = dl_tensor_is_wrapped_number(src);
  if (!value) {
    if (src->dtype != t->dtype)
      return dl_err(EM_DTYPE_MISMATCH, op, fmt_dtype(t->dtype), fmt_dtype(src->dtype));
    if (check_ndims(op, index, "src", src) || check_fits(op, index, "src", src, -1))
      return dl_last_error_code();
  }
  int64_t ts[DL_MAX_DIMS], tst[DL_MAX_DIMS], is[DL_MAX_DIMS], ist[DL_MAX_DIMS];
  int64_t ss[DL_MAX_DIMS], sst[DL_MAX_DIMS];
  ne_dims(t, ts, tst);
  int n = ne_dims(index, is, ist);
  if (check_fits(op, index, "self", t, d) || check_range(op, index, d, ts[d]))
    return dl_last_error_code();
  if (!dl_tensor_numel(index)) return 0;
  /* src or index sharing t's memory would change under the writes */
  dl_tensor *cs = value ? as_dtype(src, t->dtype)
                        : src->storage == t->storage ? fw_clone(src) : NULL;
  dl_tensor *ci = index->storage == t->storage ? fw_clone(index) : NULL;
  if ((value || src->storage == t->storage) && !cs) return dl_last_error_code();
  if (index->storage == t->storage && !ci) {
    dl_tensor_release(cs);
    return dl_last_error_code();
  }
  if (cs) src = cs;
  if (ci) index = ci;
  if (value) {
    memset(sst, 0, sizeof sst);
  } else {
    ne_dims(src, ss, sst);
  }
  int64_t step = tst[d];
  tst[d] = 0;
  dl_tensor tv, sv, iv;
  view_of(&tv, t, is, tst, n, t->offset);
  view_of(&sv, src, is, sst, n, src->offset);
  view_of(&iv, index, is, ist, n, index->offset);
  dl_tensor *ops[3] = {&tv, &sv, &iv};  /* a value src stays a CPU scalar the loop carries */
  int es = dl_dtype_sizes[t->dtype];
  const dl_device *dv = device_of(op, t);
  int rc = dv ? dv->put(op, ops, step * es, t->dtype, reduce) : -1;
  dl_tensor_release(cs);
  dl_tensor_release(ci);
  return rc;
}

static int scatter_impl(const char *op, dl_tensor *t, int dim,
                        const dl_tensor *index, const dl_tensor *src,
                        int reduce) {
  dl_tensor *ix;
  if (check_tensor_any(op, t) || check_tensor_any(op, index) || check_tensor_any(op, src))
    return dl_last_error_code();
  if (index_device(op, t, src, index, &ix) == -2) return dl_last_error_code();
  int rc = scatter_on(op, t, dim, ix, src, reduce);
  dl_tensor_release(ix);
  return rc;
}

DL_HIDDEN int fw_scatter_(dl_tensor *t, int dim, const dl_tensor *index,
                       const dl_tensor *src, int reduce) {
  return scatter_impl(reduce == 1 ? "scatter_add_" : "scatter_", t, dim, index, src, reduce);
}

DL_HIDDEN dl_tensor *fw_scatter(const dl_tensor *t, int dim,
                             const dl_tensor *index, const dl_tensor *src,
                             int reduce) {
  if (check_tensor_any("scatter", t)) return NULL;
  dl_tensor *r = fw_clone(t);
  if (r && scatter_impl("scatter", r, dim, index, src, reduce)) {
    dl_tensor_release(r);
    return NULL;
  }
  return r;
}

/* -- Masks ----------------------------------------------------------------- */

#define MASK_FILL(NAME, T)                                                   \
  static void NAME(char **d, const int64_t *s, int64_t n, void *ctx) {       \
    T v = *(const T *)ctx;                                                   \
    char *o = d[0];                                                          \
    const char *m = d[1];                                                    \
    for (int64_t i = 0; i < n; i++, o += s[0], m += s[1])                    \
      if (*m) *(T *)o = v;                                                   \
  }
MASK_FILL(mfill1, uint8_t)
MASK_FILL(mfill2, uint16_t)
MASK_FILL(mfill4, uint32_t)
MASK_FILL(mfill8, uint64_t)
static const loop_fn mfill_loops[9] = {0, mfill1, mfill2, 0, mfill4, 0, 0, 0, mfill8};

static int check_mask(const char *op, const dl_tensor *mask) {
  if (mask->dtype != DL_BOOL)
    return dl_err(EM_DTYPE_NEED_BOOL, op, "mask", fmt_dtype(mask->dtype));
  return 0;
}

static int masked_fill_impl(const char *op, dl_tensor *t, const dl_tensor *mask,
                            double value) {
  const dl_tensor *ts[2] = {t, mask};
  if (check_tensor_any(op, t) || check_tensor_any(op, mask) || check_mask(op, mask) ||
      op_device(op, 2, ts) == -2)
    return dl_last_error_code();
  dl_tensor *cm = NULL;
  if (mask->storage == t->storage) {  /* filling t would change the mask */
    if (!(cm = fw_clone(mask))) return dl_last_error_code();
    mask = cm;
  }
  uint64_t bytes = 0;
  store_double((char *)&bytes, t->dtype, value);
  dl_tensor *ops[2] = {t, (dl_tensor *)mask};  /* a CPU 0-dim mask rides along as a scalar */
  const dl_device *d = device_of(op, t);
  int rc = d ? d->masked_fill(op, ops, bytes) : -1;
  dl_tensor_release(cm);
  return rc;
}

/* The CPU's kernel (core/device.h): ops = {t, mask}. */
DL_HIDDEN int cpu_masked_fill(const char *op, dl_tensor *const *ops, uint64_t bytes) {
  iter_t it;
  if (iter_init(&it, op, ops, 2)) return -1;
  iter_run(&it, mfill_loops[dl_dtype_sizes[ops[0]->dtype]], &bytes);
  return 0;
}

DL_HIDDEN int fw_masked_fill_(dl_tensor *t, const dl_tensor *mask, double value) {
  return masked_fill_impl("masked_fill_", t, mask, value);
}

/* The checks of an out-of-place mask op: t and a bool mask on one device,
** their broadcast shape (nd dims) and the device; -1 with the error set. */
static int mask_setup(const char *op, const dl_tensor *t, const dl_tensor *mask,
                      int64_t *shape, int *nd, int *dev) {
  const dl_tensor *ts[2] = {t, mask};
  if (check_tensor_any(op, t) || check_tensor_any(op, mask) || check_mask(op, mask) ||
      (*dev = op_device(op, 2, ts)) == -2 ||
      broadcast_shape(op, t->shape, t->ndim, mask->shape, mask->ndim, shape, nd))
    return -1;
  return 0;
}

/* Out of place, the result takes the broadcast shape of t and mask. */
DL_HIDDEN dl_tensor *fw_masked_fill(const dl_tensor *t, const dl_tensor *mask,
                                 double value) {
  const char *op = "masked_fill";
  int64_t shape[DL_MAX_DIMS];
  int nd, dev;
  if (mask_setup(op, t, mask, shape, &nd, &dev)) return NULL;
  dl_tensor *r = tensor_new_on(dev, t->dtype, shape, nd);
  if (r && (fw_copy_(r, t) || masked_fill_impl(op, r, mask, value))) {
    dl_tensor_release(r);
    return NULL;
  }
  return r;
}

/* t itself (retained) when it is contiguous on dev in v's shape, else v
** (t seen in the broadcast shape) copied into a new tensor there. */
static dl_tensor *dense_on(int dev, const dl_tensor *t, const dl_tensor *v) {
  if (t->storage->device == dev && t->ndim == v->ndim && dl_tensor_is_contiguous(t) &&
      !memcmp(t->shape, v->shape, sizeof(int64_t) * (size_t)t->ndim)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  dl_tensor *c = tensor_new_on(dev, t->dtype, v->shape, v->ndim);
  if (c && fw_copy_(c, v)) {
    dl_tensor_release(c);
    return NULL;
  }
  return c;
}

DL_HIDDEN dl_tensor *fw_masked_select(const dl_tensor *t, const dl_tensor *mask) {
  const char *op = "masked_select";
  int64_t shape[DL_MAX_DIMS];
  int nd, dev;
  if (mask_setup(op, t, mask, shape, &nd, &dev)) return NULL;
  dl_tensor tv, mv;
  expand_view(&tv, t, shape, nd);
  expand_view(&mv, mask, shape, nd);
  /* both contiguous in the broadcast shape, then compacted */
  const dl_device *d = device_get(op, dev);
  dl_tensor *ct = d ? dense_on(dev, t, &tv) : NULL, *cm = ct ? dense_on(dev, mask, &mv) : NULL;
  dl_tensor *out = cm ? d->compact(op, ct, cm) : NULL;
  dl_tensor_release(ct);
  dl_tensor_release(cm);
  return out;
}

/* -- Joining --------------------------------------------------------------- */

/* The list's device (-1: the CPU), or -2 with the error set. */
static int check_list(const char *op, dl_tensor *const *ts, int n) {
  if (!ts || n < 1) {
    dl_err(EM_BADVALUE, op, "expected a non-empty list of tensors");
    return -2;
  }
  for (int i = 0; i < n; i++)
    if (check_tensor_any(op, ts[i])) return -2;
  return op_device(op, n, (const dl_tensor *const *)ts);
}

static int list_dtype(dl_tensor *const *ts, int n) {
  int dt = ts[0]->dtype;
  for (int i = 1; i < n; i++) dt = dl_promote_types(dt, ts[i]->dtype);
  return dt;
}

/* PyTorch still skips 1-D tensors of size 0 whatever the other shapes. */
static int legacy_empty(const dl_tensor *t) {
  return t->ndim == 1 && t->shape[0] == 0;
}

DL_HIDDEN dl_tensor *fw_cat(dl_tensor *const *ts, int n, int dim) {
  const char *op = "cat";
  int dev = check_list(op, ts, n);
  if (dev == -2) return NULL;
  int r = -1, d;
  for (int i = 0; i < n; i++) {
    if (ts[i]->ndim == 0) return dl_errp(EM_CAT_ZERO_DIM, op, i);
    if (r < 0 && !legacy_empty(ts[i])) r = i;
  }
  int dt = list_dtype(ts, n);
  int64_t zero = 0;
  if (r < 0) return tensor_new_on(dev, dt, &zero, 1);
  const dl_tensor *ref = ts[r];
  if (norm_dim(op, dim, ref->ndim, &d)) return NULL;
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, ref->shape, sizeof shape);
  shape[d] = 0;
  for (int i = 0; i < n; i++) {
    const dl_tensor *t = ts[i];
    if (legacy_empty(t)) continue;
    if (t->ndim != ref->ndim)
      return dl_errp(EM_CAT_NDIM, op, i, t->ndim, fmt_tshape(t), r, ref->ndim,
                     fmt_tshape(ref));
    for (int j = 0; j < t->ndim; j++)
      if (j != d && t->shape[j] != ref->shape[j])
        return dl_errp(EM_CAT_SHAPE, op, fmt_tshape(ref), r, fmt_tshape(t), i, d,
                       j, (long long)ref->shape[j], (long long)t->shape[j]);
    shape[d] += t->shape[d];
  }
  dl_tensor *out = tensor_new_on(dev, dt, shape, ref->ndim);
  if (!out) return NULL;
  int64_t at = 0;
  for (int i = 0; i < n; i++) {
    const dl_tensor *t = ts[i];
    if (legacy_empty(t) || !t->shape[d]) continue;
    dl_tensor part;
    view_of(&part, out, t->shape, out->stride, t->ndim, at * out->stride[d]);
    if (fw_copy_(&part, t)) {
      dl_tensor_release(out);
      return NULL;
    }
    at += t->shape[d];
  }
  return out;
}

DL_HIDDEN dl_tensor *fw_stack(dl_tensor *const *ts, int n, int dim) {
  const char *op = "stack";
  int d, dev = check_list(op, ts, n);
  if (dev == -2) return NULL;
  const dl_tensor *t0 = ts[0];
  for (int i = 1; i < n; i++) {
    const dl_tensor *t = ts[i];
    if (t->ndim != t0->ndim ||
        memcmp(t->shape, t0->shape, sizeof(int64_t) * (size_t)t0->ndim))
      return dl_errp(EM_STACK_SHAPE, op, fmt_tshape(t0), fmt_tshape(t), i);
  }
  if (norm_dim_incl(op, dim, t0->ndim, &d)) return NULL;
  if (t0->ndim >= DL_MAX_DIMS) return dl_errp(EM_NDIM_MAX, op, t0->ndim + 1);
  int64_t shape[DL_MAX_DIMS];
  for (int i = 0, j = 0; i <= t0->ndim; i++) shape[i] = i == d ? n : t0->shape[j++];
  dl_tensor *out = tensor_new_on(dev, list_dtype(ts, n), shape, t0->ndim + 1);
  if (!out) return NULL;
  int64_t st[DL_MAX_DIMS];
  for (int i = 0, j = 0; i <= t0->ndim; i++)
    if (i != d) st[j++] = out->stride[i];
  for (int i = 0; i < n; i++) {
    dl_tensor part;
    view_of(&part, out, t0->shape, st, t0->ndim, i * out->stride[d]);
    if (fw_copy_(&part, ts[i])) {
      dl_tensor_release(out);
      return NULL;
    }
  }
  return out;
}

/* -- one_hot --------------------------------------------------------------- */

/* The range from the index's min and max, then a 1 put along the new last
** dim of zeros (scatter's put with a scalar source), on t's device. */
static dl_tensor *one_hot_on(const char *op, const dl_tensor *t, int64_t num_classes) {
  const dl_device *d = device_of(op, t);
  int64_t n = dl_tensor_numel(t), lo = 0, hi = 0;
  if (!d || (n && d->index_minmax(op, t, &lo, &hi))) return NULL;
  if (num_classes == -1) num_classes = hi + 1;
  if (n && (lo < 0 || hi >= num_classes))
    return dl_errp(EM_ONE_HOT_RANGE, op, (long long)(lo < 0 ? lo : hi), (long long)num_classes);
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof shape);
  shape[t->ndim] = num_classes;
  dl_tensor *out = full_on(t->storage->device, shape, t->ndim + 1, DL_INT64, 0);
  if (!out || !n || !num_classes) return out;
  dl_tensor *one = dl_scalar(1, 0);
  dl_tensor dv;
  view_of(&dv, out, t->shape, out->stride, t->ndim, 0);
  dl_tensor *ops[3] = {&dv, one, (dl_tensor *)t};
  if (!one || d->put(op, ops, 8, DL_INT64, 0)) {
    dl_tensor_release(out);
    out = NULL;
  }
  dl_tensor_release(one);
  return out;
}

DL_HIDDEN dl_tensor *fw_one_hot(const dl_tensor *t, int64_t num_classes) {
  const char *op = "one_hot";
  if (check_tensor_any(op, t) || check_index_dtype(op, t)) return NULL;
  if (num_classes < -1)
    return dl_errp(EM_BADVALUE, op, "num_classes must be -1 (infer) or at least 0");
  if (t->ndim >= DL_MAX_DIMS) return dl_errp(EM_NDIM_MAX, op, t->ndim + 1);
  int64_t n = dl_tensor_numel(t);
  if (!n && num_classes == -1)
    return dl_errp(EM_BADVALUE, op, "cannot infer num_classes from an empty tensor");
  return one_hot_on(op, t, num_classes);
}

/* -- The CPU's index min and max (core/device.h) ---------------------------- */

typedef struct { int64_t lo, hi; int is64, any; } minmax_ctx;

static void minmax_loop(char **d, const int64_t *s, int64_t n, void *ctx) {
  minmax_ctx *c = ctx;
  const char *p = d[0];
  for (int64_t i = 0; i < n; i++, p += s[0]) {
    int64_t v = load_index(p, c->is64);
    if (!c->any || v < c->lo) c->lo = v;
    if (!c->any || v > c->hi) c->hi = v;
    c->any = 1;
  }
}

DL_HIDDEN int cpu_index_minmax(const char *op, const dl_tensor *index, int64_t *lo, int64_t *hi) {
  minmax_ctx c = {0, 0, index->dtype == DL_INT64, 0};
  iter_t it;
  dl_tensor *ops[1] = {(dl_tensor *)index};
  if (iter_init(&it, op, ops, 1)) return -1;
  iter_run_serial(&it, minmax_loop, &c);
  *lo = c.lo;
  *hi = c.hi;
  return 0;
}
