/*
** dist/store_table.c -- the store server's table: a chained hash of
** byte-string keys, and its bound.  Why a bound: every key a client sets
** lives in the launcher of node 0 until deleted, so a script that sets
** keys in a loop (or a hostile client with the token) grew it until the
** kernel killed it, ending the job with no word (10,000 keys of 1 MiB in
** a 2 GB cgroup).  Past the bound a set is refused with a message the
** client raises, and the store goes on.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/store_table.h"

static uint64_t hash_key(const char *k, uint32_t n) {
  uint64_t h = 1469598103934665603ull;  /* FNV-1a */
  for (uint32_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
  return h;
}

/* The cgroup's memory limit in bytes (v2, then v1), or 0. */
static size_t cgroup_limit(void) {
  const char *files[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (!f) continue;
    unsigned long long v = 0;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok && v > 0 && v < (1ull << 62)) return (size_t)v;
  }
  return 0;
}

static size_t env_size(const char *name, size_t dflt, size_t unit) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  return *end || n == 0 ? dflt : (size_t)n * unit;
}

DL_HIDDEN void store_table_bound(store_table *t) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  size_t mem = pages > 0 && psize > 0 ? (size_t)pages * (size_t)psize / 4 : (size_t)1 << 30;
  size_t cg = cgroup_limit();
  if (cg && cg / 2 < mem) mem = cg / 2;
  if (mem < (size_t)64 << 20) mem = (size_t)64 << 20;
  t->max_bytes = env_size("DDP_STORE_MAX_MB", mem, (size_t)1 << 20);
  t->max_keys = env_size("DDP_STORE_MAX_KEYS", 1000000, 1);
}

static store_entry **slot(store_table *t, const char *k, uint32_t n) {
  if (!t->nb) return NULL;
  uint64_t h = hash_key(k, n);
  store_entry **pp = &t->b[h & (t->nb - 1)];
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->hash == h && (*pp)->klen == n && !memcmp((*pp)->key, k, n)) break;
  return pp;
}

DL_HIDDEN store_entry *store_table_find(store_table *t, const char *k, uint32_t n) {
  store_entry **pp = slot(t, k, n);
  return pp ? *pp : NULL;
}

static int grow(store_table *t) {
  size_t nb = t->nb ? t->nb * 2 : 64;
  store_entry **b = calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < t->nb; i++)
    for (store_entry *e = t->b[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
    }
  free(t->b);
  t->b = b, t->nb = nb;
  return 0;
}

static double mib(size_t b) { return (double)b / (1 << 20); }

DL_HIDDEN int store_table_put(store_table *t, const char *k, uint32_t n, const void *v, size_t vlen,
                              char *why, size_t cap) {
  if (!t->max_bytes) store_table_bound(t);
  store_entry *e = store_table_find(t, k, n);
  size_t after = t->bytes - (e ? e->klen + e->vlen : 0) + n + vlen;
  if (!e && t->n >= t->max_keys) {
    snprintf(why, cap, "the store holds %zu keys, its bound (DDP_STORE_MAX_KEYS); delete the keys no "
             "longer needed", t->n);
    return -2;
  }
  if (after > t->max_bytes && after > t->bytes) {
    snprintf(why, cap, "it would hold %.1f MiB in %zu keys, past its bound of %.0f MiB "
             "(DDP_STORE_MAX_MB); delete the keys no longer needed", mib(after), t->n + !e,
             mib(t->max_bytes));
    return -2;
  }
  char *copy = malloc(vlen ? vlen : 1);
  if (!copy) return -1;
  memcpy(copy, v, vlen);
  if (!e) {
    if (t->n >= t->nb && grow(t)) { free(copy); return -1; }
    if (!(e = malloc(sizeof *e + n))) { free(copy); return -1; }
    memcpy(e->key, k, n);
    e->klen = n, e->hash = hash_key(k, n), e->val = NULL, e->vlen = 0;
    e->next = t->b[e->hash & (t->nb - 1)];
    t->b[e->hash & (t->nb - 1)] = e;
    t->n++;
    t->bytes += n;
  }
  free(e->val);
  t->bytes = t->bytes - e->vlen + vlen;
  e->val = copy, e->vlen = vlen;
  return 0;
}

DL_HIDDEN int store_table_del(store_table *t, const char *k, uint32_t n) {
  store_entry **pp = slot(t, k, n);
  if (!pp || !*pp) return 0;
  store_entry *e = *pp;
  *pp = e->next;
  t->bytes -= e->klen + e->vlen;
  free(e->val);
  free(e);
  t->n--;
  return 1;
}

DL_HIDDEN void store_table_free(store_table *t) {
  for (size_t i = 0; i < t->nb; i++)
    for (store_entry *e = t->b[i], *next; e; e = next) {
      next = e->next;
      free(e->val);
      free(e);
    }
  free(t->b);
  memset(t, 0, sizeof *t);
}
