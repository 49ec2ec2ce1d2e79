/*
** reducer.c -- the DDP reducer: gradients in flat buckets, all-reduced
** while backward still runs, averaged, identical on every rank.
**
** Each parameter's .grad is a view into its bucket, so backward
** accumulates straight into the bucket.  When a parameter's gradient is
** complete (a leaf hook of engine.c), its bucket counts down; a bucket
** whose parameters are all done starts an asynchronous all-reduce on the
** process group's thread, buckets strictly in index order so every rank
** issues the same calls in the same order.  At the end of backward (an
** end hook) the parameters that got no gradient are treated as zero, the
** remaining buckets go out, a bitmap of which parameters any rank used is
** reduced alongside, and the reducer waits for all of it.  A parameter no
** rank used gets .grad = nil, as in one process.  After the first synced
** pass the buckets are rebuilt in the order rank 0's gradients became
** ready, which is the order they will be ready in from then on.
**
** CUDA parameters: the buckets live on the parameters' device (all of
** them on one), so gradients never leave it; the process group runs the
** all-reduce there (NCCL) or stages the bucket through host memory.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "dist/pg.h"

typedef struct rparam {
  struct dl_reducer *r;
  dl_tensor *p;
  dl_tensor *view;   /* the grad's place in its bucket */
  int bucket;
  int64_t off, numel;
  int ready;         /* this pass */
  int touched;       /* got a local gradient since the last sync */
  int fresh;         /* .grad was nil when this window began */
} rparam;

typedef struct rbucket {
  dl_tensor *flat;   /* 1-D, contiguous */
  dl_tensor *comp;   /* the compressed copy in flight, or NULL */
  int dtype, pending, nparams;
  dl_work *work;
  char note[DL_FLIGHT_NOTE];  /* what the flight recorder says of it */
} rbucket;

struct dl_reducer {
  dl_pg *pg;
  int device;          /* the parameters' (-1: cpu) */
  rparam *ps;
  int n;
  rbucket *bs;
  int nb;
  int64_t cap, first_cap;
  int comm;            /* DL_COMM_* */
  int no_sync, accum;
  int64_t passes;      /* backward passes seen */
  int expecting;       /* a forward prepared the grads */
  int in_pass, sync_pass, next_launch;
  int rebuilt, nready;
  int *order;          /* ready order of the first synced pass */
  dl_tensor *used;     /* uint8 [n] */
  dl_work *used_work;
  int err_code;
  char err[512];
  char **names;         /* the parameters' (dl_reducer_set_names), or NULL */
  int64_t stats[DL_REDUCER_NSTATS];
  double t_first, t_end;
};


/* Errors inside hooks cannot return: keep the first for the end hook. */
static void keep_error(dl_reducer *r) {
  if (r->err_code) return;
  r->err_code = dl_last_error_code() ? dl_last_error_code() : DL_ESTATE;
  snprintf(r->err, sizeof r->err, "%s", dl_last_error());
}

static int same_tensor(dl_tensor *a, const dl_tensor *b) { return a == b; }

/* -- Buckets ---------------------------------------------------------------- */

static void free_names(dl_reducer *r) {
  for (int i = 0; r->names && i < r->n; i++) free(r->names[i]);
  free(r->names);
  r->names = NULL;
}

static void free_buckets(dl_reducer *r) {
  for (int b = 0; b < r->nb; b++) {
    if (r->bs[b].work) {
      dl_work_wait(r->bs[b].work);
      dl_work_free(r->bs[b].work);
    }
    dl_tensor_release(r->bs[b].flat);
    dl_tensor_release(r->bs[b].comp);
  }
  free(r->bs);
  r->bs = NULL;
  r->nb = 0;
}

/* "bucket 2 of 5: fc2.weight .. fc1.bias (4)" (its parameters in the
** order given), for the flight recorder's entries. */
static void note_buckets(dl_reducer *r, rbucket *bs, int nb, const int *order) {
  for (int b = 0; b < nb; b++) {
    const char *first = NULL, *last = NULL;
    for (int k = 0; r->names && k < r->n; k++)
      if (r->ps[order[k]].bucket == b) {
        if (!first) first = r->names[order[k]];
        last = r->names[order[k]];
      }
    rbucket *bk = &bs[b];
    char t[256];
    if (!first) snprintf(t, sizeof t, "DDP bucket %d of %d (%d params)", b + 1, nb, bk->nparams);
    else if (bk->nparams == 1) snprintf(t, sizeof t, "DDP bucket %d of %d: %s", b + 1, nb, first);
    else snprintf(t, sizeof t, "DDP bucket %d of %d: %.40s .. %.40s (%d)", b + 1, nb, first, last, bk->nparams);
    size_t n = strlen(t) < sizeof bk->note - 1 ? strlen(t) : sizeof bk->note - 1;
    memcpy(bk->note, t, n);
    bk->note[n] = '\0';
  }
}

