/*
** elementwise.cu -- casts, fills, unary, binary, clamp and where on CUDA
** tensors, with the CPU's semantics (runtime/elementwise.c): the same
** NaN rules, integer wrap-around, Python remainder, and errors for integer
** division by zero and negative integer powers.
*/
#include "common.cuh"

/* -- Math overloads for float and double ----------------------------------- */

#define M1(fn)                                                                   \
  __device__ __forceinline__ float m_##fn(float x) { return fn##f(x); }          \
  __device__ __forceinline__ double m_##fn(double x) { return fn(x); }
#define M2(fn)                                                                   \
  __device__ __forceinline__ float m_##fn(float x, float y) { return fn##f(x, y); } \
  __device__ __forceinline__ double m_##fn(double x, double y) { return fn(x, y); }
M1(fabs) M1(exp) M1(log) M1(sqrt) M1(sin) M1(cos) M1(tanh) M1(erf) M1(floor)
M1(ceil) M1(nearbyint) M1(trunc) M1(log1p) M1(expm1) M1(log2)
M2(pow) M2(fmod) M2(atan2)

/* Integer math wraps as PyTorch's does: computed unsigned (signed
** overflow is undefined). */
template <class T, bool I = std::is_integral<T>::value && !std::is_same<T, bool>::value>
struct uns { typedef T type; };
template <class T> struct uns<T, true> { typedef typename std::make_unsigned<T>::type type; };

/* -- Binary ---------------------------------------------------------------- */

enum { E_DIV0 = 1, E_NEGPOW = 2 };

template <int OP, class T> __device__ __forceinline__ T bin_arith(T x, T y, int *err) {
  typedef typename uns<T>::type U;
  constexpr bool F = std::is_floating_point<T>::value;
  constexpr bool B = std::is_same<T, bool>::value;
  if constexpr (OP == DL_ADD) return B ? (T)(x || y) : F ? x + y : (T)((U)x + (U)y);
  else if constexpr (OP == DL_SUB) return F ? x - y : (T)((U)x - (U)y);
  else if constexpr (OP == DL_MUL) return B ? (T)(x && y) : F ? x * y : (T)((U)x * (U)y);
  else if constexpr (OP == DL_DIV) return x / y;
  else if constexpr (OP == DL_MAXIMUM) {
    if constexpr (F) return (x > y || x != x) ? x : y;
    else return x > y ? x : y;
  } else if constexpr (OP == DL_MINIMUM) {
    if constexpr (F) return (x < y || x != x) ? x : y;
    else return x < y ? x : y;
  } else if constexpr (OP == DL_ATAN2) {
    return m_atan2(x, y);
  } else if constexpr (OP == DL_POW) {
    if constexpr (F) return m_pow(x, y);
    else {
      if (y < 0) {
        if (x == 1) return 1;
        if (x == (T)-1) return (y & 1) ? (T)-1 : 1;
        *err = E_NEGPOW;
        return 0;
      }
      uint64_t r = 1, b = (uint64_t)x;
      while (y) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
      }
      return (T)r;
    }
  } else if constexpr (OP == DL_FMOD || OP == DL_REMAINDER) {
    T r;
    if constexpr (F) {
      r = m_fmod(x, y);
    } else {
      if (y == 0) { *err = E_DIV0; return 0; }
      if (y == (T)-1) return 0;
      r = x % y;
    }
    if constexpr (OP == DL_REMAINDER)
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
  }
  return 0;
}

template <int OP, class T> struct bin_f {
  int *err;
  __device__ void operator()(char **p) const {
    T x = *(const T *)p[1], y = *(const T *)p[2];
    if constexpr (OP >= DL_EQ && OP <= DL_GE) {
      bool r = OP == DL_EQ ? x == y : OP == DL_NE ? x != y : OP == DL_LT ? x < y
             : OP == DL_LE ? x <= y : OP == DL_GT ? x > y : x >= y;
      *(bool *)p[0] = r;
    } else if constexpr (OP == DL_LOGICAL_AND) {
      *(bool *)p[0] = (x != 0) && (y != 0);
    } else if constexpr (OP == DL_LOGICAL_OR) {
      *(bool *)p[0] = (x != 0) || (y != 0);
    } else {
      *(T *)p[0] = bin_arith<OP, T>(x, y, err);
    }
  }
};

