/*
** internal.h -- what the runtime's C files share and users never see:
** the tensor and storage structs, errors, dims, iteration and threads.
*/
#ifndef DL_INTERNAL_H
#define DL_INTERNAL_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <time.h>

#include "ddplua.h"
#include "ddplua_binding.h"

#define DL_HIDDEN __attribute__((visibility("hidden")))

/* -- Storage and tensors ------------------------------------------------- */

typedef struct dl_storage {
  atomic_int refcount;
  int device;         /* -1 = cpu */
  atomic_uint version; /* bumped by in-place writes; autograd checks it */
  void *data;
  size_t nbytes;
  int owned;          /* data came from mem_alloc: free it with mem_free */
  dl_deleter deleter; /* else: called (when set) as deleter(ctx, data) */
  void *ctx;
} dl_storage;

enum {
  TF_WRAPPED = 1,  /* a Lua number turned into a 0-dim tensor */
  TF_FREED = 2     /* data dropped by dl_tensor_free_data */
};

struct dl_tensor {
  atomic_int refcount;
  int8_t dtype;
  int8_t ndim;
  uint8_t flags;
  int64_t shape[DL_MAX_DIMS];
  int64_t stride[DL_MAX_DIMS];  /* elements */
  int64_t offset;               /* elements */
  dl_storage *storage;
  void *autograd;               /* reserved for the autograd engine */
};

/* A new contiguous tensor (uninitialised) or NULL with the error set. */
DL_HIDDEN dl_tensor *tensor_new(int dtype, const int64_t *shape, int ndim);
/* A new tensor header over t's storage with the given layout. */
DL_HIDDEN dl_tensor *tensor_alias(const dl_tensor *t, const int64_t *shape,
                                  const int64_t *stride, int ndim,
                                  int64_t offset);
DL_HIDDEN int64_t shape_numel(const int64_t *shape, int ndim);
DL_HIDDEN void contiguous_strides(const int64_t *shape, int ndim,
                                  int64_t *stride);
DL_HIDDEN int check_shape(const char *op, const int64_t *shape, int ndim);

static inline char *tensor_ptr(const dl_tensor *t) {
  return (char *)t->storage->data;  /* offset applied by callers */
}
static inline char *tensor_first(const dl_tensor *t) {
  extern const int dl_dtype_sizes[DL_NDTYPES];
  return (char *)t->storage->data + t->offset * dl_dtype_sizes[t->dtype];
}

/* Aligned allocation that counts live bytes (dl_mem_allocated). */
DL_HIDDEN void *mem_alloc(size_t nbytes);
DL_HIDDEN void mem_free(void *p, size_t nbytes);
/* Counts device bytes towards Lua's next garbage collection (dl_gc_hint). */
DL_HIDDEN void mem_gc_credit(size_t nbytes);

/* -- Errors -------------------------------------------------------------- */

/* Every message lives in errmsg.h; these set it and return the code. */
typedef enum {
#define ERRDEF(name, code, fmt) EM_##name,
#include "core/errmsg.h"
#undef ERRDEF
  EM__MAX
} dl_errmsg;

DL_HIDDEN int dl_err(dl_errmsg em, ...);
/* The same, returning NULL for pointer-returning calls. */
DL_HIDDEN void *dl_errp(dl_errmsg em, ...);
/* Seconds on the monotonic clock (for timeouts and durations). */
static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Puts back an error saved from dl_last_error_code/dl_last_error. */
DL_HIDDEN int dl_err_set(int code, const char *msg);

/* Small thread-local string buffers for messages: "[2, 3]" etc. */
DL_HIDDEN const char *fmt_shape(const int64_t *shape, int ndim);
DL_HIDDEN const char *fmt_tshape(const dl_tensor *t);
DL_HIDDEN const char *fmt_dtype(int dtype);

