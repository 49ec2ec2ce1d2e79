/*
** norm.cu -- layer normalisation and batch normalisation on CUDA tensors,
** forward and backward, with runtime/nn_norm.c's formulas: a warp per
** narrow row or a block per wide one (layer norm), a block per channel
** (batch norm statistics), sums in double, the elementwise parts in the
** compute dtype as on the CPU.
*/
#include "nn_common.cuh"

/* Rows of layer norm: WARP, four warps of a block on a row each (rows up
** to 1024 wide), else the whole block on one row. */
template <bool WARP> struct rows {
  int64_t r, step;
  int lane, width;
  __device__ rows() {
    if (WARP) {
      int wpb = blockDim.x >> 5;
      r = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5);
      step = (int64_t)gridDim.x * wpb;
      lane = threadIdx.x & 31, width = 32;
    } else {
      r = blockIdx.x, step = gridDim.x, lane = threadIdx.x, width = blockDim.x;
    }
  }
  __device__ double sum(double v) const { return WARP ? warp_sum(v) : block_sum(v); }
};

enum { LN_WARP_MAX = 1024 };

/* threads and blocks for M rows of N */
static void ln_shape(int64_t M, int64_t N, int *threads, unsigned *blocks) {
  int64_t b;
  if (N <= LN_WARP_MAX) *threads = 128, b = (M + 3) / 4;
  else *threads = N <= 4096 ? 256 : 512, b = M;
  *blocks = (unsigned)(b < 65535 * 8 ? b : 65535 * 8);
}

/* -- Layer norm ---------------------------------------------------------------- */

template <class T, bool WARP>
__global__ void ln_fwd_kernel(int64_t M, int64_t N, double eps, const T *x_, const T *w,
                              const T *b, T *y_, T *mean_o, T *rstd_o) {
  rows<WARP> g;
  for (int64_t r = g.r; r < M; r += g.step) {
    const T *x = x_ + r * N;
    T *y = y_ + r * N;
    double s = 0;
    for (int64_t j = g.lane; j < N; j += g.width) s += (double)x[j];
    s = g.sum(s);
    T mean = (T)(s / (double)N);
    double v = 0;
    for (int64_t j = g.lane; j < N; j += g.width) {
      T d = x[j] - mean;
      v += (double)(d * d);
    }
    v = g.sum(v);
    T rstd = (T)(1.0 / sqrt(v / (double)N + eps));
    if (g.lane == 0) mean_o[r] = mean, rstd_o[r] = rstd;
    for (int64_t j = g.lane; j < N; j += g.width) {
      T o = (x[j] - mean) * rstd;
      if (w) o = o * w[j];
      if (b) o = o + b[j];
      y[j] = o;
    }
  }
}

DLC_API int dlc_layer_norm(int device, int kd, int64_t M, int64_t N, double eps, const void *x,
                           const void *w, const void *b, void *y, void *mean, void *rstd) {
  if (M == 0) return 0;
  DLC_ON(device, "layer_norm");
  int threads;
  unsigned nb;
  ln_shape(M, N, &threads, &nb);
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (N <= LN_WARP_MAX) {
      auto k = ln_fwd_kernel<T, true>;
      DLC_LAUNCH(k, nb, threads, 0, dlc_stream(device), M, N, eps, (const T *)x, (const T *)w,
                 (const T *)b, (T *)y, (T *)mean, (T *)rstd);
    } else {
      auto k = ln_fwd_kernel<T, false>;
      DLC_LAUNCH(k, nb, threads, 0, dlc_stream(device), M, N, eps, (const T *)x, (const T *)w,
                 (const T *)b, (T *)y, (T *)mean, (T *)rstd);
    }
  });
  KD_OR_FAIL(ok, "layer_norm", kd);
  return dlc_check_launch("layer_norm", device);
}

/* grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gout * w */
template <class T, bool WARP>
__global__ void ln_bwd_x_kernel(int64_t M, int64_t N, const T *x_, const T *go_, const T *w,
                                const T *smean, const T *srstd, T *gx_) {
  rows<WARP> gr;
  for (int64_t r = gr.r; r < M; r += gr.step) {
    const T *x = x_ + r * N, *go = go_ + r * N;
    T *gx = gx_ + r * N;
    T mean = smean[r], rstd = srstd[r];
    double a = 0, bs = 0;
    for (int64_t j = gr.lane; j < N; j += gr.width) {
      double g = (double)go[j] * (w ? (double)w[j] : 1.0);
      a += g;
      bs += g * (double)((x[j] - mean) * rstd);
    }
    a = gr.sum(a);
    bs = gr.sum(bs);
    T ma = (T)(a / (double)N), mb = (T)(bs / (double)N);
    for (int64_t j = gr.lane; j < N; j += gr.width) {
      T g = w ? go[j] * w[j] : go[j];
      gx[j] = rstd * (g - ma - (x[j] - mean) * rstd * mb);
    }
  }
}

