/*
** nn/conv_onednn.c -- float32 conv2d, forward and backward, through oneDNN
** (the library PyTorch runs its CPU convolutions in), where it measured
** faster than our im2col + sgemm: one group and 16 or more input channels.
** On the Fashion-MNIST CNN's [64,32,14,14] -> 64 layer oneDNN's blocked
** kernels took 15.2 ms forward and backward against our 22.2; on its
** one-channel first layer ours win, and oneDNN's backward-data for one
** input channel falls onto a 367 ms slow path (bench/RESULTS.md).
**
** oneDNN picks its own (blocked) layouts; our NCHW / OIHW tensors are
** reordered into them and the results back.  Primitives cost tens of
** microseconds to make, so they are kept across calls, keyed by the whole
** geometry, the gradients asked for and the thread count.
**
** Threads: Debian's oneDNN runs on OpenMP (libgomp), a pool beside ours
** and OpenBLAS's.  Each call sets the calling thread's OpenMP thread count
** to our budget (parallel_threads: 1 inside our pool), so the three never
** run more threads than the budget; ddplua (cli/main.c) sets
** OMP_WAIT_POLICY=PASSIVE so that idle OpenMP threads sleep instead of
** spinning against our pool.  A process forked after OpenMP ran a team
** uses our kernels (after_fork_child).
**
** Errors: a primitive oneDNN cannot make (a geometry it does not
** implement) is a silent fallback to im2col, remembered for the geometry;
** a failure while running one is an error naming the op and oneDNN's
** status.  DDPLUA_CONV=im2col turns this path off: results that do not
** depend on the kernels oneDNN picks for the CPU, and a reference for tests.
*/
#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn/conv_onednn.h"

/* libgomp's (linked: Makefile), declared here rather than through omp.h,
** which only GCC ships: clang builds this file too (make fuzz). */
extern void omp_set_num_threads(int n);

/* Below this many input channels our kernels win (bench/RESULTS.md). */
#define MIN_CHANNELS 16
/* Primitives kept: a CNN has a few layers, each a forward and a backward,
** times the batch sizes it sees (the last, short batch; evaluation). */
#define CACHE_SIZE 32

/* -- Engine ---------------------------------------------------------------- */

static struct {
  pthread_once_t once;
  pthread_mutex_t mu;   /* the cache and every call: see begin() */
  dnnl_engine_t eng;    /* NULL when oneDNN could not start: never used */
  dnnl_stream_t strm;
  int omp;              /* oneDNN runs on OpenMP: its thread count is ours to set */
  int teams;            /* an OpenMP team of more than one thread has run */
  int forked;           /* a child forked after that: im2col only */
  uint64_t clock;       /* stamps entries for eviction */
  sigset_t mask;        /* the caller's signal mask, SIGPROF held from begin() to end() */
} dn = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

/* libgomp's team threads do not survive a fork, but its bookkeeping does:
** the child's next parallel region waits for them forever.  So a child
** forked after a team ran leaves every conv to our kernels (a fork before
** that, or at one thread, keeps oneDNN). */
static void after_fork_child(void) {
  pthread_mutex_init(&dn.mu, NULL);
  if (dn.teams) dn.forked = 1;
}

static void engine_init(void) {
  if (dnnl_engine_create(&dn.eng, dnnl_cpu, 0) != dnnl_success) {
    dn.eng = NULL;
    return;
  }
  if (dnnl_stream_create(&dn.strm, dn.eng, dnnl_stream_default_flags) != dnnl_success) {
    dnnl_engine_destroy(dn.eng);
    dn.eng = NULL;
    return;
  }
  dn.omp = dnnl_version()->cpu_runtime == DNNL_RUNTIME_OMP;
  pthread_atfork(NULL, NULL, after_fork_child);
}

/* The conv applies here: float32, one group, enough channels, nothing
** empty, and the user did not ask for our kernels. */
static int applies(const conv_geom *g) {
  if (g->f64 || g->groups != 1 || g->C < MIN_CHANNELS) return 0;
  if (g->N < 1 || g->O < 1 || g->Ho < 1 || g->Wo < 1) return 0;
  const char *env = getenv("DDPLUA_CONV");
  if (env && strcmp(env, "im2col") == 0) return 0;
  pthread_once(&dn.once, engine_init);
  return dn.eng != NULL && !dn.forked;
}

/* -- Operands -------------------------------------------------------------- */

