/*
** index.cu -- indexing, masks and creation on CUDA tensors, with the CPU's
** semantics (runtime/index.c, sort.c, tensor.c): index range checks that
** report a bad value, take (index_select, gather), put (scatter, with add
** by atomics), masked_fill, compaction (masked_select, nonzero), tril/triu
** and the arange/linspace ramp.
*/
#include "common.cuh"

/* Everything here in its own namespace: kernels and functors of the same
** name in another .cu file would otherwise merge at link time (template
** instances are weak symbols).  The launchers keep their C names. */
namespace dlc_index {

/* -- Result words ---------------------------------------------------------- */

/* w[0..2) (device memory the caller gives) set to init on the stream. */
static int words_init(int device, int64_t *w, int64_t a, int64_t b) {
  int64_t init[2] = {a, b};
  cudaError_t e = cudaMemcpyAsync(w, init, sizeof init, cudaMemcpyHostToDevice, dlc_stream(device));
  return e == cudaSuccess ? 0 : dlc_cuda_fail(e, "result words", device);
}

/* w[0..2) back on the host: waits for the stream. */
static int words_read(int device, const int64_t *w, int64_t *out) {
  cudaError_t e = cudaMemcpyAsync(out, w, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, dlc_stream(device));
  if (e == cudaSuccess) e = cudaStreamSynchronize(dlc_stream(device));
  return e == cudaSuccess ? 0 : dlc_cuda_fail(e, "reading back result words", device);
}

template <class I> __device__ __forceinline__ int64_t load_ix(const char *p) {
  return (int64_t) * (const I *)p;
}

/* -- Index range and min/max ----------------------------------------------- */

/* w[0]: set once to 1 by the first bad index seen, w[1]: its value. */
template <class I> struct range_f {
  int64_t size;
  unsigned long long *w;
  __device__ void operator()(char **p) const {
    int64_t v = load_ix<I>(p[0]);
    if ((v < 0 || v >= size) && atomicCAS(&w[0], 0ull, 1ull) == 0ull) w[1] = (unsigned long long)v;
  }
};

/* Checks the index it (one operand, int32 or int64, any layout) lies in
** [0, size): 0 when it does, 1 with *bad an offending value when not (both
** after a stream sync).  words: 2 int64 of device memory to work in. */
DLC_API int dlc_index_check(int device, const dlc_iter *it, int64_t size, int64_t *words,
                            int64_t *bad) {
  if (it->numel == 0) return 0;
  DLC_ON(device, "index check");
  int64_t got[2];
  int rc = words_init(device, words, 0, 0);
  if (rc) return rc;
  unsigned long long *u = (unsigned long long *)words;
  rc = it->dtype[0] == DL_INT64 ? dlc_run<1>("index check", device, *it, range_f<int64_t>{size, u})
                                : dlc_run<1>("index check", device, *it, range_f<int32_t>{size, u});
  if (rc || (rc = words_read(device, words, got))) return rc;
  if (!got[0]) return 0;
  *bad = got[1];
  return 1;
}

template <class I> struct minmax_f {
  long long *w;
  __device__ void operator()(char **p) const {
    long long v = (long long)load_ix<I>(p[0]);
    atomicMin(&w[0], v);
    atomicMax(&w[1], v);
  }
};

/* Smallest and largest value of a non-empty index (one operand), with
** words as dlc_index_check's; syncs. */
DLC_API int dlc_index_minmax(int device, const dlc_iter *it, int64_t *words, int64_t *lo,
                             int64_t *hi) {
  DLC_ON(device, "index min/max");
  int64_t got[2];
  int rc = words_init(device, words, INT64_MAX, INT64_MIN);
  if (rc) return rc;
  long long *l = (long long *)words;
  rc = it->dtype[0] == DL_INT64 ? dlc_run<1>("index min/max", device, *it, minmax_f<int64_t>{l})
                                : dlc_run<1>("index min/max", device, *it, minmax_f<int32_t>{l});
  if (rc || (rc = words_read(device, words, got))) return rc;
  *lo = got[0];
  *hi = got[1];
  return 0;
}

/* -- Take and put ------------------------------------------------------------ */

/* out = src[index]: p = {out, src with stride 0 along dim, index}. */
template <class W, class I> struct take_f {
  int64_t step;
  __device__ void operator()(char **p) const {
    *(W *)p[0] = *(const W *)(p[1] + load_ix<I>(p[2]) * step);
  }
};

template <class F> static int by_size(int es, F &&f) {
  switch (es) {
    case 8: f(uint64_t()); return 0;
    case 4: f(uint32_t()); return 0;
    case 2: f(uint16_t()); return 0;
    case 1: f(uint8_t()); return 0;
  }
  dlc_set_error("no element type of %d bytes", es);
  return DL_EINVAL;
}

/* out = src[index] (index_select, gather): it = {out, src with stride 0
** along dim, index}; step: src's stride along dim in bytes; es: element
** size. */
DLC_API int dlc_take(int device, const dlc_iter *it, int64_t step, int es) {
  int rc = 0;
  int bad = by_size(es, [&](auto tag) {
    typedef decltype(tag) W;
    rc = it->dtype[2] == DL_INT64 ? dlc_run<3>("take", device, *it, take_f<W, int64_t>{step})
                                  : dlc_run<3>("take", device, *it, take_f<W, int32_t>{step});
  });
  return bad ? bad : rc;
}

/* *p = f(*p) atomically for 1- and 2-byte T, by compare-and-swap on the
** aligned 32-bit word holding it (elements never straddle words). */
template <class T, class F> __device__ void atomic_narrow(T *p, F f) {
  static_assert(sizeof(T) <= 2, "narrow types only");
  uintptr_t a = (uintptr_t)p;
  unsigned *w = (unsigned *)(a & ~(uintptr_t)3);
  unsigned sh = (unsigned)(a & 3) * 8u, mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << sh;
  unsigned old = *w, assumed;
  do {
    assumed = old;
    unsigned bits = (assumed & mask) >> sh;
    T cur, nv;
    memcpy(&cur, &bits, sizeof(T));  /* little-endian: the low bytes */
    nv = f(cur);
    unsigned nb = 0;
    memcpy(&nb, &nv, sizeof(T));
    old = atomicCAS(w, assumed, (assumed & ~mask) | (nb << sh));
  } while (old != assumed);
}

/* dst[index] += src in T, wrapping for integers as the CPU does. */
template <class T> __device__ __forceinline__ void atomic_add_to(T *p, T x) {
  if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) {
    atomicAdd(p, x);
  } else if constexpr (std::is_same<T, int32_t>::value) {
    atomicAdd((unsigned *)p, (unsigned)x);
  } else if constexpr (std::is_same<T, int64_t>::value) {
    atomicAdd((unsigned long long *)p, (unsigned long long)x);
  } else if constexpr (std::is_same<T, bool>::value) {
    atomic_narrow(p, [x](bool c) { return (bool)(c || x); });
  } else if constexpr (std::is_same<T, uint8_t>::value) {
    atomic_narrow(p, [x](uint8_t c) { return (uint8_t)(c + x); });
  } else {  /* bf16, f16: through float, rounded once, as the CPU */
    atomic_narrow(p, [x](T c) { return cvt<T, float>(cvt<float, T>(c) + cvt<float, T>(x)); });
  }
}

