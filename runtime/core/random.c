/*
** random.c -- the counter-based generator (Philox4x32-10) behind rand,
** randn, randint and randperm.  Element i of a call depends only on the
** seed, the call's offset and i, so results do not change with the number
** of threads, and a CUDA kernel can produce the very same numbers.
*/
#include <math.h>
#include <string.h>

#include "core/device.h"
#include "core/philox.h"

/* PyTorch's default seed, so a fresh process starts from a known state. */
#define DEFAULT_SEED UINT64_C(67280421310721)

static _Atomic uint64_t rng_seed = DEFAULT_SEED;
static _Atomic uint64_t rng_offset;  /* in 128-bit blocks */

DL_API void dl_manual_seed(uint64_t seed) {
  atomic_store(&rng_seed, seed);
  atomic_store(&rng_offset, 0);
}
DL_API uint64_t dl_rng_seed(void) { return atomic_load(&rng_seed); }
DL_API uint64_t dl_rng_offset(void) { return atomic_load(&rng_offset); }
DL_API void dl_rng_set_state(uint64_t seed, uint64_t offset) {
  atomic_store(&rng_seed, seed);
  atomic_store(&rng_offset, offset);
}

/* For kernels that draw their own numbers (dropout): reserves `blocks`
** counter blocks of the stream, as generate() does (philox.h computes a
** block's words). */
DL_HIDDEN uint64_t rng_reserve(uint64_t blocks, uint64_t *seed) {
  *seed = atomic_load(&rng_seed);
  return atomic_fetch_add(&rng_offset, blocks);
}

typedef struct {
  philox_kind kind;
  int dtype;       /* float32, float64 (uniform/normal) or int64 */
  char *out;       /* contiguous */
  uint64_t seed, base;
  int own;         /* seed and base given: a stream of its own, not the global */
  double a, b;     /* low/high, mean/std */
  uint64_t range;  /* randint: high - low */
  int64_t low;
} gen_ctx;

/* Values per block: 4 floats, or 2 doubles / int64s (two words each). */
static int per_block(const gen_ctx *g) {
  return g->dtype == DL_FLOAT32 ? 4 : 2;
}

static void gen_range(void *p, int64_t begin, int64_t end) {
  const gen_ctx *g = p;
  int pb = per_block(g);
  uint32_t w[4];
  double v[4];
  for (int64_t blk = begin / pb; blk * pb < end; blk++) {
    philox(g->seed, g->base + (uint64_t)blk, w);
    if (g->kind == PHILOX_INT) {
      for (int j = 0; j < 2; j++) {
        uint64_t r = ((uint64_t)w[2 * j] << 32) | w[2 * j + 1];
        int64_t i = blk * 2 + j;
        if (i >= begin && i < end)
          ((int64_t *)g->out)[i] = g->low + (int64_t)(r % g->range);
      }
      continue;
    }
    if (pb == 4) {
      for (int j = 0; j < 4; j++) v[j] = philox_unit24(w[j]);
    } else {
      v[0] = philox_unit53(w[0], w[1]);
      v[1] = philox_unit53(w[2], w[3]);
    }
    if (g->kind == PHILOX_NORMAL) {
      /* Box-Muller on pairs; 1 - u keeps the log argument in (0, 1] */
      for (int j = 0; j < pb; j += 2) {
        double r = sqrt(-2.0 * log(1.0 - v[j])), th = 2.0 * M_PI * v[j + 1];
        v[j] = g->a + g->b * r * cos(th);
        v[j + 1] = g->a + g->b * r * sin(th);
      }
    } else {
      for (int j = 0; j < pb; j++) v[j] = g->a + (g->b - g->a) * v[j];
    }
    for (int j = 0; j < pb; j++) {
      int64_t i = blk * pb + j;
      if (i < begin || i >= end) continue;
      if (g->dtype == DL_FLOAT32)
        ((float *)g->out)[i] = (float)v[j];
      else
        ((double *)g->out)[i] = v[j];
    }
  }
}

