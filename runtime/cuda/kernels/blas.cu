/*
** blas.cu -- matrix products on CUDA tensors: cuBLAS (one handle per
** device, on the device's stream) for the float types, bfloat16 and
** float16 through cublasGemm(StridedBatched)Ex with float32 accumulation,
** and a plain kernel for integers and empty inner dims.
*/
#include <mutex>

#include <cublas_v2.h>

#include "common.cuh"

/* -- cuBLAS, opened at run time ---------------------------------------------- */

#ifdef DLC_EMU
#define CB(fn) cublas##fn
static int cublas_open(void) { return 0; }
#else
#include <dlfcn.h>
#include <stdlib.h>

/* Not linked, opened on first use (as NCCL is): the library then loads on
** a GPU machine whose cuBLAS has another soname (CUDA 12's libcublas.so.12;
** the calls used here have the same ABI in 12 and 13), and a machine
** without cuBLAS loses the matmuls only, with a message naming what is
** missing.  DDPLUA_CUBLAS_LIB names the file to use. */
static struct {
  cublasStatus_t (*Create)(cublasHandle_t *);
  cublasStatus_t (*Destroy)(cublasHandle_t);
  cublasStatus_t (*SetStream)(cublasHandle_t, cudaStream_t);
  /* the C (32-bit int) entry points; C++ sees overloads of these names */
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                           const void *, const void *, cudaDataType, int, const void *,
                           cudaDataType, int, const void *, void *, cudaDataType, int,
                           cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                         int, int, int, const void *, const void *, cudaDataType,
                                         int, long long, const void *, cudaDataType, int,
                                         long long, const void *, void *, cudaDataType, int,
                                         long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  const char *(*GetStatusString)(cublasStatus_t);
} cb;
#define CB(fn) cb.fn

static int cublas_open(void) {
  static std::once_flag once;
  static char why[512];
  std::call_once(once, [] {
    const char *env = getenv("DDPLUA_CUBLAS_LIB");
    const char *names[] = {env && *env ? env : "libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *lib = NULL;
    for (const char *n : names)
      if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      const char *e = dlerror();
      snprintf(why, sizeof why, "cannot load cuBLAS (libcublas.so.13 or .12; DDPLUA_CUBLAS_LIB names "
               "another): %s", e ? e : "not found");
      return;
    }
    struct { void **slot; const char *name; } syms[] = {
        {(void **)&cb.Create, "cublasCreate_v2"}, {(void **)&cb.Destroy, "cublasDestroy_v2"},
        {(void **)&cb.SetStream, "cublasSetStream_v2"}, {(void **)&cb.GemmEx, "cublasGemmEx"},
        {(void **)&cb.GemmStridedBatchedEx, "cublasGemmStridedBatchedEx"},
        {(void **)&cb.GetStatusString, "cublasGetStatusString"}};
    for (auto &s : syms)
      if (!(*s.slot = dlsym(lib, s.name))) {
        snprintf(why, sizeof why, "the cuBLAS library found lacks %s", s.name);
        cb.Create = NULL;
        return;
      }
  });
  if (!cb.Create) {
    dlc_set_error("%s", why);
    return DL_EDEVICE;
  }
  return 0;
}
#endif

/* -- Handles ---------------------------------------------------------------- */

enum { MAX_DEV = 64 };

/* Created on first use and kept for the process: cuBLAS handles are
** costly to make and bound to the device current at creation. */
static int handle_of(int device, cublasHandle_t *out) {
  static cublasHandle_t handles[MAX_DEV];
  static std::mutex mu;
  if (device < 0 || device >= MAX_DEV) {
    dlc_set_error("cuBLAS on cuda:%d: no such device", device);
    return DL_EDEVICE;
  }
  if (int rc = cublas_open()) return rc;
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[device]) {
    cublasHandle_t h;
    cublasStatus_t s = CB(Create)(&h);
    if (s != CUBLAS_STATUS_SUCCESS) {
      dlc_set_error("cublasCreate on cuda:%d: %s", device, CB(GetStatusString)(s));
      return s == CUBLAS_STATUS_ALLOC_FAILED ? DL_ENOMEM : DL_EDEVICE;
    }
    if ((s = CB(SetStream)(h, dlc_stream(device))) != CUBLAS_STATUS_SUCCESS) {
      dlc_set_error("cublasSetStream on cuda:%d: %s", device, CB(GetStatusString)(s));
      CB(Destroy)(h);
      return DL_EDEVICE;
    }
    handles[device] = h;
  }
  *out = handles[device];
  return 0;
}

/* -- GEMM ---------------------------------------------------------------------- */

