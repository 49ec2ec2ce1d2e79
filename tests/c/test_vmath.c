/* test_vmath.c -- the float32 exp, log, erf, tanh and sigmoid of
** core/vmath.h against float64 libm: the maximum error in ulp over a sweep
** of every 251st float32 bit pattern (all binades, both signs, NaNs and
** infinities) plus the edge cases, in AVX-512 (x86-64-v4), FMA
** (x86-64-v3) and baseline builds of the same loops, failing above the bounds in docs/architecture.md.
** DL_VMATH_FULL=1 sweeps all 2^32 inputs instead (about a minute a
** function and build).  Built like a kernel file (-O3, FMA contraction),
** so the loops vectorise as they do in the runtime. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/vmath.h"


typedef void (*arr_fn)(float *, const float *, int);

/* One loop per function and build, as the runtime's kernels are shaped. */
#define LOOPS(NAME, F)                                                      \
  static void NAME##_base(float *o, const float *x, int n) {               \
    for (int i = 0; i < n; i++) o[i] = F(x[i]);                             \
  }                                                                         \
  V3 static void NAME##_v3(float *o, const float *x, int n) {              \
    for (int i = 0; i < n; i++) o[i] = F(x[i]);                             \
  }                                                                         \
  V4 static void NAME##_v4(float *o, const float *x, int n) {              \
    for (int i = 0; i < n; i++) o[i] = F(x[i]);                             \
  }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define V3 __attribute__((target("arch=x86-64-v3")))
#define V4 __attribute__((target("arch=x86-64-v4")))
static int have_v3(void) {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int have_v4(void) {
  return have_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512cd");
}
#else
#define V3
#define V4
static int have_v3(void) { return 0; }
static int have_v4(void) { return 0; }
#endif
LOOPS(exp, vm_expf)
LOOPS(log, vm_logf)
LOOPS(erf, vm_erff)
LOOPS(tanh, vm_tanhf)
LOOPS(sigmoid, vm_sigmoidf)

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

typedef struct {
  const char *name;
  arr_fn base, v3, v4;
  double (*ref)(double);
  double bound;  /* ulp */
} fn_case;

static const fn_case CASES[] = {
    {"exp", exp_base, exp_v3, exp_v4, exp, 1.5},
    {"log", log_base, log_v3, log_v4, log, 1.5},
    {"erf", erf_base, erf_v3, erf_v4, erf, 1.5},
    {"tanh", tanh_base, tanh_v3, tanh_v4, tanh, 2.0},
    {"sigmoid", sigmoid_base, sigmoid_v3, sigmoid_v4, sigmoid_ref, 3.0},
};

/* Error of got against the float64 reference, in ulps of the reference's
** float32 binade (subnormals: 2^-149).  A reference beyond FLT_MAX must
** round to inf; NaN must meet NaN; anything else mismatched counts 1e9. */
static double ulp_err(float got, double ref) {
  if (ref != ref) return got != got ? 0 : 1e9;
  if (got != got) return 1e9;
  if (isinf(ref) || fabs(ref) > FLT_MAX) {
    float r = (float)ref;  /* rounds to inf or to FLT_MAX */
    if (isinf(r)) return got == r ? 0 : 1e9;
  }
  if (isinf(got)) return 1e9;
  int e = ref == 0 ? -126 : ilogb(ref);
  if (e < -126) e = -126;
  return fabs((double)got - ref) / ldexp(1.0, e - 23);
}

typedef struct {
  double max;
  float at;
} stat;

#define BATCH 4096

static void run_batch(const fn_case *c, arr_fn f, const float *x, int n,
                      stat *st) {
  float y[BATCH];
  f(y, x, n);
  for (int i = 0; i < n; i++) {
    double e = ulp_err(y[i], c->ref((double)x[i]));
    if (e > st->max) st->max = e, st->at = x[i];
  }
}

/* Every stride-th bit pattern from 0 to 2^32 - 1, then the edge cases. */
static stat sweep(const fn_case *c, arr_fn f, uint64_t stride) {
  static const float edges[] = {
      0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MIN, -FLT_MIN,
      FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f, 1e-40f, -1e-40f, 1.0f, -1.0f,
      88.7228394f, 88.72283f, 88.722824f, 89.0f, -87.33655f, -87.4f,
      -103.27893f, -103.972084f, -104.0f, -150.0f, 0.625f, -0.625f,
      0.921875f, -0.921875f, 0.92187494f, 3.92f, 4.0f, 4.0000005f, 9.0f,
      -9.0f, 20.0f, -20.0f, 1.0000001f, 0.99999994f, 0.70710677f,
      0.7071068f, 1.4142135f, 2.0f, 0.5f};
  stat st = {0, 0};
  float x[BATCH];
  int n = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += stride) {
    x[n++] = vm_float((uint32_t)u);
    if (n == BATCH) run_batch(c, f, x, n, &st), n = 0;
  }
  run_batch(c, f, x, n, &st);
  run_batch(c, f, edges, (int)(sizeof edges / sizeof edges[0]), &st);
  return st;
}

