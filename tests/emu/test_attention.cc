/*
** test_attention.cc -- the CUDA attention kernels (runtime/cuda/kernels/
** attention.cu) on the emulator, against attention computed here in
** double from its definition: softmax(scale * q k^T + mask) v, its
** logsumexp, and the gradients of q, k and v.  Odd sizes (rows and keys
** not multiples of the tiles, head dims not multiples of 8), causal with
** L != S, additive masks with -inf entries (per head and broadcast), both
** dtypes, every scheduling order, with the race checker on (this program
** is built like the checker's library).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "ddplua.h"

extern "C" int dlc_sdpa_forward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                                double scale, int causal, const void *q, const void *k, const void *v,
                                const void *mask, int64_t mask_bh, void *out, void *lse);
extern "C" int dlc_sdpa_backward(int device, int kd, int64_t BH, int64_t L, int64_t S, int E, int Ev,
                                 double scale, int causal, const void *q, const void *k,
                                 const void *v, const void *mask, int64_t mask_bh, const void *out,
                                 const void *dout, const void *lse, void *dsum, void *dq, void *dk,
                                 void *dv);
extern "C" const char *dlc_last_error(void);

static int passed, failed;

static void check(bool ok, const std::string &what) {
  if (ok) passed++;
  else failed++, printf("FAIL %s\n", what.c_str());
}

typedef std::vector<double> vec;

static double rnd(unsigned &s) {
  s = s * 1664525u + 1013904223u;
  return (double)(s >> 8) / 16777216.0 * 2 - 1;
}

struct cfg { int64_t BH, L, S; int E, Ev, causal, mask; const char *name; };

/* The reference in double: out, lse and the three gradients for dout. */
static void reference(const cfg &c, double scale, const vec &q, const vec &k, const vec &v,
                      const vec &m, int64_t mbh, const vec &dout, vec &out, vec &lse, vec &dq,
                      vec &dk, vec &dv) {
  out.assign(c.BH * c.L * c.Ev, 0), lse.assign(c.BH * c.L, 0);
  dq.assign(c.BH * c.L * c.E, 0), dk.assign(c.BH * c.S * c.E, 0), dv.assign(c.BH * c.S * c.Ev, 0);
  for (int64_t b = 0; b < c.BH; b++)
    for (int64_t i = 0; i < c.L; i++) {
      vec s(c.S), p(c.S);
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.S; j++) {
        double d = 0;
        for (int e = 0; e < c.E; e++) d += q[(b * c.L + i) * c.E + e] * k[(b * c.S + j) * c.E + e];
        s[j] = d * scale + (c.mask ? m[b * mbh + i * c.S + j] : 0);
        if (c.causal && j > i) s[j] = -INFINITY;
        mx = s[j] > mx ? s[j] : mx;
      }
      double z = 0;
      for (int64_t j = 0; j < c.S; j++) z += p[j] = exp(s[j] - mx);
      lse[b * c.L + i] = mx + log(z);
      for (int64_t j = 0; j < c.S; j++) p[j] /= z;
      for (int e = 0; e < c.Ev; e++) {
        double o = 0;
        for (int64_t j = 0; j < c.S; j++) o += p[j] * v[(b * c.S + j) * c.Ev + e];
        out[(b * c.L + i) * c.Ev + e] = o;
      }
      const double *go = &dout[(b * c.L + i) * c.Ev];
      double dsum = 0;
      for (int e = 0; e < c.Ev; e++) dsum += go[e] * out[(b * c.L + i) * c.Ev + e];
      for (int64_t j = 0; j < c.S; j++) {
        double dp = 0;
        for (int e = 0; e < c.Ev; e++) {
          dp += go[e] * v[(b * c.S + j) * c.Ev + e];
          dv[(b * c.S + j) * c.Ev + e] += p[j] * go[e];
        }
        double ds = p[j] * (dp - dsum) * scale;
        for (int e = 0; e < c.E; e++) {
          dq[(b * c.L + i) * c.E + e] += ds * k[(b * c.S + j) * c.E + e];
          dk[(b * c.S + j) * c.E + e] += ds * q[(b * c.L + i) * c.E + e];
        }
      }
    }
}