/* p = {dst with stride 0 along dim, src, index}. */
template <class T, class I, bool ADD> struct put_f {
  int64_t step;
  __device__ void operator()(char **p) const {
    T *d = (T *)(p[0] + load_ix<I>(p[2]) * step);
    T x = *(const T *)p[1];
    if constexpr (ADD) atomic_add_to<T>(d, x);
    else *d = x;
  }
};

/* dst[index] = src (reduce 0; duplicate indices: one of them wins, as on
** PyTorch's CUDA) or += src (reduce 1, atomically in dtype): it = {dst with
** stride 0 along dim, src (or a scalar), index}. */
DLC_API int dlc_put(int device, const dlc_iter *it, int64_t step, int dtype, int reduce) {
  int rc = DL_EDTYPE;
  bool is64 = it->dtype[2] == DL_INT64;
  if (!reduce) {
    int es = dtype == DL_FLOAT64 || dtype == DL_INT64 ? 8
             : dtype == DL_FLOAT32 || dtype == DL_INT32 ? 4
             : dtype == DL_BFLOAT16 || dtype == DL_FLOAT16 ? 2 : 1;
    int bad = by_size(es, [&](auto tag) {
      typedef decltype(tag) W;
      rc = is64 ? dlc_run<3>("scatter", device, *it, put_f<W, int64_t, false>{step})
                : dlc_run<3>("scatter", device, *it, put_f<W, int32_t, false>{step});
    });
    return bad ? bad : rc;
  }
  if (!dlc_dispatch(dtype, [&](auto tag) {
        typedef decltype(tag) T;
        rc = is64 ? dlc_run<3>("scatter add", device, *it, put_f<T, int64_t, true>{step})
                  : dlc_run<3>("scatter add", device, *it, put_f<T, int32_t, true>{step});
      }))
    dlc_set_error("scatter add: unknown dtype %d", dtype);
  return rc;
}

/* -- masked_fill --------------------------------------------------------------- */

