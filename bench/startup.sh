#!/usr/bin/env bash
# startup.sh: wall time of the smallest 2-rank job (init, barrier, shutdown)
# launched by `ddplua --nproc 2` and by torchrun, from the command to its exit.
#   bench/startup.sh            RUNS (default 5) alternating launches of each;
#                               prints both medians and the ratio
#   bench/startup.sh ddplua     one timed launch, as a line for bench/run.sh
#   bench/startup.sh torchrun   (same for torchrun)
# torchrun is Debian's (torch 1.13 under /usr/bin/python3) through
# bench/torchrun.py, which fixes its start on Python 3.11; OMP_NUM_THREADS=1
# as torchrun would set it itself.
set -uo pipefail
export LC_ALL=C   # a decimal point in $EPOCHREALTIME
cd "$(dirname "$0")/.."
PY=/usr/bin/python3

# one launch; prints its wall time in ms, or fails with the job's output
launch() {
  local log t0 t1 rc
  log=$(mktemp)
  t0=$EPOCHREALTIME
  case $1 in
    ddplua) build/ddplua --nproc 2 bench/startup_job.lua >"$log" 2>&1 ;;
    torchrun) OMP_NUM_THREADS=1 $PY bench/torchrun.py --nproc_per_node 2 bench/startup_job.py >"$log" 2>&1 ;;
    *) echo "startup.sh: unknown launcher $1 (ddplua or torchrun)" >&2; rm -f "$log"; return 2 ;;
  esac
  rc=$?
  t1=$EPOCHREALTIME
  if [ $rc -ne 0 ]; then
    echo "startup.sh: $1 failed (exit $rc):" >&2; cat "$log" >&2; rm -f "$log"; return 1
  fi
  rm -f "$log"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", (b - a) * 1000 }'
}

if [ $# -gt 0 ]; then
  ms=$(launch "$1") || exit 1
  printf 'startup 2 ranks\t%s\tms\n' "$ms"
  exit 0
fi

RUNS=${RUNS:-5}
lua=() torch=()
for r in $(seq "$RUNS"); do
  ms=$(launch ddplua) || exit 1; lua+=("$ms")
  ms=$(launch torchrun) || exit 1; torch+=("$ms")
done
med() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
l=$(med "${lua[@]}") t=$(med "${torch[@]}")
echo "2-rank job (init, barrier, shutdown), median of $RUNS alternating launches"
echo "ddplua --nproc 2:  $l ms   (runs: ${lua[*]})"
echo "torchrun:          $t ms   (runs: ${torch[*]})"
awk -v l="$l" -v t="$t" 'BEGIN { printf "ddplua takes 1/%.0f of torchrun'"'"'s time (goal: 1/100 or less)\n", t / l }'
