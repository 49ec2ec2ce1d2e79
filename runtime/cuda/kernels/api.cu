/*
** api.cu -- the one symbol the runtime looks up in libddplua_cuda.so (and the
** emulator library): dlc_api_get(), the table of every launcher (dlc.h).
*/
#include "common.cuh"

extern "C" int dlc_gemm(int device, int dtype, int ta, int tb, int m, int n, int k, double alpha, const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, double beta, void *c, int64_t ldc, int64_t sc, int64_t batch, int tf32);
extern "C" int dlc_matmul_naive(int device, const dlc_mm *p);
extern "C" const char *dlc_last_error(void);
extern "C" int dlc_im2col(int device, int dtype, const dlc_conv *g, const void *x, void *col, int64_t n0, int64_t nchunk);
extern "C" int dlc_col2im(int device, int dtype, const dlc_conv *g, const void *col, void *x, int64_t n0, int64_t nchunk);
extern "C" int dlc_bias_add(int device, int dtype, void *out, const void *b, int64_t N, int64_t O, int64_t HW);
extern "C" int dlc_bias_grad(int device, int dtype, const void *g, void *gb, int64_t N, int64_t O, int64_t HW);
extern "C" int dlc_swap01(int device, int dtype, const void *src, void *dst, int64_t A, int64_t B, int64_t R);
extern "C" int dlc_binary(int device, int op, int dtype, const dlc_iter *it);
extern "C" int dlc_unary(int device, int op, int dtype, const dlc_iter *it);
extern "C" int dlc_cast(int device, const dlc_iter *it);
extern "C" int dlc_fill(int device, const dlc_iter *it, uint64_t bytes);
extern "C" int dlc_clamp(int device, int dtype, double lo, double hi, const dlc_iter *it);
extern "C" int dlc_where(int device, const dlc_iter *it);
extern "C" int dlc_act_backward(int device, int op, int dtype, const dlc_iter *it);
extern "C" int dlc_index_check(int device, const dlc_iter *it, int64_t size, int64_t *words, int64_t *bad);
extern "C" int dlc_index_minmax(int device, const dlc_iter *it, int64_t *words, int64_t *lo, int64_t *hi);
extern "C" int dlc_take(int device, const dlc_iter *it, int64_t step, int es);
extern "C" int dlc_put(int device, const dlc_iter *it, int64_t step, int dtype, int reduce);
extern "C" int dlc_masked_fill(int device, const dlc_iter *it, uint64_t bytes, int es);
extern "C" int dlc_compact_count(int device, const uint8_t *mask, int64_t n, int64_t *scratch_nb1, int64_t *total);
extern "C" int dlc_compact_write(int device, const uint8_t *mask, int64_t n, const int64_t *offsets, const char *src, int es, int nd, const int64_t *shape, char *out);
extern "C" int dlc_tri(int device, char *p, int64_t B, int64_t R, int64_t C, int64_t diag, int upper, int es);
extern "C" int dlc_ramp(int device, char *out, int dtype, int64_t n, double start, double step, double end, int64_t split);
extern "C" int dlc_mem_alloc(int device, size_t size, void **ptr, char *err, size_t errlen);
extern "C" int dlc_mem_free(int device, void *ptr, char *err, size_t errlen);
extern "C" int dlc_device_sync(int device, char *err, size_t errlen);
extern "C" int dlc_mem_info(int device, size_t *free_b, size_t *total_b, char *err, size_t errlen);
extern "C" int dlc_memcpy(void *dst, const void *src, size_t n, int device, char *err, size_t errlen);
extern "C" int dlc_host_alloc(size_t size, void **ptr, char *err, size_t errlen);
extern "C" int dlc_host_free(void *ptr, char *err, size_t errlen);
extern "C" int dlc_memcpy_async(void *dst, const void *src, size_t n, int device, void **event, char *err, size_t errlen);
extern "C" int dlc_event_done(void *event, int wait);
extern "C" int dlc_bad_index(int device, const int64_t *idx, int64_t n, int64_t rows, int64_t ignore, int use_ignore, int64_t *pos, int64_t *val);
extern "C" int dlc_cls_forward(int device, int kd, int logits, int64_t N, int64_t C, int64_t S, const void *z, const int64_t *t, const double *w, int64_t ignore, double ls, int reduction, double *buf, void *out, int out_dtype, int64_t *bad_pos, int64_t *bad_val);
extern "C" int dlc_cls_backward(int device, int kd, int logits, int64_t N, int64_t C, int64_t S, const void *z, const int64_t *t, const double *w, int64_t ignore, double ls, int reduction, const void *g, double *scratch, void *gi);
extern "C" int64_t dlc_mse_parts(int64_t n);
extern "C" int dlc_mse(int device, int kd, int reduction, int64_t n, const void *a, const void *b, double *part, void *out, int out_dtype);
extern "C" int dlc_mse_backward(int device, int kd, int64_t n, const void *a, const void *b, const void *g, int g_each, double norm, void *out);
extern "C" int dlc_embedding(int device, int64_t n, int64_t row_bytes, const void *w, const int64_t *idx, void *out);
extern "C" int dlc_embedding_backward(int device, int kd, int64_t V, int64_t D, int64_t padding_idx, int scale, const int64_t *start, const int64_t *order, const void *gout, void *gw);
extern "C" int dlc_layer_norm(int device, int kd, int64_t M, int64_t N, double eps, const void *x, const void *w, const void *b, void *y, void *mean, void *rstd);
extern "C" int dlc_layer_norm_backward(int device, int kd, int64_t M, int64_t N, const void *x, const void *go, const void *w, const void *mean, const void *rstd, void *gx, double *gw, double *gb);
extern "C" int dlc_batch_norm(int device, int kd, int64_t N, int64_t C, int64_t S, int training, double momentum, double eps, const void *x, const double *w, const double *b, double *rm, double *rv, double *stats, void *y);
extern "C" int dlc_batch_norm_backward(int device, int kd, int64_t N, int64_t C, int64_t S, int training, const void *go, const void *x, const double *mean, const double *inv, const double *w, double *out, void *gx);
extern "C" int dlc_sgd(int device, int dtype, int64_t n, void *p, const void *g, void *buf, double lr, double momentum, double dampening, double wd, int nesterov, int first, int maximize);
extern "C" int dlc_adam(int device, int dtype, int64_t n, void *p, const void *g, void *m, void *v, void *vmax, double lr, double beta1, double beta2, double eps, double wd, double bc1, double bc2_sqrt, int decoupled, int maximize);
extern "C" int dlc_max_pool(int device, int dtype, const dlc_pool *g, const void *x, void *out, int64_t *idx);
extern "C" int dlc_max_pool_backward(int device, int dtype, int64_t planes, int64_t in_plane, int64_t out_plane, const void *gout, const int64_t *idx, void *gx);
extern "C" int dlc_avg_pool(int device, int dtype, const dlc_pool *g, const void *x, void *out);
extern "C" int dlc_avg_pool_backward(int device, int dtype, const dlc_pool *g, const void *gout, void *gx);
extern "C" int dlc_philox_fill(int device, int kind, int dtype, int64_t n, void *out, uint64_t seed, uint64_t base, double a, double b, int64_t low, uint64_t range);
extern "C" int dlc_dropout(int device, int kd, int64_t n, const void *x, void *out, uint8_t *mask, uint64_t seed, uint64_t base, double keep, double scale);
extern "C" int dlc_dropout_backward(int device, int kd, int64_t n, const void *g, const uint8_t *mask, double scale, void *out);
extern "C" size_t dlc_reduce_ws(const dlc_reduce *r);
extern "C" int dlc_reduce_run(int device, const dlc_reduce *r, void *ws);
extern "C" size_t dlc_argreduce_ws(const dlc_reduce *r);
extern "C" int dlc_argreduce(int device, int max, const dlc_reduce *r, void *values, int64_t *indices, void *ws);
extern "C" int dlc_dimop(int device, int op, int dtype, int64_t O, int64_t N, int64_t I, const void *x, void *y);
extern "C" int dlc_device_count(int *count, char *err, size_t errlen);
extern "C" int dlc_device_info(int device, char *name, size_t namelen, int *major, int *minor, char *err, size_t errlen);
extern "C" int dlc_versions(int *driver, int *runtime, char *err, size_t errlen);
extern "C" int dlc_iota(int device, float *out, int n, float scale, char *err, size_t errlen);
extern "C" size_t dlc_sort_ws(const dlc_reduce *r);
extern "C" int dlc_sort(int device, int desc, int64_t k, int64_t inner, const dlc_reduce *r, void *values, int64_t *indices, void *ws);
extern "C" int dlc_sdpa_forward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev, double scale, int causal, const void *q, const void *k, const void *v, const void *mask, int64_t mask_bh, void *out, void *lse);
extern "C" int dlc_sdpa_backward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev, double scale, int causal, const void *q, const void *k, const void *v, const void *mask, int64_t mask_bh, const void *out, const void *dout, const void *lse, void *dsum, void *dq, void *dk, void *dv);
#ifndef DLC_EMU
extern "C" int dlc_nccl_get_id(void *id, size_t idlen, char *err, size_t errlen);
extern "C" int dlc_nccl_version(int *version, char *err, size_t errlen);
extern "C" int dlc_nccl_init(dlc_nccl **out, int device, int rank, int world, const void *id, size_t idlen, char *err, size_t errlen);
extern "C" void dlc_nccl_destroy(dlc_nccl *c);
extern "C" int dlc_nccl_all_reduce(dlc_nccl *c, void *out, const void *in, int64_t n, int dtype, int op, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_broadcast(dlc_nccl *c, void *out, const void *in, int64_t nbytes, int root, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_all_gather(dlc_nccl *c, void *out, const void *in, int64_t nbytes, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_reduce_scatter(dlc_nccl *c, void *out, const void *in, int64_t n, int dtype, int op, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_send(dlc_nccl *c, const void *buf, int64_t nbytes, int peer, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_recv(dlc_nccl *c, void *buf, int64_t nbytes, int peer, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_group_start(dlc_nccl *c, char *err, size_t errlen);
extern "C" int dlc_nccl_group_end(dlc_nccl *c, char *err, size_t errlen);
extern "C" int dlc_nccl_stream_wait(dlc_nccl *c, void *stream, char *err, size_t errlen);
extern "C" int dlc_nccl_wait(dlc_nccl *c, double timeout_s, char *err, size_t errlen);
extern "C" int dlc_nccl_alloc(int device, int64_t nbytes, void **out, char *err, size_t errlen);
extern "C" int dlc_nccl_free(int device, void *p, char *err, size_t errlen);
extern "C" int dlc_nccl_copy(int device, void *dst, const void *src, int64_t nbytes, char *err, size_t errlen);
#endif

extern "C" __attribute__((visibility("default"))) const dlc_api *dlc_api_get(void) {
  static const dlc_api api = {
    DLC_ABI_VERSION, sizeof(dlc_api),
    dlc_gemm,
    dlc_matmul_naive,
    dlc_last_error,
    dlc_im2col,
    dlc_col2im,
    dlc_bias_add,
    dlc_bias_grad,
    dlc_swap01,
    dlc_binary,
    dlc_unary,
    dlc_cast,
    dlc_fill,
    dlc_clamp,
    dlc_where,
    dlc_act_backward,
    dlc_index_check,
    dlc_index_minmax,
    dlc_take,
    dlc_put,
    dlc_masked_fill,
    dlc_compact_count,
    dlc_compact_write,
    dlc_tri,
    dlc_ramp,
    dlc_mem_alloc,
    dlc_mem_free,
    dlc_device_sync,
    dlc_mem_info,
    dlc_memcpy,
    dlc_host_alloc,
    dlc_host_free,
    dlc_memcpy_async,
    dlc_event_done,
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_get_id,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_version,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_init,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_destroy,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_all_reduce,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_broadcast,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_all_gather,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_reduce_scatter,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_send,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_recv,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_group_start,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_group_end,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_stream_wait,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_wait,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_alloc,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_free,
#endif
#ifdef DLC_EMU
    nullptr,
#else
    dlc_nccl_copy,
#endif
    dlc_bad_index,
    dlc_cls_forward,
    dlc_cls_backward,
    dlc_mse_parts,
    dlc_mse,
    dlc_mse_backward,
    dlc_embedding,
    dlc_embedding_backward,
    dlc_layer_norm,
    dlc_layer_norm_backward,
    dlc_batch_norm,
    dlc_batch_norm_backward,
    dlc_sgd,
    dlc_adam,
    dlc_max_pool,
    dlc_max_pool_backward,
    dlc_avg_pool,
    dlc_avg_pool_backward,
    dlc_philox_fill,
    dlc_dropout,
    dlc_dropout_backward,
    dlc_reduce_ws,
    dlc_reduce_run,
    dlc_argreduce_ws,
    dlc_argreduce,
    dlc_dimop,
    dlc_device_count,
    dlc_device_info,
    dlc_versions,
    dlc_iota,
    dlc_sort_ws,
    dlc_sort,
    dlc_sdpa_forward,
    dlc_sdpa_backward,
  };
  return &api;
}