template <class W> struct mfill_f {
  W v;
  __device__ void operator()(char **p) const {
    if (*(const uint8_t *)p[1]) *(W *)p[0] = v;
  }
};

/* t = value where mask: it = {t, bool mask}; bytes: the value in t's dtype
** (es bytes of it). */
DLC_API int dlc_masked_fill(int device, const dlc_iter *it, uint64_t bytes, int es) {
  int rc = 0;
  int bad = by_size(es, [&](auto tag) {
    typedef decltype(tag) W;
    W v;
    memcpy(&v, &bytes, sizeof v);
    rc = dlc_run<2>("masked_fill", device, *it, mfill_f<W>{v});
  });
  return bad ? bad : rc;
}

/* -- Compaction: masked_select and nonzero ----------------------------------------- */

enum { CT = 256, CPT = 4, CHUNK = CT * CPT };

/* A shape passed by value to a kernel. */
struct dlc_shape {
  int64_t s[DLC_MAX_DIMS];
};

/* counts[b] = set bytes of mask in chunk b. */
__global__ void count_kernel(const uint8_t *m, int64_t n, int64_t *counts) {
  __shared__ int s[CT];
  int64_t base = (int64_t)blockIdx.x * CHUNK;
  int c = 0;
  for (int k = 0; k < CPT; k++) {  /* coalesced: thread t reads t, t + CT, ... */
    int64_t i = base + threadIdx.x + (int64_t)k * CT;
    if (i < n && m[i]) c++;
  }
  s[threadIdx.x] = c;
  __syncthreads();
  for (int w = CT / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = s[0];
}

/* Inclusive scan of s[0..CT) by one block. */
template <class T> __device__ void block_scan(T *s) {
  for (int w = 1; w < CT; w <<= 1) {
    T v = (int)threadIdx.x >= w ? s[threadIdx.x - w] : 0;
    __syncthreads();
    s[threadIdx.x] += v;
    __syncthreads();
  }
}

/* counts[0..nb) to exclusive prefix sums, counts[nb] the total: one block. */
__global__ void scan_kernel(int64_t *counts, int64_t nb) {
  __shared__ int64_t s[CT];
  int64_t carry = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += CT) {
    int64_t b = b0 + threadIdx.x;
    int64_t c = b < nb ? counts[b] : 0;
    s[threadIdx.x] = c;
    __syncthreads();
    block_scan(s);
    if (b < nb) counts[b] = carry + s[threadIdx.x] - c;
    int64_t tile = s[CT - 1];
    __syncthreads();
    carry += tile;
  }
  if (threadIdx.x == 0) counts[nb] = carry;
}

/* Chunk b's set positions written in order from offsets[b]: the values of
** src (es bytes each) or, without src, their coordinates in shape. */
template <class W> __global__ void write_kernel(const uint8_t *m, int64_t n, const int64_t *offsets,
                                               const W *src, int nd, dlc_shape shape, int64_t *coords,
                                               W *out) {
  __shared__ int s[CT];
  int64_t first = (int64_t)blockIdx.x * CHUNK + (int64_t)threadIdx.x * CPT;  /* a run per thread keeps order */
  int c = 0;
  for (int k = 0; k < CPT; k++) c += first + k < n && m[first + k];
  s[threadIdx.x] = c;
  __syncthreads();
  block_scan(s);
  int64_t pos = offsets[blockIdx.x] + s[threadIdx.x] - c;
  for (int k = 0; k < CPT; k++) {
    int64_t i = first + k;
    if (i >= n || !m[i]) continue;
    if (src) {
      out[pos] = src[i];
    } else {
      int64_t r = i;
      for (int d = nd - 1; d >= 0; d--) {
        coords[pos * nd + d] = r % shape.s[d];
        r /= shape.s[d];
      }
    }
    pos++;
  }
}

