/*
** attention.cu -- scaled dot-product attention on CUDA tensors, forward and
** backward, in the flash-attention manner: key and value tiles staged in
** shared memory, an online softmax per query row, no L x S matrix kept
** (the forward saves each row's logsumexp; the backward recomputes the
** probabilities tile by tile), causal tiles skipped.
**
** Layout: q [BH, L, E], k [BH, S, E], v [BH, S, Ev], out [BH, L, Ev], all
** contiguous in the compute dtype (float32 or float64); the op layer
** broadcasts batch and head dims and turns a boolean mask into an additive
** one (0 / -inf).  A row of 8 threads owns a query (or, in dK/dV, a key):
** each thread a slice of the head dim, dot products summed over the 8
** lanes by shuffles.  Head dims up to 128.  The backward is deterministic:
** dK/dV by key tiles and dQ by query tiles, no atomics.
*/
#include "nn_common.cuh"

namespace dlc_attn {

enum { G = 8, ROWS = 16, THREADS = G * ROWS, EMAX = 128, SL = EMAX / G };

/* keys (or queries) staged per tile: 32 KiB of shared memory either way */
template <class T> struct tile { enum { N = sizeof(T) == 4 ? 32 : 16 }; };

__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }

/* The sum of v over the row's 8 lanes, on each of them. */
template <class T> __device__ __forceinline__ T row_sum(T v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4, G);
  v += __shfl_xor_sync(0xffffffffu, v, 2, G);
  v += __shfl_xor_sync(0xffffffffu, v, 1, G);
  return v;
}

/* rows [r0, r1) of an [n, dim] matrix into sh[TK][EMAX] */
template <class T, int TK>
__device__ __forceinline__ void stage(T (*sh)[EMAX], const T *src, int64_t r0, int nr, int dim) {
  for (int x = threadIdx.x; x < nr * dim; x += THREADS) sh[x / dim][x % dim] = src[(r0 + x / dim) * dim + x % dim];
}

/* Keys a tile of ROWS queries sees: all, or (causal) up to its last
** query's index. */
__device__ __forceinline__ int64_t keys_seen(int64_t S, int causal) {
  int64_t last = (int64_t)(blockIdx.x + 1) * ROWS;
  return causal && last < S ? last : S;
}

/* The score of query i and key j: scale * q.k (qk: the row's sum) plus the
** mask; -inf where causal hides the key or the row or key is past the end. */
template <class T>
__device__ __forceinline__ T score(T qk, int64_t i, int64_t j, int64_t L, int64_t S, int causal,
                                   const T *mask, int64_t bh, int64_t mask_bh) {
  if (i >= L || j >= S || (causal && j > i)) return -INFINITY;
  return mask ? qk + mask[bh * mask_bh + i * S + j] : qk;
}

/* out, lse of a tile of ROWS queries of one (batch, head). */
template <class T>
__global__ void __launch_bounds__(THREADS)
fwd_kernel(int64_t L, int64_t S, int E, int Ev, T scale, int causal, const T *q, const T *k,
           const T *v, const T *mask, int64_t mask_bh, T *out, T *lse, int64_t bh0) {
  enum { TK = tile<T>::N };
  __shared__ T ks[TK][EMAX], vs[TK][EMAX];
  int64_t bh = bh0 + blockIdx.y, i = (int64_t)blockIdx.x * ROWS + threadIdx.x / G;
  int g = threadIdx.x % G;
  T qr[SL], acc[SL];
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    qr[t] = i < L && d < E ? q[(bh * L + i) * E + d] * scale : (T)0;
    acc[t] = 0;
  }
  T m = -INFINITY, l = 0;
  int64_t kend = keys_seen(S, causal);
  for (int64_t k0 = 0; k0 < kend; k0 += TK) {
    int nk = (int)(kend - k0 < (int64_t)TK ? kend - k0 : (int64_t)TK);
    __syncthreads();  /* the previous tile is read by every row */
    stage<T, TK>(ks, k + bh * S * E, k0, nk, E);
    stage<T, TK>(vs, v + bh * S * Ev, k0, nk, Ev);
    __syncthreads();
    for (int jj = 0; jj < nk; jj++) {
      T dot = 0;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        if (d < E) dot += qr[t] * ks[jj][d];
      }
      T s = score(row_sum(dot), i, k0 + jj, L, S, causal, mask, bh, mask_bh);
      T mn = s > m ? s : m;
      if (mn == -INFINITY) continue;  /* nothing seen yet in this row */
      T alpha = m_exp(m - mn), p = m_exp(s - mn);
      l = l * alpha + p;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        acc[t] = acc[t] * alpha + (d < Ev ? p * vs[jj][d] : (T)0);
      }
      m = mn;
    }
  }
  if (i >= L) return;
  /* a row with every key masked: 0 / 0 = NaN, as softmax over -inf gives */
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    if (d < Ev) out[(bh * L + i) * Ev + d] = l > 0 ? acc[t] / l : (T)NAN;
  }
  if (g == 0) lse[bh * L + i] = l > 0 ? m + m_log(l) : (T)-INFINITY;
}

