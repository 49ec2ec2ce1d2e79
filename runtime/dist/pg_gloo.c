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
  int rank, world, stride;
  int64_t seq;
  double timeout;
  char prefix[160];
  char why[300];  /* set once a DDP_DEBUG check failed: the group is unusable */
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

/* Every call's descriptor (struct call) is compared across ranks before
** any data is used: ranks making different calls (kind, op, dtype or size)
** would otherwise get garbage, a hang or a crash from Gloo.  It travels as
** the head of the call's first message (dlg_first), which for a call of
** at most dlg_inline_max bytes (64 KiB on up to 9 ranks) carries the data
** too: one message to every peer does the whole call, data and check, so
** the check costs no transfer of its own (a 4 KiB all_reduce of 2 ranks:
** 157 us, Gloo's own all_reduce without the check 323 us, the descriptor
** as a separate message 416 us; medians on 2 shared cores).  Larger calls
** send the descriptor alone, compare, then run Gloo's collective: one
** round trip more. */

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

/* Numbers the call, sends its first message (the descriptor, then dlen
** bytes of data for peer q at data + q * stride) and compares every rank's
** descriptor. */
static int first(gpg *p, const char *name, int kind, int arg, int dtype, int64_t numel,
                 const void *data, size_t dlen, size_t stride) {
  if (p->why[0]) return dl_err(EM_PG_BROKEN, nm(p, name), p->why);
  p->seq++;
  call mine = { p->seq, numel, kind, arg, dtype, 0 };
  if (done(p, name, dlg_first(p->g, name, &mine, sizeof mine, data, dlen, stride, ebuf,
                              sizeof ebuf)))
    return -1;
  for (int r = 0; r < p->world; r++) memcpy(&p->all[r], dlg_msg(p->g, r), sizeof(call));
  return compare(p, name);
}

/* Rank r's data in the call's first message. */
static const char *data_of(gpg *p, int r) { return (const char *)dlg_msg(p->g, r) + sizeof(call); }

static int small(gpg *p, size_t bytes) { return bytes <= dlg_inline_max(p->g); }

static int g_all_reduce(void *impl, dl_tensor *t, int op) {
  gpg *p = impl;
  size_t nb = nbytes(t);
  int64_t n = dl_tensor_numel(t);
  void *buf = tensor_first(t);
  if (small(p, nb)) {
    if (first(p, "all_reduce", PG_ALL_REDUCE, op, t->dtype, n, buf, nb, 0)) return -1;
    return done(p, "all_reduce", dlg_reduce_msgs(p->g, buf, sizeof(call), n, t->dtype, op, ebuf,
                                                sizeof ebuf));
  }
  if (first(p, "all_reduce", PG_ALL_REDUCE, op, t->dtype, n, NULL, 0, 0)) return -1;
  return done(p, "all_reduce", dlg_all_reduce(p->g, buf, n, t->dtype, op, ebuf, sizeof ebuf));
}

static int g_broadcast(void *impl, dl_tensor *t, int src) {
  gpg *p = impl;
  size_t nb = nbytes(t);
  void *buf = tensor_first(t);
  if (small(p, nb)) {  /* only src's message carries the data */
    int mine = p->rank == src;
    if (first(p, "broadcast", PG_BROADCAST, src, t->dtype, dl_tensor_numel(t), mine ? buf : NULL,
              mine ? nb : 0, 0))
      return -1;
    if (!mine && nb) memcpy(buf, data_of(p, src), nb);
    return 0;
  }
  if (first(p, "broadcast", PG_BROADCAST, src, t->dtype, dl_tensor_numel(t), NULL, 0, 0)) return -1;
  return done(p, "broadcast", dlg_broadcast(p->g, buf, (int64_t)nb, src, ebuf, sizeof ebuf));
}

static int g_all_gather(void *impl, dl_tensor *out, const dl_tensor *t) {
  gpg *p = impl;
  size_t nb = nbytes(t);
  char *o = tensor_first(out);
  const void *in = tensor_first(t);
  if (small(p, nb)) {
    if (first(p, "all_gather", PG_ALL_GATHER, 0, t->dtype, dl_tensor_numel(t), in, nb, 0)) return -1;
    for (int r = 0; r < p->world && nb; r++) memmove(o + (size_t)r * nb, data_of(p, r), nb);
    return 0;
  }
  if (first(p, "all_gather", PG_ALL_GATHER, 0, t->dtype, dl_tensor_numel(t), NULL, 0, 0)) return -1;
  return done(p, "all_gather", dlg_all_gather(p->g, o, in, (int64_t)nb, ebuf, sizeof ebuf));
}

static int g_reduce_scatter(void *impl, dl_tensor *out, const dl_tensor *t, int op) {
  gpg *p = impl;
  int64_t n = dl_tensor_numel(out);
  size_t bn = (size_t)n * dl_dtype_sizes[t->dtype];  /* one rank's block */
  const void *in = tensor_first(t);
  void *o = tensor_first(out);
  if (small(p, bn)) {  /* peer q gets block q of the input */
    if (first(p, "reduce_scatter", PG_REDUCE_SCATTER, op, t->dtype, dl_tensor_numel(t), in, bn, bn))
      return -1;
    return done(p, "reduce_scatter",
                dlg_reduce_msgs(p->g, o, sizeof(call), n, t->dtype, op, ebuf, sizeof ebuf));
  }
  if (first(p, "reduce_scatter", PG_REDUCE_SCATTER, op, t->dtype, dl_tensor_numel(t), NULL, 0, 0))
    return -1;
  return done(p, "reduce_scatter",
              dlg_reduce_scatter(p->g, o, in, n, t->dtype, op, ebuf, sizeof ebuf));
}

static int g_send(void *impl, const dl_tensor *t, int dst) {
  gpg *p = impl;
  return pass(dlg_send(p->g, tensor_first(t), (int64_t)nbytes(t), dst, ebuf, sizeof ebuf));
}

static int g_recv(void *impl, dl_tensor *t, int src) {
  gpg *p = impl;
  return pass(dlg_recv(p->g, tensor_first(t), (int64_t)nbytes(t), src, ebuf, sizeof ebuf));
}

/* The first message alone is a barrier: every rank waits for every
** peer's. */
static int g_barrier(void *impl) {
  return first(impl, "barrier", PG_BARRIER, 0, 0, 0, NULL, 0, 0);
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
  NULL,  /* all_reduce_many: one call at a time */
  NULL   /* all_gather_inplace: from a copy of this rank's block */
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
