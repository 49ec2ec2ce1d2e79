// gloo.cc -- the Gloo transport: one Gloo context over TCP behind the
// extern "C" API of gloo.h.  No C++ exception crosses that API.
//
// Slots: Gloo's collectives take a tag per call, our own reduce-scatter
// one slot per call (both from one counter, issued in call order, so the
// same on every rank), point to point one slot per message from per-peer
// counters (send #k from a to b meets recv #k at b from a).

#include "dist/gloo.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

// Gloo's own slot prefixes are 0x01..0x08.
constexpr uint8_t kRsSlotPrefix = 0x40;
constexpr uint8_t kP2pSlotPrefix = 0x41;
constexpr uint8_t kFirstSlotPrefix = 0x42;  // dlg_first: one slot per call
// Large buffers go in pieces (each its own tag or slot): no single Gloo
// operation sees more than 1 GiB.
constexpr size_t kChunkBytes = size_t(1) << 30;
// Reduce-scatter's pipeline grain: a piece is reduced while the next arrives.
constexpr size_t kPieceBytes = size_t(1) << 20;
constexpr size_t kWindow = 4;
// dlg_first's messages: a header of at most kHeadMax bytes, then up to
// dlg_inline_max bytes of data: 64 KiB, less from 9 ranks up, so the
// buffers posted for every peer's message stay under ~512 KiB a context.
constexpr size_t kHeadMax = 64;
constexpr size_t kInlineMax = size_t(64) << 10;
constexpr size_t kInlineTotal = size_t(512) << 10;

// -- Half types: dtype.c's conversions (the same library) -------------------

extern "C" {
__attribute__((visibility("hidden"))) float bf16_to_float(uint16_t h);
__attribute__((visibility("hidden"))) uint16_t float_to_bf16(float f);
__attribute__((visibility("hidden"))) float half_to_float(uint16_t h);
__attribute__((visibility("hidden"))) uint16_t float_to_half(float f);
}

// -- Reduce functions -------------------------------------------------------

// Gloo calls fn(out, a, b, n) with out possibly equal to a: elementwise only.
using RedFn = void (*)(void *, const void *, const void *, size_t);

// T: element type, U: the type arithmetic happens in (unsigned for ints,
// so sums and products wrap).
template <class T, class U>
void red_sum(void *o, const void *a, const void *b, size_t n) {
  T *po = static_cast<T *>(o);
  const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) po[i] = T(U(pa[i]) + U(pb[i]));
}

template <class T, class U>
void red_prod(void *o, const void *a, const void *b, size_t n) {
  T *po = static_cast<T *>(o);
  const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) po[i] = T(U(pa[i]) * U(pb[i]));
}

// max and min keep a NaN from either side (y != y is false for integers).
template <class T>
void red_max(void *o, const void *a, const void *b, size_t n) {
  T *po = static_cast<T *>(o);
  const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) {
    T x = pa[i], y = pb[i];
    po[i] = (y > x || y != y) ? y : x;
  }
}

template <class T>
void red_min(void *o, const void *a, const void *b, size_t n) {
  T *po = static_cast<T *>(o);
  const T *pa = static_cast<const T *>(a), *pb = static_cast<const T *>(b);
  for (size_t i = 0; i < n; i++) {
    T x = pa[i], y = pb[i];
    po[i] = (y < x || y != y) ? y : x;
  }
}

void red_or(void *o, const void *a, const void *b, size_t n) {
  uint8_t *po = static_cast<uint8_t *>(o);
  const uint8_t *pa = static_cast<const uint8_t *>(a), *pb = static_cast<const uint8_t *>(b);
  for (size_t i = 0; i < n; i++) po[i] = (pa[i] | pb[i]) != 0;
}

void red_and(void *o, const void *a, const void *b, size_t n) {
  uint8_t *po = static_cast<uint8_t *>(o);
  const uint8_t *pa = static_cast<const uint8_t *>(a), *pb = static_cast<const uint8_t *>(b);
  for (size_t i = 0; i < n; i++) po[i] = pa[i] != 0 && pb[i] != 0;
}