/* C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for i < batch, in
** cuBLAS's column-major terms (m x n results, k inner; ta/tb 0: as is,
** 1: transposed); dtype float32, float64, bfloat16 or float16 (half types
** accumulate in float32).  tf32: float32 may use TF32 tensor cores.
** Strides in elements; beta 0 never reads C. */
DLC_API int dlc_gemm(int device, int dtype, int ta, int tb, int m, int n, int k, double alpha,
                     const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb,
                     int64_t sb, double beta, void *c, int64_t ldc, int64_t sc, int64_t batch,
                     int tf32) {
  if (m == 0 || n == 0 || batch == 0) return 0;
  cudaDataType t;
  cublasComputeType_t comp;
  switch (dtype) {
    case DL_FLOAT32:
      t = CUDA_R_32F;
      comp = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DL_FLOAT64: t = CUDA_R_64F; comp = CUBLAS_COMPUTE_64F; break;
    case DL_BFLOAT16: t = CUDA_R_16BF; comp = CUBLAS_COMPUTE_32F; break;
    case DL_FLOAT16: t = CUDA_R_16F; comp = CUBLAS_COMPUTE_32F; break;
    default:
      dlc_set_error("gemm: dtype %d is not a float type", dtype);
      return DL_EDTYPE;
  }
  if (lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX || batch > INT32_MAX) {
    dlc_set_error("gemm: a leading dimension or batch count exceeds cuBLAS's int range");
    return DL_EINVAL;
  }
  DLC_ON(device, "gemm");
  cublasHandle_t h;
  int rc = handle_of(device, &h);
  if (rc) return rc;
  /* alpha and beta in the compute type's scalar type: double for 64F,
  ** float for every 32F compute type (the half types included) */
  double ad = alpha, bd = beta;
  float af = (float)alpha, bf = (float)beta;
  const void *pa = dtype == DL_FLOAT64 ? (const void *)&ad : (const void *)&af;
  const void *pb = dtype == DL_FLOAT64 ? (const void *)&bd : (const void *)&bf;
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t s;
  if (batch == 1)
    s = CB(GemmEx)(h, oa, ob, m, n, k, pa, a, t, (int)lda, b, t, (int)ldb, pb, c, t, (int)ldc,
                     comp, CUBLAS_GEMM_DEFAULT);
  else
    s = CB(GemmStridedBatchedEx)(h, oa, ob, m, n, k, pa, a, t, (int)lda, sa, b, t, (int)ldb,
                                   sb, pb, c, t, (int)ldc, sc, (int)batch, comp,
                                   CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    dlc_set_error("cuBLAS gemm (m %d, n %d, k %d, batch %lld) on cuda:%d: %s", m, n, k,
                  (long long)batch, device, CB(GetStatusString)(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? DL_ENOMEM : DL_EDEVICE;
  }
  return 0;
}

/* -- Plain product ------------------------------------------------------------ */

/* Integer math in the unsigned type of the CPU kernel (linalg.c: INT_MM),
** so overflow wraps the same way; floats accumulate in acc_of. */
template <class T> struct mm_acc { typedef typename acc_of<T>::type type; };
template <> struct mm_acc<int32_t> { typedef uint32_t type; };
template <> struct mm_acc<int64_t> { typedef uint64_t type; };
template <> struct mm_acc<uint8_t> { typedef uint32_t type; };

template <class A> __device__ __forceinline__ A scalar_as(double v) {
  if constexpr (std::is_floating_point<A>::value) {
    return (A)v;
  } else {
    /* PyTorch truncates alpha and beta (linalg.c: int_scalar) */
    int64_t i = !(v == v) ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    return (A)(uint64_t)i;
  }
}

/* One thread per output element (grid-stride). */
template <class T> __global__ void mm_naive(dlc_mm p) {
  typedef typename mm_acc<T>::type A;
  const int64_t total = p.nbatch * p.m * p.n;
  const A alpha = scalar_as<A>(p.alpha), beta = scalar_as<A>(p.beta);
  const T *a = (const T *)p.a, *b = (const T *)p.b;
  T *c = (T *)p.c;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)blockDim.x * gridDim.x) {
    int64_t j = e % p.n, i = (e / p.n) % p.m, bi = e / (p.n * p.m);
    int64_t oa = 0, ob = 0;
    for (int d = p.nb - 1; d >= 0; d--) {
      int64_t q = bi % p.bshape[d];
      bi /= p.bshape[d];
      oa += q * p.ast[d];
      ob += q * p.bst[d];
    }
    A acc = 0;
    for (int64_t q = 0; q < p.k; q++)
      acc += cvt<A, T>(a[oa + i * p.as0 + q * p.as1]) * cvt<A, T>(b[ob + q * p.bs0 + j * p.bs1]);
    A v = alpha * acc;
    if (p.beta != 0) v += beta * cvt<A, T>(c[e]);
    c[e] = cvt<T, A>(v);
  }
}

DLC_API int dlc_matmul_naive(int device, const dlc_mm *p) {
  int64_t total = p->nbatch * p->m * p->n;
  if (total == 0) return 0;
  DLC_ON(device, "matmul");
  int rc = DL_EDTYPE;
  dlc_mm v = *p;
  dlc_dispatch(p->dtype, [&](auto x) {
    typedef decltype(x) T;
    if constexpr (!std::is_same<T, bool>::value) {
      auto k = mm_naive<T>;
      DLC_LAUNCH(k, dlc_blocks(total, 256), 256, 0, dlc_stream(device), v);
      rc = 0;
    }
  });
  if (rc) {
    dlc_set_error("matmul: dtype %d not supported", p->dtype);
    return rc;
  }
  return dlc_check_launch("matmul", device);
}
