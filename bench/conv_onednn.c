/* conv_onednn.c -- the Fashion-MNIST CNN's conv2d layers (bench/nn_conv.c's)
** through oneDNN's primitives directly, as ddplua would call them: plain
** NCHW tensors in and out, oneDNN free to pick its own layouts (reorders
** timed with the convolution, primitives made once as a cache would),
** or kept in NCHW throughout ("plain").  For issue 14's decision: adopt
** oneDNN for conv2d, or write our own kernels.
**
** cc -O2 -std=c11 bench/conv_onednn.c -ldnnl -o build/bench_conv_onednn
** OMP_NUM_THREADS=1 build/bench_conv_onednn [REPS]
*/
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                              \
  do {                                                                     \
    dnnl_status_t s_ = (x);                                                \
    if (s_ != dnnl_success) {                                              \
      fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* A step that moves `from` into the layout `to` wants (NULL if the same). */
typedef struct { dnnl_primitive_t p; dnnl_memory_t src, dst; } reorder;

static dnnl_memory_t mem_for(const dnnl_memory_desc_t *md, void *user, dnnl_memory_desc_t *user_md,
                             reorder *r, int to_user) {
  r->p = NULL;
  dnnl_memory_t um;
  CK(dnnl_memory_create(&um, user_md, eng, user));
  if (dnnl_memory_desc_equal(md, user_md)) return um;
  dnnl_memory_t m;
  CK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
  dnnl_primitive_desc_t rpd;
  if (to_user) {
    CK(dnnl_reorder_primitive_desc_create(&rpd, md, eng, user_md, eng, NULL));
    r->src = m, r->dst = um;
  } else {
    CK(dnnl_reorder_primitive_desc_create(&rpd, user_md, eng, md, eng, NULL));
    r->src = um, r->dst = m;
  }
  CK(dnnl_primitive_create(&r->p, rpd));
  dnnl_primitive_desc_destroy(rpd);
  return m;
}

static void run_reorder(reorder *r) {
  if (!r->p) return;
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, r->src}, {DNNL_ARG_TO, r->dst}};
  CK(dnnl_primitive_execute(r->p, strm, 2, a));
}