/* Compaction of a contiguous bool mask of n bytes: counts the set bytes
** into scratch (ceil(n / 1024) + 1 int64 of device memory) and returns
** their number in *total (after a stream sync). */
DLC_API int dlc_compact_count(int device, const uint8_t *mask, int64_t n, int64_t *scratch_nb1,
                              int64_t *total) {
  *total = 0;
  if (n == 0) return 0;
  DLC_ON(device, "compaction");
  int64_t nb = (n + CHUNK - 1) / CHUNK;
  cudaStream_t st = dlc_stream(device);
  auto k1 = count_kernel;
  DLC_LAUNCH(k1, (unsigned)nb, CT, 0, st, mask, n, scratch_nb1);
  auto k2 = scan_kernel;
  DLC_LAUNCH(k2, 1, CT, 0, st, scratch_nb1, nb);
  int rc = dlc_check_launch("compaction", device);
  if (rc) return rc;
  cudaError_t e = cudaMemcpyAsync(total, scratch_nb1 + nb, sizeof(int64_t), cudaMemcpyDeviceToHost, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  return e == cudaSuccess ? 0 : dlc_cuda_fail(e, "compaction count", device);
}

/* Then writes, in order, the elements of contiguous src (es bytes each)
** where mask is set into out; without src, their coordinates in shape
** (nd dims, row-major) as int64 rows of nd (nonzero). */
DLC_API int dlc_compact_write(int device, const uint8_t *mask, int64_t n, const int64_t *offsets,
                              const char *src, int es, int nd, const int64_t *shape, char *out) {
  if (n == 0) return 0;
  DLC_ON(device, "compaction");
  unsigned nb = (unsigned)((n + CHUNK - 1) / CHUNK);
  cudaStream_t st = dlc_stream(device);
  dlc_shape sh;
  for (int d = 0; d < DLC_MAX_DIMS; d++) sh.s[d] = d < nd ? shape[d] : 1;
  if (!src) {
    auto k = write_kernel<uint64_t>;
    DLC_LAUNCH(k, nb, CT, 0, st, mask, n, offsets, (const uint64_t *)NULL, nd, sh, (int64_t *)out,
               (uint64_t *)NULL);
    return dlc_check_launch("nonzero", device);
  }
  int bad = by_size(es, [&](auto tag) {
    typedef decltype(tag) W;
    auto k = write_kernel<W>;
    DLC_LAUNCH(k, nb, CT, 0, st, mask, n, offsets, (const W *)src, nd, sh, (int64_t *)NULL, (W *)out);
  });
  return bad ? bad : dlc_check_launch("masked_select", device);
}

/* -- tril, triu ------------------------------------------------------------------ */

/* Zeroes, in contiguous p of B matrices R x C, what lies below (upper) or
** above (!upper) diagonal diag. */
template <class W>
__global__ void tri_kernel(W *p, int64_t total, int64_t R, int64_t C, int64_t diag, int upper) {
  int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t col = i % C, row = (i / C) % R;
    if (upper ? col - row < diag : col - row > diag) p[i] = 0;
  }
}

/* Zeroes, in contiguous p (B matrices R x C of es bytes), the elements
** below diagonal diag (upper: triu) or above it (tril). */
DLC_API int dlc_tri(int device, char *p, int64_t B, int64_t R, int64_t C, int64_t diag, int upper,
                    int es) {
  int64_t total = B * R * C;
  if (total == 0) return 0;
  DLC_ON(device, upper ? "triu" : "tril");
  int bad = by_size(es, [&](auto tag) {
    typedef decltype(tag) W;
    auto k = tri_kernel<W>;
    DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), (W *)p, total, R, C, diag, upper);
  });
  return bad ? bad : dlc_check_launch(upper ? "triu" : "tril", device);
}

/* -- arange, linspace -------------------------------------------------------------- */

/* store_double (dtype.c) on the device: integers saturate, uint8 wraps. */
__device__ __forceinline__ int64_t sat64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

template <class T> __device__ __forceinline__ T store_as(double v) {
  if constexpr (std::is_same<T, int64_t>::value) return sat64(v);
  else if constexpr (std::is_same<T, int32_t>::value) {
    if (!(v == v)) return 0;
    return v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
  } else if constexpr (std::is_same<T, uint8_t>::value) return (uint8_t)((uint64_t)sat64(v) & 0xff);
  else if constexpr (std::is_same<T, bool>::value) return v != 0;
  else if constexpr (std::is_same<T, float>::value || std::is_same<T, double>::value) return (T)v;
  else return cvt<T, float>((float)v);
}

template <class T>
__global__ void ramp_kernel(T *out, int64_t n, double start, double step, double end, int64_t split) {
  int64_t stride = (int64_t)blockDim.x * gridDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = store_as<T>(i < split ? start + (double)i * step : end - step * (double)(n - 1 - i));
}

/* Contiguous out[i] = i < split ? start + i * step : end - (n - 1 - i) * step,
** stored in dtype as store_double does (arange: split = n; linspace). */
DLC_API int dlc_ramp(int device, char *out, int dtype, int64_t n, double start, double step, double end,
                     int64_t split) {
  if (n == 0) return 0;
  DLC_ON(device, "ramp");
  if (!dlc_dispatch(dtype, [&](auto tag) {
        typedef decltype(tag) T;
        auto k = ramp_kernel<T>;
        DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), (T *)out, n, start, step, end, split);
      })) {
    dlc_set_error("ramp: unknown dtype %d", dtype);
    return DL_EDTYPE;
  }
  return dlc_check_launch("ramp", device);
}

}  // namespace dlc_index
