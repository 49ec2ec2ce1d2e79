/*
** grad_elementwise.c -- the gradient rules of the elementwise ops (binary,
** unary, clamp, where, casts; rules.h lists them) and the public ops that
** record them.  Broadcasting is undone by the engine.
*/
#include <math.h>

#include "autograd/autograd.h"
#include "ops/forward.h"

/* -- Binary: a, b and the output saved (rules.h) ------------------------- */

/* g itself, shared: the engine sums into a gradient in place only when it
** holds the only reference (engine.c, sole_dense), so no copy is needed (a
** residual stream's adds made two per add). */
static dl_tensor *shared(const dl_tensor *g) {
  dl_tensor_retain((dl_tensor *)g);
  return (dl_tensor *)g;
}

DL_HIDDEN int bw_add(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  if (n->needs[0]) gin[0] = R(&s, shared(g));
  if (n->needs[1]) gin[1] = R(&s, shared(g));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_sub(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  if (n->needs[0]) gin[0] = R(&s, shared(g));
  if (n->needs[1]) gin[1] = R(&s, dl_unary(DL_NEG, g));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_mul(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *a = n->saved[0], *b = n->saved[1];
  if (n->needs[0]) gin[0] = R(&s, dl_binary(DL_MUL, g, b));
  if (n->needs[1]) gin[1] = R(&s, dl_binary(DL_MUL, g, a));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_div(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *b = n->saved[1], *out = n->saved[2];
  if (n->needs[0]) gin[0] = R(&s, dl_binary(DL_DIV, g, b));
  if (n->needs[1])  /* -g * a / b^2 = -g * out / b */
    gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, g, out)), b))));
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_pow(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *a = n->saved[0], *b = n->saved[1], *out = n->saved[2];
  if (n->needs[0]) {  /* g * b * a^(b - 1) */
    dl_tensor *e = K(&s, dl_binary(DL_SUB, b, NUM(&s, 1)));
    gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, g, b)),
                             K(&s, dl_binary(DL_POW, a, e))));
  }
  if (n->needs[1]) {  /* g * out * log(a), taken as 0 where a == 0 (as PyTorch) */
    dl_tensor *t = K(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, g, out)),
                                   K(&s, dl_unary(DL_LOG, a))));
    dl_tensor *zero = K(&s, dl_binary(DL_EQ, a, NUM(&s, 0)));
    gin[1] = R(&s, dl_masked_fill(t, zero, 0));
  }
  return ag_scope_end(&s);
}

/* maximum (win: DL_GT) and minimum (DL_LT): to the winner; ties split the
** gradient evenly. */
static int extremum_grads(ag_node *n, const dl_tensor *g, dl_tensor **gin, dl_binop win) {
  ag_scope s = {0};
  dl_tensor *a = n->saved[0], *b = n->saved[1], *G = (dl_tensor *)g;
  dl_tensor *half = K(&s, dl_binary(DL_MUL, G, NUM(&s, 0.5)));
  dl_tensor *tie = K(&s, dl_binary(DL_EQ, a, b));
  dl_tensor *zero = K(&s, dl_binary(DL_MUL, G, NUM(&s, 0)));
  if (n->needs[0]) {
    dl_tensor *w = K(&s, dl_where(K(&s, dl_binary(win, a, b)), G, zero));
    gin[0] = R(&s, dl_where(tie, half, w));
  }
  if (n->needs[1]) {
    dl_tensor *w = K(&s, dl_where(K(&s, dl_binary(win, b, a)), G, zero));
    gin[1] = R(&s, dl_where(tie, half, w));
  }
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_maximum(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return extremum_grads(n, g, gin, DL_GT);
}

DL_HIDDEN int bw_minimum(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return extremum_grads(n, g, gin, DL_LT);
}

/* a - b * round(a / b): fmod rounds with trunc, remainder with floor. */
static int modulo_grads(ag_node *n, const dl_tensor *g, dl_tensor **gin, dl_unop round) {
  ag_scope s = {0};
  dl_tensor *a = n->saved[0], *b = n->saved[1];
  if (n->needs[0]) gin[0] = R(&s, dl_clone(g));
  if (n->needs[1]) {
    dl_tensor *q = K(&s, dl_unary(round, K(&s, dl_binary(DL_DIV, a, b))));
    gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, g, q))));
  }
  return ag_scope_end(&s);
}

