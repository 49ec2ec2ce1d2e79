/*
** checkpoint.c -- activation checkpointing's part of the engine: a forward
** that records its graph but keeps no tensor for backward, and the node
** that then stands in for that graph (CheckpointBackward).
**
** Why the graph is recorded at all: its boundary (the leaves and older
** nodes it reached: parameters, inputs, tensors the function captured,
** views of them made inside) is what the checkpoint node's edges must be,
** so that the outer backward counts every parameter's consumers and
** completes its gradient once -- the trap of PyTorch's reentrant
** checkpoint under DDP ("mark a variable ready only once") cannot happen.
** Nodes are small; the activations they would save are what checkpointing
** gives back, and they are not saved (engine.c's ag_save).
**
** The node's backward is Lua's (ddp.checkpoint recomputes the forward):
** pass.c pauses at it.  When the node goes, its id is queued for Lua, which
** drops what it kept for the recompute.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"

static _Thread_local int depth;

DL_HIDDEN int ag_checkpointing(void) { return depth > 0; }

DL_API double dl_checkpoint_begin(void) {
  depth++;
  return dl_autograd_next_seq();
}

DL_API void dl_checkpoint_end(void) {
  if (depth > 0) depth--;
}

DL_HIDDEN int bw_checkpoint(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  (void)n, (void)g, (void)gin;
  return dl_err(EM_AG_CKPT_LUA, "backward");
}

/* -- The ids of freed nodes ----------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t *freed;
static int nfreed, capfreed;

DL_HIDDEN void ag_checkpoint_released(ag_node *n) {
  pthread_mutex_lock(&mu);
  if (nfreed == capfreed) {
    int cap = capfreed ? capfreed * 2 : 64;
    int64_t *f = realloc(freed, sizeof *f * (size_t)cap);
    if (f) freed = f, capfreed = cap;
  }
  /* out of memory: Lua keeps the entry (a leak, not a crash) */
  if (nfreed < capfreed) freed[nfreed++] = n->iarg[0];
  pthread_mutex_unlock(&mu);
}

DL_API int dl_checkpoint_freed(int64_t *out, int max) {
  if (!out || max <= 0) return 0;
  pthread_mutex_lock(&mu);
  int k = nfreed < max ? nfreed : max;
  memcpy(out, freed + (nfreed - k), sizeof *out * (size_t)k);
  nfreed -= k;
  pthread_mutex_unlock(&mu);
  return k;
}

/* -- The node -------------------------------------------------------------------- */

/* A set of node pointers (open addressing; power-of-two size). */
typedef struct { const ag_node **a; size_t cap, n; } nodeset;

static int set_add(nodeset *s, const ag_node *x) {  /* 1 added, 0 there, -1 no memory */
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    const ag_node **a = calloc(cap, sizeof *a);
    if (!a) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->a[i]) continue;
      size_t h = ((uintptr_t)s->a[i] >> 4) & (cap - 1);
      while (a[h]) h = (h + 1) & (cap - 1);
      a[h] = s->a[i];
    }
    free(s->a);
    s->a = a, s->cap = cap;
  }
  size_t h = ((uintptr_t)x >> 4) & (s->cap - 1);
  while (s->a[h]) {
    if (s->a[h] == x) return 0;
    h = (h + 1) & (s->cap - 1);
  }
  s->a[h] = x;
  s->n++;
  return 1;
}

/* An edge out of the checkpointed graph, with the shape its consumer saw. */
typedef struct {
  ag_edge e;
  int8_t ndim, dtype;
  int64_t shape[DL_MAX_DIMS];
} boundary;

DL_API int dl_checkpoint_attach(dl_tensor *out, double mark, int64_t id) {
  static const char *const op = "checkpoint";
  if (check_tensor_any(op, out)) return -1;
  ag_node *top = ag_grad_fn(out);
  uint64_t from = mark > 0 ? (uint64_t)mark : 0;
  if (!top || top->seq < from) return 0;
  nodeset seen = {0};
  boundary *bs = NULL;
  int nb = 0, capb = 0, rc = 0, sp = 0, caps = 64;
  const ag_node **stack = malloc(sizeof *stack * (size_t)caps);
  if (!stack || set_add(&seen, top) < 0) rc = dl_err(EM_NOMEM, op, 0LL, 0LL);
  if (!rc) stack[sp++] = top;
  while (!rc && sp > 0) {
    const ag_node *x = stack[--sp];
    for (int i = 0; !rc && i < x->nin; i++) {
      const ag_edge *e = &x->next[i];
      if (!e->leaf && !e->node) continue;
      if (e->node && e->node->seq >= from) {  /* inside: walk on */
        int added = set_add(&seen, e->node);
        if (added < 0) rc = dl_err(EM_NOMEM, op, 0LL, 0LL);
        if (added <= 0) continue;
        if (sp == caps) {
          const ag_node **st = realloc(stack, sizeof *st * (size_t)(caps *= 2));
          if (!st) {
            rc = dl_err(EM_NOMEM, op, 0LL, 0LL);
            break;
          }
          stack = st;
        }
        stack[sp++] = e->node;
        continue;
      }
      int dup = 0;
      for (int k = 0; k < nb && !dup; k++) dup = bs[k].e.leaf == e->leaf && bs[k].e.node == e->node;
      if (dup) continue;
      if (nb == capb) {
        int cap = capb ? capb * 2 : 16;
        boundary *b = realloc(bs, sizeof *b * (size_t)cap);
        if (!b) {
          rc = dl_err(EM_NOMEM, op, 0LL, 0LL);
          break;
        }
        bs = b, capb = cap;
      }
      boundary *b = &bs[nb++];
      b->e = *e;
      b->ndim = x->in_ndim[i];
      b->dtype = x->in_dtype[i];
      memcpy(b->shape, x->in_shape[i], sizeof b->shape);
    }
  }
  free(stack);
  free(seen.a);
  ag_node *n = rc ? NULL : ag_node_alloc(AG_CHECKPOINT, nb);
  if (!rc && !n) rc = -1;
  for (int i = 0; !rc && i < nb; i++) {
    n->next[i] = bs[i].e;
    if (bs[i].e.leaf) dl_tensor_retain(bs[i].e.leaf);
    if (bs[i].e.node) atomic_fetch_add(&bs[i].e.node->refcount, 1);
    n->needs[i] = 1;
    n->in_ndim[i] = bs[i].ndim;
    n->in_dtype[i] = bs[i].dtype;
    memcpy(n->in_shape[i], bs[i].shape, sizeof bs[i].shape);
  }
  free(bs);
  if (rc) return -1;
  n->iarg[0] = id;
  /* the recorded graph goes with out's old grad_fn */
  if (ag_attach(out, n)) return -1;
  return nb;
}
