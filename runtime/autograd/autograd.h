/*
** autograd.h -- what op files need to record the graph: the gradient rules
** (rules.h), nodes, edges, saved tensors, and the checks in-place ops make.
*/
#ifndef DL_AUTOGRAD_H
#define DL_AUTOGRAD_H

#include "core/internal.h"

typedef struct ag_node ag_node;

/* Computes the gradient of each input from g, the gradient of the node's
** output (in the output's shape and dtype).  gin[i] is set to a new
** reference, or left NULL when input i needs none (n->needs[i] == 0) or
** gets zero.  The engine then sums each gin[i] back to input i's shape
** (broadcasting) and casts it to input i's dtype, so formulas need not.
** Returns 0, or -1 with the error set. */
typedef int (*ag_backward_fn)(ag_node *n, const dl_tensor *g, dl_tensor **gin);

/* -- Gradient rules (rules.h lists them all) ------------------------------- */

/* What a node is: AG_ADD, AG_SOFTMAX, ... one per line of rules.h. */
typedef enum ag_rule_kind {
#define AG_RULE(kind, name, backward, saved) AG_##kind,
#include "autograd/rules.h"
#undef AG_RULE
  AG_NRULES
} ag_rule_kind;

typedef struct ag_rule {
  ag_rule_kind kind;
  const char *name;         /* the grad_fn name: "MulBackward" */
  ag_backward_fn backward;
  const char *saved;        /* what n->saved[0], [1], ... hold: "a, b, out" */
} ag_rule;

/* Every rule, indexed by kind (rules.c). */
DL_HIDDEN extern const ag_rule ag_rules[AG_NRULES];

/* The backwards, bw_<x> (one backward may serve several rules). */
#define AG_RULE(kind, name, backward, saved) \
  DL_HIDDEN int backward(ag_node *n, const dl_tensor *g, dl_tensor **gin);
#include "autograd/rules.h"
#undef AG_RULE

typedef struct {
  ag_node *node;    /* the op that produced the input, or NULL */
  dl_tensor *leaf;  /* or the leaf that requires grad (retained), or NULL */
} ag_edge;

enum { AG_MAX_SAVED = 6, AG_MAX_ARGS = 8 };  /* attention saves q, k, v, mask, out, lse */

struct ag_node {
  atomic_int refcount;
  const ag_rule *rule;      /* what the node is: its name and backward */
  ag_backward_fn backward;  /* rules of layers above autograd: their own */
  uint64_t seq;             /* creation order: later nodes run first */
  int nin;
  ag_edge *next;            /* nin edges */
  uint8_t *needs;           /* nin flags: input i requires grad */
  int8_t *in_ndim, *in_dtype;
  int64_t (*in_shape)[DL_MAX_DIMS];
  dl_tensor *saved[AG_MAX_SAVED];
  unsigned saved_version[AG_MAX_SAVED];
  int nsaved, freed;        /* freed: saved tensors dropped after backward (1), or never
                            ** kept: recorded inside a checkpointed forward (2) */
  int64_t iarg[AG_MAX_ARGS];  /* the rule's scalars, set by its recorder */
  double darg[4];
  /* backward pass bookkeeping */
  unsigned pass;
  int deps;
  dl_tensor *grad;
};

/* Per-tensor state, allocated on first use (engine.c). */
typedef struct {
  int requires_grad;   /* leaves only; non-leaves have a grad_fn */
  dl_tensor *grad;
  ag_node *grad_fn;
  struct { dl_grad_hook fn; void *ctx; } *hooks;
  int nhooks;
  /* backward pass bookkeeping for leaves (pass.c) */
  unsigned pass;
  int pending;
  dl_tensor *acc;
} ag_meta;

static inline ag_meta *ag_meta_of(const dl_tensor *t) { return (ag_meta *)t->autograd; }

