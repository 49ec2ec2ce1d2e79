/* test_device.c -- CUDA discovery and the selftest kernel, with or without a GPU. */
/*
** Build: cc -std=c11 -Iruntime/include tests/c/test_device.c -Lbuild -lddplua
**          -Wl,-rpath,$PWD/build -o build/test_device
** Without a device it checks that everything degrades to "0 devices" with
** a status line that says why, and prints SKIP: for the kernel checks; with
** one it runs the kernel on every device.  Exit status: 0 when all passed.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddplua.h"
#include "check.h"



/* -- Without a device ---------------------------------------------------- */

static void test_no_device(const char *status) {
  /* The status must say why, whichever step stopped the probe. */
  CHECK(strstr(status, "driver") || strstr(status, "without CUDA") ||
            strstr(status, "cannot load") || strstr(status, "lacks"),
        "status does not say why there is no device: \"%s\"", status);
  float buf[4] = {-1, -1, -1, -1};
  dl_clear_error();
  int rc = dl_cuda_selftest(0, buf, 4, 2.0f);
  CHECK(rc == DL_EDEVICE, "selftest without device returned %d", rc);
  CHECK(dl_last_error_code() == DL_EDEVICE, "error code %d",
        dl_last_error_code());
  CHECK(strstr(dl_last_error(), status) != NULL,
        "error \"%s\" does not carry the status", dl_last_error());
  CHECK(buf[0] == -1 && buf[3] == -1, "buffer was written without a device");
  printf("SKIP: CUDA kernel checks: %s\n", status);
}

/* -- With a device ------------------------------------------------------- */

static void test_selftest(int device, int n, float scale) {
  float *buf = malloc((size_t)n * sizeof *buf);
  if (!buf) {
    CHECK(0, "malloc of %d floats failed", n);
    return;
  }
  for (int i = 0; i < n; i++) buf[i] = NAN;
  int rc = dl_cuda_selftest(device, buf, n, scale);
  CHECK(rc == 0, "cuda:%d n=%d: %d %s", device, n, rc, dl_last_error());
  if (rc == 0) {
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
      if (buf[i] != (float)i * scale) bad = i;
    CHECK(bad < 0, "cuda:%d n=%d: out[%d] = %g, expected %g", device, n, bad,
          bad < 0 ? 0.0 : (double)buf[bad],
          bad < 0 ? 0.0 : (double)((float)bad * scale));
  }
  free(buf);
}

static void test_device(int count, const char *status) {
  char want[48];
  const char *emu = getenv("DDPLUA_CUDA_EMU");
  int emulated = emu && *emu && strcmp(emu, "0") != 0;  /* the CPU emulation */
  snprintf(want, sizeof want, emulated ? "%d emulated CUDA device" : "%d CUDA device", count);
  CHECK(strstr(status, want) == status, "status \"%s\" should start with %s",
        status, want);
  if (!emulated)
    CHECK(strstr(status, "(sm_") != NULL, "status \"%s\" lacks (sm_XY)", status);
  for (int d = 0; d < count; d++) {
    test_selftest(d, 1, 1.0f);
    test_selftest(d, 1000, 0.5f);
    /* More than one grid of 65535 x 256, so the grid-stride loop is used. */
    test_selftest(d, 20000000, 0.25f);
  }
  float buf[2];
  CHECK(dl_cuda_selftest(count, buf, 2, 1.0f) == DL_EDEVICE,
        "device %d (one past the last) accepted", count);
  CHECK(dl_cuda_selftest(-1, buf, 2, 1.0f) == DL_EDEVICE, "device -1 accepted");
  CHECK(dl_cuda_selftest(0, buf, 0, 1.0f) == 0, "n = 0: %s", dl_last_error());
}

int main(void) {
  const char *status = dl_cuda_status();
  int count = dl_cuda_device_count();
  printf("dl_cuda_status: %s\n", status);
  printf("dl_cuda_device_count: %d\n", count);
  CHECK(status && status[0], "empty status");
  CHECK(count >= 0, "negative device count %d", count);
  /* Asking again answers the same (the probe runs once). */
  CHECK(dl_cuda_device_count() == count, "count changed");
  CHECK(dl_cuda_status() == status, "status changed");

  float buf[2];
  CHECK(dl_cuda_selftest(0, NULL, 2, 1.0f) == DL_EINVAL, "NULL out accepted");
  CHECK(dl_cuda_selftest(0, buf, -1, 1.0f) == DL_EINVAL, "n < 0 accepted");

  if (count > 0)
    test_device(count, status);
  else
    test_no_device(status);

  return check_report("test_device");
}