template <class T> static T *dev(const vec &h) {
  void *p;
  cudaMalloc(&p, h.size() * sizeof(T) + 1);
  std::vector<T> t(h.begin(), h.end());
  cudaMemcpy(p, t.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return (T *)p;
}
template <class T> static T *dev_n(size_t n) {
  void *p;
  cudaMalloc(&p, n * sizeof(T) + 1);
  return (T *)p;
}
template <class T> static vec host(const T *p, size_t n) {
  std::vector<T> t(n);
  cudaMemcpy(t.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return vec(t.begin(), t.end());
}

/* largest |a - b| / (atol + rtol |b|) */
static double worst(const vec &a, const vec &b, double tol) {
  double w = 0;
  for (size_t i = 0; i < a.size(); i++) {
    double e = fabs(a[i] - b[i]) / (tol + tol * fabs(b[i]));
    if (!(e <= w)) w = e;  /* NaN wins */
  }
  return w;
}

template <class T> static void run(const cfg &c, const char *sched) {
  setenv("DDPLUA_CUDA_EMU_SCHED", sched, 1);
  unsigned seed = 12345u + (unsigned)c.L;
  vec q(c.BH * c.L * c.E), k(c.BH * c.S * c.E), v(c.BH * c.S * c.Ev), dout(c.BH * c.L * c.Ev);
  for (auto *x : {&q, &k, &v, &dout})
    for (double &e : *x) e = (double)(T)rnd(seed);
  int64_t mbh = c.mask == 2 ? 0 : c.L * c.S;  /* 2: one mask for every head */
  vec m(c.mask ? (c.mask == 2 ? 1 : c.BH) * c.L * c.S : 0);
  for (size_t x = 0; x < m.size(); x++) m[x] = x % 7 == 3 ? -INFINITY : (double)(T)rnd(seed);
  if (c.mask) for (int64_t i = 0; i < c.L; i++) m[i * c.S] = 0;  /* every row keeps a key */
  double scale = 1 / sqrt((double)c.E);
  vec out, lse, dq, dk, dv;
  reference(c, scale, q, k, v, m, mbh, dout, out, lse, dq, dk, dv);

  T *dq_ = dev<T>(q), *dk_ = dev<T>(k), *dv_ = dev<T>(v), *dm = c.mask ? dev<T>(m) : NULL;
  T *ddo = dev<T>(dout), *dout_ = dev_n<T>(out.size()), *dl = dev_n<T>(lse.size());
  T *ds = dev_n<T>(lse.size()), *gq = dev_n<T>(dq.size()), *gk = dev_n<T>(dk.size()), *gv = dev_n<T>(dv.size());
  int kd = sizeof(T) == 4 ? DL_FLOAT32 : DL_FLOAT64;
  std::string what = std::string(c.name) + (sizeof(T) == 4 ? " float32 " : " float64 ") + sched;
  int rc = dlc_sdpa_forward(0, kd, c.BH, c.L, c.S, c.E, c.Ev, scale, c.causal, dq_, dk_, dv_, dm, mbh,
                            dout_, dl);
  check(rc == 0, what + ": forward ran: " + (rc ? dlc_last_error() : ""));
  rc = dlc_sdpa_backward(0, kd, c.BH, c.L, c.S, c.E, c.Ev, scale, c.causal, dq_, dk_, dv_, dm, mbh,
                         dout_, ddo, dl, ds, gq, gk, gv);
  check(rc == 0, what + ": backward ran: " + (rc ? dlc_last_error() : ""));
  double tol = sizeof(T) == 4 ? 2e-5 : 1e-12;
  struct { const char *n; vec got, want; } r[] = {
      {"out", host(dout_, out.size()), out}, {"lse", host(dl, lse.size()), lse},
      {"grad q", host(gq, dq.size()), dq},   {"grad k", host(gk, dk.size()), dk},
      {"grad v", host(gv, dv.size()), dv}};
  for (auto &x : r) {
    double w = worst(x.got, x.want, tol);
    char b[64];
    snprintf(b, sizeof b, " (worst %.3g of the tolerance)", w);
    check(w <= 1, what + ": " + x.n + b);
  }
  for (T *p : {dq_, dk_, dv_, dm, ddo, dout_, dl, ds, gq, gk, gv}) cudaFree(p);
}

int main(void) {
  const cfg cfgs[] = {
      {3, 37, 45, 24, 40, 0, 0, "plain L37 S45 E24 Ev40"},
      {2, 50, 33, 64, 64, 1, 0, "causal L50 > S33"},
      {2, 20, 70, 17, 9, 1, 0, "causal L20 < S70, E17 Ev9"},
      {2, 33, 40, 32, 16, 0, 1, "float mask with -inf, per head"},
      {3, 19, 21, 8, 8, 1, 2, "causal + one mask for all heads"},
      {1, 9, 130, 128, 128, 0, 0, "head dims 128"},
  };
  /* DDPLUA_CUDA_EMU_SCHED set by the caller: that order only */
  const char *only = getenv("DDPLUA_CUDA_EMU_SCHED");
  std::string one = only ? only : "";
  for (const cfg &c : cfgs)
    for (const char *s : {"shuffle", "runahead", "reverse"}) {
      if (one.empty() ? !strcmp(s, "reverse") : one != s) continue;
      run<float>(c, s);
      run<double>(c, s);
    }
  if (one.empty()) run<float>(cfgs[1], "reverse");

  int rc = dlc_sdpa_forward(0, DL_FLOAT32, 1, 4, 4, 129, 8, 1.0, 0, NULL, NULL, NULL, NULL, 0, NULL, NULL);
  check(rc == DL_EINVAL && strstr(dlc_last_error(), "E=129"), "a head dim over 128 is refused, named");
  rc = dlc_sdpa_forward(0, DL_INT64, 1, 4, 4, 8, 8, 1.0, 0, NULL, NULL, NULL, NULL, 0, NULL, NULL);
  check(rc != 0, "an integer dtype is refused");
  printf("test_emu_attention: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
