/*
** elementwise.c -- unary, binary and ternary ops with broadcasting and
** PyTorch's type promotion.  Kernels exist for float32, float64, int32,
** int64, uint8 and bool; bfloat16 and float16 compute in float32.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "core/simd.h"
#include "core/vmath.h"
#include "ops/forward.h"

/* The integer templates also serve uint8, where "< 0" is always false. */
#pragma GCC diagnostic ignored "-Wtype-limits"

/* Kernel slot per compute dtype; half types never reach a kernel. */
enum { K_F32, K_F64, K_I32, K_I64, K_U8, K_B, K_N };
static int kslot(int dtype) {
  switch (dtype) {
    case DL_FLOAT32: return K_F32;
    case DL_FLOAT64: return K_F64;
    case DL_INT32: return K_I32;
    case DL_INT64: return K_I64;
    case DL_UINT8: return K_U8;
    case DL_BOOL: return K_B;
  }
  return -1;
}

/* Set by integer kernels that meet a value they cannot compute. */
/* Atomic: several pool threads may report at once. */
typedef struct { atomic_int err; } kctx;

/* -- Loop templates ------------------------------------------------------- */

/* Contiguous and scalar-operand cases get their own loops so GCC can
** vectorise them; everything else walks byte strides. */
#define BINLOOP(NAME, T, OT, EXPR)                                          \
  HOT static void NAME(char **d, const int64_t *s, int64_t n, void *ctx_) {    \
    kctx *ctx = ctx_;                                                      \
    (void)ctx;                                                             \
    const int64_t so = s[0], sa = s[1], sb = s[2];                         \
    if (d[0] == d[1] && so == sizeof(T) && sa == sizeof(T) &&              \
        sizeof(OT) == sizeof(T) && (sb == sizeof(T) || sb == 0)) {         \
      /* in place: one pointer, so GCC needs no overlap check with it */    \
      OT *o = (OT *)d[0];                                                  \
      const T *pb = (const T *)d[2];                                       \
      if (sb) {                                                            \
        for (int64_t i = 0; i < n; i++) {                                  \
          T x = (T)o[i], y = pb[i];                                        \
          o[i] = (EXPR);                                                   \
        }                                                                  \
      } else {                                                             \
        const T y = *pb;                                                   \
        for (int64_t i = 0; i < n; i++) {                                  \
          T x = (T)o[i];                                                   \
          o[i] = (EXPR);                                                   \
        }                                                                  \
      }                                                                    \
    } else if (so == sizeof(OT) && sa == sizeof(T) && sb == sizeof(T)) {   \
      OT *o = (OT *)d[0];                                                  \
      const T *pa = (const T *)d[1], *pb = (const T *)d[2];                \
      for (int64_t i = 0; i < n; i++) {                                    \
        T x = pa[i], y = pb[i];                                            \
        o[i] = (EXPR);                                                     \
      }                                                                    \
    } else if (so == sizeof(OT) && sa == sizeof(T) && sb == 0) {           \
      OT *o = (OT *)d[0];                                                  \
      const T *pa = (const T *)d[1];                                       \
      const T y = *(const T *)d[2];                                        \
      for (int64_t i = 0; i < n; i++) {                                    \
        T x = pa[i]; (void)x;                                                \
        o[i] = (EXPR);                                                     \
      }                                                                    \
    } else if (so == sizeof(OT) && sa == 0 && sb == sizeof(T)) {           \
      OT *o = (OT *)d[0];                                                  \
      const T x = *(const T *)d[1];                                        \
      const T *pb = (const T *)d[2];                                       \
      for (int64_t i = 0; i < n; i++) {                                    \
        T y = pb[i];                                                       \
        o[i] = (EXPR);                                                     \
      }                                                                    \
    } else {                                                               \
      char *o = d[0];                                                      \
      const char *pa = d[1], *pb = d[2];                                   \
      for (int64_t i = 0; i < n; i++, o += so, pa += sa, pb += sb) {       \
        T x = *(const T *)pa, y = *(const T *)pb;                          \
        *(OT *)o = (EXPR);                                                 \
      }                                                                    \
    }                                                                      \
  }

#define UNLOOP(NAME, T, OT, EXPR)                                           \
  HOT static void NAME(char **d, const int64_t *s, int64_t n, void *ctx_) {    \
    kctx *ctx = ctx_;                                                      \
    (void)ctx;                                                             \
    if (s[0] == sizeof(OT) && s[1] == sizeof(T)) {                         \
      OT *o = (OT *)d[0];                                                  \
      const T *pa = (const T *)d[1];                                       \
      for (int64_t i = 0; i < n; i++) {                                    \
        T x = pa[i]; (void)x;                                                \
        o[i] = (EXPR);                                                     \
      }                                                                    \
    } else {                                                               \
      char *o = d[0];                                                      \
      const char *pa = d[1];                                               \
      for (int64_t i = 0; i < n; i++, o += s[0], pa += s[1]) {             \
        T x = *(const T *)pa; (void)x;                                       \
        *(OT *)o = (EXPR);                                                 \
      }                                                                    \
    }                                                                      \
  }

