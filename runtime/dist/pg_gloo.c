/*
** pg_gloo.c -- the "gloo" process-group backend: pg.h's vtable over the
** C API of gloo.cc (TCP, any ranks on any nodes).
*/
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/gloo.h"
#include "dist/pg.h"

typedef struct call { int64_t seq, numel; int32_t kind, arg, dtype, pad; } call;

typedef struct gpg {
  dlg *g;
  dl_store *store;
  int rank, world, stride, debug;
  int64_t seq;
  double timeout;
  char prefix[160];
  char why[300];  /* set once a DDP_DEBUG check failed: the group is unusable */
  int pending;    /* the call's descriptors are still to be compared */
  call *all;      /* every rank's descriptor of the current call */
  const char *label;  /* set by hier: the user's call its messages name, */
  int64_t label_seq;  /* and that call's number (not this group's own) */
} gpg;

static const char *nm(gpg *p, const char *name) { return p->label ? p->label : name; }
static long long sq(gpg *p) { return (long long)(p->label ? p->label_seq : p->seq); }

DL_HIDDEN void gloo_pg_label(void *impl, const char *name, int64_t seq) {
  gpg *p = impl;
  p->label = name;
  p->label_seq = seq;
}

static _Thread_local char ebuf[1024];

/* Calls of at least this many bytes compare descriptors before the data;
** smaller ones after.  The check is always on: on a 4 KiB all_reduce of 2
** ranks on 2 cores it cost ~+20% (about 360 -> 440 us a call, 8
** alternating rounds), over the 10% goal -- each call sends one
** more small message to every peer; carrying the descriptor inside the
** data's own transfer would remove that. */
#define DESC_FIRST (64 << 10)

static int pass(int rc) { return rc ? dl_err(EM_PG_PASS, ebuf) : 0; }

/* After a timeout, which ranks never reached call #seq?  Gloo cannot say,
** so every rank that timed out checks in under the call's number in the
** store, and those still missing after a short grace are named. */
static void census(gpg *p, char *who, size_t cap) {
  char (*keys)[200] = calloc((size_t)p->world, sizeof *keys);
  const char **kp = calloc((size_t)p->world, sizeof *kp);
  snprintf(who, cap, "every rank (they all arrived)");
  if (!keys || !kp || !p->store) goto done;
  for (int r = 0; r < p->world; r++) {
    snprintf(keys[r], sizeof keys[r], "%s/census/%lld/%d", p->prefix, (long long)p->seq, r);
    kp[r] = keys[r];
  }
  if (dl_store_set(p->store, keys[p->rank], "1", 1)) goto done;
  double grace = p->timeout < 3 ? p->timeout : 3;
  if (dl_store_wait(p->store, kp, p->world, grace) == 0) goto done;
  size_t n = 0;
  int cnt = 0;
  for (int r = 0; r < p->world; r++) cnt += dl_store_check(p->store, &kp[r], 1) == 0;
  n = (size_t)snprintf(who, cap, cnt == 1 ? "rank " : "ranks ");
  int first = 1;
  for (int r = 0; r < p->world && n < cap - 32; r++) {
    if (dl_store_check(p->store, &kp[r], 1) != 0) continue;
    n += (size_t)snprintf(who + n, cap - n, first ? "%d" : ", %d", r * p->stride);
    first = 0;
  }
  snprintf(who + n, cap - n, " to arrive");
done:
  free(keys);
  free(kp);
}

/* Passes a failed call's message on; a timeout gets the late ranks' names. */
static int done(gpg *p, const char *name, int rc) {
  if (!rc) return 0;
  if (!strstr(ebuf, "timed out") && p->label) {  /* "broadcast: why" -> "all_reduce #2: why" */
    const char *why = strstr(ebuf, ": ");
    char m[sizeof ebuf + 80];
    snprintf(m, sizeof m, "%s #%lld: %s", p->label, sq(p), why ? why + 2 : ebuf);
    return dl_err(EM_PG_PASS, m);
  }
  if (!strstr(ebuf, "timed out")) return pass(rc);
  char who[300];
  census(p, who, sizeof who);
  return dl_err(EM_PG_TIMEOUT, nm(p, name), sq(p), p->timeout, who);
}