/* The cases libm gets exactly, checked bit for bit. */
static void test_edges(void) {
  CHECK(vm_expf(INFINITY) == INFINITY && vm_expf(-INFINITY) == 0);
  CHECK(vm_expf(100.0f) == INFINITY && vm_expf(-200.0f) == 0);
  CHECK(vm_expf(-100.0f) > 0 && vm_expf(-100.0f) < FLT_MIN, "%g", vm_expf(-100.0f));
  CHECK(vm_expf(0.0f) == 1 && vm_expf(1e-45f) == 1);
  CHECK(isnan(vm_expf(NAN)) && isnan(vm_logf(NAN)) && isnan(vm_erff(NAN)));
  CHECK(isnan(vm_tanhf(NAN)) && isnan(vm_sigmoidf(NAN)));
  CHECK(vm_logf(0.0f) == -INFINITY && vm_logf(-0.0f) == -INFINITY);
  CHECK(isnan(vm_logf(-1.0f)) && isnan(vm_logf(-INFINITY)) && isnan(vm_logf(-1e-45f)));
  CHECK(vm_logf(INFINITY) == INFINITY && vm_logf(1.0f) == 0);
  CHECK(vm_logf(1e-45f) == logf(1e-45f), "%.9g", vm_logf(1e-45f));
  CHECK(vm_erff(INFINITY) == 1 && vm_erff(-INFINITY) == -1);
  CHECK(vm_erff(5.0f) == 1 && vm_erff(-5.0f) == -1 && vm_erff(3.95f) == 1);
  CHECK(vm_erff(0.0f) == 0 && signbit(vm_erff(-0.0f)));
  CHECK(vm_tanhf(INFINITY) == 1 && vm_tanhf(-INFINITY) == -1);
  CHECK(vm_tanhf(10.0f) == 1 && vm_tanhf(-10.0f) == -1);
  CHECK(vm_tanhf(0.0f) == 0 && signbit(vm_tanhf(-0.0f)) && vm_tanhf(1e-40f) == 1e-40f);
  CHECK(vm_sigmoidf(INFINITY) == 1 && vm_sigmoidf(-INFINITY) == 0);
  CHECK(vm_sigmoidf(-1000.0f) == 0 && vm_sigmoidf(1000.0f) == 1);
  CHECK(vm_sigmoidf(-100.0f) > 0, "%g", vm_sigmoidf(-100.0f));  /* a subnormal, not 0 */
  CHECK(vm_sigmoidf(0.0f) == 0.5f);
}

int main(void) {
  const char *full = getenv("DL_VMATH_FULL");
  uint64_t stride = full && *full && strcmp(full, "0") ? 1 : 251;
  int v3 = have_v3(), v4 = have_v4();
  test_edges();
  printf("sweep: every %llu%s float32 input\n", (unsigned long long)stride,
         stride == 1 ? "" : "st");
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const fn_case *c = &CASES[i];
    /* each build of the loops in turn; a build this CPU cannot run, and
    ** those above it, are skipped with the reason */
    const struct { const char *label, *missing; arr_fn fn; int have; } builds[] = {
        {"baseline", NULL, c->base, 1},
        {"x86-64-v3", "no AVX2 and FMA here", c->v3, v3},
        {"x86-64-v4", "no AVX-512 here", c->v4, v4},
    };
    for (size_t j = 0; j < sizeof builds / sizeof builds[0]; j++) {
      if (!builds[j].have) {
        printf("SKIP %s %s: %s\n", c->name, builds[j].label, builds[j].missing);
        break;
      }
      stat f = sweep(c, builds[j].fn, stride);
      printf("%-8s %s: max %.3f ulp at %.9g\n", c->name, builds[j].label, f.max, f.at);
      CHECK(f.max <= c->bound, "%s (%s): %.3f ulp at %.9g, bound %.1f", c->name,
            builds[j].label, f.max, f.at, c->bound);
    }
  }
  return check_report("test_vmath");
}
