/* device.c -- finds CUDA at run time, so libddplua.so itself never links it. */
/*
** libddplua.so must load on machines with no NVIDIA driver (CI, laptops),
** so it links neither libcuda nor cudart.  On first use it looks for the
** driver (libcuda.so.1), then for libddplua_cuda.so next to itself (the
** nvcc-built kernels, with cudart linked in statically), and takes the
** dlc_* launchers from it with dlsym.  Whatever goes wrong on the way ends
** up as one human-readable status line, never as a failure of the probe.
*/
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda.h"
#include "core/internal.h"

/* The launchers of runtime/cuda/selftest.cu: 0 or a negative DL_E* code,
** with CUDA's error text in (err, errlen). */
typedef int (*dlc_device_count_fn)(int *count, char *err, size_t errlen);
typedef int (*dlc_device_info_fn)(int device, char *name, size_t namelen,
                                  int *major, int *minor, char *err,
                                  size_t errlen);
typedef int (*dlc_versions_fn)(int *driver, int *runtime, char *err,
                               size_t errlen);
typedef int (*dlc_iota_fn)(int device, float *out, int n, float scale,
                           char *err, size_t errlen);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/* Written once under cuda_once, read-only afterwards: no lock needed. */
static struct {
  int ndev;
  void *libcuda, *lib;  /* kept open for the life of the process */
  dlc_device_count_fn device_count;
  dlc_device_info_fn device_info;
  dlc_versions_fn versions;
  dlc_iota_fn iota;
  char status[768];
} cuda;

/* -- Probe --------------------------------------------------------------- */

/* A long path may cut the line short; a shorter status beats a failure. */
__attribute__((format(printf, 1, 2)))
static void status_set(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cuda.status, sizeof cuda.status, fmt, ap);
  va_end(ap);
}

/* The path of libddplua.so itself (through symlinks when it can be), so
** the CUDA library is found beside it wherever both were installed. */
static void self_path(char *out, size_t cap) {
  Dl_info info;
  char real[PATH_MAX];
  out[0] = 0;
  if (!dladdr((void *)&dl_cuda_status, &info) || !info.dli_fname) return;
  const char *p = realpath(info.dli_fname, real) ? real : info.dli_fname;
  snprintf(out, cap, "%s", p);
}

static void cuda_versions(char *out, size_t cap) {
  int drv = 0, rt = 0;
  char err[256];
  out[0] = 0;
  if (!cuda.versions || cuda.versions(&drv, &rt, err, sizeof err) != 0)
    return;
  if (drv > 0)  /* 0: the driver could not say (a stub, a broken install) */
    snprintf(out, cap, " (driver %d.%d, runtime %d.%d)", drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  else
    snprintf(out, cap, " (runtime %d.%d)", rt / 1000, rt % 1000 / 10);
}

/* Finds libddplua_cuda.so: $DDPLUA_CUDA_LIB, else next to libddplua.so.
** Returns 0, or -1 with cuda.status saying why. */
static int cuda_load_lib(const char *file) {
  char self[PATH_MAX], path[PATH_MAX + 32];
  const char *env = getenv("DDPLUA_CUDA_LIB");
  self_path(self, sizeof self);
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    const char *slash = strrchr(self, '/');
    int dirlen = slash ? (int)(slash - self) : 0;
    if (slash)
      snprintf(path, sizeof path, "%.*s/%s", dirlen, self, file);
    else
      snprintf(path, sizeof path, "%s", file);
  }
  if (access(path, F_OK) != 0) {
    if (env && *env)
      status_set("ddplua CUDA library not found at DDPLUA_CUDA_LIB=%s", env);
    else
      status_set("ddplua was built without CUDA (%s not "
                 "found next to %s)", file, self[0] ? self : "libddplua.so");
    return -1;
  }
  cuda.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!cuda.lib) {
    const char *e = dlerror();
    status_set("cannot load %s: %s", path, e ? e : "unknown dlopen error");
    return -1;
  }
  /* A library from an older build may lack a launcher: say which. */
  static const char *const names[] = {"dlc_device_count", "dlc_device_info",
                                      "dlc_versions", "dlc_iota"};
  void *syms[4];
  for (int i = 0; i < 4; i++) {
    syms[i] = dlsym(cuda.lib, names[i]);
    if (!syms[i]) {
      status_set("%s lacks %s (rebuild it with make)", path, names[i]);
      return -1;
    }
  }
  cuda.device_count = (dlc_device_count_fn)syms[0];
  cuda.device_info = (dlc_device_info_fn)syms[1];
  cuda.versions = (dlc_versions_fn)syms[2];
  cuda.iota = (dlc_iota_fn)syms[3];
  return 0;
}