/* -- Scalar helpers ------------------------------------------------------- */

/* Signed overflow is undefined in C; PyTorch wraps, so compute unsigned. */
#define WRAP(T, U, op, x, y) ((T)((U)(x) op (U)(y)))

static inline double py_rem(double x, double y) {
  double r = fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}
static inline float py_remf(float x, float y) {
  float r = fmodf(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r;
}

/* Integer %, // and ** that never trap: x86 raises SIGFPE on /0 and on
** INT_MIN % -1, and negative powers have no integer result. */
#define INT_HELPERS(T, SFX)                                                \
  static inline T ifmod_##SFX(T x, T y, kctx *c) {                          \
    if (y == 0) { c->err = 1; return 0; }                                  \
    if (y == (T)-1) return 0;                                              \
    return x % y;                                                          \
  }                                                                        \
  static inline T irem_##SFX(T x, T y, kctx *c) {                           \
    if (y == 0) { c->err = 1; return 0; }                                  \
    if (y == (T)-1) return 0;                                              \
    T r = x % y;                                                           \
    if (r != 0 && ((r < 0) != (y < 0))) r += y;                            \
    return r;                                                              \
  }                                                                        \
  static inline T ipow_##SFX(T x, T y, kctx *c) {                           \
    if (y < 0) {                                                           \
      if (x == 1) return 1;                                                \
      if (x == (T)-1) return (y & 1) ? (T)-1 : 1;                          \
      c->err = 2;                                                          \
      return 0;                                                            \
    }                                                                      \
    uint64_t r = 1, b = (uint64_t)x;                                       \
    while (y) {                                                            \
      if (y & 1) r *= b;                                                   \
      b *= b;                                                              \
      y >>= 1;                                                             \
    }                                                                      \
    return (T)r;                                                           \
  }
INT_HELPERS(int32_t, i32)
INT_HELPERS(int64_t, i64)
INT_HELPERS(uint8_t, u8)

