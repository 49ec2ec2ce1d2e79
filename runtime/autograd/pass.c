/*
** pass.c -- backward passes over the graph engine.c records: a ready
** queue ordered by creation, so gradients come out in reverse forward
** order, with a hook when a leaf's is complete.
**
** A pass can pause: at a checkpoint node (checkpoint.c), whose backward
** recomputes a forward in Lua, dl_pass_run returns 1 and the caller
** (ddp.checkpoint) recomputes, runs an inner pass of its own, hands its
** gradients over with dl_pass_give and runs the outer pass on.  No Lua is
** called from C, so errors never cross the FFI.  The inner pass captures:
** it stops at the boundary of the recomputed graph (every leaf, every
** node older than the recompute) and keeps the gradients that arrive
** there, touching no .grad and running no hook, so each parameter's
** gradient is completed once, by the outer pass, as without a checkpoint.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "core/trace.h"

static atomic_uint next_pass;

/* Sums g over the dims it was broadcast along, down to shape. */
static dl_tensor *sum_to(dl_tensor *g, const int64_t *shape, int ndim) {
  if (g->ndim == ndim && !memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim))
    return g;
  int dims[DL_MAX_DIMS], nd = 0, lead = g->ndim - ndim;
  for (int i = 0; i < g->ndim; i++)
    if (i < lead || (shape[i - lead] == 1 && g->shape[i] != 1)) dims[nd++] = i;
  dl_tensor *s = nd ? dl_reduce(DL_SUM, g, dims, nd, 1, 0) : (dl_tensor_retain(g), g);
  dl_tensor *r = s ? dl_reshape(s, shape, ndim) : NULL;
  dl_tensor_release(s);
  dl_tensor_release(g);
  return r;
}

/* Whether the engine alone holds t, a dense tensor: it may then be summed
** into in place. */
static int sole_dense(const dl_tensor *t) {
  return atomic_load(&t->refcount) == 1 && atomic_load(&t->storage->refcount) == 1 &&
         t->offset == 0 && dl_tensor_is_contiguous(t);
}

/* Adds g into *acc (taking ownership of g): in place when the sum is the
** engine's own, else into a new tensor. */
static int accumulate(dl_tensor **acc, dl_tensor *g) {
  if (!*acc) {
    *acc = g;
    return 0;
  }
  if (sole_dense(*acc) && (*acc)->dtype == g->dtype) {
    int rc = dl_binary_(DL_ADD, *acc, g);
    dl_tensor_release(g);
    return rc;
  }
  dl_tensor *s = dl_binary(DL_ADD, *acc, g);
  dl_tensor_release(g);
  if (!s) return -1;
  dl_tensor_release(*acc);
  *acc = s;
  return 0;
}

/* A leaf's pass is complete: add into .grad (in place when it exists, so
** a grad that is a view of a bucket stays one), then run its hooks. */
static int finish_leaf(dl_tensor *leaf) {
  ag_meta *m = ag_meta_of(leaf);
  dl_tensor *g = m->acc;
  m->acc = NULL;
  if (!g) return 0;
  int rc = 0;
  if (m->grad) {
    rc = dl_binary_(DL_ADD, m->grad, g);
    dl_tensor_release(g);
  } else if (atomic_load(&g->refcount) == 1 && atomic_load(&g->storage->refcount) == 1 &&
             dl_tensor_is_contiguous(g) && g->offset == 0) {
    m->grad = g;  /* ours alone: keep it */
  } else {
    m->grad = dl_contiguous(g);
    if (m->grad == g) {  /* contiguous but shared: own a copy */
      dl_tensor_release(m->grad);
      m->grad = dl_clone(g);
    }
    dl_tensor_release(g);
    rc = m->grad ? 0 : -1;
  }
  for (int i = 0; !rc && i < m->nhooks; i++) m->hooks[i].fn(m->hooks[i].ctx, leaf);
  return rc;
}

/* Max-heap of ready nodes by seq. */
typedef struct { ag_node **a; int n, cap; } heap_t;

