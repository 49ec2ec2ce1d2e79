/*
** philox.h -- one Philox4x32-10 block and the maps from its words to
** uniform numbers, shared by the CPU generator (random.c, C11) and the CUDA
** kernels (cuda/random.cu, nvcc or the g++ emulator): both devices must
** draw bit-identical numbers from a seed, so there is one copy.
*/
#ifndef DL_PHILOX_H
#define DL_PHILOX_H

#include <stdint.h>

/* The emulator builds device code as plain C++: only nvcc needs these. */
#ifdef __CUDACC__
#define PHILOX_FN static inline __host__ __device__
#else
#define PHILOX_FN static inline
#endif

/* 4 random words from the 128-bit counter (counter, 0) under key seed. */
PHILOX_FN void philox(uint64_t seed, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* A float32 uniform in [0, 1) from one word (what rand gives). */
PHILOX_FN double philox_unit24(uint32_t w) { return (double)(w >> 8) * 0x1p-24; }

/* A float64 uniform in [0, 1) from two words. */
PHILOX_FN double philox_unit53(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

#endif
