#!/usr/bin/env bash
# Runs every test of ddplua -- C unit tests, busted specs, a memory check --
# and ends with one line CI reads: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=$BUILD/test-out
mkdir -p "$out"
passed=0 failed=0 skipped=0

count() {  # $1: passed, $2: failed, $3: skipped
  passed=$((passed + $1)); failed=$((failed + $2)); skipped=$((skipped + $3))
}

# -- C unit tests (built by make as build/test_*, linked with the
# runtime's archive; the CUDA emulator's own, tests/emu/test_*.cc, as
# build/emu_test_*): each prints "name: N passed, M failed" last, "SKIP:"
# lines for a missing device
for src in tests/c/test_*.c tests/emu/test_*.cc; do
  [ -e "$src" ] || continue
  case $src in
    tests/emu/*) name=emu_$(basename "$src" .cc) ;;
    *) name=$(basename "$src" .c) ;;
  esac
  bin="$BUILD/$name"
  if [ ! -x "$bin" ]; then
    echo "FAIL $name: not built (make ctests)"; count 0 1 0; continue
  fi
  "$bin" >"$out/$name.log" 2>&1
  rc=$?
  grep -E '^(SKIP|FAIL)' "$out/$name.log"
  line=$(tail -n 1 "$out/$name.log")
  p=$(sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p' <<<"$line")
  f=$(sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$line")
  s=$(grep -c '^SKIP' "$out/$name.log")
  if [ -z "$p" ]; then
    echo "FAIL $name: exited $rc without a summary line"; tail -n 20 "$out/$name.log"; count 0 1 0
  else
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    echo "$name: $p passed, $f failed"
    count "$p" "$f" "$s"
  fi
done

# -- the library exports exactly what its public headers declare
if bash scripts/check-exports.sh "$BUILD/libddplua.so"; then count 1 0 0; else count 0 1 0; fi

# -- the runtime keeps its layers (docs/architecture.md's order): includes,
# the symbols each layer's objects use, structs named below their layer
if bash scripts/check-layers.sh . "$BUILD/obj"; then count 1 0 0; else count 0 1 0; fi

# -- autograd's gradient rules: one table (runtime/autograd/rules.h), every
# backward defined and recorded, no node op told apart by a bare digit
if bash scripts/check-grad-rules.sh; then count 1 0 0; else count 0 1 0; fi

if [ "${1:-}" = c ]; then  # make test-c: the C tests alone
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
  exit
fi

# -- the device test again on two emulated CUDA devices (the probe, the
# status line, launches on cuda:1, bad device numbers) where no GPU is
if [ -x "$BUILD/test_device" ] && [ -e "$BUILD/libddplua_cudaemu.so" ]; then
  DDPLUA_CUDA_EMU=2 "$BUILD/test_device" >"$out/test_device_emu.log" 2>&1
  rc=$?
  line=$(tail -n 1 "$out/test_device_emu.log")
  p=$(sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\1/p' <<<"$line")
  f=$(sed -nE 's/.* ([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$line")
  if [ -z "$p" ]; then
    echo "FAIL test_device (emulated): exited $rc without a summary line"; tail -n 20 "$out/test_device_emu.log"; count 0 1 0
  else
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    grep -E '^FAIL' "$out/test_device_emu.log"
    # the emulator is built, so a skip here means it did not load: a failure
    if grep -q '^SKIP' "$out/test_device_emu.log"; then
      grep '^SKIP' "$out/test_device_emu.log" | sed 's/^SKIP/FAIL (the emulator did not load)/'
      [ "$f" -eq 0 ] && f=1
    fi
    echo "test_device (2 emulated devices): $p passed, $f failed"
    count "$p" "$f" 0
  fi
fi

# -- busted specs (TAP: "ok", "not ok", "ok ... # SKIP"), under luajit in the
# repository root unless BUSTED_LUA (the interpreter) and BUSTED_DIR (where
# busted runs, reading its .busted) say otherwise
run_busted() {  # $1: label, $2: TAP file, rest: spec files
  local label=$1 tap=$2
  shift 2
  (cd "${BUSTED_DIR:-.}" && busted --lua="${BUSTED_LUA:-luajit}" -o TAP "$@") >"$tap" 2>&1
  local p s f
  p=$(grep -E '^ok ' "$tap" | grep -vc '# SKIP')
  s=$(grep -cE '^ok .*# SKIP' "$tap")
  f=$(grep -cE '^not ok ' "$tap")
  grep -E '^ok .*# SKIP' "$tap" | sed -E 's/^ok [0-9]+ - # SKIP/SKIP:/'
  if [ "$f" -gt 0 ]; then
    echo "$label failures:"
    awk '/^not ok /{show=1} /^ok /{show=0} show' "$tap" | head -n 200
  fi
  if [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$s" -eq 0 ]; then
    echo "$label ran no test:"; tail -n 30 "$tap"; f=1
  fi
  echo "$label: $p passed, $f failed, $s skipped"
  count "$p" "$f" "$s"
}

# -- the SLURM cluster the launch-shape specs share (two nodes, n1 and n2,
# on this host: tests/helpers/slurm_cluster.sh), started once here and
# stopped when the run ends, unless it was up before.  Where it cannot run
# (not root, no packages) DDPLUA_SLURM_SKIP tells the specs why, and they
# skip.
if bash tests/helpers/slurm_cluster.sh status >/dev/null 2>&1; then
  :  # someone's cluster: used, and left up
else
  bash tests/helpers/slurm_cluster.sh up >"$out/slurm-up.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    trap 'bash tests/helpers/slurm_cluster.sh down >/dev/null 2>&1' EXIT
    trap 'exit 130' INT; trap 'exit 143' TERM  # so EXIT's trap runs then too
  else
    cat "$out/slurm-up.log"
    bash tests/helpers/slurm_cluster.sh down >/dev/null 2>&1
    export DDPLUA_SLURM_SKIP="$(sed -n 's/.*skip: //p' "$out/slurm-up.log" | head -n 1)"
    [ -n "$DDPLUA_SLURM_SKIP" ] || DDPLUA_SLURM_SKIP="slurm_cluster.sh up exited $rc (see $out/slurm-up.log)"
  fi
fi

specs=$(ls tests/*_spec.lua 2>/dev/null)
[ -n "$specs" ] && run_busted busted "$out/busted.tap" $specs

# -- examples/spec as users run their own specs: `busted --lua=ddplua` in
# examples/ (its .busted), ddp.testing's assertions and a 2-rank job
BUSTED_DIR=examples BUSTED_LUA="$(cd "$BUILD" && pwd)/ddplua" \
  run_busted "examples/spec (busted --lua=ddplua)" "$out/busted-examples.tap"

# -- CUDA op specs (tests/cuda): on a GPU where there is one; else on the
# CUDA emulator (the same kernel sources built for the CPU, selected by
# DDPLUA_CUDA_EMU=1), so every CUDA path runs in CI too.
cuda_specs=$(ls tests/cuda/*_spec.lua 2>/dev/null)
if [ -n "$cuda_specs" ]; then
  ndev=$(DDPLUA_CUDA_EMU=0 "$BUILD/ddplua" -e 'io.write(require("ddp").cuda.device_count())' 2>/dev/null || echo 0)
  if [ "${ndev:-0}" -gt 0 ]; then
    DDPLUA_CUDA_EMU=0 run_busted "cuda specs (GPU)" "$out/busted-cuda.tap" $cuda_specs
  elif [ -e "$BUILD/libddplua_cudaemu.so" ]; then
    # twice: with the shared-memory race checker on (its build of the
    # kernels, threads in shuffled order), and in run-ahead order (one warp
    # as far ahead of the others as a GPU may let it) -- docs/cuda.md
    DDPLUA_CUDA_EMU=1 DDPLUA_CUDA_EMU_RACECHECK=1 \
      run_busted "cuda specs (emulated on the CPU, race checker on)" "$out/busted-cuda.tap" $cuda_specs
    DDPLUA_CUDA_EMU=1 DDPLUA_CUDA_EMU_SCHED=runahead \
      run_busted "cuda specs (emulated on the CPU, run-ahead order)" "$out/busted-cuda-runahead.tap" $cuda_specs
  else
    echo "SKIP: CUDA op specs (no GPU, and the CUDA emulator was not built)"; count 0 0 1
  fi
fi

# -- chaos, short form: a few rows of `make chaos` (a rank that exits,
# segfaults, loops or is killed, the launcher killed): each row passes when
# the job ends within its bound, names the failing rank, exits non-zero
# and leaves no process and no /dev/shm entry.
"$BUILD/ddplua" tests/chaos/run.lua --short >"$out/chaos.log" 2>&1
cp=$(sed -nE 's/^chaos: ([0-9]+) passed, ([0-9]+) failed$/\1/p' "$out/chaos.log")
cf=$(sed -nE 's/^chaos: ([0-9]+) passed, ([0-9]+) failed$/\2/p' "$out/chaos.log")
if [ -z "$cp" ]; then
  echo "FAIL chaos (short): no summary line"; tail -n 30 "$out/chaos.log"; count 0 1 0
else
  [ "$cf" -gt 0 ] && { echo "chaos (short) failures:"; grep -vE '^ddplua:' "$out/chaos.log" | head -n 120; }
  echo "chaos (short): $cp passed, $cf failed"
  count "$cp" "$cf" 0
fi

# -- fuzz smoke: the safetensors reader under libFuzzer, ASan and UBSan for
# 10 s where clang is installed (`make fuzz` runs it longer; FUZZ_SMOKE=0
# skips it).  A sanitizer build that fails is a failure.
if command -v clang >/dev/null && [ "${FUZZ_SMOKE:-1}" != 0 ]; then
  if make -s --no-print-directory -j"$(nproc)" fuzz-build BUILD="$BUILD" >"$out/fuzz.build" 2>&1; then
    rm -rf "$BUILD/fuzz/smoke" && mkdir -p "$BUILD/fuzz/smoke"
    cp tests/golden/st_*.safetensors "$BUILD/fuzz/smoke/"
    if "$BUILD/fuzz/fuzz_safetensors" -max_total_time=10 -max_len=16384 -timeout=10 \
         -dict=tests/fuzz/safetensors.dict -artifact_prefix="$BUILD/fuzz/" \
         "$BUILD/fuzz/smoke" >"$out/fuzz.log" 2>&1; then
      echo "fuzz safetensors (10 s): $(grep -oE 'Done [0-9]+ runs' "$out/fuzz.log"), nothing found"; count 1 0 0
    else
      echo "FAIL fuzz safetensors:"; grep -vE '^#[0-9]' "$out/fuzz.log" | tail -n 40; count 0 1 0
    fi
    rm -rf "$BUILD/fuzz/smoke_store" && mkdir -p "$BUILD/fuzz/smoke_store"
    if "$BUILD/fuzz/fuzz_store" -max_total_time=5 -max_len=4096 -timeout=10 \
         -dict=tests/fuzz/store.dict -artifact_prefix="$BUILD/fuzz/store-" \
         "$BUILD/fuzz/smoke_store" >"$out/fuzz_store.log" 2>&1; then
      echo "fuzz store (5 s): $(grep -oE 'Done [0-9]+ runs' "$out/fuzz_store.log"), nothing found"; count 1 0 0
    else
      echo "FAIL fuzz store:"; grep -vE '^#[0-9]' "$out/fuzz_store.log" | tail -n 40; count 0 1 0
    fi
  else
    echo "FAIL fuzz smoke run: the sanitizer build failed:"; tail -n 40 "$out/fuzz.build"; count 0 1 0
  fi
else
  echo "SKIP: fuzz smoke run (no clang, or FUZZ_SMOKE=0)"; count 0 0 1
fi

# -- memory: an example under valgrind must show no invalid access and no
# leak from the runtime (LuaJIT's own allocator is suppressed).
if command -v valgrind >/dev/null; then
  # DDPLUA_GEMM=openblas: oneDNN's JIT sgemm kernels (at 2 threads, the
  # tour's long reductions) read a vector past the end of oneDNN's own
  # scratch blocks, code without symbols that no suppression can name;
  # ddplua's own accesses are what this checks
  if DDPLUA_GEMM=openblas valgrind --quiet --error-exitcode=9 --leak-check=full --errors-for-leak-kinds=definite \
       --suppressions=tests/valgrind.supp "$BUILD/ddplua" examples/tensor_tour.lua --epochs 1 \
       >"$out/valgrind.log" 2>&1; then
    echo "valgrind examples/tensor_tour.lua: clean"; count 1 0 0
  else
    echo "FAIL valgrind examples/tensor_tour.lua:"; tail -n 60 "$out/valgrind.log"; count 0 1 0
  fi
else
  echo "SKIP: valgrind not installed"; count 0 0 1
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
