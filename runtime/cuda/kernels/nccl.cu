/* nccl.cu -- the NCCL transport: communicators and collectives on device pointers. */
/*
** NCCL is loaded at run time with dlopen ($DDPLUA_NCCL_LIB, else
** "libnccl.so.2"), so libddplua_cuda.so loads, and its other launchers
** work, on machines without NCCL; nccl.h is read for its types only.
**
** A communicator owns a non-blocking CUDA stream.  Each collective first
** makes that stream wait on an event recorded on the caller's stream (so
** it runs after the compute that produced its input), then records an
** event of its own: dlc_nccl_stream_wait orders a caller's stream after it
** on the device, dlc_nccl_wait blocks the host with a timeout.  Nothing
** here synchronizes a whole device.
**
** Every launcher returns 0, or a negative DL_E* code with the message in
** (err, errlen).  A timeout or an asynchronous NCCL error aborts the
** communicator; every later call on it fails at once with that reason.
** One thread at a time per communicator.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "ddplua.h"
#include "trace.cuh"

#define DLC_API extern "C" __attribute__((visibility("hidden")))  /* in api.cu's table only */

/* -- Loading NCCL -------------------------------------------------------- */

/* Function pointer types straight from nccl.h: decltype does not use the
** functions, so nothing links to libnccl. */
#define NCCL_FNS(X)                                                          \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy)                  \
  X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString)            \
  X(ncclAllReduce) X(ncclBroadcast) X(ncclAllGather) X(ncclReduceScatter)    \
  X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

#define X(f) typedef decltype(&f) f##_fn;
NCCL_FNS(X) X(ncclGetVersion) X(ncclGetLastError)
#undef X

static struct {
#define X(f) f##_fn f;
  NCCL_FNS(X)
  X(ncclGetVersion)    /* optional */
  X(ncclGetLastError)  /* optional (2.13+) */
#undef X
  int version;   /* NCCL_VERSION_CODE of the loaded library, 0 if unknown */
  int ok;
  char why[512]; /* why loading failed */
} nc;

static pthread_once_t nc_once = PTHREAD_ONCE_INIT;

static void nc_load(void) {
  const char *env = getenv("DDPLUA_NCCL_LIB");
  const char *path = env && *env ? env : "libnccl.so.2";
  /* RTLD_LOCAL: a PyTorch or another NCCL in the process keeps its own. */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(nc.why, sizeof nc.why,
             "NCCL is not available: cannot load %s%s: %s (install NCCL "
             "2.10 or newer, or set DDPLUA_NCCL_LIB to its libnccl.so.2)",
             path, env && *env ? " (from DDPLUA_NCCL_LIB)" : "",
             e ? e : "unknown dlopen error");
    return;
  }
