/*
** racecheck.cc -- a shared-memory race checker for the CUDA emulator, in
** the manner of compute-sanitizer's racecheck and synccheck, with no GPU.
**
** How: libddplua_cudaemu_race.so's kernel files are compiled with
** -fsanitize=thread, which makes GCC call __tsan_read4(addr),
** __tsan_write8(addr), ... before every load and store.  Those hooks are
** defined here (no ThreadSanitizer runtime is linked): an address inside
** the block's shared memory -- the module's thread-local block, where the
** emulator keeps `__shared__` arrays, or the launch's dynamic shared
** memory -- updates a shadow cell per byte: the last writer and up to two
** readers, each with the block barrier interval it came in and its warp's
** sync count.  Two accesses of different threads, one a write, race when
** no barrier orders them: the same __syncthreads interval and, for two
** threads of one warp, no __syncwarp or shuffle between them (the CUDA
** memory model since Volta: no implicit warp lockstep).  Atomics never
** race with atomics.  The first hazard of a launch is kept, with both
** threads, both accesses and their source lines (addr2line on the
** recorded return addresses), and fails the launch once it ends.
**
** Global loads and stores go to the stream checker (streamcheck.cc)
** while a write of another stream is in flight.
**
** What it cannot see: global memory (between blocks or threads), copies
** made by memcpy calls, and anything timing-dependent on real hardware.
*/
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"
#include "racecheck.h"
#include "streamcheck.h"

namespace dlc_emu {
namespace rc {
bool on;
}
}  // namespace dlc_emu

namespace {

enum { READ = 0, WRITE = 1 };

/* One access to a shared byte: by thread tid (the block's linear index)
** of block serial blk, in barrier interval ival, after its warp's wep-th
** warp sync; pc: the instruction after the load or store. */
struct acc {
  uint32_t blk, ival, wep;
  int16_t tid;
  uint8_t atomic;
  const void *pc;
};
struct cell { acc w, r[2]; };

struct hazard {
  int kind_earlier, kind_later;
  acc earlier, later;
  const unsigned char *addr;
};

struct state {
  bool active;           /* inside a launch of the instrumented library */
  uint32_t blk;          /* serial of the block running (0: none yet) */
  uint32_t ival;         /* __syncthreads completed in this block */
  uint32_t wep[32];      /* each warp's completed __syncwarp/shuffles */
  const void *kernel;
  unsigned char *tls;    /* this OS thread's block of the module's TLS */
  size_t tls_n;
  std::vector<cell> tls_shadow;
  unsigned char *dyn;
  size_t dyn_n;
  std::vector<cell> dyn_shadow;
  int nhaz;
  bool found;
  hazard first;
  std::string divergent;
};
/* One launch is checked at a time (launch_begin takes the lock), so the
** state is a plain global: the hooks' fast path -- is this address in
** the launching thread's shared memory? -- then reads no thread-local
** variable, which from a dlopened library costs a __tls_get_addr call
** per load and store. */
state S;
std::mutex launch_mu;
thread_local unsigned char *my_tls;
thread_local size_t my_tls_n;

/* The TLS segment of the module holding this file (the emulator library,
** or a test program linked with it): this thread's copy and its size. */
struct tls_find { uintptr_t addr; void *data; size_t size; };

int tls_cb(struct dl_phdr_info *info, size_t, void *arg) {
  tls_find *f = (tls_find *)arg;
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && f->addr - (info->dlpi_addr + ph.p_vaddr) < ph.p_memsz) mine = true;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_TLS) {
      f->size = info->dlpi_phdr[i].p_memsz;
      f->data = info->dlpi_tls_data;
    }
  return 1;
}

void find_tls(void) {
  tls_find f = {(uintptr_t)&find_tls, NULL, 0};
  if (!my_tls) {
    dl_iterate_phdr(tls_cb, &f);
    my_tls = (unsigned char *)f.data;
    my_tls_n = f.data ? f.size : 0;
  }
  S.tls = my_tls;
  S.tls_n = my_tls_n;
  if (S.tls_shadow.size() < S.tls_n) S.tls_shadow.resize(S.tls_n);
}

bool concurrent(const acc &a, int tid) {
  if (a.blk != S.blk || a.ival != S.ival || a.tid == tid) return false;
  int w = tid / 32;
  return !(a.tid / 32 == w && S.wep[w] != a.wep);
}

void note(int kind_earlier, const acc &earlier, int kind_later, const acc &later,
          const unsigned char *addr) {
  if (S.nhaz++ == 0) S.first = {kind_earlier, kind_later, earlier, later, addr};
}

