/*
** dtype.c -- dtype names and sizes, PyTorch's type promotion, half and
** bfloat16 conversion, and the casting loops between every pair of dtypes.
*/
#include <math.h>
#include <string.h>

#include "core/internal.h"

const int dl_dtype_sizes[DL_NDTYPES] = {4, 8, 4, 8, 1, 1, 2, 2};
static const char *const dtype_names[DL_NDTYPES] = {
    "float32", "float64", "int32", "int64", "uint8", "bool", "bfloat16",
    "float16"};

DL_API const char *dl_dtype_name(dl_dtype dtype) {
  return dtype >= 0 && dtype < DL_NDTYPES ? dtype_names[dtype] : "?";
}

DL_API dl_dtype dl_dtype_from_name(const char *name) {
  static const struct { const char *alias; int dtype; } aliases[] = {
      {"float", DL_FLOAT32}, {"double", DL_FLOAT64}, {"int", DL_INT32},
      {"long", DL_INT64},    {"half", DL_FLOAT16},   {"bf16", DL_BFLOAT16},
      {"fp16", DL_FLOAT16},  {"fp32", DL_FLOAT32},   {"fp64", DL_FLOAT64}};
  if (!name) return -1;
  if (!strncmp(name, "torch.", 6)) name += 6;
  for (int i = 0; i < DL_NDTYPES; i++)
    if (!strcmp(name, dtype_names[i])) return i;
  for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
    if (!strcmp(name, aliases[i].alias)) return aliases[i].dtype;
  return -1;
}

DL_API int dl_dtype_size(dl_dtype dtype) {
  return dtype >= 0 && dtype < DL_NDTYPES ? dl_dtype_sizes[dtype] : -1;
}

DL_API int dl_dtype_is_float(dl_dtype dtype) {
  return dtype == DL_FLOAT32 || dtype == DL_FLOAT64 || is_half_dtype(dtype);
}
DL_HIDDEN int is_int_dtype(int d) {
  return d == DL_INT32 || d == DL_INT64 || d == DL_UINT8;
}
DL_HIDDEN int is_half_dtype(int d) {
  return d == DL_BFLOAT16 || d == DL_FLOAT16;
}

/* -- Promotion ----------------------------------------------------------- */

static int category(int d) {
  return d == DL_BOOL ? 0 : is_int_dtype(d) ? 1 : 2;
}

DL_API dl_dtype dl_promote_types(dl_dtype a, dl_dtype b) {
  if (a < 0) return b;
  if (b < 0) return a;
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == DL_FLOAT64 || b == DL_FLOAT64) return DL_FLOAT64;
    return DL_FLOAT32;  /* f32 with a half type, or bf16 with f16 */
  }
  if (ca == 1) {  /* uint8 < int32 < int64 */
    int ra = a == DL_UINT8 ? 0 : a == DL_INT32 ? 1 : 2;
    int rb = b == DL_UINT8 ? 0 : b == DL_INT32 ? 1 : 2;
    return ra > rb ? a : b;
  }
  return a;
}

/* PyTorch's combine_categories: a lower tier only matters when it brings a
** higher category (a float scalar into an int tensor, say). */
static int combine(int higher, int lower) {
  if (higher >= 0 && category(higher) == 2) return higher;
  if (higher == DL_BOOL || (lower >= 0 && category(lower) == 2))
    return dl_promote_types(higher, lower);
  return higher >= 0 ? higher : lower;
}

DL_HIDDEN int result_type_n(const dl_tensor *const *ts, int n) {
  int dim = -1, zero = -1, wrapped = -1;
  for (int i = 0; i < n; i++) {
    const dl_tensor *t = ts[i];
    if (!t) continue;
    if (t->flags & TF_WRAPPED) {
      int d = t->dtype == DL_FLOAT64 ? DL_FLOAT32 : t->dtype;
      wrapped = dl_promote_types(wrapped, d);
    } else if (t->ndim == 0) {
      zero = dl_promote_types(zero, t->dtype);
    } else {
      dim = dl_promote_types(dim, t->dtype);
    }
  }
  return combine(dim, combine(zero, wrapped));
}

DL_API dl_dtype dl_result_type(const dl_tensor *a, const dl_tensor *b) {
  const dl_tensor *ts[2] = {a, b};
  return result_type_n(ts, 2);
}

/* -- Half precision ------------------------------------------------------ */

DL_HIDDEN float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

DL_HIDDEN uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);  /* keep it a NaN */
  u += 0x7fff + ((u >> 16) & 1);  /* round to nearest even */
  return (uint16_t)(u >> 16);
}

DL_HIDDEN float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000 | (man << 13);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  /* subnormal: renormalise */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400));
      u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