DL_API int dl_reducer_set_names(dl_reducer *r, const char *const *names, int n) {
  if (n != r->n) return dl_err(EM_BADVALUE, "ddp.DDP", "one name per parameter");
  char **copy = calloc((size_t)n, sizeof *copy);
  if (!copy) return dl_err(EM_NOMEM, "ddp.DDP", 0LL, 0LL);
  for (int i = 0; i < n; i++)
    if (!(copy[i] = strdup(names[i] ? names[i] : "?"))) {
      for (int k = 0; k < i; k++) free(copy[k]);
      free(copy);
      return dl_err(EM_NOMEM, "ddp.DDP", 0LL, 0LL);
    }
  free_names(r);
  r->names = copy;
  int *order = malloc(sizeof(int) * (size_t)n);
  if (!order) return 0;
  int k = 0;  /* registration order within each bucket until it is rebuilt */
  for (int i = 0; i < n; i++) order[k++] = i;
  note_buckets(r, r->bs, r->nb, r->rebuilt ? r->order : order);
  free(order);
  return 0;
}

/* Lays the parameters out in buckets in the given order (a bucket holds
** one dtype and closes once it holds cap bytes; the first at first_cap so
** its all-reduce starts early) and points every .grad at its place,
** keeping values. */
static int build_buckets(dl_reducer *r, const int *order) {
  rbucket *bs = calloc((size_t)r->n, sizeof *bs);
  int *bucket_of = malloc(sizeof(int) * (size_t)r->n);
  int64_t *off = malloc(sizeof(int64_t) * (size_t)r->n);
  if (!bs || !bucket_of || !off) {
    free(bs), free(bucket_of), free(off);
    return dl_err(EM_NOMEM, "ddp.DDP", 0LL, 0LL);
  }
  int nb = 0;
  int64_t fill = 0;
  for (int k = 0; k < r->n; k++) {
    rparam *rp = &r->ps[order[k]];
    int dt = rp->p->dtype;
    int64_t bytes = rp->numel * dl_dtype_sizes[dt];
    /* as PyTorch: a bucket closes once it reached its cap, so the first
    ** (small cap) still takes the layer that crosses it, whose all-reduce
    ** then runs while the layers before it compute their gradients */
    int64_t cap = nb <= 1 ? r->first_cap : r->cap;
    if (nb == 0 || bs[nb - 1].dtype != dt || fill >= cap) {
      bs[nb].dtype = dt;
      nb++;
      fill = 0;
    }
    bucket_of[order[k]] = nb - 1;
    off[order[k]] = fill / dl_dtype_sizes[dt];
    fill += bytes;
    bs[nb - 1].nparams++;
  }
  int rc = 0;
  int64_t *tot = calloc((size_t)nb, sizeof *tot);
  if (!tot) rc = dl_err(EM_NOMEM, "ddp.DDP", 0LL, 0LL);
  for (int i = 0; !rc && i < r->n; i++) {
    int64_t end = off[i] + r->ps[i].numel;
    if (end > tot[bucket_of[i]]) tot[bucket_of[i]] = end;
  }
  const dl_device *dev = rc ? NULL : device_get("ddp.DDP", r->device);
  if (!dev) rc = -1;
  for (int b = 0; !rc && b < nb; b++) {
    if (dev->host_memory) {  /* a mapping the node's ranks share can hold it */
      if (!(bs[b].flat = dl_pg_shared_zeros(r->pg, tot[b], bs[b].dtype))) rc = -1;
    } else if (!(bs[b].flat = tensor_new_on(r->device, bs[b].dtype, &tot[b], 1)) ||
               dl_fill_(bs[b].flat, 0)) {
      rc = -1;
    }
  }
  dl_tensor **views = rc ? NULL : calloc((size_t)r->n, sizeof *views);
  if (!rc && !views) rc = dl_err(EM_NOMEM, "ddp.DDP", 0LL, 0LL);
  for (int i = 0; !rc && i < r->n; i++) {
    rparam *rp = &r->ps[i];
    dl_tensor *nar = dl_narrow(bs[bucket_of[i]].flat, 0, off[i], rp->numel);
    views[i] = nar ? dl_view(nar, rp->p->shape, rp->p->ndim) : NULL;
    dl_tensor_release(nar);
    if (!views[i]) { rc = -1; break; }
    dl_tensor *g = dl_grad(rp->p);
    if (g) {
      rc = dl_copy_(views[i], g);
      if (!rc) rc = dl_set_grad(rp->p, views[i]);
      dl_tensor_release(g);
    }
  }
  if (rc) {
    for (int i = 0; views && i < r->n; i++) dl_tensor_release(views[i]);
    for (int b = 0; b < nb; b++) dl_tensor_release(bs[b].flat);
    free(bs);
  } else {
    free_buckets(r);
    for (int i = 0; i < r->n; i++) {
      dl_tensor_release(r->ps[i].view);
      r->ps[i].view = views[i];
      r->ps[i].bucket = bucket_of[i];
      r->ps[i].off = off[i];
    }
    r->bs = bs;
    r->nb = nb;
    r->stats[DL_RS_BUCKETS] = nb;
    note_buckets(r, bs, nb, order);
  }
  free(views), free(tot), free(bucket_of), free(off);
  return rc;
}