/* Resolves a possibly negative dim; sets the error naming op on failure. */
DL_HIDDEN int norm_dim(const char *op, int dim, int ndim, int *out);
/* For unsqueeze-like ops where dim may equal ndim. */
DL_HIDDEN int norm_dim_incl(const char *op, int dim, int ndim, int *out);
/* The check an in-place write makes first (autograd's: refuse a tensor
** whose elements share memory, then one the graph needs, else bump its
** version), handed down by the public op so the layers below never call
** autograd; NULL for the runtime's own writes into tensors it made. */
typedef int (*inplace_check_fn)(const char *op, dl_tensor *t);
/* Whether two elements of t share one memory location (core/overlap.c):
** 1 yes (*zero_dim, when given, is the expanded dim with stride 0, or -1),
** 0 no, -1 undecided (strides too intricate to search). */
DL_HIDDEN int tensor_internal_overlap(const dl_tensor *t, int *zero_dim);
/* The error an in-place write into such a tensor gets (0 when there is
** none, or it is undecided: only a sure overlap is refused). */
DL_HIDDEN int tensor_check_overlap(const char *op, const dl_tensor *t);
/* An in-place write happened: saved copies of t are stale. */
DL_HIDDEN void tensor_bump_version(dl_tensor *t);
/* What frees a tensor's autograd record (set by autograd when it makes the
** first one): releasing a tensor calls it, the core knows no more. */
DL_HIDDEN void tensor_set_autograd_free(void (*fn)(dl_tensor *t));
/* The element index check of get/set (DL_EINDEX out of range). */
DL_HIDDEN int tensor_check_linear(const char *op, const dl_tensor *t, int64_t linear);
/* The copies and fills without autograd; the public dl_* versions
** (autograd/grad_copy.c) check in-place writes and record casts. */
DL_HIDDEN int fw_copy_(dl_tensor *dst, const dl_tensor *src);
DL_HIDDEN int fw_fill_(dl_tensor *t, double value);
DL_HIDDEN int fw_set_double(dl_tensor *t, int64_t linear, double value);
DL_HIDDEN dl_tensor *fw_to_dtype(const dl_tensor *t, int dtype);
DL_HIDDEN dl_tensor *fw_clone(const dl_tensor *t);
DL_HIDDEN dl_tensor *fw_contiguous(const dl_tensor *t);
DL_HIDDEN int fw_uniform_(dl_tensor *t, double low, double high, inplace_check_fn check);
DL_HIDDEN int fw_normal_(dl_tensor *t, double mean, double std, inplace_check_fn check);

/* Not NULL and not freed (a tensor on any device). */
DL_HIDDEN int check_tensor_any(const char *op, const dl_tensor *t);

/* -- Dtypes -------------------------------------------------------------- */

extern const int dl_dtype_sizes[DL_NDTYPES];
DL_HIDDEN float half_to_float(uint16_t h);
DL_HIDDEN uint16_t float_to_half(float f);
DL_HIDDEN float bf16_to_float(uint16_t h);
DL_HIDDEN uint16_t float_to_bf16(float f);
DL_HIDDEN double load_double(const char *p, int dtype);
DL_HIDDEN int64_t load_int64(const char *p, int dtype);
DL_HIDDEN void store_double(char *p, int dtype, double v);
DL_HIDDEN int is_int_dtype(int dtype);     /* int32, int64, uint8 */
DL_HIDDEN int is_half_dtype(int dtype);    /* bfloat16, float16 */
/* PyTorch's result_type over (dimensioned, zero-dim, wrapped) operands. */
DL_HIDDEN int result_type_n(const dl_tensor *const *ts, int n);

/* -- Iteration over broadcast operands ------------------------------------ */

enum { ITER_MAX_OPS = 4 };

/* A loop over n elements; data[i] and strides[i] (bytes) per operand, with
** operand 0 the output.  Same signature as NumPy's ufunc inner loops. */
typedef void (*loop_fn)(char **data, const int64_t *strides, int64_t n,
                        void *ctx);

typedef struct iter {
  int ndim, nops;
  int64_t numel;
  int64_t shape[DL_MAX_DIMS];                  /* fastest dim first */
  int64_t strides[ITER_MAX_OPS][DL_MAX_DIMS];  /* bytes, fastest first */
  char *data[ITER_MAX_OPS];
} iter_t;