/* Fills contiguous t (float32/float64/int64) and advances the offset (of
** the global generator, unless g has a stream of its own); on t's device. */
static int generate(gen_ctx *g, dl_tensor *t) {
  int64_t n = dl_tensor_numel(t);
  g->dtype = t->dtype;
  g->out = tensor_first(t);
  int pb = per_block(g);
  uint64_t blocks = (uint64_t)((n + pb - 1) / pb);
  if (!g->own) {
    g->seed = atomic_load(&rng_seed);
    g->base = atomic_fetch_add(&rng_offset, blocks);
  }
  const dl_device *d = device_of("random", t);
  return d ? d->philox_fill("random", t, g->kind, g->seed, g->base, g->a, g->b, g->low,
                            g->range)
           : -1;
}

/* The CPU's Philox kernel (core/device.h): contiguous t from the stream
** (seed, base), in chunks of whole blocks, so no block is split across
** threads and the values do not depend on the thread count. */
DL_HIDDEN int cpu_philox_fill(const char *op, dl_tensor *t, philox_kind kind, uint64_t seed,
                              uint64_t base, double a, double b, int64_t low, uint64_t range) {
  (void)op;
  gen_ctx g = {.kind = kind, .dtype = t->dtype, .out = tensor_first(t),
               .seed = seed, .base = base, .own = 1, .a = a, .b = b, .range = range,
               .low = low};
  parallel_for(dl_tensor_numel(t), PAR_GRAIN, gen_range, &g);
  return 0;
}

/* Generates into a contiguous tensor of the generator's dtype, then copies
** into t (any layout, any float dtype). */
static int fill_dist(const char *op, dl_tensor *t, gen_ctx *g, inplace_check_fn check) {
  if (check_tensor_any(op, t) || (check && check(op, t))) return -1;
  int gd;
  if (g->kind == PHILOX_INT) {
    gd = DL_INT64;
  } else {
    if (!dl_dtype_is_float(t->dtype))
      return dl_err(EM_DTYPE_NEED_FLOAT, op, fmt_dtype(t->dtype));
    gd = t->dtype == DL_FLOAT64 ? DL_FLOAT64 : DL_FLOAT32;
  }
  if (t->dtype == gd && dl_tensor_is_contiguous(t)) return generate(g, t);
  dl_tensor *tmp = tensor_new_on(t->storage->device, gd, t->shape, t->ndim);
  if (!tmp) return -1;
  int rc = generate(g, tmp);
  if (!rc) rc = fw_copy_(t, tmp);
  dl_tensor_release(tmp);
  return rc;
}

static dl_tensor *create(const char *op, const int64_t *shape, int ndim,
                         int dtype, gen_ctx *g) {
  if (dtype < 0 || dtype >= DL_NDTYPES) return dl_errp(EM_BADDTYPE, op, dtype);
  if (g->kind != PHILOX_INT && !dl_dtype_is_float(dtype))
    return dl_errp(EM_DTYPE_NEED_FLOAT, op, fmt_dtype(dtype));
  if (check_shape(op, shape, ndim)) return NULL;
  dl_tensor *t = tensor_new(dtype, shape, ndim);
  if (t && fill_dist(op, t, g, NULL)) {
    dl_tensor_release(t);
    return NULL;
  }
  return t;
}

DL_API dl_tensor *dl_rand(const int64_t *shape, int ndim, dl_dtype dtype) {
  gen_ctx g = {.kind = PHILOX_UNIFORM, .a = 0, .b = 1};
  return create("rand", shape, ndim, dtype, &g);
}

DL_API dl_tensor *dl_randn(const int64_t *shape, int ndim, dl_dtype dtype) {
  gen_ctx g = {.kind = PHILOX_NORMAL, .a = 0, .b = 1};
  return create("randn", shape, ndim, dtype, &g);
}

DL_HIDDEN int fw_uniform_(dl_tensor *t, double low, double high, inplace_check_fn check) {
  if (!(low <= high))
    return dl_err(EM_BADVALUE, "uniform_", "expected low <= high");
  gen_ctx g = {.kind = PHILOX_UNIFORM, .a = low, .b = high};
  return fill_dist("uniform_", t, &g, check);
}

