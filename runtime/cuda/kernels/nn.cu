/*
** nn.cu -- the losses (cross entropy, nll, mse), forward and backward,
** index range checks and embedding lookups on CUDA tensors, with the
** CPU's formulas (runtime/nn_loss.c, nn/embedding_dropout.c): per-position terms in
** double, one warp per position, and sums in double.
*/
#include "nn_common.cuh"

/* -- Index checks -------------------------------------------------------- */

/* The smallest bad position found by a kernel; one word per device. */
static unsigned long long *bad_word(int device) {
  static unsigned long long *words[64];
  if (device < 0 || device >= 64) return NULL;
  if (!words[device]) {
    void *p = NULL;
    if (cudaMalloc(&p, sizeof(unsigned long long)) != cudaSuccess) return NULL;
    cudaMemset(p, 0xff, sizeof(unsigned long long));
    words[device] = (unsigned long long *)p;
  }
  return words[device];
}

__global__ void bad_index_kernel(const int64_t *idx, int64_t n, int64_t rows, int64_t ignore,
                                 int use_ignore, unsigned long long *bad) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    int64_t v = idx[i];
    if (use_ignore && v == ignore) continue;
    if (v < 0 || v >= rows) atomicMin(bad, (unsigned long long)i);
  }
}

/* After kernels that set the word: *pos = the bad position (or -1), *val
** its index; the word reset.  Syncs the stream. */
static int read_bad(int device, unsigned long long *w, const int64_t *idx, int64_t *pos,
                    int64_t *val) {
  cudaStream_t st = dlc_stream(device);
  unsigned long long b = 0;
  cudaError_t e = cudaMemcpyAsync(&b, w, sizeof b, cudaMemcpyDeviceToHost, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  if (e != cudaSuccess) return dlc_cuda_fail(e, "reading the index check", device);
  *pos = -1;
  if (b == ~0ull) return 0;
  *pos = (int64_t)b;
  e = cudaMemcpy(val, idx + b, sizeof *val, cudaMemcpyDeviceToHost);
  cudaMemsetAsync(w, 0xff, sizeof *w, st);
  return e == cudaSuccess ? 0 : dlc_cuda_fail(e, "reading the bad index", device);
}

/* *pos = the first position whose index is outside [0, rows) (and not
** ignore when use_ignore), or -1; *val its index.  Syncs the stream. */
DLC_API int dlc_bad_index(int device, const int64_t *idx, int64_t n, int64_t rows,
                          int64_t ignore, int use_ignore, int64_t *pos, int64_t *val) {
  *pos = -1;
  if (n == 0) return 0;
  DLC_ON(device, "index check");
  unsigned long long *w = bad_word(device);
  if (!w) return dlc_cuda_fail(cudaErrorMemoryAllocation, "index check word", device);
  auto k = bad_index_kernel;
  DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), idx, n, rows, ignore, use_ignore, w);
  int rc = dlc_check_launch("index check", device);
  return rc ? rc : read_bad(device, w, idx, pos, val);
}

/* -- Class-index losses ------------------------------------------------------ */

/* max then log-sum-exp of z[c * S], c < C, over the lanes of a warp (every
** lane gets it); NaN when the max is infinite, as on the CPU. */
template <class T>
__device__ __forceinline__ double warp_lse(const T *z, int64_t C, int64_t S, int lane) {
  double m = -INFINITY;
  for (int64_t c = lane; c < C; c += 32) {
    double v = (double)z[c * S];
    if (v > m || v != v) m = v;
  }
  for (int o = 16; o > 0; o >>= 1) {
    double v = __shfl_xor_sync(0xffffffffu, m, o);
    if (v > m || v != v) m = v;
  }
  if (isinf(m)) return NAN;
  double s = 0;
  for (int64_t c = lane; c < C; c += 32) s += exp((double)z[c * S] - m);
  return m + log(warp_sum(s));
}

struct cls_args {
  int64_t N, C, S, ignore;
  const void *z;
  const int64_t *t;
  const double *w;
  int logits, smooth;
  double *nll, *sm, *wt;   /* forward: per position */
  unsigned long long *bad; /* forward: the first target out of range */
  const void *g;           /* backward: upstream gradient */
  int g_each;              /* g per position (reduction none), else g[0] */
  double ls;
  const double *div_wsum;  /* backward: [div, wsum] */
  void *gi;
};

