/*
** engine.c -- the reverse-mode engine: per-tensor grad state, graph
** nodes, and backward (a ready queue ordered by creation, so gradients come
** out in reverse forward order, with a hook when a leaf's is complete).
** What each node computes is its rule (rules.h), the formulas in grad_*.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "core/trace.h"

/* Per-tensor state, allocated on first use. */
typedef struct {
  int requires_grad;   /* leaves only; non-leaves have a grad_fn */
  dl_tensor *grad;
  ag_node *grad_fn;
  struct { dl_grad_hook fn; void *ctx; } *hooks;
  int nhooks;
  /* backward pass bookkeeping for leaves */
  unsigned pass;
  int pending;
  dl_tensor *acc;
} ag_meta;

static _Thread_local int grad_disabled;
static atomic_ullong next_seq;
static atomic_uint next_pass;

static ag_meta *meta_of(const dl_tensor *t) { return (ag_meta *)t->autograd; }

DL_HIDDEN void autograd_free(dl_tensor *t);

/* The record of t, made on first use; the core frees it through the hook
** set here (it calls no autograd function itself). */
static ag_meta *meta_get(dl_tensor *t) {
  if (!t->autograd) {
    tensor_set_autograd_free(autograd_free);
    t->autograd = calloc(1, sizeof(ag_meta));
  }
  return meta_of(t);
}

DL_API int dl_set_grad_enabled(int enabled) {
  int prev = !grad_disabled;
  grad_disabled = !enabled;
  return prev;
}

DL_API int dl_is_grad_enabled(void) { return !grad_disabled; }

DL_HIDDEN int tensor_requires_grad(const dl_tensor *t) {
  const ag_meta *m = t ? meta_of(t) : NULL;
  return m && (m->requires_grad || m->grad_fn);
}

DL_API int dl_requires_grad(const dl_tensor *t) { return tensor_requires_grad(t); }

DL_API int dl_is_leaf(const dl_tensor *t) {
  return !(t && meta_of(t) && meta_of(t)->grad_fn);
}

DL_API int dl_requires_grad_(dl_tensor *t, int requires) {
  if (check_tensor_any("requires_grad_", t)) return -1;
  ag_meta *m = meta_of(t);
  if (m && m->grad_fn) {
    if (requires) return 0;  /* already tracked */
    return dl_err(EM_AG_NONLEAF, "requires_grad_", m->grad_fn->rule->name);
  }
  if (requires && !dl_dtype_is_float(t->dtype))
    return dl_err(EM_AG_DTYPE, "requires_grad_", fmt_dtype(t->dtype));
  if (!requires && !m) return 0;
  if (!(m = meta_get(t))) return dl_err(EM_NOMEM, "requires_grad_", 0LL, 0LL);
  m->requires_grad = requires != 0;
  return 0;
}

DL_API dl_tensor *dl_grad(const dl_tensor *t) {
  const ag_meta *m = t ? meta_of(t) : NULL;
  if (!m || !m->grad) return NULL;
  dl_tensor_retain(m->grad);
  return m->grad;
}

DL_API int dl_set_grad(dl_tensor *t, dl_tensor *g) {
  if (check_tensor_any("grad", t)) return -1;
  if (g) {
    if (g->ndim != t->ndim || memcmp(g->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim))
      return dl_err(EM_AG_GRAD_SHAPE, "grad", fmt_tshape(g), fmt_tshape(t));
    if (g->dtype != t->dtype)
      return dl_err(EM_AG_GRAD_DTYPE, "grad", fmt_dtype(g->dtype), fmt_dtype(t->dtype));
  }
  ag_meta *m = g ? meta_get(t) : meta_of(t);
  if (!m) return g ? dl_err(EM_NOMEM, "grad", 0LL, 0LL) : 0;
  dl_tensor_retain(g);
  dl_tensor_release(m->grad);
  m->grad = g;
  return 0;
}

DL_API dl_tensor *dl_detach(const dl_tensor *t) {
  if (check_tensor_any("detach", t)) return NULL;
  return tensor_alias(t, t->shape, t->stride, t->ndim, t->offset);
}

