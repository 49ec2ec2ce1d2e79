/* cuda_bf16.h (emulator) -- bfloat16 storage and its two conversions. */
#ifndef DLC_EMU_CUDA_BF16_H
#define DLC_EMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>
struct __nv_bfloat16 { uint16_t x; };
/* Round to nearest even, NaN kept quiet: what the hardware does. */
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) { r.x = (uint16_t)((u >> 16) | 0x40); return r; }
  u += 0x7fffu + ((u >> 16) & 1u);
  r.x = (uint16_t)(u >> 16);
  return r;
}
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = (uint32_t)h.x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
#endif
