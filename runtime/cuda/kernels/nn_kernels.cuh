/*
** nn_kernels.cuh -- what the conv and pooling kernel files share: the
** grid-stride loop and the float32/float64 dispatch of their launchers
** (static, so each file keeps its own instances).
*/
#ifndef DLC_NN_KERNELS_CUH
#define DLC_NN_KERNELS_CUH

#include "common.cuh"

#define GRID_STRIDE(i, total)                                                        \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (total); \
       i += (int64_t)blockDim.x * gridDim.x)

/* f(T{}) for the dtype conv and pooling compute in (nn.h: nn_kdtype), on
** `device`; then the launches' own error. */
template <class F> static int float_launch(int device, int dtype, const char *what, F &&f) {
  DLC_ON(device, what);
  if (dtype == DL_FLOAT32) f(float());
  else if (dtype == DL_FLOAT64) f(double());
  else {
    dlc_set_error("%s: dtype %d is neither float32 nor float64", what, dtype);
    return DL_EDTYPE;
  }
  return dlc_check_launch(what, device);
}

#endif
