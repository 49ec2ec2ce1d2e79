/*
** reduce.cu -- reductions (sum, mean, var, norm, amax, all, ...), max/min
** with indices, cumsum/cumprod and softmax on CUDA tensors, with the CPU's
** semantics (runtime/reduce.c, runtime/scan.c): float passes accumulate in
** double as the CPU does, integers wrap, NaN wins max and min, ties go to
** the first index.  No float atomics: every result is combined in a fixed
** order, so reruns give the same bits.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

/* Everything in its own namespace: templates and helpers of the same
** name in other kernel files must not merge at link time (the launchers
** keep their C names). */
namespace dlc_reduce_kernels {

typedef long long i64;  /* int64 as the shuffle overloads spell it */

enum { THREADS = 256, WARPS = THREADS / 32, GROUP_LONG = 1024 };
/* Enough resident blocks to fill an H100/H200 (132 SMs) a few times. */
enum { TARGET_BLOCKS = 132 * 4, TARGET_THREADS = 132 * 2048 };

/* -- Geometry -------------------------------------------------------------- */

/* Where the elements of a pass lie: offsets of output m and element n. */
struct geom {
  const void *x;
  int nk, nr;
  int64_t len;  /* elements per output in this pass */
  int64_t kshape[DLC_MAX_DIMS], kstride[DLC_MAX_DIMS];
  int64_t rshape[DLC_MAX_DIMS], rstride[DLC_MAX_DIMS];
};

__device__ __forceinline__ int64_t off_of(int64_t i, int n, const int64_t *shape,
                                          const int64_t *stride) {
  if (n == 1) return i * stride[0];
  int64_t o = 0;
  for (int d = 0; d < n; d++) {
    o += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return o;
}

/* -- Map, combine, finish: reduce.c's passes ------------------------------- */

template <class T> struct acc_t_of { typedef double type; };
template <> struct acc_t_of<i64> { typedef i64 type; };
template <> struct acc_t_of<uint8_t> { typedef i64 type; };

template <int K, class A> __device__ __forceinline__ A k_identity() {
  if constexpr (std::is_same<A, i64>::value)
    return K == K_PROD ? 1 : K == K_MAX ? INT64_MIN : K == K_MIN ? INT64_MAX : 0;
  else
    return K == K_PROD ? 1.0 : (K == K_MAX || K == K_MAXABS) ? -INFINITY
         : (K == K_MIN || K == K_MINABS) ? INFINITY : 0.0;
}

template <int K, class A> __device__ __forceinline__ A k_combine(A a, A b) {
  if constexpr (std::is_same<A, i64>::value) {
    if constexpr (K == K_PROD) return (i64)((uint64_t)a * (uint64_t)b);
    else if constexpr (K == K_MAX) return b > a ? b : a;
    else if constexpr (K == K_MIN) return b < a ? b : a;
    else return (i64)((uint64_t)a + (uint64_t)b);
  } else {
    if constexpr (K == K_PROD) return a * b;
    else if constexpr (K == K_MAX || K == K_MAXABS) return (b > a || b != b) ? b : a;
    else if constexpr (K == K_MIN || K == K_MINABS) return (b < a || b != b) ? b : a;
    else return a + b;
  }
}

template <int K, class T, class A> __device__ __forceinline__ A k_map(T x, double c, double p) {
  if constexpr (std::is_same<T, uint8_t>::value) return x != 0;
  else if constexpr (std::is_same<A, i64>::value) return (i64)x;
  else {
    double v = (double)x;
    if constexpr (K == K_ABS || K == K_MAXABS || K == K_MINABS) return fabs(v);
    else if constexpr (K == K_SQ) return v * v;
    else if constexpr (K == K_NZ) return x != 0;
    else if constexpr (K == K_SQDEV) return (v - c) * (v - c);
    else if constexpr (K == K_EXP) {
      if constexpr (std::is_same<T, float>::value) return expf(x - (float)c);
      else return exp(v - c);
    } else if constexpr (K == K_POW) return pow(fabs(v), p);
    else return v;
  }
}

/* reduce.c's finalize and store_results for output m. */
template <class A> __device__ void k_finish(const dlc_reduce &r, int64_t m, A a) {
  if constexpr (std::is_same<A, double>::value) {
    double v = a, N = (double)r.N, p = r.param;
    if (r.redop < 0) {  /* the centre of the next pass */
      if (r.kop == K_MAX) v = isinf(v) ? 0.0 : v;
      else v = v / N;
      ((double *)r.out)[m] = v;
      return;
    }
    switch (r.redop) {
      case DL_MEAN: v = v / N; break;
      case DL_VAR:
      case DL_STD: {
        double div = N - p;
        v /= div > 0 ? div : 0;
        if (r.redop == DL_STD) v = sqrt(v);
        break;
      }
      case DL_NORM:
        if (r.N == 0) v = 0;
        else if (p == 2) v = sqrt(v);
        else if (!(p == 1 || p == 0 || isinf(p))) v = pow(v, 1.0 / p);
        break;
      case DL_LOGSUMEXP: v = (r.center ? r.center[m] : 0.0) + log(v); break;
    }
    switch (r.out_dtype) {
      case DL_FLOAT32: ((float *)r.out)[m] = (float)v; break;
      case DL_FLOAT64: ((double *)r.out)[m] = v; break;
      case DL_BFLOAT16: ((bf16_t *)r.out)[m] = cvt<bf16_t, float>((float)v); break;
      case DL_FLOAT16: ((f16_t *)r.out)[m] = cvt<f16_t, float>((float)v); break;
    }
  } else {
    i64 v = a;
    if (r.kop == K_COUNT && (r.redop == DL_ALL || r.redop == DL_AMIN)) v = v == r.N;
    else if (r.kop == K_COUNT && r.redop != DL_COUNT_NONZERO) v = v > 0;
    if (r.out_dtype == DL_INT64) ((int64_t *)r.out)[m] = v;
    else if (r.out_dtype == DL_INT32) ((int32_t *)r.out)[m] = (int32_t)v;
    else ((uint8_t *)r.out)[m] = (uint8_t)v;
  }
}

/* -- Kernels ---------------------------------------------------------------- */

template <int K, class A> __device__ __forceinline__ A warp_reduce(A a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = k_combine<K, A>(a, __shfl_down_sync(0xffffffffu, a, o));
  return a;
}

/* Rows whose reduced elements lie closest together: a warp per output
** (G = 32, 8 outputs a block) or the whole block (G = THREADS), split in S
** slices when there are too few outputs to fill the GPU. */
template <int K, class T, int G>
__global__ void __launch_bounds__(THREADS) row_kernel(dlc_reduce r, geom g, int64_t S,
                                                     int64_t chunk, void *part) {
  typedef typename acc_t_of<T>::type A;
  __shared__ A red[WARPS];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t m = G == 32 ? (int64_t)blockIdx.x * WARPS + warp : blockIdx.x;
  int64_t s = blockIdx.y;
  int t = G == 32 ? lane : threadIdx.x;
  A a = k_identity<K, A>();
  if (m < r.M) {
    const T *x = (const T *)g.x + off_of(m, g.nk, g.kshape, g.kstride);
    double c = r.center ? r.center[m] : 0.0;
    int64_t lo = s * chunk, hi = lo + chunk < g.len ? lo + chunk : g.len;
    if (g.nr == 1 && g.rstride[0] == 1)
      for (int64_t n = lo + t; n < hi; n += G) a = k_combine<K, A>(a, k_map<K, T, A>(x[n], c, r.param));
    else
      for (int64_t n = lo + t; n < hi; n += G)
        a = k_combine<K, A>(a, k_map<K, T, A>(x[off_of(n, g.nr, g.rshape, g.rstride)], c, r.param));
  }
  a = warp_reduce<K, A>(a);
  if constexpr (G == THREADS) {
    if (lane == 0) red[warp] = a;
    __syncthreads();
    if (warp != 0) return;
    a = lane < WARPS ? red[lane] : k_identity<K, A>();
    a = warp_reduce<K, A>(a);
  }
  if (lane != 0 || m >= r.M) return;
  if (part) ((A *)part)[m * S + s] = a;
  else k_finish<A>(r, m, a);
}

/* Outputs whose kept elements lie closest together: a thread per output,
** neighbours reading neighbours; slices of the reduced dims along grid.y. */
template <int K, class T>
__global__ void __launch_bounds__(THREADS) col_kernel(dlc_reduce r, geom g, int64_t S,
                                                     int64_t chunk, void *part) {
  typedef typename acc_t_of<T>::type A;
  int64_t m = (int64_t)blockIdx.x * THREADS + threadIdx.x, s = blockIdx.y;
  if (m >= r.M) return;
  const T *x = (const T *)g.x + off_of(m, g.nk, g.kshape, g.kstride);
  double c = r.center ? r.center[m] : 0.0;
  int64_t lo = s * chunk, hi = lo + chunk < g.len ? lo + chunk : g.len;
  A a = k_identity<K, A>();
  for (int64_t n = lo; n < hi; n++)
    a = k_combine<K, A>(a, k_map<K, T, A>(x[off_of(n, g.nr, g.rshape, g.rstride)], c, r.param));
  if (part) ((A *)part)[m * S + s] = a;
  else k_finish<A>(r, m, a);
}

/* -- Planning ------------------------------------------------------------- */

struct plan {
  bool rows;
  int G;
  int64_t S, chunk;
};

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min_abs(const int64_t *v, int n) {
  int64_t m = INT64_MAX;
  for (int i = 0; i < n; i++) m = llabs(v[i]) < m ? llabs(v[i]) : m;
  return m;
}

static plan make_plan(const dlc_reduce &r) {
  plan p;
  int64_t len = r.N;
  p.rows = r.nr > 0 && (r.nk == 0 || min_abs(r.rstride, r.nr) < min_abs(r.kstride, r.nk));
  p.S = 1;
  if (p.rows) {
    p.G = len <= GROUP_LONG ? 32 : THREADS;
    int64_t blocks = p.G == 32 ? cdiv(r.M, WARPS) : r.M;
    if (blocks < TARGET_BLOCKS && len > 8 * GROUP_LONG) {
      p.G = THREADS;
      p.S = cdiv(len, 4 * GROUP_LONG);
      int64_t want = cdiv(TARGET_BLOCKS, r.M);
      p.S = p.S < want ? p.S : want;
    }
  } else {
    p.G = THREADS;
    if (r.M < TARGET_THREADS && len > 64) {
      p.S = cdiv(len, 32);
      int64_t want = cdiv(TARGET_THREADS, r.M);
      p.S = p.S < want ? p.S : want;
    }
  }
  p.S = p.S > 65535 ? 65535 : p.S < 1 ? 1 : p.S;
  p.chunk = len > 0 ? cdiv(len, p.S) : 0;
  if (p.chunk) p.S = cdiv(len, p.chunk);
  return p;
}

static geom geom_of(const dlc_reduce &r) {
  geom g;
  memset(&g, 0, sizeof g);
  g.x = r.x, g.nk = r.nk, g.nr = r.nr, g.len = r.N;
  for (int i = 0; i < DLC_MAX_DIMS; i++) {
    g.kshape[i] = r.kshape[i], g.kstride[i] = r.kstride[i];
    g.rshape[i] = r.rshape[i], g.rstride[i] = r.rstride[i];
  }
  return g;
}

/* The pass that combines partials of op K. */
template <int K> constexpr int combine_op() {
  return K == K_PROD ? K_PROD : (K == K_MAX || K == K_MAXABS) ? K_MAX
       : (K == K_MIN || K == K_MINABS) ? K_MIN : K_SUM;
}

template <int K, class T> static void launch_rows(const dlc_reduce &r, const geom &g, int G,
                                                  int64_t S, int64_t chunk, void *part,
                                                  cudaStream_t st) {
  dim3 grid((unsigned)(G == 32 ? cdiv(r.M, WARPS) : r.M), (unsigned)S);
  if (G == 32) {
    auto k = row_kernel<K, T, 32>;
    DLC_LAUNCH(k, grid, THREADS, 0, st, r, g, S, chunk, part);
  } else {
    auto k = row_kernel<K, T, THREADS>;
    DLC_LAUNCH(k, grid, THREADS, 0, st, r, g, S, chunk, part);
  }
}

template <int K, class T> static int run_reduce(int device, const dlc_reduce &r, void *ws) {
  typedef typename acc_t_of<T>::type A;
  DLC_ON(device, "reduce");
  cudaStream_t st = dlc_stream(device);
  plan p = make_plan(r);
  geom g = geom_of(r);
  void *part = p.S > 1 ? ws : NULL;
  if (p.rows) {
    launch_rows<K, T>(r, g, p.G, p.S, p.chunk, part, st);
  } else {
    auto k = col_kernel<K, T>;
    DLC_LAUNCH(k, dim3((unsigned)cdiv(r.M, THREADS), (unsigned)p.S), THREADS, 0, st, r, g, p.S,
               p.chunk, part);
  }
  if (part) {  /* partials [M, S] combined in slice order */
    geom g2;
    memset(&g2, 0, sizeof g2);
    g2.x = part, g2.nk = 1, g2.nr = 1, g2.len = p.S;
    g2.kshape[0] = r.M, g2.kstride[0] = p.S, g2.rshape[0] = p.S, g2.rstride[0] = 1;
    launch_rows<combine_op<K>(), A>(r, g2, p.S <= GROUP_LONG ? 32 : THREADS, 1, p.S, NULL, st);
  }
  return dlc_check_launch("reduce", device);
}

/* Bytes of device workspace the reduction needs (0: none). */
DLC_API size_t dlc_reduce_ws(const dlc_reduce *r) {
  if (r->M == 0) return 0;
  plan p = make_plan(*r);
  return p.S > 1 ? (size_t)(r->M * p.S) * 8 : 0;
}

template <int K> static int reduce_k(int device, const dlc_reduce &r, void *ws) {
  switch (r.in_dtype) {
    case DL_FLOAT32:
      if constexpr (K != K_COUNT) return run_reduce<K, float>(device, r, ws);
      break;
    case DL_FLOAT64:
      if constexpr (K != K_COUNT) return run_reduce<K, double>(device, r, ws);
      break;
    case DL_INT64:
      if constexpr (K == K_SUM || K == K_PROD || K == K_MAX || K == K_MIN)
        return run_reduce<K, i64>(device, r, ws);
      break;
    case DL_UINT8:
    case DL_BOOL:
      if constexpr (K == K_COUNT) return run_reduce<K, uint8_t>(device, r, ws);
      break;
  }
  dlc_set_error("reduction pass %d has no CUDA kernel for dtype %d", K, r.in_dtype);
  return DL_EDTYPE;
}

DLC_API int dlc_reduce_run(int device, const dlc_reduce *r, void *ws) {
  if (r->M == 0) return 0;
  switch (r->kop) {
#define K_CASE(k) case k: return reduce_k<k>(device, *r, ws);
    K_CASE(K_SUM) K_CASE(K_ABS) K_CASE(K_SQ) K_CASE(K_NZ)
    K_CASE(K_SQDEV) K_CASE(K_EXP) K_CASE(K_POW) K_CASE(K_PROD)
    K_CASE(K_MAX) K_CASE(K_MIN) K_CASE(K_MAXABS) K_CASE(K_MINABS)
    K_CASE(K_COUNT)
#undef K_CASE
  }
  dlc_set_error("unknown reduction pass %d", r->kop);
  return DL_EINVAL;
}

/* -- Max and min with indices ---------------------------------------------- */

/* The shuffled form of a value: CUDA shuffles no bytes or bools. */
template <class T> struct wide { typedef T type; };
template <> struct wide<uint8_t> { typedef int type; };
template <> struct wide<bool> { typedef int type; };
template <> struct wide<int32_t> { typedef int type; };
template <> struct wide<int64_t> { typedef i64 type; };

/* Whether (v, i) beats (w, j): a NaN wins, then the larger (smaller),
** ties and NaN pairs to the lower index -- reduce.c's scan, in any order. */
template <class V> __device__ __forceinline__ bool arg_better(bool mx, V v, i64 i, V w, i64 j) {
  bool nv = v != v, nw = w != w;
  if (nv || nw) return nv && (!nw || i < j);
  if (v == w) return i < j;
  return mx ? v > w : v < w;
}

/* (best, bi) combined with (v, j) across lanes o apart. */
template <class V> __device__ __forceinline__ void arg_warp(bool mx, V &best, i64 &bi) {
  for (int o = 16; o > 0; o >>= 1) {
    V v = __shfl_down_sync(0xffffffffu, best, o);
    i64 j = __shfl_down_sync(0xffffffffu, bi, o);
    if (j >= 0 && (bi < 0 || arg_better<V>(mx, v, j, best, bi))) best = v, bi = j;
  }
}

/* A warp (G = 32) or a block per output, like row_kernel; slice s of S
** (grid.y) leaves its winner in pv/pi[m * S + s].  PART: the input is
** such partials (pv, pi; S of them per output) rather than x. */
template <class T, int G, bool PART>
__global__ void __launch_bounds__(THREADS) arg_rows(dlc_reduce r, bool mx, int64_t S, int64_t chunk,
                                                   typename wide<T>::type *pv, i64 *pi, T *vals,
                                                   int64_t *idx) {
  typedef typename wide<T>::type V;
  __shared__ V sv[WARPS];
  __shared__ i64 si[WARPS];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t m = G == 32 ? (int64_t)blockIdx.x * WARPS + warp : blockIdx.x, s = blockIdx.y;
  int t = G == 32 ? lane : threadIdx.x;
  V best = 0;
  i64 bi = -1;  /* -1: nothing seen */
  if (m < r.M && PART) {
    for (int64_t n = t; n < S; n += G) {
      V v = pv[m * S + n];
      i64 j = pi[m * S + n];
      if (bi < 0 || arg_better<V>(mx, v, j, best, bi)) best = v, bi = j;
    }
  } else if (m < r.M) {
    const T *x = (const T *)r.x + off_of(m, r.nk, r.kshape, r.kstride);
    int64_t st = r.rstride[0], lo = s * chunk, hi = lo + chunk < r.N ? lo + chunk : r.N;
    for (int64_t n = lo + t; n < hi; n += G) {
      V v = (V)x[n * st];
      if (bi < 0 || arg_better<V>(mx, v, n, best, bi)) best = v, bi = n;
    }
  }
  arg_warp<V>(mx, best, bi);
  if constexpr (G == THREADS) {
    if (lane == 0) sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (warp != 0) return;
    best = lane < WARPS ? sv[lane] : (V)0;
    bi = lane < WARPS ? si[lane] : -1;
    arg_warp<V>(mx, best, bi);
  }
  if (lane != 0 || m >= r.M) return;
  if (!PART && S > 1) {
    pv[m * S + s] = best, pi[m * S + s] = bi;
    return;
  }
  idx[m] = bi;
  if (vals) vals[m] = (T)best;
}

/* reduce.c's scan itself, a thread per output. */
template <class T>
__global__ void __launch_bounds__(THREADS) arg_cols(dlc_reduce r, bool mx, T *vals, int64_t *idx) {
  int64_t m = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (m >= r.M) return;
  const T *x = (const T *)r.x + off_of(m, r.nk, r.kshape, r.kstride);
  int64_t st = r.rstride[0], bi = 0;
  T best = x[0];
  for (int64_t n = 1; n < r.N; n++) {
    T v = x[n * st];
    if (mx ? !(v <= best) : !(v >= best)) {
      best = v, bi = n;
      if (v != v) break;
    }
  }
  idx[m] = bi;
  if (vals) vals[m] = best;
}

/* Slices of each output's elements when there are too few outputs to
** fill the GPU: their number, and the elements in each. */
static int64_t arg_slices(const dlc_reduce &r, int64_t *chunk) {
  int64_t S = 1;
  if (r.M < TARGET_BLOCKS && r.N > 8 * GROUP_LONG) {
    S = cdiv(r.N, 4 * GROUP_LONG);
    int64_t want = cdiv(TARGET_BLOCKS, r.M);
    S = S < want ? S : want;
  }
  *chunk = cdiv(r.N, S);
  return cdiv(r.N, *chunk);
}

static bool arg_by_rows(const dlc_reduce &r) {
  return r.nk == 0 || llabs(r.rstride[0]) < min_abs(r.kstride, r.nk) || r.M < TARGET_THREADS / 64;
}

/* Max (max != 0) or min over r's one reduced dim, ties to the first and a
** NaN winning, as reduce.c: values (NULL: not wanted) in in_dtype (any
** but the half types) and int64 indices, both contiguous; ws: the bytes
** dlc_argreduce_ws(r) says of device memory (NULL when 0). */
DLC_API size_t dlc_argreduce_ws(const dlc_reduce *r) {
  int64_t chunk, S = r->M && r->N ? arg_slices(*r, &chunk) : 1;
  return S > 1 && arg_by_rows(*r) ? (size_t)(r->M * S) * 16 : 0;
}

DLC_API int dlc_argreduce(int device, int max, const dlc_reduce *r, void *values,
                          int64_t *indices, void *ws) {
  if (r->M == 0) return 0;
  DLC_ON(device, "max/min");
  cudaStream_t st = dlc_stream(device);
  bool rows = arg_by_rows(*r);
  int64_t chunk, S = arg_slices(*r, &chunk);
  if (!rows || !ws) S = 1, chunk = r->N;
  bool known = false;
  dlc_dispatch(r->in_dtype, [&](auto tag) {
    typedef decltype(tag) T;
    typedef typename wide<T>::type V;
    if constexpr (!std::is_same<T, bf16_t>::value && !std::is_same<T, f16_t>::value) {
      known = true;
      T *v = (T *)values;
      bool mx = max != 0;
      i64 *pi = S > 1 ? (i64 *)ws : NULL;
      V *pv = S > 1 ? (V *)(pi + r->M * S) : NULL;
      if (!rows) {
        auto k = arg_cols<T>;
        DLC_LAUNCH(k, (unsigned)cdiv(r->M, THREADS), THREADS, 0, st, *r, mx, v, indices);
      } else if (S > 1) {
        auto k = arg_rows<T, THREADS, false>;
        DLC_LAUNCH(k, dim3((unsigned)r->M, (unsigned)S), THREADS, 0, st, *r, mx, S, chunk, pv, pi,
                   v, indices);
        auto k2 = arg_rows<T, 32, true>;
        DLC_LAUNCH(k2, (unsigned)cdiv(r->M, WARPS), THREADS, 0, st, *r, mx, S, chunk, pv, pi, v,
                   indices);
      } else if (r->N <= GROUP_LONG) {
        auto k = arg_rows<T, 32, false>;
        DLC_LAUNCH(k, (unsigned)cdiv(r->M, WARPS), THREADS, 0, st, *r, mx, S, chunk, pv, pi, v,
                   indices);
      } else {
        auto k = arg_rows<T, THREADS, false>;
        DLC_LAUNCH(k, (unsigned)r->M, THREADS, 0, st, *r, mx, S, chunk, pv, pi, v, indices);
      }
    }
  });
  if (!known) {
    dlc_set_error("max/min has no CUDA kernel for dtype %d", r->in_dtype);
    return DL_EDTYPE;
  }
  return dlc_check_launch("max/min", device);
}

}  // namespace dlc_reduce_kernels
