/*
** badabi.c -- a stand-in for libddplua_cuda.so of another build: its
** launcher table has another ABI version (tests/cuda_abi_spec.lua checks
** that the runtime refuses it with a message instead of calling into it).
*/
#include <stdint.h>

typedef struct {
  uint32_t abi_version, size;
} fake_api;

__attribute__((visibility("default"))) const fake_api *dlc_api_get(void) {
  static const fake_api api = {999, sizeof(fake_api)};
  return &api;
}
