/*
** scan.cu -- cumsum and cumprod along one dim of a contiguous [O, N, I]
** CUDA tensor, with ops/scan.c's semantics: float scans run in double,
** integer scans wrap.
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

template <class T, bool PROD> static void run_scan(int64_t O, int64_t N, int64_t I,
                                                  const void *xv, void *yv, cudaStream_t st) {
  const T *x = (const T *)xv;
  T *y = (T *)yv;
  if (I > 1) {
    auto k = cum_cols<T, PROD>;
    DLC_LAUNCH(k, (unsigned)((O * I + THREADS - 1) / THREADS), THREADS, 0, st, O, N, I, x, y);
  } else if (N <= WARP_ROW_MAX) {
    auto k = cum_rows<T, PROD>;
    DLC_LAUNCH(k, (unsigned)((O + WARPS - 1) / WARPS), THREADS, 0, st, O, N, x, y);
  } else {
    auto k = cum_rows_block<T, PROD>;
    DLC_LAUNCH(k, (unsigned)O, THREADS, 0, st, N, x, y);
  }
}

/* Along the middle dim of a contiguous [outer, n, inner] tensor, y the
** same: kind SCAN_CUMSUM or SCAN_CUMPROD (core/kinds.h), dtype float32,
** float64 or int64.  (No parameter is called I: complex.h, which cblas.h
** includes, defines it.) */
DLC_API int dlc_scan(int device, int kind, int dtype, int64_t O, int64_t N, int64_t I,
                     const void *x, void *y) {
  if ((kind != SCAN_CUMSUM && kind != SCAN_CUMPROD) ||
      (dtype != DL_FLOAT32 && dtype != DL_FLOAT64 && dtype != DL_INT64)) {
    dlc_set_error("scan %d has no CUDA kernel for dtype %d", kind, dtype);
    return DL_EDTYPE;
  }
  if (O * N * I == 0) return 0;
  DLC_ON(device, "scan");
  cudaStream_t st = dlc_stream(device);
  bool prod = kind == SCAN_CUMPROD;
  if (dtype == DL_FLOAT32) prod ? run_scan<float, true>(O, N, I, x, y, st)
                                : run_scan<float, false>(O, N, I, x, y, st);
  else if (dtype == DL_FLOAT64) prod ? run_scan<double, true>(O, N, I, x, y, st)
                                     : run_scan<double, false>(O, N, I, x, y, st);
  else prod ? run_scan<int64_t, true>(O, N, I, x, y, st)
            : run_scan<int64_t, false>(O, N, I, x, y, st);
  return dlc_check_launch("scan", device);
}

}  // namespace dlc_scan_kernels
