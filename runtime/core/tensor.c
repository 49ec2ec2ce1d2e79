/*
** tensor.c -- storage and tensor lifetime, metadata, creation and element
** access.  Views live in view.c, random creation in random.c.
*/
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"

/* -- Storage -------------------------------------------------------------- */

static dl_storage *storage_new(size_t nbytes) {
  dl_storage *s = malloc(sizeof *s);
  void *data = s ? mem_alloc(nbytes) : NULL;
  if (!data) {
    free(s);
    return dl_errp(EM_NOMEM, "alloc", (long long)nbytes,
                   (long long)dl_mem_allocated());
  }
  atomic_init(&s->refcount, 1);
  atomic_init(&s->version, 0);
  s->device = -1;
  s->data = data;
  s->nbytes = nbytes;
  s->owned = 1;
  s->deleter = NULL;
  s->ctx = NULL;
  return s;
}

static void storage_release(dl_storage *s) {
  if (atomic_fetch_sub(&s->refcount, 1) != 1) return;
  if (s->owned)
    mem_free(s->data, s->nbytes);
  else if (s->deleter)
    s->deleter(s->ctx, s->data);
  free(s);
}

/* -- Tensors -------------------------------------------------------------- */

DL_HIDDEN int64_t shape_numel(const int64_t *shape, int ndim) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

DL_HIDDEN void contiguous_strides(const int64_t *shape, int ndim,
                                  int64_t *stride) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    stride[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1;
  }
}

DL_HIDDEN int check_shape(const char *op, const int64_t *shape, int ndim) {
  if (ndim < 0 || ndim > DL_MAX_DIMS) return dl_err(EM_NDIM_MAX, op, ndim);
  if (ndim > 0 && !shape) return dl_err(EM_NULLARG, op, "shape");
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return dl_err(EM_NEG_SIZE, op, (long long)shape[i],
                    fmt_shape(shape, ndim));
    if (shape[i] && n > (INT64_C(1) << 48) / shape[i])
      return dl_err(EM_TOO_BIG, op, fmt_shape(shape, ndim));
    n *= shape[i];
  }
  return 0;
}

static dl_tensor *header_new(int dtype, const int64_t *shape, int ndim) {
  dl_tensor *t = calloc(1, sizeof *t);
  if (!t) return dl_errp(EM_NOMEM, "alloc", (long long)sizeof *t, 0LL);
  atomic_init(&t->refcount, 1);
  t->dtype = (int8_t)dtype;
  t->ndim = (int8_t)ndim;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  return t;
}

DL_HIDDEN dl_tensor *tensor_new(int dtype, const int64_t *shape, int ndim) {
  if (dtype < 0 || dtype >= DL_NDTYPES)
    return dl_errp(EM_BADDTYPE, "alloc", dtype);
  if (check_shape("alloc", shape, ndim)) return NULL;
  dl_tensor *t = header_new(dtype, shape, ndim);
  if (!t) return NULL;
  contiguous_strides(shape, ndim, t->stride);
  int64_t n = shape_numel(shape, ndim);
  t->storage = storage_new((size_t)n * (size_t)dl_dtype_sizes[dtype]);
  if (!t->storage) {
    free(t);
    return NULL;
  }
  return t;
}

DL_HIDDEN dl_tensor *tensor_alias(const dl_tensor *src, const int64_t *shape,
                                  const int64_t *stride, int ndim,
                                  int64_t offset) {
  dl_tensor *t = header_new(src->dtype, shape, ndim);
  if (!t) return NULL;
  for (int i = 0; i < ndim; i++) t->stride[i] = stride[i];
  t->offset = offset;
  t->storage = src->storage;
  atomic_fetch_add(&t->storage->refcount, 1);
  return t;
}

DL_API void dl_tensor_retain(dl_tensor *t) {
  if (t) atomic_fetch_add(&t->refcount, 1);
}


static void (*_Atomic autograd_free_fn)(dl_tensor *t);

DL_HIDDEN void tensor_set_autograd_free(void (*fn)(dl_tensor *t)) {
  atomic_store(&autograd_free_fn, fn);
}

DL_HIDDEN void tensor_bump_version(dl_tensor *t) {
  atomic_fetch_add(&t->storage->version, 1);
}

DL_API void dl_tensor_release(dl_tensor *t) {
  if (!t || atomic_fetch_sub(&t->refcount, 1) != 1) return;
  if (t->autograd) atomic_load(&autograd_free_fn)(t);
  storage_release(t->storage);
  free(t);
}

