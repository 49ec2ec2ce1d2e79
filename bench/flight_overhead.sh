#!/usr/bin/env bash
# flight_overhead.sh: what the always-on flight recorder costs, on
# (default) against off (DDP_FLIGHT_ENTRIES=0), in alternating rounds:
# a small all_reduce (4 KiB and 64 KiB, bench/allreduce.lua: where a
# collective is cheapest, the recorder's share is largest) and a DDP
# training step (bench/train_ddp.lua ddp: the MLP, 2 ranks).
#   bash bench/flight_overhead.sh [ROUNDS]      (default 7; from the repository root)
# Prints the median and the fastest run per row, on and off, and on/off;
# the CPU flags first.  On 2 cores a small all_reduce's time moves from run
# to run (3.8 to 11 us at 4 KiB: where the scheduler puts the two
# spinning ranks), far more than the recorder costs: the per-call cost of
# its Lua side is timed directly (bench/flight_site.lua).
set -euo pipefail
ROUNDS=${1:-7}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. bench/machine.sh
bench_machine
echo "$(build/ddplua -v 2>&1 | head -n1), median of $ROUNDS alternating rounds"
for r in $(seq "$ROUNDS"); do
  for mode in on off; do
    entries=""; [ "$mode" = off ] && entries=0
    DDP_FLIGHT_ENTRIES=$entries build/ddplua --nproc 2 --no-prefix bench/allreduce.lua 4KiB 64KiB 2>/dev/null \
      | grep ' time' >>"$tmp/$mode"
    DDP_FLIGHT_ENTRIES=$entries build/ddplua --nproc 2 --no-prefix bench/train_ddp.lua ddp 2>/dev/null \
      | grep 'ms/step' >>"$tmp/$mode"
  done
done
med() {  # median of column 2 of the rows named $2 in file $1
  grep -F "$2" "$1" | cut -f2 | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}
build/ddplua bench/flight_site.lua
low() { grep -F "$2" "$1" | cut -f2 | sort -g | head -n1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
printf "%-24s %10s %10s %8s %10s %10s %8s\n" row "on" "off" "on/off" "on (min)" "off (min)" "on/off"
for row in "all_reduce 4KiB time" "all_reduce 64KiB time" "DDP ms/step"; do
  on=$(med "$tmp/on" "$row"); off=$(med "$tmp/off" "$row")
  lon=$(low "$tmp/on" "$row"); loff=$(low "$tmp/off" "$row")
  printf "%-24s %10s %10s %8s %10s %10s %8s\n" "$row" "$on" "$off" "$(ratio "$on" "$off")" "$lon" "$loff" "$(ratio "$lon" "$loff")"
done
