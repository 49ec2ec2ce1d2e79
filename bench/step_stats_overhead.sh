#!/usr/bin/env bash
# step_stats_overhead.sh: what the always-on step breakdown costs: the
# library's calls into it for one step, timed directly, and a tiny MLP's
# training step with the breakdown on against stubbed out (off), in
# alternating rounds (bench/step_stats_cost.lua).
#   bash bench/step_stats_overhead.sh [ROUNDS]   (default 7; from the repository root)
# Prints the CPU flags, then the per-step cost and the median and fastest
# tiny step, on and off.
set -euo pipefail
ROUNDS=${1:-7}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/machine.sh
bench_machine
echo "$(build/ddplua -v 2>&1 | head -n1), median of $ROUNDS alternating rounds"
build/ddplua bench/step_stats_cost.lua hooks
for _ in $(seq "$ROUNDS"); do
  for mode in on off; do build/ddplua bench/step_stats_cost.lua tiny "$mode" | cut -f2 >>"$tmp/$mode"; done
done
med() { sort -g "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
low() { sort -g "$1" | head -n1; }
printf "%-22s %10s %10s %8s %10s %10s\n" row "on" "off" "on/off" "on (min)" "off (min)"
printf "%-22s %10s %10s %8s %10s %10s\n" "tiny MLP us/step" "$(med "$tmp/on")" "$(med "$tmp/off")" \
  "$(awk -v a="$(med "$tmp/on")" -v b="$(med "$tmp/off")" 'BEGIN { printf "%.3f", a / b }')" \
  "$(low "$tmp/on")" "$(low "$tmp/off")"
