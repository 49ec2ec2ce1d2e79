/* common.cu -- errors, streams and launch sizes shared by the kernel files. */
#include <stdarg.h>

#include "common.cuh"

static thread_local char last_err[1024];

void dlc_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_err, sizeof last_err, fmt, ap);
  va_end(ap);
}

DLC_API const char *dlc_last_error(void) { return last_err; }

int dlc_cuda_fail(cudaError_t e, const char *what, int device) {
  dlc_set_error("%s on cuda:%d: %s: %s", what, device, cudaGetErrorName(e), cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_EDEVICE;
}

int dlc_check_launch(const char *what, int device) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : dlc_cuda_fail(e, what, device);
}

/* The legacy default stream: every kernel, copy and cuBLAS call of a
** device is ordered after the previous one, which the caching allocator
** (one stream) and the host code (reading results after a copy) rely on.
** NCCL runs on a stream of its own, ordered against this one by events. */
cudaStream_t dlc_stream(int device) {
  (void)device;
  return 0;
}

unsigned dlc_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  /* enough waves for any current GPU; a grid-stride loop does the rest.
  ** The emulator runs blocks one by one: fewer, longer-striding blocks are
  ** faster there, and exercise the grid-stride loops harder. */
#ifdef DLC_EMU
  const int64_t cap = 8;
#else
  const int64_t cap = 132 * 32;
#endif
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

bool dlc_iter_fits32(const dlc_iter &it) {
  if (it.numel > INT32_MAX / 2) return false;
  for (int k = 0; k < it.nops; k++) {
    int64_t span = 0;
    for (int d = 0; d < it.ndim; d++) {
      int64_t s = it.strides[k][d];
      span += (s < 0 ? -s : s) * (it.shape[d] - 1);
    }
    if (span > INT32_MAX / 2) return false;
  }
  return true;
}