static int heap_push(heap_t *h, ag_node *x) {
  if (h->n == h->cap) {
    int cap = h->cap ? h->cap * 2 : 64;
    ag_node **a = realloc(h->a, sizeof *a * (size_t)cap);
    if (!a) return -1;
    h->a = a, h->cap = cap;
  }
  int i = h->n++;
  while (i > 0 && h->a[(i - 1) / 2]->seq < x->seq) {
    h->a[i] = h->a[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->a[i] = x;
  return 0;
}

static ag_node *heap_pop(heap_t *h) {
  ag_node *top = h->a[0], *x = h->a[--h->n];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && h->a[c + 1]->seq > h->a[c]->seq) c++;
    if (h->a[c]->seq <= x->seq) break;
    h->a[i] = h->a[c];
    i = c;
  }
  if (h->n) h->a[i] = x;
  return top;
}

/* -- The pass ------------------------------------------------------------------- */

typedef struct { const void *key; dl_tensor *g; } capture_t;

struct dl_grad_pass {
  unsigned pass;
  int retain, rc, done;
  int capture;            /* an inner pass: stops at the boundary */
  uint64_t stop;          /* capture: nodes older than this are the boundary */
  ag_node *top;           /* retained: the root may die in a hook */
  ag_node **all;          /* the nodes this pass reaches, for cleanup */
  int nall;
  heap_t ready;
  ag_node *paused;        /* the checkpoint node the caller runs, or NULL */
  dl_tensor *paused_grad; /* its output's gradient */
  dl_tensor **gin;        /* its inputs' gradients, given by dl_pass_give */
  capture_t *cap;
  int ncap, capcap;
};

/* Whether an edge of a capturing pass leads out of the recomputed graph. */
static int boundary_node(const dl_grad_pass *p, const ag_node *y) {
  return p->capture && y && y->seq < p->stop;
}

static int capture_add(dl_grad_pass *p, const void *key, dl_tensor *g) {
  for (int i = 0; i < p->ncap; i++)
    if (p->cap[i].key == key) return accumulate(&p->cap[i].g, g);
  if (p->ncap == p->capcap) {
    int cap = p->capcap ? p->capcap * 2 : 16;
    capture_t *c = realloc(p->cap, sizeof *c * (size_t)cap);
    if (!c) {
      dl_tensor_release(g);
      return dl_err(EM_NOMEM, "backward", 0LL, 0LL);
    }
    p->cap = c, p->capcap = cap;
  }
  p->cap[p->ncap++] = (capture_t){key, g};
  return 0;
}

/* Counts, for this pass, how many consumers each node and leaf has. */
static int count_deps(dl_grad_pass *p) {
  int cap = 64, sp = 0, n = 0, lcap = 64;
  ag_node **stack = malloc(sizeof *stack * (size_t)cap);
  ag_node **list = malloc(sizeof *list * (size_t)lcap);
  if (!stack || !list) goto oom;
  p->top->pass = p->pass;
  p->top->deps = 0;
  stack[sp++] = p->top;
  while (sp > 0) {
    ag_node *x = stack[--sp];
    if (n == lcap) {
      ag_node **l = realloc(list, sizeof *l * (size_t)(lcap *= 2));
      if (!l) goto oom;
      list = l;
    }
    list[n++] = x;
    for (int i = 0; i < x->nin; i++) {
      ag_node *y = x->next[i].node;
      dl_tensor *leaf = x->next[i].leaf;
      if (leaf && !p->capture) {
        ag_meta *m = ag_meta_of(leaf);
        if (m->pass != p->pass) m->pass = p->pass, m->pending = 0;
        m->pending++;
      }
      if (!y || boundary_node(p, y)) continue;
      if (y->pass != p->pass) {
        y->pass = p->pass;
        y->deps = 0;
        if (sp == cap) {
          ag_node **s = realloc(stack, sizeof *s * (size_t)(cap *= 2));
          if (!s) goto oom;
          stack = s;
        }
        stack[sp++] = y;
      }
      y->deps++;
    }
  }
  free(stack);
  p->all = list;
  p->nall = n;
  return 0;
oom:
  free(stack);
  free(list);
  return dl_err(EM_NOMEM, "backward", 0LL, 0LL);
}