static char empty_bytes[64] __attribute__((aligned(64)));
static dl_storage empty_storage = {.refcount = 1 << 30, .device = -1,
                                   .data = empty_bytes};

DL_API void dl_tensor_free_data(dl_tensor *t) {
  if (!t || (t->flags & TF_FREED) || atomic_load(&t->refcount) != 1) return;
  dl_storage *s = t->storage;
  atomic_fetch_add(&empty_storage.refcount, 1);
  t->storage = &empty_storage;
  t->flags |= TF_FREED;
  t->ndim = 1;
  t->shape[0] = 0;
  t->stride[0] = 1;
  t->offset = 0;
  storage_release(s);
}

DL_API int dl_tensor_is_freed(const dl_tensor *t) {
  return t && (t->flags & TF_FREED) != 0;
}

DL_API int dl_tensor_refcount(const dl_tensor *t) {
  return t ? atomic_load(&t->refcount) : 0;
}
DL_API int dl_tensor_storage_refcount(const dl_tensor *t) {
  return t ? atomic_load(&t->storage->refcount) : 0;
}
DL_API int dl_tensor_dim(const dl_tensor *t) { return t->ndim; }
DL_API int64_t dl_tensor_size(const dl_tensor *t, int dim) {
  return dim >= 0 && dim < t->ndim ? t->shape[dim] : -1;
}
DL_API int64_t dl_tensor_stride(const dl_tensor *t, int dim) {
  return dim >= 0 && dim < t->ndim ? t->stride[dim] : 0;
}
DL_API int64_t dl_tensor_numel(const dl_tensor *t) {
  return shape_numel(t->shape, t->ndim);
}
DL_API int64_t dl_tensor_offset(const dl_tensor *t) { return t->offset; }
DL_API dl_dtype dl_tensor_dtype(const dl_tensor *t) { return t->dtype; }
DL_API int dl_tensor_device(const dl_tensor *t) { return t->storage->device; }
DL_API void *dl_tensor_data(const dl_tensor *t) { return tensor_first(t); }
DL_API int dl_tensor_same_storage(const dl_tensor *a, const dl_tensor *b) {
  return a && b && a->storage == b->storage;
}
DL_API int dl_tensor_rebase(dl_tensor *t, const dl_tensor *dst) {
  const char *op = "rebase";
  if (!t) return dl_err(EM_NULLARG, op, "t");
  if (!dst) return dl_err(EM_NULLARG, op, "dst");
  if (t->flags & TF_FREED || dst->flags & TF_FREED) return dl_err(EM_BADVALUE, op, "tensor was freed");
  if (t->dtype != dst->dtype)
    return dl_err(EM_DTYPE_MISMATCH, op, dl_dtype_name(t->dtype), dl_dtype_name(dst->dtype));
  if (t->storage->device != dst->storage->device)
    return dl_err(EM_BADVALUE, op, "the tensor and its new place are on different devices");
  if (dl_tensor_numel(t) != dl_tensor_numel(dst))
    return dl_err(EM_BADVALUE, op, "the new place holds another number of elements");
  if (!dl_tensor_is_contiguous(t) || !dl_tensor_is_contiguous(dst))
    return dl_err(EM_BADVALUE, op, "both must be contiguous");
  if (t->storage == dst->storage) return t->offset == dst->offset ? 0 : dl_err(EM_BADVALUE, op, "the new place overlaps the tensor's memory");
  /* another header on t's memory (a view) would keep the old data */
  if (atomic_load(&t->storage->refcount) != 1)
    return dl_err(EM_BADVALUE, op, "another tensor (a view) shares its memory, which would keep the old values");
  dl_tensor *to = tensor_alias(dst, t->shape, t->stride, t->ndim, dst->offset);
  if (!to) return -1;
  int rc = fw_copy_(to, t);
  dl_tensor_release(to);
  if (rc) return rc;
  dl_storage *old = t->storage;
  atomic_fetch_add(&dst->storage->refcount, 1);
  t->storage = dst->storage;
  t->offset = dst->offset;
  storage_release(old);
  return 0;
}

DL_API int dl_tensor_is_wrapped_number(const dl_tensor *t) {
  return (t->flags & TF_WRAPPED) != 0;
}

