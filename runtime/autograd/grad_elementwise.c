/*
** grad_elementwise.c -- gradients of the elementwise ops: binary, unary,
** clamp, where, and dtype casts.  Broadcasting is undone by the engine.
*/
#include <math.h>

#include "autograd/autograd.h"
#include "ops/forward.h"

/* -- Binary ---------------------------------------------------------------- */

static int binary_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *a = n->saved[0], *b = n->saved[1], *out = n->saved[2];
  dl_tensor *G = (dl_tensor *)g;
  int na = n->needs[0], nb = n->needs[1];
  switch (n->op) {
    /* g itself, shared: the engine sums into a gradient in place only
    ** when it holds the only reference (engine.c, sole_dense), so no copy
    ** is needed (a residual stream's adds made two per add) */
    case DL_ADD:
      if (na) gin[0] = R(&s, (dl_tensor_retain(G), G));
      if (nb) gin[1] = R(&s, (dl_tensor_retain(G), G));
      break;
    case DL_SUB:
      if (na) gin[0] = R(&s, (dl_tensor_retain(G), G));
      if (nb) gin[1] = R(&s, dl_unary(DL_NEG, G));
      break;
    case DL_MUL:
      if (na) gin[0] = R(&s, dl_binary(DL_MUL, G, b));
      if (nb) gin[1] = R(&s, dl_binary(DL_MUL, G, a));
      break;
    case DL_DIV:
      if (na) gin[0] = R(&s, dl_binary(DL_DIV, G, b));
      if (nb)  /* -g * a / b^2 = -g * out / b */
        gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_DIV, K(&s, dl_binary(DL_MUL, G, out)), b))));
      break;
    case DL_POW:
      if (na) {  /* g * b * a^(b - 1) */
        dl_tensor *e = K(&s, dl_binary(DL_SUB, b, NUM(&s, 1)));
        gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, G, b)),
                                 K(&s, dl_binary(DL_POW, a, e))));
      }
      if (nb) {  /* g * out * log(a), taken as 0 where a == 0 (as PyTorch) */
        dl_tensor *t = K(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, G, out)),
                                       K(&s, dl_unary(DL_LOG, a))));
        dl_tensor *zero = K(&s, dl_binary(DL_EQ, a, NUM(&s, 0)));
        gin[1] = R(&s, dl_masked_fill(t, zero, 0));
      }
      break;
    case DL_MAXIMUM:
    case DL_MINIMUM: {  /* to the winner; ties split the gradient evenly */
      int win = n->op == DL_MAXIMUM ? DL_GT : DL_LT;
      dl_tensor *half = K(&s, dl_binary(DL_MUL, G, NUM(&s, 0.5)));
      dl_tensor *tie = K(&s, dl_binary(DL_EQ, a, b));
      dl_tensor *zero = K(&s, dl_binary(DL_MUL, G, NUM(&s, 0)));
      if (na) {
        dl_tensor *w = K(&s, dl_where(K(&s, dl_binary(win, a, b)), G, zero));
        gin[0] = R(&s, dl_where(tie, half, w));
      }
      if (nb) {
        dl_tensor *w = K(&s, dl_where(K(&s, dl_binary(win, b, a)), G, zero));
        gin[1] = R(&s, dl_where(tie, half, w));
      }
      break;
    }
    case DL_ATAN2: {  /* d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
      dl_tensor *den = K(&s, dl_binary(DL_ADD, K(&s, dl_unary(DL_SQUARE, a)),
                                       K(&s, dl_unary(DL_SQUARE, b))));
      dl_tensor *gd = K(&s, dl_binary(DL_DIV, G, den));
      if (na) gin[0] = R(&s, dl_binary(DL_MUL, gd, b));
      if (nb) gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, gd, a))));
      break;
    }
    case DL_FMOD:
    case DL_REMAINDER: {  /* a - b * trunc(a / b) (fmod), floor for remainder */
      if (na) gin[0] = R(&s, dl_clone(G));
      if (nb) {
        dl_tensor *q = K(&s, dl_unary(n->op == DL_FMOD ? DL_TRUNC : DL_FLOOR,
                                      K(&s, dl_binary(DL_DIV, a, b))));
        gin[1] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, G, q))));
      }
      break;
    }
    default:
      s.err = 1;
      dl_err(EM_AG_NODIFF, dl_binop_name(n->op));
  }
  return ag_scope_end(&s);
}

