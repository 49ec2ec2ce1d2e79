/*
** random.cu -- the Philox4x32-10 stream of runtime/core/random.c on CUDA:
** uniform, normal and integer fills and dropout masks.  Element i of a
** call comes from counter block base + i / per-block with the CPU's very
** mapping, so a seed gives the same numbers on either device.
*/
#include "nn_common.cuh"
#include "core/philox.h"

/* a + s * v rounded twice, as the CPU computes it: nvcc would fuse it
** into one fma and the last bit could differ from the CPU's number. */
__device__ __forceinline__ double affine_rn(double a, double s, double v) {
#ifdef DLC_EMU
  return a + s * v;  /* g++ builds in ISO mode: no contraction */
#else
  return __dadd_rn(a, __dmul_rn(s, v));
#endif
}

/* kind: 0 uniform in [a, b), 1 normal (mean a, std b), 2 integers
** low + r % range.  One thread per counter block. */
template <class T>
__global__ void philox_fill_kernel(int kind, int64_t n, T *out, uint64_t seed, uint64_t base,
                                   double a, double b, int64_t low, uint64_t range) {
  const int pb = std::is_same<T, float>::value ? 4 : 2;
  int64_t blocks = (n + pb - 1) / pb;
  for (int64_t blk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; blk < blocks;
       blk += (int64_t)blockDim.x * gridDim.x) {
    uint32_t w[4];
    double v[4];
    philox(seed, base + (uint64_t)blk, w);
    if constexpr (std::is_same<T, int64_t>::value) {
      for (int j = 0; j < 2; j++) {
        uint64_t r = ((uint64_t)w[2 * j] << 32) | w[2 * j + 1];
        int64_t i = blk * 2 + j;
        if (i < n) out[i] = low + (int64_t)(r % range);
      }
      continue;
    } else {
      if (pb == 4) {
        for (int j = 0; j < 4; j++) v[j] = philox_unit24(w[j]);
      } else {
        v[0] = philox_unit53(w[0], w[1]);
        v[1] = philox_unit53(w[2], w[3]);
      }
      if (kind == 1) {
        for (int j = 0; j < pb; j += 2) {
          double r = sqrt(-2.0 * log(1.0 - v[j])), th = 2.0 * 3.14159265358979323846 * v[j + 1];
          v[j] = a + b * r * cos(th);
          v[j + 1] = a + b * r * sin(th);
        }
      } else {
        for (int j = 0; j < pb; j++) v[j] = affine_rn(a, b - a, v[j]);
      }
      for (int j = 0; j < pb; j++) {
        int64_t i = blk * pb + j;
        if (i < n) out[i] = (T)v[j];
      }
    }
  }
}

/* out: n contiguous float32, float64 or int64 (dtype); counter blocks
** base.. of seed, as random.c's generate(). */
DLC_API int dlc_philox_fill(int device, int kind, int dtype, int64_t n, void *out, uint64_t seed,
                            uint64_t base, double a, double b, int64_t low, uint64_t range) {
  if (n == 0) return 0;
  DLC_ON(device, "random fill");
  cudaStream_t st = dlc_stream(device);
  int pb = dtype == DL_FLOAT32 ? 4 : 2;
  unsigned nb = dlc_blocks((n + pb - 1) / pb, 256);
  if (dtype == DL_FLOAT32) {
    auto k = philox_fill_kernel<float>;
    DLC_LAUNCH(k, nb, 256, 0, st, kind, n, (float *)out, seed, base, a, b, low, range);
  } else if (dtype == DL_FLOAT64) {
    auto k = philox_fill_kernel<double>;
    DLC_LAUNCH(k, nb, 256, 0, st, kind, n, (double *)out, seed, base, a, b, low, range);
  } else if (dtype == DL_INT64) {
    auto k = philox_fill_kernel<int64_t>;
    DLC_LAUNCH(k, nb, 256, 0, st, kind, n, (int64_t *)out, seed, base, a, b, low, range);
  } else {
    dlc_set_error("random fill has no CUDA kernel for dtype %d", dtype);
    return DL_EDTYPE;
  }
  return dlc_check_launch("random fill", device);
}

/* -- Dropout ------------------------------------------------------------------- */

/* value i keeps when the float32 uniform rand() gives at i is below keep */
template <class T>
__global__ void dropout_kernel(int64_t n, const T *x, T *out, uint8_t *mask, uint64_t seed,
                               uint64_t base, double keep, T scale) {
  int64_t blocks = (n + 3) / 4;
  for (int64_t blk = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; blk < blocks;
       blk += (int64_t)blockDim.x * gridDim.x) {
    uint32_t w[4];
    philox(seed, base + (uint64_t)blk, w);
    for (int j = 0; j < 4; j++) {
      int64_t i = blk * 4 + j;
      if (i >= n) break;
      double u = philox_unit24(w[j]);
      uint8_t m = u < keep;
      mask[i] = m;
      out[i] = (x[i] * (T)m) * scale;
    }
  }
}

DLC_API int dlc_dropout(int device, int kd, int64_t n, const void *x, void *out, uint8_t *mask,
                        uint64_t seed, uint64_t base, double keep, double scale) {
  if (n == 0) return 0;
  DLC_ON(device, "dropout");
  unsigned nb = dlc_blocks((n + 3) / 4, 256);
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    auto k = dropout_kernel<T>;
    DLC_LAUNCH(k, nb, 256, 0, dlc_stream(device), n, (const T *)x, (T *)out, mask, seed, base,
               keep, (T)scale);
  });
  KD_OR_FAIL(ok, "dropout", kd);
  return dlc_check_launch("dropout", device);
}

template <class T>
__global__ void dropout_bwd_kernel(int64_t n, const T *g, const uint8_t *mask, T scale, T *out) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x)
    out[i] = (g[i] * (T)(mask[i] != 0)) * scale;
}

DLC_API int dlc_dropout_backward(int device, int kd, int64_t n, const void *g,
                                 const uint8_t *mask, double scale, void *out) {
  if (n == 0) return 0;
  DLC_ON(device, "dropout_backward");
  bool ok = dlc_dispatch_kd(kd, [&](auto tag) {
    typedef decltype(tag) T;
    auto k = dropout_bwd_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), n, (const T *)g, mask,
               (T)scale, (T *)out);
  });
  KD_OR_FAIL(ok, "dropout_backward", kd);
  return dlc_check_launch("dropout_backward", device);
}
