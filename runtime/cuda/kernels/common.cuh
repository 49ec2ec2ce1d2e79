/*
** common.cuh -- what every kernel file shares: exporting launchers,
** launching kernels (the same source under nvcc and the CPU emulator),
** errors, dtypes, and the offsets of an elementwise loop.
*/
#ifndef DLC_COMMON_CUH
#define DLC_COMMON_CUH

#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ddplua.h"
#include "cuda/dlc.h"

/* Launchers: C linkage, hidden; the library exports one symbol, the table
** of them all (api.cu's dlc_api_get). */
#define DLC_API extern "C" __attribute__((visibility("hidden")))

/* kernel<<<grid, block, smem, stream>>>(args) -- spelled so g++ can
** build the emulator from the same line; `k` must be one name (take a
** template instance into a variable first). */
#ifdef DLC_EMU
#define DLC_LAUNCH(k, grid, block, smem, stream, ...) \
  dlc_emu::launch((grid), (block), (smem), (stream), reinterpret_cast<const void *>(k), [=]() { k(__VA_ARGS__); })
#else
#define DLC_LAUNCH(k, grid, block, smem, stream, ...) \
  k<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#endif

/* Dynamic shared memory as a T array. */
template <class T> __device__ __forceinline__ T *dyn_smem() {
#ifdef DLC_EMU
  return reinterpret_cast<T *>(dlc_emu::dyn_smem);
#else
  extern __shared__ __align__(16) unsigned char dlc_smem_[];
  return reinterpret_cast<T *>(dlc_smem_);
#endif
}

/* -- Errors: one thread-local message, read through dlc_last_error ------- */

void dlc_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Sets the message from e and returns DL_ENOMEM or DL_EDEVICE. */
int dlc_cuda_fail(cudaError_t e, const char *what, int device);
/* After launches: the launch's own error, if any. */
int dlc_check_launch(const char *what, int device);

/* Makes `device` current for this scope and puts the previous one back. */
struct dlc_on_device {
  int prev = -1;
  cudaError_t e;
  explicit dlc_on_device(int device) {
    e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != device) e = cudaSetDevice(device);
  }
  ~dlc_on_device() {
    int now = -1;
    if (prev >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev) cudaSetDevice(prev);
  }
};

#define DLC_ON(device, what)                                          \
  dlc_on_device on_(device);                                          \
  if (on_.e != cudaSuccess) return dlc_cuda_fail(on_.e, what, device)

/* The stream every kernel and cuBLAS call of `device` runs on. */
cudaStream_t dlc_stream(int device);
/* Blocks of `threads` for n elements, grid-stride beyond a few waves. */
unsigned dlc_blocks(int64_t n, int threads);

/* -- Dtypes ---------------------------------------------------------------- */

typedef __nv_bfloat16 bf16_t;
typedef __half f16_t;

/* Float math of the half types goes through float, as on the CPU. */
template <class T> struct acc_of { typedef T type; };
template <> struct acc_of<bf16_t> { typedef float type; };
template <> struct acc_of<f16_t> { typedef float type; };

template <class D, class S> __device__ __forceinline__ D cvt(S x) { return (D)x; }
template <> __device__ __forceinline__ float cvt<float, bf16_t>(bf16_t x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float cvt<float, f16_t>(f16_t x) { return __half2float(x); }
template <> __device__ __forceinline__ bf16_t cvt<bf16_t, float>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ f16_t cvt<f16_t, float>(float x) { return __float2half(x); }

/* Any dtype to any: half types through float, bool as != 0. */
template <class D, class S> __device__ __forceinline__ D convert(S x) {
  typedef typename acc_of<S>::type SA;
  typedef typename acc_of<D>::type DA;
  SA v = cvt<SA, S>(x);
  if constexpr (std::is_same<D, bool>::value) return v != (SA)0;
  else return cvt<D, DA>((DA)v);
}

/* f(T{}) with T the C++ type of dtype; false for an unknown dtype. */
template <class F> bool dlc_dispatch(int dtype, F &&f) {
  switch (dtype) {
    case DL_FLOAT32: f(float()); return true;
    case DL_FLOAT64: f(double()); return true;
    case DL_INT32: f(int32_t()); return true;
    case DL_INT64: f(int64_t()); return true;
    case DL_UINT8: f(uint8_t()); return true;
    case DL_BOOL: f(bool()); return true;
    case DL_BFLOAT16: f(bf16_t()); return true;
    case DL_FLOAT16: f(f16_t()); return true;
  }
  return false;
}

/* -- Elementwise loops ------------------------------------------------------- */

/* Pointers to element i of every operand.  IDX is int32_t when numel and
** every offset fit (cheaper division), else int64_t. */
template <int N, class IDX>
__device__ __forceinline__ void dlc_offsets(const dlc_iter &it, char *const *base, IDX i,
                                            char **p) {
  if (it.ndim <= 1) {
#pragma unroll
    for (int k = 0; k < N; k++) p[k] = base[k] + (int64_t)i * it.strides[k][0];
    return;
  }
  IDX off[N];
#pragma unroll
  for (int k = 0; k < N; k++) off[k] = 0;
  for (int d = 0; d < it.ndim; d++) {
    IDX sz = (IDX)it.shape[d];
    IDX c = i % sz;
    i /= sz;
#pragma unroll
    for (int k = 0; k < N; k++) off[k] += c * (IDX)it.strides[k][d];
  }
#pragma unroll
  for (int k = 0; k < N; k++) p[k] = base[k] + off[k];
}

/* f(p) for every element, p[k] pointing at operand k's element. */
template <int N, class IDX, class F>
__global__ void dlc_elementwise_kernel(dlc_iter it, F f) {
  uint64_t sc[N];
  char *base[N];
#pragma unroll
  for (int k = 0; k < N; k++) {
    sc[k] = it.scalar[k];
    base[k] = (it.scalar_mask >> k & 1u) ? (char *)&sc[k] : it.data[k];
  }
  IDX stride = (IDX)blockDim.x * gridDim.x;
  for (IDX i = (IDX)blockIdx.x * blockDim.x + threadIdx.x; i < (IDX)it.numel; i += stride) {
    char *p[N];
    dlc_offsets<N, IDX>(it, base, i, p);
    f(p);
  }
}

/* True when every byte offset of the loop fits in int32. */
bool dlc_iter_fits32(const dlc_iter &it);

template <int N, class F> int dlc_run(const char *what, int device, const dlc_iter &it, F f) {
  if (it.numel == 0) return 0;
  DLC_ON(device, what);
  const int threads = 256;
  unsigned blocks = dlc_blocks(it.numel, threads);
  if (dlc_iter_fits32(it)) {
    auto k = dlc_elementwise_kernel<N, int32_t, F>;
    DLC_LAUNCH(k, blocks, threads, 0, dlc_stream(device), it, f);
  } else {
    auto k = dlc_elementwise_kernel<N, int64_t, F>;
    DLC_LAUNCH(k, blocks, threads, 0, dlc_stream(device), it, f);
  }
  return dlc_check_launch(what, device);
}

#endif
