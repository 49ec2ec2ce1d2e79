/*
** optim.cu -- the fused optimizer steps of runtime/nn/optim.c on CUDA, over
** a whole parameter group (PyTorch's multi_tensor_apply): one launch per
** MT_MAX tensors, each block working on one tensor, for SGD (momentum,
** dampening, Nesterov, weight decay) and Adam/AdamW (amsgrad), with the
** CPU's arithmetic in the parameter's dtype, step by step in the same
** order.  The tensors' pointers travel in the kernel's arguments (under
** CUDA's 4 KiB), so a launch needs no copy to the device first.
*/
#include "nn_common.cuh"

enum { MT_MAX = 32, MT_THREADS = 256, MT_BLOCKS_MAX = 1024 /* per tensor */ };

/* Which tensors a launch covers: tensor t owns blocks [start[t], start[t + 1]). */
struct mt_blocks {
  int n;
  int start[MT_MAX + 1];
  int64_t numel[MT_MAX];
};

/* The tensor of this block, and the block's place among that tensor's. */
__device__ static inline int mt_tensor(const mt_blocks &b, int *local, int *nblocks) {
  int t = 0;
  while (t + 1 < b.n && (int)blockIdx.x >= b.start[t + 1]) t++;
  *local = (int)blockIdx.x - b.start[t];
  *nblocks = b.start[t + 1] - b.start[t];
  return t;
}

/* Fills b's block ranges for tensors [k, k + n) of numel; the grid size. */
static int mt_plan(mt_blocks *b, const int64_t *numel, int k, int n) {
  b->n = n;
  b->start[0] = 0;
  for (int t = 0; t < n; t++) {
    int64_t want = (numel[k + t] + MT_THREADS - 1) / MT_THREADS;
    if (want < 1) want = 1;
    if (want > MT_BLOCKS_MAX) want = MT_BLOCKS_MAX;
    b->numel[t] = numel[k + t];
    b->start[t + 1] = b->start[t] + (int)want;
  }
  return b->start[n];
}

template <class T>
struct sgd_list {
  mt_blocks b;
  T *p[MT_MAX], *buf[MT_MAX];  /* buf[t]: NULL without momentum */
  const T *g[MT_MAX];
  int first[MT_MAX];
};

template <class T>
__global__ void sgd_kernel(sgd_list<T> l, T lr, T mom, T damp1, T wd, int use_wd, int nesterov,
                           int maximize) {
  int local, nb;
  int t = mt_tensor(l.b, &local, &nb);
  T *p = l.p[t], *buf = l.buf[t];
  const T *g = l.g[t];
  int first = l.first[t];
  int64_t n = l.b.numel[t];
  for (int64_t i = (int64_t)local * blockDim.x + threadIdx.x; i < n; i += (int64_t)nb * blockDim.x) {
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

DLC_API int dlc_sgd(int device, int dtype, int n, void *const *p, const void *const *g,
                    void *const *buf, const int *first, const int64_t *numel, double lr,
                    double momentum, double dampening, double wd, int nesterov, int maximize) {
  if (n <= 0) return 0;
  DLC_ON(device, "sgd");
  bool ok = dlc_dispatch_kd(dtype, [&](auto tag) {
    typedef decltype(tag) T;
    for (int k = 0; k < n; k += MT_MAX) {
      int m = n - k < MT_MAX ? n - k : MT_MAX;
      sgd_list<T> l;
      int grid = mt_plan(&l.b, numel, k, m);
      for (int t = 0; t < m; t++) {
        l.p[t] = (T *)p[k + t];
        l.g[t] = (const T *)g[k + t];
        l.buf[t] = buf ? (T *)buf[k + t] : nullptr;
        l.first[t] = first[k + t];
      }
      auto kern = sgd_kernel<T>;
      DLC_LAUNCH(kern, grid, MT_THREADS, 0, dlc_stream(device), l, (T)lr, (T)momentum,
                 (T)(1 - dampening), (T)wd, wd != 0, nesterov, maximize);
    }
  });
  KD_OR_FAIL(ok, "sgd", dtype);
  return dlc_check_launch("sgd", device);
}

struct adam_args {
  double b1, b2, a1, a2, sg, eps, wd, decay;
};

template <class T>
struct adam_list {
  mt_blocks b;
  T *p[MT_MAX], *m[MT_MAX], *v[MT_MAX], *vmax[MT_MAX];  /* vmax[t]: NULL without amsgrad */
  const T *g[MT_MAX];
  double step[MT_MAX], bc2s[MT_MAX];                      /* -(lr / bc1), sqrt(1 - beta2^step) */
};

template <class T>
__global__ void adam_kernel(adam_list<T> l, adam_args c) {
  int local, nb;
  int t = mt_tensor(l.b, &local, &nb);
  T *p = l.p[t], *m = l.m[t], *v = l.v[t], *vmax = l.vmax[t];
  const T *g = l.g[t];
  const T b1 = (T)c.b1, b2 = (T)c.b2, a1 = (T)c.a1, a2 = (T)c.a2, sg = (T)c.sg, eps = (T)c.eps;
  const T wd = (T)c.wd, decay = (T)c.decay, step = (T)l.step[t], bc2s = (T)l.bc2s[t];
  int64_t n = l.b.numel[t];
  for (int64_t i = (int64_t)local * blockDim.x + threadIdx.x; i < n; i += (int64_t)nb * blockDim.x) {
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

DLC_API int dlc_adam(int device, int dtype, int n, void *const *p, const void *const *g,
                     void *const *m, void *const *v, void *const *vmax, const int64_t *numel,
                     const double *bc1, const double *bc2_sqrt, double lr, double beta1,
                     double beta2, double eps, double wd, int decoupled, int maximize) {
  if (n <= 0) return 0;
  DLC_ON(device, "adam");
  adam_args c = {beta1, beta2, 1 - beta1, 1 - beta2, maximize ? -1.0 : 1.0, eps,
                 decoupled ? 0 : wd, decoupled ? 1 - lr * wd : 1};
  bool ok = dlc_dispatch_kd(dtype, [&](auto tag) {
    typedef decltype(tag) T;
    for (int k = 0; k < n; k += MT_MAX) {
      int cnt = n - k < MT_MAX ? n - k : MT_MAX;
      adam_list<T> l;
      int grid = mt_plan(&l.b, numel, k, cnt);
      for (int t = 0; t < cnt; t++) {
        l.p[t] = (T *)p[k + t];
        l.g[t] = (const T *)g[k + t];
        l.m[t] = (T *)m[k + t];
        l.v[t] = (T *)v[k + t];
        l.vmax[t] = vmax ? (T *)vmax[k + t] : nullptr;
        l.step[t] = -(lr / bc1[k + t]);
        l.bc2s[t] = bc2_sqrt[k + t];
      }
      auto kern = adam_kernel<T>;
      DLC_LAUNCH(kern, grid, MT_THREADS, 0, dlc_stream(device), l, c);
    }
  });
  KD_OR_FAIL(ok, "adam", dtype);
  return dlc_check_launch("adam", device);
}
