/* cuda_fp16.h (emulator) -- float16 storage and its two conversions. */
#ifndef DLC_EMU_CUDA_FP16_H
#define DLC_EMU_CUDA_FP16_H
#include <stdint.h>
struct __half { uint16_t x; };
__half __float2half(float f);
float __half2float(__half h);
#endif