/* -- Launching ---------------------------------------------------------------- */

static int launch_one(dl_reducer *r, rbucket *b) {
  dl_tensor *t = b->flat;
  if (r->comm == DL_COMM_BF16 || r->comm == DL_COMM_FP16) {
    if (!(b->comp = dl_to_dtype(b->flat, r->comm == DL_COMM_BF16 ? DL_BFLOAT16 : DL_FLOAT16)))
      return -1;
    t = b->comp;
  }
  if (r->comm == DL_COMM_CUSTOM) return 0;  /* the Lua hook reduces it after backward */
  int fl = !is_int_dtype(t->dtype) && t->dtype != DL_BOOL;
  pg_flight_note(r->pg, (int)(b - r->bs), b->note);
  b->work = dl_pg_all_reduce_async(r->pg, t, fl ? DL_PG_AVG : DL_PG_SUM);
  return b->work ? 0 : -1;
}

/* Starts every bucket that is complete and whose predecessors started. */
static void launch_ready(dl_reducer *r) {
  while (r->next_launch < r->nb && r->bs[r->next_launch].pending == 0) {
    if (r->t_first == 0) r->t_first = now_s();
    if (!r->err_code && launch_one(r, &r->bs[r->next_launch])) keep_error(r);
    r->next_launch++;
  }
}

static void begin_pass(dl_reducer *r) {
  /* no forward through the wrapper (model.module(x)): prepare now, before
  ** any other parameter's gradient lands */
  if (!r->expecting && dl_reducer_prepare(r)) keep_error(r);
  r->in_pass = 1;
  r->sync_pass = !r->no_sync && (r->passes + 1) % r->accum == 0;
  r->next_launch = 0;
  r->t_first = 0;
  for (int b = 0; b < r->nb; b++) r->bs[b].pending = r->bs[b].nparams;
  for (int i = 0; i < r->n; i++) r->ps[i].ready = 0;
}

/* The grad of p is complete for this pass: make sure it sits in the
** bucket, then count the bucket down. */
static void on_grad(void *ctx, dl_tensor *leaf) {
  rparam *rp = ctx;
  dl_reducer *r = rp->r;
  if (!r->in_pass) begin_pass(r);
  dl_tensor *g = dl_grad(leaf);
  if (g && !same_tensor(g, rp->view)) {
    /* .grad was replaced (or nil when backward began): move it in */
    if (dl_copy_(rp->view, g) || dl_set_grad(leaf, rp->view)) keep_error(r);
  }
  dl_tensor_release(g);
  rp->touched = 1;
  if (!r->sync_pass) return;
  if (rp->ready) {
    if (!r->err_code) {
      dl_err(EM_DDP_TWICE, "ddp.DDP");
      keep_error(r);
    }
    return;
  }
  rp->ready = 1;
  if (!r->rebuilt) r->order[r->nready++] = (int)(rp - r->ps);
  r->bs[rp->bucket].pending--;
  launch_ready(r);
}

/* -- The end of backward -------------------------------------------------------- */

