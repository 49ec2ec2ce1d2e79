/*
** test_racecheck.cc -- the CUDA emulator's race checker and scheduling
** modes on small kernels written to race (read-after-write, write-after-
** read, write-after-write, a missing __syncwarp, divergent __syncthreads,
** the softmax reduction with its first barrier removed) and their fixed
** versions, which must come out clean.
**
** Built like the race checker's library (make: -fsanitize=thread, whose
** hooks racecheck.cc defines) and linked with the emulator itself, so
** these kernels run exactly as the runtime's do under
** DDPLUA_CUDA_EMU_RACECHECK=1.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>

#include "cuda_runtime.h"
#include "cuda/emu/racecheck.h"

static int passed, failed;

static void check(bool ok, const char *what, const std::string &detail = "") {
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
  }
}

/* Launches k on one block of n threads (m bytes of dynamic shared memory)
** in scheduling mode `sched`; the error text, "" when the launch was
** clean. */
static std::string run(void (*k)(int *), int *out, int n, const char *sched, size_t m = 0) {
  setenv("DDPLUA_CUDA_EMU_SCHED", sched, 1);
  cudaGetLastError();
  dlc_emu::launch(dim3(1), dim3((unsigned)n), m, 0, reinterpret_cast<const void *>(k),
                  [=]() { k(out); });
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

static bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }
/* " at tests/emu/test_racecheck.cc:LINE " as a report says it (make runs
** the tests from the repository's root: paths come relative to it) */
static std::string at(int line) { return " at tests/emu/test_racecheck.cc:" + std::to_string(line) + " "; }

/* -- Kernels ----------------------------------------------------------- */

/* Each thread writes its word and reads its neighbour's: no barrier. */
static const int NEIGHBOUR_WRITE = __LINE__ + 4;
__global__ void racy_neighbour(int *out) {
  __shared__ int sh[64];
  int t = threadIdx.x;
  sh[t] = t;
  out[t] = sh[(t + 1) % blockDim.x];
}
__global__ void fixed_neighbour(int *out) {
  __shared__ int sh[64];
  int t = threadIdx.x;
  sh[t] = t;
  __syncthreads();
  out[t] = sh[(t + 1) % blockDim.x];
}

/* Every thread writes the same word. */
__global__ void racy_same_word(int *out) {
  __shared__ int flag;
  flag = (int)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = flag;
}
__global__ void fixed_same_word(int *out) {
  __shared__ int flag;
  if (threadIdx.x == 0) flag = 7;
  __syncthreads();
  out[threadIdx.x] = flag;
}

/* Lanes of one warp trade words: racy without __syncwarp (no lockstep
** since Volta), ordered by __syncwarp or by a shuffle between. */
__global__ void racy_warp(int *out) {
  __shared__ int sh[32];
  int l = threadIdx.x;
  sh[l] = l * 3;
  out[l] = sh[l ^ 1];
}
__global__ void fixed_warp(int *out) {
  __shared__ int sh[32];
  int l = threadIdx.x;
  sh[l] = l * 3;
  __syncwarp();
  out[l] = sh[l ^ 1];
}
__global__ void fixed_warp_shuffle(int *out) {
  __shared__ int sh[32];
  int l = threadIdx.x;
  sh[l] = l * 3;
  int x = __shfl_xor_sync(0xffffffffu, l, 1);
  out[l] = sh[l ^ 1] + x - x;
}

/* A barrier only part of the block reaches. */
static const int BRANCH_BARRIER = __LINE__ + 5;
__global__ void divergent_branch(int *out) {
  __shared__ int sh[64];
  int t = threadIdx.x;
  sh[t] = t;
  if (t < 16) __syncthreads();
  out[t] = sh[t];
}
__global__ void divergent_exit(int *out) {
  __shared__ int sh[64];
  int t = threadIdx.x;
  if (t >= 16) return;
  sh[t] = t;
  __syncthreads();
  out[t] = sh[(t + 1) % 16];
}