/* Hands gin (taken) to x's inputs: summed to their shapes, cast to their
** dtypes, into the next nodes' sums (readying those complete), the leaves'
** (completing those whose every consumer has run) or, past a capturing
** pass's boundary, into its captures. */
static int propagate(dl_grad_pass *p, ag_node *x, dl_tensor **gin, int rc) {
  for (int i = 0; i < x->nin; i++) {
    dl_tensor *gi = gin ? gin[i] : NULL;
    if (gin) gin[i] = NULL;
    ag_node *y = x->next[i].node;
    dl_tensor *leaf = x->next[i].leaf;
    if (!rc && gi && x->needs[i]) {
      gi = sum_to(gi, x->in_shape[i], x->in_ndim[i]);
      if (gi && gi->dtype != x->in_dtype[i]) {
        dl_tensor *c = dl_to_dtype(gi, x->in_dtype[i]);
        dl_tensor_release(gi);
        gi = c;
      }
      if (!gi) rc = -1;
    }
    if (p->capture && (leaf || boundary_node(p, y))) {
      if (!rc && gi) rc = capture_add(p, leaf ? (const void *)leaf : (const void *)y, gi), gi = NULL;
      dl_tensor_release(gi);
      continue;
    }
    if (!rc && gi && y) rc = accumulate(&y->grad, gi), gi = NULL;
    if (!rc && gi && leaf) rc = accumulate(&ag_meta_of(leaf)->acc, gi), gi = NULL;
    dl_tensor_release(gi);
    if (rc) continue;
    if (y && y->pass == p->pass && --y->deps == 0 && heap_push(&p->ready, y))
      rc = dl_err(EM_NOMEM, "backward", 0LL, 0LL);
    if (leaf && --ag_meta_of(leaf)->pending == 0) rc = finish_leaf(leaf);
  }
  if (!p->retain) {
    ag_drop_saved(x);
    x->freed = 1;
  }
  return rc;
}

/* Runs x's backward and hands its inputs their gradients; 1 when x is a
** checkpoint: the pass pauses there for its caller. */
static int run_node(dl_grad_pass *p, ag_node *x) {
  dl_tensor *g = x->grad;
  x->grad = NULL;
  if (x->freed) {
    dl_tensor_release(g);
    if (x->freed == 2) return dl_err(EM_AG_CKPT_ESCAPED, "backward", x->rule->name);
    return dl_err(EM_AG_FREED, "backward", x->rule->name);
  }
  if (x->rule->kind == AG_CHECKPOINT) {
    p->paused = x;
    p->paused_grad = g;
    p->gin = calloc((size_t)x->nin + 1, sizeof *p->gin);
    return p->gin ? 1 : dl_err(EM_NOMEM, "backward", 0LL, 0LL);
  }
  for (int i = 0; i < x->nsaved; i++) {
    if (!x->saved[i]) continue;  /* an optional tensor that was absent */
    unsigned now = atomic_load(&x->saved[i]->storage->version);
    if (now != x->saved_version[i]) {
      dl_tensor_release(g);
      return dl_err(EM_AG_VERSION, "backward", x->rule->name, now, x->saved_version[i]);
    }
  }
  dl_tensor **gin = calloc((size_t)x->nin + 1, sizeof *gin);
  /* a slice of an input whose gradient sum exists: add into its slice */
  dl_tensor **sum = NULL;
  ag_node *y0 = x->nin > 0 ? x->next[0].node : NULL;
  dl_tensor *l0 = x->nin > 0 ? x->next[0].leaf : NULL;
  if (g && ag_is_slice(x) && x->needs[0] && !(p->capture && (l0 || boundary_node(p, y0))))
    sum = y0 ? &y0->grad : l0 ? &ag_meta_of(l0)->acc : NULL;
  int into = sum && *sum && sole_dense(*sum) && (*sum)->dtype == g->dtype &&
             g->dtype == x->in_dtype[0];
  int rc = !gin ? -1 : into ? ag_slice_add(x, *sum, g) : g ? x->rule->backward(x, g, gin) : 0;
  if (!gin) dl_err(EM_NOMEM, "backward", 0LL, 0LL);
  dl_tensor_release(g);
  rc = propagate(p, x, gin, rc);
  free(gin);
  return rc;
}

