/*
** simd.h -- GCC vector types and the helpers the CPU kernels share: the
** function clones for newer CPUs and a vectorised exp.
*/
#ifndef DL_SIMD_H
#define DL_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Vector helpers take vectors by pointer: passed by value GCC warns that the
** AVX calling convention differs, which never matters for static code. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

/* Built for baseline x86-64 (SSE2); hot loops get an AVX2 + FMA clone
** (x86-64-v3) and an AVX-512 one (x86-64-v4) as well, the best the CPU
** runs picked when the library loads.  The AVX-512 clone halved GELU's
** time (the erf and exp polynomials are ~100 instructions a vector). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define HOT
#endif

#define LD(v, p) memcpy(&(v), (p), sizeof(v))
#define ST(p, v) memcpy((p), &(v), sizeof(v))
#define SEL(m, a, b) ((v8f)(((m) & (v8i)(a)) | (~(m) & (v8i)(b))))

/* exp of 8 floats in place (Cephes polynomial, about 1 ulp).  2^n is applied
** in two halves so results down to the subnormals stay right; NaN stays NaN.
** Inputs below lo (a causal mask's -inf) compute exp(0) and are selected to
** 0 after: computed at lo they went through subnormal products, which
** take microcode assists -- half a masked softmax ran 5x slower. */
static inline void vexp8(v8f *px) {
  const v8f hi = (v8f){0} + 88.7228394f, lo = (v8f){0} + -103.972084f;
  v8f x = *px;
  v8i big = x > hi, small = x < lo;
  x = SEL(big, hi, x);
  x = SEL(small, (v8f){0}, x);
  v8f t = x * 1.44269504f + 12582912.0f; /* round(x / ln 2) in the low bits */
  v8f n = t - 12582912.0f;
  v8i ni = (v8i)t - 0x4B400000;
  v8f r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v8f p = (v8f){0} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  v8f y = p * r * r + r + 1.0f;
  v8i n1 = ni >> 1, n2 = ni - n1;
  y = y * (v8f)((n1 + 127) << 23) * (v8f)((n2 + 127) << 23);
  y = SEL(big, (v8f){0} + INFINITY, y);
  *px = SEL(small, (v8f){0}, y);
}

#endif