/* One tensor of a primitive: our plain layout, the primitive's, and the
** reorder between them (NULL when they are the same). */
typedef struct {
  dnnl_memory_desc_t user, md;
  dnnl_primitive_t reorder;
} operand;

/* Sets o up for the primitive's layout md; `out`: the primitive writes it,
** so the reorder runs from md to the user's.  A oneDNN status. */
static dnnl_status_t operand_init(operand *o, const dnnl_memory_desc_t *user,
                                  const dnnl_memory_desc_t *md, int out) {
  o->user = *user, o->md = *md, o->reorder = NULL;
  if (dnnl_memory_desc_equal(user, md)) return dnnl_success;
  dnnl_primitive_desc_t pd;
  dnnl_status_t s = out ? dnnl_reorder_primitive_desc_create(&pd, md, dn.eng, user, dn.eng, NULL)
                        : dnnl_reorder_primitive_desc_create(&pd, user, dn.eng, md, dn.eng, NULL);
  if (s != dnnl_success) return s;
  s = dnnl_primitive_create(&o->reorder, pd);
  dnnl_primitive_desc_destroy(pd);
  if (s != dnnl_success) o->reorder = NULL;
  return s;
}

static void operand_free(operand *o) {
  if (o->reorder) dnnl_primitive_destroy(o->reorder);
  o->reorder = NULL;
}

/* An operand bound to this call's memory: the user's buffer, and where the
** layouts differ, a buffer of the primitive's layout from our allocator
** (counted, and cached as every other large block). */
typedef struct {
  dnnl_memory_t user, inner;  /* inner == user without a reorder */
  dl_tensor *buf;
} bound;

/* -- Geometry -------------------------------------------------------------- */

enum { K_FWD = 1, K_BWD = 2 };
enum { NKEY = 17 };

typedef struct {
  int64_t key[NKEY];    /* key[0] 0: a free slot */
  uint64_t used;        /* dn.clock at the last call */
  int unsupported;      /* oneDNN made no primitive: im2col for this key */
  dnnl_primitive_t fwd, bwd_data, bwd_weights;
  operand x, w, y;      /* forward: src, weights in; dst out */
  operand dgy, dw, dgx; /* backward data: diff_dst, weights in; diff_src out */
  operand wx, wgy, wgw; /* backward weights: src, diff_dst in; diff_weights out */
  dnnl_memory_desc_t bias;
} entry;

static entry cache[CACHE_SIZE];

static void make_key(const conv_geom *g, int kind, int flags, int threads, int64_t *k) {
  int64_t v[NKEY] = {kind, g->N, g->C, g->H, g->W, g->O, g->kh, g->kw, g->sh, g->sw,
                     g->ph, g->pw, g->dh, g->dw, flags, threads, 0};
  memcpy(k, v, sizeof v);
}

/* The plain descriptors of x, w, y and the bias, and oneDNN's parameters:
** dilation counts the gaps (0 for none), and the right / bottom padding is
** what makes oneDNN's output size ours (smaller than the left one where the
** last rows of the input are never reached). */
typedef struct {
  dnnl_memory_desc_t x, w, y, b, xa, wa, ya;  /* ..a: format "any" */
  dnnl_dims_t strides, dilates, pad_l, pad_r;
} conv_descs;

static dnnl_status_t descs_init(const conv_geom *g, conv_descs *d) {
  dnnl_dims_t xs = {g->N, g->C, g->H, g->W}, ws = {g->O, g->C, g->kh, g->kw},
              ys = {g->N, g->O, g->Ho, g->Wo}, bs = {g->O};
  dnnl_status_t s;
  if ((s = dnnl_memory_desc_init_by_tag(&d->x, 4, xs, dnnl_f32, dnnl_nchw)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->w, 4, ws, dnnl_f32, dnnl_oihw)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->y, 4, ys, dnnl_f32, dnnl_nchw)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->b, 1, bs, dnnl_f32, dnnl_x)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->xa, 4, xs, dnnl_f32, dnnl_format_tag_any)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->wa, 4, ws, dnnl_f32, dnnl_format_tag_any)) ||
      (s = dnnl_memory_desc_init_by_tag(&d->ya, 4, ys, dnnl_f32, dnnl_format_tag_any)))
    return s;
  d->strides[0] = g->sh, d->strides[1] = g->sw;
  d->dilates[0] = g->dh - 1, d->dilates[1] = g->dw - 1;
  d->pad_l[0] = g->ph, d->pad_l[1] = g->pw;
  d->pad_r[0] = (g->Ho - 1) * g->sh + (g->kh - 1) * g->dh + 1 - g->H - g->ph;
  d->pad_r[1] = (g->Wo - 1) * g->sw + (g->kw - 1) * g->dw + 1 - g->W - g->pw;
  return dnnl_success;
}

