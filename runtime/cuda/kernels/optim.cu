/*
** optim.cu -- the fused optimizer steps of runtime/nn/optim.c on CUDA: one
** kernel per parameter for SGD (momentum, dampening, Nesterov, weight
** decay) and Adam/AdamW (amsgrad), with the CPU's arithmetic in the
** parameter's dtype, step by step in the same order.
*/
#include "nn_common.cuh"

template <class T>
__global__ void sgd_kernel(int64_t n, T *p, const T *g, T *buf, T lr, T mom, T damp1, T wd,
                           int use_wd, int nesterov, int first, int maximize) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    T d = maximize ? -g[i] : g[i];
    if (use_wd) d = d + p[i] * wd;
    if (buf) {
      T b = first ? d : buf[i] * mom + d * damp1;
      buf[i] = b;
      d = nesterov ? d + b * mom : b;
    }
    p[i] = p[i] + d * -lr;
  }
}

DLC_API int dlc_sgd(int device, int dtype, int64_t n, void *p, const void *g, void *buf,
                    double lr, double momentum, double dampening, double wd, int nesterov,
                    int first, int maximize) {
  if (n == 0) return 0;
  DLC_ON(device, "sgd");
  bool ok = dlc_dispatch_kd(dtype, [&](auto tag) {
    typedef decltype(tag) T;
    auto k = sgd_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), n, (T *)p, (const T *)g,
               (T *)buf, (T)lr, (T)momentum, (T)(1 - dampening), (T)wd, wd != 0, nesterov, first,
               maximize);
  });
  KD_OR_FAIL(ok, "sgd", dtype);
  return dlc_check_launch("sgd", device);
}

struct adam_args {
  double b1, b2, a1, a2, sg, eps, wd, decay, step, bc2s;
};

template <class T>
__global__ void adam_kernel(int64_t n, T *p, const T *g, T *m, T *v, T *vmax, adam_args c) {
  const T b1 = (T)c.b1, b2 = (T)c.b2, a1 = (T)c.a1, a2 = (T)c.a2, sg = (T)c.sg, eps = (T)c.eps;
  const T wd = (T)c.wd, decay = (T)c.decay, step = (T)c.step, bc2s = (T)c.bc2s;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)blockDim.x * gridDim.x) {
    T pi = p[i] * decay;
    T d = g[i] * sg + pi * wd;
    T mi = m[i] * b1 + d * a1;
    T vi = v[i] * b2 + a2 * d * d;
    T s = vi;
    if (vmax) {
      T a = vmax[i];
      s = (a > vi || a != a) ? a : vi; /* torch.maximum: NaN wins */
      vmax[i] = s;
    }
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + (mi / (sqrt(s) / bc2s + eps)) * step;
  }
}

DLC_API int dlc_adam(int device, int dtype, int64_t n, void *p, const void *g, void *m, void *v,
                     void *vmax, double lr, double beta1, double beta2, double eps, double wd,
                     double bc1, double bc2_sqrt, int decoupled, int maximize) {
  if (n == 0) return 0;
  DLC_ON(device, "adam");
  adam_args c = {beta1, beta2, 1 - beta1, 1 - beta2, maximize ? -1.0 : 1.0, eps,
                 decoupled ? 0 : wd, decoupled ? 1 - lr * wd : 1, -(lr / bc1), bc2_sqrt};
  bool ok = dlc_dispatch_kd(dtype, [&](auto tag) {
    typedef decltype(tag) T;
    auto k = adam_kernel<T>;
    DLC_LAUNCH(k, dlc_blocks(n, 256), 256, 0, dlc_stream(device), n, (T *)p, (const T *)g,
               (T *)m, (T *)v, (T *)vmax, c);
  });
  KD_OR_FAIL(ok, "adam", dtype);
  return dlc_check_launch("adam", device);
}