template <class T> __global__ void cls_fwd_kernel(cls_args a) {
  int lane = threadIdx.x & 31;
  int64_t P = a.N * a.S, wpb = blockDim.x >> 5;
  for (int64_t i = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); i < P; i += wpb * gridDim.x) {
    int64_t n = i / a.S, s = i % a.S, t = a.t[i];
    const T *z = (const T *)a.z + n * a.C * a.S + s;
    if (t == a.ignore || t < 0 || t >= a.C) {  /* out of range: reported after */
      if (lane == 0) {
        a.nll[i] = a.sm[i] = a.wt[i] = 0;
        if (t != a.ignore) atomicMin(a.bad, (unsigned long long)i);
      }
      continue;
    }
    double lse = a.logits ? warp_lse(z, a.C, a.S, lane) : 0;
    double sm = 0;
    if (a.smooth) {
      for (int64_t c = lane; c < a.C; c += 32)
        sm += (a.w ? a.w[c] : 1.0) * (lse - (double)z[c * a.S]);
      sm = warp_sum(sm);
    }
    if (lane == 0) {
      double wt = a.w ? a.w[t] : 1.0;
      a.wt[i] = wt;
      a.nll[i] = -wt * ((double)z[t * a.S] - lse);
      a.sm[i] = sm;
    }
  }
}

/* reduction none: out[i] = (1 - ls) nll + ls / C sm, elementwise */
__global__ void cls_none_kernel(int64_t P, double a1, double b1, int smooth, const double *nll,
                                const double *sm, void *out, int dtype) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < P;
       i += (int64_t)blockDim.x * gridDim.x)
    store_as(out, dtype, i, smooth ? a1 * nll[i] + b1 * sm[i] : nll[i]);
}

/* mean or sum, in one block */
__global__ void cls_reduce_kernel(int64_t P, int reduction, double a1, double b1, int smooth,
                                  const double *nll, const double *sm, const double *wt,
                                  void *out, int dtype) {
  double sn = 0, ss = 0, sw = 0;
  for (int64_t i = threadIdx.x; i < P; i += blockDim.x) sn += nll[i], ss += sm[i], sw += wt[i];
  sn = block_sum(sn);
  ss = block_sum(ss);
  sw = block_sum(sw);
  if (threadIdx.x) return;
  double v;
  if (reduction == DL_LOSS_SUM) v = smooth ? a1 * sn + b1 * ss : sn;
  else v = smooth ? a1 * (sn / sw) + b1 * (ss / sw) : sn / sw;
  store_as(out, dtype, 0, v);
}

/* cross_entropy (logits 1) or nll_loss over z [N, C, S] (kd), targets t
** [N * S]; w: C doubles or NULL; buf: 3 N S doubles (nll, sm, wt); out
** (out_dtype): [N S] or one element.  Checks the targets in the same pass
** and syncs: *bad_pos (-1: none) and *bad_val as dlc_bad_index's (out is
** then garbage). */
DLC_API int dlc_cls_forward(int device, int kd, int logits, int64_t N, int64_t C, int64_t S,
                            const void *z, const int64_t *t, const double *w, int64_t ignore,
                            double ls, int reduction, double *buf, void *out, int out_dtype,
                            int64_t *bad_pos, int64_t *bad_val) {
  *bad_pos = -1;
  DLC_ON(device, "class loss");
  cudaStream_t st = dlc_stream(device);
  unsigned long long *bw = bad_word(device);
  if (!bw) return dlc_cuda_fail(cudaErrorMemoryAllocation, "index check word", device);
  int64_t P = N * S;
  cls_args a = {N, C, S, ignore, z, t, w, logits, ls > 0, buf, buf + P, buf + 2 * P,
                bw, NULL, 0, ls, NULL, NULL};
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (P == 0) return;
    auto k = cls_fwd_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(P * 32, 256), 256, 0, st, a);
  });
  KD_OR_FAIL(ok, "class loss", kd);
  double a1 = 1 - ls, b1 = ls / (double)C;
  if (reduction == DL_LOSS_NONE) {
    if (P) {
      auto k = cls_none_kernel;
      DLC_LAUNCH(k, dlc_blocks(P, 256), 256, 0, st, P, a1, b1, ls > 0, a.nll, a.sm, out, out_dtype);
    }
  } else {
    auto k = cls_reduce_kernel;
    DLC_LAUNCH(k, 1, 1024, 0, st, P, reduction, a1, b1, ls > 0, a.nll, a.sm, a.wt, out, out_dtype);
  }
  int rc = dlc_check_launch("class loss", device);
  return rc || !P ? rc : read_bad(device, bw, t, bad_pos, bad_val);
}