#define X(f)                                                                 \
  nc.f = (f##_fn)dlsym(h, #f);                                       \
  if (!nc.f) {                                                               \
    snprintf(nc.why, sizeof nc.why, "%s lacks %s (NCCL older than 2.10?)",   \
             path, #f);                                                      \
    dlclose(h);                                                              \
    return;                                                                  \
  }
  NCCL_FNS(X)
#undef X
  nc.ncclGetVersion = (ncclGetVersion_fn)dlsym(h, "ncclGetVersion");
  nc.ncclGetLastError =
      (ncclGetLastError_fn)dlsym(h, "ncclGetLastError");
  if (nc.ncclGetVersion && nc.ncclGetVersion(&nc.version) != ncclSuccess)
    nc.version = 0;
  /* ncclAvg and ncclBfloat16 arrived in 2.10 (version code 21000). */
  if (nc.version && nc.version < 21000) {
    snprintf(nc.why, sizeof nc.why,
             "%s is NCCL version code %d; ddplua needs NCCL 2.10 or newer",
             path, nc.version);
    return;  /* h stays open: harmless, and another thread may hold it */
  }
  nc.ok = 1;
}

/* -- Errors -------------------------------------------------------------- */

__attribute__((format(printf, 4, 5)))
static int fail(int code, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

static int nc_ready(char *err, size_t errlen) {
  pthread_once(&nc_once, nc_load);
  return nc.ok ? 0 : fail(DL_EDEVICE, err, errlen, "%s", nc.why);
}

static int cuda_fail(cudaError_t e, const char *what, char *err,
                     size_t errlen) {
  return fail(e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_EDEVICE, err,
              errlen, "%s: %s: %s", what, cudaGetErrorName(e),
              cudaGetErrorString(e));
}

/* "ncclAllReduce: invalid argument (...): <NCCL's last error>". */
static int nccl_fail(ncclResult_t r, const char *what, char *err,
                     size_t errlen) {
  const char *last = nc.ncclGetLastError ? nc.ncclGetLastError(NULL) : NULL;
  int code = r == ncclInvalidArgument || r == ncclInvalidUsage ? DL_EINVAL
                                                               : DL_EDEVICE;
  return fail(code, err, errlen, "%s: %s%s%s", what, nc.ncclGetErrorString(r),
              last && *last ? ": " : "", last && *last ? last : "");
}

/* -- Communicators ------------------------------------------------------- */

struct dlc_nccl {
  ncclComm_t comm;        /* NULL once aborted or destroyed */
  cudaStream_t stream;    /* non-blocking: never waits on the legacy stream */
  cudaEvent_t before;     /* recorded on the caller's stream */
  cudaEvent_t done;       /* recorded on `stream` after each collective */
  int device, rank, world;
  int group;              /* depth of dlc_nccl_group_start */
  long long seq;          /* collectives issued, for messages */
  long long span;         /* the trace's span of the call or group (trace.cuh) */
  char broken[512];       /* the reason the communicator was aborted */
};

/* Makes comm's device current for one call and puts the caller's back. */
struct device_guard {
  int prev;
  cudaError_t e;
  explicit device_guard(int device) : prev(-1) {
    e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != device) e = cudaSetDevice(device);
  }
  ~device_guard() {
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev)
      cudaSetDevice(prev);
  }
};

static void comm_abort(dlc_nccl *c) {
  if (c->comm) nc.ncclCommAbort(c->comm);
  c->comm = NULL;
}

static int comm_usable(dlc_nccl *c, const char *op, char *err,
                       size_t errlen) {
  if (!c) return fail(DL_EINVAL, err, errlen, "nccl %s: no communicator", op);
  if (!c->comm)
    return fail(DL_ESTATE, err, errlen,
                "nccl %s: the communicator was aborted after an earlier "
                "error (%s)",
                op, c->broken[0] ? c->broken : "destroyed");
  return 0;
}

/* Writes NCCL_UNIQUE_ID_BYTES (128) bytes into id; only rank 0 calls it,
** and the others get the bytes through the store. */
DLC_API int dlc_nccl_get_id(void *id, size_t idlen, char *err, size_t errlen) {
  if (!id || idlen != sizeof(ncclUniqueId))
    return fail(DL_EINVAL, err, errlen,
                "dlc_nccl_get_id: need a %d-byte buffer, got %zu",
                (int)sizeof(ncclUniqueId), idlen);
  int rc = nc_ready(err, errlen);
  if (rc) return rc;
  ncclUniqueId u;
  ncclResult_t r = nc.ncclGetUniqueId(&u);
  if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId", err, errlen);
  memcpy(id, &u, sizeof u);
  return 0;
}

/* NCCL's version code (22809 = 2.28.9), 0 when it does not say; loads
** NCCL, so this is also "is NCCL there?". */
DLC_API int dlc_nccl_version(int *version, char *err, size_t errlen) {
  if (!version) return fail(DL_EINVAL, err, errlen, "dlc_nccl_version: NULL");
  *version = 0;
  int rc = nc_ready(err, errlen);
  if (rc) return rc;
  *version = nc.version;
  return 0;
}

