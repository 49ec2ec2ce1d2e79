/* dist/launch_env.c -- TEMPORARY stub of the launch layout (dl_launch_detect): always a world of one; the lead's implementation replaces this file. */
#include <string.h>

#include "core/internal.h"

DL_API int dl_launch_detect(dl_launch *out) {
  memset(out, 0, sizeof *out);
  out->kind = DL_LAUNCH_ALONE;
  out->world_size = out->local_world_size = out->nnodes = 1;
  return 0;
}

DL_API const char *dl_launch_kind_name(dl_launch_kind kind) {
  static const char *const names[] = {"alone", "ddplua", "mpi", "slurm", "torchrun", "env"};
  return (unsigned)kind < sizeof names / sizeof *names ? names[kind] : "?";
}