static size_t nbytes(const dl_tensor *t) {
  return (size_t)dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
}

/* Every call's descriptor (struct call) is compared across ranks: ranks
** making different calls (kind, op, dtype or size) would otherwise get
** garbage, a hang or a crash from Gloo. */

/* Names each rank's call, poisons the group and fails, if the ranks' calls
** (in p->all, arrived) differ. */
static int compare(gpg *p, const char *name) {
  int same = 1;
  for (int r = 0; r < p->world; r++) same &= !memcmp(&p->all[r], &p->all[p->rank], sizeof(call));
  if (same) return 0;
  char msg[900];
  size_t n = 0;
  for (int r = 0; r < p->world && n < sizeof msg - 100; r++) {
    char d[120];
    const call *c = &p->all[r];
    pg_describe(d, sizeof d, c->kind, c->arg, c->dtype, c->numel, c->seq);
    n += (size_t)snprintf(msg + n, sizeof msg - n, "%srank %d called %s", r ? "; " : "",
                          r * p->stride, d);
  }
  dl_err(EM_PG_MISMATCH, nm(p, name), sq(p), msg);
  snprintf(p->why, sizeof p->why, "%s", dl_last_error());
  return -1;
}

/* Numbers the call and sends its descriptor to every rank, beside the
** data: no round trip of its own (an all_gather first cost ~N us on a
** 4 KiB all_reduce).  Calls large enough that a round trip is noise wait
** for every descriptor first, so mismatched sizes never reach Gloo;
** small ones compare in finish(), after the data (which cannot crash a
** small call: see DESC_FIRST). */
static int begin(gpg *p, const char *name, int kind, int arg, int dtype, int64_t numel,
                 int64_t bytes) {
  if (p->why[0]) return dl_err(EM_PG_BROKEN, nm(p, name), p->why);
  p->seq++;
  call mine = { p->seq, numel, kind, arg, dtype, 0 };
  p->pending = 0;
  if (dlg_exchange(p->g, &mine, p->all, sizeof mine, ebuf, sizeof ebuf)) return pass(-1);
  p->pending = 1;
  if (!p->debug && bytes < DESC_FIRST) return 0;
  p->pending = 0;
  if (done(p, name, dlg_exchange_wait(p->g, ebuf, sizeof ebuf))) return -1;
  return compare(p, name);
}

/* Ends a call: the descriptors' comparison still owed, then the data's
** result.  A mismatch explains a failure of the data better than the
** failure itself does. */
static int finish(gpg *p, const char *name, int rc) {
  if (p->pending) {
    p->pending = 0;
    char keep[sizeof ebuf];
    snprintf(keep, sizeof keep, "%s", ebuf);
    if (dlg_exchange_wait(p->g, ebuf, sizeof ebuf) == 0 && compare(p, name)) return -1;
    snprintf(ebuf, sizeof ebuf, "%s", keep);
  }
  return done(p, name, rc);
}

static int g_all_reduce(void *impl, dl_tensor *t, int op) {
  gpg *p = impl;
  if (begin(p, "all_reduce", PG_ALL_REDUCE, op, t->dtype, dl_tensor_numel(t), (int64_t)nbytes(t))) return -1;
  return finish(p, "all_reduce", dlg_all_reduce(p->g, tensor_first(t), dl_tensor_numel(t),
                                               t->dtype, op, ebuf, sizeof ebuf));
}

static int g_broadcast(void *impl, dl_tensor *t, int src) {
  gpg *p = impl;
  if (begin(p, "broadcast", PG_BROADCAST, src, t->dtype, dl_tensor_numel(t), (int64_t)nbytes(t))) return -1;
  return finish(p, "broadcast", dlg_broadcast(p->g, tensor_first(t), (int64_t)nbytes(t), src,
                                             ebuf, sizeof ebuf));
}