DL_HIDDEN int bw_fmod(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return modulo_grads(n, g, gin, DL_TRUNC);
}

DL_HIDDEN int bw_remainder(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  return modulo_grads(n, g, gin, DL_FLOOR);
}

DL_HIDDEN int bw_atan2(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};  /* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
  dl_tensor *a = n->saved[0], *b = n->saved[1];
  dl_tensor *den = K(&s, dl_binary(DL_ADD, K(&s, dl_unary(DL_SQUARE, a)),
                                   K(&s, dl_unary(DL_SQUARE, b))));
  dl_tensor *gd = K(&s, dl_binary(DL_DIV, g, den));
  if (n->needs[0]) gin[0] = R(&s, dl_binary(DL_MUL, gd, b));
  if (n->needs[1]) gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, gd, a))));
  return ag_scope_end(&s);
}

/* The node of a binary op, or none: comparisons and the logical ops have
** no gradient. */
static const ag_rule *const binary_rules[DL_NBINOPS] = {
    [DL_ADD] = &ag_rules[AG_ADD], [DL_SUB] = &ag_rules[AG_SUB],
    [DL_MUL] = &ag_rules[AG_MUL], [DL_DIV] = &ag_rules[AG_DIV],
    [DL_POW] = &ag_rules[AG_POW], [DL_MAXIMUM] = &ag_rules[AG_MAXIMUM],
    [DL_MINIMUM] = &ag_rules[AG_MINIMUM], [DL_FMOD] = &ag_rules[AG_FMOD],
    [DL_REMAINDER] = &ag_rules[AG_REMAINDER], [DL_ATAN2] = &ag_rules[AG_ATAN2]};

static dl_tensor *record_binary(dl_binop op, dl_tensor *out, const dl_tensor *a,
                                const dl_tensor *b) {
  if (!out || !binary_rules[op]) return out;
  dl_tensor *ins[2] = {(dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[3] = {a, b, out};
  return ag_record(out, binary_rules[op]->kind, ins, 2, save, 3, NULL);
}

/* -- Unary: x and the output saved (rules.h) -------------------------------- */

/* A unary rule of one formula: gin[0] = formula, which may use g, x (the
** input), y (the output) and the scope s for its temporaries. */
#define UNARY_RULE(fn, formula)                                         \
  DL_HIDDEN int fn(ag_node *n, const dl_tensor *g, dl_tensor **gin) {   \
    ag_scope s = {0};                                                   \
    dl_tensor *x = n->saved[0], *y = n->saved[1];                       \
    (void)x, (void)y;                                                   \
    gin[0] = R(&s, formula);                                            \
    return ag_scope_end(&s);                                            \
  }

UNARY_RULE(bw_neg, dl_unary(DL_NEG, g))
UNARY_RULE(bw_abs, dl_binary(DL_MUL, g, K(&s, dl_unary(DL_SIGN, x))))
UNARY_RULE(bw_exp, dl_binary(DL_MUL, g, y))
UNARY_RULE(bw_log, dl_binary(DL_DIV, g, x))
UNARY_RULE(bw_log2, dl_binary(DL_DIV, g, K(&s, dl_binary(DL_MUL, x, NUM(&s, M_LN2)))))
UNARY_RULE(bw_log1p, dl_binary(DL_DIV, g, K(&s, dl_binary(DL_ADD, x, NUM(&s, 1)))))
UNARY_RULE(bw_expm1, dl_binary(DL_MUL, g, K(&s, dl_binary(DL_ADD, y, NUM(&s, 1)))))
UNARY_RULE(bw_sqrt, dl_binary(DL_DIV, g, K(&s, dl_binary(DL_MUL, y, NUM(&s, 2)))))
/* -0.5 * g * y^3 */
UNARY_RULE(bw_rsqrt, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, g, NUM(&s, -0.5))),
                               K(&s, dl_binary(DL_POW, y, NUM(&s, 3)))))
