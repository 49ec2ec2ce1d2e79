/*
** sort.cu -- sort and topk along one dim of a CUDA tensor, with
** runtime/sort.c's order: every value maps onto a uint64 key whose
** unsigned order is the sort order (NaN above everything, -0.0 equal to
** 0.0, complemented when descending), ties broken by index -- a total
** order, so a bitonic network gives the CPU's stable result exactly.
*/
#include <string.h>

#include "common.cuh"

/* Everything in its own namespace: templates and helpers of the same
** name in other kernel files must not merge at link time (the launchers
** keep their C names). */
namespace dlc_sort_kernels {

enum { THREADS = 256, SMEM_MAX = 2048 /* pairs a block sorts in shared memory */ };

struct pair_t {
  unsigned long long key;
  long long idx;
};

__device__ __forceinline__ bool pless(const pair_t &a, const pair_t &b) {
  return a.key < b.key || (a.key == b.key && a.idx < b.idx);
}

__device__ __forceinline__ unsigned long long fkey(float v) {
  if (v != v) return ~0ull;
  if (v == 0) v = 0;
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u & 0x80000000u ? (uint32_t)~u : u | 0x80000000u;
}

__device__ __forceinline__ unsigned long long dkey(double v) {
  if (v != v) return ~0ull;
  if (v == 0) v = 0;
  unsigned long long u;
  memcpy(&u, &v, sizeof u);
  return u >> 63 ? ~u : u | 1ull << 63;
}

template <class T> __device__ __forceinline__ unsigned long long key_of(T v) {
  const unsigned long long top = 1ull << 63;
  if constexpr (std::is_same<T, float>::value) return fkey(v);
  else if constexpr (std::is_same<T, double>::value) return dkey(v);
  else if constexpr (std::is_same<T, bf16_t>::value || std::is_same<T, f16_t>::value)
    return fkey(cvt<float, T>(v));
  else if constexpr (std::is_same<T, int32_t>::value || std::is_same<T, int64_t>::value)
    return (unsigned long long)(long long)v ^ top;
  else return (unsigned long long)v;  /* uint8, bool */
}

__device__ __forceinline__ int64_t slice_off(const dlc_reduce &r, int64_t s) {
  int64_t o = 0;
  for (int d = 0; d < r.nk; d++) {
    o += (s % r.kshape[d]) * r.kstride[d];
    s /= r.kshape[d];
  }
  return o;
}

/* Keys of slice s in w[s * P ..), padded to P with keys after every real one. */
template <class T>
__global__ void sort_keys(dlc_reduce r, int64_t P, uint64_t flip, pair_t *w) {
  int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (t >= r.M * P) return;
  int64_t s = t / P, p = t % P;
  pair_t e;
  e.idx = p;
  if (p < r.N) e.key = key_of<T>(((const T *)r.x)[slice_off(r, s) + p * r.rstride[0]]) ^ flip;
  else e.key = ~0ull;
  w[t] = e;
}

__device__ __forceinline__ void cmp_swap(pair_t *a, int64_t i, int64_t l, bool up) {
  pair_t x = a[i], y = a[l];
  if (pless(y, x) == up) a[i] = y, a[l] = x;
}

/* The whole network of a slice in shared memory, P / 2 threads. */
__global__ void __launch_bounds__(SMEM_MAX / 2) sort_block(int64_t P, pair_t *w) {
  pair_t *a = dyn_smem<pair_t>();
  pair_t *g = w + (int64_t)blockIdx.x * P;
  int t = threadIdx.x;
  a[t] = g[t], a[t + P / 2] = g[t + P / 2];
  __syncthreads();
  for (int64_t k = 2; k <= P; k <<= 1)
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      int64_t i = (t / j) * 2 * j + t % j;
      cmp_swap(a, i, i + j, (i & k) == 0);
      __syncthreads();
    }
  g[t] = a[t], g[t + P / 2] = a[t + P / 2];
}

/* One step (k, j) of the network over every slice, in global memory. */
__global__ void sort_step(int64_t M, int64_t P, int64_t k, int64_t j, pair_t *w) {
  int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x, half = P / 2;
  if (t >= M * half) return;
  int64_t s = t / half, r = t % half;
  int64_t i = (r / j) * 2 * j + r % j;
  cmp_swap(w + s * P, i, i + j, (i & k) == 0);
}

/* The first k of slice s into its place in values and indices. */
template <class T>
__global__ void sort_out(dlc_reduce r, int64_t P, int64_t k, int64_t inner, const pair_t *w,
                         T *vals, int64_t *idx) {
  int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (t >= r.M * k) return;
  int64_t s = t / k, j = t % k;
  int64_t i = w[s * P + j].idx;
  int64_t o = (s / inner) * k * inner + s % inner + j * inner;
  idx[o] = i;
  vals[o] = ((const T *)r.x)[slice_off(r, s) + i * r.rstride[0]];
}

static int64_t pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* Stable sort (sort.cu) of r's M slices along its one reduced dim (any
** dtype; desc: descending, NaN first), the first k of each into values
** (in_dtype) and int64 indices, contiguous with k in the dim's place and
** `inner` elements after it.  ws: dlc_sort_ws(r) bytes of device memory. */
DLC_API size_t dlc_sort_ws(const dlc_reduce *r) {
  return (size_t)(r->M * pow2(r->N)) * sizeof(pair_t);
}

DLC_API int dlc_sort(int device, int desc, int64_t k, int64_t inner, const dlc_reduce *r,
                     void *values, int64_t *indices, void *ws) {
  if (r->M == 0 || k == 0) return 0;
  DLC_ON(device, "sort");
  cudaStream_t st = dlc_stream(device);
  int64_t P = pow2(r->N), M = r->M;
  pair_t *w = (pair_t *)ws;
  uint64_t flip = desc ? ~0ull : 0;
  bool known = false;
  dlc_dispatch(r->in_dtype, [&](auto tag) {
    typedef decltype(tag) T;
    known = true;
    auto kk = sort_keys<T>;
    DLC_LAUNCH(kk, (unsigned)((M * P + THREADS - 1) / THREADS), THREADS, 0, st, *r, P, flip, w);
    if (P <= SMEM_MAX && P > 1) {
      auto kb = sort_block;
      DLC_LAUNCH(kb, (unsigned)M, (unsigned)(P / 2), (size_t)P * sizeof(pair_t), st, P, w);
    } else {
      unsigned blocks = (unsigned)((M * (P / 2) + THREADS - 1) / THREADS);
      for (int64_t kx = 2; kx <= P; kx <<= 1)
        for (int64_t j = kx >> 1; j > 0; j >>= 1) {
          auto ks = sort_step;
          DLC_LAUNCH(ks, blocks, THREADS, 0, st, M, P, kx, j, w);
        }
    }
    auto ko = sort_out<T>;
    DLC_LAUNCH(ko, (unsigned)((M * k + THREADS - 1) / THREADS), THREADS, 0, st, *r, P, k, inner,
               w, (T *)values, indices);
  });
  if (!known) {
    dlc_set_error("sort has no CUDA kernel for dtype %d", r->in_dtype);
    return DL_EDTYPE;
  }
  return dlc_check_launch("sort", device);
}

}  // namespace dlc_sort_kernels