static int finish(dl_reducer *r) {
  r->t_end = now_s();
  /* parameters without a gradient this pass count as zero (and come last
  ** in the first pass's order, in reverse registration order) */
  for (int i = r->n - 1; i >= 0; i--) {
    rparam *rp = &r->ps[i];
    if (rp->ready) continue;
    rp->ready = 1;
    r->bs[rp->bucket].pending--;
    if (!r->rebuilt) r->order[r->nready++] = i;
  }
  int launched_early = r->next_launch;
  launch_ready(r);
  uint8_t *used = dl_tensor_data(r->used);
  for (int i = 0; i < r->n; i++) used[i] = (uint8_t)r->ps[i].touched;
  pg_flight_note(r->pg, -1, "DDP: which parameters got a gradient");
  if (!r->err_code && !(r->used_work = dl_pg_all_reduce_async(r->pg, r->used, DL_PG_MAX)))
    keep_error(r);
  for (int b = 0; b < r->nb; b++) {
    rbucket *bk = &r->bs[b];
    if (bk->work) {
      if (dl_work_wait(bk->work)) keep_error(r);
      dl_work_free(bk->work);
      bk->work = NULL;
    }
    if (bk->comp) {
      if (!r->err_code && dl_copy_(bk->flat, bk->comp)) keep_error(r);
      dl_tensor_release(bk->comp);
      bk->comp = NULL;
    }
  }
  if (r->used_work) {
    if (dl_work_wait(r->used_work)) keep_error(r);
    dl_work_free(r->used_work);
    r->used_work = NULL;
  }
  int unused = 0;
  for (int i = 0; i < r->n; i++) {
    rparam *rp = &r->ps[i];
    if (!r->err_code && !used[i]) {
      unused++;
      if (rp->fresh && dl_set_grad(rp->p, NULL)) keep_error(r);
    }
    rp->touched = 0;
  }
  r->stats[DL_RS_SYNCS]++;
  r->stats[DL_RS_EARLY] = launched_early;
  r->stats[DL_RS_UNUSED] = unused;
  r->stats[DL_RS_OVERLAP_NS] = r->t_first > 0 ? (int64_t)((r->t_end - r->t_first) * 1e9) : 0;
  if (!r->rebuilt && !r->err_code) {
    /* rank 0's ready order for everyone, then buckets in that order */
    int64_t n = r->n;
    dl_tensor *ot = dl_empty(&n, 1, DL_INT64);
    int64_t *o = ot ? dl_tensor_data(ot) : NULL;
    for (int i = 0; o && i < r->n; i++) o[i] = r->order[i];
    pg_flight_note(r->pg, -1, "DDP: rank 0's gradient order, to rebuild the buckets");
    if (!ot || dl_pg_broadcast(r->pg, ot, 0)) keep_error(r);
    for (int i = 0; o && !r->err_code && i < r->n; i++) {
      if (o[i] < 0 || o[i] >= r->n) { dl_err(EM_DDP_ORDER, "ddp.DDP"); keep_error(r); break; }
      r->order[i] = (int)o[i];
    }
    if (!r->err_code && build_buckets(r, r->order)) keep_error(r);
    dl_tensor_release(ot);
    r->rebuilt = 1;
    r->stats[DL_RS_REBUILT] = 1;
  }
  return 0;
}

static int on_backward_end(void *ctx) {
  dl_reducer *r = ctx;
  if (!r->in_pass && !r->expecting) return 0;
  if (!r->in_pass) begin_pass(r);
  if (r->sync_pass) finish(r);
  r->in_pass = 0;
  r->expecting = 0;
  r->passes++;
  if (!r->err_code) return 0;
  int code = r->err_code;
  r->err_code = 0;
  return dl_err_set(code, r->err);
}

/* -- API ---------------------------------------------------------------------------- */