/* column sums: a block of 32 columns x 8 row lanes, added in shared memory */
template <class T>
__global__ void ln_bwd_wb_kernel(int64_t M, int64_t N, const T *x, const T *go, const T *smean,
                                 const T *srstd, double *gw, double *gb) {
  __shared__ double sw[8][33], sb[8][33];
  int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  int64_t j = (int64_t)blockIdx.x * 32 + tx;
  double aw = 0, ab = 0;
  if (j < N)
    for (int64_t r = ty; r < M; r += 8) {
      T mean = smean[r], rstd = srstd[r], g = go[r * N + j];
      aw += (double)(g * ((x[r * N + j] - mean) * rstd));
      ab += (double)g;
    }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < N) {
    double s1 = 0, s2 = 0;
    for (int k = 0; k < 8; k++) s1 += sw[k][tx], s2 += sb[k][tx];
    if (gw) gw[j] = s1;
    if (gb) gb[j] = s2;
  }
}

/* gx (kd) when non-NULL; gw, gb (doubles) when non-NULL. */
DLC_API int dlc_layer_norm_backward(int device, int kd, int64_t M, int64_t N, const void *x,
                                    const void *go, const void *w, const void *mean,
                                    const void *rstd, void *gx, double *gw, double *gb) {
  DLC_ON(device, "layer_norm_backward");
  cudaStream_t st = dlc_stream(device);
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (gx && M) {
      int threads;
      unsigned nb;
      ln_shape(M, N, &threads, &nb);
      if (N <= LN_WARP_MAX) {
        auto k = ln_bwd_x_kernel<T, true>;
        DLC_LAUNCH(k, nb, threads, 0, st, M, N, (const T *)x, (const T *)go, (const T *)w,
                   (const T *)mean, (const T *)rstd, (T *)gx);
      } else {
        auto k = ln_bwd_x_kernel<T, false>;
        DLC_LAUNCH(k, nb, threads, 0, st, M, N, (const T *)x, (const T *)go, (const T *)w,
                   (const T *)mean, (const T *)rstd, (T *)gx);
      }
    }
    if ((gw || gb) && N) {
      auto k = ln_bwd_wb_kernel<T>;
      DLC_LAUNCH(k, (unsigned)((N + 31) / 32), 256, 0, st, M, N, (const T *)x, (const T *)go,
                 (const T *)mean, (const T *)rstd, gw, gb);
    }
  });
  KD_OR_FAIL(ok, "layer_norm_backward", kd);
  return dlc_check_launch("layer_norm_backward", device);
}

/* -- Batch norm -------------------------------------------------------------------- */

/* x as [N, C, S]: element k of channel c over N and S */
#define CH_AT(p, k) (p)[(((k) / S) * C + c) * S + (k) % S]

struct bn_args {
  int64_t N, C, S;
  int training;
  double momentum, eps;
  const double *w, *b;      /* NULL: 1 and 0 */
  double *rm, *rv;          /* running stats in, new values out (or NULL) */
  double *mean, *inv, *scale, *shift;
};

/* One block per channel: statistics (training) or the running ones, then
** invstd, scale = invstd * w, shift = b - mean * scale. */
template <class T> __global__ void bn_stats_kernel(const T *x, bn_args a) {
  int64_t N = a.N, C = a.C, S = a.S, count = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mean, var;
    if (a.training) {
      double s = 0;
      for (int64_t k = threadIdx.x; k < count; k += blockDim.x) s += (double)CH_AT(x, k);
      mean = block_sum(s) / (double)count;
      double v = 0;
      for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
        double d = (double)CH_AT(x, k) - mean;
        v += d * d;
      }
      var = block_sum(v) / (double)count;
    } else {
      mean = a.rm[c], var = a.rv[c];
    }
    if (threadIdx.x) continue;
    if (a.training) {
      if (a.rm) a.rm[c] = (1 - a.momentum) * a.rm[c] + a.momentum * mean;
      double unb = count > 1 ? (double)count / (double)(count - 1) : NAN;
      if (a.rv) a.rv[c] = (1 - a.momentum) * a.rv[c] + a.momentum * var * unb;
    }
    double inv = 1.0 / sqrt(var + a.eps);
    a.mean[c] = mean;
    a.inv[c] = inv;
    a.scale[c] = inv * (a.w ? a.w[c] : 1.0);
    a.shift[c] = (a.b ? a.b[c] : 0.0) - mean * a.scale[c];
  }
}