/* The block's sum and max of its thread numbers, as scan.cu's group_all
** reduces them (a shared word per warp), twice in a row: with FIRST_BARRIER
** false a fast warp's second write can land before a slow warp has read
** the first result. */
template <bool FIRST_BARRIER> __device__ int block_reduce(int v, bool max, int *sh) {
  for (int d = 16; d > 0; d /= 2) {
    int o = __shfl_xor_sync(0xffffffffu, v, d);
    v = max ? (o > v ? o : v) : v + o;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (FIRST_BARRIER) __syncthreads();
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = sh[0];
  for (int w = 1; w < (int)blockDim.x / 32; w++) v = max ? (sh[w] > v ? sh[w] : v) : v + sh[w];
  return v;
}
template <bool FIRST_BARRIER> __global__ void max_then_sum(int *out) {
  __shared__ int sh[8];
  int t = threadIdx.x;
  int m = block_reduce<FIRST_BARRIER>(t, true, sh);
  int s = block_reduce<FIRST_BARRIER>(t, false, sh);
  out[t] = m * 100000 + s;
}

/* Atomics on one shared word are no race with each other; a plain
** store beside them is. */
__global__ void atomic_count(int *out) {
  __shared__ int n;
  if (threadIdx.x == 0) n = 0;
  __syncthreads();
  atomicAdd(&n, 1);
  __syncthreads();
  out[threadIdx.x] = n;
}
__global__ void atomic_and_store(int *out) {
  __shared__ int n;
  if (threadIdx.x == 0) n = 0;
  __syncthreads();
  if (threadIdx.x == 5) n = 100;
  else atomicAdd(&n, 1);
  __syncthreads();
  out[threadIdx.x] = n;
}

/* Dynamic shared memory (extern __shared__ on a GPU). */
__global__ void racy_dynamic(int *out) {
  int *sh = reinterpret_cast<int *>(dlc_emu::dyn_smem);
  int t = threadIdx.x;
  sh[t] = t;
  out[t] = sh[(t + 3) % blockDim.x];
}

/* -- Tests ------------------------------------------------------------- */

int main(void) {
  int out[256];
  std::string e;

  check(dlc_emu::rc::enabled(), "the instrumented objects turn the checker on");

  /* read-after-write: in reverse order thread t+1 wrote before t reads */
  e = run(racy_neighbour, out, 64, "reverse");
  check(has(e, "read-after-write race"), "RAW reported", e);
  check(has(e, "racy_neighbour"), "the report names the kernel", e);
  check(has(e, "racy_neighbour(...)::sh, byte"), "the report names the shared array", e);
  check(has(e, "of block (0,0,0)") && has(e, "read by thread (") && has(e, "write by thread ("),
        "the report names both threads and accesses", e);
  check(has(e, at(NEIGHBOUR_WRITE + 1).c_str()), "the read's source line", e);
  check(has(e, at(NEIGHBOUR_WRITE).c_str()), "the write's source line", e);
  check(has(e, "is missing"), "the report says what is missing", e);
  /* write-after-read: in ascending order thread t reads before t+1 writes */
  e = run(racy_neighbour, out, 64, "linear");
  check(has(e, "write-after-read race"), "WAR reported", e);
  e = run(racy_neighbour, out, 64, "shuffle");
  check(has(e, "race"), "the race reported in shuffled order too", e);
  e = run(racy_neighbour, out, 64, "runahead");
  check(has(e, "race"), "and in run-ahead order", e);
  for (const char *m : {"shuffle", "runahead", "reverse", "linear"}) {
    e = run(fixed_neighbour, out, 64, m);
    bool right = true;
    for (int t = 0; t < 64; t++) right = right && out[t] == (t + 1) % 64;
    check(e.empty() && right, "the barrier version is clean and right", std::string(m) + ": " + e);
  }

  e = run(racy_same_word, out, 64, "shuffle");
  check(has(e, "write-after-write race") && has(e, "racy_same_word(...)::flag"), "WAW reported", e);
  e = run(fixed_same_word, out, 64, "shuffle");
  check(e.empty() && out[63] == 7, "one writer, then a barrier: clean", e);

  e = run(racy_warp, out, 32, "shuffle");
  check(has(e, "race") && has(e, "same warp: a __syncwarp or __syncthreads is missing"),
        "a missing __syncwarp reported", e);
  e = run(fixed_warp, out, 32, "shuffle");
  check(e.empty() && out[4] == 15, "__syncwarp orders the warp's lanes", e);
  e = run(fixed_warp_shuffle, out, 32, "runahead");
  check(e.empty() && out[4] == 15, "a shuffle orders the warp's lanes", e);

  e = run(divergent_branch, out, 64, "shuffle");
  check(has(e, "divergent __syncthreads") && has(e, at(BRANCH_BARRIER).c_str()),
        "a __syncthreads in a branch reported", e);
  e = run(divergent_exit, out, 64, "shuffle");
  check(has(e, "divergent __syncthreads") && has(e, "has finished"),
        "a __syncthreads after some threads returned reported", e);

  /* the softmax reduction without its first barrier (issue 15's mutant of
  ** scan.cu's group_all): reported in any order; with it, clean */
  for (const char *m : {"shuffle", "runahead", "reverse", "linear"}) {
    e = run(max_then_sum<false>, out, 256, m);
    check(has(e, "race") && has(e, "max_then_sum<false>(...)::sh"), "the missing first barrier reported",
          std::string(m) + ": " + e);
    e = run(max_then_sum<true>, out, 256, m);
    check(e.empty() && out[0] == 255 * 100000 + 32640 && out[255] == out[0],
          "the reduction with both barriers is clean and right", std::string(m) + ": " + e);
  }

  e = run(atomic_count, out, 128, "shuffle");
  check(e.empty() && out[0] == 128, "atomics on one shared word: clean", e);
  e = run(atomic_and_store, out, 64, "shuffle");
  check(has(e, "race"), "a store beside atomics reported", e);

  e = run(racy_dynamic, out, 64, "reverse", 64 * sizeof(int));
  check(has(e, "race") && has(e, "dynamic shared memory, byte"), "dynamic shared memory checked", e);

  /* the scheduling modes without the checker: run-ahead order makes the
  ** missing barrier give a wrong answer by itself, as a fast warp on a GPU
  ** may */
  dlc_emu::rc::on = false;
  e = run(max_then_sum<false>, out, 256, "runahead");
  bool wrong = false;
  for (int t = 0; t < 256; t++) wrong = wrong || out[t] != 255 * 100000 + 32640;
  check(e.empty() && wrong, "run-ahead order alone shows the missing barrier", e);
  e = run(max_then_sum<true>, out, 256, "runahead");
  bool right = true;
  for (int t = 0; t < 256; t++) right = right && out[t] == 255 * 100000 + 32640;
  check(e.empty() && right, "and the fixed reduction is right in run-ahead order", e);
  e = run(racy_neighbour, out, 64, "reverse");
  check(e.empty(), "without the checker nothing is reported", e);
  dlc_emu::rc::on = true;

  printf("test_emu_racecheck: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