static void layer(int N, int C, int H, int O, int need_x, int reps, int plain) {
  dnnl_dims_t xs = {N, C, H, H}, ws = {O, C, 3, 3}, bs = {O}, ys = {N, O, H, H};
  dnnl_dims_t st = {1, 1}, pad = {1, 1};
  size_t nx = (size_t)N * C * H * H, nw = (size_t)O * C * 9, ny = (size_t)N * O * H * H;
  float *x = malloc(nx * 4), *w = malloc(nw * 4), *b = malloc((size_t)O * 4), *y = malloc(ny * 4);
  float *gy = malloc(ny * 4), *gx = malloc(nx * 4), *gw = malloc(nw * 4), *gb = malloc((size_t)O * 4);
  for (size_t i = 0; i < nx; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
  for (size_t i = 0; i < nw; i++) w[i] = (float)rand() / RAND_MAX - 0.5f;
  for (size_t i = 0; i < ny; i++) gy[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < O; i++) b[i] = 0.1f;

  dnnl_memory_desc_t ux, uw, ub, uy, ax, aw, ay;
  CK(dnnl_memory_desc_init_by_tag(&ux, 4, xs, dnnl_f32, dnnl_nchw));
  CK(dnnl_memory_desc_init_by_tag(&uw, 4, ws, dnnl_f32, dnnl_oihw));
  CK(dnnl_memory_desc_init_by_tag(&ub, 1, bs, dnnl_f32, dnnl_x));
  CK(dnnl_memory_desc_init_by_tag(&uy, 4, ys, dnnl_f32, dnnl_nchw));
  dnnl_format_tag_t any = plain ? dnnl_format_tag_undef : dnnl_format_tag_any;
  if (plain) ax = ux, aw = uw, ay = uy;
  else {
    CK(dnnl_memory_desc_init_by_tag(&ax, 4, xs, dnnl_f32, any));
    CK(dnnl_memory_desc_init_by_tag(&aw, 4, ws, dnnl_f32, any));
    CK(dnnl_memory_desc_init_by_tag(&ay, 4, ys, dnnl_f32, any));
  }

  /* forward */
  dnnl_convolution_desc_t fd, bdd, bwd;
  dnnl_primitive_desc_t fpd, bdpd, bwpd;
  CK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &ax, &aw,
                                         &ub, &ay, st, pad, pad));
  CK(dnnl_primitive_desc_create(&fpd, &fd, NULL, eng, NULL));
  reorder rx, rw, ry, rgy, rgx, rgw;
  dnnl_memory_t mx = mem_for(dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0), x, &ux, &rx, 0);
  dnnl_memory_t mw = mem_for(dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0), w, &uw, &rw, 0);
  dnnl_memory_t my = mem_for(dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0), y, &uy, &ry, 1);
  dnnl_memory_t mb;
  CK(dnnl_memory_create(&mb, &ub, eng, b));
  dnnl_primitive_t fp;
  CK(dnnl_primitive_create(&fp, fpd));

  /* backward data and weights */
  CK(dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &ax, &aw, &ay, st, pad, pad));
  CK(dnnl_primitive_desc_create(&bdpd, &bdd, NULL, eng, fpd));
  CK(dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &ax, &aw, &ub, &ay, st,
                                                  pad, pad));
  CK(dnnl_primitive_desc_create(&bwpd, &bwd, NULL, eng, fpd));
  dnnl_memory_t mgy = mem_for(dnnl_primitive_desc_query_md(bdpd, dnnl_query_diff_dst_md, 0), gy, &uy, &rgy, 0);
  dnnl_memory_t mgx = mem_for(dnnl_primitive_desc_query_md(bdpd, dnnl_query_diff_src_md, 0), gx, &ux, &rgx, 1);
  dnnl_memory_t mgw = mem_for(dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_weights_md, 0), gw, &uw, &rgw, 1);
  dnnl_memory_t mgb;
  CK(dnnl_memory_create(&mgb, &ub, eng, gb));
  /* backward weights may want src/diff_dst in other layouts than forward's */
  reorder rx2, rgy2;
  dnnl_memory_t mx2 = mem_for(dnnl_primitive_desc_query_md(bwpd, dnnl_query_src_md, 0), x, &ux, &rx2, 0);
  dnnl_memory_t mgy2 = mem_for(dnnl_primitive_desc_query_md(bwpd, dnnl_query_diff_dst_md, 0), gy, &uy, &rgy2, 0);
  dnnl_primitive_t bdp, bwp;
  CK(dnnl_primitive_create(&bdp, bdpd));
  CK(dnnl_primitive_create(&bwp, bwpd));

  double *fw = malloc(sizeof(double) * (size_t)reps), *tot = malloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    run_reorder(&rx), run_reorder(&rw);
    dnnl_exec_arg_t fa[4] = {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, my}};
    CK(dnnl_primitive_execute(fp, strm, 4, fa));
    run_reorder(&ry);
    CK(dnnl_stream_wait(strm));
    double t1 = now();
    run_reorder(&rgy);
    if (need_x) {
      dnnl_exec_arg_t da[3] = {{DNNL_ARG_DIFF_DST, mgy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mgx}};
      CK(dnnl_primitive_execute(bdp, strm, 3, da));
      run_reorder(&rgx);
    }
    run_reorder(&rx2), run_reorder(&rgy2);
    dnnl_exec_arg_t wa[4] = {{DNNL_ARG_SRC, mx2}, {DNNL_ARG_DIFF_DST, mgy2}, {DNNL_ARG_DIFF_WEIGHTS, mgw},
                             {DNNL_ARG_DIFF_BIAS, mgb}};
    CK(dnnl_primitive_execute(bwp, strm, 4, wa));
    run_reorder(&rgw);
    CK(dnnl_stream_wait(strm));
    double t2 = now();
    fw[r] = t1 - t0, tot[r] = t2 - t0;
  }
  qsort(fw, (size_t)reps, sizeof(double), cmp);
  qsort(tot, (size_t)reps, sizeof(double), cmp);
  const char *impl = NULL;
  CK(dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl));
  printf("onednn%s [%d,%d,%d,%d]->%d%s  fwd %.3f ms (min %.3f)  fwd+bwd %.3f ms (min %.3f)  (%s)\n",
         plain ? "(nchw)" : "", N, C, H, H, O, need_x ? "" : " (no grad_x)", fw[reps / 2] * 1e3,
         fw[0] * 1e3, tot[reps / 2] * 1e3, tot[0] * 1e3, impl);
  free(fw), free(tot);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 50;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
  for (int plain = 0; plain < 2; plain++) {
    layer(64, 1, 28, 32, 1, reps, plain);
    layer(64, 1, 28, 32, 0, reps, plain);
    layer(64, 32, 14, 64, 1, reps, plain);
  }
  return 0;
}