DL_HIDDEN int fw_normal_(dl_tensor *t, double mean, double std, inplace_check_fn check) {
  if (!(std >= 0)) return dl_err(EM_BADVALUE, "normal_", "expected std >= 0");
  gen_ctx g = {.kind = PHILOX_NORMAL, .a = mean, .b = std};
  return fill_dist("normal_", t, &g, check);
}

DL_API dl_tensor *dl_randint(int64_t low, int64_t high, const int64_t *shape,
                             int ndim, dl_dtype dtype) {
  if (low >= high)
    return dl_errp(EM_LOW_HIGH, "randint", (long long)low, (long long)high);
  if (dtype == DL_BOOL)
    return dl_errp(EM_DTYPE_UNSUP, "randint", fmt_dtype(dtype));
  gen_ctx g = {.kind = PHILOX_INT, .low = low, .range = (uint64_t)high - (uint64_t)low};
  if (check_shape("randint", shape, ndim)) return NULL;
  dl_tensor *t = tensor_new(dtype, shape, ndim);
  if (t && fill_dist("randint", t, &g, NULL)) {
    dl_tensor_release(t);
    return NULL;
  }
  return t;
}

/* g: the global generator, or a stream of its own (dl_randperm_stream). */
static dl_tensor *randperm(int64_t n, int dtype, gen_ctx *g) {
  if (n < 0) return dl_errp(EM_NEG_COUNT, "randperm", "n", (long long)n);
  if (!is_int_dtype(dtype) && !dl_dtype_is_float(dtype))
    return dl_errp(EM_DTYPE_UNSUP, "randperm", fmt_dtype(dtype));
  /* Fisher-Yates driven by one random 64-bit draw per position (the draws
  ** of dl_randint(0, INT64_MAX)) */
  g->kind = PHILOX_INT, g->low = 0, g->range = INT64_MAX;
  dl_tensor *r = create("randperm", &n, 1, DL_INT64, g);
  dl_tensor *p = r ? tensor_new(DL_INT64, &n, 1) : NULL;
  if (!p) {
    dl_tensor_release(r);
    return NULL;
  }
  int64_t *idx = (int64_t *)tensor_first(p);
  const int64_t *draw = (const int64_t *)tensor_first(r);
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)((uint64_t)draw[i] % (uint64_t)(i + 1));
    int64_t tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
  }
  dl_tensor_release(r);
  if (dtype == DL_INT64) return p;
  dl_tensor *c = fw_to_dtype(p, dtype);
  dl_tensor_release(p);
  return c;
}

DL_API dl_tensor *dl_randperm(int64_t n, dl_dtype dtype) {
  gen_ctx g = {.own = 0};
  return randperm(n, dtype, &g);
}

DL_API dl_tensor *dl_randperm_stream(int64_t n, uint64_t seed, uint64_t offset,
                                     dl_dtype dtype) {
  gen_ctx g = {.own = 1, .seed = seed, .base = offset};
  return randperm(n, dtype, &g);
}

/* -- Streams of their own (per-sample augmentation) ---------------------- */

/* splitmix64's finalizer: mixes the stream into the key, so streams of
** nearby numbers (epochs, sample indices) share no counter blocks. */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= UINT64_C(0xBF58476D1CE4E5B9);
  x ^= x >> 27;
  x *= UINT64_C(0x94D049BB133111EB);
  return x ^ (x >> 31);
}

DL_API int dl_rng_uniforms(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double *out) {
  if (n > 0 && !out) return dl_err(EM_NULLARG, "dl_rng_uniforms", "out");
  uint64_t key = mix64(seed ^ mix64(stream + UINT64_C(0x9E3779B97F4A7C15)));
  for (int64_t i = 0; i < n; i++) {
    uint64_t k = first + (uint64_t)i;
    uint32_t w[4];
    philox(key, k >> 1, w);  /* one block: two doubles */
    out[i] = (k & 1) ? philox_unit53(w[2], w[3]) : philox_unit53(w[0], w[1]);
  }
  return 0;
}
