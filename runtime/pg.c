/*
** pg.c -- process groups: argument checks and the dispatch of dl_pg_* to
** a backend's vtable (pg.h); the backends (shm.c) see contiguous CPU
** tensors only.
*/
#include <stdlib.h>
#include <string.h>

#include "pg.h"

DL_API dl_pg *dl_pg_shm_new(dl_store *store, int rank, int world,
                            const char *job_id, double timeout_s) {
  void *impl = shm_new(store, rank, world, job_id, timeout_s);
  if (!impl) return NULL;
  dl_pg *pg = calloc(1, sizeof *pg);
  if (!pg) {
    shm_ops.free(impl);
    return dl_errp(EM_PG_OS, "dl_pg_shm_new", "calloc", "out of memory");
  }
  pg->ops = &shm_ops;
  pg->impl = impl;
  pg->rank = rank;
  pg->world = world;
  return pg;
}

DL_API void dl_pg_free(dl_pg *pg) {
  if (!pg) return;
  pg->ops->free(pg->impl);
  free(pg);
}

DL_API int dl_pg_rank(const dl_pg *pg) { return pg->rank; }
DL_API int dl_pg_world_size(const dl_pg *pg) { return pg->world; }

static int check_op(const char *name, const dl_tensor *t, int op) {
  if (op < DL_RED_SUM || op > DL_RED_PROD) return dl_err(EM_PG_OP, name, op);
  if (op == DL_RED_AVG && (is_int_dtype(t->dtype) || t->dtype == DL_BOOL))
    return dl_err(EM_PG_AVG, name, fmt_dtype(t->dtype));
  return 0;
}

/* Runs an in-place collective on t, through a contiguous copy when t is
** not contiguous. */
static int inplace(dl_pg *pg, const char *name, dl_tensor *t, int arg,
                   int (*fn)(void *, dl_tensor *, int)) {
  if (check_cpu(name, t)) return -1;
  if (dl_tensor_is_contiguous(t)) return fn(pg->impl, t, arg);
  dl_tensor *c = dl_contiguous(t);
  if (!c) return -1;
  int rc = fn(pg->impl, c, arg);
  if (rc == 0) rc = dl_copy_(t, c);
  dl_tensor_release(c);
  return rc;
}

DL_API int dl_pg_all_reduce(dl_pg *pg, dl_tensor *t, int op) {
  if (check_cpu("all_reduce", t) || check_op("all_reduce", t, op)) return -1;
  return inplace(pg, "all_reduce", t, op, pg->ops->all_reduce);
}

DL_API int dl_pg_broadcast(dl_pg *pg, dl_tensor *t, int src) {
  if (src < 0 || src >= pg->world) return dl_err(EM_PG_SRC, "broadcast", pg->world - 1, src);
  return inplace(pg, "broadcast", t, src, pg->ops->broadcast);
}

DL_API dl_tensor *dl_pg_all_gather(dl_pg *pg, const dl_tensor *t) {
  if (check_cpu("all_gather", t)) return NULL;
  int64_t shape[DL_MAX_DIMS];
  int nd = t->ndim ? t->ndim : 1;
  if (t->ndim) memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
  else shape[0] = 1;
  shape[0] *= pg->world;
  dl_tensor *c = dl_contiguous(t);
  if (!c) return NULL;
  dl_tensor *out = tensor_new(t->dtype, shape, nd);
  if (!out || pg->ops->all_gather(pg->impl, out, c)) {
    dl_tensor_release(c);
    if (out) dl_tensor_release(out);
    return NULL;
  }
  dl_tensor_release(c);
  return out;
}

/* All-reduces a copy and keeps this rank's slice: the simple way, at the
** cost of moving world times the data of a ring reduce-scatter. */
DL_API dl_tensor *dl_pg_reduce_scatter(dl_pg *pg, const dl_tensor *t, int op) {
  if (check_cpu("reduce_scatter", t) || check_op("reduce_scatter", t, op)) return NULL;
  if (t->ndim == 0) return dl_errp(EM_PG_SCALAR, "reduce_scatter");
  if (t->shape[0] % pg->world)
    return dl_errp(EM_PG_DIVIDE, "reduce_scatter", fmt_tshape(t), pg->world);
  int64_t shape[DL_MAX_DIMS];
  memcpy(shape, t->shape, sizeof(int64_t) * t->ndim);
  dl_tensor *all = tensor_new(t->dtype, shape, t->ndim);
  if (!all) return NULL;
  if (dl_copy_(all, t) || pg->ops->all_reduce(pg->impl, all, op)) {
    dl_tensor_release(all);
    return NULL;
  }
  shape[0] /= pg->world;
  dl_tensor *out = tensor_new(t->dtype, shape, t->ndim);
  if (!out) { dl_tensor_release(all); return NULL; }
  size_t nb = (size_t)shape_numel(shape, t->ndim) * dl_dtype_sizes[t->dtype];
  memcpy(tensor_first(out), tensor_first(all) + nb * pg->rank, nb);
  dl_tensor_release(all);
  return out;
}

DL_API int dl_pg_barrier(dl_pg *pg) { return pg->ops->barrier(pg->impl); }