// 16-bit floats: each step in float32, rounded back; max and min pick one
// of the raw inputs (no rounding, NaN bits kept).
template <float (*LD)(uint16_t), uint16_t (*ST)(float)>
void red_h_sum(void *o, const void *a, const void *b, size_t n) {
  uint16_t *po = static_cast<uint16_t *>(o);
  const uint16_t *pa = static_cast<const uint16_t *>(a), *pb = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++) po[i] = ST(LD(pa[i]) + LD(pb[i]));
}

template <float (*LD)(uint16_t), uint16_t (*ST)(float)>
void red_h_prod(void *o, const void *a, const void *b, size_t n) {
  uint16_t *po = static_cast<uint16_t *>(o);
  const uint16_t *pa = static_cast<const uint16_t *>(a), *pb = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++) po[i] = ST(LD(pa[i]) * LD(pb[i]));
}

template <float (*LD)(uint16_t), bool MAX>
void red_h_ext(void *o, const void *a, const void *b, size_t n) {
  uint16_t *po = static_cast<uint16_t *>(o);
  const uint16_t *pa = static_cast<const uint16_t *>(a), *pb = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++) {
    float x = LD(pa[i]), y = LD(pb[i]);
    po[i] = ((MAX ? y > x : y < x) || y != y) ? pb[i] : pa[i];
  }
}

template <class T, class U>
RedFn pick(int op) {
  switch (op) {
    case DL_PG_SUM: case DL_PG_AVG: return red_sum<T, U>;
    case DL_PG_PROD: return red_prod<T, U>;
    case DL_PG_MAX: return red_max<T>;
    default: return red_min<T>;
  }
}

template <float (*LD)(uint16_t), uint16_t (*ST)(float)>
RedFn pick_h(int op) {
  switch (op) {
    case DL_PG_SUM: case DL_PG_AVG: return red_h_sum<LD, ST>;
    case DL_PG_PROD: return red_h_prod<LD, ST>;
    case DL_PG_MAX: return red_h_ext<LD, true>;
    default: return red_h_ext<LD, false>;
  }
}

// NULL for an unknown dtype or op.
RedFn red_for(int dtype, int op) {
  if (op < DL_PG_SUM || op > DL_PG_PROD) return nullptr;
  switch (dtype) {
    case DL_FLOAT32: return pick<float, float>(op);
    case DL_FLOAT64: return pick<double, double>(op);
    case DL_INT32: return pick<int32_t, uint32_t>(op);
    case DL_INT64: return pick<int64_t, uint64_t>(op);
    case DL_UINT8: return pick<uint8_t, unsigned>(op);
    case DL_BOOL: return (op == DL_PG_SUM || op == DL_PG_MAX) ? red_or : red_and;
    case DL_BFLOAT16: return pick_h<bf16_to_float, float_to_bf16>(op);
    case DL_FLOAT16: return pick_h<half_to_float, float_to_half>(op);
    default: return nullptr;
  }
}

size_t elem_size(int dtype) {
  switch (dtype) {
    case DL_FLOAT32: case DL_INT32: return 4;
    case DL_FLOAT64: case DL_INT64: return 8;
    case DL_UINT8: case DL_BOOL: return 1;
    case DL_BFLOAT16: case DL_FLOAT16: return 2;
    default: return 0;
  }
}

bool is_float(int dtype) {
  return dtype == DL_FLOAT32 || dtype == DL_FLOAT64 || dtype == DL_BFLOAT16 ||
         dtype == DL_FLOAT16;
}

// avg: the sum divided by world, in place.
void divide(void *buf, size_t n, int dtype, int world) {
  switch (dtype) {
    case DL_FLOAT32: {
      float *p = static_cast<float *>(buf);
      for (size_t i = 0; i < n; i++) p[i] = p[i] / float(world);
      break;
    }
    case DL_FLOAT64: {
      double *p = static_cast<double *>(buf);
      for (size_t i = 0; i < n; i++) p[i] = p[i] / double(world);
      break;
    }
    case DL_BFLOAT16: {
      uint16_t *p = static_cast<uint16_t *>(buf);
      for (size_t i = 0; i < n; i++) p[i] = float_to_bf16(bf16_to_float(p[i]) / float(world));
      break;
    }
    case DL_FLOAT16: {
      uint16_t *p = static_cast<uint16_t *>(buf);
      for (size_t i = 0; i < n; i++) p[i] = float_to_half(half_to_float(p[i]) / float(world));
      break;
    }
  }
}