/* Joins the communicator of `world` ranks named by id (every rank passes
** the same 128 bytes).  Blocks until all ranks have joined, unbounded: a
** rank that never comes hangs the others here (a launcher's watchdog ends
** such a job; a non-blocking init, polled like dlc_nccl_wait, would not). */
DLC_API int dlc_nccl_init(dlc_nccl **out, int device, int rank, int world,
                          const void *id, size_t idlen, char *err,
                          size_t errlen) {
  if (!out) return fail(DL_EINVAL, err, errlen, "dlc_nccl_init: out is NULL");
  *out = NULL;
  if (!id || idlen != sizeof(ncclUniqueId))
    return fail(DL_EINVAL, err, errlen,
                "dlc_nccl_init: the unique id must be %d bytes, got %zu",
                (int)sizeof(ncclUniqueId), idlen);
  if (world < 1 || rank < 0 || rank >= world)
    return fail(DL_EINVAL, err, errlen,
                "dlc_nccl_init: rank %d is not in 0..%d", rank, world - 1);
  int rc = nc_ready(err, errlen);
  if (rc) return rc;
  dlc_nccl *c = (dlc_nccl *)calloc(1, sizeof *c);
  if (!c) return fail(DL_ENOMEM, err, errlen, "dlc_nccl_init: out of memory");
  c->device = device;
  c->rank = rank;
  c->world = world;
  c->span = -1;
  {
    device_guard g(device);
    cudaError_t e = g.e;
    const char *what = "cudaSetDevice";
    ncclUniqueId u;
    ncclResult_t r;
    if (e != cudaSuccess) goto cuda_error;
    what = "cudaStreamCreateWithFlags";
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) goto cuda_error;
    what = "cudaEventCreateWithFlags";
    e = cudaEventCreateWithFlags(&c->before, cudaEventDisableTiming);
    if (e != cudaSuccess) goto cuda_error;
    e = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (e != cudaSuccess) goto cuda_error;
    memcpy(&u, id, sizeof u);
    r = nc.ncclCommInitRank(&c->comm, world, u, rank);
    if (r != ncclSuccess) {
      c->comm = NULL;
      rc = nccl_fail(r, "ncclCommInitRank", err, errlen);
      goto fail;
    }
    *out = c;
    return 0;
  cuda_error:
    rc = cuda_fail(e, what, err, errlen);
  fail:
    if (c->done) cudaEventDestroy(c->done);
    if (c->before) cudaEventDestroy(c->before);
    if (c->stream) cudaStreamDestroy(c->stream);
  }
  free(c);
  return rc;
}

/* Waits for nothing: a communicator still running work is aborted (after
** a timeout that is what is left to do), otherwise destroyed. */
DLC_API void dlc_nccl_destroy(dlc_nccl *c) {
  if (!c) return;
  device_guard g(c->device);
  if (c->comm) {
    if (cudaEventQuery(c->done) == cudaSuccess)
      nc.ncclCommDestroy(c->comm);
    else
      nc.ncclCommAbort(c->comm);
  }
  cudaEventDestroy(c->done);
  cudaEventDestroy(c->before);
  cudaStreamDestroy(c->stream);
  free(c);
}

/* -- Collectives --------------------------------------------------------- */

static int nccl_type(int dtype, ncclDataType_t *t) {
  switch (dtype) {
    case DL_FLOAT32: *t = ncclFloat32; return 0;
    case DL_FLOAT64: *t = ncclFloat64; return 0;
    case DL_INT32: *t = ncclInt32; return 0;
    case DL_INT64: *t = ncclInt64; return 0;
    case DL_UINT8: *t = ncclUint8; return 0;
    case DL_BOOL: *t = ncclUint8; return 0;  /* 0 or 1 in one byte */
    case DL_BFLOAT16: *t = ncclBfloat16; return 0;
    case DL_FLOAT16: *t = ncclFloat16; return 0;
  }
  return -1;
}

/* bool: sum and max are "or", prod and min are "and" (as the CPU groups);
** avg is for floating dtypes only. */
static int nccl_op(int dtype, int op, ncclRedOp_t *o, char *err,
                   size_t errlen) {
  int is_float = dtype == DL_FLOAT32 || dtype == DL_FLOAT64 ||
                 dtype == DL_BFLOAT16 || dtype == DL_FLOAT16;
  switch (op) {
    case DL_PG_SUM: *o = dtype == DL_BOOL ? ncclMax : ncclSum; return 0;
    case DL_PG_MAX: *o = ncclMax; return 0;
    case DL_PG_MIN: *o = ncclMin; return 0;
    case DL_PG_PROD: *o = dtype == DL_BOOL ? ncclMin : ncclProd; return 0;
    case DL_PG_AVG:
      if (!is_float)
        return fail(DL_EDTYPE, err, errlen,
                    "nccl: avg needs a floating dtype, got dtype %d", dtype);
      *o = ncclAvg;
      return 0;
  }
  return fail(DL_EINVAL, err, errlen, "nccl: unknown reduce op %d", op);
}