/* The forward primitive's descriptor (also the backward's hint). */
static dnnl_status_t fwd_pd(const conv_descs *d, int bias, dnnl_primitive_desc_t *pd) {
  dnnl_convolution_desc_t cd;
  dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(
      &cd, dnnl_forward_training, dnnl_convolution_direct, &d->xa, &d->wa,
      bias ? &d->b : NULL, &d->ya, d->strides, d->dilates, d->pad_l, d->pad_r);
  return s ? s : dnnl_primitive_desc_create(pd, &cd, NULL, dn.eng, NULL);
}

static const dnnl_memory_desc_t *md_of(const_dnnl_primitive_desc_t pd, dnnl_query_t q) {
  return dnnl_primitive_desc_query_md(pd, q, 0);
}

/* Makes e's primitives and reorders for what its key asks; a oneDNN
** status (anything but success: the geometry falls back to im2col). */
static dnnl_status_t entry_build(entry *e, const conv_geom *g) {
  conv_descs d;
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  dnnl_convolution_desc_t cd;
  int kind = (int)e->key[0], flags = (int)e->key[14];
  int bias = kind == K_FWD ? flags : (flags & 4) != 0;
  dnnl_status_t s = descs_init(g, &d);
  if (s || (s = fwd_pd(&d, bias, &hint))) goto done;
  e->bias = d.b;
  if (kind == K_FWD) {
    if ((s = operand_init(&e->x, &d.x, md_of(hint, dnnl_query_src_md), 0)) ||
        (s = operand_init(&e->w, &d.w, md_of(hint, dnnl_query_weights_md), 0)) ||
        (s = operand_init(&e->y, &d.y, md_of(hint, dnnl_query_dst_md), 1)))
      goto done;
    s = dnnl_primitive_create(&e->fwd, hint);
    if (s) e->fwd = NULL;
    goto done;
  }
  if (flags & 1) {
    if ((s = dnnl_dilated_convolution_backward_data_desc_init(
             &cd, dnnl_convolution_direct, &d.xa, &d.wa, &d.ya, d.strides, d.dilates, d.pad_l,
             d.pad_r)) ||
        (s = dnnl_primitive_desc_create(&pd, &cd, NULL, dn.eng, hint)))
      goto done;
    if ((s = operand_init(&e->dgy, &d.y, md_of(pd, dnnl_query_diff_dst_md), 0)) ||
        (s = operand_init(&e->dw, &d.w, md_of(pd, dnnl_query_weights_md), 0)) ||
        (s = operand_init(&e->dgx, &d.x, md_of(pd, dnnl_query_diff_src_md), 1)))
      goto done;
    if ((s = dnnl_primitive_create(&e->bwd_data, pd))) {
      e->bwd_data = NULL;
      goto done;
    }
    dnnl_primitive_desc_destroy(pd), pd = NULL;
  }
  if (flags & 2) {
    if ((s = dnnl_dilated_convolution_backward_weights_desc_init(
             &cd, dnnl_convolution_direct, &d.xa, &d.wa, bias ? &d.b : NULL, &d.ya, d.strides,
             d.dilates, d.pad_l, d.pad_r)) ||
        (s = dnnl_primitive_desc_create(&pd, &cd, NULL, dn.eng, hint)))
      goto done;
    if ((s = operand_init(&e->wx, &d.x, md_of(pd, dnnl_query_src_md), 0)) ||
        (s = operand_init(&e->wgy, &d.y, md_of(pd, dnnl_query_diff_dst_md), 0)) ||
        (s = operand_init(&e->wgw, &d.w, md_of(pd, dnnl_query_diff_weights_md), 1)))
      goto done;
    if ((s = dnnl_primitive_create(&e->bwd_weights, pd))) e->bwd_weights = NULL;
  }
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (hint) dnnl_primitive_desc_destroy(hint);
  return s;
}

static void entry_free(entry *e) {
  dnnl_primitive_t *ps[] = {&e->fwd, &e->bwd_data, &e->bwd_weights};
  for (int i = 0; i < 3; i++)
    if (*ps[i]) dnnl_primitive_destroy(*ps[i]), *ps[i] = NULL;
  operand *os[] = {&e->x, &e->w, &e->y, &e->dgy, &e->dw, &e->dgx, &e->wx, &e->wgy, &e->wgw};
  for (int i = 0; i < 9; i++) operand_free(os[i]);
  memset(e, 0, sizeof *e);
}