inline void touch(const void *p, size_t n, int kind, bool atomic, const void *pc) {
  /* unsigned differences: one compare per range, and (ranges empty
  ** outside launches) no test of S.active on the fast path */
  uintptr_t in_tls = (uintptr_t)p - (uintptr_t)S.tls, in_dyn = (uintptr_t)p - (uintptr_t)S.dyn;
  cell *c;
  size_t room;
  if (in_tls < S.tls_n) {
    c = &S.tls_shadow[in_tls];
    room = S.tls_n - in_tls;
  } else if (in_dyn < S.dyn_n) {
    c = &S.dyn_shadow[in_dyn];
    room = S.dyn_n - in_dyn;
  } else {
    /* global or local memory: for the stream checker, in a launch that
    ** has writes of other streams in flight */
    if (dlc_emu::sc::n_unordered && S.active && dlc_emu::cur)
      dlc_emu::sc::kernel_access(p, n, kind == WRITE, pc);
    return;
  }
  if (!S.active || !dlc_emu::cur) return;
  const unsigned char *a = (const unsigned char *)p;
  int tid = dlc_emu::cur->idx;
  acc now = {S.blk, S.ival, S.wep[tid / 32], (int16_t)tid, (uint8_t)atomic, pc};
  if (n > room) n = room;
  for (size_t i = 0; i < n; i++, c++) {
    bool w_races = concurrent(c->w, tid) && !(atomic && c->w.atomic);
    if (kind == READ) {
      if (w_races) note(WRITE, c->w, READ, now, a + i);
      /* keep two readers of the interval, so a later writer finds one
      ** that is not itself */
      acc *slot = NULL;
      for (acc &r : c->r)
        if (r.blk == S.blk && r.ival == S.ival && r.tid == tid) slot = &r;
      if (!slot)
        for (acc &r : c->r)
          if (!slot && (r.blk != S.blk || r.ival != S.ival)) slot = &r;
      if (slot) *slot = now;
    } else {
      if (w_races) note(WRITE, c->w, WRITE, now, a + i);
      for (acc &r : c->r)
        if (concurrent(r, tid) && !(atomic && r.atomic)) {
          note(READ, r, WRITE, now, a + i);
          break;
        }
      c->w = now;
      c->r[0].blk = c->r[1].blk = 0;
    }
  }
}

/* -- Reports ----------------------------------------------------------- */

/* The ELF symbol table of the module, for the names of __shared__
** arrays (thread-local symbols: their value is the offset in the TLS
** segment). */
std::string tls_symbol(size_t off, size_t *sym_off) {
  Dl_info di;
  if (!dladdr((void *)&tls_symbol, &di) || !di.dli_fname) return "";
  int fd = open(di.dli_fname, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  std::string name;
  void *m = fstat(fd, &st) == 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)
                                : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return "";
  const unsigned char *base = (const unsigned char *)m;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  size_t size = (size_t)st.st_size;
  if (size >= sizeof *eh && !memcmp(eh->e_ident, ELFMAG, SELFMAG) &&
      eh->e_ident[EI_CLASS] == ELFCLASS64 && eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) <= size) {
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum && name.empty(); i++) {
      if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr *strs = &sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > size || strs->sh_offset + strs->sh_size > size) continue;
      const Elf64_Sym *sym = (const Elf64_Sym *)(base + sh[i].sh_offset);
      size_t nsym = sh[i].sh_size / sizeof *sym;
      for (size_t k = 0; k < nsym; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_TLS || sym[k].st_name >= strs->sh_size) continue;
        if (off < sym[k].st_value || off >= sym[k].st_value + (sym[k].st_size ? sym[k].st_size : 1))
          continue;
        const char *raw = (const char *)base + strs->sh_offset + sym[k].st_name;
        int status = 0;
        char *dem = abi::__cxa_demangle(raw, NULL, NULL, &status);
        name = dem && status == 0 ? dem : raw;
        /* "f<float>(long, ..., float*)::sh": the function's parameters
        ** say nothing here; "f<float>(...)::sh" */
        size_t close = name.rfind(")::");
        if (close != std::string::npos) {
          int depth = 0;
          for (size_t open = close + 1; open-- > 0;) {
            depth += name[open] == ')' ? 1 : name[open] == '(' ? -1 : 0;
            if (depth == 0) {
              if (close > open + 1) name = name.substr(0, open + 1) + "..." + name.substr(close);
              break;
            }
          }
        }
        free(dem);
        *sym_off = off - sym[k].st_value;
        break;
      }
    }
  }
  munmap(m, size);
  return name;
}

/* addr2line's "function at file:line" for a code address (pc: a return
** address, so the call before it is looked up; else the address itself),
** remembered, since the same few sites come back: {file:line, function}.
** Where addr2line is not installed: the module and offset. */
struct source { std::string loc, fn; };