DL_API dl_reducer *dl_reducer_new(dl_pg *pg, dl_tensor *const *params, int n,
                                  int64_t bucket_cap, int64_t first_cap, dl_comm_hook comm) {
  const char *op = "ddp.DDP";
  if (!pg) return dl_errp(EM_NULLARG, op, "pg");
  if (n < 1) return dl_errp(EM_BADVALUE, op, "the model has no parameter that requires grad");
  if (comm < DL_COMM_NONE || comm > DL_COMM_CUSTOM)
    return dl_errp(EM_BADVALUE, op, "unknown gradient compression");
  for (int i = 0; i < n; i++) {
    if (check_tensor_any(op, params[i])) return NULL;
    int d0 = params[0]->storage->device, d = params[i]->storage->device;
    if (d != d0) {
      char a[32], b[32];
      snprintf(a, sizeof a, d < 0 ? "cpu" : "cuda:%d", d);
      snprintf(b, sizeof b, d0 < 0 ? "cpu" : "cuda:%d", d0);
      return dl_errp(EM_DDP_DEVICES, op, i + 1, a, b);
    }
    if (!dl_is_leaf(params[i]) || !dl_requires_grad(params[i]))
      return dl_errp(EM_BADVALUE, op, "every parameter must be a leaf that requires grad");
  }
  dl_reducer *r = calloc(1, sizeof *r);
  if (!r) return dl_errp(EM_NOMEM, op, 0LL, 0LL);
  r->pg = pg;
  r->device = params[0]->storage->device;
  r->n = n;
  r->cap = bucket_cap > 0 ? bucket_cap : 25 << 20;
  r->first_cap = first_cap > 0 ? first_cap : 1 << 20;
  r->comm = comm;
  r->accum = 1;
  r->ps = calloc((size_t)n, sizeof *r->ps);
  r->order = malloc(sizeof(int) * (size_t)n);
  int64_t nn = n;
  r->used = dl_zeros(&nn, 1, DL_UINT8);
  int *rev = malloc(sizeof(int) * (size_t)n);
  if (!r->ps || !r->order || !r->used || !rev) {
    free(rev);
    dl_reducer_free(r);
    return dl_errp(EM_NOMEM, op, 0LL, 0LL);
  }
  for (int i = 0; i < n; i++) {
    dl_tensor_retain(params[i]);
    r->ps[i] = (rparam){ .r = r, .p = params[i], .numel = dl_tensor_numel(params[i]) };
    rev[i] = n - 1 - i;  /* backward usually meets the last layer first */
  }
  int rc = build_buckets(r, rev);
  free(rev);
  for (int i = 0; !rc && i < n; i++) {
    dl_tensor *g = dl_grad(params[i]);
    r->ps[i].fresh = g == NULL;
    dl_tensor_release(g);
    rc = dl_add_grad_hook(params[i], on_grad, &r->ps[i]);
  }
  if (!rc) rc = dl_add_backward_hook(on_backward_end, r);
  if (rc) {
    dl_reducer_free(r);
    return NULL;
  }
  return r;
}

DL_API void dl_reducer_free(dl_reducer *r) {
  if (!r) return;
  dl_remove_backward_hook(on_backward_end, r);
  if (r->used_work) {
    dl_work_wait(r->used_work);
    dl_work_free(r->used_work);
  }
  free_buckets(r);
  for (int i = 0; r->ps && i < r->n; i++) {
    if (!r->ps[i].p) continue;
    dl_remove_grad_hook(r->ps[i].p, on_grad, &r->ps[i]);
    dl_tensor_release(r->ps[i].p);
    dl_tensor_release(r->ps[i].view);
  }
  dl_tensor_release(r->used);
  free_names(r);
  free(r->ps);
  free(r->order);
  free(r);
}

/* A forward of the wrapped model: a .grad set to nil (zero_grad) becomes
** its zeroed place in the bucket again, so backward adds in place. */
DL_API int dl_reducer_prepare(dl_reducer *r) {
  r->expecting = 1;
  for (int i = 0; i < r->n; i++) {
    rparam *rp = &r->ps[i];
    dl_tensor *g = dl_grad(rp->p);
    int rc = 0;
    if (!g) {
      rc = dl_fill_(rp->view, 0);
      if (!rc) rc = dl_set_grad(rp->p, rp->view);
      rp->fresh = 1;
    } else {
      if (!same_tensor(g, rp->view)) {
        rc = dl_copy_(rp->view, g);
        if (!rc) rc = dl_set_grad(rp->p, rp->view);
      }
      /* a window that starts with a gradient keeps one */
      if (!rp->touched) rp->fresh = 0;
    }
    dl_tensor_release(g);
    if (rc) return rc;
  }
  return 0;
}

DL_API int dl_reducer_set_no_sync(dl_reducer *r, int on) {
  int was = r->no_sync;
  r->no_sync = on != 0;
  return was;
}

DL_API int dl_reducer_set_accum(dl_reducer *r, int k) {
  if (k < 1) return dl_err(EM_BADVALUE, "ddp.DDP", "grad_accum must be a positive integer");
  r->accum = k;
  r->passes = 0;
  return 0;
}

DL_API int dl_reducer_stats(const dl_reducer *r, int64_t *out, int n) {
  for (int i = 0; i < n && i < DL_REDUCER_NSTATS; i++) out[i] = r->stats[i];
  return 0;
}

DL_API int dl_reducer_num_buckets(const dl_reducer *r) { return r->nb; }

DL_API dl_tensor *dl_reducer_bucket(const dl_reducer *r, int b) {
  if (b < 0 || b >= r->nb) return dl_errp(EM_BADVALUE, "ddp.DDP", "bucket index out of range");
  dl_tensor_retain(r->bs[b].flat);
  return r->bs[b].flat;
}

/* Bucket of parameter i (registration order), or -1. */
DL_API int dl_reducer_bucket_of(const dl_reducer *r, int i) {
  return i >= 0 && i < r->n ? r->ps[i].bucket : -1;
}