static inline double gelu_d(double x) { return 0.5 * x * (1.0 + erf(x * M_SQRT1_2)); }
/* float32: core/vmath.h's branch-free functions, so the contiguous loops
** vectorise (scalar libm erff was 13% of a GPT training step). */
static inline float gelu_f(float x) { return 0.5f * x * (1.0f + vm_erff(x * (float)M_SQRT1_2)); }
static inline double gelu_tanh_d(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static inline float gelu_tanh_f(float x) {
  return 0.5f * x * (1.0f + vm_tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
static inline double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float sigmoid_f(float x) { return vm_sigmoidf(x); }

/* -- Binary kernels ------------------------------------------------------- */

#define FLOAT_BINOPS(SFX, T, F)                                               \
  BINLOOP(add_##SFX, T, T, x + y)                                             \
  BINLOOP(sub_##SFX, T, T, x - y)                                             \
  BINLOOP(mul_##SFX, T, T, x * y)                                             \
  BINLOOP(div_##SFX, T, T, x / y)                                             \
  BINLOOP(pow_##SFX, T, T, F(pow)(x, y))                                      \
  BINLOOP(max_##SFX, T, T, (x > y || x != x) ? x : y)                         \
  BINLOOP(min_##SFX, T, T, (x < y || x != x) ? x : y)                         \
  BINLOOP(fmod_##SFX, T, T, F(fmod)(x, y))                                    \
  BINLOOP(rem_##SFX, T, T, F(py_rem)(x, y))                                   \
  BINLOOP(atan2_##SFX, T, T, F(atan2)(x, y))
#define FD(fn) fn
#define FF(fn) fn##f
FLOAT_BINOPS(f32, float, FF)
FLOAT_BINOPS(f64, double, FD)

#define INT_BINOPS(SFX, T, U)                                                 \
  BINLOOP(add_##SFX, T, T, WRAP(T, U, +, x, y))                               \
  BINLOOP(sub_##SFX, T, T, WRAP(T, U, -, x, y))                               \
  BINLOOP(mul_##SFX, T, T, WRAP(T, U, *, x, y))                               \
  BINLOOP(pow_##SFX, T, T, ipow_##SFX(x, y, ctx))                              \
  BINLOOP(max_##SFX, T, T, x > y ? x : y)                                     \
  BINLOOP(min_##SFX, T, T, x < y ? x : y)                                     \
  BINLOOP(fmod_##SFX, T, T, ifmod_##SFX(x, y, ctx))                            \
  BINLOOP(rem_##SFX, T, T, irem_##SFX(x, y, ctx))
INT_BINOPS(i32, int32_t, uint32_t)
INT_BINOPS(i64, int64_t, uint64_t)
INT_BINOPS(u8, uint8_t, uint8_t)

BINLOOP(or_b, uint8_t, uint8_t, (x | y) != 0)
BINLOOP(and_b, uint8_t, uint8_t, (x && y))

#define CMP_OPS(SFX, T)                                                       \
  BINLOOP(eq_##SFX, T, uint8_t, x == y)                                       \
  BINLOOP(ne_##SFX, T, uint8_t, x != y)                                       \
  BINLOOP(lt_##SFX, T, uint8_t, x < y)                                        \
  BINLOOP(le_##SFX, T, uint8_t, x <= y)                                       \
  BINLOOP(gt_##SFX, T, uint8_t, x > y)                                        \
  BINLOOP(ge_##SFX, T, uint8_t, x >= y)                                       \
  BINLOOP(land_##SFX, T, uint8_t, (x != 0) & (y != 0))                        \
  BINLOOP(lor_##SFX, T, uint8_t, (x != 0) | (y != 0))
CMP_OPS(f32, float)
CMP_OPS(f64, double)
CMP_OPS(i32, int32_t)
CMP_OPS(i64, int64_t)
CMP_OPS(u8, uint8_t)
CMP_OPS(b, uint8_t)

#define ROW6(a, b, c, d, e, f) {a, b, c, d, e, f}
#define ALL6(p) ROW6(p##_f32, p##_f64, p##_i32, p##_i64, p##_u8, p##_b)
static const loop_fn bin_table[DL_NBINOPS][K_N] = {
    [DL_ADD] = ROW6(add_f32, add_f64, add_i32, add_i64, add_u8, or_b),
    [DL_SUB] = ROW6(sub_f32, sub_f64, sub_i32, sub_i64, sub_u8, NULL),
    [DL_MUL] = ROW6(mul_f32, mul_f64, mul_i32, mul_i64, mul_u8, and_b),
    [DL_DIV] = ROW6(div_f32, div_f64, NULL, NULL, NULL, NULL),
    [DL_POW] = ROW6(pow_f32, pow_f64, pow_i32, pow_i64, pow_u8, NULL),
    [DL_MAXIMUM] = ROW6(max_f32, max_f64, max_i32, max_i64, max_u8, or_b),
    [DL_MINIMUM] = ROW6(min_f32, min_f64, min_i32, min_i64, min_u8, and_b),
    [DL_EQ] = ALL6(eq), [DL_NE] = ALL6(ne), [DL_LT] = ALL6(lt),
    [DL_LE] = ALL6(le), [DL_GT] = ALL6(gt), [DL_GE] = ALL6(ge),
    [DL_LOGICAL_AND] = ALL6(land), [DL_LOGICAL_OR] = ALL6(lor),
    [DL_FMOD] = ROW6(fmod_f32, fmod_f64, fmod_i32, fmod_i64, fmod_u8, NULL),
    [DL_REMAINDER] = ROW6(rem_f32, rem_f64, rem_i32, rem_i64, rem_u8, NULL),
    [DL_ATAN2] = ROW6(atan2_f32, atan2_f64, NULL, NULL, NULL, NULL),
};

static const char *const binop_names[DL_NBINOPS] = {
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
    "le", "gt", "ge", "logical_and", "logical_or", "fmod", "remainder",
    "atan2"};

DL_API const char *dl_binop_name(dl_binop op) {
  return op >= 0 && op < DL_NBINOPS ? binop_names[op] : "binary op";
}

/* -- Unary kernels -------------------------------------------------------- */

#define FLOAT_UNOPS(SFX, T, F, G, V)                                             \
  UNLOOP(neg_##SFX, T, T, -x)                                                 \
  UNLOOP(abs_##SFX, T, T, F(fabs)(x))                                         \
  UNLOOP(exp_##SFX, T, T, V(exp)(x))                                          \
  UNLOOP(log_##SFX, T, T, V(log)(x))                                          \
  UNLOOP(sqrt_##SFX, T, T, F(sqrt)(x))                                        \
  UNLOOP(rsqrt_##SFX, T, T, (T)1 / F(sqrt)(x))                                \
  UNLOOP(sin_##SFX, T, T, F(sin)(x))                                          \
  UNLOOP(cos_##SFX, T, T, F(cos)(x))                                          \
  UNLOOP(tanh_##SFX, T, T, V(tanh)(x))                                        \
  UNLOOP(sigmoid_##SFX, T, T, sigmoid_##G(x))                                 \
  UNLOOP(relu_##SFX, T, T, x < 0 ? 0 : x) /* keeps NaN and -0, as PyTorch */  \
  UNLOOP(gelu_##SFX, T, T, gelu_##G(x))                                       \
  UNLOOP(gelut_##SFX, T, T, gelu_tanh_##G(x))                                 \
  UNLOOP(lnot_##SFX, T, uint8_t, x == 0)                                      \
  UNLOOP(sign_##SFX, T, T, (T)((x > 0) - (x < 0))) /* NaN -> 0, as PyTorch */ \
  UNLOOP(floor_##SFX, T, T, F(floor)(x))                                      \
  UNLOOP(ceil_##SFX, T, T, F(ceil)(x))                                        \
  UNLOOP(round_##SFX, T, T, F(nearbyint)(x))                                  \
  UNLOOP(trunc_##SFX, T, T, F(trunc)(x))                                      \
  UNLOOP(recip_##SFX, T, T, (T)1 / x)                                         \
  UNLOOP(square_##SFX, T, T, x * x)                                           \
  UNLOOP(log1p_##SFX, T, T, F(log1p)(x))                                      \
  UNLOOP(expm1_##SFX, T, T, F(expm1)(x))                                      \
  UNLOOP(log2_##SFX, T, T, F(log2)(x))                                        \
  UNLOOP(silu_##SFX, T, T, x * sigmoid_##G(x))                                \
  UNLOOP(isnan_##SFX, T, uint8_t, x != x)                                     \
  UNLOOP(isinf_##SFX, T, uint8_t, F(fabs)(x) == (T)INFINITY)                  \
  UNLOOP(isfin_##SFX, T, uint8_t, x - x == 0)
/* V: the vectorisable float32 functions (core/vmath.h); float64 keeps libm. */
#define VF(fn) vm_##fn##f
FLOAT_UNOPS(f32, float, FF, f, VF)
FLOAT_UNOPS(f64, double, FD, d, FD)

#define INT_UNOPS(SFX, T, U)                                                  \
  UNLOOP(neg_##SFX, T, T, (T)(0 - (U)x))                                      \
  UNLOOP(abs_##SFX, T, T, x < 0 ? (T)(0 - (U)x) : x)                          \
  UNLOOP(relu_##SFX, T, T, x > 0 ? x : 0)                                     \
  UNLOOP(lnot_##SFX, T, uint8_t, x == 0)                                      \
  UNLOOP(sign_##SFX, T, T, (T)((x > 0) - (x < 0)))                            \
  UNLOOP(ident_##SFX, T, T, x)                                                \
  UNLOOP(square_##SFX, T, T, (T)((U)x * (U)x))                                \
  UNLOOP(isnan_##SFX, T, uint8_t, 0)                                          \
  UNLOOP(isinf_##SFX, T, uint8_t, 0)                                          \
  UNLOOP(isfin_##SFX, T, uint8_t, 1)
INT_UNOPS(i32, int32_t, uint32_t)
INT_UNOPS(i64, int64_t, uint64_t)
INT_UNOPS(u8, uint8_t, uint8_t)
UNLOOP(lnot_b, uint8_t, uint8_t, x == 0)
UNLOOP(ident_b, uint8_t, uint8_t, x)
UNLOOP(isnan_b, uint8_t, uint8_t, 0)
UNLOOP(isinf_b, uint8_t, uint8_t, 0)
UNLOOP(isfin_b, uint8_t, uint8_t, 1)

#define FLT2(p) ROW6(p##_f32, p##_f64, NULL, NULL, NULL, NULL)
#define INTS(p, b) ROW6(p##_f32, p##_f64, p##_i32, p##_i64, p##_u8, b)
#define IDENT(p) ROW6(p##_f32, p##_f64, ident_i32, ident_i64, ident_u8, NULL)
static const loop_fn un_table[DL_NUNOPS][K_N] = {
    [DL_NEG] = INTS(neg, NULL),       [DL_ABS] = INTS(abs, NULL),
    [DL_EXP] = FLT2(exp),             [DL_LOG] = FLT2(log),
    [DL_SQRT] = FLT2(sqrt),           [DL_RSQRT] = FLT2(rsqrt),
    [DL_SIN] = FLT2(sin),             [DL_COS] = FLT2(cos),
    [DL_TANH] = FLT2(tanh),           [DL_SIGMOID] = FLT2(sigmoid),
    [DL_RELU] = INTS(relu, NULL),     [DL_GELU] = FLT2(gelu),
    [DL_GELU_TANH] = FLT2(gelut),     [DL_LOGICAL_NOT] = INTS(lnot, lnot_b),
    [DL_SIGN] = INTS(sign, ident_b),  [DL_FLOOR] = IDENT(floor),
    [DL_CEIL] = IDENT(ceil),          [DL_ROUND] = IDENT(round),
    [DL_TRUNC] = IDENT(trunc),        [DL_RECIPROCAL] = FLT2(recip),
    [DL_SQUARE] = INTS(square, NULL), [DL_LOG1P] = FLT2(log1p),
    [DL_EXPM1] = FLT2(expm1),         [DL_LOG2] = FLT2(log2),
    [DL_SILU] = FLT2(silu),           [DL_ISNAN] = INTS(isnan, isnan_b),
    [DL_ISINF] = INTS(isinf, isinf_b), [DL_ISFINITE] = INTS(isfin, isfin_b),
};

static const char *const unop_names[DL_NUNOPS] = {
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh",
    "sigmoid", "relu", "gelu", "gelu_tanh", "logical_not", "sign", "floor",
    "ceil", "round", "trunc", "reciprocal", "square", "log1p", "expm1", "log2",
    "silu", "isnan", "isinf", "isfinite"};

DL_API const char *dl_unop_name(dl_unop op) {
  return op >= 0 && op < DL_NUNOPS ? unop_names[op] : "unary op";
}

/* -- Dtype rules ---------------------------------------------------------- */

static int bin_is_cmp(int op) {
  return (op >= DL_EQ && op <= DL_GE) || op == DL_LOGICAL_AND || op == DL_LOGICAL_OR;
}

/* The dtype the kernel computes in and the dtype of the result. */
static void bin_dtypes(int op, const dl_tensor *a, const dl_tensor *b,
                       int *compute, int *out) {
  int rt = dl_result_type(a, b);
  if ((op == DL_DIV || op == DL_ATAN2) && !dl_dtype_is_float(rt)) rt = DL_FLOAT32;
  *compute = rt;
  *out = bin_is_cmp(op) ? DL_BOOL : rt;
}

static int un_float_only(int op) {
  return un_table[op][K_I64] == NULL && un_table[op][K_F32] != NULL;
}

static int un_out_bool(int op) {
  return op == DL_LOGICAL_NOT || op == DL_ISNAN || op == DL_ISINF || op == DL_ISFINITE;
}

/* PyTorch's can_cast: never from a higher category into a lower one. */
static int can_cast(int from, int to) {
  int cf = from == DL_BOOL ? 0 : dl_dtype_is_float(from) ? 2 : 1;
  int ct = to == DL_BOOL ? 0 : dl_dtype_is_float(to) ? 2 : 1;
  return cf <= ct;
}

static int kernel_error(const char *name, kctx *c, int dtype) {
  if (c->err == 1) return dl_err(EM_INT_DIV_ZERO, name, fmt_dtype(dtype));
  return dl_err(EM_INT_NEG_POW, name, fmt_dtype(dtype));
}

/* "add_" for in-place ops, so messages name the method the user called. */
static const char *inplace_name(const char *name) {
  static _Thread_local char buf[32];
  snprintf(buf, sizeof buf, "%s_", name);
  return buf;
}

/* -- Binary -------------------------------------------------------------- */

/* Runs op into out (shape already the broadcast shape, dtype = out dtype
** of the op, or compute dtype for half results). */
/* On a device whose kernels read and write the half types (CUDA), half-type
** math computes in float32 registers: one kernel where the CPU makes float32
** copies, with the same result (float32 math, one rounding).  Tensor
** operands go to cd first (an int tensor beside a bf16 one), CPU scalars
** to float32. */
static int binary_half(const dl_device *d, const char *name, int op, dl_tensor *out,
                       const dl_tensor *a, const dl_tensor *b, int cd) {
  const dl_tensor *in[2] = {a, b};
  dl_tensor *c[2] = {NULL, NULL};
  int rc = -1;
  for (int i = 0; i < 2; i++)
    if (!(c[i] = as_dtype(in[i], is_host_scalar(in[i]) ? DL_FLOAT32 : cd))) goto done;
  dl_tensor *ops[3] = {out, c[0], c[1]};
  rc = d->binary(name, op, cd, ops);
done:
  dl_tensor_release(c[0]);
  dl_tensor_release(c[1]);
  return rc;
}

static int binary_into(const char *name, int op, dl_tensor *out,
                       const dl_tensor *a, const dl_tensor *b, int cd) {
  int kd = is_half_dtype(cd) ? DL_FLOAT32 : cd;
  int k = kslot(kd);
  loop_fn fn = k >= 0 ? bin_table[op][k] : NULL;
  if (!fn) return dl_err(EM_DTYPE_UNSUP, name, fmt_dtype(cd));
  const dl_device *d = device_of(name, out);
  if (!d) return -1;
  if (d->half_native && is_half_dtype(cd) && out->dtype == (bin_is_cmp(op) ? DL_BOOL : cd))
    return binary_half(d, name, op, out, a, b, cd);
  dl_tensor *ca = as_dtype(a, kd), *cb = ca ? as_dtype(b, kd) : NULL;
  int od = bin_is_cmp(op) ? DL_BOOL : kd;
  dl_tensor *tmp = NULL, *dst = out;
  int rc = -1;
  if (!cb) goto done;
  if (out->dtype != od) {  /* half result: compute in float32 first */
    tmp = tensor_new_on(out->storage->device, od, out->shape, out->ndim);
    if (!tmp) goto done;
    dst = tmp;
  }
  dl_tensor *ops[3] = {dst, ca, cb};
  rc = d->binary(name, op, kd, ops);
  if (!rc && tmp) rc = fw_copy_(out, tmp);
done:
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  dl_tensor_release(tmp);
  return rc;
}

DL_HIDDEN dl_tensor *fw_binary(int op, const dl_tensor *a, const dl_tensor *b) {
  if (op < 0 || op >= DL_NBINOPS) return dl_errp(EM_BADVALUE, "binary", "unknown op");
  const char *name = binop_names[op];
  const dl_tensor *args[2] = {a, b};
  int dev = op_device(name, 2, args);
  if (dev < -1) return NULL;
  int cd, od, nd;
  int64_t shape[DL_MAX_DIMS];
  bin_dtypes(op, a, b, &cd, &od);
  if (op == DL_SUB && cd == DL_BOOL)
    return dl_errp(EM_BADVALUE, name,
                   "subtracting two bool tensors is not supported; use logical_xor or ~");
  if (broadcast_shape(name, a->shape, a->ndim, b->shape, b->ndim, shape, &nd))
    return NULL;
  dl_tensor *out = tensor_new_on(dev, od, shape, nd);
  if (out && binary_into(name, op, out, a, b, cd)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

/* b shares storage with the tensor written in place, in another layout:
** read from a copy so no element is read after being overwritten. */
static dl_tensor *unalias(const dl_tensor *dst, const dl_tensor *b) {
  int same = dst->storage == b->storage;
  if (same && b->offset == dst->offset && b->ndim == dst->ndim &&
      !memcmp(b->stride, dst->stride, sizeof(int64_t) * (size_t)b->ndim) &&
      !memcmp(b->shape, dst->shape, sizeof(int64_t) * (size_t)b->ndim))
    same = 0;  /* the very same elements: reading before writing is fine */
  if (same) return fw_clone(b);
  dl_tensor_retain((dl_tensor *)b);
  return (dl_tensor *)b;
}

DL_HIDDEN int fw_binary_(int op, dl_tensor *a, const dl_tensor *b, inplace_check_fn check) {
  if (op < 0 || op >= DL_NBINOPS) return dl_err(EM_BADVALUE, "binary_", "unknown op");
  const char *name = inplace_name(binop_names[op]);
  const dl_tensor *args[2] = {a, b};
  if (op_device(name, 2, args) < -1) return -1;
  if (is_host_scalar(a) && !is_host_scalar(b) && a->storage->device != b->storage->device)
    return dl_err(EM_DEVICE_MIX, name, "cpu", 1, "cuda", 2);
  int cd, od, nd;
  int64_t shape[DL_MAX_DIMS];
  bin_dtypes(op, a, b, &cd, &od);
  if (broadcast_shape(name, a->shape, a->ndim, b->shape, b->ndim, shape, &nd))
    return -1;
  if (nd != a->ndim || memcmp(shape, a->shape, sizeof(int64_t) * (size_t)nd))
    return dl_err(EM_INPLACE_SHAPE, name, fmt_shape(shape, nd), fmt_tshape(a));
  if (!can_cast(od, a->dtype))
    return dl_err(EM_INPLACE_DTYPE, name, fmt_dtype(od), fmt_dtype(a->dtype));
  if (check && check(name, a)) return -1;
  if (op == DL_SUB && cd == DL_BOOL)
    return dl_err(EM_BADVALUE, name,
                  "subtracting two bool tensors is not supported; use logical_xor or ~");
  dl_tensor *ub = unalias(a, b);
  if (!ub) return -1;
  int rc;
  if (od == a->dtype && !is_half_dtype(od)) {
    rc = binary_into(name, op, a, a, ub, cd);
  } else {  /* compute in the op's dtype, then cast into a */
    dl_tensor *r = tensor_new_on(a->storage->device, od, shape, nd);
    rc = r ? binary_into(name, op, r, a, ub, cd) : -1;
    if (!rc) rc = fw_copy_(a, r);
    dl_tensor_release(r);
  }
  dl_tensor_release(ub);
  return rc;
}

/* -- Unary --------------------------------------------------------------- */

static int unary_into(const char *name, int op, dl_tensor *out,
                      const dl_tensor *a) {
  int cd = a->dtype;
  if (op == DL_NEG && cd == DL_BOOL) return dl_err(EM_NEG_BOOL, name);
  if (un_float_only(op) && !dl_dtype_is_float(cd)) cd = DL_FLOAT32;
  if (op == DL_SQUARE && cd == DL_BOOL) cd = DL_INT64;  /* pow(b, 2) */
  int kd = is_half_dtype(cd) ? DL_FLOAT32 : cd;
  loop_fn fn = un_table[op][kslot(kd)];
  if (!fn) return dl_err(EM_DTYPE_UNSUP, name, fmt_dtype(a->dtype));
  int od = un_out_bool(op) ? DL_BOOL : kd;
  const dl_device *d = device_of(name, out);
  if (!d) return -1;
  if (d->half_native && is_half_dtype(cd) && a->dtype == cd &&
      out->dtype == (un_out_bool(op) ? DL_BOOL : cd)) {  /* as binary_half */
    dl_tensor *ops[2] = {out, (dl_tensor *)a};
    return d->unary(name, op, cd, ops);
  }
  dl_tensor *ca = as_dtype(a, kd), *tmp = NULL, *dst = out;
  int rc = -1;
  if (!ca) return -1;
  if (out->dtype != od) {
    tmp = tensor_new_on(out->storage->device, od, out->shape, out->ndim);
    if (!tmp) goto done;
    dst = tmp;
  }
  dl_tensor *ops[2] = {dst, ca};
  rc = d->unary(name, op, kd, ops);
  if (!rc && tmp) rc = fw_copy_(out, tmp);
done:
  dl_tensor_release(ca);
  dl_tensor_release(tmp);
  return rc;
}

static int unary_out_dtype(int op, int dtype) {
  if (un_out_bool(op)) return DL_BOOL;
  if (un_float_only(op) && !dl_dtype_is_float(dtype)) return DL_FLOAT32;
  /* PyTorch squares as pow(x, 2): bool with an int scalar gives int64 */
  if (op == DL_SQUARE && dtype == DL_BOOL) return DL_INT64;
  return dtype;
}

DL_HIDDEN dl_tensor *fw_unary(int op, const dl_tensor *a) {
  if (op < 0 || op >= DL_NUNOPS) return dl_errp(EM_BADVALUE, "unary", "unknown op");
  const char *name = unop_names[op];
  if (check_tensor_any(name, a)) return NULL;
  dl_tensor *out = tensor_new_on(a->storage->device, unary_out_dtype(op, a->dtype), a->shape, a->ndim);
  if (out && unary_into(name, op, out, a)) {
    dl_tensor_release(out);
    return NULL;
  }
  return out;
}

DL_HIDDEN int fw_unary_(int op, dl_tensor *a, inplace_check_fn check) {
  if (op < 0 || op >= DL_NUNOPS) return dl_err(EM_BADVALUE, "unary_", "unknown op");
  const char *name = inplace_name(unop_names[op]);
  if (check_tensor_any(name, a)) return -1;
  int od = unary_out_dtype(op, a->dtype);
  if (!can_cast(od, a->dtype))
    return dl_err(EM_INPLACE_DTYPE, name, fmt_dtype(od), fmt_dtype(a->dtype));
  if (check && check(name, a)) return -1;
  if (od == a->dtype && !is_half_dtype(od)) return unary_into(name, op, a, a);
  dl_tensor *r = tensor_new_on(a->storage->device, od, a->shape, a->ndim);
  if (r && unary_into(name, op, r, a)) {
    dl_tensor_release(r);
    r = NULL;
  }
  int rc = r ? fw_copy_(a, r) : -1;
  dl_tensor_release(r);
  return rc;
}

/* -- Clamp and where ------------------------------------------------------ */

typedef struct { double lo, hi; } clamp_ctx;

#define CLAMP_FN(SFX, T)                                                    \
  static void clamp_##SFX(char **d, const int64_t *s, int64_t n, void *c) { \
    const clamp_ctx *cc = c;                                               \
    const int has_lo = cc->lo == cc->lo, has_hi = cc->hi == cc->hi;        \
    const T lo = has_lo ? (T)cc->lo : 0, hi = has_hi ? (T)cc->hi : 0;       \
    char *o = d[0];                                                        \
    const char *a = d[1];                                                  \
    for (int64_t i = 0; i < n; i++, o += s[0], a += s[1]) {                \
      T x = *(const T *)a;                                                 \
      if (has_lo && x < lo) x = lo;                                        \
      if (has_hi && x > hi) x = hi;                                        \
      *(T *)o = x;                                                         \
    }                                                                      \
  }
CLAMP_FN(f32, float)
CLAMP_FN(f64, double)
CLAMP_FN(i32, int32_t)
CLAMP_FN(i64, int64_t)
CLAMP_FN(u8, uint8_t)
static const loop_fn clamp_table[K_N] = {clamp_f32, clamp_f64, clamp_i32,
                                         clamp_i64, clamp_u8, NULL};

static int clamp_into(const char *name, dl_tensor *out, const dl_tensor *a,
                      double lo, double hi) {
  if (check_tensor_any(name, a)) return -1;
  if (lo == lo && hi == hi && lo > hi) {
    /* PyTorch: min > max sets every element to max */
    lo = hi;
  }
  int kd = is_half_dtype(a->dtype) ? DL_FLOAT32 : a->dtype;
  loop_fn fn = clamp_table[kslot(kd)];
  if (!fn) return dl_err(EM_DTYPE_UNSUP, name, fmt_dtype(a->dtype));
  const dl_device *d = device_of(name, out);
  if (!d) return -1;
  dl_tensor *ca = as_dtype(a, kd);
  dl_tensor *dst = out->dtype == kd ? out : tensor_new_on(out->storage->device, kd, out->shape, out->ndim);
  int rc = -1;
  if (ca && dst) {
    dl_tensor *ops[2] = {dst, ca};
    rc = d->clamp(name, kd, lo, hi, ops);
    if (!rc && dst != out) rc = fw_copy_(out, dst);
  }
  dl_tensor_release(ca);
  if (dst != out) dl_tensor_release(dst);
  return rc;
}

/* PyTorch promotes a non-float tensor with its bounds, which count as
** Python scalars: a fractional or infinite bound gives float32, an integral
** one lifts bool to int64 (NaN means no bound). */
static int clamp_dtype(int dtype, double lo, double hi) {
  if (dl_dtype_is_float(dtype)) return dtype;
  int any = 0, frac = 0;
  const double b[2] = {lo, hi};
  for (int i = 0; i < 2; i++) {
    if (b[i] != b[i]) continue;
    any = 1;
    if (isinf(b[i]) || b[i] != floor(b[i])) frac = 1;
  }
  if (frac) return DL_FLOAT32;
  return dtype == DL_BOOL && any ? DL_INT64 : dtype;
}

DL_HIDDEN dl_tensor *fw_clamp(const dl_tensor *a, double lo, double hi) {
  if (check_tensor_any("clamp", a)) return NULL;
  int od = clamp_dtype(a->dtype, lo, hi);
  dl_tensor *ca = as_dtype(a, od);
  dl_tensor *out = ca ? tensor_new_on(a->storage->device, od, a->shape, a->ndim) : NULL;
  if (out && clamp_into("clamp", out, ca, lo, hi)) {
    dl_tensor_release(out);
    out = NULL;
  }
  dl_tensor_release(ca);
  return out;
}

DL_HIDDEN int fw_clamp_(dl_tensor *a, double lo, double hi, inplace_check_fn check) {
  if (check_tensor_any("clamp_", a)) return -1;
  int od = clamp_dtype(a->dtype, lo, hi);
  if (od != a->dtype)
    return dl_err(EM_INPLACE_DTYPE, "clamp_", fmt_dtype(od), fmt_dtype(a->dtype));
  if (check && check("clamp_", a)) return -1;
  return clamp_into("clamp_", a, a, lo, hi);
}

#define WHERE_FN(NAME, T)                                                   \
  static void NAME(char **d, const int64_t *s, int64_t n, void *c) {       \
    (void)c;                                                               \
    char *o = d[0];                                                        \
    const char *m = d[1], *a = d[2], *b = d[3];                            \
    for (int64_t i = 0; i < n; i++, o += s[0], m += s[1], a += s[2], b += s[3]) \
      *(T *)o = *(const uint8_t *)m ? *(const T *)a : *(const T *)b;       \
  }
WHERE_FN(where1, uint8_t)
WHERE_FN(where2, uint16_t)
WHERE_FN(where4, uint32_t)
WHERE_FN(where8, uint64_t)

DL_HIDDEN dl_tensor *fw_where(const dl_tensor *cond, const dl_tensor *a,
                           const dl_tensor *b) {
  const dl_tensor *args[3] = {cond, a, b};
  int dev = op_device("where", 3, args);
  if (dev < -1) return NULL;
  if (cond->dtype != DL_BOOL && cond->dtype != DL_UINT8)
    return dl_errp(EM_DTYPE_NEED_BOOL, "where", "condition", fmt_dtype(cond->dtype));
  int64_t s1[DL_MAX_DIMS], s2[DL_MAX_DIMS];
  int n1, n2;
  if (broadcast_shape("where", cond->shape, cond->ndim, a->shape, a->ndim, s1, &n1) ||
      broadcast_shape("where", s1, n1, b->shape, b->ndim, s2, &n2))
    return NULL;
  int od = dl_result_type(a, b);
  const dl_device *d = device_get("where", dev);
  dl_tensor *ca = d ? as_dtype(a, od) : NULL, *cb = ca ? as_dtype(b, od) : NULL;
  dl_tensor *out = cb ? tensor_new_on(dev, od, s2, n2) : NULL;
  if (out) {
    dl_tensor *ops[4] = {out, (dl_tensor *)cond, ca, cb};
    if (d->where("where", ops)) {
      dl_tensor_release(out);
      out = NULL;
    }
  }
  dl_tensor_release(ca);
  dl_tensor_release(cb);
  return out;
}

/* -- The CPU's kernels (core/device.h) ------------------------------------ */

DL_HIDDEN int cpu_binary(const char *op, dl_binop binop, dl_dtype dtype, dl_tensor *const *ops) {
  loop_fn fn = bin_table[binop][kslot(dtype)];
  iter_t it;
  if (iter_init(&it, op, ops, 3)) return -1;
  kctx c;
  atomic_init(&c.err, 0);
  iter_run(&it, fn, &c);
  return c.err ? kernel_error(op, &c, dtype) : 0;
}

DL_HIDDEN int cpu_unary(const char *op, dl_unop unop, dl_dtype dtype, dl_tensor *const *ops) {
  loop_fn fn = un_table[unop][kslot(dtype)];
  iter_t it;
  if (iter_init(&it, op, ops, 2)) return -1;
  kctx c;
  atomic_init(&c.err, 0);
  iter_run(&it, fn, &c);
  return 0;
}

DL_HIDDEN int cpu_clamp(const char *op, dl_dtype dtype, double lo, double hi, dl_tensor *const *ops) {
  iter_t it;
  clamp_ctx c = {lo, hi};
  if (iter_init(&it, op, ops, 2)) return -1;
  iter_run(&it, clamp_table[kslot(dtype)], &c);
  return 0;
}

DL_HIDDEN int cpu_where(const char *op, dl_tensor *const *ops) {
  static const loop_fn fns[9] = {0, where1, where2, 0, where4, 0, 0, 0, where8};
  iter_t it;
  if (iter_init(&it, op, ops, 4)) return -1;
  iter_run(&it, fns[dl_dtype_sizes[ops[0]->dtype]], NULL);
  return 0;
}
