#!/usr/bin/env bash
# zero_overhead.sh: what ZeroRedundancyOptimizer saves and costs on 2 ranks
# (bench/zero_optimizer.lua and .py), ddplua and PyTorch in alternating
# rounds, for train_ddp's MLP and train_gpt's GPT.
#   bash bench/zero_overhead.sh [ROUNDS] [MODELS]   (default 3, "mlp gpt")
#   BENCH_PYTHON=~/.cache/ddplua/venv/bin/python bash bench/zero_overhead.sh
# Prints the CPU flags and both versions, then per model and side the
# median ms/step of DDP + AdamW and of DDP + AdamW sharded, their ratio,
# and the optimizer state per rank (the largest rank's) with its ratio.
set -euo pipefail
ROUNDS=${1:-3}
MODELS=${2:-mlp gpt}
cd "$(dirname "$0")/.."
. bench/machine.sh
bench_twins
echo "$TWINS; 2 ranks of 1 thread, median of $ROUNDS alternating rounds"
keys=("AdamW ms/step" "ZeRO AdamW ms/step" "AdamW state per rank" "ZeRO AdamW state per rank" "parameters differ by")
for _ in $(seq "$ROUNDS"); do
  for m in $MODELS; do
    build/ddplua --nproc 2 --no-prefix bench/zero_optimizer.lua "$m" >"$tmp/out" 2>/dev/null
    OMP_NUM_THREADS=1 "$PY" bench/torchrun.py --nproc_per_node 2 bench/zero_optimizer.py "$m" >"$tmp/pyout" 2>/dev/null || true
    for k in "${keys[@]}"; do
      f=$(echo "$k" | tr " /" "__")
      awk -F'\t' -v k="$k" '$1 == k { print $2 }' "$tmp/out" >>"$tmp/ddplua-$m-$f"
      awk -F'\t' -v k="$k" '$1 == k { print $2 }' "$tmp/pyout" >>"$tmp/torch-$m-$f"
    done
  done
done
med() { [ -s "$1" ] && sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }' || echo "-"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f", a / b }'; }
printf "%-14s %12s %12s %8s %14s %14s %8s\n" "" "AdamW ms" "ZeRO ms" ratio "AdamW MiB" "ZeRO MiB" ratio
for m in $MODELS; do
  for who in ddplua torch; do
    a=$(med "$tmp/$who-$m-AdamW_ms_step"); z=$(med "$tmp/$who-$m-ZeRO_AdamW_ms_step")
    sa=$(med "$tmp/$who-$m-AdamW_state_per_rank"); sz=$(med "$tmp/$who-$m-ZeRO_AdamW_state_per_rank")
    printf "%-14s %12s %12s %8s %14s %14s %8s\n" "$who $m" "$a" "$z" "$(ratio "$z" "$a")" "$sa" "$sz" "$(ratio "$sz" "$sa")"
  done
  echo "ddplua $m: sharded and unsharded parameters differ by at most $(sort -g "$tmp/ddplua-$m-parameters_differ_by" | tail -n1)"
done
