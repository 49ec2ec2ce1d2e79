/* nccl.c -- the NCCL transport from C: the unique id through the store, calls into libddplua_cuda.so. */
/*
** libddplua.so links neither CUDA nor NCCL: the dlc_nccl_* launchers of
** runtime/cuda/kernels/nccl.cu are found in the library's launcher table on first use,
** and nccl.cu itself dlopens libnccl.so.2.  So without a driver, without
** libddplua_cuda.so or without NCCL, everything here still loads and
** nccl_new fails with a message that says which is missing.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "core/internal.h"
#include "dist/nccl.h"

enum { ID_BYTES = 128 };  /* NCCL_UNIQUE_ID_BYTES */

typedef struct dlc_nccl dlc_nccl;

/* -- The launchers ------------------------------------------------------- */

#define DLC_FNS(X)                                                            \
  X(get_id, int, (void *id, size_t idlen, char *err, size_t errlen))          \
  X(version, int, (int *version, char *err, size_t errlen))                   \
  X(init, int, (dlc_nccl **out, int device, int rank, int world,             \
                const void *id, size_t idlen, char *err, size_t errlen))      \
  X(destroy, void, (dlc_nccl *c))                                             \
  X(all_reduce, int, (dlc_nccl *c, void *out, const void *in, int64_t n,      \
                      int dtype, int op, void *stream, char *err,             \
                      size_t errlen))                                         \
  X(broadcast, int, (dlc_nccl *c, void *out, const void *in, int64_t nbytes,  \
                     int root, void *stream, char *err, size_t errlen))       \
  X(all_gather, int, (dlc_nccl *c, void *out, const void *in, int64_t nbytes, \
                      void *stream, char *err, size_t errlen))                \
  X(reduce_scatter, int, (dlc_nccl *c, void *out, const void *in, int64_t n,  \
                          int dtype, int op, void *stream, char *err,         \
                          size_t errlen))                                     \
  X(send, int, (dlc_nccl *c, const void *buf, int64_t nbytes, int peer,       \
                void *stream, char *err, size_t errlen))                      \
  X(recv, int, (dlc_nccl *c, void *buf, int64_t nbytes, int peer,             \
                void *stream, char *err, size_t errlen))                      \
  X(group_start, int, (dlc_nccl *c, char *err, size_t errlen))                \
  X(group_end, int, (dlc_nccl *c, char *err, size_t errlen))                  \
  X(stream_wait, int, (dlc_nccl *c, void *stream, char *err, size_t errlen))  \
  X(wait, int, (dlc_nccl *c, double timeout_s, char *err, size_t errlen))     \
  X(alloc, int, (int device, int64_t nbytes, void **out, char *err,           \
                 size_t errlen))                                              \
  X(free, int, (int device, void *p, char *err, size_t errlen))               \
  X(copy, int, (int device, void *dst, const void *src, int64_t nbytes,       \
                char *err, size_t errlen))

/* Written once under dlc_once, read-only afterwards. */
static struct {
#define X(name, ret, args) ret(*name) args;
  DLC_FNS(X)
#undef X
  const char *why;  /* NULL when all were found */
} dlc;

static pthread_once_t dlc_once = PTHREAD_ONCE_INIT;
static char dlc_why[256];

