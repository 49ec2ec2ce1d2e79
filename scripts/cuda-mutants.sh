#!/usr/bin/env bash
# cuda-mutants.sh -- mutation testing of the CUDA kernels' barriers on the
# emulator: every __syncthreads() of the kernel files with shared memory is
# removed in turn (one mutant each), the emulator rebuilt, and the CUDA
# specs that reach that file run three ways -- shuffled order (the
# default), run-ahead order, and with the race checker on.  A mutant is
# killed by a way when a spec fails.  Prints a table and the totals.
#
#   make mutants            (or: bash scripts/cuda-mutants.sh [FILE ...])
#
# Works in a copy of the tree (build/mutants/tree), never in yours; takes
# about 2 minutes per mutant on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$root/build/mutants
tree=$work/tree
mkdir -p "$work"

# Which specs reach which kernel file.
specs_for() {
  case $1 in
    scan.cu) echo tests/cuda/reduce_spec.lua tests/cuda/nn_spec.lua ;;
    reduce.cu|sort.cu) echo tests/cuda/reduce_spec.lua ;;
    index.cu) echo tests/cuda/index_spec.lua ;;
    conv.cu) echo tests/cuda/conv_spec.lua ;;
    norm.cu|nn_common.cuh) echo tests/cuda/nn_spec.lua ;;
    *) echo tests/cuda/*_spec.lua ;;
  esac
}

files=("$@")
[ ${#files[@]} -eq 0 ] && files=(scan.cu reduce.cu sort.cu index.cu conv.cu norm.cu nn_common.cuh)

# The copy: sources from git (tracked files as they are now in the work
# tree), the build copied so only the mutated file is compiled again.
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -z | xargs -0 -I{} cp --parents {} "$tree"/
cp -a build/. "$tree/build" 2>/dev/null
rm -rf "$tree/build/mutants"
find "$tree/build" -type f -exec touch {} +

# Runs the specs in the copy; prints "killed" or "survived".
verdict() {  # env assignments..., then specs
  if (cd "$tree" && env DDPLUA_CUDA_EMU=1 "$@" >/dev/null 2>&1); then echo survived; else echo killed; fi
}

printf '%-34s %-9s %-9s %-9s\n' "mutant (barrier removed)" shuffle runahead checker
total=0 k_shuffle=0 k_runahead=0 k_checker=0 k_any_sched=0
for f in "${files[@]}"; do
  src=runtime/cuda/kernels/$f
  for line in $(grep -n '__syncthreads();' "$src" | cut -d: -f1); do
    sed -i "${line}s/__syncthreads();/;/" "$tree/$src"
    if ! (cd "$tree" && make --no-print-directory -j2 emu >"$work/build.log" 2>&1); then
      echo "$f:$line: the mutant did not build (see $work/build.log)"
      cp "$src" "$tree/$src"
      continue
    fi
    read -r -a sp <<<"$(specs_for "$f")"
    bust=(busted --lua=build/ddplua -o TAP "${sp[@]}")
    a=$(verdict "${bust[@]}")
    b=$(verdict DDPLUA_CUDA_EMU_SCHED=runahead "${bust[@]}")
    c=$(verdict DDPLUA_CUDA_EMU_RACECHECK=1 "${bust[@]}")
    printf '%-34s %-9s %-9s %-9s\n' "$f:$line" "$a" "$b" "$c"
    total=$((total + 1))
    [ "$a" = killed ] && k_shuffle=$((k_shuffle + 1))
    [ "$b" = killed ] && k_runahead=$((k_runahead + 1))
    [ "$c" = killed ] && k_checker=$((k_checker + 1))
    { [ "$a" = killed ] || [ "$b" = killed ]; } && k_any_sched=$((k_any_sched + 1))
    cp "$src" "$tree/$src"
  done
done
(cd "$tree" && make --no-print-directory -j2 emu >/dev/null 2>&1)
echo "mutants: $total; killed in shuffled order: $k_shuffle; in run-ahead order: $k_runahead;" \
  "by either order: $k_any_sched; with the race checker: $k_checker"
