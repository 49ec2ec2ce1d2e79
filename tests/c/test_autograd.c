/* test_autograd.c -- the engine from C: leaf hooks fire once per pass, in
** reverse order of the forward pass, after the leaf's gradient is complete;
** long chains free without recursion; grad mode switches. */
#include <string.h>

#include "ddplua.h"
#include "check.h"

typedef struct {
  int order[8], n;
  double seen[8];  /* the leaf's grad (element 0) when its hook ran */
} log_t;

static log_t hook_log;

static void hook(void *ctx, dl_tensor *leaf) {
  dl_tensor *g = dl_grad(leaf);
  double v = -1;
  if (g) dl_get_double(g, 0, &v);
  dl_tensor_release(g);
  hook_log.seen[hook_log.n] = v;
  hook_log.order[hook_log.n++] = (int)(intptr_t)ctx;
}

static void test_hooks(void) {
  int64_t s = 3;
  dl_tensor *w0 = dl_full(&s, 1, DL_FLOAT32, 2.0), *w1 = dl_full(&s, 1, DL_FLOAT32, 3.0);
  dl_requires_grad_(w0, 1);
  dl_requires_grad_(w1, 1);
  CHECK(dl_add_grad_hook(w0, hook, (void *)0) == 0);
  CHECK(dl_add_grad_hook(w1, hook, (void *)1) == 0);
  /* w0 is used twice (two contributions), w1 later in the forward pass */
  dl_tensor *a = dl_binary(DL_MUL, w0, w0);          /* w0^2 */
  dl_tensor *b = dl_binary(DL_MUL, a, w1);           /* w0^2 w1 */
  dl_tensor *l = dl_reduce(DL_SUM, b, NULL, 0, 0, 0);
  CHECK(strcmp(dl_grad_fn_name(l), "SumBackward") == 0);
  CHECK(dl_backward(l, NULL, 0) == 0);
  CHECK(hook_log.n == 2, "%d hooks ran", hook_log.n);
  CHECK(hook_log.order[0] == 1 && hook_log.order[1] == 0, "w1 (used last) first");
  CHECK(hook_log.seen[0] == 4.0, "d/dw1 = w0^2 = 4, saw %g", hook_log.seen[0]);
  CHECK(hook_log.seen[1] == 12.0, "d/dw0 = 2 w0 w1 = 12 complete, saw %g", hook_log.seen[1]);
  dl_tensor *list[] = {w0, w1, a, b, l};
  for (int i = 0; i < 5; i++) dl_tensor_release(list[i]);
}

static void test_long_chain(void) {
  int64_t s = 1;
  dl_tensor *x = dl_full(&s, 1, DL_FLOAT64, 1.0), *y;
  dl_requires_grad_(x, 1);
  dl_tensor_retain(x);
  y = x;
  for (int i = 0; i < 200000; i++) {  /* deep enough to overflow a recursive free */
    dl_tensor *z = dl_binary(DL_MUL, y, y);
    dl_tensor_release(y);
    y = z;
    if (!y) break;
  }
  CHECK(y != NULL);
  dl_tensor_release(y);  /* frees 200000 nodes */
  dl_tensor_release(x);
}

static void test_modes(void) {
  int64_t s = 2;
  dl_tensor *x = dl_full(&s, 1, DL_FLOAT32, 1.0);
  dl_requires_grad_(x, 1);
  CHECK(dl_is_grad_enabled());
  CHECK(dl_set_grad_enabled(0) == 1);
  dl_tensor *y = dl_unary(DL_EXP, x);
  CHECK(!dl_requires_grad(y) && dl_is_leaf(y));
  dl_set_grad_enabled(1);
  dl_tensor *z = dl_unary(DL_EXP, x);
  CHECK(dl_requires_grad(z) && !dl_is_leaf(z));
  dl_tensor *ix = dl_arange(0, 3, 1, DL_INT64);
  CHECK(dl_requires_grad_(ix, 1) == DL_EDTYPE);
  dl_tensor *list[] = {x, y, z, ix};
  for (int i = 0; i < 4; i++) dl_tensor_release(list[i]);
}

int main(void) {
  test_hooks();
  test_long_chain();
  test_modes();
  return check_report("test_autograd");
}