/* ops[0] defines the shape; the others must broadcast to it.  Dims are
** reordered and coalesced so the inner loop runs as long as it can. */
DL_HIDDEN int iter_init(iter_t *it, const char *op, dl_tensor *const *ops,
                        int nops);
/* Runs fn over every element, on several threads when large. */
DL_HIDDEN void iter_run(const iter_t *it, loop_fn fn, void *ctx);
DL_HIDDEN void iter_run_serial(const iter_t *it, loop_fn fn, void *ctx);
/* Broadcast shape of a and b into out (ndim set); error names op. */
DL_HIDDEN int broadcast_shape(const char *op, const int64_t *sa, int na,
                              const int64_t *sb, int nb, int64_t *out,
                              int *nout);
/* The loop that casts src dtype into dst dtype, element by element. */
DL_HIDDEN loop_fn cast_loop(int dst, int src);
/* Casts (copying) t to dtype, or retains t when it already has it. */
DL_HIDDEN dl_tensor *as_dtype(const dl_tensor *t, int dtype);

/* -- Random numbers ------------------------------------------------------ */

/* Reserves `blocks` Philox blocks of the global stream (returns the first
** counter, sets the seed); philox.h computes one block's 4 words. */
DL_HIDDEN uint64_t rng_reserve(uint64_t blocks, uint64_t *seed);

/* -- Threads ------------------------------------------------------------- */

typedef void (*par_fn)(void *ctx, int64_t begin, int64_t end);
/* Splits [0, n) into chunks of at least grain and runs them on the pool;
** runs inline when small, single-threaded, or already inside the pool. */
DL_HIDDEN void parallel_for(int64_t n, int64_t grain, par_fn fn, void *ctx);
/* The calling thread computes serially from now on (a data worker thread:
** the pool stays the training loop's). */
DL_HIDDEN void threads_serial_here(void);
DL_HIDDEN int parallel_threads(void);
/* Nonzero in a child forked from this process (a loader worker): OpenMP's
** team of the parent did not survive, and a parallel region would hang. */
DL_HIDDEN int threads_forked(void);
/* Around every call into oneDNN (sgemm, conv): SIGPROF held on the calling
** thread, *old its mask before, for signals_restore.  LuaJIT's profiler
** (jit.p) samples with SIGPROF, which the kernel hands to any thread, and
** a sample landing inside oneDNN's JIT kernels corrupted the heap (issue
** 26: an abort or a segfault in free, 3 runs of 3).  Held, a sample waits
** for the call's end; OpenMP's threads, started inside such a call, keep
** it held for good (a thread inherits its creator's mask). */
DL_HIDDEN void signals_hold_prof(sigset_t *old);
DL_HIDDEN void signals_restore(const sigset_t *old);

/* Elements below which ops stay on one thread. */
enum { PAR_GRAIN = 32768 };

/* -- Views without autograd (core/view.c); the public dl_* versions in
** autograd/grad_view.c run them with grad mode off, then record. */

DL_HIDDEN dl_tensor *fw_view(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_reshape(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_transpose(const dl_tensor *t, int d0, int d1);
DL_HIDDEN dl_tensor *fw_permute(const dl_tensor *t, const int *perm, int
    ndim);
DL_HIDDEN dl_tensor *fw_narrow(const dl_tensor *t, int dim, int64_t start,
    int64_t length);
DL_HIDDEN dl_tensor *fw_select(const dl_tensor *t, int dim, int64_t index);
DL_HIDDEN dl_tensor *fw_squeeze(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_squeeze_all(const dl_tensor *t);
DL_HIDDEN dl_tensor *fw_unsqueeze(const dl_tensor *t, int dim);
DL_HIDDEN dl_tensor *fw_expand(const dl_tensor *t, const int64_t *shape, int
    ndim);
DL_HIDDEN dl_tensor *fw_flatten(const dl_tensor *t, int start_dim, int
    end_dim);
DL_HIDDEN dl_tensor *fw_as_strided(const dl_tensor *t, const int64_t *shape,
    const int64_t *strides, int ndim, int64_t offset);

#endif
