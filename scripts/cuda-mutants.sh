#!/usr/bin/env bash
# cuda-mutants.sh -- mutation testing of the CUDA kernels' barriers on the
# emulator: every __syncthreads() of the kernel files with shared memory is
# removed in turn (one mutant each), the emulator rebuilt, and the CUDA
# specs that reach that file run three ways -- shuffled order (the
# default), run-ahead order, and with the race checker on.  A mutant is
# killed by a way when a spec fails ("reported" when the race checker's
# error failed it).  Prints a table and the totals.
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
[ ${#files[@]} -eq 0 ] && files=(scan.cu reduce.cu sort.cu index.cu conv.cu norm.cu nn_common.cuh attention.cu)

# The copy: sources from git (tracked files as they are now in the work
# tree), the build copied so only the mutated file is compiled again.
rm -rf "$tree"
mkdir -p "$tree"
git ls-files -z | xargs -0 -I{} cp --parents {} "$tree"/
cp -a build/. "$tree/build" 2>/dev/null
rm -rf "$tree/build/mutants"
find "$tree/build" -type f -exec touch {} +

# Runs the specs in the copy (output in $work/$log); prints "survived",
# "killed" (a spec failed), or "reported" (the race checker named it).
verdict() {  # log file, env assignments..., then specs
  local log=$work/$1
  shift
  if (cd "$tree" && env DDPLUA_CUDA_EMU=1 "$@" >"$log" 2>&1); then echo survived
  elif grep -q "emulator race checker" "$log"; then echo reported
  else echo killed; fi
}

printf '%-34s %-9s %-9s %-9s\n' "mutant (barrier removed)" shuffle runahead checker
total=0 k_shuffle=0 k_runahead=0 k_checker=0 k_reported=0 k_any_sched=0
for f in "${files[@]}"; do
  src=runtime/cuda/kernels/$f
  for line in $(grep -n '__syncthreads();' "$src" | cut -d: -f1); do
    sed -i "${line}s/__syncthreads();/;/" "$tree/$src"
    if ! (cd "$tree" && make --no-print-directory -j2 emu >"$work/build.log" 2>&1); then
      echo "$f:$line: the mutant did not build (see $work/build.log)"
      cp "$src" "$tree/$src"
      continue
    fi
    tag=${f%%.*}_$line
    if [ "$f" = attention.cu ]; then
      # no op calls it yet: its test program, built with the checker, run
      # without it (RACECHECK=0) in one order, then with it
      (cd "$tree" && make --no-print-directory -j2 build/emu_test_attention >>"$work/build.log" 2>&1)
      a=$(verdict "$tag.shuffle.log" DDPLUA_CUDA_EMU_RACECHECK=0 DDPLUA_CUDA_EMU_SCHED=shuffle build/emu_test_attention)
      b=$(verdict "$tag.runahead.log" DDPLUA_CUDA_EMU_RACECHECK=0 DDPLUA_CUDA_EMU_SCHED=runahead build/emu_test_attention)
      c=$(verdict "$tag.checker.log" DDPLUA_CUDA_EMU_SCHED=shuffle build/emu_test_attention)
    else
      read -r -a sp <<<"$(specs_for "$f")"
      bust=(busted --lua=build/ddplua -o TAP "${sp[@]}")
      a=$(verdict "$tag.shuffle.log" "${bust[@]}")
      b=$(verdict "$tag.runahead.log" DDPLUA_CUDA_EMU_SCHED=runahead "${bust[@]}")
      c=$(verdict "$tag.checker.log" DDPLUA_CUDA_EMU_RACECHECK=1 "${bust[@]}")
    fi
    printf '%-34s %-9s %-9s %-9s\n' "$f:$line" "$a" "$b" "$c"
    total=$((total + 1))
    [ "$a" = killed ] && k_shuffle=$((k_shuffle + 1))
    [ "$b" = killed ] && k_runahead=$((k_runahead + 1))
    [ "$c" != survived ] && k_checker=$((k_checker + 1))
    [ "$c" = reported ] && k_reported=$((k_reported + 1))
    { [ "$a" = killed ] || [ "$b" = killed ]; } && k_any_sched=$((k_any_sched + 1))
    cp "$src" "$tree/$src"
  done
done
(cd "$tree" && make --no-print-directory -j2 emu >/dev/null 2>&1)
echo "mutants: $total; killed in shuffled order: $k_shuffle; in run-ahead order: $k_runahead;" \
  "by either order: $k_any_sched; with the race checker on: $k_checker, of which it reported" \
  "$k_reported itself (the others failed on a wrong value first); logs in $work"