/* What every collective does around its NCCL call.  begin: checks, the
** device, and the wait on the caller's stream; end: the done event (at
** group end when inside a group, where NCCL launches the work).  While a
** trace is on, the call's span on the stream (a group's: one span from
** group_start to group_end, where its work is launched). */
struct call {
  dlc_nccl *c;
  const char *op;
  char *err;
  size_t errlen;
  device_guard g;
  call(dlc_nccl *c_, const char *op_, char *e, size_t el)
      : c(c_), op(op_), err(e), errlen(el), g(c_ ? c_->device : 0) {}
  int begin(void *stream) {
    int rc = comm_usable(c, op, err, errlen);
    if (rc) return rc;
    if (g.e != cudaSuccess) return cuda_fail(g.e, "cudaSetDevice", err, errlen);
    cudaError_t e = cudaEventRecord(c->before, (cudaStream_t)stream);
    if (e != cudaSuccess)
      return cuda_fail(e, "cudaEventRecord (caller's stream)", err, errlen);
    e = cudaStreamWaitEvent(c->stream, c->before, 0);
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamWaitEvent", err, errlen);
    c->seq++;
    if (dlc_tr_on() && !c->group) {
      char name[32];
      snprintf(name, sizeof name, "nccl %s", op);
      c->span = dlc_tr_begin(c->device, DLC_TR_NCCL, c->stream, name);
    }
    return 0;
  }
  int end(ncclResult_t r, const char *what) {
    if (!c->group) {
      dlc_tr_end(c->span, c->stream);
      c->span = -1;
    }
    if (r != ncclSuccess) return nccl_fail(r, what, err, errlen);
    if (c->group) return 0;
    cudaError_t e = cudaEventRecord(c->done, c->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaEventRecord", err, errlen);
  }
};

static int bad_count(int64_t n, const char *op, char *err, size_t errlen) {
  return fail(DL_EINVAL, err, errlen, "nccl %s: negative count %lld", op,
              (long long)n);
}

/* out = reduction of every rank's in, n elements (out may equal in). */
DLC_API int dlc_nccl_all_reduce(dlc_nccl *c, void *out, const void *in,
                                int64_t n, int dtype, int op, void *stream,
                                char *err, size_t errlen) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (n < 0) return bad_count(n, "all_reduce", err, errlen);
  if (nccl_type(dtype, &t))
    return fail(DL_EDTYPE, err, errlen, "nccl all_reduce: unknown dtype %d",
                dtype);
  int rc = nccl_op(dtype, op, &o, err, errlen);
  if (rc) return rc;
  call k(c, "all_reduce", err, errlen);
  if ((rc = k.begin(stream))) return rc;
  return k.end(nc.ncclAllReduce(in, out, (size_t)n, t, o, c->comm, c->stream),
               "ncclAllReduce");
}

/* out on every rank = in of rank root, nbytes (out may equal in). */
DLC_API int dlc_nccl_broadcast(dlc_nccl *c, void *out, const void *in,
                               int64_t nbytes, int root, void *stream,
                               char *err, size_t errlen) {
  if (nbytes < 0) return bad_count(nbytes, "broadcast", err, errlen);
  if (c && (root < 0 || root >= c->world))
    return fail(DL_EINVAL, err, errlen, "nccl broadcast: root %d not in 0..%d",
                root, c->world - 1);
  call k(c, "broadcast", err, errlen);
  int rc = k.begin(stream);
  if (rc) return rc;
  return k.end(nc.ncclBroadcast(in, out, (size_t)nbytes, ncclUint8, root,
                                c->comm, c->stream),
               "ncclBroadcast");
}

/* out: world * nbytes, every rank's in in rank order (in may be the
** rank's own block of out). */
DLC_API int dlc_nccl_all_gather(dlc_nccl *c, void *out, const void *in,
                                int64_t nbytes, void *stream, char *err,
                                size_t errlen) {
  if (nbytes < 0) return bad_count(nbytes, "all_gather", err, errlen);
  call k(c, "all_gather", err, errlen);
  int rc = k.begin(stream);
  if (rc) return rc;
  return k.end(nc.ncclAllGather(in, out, (size_t)nbytes, ncclUint8, c->comm,
                                c->stream),
               "ncclAllGather");
}

