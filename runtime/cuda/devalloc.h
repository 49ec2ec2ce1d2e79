/*
** devalloc.h -- the caching allocator for device (GPU) memory, written
** against a small backend (raw alloc/free/sync) so it runs, and is tested,
** without a GPU: runtime/cuda wires the CUDA backend, tests a fake one.
*/
#ifndef DL_DEVALLOC_H
#define DL_DEVALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Internal to the library (the C test links build/libddplua.a and drives
** the allocator with a fake device). */
#define DLA_API __attribute__((visibility("hidden")))

typedef struct dev_backend {
  /* 0 with *ptr set, or nonzero when the device has no room */
  int (*alloc)(void *ctx, int device, size_t size, void **ptr);
  void (*free)(void *ctx, int device, void *ptr);
  /* waits for the device's work: a cached block may be in use by a queued
  ** kernel, so memory goes back to the device only after this */
  void (*sync)(void *ctx, int device);
  void *ctx;
  /* Optional (NULL: a release waits with sync instead).  record: a new
  ** event recorded now on stream of device, or NULL when none can be made;
  ** done: 1 once the work before it has passed (wait: block until then),
  ** the event then freed, 0 while it runs. */
  void *(*record)(void *ctx, int device, uintptr_t stream);
  int (*done)(void *ctx, void *event, int wait);
} dev_backend;

typedef struct dev_stats {
  int64_t allocated, reserved;            /* bytes in use / held from the device */
  int64_t peak_allocated, peak_reserved;
  int64_t window_peak;                    /* allocated's, since devalloc_window_peak's last reset */
  int64_t allocs, cache_hits, segments, retries, ooms;
} dev_stats;

typedef struct devalloc devalloc;

DLA_API devalloc *devalloc_new(const dev_backend *be, int device);
/* Returns every cached segment to the device first. */
DLA_API void devalloc_free_all(devalloc *a);
/* A block of at least size bytes (256-byte aligned), for use on stream.
** A freed block goes back to its stream's pool: reused in stream order
** without waiting.  On failure, releases the cache and retries once; then
** NULL with a DL_ENOMEM error naming the size and the statistics. */
DLA_API void *devalloc_alloc(devalloc *a, size_t size, uintptr_t stream);
/* The block at ptr (in use) is also used by work on stream, as PyTorch's
** record_stream: at its release an event is recorded on that stream, and
** the block goes back to its own stream's pool only once the event has
** passed (it stays out of every pool meanwhile).  One other stream per
** block; 0, or an error for ptr not handed out or a third stream. */
DLA_API int devalloc_record_stream(devalloc *a, void *ptr, uintptr_t stream);
/* Back to the pool (never to the device: safe from any finalizer). */
DLA_API int devalloc_release(devalloc *a, void *ptr);
/* Gives the device back every segment no block of which is in use. */
DLA_API void devalloc_empty(devalloc *a);
DLA_API void devalloc_stats(devalloc *a, dev_stats *out);
DLA_API void devalloc_reset_peak(devalloc *a);
/* The peak of allocated since the last call with reset set; reset starts
** a new window from the bytes allocated now (apart from the user's peak). */
DLA_API int64_t devalloc_window_peak(devalloc *a, int reset);

#endif
