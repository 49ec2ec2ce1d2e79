/* nn_conv.c -- conv2d forward and forward+backward time for the two layers
** of a Fashion-MNIST CNN, beside bench/nn_conv.py (PyTorch).  Prints one
** line per layer: median (and minimum) milliseconds over the repetitions.
**
** The 32 -> 64 layer runs through oneDNN (nn/conv_onednn.c) unless
** DDPLUA_CONV=im2col; this program is not ddplua, so give it ddplua's
** OMP_WAIT_POLICY=PASSIVE (cli/main.c) and OPENBLAS_CORETYPE yourself.
**
** cc -O2 -std=c11 -Iruntime/include bench/nn_conv.c -Lbuild -lddplua \
**    -Wl,-rpath,$PWD/build -o build/bench_nn_conv && build/bench_nn_conv 1
*/
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ddplua.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void layer(int64_t N, int64_t C, int64_t H, int64_t O, int need_x, int reps) {
  int64_t xs[4] = {N, C, H, H}, ws[4] = {O, C, 3, 3}, one[2] = {1, 1};
  dl_manual_seed(0);
  dl_tensor *x = dl_randn(xs, 4, DL_FLOAT32), *w = dl_randn(ws, 4, DL_FLOAT32);
  dl_tensor *b = dl_randn(&O, 1, DL_FLOAT32), *g = NULL;
  double *fw = malloc(sizeof(double) * (size_t)reps), *tot = malloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    dl_tensor *y = dl_conv2d(x, w, b, one, one, one, 1);
    double t1 = now();
    if (!g) g = dl_randn((int64_t[]){N, O, H, H}, 4, DL_FLOAT32);
    dl_tensor *gx = NULL, *gw, *gb;
    if (!y || dl_conv2d_backward(g, x, w, one, one, one, 1, need_x, 1, 1, &gx, &gw, &gb)) {
      printf("error: %s\n", dl_last_error());
      exit(1);
    }
    double t2 = now();
    fw[r] = t1 - t0, tot[r] = t2 - t0;
    dl_tensor_release(y), dl_tensor_release(gx), dl_tensor_release(gw), dl_tensor_release(gb);
  }
  qsort(fw, (size_t)reps, sizeof(double), cmp);
  qsort(tot, (size_t)reps, sizeof(double), cmp);
  printf("ddplua threads=%d [%lld,%lld,%lld,%lld]->%lld%s  fwd %.3f ms (min %.3f)  fwd+bwd %.3f ms (min %.3f)\n",
         dl_get_num_threads(), (long long)N, (long long)C, (long long)H, (long long)H,
         (long long)O, need_x ? "" : " (no grad_x)", fw[reps / 2] * 1e3, fw[0] * 1e3,
         tot[reps / 2] * 1e3, tot[0] * 1e3);
  free(fw), free(tot);
  dl_tensor_release(x), dl_tensor_release(w), dl_tensor_release(b), dl_tensor_release(g);
}

int main(int argc, char **argv) {
  dl_set_num_threads(argc > 1 ? atoi(argv[1]) : 1);
  int reps = argc > 2 ? atoi(argv[2]) : 50;
  layer(64, 1, 28, 32, 1, reps);
  layer(64, 1, 28, 32, 0, reps);
  layer(64, 32, 14, 64, 1, reps);
  return 0;
}