/* in: world * n elements; out (n elements) gets block `rank` of the
** reduction. */
DLC_API int dlc_nccl_reduce_scatter(dlc_nccl *c, void *out, const void *in,
                                    int64_t n, int dtype, int op,
                                    void *stream, char *err, size_t errlen) {
  ncclDataType_t t;
  ncclRedOp_t o;
  if (n < 0) return bad_count(n, "reduce_scatter", err, errlen);
  if (nccl_type(dtype, &t))
    return fail(DL_EDTYPE, err, errlen,
                "nccl reduce_scatter: unknown dtype %d", dtype);
  int rc = nccl_op(dtype, op, &o, err, errlen);
  if (rc) return rc;
  call k(c, "reduce_scatter", err, errlen);
  if ((rc = k.begin(stream))) return rc;
  return k.end(nc.ncclReduceScatter(in, out, (size_t)n, t, o, c->comm,
                                    c->stream),
               "ncclReduceScatter");
}

static int p2p(dlc_nccl *c, int send, void *buf, int64_t nbytes, int peer,
               void *stream, char *err, size_t errlen) {
  const char *op = send ? "send" : "recv";
  if (nbytes < 0) return bad_count(nbytes, op, err, errlen);
  if (c && (peer < 0 || peer >= c->world || peer == c->rank))
    return fail(DL_EINVAL, err, errlen,
                "nccl %s: peer must be another rank in 0..%d, got %d", op,
                c->world - 1, peer);
  call k(c, op, err, errlen);
  int rc = k.begin(stream);
  if (rc) return rc;
  ncclResult_t r =
      send ? nc.ncclSend(buf, (size_t)nbytes, ncclUint8, peer, c->comm,
                         c->stream)
           : nc.ncclRecv(buf, (size_t)nbytes, ncclUint8, peer, c->comm,
                         c->stream);
  return k.end(r, send ? "ncclSend" : "ncclRecv");
}

/* Point to point: send #k from a to b meets recv #k at b from a, with the
** same nbytes.  Two ranks that both send first must group the pair. */
DLC_API int dlc_nccl_send(dlc_nccl *c, const void *buf, int64_t nbytes,
                          int peer, void *stream, char *err, size_t errlen) {
  return p2p(c, 1, (void *)buf, nbytes, peer, stream, err, errlen);
}

DLC_API int dlc_nccl_recv(dlc_nccl *c, void *buf, int64_t nbytes, int peer,
                          void *stream, char *err, size_t errlen) {
  return p2p(c, 0, buf, nbytes, peer, stream, err, errlen);
}

/* Calls between group_start and group_end are launched together at
** group_end (as ncclGroupStart/End), which then records the done event. */
DLC_API int dlc_nccl_group_start(dlc_nccl *c, char *err, size_t errlen) {
  int rc = comm_usable(c, "group_start", err, errlen);
  if (rc) return rc;
  ncclResult_t r = nc.ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(r, "ncclGroupStart", err, errlen);
  if (c->group++ == 0 && dlc_tr_on()) c->span = dlc_tr_begin(c->device, DLC_TR_NCCL, c->stream, "nccl group");
  return 0;
}

DLC_API int dlc_nccl_group_end(dlc_nccl *c, char *err, size_t errlen) {
  if (!c || c->group <= 0)
    return fail(DL_ESTATE, err, errlen, "nccl group_end: no group_start");
  c->group--;
  /* An aborted communicator inside a group: still close NCCL's group. */
  ncclResult_t r = nc.ncclGroupEnd();
  if (c->group == 0) {
    dlc_tr_end(c->span, c->stream);
    c->span = -1;
  }
  int rc = comm_usable(c, "group_end", err, errlen);
  if (rc) return rc;
  if (r != ncclSuccess) return nccl_fail(r, "ncclGroupEnd", err, errlen);
  if (c->group) return 0;
  device_guard g(c->device);
  cudaError_t e = cudaEventRecord(c->done, c->stream);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaEventRecord", err, errlen);
}

/* -- Waiting ------------------------------------------------------------- */