/* -g * y^2 */
UNARY_RULE(bw_reciprocal,
           dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, g, K(&s, dl_unary(DL_SQUARE, y))))))
UNARY_RULE(bw_square, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, g, x)), NUM(&s, 2)))
UNARY_RULE(bw_sin, dl_binary(DL_MUL, g, K(&s, dl_unary(DL_COS, x))))
UNARY_RULE(bw_cos,
           dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, g, K(&s, dl_unary(DL_SIN, x))))))
/* g * (1 - y^2) */
UNARY_RULE(bw_tanh, dl_binary(DL_MUL, g, K(&s, dl_binary(DL_SUB, NUM(&s, 1),
                                                         K(&s, dl_unary(DL_SQUARE, y))))))
/* g * y * (1 - y) */
UNARY_RULE(bw_sigmoid, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, g, y)),
                                 K(&s, dl_binary(DL_SUB, NUM(&s, 1), y))))
/* the activations' kernel (ops/act_backward.c); relu's on the result, as PyTorch */
UNARY_RULE(bw_relu, fw_act_backward(DL_RELU, g, y))
UNARY_RULE(bw_gelu, fw_act_backward(DL_GELU, g, x))
UNARY_RULE(bw_gelu_tanh, fw_act_backward(DL_GELU_TANH, g, x))
UNARY_RULE(bw_silu, fw_act_backward(DL_SILU, g, x))
/* sign and the roundings: flat almost everywhere */
UNARY_RULE(bw_zero, dl_binary(DL_MUL, g, NUM(&s, 0)))

/* The node of a unary op, or none (the logical not, isnan, ...). */
static const ag_rule *const unary_rules[DL_NUNOPS] = {
    [DL_NEG] = &ag_rules[AG_NEG], [DL_ABS] = &ag_rules[AG_ABS],
    [DL_EXP] = &ag_rules[AG_EXP], [DL_LOG] = &ag_rules[AG_LOG],
    [DL_LOG2] = &ag_rules[AG_LOG2], [DL_LOG1P] = &ag_rules[AG_LOG1P],
    [DL_EXPM1] = &ag_rules[AG_EXPM1], [DL_SQRT] = &ag_rules[AG_SQRT],
    [DL_RSQRT] = &ag_rules[AG_RSQRT], [DL_RECIPROCAL] = &ag_rules[AG_RECIPROCAL],
    [DL_SQUARE] = &ag_rules[AG_SQUARE], [DL_SIN] = &ag_rules[AG_SIN],
    [DL_COS] = &ag_rules[AG_COS], [DL_TANH] = &ag_rules[AG_TANH],
    [DL_SIGMOID] = &ag_rules[AG_SIGMOID], [DL_RELU] = &ag_rules[AG_RELU],
    [DL_GELU] = &ag_rules[AG_GELU], [DL_GELU_TANH] = &ag_rules[AG_GELU_TANH],
    [DL_SILU] = &ag_rules[AG_SILU], [DL_SIGN] = &ag_rules[AG_SIGN],
    [DL_FLOOR] = &ag_rules[AG_FLOOR], [DL_CEIL] = &ag_rules[AG_CEIL],
    [DL_ROUND] = &ag_rules[AG_ROUND], [DL_TRUNC] = &ag_rules[AG_TRUNC]};

static dl_tensor *record_unary(dl_unop op, dl_tensor *out, const dl_tensor *a) {
  if (!out || !unary_rules[op]) return out;
  dl_tensor *ins[1] = {(dl_tensor *)a};
  const dl_tensor *save[2] = {a, out};
  return ag_record(out, unary_rules[op]->kind, ins, 1, save, 2, NULL);
}