/* dsum[i] = sum over d of dout[i, d] * out[i, d] */
template <class T>
__global__ void dsum_kernel(int64_t rows, int Ev, const T *dout, const T *out, T *dsum) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
    T s = 0;
    for (int d = 0; d < Ev; d++) s += dout[r * Ev + d] * out[r * Ev + d];
    dsum[r] = s;
  }
}

/* dK, dV of a tile of ROWS keys: every query that sees them, TQ at a time. */
template <class T>
__global__ void __launch_bounds__(THREADS)
dkv_kernel(int64_t L, int64_t S, int E, int Ev, T scale, int causal, const T *q, const T *k,
           const T *v, const T *mask, int64_t mask_bh, const T *dout, const T *lse,
           const T *dsum, T *dk, T *dv, int64_t bh0) {
  enum { TQ = tile<T>::N };
  __shared__ T qs[TQ][EMAX], dos[TQ][EMAX];
  __shared__ T ls[TQ], ds_[TQ];
  int64_t bh = bh0 + blockIdx.y, j = (int64_t)blockIdx.x * ROWS + threadIdx.x / G;
  int g = threadIdx.x % G;
  T kr[SL], vr[SL], gk[SL], gv[SL];
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    kr[t] = j < S && d < E ? k[(bh * S + j) * E + d] : (T)0;
    vr[t] = j < S && d < Ev ? v[(bh * S + j) * Ev + d] : (T)0;
    gk[t] = gv[t] = 0;
  }
  /* causal: queries before the tile's first key see none of it */
  int64_t i_first = causal ? (int64_t)blockIdx.x * ROWS : 0;
  for (int64_t i0 = i_first - i_first % TQ; i0 < L; i0 += TQ) {
    int nq = (int)(L - i0 < (int64_t)TQ ? L - i0 : (int64_t)TQ);
    __syncthreads();  /* the previous queries are read by every key */
    stage<T, TQ>(qs, q + bh * L * E, i0, nq, E);
    stage<T, TQ>(dos, dout + bh * L * Ev, i0, nq, Ev);
    for (int x = threadIdx.x; x < nq; x += THREADS) ls[x] = lse[bh * L + i0 + x], ds_[x] = dsum[bh * L + i0 + x];
    __syncthreads();
    for (int ii = 0; ii < nq; ii++) {
      T dot = 0, dp = 0;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        if (d < E) dot += qs[ii][d] * kr[t];
        if (d < Ev) dp += dos[ii][d] * vr[t];
      }
      T s = score(row_sum(dot) * scale, i0 + ii, j, L, S, causal, mask, bh, mask_bh);
      dp = row_sum(dp);
      if (s == -INFINITY) continue;
      T p = m_exp(s - ls[ii]), dsc = p * (dp - ds_[ii]) * scale;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        gv[t] += d < Ev ? p * dos[ii][d] : (T)0;
        gk[t] += d < E ? dsc * qs[ii][d] : (T)0;
      }
    }
  }
  if (j >= S) return;
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    if (d < E) dk[(bh * S + j) * E + d] = gk[t];
    if (d < Ev) dv[(bh * S + j) * Ev + d] = gv[t];
  }
}

/* dQ of a tile of ROWS queries: every key they see, TK at a time. */
template <class T>
__global__ void __launch_bounds__(THREADS)
dq_kernel(int64_t L, int64_t S, int E, int Ev, T scale, int causal, const T *q, const T *k,
          const T *v, const T *mask, int64_t mask_bh, const T *dout, const T *lse,
          const T *dsum, T *dq, int64_t bh0) {
  enum { TK = tile<T>::N };
  __shared__ T ks[TK][EMAX], vs[TK][EMAX];
  int64_t bh = bh0 + blockIdx.y, i = (int64_t)blockIdx.x * ROWS + threadIdx.x / G;
  int g = threadIdx.x % G;
  T qr[SL], dor[SL], gq[SL];
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    qr[t] = i < L && d < E ? q[(bh * L + i) * E + d] : (T)0;
    dor[t] = i < L && d < Ev ? dout[(bh * L + i) * Ev + d] : (T)0;
    gq[t] = 0;
  }
  T li = i < L ? lse[bh * L + i] : (T)0, di = i < L ? dsum[bh * L + i] : (T)0;
  int64_t kend = keys_seen(S, causal);
  for (int64_t k0 = 0; k0 < kend; k0 += TK) {
    int nk = (int)(kend - k0 < (int64_t)TK ? kend - k0 : (int64_t)TK);
    __syncthreads();  /* the previous tile is read by every row */
    stage<T, TK>(ks, k + bh * S * E, k0, nk, E);
    stage<T, TK>(vs, v + bh * S * Ev, k0, nk, Ev);
    __syncthreads();
    for (int jj = 0; jj < nk; jj++) {
      T dot = 0, dp = 0;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        if (d < E) dot += qr[t] * ks[jj][d];
        if (d < Ev) dp += dor[t] * vs[jj][d];
      }
      T s = score(row_sum(dot) * scale, i, k0 + jj, L, S, causal, mask, bh, mask_bh);
      dp = row_sum(dp);
      if (s == -INFINITY) continue;
      T dsc = m_exp(s - li) * (dp - di) * scale;
      for (int t = 0; t < SL; t++) {
        int d = g + G * t;
        gq[t] += d < E ? dsc * ks[jj][d] : (T)0;
      }
    }
  }
  if (i >= L) return;
  for (int t = 0; t < SL; t++) {
    int d = g + G * t;
    if (d < E) dq[(bh * L + i) * E + d] = gq[t];
  }
}

