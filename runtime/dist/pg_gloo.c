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

typedef struct gpg {
  dlg *g;
  dl_store *store;
  int rank, world, stride, debug;
  int64_t seq;
  double timeout;
  char prefix[160];
  char why[300];  /* set once a DDP_DEBUG check failed: the group is unusable */
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

typedef struct call { int64_t seq, numel; int32_t kind, arg, dtype, pad; } call;

/* Numbers the call and, under DDP_DEBUG=1, compares every rank's call
** first: a fixed-size all_gather that cannot itself mismatch, whereas
** mismatched sizes reaching Gloo end the process (gloo.cc). */
static int begin(gpg *p, const char *name, int kind, int arg, int dtype, int64_t numel) {
  if (p->why[0]) return dl_err(EM_PG_BROKEN, nm(p, name), p->why);
  p->seq++;
  if (!p->debug) return 0;
  call mine = { p->seq, numel, kind, arg, dtype, 0 };
  call *all = calloc((size_t)p->world, sizeof *all);
  if (!all) return dl_err(EM_PG_OS, name, "calloc", "out of memory");
  if (dlg_all_gather(p->g, all, &mine, sizeof mine, ebuf, sizeof ebuf)) {
    free(all);
    return pass(-1);
  }
  int same = 1;
  for (int r = 0; r < p->world; r++) same &= !memcmp(&all[r], &mine, sizeof mine);
  if (same) { free(all); return 0; }
  char msg[900];
  size_t n = 0;
  for (int r = 0; r < p->world && n < sizeof msg - 100; r++) {
    char d[120];
    pg_describe(d, sizeof d, all[r].kind, all[r].arg, all[r].dtype, all[r].numel, all[r].seq);
    n += (size_t)snprintf(msg + n, sizeof msg - n, "%srank %d called %s", r ? "; " : "", r, d);
  }
  free(all);
  dl_err(EM_PG_MISMATCH, nm(p, name), sq(p), msg);
  snprintf(p->why, sizeof p->why, "%s", dl_last_error());
  return -1;
}

static size_t nbytes(const dl_tensor *t) {
  return (size_t)dl_tensor_numel(t) * dl_dtype_sizes[t->dtype];
}

static int g_all_reduce(void *impl, dl_tensor *t, int op) {
  gpg *p = impl;
  if (begin(p, "all_reduce", PG_ALL_REDUCE, op, t->dtype, dl_tensor_numel(t))) return -1;
  return done(p, "all_reduce", dlg_all_reduce(p->g, tensor_first(t), dl_tensor_numel(t),
                                               t->dtype, op, ebuf, sizeof ebuf));
}

static int g_broadcast(void *impl, dl_tensor *t, int src) {
  gpg *p = impl;
  if (begin(p, "broadcast", PG_BROADCAST, src, t->dtype, dl_tensor_numel(t))) return -1;
  return done(p, "broadcast", dlg_broadcast(p->g, tensor_first(t), (int64_t)nbytes(t), src,
                                             ebuf, sizeof ebuf));
}

static int g_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  gpg *p = impl;
  if (begin(p, "all_gather", PG_ALL_GATHER, 0, t->dtype, dl_tensor_numel(t))) return -1;
  return done(p, "all_gather", dlg_all_gather(p->g, tensor_first(out), tensor_first(t),
                                               (int64_t)nbytes(t), ebuf, sizeof ebuf));
}

static int g_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  gpg *p = impl;
  if (begin(p, "reduce_scatter", PG_REDUCE_SCATTER, op, t->dtype, dl_tensor_numel(t))) return -1;
  return done(p, "reduce_scatter",
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
  if (begin(p, "barrier", PG_BARRIER, 0, 0, 0)) return -1;
  return done(p, "barrier", dlg_barrier(p->g, ebuf, sizeof ebuf));
}

static void g_set_timeout(void *impl, double s) {
  ((gpg *)impl)->timeout = s;
  dlg_set_timeout(((gpg *)impl)->g, s);
}

static void g_free(void *impl) {
  gpg *p = impl;
  if (!p) return;
  if (p->g) dlg_free(p->g);
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
  p->store = store;
  p->timeout = timeout_s > 0 ? timeout_s : 600;
  snprintf(p->prefix, sizeof p->prefix, "%s", prefix);
  const char *dbg = getenv("DDP_DEBUG");
  p->debug = dbg && *dbg && strcmp(dbg, "0") != 0;
  p->g = dlg_new(store, prefix, rank, world, host, timeout_s > 0 ? timeout_s : 600, ebuf,
                 sizeof ebuf);
  if (!p->g) {
    free(p);
    dl_err(EM_PG_PASS, ebuf);
    return NULL;
  }
  return p;
}
