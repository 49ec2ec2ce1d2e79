/*
** ddplua_dist.h -- distributed training: the rendezvous store, process groups
** and their collectives, and the DDP gradient reducer.
** Part of the public API: include ddplua.h, which includes every part.
*/
#ifndef DDPLUA_DIST_H
#define DDPLUA_DIST_H

#include "ddplua_base.h"

#if !defined(DL_CDEF) && defined(__cplusplus)
extern "C" {
#endif

/* -- Rendezvous store -------------------------------------------------- */

/* A TCP key-value store as PyTorch's TCPStore, for rendezvous: a server
** (its event loop on its own thread) and blocking clients.  Keys are
** strings (at most 64 KiB), values bytes (at most 256 MiB).  A connection
** must present the server's token first, or it is closed.  Every call
** waits at most the handle's timeout (300 s unless set); a timeout is a
** DL_ESTATE error naming the operation and the key.  A handle serves one
** request at a time; use one per thread for concurrency. */
typedef struct dl_store dl_store;
/* Listens on host ("127.0.0.1" when NULL or empty) and port (0: a free
** port, see dl_store_port).  token NULL or "" accepts any client.  The
** handle is also a client of its own server.  NULL with DL_EIO when the
** address cannot be bound. */
DL_API dl_store *dl_store_server(const char *host, int port, const char *token);
/* Connects, retrying until timeout_s (the server may start later); the
** timeout becomes the handle's.  NULL with DL_EIO when nothing answered,
** DL_ESTATE when the server refused the token. */
DL_API dl_store *dl_store_connect(const char *host, int port, const char *token,
                                  double timeout_s);
DL_API int dl_store_port(const dl_store *s);
DL_API int dl_store_set_timeout(dl_store *s, double timeout_s);
/* The local address (text) of a client's connection: the interface through
** which this host reaches the store's, which other nodes can reach back. */
DL_API int dl_store_local_addr(dl_store *s, char *out, int cap);
DL_API double dl_store_timeout(const dl_store *s);
/* A server handle stops its thread and closes every connection. */
DL_API void dl_store_close(dl_store *s);
DL_API int dl_store_set(dl_store *s, const char *key, const void *value, int64_t len);
/* Waits until key exists (timeout_s <= 0: the handle's timeout) and returns
** its value, NUL-terminated, length in *len; free it with dl_store_value_free. */
DL_API void *dl_store_get(dl_store *s, const char *key, double timeout_s, int64_t *len);
DL_API void dl_store_value_free(void *p);
/* Adds delta to the counter key (decimal text; missing counts as 0) and
** stores the new value in *out (may be NULL).  Atomic across clients. */
DL_API int dl_store_add(dl_store *s, const char *key, int64_t delta, int64_t *out);
/* Sets key to desired when it holds expected (or is missing and expected
** is empty); returns the value now stored (empty when missing), as get. */
DL_API void *dl_store_compare_set(dl_store *s, const char *key, const void *expected,
                                  int64_t elen, const void *desired, int64_t dlen,
                                  int64_t *len);
/* Waits until all n keys exist, within timeout_s in all (<= 0: the
** handle's timeout). */
DL_API int dl_store_wait(dl_store *s, const char *const *keys, int n, double timeout_s);
/* 1 when all n keys exist now, 0 when not, without waiting. */
DL_API int dl_store_check(dl_store *s, const char *const *keys, int n);
/* 1 when key existed and was deleted, 0 when it did not exist. */
DL_API int dl_store_delete(dl_store *s, const char *key);
DL_API int64_t dl_store_num_keys(dl_store *s);
/* Returns when world_size callers have reached the barrier called name;
** reusable (each round of world_size arrivals is one generation). */
DL_API int dl_store_barrier(dl_store *s, const char *name, int world_size, double timeout_s);

/* -- Launch layout ---------------------------------------------------------- */

/* Who started this process and where it stands in the job, read from the
** environment (dist/launch_env.c; docs/clusters.md), in this order: the
** ddplua launcher (DDP_LAUNCH_ID with RANK, WORLD_SIZE, ...); an MPI
** launcher (OMPI_COMM_WORLD_*, or PMI_RANK/PMI_SIZE with MPI_LOCALRANKID);
** a SLURM step of several tasks (SLURM_PROCID, SLURM_STEP_NUM_TASKS, ...);
** torchrun (TORCHELASTIC_RUN_ID); plain env:// (RANK, WORLD_SIZE,
** LOCAL_RANK, MASTER_ADDR, MASTER_PORT).  Nothing of these: a world of one. */
typedef enum dl_launch_kind {
  DL_LAUNCH_ALONE = 0, DL_LAUNCH_DDPLUA, DL_LAUNCH_MPI, DL_LAUNCH_SLURM,
  DL_LAUNCH_TORCHRUN, DL_LAUNCH_ENV
} dl_launch_kind;
typedef struct dl_launch {
  dl_launch_kind kind;
  int rank, world_size, local_rank, local_world_size, node_rank, nnodes;
  /* 1 when no launcher serves the store: rank 0's process serves it on
  ** master_port (every interface), the others connect to master_addr */
  int serves_store;
  int master_port;
  char master_addr[256];
  char port_from[128]; /* where the port came from, for messages */
  char job_id[64];     /* the job's id ("" if none): shm names, the token */
  char token[33];      /* the store's token ("" : none) */
  char vars[256];      /* the variables it was read from, for messages */
  /* why the store cannot be found ("" when it can): the layout is known
  ** (rank, world), but ddp.init fails with this, naming what to set */
  char problem[320];
} dl_launch;
/* Fills *out; -1 with DL_EINVAL naming the variables when they contradict
** each other or this process is one of several tasks whose rendezvous
** cannot be derived (the message names the command that works). */
DL_API int dl_launch_detect(dl_launch *out);
/* Host number index (0-based) of a SLURM host list ("gpu[001-004],cpu7")
** into out (cap bytes); -1 with DL_EINVAL for a malformed list, an index
** out of range or a name longer than cap. */
DL_API int dl_slurm_nodelist_host(char *out, int cap, const char *list, int index);
/* "alone", "ddplua", "mpi", "slurm", "torchrun" or "env". */
DL_API const char *dl_launch_kind_name(dl_launch_kind kind);

/* -- Process groups and collectives -------------------------------------- */

/* Collectives among the ranks of a job, as PyTorch's ProcessGroup: blocking,
** in place where PyTorch's are, every rank making the same calls in the same
** order.  Tensors may lie on the CPU or a CUDA device: a backend takes
** contiguous tensors on its own device (the CPU, or the rank's GPU for
** "nccl"), and any other is staged through a contiguous copy there.  Each wait is bounded by the group's timeout;
** a timeout is a DL_ESTATE error naming the collective, its call number and
** the ranks that had not arrived, and leaves the group unusable, as does a
** rank that exits (noticed within a second).  Within a node every call
** that moves data checks that all ranks called the same collective on the
** same dtype and size; DDP_DEBUG=1 checks every call, also over Gloo. */
typedef struct dl_pg dl_pg;
typedef enum dl_pg_op {
  /* from 16: no value of a tensor reduction (dl_redop) or a loss reduction
  ** (dl_loss_reduction) is a collective's, so one passed by mistake is
  ** refused, never computed as another op */
  DL_PG_SUM = 16, DL_PG_AVG, DL_PG_MAX, DL_PG_MIN, DL_PG_PROD
} dl_pg_op;
/* The group of a job: rank of world, local_world ranks per node (ranks
** node * local_world .. numbered by node, as the launcher does).  backend:
** "auto" or "cpu" (shared memory on one node; across nodes shared memory
** within each node and Gloo between one leader per node), "shm", "gloo"
** (TCP between all ranks) or "hier" (the multi-node scheme, also on one
** node).  NULL with DL_EINVAL for a bad choice, DL_EIO or DL_ESTATE when the
** ranks cannot connect within timeout_s. */
DL_API dl_pg *dl_pg_new(dl_store *store, int rank, int world, int local_world,
                        const char *backend, const char *job_id, double timeout_s);
/* All ranks of one node through a shared-memory arena: rank 0 creates
** "/ddplua-<job_id>-<n>" and publishes it through the store; every rank maps
** it; rank 0 unlinks it once all have (nothing stays in /dev/shm).  job_id
** only names files, so each launch should have its own on a node (ddp.init
** passes "<DDP_JOB_ID>-<DDP_LAUNCH_ID>"); cleaning up after a crash by the
** "/ddplua-<job_id>-" prefix then touches no other launch's files. */
DL_API dl_pg *dl_pg_shm_new(dl_store *store, int rank, int world,
                            const char *job_id, double timeout_s);
/* Waits for the group's asynchronous calls to finish first. */
DL_API void dl_pg_free(dl_pg *pg);
DL_API int dl_pg_rank(const dl_pg *pg);
DL_API int dl_pg_world_size(const dl_pg *pg);
/* "shm", "gloo" or "hier". */
DL_API const char *dl_pg_backend(const dl_pg *pg);
/* Seconds each later call may wait (asynchronous calls keep the timeout
** they were started with). */
DL_API double dl_pg_timeout(const dl_pg *pg);
DL_API int dl_pg_set_timeout(dl_pg *pg, double seconds);
/* In place.  avg is sum / world (floating dtypes only); for bool, sum and
** max act as or, prod and min as and; bfloat16/float16 reduce in float32. */
DL_API int dl_pg_all_reduce(dl_pg *pg, dl_tensor *t, dl_pg_op op);
/* Out of place and differentiable (sum or avg): a new tensor, the
** reduction of t; its backward all-reduces the gradient the same way, in
** backward's order, so every rank must run the same graph.  The group
** must outlive the graph (as torch.distributed.nn.functional.all_reduce). */
DL_API dl_tensor *dl_pg_all_reduce_grad(dl_pg *pg, const dl_tensor *t, dl_pg_op op);
/* In place: src's t on every rank (shapes and dtypes must match). */
DL_API int dl_pg_broadcast(dl_pg *pg, dl_tensor *t, int src);
/* A new tensor [world * t.shape[0], ...]: the ranks' t along dim 0 (a
** 0-dim t gives [world]). */
DL_API dl_tensor *dl_pg_all_gather(dl_pg *pg, const dl_tensor *t);
/* A new tensor [t.shape[0] / world, ...]: this rank's slice of the
** reduction; DL_ESHAPE unless world divides t.shape[0]. */
DL_API dl_tensor *dl_pg_reduce_scatter(dl_pg *pg, const dl_tensor *t, dl_pg_op op);
/* In place, as PyTorch's all_gather_into_tensor(t, t's block of this rank):
** t is 1-D of world blocks of numel / world elements (DL_ESHAPE unless
** world divides it); rank r's block r is its input, and every rank ends
** with every rank's block.  With the shm backend, a tensor of
** dl_pg_shared_zeros that every rank passes at the same place in it is
** gathered straight from the other ranks' memory (no copy through the
** arena); a different place on some rank is a call mismatch. */
DL_API int dl_pg_all_gather_inplace(dl_pg *pg, dl_tensor *t);
DL_API int dl_pg_barrier(dl_pg *pg);
/* A fence over every process group of this process: while it is up (why
** not NULL), each collective (barrier, shared_zeros and the async all-reduce
** included) fails at once, DL_ESTATE "NAME: why", before any rank waits,
** and the group stays usable.  The prompt over ranks puts it up while a
** chunk runs on some ranks only, where a collective would wait for ranks
** that never join it.  The text is copied; NULL takes the fence down. */
DL_API void dl_pg_set_fence(const char *why);
/* The fence's text, or NULL when it is down. */
DL_API const char *dl_pg_fence(void);
/* Point to point: t's bytes to rank dst / into t from rank src.  Sizes
** must agree (DL_ESHAPE otherwise); the k-th send from a to b meets the
** k-th recv at b from a. */
DL_API int dl_pg_send(dl_pg *pg, const dl_tensor *t, int dst);
DL_API int dl_pg_recv(dl_pg *pg, dl_tensor *t, int src);
/* A zeroed 1-D tensor that an all-reduce reduces in place without copying
** it through the arena: with the shm backend it lies in memory every rank
** of the node maps (private memory otherwise, or when /dev/shm is short).
** Collective: every rank calls it in the same order with the same size. */
DL_API dl_tensor *dl_pg_shared_zeros(dl_pg *pg, int64_t numel, dl_dtype dtype);
/* Asynchronous all-reduce: queued behind earlier asynchronous calls and
** run on the group's own thread; t must not be used until the handle is
** done.  wait returns 0 or the call's error; done is 1 once it finished
** (failed or not); free drops the handle (the call still completes). */
typedef struct dl_work dl_work;
DL_API dl_work *dl_pg_all_reduce_async(dl_pg *pg, dl_tensor *t, dl_pg_op op);
DL_API int dl_work_wait(dl_work *w);
DL_API int dl_work_done(const dl_work *w);
DL_API void dl_work_free(dl_work *w);

/* -- DDP reducer ------------------------------------------------------------ */

/* The gradients of params (n leaves, registration order) in flat buckets
** of at most bucket_cap bytes (the first first_cap), all-reduced (avg) on
** pg while backward runs; see runtime/dist/reducer.c.  comm: DL_COMM_NONE, or
** BF16/FP16 to send buckets compressed, or CUSTOM to leave the reduction
** to the caller after backward (dl_reducer_bucket). */
typedef struct dl_reducer dl_reducer;
typedef enum dl_comm_hook {
  DL_COMM_NONE = 0, DL_COMM_BF16, DL_COMM_FP16, DL_COMM_CUSTOM
} dl_comm_hook;
/* dl_reducer_stats slots: synced passes, buckets, buckets launched before
** backward ended (last pass), parameters no rank used (last pass),
** buckets rebuilt (0/1), ns from the first launch to the end of backward. */
typedef enum dl_reducer_stat {
  DL_RS_SYNCS = 0, DL_RS_BUCKETS, DL_RS_EARLY, DL_RS_UNUSED, DL_RS_REBUILT,
  DL_RS_OVERLAP_NS, DL_REDUCER_NSTATS
} dl_reducer_stat;
DL_API dl_reducer *dl_reducer_new(dl_pg *pg, dl_tensor *const *params, int n,
                                  int64_t bucket_cap, int64_t first_cap, dl_comm_hook comm);
DL_API void dl_reducer_free(dl_reducer *r);
/* Before each forward of the wrapped model. */
DL_API int dl_reducer_prepare(dl_reducer *r);
/* Accumulate locally (no all-reduce) while on; returns the previous state. */
DL_API int dl_reducer_set_no_sync(dl_reducer *r, int on);
/* All-reduce every k-th backward pass only (gradient accumulation). */
DL_API int dl_reducer_set_accum(dl_reducer *r, int k);
DL_API int dl_reducer_stats(const dl_reducer *r, int64_t *out, int n);
DL_API int dl_reducer_num_buckets(const dl_reducer *r);
DL_API dl_tensor *dl_reducer_bucket(const dl_reducer *r, int b);
DL_API int dl_reducer_bucket_of(const dl_reducer *r, int i);
/* The parameters' names (n of them, registration order), which the flight
** recorder's entries for the buckets show. */
DL_API int dl_reducer_set_names(dl_reducer *r, const char *const *names, int n);

/* -- Pre-emption requests --------------------------------------------------- */

/* Turns the signals a scheduler sends before it kills a job (SLURM's
** --signal=USR1@T, SIGTERM at the time limit or on scancel) into a
** process-wide request to save and stop (dist/preempt.c).  signals: names
** such as "TERM,USR1" (the SIG prefix and case optional); NULL or "": the
** environment's DDP_PREEMPT_SIGNALS (the ddplua launcher sets it to its
** --signals), else "TERM,USR1".  From then on every signal of the set is
** absorbed -- never fatal, however many arrive -- and the first is recorded.
** USR2 (reserved for the flight recorder's dump), INT (Ctrl-C keeps its
** meaning: stop now), KILL and STOP are refused, as are unknown names, with
** DL_EINVAL naming the list and the signal.  Arming again adds signals; a
** process that never arms keeps their default actions.  One such signal
** sent with sigqueue and the value DL_PREEMPT_STOP_NOW takes its default
** action instead: the launcher's "stop now" after another rank failed. */
#define DL_PREEMPT_STOP_NOW 0x646c5354
DL_API int dl_preempt_arm(const char *signals);
/* The first request's signal number, 0 when none came (or not armed). */
DL_API int dl_preempt_requested(void);
/* How many requests came (the later ones absorbed). */
DL_API int dl_preempt_count(void);
/* Parses a list as dl_preempt_arm does into out (at most cap signal
** numbers, each once): their count, or DL_EINVAL (the launcher's --signals). */
DL_API int dl_preempt_parse(const char *signals, int *out, int cap);
/* "SIGTERM", "SIGUSR1", ... for the signals these calls name; NULL for others. */
DL_API const char *dl_preempt_signal_name(int sig);

#if !defined(DL_CDEF) && defined(__cplusplus)
}
#endif

#endif /* DDPLUA_DIST_H */
