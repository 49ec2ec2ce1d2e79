/*
** nn_common.cuh -- what the nn, random and optim kernels share: warp and
** block sums in double (the CPU reduces in double too), storing a double
** into a float tensor of any float dtype, and the float-only dispatch.
*/
#ifndef DLC_NN_COMMON_CUH
#define DLC_NN_COMMON_CUH

#include "common.cuh"

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Sum of v over the block (blockDim.x a multiple of 32), on every thread. */
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double part[32];
  __shared__ double total;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  /* an earlier call may still be reading part/total */
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    double s = lane < nw ? part[lane] : 0.0;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

/* out[i] = v in dtype (float32, float64, bfloat16, float16). */
__device__ __forceinline__ void store_as(void *out, int dtype, int64_t i, double v) {
  switch (dtype) {
    case DL_FLOAT32: ((float *)out)[i] = (float)v; break;
    case DL_FLOAT64: ((double *)out)[i] = v; break;
    case DL_BFLOAT16: ((bf16_t *)out)[i] = cvt<bf16_t, float>((float)v); break;
    case DL_FLOAT16: ((f16_t *)out)[i] = cvt<f16_t, float>((float)v); break;
  }
}

/* f(T{}) for the compute dtypes float32 and float64; false otherwise. */
template <class F> bool dlc_dispatch_kd(int dtype, F &&f) {
  if (dtype == DL_FLOAT32) { f(float()); return true; }
  if (dtype == DL_FLOAT64) { f(double()); return true; }
  return false;
}

#define KD_OR_FAIL(ok, what, dtype)                                           \
  if (!(ok)) {                                                                \
    dlc_set_error("%s has no CUDA kernel for dtype %d", what, dtype);         \
    return DL_EDTYPE;                                                         \
  }

#endif
