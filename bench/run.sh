#!/usr/bin/env bash
# make bench: every benchmark beside its PyTorch twin, one after the other
# (never two at once), at 1 and 2 threads; prints a table with the ratio.
set -uo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
PY=/usr/bin/python3   # Debian's python3, which has python3-torch
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "bench: Debian's python3-torch is missing; installing it"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -qq python3-torch >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "torch $($PY -c 'import torch; print(torch.__version__)'), $(build/ddplua -v 2>&1 | head -n1)"
for bench in tensor_ops; do
  for t in 1 2; do
    export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
    build/ddplua bench/$bench.lua $t >"$out/$bench.lua.$t"
    $PY bench/$bench.py $t >"$out/$bench.py.$t"
    echo
    echo "== $bench, $t thread(s)"
    printf '%-24s %12s %12s %8s  %s\n' op ddplua pytorch ratio unit
    paste "$out/$bench.lua.$t" "$out/$bench.py.$t" |
      awk -F'\t' '{ printf "%-24s %12.2f %12.2f %7.2fx  %s\n", $1, $2, $5, ($5 > 0 ? $2 / $5 : 0), $3 }'
  done
done