static int g_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  gpg *p = impl;
  if (begin(p, "all_gather", PG_ALL_GATHER, 0, t->dtype, dl_tensor_numel(t), (int64_t)nbytes(t))) return -1;
  return finish(p, "all_gather", dlg_all_gather(p->g, tensor_first(out), tensor_first(t),
                                               (int64_t)nbytes(t), ebuf, sizeof ebuf));
}

static int g_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  gpg *p = impl;
  if (begin(p, "reduce_scatter", PG_REDUCE_SCATTER, op, t->dtype, dl_tensor_numel(t), (int64_t)nbytes(t))) return -1;
  return finish(p, "reduce_scatter",
              dlg_reduce_scatter(p->g, tensor_first(out), tensor_first(t), dl_tensor_numel(out),
                                 t->dtype, op, ebuf, sizeof ebuf));
}

static int g_send(void *impl, const dl_tensor *t, int dst) {
  gpg *p = impl;
  return pass(dlg_send(p->g, tensor_first(t), (int64_t)nbytes(t), dst, ebuf, sizeof ebuf));
}

static int g_recv(void *impl, dl_tensor *t, int src) {
  gpg *p = impl;
  return pass(dlg_recv(p->g, tensor_first(t), (int64_t)nbytes(t), src, ebuf, sizeof ebuf));
}

static int g_barrier(void *impl) {
  gpg *p = impl;
  if (begin(p, "barrier", PG_BARRIER, 0, 0, 0, 0)) return -1;
  return finish(p, "barrier", dlg_barrier(p->g, ebuf, sizeof ebuf));
}

static void g_set_timeout(void *impl, double s) {
  ((gpg *)impl)->timeout = s;
  dlg_set_timeout(((gpg *)impl)->g, s);
}

static void g_free(void *impl) {
  gpg *p = impl;
  if (!p) return;
  if (p->g) dlg_free(p->g);
  free(p->all);
  free(p);
}

DL_HIDDEN const pg_ops gloo_pg_ops = {
  "gloo", g_all_reduce, g_broadcast, g_all_gather, g_reduce_scatter,
  g_send, g_recv, g_barrier, g_set_timeout, g_free,
  NULL  /* all_reduce_many: one call at a time */
};

DL_HIDDEN void *gloo_pg_new(dl_store *store, const char *prefix, int rank, int world,
                            int stride, const char *host, double timeout_s) {
  char addr[INET6_ADDRSTRLEN + 1] = "127.0.0.1";
  /* The address this process reaches the store from is on a route the
  ** other nodes can use back; DDP_GLOO_HOST overrides it. */
  const char *env = getenv("DDP_GLOO_HOST");
  if (!host && env && *env) host = env;
  if (!host && store && dl_store_local_addr(store, addr, (int)sizeof addr) == 0) host = addr;
  if (!host) host = addr;
  gpg *p = calloc(1, sizeof *p);
  if (!p) return dl_errp(EM_PG_OS, "gloo", "calloc", "out of memory");
  p->world = world;
  p->rank = rank;
  p->stride = stride;
  p->all = calloc((size_t)world, sizeof *p->all);
  if (!p->all) { free(p); return dl_errp(EM_PG_OS, "gloo", "calloc", "out of memory"); }
  p->store = store;
  p->timeout = timeout_s > 0 ? timeout_s : 600;
  snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
  const char *dbg = getenv("DDP_DEBUG");
  p->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
  p->g = dlg_new(store, prefix, rank, world, host, timeout_s > 0 ? timeout_s : 600, ebuf,
                 sizeof ebuf);
  if (!p->g) {
    free(p->all);
    free(p);
    dl_err(EM_PG_PASS, ebuf);
    return NULL;
  }
  return p;
}