static const char *const binary_names[DL_NBINOPS] = {
    [DL_ADD] = "AddBackward", [DL_SUB] = "SubBackward", [DL_MUL] = "MulBackward",
    [DL_DIV] = "DivBackward", [DL_POW] = "PowBackward",
    [DL_MAXIMUM] = "MaximumBackward", [DL_MINIMUM] = "MinimumBackward",
    [DL_FMOD] = "FmodBackward", [DL_REMAINDER] = "RemainderBackward",
    [DL_ATAN2] = "Atan2Backward"};

DL_HIDDEN dl_tensor *ag_binary(int op, dl_tensor *out, const dl_tensor *a,
                               const dl_tensor *b) {
  if (!out || !binary_names[op]) return out;  /* comparisons: no gradient */
  return ag_record2(out, binary_names[op], binary_backward, a, b, op);
}

/* -- Unary ------------------------------------------------------------------- */

static int unary_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *x = n->saved[0], *y = n->saved[1], *G = (dl_tensor *)g;
  switch (n->op) {
    case DL_NEG: gin[0] = R(&s, dl_unary(DL_NEG, G)); break;
    case DL_ABS: gin[0] = R(&s, dl_binary(DL_MUL, G, K(&s, dl_unary(DL_SIGN, x)))); break;
    case DL_EXP: gin[0] = R(&s, dl_binary(DL_MUL, G, y)); break;
    case DL_LOG: gin[0] = R(&s, dl_binary(DL_DIV, G, x)); break;
    case DL_SQRT:
      gin[0] = R(&s, dl_binary(DL_DIV, G, K(&s, dl_binary(DL_MUL, y, NUM(&s, 2)))));
      break;
    case DL_RSQRT:  /* -0.5 * g * y^3 */
      gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, G, NUM(&s, -0.5))),
                               K(&s, dl_binary(DL_POW, y, NUM(&s, 3)))));
      break;
    case DL_SIN: gin[0] = R(&s, dl_binary(DL_MUL, G, K(&s, dl_unary(DL_COS, x)))); break;
    case DL_COS:
      gin[0] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, G, K(&s, dl_unary(DL_SIN, x))))));
      break;
    case DL_TANH:  /* g * (1 - y^2) */
      gin[0] = R(&s, dl_binary(DL_MUL, G, K(&s, dl_binary(DL_SUB, NUM(&s, 1),
                                                           K(&s, dl_unary(DL_SQUARE, y))))));
      break;
    case DL_SIGMOID:  /* g * y * (1 - y) */
      gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, G, y)),
                               K(&s, dl_binary(DL_SUB, NUM(&s, 1), y))));
      break;
    case DL_RELU:  /* on the result, as PyTorch */
      gin[0] = R(&s, fw_act_backward(DL_RELU, G, y));
      break;
    case DL_GELU:
    case DL_GELU_TANH:
    case DL_SILU:
      gin[0] = R(&s, fw_act_backward(n->op, G, x));
      break;
    case DL_SIGN: case DL_FLOOR: case DL_CEIL: case DL_ROUND: case DL_TRUNC:
      gin[0] = R(&s, dl_binary(DL_MUL, G, NUM(&s, 0)));
      break;
    case DL_RECIPROCAL:  /* -g * y^2 */
      gin[0] = R(&s, dl_unary(DL_NEG, K(&s, dl_binary(DL_MUL, G, K(&s, dl_unary(DL_SQUARE, y))))));
      break;
    case DL_SQUARE:
      gin[0] = R(&s, dl_binary(DL_MUL, K(&s, dl_binary(DL_MUL, G, x)), NUM(&s, 2)));
      break;
    case DL_LOG1P:
      gin[0] = R(&s, dl_binary(DL_DIV, G, K(&s, dl_binary(DL_ADD, x, NUM(&s, 1)))));
      break;
    case DL_EXPM1:
      gin[0] = R(&s, dl_binary(DL_MUL, G, K(&s, dl_binary(DL_ADD, y, NUM(&s, 1)))));
      break;
    case DL_LOG2:
      gin[0] = R(&s, dl_binary(DL_DIV, G, K(&s, dl_binary(DL_MUL, x, NUM(&s, M_LN2)))));
      break;
    default:
      s.err = 1;
      dl_err(EM_AG_NODIFF, dl_unop_name(n->op));
  }
  return ag_scope_end(&s);
}