/* bfloat16 / float16: loaded into float32, computed there, rounded once
** into the result -- what the CPU does through float32 copies, in one
** kernel.  Operands whose bit is set in smask are float32 host scalars. */
template <int OP, class H> struct bin_half_f {
  unsigned smask;
  __device__ void operator()(char **p) const {
    float x = (smask & 2u) ? *(const float *)p[1] : cvt<float, H>(*(const H *)p[1]);
    float y = (smask & 4u) ? *(const float *)p[2] : cvt<float, H>(*(const H *)p[2]);
    union { float f; bool b; } r;
    char *q[3] = {(char *)&r, (char *)&x, (char *)&y};
    bin_f<OP, float>{NULL}(q);
    if constexpr ((OP >= DL_EQ && OP <= DL_GE) || OP == DL_LOGICAL_AND || OP == DL_LOGICAL_OR)
      *(bool *)p[0] = r.b;
    else
      *(H *)p[0] = cvt<H, float>(r.f);
  }
};

/* A word of device memory per device where kernels report integer
** errors; read (with a sync) only after the ops that can set it. */
static int *err_word(int device) {
  static int *words[64];
  if (device < 0 || device >= 64) return NULL;
  if (!words[device]) {
    void *p = NULL;
    if (cudaMalloc(&p, sizeof(int)) != cudaSuccess) return NULL;
    cudaMemset(p, 0, sizeof(int));
    words[device] = (int *)p;
  }
  return words[device];
}

