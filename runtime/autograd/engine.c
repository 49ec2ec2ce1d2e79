/*
** engine.c -- the reverse-mode engine's records: per-tensor grad state,
** graph nodes, saved tensors and hooks.  The backward pass that walks them
** is pass.c's; what each node computes is its rule (rules.h), the
** formulas in grad_*.c.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "core/device.h"
#include "core/trace.h"

static _Thread_local int grad_disabled;
static atomic_ullong next_seq;

static ag_meta *meta_of(const dl_tensor *t) { return ag_meta_of(t); }

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
DL_HIDDEN int ag_run_end_hooks(int rc) {
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

DL_HIDDEN ag_node *ag_node_alloc(ag_rule_kind kind, int n) {
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
  nd->freed = ag_checkpointing() ? 2 : 0;  /* saves nothing: no backward through it */
  return nd;
}

DL_HIDDEN ag_node *ag_node_new(ag_rule_kind kind, dl_tensor *const *ins, int n) {
  ag_node *nd = ag_node_alloc(kind, n);
  if (!nd) return NULL;
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
  if (ag_checkpointing()) {  /* a checkpointed forward: recomputed, not kept */
    n->saved[n->nsaved++] = NULL;
    return 0;
  }
  dl_tensor *a = tensor_alias(t, t->shape, t->stride, t->ndim, t->offset);
  if (!a) return -1;
  n->saved_version[n->nsaved] = atomic_load(&t->storage->version);
  n->saved[n->nsaved++] = a;
  return 0;
}

DL_HIDDEN void ag_drop_saved(ag_node *n) {
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
    if (x->rule->kind == AG_CHECKPOINT) ag_checkpoint_released(x);
    ag_drop_saved(x);
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

DL_API double dl_autograd_next_seq(void) { return (double)atomic_load(&next_seq); }

/* The node that produced t (for recorders that set arguments after). */
DL_HIDDEN ag_node *ag_grad_fn(const dl_tensor *t) {
  return t && meta_of(t) ? meta_of(t)->grad_fn : NULL;
}