/* div (mean: the weighted count of targets kept, else 1) and wsum */
template <class T> __global__ void cls_div_kernel(cls_args a, int mean, double *dw) {
  int64_t P = a.N * a.S;
  double sw = 0, ws = 0;
  if (mean)
    for (int64_t i = threadIdx.x; i < P; i += blockDim.x)
      if (a.t[i] != a.ignore && a.t[i] >= 0 && a.t[i] < a.C) sw += a.w ? a.w[a.t[i]] : 1.0;
  for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x) ws += a.w ? a.w[c] : 1.0;
  sw = block_sum(sw);
  ws = block_sum(ws);
  if (threadIdx.x == 0) dw[0] = mean ? sw : 1.0, dw[1] = ws;
}

template <class T> __global__ void cls_bwd_kernel(cls_args a) {
  int lane = threadIdx.x & 31;
  int64_t P = a.N * a.S, wpb = blockDim.x >> 5;
  for (int64_t i = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); i < P; i += wpb * gridDim.x) {
    int64_t n = i / a.S, s = i % a.S, t = a.t[i];
    const T *z = (const T *)a.z + n * a.C * a.S + s;
    T *gi = (T *)a.gi + n * a.C * a.S + s;
    if (t == a.ignore) {
      for (int64_t c = lane; c < a.C; c += 32) gi[c * a.S] = 0;
      continue;
    }
    if (t < 0 || t >= a.C) {  /* changed since the forward's check */
      for (int64_t c = lane; c < a.C; c += 32) gi[c * a.S] = (T)NAN;
      continue;
    }
    double g = (double)((const T *)a.g)[a.g_each ? i : 0], div = a.div_wsum[0];
    double A = (1 - a.ls) * (g / div) * (a.w ? a.w[t] : 1.0);
    if (!a.logits) {
      for (int64_t c = lane; c < a.C; c += 32) gi[c * a.S] = c == t ? (T)-A : (T)0;
      continue;
    }
    double B = a.smooth ? a.ls / (double)a.C * (g / div) : 0;
    double lse = warp_lse(z, a.C, a.S, lane), tot = A + B * a.div_wsum[1];
    for (int64_t c = lane; c < a.C; c += 32) {
      double pc = exp((double)z[c * a.S] - lse);
      double v = pc * tot - (a.smooth ? B * (a.w ? a.w[c] : 1.0) : 0);
      if (c == t) v -= A;
      gi[c * a.S] = (T)v;
    }
  }
}

/* gi [N, C, S] (kd) from g (kd: per position for reduction none, else
** one element); scratch: 2 doubles. */
DLC_API int dlc_cls_backward(int device, int kd, int logits, int64_t N, int64_t C, int64_t S,
                             const void *z, const int64_t *t, const double *w, int64_t ignore,
                             double ls, int reduction, const void *g, double *scratch, void *gi) {
  DLC_ON(device, "class loss backward");
  cudaStream_t st = dlc_stream(device);
  int64_t P = N * S;
  cls_args a = {N, C, S, ignore, z, t, w, logits, ls > 0, NULL, NULL, NULL, NULL,
                g, reduction == DL_LOSS_NONE, ls, scratch, gi};
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (P == 0) return;
    auto kdiv = cls_div_kernel<T>;
    DLC_LAUNCH(kdiv, 1, 1024, 0, st, a, reduction == DL_LOSS_MEAN, scratch);
    auto k = cls_bwd_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(P * 32, 256), 256, 0, st, a);
  });
  KD_OR_FAIL(ok, "class loss backward", kd);
  return dlc_check_launch("class loss backward", device);
}

/* -- Mean squared error ---------------------------------------------------------- */

template <class T> __global__ void mse_sq_kernel(int64_t n, const T *a, const T *b, T *o) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    T d = a[i] - b[i];
    o[i] = d * d;
  }
}

/* one partial sum per block, then block 0 of a second launch adds them */
template <class T> __global__ void mse_part_kernel(int64_t n, const T *a, const T *b, double *part) {
  double s = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    double d = (double)a[i] - (double)b[i];
    s += d * d;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void mse_total_kernel(int64_t nb, int64_t n, int mean, const double *part, void *out,
                                 int dtype) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < nb; i += blockDim.x) s += part[i];
  s = block_sum(s);
  if (threadIdx.x == 0) store_as(out, dtype, 0, mean ? s / (double)n : s);
}

/* Blocks of the partial sums: part must hold this many doubles. */
DLC_API int64_t dlc_mse_parts(int64_t n) { return dlc_blocks(n, 256); }

