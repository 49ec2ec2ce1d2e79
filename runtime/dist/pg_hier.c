/*
** pg_hier.c -- the "hier" process-group backend for jobs spanning nodes:
** shared memory among the ranks of each node, Gloo between one leader per
** node for all-reduce and barrier (so each node sends its data over the
** network once, not once per rank), and one Gloo context among all ranks
** for the calls whose data differs per rank (broadcast, all_gather,
** reduce_scatter, send/recv).
*/
#include <stdio.h>
#include <stdlib.h>

#include "dist/pg.h"

typedef struct hier {
  void *local;    /* shm: this node's ranks */
  void *leaders;  /* gloo: local rank 0 of every node, else NULL */
  void *all;      /* gloo: every rank */
  int world;
  int64_t seq;    /* the user's calls, which the parts' messages name */
} hier;

/* Every part of call `name` reports as the user's call (#seq of this
** group), not as the step that failed: that a node-local broadcast timed
** out is the internals of an all_reduce. */
static void label(hier *h, const char *name) {
  h->seq++;
  shm_label(h->local, name, h->seq);
  if (h->leaders) gloo_pg_label(h->leaders, name, h->seq);
  gloo_pg_label(h->all, name, h->seq);
}

static int h_all_reduce(void *impl, dl_tensor *t, int op) {
  hier *h = impl;
  int sub = op == DL_PG_AVG ? DL_PG_SUM : op;
  label(h, "all_reduce");
  if (shm_ops.all_reduce(h->local, t, sub)) return -1;
  if (h->leaders && gloo_pg_ops.all_reduce(h->leaders, t, sub)) return -1;
  if (shm_ops.broadcast(h->local, t, 0)) return -1;
  if (op != DL_PG_AVG) return 0;
  dl_tensor *w = dl_scalar((double)h->world, 0);
  int rc = w ? dl_binary_(DL_DIV, t, w) : -1;
  dl_tensor_release(w);
  return rc;
}

static int h_broadcast(void *impl, dl_tensor *t, int src) {
  label(impl, "broadcast");
  return gloo_pg_ops.broadcast(((hier *)impl)->all, t, src);
}

static int h_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  label(impl, "all_gather");
  return gloo_pg_ops.all_gather(((hier *)impl)->all, out, t);
}

static int h_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  label(impl, "reduce_scatter");
  return gloo_pg_ops.reduce_scatter(((hier *)impl)->all, out, t, op);
}

static int h_send(void *impl, const dl_tensor *t, int dst) {
  return gloo_pg_ops.send(((hier *)impl)->all, t, dst);
}

static int h_recv(void *impl, dl_tensor *t, int src) {
  return gloo_pg_ops.recv(((hier *)impl)->all, t, src);
}

static int h_barrier(void *impl) {
  hier *h = impl;
  label(h, "barrier");
  if (shm_ops.barrier(h->local)) return -1;
  if (h->leaders && gloo_pg_ops.barrier(h->leaders)) return -1;
  return shm_ops.barrier(h->local);
}

static void h_set_timeout(void *impl, double s) {
  hier *h = impl;
  shm_ops.set_timeout(h->local, s);
  if (h->leaders) gloo_pg_ops.set_timeout(h->leaders, s);
  gloo_pg_ops.set_timeout(h->all, s);
}

static void h_free(void *impl) {
  hier *h = impl;
  if (!h) return;
  if (h->local) shm_ops.free(h->local);
  if (h->leaders) gloo_pg_ops.free(h->leaders);
  if (h->all) gloo_pg_ops.free(h->all);
  free(h);
}

DL_HIDDEN const pg_ops hier_ops = {
  "hier", h_all_reduce, h_broadcast, h_all_gather, h_reduce_scatter,
  h_send, h_recv, h_barrier, h_set_timeout, h_free,
  NULL,  /* all_reduce_many: one call at a time */
  NULL   /* all_gather_inplace: from a copy of this rank's block */
};

DL_HIDDEN void *hier_new(dl_store *store, int rank, int world, int local_world,
                         const char *job_id, double timeout_s) {
  static int groups;  /* same order on every rank: names the store keys */
  int k = groups++, node = rank / local_world, nnodes = world / local_world;
  char prefix[64];  /* the job's own store: keys need no job id (nodes' ids may differ) */
  hier *h = calloc(1, sizeof *h);
  if (!h) return dl_errp(EM_PG_OS, "hier", "calloc", "out of memory");
  h->world = world;
  h->local = shm_new(store, rank % local_world, local_world, job_id, node, timeout_s);
  if (!h->local) goto fail;
  snprintf(prefix, sizeof prefix, "ddp/hier/%d/all", k);
  h->all = gloo_pg_new(store, prefix, rank, world, 1, NULL, timeout_s);
  if (!h->all) goto fail;
  if (rank % local_world == 0) {
    snprintf(prefix, sizeof prefix, "ddp/hier/%d/leaders", k);
    h->leaders = gloo_pg_new(store, prefix, node, nnodes, local_world, NULL, timeout_s);
    if (!h->leaders) goto fail;
  }
  return h;
fail:
  h_free(h);
  return NULL;
}