DL_HIDDEN uint16_t float_to_half(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffff;
  if (absu >= 0x7f800000)  /* inf or nan */
    return sign | 0x7c00 | (absu > 0x7f800000 ? 0x200 : 0);
  if (absu >= 0x477ff000) return sign | 0x7c00;  /* rounds to inf */
  if (absu < 0x38800000) {  /* subnormal half or zero */
    float a;
    memcpy(&a, &absu, 4);
    /* scale so the subnormal step (2^-24) becomes 1, round to nearest even */
    return sign | (uint16_t)lrintf(a * 16777216.0f);
  }
  uint32_t mant_odd = (absu >> 13) & 1;
  absu += 0xc8000fff + mant_odd;  /* rebias exponent and round */
  return sign | (uint16_t)(absu >> 13);
}

/* -- Scalar load and store ----------------------------------------------- */

DL_HIDDEN double load_double(const char *p, int dtype) {
  switch (dtype) {
    case DL_FLOAT32: return *(const float *)p;
    case DL_FLOAT64: return *(const double *)p;
    case DL_INT32: return *(const int32_t *)p;
    case DL_INT64: return (double)*(const int64_t *)p;
    case DL_UINT8: return *(const uint8_t *)p;
    case DL_BOOL: return *(const uint8_t *)p != 0;
    case DL_BFLOAT16: return bf16_to_float(*(const uint16_t *)p);
    case DL_FLOAT16: return half_to_float(*(const uint16_t *)p);
  }
  return 0;
}

DL_HIDDEN int64_t load_int64(const char *p, int dtype) {
  switch (dtype) {
    case DL_INT32: return *(const int32_t *)p;
    case DL_INT64: return *(const int64_t *)p;
    case DL_UINT8: return *(const uint8_t *)p;
    case DL_BOOL: return *(const uint8_t *)p != 0;
    default: return (int64_t)load_double(p, dtype);
  }
}

/* Float to integer conversions of out-of-range values are undefined in C;
** saturate them instead (NaN becomes 0) so results never depend on the
** compiler. */
static inline int64_t sat_i64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}
static inline int32_t sat_i32(double v) {
  if (!(v == v)) return 0;
  if (v >= 2147483647.0) return INT32_MAX;
  if (v <= -2147483648.0) return INT32_MIN;
  return (int32_t)v;
}
static inline uint8_t wrap_u8(double v) {  /* as PyTorch: modulo 256 */
  if (!(v == v)) return 0;
  return (uint8_t)((uint64_t)sat_i64(v) & 0xff);
}

DL_HIDDEN void store_double(char *p, int dtype, double v) {
  switch (dtype) {
    case DL_FLOAT32: *(float *)p = (float)v; break;
    case DL_FLOAT64: *(double *)p = v; break;
    case DL_INT32: *(int32_t *)p = sat_i32(v); break;
    case DL_INT64: *(int64_t *)p = sat_i64(v); break;
    case DL_UINT8: *(uint8_t *)p = wrap_u8(v); break;
    case DL_BOOL: *(uint8_t *)p = v != 0; break;
    case DL_BFLOAT16: *(uint16_t *)p = float_to_bf16((float)v); break;
    case DL_FLOAT16: *(uint16_t *)p = float_to_half((float)v); break;
  }
}

/* -- Cast loops ----------------------------------------------------------- */

/* Read a source element as its natural C type (R_*), convert with CV_* into
** the destination's. Integer to integer casts go through int64 so values
** beyond 2^53 stay exact. */
#define R_f32(p) (*(const float *)(p))
#define R_f64(p) (*(const double *)(p))
#define R_i32(p) (*(const int32_t *)(p))
#define R_i64(p) (*(const int64_t *)(p))
#define R_u8(p) (*(const uint8_t *)(p))
#define R_b(p) (*(const uint8_t *)(p))
#define R_bf(p) bf16_to_float(*(const uint16_t *)(p))
#define R_h(p) half_to_float(*(const uint16_t *)(p))

#define W_f32(p, v) (*(float *)(p) = (float)(v))
#define W_f64(p, v) (*(double *)(p) = (double)(v))
#define W_b(p, v) (*(uint8_t *)(p) = (v) != 0)
#define W_bf(p, v) (*(uint16_t *)(p) = float_to_bf16((float)(v)))
#define W_h(p, v) (*(uint16_t *)(p) = float_to_half((float)(v)))
/* integer destinations: from a float source saturate, from ints truncate */
#define W_i32(p, v) (*(int32_t *)(p) = CVI32(v))
#define W_i64(p, v) (*(int64_t *)(p) = CVI64(v))
#define W_u8(p, v) (*(uint8_t *)(p) = CVU8(v))