DL_API const char *dl_grad_fn_name(const dl_tensor *t) {
  const ag_meta *m = t ? meta_of(t) : NULL;
  return m && m->grad_fn ? m->grad_fn->rule->name : "";
}

DL_API int dl_add_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx) {
  if (check_tensor_any("add_grad_hook", leaf)) return -1;
  if (!fn) return dl_err(EM_NULLARG, "add_grad_hook", "fn");
  ag_meta *m = meta_get(leaf);
  void *h = m ? realloc(m->hooks, sizeof(*m->hooks) * (size_t)(m->nhooks + 1)) : NULL;
  if (!h) return dl_err(EM_NOMEM, "add_grad_hook", 0LL, 0LL);
  m->hooks = h;
  m->hooks[m->nhooks].fn = fn;
  m->hooks[m->nhooks].ctx = ctx;
  m->nhooks++;
  return 0;
}

DL_API int dl_remove_grad_hook(dl_tensor *leaf, dl_grad_hook fn, void *ctx) {
  ag_meta *m = leaf ? meta_of(leaf) : NULL;
  for (int i = 0; m && i < m->nhooks; i++) {
    if (m->hooks[i].fn != fn || m->hooks[i].ctx != ctx) continue;
    memmove(&m->hooks[i], &m->hooks[i + 1], sizeof(*m->hooks) * (size_t)(m->nhooks - i - 1));
    m->nhooks--;
    return 0;
  }
  return 0;
}

/* Hooks run at the end of every successful backward pass (a DDP reducer
** waits for its buckets there).  Backward runs on one thread at a time. */
static struct { dl_backward_hook fn; void *ctx; } end_hooks[64];
static int n_end_hooks;

DL_API int dl_add_backward_hook(dl_backward_hook fn, void *ctx) {
  if (!fn) return dl_err(EM_NULLARG, "add_backward_hook", "fn");
  if (n_end_hooks == (int)(sizeof end_hooks / sizeof *end_hooks))
    return dl_err(EM_BADVALUE, "add_backward_hook", "too many hooks (64)");
  end_hooks[n_end_hooks].fn = fn;
  end_hooks[n_end_hooks].ctx = ctx;
  n_end_hooks++;
  return 0;
}

DL_API int dl_remove_backward_hook(dl_backward_hook fn, void *ctx) {
  for (int i = 0; i < n_end_hooks; i++) {
    if (end_hooks[i].fn != fn || end_hooks[i].ctx != ctx) continue;
    memmove(&end_hooks[i], &end_hooks[i + 1], sizeof *end_hooks * (size_t)(n_end_hooks - i - 1));
    n_end_hooks--;
    break;
  }
  return 0;
}

/* Every hook runs (a reducer must not be left mid-iteration); the first
** failure is the pass's error. */
static int run_end_hooks(int rc) {
  if (rc) return rc;
  char first[512] = "";
  int status = 0;
  for (int i = 0; i < n_end_hooks; i++) {
    if (end_hooks[i].fn(end_hooks[i].ctx) == 0 || status) continue;
    status = dl_last_error_code() ? dl_last_error_code() : DL_ESTATE;
    snprintf(first, sizeof first, "%s", dl_last_error());
  }
  return status ? dl_err_set(status, first) : 0;
}

DL_API int dl_clear_grad_hooks(dl_tensor *leaf) {
  ag_meta *m = leaf ? meta_of(leaf) : NULL;
  if (m) {
    free(m->hooks);
    m->hooks = NULL;
    m->nhooks = 0;
  }
  return 0;
}

DL_HIDDEN void autograd_free(dl_tensor *t) {
  ag_meta *m = meta_of(t);
  t->autograd = NULL;
  dl_tensor_release(m->grad);
  dl_tensor_release(m->acc);
  ag_node_release(m->grad_fn);
  free(m->hooks);
  free(m);
}

/* -- Nodes --------------------------------------------------------------- */

DL_HIDDEN int ag_needed1(const dl_tensor *a) {
  return !grad_disabled && tensor_requires_grad(a);
}