/* run_node, as a span of the trace while one is on (the node's grad_fn
** name and creation number: lua/ddp/core/trace.lua gives each module the
** nodes its forward made). */
static int traced_run(dl_grad_pass *p, ag_node *x) {
  if (!trace_on()) return run_node(p, x);
  dl_trace_event e = {.t0 = trace_now(), .seq = (int64_t)x->seq, .kind = DL_TK_NODE, .bucket = -1};
  snprintf(e.name, sizeof e.name, "%s", x->rule->name);
  int rc = run_node(p, x);
  e.t1 = trace_now();
  trace_add(&e);
  return rc;
}

DL_API dl_grad_pass *dl_pass_begin(dl_tensor *root, const dl_tensor *grad, int retain_graph,
                                   double stop_seq) {
  if (check_tensor_any("backward", root)) return NULL;
  ag_meta *m = ag_meta_of(root);
  if (!m || !(m->requires_grad || m->grad_fn)) return dl_errp(EM_AG_NOGRAD, "backward");
  dl_tensor *g;
  if (grad) {
    if (grad->ndim != root->ndim ||
        memcmp(grad->shape, root->shape, sizeof(int64_t) * (size_t)root->ndim))
      return dl_errp(EM_AG_GRAD_SHAPE, "backward", fmt_tshape(grad), fmt_tshape(root));
    g = as_dtype(grad, root->dtype);
  } else {
    if (dl_tensor_numel(root) != 1) return dl_errp(EM_AG_SCALAR, "backward", fmt_tshape(root));
    g = full_on(root->storage->device, root->shape, root->ndim, root->dtype, 1.0);
  }
  if (!g) return NULL;
  dl_grad_pass *p = calloc(1, sizeof *p);
  if (!p) {
    dl_tensor_release(g);
    return dl_errp(EM_NOMEM, "backward", (long long)sizeof *p, 0LL);
  }
  p->retain = retain_graph != 0;
  p->capture = stop_seq >= 0;
  p->stop = p->capture ? (uint64_t)stop_seq : 0;
  p->pass = atomic_fetch_add(&next_pass, 1) + 1;
  if (!m->grad_fn || boundary_node(p, m->grad_fn)) {
    /* the root itself: a leaf (or, capturing, a tensor from before) */
    p->done = 1;
    if (p->capture) {
      p->rc = capture_add(p, m->grad_fn ? (const void *)m->grad_fn : (const void *)root, g);
    } else {
      m->acc = g;
      int was = dl_set_grad_enabled(0);
      p->rc = finish_leaf(root);
      dl_set_grad_enabled(was);
    }
    return p;
  }
  p->top = m->grad_fn;
  atomic_fetch_add(&p->top->refcount, 1);
  if ((p->rc = count_deps(p))) {
    dl_tensor_release(g);
    return p;
  }
  p->top->grad = g;
  if (heap_push(&p->ready, p->top)) p->rc = dl_err(EM_NOMEM, "backward", 0LL, 0LL);
  return p;
}

DL_API int dl_pass_run(dl_grad_pass *p) {
  if (!p) return dl_err(EM_NULLARG, "backward", "pass");
  if (p->rc) return -1;
  if (p->done) return 0;
  int was = dl_set_grad_enabled(0);
  int rc = 0;
  if (p->paused) {  /* the caller ran it: its inputs' gradients go on */
    ag_node *x = p->paused;
    p->paused = NULL;
    dl_tensor_release(p->paused_grad);
    p->paused_grad = NULL;
    rc = propagate(p, x, p->gin, 0);
    free(p->gin);
    p->gin = NULL;
  }
  while (!rc && p->ready.n > 0) rc = traced_run(p, heap_pop(&p->ready));
  dl_set_grad_enabled(was);
  if (rc == 1) return 1;
  p->rc = rc;
  if (!rc) p->done = 1;
  return rc ? -1 : 0;
}

DL_API int64_t dl_pass_node_id(const dl_grad_pass *p) {
  return p && p->paused ? p->paused->iarg[0] : -1;
}