/* The entry for key, made on a miss in the free or least recently used
** slot; NULL when oneDNN cannot make its primitives (then and after). */
static entry *entry_get(const conv_geom *g, const int64_t *key) {
  entry *slot = &cache[0];
  for (int i = 0; i < CACHE_SIZE; i++) {
    entry *e = &cache[i];
    if (e->key[0] && memcmp(e->key, key, sizeof e->key) == 0) {
      e->used = ++dn.clock;
      return e->unsupported ? NULL : e;
    }
    if (!e->key[0] ? slot->key[0] != 0 : slot->key[0] && e->used < slot->used) slot = e;
  }
  entry_free(slot);
  memcpy(slot->key, key, sizeof slot->key);
  slot->used = ++dn.clock;
  if (entry_build(slot, g) != dnnl_success) {
    /* oneDNN does not implement it (or ran out of memory making it): ours
    ** do, silently, and the key remembers so it is not tried every call */
    entry_free(slot);
    memcpy(slot->key, key, sizeof slot->key);
    slot->used = dn.clock;
    slot->unsupported = 1;
    return NULL;
  }
  return slot;
}

/* -- Running ------------------------------------------------------------------ */

static int fail(const char *op, const char *what, dnnl_status_t s) {
  return dl_err(EM_CONV_ONEDNN, op, what, dnnl_status2str(s));
}

/* Binds o to the user's buffer p (and a buffer of its own layout), and
** reorders p in unless o is an output.  0, or -1 with the error set. */
static int bind(const char *op, const operand *o, const float *p, int out, bound *b) {
  b->user = b->inner = NULL, b->buf = NULL;
  dnnl_status_t s = dnnl_memory_create(&b->user, &o->user, dn.eng, (void *)p);
  if (s) {
    b->user = NULL;
    return fail(op, "dnnl_memory_create", s);
  }
  b->inner = b->user;
  if (!o->reorder) return 0;
  int64_t n = (int64_t)((dnnl_memory_desc_get_size(&o->md) + 3) / 4);
  b->inner = NULL;
  if (!(b->buf = tensor_new(DL_FLOAT32, &n, 1))) return -1;
  if ((s = dnnl_memory_create(&b->inner, &o->md, dn.eng, tensor_first(b->buf)))) {
    b->inner = NULL;
    return fail(op, "dnnl_memory_create", s);
  }
  if (out) return 0;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, b->user}, {DNNL_ARG_TO, b->inner}};
  if ((s = dnnl_primitive_execute(o->reorder, dn.strm, 2, a))) return fail(op, "reorder", s);
  return 0;
}

/* Reorders an output back into the user's buffer. */
static int unbind_out(const char *op, const operand *o, const bound *b) {
  if (!o->reorder) return 0;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, b->inner}, {DNNL_ARG_TO, b->user}};
  dnnl_status_t s = dnnl_primitive_execute(o->reorder, dn.strm, 2, a);
  return s ? fail(op, "reorder", s) : 0;
}

static void unbind(bound *b) {
  if (b->inner && b->inner != b->user) dnnl_memory_destroy(b->inner);
  if (b->user) dnnl_memory_destroy(b->user);
  dl_tensor_release(b->buf);
  b->user = b->inner = NULL, b->buf = NULL;
}

static int run(const char *op, dnnl_primitive_t p, int n, const dnnl_exec_arg_t *a) {
  dnnl_status_t s = dnnl_primitive_execute(p, dn.strm, n, a);
  return s ? fail(op, "convolution", s) : 0;
}

/* Both entry points hold dn.mu from the lookup to the last reorder: an
** entry is not evicted while in use, and two threads never open OpenMP
** teams at once (ddplua calls convs from one thread; this only keeps a
** second one correct).  OpenMP's count is the calling thread's own
** setting, made before the primitives are, since oneDNN sizes its work
** split when it makes them (hence the thread count in the key). */
static entry *begin(const conv_geom *g, int kind, int flags) {
  int threads = parallel_threads();
  int64_t key[NKEY];
  make_key(g, kind, flags, threads, key);
  pthread_mutex_lock(&dn.mu);
  signals_hold_prof(&dn.mask);  /* LuaJIT's profiler: core/internal.h */
  if (dn.omp) {
    omp_set_num_threads(threads);
    if (threads > 1) dn.teams = 1;
  }
  entry *e = entry_get(g, key);
  if (!e) {
    signals_restore(&dn.mask);
    pthread_mutex_unlock(&dn.mu);
  }
  return e;
}

