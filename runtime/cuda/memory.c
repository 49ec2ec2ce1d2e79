/*
** cuda/memory.c -- device memory for the runtime: one caching allocator
** (devalloc.c) per device over the raw calls of runtime/cuda/memory.cu,
** and the dl_cuda_* memory calls of ddplua.h.
*/
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cuda/devalloc.h"
#include "cuda/cuda.h"

enum { MAX_DEV = 64 };

typedef int (*mem_alloc_fn)(int, size_t, void **, char *, size_t);
typedef int (*mem_free_fn)(int, void *, char *, size_t);
typedef int (*dev_sync_fn)(int, char *, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int, char *, size_t);
typedef int (*event_record_fn)(int, uintptr_t, void **, char *, size_t);
typedef int (*event_done_fn)(void *, int);

static struct {
  pthread_mutex_t mu;
  devalloc *a[MAX_DEV];
  mem_alloc_fn alloc;
  mem_free_fn free;
  dev_sync_fn sync;
  memcpy_fn copy;
  event_record_fn record;
  event_done_fn done;
} mem = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int be_alloc(void *ctx, int device, size_t size, void **ptr) {
  char err[256];
  (void)ctx;
  return mem.alloc(device, size, ptr, err, sizeof err);
}

static void be_free(void *ctx, int device, void *ptr) {
  char err[256];
  (void)ctx;
  mem.free(device, ptr, err, sizeof err);  /* a failing free leaves nothing to do */
}

static void be_sync(void *ctx, int device) {
  char err[256];
  (void)ctx;
  mem.sync(device, err, sizeof err);
}

/* NULL when no event can be made: devalloc then syncs the device instead */
static void *be_record(void *ctx, int device, uintptr_t stream) {
  char err[256];
  void *ev = NULL;
  (void)ctx;
  return mem.record(device, stream, &ev, err, sizeof err) ? NULL : ev;
}

static int be_done(void *ctx, void *event, int wait) {
  (void)ctx;
  return mem.done(event, wait);
}

/* The allocator of `device`, made on first use; NULL with the error set
** when CUDA or that device is not there. */
static devalloc *allocator(const char *op, int device) {
  int n = dl_cuda_device_count();
  if (n <= 0) return dl_errp(EM_CUDA_UNAVAIL, op, dl_cuda_status());
  if (device < 0 || device >= n || device >= MAX_DEV) return dl_errp(EM_CUDA_DEVICE, op, device, n);
  pthread_mutex_lock(&mem.mu);
  if (!mem.alloc) {
    const dlc_api *api = cuda_api(op);
    if (!api) {
      pthread_mutex_unlock(&mem.mu);
      return NULL;
    }
    mem.free = api->mem_free;
    mem.sync = api->device_sync;
    mem.copy = api->memcpy;
    mem.record = api->event_record;
    mem.done = api->event_done;
    mem.alloc = api->mem_alloc;
  }
  if (!mem.a[device]) {
    dev_backend be = { be_alloc, be_free, be_sync, NULL, be_record, be_done };
    mem.a[device] = devalloc_new(&be, device);
  }
  devalloc *a = mem.a[device];
  pthread_mutex_unlock(&mem.mu);
  return a;
}

void *cuda_mem_alloc(int device, size_t size, uintptr_t stream) {
  devalloc *a = allocator("cuda alloc", device);
  void *p = a ? devalloc_alloc(a, size, stream) : NULL;
  if (p) mem_gc_credit(size);
  return p;
}

int cuda_mem_release(int device, void *ptr) {
  devalloc *a = device >= 0 && device < MAX_DEV ? mem.a[device] : NULL;
  return a ? devalloc_release(a, ptr) : dl_err(EM_CUDA_DEVICE, "cuda release", device, 0);
}

static void pin_poll(void);

DL_API int dl_cuda_synchronize(int device) {
  if (!allocator("cuda.synchronize", device)) return -1;
  char err[256];
  int rc = mem.sync(device, err, sizeof err);
  pin_poll();
  return rc ? dl_err(EM_BADVALUE, "cuda.synchronize", err) : 0;
}

DL_API int dl_cuda_memory_stats(int device, int64_t *out, int n) {
  devalloc *a = allocator("cuda.memory_stats", device);
  if (!a) return -1;
  dev_stats s;
  devalloc_stats(a, &s);
  int64_t v[] = { s.allocated, s.reserved, s.peak_allocated, s.peak_reserved,
                  s.allocs, s.cache_hits, s.segments, s.retries, s.ooms };
  for (int i = 0; i < n && i < (int)(sizeof v / sizeof *v); i++) out[i] = v[i];
  return 0;
}

