/*
** pg.h -- process groups: the backend vtable (shm now; Gloo, NCCL later)
** behind the dl_pg_* calls of ddplua.h.
*/
#ifndef DL_PG_H
#define DL_PG_H

#include "internal.h"

typedef struct pg_ops {
  const char *name;
  /* t: contiguous CPU tensor; op already checked against the dtype. */
  int (*all_reduce)(void *impl, dl_tensor *t, int op);
  int (*broadcast)(void *impl, dl_tensor *t, int src);
  /* out: contiguous, world * numel(t) elements of t's dtype. */
  int (*all_gather)(void *impl, dl_tensor *out, const dl_tensor *t);
  int (*barrier)(void *impl);
  void (*free)(void *impl);
} pg_ops;

struct dl_pg {
  const pg_ops *ops;
  void *impl;
  int rank, world;
};

/* The shared-memory backend (shm.c); NULL with the error set. */
DL_HIDDEN void *shm_new(dl_store *store, int rank, int world,
                        const char *job_id, double timeout_s);
extern DL_HIDDEN const pg_ops shm_ops;

#endif
