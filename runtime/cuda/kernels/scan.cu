/*
** scan.cu -- cumsum, cumprod, softmax and log_softmax along one dim of a
** contiguous [O, N, I] CUDA tensor, with runtime/scan.c's semantics:
** float scans run in double, integer scans wrap, a NaN never wins the
** max of a softmax row (so it turns the whole row NaN, as on the CPU).
*/
#include <math.h>

#include "common.cuh"

/* Everything in its own namespace: templates and helpers of the same
** name in other kernel files must not merge at link time (the launchers
** keep their C names). */
namespace dlc_scan_kernels {

enum { THREADS = 256, WARPS = THREADS / 32, WARP_ROW_MAX = 1024 };

typedef unsigned long long u64;

/* The running value of a scan: double for floats, wrapping u64 for int64. */
template <class T> struct scan_acc { typedef double type; };
template <> struct scan_acc<int64_t> { typedef u64 type; };

template <bool PROD, class A> __device__ __forceinline__ A sc_op(A a, A b) {
  return PROD ? a * b : a + b;
}

/* Rows along the last dim: a warp per row, 32 elements a step, each
** step's inclusive scan by shuffles plus the carry of the steps before. */
template <class T, bool PROD>
__global__ void __launch_bounds__(THREADS) cum_rows(int64_t O, int64_t N, const T *x, T *y) {
  typedef typename scan_acc<T>::type A;
  int lane = threadIdx.x & 31;
  int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= O) return;
  x += row * N, y += row * N;
  A carry = PROD ? 1 : 0;
  for (int64_t base = 0; base < N; base += 32) {
    int64_t n = base + lane;
    A v = n < N ? (A)x[n] : (A)(PROD ? 1 : 0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      A u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v = sc_op<PROD, A>(u, v);
    }
    A out = sc_op<PROD, A>(carry, v);
    if (n < N) y[n] = (T)out;
    carry = __shfl_sync(0xffffffffu, out, 31);
  }
}

/* Long rows along the last dim: a block per row, THREADS elements a step;
** each warp's scan, then the totals of the warps before it and the carry. */
template <class T, bool PROD>
__global__ void __launch_bounds__(THREADS) cum_rows_block(int64_t N, const T *x, T *y) {
  typedef typename scan_acc<T>::type A;
  __shared__ A wsum[WARPS];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x += (int64_t)blockIdx.x * N, y += (int64_t)blockIdx.x * N;
  A carry = PROD ? 1 : 0;
  for (int64_t base = 0; base < N; base += THREADS) {
    int64_t n = base + threadIdx.x;
    A v = n < N ? (A)x[n] : (A)(PROD ? 1 : 0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      A u = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v = sc_op<PROD, A>(u, v);
    }
    if (lane == 31) wsum[warp] = v;
    __syncthreads();
    A pre = carry, tot;
    for (int w = 0; w < warp; w++) pre = sc_op<PROD, A>(pre, wsum[w]);
    tot = pre;
    for (int w = warp; w < WARPS; w++) tot = sc_op<PROD, A>(tot, wsum[w]);
    if (n < N) y[n] = (T)sc_op<PROD, A>(pre, v);
    carry = tot;
    __syncthreads();  /* wsum is written again next step */
  }
}

/* Other dims: a thread per (o, i) column, neighbours reading neighbours. */
template <class T, bool PROD>
__global__ void __launch_bounds__(THREADS) cum_cols(int64_t O, int64_t N, int64_t I, const T *x,
                                                   T *y) {
  typedef typename scan_acc<T>::type A;
  int64_t t = (int64_t)blockIdx.x * THREADS + threadIdx.x;
  if (t >= O * I) return;
  int64_t off = t / I * N * I + t % I;
  A a = PROD ? 1 : 0;
  for (int64_t n = 0; n < N; n++, off += I) {
    a = sc_op<PROD, A>(a, (A)x[off]);
    y[off] = (T)a;
  }
}

/* -- Softmax ------------------------------------------------------------------ */

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

template <class T, bool B> static void run_dimop(int op, int64_t O, int64_t N, int64_t I,
                                                 const void *xv, void *yv, cudaStream_t st) {
  const T *x = (const T *)xv;
  T *y = (T *)yv;
  unsigned cols = (unsigned)((O * I + THREADS - 1) / THREADS);
  unsigned warps = (unsigned)((O + WARPS - 1) / WARPS);
  if (op < 2) {
    if (I > 1) {
      auto k = cum_cols<T, B>;
      DLC_LAUNCH(k, cols, THREADS, 0, st, O, N, I, x, y);
    } else if (N <= WARP_ROW_MAX) {
      auto k = cum_rows<T, B>;
      DLC_LAUNCH(k, warps, THREADS, 0, st, O, N, x, y);
    } else {
      auto k = cum_rows_block<T, B>;
      DLC_LAUNCH(k, (unsigned)O, THREADS, 0, st, N, x, y);
    }
  } else if constexpr (!std::is_same<T, int64_t>::value) {
    if (I > 1) {
      auto k = softmax_cols<T, B>;
      DLC_LAUNCH(k, cols, THREADS, 0, st, O, N, I, x, y);
    } else if (N <= WARP_ROW_MAX) {
      auto k = softmax_rows<T, B, 32>;
      DLC_LAUNCH(k, warps, THREADS, 0, st, O, N, x, y);
    } else {
      auto k = softmax_rows<T, B, THREADS>;
      DLC_LAUNCH(k, (unsigned)O, THREADS, 0, st, O, N, x, y);
    }
  }
}

DLC_API int dlc_dimop(int device, int op, int dtype, int64_t O, int64_t N, int64_t I,
                      const void *x, void *y) {
  bool soft = op >= 2;
  if (op < 0 || op > 3 || (dtype != DL_FLOAT32 && dtype != DL_FLOAT64 && (soft || dtype != DL_INT64))) {
    dlc_set_error("dim op %d has no CUDA kernel for dtype %d", op, dtype);
    return DL_EDTYPE;
  }
  if (O * N * I == 0) return 0;
  DLC_ON(device, "dim op");
  cudaStream_t st = dlc_stream(device);
  bool b = op == 1 || op == 3;  /* cumprod, log_softmax */
  if (dtype == DL_FLOAT32) b ? run_dimop<float, true>(op, O, N, I, x, y, st)
                             : run_dimop<float, false>(op, O, N, I, x, y, st);
  else if (dtype == DL_FLOAT64) b ? run_dimop<double, true>(op, O, N, I, x, y, st)
                                  : run_dimop<double, false>(op, O, N, I, x, y, st);
  else b ? run_dimop<int64_t, true>(op, O, N, I, x, y, st)
         : run_dimop<int64_t, false>(op, O, N, I, x, y, st);
  return dlc_check_launch("dim op", device);
}

}  // namespace dlc_scan_kernels