/* -- Clamp, where, casts ------------------------------------------------------ */

DL_HIDDEN int bw_clamp(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *out = K(&s, dl_clone(g)), *mask = NULL;
  double lo = n->darg[0], hi = n->darg[1];
  if (lo == lo) mask = K(&s, dl_binary(DL_LT, x, NUM(&s, lo)));
  if (hi == hi) {
    dl_tensor *m2 = K(&s, dl_binary(DL_GT, x, NUM(&s, hi)));
    mask = mask ? K(&s, dl_binary(DL_LOGICAL_OR, mask, m2)) : m2;
  }
  gin[0] = R(&s, mask ? dl_masked_fill(out, mask, 0) : dl_clone(out));
  return ag_scope_end(&s);
}

static dl_tensor *record_clamp(dl_tensor *out, const dl_tensor *a, double lo, double hi) {
  dl_tensor *ins[1] = {(dl_tensor *)a};
  const dl_tensor *save[1] = {a};
  ag_node *n;
  out = ag_record(out, AG_CLAMP, ins, 1, save, 1, &n);
  if (n) n->darg[0] = lo, n->darg[1] = hi;
  return out;
}

DL_HIDDEN int bw_where(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *cond = n->saved[0];
  if (n->needs[1])
    gin[1] = R(&s, dl_masked_fill(g, K(&s, dl_unary(DL_LOGICAL_NOT, cond)), 0));
  if (n->needs[2]) gin[2] = R(&s, dl_masked_fill(g, cond, 0));
  return ag_scope_end(&s);
}

static dl_tensor *record_where(dl_tensor *out, const dl_tensor *cond, const dl_tensor *a,
                               const dl_tensor *b) {
  dl_tensor *ins[3] = {NULL, (dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[1] = {cond};
  return ag_record(out, AG_WHERE, ins, 3, save, 1, NULL);
}

/* Casts, clones and contiguous copies, and expand, pass the gradient
** straight through: the engine casts it back to the input's dtype and sums
** it over the dims expand broadcast. */
DL_HIDDEN int bw_identity(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  (void)n;
  gin[0] = dl_clone(g);
  return gin[0] ? 0 : -1;
}

DL_HIDDEN dl_tensor *ag_copy(dl_tensor *out, const dl_tensor *a) {
  if (out == a) return out;
  dl_tensor *ins[1] = {(dl_tensor *)a};
  return ag_record(out, AG_TO_COPY, ins, 1, NULL, 0, NULL);
}

/* -- The public elementwise ops: the forward (ops/elementwise.c), then the
** node; the in-place forms hand the forward autograd's in-place check. */

DL_API dl_tensor *dl_binary(dl_binop op, const dl_tensor *a, const dl_tensor *b) {
  return record_binary(op, fw_binary(op, a, b), a, b);
}

DL_API int dl_binary_(dl_binop op, dl_tensor *a, const dl_tensor *b) {
  return fw_binary_(op, a, b, ag_check_inplace);
}

DL_API dl_tensor *dl_unary(dl_unop op, const dl_tensor *a) {
  return record_unary(op, fw_unary(op, a), a);
}

DL_API int dl_unary_(dl_unop op, dl_tensor *a) {
  return fw_unary_(op, a, ag_check_inplace);
}

DL_API dl_tensor *dl_clamp(const dl_tensor *a, double lo, double hi) {
  return record_clamp(fw_clamp(a, lo, hi), a, lo, hi);
}

DL_API int dl_clamp_(dl_tensor *a, double lo, double hi) {
  return fw_clamp_(a, lo, hi, ag_check_inplace);
}

DL_API dl_tensor *dl_where(const dl_tensor *cond, const dl_tensor *a, const dl_tensor *b) {
  return record_where(fw_where(cond, a, b), cond, a, b);
}