template <int OP> static int run_binary(int device, int dtype, const dlc_iter &it) {
  constexpr bool can_fail = OP == DL_POW || OP == DL_FMOD || OP == DL_REMAINDER;
  bool int_math = dtype != DL_FLOAT32 && dtype != DL_FLOAT64;
  int *err = NULL;
  int rc = DL_EDTYPE;
  if (can_fail && int_math) {
    DLC_ON(device, "binary op");
    if (!(err = err_word(device))) return dlc_cuda_fail(cudaErrorMemoryAllocation, "error word", device);
  }
  bool known = false;
  auto go = [&](auto tag) {
    typedef decltype(tag) T;
    constexpr bool F = std::is_floating_point<T>::value;
    constexpr bool B = std::is_same<T, bool>::value;
    if constexpr (std::is_same<T, bf16_t>::value || std::is_same<T, f16_t>::value) {
      known = true;
      rc = dlc_run<3>("binary op", device, it, bin_half_f<OP, T>{it.scalar_mask});
      return;
    }
    constexpr bool ok = (OP >= DL_EQ && OP <= DL_GE) || OP == DL_LOGICAL_AND ||
                        OP == DL_LOGICAL_OR ||
                        F ||
                        (!F && !B && OP != DL_DIV && OP != DL_ATAN2) ||
                        (B && (OP == DL_ADD || OP == DL_MUL || OP == DL_MAXIMUM || OP == DL_MINIMUM));
    if constexpr (ok && (std::is_same<T, float>::value || std::is_same<T, double>::value ||
                         std::is_same<T, int32_t>::value || std::is_same<T, int64_t>::value ||
                         std::is_same<T, uint8_t>::value || B)) {
      known = true;
      rc = dlc_run<3>("binary op", device, it, bin_f<OP, T>{err});
    }
  };
  dlc_dispatch(dtype, go);
  if (!known) {
    dlc_set_error("binary op %d has no CUDA kernel for dtype %d", OP, dtype);
    return DL_EDTYPE;
  }
  if (rc || !err) return rc;
  int flag = 0;
  cudaError_t e = cudaMemcpy(&flag, err, sizeof flag, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return dlc_cuda_fail(e, "reading the error word", device);
  if (!flag) return 0;
  cudaMemset(err, 0, sizeof(int));
  dlc_set_error(flag == E_DIV0 ? "integer division by zero" : "negative integer power");
  return DL_EINVAL;
}

/* op (dl_binop), computed in dtype (float32, float64, int32, int64,
** uint8, bool); the result is dtype, or bool for comparisons.  dtype
** bfloat16 / float16: operands of that dtype or float32 host scalars,
** computed in float32 registers and rounded once into the result.  Integer
** division by zero and negative integer powers: returns DL_EINVAL after
** a stream sync, with the message naming which (these sync; others not). */
DLC_API int dlc_binary(int device, int op, int dtype, const dlc_iter *it) {
  switch (op) {
#define C(OP) case OP: return run_binary<OP>(device, dtype, *it);
    C(DL_ADD) C(DL_SUB) C(DL_MUL) C(DL_DIV) C(DL_POW) C(DL_MAXIMUM) C(DL_MINIMUM)
    C(DL_EQ) C(DL_NE) C(DL_LT) C(DL_LE) C(DL_GT) C(DL_GE) C(DL_LOGICAL_AND)
    C(DL_LOGICAL_OR) C(DL_FMOD) C(DL_REMAINDER) C(DL_ATAN2)
#undef C
  }
  dlc_set_error("unknown binary op %d", op);
  return DL_EINVAL;
}

/* -- Unary ----------------------------------------------------------------- */

template <class T> __device__ __forceinline__ T sigm(T x) { return (T)1 / ((T)1 + m_exp(-x)); }

template <int OP, class T> struct un_f {
  __device__ void operator()(char **p) const {
    T x = *(const T *)p[1];
    typedef typename uns<T>::type U;
    constexpr bool F = std::is_floating_point<T>::value;
    if constexpr (OP == DL_LOGICAL_NOT) { *(bool *)p[0] = x == 0; return; }
    else if constexpr (OP == DL_ISNAN) { *(bool *)p[0] = x != x; return; }
    else if constexpr (OP == DL_ISINF) {
      if constexpr (F) *(bool *)p[0] = m_fabs(x) == (T)INFINITY;
      else *(bool *)p[0] = false;
      return;
    } else if constexpr (OP == DL_ISFINITE) {
      if constexpr (F) *(bool *)p[0] = x - x == 0;
      else *(bool *)p[0] = true;
      return;
    } else {
      T r;
      if constexpr (OP == DL_NEG) r = F ? -x : (T)(0 - (U)x);
      else if constexpr (OP == DL_ABS) { if constexpr (F) r = m_fabs(x); else r = x < 0 ? (T)(0 - (U)x) : x; }
      else if constexpr (OP == DL_RELU) { if constexpr (F) r = x < 0 ? 0 : x; else r = x > 0 ? x : 0; }
      else if constexpr (OP == DL_SIGN) { if constexpr (std::is_same<T, bool>::value) r = x; else r = (T)((x > 0) - (x < 0)); }
      else if constexpr (OP == DL_SQUARE) { if constexpr (F) r = x * x; else r = (T)((U)x * (U)x); }
      else if constexpr (!F) r = x;  /* floor, ceil, round, trunc of integers */
      else if constexpr (OP == DL_EXP) r = m_exp(x);
      else if constexpr (OP == DL_LOG) r = m_log(x);
      else if constexpr (OP == DL_SQRT) r = m_sqrt(x);
      else if constexpr (OP == DL_RSQRT) r = (T)1 / m_sqrt(x);
      else if constexpr (OP == DL_SIN) r = m_sin(x);
      else if constexpr (OP == DL_COS) r = m_cos(x);
      else if constexpr (OP == DL_TANH) r = m_tanh(x);
      else if constexpr (OP == DL_SIGMOID) r = sigm(x);
      else if constexpr (OP == DL_GELU) r = (T)0.5 * x * ((T)1 + m_erf(x * (T)0.70710678118654752440));
      else if constexpr (OP == DL_GELU_TANH)
        r = (T)0.5 * x * ((T)1 + m_tanh((T)0.7978845608028654 * (x + (T)0.044715 * x * x * x)));
      else if constexpr (OP == DL_FLOOR) r = m_floor(x);
      else if constexpr (OP == DL_CEIL) r = m_ceil(x);
      else if constexpr (OP == DL_ROUND) r = m_nearbyint(x);
      else if constexpr (OP == DL_TRUNC) r = m_trunc(x);
      else if constexpr (OP == DL_RECIPROCAL) r = (T)1 / x;
      else if constexpr (OP == DL_LOG1P) r = m_log1p(x);
      else if constexpr (OP == DL_EXPM1) r = m_expm1(x);
      else if constexpr (OP == DL_LOG2) r = m_log2(x);
      else if constexpr (OP == DL_SILU) r = x * sigm(x);
      else r = x;
      *(T *)p[0] = r;
    }
  }
};

/* bfloat16 / float16 in float32 registers, rounded once (see bin_half_f). */
template <int OP, class H> struct un_half_f {
  __device__ void operator()(char **p) const {
    float x = cvt<float, H>(*(const H *)p[1]);
    union { float f; bool b; } r;
    char *q[2] = {(char *)&r, (char *)&x};
    un_f<OP, float>{}(q);
    if constexpr (OP == DL_LOGICAL_NOT || OP == DL_ISNAN || OP == DL_ISINF || OP == DL_ISFINITE)
      *(bool *)p[0] = r.b;
    else
      *(H *)p[0] = cvt<H, float>(r.f);
  }
};

template <int OP> static int run_unary(int device, int dtype, const dlc_iter &it) {
  int rc = DL_EDTYPE;
  bool known = false;
  auto go = [&](auto tag) {
    typedef decltype(tag) T;
    constexpr bool B = std::is_same<T, bool>::value;
    constexpr bool half = std::is_same<T, bf16_t>::value || std::is_same<T, f16_t>::value;
    constexpr bool bool_ok = OP == DL_LOGICAL_NOT || OP == DL_SIGN || OP == DL_ISNAN ||
                             OP == DL_ISINF || OP == DL_ISFINITE;
    if constexpr (half) {
      known = true;
      rc = dlc_run<2>("unary op", device, it, un_half_f<OP, T>{});
    } else if constexpr (!B || bool_ok) {
      known = true;
      rc = dlc_run<2>("unary op", device, it, un_f<OP, T>{});
    }
  };
  dlc_dispatch(dtype, go);
  if (!known) {
    dlc_set_error("unary op %d has no CUDA kernel for dtype %d", OP, dtype);
    return DL_EDTYPE;
  }
  return rc;
}

/* op (dl_unop) in dtype; bool results for the predicates (bfloat16 and
** float16 in float32 registers, as for dlc_binary). */
DLC_API int dlc_unary(int device, int op, int dtype, const dlc_iter *it) {
  switch (op) {
#define C(OP) case OP: return run_unary<OP>(device, dtype, *it);
    C(DL_NEG) C(DL_ABS) C(DL_EXP) C(DL_LOG) C(DL_SQRT) C(DL_RSQRT) C(DL_SIN) C(DL_COS)
    C(DL_TANH) C(DL_SIGMOID) C(DL_RELU) C(DL_GELU) C(DL_GELU_TANH) C(DL_LOGICAL_NOT)
    C(DL_SIGN) C(DL_FLOOR) C(DL_CEIL) C(DL_ROUND) C(DL_TRUNC) C(DL_RECIPROCAL)
    C(DL_SQUARE) C(DL_LOG1P) C(DL_EXPM1) C(DL_LOG2) C(DL_SILU) C(DL_ISNAN)
    C(DL_ISINF) C(DL_ISFINITE)
#undef C
  }
  dlc_set_error("unknown unary op %d", op);
  return DL_EINVAL;
}

/* -- Cast, fill, clamp, where ------------------------------------------------ */

template <class D, class S> struct cast_f {
  __device__ void operator()(char **p) const { *(D *)p[0] = convert<D, S>(*(const S *)p[1]); }
};

/* out = src cast to out's dtype (dtype[0] <- dtype[1]). */
DLC_API int dlc_cast(int device, const dlc_iter *it) {
  int rc = DL_EDTYPE;
  bool ok = dlc_dispatch(it->dtype[0], [&](auto dtag) {
    typedef decltype(dtag) D;
    dlc_dispatch(it->dtype[1], [&](auto stag) {
      typedef decltype(stag) S;
      rc = dlc_run<2>("cast", device, *it, cast_f<D, S>{});
    });
  });
  if (!ok) dlc_set_error("cast: unknown dtype %d", it->dtype[0]);
  return rc;
}

template <class W> struct fill_f {
  W v;
  __device__ void operator()(char **p) const { *(W *)p[0] = v; }
};

/* Operand 0 = the value's bytes (its dtype's size of them). */
DLC_API int dlc_fill(int device, const dlc_iter *it, uint64_t bytes) {
  switch (it->dtype[0] == DL_FLOAT64 || it->dtype[0] == DL_INT64 ? 8
          : it->dtype[0] == DL_FLOAT32 || it->dtype[0] == DL_INT32 ? 4
          : it->dtype[0] == DL_BFLOAT16 || it->dtype[0] == DL_FLOAT16 ? 2 : 1) {
    case 8: return dlc_run<1>("fill_", device, *it, fill_f<uint64_t>{bytes});
    case 4: return dlc_run<1>("fill_", device, *it, fill_f<uint32_t>{(uint32_t)bytes});
    case 2: return dlc_run<1>("fill_", device, *it, fill_f<uint16_t>{(uint16_t)bytes});
    default: return dlc_run<1>("fill_", device, *it, fill_f<uint8_t>{(uint8_t)bytes});
  }
}

template <class T> struct clamp_f {
  bool has_lo, has_hi;
  T lo, hi;
  __device__ void operator()(char **p) const {
    T x = *(const T *)p[1];
    if (has_lo && x < lo) x = lo;
    if (has_hi && x > hi) x = hi;
    *(T *)p[0] = x;
  }
};

/* out = clamp(a, lo, hi) in dtype (NaN bounds mean no bound). */
DLC_API int dlc_clamp(int device, int dtype, double lo, double hi, const dlc_iter *it) {
  int rc = DL_EDTYPE;
  dlc_dispatch(dtype, [&](auto tag) {
    typedef decltype(tag) T;
    if constexpr (std::is_arithmetic<T>::value && !std::is_same<T, bool>::value) {
      bool hl = lo == lo, hh = hi == hi;
      rc = dlc_run<2>("clamp", device, *it, clamp_f<T>{hl, hh, hl ? (T)lo : (T)0, hh ? (T)hi : (T)0});
    }
  });
  if (rc == DL_EDTYPE) dlc_set_error("clamp has no CUDA kernel for dtype %d", dtype);
  return rc;
}

template <class W> struct where_f {
  __device__ void operator()(char **p) const {
    *(W *)p[0] = *(const uint8_t *)p[1] ? *(const W *)p[2] : *(const W *)p[3];
  }
};

/* out = cond ? a : b; cond bool, a and b already in out's dtype. */
DLC_API int dlc_where(int device, const dlc_iter *it) {
  switch (it->dtype[0] == DL_FLOAT64 || it->dtype[0] == DL_INT64 ? 8
          : it->dtype[0] == DL_FLOAT32 || it->dtype[0] == DL_INT32 ? 4
          : it->dtype[0] == DL_BFLOAT16 || it->dtype[0] == DL_FLOAT16 ? 2 : 1) {
    case 8: return dlc_run<4>("where", device, *it, where_f<uint64_t>{});
    case 4: return dlc_run<4>("where", device, *it, where_f<uint32_t>{});
    case 2: return dlc_run<4>("where", device, *it, where_f<uint16_t>{});
    default: return dlc_run<4>("where", device, *it, where_f<uint8_t>{});
  }
}

/* -- Activation gradients (grad_elementwise.c) --------------------------------- */

/* gelu, gelu_tanh, silu: g * f'(x), computed in double as the CPU does;
** relu: g where x > 0 (or NaN), else 0. */
template <class T> struct act_f {
  int op;
  __device__ void operator()(char **p) const {
    T g = *(const T *)p[1];
    double x = (double)*(const T *)p[2], d;
    if (op == DL_RELU) {
      *(T *)p[0] = x <= 0 ? (T)0 : g;
      return;
    }
    if (op == DL_GELU) {
      d = 0.5 * (1.0 + erf(x * 0.70710678118654752440)) + x * exp(-0.5 * x * x) * 0.3989422804014327;
    } else if (op == DL_GELU_TANH) {
      const double k = 0.7978845608028654, c = 0.044715;
      double u = k * (x + c * x * x * x), t = tanh(u);
      d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    } else {
      double sg = 1.0 / (1.0 + exp(-x));
      d = sg * (1 + x * (1 - sg));
    }
    *(T *)p[0] = (T)(g * d);
  }
};

/* out = g * act'(x) for gelu, gelu_tanh, silu, relu (dl_unop): out, g, x
** in float32 or float64. */
DLC_API int dlc_act_backward(int device, int op, int dtype, const dlc_iter *it) {
  if (dtype == DL_FLOAT32) return dlc_run<3>("backward", device, *it, act_f<float>{op});
  if (dtype == DL_FLOAT64) return dlc_run<3>("backward", device, *it, act_f<double>{op});
  dlc_set_error("activation backward has no CUDA kernel for dtype %d", dtype);
  return DL_EDTYPE;
}
