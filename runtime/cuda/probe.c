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
#include "core/trace.h"

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/* Written once under cuda_once, read-only afterwards: no lock needed. */
static struct {
  int ndev;
  void *libcuda, *lib;  /* kept open for the life of the process */
  const dlc_api *api;   /* the library's launchers (dlc.h), checked at load */
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
  if (!cuda.api || cuda.api->versions(&drv, &rt, err, sizeof err) != 0)
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
  /* One symbol, a versioned table: a library of another build is refused
  ** here, not when a launcher with other arguments is called. */
  dlc_api_get_fn get;
  void *sym = dlsym(cuda.lib, "dlc_api_get");
  memcpy(&get, &sym, sizeof get);  /* POSIX's dlsym idiom, without a cast warning */
  const dlc_api *api = get ? get() : NULL;
  if (!api) {
    status_set("%s lacks dlc_api_get (a library of an older build: rebuild it with make)", path);
    return -1;
  }
  if (api->abi_version != DLC_ABI_VERSION || api->size != sizeof(dlc_api)) {
    status_set("%s is of another build (launcher ABI %u, %u bytes; this runtime wants %u, %zu):"
               " rebuild it with make", path, (unsigned)api->abi_version, (unsigned)api->size,
               (unsigned)DLC_ABI_VERSION, sizeof(dlc_api));
    return -1;
  }
  cuda.api = api;
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
    /* DDPLUA_CUDA_EMU_RACECHECK=1: the build whose kernels report every
    ** shared-memory access to the race checker (docs/cuda.md) */
    const char *race = getenv("DDPLUA_CUDA_EMU_RACECHECK");
    int checked = race && *race && strcmp(race, "0") != 0;
    if (cuda_load_lib(checked ? "libddplua_cudaemu_race.so" : "libddplua_cudaemu.so") != 0) return;
    if (cuda.api->device_count(&n, err, sizeof err) != 0 || n <= 0) {
      status_set("CUDA emulator found no device: %s", err);
      return;
    }
    cuda.ndev = n;
    device_register(DL_DEVICE_CUDA, &cuda_device);
  cuda_trace_register();
    status_set("%d emulated CUDA device(s) (DDPLUA_CUDA_EMU: kernels run on the CPU%s)", n,
               checked ? ", shared-memory race checker on" : "");
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
  if (cuda.api->device_count(&n, err, sizeof err) != 0 || n <= 0) {
    cuda_versions(vers, sizeof vers);
    status_set("CUDA driver found but no device: %s%s",
               err[0] ? err : "cudaGetDeviceCount returned 0", vers);
    return;
  }
  char name[256] = "?";
  int major = 0, minor = 0;
  if (cuda.api->device_info(0, name, sizeof name, &major, &minor, err,
                       sizeof err) != 0) {
    status_set("%d CUDA device(s), but cuda:0 cannot be queried: %s", n,
               err);
    return;
  }
  cuda_versions(vers, sizeof vers);
  cuda.ndev = n;
  device_register(DL_DEVICE_CUDA, &cuda_device);
  cuda_trace_register();
  status_set("%d CUDA device(s): %s (sm_%d%d)%s", n, name, major, minor,
             vers);
}

static void cuda_init(void) { pthread_once(&cuda_once, cuda_probe); }

/* The loaded library's launchers (dlc.h), loading it first if needed; NULL
** with DL_EDEVICE naming op and the probe's status when there is none.  The
** library is there even when no device is (then dl_cuda_device_count() is
** 0): callers that need a device check for one.  While a trace is on, op
** labels the span of the launcher this thread calls next. */
DL_HIDDEN const dlc_api *cuda_api(const char *op) {
  cuda_init();
  if (cuda.api) {
    if (trace_on()) cuda.api->trace_label(op);
    return cuda.api;
  }
  return dl_errp(EM_CUDA_UNAVAIL, op, cuda.status);
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
  int rc = cuda.api->iota(device, out, n, scale, err, sizeof err);
  if (rc == DL_ENOMEM) return dl_err(EM_CUDA_OOM, op, device, err);
  if (rc != 0) return dl_err(EM_CUDA_CALL, op, device, err);
  return 0;
}
