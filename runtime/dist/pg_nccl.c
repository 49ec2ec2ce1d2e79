/*
** dist/pg_nccl.c -- the "nccl" process-group backend: pg.h's vtable over
** nccl.c's communicator, on CUDA tensors of one device (pg.c stages the
** others there).
**
** Each call queues its collective on the communicator's stream after the
** work already on the legacy default stream (where the runtime's kernels
** run: nccl.cu records an event there and the NCCL stream waits on it),
** then blocks the host until it is done: nccl_wait bounds that by the
** group's timeout and aborts the communicator on a timeout or a dead peer,
** so a hung job ends with an error instead of waiting forever.  The
** asynchronous all-reduce (the DDP reducer's) runs on pg.c's thread, so
** backward still overlaps the communication; the calls queued there
** together (buckets that became ready at once, the last ones at the end
** of backward) go as one NCCL group with one wait.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "dist/nccl.h"
#include "dist/pg.h"

typedef struct npg {
  nccl_comm *c;
  int device;
  double timeout;
} npg;

static void *ptr_of(const dl_tensor *t) { return tensor_first((dl_tensor *)t); }

static int done(npg *g, int rc) { return rc ? rc : nccl_wait(g->c); }

static int n_all_reduce(void *impl, dl_tensor *t, int op) {
  npg *g = impl;
  return done(g, nccl_all_reduce(g->c, ptr_of(t), ptr_of(t), dl_tensor_numel(t), t->dtype, op,
                                 NULL));
}

static int n_broadcast(void *impl, dl_tensor *t, int src) {
  npg *g = impl;
  int64_t nb = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  return done(g, nccl_broadcast(g->c, ptr_of(t), ptr_of(t), nb, src, NULL));
}

static int n_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  npg *g = impl;
  int64_t nb = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  return done(g, nccl_all_gather(g->c, ptr_of(out), ptr_of(t), nb, NULL));
}

static int n_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  npg *g = impl;
  return done(g, nccl_reduce_scatter(g->c, ptr_of(out), ptr_of(t), dl_tensor_numel(out),
                                     t->dtype, op, NULL));
}

static int n_send(void *impl, const dl_tensor *t, int dst) {
  npg *g = impl;
  int64_t nb = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  return done(g, nccl_send(g->c, ptr_of(t), nb, dst, NULL));
}

static int n_recv(void *impl, dl_tensor *t, int src) {
  npg *g = impl;
  int64_t nb = dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
  return done(g, nccl_recv(g->c, ptr_of(t), nb, src, NULL));
}

/* A one-element all-reduce: returns once every rank reached it. */
static int n_barrier(void *impl) {
  npg *g = impl;
  int64_t one = 1;
  dl_tensor *t = tensor_new_on(g->device, DL_FLOAT32, &one, 1);
  if (!t) return -1;
  int rc = dl_fill_(t, 0);
  if (!rc) rc = n_all_reduce(impl, t, DL_PG_SUM);
  dl_tensor_release(t);
  return rc;
}

static void n_set_timeout(void *impl, double s) {
  npg *g = impl;
  g->timeout = s;
  nccl_set_timeout(g->c, s);
}

static void n_free(void *impl) {
  npg *g = impl;
  if (!g) return;
  nccl_free(g->c);
  free(g);
}

/* The reducer's buckets queued together: one NCCL group, one wait. */
static int n_all_reduce_many(void *impl, dl_tensor *const *ts, const int *ops, int n) {
  npg *g = impl;
  int rc = nccl_group_start(g->c);
  if (rc) return rc;
  for (int i = 0; !rc && i < n; i++)
    rc = nccl_all_reduce(g->c, ptr_of(ts[i]), ptr_of(ts[i]), dl_tensor_numel(ts[i]), ts[i]->dtype,
                         ops[i], NULL);
  /* the started group is ended also after an error inside it */
  int rc2 = nccl_group_end(g->c);
  return done(g, rc ? rc : rc2);
}

static const pg_ops nccl_pg_ops = {
  "nccl", n_all_reduce, n_broadcast, n_all_gather, n_reduce_scatter,
  n_send, n_recv, n_barrier, n_set_timeout, n_free, n_all_reduce_many,
  NULL  /* all_gather_inplace: from a copy of this rank's block */
};

DL_HIDDEN dl_pg *nccl_pg_new(dl_store *store, int rank, int world, int device, double timeout_s) {
  static int groups;  /* every rank makes its groups in the same order */
  char prefix[64];
  if (world > 1 && !store) return dl_errp(EM_PG_BACKEND, "dl_pg_new", "a store is needed for world > 1");
  if (strstr(dl_cuda_status(), "emulated"))
    return dl_errp(EM_PG_BACKEND, "dl_pg_new(nccl)",
                   "the CUDA emulator (DDPLUA_CUDA_EMU) has no NCCL; use the cpu backend, "
                   "which stages CUDA tensors through host memory");
  snprintf(prefix, sizeof prefix, "ddp/nccl/%d", groups++);
  npg *g = calloc(1, sizeof *g);
  if (!g) return dl_errp(EM_PG_OS, "nccl", "calloc", "out of memory");
  g->device = device;
  g->timeout = timeout_s;
  if (!(g->c = nccl_new(store, prefix, rank, world, device, timeout_s))) {
    free(g);
    return NULL;
  }
  dl_pg *pg = pg_wrap(&nccl_pg_ops, g, rank, world, timeout_s);
  if (pg) pg->device = device;
  return pg;
}