static int end(const char *op, int rc) {
  dnnl_status_t s = dnnl_stream_wait(dn.strm);
  signals_restore(&dn.mask);
  pthread_mutex_unlock(&dn.mu);
  if (rc) return rc;
  return s ? fail(op, "dnnl_stream_wait", s) : 0;
}

DL_HIDDEN int conv_onednn_forward(const char *op, const conv_geom *g, const float *x,
                                  const float *w, const float *b, float *y) {
  if (!applies(g)) return CONV_ONEDNN_SKIP;
  entry *e = begin(g, K_FWD, b != NULL);
  if (!e) return CONV_ONEDNN_SKIP;
  bound bx = {0}, bw = {0}, by = {0}, bb = {0};
  int rc = -1;
  dnnl_status_t s;
  if (bind(op, &e->x, x, 0, &bx) || bind(op, &e->w, w, 0, &bw) || bind(op, &e->y, y, 1, &by))
    goto done;
  if (b && (s = dnnl_memory_create(&bb.user, &e->bias, dn.eng, (void *)b))) {
    bb.user = NULL;
    fail(op, "dnnl_memory_create", s);
    goto done;
  }
  dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, bx.inner}, {DNNL_ARG_WEIGHTS, bw.inner},
                          {DNNL_ARG_DST, by.inner}, {DNNL_ARG_BIAS, bb.user}};
  if (run(op, e->fwd, b ? 4 : 3, a) || unbind_out(op, &e->y, &by)) goto done;
  rc = 0;
done:
  rc = end(op, rc);
  unbind(&bx), unbind(&bw), unbind(&by), unbind(&bb);
  return rc;
}

/* The gradient of the bias alone (weights frozen, bias not) is left to our
** kernels: oneDNN computes it only beside the weights', and ours is a sum. */
DL_HIDDEN int conv_onednn_backward(const char *op, const conv_geom *g, const float *gy,
                                   const float *x, const float *w, float *gx, float *gw,
                                   float *gb) {
  if ((!gx && !gw) || (gb && !gw) || !applies(g)) return CONV_ONEDNN_SKIP;
  entry *e = begin(g, K_BWD, (gx != NULL) | (gw != NULL) << 1 | (gb != NULL) << 2);
  if (!e) return CONV_ONEDNN_SKIP;
  bound dgy = {0}, dw = {0}, dgx = {0}, wx = {0}, wgy = {0}, wgw = {0}, bgb = {0};
  int rc = -1;
  dnnl_status_t s;
  if (gx) {
    if (bind(op, &e->dgy, gy, 0, &dgy) || bind(op, &e->dw, w, 0, &dw) ||
        bind(op, &e->dgx, gx, 1, &dgx))
      goto done;
    dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, dgy.inner}, {DNNL_ARG_WEIGHTS, dw.inner},
                            {DNNL_ARG_DIFF_SRC, dgx.inner}};
    if (run(op, e->bwd_data, 3, a) || unbind_out(op, &e->dgx, &dgx)) goto done;
  }
  if (gw) {
    /* grad_out reordered for backward-data serves here too when both
    ** primitives want one layout (they usually do) */
    int share = gx && dnnl_memory_desc_equal(&e->dgy.md, &e->wgy.md);
    if (bind(op, &e->wx, x, 0, &wx) || (!share && bind(op, &e->wgy, gy, 0, &wgy)) ||
        bind(op, &e->wgw, gw, 1, &wgw))
      goto done;
    if (gb && (s = dnnl_memory_create(&bgb.user, &e->bias, dn.eng, gb))) {
      bgb.user = NULL;
      fail(op, "dnnl_memory_create", s);
      goto done;
    }
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, wx.inner}, {DNNL_ARG_DIFF_DST, share ? dgy.inner : wgy.inner},
                            {DNNL_ARG_DIFF_WEIGHTS, wgw.inner}, {DNNL_ARG_DIFF_BIAS, bgb.user}};
    if (run(op, e->bwd_weights, gb ? 4 : 3, a) || unbind_out(op, &e->wgw, &wgw)) goto done;
  }
  rc = 0;
done:
  rc = end(op, rc);
  bound *bs[] = {&dgy, &dw, &dgx, &wx, &wgy, &wgw, &bgb};
  for (int i = 0; i < 7; i++) unbind(bs[i]);
  return rc;
}
