/*
** pool.cu -- max and average pooling on CUDA tensors, forward and backward,
** with the CPU's (nn/pool.c) windows, NaN rule, divisors and summation
** order: one thread per output (forward) or per input pixel (average
** backward, a gather, so no atomics); max backward scatters with atomics.
*/
#include "nn_kernels.cuh"

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* -- Max --------------------------------------------------------------------------- */

template <class T>
__global__ void max_pool_k(dlc_pool g, const T *__restrict__ x, T *__restrict__ out,
                           int64_t *__restrict__ idx) {
  const int64_t total = g.NC * g.Ho * g.Wo;
  GRID_STRIDE(e, total) {
    int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, q = e / (g.Wo * g.Ho);
    const T *xp = x + q * g.H * g.W;
    int64_t h0 = oh * g.sh - g.ph, h1 = imin(h0 + (g.kh - 1) * g.dh + 1, g.H);
    while (h0 < 0) h0 += g.dh;
    int64_t w0 = ow * g.sw - g.pw, w1 = imin(w0 + (g.kw - 1) * g.dw + 1, g.W);
    while (w0 < 0) w0 += g.dw;
    int64_t best = h0 * g.W + w0;
    T m = (T)-INFINITY;
    for (int64_t ih = h0; ih < h1; ih += g.dh)
      for (int64_t iw = w0; iw < w1; iw += g.dw) {
        T v = xp[ih * g.W + iw];
        if (v > m || v != v) m = v, best = ih * g.W + iw;
      }
    out[e] = m;
    idx[e] = best;
  }
}

template <class T> __global__ void zero_k(T *p, int64_t n) {
  GRID_STRIDE(e, n) p[e] = 0;
}

template <class T>
__global__ void max_pool_bwd_k(int64_t planes, int64_t in_plane, int64_t out_plane,
                               const T *__restrict__ go, const int64_t *__restrict__ idx, T *gx) {
  const int64_t total = planes * out_plane;
  GRID_STRIDE(e, total) {
    int64_t i = idx[e];
    if (i < 0 || i >= in_plane) continue;
    atomicAdd(gx + (e / out_plane) * in_plane + i, go[e]);
  }
}

/* Max pooling, float32 / float64: out and idx (int64, into each H x W
** plane) as PyTorch's CPU kernel (a NaN wins; the first tap on ties). */
DLC_API int dlc_max_pool(int device, int dtype, const dlc_pool *g, const void *x, void *out,
                         int64_t *idx) {
  int64_t total = g->NC * g->Ho * g->Wo;
  if (total == 0) return 0;
  dlc_pool v = *g;
  return float_launch(device, dtype, "max_pool2d", [&](auto z) {
    typedef decltype(z) T;
    auto k = max_pool_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v, (const T *)x, (T *)out,
               idx);
  });
}

/* gx (planes x in_plane, zeroed here) += gout at idx; indices outside a
** plane are skipped (the CPU reports them; here that would need a sync). */
DLC_API int dlc_max_pool_backward(int device, int dtype, int64_t planes, int64_t in_plane,
                                  int64_t out_plane, const void *gout, const int64_t *idx,
                                  void *gx) {
  int64_t nin = planes * in_plane, nout = planes * out_plane;
  if (nin == 0) return 0;
  return float_launch(device, dtype, "max_pool2d_backward", [&](auto z) {
    typedef decltype(z) T;
    auto kz = zero_k<T>;
    DLC_LAUNCH(kz, dlc_blocks(nin, 256), 256, 0, dlc_stream(device), (T *)gx, nin);
    if (nout == 0) return;
    auto k = max_pool_bwd_k<T>;
    DLC_LAUNCH(k, dlc_blocks(nout, 256), 256, 0, dlc_stream(device), planes, in_plane, out_plane,
               (const T *)gout, idx, (T *)gx);
  });
}

/* -- Average ------------------------------------------------------------------------ */