DL_HIDDEN int ag_needed(dl_tensor *const *ins, int n) {
  if (grad_disabled) return 0;
  for (int i = 0; i < n; i++)
    if (tensor_requires_grad(ins[i])) return 1;
  return 0;
}

DL_HIDDEN ag_node *ag_node_new(ag_rule_kind kind, dl_tensor *const *ins, int n) {
  const ag_rule *rule = &ag_rules[kind];
  ag_node *nd = calloc(1, sizeof *nd);
  if (nd) {
    nd->next = calloc((size_t)n + 1, sizeof *nd->next);
    nd->needs = calloc((size_t)n + 1, 1);
    nd->in_ndim = calloc((size_t)n + 1, 1);
    nd->in_dtype = calloc((size_t)n + 1, 1);
    nd->in_shape = calloc((size_t)n + 1, sizeof *nd->in_shape);
  }
  if (!nd || !nd->next || !nd->needs || !nd->in_ndim || !nd->in_dtype || !nd->in_shape) {
    if (nd) {
      free(nd->next), free(nd->needs), free(nd->in_ndim), free(nd->in_dtype);
      free(nd->in_shape);
    }
    free(nd);
    return dl_errp(EM_NOMEM, rule->name, (long long)sizeof *nd, 0LL);
  }
  atomic_init(&nd->refcount, 1);
  nd->rule = rule;
  nd->seq = atomic_fetch_add(&next_seq, 1);
  nd->nin = n;
  for (int i = 0; i < n; i++) {
    dl_tensor *t = ins[i];
    if (!t) continue;
    nd->in_ndim[i] = t->ndim;
    nd->in_dtype[i] = t->dtype;
    memcpy(nd->in_shape[i], t->shape, sizeof(int64_t) * (size_t)t->ndim);
    ag_meta *m = meta_of(t);
    if (!m || !(m->requires_grad || m->grad_fn)) continue;
    nd->needs[i] = 1;
    if (m->grad_fn) {
      nd->next[i].node = m->grad_fn;
      atomic_fetch_add(&m->grad_fn->refcount, 1);
    } else {
      nd->next[i].leaf = t;
      dl_tensor_retain(t);
    }
  }
  return nd;
}

DL_HIDDEN int ag_save(ag_node *n, const dl_tensor *t) {
  if (n->nsaved >= AG_MAX_SAVED) return -1;
  dl_tensor *a = tensor_alias(t, t->shape, t->stride, t->ndim, t->offset);
  if (!a) return -1;
  n->saved_version[n->nsaved] = atomic_load(&t->storage->version);
  n->saved[n->nsaved++] = a;
  return 0;
}

static void drop_saved(ag_node *n) {
  for (int i = 0; i < n->nsaved; i++) {
    dl_tensor_release(n->saved[i]);
    n->saved[i] = NULL;
  }
}

/* Iterative: a long chain of nodes must not overflow the C stack. */
DL_HIDDEN void ag_node_release(ag_node *n) {
  ag_node *stack_buf[64], **stack = stack_buf;
  int sp = 0, cap = 64;
  if (n) stack[sp++] = n;
  while (sp > 0) {
    ag_node *x = stack[--sp];
    if (atomic_fetch_sub(&x->refcount, 1) != 1) continue;
    for (int i = 0; i < x->nin; i++) {
      dl_tensor_release(x->next[i].leaf);
      if (!x->next[i].node) continue;
      if (sp == cap) {
        ag_node **bigger = malloc(sizeof *bigger * (size_t)cap * 2);
        if (!bigger) continue;  /* leak rather than crash */
        memcpy(bigger, stack, sizeof *bigger * (size_t)sp);
        if (stack != stack_buf) free(stack);
        stack = bigger;
        cap *= 2;
      }
      stack[sp++] = x->next[i].node;
    }
    drop_saved(x);
    dl_tensor_release(x->grad);
    free(x->next), free(x->needs), free(x->in_ndim), free(x->in_dtype);
    free(x->in_shape);
    free(x);
  }
  if (stack != stack_buf) free(stack);
}