DL_API int dl_tensor_is_contiguous(const dl_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] == 1) continue;
    if (t->stride[i] != s) return 0;
    s *= t->shape[i];
  }
  return 1;
}

/* -- Creation ------------------------------------------------------------- */

/* Checks made under the op's own name, so messages do not say "alloc". */
static int check_new(const char *op, const int64_t *shape, int ndim,
                     int dtype) {
  if (dtype < 0 || dtype >= DL_NDTYPES) return dl_err(EM_BADDTYPE, op, dtype);
  return check_shape(op, shape, ndim);
}

/* The creation functions take a device (-1: the CPU) and make the tensor
** there: filled by a kernel, never through host memory. */
DL_API dl_tensor *dl_empty_on(const int64_t *shape, int ndim, dl_dtype dtype, int device) {
  if (check_new("empty", shape, ndim, dtype)) return NULL;
  return tensor_new_on(device, dtype, shape, ndim);
}

DL_API dl_tensor *dl_zeros_on(const int64_t *shape, int ndim, dl_dtype dtype, int device) {
  if (check_new("zeros", shape, ndim, dtype)) return NULL;
  return full_on(device, shape, ndim, dtype, 0);
}

DL_API dl_tensor *dl_full_on(const int64_t *shape, int ndim, dl_dtype dtype, double value,
                             int device) {
  if (check_new("full", shape, ndim, dtype)) return NULL;
  return full_on(device, shape, ndim, dtype, value);
}

DL_API dl_tensor *dl_empty(const int64_t *shape, int ndim, dl_dtype dtype) {
  return dl_empty_on(shape, ndim, dtype, -1);
}

DL_API dl_tensor *dl_zeros(const int64_t *shape, int ndim, dl_dtype dtype) {
  return dl_zeros_on(shape, ndim, dtype, -1);
}

DL_API dl_tensor *dl_full(const int64_t *shape, int ndim, dl_dtype dtype,
                          double value) {
  return dl_full_on(shape, ndim, dtype, value, -1);
}

DL_API dl_tensor *dl_scalar(double value, int is_float) {
  dl_tensor *t = tensor_new(is_float ? DL_FLOAT64 : DL_INT64, NULL, 0);
  if (!t) return NULL;
  /* store_double saturates integers beyond int64 instead of overflowing */
  store_double(t->storage->data, is_float ? DL_FLOAT64 : DL_INT64, value);
  t->flags |= TF_WRAPPED;
  return t;
}

/* t filled by its device's ramp kernel; released on failure. */
static dl_tensor *ramp_on(const char *op, dl_tensor *t, double start, double step, double end,
                          int64_t split) {
  const dl_device *d = device_of(op, t);
  if (!d || d->ramp(op, t, start, step, end, split)) {
    dl_tensor_release(t);
    return NULL;
  }
  return t;
}

DL_API dl_tensor *dl_arange_on(double start, double end, double step, dl_dtype dtype, int device) {
  const char *why = NULL;
  if (!isfinite(start) || !isfinite(end) || !isfinite(step))
    why = "start, end and step must be finite";
  else if (step == 0)
    why = "step must be nonzero";
  else if ((step > 0 && end < start) || (step < 0 && end > start))
    why = "step has the wrong sign to go from start to end";
  double count = why ? 0 : ceil((end - start) / step);
  if (!why && !(count <= (double)(INT64_C(1) << 48)))
    why = "too many elements";
  if (why) return dl_errp(EM_ARANGE, "arange", start, end, step, why);
  int64_t n = count > 0 ? (int64_t)count : 0;
  if (check_new("arange", &n, 1, dtype)) return NULL;
  dl_tensor *t = tensor_new_on(device, dtype, &n, 1);
  if (!t) return NULL;
  return ramp_on("arange", t, start, step, end, n);
}

DL_API dl_tensor *dl_linspace_on(double start, double end, int64_t steps,
                                 dl_dtype dtype, int device) {
  if (steps < 0)
    return dl_errp(EM_NEG_COUNT, "linspace", "steps", (long long)steps);
  if (check_new("linspace", &steps, 1, dtype)) return NULL;
  dl_tensor *t = tensor_new_on(device, dtype, &steps, 1);
  if (!t) return NULL;
  double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
  /* as PyTorch: the second half counts back from end, so end is exact;
  ** one step gives start */
  return ramp_on("linspace", t, start, step, end, steps == 1 ? 1 : steps / 2);
}