/* The caller's stream waits (on the device) for every collective issued
** so far; the host does not block. */
DLC_API int dlc_nccl_stream_wait(dlc_nccl *c, void *stream, char *err,
                                 size_t errlen) {
  int rc = comm_usable(c, "stream_wait", err, errlen);
  if (rc) return rc;
  device_guard g(c->device);
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, c->done, 0);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamWaitEvent", err, errlen);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Blocks the host until every collective issued so far has finished.
** Polls the event and NCCL's asynchronous error (a peer that died, a
** network failure); either failure, or timeout_s passing (<= 0: no limit),
** aborts the communicator and says so ("... timed out after ..."). */
DLC_API int dlc_nccl_wait(dlc_nccl *c, double timeout_s, char *err,
                          size_t errlen) {
  int rc = comm_usable(c, "wait", err, errlen);
  if (rc) return rc;
  device_guard g(c->device);
  double start = now_s();
  for (long spins = 0;; spins++) {
    cudaError_t e = cudaEventQuery(c->done);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady) {
      rc = cuda_fail(e, "cudaEventQuery", c->broken, sizeof c->broken);
      comm_abort(c);
      return fail(rc, err, errlen, "nccl wait: %s", c->broken);
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = nc.ncclCommGetAsyncError(c->comm, &async);
    if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
      nccl_fail(r != ncclSuccess ? r : async,
                r != ncclSuccess ? "ncclCommGetAsyncError" : "NCCL async error",
                c->broken, sizeof c->broken);
      comm_abort(c);
      return fail(DL_ESTATE, err, errlen,
                  "nccl wait (rank %d of %d, cuda:%d): %s; communicator "
                  "aborted",
                  c->rank, c->world, c->device, c->broken);
    }
    double waited = now_s() - start;
    if (timeout_s > 0 && waited > timeout_s) {
      snprintf(c->broken, sizeof c->broken,
               "collective #%lld timed out after %g s (rank %d of %d, "
               "cuda:%d)",
               c->seq, timeout_s, c->rank, c->world, c->device);
      comm_abort(c);
      return fail(DL_ESTATE, err, errlen,
                  "nccl wait: %s; communicator aborted", c->broken);
    }
    /* Spin briefly for latency, then sleep up to 1 ms between polls. */
    if (spins < 200) {
      sched_yield();
    } else {
      struct timespec ts = {0, spins < 2000 ? 50000L : 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

/* -- Memory helpers for tests -------------------------------------------- */

/* Plain cudaMalloc/cudaFree/cudaMemcpy: for tests, not the allocator. */
DLC_API int dlc_nccl_alloc(int device, int64_t nbytes, void **out, char *err,
                           size_t errlen) {
  if (!out || nbytes < 0)
    return fail(DL_EINVAL, err, errlen, "dlc_nccl_alloc: bad argument");
  *out = NULL;
  device_guard g(device);
  if (g.e != cudaSuccess) return cuda_fail(g.e, "cudaSetDevice", err, errlen);
  cudaError_t e = cudaMalloc(out, (size_t)(nbytes ? nbytes : 1));
  if (e != cudaSuccess) {
    *out = NULL;
    return cuda_fail(e, "cudaMalloc", err, errlen);
  }
  return 0;
}

DLC_API int dlc_nccl_free(int device, void *p, char *err, size_t errlen) {
  if (!p) return 0;
  device_guard g(device);
  if (g.e != cudaSuccess) return cuda_fail(g.e, "cudaSetDevice", err, errlen);
  cudaError_t e = cudaFree(p);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaFree", err, errlen);
}

/* Either side may be host or device memory (unified addressing); on the
** legacy default stream, so it waits for that stream's work. */
DLC_API int dlc_nccl_copy(int device, void *dst, const void *src,
                          int64_t nbytes, char *err, size_t errlen) {
  if ((!dst || !src) && nbytes > 0)
    return fail(DL_EINVAL, err, errlen, "dlc_nccl_copy: NULL pointer");
  if (nbytes <= 0) return 0;
  device_guard g(device);
  if (g.e != cudaSuccess) return cuda_fail(g.e, "cudaSetDevice", err, errlen);
  cudaError_t e = cudaMemcpy(dst, src, (size_t)nbytes, cudaMemcpyDefault);
  return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpy", err, errlen);
}