DL_HIDDEN int ag_attach(dl_tensor *out, ag_node *n) {
  ag_meta *m = meta_get(out);
  if (!m) {
    ag_node_release(n);
    return dl_err(EM_NOMEM, n->rule->name, 0LL, 0LL);
  }
  ag_node_release(m->grad_fn);
  m->grad_fn = n;
  return 0;
}

DL_HIDDEN dl_tensor *ag_record(dl_tensor *out, ag_rule_kind kind,
                               dl_tensor *const *ins, int nin,
                               const dl_tensor *const *save, int nsave,
                               ag_node **made) {
  if (made) *made = NULL;
  if (!out || !dl_dtype_is_float(out->dtype) || !ag_needed(ins, nin)) return out;
  ag_node *n = ag_node_new(kind, ins, nin);
  int failed = !n || nsave > AG_MAX_SAVED;
  for (int i = 0; !failed && i < nsave; i++) {
    if (save[i])
      failed = ag_save(n, save[i]);
    else
      n->saved[n->nsaved++] = NULL;
  }
  if (failed) {
    ag_node_release(n);
    dl_tensor_release(out);
    return NULL;
  }
  if (ag_attach(out, n)) {  /* releases n */
    dl_tensor_release(out);
    return NULL;
  }
  if (made) *made = n;
  return out;
}

/* -- Backward -------------------------------------------------------------- */

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
  ag_meta *m = meta_of(leaf);
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

