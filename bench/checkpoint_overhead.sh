#!/usr/bin/env bash
# checkpoint_overhead.sh: what activation checkpointing saves and costs on
# the 2-block GPT (bench/checkpoint_gpt.lua and .py), in alternating rounds
# of ddplua plain / checkpointed and PyTorch plain / checkpointed.
#   bash bench/checkpoint_overhead.sh [ROUNDS] [THREADS]   (default 3, 1)
#   BENCH_PYTHON=~/.cache/ddplua/venv/bin/python bash bench/checkpoint_overhead.sh
# Prints the CPU flags and both versions, then per side the median ms/step
# of each mode and its ratio to plain, and ddplua's activations kept after
# the forward and activation peak with their ratios.
set -euo pipefail
ROUNDS=${1:-3}
THREADS=${2:-1}
cd "$(dirname "$0")/.."
. bench/machine.sh
bench_twins
echo "$TWINS; $THREADS thread(s), median of $ROUNDS alternating rounds"
for _ in $(seq "$ROUNDS"); do
  for mode in plain ckpt; do
    build/ddplua bench/checkpoint_gpt.lua "$mode" "$THREADS" >"$tmp/out"
    for m in "ms/step" "activations kept" "activation peak" "last loss"; do
      grep -F "$m" "$tmp/out" | cut -f2 >>"$tmp/ddplua-$mode-$(echo "$m" | tr " /" "__")"
    done
    "$PY" bench/checkpoint_gpt.py "$mode" "$THREADS" 2>/dev/null | grep -F "ms/step" | cut -f2 >>"$tmp/torch-$mode-ms_step" || true
  done
done
med() { [ -s "$1" ] && sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' || echo "-"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
printf "%-22s %12s %12s %8s\n" "" plain checkpointed ratio
for who in ddplua torch; do
  p=$(med "$tmp/$who-plain-ms_step"); c=$(med "$tmp/$who-ckpt-ms_step")
  printf "%-22s %12s %12s %8s\n" "$who ms/step" "$p" "$c" "$(ratio "$c" "$p")"
done
for m in activations_kept activation_peak; do
  p=$(med "$tmp/ddplua-plain-$m"); c=$(med "$tmp/ddplua-ckpt-$m")
  printf "%-22s %12s %12s %8s\n" "ddplua ${m//_/ } MiB" "$p" "$c" "$(ratio "$c" "$p")"
done
echo "last loss, plain and checkpointed (equal: the recompute gives the plain run's numbers): $(head -n1 "$tmp/ddplua-plain-last_loss") $(head -n1 "$tmp/ddplua-ckpt-last_loss")"
