/*
** pg.h -- process groups: the backend vtable behind the dl_pg_* calls of
** ddplua.h.  Backends: shm (dist/pg_shm.c, the ranks of one node), gloo (pg_gloo.c
** over gloo.cc, TCP between any ranks) and hier (pg_hier.c: shm within each
** node, Gloo between one leader per node).  pg.c checks arguments, makes
** tensors contiguous and runs asynchronous calls on one thread per group.
*/
#ifndef DL_PG_H
#define DL_PG_H

#include "core/internal.h"

typedef struct pg_ops {
  const char *name;
  /* t: contiguous, on the group's device (pg->device; -1: host memory);
  ** op already checked against the dtype. */
  int (*all_reduce)(void *impl, dl_tensor *t, int op);
  int (*broadcast)(void *impl, dl_tensor *t, int src);
  /* out: contiguous, world * numel(t) elements of t's dtype. */
  int (*all_gather)(void *impl, dl_tensor *out, const dl_tensor *t);
  /* t: world * numel(out) elements; out gets this rank's reduced block. */
  int (*reduce_scatter)(void *impl, dl_tensor *out, const dl_tensor *t, int op);
  /* Point to point: sizes in bytes must agree between the two ranks. */
  int (*send)(void *impl, const dl_tensor *t, int dst);
  int (*recv)(void *impl, dl_tensor *t, int src);
  int (*barrier)(void *impl);
  void (*set_timeout)(void *impl, double seconds);
  void (*free)(void *impl);
  /* Optional (NULL: all_reduce one by one): n all-reduces at once, as one
  ** group (NCCL), for the asynchronous calls queued together. */
  int (*all_reduce_many)(void *impl, dl_tensor *const *ts, const int *ops, int n);
  /* Optional (NULL: all_gather from a copy of this rank's block): t holds
  ** world blocks, this rank's its input; every block gets its rank's. */
  int (*all_gather_inplace)(void *impl, dl_tensor *t);
} pg_ops;

typedef struct pg_queue pg_queue;

struct dl_pg {
  const pg_ops *ops;
  void *impl;
  int rank, world;
  double timeout;
  int device;    /* where the backend's tensors live: -1 host, k cuda:k (pg.c stages others) */
  pg_queue *q;   /* the asynchronous calls' thread, started on first use */
  /* the flight recorder's (dist/flight.c): this group's number (creation
  ** order: 0 is the world) and calls so far; the note and DDP bucket the
  ** next call records (set by the reducer, taken by that call) */
  int fr_group;
  int64_t fr_calls;
  int fr_bucket;
  const char *fr_note;
};

/* The reducer's label for its next asynchronous call on pg. */
DL_HIDDEN void pg_flight_note(dl_pg *pg, int bucket, const char *note);

DL_HIDDEN dl_pg *pg_wrap(const pg_ops *ops, void *impl, int rank, int world, double timeout);

/* dist/pg_shm.c; NULL with the error set.  node names the arena and its keys, so
** the groups of several nodes sharing one store never meet. */
DL_HIDDEN void *shm_new(dl_store *store, int rank, int world, const char *job_id,
                        int node, double timeout_s);
extern DL_HIDDEN const pg_ops shm_ops;
DL_HIDDEN dl_tensor *shm_shared_zeros(void *impl, int64_t numel, int dtype);
/* Messages name call `name` #seq instead of the group's own (NULL: its own):
** hier names the user's call, not the step of it that failed. */
DL_HIDDEN void shm_label(void *impl, const char *name, int64_t seq);

/* pg_gloo.c: all `world` ranks through one Gloo context, keys under prefix,
** bound to host (NULL: the address this process reaches the store from).
** Member r is rank r * stride of the job (for messages). */
DL_HIDDEN void *gloo_pg_new(dl_store *store, const char *prefix, int rank, int world,
                            int stride, const char *host, double timeout_s);
extern DL_HIDDEN const pg_ops gloo_pg_ops;
DL_HIDDEN void gloo_pg_label(void *impl, const char *name, int64_t seq);  /* as shm_label */

/* pg_hier.c: shm within each node of local_world ranks, Gloo across. */
DL_HIDDEN void *hier_new(dl_store *store, int rank, int world, int local_world,
                         const char *job_id, double timeout_s);
extern DL_HIDDEN const pg_ops hier_ops;

/* dist/pg_nccl.c: the NCCL backend, one communicator on cuda:device; its
** calls block the host until done (bounded by the timeout, then the
** communicator is aborted). */
DL_HIDDEN dl_pg *nccl_pg_new(dl_store *store, int rank, int world, int device, double timeout_s);

/* Call kinds, and "all_reduce(sum) #3 float32 x10" for error messages. */
enum { PG_ALL_REDUCE, PG_BROADCAST, PG_ALL_GATHER, PG_BARRIER, PG_REDUCE_SCATTER };
DL_HIDDEN void pg_describe(char *b, size_t cap, int kind, int arg, int dtype, int64_t numel,
                           int64_t seq);

/* dist/reduce_kernels.c: dst[i] = src[0][i] op src[1][i] op ... (rank order) for
** i < n; red_part runs a red_job's slice [b, e) (for parallel_for). */
typedef void (*red_fn)(char *dst, char *const *src, int w, int64_t n, int op);
enum { PG_MAX_WORLD = 1024 };
typedef struct red_job {
  red_fn fn;
  char *dst;
  char *src[PG_MAX_WORLD];
  int w, op, es;
} red_job;
DL_HIDDEN red_fn red_for(int dtype);
DL_HIDDEN void red_part(void *ctx, int64_t b, int64_t e);

/* A job id safe in shm names and store keys ("nojob" when empty). */
DL_HIDDEN void pg_clean_id(char *out, size_t cap, const char *job_id);

#endif