#define SRC_IS_FLOAT_f32 1
#define SRC_IS_FLOAT_f64 1
#define SRC_IS_FLOAT_bf 1
#define SRC_IS_FLOAT_h 1
#define SRC_IS_FLOAT_i32 0
#define SRC_IS_FLOAT_i64 0
#define SRC_IS_FLOAT_u8 0
#define SRC_IS_FLOAT_b 0

#define CAST_FN(D, S)                                                      \
  static void cast_##D##_##S(char **data, const int64_t *st, int64_t n,   \
                             void *ctx) {                                 \
    (void)ctx;                                                            \
    char *o = data[0];                                                    \
    const char *a = data[1];                                              \
    int64_t so = st[0], sa = st[1];                                       \
    for (int64_t i = 0; i < n; i++, o += so, a += sa) {                   \
      if (SRC_IS_FLOAT_##S) {                                             \
        double v_ = (double)R_##S(a);                                     \
        W_##D(o, v_);                                                     \
      } else {                                                            \
        int64_t v_ = (int64_t)R_##S(a);                                   \
        W_##D##_INT(o, v_);                                               \
      }                                                                   \
    }                                                                     \
  }

/* From an integer source, integer destinations wrap like C casts. */
#define W_f32_INT(p, v) W_f32(p, v)
#define W_f64_INT(p, v) W_f64(p, v)
#define W_b_INT(p, v) W_b(p, v)
#define W_bf_INT(p, v) W_bf(p, v)
#define W_h_INT(p, v) W_h(p, v)
#define W_i32_INT(p, v) (*(int32_t *)(p) = (int32_t)(v))
#define W_i64_INT(p, v) (*(int64_t *)(p) = (int64_t)(v))
#define W_u8_INT(p, v) (*(uint8_t *)(p) = (uint8_t)(v))
#define CVI32(v) sat_i32(v)
#define CVI64(v) sat_i64(v)
#define CVU8(v) wrap_u8(v)

#define CAST_ROW(D)                                                          \
  CAST_FN(D, f32) CAST_FN(D, f64) CAST_FN(D, i32) CAST_FN(D, i64)            \
  CAST_FN(D, u8) CAST_FN(D, b) CAST_FN(D, bf) CAST_FN(D, h)
CAST_ROW(f32) CAST_ROW(f64) CAST_ROW(i32) CAST_ROW(i64)
CAST_ROW(u8) CAST_ROW(b) CAST_ROW(bf) CAST_ROW(h)

#define CAST_ENTRY(D)                                                        \
  {cast_##D##_f32, cast_##D##_f64, cast_##D##_i32, cast_##D##_i64,           \
   cast_##D##_u8, cast_##D##_b, cast_##D##_bf, cast_##D##_h}
static const loop_fn cast_table[DL_NDTYPES][DL_NDTYPES] = {
    CAST_ENTRY(f32), CAST_ENTRY(f64), CAST_ENTRY(i32), CAST_ENTRY(i64),
    CAST_ENTRY(u8),  CAST_ENTRY(b),   CAST_ENTRY(bf),  CAST_ENTRY(h)};

/* Same dtype: a plain element copy, memcpy when both sides are dense. */
#define COPY_FN(name, T)                                                    \
  static void name(char **data, const int64_t *st, int64_t n, void *ctx) { \
    (void)ctx;                                                            \
    if (st[0] == sizeof(T) && st[1] == sizeof(T)) {                       \
      memcpy(data[0], data[1], (size_t)n * sizeof(T));                    \
      return;                                                             \
    }                                                                     \
    char *o = data[0];                                                    \
    const char *a = data[1];                                              \
    for (int64_t i = 0; i < n; i++, o += st[0], a += st[1])               \
      *(T *)o = *(const T *)a;                                            \
  }
COPY_FN(copy1, uint8_t)
COPY_FN(copy2, uint16_t)
COPY_FN(copy4, uint32_t)
COPY_FN(copy8, uint64_t)

DL_HIDDEN loop_fn cast_loop(int dst, int src) {
  if (dst == src) {
    switch (dl_dtype_sizes[dst]) {
      case 1: return copy1;
      case 2: return copy2;
      case 4: return copy4;
      default: return copy8;
    }
  }
  return cast_table[dst][src];
}

DL_HIDDEN dl_tensor *as_dtype(const dl_tensor *t, int dtype) {
  if (t->dtype == dtype) {
    dl_tensor_retain((dl_tensor *)t);
    return (dl_tensor *)t;
  }
  return fw_to_dtype(t, dtype);
}