/* none: out (kd) = (a - b)^2; mean/sum: out[0] (out_dtype) the total. */
DLC_API int dlc_mse(int device, int kd, int reduction, int64_t n, const void *a, const void *b,
                    double *part, void *out, int out_dtype) {
  DLC_ON(device, "mse_loss");
  cudaStream_t st = dlc_stream(device);
  unsigned nb = dlc_blocks(n, 256);
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (reduction == DL_LOSS_NONE) {
      if (!n) return;
      auto k = mse_sq_kernel<T>;
      DLC_LAUNCH(k, nb, 256, 0, st, n, (const T *)a, (const T *)b, (T *)out);
      return;
    }
    if (n) {
      auto k = mse_part_kernel<T>;
      DLC_LAUNCH(k, nb, 256, 0, st, n, (const T *)a, (const T *)b, part);
    }
    auto k2 = mse_total_kernel;
    DLC_LAUNCH(k2, 1, 1024, 0, st, n ? (int64_t)nb : 0, n, reduction == DL_LOSS_MEAN, part,
               out, out_dtype);
  });
  KD_OR_FAIL(ok, "mse_loss", kd);
  return dlc_check_launch("mse_loss", device);
}

template <class T>
__global__ void mse_grad_kernel(int64_t n, const T *a, const T *b, const T *g, int g_each,
                                T norm, T *o) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x)
    o[i] = norm * (a[i] - b[i]) * g[g_each ? i : 0];
}

/* out = norm (a - b) g, g per element or g[0]; all kd. */
DLC_API int dlc_mse_backward(int device, int kd, int64_t n, const void *a, const void *b,
                             const void *g, int g_each, double norm, void *out) {
  DLC_ON(device, "mse_loss_backward");
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    if (!n) return;
    auto k = mse_grad_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), n, (const T *)a, (const T *)b,
               (const T *)g, g_each, (T)norm, (T *)out);
  });
  KD_OR_FAIL(ok, "mse_loss_backward", kd);
  return dlc_check_launch("mse_loss_backward", device);
}

/* -- Embedding -------------------------------------------------------------------- */

/* out row i = weight row idx[i], copied in words of W */
template <class W>
__global__ void gather_kernel(int64_t n, int64_t words, const W *w, const int64_t *idx, W *out) {
  int64_t total = n * words;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (int64_t)blockDim.x * gridDim.x) {
    int64_t i = k / words, j = k % words;
    out[k] = w[idx[i] * words + j];
  }
}

/* out row i = w row idx[i] (rows of row_bytes); indices already checked. */
DLC_API int dlc_embedding(int device, int64_t n, int64_t row_bytes, const void *w,
                          const int64_t *idx, void *out) {
  if (n == 0 || row_bytes == 0) return 0;
  DLC_ON(device, "embedding");
  cudaStream_t st = dlc_stream(device);
  int sz = row_bytes % 8 == 0 ? 8 : row_bytes % 4 == 0 ? 4 : row_bytes % 2 == 0 ? 2 : 1;
  int64_t words = row_bytes / sz;
  unsigned nb = dlc_blocks(n * words, 256);
#define G(W)                                                                   \
  do {                                                                         \
    auto k = gather_kernel<W>;                                                 \
    DLC_LAUNCH(k, nb, 256, 0, st, n, words, (const W *)w, idx, (W *)out);      \
  } while (0)
  if (sz == 8) G(uint64_t);
  else if (sz == 4) G(uint32_t);
  else if (sz == 2) G(uint16_t);
  else G(uint8_t);
#undef G
  return dlc_check_launch("embedding", device);
}

/* Row v of gw: the sum of gout rows order[start[v] .. start[v + 1]) in
** that (position) order, so the result is deterministic. */
template <class T>
__global__ void scatter_kernel(int64_t V, int64_t D, int64_t padding_idx, int scale,
                               const int64_t *start, const int64_t *order, const T *gout, T *gw) {
  for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
    int64_t a = start[v], b = start[v + 1];
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      T s = 0;
      if (v != padding_idx)
        for (int64_t k = a; k < b; k++) s += gout[order[k] * D + j];
      if (scale && v != padding_idx && a != b) s /= (T)(b - a);
      gw[v * D + j] = s;
    }
  }
}

/* gw [V, D] (kd): row v sums gout rows order[start[v] .. start[v + 1]). */
DLC_API int dlc_embedding_backward(int device, int kd, int64_t V, int64_t D, int64_t padding_idx,
                                   int scale, const int64_t *start, const int64_t *order,
                                   const void *gout, void *gw) {
  if (V == 0 || D == 0) return 0;
  DLC_ON(device, "embedding_backward");
  int threads = D >= 256 ? 256 : D > 64 ? 128 : 32;
  unsigned nb = V < 65535 ? (unsigned)V : 65535u;
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    auto k = scatter_kernel<T>;
    DLC_LAUNCH(k, nb, threads, 0, dlc_stream(device), V, D, padding_idx, scale, start, order,
               (const T *)gout, (T *)gw);
  });
  KD_OR_FAIL(ok, "embedding_backward", kd);
  return dlc_check_launch("embedding_backward", device);
}