source lookup(const void *pc, bool ret) {
  static std::unordered_map<const void *, source> memo;
  auto it = memo.find(pc);
  if (it != memo.end()) return it->second;
  source r = {"?", ""};
  Dl_info di;
  if (pc && dladdr(pc, &di) && di.dli_fname) {
    uintptr_t off = (uintptr_t)pc - (uintptr_t)di.dli_fbase - (ret ? 1 : 0);
    char cmd[1200], line[2048];
    std::string out;
    snprintf(cmd, sizeof cmd, "addr2line -Cfip -e '%s' 0x%lx 2>/dev/null", di.dli_fname,
             (unsigned long)off);
    FILE *f = strchr(di.dli_fname, '\'') ? NULL : popen(cmd, "r");
    if (f) {
      if (fgets(line, sizeof line, f)) out = line;
      pclose(f);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    size_t at = out.rfind(" at ");
    if (out.empty() || out[0] == '?' || at == std::string::npos || out.find("??:") != std::string::npos) {
      snprintf(line, sizeof line, "%s+0x%lx", di.dli_fname, (unsigned long)off);
      r.loc = line;
    } else {
      /* "group_all<float, 256, true>(float, float*) at runtime/.../scan.cu:115
      ** (discriminator 2)": the function without its parameters, the line */
      r.fn = out.substr(0, at);
      r.loc = out.substr(at + 4);
      size_t paren = r.fn.find('(');
      if (paren != std::string::npos && paren > 0) r.fn = r.fn.substr(0, paren);
      /* a return type before the name ("float ns::f<...>"): dropped */
      size_t sp = r.fn.find(' '), lt = r.fn.find('<');
      if (sp != std::string::npos && (lt == std::string::npos || sp < lt)) r.fn = r.fn.substr(sp + 1);
      size_t disc = r.loc.find(" (discriminator");
      if (disc != std::string::npos) r.loc = r.loc.substr(0, disc);
      char cwd[1024];  /* paths under the working directory: relative */
      if (getcwd(cwd, sizeof cwd - 1)) {
        size_t n = strlen(cwd);
        if (cwd[n - 1] != '/') cwd[n++] = '/', cwd[n] = 0;
        if (r.loc.compare(0, n, cwd) == 0) r.loc = r.loc.substr(n);
      }
    }
  }
  memo[pc] = r;
  return r;
}

std::string where(const void *pc) {
  source s = lookup(pc, true);
  return s.fn.empty() ? s.loc : s.loc + " (" + s.fn + ")";
}

std::string thread_name(int idx) {
  unsigned bx = dlc_emu::block_dim.x, by = dlc_emu::block_dim.y;
  char b[96];
  snprintf(b, sizeof b, "thread (%u,%u,%u) of block (%u,%u,%u)", (unsigned)idx % bx,
           (unsigned)idx / bx % by, (unsigned)idx / (bx * by), dlc_emu::block_idx.x,
           dlc_emu::block_idx.y, dlc_emu::block_idx.z);
  return b;
}

std::string place(const unsigned char *a) {
  char b[64];
  if (a >= S.dyn && a < S.dyn + S.dyn_n) {
    snprintf(b, sizeof b, "dynamic shared memory, byte %zu", (size_t)(a - S.dyn));
    return b;
  }
  size_t off = (size_t)(a - S.tls), in = 0;
  std::string sym = tls_symbol(off, &in);
  if (sym.empty()) {
    snprintf(b, sizeof b, "static shared memory, byte %zu", off);
    return b;
  }
  snprintf(b, sizeof b, ", byte %zu", in);
  return "__shared__ " + sym + b;
}

std::string kernel_name(void) {
  source s = lookup(S.kernel, false);
  return s.fn.empty() ? s.loc : s.fn;
}

const char *kind_name(int k) { return k == WRITE ? "write" : "read"; }

std::string describe(const hazard &h) {
  char head[128];
  snprintf(head, sizeof head, "%s-after-%s race", kind_name(h.kind_later), kind_name(h.kind_earlier));
  std::string r = std::string("emulator race checker: ") + head + " in kernel " +
                  kernel_name() + " on " + place(h.addr) + ": " + kind_name(h.kind_later) + " by " +
                  thread_name(h.later.tid) + " at " + where(h.later.pc) + "; " +
                  kind_name(h.kind_earlier) + " by " + thread_name(h.earlier.tid) + " at " +
                  where(h.earlier.pc) + ", with no barrier between them (";
  r += h.earlier.tid / 32 == h.later.tid / 32 ? "same warp: a __syncwarp or __syncthreads is missing"
                                               : "a __syncthreads is missing";
  r += ")";
  if (S.nhaz > 1) r += " [" + std::to_string(S.nhaz - 1) + " more conflicting accesses]";
  return r;
}
}  // namespace