DL_API dl_tensor *dl_pass_node_grad(const dl_grad_pass *p) {
  if (!p || !p->paused) return dl_errp(EM_AG_CKPT_STATE, "backward", "the pass is not at a checkpoint");
  if (!p->paused_grad) return NULL;
  dl_tensor_retain(p->paused_grad);
  return p->paused_grad;
}

DL_API int dl_pass_retains(const dl_grad_pass *p) { return p ? p->retain : 0; }

/* What a captured key is, for messages. */
static void key_name(const dl_grad_pass *p, const void *key, char *out, size_t cap) {
  for (int i = 0; i < p->nall; i++)
    for (int j = 0; j < p->all[i]->nin; j++) {
      const ag_edge *e = &p->all[i]->next[j];
      if (e->leaf == key) {
        snprintf(out, cap, "a leaf of shape %s", fmt_tshape(e->leaf));
        return;
      }
      if (e->node == key) {
        snprintf(out, cap, "the output of %s", e->node->rule->name);
        return;
      }
    }
  snprintf(out, cap, "a tensor");
}

DL_API int dl_pass_give(dl_grad_pass *p, const dl_grad_pass *inner) {
  if (!p || !p->paused || !inner)
    return dl_err(EM_AG_CKPT_STATE, "checkpoint", "no checkpoint waits for its gradients");
  if (!inner->done || inner->rc)
    return dl_err(EM_AG_CKPT_STATE, "checkpoint", "the recomputed backward did not finish");
  ag_node *x = p->paused;
  for (int c = 0; c < inner->ncap; c++) {
    int found = 0;
    for (int i = 0; i < x->nin; i++) {
      const void *key = x->next[i].leaf ? (const void *)x->next[i].leaf : (const void *)x->next[i].node;
      if (key != inner->cap[c].key) continue;
      found = 1;
      dl_tensor_retain(inner->cap[c].g);
      if (accumulate(&p->gin[i], inner->cap[c].g)) return -1;
    }
    if (!found) {
      char what[128];
      key_name(inner, inner->cap[c].key, what, sizeof what);
      return dl_err(EM_AG_CKPT_REACHED, "checkpoint", what);
    }
  }
  return 0;
}

DL_API int dl_pass_end(dl_grad_pass *p, int ok) {
  if (!p) return 0;
  int rc = p->rc;
  if (!ok && !rc) rc = -1;
  if (p->paused) rc = rc ? rc : -1;  /* left at a checkpoint: the caller failed */
  /* on error, drop partial sums so the next pass starts clean */
  for (int i = 0; i < p->nall; i++) {
    dl_tensor_release(p->all[i]->grad);
    p->all[i]->grad = NULL;
    for (int j = 0; rc && !p->capture && j < p->all[i]->nin; j++) {
      dl_tensor *leaf = p->all[i]->next[j].leaf;
      if (leaf && ag_meta_of(leaf)->acc) {
        dl_tensor_release(ag_meta_of(leaf)->acc);
        ag_meta_of(leaf)->acc = NULL;
      }
    }
  }
  dl_tensor_release(p->paused_grad);
  for (int i = 0; p->gin && p->paused && i < p->paused->nin; i++) dl_tensor_release(p->gin[i]);
  free(p->gin);
  for (int i = 0; i < p->ncap; i++) dl_tensor_release(p->cap[i].g);
  free(p->cap);
  free(p->all);
  free(p->ready.a);
  ag_node_release(p->top);
  int capture = p->capture, err = rc != 0;
  free(p);
  if (capture) return err ? -1 : 0;
  if (err) return -1;  /* the pass's error (or the caller's) stands */
  int was = dl_set_grad_enabled(0);  /* hooks run as inside the pass */
  rc = ag_run_end_hooks(0);
  dl_set_grad_enabled(was);
  return rc;
}

DL_API int dl_backward(dl_tensor *root, const dl_tensor *grad, int retain) {
  dl_grad_pass *p = dl_pass_begin(root, grad, retain, -1);
  if (!p) return -1;
  int rc = dl_pass_run(p);
  if (rc == 1) {
    dl_err(EM_AG_CKPT_LUA, "backward");
    dl_pass_end(p, 0);
    return -1;
  }
  return dl_pass_end(p, 1);
}
