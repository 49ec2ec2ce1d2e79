/*
** softmax.cu -- softmax and log_softmax along one dim of a contiguous
** [O, N, I] CUDA tensor, with ops/softmax.c's semantics: a NaN never wins
** the max of a row (so it turns the whole row NaN, as on the CPU).
*/
#include <math.h>

#include "common.cuh"

/* Everything in its own namespace: templates and helpers of the same
** name in other kernel files must not merge at link time (the launchers
** keep their C names). */
namespace dlc_softmax_kernels {

enum { THREADS = 256, WARPS = THREADS / 32, WARP_ROW_MAX = 1024 };

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

/* Max (a NaN never wins, as the CPU's x > m ? x : m) and sum over a group
** of G threads (a warp, or the block), the result in every thread. */
template <class T, int G, bool MAX> __device__ __forceinline__ T group_all(T v, T *sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? (u > v ? u : v) : v + u;
  }
  if constexpr (G > 32) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  /* sh may still be read from the previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int w = 1; w < G / 32; w++) v = MAX ? (sh[w] > v ? sh[w] : v) : v + sh[w];
  }
  return v;
}

/* A row along the last dim per warp (G = 32) or per block (G = THREADS):
** max, then the sum of exp(x - max), then the outputs. */
template <class T, bool LOG, int G>
__global__ void __launch_bounds__(THREADS) softmax_rows(int64_t O, int64_t N, const T *x, T *y) {
  __shared__ T sh[WARPS];
  int64_t row = G == 32 ? (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5) : blockIdx.x;
  int t = G == 32 ? (threadIdx.x & 31) : threadIdx.x;
  if (row >= O) return;  /* whole warps (G = 32) or the whole block */
  x += row * N, y += row * N;
  T m = -INFINITY, s = 0;
  for (int64_t n = t; n < N; n += G) m = x[n] > m ? x[n] : m;
  m = group_all<T, G, true>(m, sh);
  for (int64_t n = t; n < N; n += G) s += m_exp(x[n] - m);
  s = group_all<T, G, false>(s, sh);
  if (LOG) {
    T ls = m_log(s);
    for (int64_t n = t; n < N; n += G) y[n] = x[n] - m - ls;
  } else {
    T inv = (T)1 / s;
    for (int64_t n = t; n < N; n += G) y[n] = m_exp(x[n] - m) * inv;
  }
}

/* Other dims: a thread per (o, i) column, three sweeps down it. */
template <class T, bool LOG>
__global__ void __launch_bounds__(THREADS) softmax_cols(int64_t O, int64_t N, int64_t I,
                                                       const T *x, T *y) {
  int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (t >= O * I) return;
  int64_t off = t / I * N * I + t % I;
  T m = -INFINITY, s = 0;
  for (int64_t n = 0; n < N; n++) m = x[off + n * I] > m ? x[off + n * I] : m;
  for (int64_t n = 0; n < N; n++) s += m_exp(x[off + n * I] - m);
  T f = LOG ? m_log(s) : (T)1 / s;
  for (int64_t n = 0; n < N; n++)
    y[off + n * I] = LOG ? x[off + n * I] - m - f : m_exp(x[off + n * I] - m) * f;
}

template <class T, bool LOG> static void run_softmax(int64_t O, int64_t N, int64_t I,
                                                    const void *xv, void *yv, cudaStream_t st) {
  const T *x = (const T *)xv;
  T *y = (T *)yv;
  if (I > 1) {
    auto k = softmax_cols<T, LOG>;
    DLC_LAUNCH(k, (unsigned)((O * I + THREADS - 1) / THREADS), THREADS, 0, st, O, N, I, x, y);
  } else if (N <= WARP_ROW_MAX) {
    auto k = softmax_rows<T, LOG, 32>;
    DLC_LAUNCH(k, (unsigned)((O + WARPS - 1) / WARPS), THREADS, 0, st, O, N, x, y);
  } else {
    auto k = softmax_rows<T, LOG, THREADS>;
    DLC_LAUNCH(k, (unsigned)O, THREADS, 0, st, O, N, x, y);
  }
}

/* softmax (log: log_softmax) along the middle dim of a contiguous [outer,
** n, inner] tensor, y the same, dtype float32 or float64.  (No parameter
** is called I: complex.h, which cblas.h includes, defines it.) */
DLC_API int dlc_softmax(int device, int log, int dtype, int64_t O, int64_t N, int64_t I,
                        const void *x, void *y) {
  if (dtype != DL_FLOAT32 && dtype != DL_FLOAT64) {
    dlc_set_error("softmax has no CUDA kernel for dtype %d", dtype);
    return DL_EDTYPE;
  }
  if (O * N * I == 0) return 0;
  DLC_ON(device, "softmax");
  cudaStream_t st = dlc_stream(device);
  if (dtype == DL_FLOAT32) log ? run_softmax<float, true>(O, N, I, x, y, st)
                               : run_softmax<float, false>(O, N, I, x, y, st);
  else log ? run_softmax<double, true>(O, N, I, x, y, st)
           : run_softmax<double, false>(O, N, I, x, y, st);
  return dlc_check_launch("softmax", device);
}

}  // namespace dlc_softmax_kernels