/* Counts, for this pass, how many consumers each node and leaf has. */
static int count_deps(ag_node *root, unsigned pass, ag_node ***all, int *nall) {
  int cap = 64, sp = 0, n = 0;
  ag_node **stack = malloc(sizeof *stack * (size_t)cap);
  ag_node **list = malloc(sizeof *list * (size_t)cap);
  int lcap = cap;
  if (!stack || !list) goto oom;
  root->pass = pass;
  root->deps = 0;
  stack[sp++] = root;
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
      if (leaf) {
        ag_meta *m = meta_of(leaf);
        if (m->pass != pass) m->pass = pass, m->pending = 0;
        m->pending++;
      }
      if (!y) continue;
      if (y->pass != pass) {
        y->pass = pass;
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
  *all = list;
  *nall = n;
  return 0;
oom:
  free(stack);
  free(list);
  return dl_err(EM_NOMEM, "backward", 0LL, 0LL);
}

static int run_node(ag_node *x, int retain, heap_t *ready, unsigned pass) {
  dl_tensor *g = x->grad, **gin;
  x->grad = NULL;
  if (x->freed) {
    dl_tensor_release(g);
    return dl_err(EM_AG_FREED, "backward", x->rule->name);
  }
  for (int i = 0; i < x->nsaved; i++) {
    if (!x->saved[i]) continue;  /* an optional tensor that was absent */
    unsigned now = atomic_load(&x->saved[i]->storage->version);
    if (now != x->saved_version[i]) {
      dl_tensor_release(g);
      return dl_err(EM_AG_VERSION, "backward", x->rule->name, now, x->saved_version[i]);
    }
  }
  gin = calloc((size_t)x->nin + 1, sizeof *gin);
  /* a slice of an input whose gradient sum exists: add into its slice */
  dl_tensor **sum = NULL;
  if (g && ag_is_slice(x) && x->needs[0])
    sum = x->next[0].node ? &x->next[0].node->grad
          : x->next[0].leaf ? &meta_of(x->next[0].leaf)->acc : NULL;
  int into = sum && *sum && sole_dense(*sum) && (*sum)->dtype == g->dtype &&
             g->dtype == x->in_dtype[0];
  int rc = !gin ? -1 : into ? ag_slice_add(x, *sum, g) : g ? x->rule->backward(x, g, gin) : 0;
  if (!gin) dl_err(EM_NOMEM, "backward", 0LL, 0LL);
  dl_tensor_release(g);
  for (int i = 0; i < x->nin && gin; i++) {
    dl_tensor *gi = gin[i];
    gin[i] = NULL;
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
    if (!rc && gi && y) rc = accumulate(&y->grad, gi), gi = NULL;
    if (!rc && gi && leaf) rc = accumulate(&meta_of(leaf)->acc, gi), gi = NULL;
    dl_tensor_release(gi);
    if (rc) continue;
    if (y && y->pass == pass && --y->deps == 0 && heap_push(ready, y))
      rc = dl_err(EM_NOMEM, "backward", 0LL, 0LL);
    if (leaf && --meta_of(leaf)->pending == 0) rc = finish_leaf(leaf);
  }
  free(gin);
  if (!retain) {
    drop_saved(x);
    x->freed = 1;
  }
  return rc;
}

/* run_node, as a span of the trace while one is on (the node's grad_fn
** name and creation number: lua/ddp/core/trace.lua gives each module the
** nodes its forward made). */
static int traced_run(ag_node *x, int retain, heap_t *ready, unsigned pass) {
  if (!trace_on()) return run_node(x, retain, ready, pass);
  dl_trace_event e = {.t0 = trace_now(), .seq = (int64_t)x->seq, .kind = DL_TK_NODE, .bucket = -1};
  snprintf(e.name, sizeof e.name, "%s", x->rule->name);
  int rc = run_node(x, retain, ready, pass);
  e.t1 = trace_now();
  trace_add(&e);
  return rc;
}

DL_API double dl_autograd_next_seq(void) { return (double)atomic_load(&next_seq); }

DL_API int dl_backward(dl_tensor *root, const dl_tensor *grad, int retain) {
  if (check_tensor_any("backward", root)) return -1;
  ag_meta *m = meta_of(root);
  if (!m || !(m->requires_grad || m->grad_fn)) return dl_err(EM_AG_NOGRAD, "backward");
  dl_tensor *g;
  if (grad) {
    if (grad->ndim != root->ndim ||
        memcmp(grad->shape, root->shape, sizeof(int64_t) * (size_t)root->ndim))
      return dl_err(EM_AG_GRAD_SHAPE, "backward", fmt_tshape(grad), fmt_tshape(root));
    g = as_dtype(grad, root->dtype);
  } else {
    if (dl_tensor_numel(root) != 1) return dl_err(EM_AG_SCALAR, "backward", fmt_tshape(root));
    g = full_on(root->storage->device, root->shape, root->ndim, root->dtype, 1.0);
  }
  if (!g) return -1;
  int was = dl_set_grad_enabled(0);
  int rc = 0;
  if (!m->grad_fn) {  /* a leaf: its gradient is grad itself */
    m->acc = g;
    rc = finish_leaf(root);
    dl_set_grad_enabled(was);
    return run_end_hooks(rc);
  }
  unsigned pass = atomic_fetch_add(&next_pass, 1) + 1;
  ag_node **all = NULL;
  int nall = 0;
  heap_t ready = {0};
  ag_node *top = m->grad_fn;
  atomic_fetch_add(&top->refcount, 1);  /* the root may die in a hook */
  if (!(rc = count_deps(top, pass, &all, &nall))) {
    top->grad = g;
    g = NULL;
    rc = heap_push(&ready, top) ? dl_err(EM_NOMEM, "backward", 0LL, 0LL) : 0;
    while (!rc && ready.n > 0) rc = traced_run(heap_pop(&ready), retain, &ready, pass);
    /* on error, drop partial sums so the next pass starts clean */
    for (int i = 0; i < nall; i++) {
      dl_tensor_release(all[i]->grad);
      all[i]->grad = NULL;
      for (int j = 0; rc && j < all[i]->nin; j++) {
        dl_tensor *leaf = all[i]->next[j].leaf;
        if (leaf && meta_of(leaf)->acc) {
          dl_tensor_release(meta_of(leaf)->acc);
          meta_of(leaf)->acc = NULL;
        }
      }
    }
  }
  dl_tensor_release(g);
  free(all);
  free(ready.a);
  ag_node_release(top);
  dl_set_grad_enabled(was);
  return run_end_hooks(rc);
}

/* The node that produced t (for recorders that set arguments after). */
DL_HIDDEN ag_node *ag_grad_fn(const dl_tensor *t) {
  return t && meta_of(t) ? meta_of(t)->grad_fn : NULL;
}