static const char *const unary_names[DL_NUNOPS] = {
    [DL_NEG] = "NegBackward", [DL_ABS] = "AbsBackward", [DL_EXP] = "ExpBackward",
    [DL_LOG] = "LogBackward", [DL_SQRT] = "SqrtBackward", [DL_RSQRT] = "RsqrtBackward",
    [DL_SIN] = "SinBackward", [DL_COS] = "CosBackward", [DL_TANH] = "TanhBackward",
    [DL_SIGMOID] = "SigmoidBackward", [DL_RELU] = "ReluBackward",
    [DL_GELU] = "GeluBackward", [DL_GELU_TANH] = "GeluBackward",
    [DL_SIGN] = "SignBackward", [DL_FLOOR] = "FloorBackward", [DL_CEIL] = "CeilBackward",
    [DL_ROUND] = "RoundBackward", [DL_TRUNC] = "TruncBackward",
    [DL_RECIPROCAL] = "ReciprocalBackward", [DL_SQUARE] = "PowBackward",
    [DL_LOG1P] = "Log1PBackward", [DL_EXPM1] = "Expm1Backward", [DL_LOG2] = "Log2Backward",
    [DL_SILU] = "SiluBackward"};

DL_HIDDEN dl_tensor *ag_unary(int op, dl_tensor *out, const dl_tensor *a) {
  if (!out || !unary_names[op]) return out;
  dl_tensor *ins[1] = {(dl_tensor *)a};
  const dl_tensor *save[2] = {a, out};
  ag_node *n;
  out = ag_record(out, unary_names[op], unary_backward, ins, 1, save, 2, &n);
  if (n) n->op = op;
  return out;
}

/* -- Clamp, where, casts ------------------------------------------------------ */

static int clamp_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
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

DL_HIDDEN dl_tensor *ag_clamp(dl_tensor *out, const dl_tensor *a, double lo, double hi) {
  dl_tensor *ins[1] = {(dl_tensor *)a};
  const dl_tensor *save[1] = {a};
  ag_node *n;
  out = ag_record(out, "ClampBackward", clamp_backward, ins, 1, save, 1, &n);
  if (n) n->darg[0] = lo, n->darg[1] = hi;
  return out;
}

static int where_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  ag_scope s = {0};
  dl_tensor *cond = n->saved[0];
  if (n->needs[1])
    gin[1] = R(&s, dl_masked_fill(g, K(&s, dl_unary(DL_LOGICAL_NOT, cond)), 0));
  if (n->needs[2]) gin[2] = R(&s, dl_masked_fill(g, cond, 0));
  return ag_scope_end(&s);
}

DL_HIDDEN dl_tensor *ag_where(dl_tensor *out, const dl_tensor *cond,
                              const dl_tensor *a, const dl_tensor *b) {
  dl_tensor *ins[3] = {NULL, (dl_tensor *)a, (dl_tensor *)b};
  const dl_tensor *save[1] = {cond};
  return ag_record(out, "WhereBackward", where_backward, ins, 3, save, 1, NULL);
}

/* Casts, clones and contiguous copies pass the gradient straight through
** (the engine casts it back to the input's dtype). */
static int copy_backward(ag_node *n, const dl_tensor *g, dl_tensor **gin) {
  (void)n;
  gin[0] = dl_clone(g);
  return gin[0] ? 0 : -1;
}

DL_HIDDEN dl_tensor *ag_copy(dl_tensor *out, const dl_tensor *a, const char *name) {
  if (out == a) return out;
  return ag_record1(out, name, copy_backward, a, 0, 0);
}

/* -- The public elementwise ops: the forward (ops/elementwise.c), then the
** node; the in-place forms hand the forward autograd's in-place check. */

DL_API dl_tensor *dl_binary(dl_binop op, const dl_tensor *a, const dl_tensor *b) {
  return ag_binary(op, fw_binary(op, a, b), a, b);
}

DL_API int dl_binary_(dl_binop op, dl_tensor *a, const dl_tensor *b) {
  return fw_binary_(op, a, b, ag_check_inplace);
}

DL_API dl_tensor *dl_unary(dl_unop op, const dl_tensor *a) {
  return ag_unary(op, fw_unary(op, a), a);
}

DL_API int dl_unary_(dl_unop op, dl_tensor *a) {
  return fw_unary_(op, a, ag_check_inplace);
}

DL_API dl_tensor *dl_clamp(const dl_tensor *a, double lo, double hi) {
  return ag_clamp(fw_clamp(a, lo, hi), a, lo, hi);
}

DL_API int dl_clamp_(dl_tensor *a, double lo, double hi) {
  return fw_clamp_(a, lo, hi, ag_check_inplace);
}

DL_API dl_tensor *dl_where(const dl_tensor *cond, const dl_tensor *a, const dl_tensor *b) {
  return ag_where(fw_where(cond, a, b), cond, a, b);
}