DL_API int dl_cuda_empty_cache(int device) {
  devalloc *a = allocator("cuda.empty_cache", device);
  if (!a) return -1;
  devalloc_empty(a);
  return 0;
}

DL_API int dl_cuda_reset_peak_memory_stats(int device) {
  devalloc *a = allocator("cuda.reset_peak_memory_stats", device);
  if (!a) return -1;
  devalloc_reset_peak(a);
  return 0;
}

DL_API int64_t dl_cuda_memory_window_peak(int device, int reset) {
  if (device < 0 || device >= MAX_DEV) return -1;
  pthread_mutex_lock(&mem.mu);
  devalloc *a = mem.a[device];
  pthread_mutex_unlock(&mem.mu);
  return a ? devalloc_window_peak(a, reset) : -1;
}

/* -- Moving tensors between devices -------------------------------------------- */

static void device_deleter(void *ctx, void *data) {
  if (data) cuda_mem_release((int)(intptr_t)ctx, data);
}

/* A tensor over n bytes of fresh memory on device for use on stream (0:
** the compute stream), shaped like t. */
static dl_tensor *device_tensor(const dl_tensor *t, int device, size_t n, uintptr_t stream) {
  void *p = n ? cuda_mem_alloc(device, n, stream) : NULL;
  if (n && !p) return NULL;
  dl_tensor *out = dl_from_blob(p, t->dtype, t->shape, NULL, t->ndim, device_deleter,
                                (void *)(intptr_t)device);
  if (!out) {
    if (p) cuda_mem_release(device, p);
    return NULL;
  }
  out->storage->device = device;
  return out;
}

DL_HIDDEN dl_tensor *cuda_new_tensor(int device, dl_dtype dtype, const int64_t *shape, int ndim) {
  if (check_shape("alloc", shape, ndim)) return NULL;
  dl_tensor tmpl;
  memset(&tmpl, 0, sizeof tmpl);
  tmpl.dtype = (int8_t)dtype;
  tmpl.ndim = (int8_t)ndim;
  for (int i = 0; i < ndim; i++) tmpl.shape[i] = shape[i];
  return device_tensor(&tmpl, device, (size_t)shape_numel(shape, ndim) * dl_dtype_sizes[dtype], 0);
}

DL_HIDDEN int cuda_copy_bytes(const char *op, void *dst, const void *src, size_t n, int device) {
  char err[300];
  if (!allocator(op, device)) return -1;
  if (mem.copy(dst, src, n, device, err, sizeof err)) return dl_err(EM_CUDA_CALL, op, device, err);
  return 0;
}

/* t (on another device than `device`) copied to device (-1: the CPU). */
DL_HIDDEN dl_tensor *cuda_move(const dl_tensor *t, int device) {
  const char *op = "to";
  int from = t->storage->device;
  int dev = device >= 0 ? device : from;  /* the device whose copy engine runs */
  if (!allocator(op, dev)) return NULL;
  char err[300];
  size_t n = (size_t)dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  dl_tensor *src = NULL, *out = NULL;
  if (from < 0) {
    if (!(src = fw_contiguous(t))) return NULL;
  } else {
    /* made contiguous on its own device first, by a kernel */
    if (!(src = fw_contiguous(t))) return NULL;
  }
  out = device >= 0 ? device_tensor(t, device, n, 0) : tensor_new(t->dtype, t->shape, t->ndim);
  if (out && mem.copy(tensor_first(out), tensor_first(src), n, dev, err, sizeof err)) {
    dl_err(EM_BADVALUE, op, err);
    dl_tensor_release(out);
    out = NULL;
  }
  dl_tensor_release(src);
  return out;
}

/* -- Pinned host memory and copies that do not wait ----------------------------- */

typedef int (*host_alloc_fn)(size_t, void **, char *, size_t);
typedef int (*host_free_fn)(void *, char *, size_t);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void **, char *, size_t);

static struct {
  pthread_mutex_t mu;
  host_alloc_fn alloc;
  host_free_fn free;
  memcpy_async_fn copy;
  event_done_fn done;
  /* sources of copies in flight, kept alive until their event passes */
  struct { void *event; dl_tensor *src; } q[256];
  int n;
} pin = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int pin_syms(const char *op) {
  if (pin.done) return 0;
  if (dl_cuda_device_count() <= 0) return dl_err(EM_CUDA_UNAVAIL, op, dl_cuda_status());
  const dlc_api *api = cuda_api(op);
  if (!api) return -1;
  pin.alloc = api->host_alloc;
  pin.free = api->host_free;
  pin.copy = api->memcpy_async;
  pin.done = api->event_done;
  return 0;
}