/* the grid's y dimension holds at most this many (batch, head) pairs */
static const int64_t BH_MAX = 65535;

static int check_dims(const char *what, int E, int Ev) {
  if (E > EMAX || Ev > EMAX || E < 1 || Ev < 1) {
    dlc_set_error("%s on CUDA: head dims E=%d, Ev=%d; the CUDA kernel takes 1 to %d", what, E, Ev,
                  (int)EMAX);
    return DL_EINVAL;
  }
  return 0;
}
}  // namespace dlc_attn

using namespace dlc_attn;

/* q [BH, L, E], k [BH, S, E], v [BH, S, Ev] contiguous in kd (float32/64),
** head dims 1-128; mask additive in kd, [L, S] per (batch, head) at mask +
** bh * mask_bh (mask_bh 0: one for all), or NULL; causal: row i sees keys
** j <= i.  Forward: out [BH, L, Ev] and lse [BH, L].  Backward: dsum
** [BH, L] scratch; dq, dk, dv all written. */
DLC_API int dlc_sdpa_forward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                             double scale, int causal, const void *q, const void *k, const void *v,
                             const void *mask, int64_t mask_bh, void *out, void *lse) {
  if (BH == 0 || L == 0) return 0;
  if (check_dims("scaled_dot_product_attention", E, Ev)) return DL_EINVAL;
  DLC_ON(device, "scaled_dot_product_attention");
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    auto kern = fwd_kernel<T>;
    for (int64_t b0 = 0; b0 < BH; b0 += BH_MAX) {
      dim3 grid((unsigned)((L + ROWS - 1) / ROWS), (unsigned)(BH - b0 < BH_MAX ? BH - b0 : BH_MAX));
      DLC_LAUNCH(kern, grid, THREADS, 0, dlc_stream(device), L, S, E, Ev, (T)scale, causal,
                 (const T *)q, (const T *)k, (const T *)v, (const T *)mask, mask_bh, (T *)out,
                 (T *)lse, b0);
    }
  });
  KD_OR_FAIL(ok, "scaled_dot_product_attention", kd);
  return dlc_check_launch("scaled_dot_product_attention", device);
}

DLC_API int dlc_sdpa_backward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                              double scale, int causal, const void *q, const void *k,
                              const void *v, const void *mask, int64_t mask_bh, const void *out,
                              const void *dout, const void *lse, void *dsum, void *dq, void *dk,
                              void *dv) {
  if (BH == 0) return 0;
  if (check_dims("scaled_dot_product_attention backward", E, Ev)) return DL_EINVAL;
  DLC_ON(device, "scaled_dot_product_attention backward");
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    auto ks = dsum_kernel<T>;
    DLC_LAUNCH(ks, dlc_blocks(BH * L, 256), 256, 0, dlc_stream(device), BH * L, Ev,
               (const T *)dout, (const T *)out, (T *)dsum);
    auto kkv = dkv_kernel<T>;
    auto kq = dq_kernel<T>;
    for (int64_t b0 = 0; b0 < BH; b0 += BH_MAX) {
      unsigned nbh = (unsigned)(BH - b0 < BH_MAX ? BH - b0 : BH_MAX);
      if (S > 0)
        DLC_LAUNCH(kkv, dim3((unsigned)((S + ROWS - 1) / ROWS), nbh), THREADS, 0, dlc_stream(device), L,
                   S, E, Ev, (T)scale, causal, (const T *)q, (const T *)k, (const T *)v,
                   (const T *)mask, mask_bh, (const T *)dout, (const T *)lse, (const T *)dsum,
                   (T *)dk, (T *)dv, b0);
      if (L > 0)
        DLC_LAUNCH(kq, dim3((unsigned)((L + ROWS - 1) / ROWS), nbh), THREADS, 0, dlc_stream(device), L,
                   S, E, Ev, (T)scale, causal, (const T *)q, (const T *)k, (const T *)v,
                   (const T *)mask, mask_bh, (const T *)dout, (const T *)lse, (const T *)dsum,
                   (T *)dq, b0);
    }
  });
  KD_OR_FAIL(ok, "scaled_dot_product_attention backward", kd);
  return dlc_check_launch("scaled_dot_product_attention backward", device);
}
