/* vmath.c -- nanoseconds per element of core/vmath.h's float32 exp, log,
** erf, tanh and sigmoid beside scalar libm (expf, logf, erff, tanhf,
** 1 / (1 + expf(-x))), over 64K floats in L2, in loops shaped and built
** as the runtime's kernels (x86-64-v3 clone picked at load, -O3, FMA).
**
** cc -O2 -std=c11 -D_GNU_SOURCE -Iruntime -O3 -ffp-contract=fast \
**    -fno-math-errno bench/vmath.c -lm -o build/bench_vmath && build/bench_vmath
*/
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/simd.h"
#include "core/vmath.h"

#define N 65536

static float sigmoid_libm(float x) { return 1.0f / (1.0f + expf(-x)); }
static float gelu_libm(float x) { return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)); }
static float gelu_vm(float x) { return 0.5f * x * (1.0f + vm_erff(x * (float)M_SQRT1_2)); }

#define LOOP(NAME, F) \
  HOT static void NAME(float *o, const float *x, int n) { \
    for (int i = 0; i < n; i++) o[i] = F(x[i]); \
  }
LOOP(l_expf, expf)
LOOP(l_logf, logf)
LOOP(l_erff, erff)
LOOP(l_tanhf, tanhf)
LOOP(l_sigf, sigmoid_libm)
LOOP(l_gelu, gelu_libm)
LOOP(v_expf, vm_expf)
LOOP(v_logf, vm_logf)
LOOP(v_erff, vm_erff)
LOOP(v_tanhf, vm_tanhf)
LOOP(v_sigf, vm_sigmoidf)
LOOP(v_gelu, gelu_vm)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Best of 7 runs of 20 passes: the machine is shared. */
static double ns_per(void (*f)(float *, const float *, int), float *o, const float *x) {
  double best = 1e30;
  for (int r = 0; r < 7; r++) {
    double t0 = now();
    for (int p = 0; p < 20; p++) f(o, x, N);
    double t = (now() - t0) / (20.0 * N) * 1e9;
    if (t < best) best = t;
  }
  return best;
}

int main(void) {
  static float x[N], xp[N], o[N];
  srand(1);
  for (int i = 0; i < N; i++) {  /* activations: [-8, 8]; log: (0, 16] */
    x[i] = ((float)rand() / RAND_MAX - 0.5f) * 16.0f;
    xp[i] = (float)rand() / RAND_MAX * 16.0f + 1e-6f;
  }
  struct { const char *name; void (*l)(float *, const float *, int), (*v)(float *, const float *, int); const float *in; } c[] = {
      {"exp", l_expf, v_expf, x}, {"log", l_logf, v_logf, xp},
      {"erf", l_erff, v_erff, x}, {"tanh", l_tanhf, v_tanhf, x},
      {"sigmoid", l_sigf, v_sigf, x}, {"gelu", l_gelu, v_gelu, x}};
  printf("| function | libm ns/elt | vmath ns/elt | speedup |\n| --- | ---: | ---: | ---: |\n");
  for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
    double a = ns_per(c[i].l, o, c[i].in), b = ns_per(c[i].v, o, c[i].in);
    printf("| %s | %.2f | %.3f | %.1fx |\n", c[i].name, a, b, a / b);
  }
  return 0;
}