static void pinned_deleter(void *ctx, void *data) {
  char err[256];
  (void)ctx;
  pin.free(data, err, sizeof err);
}

DL_API int dl_tensor_is_pinned(const dl_tensor *t) {
  return t && t->storage->deleter == pinned_deleter;
}

DL_API dl_tensor *dl_pin_memory(const dl_tensor *t) {
  const char *op = "pin_memory";
  if (check_tensor_any(op, t)) return NULL;
  if (t->storage->device >= 0) return dl_errp(EM_BADVALUE, op, "only CPU tensors can be pinned; this one is on CUDA");
  if (dl_tensor_is_pinned(t) && dl_tensor_is_contiguous(t)) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  pthread_mutex_lock(&pin.mu);
  int rc = pin_syms(op);
  pthread_mutex_unlock(&pin.mu);
  if (rc) return NULL;
  size_t n = (size_t)dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  void *p = NULL;
  char err[300];
  if (pin.alloc(n, &p, err, sizeof err)) return dl_errp(EM_CUDA_OOM, op, 0, err);
  dl_tensor *out = dl_from_blob(p, t->dtype, t->shape, NULL, t->ndim, pinned_deleter, NULL);
  if (!out) {
    pin.free(p, err, sizeof err);
    return NULL;
  }
  if (fw_copy_(out, t)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

/* Releases the sources of finished copies (all of them when wait). */
static void pin_reap(int wait) {
  pthread_mutex_lock(&pin.mu);
  int k = 0;
  for (int i = 0; i < pin.n; i++) {
    if (pin.done(pin.q[i].event, wait))
      dl_tensor_release(pin.q[i].src);
    else
      pin.q[k++] = pin.q[i];
  }
  pin.n = k;
  pthread_mutex_unlock(&pin.mu);
}

static void pin_poll(void) {
  if (pin.done) pin_reap(0);
}

/* A pinned, contiguous CPU tensor is copied without waiting, on the
** device's copy stream (kernels/memory.cu: the compute stream waits on the
** copy's event, so every later kernel sees the copied bytes); the source
** is kept alive until the copy is over.  Anything else as dl_to_device.
**
** Why the destination comes from the copy stream's pool, used on the
** compute stream too (devalloc_record_stream), rather than from the
** compute stream's pool: a block of that pool may have been released
** while kernels queued on the compute stream still read or write it
** (reuse on the same stream is ordered, so devalloc hands it out at
** once); the copy, on another stream, would then overwrite it under them.
** A block of the copy stream's pool is handed to a copy only when the
** previous copy into it is over (same stream) and, once the compute
** stream has used it, only after an event recorded on the compute stream
** at its release has passed -- and that event is after the compute
** stream's wait on the copy, so after the copy too. */
DL_API dl_tensor *dl_to_device_async(const dl_tensor *t, int device) {
  const char *op = "to";
  if (check_tensor_any(op, t)) return NULL;
  if (device < 0 || t->storage->device >= 0 || !dl_tensor_is_pinned(t) || !dl_tensor_is_contiguous(t))
    return dl_to_device(t, device);
  devalloc *a = allocator(op, device);
  if (!a) return NULL;
  char err[300];
  uintptr_t cs = 0;
  DLC_FN(copy_stream) get_cs = DLC(op, copy_stream);
  if (!get_cs) return NULL;
  if (get_cs(device, &cs, err, sizeof err)) return dl_errp(EM_CUDA_CALL, op, device, err);
  size_t n = (size_t)dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  dl_tensor *out = device_tensor(t, device, n, cs);
  if (!out || !n) return out;
  if (devalloc_record_stream(a, tensor_first(out), 0)) {
    dl_tensor_release(out);
    return NULL;
  }
  pin_reap(0);
  if (pin.n == (int)(sizeof pin.q / sizeof *pin.q)) pin_reap(1);
  void *ev = NULL;
  if (pin.copy(tensor_first(out), tensor_first(t), n, device, &ev, err, sizeof err)) {
    dl_tensor_release(out);
    return dl_errp(EM_CUDA_CALL, op, device, err);
  }
  dl_tensor_retain((dl_tensor *)t);
  pthread_mutex_lock(&pin.mu);
  pin.q[pin.n].event = ev;
  pin.q[pin.n].src = (dl_tensor *)t;
  pin.n++;
  pthread_mutex_unlock(&pin.mu);
  return out;
}
