/*
** cuda/linalg.h -- the compute steps of matmul, conv2d and pooling on CUDA
** tensors (cuda/linalg.c): linalg.c, nn/conv.c and nn/pool.c do their checks,
** shapes and allocations as on the CPU and call these at the compute step.
*/
#ifndef DL_CUDA_LINALG_H
#define DL_CUDA_LINALG_H

#include "cuda/cuda.h"

/* out = alpha * A @ B + beta * out (beta 0: out not read), p as dlc_mm
** (row-major, out contiguous).  ta / tb and lda / ldb: how BLAS reads A
** and B (linalg.c: blas_layout; 0 row-major, 1 column-major), used by the
** cuBLAS path (float types, k > 0); the plain kernel reads p's strides. */
DL_HIDDEN int cuda_mm(const char *op, int device, const dlc_mm *p, int ta, int64_t lda, int tb,
                      int64_t ldb);

/* The CUDA device's matmul and dot kernels (core/device.h). */
DL_HIDDEN int cuda_matmul(const char *op, int dev, struct mm_plan *p, int blas);
DL_HIDDEN dl_tensor *cuda_dot(const char *op, const dl_tensor *a, const dl_tensor *b);

/* The CUDA device's conv2d kernels (core/device.h), over nn/conv.h's plan. */
struct conv_geom;
DL_HIDDEN dl_tensor *cuda_conv2d(const char *op, int dev, const struct conv_geom *g,
                                 const dl_tensor *x, const dl_tensor *w, const dl_tensor *b);
DL_HIDDEN int cuda_conv2d_grads(const char *op, int dev, const struct conv_geom *g,
                               const dl_tensor *grad_out, const dl_tensor *x, const dl_tensor *w,
                               int need_x, int need_w, int need_b, dl_tensor **grad_x,
                               dl_tensor **grad_w, dl_tensor **grad_b);

/* The CUDA device's pooling kernels (core/device.h), over nn/pool.h's plan. */
struct pool_geom;
DL_HIDDEN int cuda_max_pool_k(const char *op, int dev, const struct pool_geom *g,
                              const dl_tensor *x, dl_tensor **out, dl_tensor **indices);
DL_HIDDEN dl_tensor *cuda_max_pool_backward_k(const char *op, int dev, const dl_tensor *grad_out,
                                              const dl_tensor *x, const dl_tensor *indices);
DL_HIDDEN dl_tensor *cuda_avg_pool_k(const char *op, int dev, const struct pool_geom *g,
                                     const dl_tensor *x);
DL_HIDDEN dl_tensor *cuda_avg_pool_backward_k(const char *op, int dev, const struct pool_geom *g,
                                              const dl_tensor *grad_out, const dl_tensor *x);

/* Whether float32 products may use TF32 (dl_cuda_set_allow_tf32). */
DL_HIDDEN int cuda_tf32(void);

/* conv2d on device tensors in kd (float32 / float64), all contiguous:
** out = conv(x, w) + b (b may be NULL); backward fills what is not NULL
** of gx, gw, gb.  im2col + cuBLAS, the samples in chunks that bound the
** column buffers. */
DL_HIDDEN int cuda_conv2d_forward(const char *op, int dev, int kd, const dlc_conv *g,
                                  const void *x, const void *w, const void *b, void *out);
DL_HIDDEN int cuda_conv2d_backward(const char *op, int dev, int kd, const dlc_conv *g,
                                   const void *x, const void *w, const void *gout, void *gx,
                                   void *gw, void *gb);

/* Pooling on device tensors in kd (float32 / float64), all contiguous;
** idx int64.  See dlc.h for what each computes. */
DL_HIDDEN int cuda_max_pool(const char *op, int dev, int kd, const dlc_pool *g, const void *x,
                            void *out, int64_t *idx);
DL_HIDDEN int cuda_max_pool_backward(const char *op, int dev, int kd, int64_t planes,
                                     int64_t in_plane, int64_t out_plane, const void *gout,
                                     const int64_t *idx, void *gx);
DL_HIDDEN int cuda_avg_pool(const char *op, int dev, int kd, const dlc_pool *g, const void *x,
                            void *out);
DL_HIDDEN int cuda_avg_pool_backward(const char *op, int dev, int kd, const dlc_pool *g,
                                     const void *gout, void *gx);

#endif