DL_API dl_tensor *dl_eye_on(int64_t n, int64_t m, dl_dtype dtype, int device) {
  int64_t shape[2] = {n, m < 0 ? n : m};
  if (n < 0) return dl_errp(EM_NEG_COUNT, "eye", "n", (long long)n);
  if (check_new("eye", shape, 2, dtype)) return NULL;
  dl_tensor *t = dl_zeros_on(shape, 2, dtype, device);
  if (!t) return NULL;
  /* ones on the diagonal: a strided view filled */
  int64_t k = shape[0] < shape[1] ? shape[0] : shape[1], st = shape[1] + 1;
  dl_tensor *diag = fw_as_strided(t, &k, &st, 1, 0);
  int rc = diag ? fw_fill_(diag, 1) : -1;
  dl_tensor_release(diag);
  if (rc) {
    dl_tensor_release(t);
    return NULL;
  }
  return t;
}

DL_API dl_tensor *dl_arange(double start, double end, double step, dl_dtype dtype) {
  return dl_arange_on(start, end, step, dtype, -1);
}

DL_API dl_tensor *dl_linspace(double start, double end, int64_t steps, dl_dtype dtype) {
  return dl_linspace_on(start, end, steps, dtype, -1);
}

DL_API dl_tensor *dl_eye(int64_t n, int64_t m, dl_dtype dtype) {
  return dl_eye_on(n, m, dtype, -1);
}

/* Row-major values of src_dtype, wrapped without a copy and cast once. */
static dl_tensor *from_values(const void *values, int src_dtype,
                              const int64_t *shape, int ndim, int dtype) {
  if (check_new("tensor", shape, ndim, dtype)) return NULL;
  if (!values && shape_numel(shape, ndim))
    return dl_errp(EM_NULLARG, "tensor", "values");
  dl_tensor *src = dl_from_blob((void *)values, src_dtype, shape, NULL, ndim,
                                NULL, NULL);
  dl_tensor *t = src ? fw_to_dtype(src, dtype) : NULL;
  dl_tensor_release(src);
  return t;
}

DL_API dl_tensor *dl_from_doubles(const double *values, const int64_t *shape,
                                  int ndim, dl_dtype dtype) {
  return from_values(values, DL_FLOAT64, shape, ndim, dtype);
}

DL_API dl_tensor *dl_from_int64s(const int64_t *values, const int64_t *shape,
                                 int ndim, dl_dtype dtype) {
  return from_values(values, DL_INT64, shape, ndim, dtype);
}

DL_API dl_tensor *dl_from_blob(void *data, dl_dtype dtype, const int64_t *shape,
                               const int64_t *strides, int ndim,
                               dl_deleter deleter, void *ctx) {
  if (dtype < 0 || dtype >= DL_NDTYPES)
    return dl_errp(EM_BADDTYPE, "from_blob", dtype);
  if (check_shape("from_blob", shape, ndim)) return NULL;
  int64_t n = shape_numel(shape, ndim);
  if (!data && n) return dl_errp(EM_NULLARG, "from_blob", "data");
  dl_tensor *t = header_new(dtype, shape, ndim);
  dl_storage *s = t ? malloc(sizeof *s) : NULL;
  if (!s) {
    free(t);
    return dl_errp(EM_NOMEM, "from_blob", (long long)sizeof *s, 0LL);
  }
  if (strides)
    memcpy(t->stride, strides, sizeof(int64_t) * (size_t)ndim);
  else
    contiguous_strides(shape, ndim, t->stride);
  int64_t extent = n ? 1 : 0;
  for (int i = 0; i < ndim && n; i++)
    extent += (shape[i] - 1) * (t->stride[i] < 0 ? -t->stride[i] : t->stride[i]);
  atomic_init(&s->refcount, 1);
  atomic_init(&s->version, 0);
  s->device = -1;
  s->data = data;
  s->nbytes = (size_t)extent * (size_t)dl_dtype_sizes[dtype];
  s->owned = 0;
  s->deleter = deleter;
  s->ctx = ctx;
  t->storage = s;
  return t;
}

/* -- Owners anchored in Lua ---------------------------------------------- */