static void dlc_load(void) {
  const char *why = NULL;
  const dlc_api *api = cuda_api("nccl");
  if (!api) why = dl_last_error();
#define X(name, ret, args)                                                    \
  if (!why && !(dlc.name = api->nccl_##name))                                 \
    why = "this CUDA library has no NCCL (the CPU emulator)";
  DLC_FNS(X)
#undef X
  if (why) {
    snprintf(dlc_why, sizeof dlc_why, "%s", why);  /* why is thread-local */
    dlc.why = dlc_why;
  }
}

/* 0 once the launchers are there and a device is, else DL_EDEVICE with
** the reason ("nccl: CUDA is not available: no CUDA driver ..."). */
static int need_cuda(const char *op) {
  int n = dl_cuda_device_count();
  if (n == 0) return dl_err(EM_CUDA_UNAVAIL, op, dl_cuda_status());
  pthread_once(&dlc_once, dlc_load);
  if (dlc.why) return dl_err(EM_CUDA_UNAVAIL, op, dlc.why);
  return 0;
}

/* A launcher's code and message, as the runtime's error. */
static int pass(int rc, const char *op, int device, const char *msg) {
  switch (rc) {
    case 0: return 0;
    case DL_ENOMEM: return dl_err(EM_CUDA_OOM, op, device, msg);
    case DL_EDEVICE: return dl_err(EM_CUDA_CALL, op, device, msg);
    case DL_ESTATE: return dl_err(EM_PG_PASS, msg);
    default: return dl_err(EM_PG_BACKEND, op, msg);  /* DL_EINVAL */
  }
}

/* -- Communicators ------------------------------------------------------- */

struct nccl_comm {
  dlc_nccl *c;
  int rank, world, device;
  double timeout;
};

/* What rank 0 publishes instead of the id when it cannot make one: its
** error after a '!' (an id is exactly ID_BYTES long, a message never is),
** so the other ranks fail at once with the reason, not at their timeout.
** Keeps this rank's error: when the store fails too, its message (as a
** DL_ESTATE error, the store being the later trouble). */
static void publish_failure(dl_store *store, const char *key) {
  char msg[1100];
  int len = snprintf(msg, sizeof msg, "!%s", dl_last_error());
  if (len >= (int)sizeof msg) len = (int)sizeof msg - 1;
  if (len == ID_BYTES) {  /* msg has room: the error is under 1024 bytes */
    msg[len++] = ' ';
    msg[len] = 0;
  }
  if (dl_store_set(store, key, msg, len) != 0) dl_err(EM_PG_PASS, msg + 1);
}

/* The unique id: made by rank 0, fetched by the others. */
static int get_id(dl_store *store, const char *key, int rank, double timeout,
                  int device, char id[ID_BYTES]) {
  const char *op = "nccl";
  char err[512] = "";
  if (rank == 0) {
    int rc = dlc.get_id(id, ID_BYTES, err, sizeof err);
    if (rc) return pass(rc, op, device, err);
    return store ? dl_store_set(store, key, id, ID_BYTES) : 0;  /* no store: a world of one */
  }
  int64_t len = 0;
  char *v = dl_store_get(store, key, timeout, &len);
  if (!v) return dl_last_error_code() ? dl_last_error_code() : DL_ESTATE;
  int rc = 0;
  if (len == ID_BYTES) {
    memcpy(id, v, ID_BYTES);
  } else if (len > 0 && v[0] == '!') {
    char msg[700];
    snprintf(msg, sizeof msg, "nccl: rank 0 could not make the NCCL id: %s",
             v + 1);
    rc = dl_err(EM_PG_PASS, msg);
  } else {
    rc = dl_err(EM_PG_BACKEND, op, "the NCCL id in the store has the wrong "
                "size (another job using the same prefix?)");
  }
  dl_store_value_free(v);
  return rc;
}

DLN_API nccl_comm *nccl_new(dl_store *store, const char *prefix, int rank,
                            int world, int device, double timeout_s) {
  const char *op = "nccl";
  char key[512], id[ID_BYTES], err[512] = "";
  if (!store && world > 1) return dl_errp(EM_NULLARG, op, "store");
  if (!prefix) return dl_errp(EM_NULLARG, op, "prefix");
  if (world < 1 || rank < 0 || rank >= world)
    return dl_errp(EM_PG_BACKEND, op, "rank must be in 0..world-1, world >= 1");
  if (device < 0) return dl_errp(EM_PG_BACKEND, op, "device must be >= 0");
  double timeout = timeout_s > 0 ? timeout_s : store ? dl_store_timeout(store) : 600;
  snprintf(key, sizeof key, "%s/nccl_id", prefix);

  /* Each rank checks CUDA and NCCL itself (a rank that lacks them must
  ** not wait for an id), and rank 0 also tells the others why it failed. */
  int rc = need_cuda(op);
  if (rc == 0 && device >= dl_cuda_device_count())
    rc = dl_err(EM_CUDA_DEVICE, op, device, dl_cuda_device_count());
  if (rc == 0) {
    int v = 0;
    rc = pass(dlc.version(&v, err, sizeof err), op, device, err);
  }
  if (rc == 0) rc = get_id(store, key, rank, timeout, device, id);
  if (rc != 0) {
    if (rank == 0 && store) publish_failure(store, key);
    return NULL;
  }

  nccl_comm *n = calloc(1, sizeof *n);
  if (!n) return dl_errp(EM_PG_OS, op, "calloc", "out of memory");
  n->rank = rank;
  n->world = world;
  n->device = device;
  n->timeout = timeout;
  rc = dlc.init(&n->c, device, rank, world, id, ID_BYTES, err, sizeof err);
  if (rc) {
    free(n);
    pass(rc, op, device, err);
    return NULL;
  }
  return n;
}

DLN_API void nccl_free(nccl_comm *n) {
  if (!n) return;
  dlc.destroy(n->c);
  free(n);
}

DLN_API void nccl_set_timeout(nccl_comm *n, double timeout_s) {
  if (n && timeout_s > 0) n->timeout = timeout_s;
}

DLN_API int nccl_rank(const nccl_comm *n) { return n ? n->rank : -1; }
DLN_API int nccl_world(const nccl_comm *n) { return n ? n->world : 0; }

/* -- Collectives --------------------------------------------------------- */

/* Argument checks the launchers also make, here so the messages come in
** the runtime's words. */
static int check_reduce(const char *op, int dtype, int red) {
  if (dtype < 0 || dtype >= DL_NDTYPES) return dl_err(EM_BADDTYPE, op, dtype);
  if (red < DL_PG_SUM || red > DL_PG_PROD) return dl_err(EM_PG_OP, op, red);
  if (red == DL_PG_AVG && !dl_dtype_is_float(dtype))
    return dl_err(EM_PG_AVG, op, fmt_dtype(dtype));
  return 0;
}

#define NEED_COMM(n, op)                                                      \
  do {                                                                        \
    if (!(n)) return dl_err(EM_NULLARG, op, "comm");                          \
  } while (0)

#define NEED_COUNT(v, op, what)                                               \
  do {                                                                        \
    if ((v) < 0) return dl_err(EM_NEG_COUNT, op, what, (long long)(v));       \
  } while (0)

DLN_API int nccl_all_reduce(nccl_comm *n, void *out, const void *in, int64_t count,
                            int dtype, int op, void *stream) {
  const char *name = "nccl.all_reduce";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(count, name, "n");
  int rc = check_reduce(name, dtype, op);
  if (rc) return rc;
  return pass(dlc.all_reduce(n->c, out, in, count, dtype, op, stream, err,
                             sizeof err),
              name, n->device, err);
}

DLN_API int nccl_broadcast(nccl_comm *n, void *out, const void *in,
                           int64_t nbytes, int src, void *stream) {
  const char *name = "nccl.broadcast";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(nbytes, name, "nbytes");
  if (src < 0 || src >= n->world)
    return dl_err(EM_PG_SRC, name, n->world - 1, src);
  return pass(dlc.broadcast(n->c, out, in, nbytes, src, stream, err, sizeof err),
              name, n->device, err);
}

DLN_API int nccl_all_gather(nccl_comm *n, void *out, const void *in,
                            int64_t nbytes, void *stream) {
  const char *name = "nccl.all_gather";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(nbytes, name, "nbytes");
  return pass(dlc.all_gather(n->c, out, in, nbytes, stream, err, sizeof err),
              name, n->device, err);
}

DLN_API int nccl_reduce_scatter(nccl_comm *n, void *out, const void *in,
                                int64_t n_per_rank, int dtype, int op,
                                void *stream) {
  const char *name = "nccl.reduce_scatter";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(n_per_rank, name, "n_per_rank");
  int rc = check_reduce(name, dtype, op);
  if (rc) return rc;
  return pass(dlc.reduce_scatter(n->c, out, in, n_per_rank, dtype, op, stream,
                                 err, sizeof err),
              name, n->device, err);
}

DLN_API int nccl_send(nccl_comm *n, const void *buf, int64_t nbytes, int dst,
                      void *stream) {
  const char *name = "nccl.send";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(nbytes, name, "nbytes");
  if (dst < 0 || dst >= n->world || dst == n->rank)
    return dl_err(EM_PG_PEER, name, "dst", n->world - 1, dst);
  return pass(dlc.send(n->c, buf, nbytes, dst, stream, err, sizeof err), name,
              n->device, err);
}

DLN_API int nccl_recv(nccl_comm *n, void *buf, int64_t nbytes, int src,
                      void *stream) {
  const char *name = "nccl.recv";
  char err[512] = "";
  NEED_COMM(n, name);
  NEED_COUNT(nbytes, name, "nbytes");
  if (src < 0 || src >= n->world || src == n->rank)
    return dl_err(EM_PG_PEER, name, "src", n->world - 1, src);
  return pass(dlc.recv(n->c, buf, nbytes, src, stream, err, sizeof err), name,
              n->device, err);
}

DLN_API int nccl_group_start(nccl_comm *n) {
  char err[512] = "";
  NEED_COMM(n, "nccl.group_start");
  return pass(dlc.group_start(n->c, err, sizeof err), "nccl.group_start",
              n->device, err);
}

DLN_API int nccl_group_end(nccl_comm *n) {
  char err[512] = "";
  NEED_COMM(n, "nccl.group_end");
  return pass(dlc.group_end(n->c, err, sizeof err), "nccl.group_end",
              n->device, err);
}

/* -- Waiting ------------------------------------------------------------- */

DLN_API int nccl_stream_wait(nccl_comm *n, void *stream) {
  char err[512] = "";
  NEED_COMM(n, "nccl.stream_wait");
  return pass(dlc.stream_wait(n->c, stream, err, sizeof err),
              "nccl.stream_wait", n->device, err);
}

DLN_API int nccl_wait(nccl_comm *n) {
  char err[512] = "";
  NEED_COMM(n, "nccl.wait");
  return pass(dlc.wait(n->c, n->timeout, err, sizeof err), "nccl.wait",
              n->device, err);
}

/* -- Versions and test memory -------------------------------------------- */

DLN_API int nccl_version(void) {
  char err[512] = "";
  int v = 0, rc = need_cuda("nccl");
  if (rc) return rc;
  rc = dlc.version(&v, err, sizeof err);
  return rc ? pass(rc, "nccl", 0, err) : v;
}

DLN_API void *nccl_dev_alloc(int device, int64_t nbytes) {
  char err[512] = "";
  void *p = NULL;
  if (need_cuda("nccl.dev_alloc")) return NULL;
  int rc = dlc.alloc(device, nbytes, &p, err, sizeof err);
  if (rc) {
    pass(rc, "nccl.dev_alloc", device, err);
    return NULL;
  }
  return p;
}

DLN_API int nccl_dev_free(int device, void *p) {
  char err[512] = "";
  if (!p) return 0;
  int rc = need_cuda("nccl.dev_free");
  if (rc) return rc;
  return pass(dlc.free(device, p, err, sizeof err), "nccl.dev_free", device,
              err);
}

DLN_API int nccl_dev_copy(int device, void *dst, const void *src, int64_t nbytes) {
  char err[512] = "";
  int rc = need_cuda("nccl.dev_copy");
  if (rc) return rc;
  return pass(dlc.copy(device, dst, src, nbytes, err, sizeof err),
              "nccl.dev_copy", device, err);
}