void dlc_emu::rc::launch_begin(const void *kernel, unsigned char *dyn, size_t n) {
  if (!on) return;
  launch_mu.lock();
  find_tls();
  S.kernel = kernel;
  S.dyn = dyn;
  S.dyn_n = n;
  if (S.dyn_shadow.size() < n) S.dyn_shadow.resize(n);
  S.nhaz = 0;
  S.divergent.clear();
  S.active = true;
}

void dlc_emu::rc::block_begin(int) {
  if (!on) return;
  if (++S.blk == 0) S.blk = 1;  /* 0 marks a cell never touched */
  S.ival = 0;
  memset(S.wep, 0, sizeof S.wep);
}

void dlc_emu::rc::synced(int warp) {
  if (!on) return;
  if (warp < 0) S.ival++;
  else S.wep[warp & 31]++;
}

void dlc_emu::rc::divergent(int idx, const void *site, int other, const void *other_site) {
  if (!on || !S.divergent.empty()) return;
  /* one __syncthreads the compiler copied (an unrolled loop) has several
  ** call instructions: the same source line is the same barrier */
  if (other_site && lookup(site, true).loc == lookup(other_site, true).loc) return;
  S.divergent = std::string("emulator race checker: divergent __syncthreads in kernel ") +
                kernel_name() + ": " + thread_name(idx) + " waits at " + where(site) + " while " +
                thread_name(other) +
                (other_site ? " waits at " + where(other_site) : std::string(" has finished")) +
                " (a __syncthreads must be reached by every thread of the block; a barrier"
                " that only part of a block reaches leaves shared memory unordered: a race)";
}

void dlc_emu::rc::block_end(void) {}

std::string dlc_emu::rc::site(const void *pc, bool ret) {
  source s = lookup(pc, ret);
  return s.fn.empty() ? s.loc : s.loc + " (" + s.fn + ")";
}

const char *dlc_emu::rc::launch_end(void) {
  if (!on) return NULL;
  thread_local std::string report;
  report.clear();
  if (!S.divergent.empty()) report = S.divergent;
  else if (S.nhaz) report = describe(S.first);
  S.active = false;
  S.tls_n = S.dyn_n = 0;  /* the hooks' ranges empty again */
  launch_mu.unlock();
  return report.empty() ? NULL : report.c_str();
}

void dlc_emu::atomic_access(const void *p, size_t n, const void *pc) { touch(p, n, WRITE, true, pc); }

/* -- The hooks GCC's -fsanitize=thread calls (the ThreadSanitizer ABI) -- */

#define DLC_RC_HOOK extern "C" __attribute__((visibility("hidden"), noinline))
#define PC __builtin_return_address(0)
/* called by the instrumented objects' constructors: the checker is on
** unless DDPLUA_CUDA_EMU_RACECHECK=0 (a test program built with it, run
** without it, as scripts/cuda-mutants.sh does) */
DLC_RC_HOOK void __tsan_init(void) {
  const char *e = getenv("DDPLUA_CUDA_EMU_RACECHECK");
  dlc_emu::rc::on = !(e && !strcmp(e, "0"));
}
DLC_RC_HOOK void __tsan_func_entry(void *) {}
DLC_RC_HOOK void __tsan_func_exit(void) {}
#define DLC_RC_RW(n)                                                                          \
  DLC_RC_HOOK void __tsan_read##n(void *p) { touch(p, n, READ, false, PC); }                \
  DLC_RC_HOOK void __tsan_write##n(void *p) { touch(p, n, WRITE, false, PC); }              \
  DLC_RC_HOOK void __tsan_unaligned_read##n(void *p) { touch(p, n, READ, false, PC); }      \
  DLC_RC_HOOK void __tsan_unaligned_write##n(void *p) { touch(p, n, WRITE, false, PC); }    \
  DLC_RC_HOOK void __tsan_volatile_read##n(void *p) { touch(p, n, READ, false, PC); }       \
  DLC_RC_HOOK void __tsan_volatile_write##n(void *p) { touch(p, n, WRITE, false, PC); }
DLC_RC_RW(1)
DLC_RC_RW(2)
DLC_RC_RW(4)
DLC_RC_RW(8)
DLC_RC_RW(16)
DLC_RC_HOOK void __tsan_read_range(void *p, unsigned long n) { touch(p, n, READ, false, PC); }
DLC_RC_HOOK void __tsan_write_range(void *p, unsigned long n) { touch(p, n, WRITE, false, PC); }
/* Atomics of host code (the trace's on/off flag, kernels/trace.cuh): real
** atomics, never a kernel's shared memory, so nothing to check. */
DLC_RC_HOOK int __tsan_atomic32_load(const volatile int *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
DLC_RC_HOOK void __tsan_atomic32_store(volatile int *a, int v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); }