/* Grad mode on and any of the inputs requires grad. */
DL_HIDDEN int ag_needed(dl_tensor *const *ins, int n);
DL_HIDDEN int ag_needed1(const dl_tensor *a);
DL_HIDDEN int tensor_requires_grad(const dl_tensor *t);
/* A node of rule kind over inputs ins (NULL entries allowed: no edge). */
DL_HIDDEN ag_node *ag_node_new(ag_rule_kind kind, dl_tensor *const *ins, int n);
/* The same with n empty edges, for the caller to fill (checkpoint.c). */
DL_HIDDEN ag_node *ag_node_alloc(ag_rule_kind kind, int n);
/* Drops n's saved tensors (after its backward, unless the graph is kept). */
DL_HIDDEN void ag_drop_saved(ag_node *n);
/* The end-of-backward hooks (dl_add_backward_hook) after a pass that
** ended with rc: rc, or the first hook's failure. */
DL_HIDDEN int ag_run_end_hooks(int rc);

/* -- Checkpoints (checkpoint.c) ------------------------------------------------ */

/* Inside a checkpointed forward on this thread: nodes save no tensor. */
DL_HIDDEN int ag_checkpointing(void);
/* A checkpoint node is going: its id joins those dl_checkpoint_freed gives. */
DL_HIDDEN void ag_checkpoint_released(ag_node *n);
/* Keeps t's data for backward (a detached alias, and its version). */
DL_HIDDEN int ag_save(ag_node *n, const dl_tensor *t);
/* Makes n the grad_fn of out; releases n on failure.  Returns 0 or -1. */
DL_HIDDEN int ag_attach(dl_tensor *out, ag_node *n);
DL_HIDDEN void ag_node_release(ag_node *n);
/* The node that produced t, or NULL (leaves). */
DL_HIDDEN ag_node *ag_grad_fn(const dl_tensor *t);
/* narrow/select nodes (grad_view.c): whether n is one, and adding its
** gradient g into the matching slice of acc, its input's gradient sum */
DL_HIDDEN int ag_is_slice(const ag_node *n);
DL_HIDDEN int ag_slice_add(const ag_node *n, dl_tensor *acc, const dl_tensor *g);
/* For in-place ops: refuses to modify a tensor that is part of a graph
** (grad mode on), and bumps the storage version seen by saved tensors. */
DL_HIDDEN int ag_check_write(const char *op, dl_tensor *t);
/* The same after refusing a tensor whose elements share memory (an
** expanded view): what in-place ops over many elements check. */
DL_HIDDEN int ag_check_inplace(const char *op, dl_tensor *t);
DL_HIDDEN void autograd_free(dl_tensor *t);

/* Runs stmt with grad mode off: the forward of an op that records itself. */
#define NOGRAD(stmt)                          \
  do {                                        \
    int was_ = dl_set_grad_enabled(0);        \
    stmt;                                     \
    dl_set_grad_enabled(was_);                \
  } while (0)

/* Records an op: when out is float and an input needs a gradient, a node
** of rule kind over ins (NULL entries: no edge) with save's tensors saved
** (NULL entries keep their slot; the order rules.h gives) becomes out's
** grad_fn; *made (if given) gets it so the caller can set its scalars.
** Returns out, or NULL (out released) on failure. */
DL_HIDDEN dl_tensor *ag_record(dl_tensor *out, ag_rule_kind kind,
                               dl_tensor *const *ins, int nin,
                               const dl_tensor *const *save, int nsave,
                               ag_node **made);

/* Records out, the cast or clone of a, as ToCopyBackward (grad_copy.c's
** casts); out as it is when it is a itself.  Returns out, or NULL. */
DL_HIDDEN dl_tensor *ag_copy(dl_tensor *out, const dl_tensor *a);

/* -- Writing gradient formulas -------------------------------------------- */

/* Temporaries of a formula, released together; any NULL marks an error
** (every op accepts NULL inputs and fails cleanly, so chains need no
** checks in between). */
typedef struct { dl_tensor *t[32]; int n, err; } ag_scope;

static inline dl_tensor *K(ag_scope *s, dl_tensor *t) {
  if (!t) s->err = 1;
  else if (s->n < 32) s->t[s->n++] = t;
  else s->err = 1;  /* formulas stay far below 32 temporaries */
  return t;
}

/* A result handed to the engine (not released with the scope). */
static inline dl_tensor *R(ag_scope *s, dl_tensor *t) {
  if (!t) s->err = 1;
  return t;
}

static inline int ag_scope_end(ag_scope *s) {
  for (int i = 0; i < s->n; i++) dl_tensor_release(s->t[i]);
  return s->err ? -1 : 0;
}

#define NUM(s, v) K(s, dl_scalar((v), 1))

#endif
