/*
** cuda_mem.c -- device memory for the runtime: one caching allocator
** (devalloc.c) per device over the raw calls of runtime/cuda/memory.cu,
** and the dl_cuda_* memory calls of ddplua.h.
*/
#include <pthread.h>
#include <stdio.h>

#include "devalloc.h"
#include "device.h"

enum { MAX_DEV = 64 };

typedef int (*mem_alloc_fn)(int, size_t, void **, char *, size_t);
typedef int (*mem_free_fn)(int, void *, char *, size_t);
typedef int (*dev_sync_fn)(int, char *, size_t);

static struct {
  pthread_mutex_t mu;
  devalloc *a[MAX_DEV];
  mem_alloc_fn alloc;
  mem_free_fn free;
  dev_sync_fn sync;
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

/* The allocator of `device`, made on first use; NULL with the error set
** when CUDA or that device is not there. */
static devalloc *allocator(const char *op, int device) {
  int n = dl_cuda_device_count();
  if (n <= 0) return dl_errp(EM_CUDA_UNAVAIL, op, dl_cuda_status());
  if (device < 0 || device >= n || device >= MAX_DEV) return dl_errp(EM_CUDA_DEVICE, op, device, n);
  pthread_mutex_lock(&mem.mu);
  if (!mem.alloc) {
    const char *why = NULL;
    mem.alloc = (mem_alloc_fn)cuda_sym("dlc_mem_alloc", &why);
    mem.free = (mem_free_fn)cuda_sym("dlc_mem_free", &why);
    mem.sync = (dev_sync_fn)cuda_sym("dlc_device_sync", &why);
    if (!mem.alloc || !mem.free || !mem.sync) {
      mem.alloc = NULL;
      pthread_mutex_unlock(&mem.mu);
      return dl_errp(EM_CUDA_UNAVAIL, op, why ? why : "libddplua_cuda.so lacks its memory calls");
    }
  }
  if (!mem.a[device]) {
    dev_backend be = { be_alloc, be_free, be_sync, NULL };
    mem.a[device] = devalloc_new(&be, device);
  }
  devalloc *a = mem.a[device];
  pthread_mutex_unlock(&mem.mu);
  return a;
}

void *cuda_mem_alloc(int device, size_t size, uintptr_t stream) {
  devalloc *a = allocator("cuda alloc", device);
  return a ? devalloc_alloc(a, size, stream) : NULL;
}

int cuda_mem_release(int device, void *ptr) {
  devalloc *a = device >= 0 && device < MAX_DEV ? mem.a[device] : NULL;
  return a ? devalloc_release(a, ptr) : dl_err(EM_CUDA_DEVICE, "cuda release", device, 0);
}

DL_API int dl_cuda_synchronize(int device) {
  if (!allocator("cuda.synchronize", device)) return -1;
  char err[256];
  int rc = mem.sync(device, err, sizeof err);
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
