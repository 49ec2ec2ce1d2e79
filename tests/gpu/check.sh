#!/usr/bin/env bash
# check.sh -- the one script run on the GPU machine: what it sees, and our device tests.
#
#   bash tests/gpu/check.sh --stage   here, before a device run: builds
#                                     checks make built the C device tests
#                                     and copies into
#                                     build/gpu-libs the shared libraries
#                                     build/ needs beyond a bare system; then
#                                     packs all a device run needs into
#                                     build/gpu-bundle.tar.xz (~15 MiB: the
#                                     one path to carry; unpacked by the run)
#   bash tests/gpu/check.sh           runs the checks; prints a table last
#
# The checks: the C device tests, the CUDA op specs (tests/cuda/*_spec.lua,
# through busted or else tests/gpu/mini_busted.lua), pinned host-to-device
# copies overlapping kernels (tests/gpu/h2d_overlap.lua), the trace's kernel
# spans on their streams (tests/gpu/cuda_trace.lua), Fashion-MNIST on one
# GPU (`ddplua --nproc 1`, NCCL with one rank), and the GPU benchmarks
# against PyTorch (bench/gpu_*.lua and .py); the benchmark numbers go in
# the table too.  Under 8 minutes on one GPU.
#
# The GPU machine has the CUDA driver and toolkit but none of our Debian
# packages and no network, so everything here comes from the working tree
# (build/, built here).  Without a GPU (CI, this machine) the GPU rows say
# SKIP and why.  Exit status: 0 unless some row FAILed.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
BUILD=${BUILD:-build}
LIBS=$BUILD/gpu-libs
# test_device's rpath names this machine's checkout; the GPU machine's copy
# may live elsewhere, so the search path is set from where we are.
export LD_LIBRARY_PATH="$ROOT/$BUILD:$ROOT/$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# -- Staging (run here) -------------------------------------------------------

# Libraries every Linux with a CUDA driver has; all others get copied.
base_lib() {
  case "$1" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*| \
    librt.so*|libgcc_s.so*|libstdc++.so*|libcuda.so*) return 0 ;;
    # the CUDA toolkit's (hundreds of MiB: far over the bundle's limit);
    # the GPU machine has the toolkit, and cuda_lib_dirs finds them there
    libcublas*|libcudart*|libnccl*|libnvrtc*|libnvJitLink*) return 0 ;;
  esac
  return 1
}