/* y = x * scale[c] + shift[c]; with go: y = (go - shift - (x - mean) k2) scale */
template <class T>
__global__ void bn_affine_kernel(int64_t total, int64_t C, int64_t S, const T *x, const T *go,
                                 const double *scale, const double *shift, const double *mean,
                                 const double *k2, T *y) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)blockDim.x * gridDim.x) {
    int64_t c = (i / S) % C;
    T sc = (T)scale[c], sh = (T)shift[c];
    if (!go) y[i] = x[i] * sc + sh;
    else y[i] = (go[i] - sh - (x[i] - (T)mean[c]) * (T)k2[c]) * sc;
  }
}

/* stats: 4 C doubles out (mean, invstd, scale, shift); rm, rv: running
** statistics as doubles, updated in training (either may be NULL). */
DLC_API int dlc_batch_norm(int device, int kd, int64_t N, int64_t C, int64_t S, int training,
                           double momentum, double eps, const void *x, const double *w,
                           const double *b, double *rm, double *rv, double *stats, void *y) {
  DLC_ON(device, "batch_norm");
  cudaStream_t st = dlc_stream(device);
  bn_args a = {N, C, S, training, momentum, eps, w, b, rm, rv,
               stats, stats + C, stats + 2 * C, stats + 3 * C};
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (C == 0) return;
    auto k = bn_stats_kernel<T>;
    DLC_LAUNCH(k, C < 65535 ? (unsigned)C : 65535u, 256, 0, st, (const T *)x, a);
    int64_t total = N * C * S;
    if (!total) return;
    auto k2 = bn_affine_kernel<T>;
    DLC_LAUNCH(k2, dlc_blocks(total, 256), 256, 0, st, total, C, S, (const T *)x, (const T *)NULL,
               a.scale, a.shift, (const double *)NULL, (const double *)NULL, (T *)y);
  });
  KD_OR_FAIL(ok, "batch_norm", kd);
  return dlc_check_launch("batch_norm", device);
}

/* sdy = sum gout, sdx = sum gout (x - mean) per channel, then the
** coefficients of grad_x, grad_w = sdx * inv and grad_b = sdy. */
template <class T>
__global__ void bn_bwd_sums_kernel(int64_t N, int64_t C, int64_t S, const T *go, const T *x,
                                   const double *mean, const double *inv, const double *w,
                                   int batch, double *out) {
  int64_t count = N * S;
  double *sdy = out, *sdx = out + C, *scale = out + 2 * C, *shift = out + 3 * C, *k2 = out + 4 * C;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double s1 = 0, s2 = 0, m = mean[c];
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
      double g = (double)CH_AT(go, k);
      s1 += g;
      s2 += g * ((double)CH_AT(x, k) - m);
    }
    s1 = block_sum(s1);
    s2 = block_sum(s2);
    if (threadIdx.x) continue;
    sdy[c] = s1;
    sdx[c] = s2 * inv[c];  /* grad_w */
    scale[c] = inv[c] * (w ? w[c] : 1.0);
    shift[c] = batch ? s1 / (double)count : 0;
    k2[c] = batch ? inv[c] * inv[c] * s2 / (double)count : 0;
  }
}

/* out: 5 C doubles (grad_b, grad_w, then coefficients); gx (kd) or NULL. */
DLC_API int dlc_batch_norm_backward(int device, int kd, int64_t N, int64_t C, int64_t S,
                                    int training, const void *go, const void *x,
                                    const double *mean, const double *inv, const double *w,
                                    double *out, void *gx) {
  DLC_ON(device, "batch_norm_backward");
  cudaStream_t st = dlc_stream(device);
  int batch = training && N * S > 0;
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (C == 0) return;
    auto k = bn_bwd_sums_kernel<T>;
    DLC_LAUNCH(k, C < 65535 ? (unsigned)C : 65535u, 256, 0, st, N, C, S, (const T *)go,
               (const T *)x, mean, inv, w, batch, out);
    int64_t total = N * C * S;
    if (!gx || !total) return;
    auto k2 = bn_affine_kernel<T>;
    DLC_LAUNCH(k2, dlc_blocks(total, 256), 256, 0, st, total, C, S, (const T *)x, (const T *)go,
               (const double *)(out + 2 * C), (const double *)(out + 3 * C), mean,
               (const double *)(out + 4 * C), (T *)gx);
  });
  KD_OR_FAIL(ok, "batch_norm_backward", kd);
  return dlc_check_launch("batch_norm_backward", device);
}
