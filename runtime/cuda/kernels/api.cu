/*
** api.cu -- the one symbol the runtime looks up in libddplua_cuda.so (and the
** emulator library): dlc_api_get(), the table of every launcher (dlc.h),
** generated from their definitions by scripts/gen_dlc_api.sh.
*/
#include "common.cuh"
#include "trace.cuh"
#include "dlc_table.h"

extern "C" __attribute__((visibility("default"))) const dlc_api *dlc_api_get(void) {
  return &dlc_api_table;
}
