/*
** dist/store_table.h -- the store server's table (dist/store_table.c): a
** chained hash of byte-string keys and their values, with the bound on
** what it holds (keys, bytes) that keeps a job's clients from growing the
** launcher without end.
*/
#ifndef DL_STORE_TABLE_H
#define DL_STORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

typedef struct store_entry {
  struct store_entry *next;
  uint64_t hash;
  char *val;
  size_t vlen;
  uint32_t klen;
  char key[];
} store_entry;

typedef struct store_table {
  store_entry **b;
  size_t nb, n;
  size_t bytes;                 /* keys and values held */
  size_t max_bytes, max_keys;   /* the bound (store_table_bound); 0: not set yet */
} store_table;

/* The bound, from DDP_STORE_MAX_MB and DDP_STORE_MAX_KEYS (read by the
** server at its start), else a quarter of the memory (of the cgroup's
** limit where one is set, half of it) and a million keys. */
DL_HIDDEN void store_table_bound(store_table *t);
DL_HIDDEN store_entry *store_table_find(store_table *t, const char *k, uint32_t n);
/* Stores a copy of the value: 0; -1 out of memory; -2 past the bound, with
** why (cap bytes) saying so; the table unchanged on failure. */
DL_HIDDEN int store_table_put(store_table *t, const char *k, uint32_t n, const void *v, size_t vlen,
                              char *why, size_t cap);
DL_HIDDEN int store_table_del(store_table *t, const char *k, uint32_t n);
DL_HIDDEN void store_table_free(store_table *t);

#endif