stage() {
  local f name path
  [ -f "$BUILD/libddplua.so" ] || { echo "stage: $BUILD/libddplua.so missing: run make first"; return 1; }
  # The C device tests are built by make (linked with build/libddplua.a).
  # NCCL itself is not staged (libnccl.so.2 is far over the bundle's size
  # limit, and libddplua_cuda.so dlopens it): find_nccl looks there.
  for f in test_device test_nccl test_devalloc; do
    [ -x "$BUILD/$f" ] || { echo "stage: $BUILD/$f missing: run make first"; return 1; }
  done
  mkdir -p "$LIBS"
  for f in "$BUILD"/test_device "$BUILD"/test_nccl "$BUILD"/test_devalloc "$BUILD"/*.so "$BUILD"/ddplua; do
    [ -f "$f" ] || continue
    # ldd lines: "name => /path (addr)"; copy by the soname the loader asks for.
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
    while read -r name path; do
      base_lib "$name" && continue
      case "$path" in "$ROOT/$BUILD"/*) continue ;; esac
      [ -f "$LIBS/$name" ] || { cp -L "$path" "$LIBS/$name" && echo "stage: $name <- $path"; }
    done
  done
  echo "stage: $(du -sh "$LIBS" | cut -f1) in $LIBS"
  # Fashion-MNIST's test split (4.3 MiB; the train split would not fit the
  # bundle): the GPU machine trains on it too (see fm_data).
  local fm=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  if [ -f "$fm/t10k-images-idx3-ubyte.gz" ]; then
    mkdir -p "$BUILD/gpu-data"
    cp "$fm"/t10k-images-idx3-ubyte.gz "$fm"/t10k-labels-idx1-ubyte.gz "$BUILD/gpu-data/"
    echo "stage: Fashion-MNIST test split in $BUILD/gpu-data"
  fi
  # One compressed file (the libraries shrink about 8 times), as the
  # bundle's size is limited; the checks below unpack it.
  local files=()
  for f in "$BUILD"/libddplua.so "$BUILD"/libddplua_cuda.so "$BUILD"/ddplua "$BUILD"/lua \
           "$BUILD"/test_device "$BUILD"/test_nccl "$BUILD"/test_devalloc "$LIBS" "$BUILD/gpu-data"; do
    [ -e "$f" ] && files+=("$f")
  done
  tar -cJf "$BUILD/gpu-bundle.tar.xz" "${files[@]}" || return 1
  echo "stage: $(du -h "$BUILD/gpu-bundle.tar.xz" | cut -f1) in $BUILD/gpu-bundle.tar.xz (carry this one path)"
}

if [ "${1:-}" = "--stage" ]; then
  stage
  exit $?
fi

# -- Checks ---------------------------------------------------------------------

# A carried bundle (--stage) is unpacked over build/ first: with tar and
# xz, else with Python's tarfile.
if [ -f "$BUILD/gpu-bundle.tar.xz" ] && [ "$BUILD/gpu-bundle.tar.xz" -nt "$BUILD/.bundle-unpacked" ]; then
  if command -v xz >/dev/null; then
    tar -xJf "$BUILD/gpu-bundle.tar.xz"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' "$BUILD/gpu-bundle.tar.xz"
  fi && touch "$BUILD/.bundle-unpacked" && echo "unpacked $BUILD/gpu-bundle.tar.xz"
fi

ROWS=()
NFAIL=0
row() {  # row NAME RESULT DETAIL
  ROWS+=("$(printf '%-14s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && NFAIL=$((NFAIL + 1))
  return 0
}
section() { printf '\n== %s\n' "$1"; }

run_limited() {  # run_limited SECONDS CMD...: a hung GPU must not hang the script
  if command -v timeout >/dev/null; then timeout "$@"; else shift; "$@"; fi
}

# Prints the path of a libnccl.so.2 (nothing when there is none):
# $DDPLUA_NCCL_LIB, the loader's search path, the CUDA toolkit, then a
# PyTorch install (torch/lib, or the nvidia-nccl wheel beside torch).  The
# packages are located without importing them (no CUDA init, no delay).
find_nccl() {
  local d dirs=() tp
  if [ -n "${DDPLUA_NCCL_LIB:-}" ]; then
    [ -f "$DDPLUA_NCCL_LIB" ] && echo "$DDPLUA_NCCL_LIB"
    return 0
  fi
  d=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" { print $NF; exit }')
  [ -n "$d" ] && [ -f "$d" ] && { echo "$d"; return 0; }
  IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
  dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu)
  if command -v python3 >/dev/null; then
    tp=$(run_limited 30 python3 -c '
import importlib.util as u, os
for name in ("torch", "nvidia"):
    try:
        s = u.find_spec(name)
    except Exception:
        continue
    for loc in (s.submodule_search_locations or []) if s else []:
        print(os.path.join(loc, "lib") if name == "torch" else os.path.join(loc, "nccl", "lib"))
        if name == "torch":
            print(os.path.join(os.path.dirname(loc), "nvidia", "nccl", "lib"))
' 2>/dev/null)
    while IFS= read -r d; do [ -n "$d" ] && dirs+=("$d"); done <<<"$tp"
  fi
  for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ -f "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return 0; }
  done
  return 0
}

# The CUDA toolkit's libraries (libcublas.so.N for libddplua_cuda.so) on
# the search path when the loader does not know them: /usr/local/cuda,
# then the nvidia-* wheels beside PyTorch.
cuda_lib_dirs() {
  local d tp
  ldconfig -p 2>/dev/null | grep -q 'libcublas\.so' && return 0
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && ls "$d"/libcublas.so* >/dev/null 2>&1 && echo "$d"
  done
  command -v python3 >/dev/null || return 0
  tp=$(run_limited 30 python3 -c '
import importlib.util as u, os, glob
s = u.find_spec("nvidia")
for loc in (s.submodule_search_locations or []) if s else []:
    for d in glob.glob(os.path.join(loc, "*", "lib")):
        print(d)
' 2>/dev/null)
  printf '%s\n' "$tp" | grep -v '^$'
}
for d in $(cuda_lib_dirs); do LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; done
export LD_LIBRARY_PATH

section "host"
echo "$(uname -srm), $(nproc 2>/dev/null || echo '?') cpus, checkout $ROOT"

section "nvidia-smi -L"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null; then
  if out=$(run_limited 60 nvidia-smi -L 2>&1); then
    echo "$out"
    n=$(printf '%s\n' "$out" | grep -c '^GPU ')
    if [ "$n" -gt 0 ]; then
      HAVE_GPU=1
      row nvidia-smi PASS "$n GPU(s), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    else
      row nvidia-smi SKIP "no GPU listed"
    fi
  else
    echo "$out"
    row nvidia-smi FAIL "nvidia-smi -L failed"
  fi
else
  echo "SKIP: nvidia-smi not found (no NVIDIA driver on this machine)"
  row nvidia-smi SKIP "nvidia-smi not found"
fi

section "libraries"
missing=""
for f in "$BUILD"/libddplua.so "$BUILD"/libddplua_cuda.so "$BUILD"/test_device "$BUILD"/test_nccl; do
  if [ ! -f "$f" ]; then
    echo "$f: missing"
    missing="$missing $(basename "$f")(not built)"
    continue
  fi
  echo "$f:"
  ldd "$f" 2>&1 | sed 's/^/  /'
  for m in $(ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }'); do
    case " $missing " in *" $m "*) ;; *) missing="$missing $m" ;; esac
  done
done
if [ -n "$missing" ]; then
  row libraries FAIL "missing:$missing (run tests/gpu/check.sh --stage here first)"
else
  row libraries PASS "all resolve"
fi

# c_test NAME: runs build/NAME (a tests/c program) and adds its row; sets
# SKIPPED to its first SKIP line.
c_test() {
  local name=$1 out rc last
  SKIPPED=""
  section "$name"
  if [ ! -x "$BUILD/$name" ]; then
    echo "SKIP: $BUILD/$name not built (run tests/gpu/check.sh --stage)"
    row "$name" FAIL "not built"
    return
  fi
  out=$(run_limited 300 "$BUILD/$name" 2>&1)
  rc=$?
  echo "$out"
  last=$(printf '%s\n' "$out" | grep "^$name:" | tail -1)
  SKIPPED=$(printf '%s\n' "$out" | grep '^SKIP:' | head -1)
  if [ "$rc" -ne 0 ] || [ -z "$last" ]; then
    row "$name" FAIL "exit $rc${last:+, ${last#"$name": }}"
  elif [ -n "$SKIPPED" ]; then
    row "$name" SKIP "${last#"$name": }; ${SKIPPED#SKIP: }"
  else
    row "$name" PASS "${last#"$name": }"
  fi
}

c_test test_device
# A GPU the driver lists but the test did not use is a failure, not a skip.
if [ "$HAVE_GPU" = 1 ] && [ -n "$SKIPPED" ]; then
  row gpu-used FAIL "nvidia-smi lists a GPU but ddplua found none"
fi
c_test test_devalloc
# tests/gpu/cuda_tensors.lua through the ddplua program, rowed like a C test
CUDA_TENSORS="$BUILD/cuda_tensors"
printf '#!/usr/bin/env bash\nexec "%s/%s/ddplua" "%s/tests/gpu/cuda_tensors.lua"\n' "$ROOT" "$BUILD" "$ROOT" >"$CUDA_TENSORS"
chmod +x "$CUDA_TENSORS"
c_test cuda_tensors

# Host-to-device copies from pinned memory on the copy stream
# (tests/gpu/h2d_overlap.lua): DataLoader batches prefetched with
# {non_blocking = true} while the previous batch's kernels run arrive
# intact, and a copy issued after a step's kernels overlaps them; the row
# gives the times (kernels, copy, both, and what queueing would take).
# lua_row NAME PREFIX OUTPUT RC: the row of a tests/gpu/*.lua script that
# prints "NAME: N passed, M failed" last, "SKIP: ..." with no GPU, and its
# numbers on a line starting with PREFIX (added to the row).
lua_row() {
  local name=$1 prefix=$2 out=$3 rc=$4 last skip timing
  last=$(printf '%s\n' "$out" | grep "^$name:" | tail -1)
  skip=$(printf '%s\n' "$out" | grep '^SKIP:' | head -1)
  timing=$(printf '%s\n' "$out" | grep "^$prefix" | tail -1)
  timing=${timing#"${prefix%%:*}: "}
  if [ "$rc" -ne 0 ] || [ -z "$last" ]; then
    row "$name" FAIL "exit $rc${last:+, ${last#"$name": }}${timing:+; $timing}"
  elif [ -n "$skip" ]; then
    row "$name" SKIP "${skip#SKIP: }"
  else
    row "$name" PASS "${last#"$name": }${timing:+; $timing}"
  fi
}
section "h2d_overlap"
out=$(run_limited 180 "$BUILD/ddplua" "$ROOT/tests/gpu/h2d_overlap.lua" 2>&1)
rc=$?
echo "$out"
lua_row h2d_overlap "h2d overlap: kernels" "$out" "$rc"

# The trace's device spans (tests/gpu/cuda_trace.lua): a one-rank DDP job
# traced for 20 steps has its kernels on the compute stream's row (in
# stream order, none before the module that launched it), its pinned
# copies on the copy stream's and NCCL's all-reduces on the NCCL stream's;
# the row gives the step times untraced and traced, and the spans per row.
section "cuda_trace"
out=$(DDPLUA_BIN="$ROOT/$BUILD/ddplua" DDPLUA_NCCL_LIB=$(find_nccl) run_limited 180 "$BUILD/ddplua" \
      "$ROOT/tests/gpu/cuda_trace.lua" 2>&1)
rc=$?
echo "$out"
lua_row cuda_trace "cuda trace: step" "$out" "$rc"

section "test_nccl"
# One rank on cuda:0, two forked ranks when there are two GPUs; without a
# device or without NCCL its checks say SKIP.
nccl=$(find_nccl)
if [ ! -x "$BUILD/test_nccl" ]; then
  echo "SKIP: $BUILD/test_nccl not built (run tests/gpu/check.sh --stage)"
  row test_nccl FAIL "not built"
elif [ -z "$nccl" ]; then
  echo "SKIP: libnccl.so.2 not found (DDPLUA_NCCL_LIB, ldconfig, LD_LIBRARY_PATH, /usr/local/cuda, PyTorch)"
  row test_nccl SKIP "libnccl.so.2 not found (set DDPLUA_NCCL_LIB)"
else
  echo "NCCL: $nccl"
  out=$(DDPLUA_NCCL_LIB=$nccl run_limited 300 "$BUILD/test_nccl" 2>&1)
  rc=$?
  echo "$out"
  last=$(printf '%s\n' "$out" | grep '^test_nccl:' | tail -1)
  skip=$(printf '%s\n' "$out" | grep '^SKIP: NCCL collectives' | head -1)
  skip2=$(printf '%s\n' "$out" | grep '^SKIP: 2-rank' | head -1)
  if [ "$rc" -ne 0 ] || [ -z "$last" ]; then
    row test_nccl FAIL "exit $rc${last:+, ${last#test_nccl: }}"
  elif [ -n "$skip" ]; then
    row test_nccl SKIP "${last#test_nccl: }; ${skip#SKIP: }"
  else
    row test_nccl PASS "${last#test_nccl: }${skip2:+ (${skip2#SKIP: })}"
  fi
fi

# -- ddplua on the GPU: specs, Fashion-MNIST, benchmarks -------------------------

# The summary line of a busted-style run ("N successes / N failures / ...").
summary() { printf '%s\n' "$1" | grep -E '^[0-9]+ successes / ' | tail -1; }

# spec_row NAME SPEC: one spec file of tests/cuda on the device (also in
# the "cuda specs" section), as a row of its own, with its first failing
# line where it fails.
spec_row() {
  section "$1"
  if [ "$HAVE_GPU" != 1 ]; then row "$1" SKIP "no GPU"; return; fi
  local out rc sum
  if command -v busted >/dev/null; then
    out=$(run_limited 120 busted --lua=luajit "$2" 2>&1)
  else
    out=$(run_limited 120 "$BUILD/ddplua" tests/gpu/mini_busted.lua "$2" 2>&1)
  fi
  rc=$?
  sum=$(summary "$out")
  if [ "$rc" -eq 0 ] && [ -n "$sum" ]; then row "$1" PASS "${sum% :*}"
  else row "$1" FAIL "exit $rc${sum:+, ${sum% :*}}: $(printf '%s\n' "$out" | grep -m1 -E '\.lua:[0-9]+:' | cut -c1-120)"; fi
}

section "cuda specs"
if [ "$HAVE_GPU" != 1 ]; then
  echo "SKIP: no GPU (CI runs these specs on the emulator: scripts/run-tests.sh)"
  row cuda-specs SKIP "no GPU"
else
  if command -v busted >/dev/null; then
    out=$(run_limited 300 busted --lua=luajit tests/cuda/*_spec.lua 2>&1)
  else
    out=$(run_limited 300 "$BUILD/ddplua" tests/gpu/mini_busted.lua tests/cuda/*_spec.lua 2>&1)
  fi
  rc=$?
  echo "$out"
  sum=$(summary "$out")
  if [ "$rc" -eq 0 ] && [ -n "$sum" ]; then row cuda-specs PASS "${sum% :*}"
  else row cuda-specs FAIL "exit $rc${sum:+, ${sum% :*}}"; fi
fi

# ZeroRedundancyOptimizer on the device (tests/cuda/zero_spec.lua, also in
# the specs above): 2 ranks, each rank's shard of AdamW's state on its GPU
# (both on cuda:0 where there is one GPU), the parameters all-gathered
# (NCCL with a GPU per rank, else staged through host memory), equal to the
# unsharded optimizer, and a sharded checkpoint back onto the device.
spec_row zero_cuda tests/cuda/zero_spec.lua

# ddp.memory_summary on the device (tests/cuda/memory_spec.lua, also in the
# specs above): parameters, gradients and AdamW's state counted on cuda:0,
# activations from the device allocator's per-step window peak
# (dl_cuda_memory_window_peak), and out-of-memory errors that name sizes.
spec_row memory_summary_cuda tests/cuda/memory_spec.lua

# The optimizers' group-at-once steps on the device (tests/cuda/optim_spec.lua,
# also in the specs above): SGD and AdamW over 40 tensors in one launch per
# 32 (runtime/cuda/kernels/optim.cu), the same bits as a launch per tensor;
# bfloat16 and float16 parameters in float32 chunks (nn/optim_half.c), the
# float32 step rounded once, to the bit.
spec_row optim_foreach_cuda tests/cuda/optim_spec.lua

# Attention on the device (tests/cuda/attention_spec.lua, also in the specs
# above): heads as strided views of one [B, T, 3C] projection, rows read at
# their stride (runtime/cuda/attention.c expands them), forward and backward
# equal to the CPU's kernel, which reads them in place.
spec_row sdpa_strided_cuda tests/cuda/attention_spec.lua

# A Fashion-MNIST directory: the system's, else the staged test split, as
# both splits (a copy made here: links do not travel in the bundle).
fm_data() {
  local sys=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist} d
  if [ -f "$sys/train-images-idx3-ubyte.gz" ]; then echo "$sys"; return 0; fi
  [ -f "$BUILD/gpu-data/t10k-images-idx3-ubyte.gz" ] || return 0
  d=$(mktemp -d)
  cp "$BUILD"/gpu-data/t10k-* "$d/"
  cp "$d/t10k-images-idx3-ubyte.gz" "$d/train-images-idx3-ubyte.gz"
  cp "$d/t10k-labels-idx1-ubyte.gz" "$d/train-labels-idx1-ubyte.gz"
  echo "$d"
}

section "fashion_mnist"
if [ "$HAVE_GPU" != 1 ]; then
  echo "SKIP: no GPU"
  row fashion_mnist SKIP "no GPU"
elif ! fmdir=$(fm_data) || [ -z "$fmdir" ]; then
  echo "SKIP: no Fashion-MNIST data (tests/gpu/check.sh --stage copies the test split)"
  row fashion_mnist SKIP "no data"
else
  t0=$(date +%s)
  out=$(FASHION_MNIST_DIR=$fmdir DDPLUA_NCCL_LIB=$nccl run_limited 150 "$BUILD/ddplua" --nproc 1 --no-prefix \
        examples/fashion_mnist.lua --epochs 1 --checkpoint "$(mktemp -u)" 2>&1)
  rc=$?
  echo "$out"
  ep=$(printf '%s\n' "$out" | grep -E '^epoch 1 +loss' | tail -1)
  be=$(printf '%s\n' "$out" | grep -oE 'backend [a-z]+' | head -1)
  # ddp.init's fallback when NCCL does not start (the line above names the
  # backend chosen before the group was made)
  printf '%s\n' "$out" | grep -q 'NCCL unavailable' && be="backend shm (NCCL unavailable)"
  if [ "$rc" -eq 0 ] && [ -n "$ep" ]; then
    row fashion_mnist PASS "${ep#epoch 1  }, ${be:-backend ?}, $(( $(date +%s) - t0 )) s"
  else
    row fashion_mnist FAIL "exit $rc: $(printf '%s\n' "$out" | grep -m1 -E '\.lua:[0-9]+:|rror' | cut -c1-120)"
  fi
fi

# bench NAME: bench/NAME.lua, then bench/NAME.py, a row with both RESULTs.
bench() {
  local name=$1 l p
  section "bench $name"
  l=$(run_limited 90 "$BUILD/ddplua" "bench/$name.lua" 2>&1)
  echo "$l"
  p=$(run_limited 90 python3 "bench/$name.py" 2>&1)
  echo "$p"
  l=$(printf '%s\n' "$l" | grep '^RESULT' | tail -1)
  p=$(printf '%s\n' "$p" | grep '^RESULT' | tail -1)
  if [ -z "$l" ]; then row "$name" FAIL "no RESULT line from bench/$name.lua"; return; fi
  # on a GPU, ddplua skipping a measurement means an op failed there
  local st=PASS
  case "$l" in *skip*) st=FAIL ;; esac
  row "$name" "$st" "${l#RESULT "$name" } | ${p:+${p#RESULT "$name" }}"
}
if [ "$HAVE_GPU" = 1 ]; then
  bench gpu_matmul
  bench gpu_elementwise
  bench gpu_train
else
  row benchmarks SKIP "no GPU"
fi

section "results"
printf '%s\n' "${ROWS[@]}"
if [ "$NFAIL" -gt 0 ]; then echo "gpu check: $NFAIL FAILED"; else echo "gpu check: ok"; fi
[ "$NFAIL" -eq 0 ]
