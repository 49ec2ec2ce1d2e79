/*
** conv.cu -- the non-GEMM parts of conv2d on CUDA tensors: unfolding the
** input into column matrices (im2col) and folding their gradient back
** (col2im, as a gather, so no atomics and the sums are deterministic), the
** bias and its gradient, and a dim swap for grad_w's operand.  The
** products themselves are cuBLAS calls (blas.cu: dlc_gemm) made by
** runtime/cuda_linalg.c.
*/
#include "nn_kernels.cuh"

/* One thread per column entry (g, kk, n, p), p fastest: neighbouring
** threads read neighbouring input pixels (stride sw). */
template <class T>
__global__ void im2col_k(dlc_conv g, const T *__restrict__ x, T *__restrict__ col, int64_t n0,
                         int64_t nchunk) {
  const int64_t total = g.groups * g.K * nchunk * g.HW;
  GRID_STRIDE(e, total) {
    int64_t p = e % g.HW, r = e / g.HW;
    int64_t n = r % nchunk;
    r /= nchunk;
    int64_t kk = r % g.K, gr = r / g.K;
    int64_t j = kk % g.kw, i = (kk / g.kw) % g.kh, c = kk / (g.kw * g.kh);
    int64_t oh = p / g.Wo, ow = p % g.Wo;
    int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
    T v = 0;
    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
      v = x[(((n0 + n) * g.C + gr * g.Cg + c) * g.H + ih) * g.W + iw];
    col[e] = v;
  }
}

/* One thread per input pixel: the taps (i, j) that read it are those with
** (h + ph - i * dh) a multiple of sh in [0, Ho * sh), and likewise in w. */
template <class T>
__global__ void col2im_k(dlc_conv g, const T *__restrict__ col, T *__restrict__ x, int64_t n0,
                         int64_t nchunk) {
  const int64_t total = nchunk * g.C * g.H * g.W;
  const int64_t ld = nchunk * g.HW;
  GRID_STRIDE(e, total) {
    int64_t w = e % g.W, h = (e / g.W) % g.H, cf = (e / (g.W * g.H)) % g.C;
    int64_t n = e / (g.W * g.H * g.C);
    int64_t gr = cf / g.Cg, c = cf % g.Cg;
    typename acc_of<T>::type acc = 0;
    for (int64_t i = 0; i < g.kh; i++) {
      int64_t th = h + g.ph - i * g.dh;
      if (th < 0 || th % g.sh) continue;
      int64_t oh = th / g.sh;
      if (oh >= g.Ho) continue;
      for (int64_t j = 0; j < g.kw; j++) {
        int64_t tw = w + g.pw - j * g.dw;
        if (tw < 0 || tw % g.sw) continue;
        int64_t ow = tw / g.sw;
        if (ow >= g.Wo) continue;
        int64_t kk = (c * g.kh + i) * g.kw + j;
        acc += col[(gr * g.K + kk) * ld + n * g.HW + oh * g.Wo + ow];
      }
    }
    x[n0 * g.C * g.H * g.W + e] = acc;
  }
}

/* x [N, C, H, W] to columns (zeros where the window is in the padding);
** dtype float32 or float64 (also for the ones below). */
DLC_API int dlc_im2col(int device, int dtype, const dlc_conv *g, const void *x, void *col,
                       int64_t n0, int64_t nchunk) {
  int64_t total = g->groups * g->K * nchunk * g->HW;
  if (total == 0) return 0;
  dlc_conv v = *g;
  return float_launch(device, dtype, "im2col", [&](auto z) {
    typedef decltype(z) T;
    auto k = im2col_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v, (const T *)x, (T *)col,
               n0, nchunk);
  });
}

/* The adjoint: x[n0 .. n0 + nchunk) = the sum of every column entry read
** from it (written, not accumulated). */
DLC_API int dlc_col2im(int device, int dtype, const dlc_conv *g, const void *col, void *x,
                       int64_t n0, int64_t nchunk) {
  int64_t total = nchunk * g->C * g->H * g->W;
  if (total == 0) return 0;
  dlc_conv v = *g;
  return float_launch(device, dtype, "col2im", [&](auto z) {
    typedef decltype(z) T;
    auto k = col2im_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v, (const T *)col, (T *)x,
               n0, nchunk);
  });
}

/* -- Bias -------------------------------------------------------------------- */

template <class T> __global__ void bias_add_k(T *out, const T *b, int64_t total, int64_t O, int64_t HW) {
  GRID_STRIDE(e, total) out[e] += b[(e / HW) % O];
}

/* out [N, O, HW] += b[o]. */
DLC_API int dlc_bias_add(int device, int dtype, void *out, const void *b, int64_t N, int64_t O,
                         int64_t HW) {
  int64_t total = N * O * HW;
  if (total == 0) return 0;
  return float_launch(device, dtype, "conv2d bias", [&](auto z) {
    typedef decltype(z) T;
    auto k = bias_add_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), (T *)out, (const T *)b,
               total, O, HW);
  });
}

enum { BG_THREADS = 256 };

/* One block per output channel; a tree sum in shared memory (the order is
** fixed, so the result is the same every run). */
template <class T>
__global__ void bias_grad_k(const T *g, T *gb, int64_t N, int64_t O, int64_t HW) {
  __shared__ double part[BG_THREADS];
  const int64_t o = blockIdx.x;
  double s = 0;
  for (int64_t e = threadIdx.x; e < N * HW; e += BG_THREADS)
    s += (double)g[((e / HW) * O + o) * HW + e % HW];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = BG_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) gb[o] = (T)part[0];
}

/* gb[o] = the sum of g [N, O, HW] over N and HW (accumulated in double). */
DLC_API int dlc_bias_grad(int device, int dtype, const void *g, void *gb, int64_t N, int64_t O,
                          int64_t HW) {
  if (O == 0) return 0;
  if (O > INT32_MAX) {
    dlc_set_error("conv2d bias grad: %lld channels is too many", (long long)O);
    return DL_EINVAL;
  }
  return float_launch(device, dtype, "conv2d bias grad", [&](auto z) {
    typedef decltype(z) T;
    auto k = bias_grad_k<T>;
    DLC_LAUNCH(k, (unsigned)O, BG_THREADS, 0, dlc_stream(device), (const T *)g, (T *)gb, N, O, HW);
  });
}

/* -- Swap ------------------------------------------------------------------------ */

template <class T>
__global__ void swap01_k(const T *__restrict__ src, T *__restrict__ dst, int64_t A, int64_t B,
                         int64_t R) {
  const int64_t total = A * B * R;
  GRID_STRIDE(e, total) {  /* e indexes dst [B, A, R] */
    int64_t r = e % R, a = (e / R) % A, b = e / (R * A);
    dst[e] = src[(a * B + b) * R + r];
  }
}

/* dst [B, A, R] = src [A, B, R] with its first two dims swapped. */
DLC_API int dlc_swap01(int device, int dtype, const void *src, void *dst, int64_t A, int64_t B,
                       int64_t R) {
  int64_t total = A * B * R;
  if (total == 0) return 0;
  return float_launch(device, dtype, "conv2d swap", [&](auto z) {
    typedef decltype(z) T;
    auto k = swap01_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), (const T *)src, (T *)dst,
               A, B, R);
  });
}
