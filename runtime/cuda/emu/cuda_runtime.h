/*
** cuda_runtime.h (emulator) -- the part of the CUDA runtime API our .cu
** files use, for building them with g++ into libddplua_cudaemu.so.
** Kernels run on the CPU, one block after another, each thread of a block
** a fiber (emu.cc), so __syncthreads, shared memory and warp shuffles keep
** their meaning.  "Device" memory is host memory.  This lets CI, which has
** no GPU, run every kernel's indexing and every cuBLAS call's layout.
*/
#ifndef DLC_EMU_CUDA_RUNTIME_H
#define DLC_EMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define DLC_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__ static

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719
} cudaError_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
} cudaMemcpyKind;

struct dlc_emu_stream;
struct dlc_emu_event;
typedef struct dlc_emu_stream *cudaStream_t;
typedef struct dlc_emu_event *cudaEvent_t;
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
#define cudaHostAllocDefault 0
#define cudaStreamLegacy ((cudaStream_t)0)
#define cudaStreamPerThread ((cudaStream_t)0)

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount, maxThreadsPerBlock;
  size_t sharedMemPerBlock;
};

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int d);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t n);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k,
                            cudaStream_t st = 0);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st = 0);
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int prio);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaFuncSetAttribute(const void *f, int attr, int v);
const char *cudaGetErrorName(cudaError_t e);
const char *cudaGetErrorString(cudaError_t e);
#define cudaDevAttrMultiProcessorCount 16
#define cudaFuncAttributeMaxDynamicSharedMemorySize 8

/* -- Kernel side ---------------------------------------------------------- */

namespace dlc_emu {
/* tid: threadIdx; idx: the thread's linear index in its block. */
struct fiber_state { uint3 tid; int idx; };
extern thread_local fiber_state *cur;
extern thread_local uint3 block_idx;
extern thread_local dim3 block_dim, grid_dim;
extern thread_local unsigned char *dyn_smem;
/* Not inline: each records its caller (the kernel's barrier) as the site
** the race checker names for a divergent barrier. */
__attribute__((noinline)) void syncthreads();
__attribute__((noinline)) void syncwarp();
/* An atomic read-modify-write of n bytes at p, for the race checker
** (atomics never race with each other). */
void atomic_access(const void *p, size_t n, const void *pc);
/* Swaps 8 bytes among the lanes of the calling warp. */
uint64_t shfl(uint64_t v, int mode, int arg, int width);
/* kernel: the function body calls, for the race checker's reports. */
void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t st, const void *kernel,
            const std::function<void()> &body);
template <class T> T shfl_t(T v, int mode, int arg, int width) {
  uint64_t u = 0;
  memcpy(&u, &v, sizeof v);
  u = shfl(u, mode, arg, width);
  T r;
  memcpy(&r, &u, sizeof r);
  return r;
}
}  // namespace dlc_emu

#define threadIdx (dlc_emu::cur->tid)
#define blockIdx (dlc_emu::block_idx)
#define blockDim (dlc_emu::block_dim)
#define gridDim (dlc_emu::grid_dim)
#define warpSize 32

#define __syncthreads() dlc_emu::syncthreads()
#define __syncwarp(...) dlc_emu::syncwarp()
template <class T> T __shfl_down_sync(unsigned, T v, int d, int w = 32) { return dlc_emu::shfl_t(v, 0, d, w); }
template <class T> T __shfl_up_sync(unsigned, T v, int d, int w = 32) { return dlc_emu::shfl_t(v, 1, d, w); }
template <class T> T __shfl_xor_sync(unsigned, T v, int m, int w = 32) { return dlc_emu::shfl_t(v, 2, m, w); }
template <class T> T __shfl_sync(unsigned, T v, int l, int w = 32) { return dlc_emu::shfl_t(v, 3, l, w); }

/* Blocks run one after another on one thread: atomics need no lock.  In
** the race checker's build (DLC_EMU_RACE: the kernels compiled with
** -fsanitize=thread, every load and store reported to racecheck.cc) they
** are left uninstrumented and reported as one atomic access instead, so
** two threads' atomics on a shared word are not called a race. */
#ifdef DLC_EMU_RACE
#define DLC_EMU_ATOMIC __attribute__((noinline, no_sanitize_thread))
#define DLC_EMU_ATOMIC_NOTE(p) dlc_emu::atomic_access(p, sizeof *p, __builtin_return_address(0))
#else
#define DLC_EMU_ATOMIC inline
#define DLC_EMU_ATOMIC_NOTE(p) (void)0
#endif
template <class T> DLC_EMU_ATOMIC T atomicAdd(T *p, T v) { DLC_EMU_ATOMIC_NOTE(p); T o = *p; *p = o + v; return o; }
template <class T> DLC_EMU_ATOMIC T atomicMax(T *p, T v) { DLC_EMU_ATOMIC_NOTE(p); T o = *p; if (v > o) *p = v; return o; }
template <class T> DLC_EMU_ATOMIC T atomicMin(T *p, T v) { DLC_EMU_ATOMIC_NOTE(p); T o = *p; if (v < o) *p = v; return o; }
template <class T> DLC_EMU_ATOMIC T atomicExch(T *p, T v) { DLC_EMU_ATOMIC_NOTE(p); T o = *p; *p = v; return o; }
template <class T> DLC_EMU_ATOMIC T atomicCAS(T *p, T c, T v) { DLC_EMU_ATOMIC_NOTE(p); T o = *p; if (o == c) *p = v; return o; }
template <class T> inline T __ldg(const T *p) { return *p; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

#endif