/* nn/pool.c: avg_window, the window clipped to the input and its divisor;
** false for an empty window. */
__device__ __forceinline__ bool avg_window(const dlc_pool &g, int64_t oh, int64_t ow, int64_t *h0,
                                           int64_t *h1, int64_t *w0, int64_t *w1, double *div) {
  int64_t a0 = oh * g.sh - g.ph, b0 = ow * g.sw - g.pw;
  int64_t a1 = imin(a0 + g.kh, g.H + g.ph), b1 = imin(b0 + g.kw, g.W + g.pw);
  int64_t pool = (a1 - a0) * (b1 - b0);
  a0 = imax(a0, 0), b0 = imax(b0, 0);
  a1 = imin(a1, g.H), b1 = imin(b1, g.W);
  *h0 = a0, *h1 = a1, *w0 = b0, *w1 = b1;
  if (a0 >= a1 || b0 >= b1) return false;
  *div = (double)(g.divisor ? g.divisor : g.count_include_pad ? pool : (a1 - a0) * (b1 - b0));
  return true;
}

template <class T>
__global__ void avg_pool_k(dlc_pool g, const T *__restrict__ x, T *__restrict__ out) {
  const int64_t total = g.NC * g.Ho * g.Wo;
  GRID_STRIDE(e, total) {
    int64_t ow = e % g.Wo, oh = (e / g.Wo) % g.Ho, q = e / (g.Wo * g.Ho);
    const T *xp = x + q * g.H * g.W;
    int64_t h0, h1, w0, w1;
    double div;
    T s = 0;
    if (avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) {
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * g.W + iw];
      s = s / (T)div;
    }
    out[e] = s;
  }
}

/* The outputs whose window holds (ih, iw), in the CPU's order (oh, then
** ow, ascending), so the sum rounds as the CPU's scatter does. */
template <class T>
__global__ void avg_pool_bwd_k(dlc_pool g, const T *__restrict__ go, T *__restrict__ gx) {
  const int64_t total = g.NC * g.H * g.W;
  GRID_STRIDE(e, total) {
    int64_t iw = e % g.W, ih = (e / g.W) % g.H, q = e / (g.W * g.H);
    const T *gp = go + q * g.Ho * g.Wo;
    /* window oh starts at oh*sh - ph and spans kh rows */
    int64_t t = ih + g.ph - g.kh;
    int64_t oh0 = t < 0 ? 0 : t / g.sh + 1, oh1 = imin(g.Ho - 1, (ih + g.ph) / g.sh);
    t = iw + g.pw - g.kw;
    int64_t ow0 = t < 0 ? 0 : t / g.sw + 1, ow1 = imin(g.Wo - 1, (iw + g.pw) / g.sw);
    T acc = 0;
    for (int64_t oh = oh0; oh <= oh1; oh++)
      for (int64_t ow = ow0; ow <= ow1; ow++) {
        int64_t h0, h1, w0, w1;
        double div;
        if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;
        if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
        acc += gp[oh * g.Wo + ow] / (T)div;
      }
    gx[e] = acc;
  }
}

/* Average pooling and its gradient (as a gather: deterministic). */
DLC_API int dlc_avg_pool(int device, int dtype, const dlc_pool *g, const void *x, void *out) {
  int64_t total = g->NC * g->Ho * g->Wo;
  if (total == 0) return 0;
  dlc_pool v = *g;
  return float_launch(device, dtype, "avg_pool2d", [&](auto z) {
    typedef decltype(z) T;
    auto k = avg_pool_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v, (const T *)x, (T *)out);
  });
}

DLC_API int dlc_avg_pool_backward(int device, int dtype, const dlc_pool *g, const void *gout,
                                  void *gx) {
  int64_t total = g->NC * g->H * g->W;
  if (total == 0) return 0;
  dlc_pool v = *g;
  return float_launch(device, dtype, "avg_pool2d_backward", [&](auto z) {
    typedef decltype(z) T;
    auto k = avg_pool_bwd_k<T>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v, (const T *)gout,
               (T *)gx);
  });
}