const char *op_name(int op) {
  static const char *names[] = {"sum", "avg", "max", "min", "prod"};
  return op >= DL_PG_SUM && op <= DL_PG_PROD ? names[op - DL_PG_SUM] : "?";
}

// -- The store --------------------------------------------------------------

// Gloo's rendezvous store over ours; every wait is bounded by our timeout
// (Gloo's PrefixStore passes its own 30 s default otherwise).
class DlStore : public gloo::rendezvous::Store {
 public:
  DlStore(dl_store *s, double timeout_s) : s_(s), timeout_s_(timeout_s) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    if (dl_store_set(s_, key.c_str(), data.data(), int64_t(data.size())) != 0)
      throw std::runtime_error("store set " + key + ": " + dl_last_error());
  }

  std::vector<char> get(const std::string &key) override {
    int64_t len = 0;
    void *p = dl_store_get(s_, key.c_str(), timeout_s_, &len);
    if (!p) throw std::runtime_error("store get " + key + ": " + dl_last_error());
    std::vector<char> v(static_cast<char *>(p), static_cast<char *>(p) + len);
    dl_store_value_free(p);
    return v;
  }

  void wait(const std::vector<std::string> &keys) override { wait(keys, ms(0)); }

  void wait(const std::vector<std::string> &keys, const ms &) override {
    std::vector<const char *> k;
    for (const auto &s : keys) k.push_back(s.c_str());
    if (dl_store_wait(s_, k.data(), int(k.size()), timeout_s_) != 0)
      throw std::runtime_error("store wait " + (keys.empty() ? "" : keys[0]) + ": " +
                               dl_last_error());
  }

 private:
  dl_store *s_;
  double timeout_s_;
};

// Gloo throws on its network thread when a peer's message does not fit
// the buffer posted for it (ranks making different calls); nothing can
// catch that, and std::terminate would abort with a core dump.  Say what
// happened and most likely why, and exit with a status instead.  (The
// process groups never get here: every call's first message, dlg_first,
// fits any rank's buffer and is compared before Gloo sees other data.)
[[noreturn]] void on_terminate() {
  std::string what = "unknown error";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception &x) {
      what = x.what();
    } catch (...) {
    }
  }
  fprintf(stderr,
          "ddplua: fatal: Gloo failed on its network thread: %s\n"
          "ddplua: the ranks' calls most likely differ (another collective, size or dtype at "
          "the same point)\n",
          what.c_str());
  fflush(stderr);
  _exit(70);
}

void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    if (sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL)
      signal(SIGPIPE, SIG_IGN);
    std::set_terminate(on_terminate);
  });
}

ms to_ms(double s) {
  if (!(s > 0)) s = 300;
  if (s > 1e7) s = 1e7;
  return ms(std::max<long long>(1, llround(s * 1000)));
}

void put(char *err, size_t errlen, const std::string &msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg.c_str());
}

bool is_timeout(const std::string &m) {
  return m.find("imed out") != std::string::npos || m.find("imeout") != std::string::npos;
}

}  // namespace

struct dlg {
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  int rank = 0, world = 1;
  ms timeout{300000};
  uint32_t tag = 0;
  std::vector<uint32_t> sent, recvd;
  std::string poison;  // the first failure's message; empty while usable
  std::unique_ptr<char[]> scratch;  // reduce-scatter's window and partial block
  size_t scratch_n = 0;
  // dlg_first: world message slots of kHeadMax + inline_max bytes each,
  // those this rank sends (its own in slot `rank`) and those it receives
  uint32_t fslot = 0;
  size_t inline_max = 0;
  std::unique_ptr<char[]> fout, fin;
  std::unique_ptr<gloo::transport::UnboundBuffer> foutb, finb;
};

