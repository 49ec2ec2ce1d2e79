#!/usr/bin/env bash
# optimizer_overhead.sh: the optimizer step alone, a group at once against
# a call per parameter (bench/optimizer_step.lua and .py), ddplua and
# PyTorch in alternating rounds, at one thread.
#   bash bench/optimizer_overhead.sh [ROUNDS]   (default 3)
#   BENCH_PYTHON=~/.cache/ddplua/venv/bin/python bash bench/optimizer_overhead.sh
# Prints the CPU flags and both versions, then per model, optimizer and
# variant the median over the rounds of each round's median us/step.
set -euo pipefail
ROUNDS=${1:-3}
cd "$(dirname "$0")/.."
. bench/machine.sh
bench_twins
echo "$TWINS; 1 thread, median of $ROUNDS alternating rounds"
for _ in $(seq "$ROUNDS"); do
  build/ddplua bench/optimizer_step.lua | sed 's/^/ddplua /' >>"$tmp/all"
  OMP_NUM_THREADS=1 "$PY" bench/optimizer_step.py 2>/dev/null | sed 's/^/torch /' >>"$tmp/all" || true
done
# "side model optimizer variant<TAB>us<TAB>unit": the median per key
awk -F'\t' '{ k = $1; v[k] = v[k] " " $2; u[k] = $3 } END { for (k in v) print k "\t" v[k] "\t" u[k] }' "$tmp/all" |
  while IFS=$'\t' read -r k vals unit; do
    med=$(printf '%s\n' $vals | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    printf '%-36s %10s %s\n' "$k" "$med" "$unit"
  done | sort