static void cuda_probe(void) {
  char err[256] = "", vers[64] = "";
  int n = 0;
  cuda.ndev = 0;
  /* DDPLUA_CUDA_EMU=N: N devices emulated on the CPU by the same kernel
  ** sources built with g++ (runtime/cuda/emu), for tests without a GPU. */
  const char *emu = getenv("DDPLUA_CUDA_EMU");
  if (emu && *emu && strcmp(emu, "0") != 0) {
    if (cuda_load_lib("libddplua_cudaemu.so") != 0) return;
    if (cuda.device_count(&n, err, sizeof err) != 0 || n <= 0) {
      status_set("CUDA emulator found no device: %s", err);
      return;
    }
    cuda.ndev = n;
    device_register(DL_DEVICE_CUDA, &cuda_device);
    status_set("%d emulated CUDA device(s) (DDPLUA_CUDA_EMU: kernels run on the CPU)", n);
    return;
  }
  /* Checked first and apart from cudart (which dlopens it again itself) so
  ** a machine without the driver gets a plain answer. */
  cuda.libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda.libcuda) {
    status_set("no CUDA driver (libcuda.so.1 not found)");
    return;
  }
  if (cuda_load_lib("libddplua_cuda.so") != 0) return;
  /* Also covers a driver too old for our cudart (cudaErrorInsufficientDriver):
  ** the versions tell the user which side to upgrade. */
  if (cuda.device_count(&n, err, sizeof err) != 0 || n <= 0) {
    cuda_versions(vers, sizeof vers);
    status_set("CUDA driver found but no device: %s%s",
               err[0] ? err : "cudaGetDeviceCount returned 0", vers);
    return;
  }
  char name[256] = "?";
  int major = 0, minor = 0;
  if (cuda.device_info(0, name, sizeof name, &major, &minor, err,
                       sizeof err) != 0) {
    status_set("%d CUDA device(s), but cuda:0 cannot be queried: %s", n,
               err);
    return;
  }
  cuda_versions(vers, sizeof vers);
  cuda.ndev = n;
  device_register(DL_DEVICE_CUDA, &cuda_device);
  status_set("%d CUDA device(s): %s (sm_%d%d)%s", n, name, major, minor,
             vers);
}

static void cuda_init(void) { pthread_once(&cuda_once, cuda_probe); }

/* Any launcher by name, for the parts of the runtime (nccl.c) that bring
** their own.  The library is found even when no device is (then cuda.lib
** is set and cuda.ndev is 0): callers that need a device check for one. */
DL_HIDDEN void *cuda_sym(const char *name, const char **why) {
  static _Thread_local char msg[256];
  cuda_init();
  if (!cuda.lib) {
    if (why) *why = cuda.status;
    return NULL;
  }
  void *p = dlsym(cuda.lib, name);
  if (!p && why) {
    snprintf(msg, sizeof msg, "libddplua_cuda.so lacks %s (rebuild it with "
             "make)", name);
    *why = msg;
  }
  return p;
}

/* -- API ----------------------------------------------------------------- */

DL_API int dl_cuda_device_count(void) {
  cuda_init();
  return cuda.ndev;
}

DL_API const char *dl_cuda_status(void) {
  cuda_init();
  return cuda.status;
}

/* Returns DL_EDEVICE (status text in the message) when CUDA is unusable,
** DL_ENOMEM when the device is out of memory, DL_EDEVICE with CUDA's text
** for any other CUDA failure. */
DL_API int dl_cuda_selftest(int device, float *out, int n, float scale) {
  static const char *const op = "cuda_selftest";
  if (!out) return dl_err(EM_NULLARG, op, "out");
  if (n < 0) return dl_err(EM_BADVALUE, op, "n must be >= 0");
  cuda_init();
  if (cuda.ndev == 0) return dl_err(EM_CUDA_UNAVAIL, op, cuda.status);
  if (device < 0 || device >= cuda.ndev)
    return dl_err(EM_CUDA_DEVICE, op, device, cuda.ndev);
  char err[256] = "";
  int rc = cuda.iota(device, out, n, scale, err, sizeof err);
  if (rc == DL_ENOMEM) return dl_err(EM_CUDA_OOM, op, device, err);
  if (rc != 0) return dl_err(EM_CUDA_CALL, op, device, err);
  return 0;
}