namespace {

// The deadline of one call's waits, as Gloo's waits take it.
struct Deadline {
  steady::time_point end;
  explicit Deadline(ms t) : end(steady::now() + t) {}
  ms left() const {
    auto d = std::chrono::duration_cast<ms>(end - steady::now());
    return std::max(d, ms(1));
  }
};

// Runs body; turns any exception into -1 with "gloo <what>: ..." in err and
// poisons g (the ranks' slots may no longer agree).  A poisoned g fails at
// once with the first reason.
template <class F>
int guard(dlg *g, const char *what, char *err, size_t errlen, F body) {
  if (!g) {
    put(err, errlen, std::string(what) + ": gloo: no context");
    return -1;
  }
  if (!g->poison.empty()) {
    put(err, errlen, std::string(what) +
                         ": context unusable after an earlier failure: " + g->poison);
    return -1;
  }
  std::string msg;
  try {
    body();
    return 0;
  } catch (const std::exception &e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  std::string full = std::string(what) + ": ";
  if (is_timeout(msg)) {
    char t[64];
    snprintf(t, sizeof t, "timed out after %.3g s (gloo: ", double(g->timeout.count()) / 1000);
    full += t + msg + ")";
  } else if (msg.find("closed by peer") != std::string::npos ||
             msg.find("reset by peer") != std::string::npos) {
    full += "a rank exited or lost its connection (gloo: " + msg + ")";
  } else {
    full += "gloo: " + msg;
  }
  g->poison = full;
  put(err, errlen, full);
  return -1;
}

int bad_arg(char *err, size_t errlen, const char *what, const std::string &why) {
  put(err, errlen, std::string(what) + ": gloo: " + why);
  return -1;
}

// The reduce function and element size of a reduction, or -1 (err set)
// for a dtype or op that has none.
int red_args(const char *what, int dtype, int op, RedFn *fn, size_t *es, char *err,
             size_t errlen) {
  *fn = red_for(dtype, op);
  *es = elem_size(dtype);
  if (!*fn || !*es)
    return bad_arg(err, errlen, what,
                   "unsupported dtype " + std::to_string(dtype) + " or op " + op_name(op));
  if (op == DL_PG_AVG && !is_float(dtype))
    return bad_arg(err, errlen, what, "avg needs a floating dtype");
  return 0;
}

// One Gloo allreduce over n elements of size es, typed by size for Gloo.
void allreduce_chunk(dlg *g, void *buf, size_t n, size_t es, RedFn fn) {
  gloo::AllreduceOptions opts(g->ctx);
  switch (es) {
    case 1: opts.setOutput(static_cast<uint8_t *>(buf), n); break;
    case 2: opts.setOutput(static_cast<uint16_t *>(buf), n); break;
    case 4: opts.setOutput(static_cast<uint32_t *>(buf), n); break;
    default: opts.setOutput(static_cast<uint64_t *>(buf), n); break;
  }
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setReduceFunction(fn);
  opts.setTag(g->tag++);
  opts.setTimeout(g->timeout);
  gloo::allreduce(opts);
}

}  // namespace

// -- API ----------------------------------------------------------------------

extern "C" {

dlg *dlg_new(dl_store *store, const char *prefix, int rank, int world, const char *host,
             double timeout_s, char *err, size_t errlen) {
  if (!store || !prefix || world < 1 || rank < 0 || rank >= world) {
    put(err, errlen, "gloo init: bad arguments (store, prefix, rank " + std::to_string(rank) +
                         " of " + std::to_string(world) + ")");
    return nullptr;
  }
  ignore_sigpipe();
  dlg *g = nullptr;
  std::string msg;
  try {
    g = new dlg;
    g->rank = rank;
    g->world = world;
    g->timeout = to_ms(timeout_s);
    g->sent.assign(size_t(world), 0);
    g->recvd.assign(size_t(world), 0);
    g->inline_max =
        world > 1 ? std::min(kInlineMax, kInlineTotal / size_t(world - 1)) / 64 * 64 : kInlineMax;
    gloo::transport::tcp::attr attr;
    attr.hostname = host && *host ? host : "127.0.0.1";
    g->dev = gloo::transport::tcp::CreateDevice(attr);
    g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    g->ctx->setTimeout(g->timeout);
    DlStore ds(store, double(g->timeout.count()) / 1000);
    gloo::rendezvous::PrefixStore ps(prefix, ds);
    g->ctx->connectFullMesh(ps, g->dev);
    return g;
  } catch (const std::exception &e) {
    msg = e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  try {
    delete g;
  } catch (...) {
  }
  put(err, errlen, std::string("gloo init (rank ") + std::to_string(rank) + " of " +
                       std::to_string(world) + ", " + prefix + "): " +
                       (is_timeout(msg) && msg.find("timed out") == std::string::npos ? "timed out: " : "") +
                       msg);
  return nullptr;
}

void dlg_free(dlg *g) {
  if (!g) return;
  try {
    g->foutb.reset();  // they hold the context
    g->finb.reset();
    g->ctx.reset();  // closes the pairs before the device's loop goes
    g->dev.reset();
    delete g;
  } catch (...) {
  }
}

void dlg_set_timeout(dlg *g, double timeout_s) {
  if (!g) return;
  g->timeout = to_ms(timeout_s);
  try {
    g->ctx->setTimeout(g->timeout);
  } catch (...) {
  }
}

int dlg_rank(const dlg *g) { return g ? g->rank : -1; }
int dlg_world(const dlg *g) { return g ? g->world : 0; }

int dlg_all_reduce(dlg *g, void *buf, int64_t n, int dtype, int op, char *err,
                   size_t errlen) {
  const char *what = "all_reduce";
  RedFn fn;
  size_t es;
  if (red_args(what, dtype, op, &fn, &es, err, errlen)) return -1;
  if (n < 0 || (n > 0 && !buf)) return bad_arg(err, errlen, what, "bad buffer");
  return guard(g, what, err, errlen, [&] {
    if (n == 0 || g->world == 1) return;
    const size_t per = kChunkBytes / es;
    char *p = static_cast<char *>(buf);
    for (size_t off = 0; off < size_t(n); off += per) {
      size_t m = std::min(per, size_t(n) - off);
      allreduce_chunk(g, p + off * es, m, es, fn);
    }
    if (op == DL_PG_AVG) divide(buf, size_t(n), dtype, g->world);
  });
}

int dlg_broadcast(dlg *g, void *buf, int64_t nbytes, int src, char *err, size_t errlen) {
  const char *what = "broadcast";
  if (g && (src < 0 || src >= g->world))
    return bad_arg(err, errlen, what, "source rank " + std::to_string(src) + " out of range");
  if (nbytes < 0 || (nbytes > 0 && !buf)) return bad_arg(err, errlen, what, "bad buffer");
  return guard(g, what, err, errlen, [&] {
    if (nbytes == 0 || g->world == 1) return;
    char *p = static_cast<char *>(buf);
    for (size_t off = 0; off < size_t(nbytes); off += kChunkBytes) {
      size_t m = std::min(kChunkBytes, size_t(nbytes) - off);
      gloo::BroadcastOptions opts(g->ctx);
      opts.setOutput(reinterpret_cast<uint8_t *>(p + off), m);
      opts.setRoot(src);
      opts.setTag(g->tag++);
      opts.setTimeout(g->timeout);
      gloo::broadcast(opts);
    }
  });
}

int dlg_all_gather(dlg *g, void *out, const void *in, int64_t nbytes, char *err,
                   size_t errlen) {
  const char *what = "all_gather";
  if (nbytes < 0 || (nbytes > 0 && (!out || !in))) return bad_arg(err, errlen, what, "bad buffer");
  return guard(g, what, err, errlen, [&] {
    if (nbytes == 0) return;
    uint8_t *o = static_cast<uint8_t *>(out);
    uint8_t *mine = o + size_t(g->rank) * size_t(nbytes);
    if (g->world == 1) {
      if (in != mine) memmove(mine, in, size_t(nbytes));
      return;
    }
    gloo::AllgatherOptions opts(g->ctx);
    if (in != mine)
      opts.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(in)), size_t(nbytes));
    opts.setOutput(o, size_t(nbytes) * size_t(g->world));
    opts.setTag(g->tag++);
    opts.setTimeout(g->timeout);
    gloo::allgather(opts);
  });
}

// Ring reduce-scatter: at step s (0 .. world-2) rank r sends its partial
// block (r - s - 1) to r + 1 and reduces block (r - s - 2), from r - 1,
// with its own input; after the last step that block is r, complete.
// Each block travels in pieces, received into a window of kWindow pieces
// reused in turn, so a piece is reduced while the next ones arrive.  The
// partial blocks alternate between out and one scratch block (the one
// being sent is never the one being written), ending in out; scratch stays
// with the context, so repeated calls touch no fresh pages.
int dlg_reduce_scatter(dlg *g, void *out, const void *in, int64_t n_per_rank, int dtype,
                       int op, char *err, size_t errlen) {
  const char *what = "reduce_scatter";
  RedFn fn;
  size_t es;
  if (red_args(what, dtype, op, &fn, &es, err, errlen)) return -1;
  if (n_per_rank < 0 || (n_per_rank > 0 && (!out || !in)))
    return bad_arg(err, errlen, what, "bad buffer");
  return guard(g, what, err, errlen, [&] {
    if (n_per_rank == 0) return;
    const int W = g->world, r = g->rank;
    const size_t n = size_t(n_per_rank), bn = n * es;
    const char *src = static_cast<const char *>(in);
    if (W == 1) {
      if (out != in) memmove(out, in, bn);
      return;
    }
    const uint64_t slot = gloo::Slot::build(kRsSlotPrefix, g->tag++);
    const int next = (r + 1) % W, prev = (r + W - 1) % W;
    const size_t piece = std::max(es, kPieceBytes / es * es);
    const size_t npieces = (bn + piece - 1) / piece;
    const size_t win = std::min(npieces, kWindow), winb = std::min(bn, win * piece);
    const size_t need = winb + (W > 2 ? bn : 0);
    if (g->scratch_n < need) {  // the old block goes first: a lower peak
      g->scratch.reset();
      g->scratch_n = 0;
      g->scratch.reset(new char[need]);
      g->scratch_n = need;
    }
    char *tmp = g->scratch.get(), *acc = tmp + winb;
    auto tbuf = g->ctx->createUnboundBuffer(tmp, winb);
    auto obuf = g->ctx->createUnboundBuffer(out, bn);
    std::unique_ptr<gloo::transport::UnboundBuffer> abuf;
    if (W > 2) abuf = g->ctx->createUnboundBuffer(acc, bn);
    auto ibuf = g->ctx->createUnboundBuffer(const_cast<char *>(src), size_t(W) * bn);
    auto into_out = [&](int s) { return (W - 2 - s) % 2 == 0; };
    Deadline dl(g->timeout);
    for (int s = 0; s < W - 1; s++) {
      const int send_blk = ((r - s - 1) % W + W) % W, recv_blk = ((r - s - 2) % W + W) % W;
      // step 0 sends straight from the input, later steps what the step
      // before reduced
      gloo::transport::UnboundBuffer *sb =
          s == 0 ? ibuf.get() : (into_out(s - 1) ? obuf.get() : abuf.get());
      const size_t sbase = s == 0 ? size_t(send_blk) * bn : 0;
      char *dst = into_out(s) ? static_cast<char *>(out) : acc;
      for (size_t k = 0; k < win; k++)
        tbuf->recv(prev, slot, k * piece, std::min(piece, bn - k * piece));
      for (size_t k = 0; k < npieces; k++) {
        size_t o = k * piece;
        sb->send(next, slot, sbase + o, std::min(piece, bn - o));
      }
      for (size_t k = 0; k < npieces; k++) {
        size_t o = k * piece, len = std::min(piece, bn - o), t = (k % win) * piece;
        tbuf->waitRecv(dl.left());
        fn(dst + o, src + size_t(recv_blk) * bn + o, tmp + t, len / es);
        if (k + win < npieces) {
          size_t o2 = (k + win) * piece;
          tbuf->recv(prev, slot, t, std::min(piece, bn - o2));
        }
      }
      for (size_t k = 0; k < npieces; k++) sb->waitSend(dl.left());
    }
    if (op == DL_PG_AVG) divide(out, n, dtype, W);
  });
}

// Point to point: an 8-byte header with the size goes first, so a recv
// of another size drains the payload and fails cleanly (Gloo itself would
// throw on its network thread, which ends the process).
int dlg_send(dlg *g, const void *buf, int64_t nbytes, int dst, char *err, size_t errlen) {
  const char *what = "send";
  if (g && (dst < 0 || dst >= g->world || dst == g->rank))
    return bad_arg(err, errlen, what, "destination rank " + std::to_string(dst) + " invalid");
  if (nbytes < 0 || (nbytes > 0 && !buf)) return bad_arg(err, errlen, what, "bad buffer");
  return guard(g, what, err, errlen, [&] {
    int64_t hdr = nbytes;
    auto hb = g->ctx->createUnboundBuffer(&hdr, sizeof hdr);
    hb->send(dst, gloo::Slot::build(kP2pSlotPrefix, g->sent[size_t(dst)]++), 0, sizeof hdr);
    Deadline dl(g->timeout);
    std::unique_ptr<gloo::transport::UnboundBuffer> ub;
    size_t k = 0;
    if (nbytes > 0) ub = g->ctx->createUnboundBuffer(const_cast<void *>(buf), size_t(nbytes));
    for (size_t off = 0; off < size_t(nbytes); off += kChunkBytes, k++) {
      size_t m = std::min(kChunkBytes, size_t(nbytes) - off);
      ub->send(dst, gloo::Slot::build(kP2pSlotPrefix, g->sent[size_t(dst)]++), off, m);
    }
    hb->waitSend(dl.left());
    while (k--) ub->waitSend(dl.left());
  });
}

int dlg_recv(dlg *g, void *buf, int64_t nbytes, int src, char *err, size_t errlen) {
  const char *what = "recv";
  if (g && (src < 0 || src >= g->world || src == g->rank))
    return bad_arg(err, errlen, what, "source rank " + std::to_string(src) + " invalid");
  if (nbytes < 0 || (nbytes > 0 && !buf)) return bad_arg(err, errlen, what, "bad buffer");
  int64_t sent = -1;
  int rc = guard(g, what, err, errlen, [&] {
    int64_t hdr = -1;
    auto hb = g->ctx->createUnboundBuffer(&hdr, sizeof hdr);
    hb->recv(src, gloo::Slot::build(kP2pSlotPrefix, g->recvd[size_t(src)]++), 0, sizeof hdr);
    Deadline dl(g->timeout);
    hb->waitRecv(dl.left());
    sent = hdr;
    std::unique_ptr<char[]> drain;
    char *into = static_cast<char *>(buf);
    size_t step = kChunkBytes;
    if (hdr != nbytes) {  // take the payload anyway: the link stays in step
      step = std::min(kChunkBytes, size_t(hdr > 0 ? hdr : 1));
      drain.reset(new char[step]);
    }
    if (hdr <= 0) return;
    auto ub = g->ctx->createUnboundBuffer(drain ? drain.get() : into, drain ? step : size_t(hdr));
    for (size_t off = 0; off < size_t(hdr); off += kChunkBytes) {
      size_t m = std::min(kChunkBytes, size_t(hdr) - off);
      ub->recv(src, gloo::Slot::build(kP2pSlotPrefix, g->recvd[size_t(src)]++), drain ? 0 : off, m);
      if (drain) ub->waitRecv(dl.left());
    }
    if (!drain)
      for (size_t off = 0; off < size_t(hdr); off += kChunkBytes) ub->waitRecv(dl.left());
  });
  if (rc == 0 && sent != nbytes) {
    char m[200];
    snprintf(m, sizeof m, "recv: rank %d sent %lld bytes but this rank receives %lld", src,
             (long long)sent, (long long)nbytes);
    put(err, errlen, m);
    return -1;
  }
  return rc;
}

size_t dlg_inline_max(const dlg *g) { return g ? g->inline_max : 0; }

// Every peer's message lands in its own slot of fin, each posted for the
// largest message any rank may send, so a message of another size (a rank
// making another call) arrives whole and is told apart by its header
// instead of making Gloo throw on its network thread.  The receives go out
// first, so a peer's send usually finds its receive ready and goes at once.
int dlg_first(dlg *g, const char *what, const void *head, size_t hlen, const void *data,
              size_t dlen, size_t stride, char *err, size_t errlen) {
  if (!what) what = "call";
  if (!head || !hlen || hlen > kHeadMax || (dlen && !data))
    return bad_arg(err, errlen, what, "bad message");
  if (g && dlen > g->inline_max)
    return bad_arg(err, errlen, what, "message of " + std::to_string(dlen) + " bytes over " +
                                          std::to_string(g->inline_max));
  return guard(g, what, err, errlen, [&] {
    const size_t W = size_t(g->world), me = size_t(g->rank), S = kHeadMax + g->inline_max;
    if (!g->fout) {
      g->fout.reset(new char[W * S]);
      g->fin.reset(new char[W * S]);
      g->foutb = g->ctx->createUnboundBuffer(g->fout.get(), W * S);
      g->finb = g->ctx->createUnboundBuffer(g->fin.get(), W * S);
    }
    const uint64_t slot = gloo::Slot::build(kFirstSlotPrefix, g->fslot++);
    for (size_t r = 0; r < W; r++)
      if (r != me) g->finb->recv(int(r), slot, r * S, S);
    const char *src = static_cast<const char *>(data);
    for (size_t q = 0; q < W; q++) {  // slot q: the message to q (stride 0: one for all)
      if (stride == 0 && q != me) continue;
      char *m = g->fout.get() + q * S;
      memcpy(m, head, hlen);
      if (dlen) memcpy(m + hlen, src + q * stride, dlen);
    }
    if (W == 1) return;
    for (size_t q = 0; q < W; q++)
      if (q != me) g->foutb->send(int(q), slot, (stride ? q : me) * S, hlen + dlen);
    Deadline dl(g->timeout);
    for (size_t k = 1; k < W; k++) g->finb->waitRecv(dl.left());
    for (size_t k = 1; k < W; k++) g->foutb->waitSend(dl.left());
  });
}

const void *dlg_msg(const dlg *g, int r) {
  if (!g || r < 0 || r >= g->world || !g->fout) return nullptr;
  const size_t S = kHeadMax + g->inline_max;
  return (r == g->rank ? g->fout.get() : g->fin.get()) + size_t(r) * S;
}

int dlg_reduce_msgs(dlg *g, void *out, size_t off, int64_t n, int dtype, int op, char *err,
                    size_t errlen) {
  const char *what = "all_reduce";
  RedFn fn;
  size_t es;
  if (red_args(what, dtype, op, &fn, &es, err, errlen)) return -1;
  if (!g || !g->fout || n < 0 || (n > 0 && !out) || off > kHeadMax ||
      size_t(n) * es > g->inline_max)
    return bad_arg(err, errlen, what, "bad buffer");
  if (n == 0) return 0;
  auto at = [&](int r) { return static_cast<const char *>(dlg_msg(g, r)) + off; };
  // rank order on every rank: the same bits everywhere
  if (g->world == 1) memcpy(out, at(0), size_t(n) * es);
  else fn(out, at(0), at(1), size_t(n));
  for (int r = 2; r < g->world; r++) fn(out, out, at(r), size_t(n));
  if (op == DL_PG_AVG) divide(out, size_t(n), dtype, g->world);
  return 0;
}

int dlg_barrier(dlg *g, char *err, size_t errlen) {
  return guard(g, "barrier", err, errlen, [&] {
    if (g->world == 1) return;
    gloo::BarrierOptions opts(g->ctx);
    opts.setTag(g->tag++);
    opts.setTimeout(g->timeout);
    gloo::barrier(opts);
  });
}

}  // extern "C"
