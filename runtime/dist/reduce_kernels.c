/*
** dist/reduce_kernels.c -- the reduction kernels of the shared-memory collectives:
** dst = src[0] op src[1] op ... in rank order, so every rank gets the same
** bits; bfloat16/float16 accumulate in float32, integers wrap.
*/
#include "dist/pg.h"

enum { BLK = 512 };

#define ID(x) (x)

#define DEF_RED(fname, T, A, U, LD, ST, ISFLOAT)                               \
  static void fname(char *dst, char *const *src, int w, int64_t n, int op) {    \
    A acc[BLK];                                                                \
    for (int64_t b = 0; b < n; b += BLK) {                                     \
      int64_t m = n - b < BLK ? n - b : BLK;                                   \
      const T *s0 = (const T *)src[0] + b;                                     \
      for (int64_t i = 0; i < m; i++) acc[i] = LD(s0[i]);                      \
      for (int r = 1; r < w; r++) {                                            \
        const T *s = (const T *)src[r] + b;                                    \
        switch (op) {                                                          \
        case DL_PG_SUM: case DL_PG_AVG:                                      \
          for (int64_t i = 0; i < m; i++) acc[i] = (A)((U)acc[i] + (U)LD(s[i])); \
          break;                                                               \
        case DL_PG_PROD:                                                      \
          for (int64_t i = 0; i < m; i++) acc[i] = (A)((U)acc[i] * (U)LD(s[i])); \
          break;                                                               \
        case DL_PG_MAX:                                                       \
          for (int64_t i = 0; i < m; i++) {                                    \
            A x = LD(s[i]);                                                    \
            acc[i] = (x > acc[i] || x != x) ? x : acc[i];                      \
          }                                                                    \
          break;                                                               \
        default:                                                               \
          for (int64_t i = 0; i < m; i++) {                                    \
            A x = LD(s[i]);                                                    \
            acc[i] = (x < acc[i] || x != x) ? x : acc[i];                      \
          }                                                                    \
        }                                                                      \
      }                                                                        \
      if (ISFLOAT && op == DL_PG_AVG)                                         \
        for (int64_t i = 0; i < m; i++) acc[i] = (A)(acc[i] / w);              \
      T *d = (T *)dst + b;                                                     \
      for (int64_t i = 0; i < m; i++) d[i] = ST(acc[i]);                       \
    }                                                                          \
  }

DEF_RED(red_f32, float, float, float, ID, ID, 1)
DEF_RED(red_f64, double, double, double, ID, ID, 1)
DEF_RED(red_i32, int32_t, int32_t, uint32_t, ID, ID, 0)
DEF_RED(red_i64, int64_t, int64_t, uint64_t, ID, ID, 0)
DEF_RED(red_u8, uint8_t, uint8_t, uint8_t, ID, ID, 0)
DEF_RED(red_bf16, uint16_t, float, float, bf16_to_float, float_to_bf16, 1)
DEF_RED(red_f16, uint16_t, float, float, half_to_float, float_to_half, 1)

/* bool: sum and max are or, prod and min are and (as PyTorch) */
static void red_bool(char *dst, char *const *src, int w, int64_t n, int op) {
  red_u8(dst, src, w, n, (op == DL_PG_SUM || op == DL_PG_MAX) ? DL_PG_MAX : DL_PG_MIN);
}

DL_HIDDEN red_fn red_for(int dtype) {
  switch (dtype) {
  case DL_FLOAT32: return red_f32;
  case DL_FLOAT64: return red_f64;
  case DL_INT32: return red_i32;
  case DL_INT64: return red_i64;
  case DL_UINT8: return red_u8;
  case DL_BOOL: return red_bool;
  case DL_BFLOAT16: return red_bf16;
  default: return red_f16;
  }
}

DL_HIDDEN void red_part(void *ctx, int64_t b, int64_t e) {
  red_job *j = ctx;
  char *src[PG_MAX_WORLD];
  for (int r = 0; r < j->w; r++) src[r] = j->src[r] + b * j->es;
  j->fn(j->dst + b * j->es, src, j->w, e - b, j->op);
}