static struct {
  pthread_mutex_t mu;
  int64_t *ids;
  int n, cap;
  atomic_int pending;
} anchors = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void anchor_release(void *ctx, void *data) {
  (void)data;
  pthread_mutex_lock(&anchors.mu);
  if (anchors.n == anchors.cap) {
    int cap = anchors.cap ? anchors.cap * 2 : 64;
    int64_t *ids = realloc(anchors.ids, sizeof(int64_t) * (size_t)cap);
    if (!ids) {  /* the owner stays anchored: a leak, never a crash */
      pthread_mutex_unlock(&anchors.mu);
      return;
    }
    anchors.ids = ids;
    anchors.cap = cap;
  }
  anchors.ids[anchors.n++] = (int64_t)(intptr_t)ctx;
  atomic_store(&anchors.pending, anchors.n);
  pthread_mutex_unlock(&anchors.mu);
}

DL_API dl_tensor *dl_from_blob_anchored(void *data, dl_dtype dtype,
                                        const int64_t *shape,
                                        const int64_t *strides, int ndim,
                                        int64_t anchor) {
  return dl_from_blob(data, dtype, shape, strides, ndim, anchor_release,
                      (void *)(intptr_t)anchor);
}

DL_API int dl_anchors_pending(void) { return atomic_load(&anchors.pending); }

DL_API int dl_released_anchors(int64_t *out, int max) {
  pthread_mutex_lock(&anchors.mu);
  int n = anchors.n < max ? anchors.n : max;
  for (int i = 0; i < n; i++) out[i] = anchors.ids[--anchors.n];
  atomic_store(&anchors.pending, anchors.n);
  pthread_mutex_unlock(&anchors.mu);
  return n;
}

DL_HIDDEN dl_tensor *fw_to_dtype(const dl_tensor *t, int dtype) {
  if (check_tensor_any("to", t)) return NULL;
  if (dtype < 0 || dtype >= DL_NDTYPES) return dl_errp(EM_BADDTYPE, "to", dtype);
  dl_tensor *r = tensor_new_on(t->storage->device, dtype, t->shape, t->ndim);
  if (r && fw_copy_(r, t)) {
    dl_tensor_release(r);
    return NULL;
  }
  return r;
}

DL_HIDDEN dl_tensor *fw_clone(const dl_tensor *t) {
  if (check_tensor_any("clone", t)) return NULL;
  return fw_to_dtype(t, t->dtype);
}

/* copy_ across devices: src is brought to dst's device (contiguous, in
** its own dtype) and cast there. */
static int copy_across(dl_tensor *dst, const dl_tensor *src) {
  int to = dst->storage->device;
  dl_tensor *moved = dl_to_device(src, to);
  if (!moved) return -1;
  int rc = fw_copy_(dst, moved);
  dl_tensor_release(moved);
  return rc;
}

DL_HIDDEN int fw_copy_(dl_tensor *dst, const dl_tensor *src) {
  if (check_tensor_any("copy_", dst) || check_tensor_any("copy_", src)) return -1;
  int dev = dst->storage->device;
  if (src->storage->device != dev) {
    /* a CPU scalar into a device tensor: broadcast by the kernel */
    if (!is_host_scalar(src)) return copy_across(dst, src);
  }
  dl_tensor *tmp = NULL;
  if (dst->storage == src->storage && dst != src) {
    /* overlapping views would read what they just wrote */
    tmp = fw_clone(src);
    if (!tmp) return -1;
    src = tmp;
  }
  const dl_device *d = device_get("copy_", dev);
  int rc = d ? d->cast("copy_", dst, src) : -1;
  dl_tensor_release(tmp);
  return rc;
}

DL_HIDDEN int fw_fill_(dl_tensor *t, double value) {
  if (check_tensor_any("fill_", t)) return -1;
  uint64_t bytes = 0;
  store_double((char *)&bytes, t->dtype, value);
  const dl_device *d = device_of("fill_", t);
  return d ? d->fill("fill_", t, bytes) : -1;
}

/* -- Element access ------------------------------------------------------- */

static const char *elem_ptr(const dl_tensor *t, int64_t linear) {
  int64_t off = t->offset;
  for (int i = t->ndim - 1; i >= 0; i--) {
    int64_t sz = t->shape[i];
    off += (linear % sz) * t->stride[i];
    linear /= sz;
  }
  return (const char *)t->storage->data + off * dl_dtype_sizes[t->dtype];
}

DL_HIDDEN int tensor_check_linear(const char *op, const dl_tensor *t, int64_t linear) {
  if (check_tensor_any(op, t)) return -1;
  int64_t n = dl_tensor_numel(t);
  if (linear < 0 || linear >= n)
    return dl_err(EM_LINEAR_RANGE, op, (long long)linear, (long long)n);
  return 0;
}

