#!/usr/bin/env bash
# trace_overhead.sh: what the trace costs a training step, beside what
# torch.profiler costs PyTorch on the same model (bench/trace_cost.lua and
# .py: an MLP through a DataLoader with AdamW, one thread), in alternating
# rounds: ddplua off / on (module level) / ops (C ops too), PyTorch off /
# under torch.profiler (CPU ops).
#   bash bench/trace_overhead.sh [ROUNDS]   (default 5; from the repository root)
#   BENCH_PYTHON=~/.cache/ddplua/venv/bin/python bash bench/trace_overhead.sh
# Prints the CPU flags, PyTorch's version, then per model the median
# and the fastest us/step of each mode, each with its ratio to off; then
# off and on alternating in blocks within one process (machine drift
# cancels), and what writing the rank's file at stop costs per traced step.
set -euo pipefail
ROUNDS=${1:-5}
cd "$(dirname "$0")/.."
. bench/machine.sh
bench_twins
echo "$TWINS; median of $ROUNDS alternating rounds"
for _ in $(seq "$ROUNDS"); do
  for size in small large; do
    build/ddplua bench/trace_cost.lua "$size" alt >>"$tmp/alt-$size"
    for mode in off on ops; do
      build/ddplua bench/trace_cost.lua "$size" "$mode" | cut -f2 >>"$tmp/ddplua-$size-$mode"
    done
    for mode in off on; do
      "$PY" bench/trace_cost.py "$size" "$mode" 2>/dev/null | grep us/step | cut -f2 >>"$tmp/torch-$size-$mode" || true
    done
  done
done
med() { [ -s "$1" ] && sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' || echo "-"; }
low() { [ -s "$1" ] && sort -g "$1" | head -n1 || echo "-"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.3f", a / b }'; }
printf "%-8s %-12s %12s %8s %12s %8s\n" model mode "us/step" "/off" "fastest" "/off"
for size in small large; do
  for who in ddplua torch; do
    off=$(med "$tmp/$who-$size-off"); loff=$(low "$tmp/$who-$size-off")
    for mode in off on ops; do
      [ -e "$tmp/$who-$size-$mode" ] || continue
      v=$(med "$tmp/$who-$size-$mode"); l=$(low "$tmp/$who-$size-$mode")
      printf "%-8s %-12s %12s %8s %12s %8s\n" "$size" "$who $mode" "$v" "$(ratio "$v" "$off")" "$l" "$(ratio "$l" "$loff")"
    done
  done
done
echo "within one process, blocks of 20 steps off and on in turn (trace_cost.lua alt), median of the runs:"
for size in small large; do
  for m in off on writing; do
    v=$(grep -F "alt $m" "$tmp/alt-$size" | cut -f2 | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    printf "%-8s %-22s %10s us/step\n" "$size" "ddplua alt $m" "$v"
  done
done
