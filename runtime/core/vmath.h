/*
** vmath.h -- float32 exp, log, erf, tanh and sigmoid written branch-free,
** so GCC vectorises the loops they are inlined into (AVX-512 and AVX2 in
** the x86-64-v4 and -v3 clones, SSE2 otherwise) instead of calling scalar
** libm.
**
** Each function is scalar in form: plain arithmetic, integer views of the
** bits and selects on bit masks (vm_sel), so no branch is left.  Edge cases
** follow libm: NaN in -> NaN out, exp overflows to inf and underflows
** through the subnormals to 0, log(0) = -inf, log(<0) = NaN, erf and tanh
** reach +-1, sigmoid never makes NaN from a finite or infinite input.
** Maximum errors against float64 libm over every float32 input
** (tests/c/test_vmath.c, DL_VMATH_FULL=1), with and without FMA:
** see docs/architecture.md ("Float32 transcendentals").
*/
#ifndef DL_VMATH_H
#define DL_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t vm_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static inline float vm_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* c ? a : b on the bits: with float arms GCC's if-conversion will not
** evaluate a float operation the source guards (it might trap), so ?:
** over computed floats leaves control flow in the loop, unvectorised. */
static inline float vm_sel(int c, float a, float b) {
  uint32_t m = 0u - (uint32_t)(c != 0);
  return vm_float((vm_bits(a) & m) | (vm_bits(b) & ~m));
}

/* exp: n = round(x / ln 2) by the 1.5 * 2^23 trick, r = x - n ln 2 in two
** parts (Cody-Waite), Cephes' polynomial for e^r, then 2^n applied in two
** halves so results in the subnormal range are rounded once, correctly. */
static inline float vm_expf(float x) {
  const float hi = 88.7228394f, lo = -103.972084f;
  float xc = vm_sel(x > hi, hi, x);  /* NaN fails both tests and stays NaN */
  xc = vm_sel(xc < lo, 0.0f, xc);  /* -inf and the like: no subnormal work (simd.h) */
  float t = xc * 1.44269504f + 12582912.0f;
  float n = t - 12582912.0f;
  int32_t ni = (int32_t)vm_bits(t) - 0x4B400000;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t n1 = ni >> 1, n2 = ni - n1;
  y = y * vm_float((uint32_t)(n1 + 127) << 23) * vm_float((uint32_t)(n2 + 127) << 23);
  y = vm_sel(x > hi, INFINITY, y);
  return vm_sel(x < lo, 0.0f, y);
}

/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(x) = e ln 2 +
** log(1 + f), f = m - 1 exactly, Cephes' polynomial for log(1 + f).
** Subnormals are scaled by 2^24 first; 0, negatives, inf and NaN are
** selected at the end (their bits make no sense to the reduction). */
static inline float vm_logf(float x) {
  int sub = vm_bits(x) < 0x00800000u;  /* +0 and positive subnormals */
  float xs = vm_sel(sub, x * 16777216.0f, x);
  uint32_t ix = vm_bits(xs);
  int32_t e = (int32_t)(ix >> 23) - 126 - (sub ? 24 : 0);
  float m = vm_float((ix & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
  int lt = m < 0.707106781f;
  e = lt ? e - 1 : e;
  float f = vm_sel(lt, m + m - 1.0f, m - 1.0f);  /* both exact (Sterbenz) */
  float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f + -1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f + -1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f + -1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f + -2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  float fe = (float)e;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = f + y;
  r = r + fe * 0.693359375f;
  r = vm_sel(x == 0, -INFINITY, r);
  r = vm_sel(x < 0, NAN, r);
  r = vm_sel(x == INFINITY, INFINITY, r);
  return vm_sel(x != x, x, r);
}

/* erf: below |x| = 0.921875, x + x P(x^2); above, 1 - exp(Q(|x| - 1))
** with Q ~ log(erfc), fitted on [0.921875, 4] (erf rounds to 1 from
** 3.92 on, so |x| is clamped to 4).  Both are computed, one is kept.
** Coefficients: near-minimax fits (Lawson), rounded to float one at a
** time with the rest refitted. */
static inline float vm_erff(float x) {
  float a = fabsf(x), s = x * x;
  float p = 7.962679229e-05f;
  p = p * s + -8.042697445e-04f;
  p = p * s + 5.191889126e-03f;
  p = p * s + -2.685557865e-02f;
  p = p * s + 1.128362417e-01f;
  p = p * s + -3.761262894e-01f;
  p = p * s + 1.283791661e-01f;
  float small = x + x * p;
  float u = vm_sel(a > 4.0f, 4.0f, a) - 1.0f;  /* NaN stays NaN */
  float q = 1.791989234e-06f;
  q = q * u + -3.475972335e-05f;
  q = q * u + 3.286089632e-04f;
  q = q * u + -2.074091230e-03f;
  q = q * u + 1.010258496e-02f;
  q = q * u + -4.159098491e-02f;
  q = q * u + -8.431013823e-01f;
  q = q * u + -2.638967514e+00f;
  q = q * u + -1.849605560e+00f;
  float big = copysignf(1.0f - vm_expf(q), x);
  return vm_sel(a < 0.921875f, small, big);
}

/* tanh: below |x| = 0.625, x + x^3 P(x^2); above, 1 - 2 / (e^2|x| + 1),
** which reaches 1 once e^2|x| is large or inf. */
static inline float vm_tanhf(float x) {
  float a = fabsf(x), s = x * x;
  float p = 2.822052222e-03f;
  p = p * s + -8.869207464e-03f;
  p = p * s + 2.195231803e-02f;
  p = p * s + -5.398562178e-02f;
  p = p * s + 1.333343834e-01f;
  p = p * s + -3.333333433e-01f;
  float small = x + x * s * p;
  small = vm_sel(a < 0x1p-12f, x, small);  /* x^3 / 3 is below half an ulp; keeps -0 */
  float big = copysignf(1.0f - 2.0f / (vm_expf(a + a) + 1.0f), x);
  return vm_sel(a < 0.625f, small, big);
}

/* sigmoid: e = exp(-|x|) never overflows; 1 / (1 + e) for x >= 0 and
** e / (1 + e) for x < 0, so large negative x reach the subnormals and 0
** instead of dividing by inf. */
static inline float vm_sigmoidf(float x) {
  float e = vm_expf(-fabsf(x));
  return vm_sel(x < 0, e, 1.0f) / (1.0f + e);
}

#endif