/* One element's bytes, from a device tensor through a copy (which waits
** for the kernels before it: reading a value synchronises, as .item()). */
static int elem_get(const char *op, const dl_tensor *t, int64_t linear, char *buf) {
  const dl_device *d = device_of(op, t);
  if (!d) return -1;
  return d->copy_bytes(op, buf, elem_ptr(t, linear), (size_t)dl_dtype_sizes[t->dtype],
                       t->storage->device);
}

DL_API int dl_get_double(const dl_tensor *t, int64_t linear, double *out) {
  char buf[8];
  if (tensor_check_linear("get", t, linear) || elem_get("get", t, linear, buf)) return -1;
  *out = load_double(buf, t->dtype);
  return 0;
}

DL_API int dl_get_int64(const dl_tensor *t, int64_t linear, int64_t *out) {
  char buf[8];
  if (tensor_check_linear("get", t, linear) || elem_get("get", t, linear, buf)) return -1;
  *out = load_int64(buf, t->dtype);
  return 0;
}

DL_HIDDEN int fw_set_double(dl_tensor *t, int64_t linear, double value) {
  if (tensor_check_linear("set", t, linear)) return -1;
  const dl_device *d = device_of("set", t);
  char buf[8];
  store_double(buf, t->dtype, value);
  return d ? d->copy_bytes("set", (char *)elem_ptr(t, linear), buf,
                           (size_t)dl_dtype_sizes[t->dtype], t->storage->device)
           : -1;
}

DL_API int dl_to_doubles(const dl_tensor *t, double *out) {
  if (check_tensor_any("totable", t)) return -1;
  dl_tensor *o = dl_from_blob(out, DL_FLOAT64, t->shape, NULL, t->ndim, NULL, NULL);
  if (!o) return -1;
  int rc = fw_copy_(o, t);
  dl_tensor_release(o);
  return rc;
}

/* -- The CPU's memory and elementwise kernels (core/device.h) -------------- */

#define FILL_FN(name, T)                                                    \
  static void name(char **data, const int64_t *st, int64_t n, void *ctx) { \
    T v = *(const T *)ctx;                                                 \
    char *o = data[0];                                                     \
    if (st[0] == sizeof(T)) {                                              \
      T *p = (T *)o;                                                       \
      for (int64_t i = 0; i < n; i++) p[i] = v;                            \
    } else {                                                               \
      for (int64_t i = 0; i < n; i++, o += st[0]) *(T *)o = v;             \
    }                                                                      \
  }
FILL_FN(fill1, uint8_t)
FILL_FN(fill2, uint16_t)
FILL_FN(fill4, uint32_t)
FILL_FN(fill8, uint64_t)

DL_HIDDEN int cpu_fill(const char *op, dl_tensor *t, uint64_t bytes) {
  static const loop_fn fills[9] = {0, fill1, fill2, 0, fill4, 0, 0, 0, fill8};
  iter_t it;
  if (iter_init(&it, op, &t, 1)) return -1;
  iter_run(&it, fills[dl_dtype_sizes[t->dtype]], &bytes);
  return 0;
}

DL_HIDDEN int cpu_cast(const char *op, dl_tensor *dst, const dl_tensor *src) {
  dl_tensor *ops[2] = {dst, (dl_tensor *)src};
  iter_t it;
  if (iter_init(&it, op, ops, 2)) return -1;
  iter_run(&it, cast_loop(dst->dtype, src->dtype), NULL);
  return 0;
}

DL_HIDDEN int cpu_ramp(const char *op, dl_tensor *t, double start, double step, double end,
                       int64_t split) {
  (void)op;
  char *p = tensor_first(t);
  int es = dl_dtype_sizes[t->dtype];
  int64_t n = dl_tensor_numel(t);
  for (int64_t i = 0; i < n; i++)
    store_double(p + i * es, t->dtype,
                 i < split ? start + step * (double)i : end - step * (double)(n - 1 - i));
  return 0;
}

DL_HIDDEN int cpu_copy_bytes(const char *op, void *dst, const void *src, size_t n, int dev) {
  (void)op, (void)dev;
  memcpy(dst, src, n);
  return 0;
}

DL_HIDDEN dl_tensor *cpu_new_tensor(int dev, dl_dtype dtype, const int64_t *shape, int ndim) {
  (void)dev;
  return tensor_new(dtype, shape, ndim);
}
