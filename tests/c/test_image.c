/* test_image.c -- the image transforms (nn/image_*.c) through the public
** API: errors as codes with messages, and calls from several threads at
** once (as a loader's workers make them) giving the bits one thread gives,
** while the calling thread keeps the pool busy with parallel ops. */
#include <pthread.h>
#include <string.h>

#include "check.h"

static dl_tensor *image(int64_t c, int64_t h, int64_t w, unsigned seed) {
  int64_t s[3] = {c, h, w};
  dl_tensor *t = dl_empty(s, 3, DL_UINT8);
  uint8_t *p = dl_tensor_data(t);
  for (int64_t i = 0; i < c * h * w; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (uint8_t)(seed >> 16);
  }
  return t;
}

static const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};

/* The fused training chain of one sample, by its index. */
static dl_tensor *sample(const dl_tensor *x, int i) {
  int64_t crop[4] = {i % 7, i % 11, 150 + i % 40, 170 + i % 30}, size[2] = {64, 64};
  return dl_image_resized_crop(x, crop, size, NULL, DL_INTERP_BILINEAR, 1, i & 1, DL_FLOAT32, 1,
                               mean, stdv, 3);
}

static int same(const dl_tensor *a, const dl_tensor *b) {
  return a && b && dl_tensor_numel(a) == dl_tensor_numel(b) &&
         !memcmp(dl_tensor_data(a), dl_tensor_data(b), (size_t)dl_tensor_numel(a) * 4);
}

typedef struct {
  const dl_tensor *x;
  dl_tensor **want;
  int bad;
} job;

enum { SAMPLES = 24, ROUNDS = 8 };

static void *worker(void *p) {
  job *j = p;
  for (int r = 0; r < ROUNDS; r++)
    for (int i = 0; i < SAMPLES; i++) {
      dl_tensor *y = sample(j->x, i);
      if (!same(y, j->want[i])) j->bad++;
      dl_tensor_release(y);
    }
  return NULL;
}

int main(void) {
  dl_set_num_threads(4);
  dl_tensor *x = image(3, 200, 220, 1);

  /* errors: a code and a message naming the op */
  int64_t s2[2] = {4, 4};
  dl_tensor *flat = dl_zeros(s2, 2, DL_UINT8);
  CHECK(!dl_image_resize(flat, 2, 2, DL_INTERP_BILINEAR, 1));
  CHECK(dl_last_error_code() == DL_ESHAPE && strstr(dl_last_error(), "image_resize: expected an image"));
  int64_t crop[4] = {190, 0, 20, 10}, size[2] = {8, 8};
  CHECK(!dl_image_resized_crop(x, crop, size, NULL, DL_INTERP_BILINEAR, 1, 0, DL_UINT8, 0, NULL, NULL, 0));
  CHECK(dl_last_error_code() == DL_EINDEX && strstr(dl_last_error(), "crop (top 190, left 0, 20 x 10)"));
  CHECK(!dl_image_normalize(x, mean, stdv, 3, 0));
  CHECK(dl_last_error_code() == DL_EDTYPE && strstr(dl_last_error(), "expected a float32 image, got uint8"));
  CHECK(!dl_image_adjust(x, DL_ADJUST_HUE, 0.7));
  CHECK(dl_last_error_code() == DL_EINVAL && strstr(dl_last_error(), "hue_factor must be in [-0.5, 0.5]"));
  dl_tensor_release(flat);

  /* one thread's results */
  dl_tensor *want[SAMPLES];
  for (int i = 0; i < SAMPLES; i++) {
    want[i] = sample(x, i);
    CHECK(want[i] != NULL);
  }

  /* three threads at once, the main one running parallel ops meanwhile */
  job jobs[3];
  pthread_t th[3];
  for (int k = 0; k < 3; k++) {
    jobs[k] = (job){x, want, 0};
    pthread_create(&th[k], NULL, worker, &jobs[k]);
  }
  int64_t big[1] = {1 << 20};
  for (int r = 0; r < 50; r++) {
    dl_tensor *a = dl_zeros(big, 1, DL_FLOAT32), *b = dl_unary(DL_EXP, a);
    CHECK(b != NULL);
    dl_tensor_release(a);
    dl_tensor_release(b);
  }
  for (int k = 0; k < 3; k++) {
    pthread_join(th[k], NULL);
    CHECK(jobs[k].bad == 0, "thread %d: %d results differ", k, jobs[k].bad);
  }
  for (int i = 0; i < SAMPLES; i++) dl_tensor_release(want[i]);
  dl_tensor_release(x);
  return check_report("test_image");
}
