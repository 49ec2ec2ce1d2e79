#!/usr/bin/env bash
# make bench: every benchmark beside its PyTorch twin, one process at a time
# (never two at once), at 1 and 2 threads.  The twins alternate for ROUNDS
# rounds and each number is the median over rounds, so a noisy neighbour on
# a shared machine shifts both sides alike.  Prints a table with the ratio.
set -uo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
ROUNDS=${ROUNDS:-3}
PY=/usr/bin/python3   # Debian's python3, which has python3-torch
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "bench: Debian's python3-torch is missing; installing it"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get install -y -qq python3-torch >/dev/null
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "torch $($PY -c 'import torch; print(torch.__version__)'), $(build/ddplua -v 2>&1 | head -n1), median of $ROUNDS alternating rounds"

# median of column 2 per op (column 1) over the files given
median() {
  awk -F'\t' '{ v[$1] = v[$1] " " $2; u[$1] = $3; if (!($1 in o)) { o[$1] = ++n; k[n] = $1 } }
    END { for (i = 1; i <= n; i++) { m = split(substr(v[k[i]], 2), a, " ");
            for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++) if (a[y] + 0 < a[x] + 0) { t = a[x]; a[x] = a[y]; a[y] = t }
            printf "%s\t%s\t%s\n", k[i], a[int((m + 1) / 2)], u[k[i]] } }' "$@"
}

for bench in ${BENCHES:-tensor_ops train_mlp}; do
  for t in 1 2; do
    export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
    for r in $(seq "$ROUNDS"); do
      build/ddplua "bench/$bench.lua" "$t" >"$out/$bench.lua.$t.$r"
      $PY "bench/$bench.py" "$t" >"$out/$bench.py.$t.$r"
    done
    median "$out/$bench.lua.$t".* >"$out/$bench.lua.$t"
    median "$out/$bench.py.$t".* >"$out/$bench.py.$t"
    echo
    echo "== $bench, $t thread(s)"
    printf '%-24s %12s %12s %8s  %s\n' op ddplua pytorch ratio unit
    paste "$out/$bench.lua.$t" "$out/$bench.py.$t" |
      awk -F'\t' '{ printf "%-24s %12.2f %12.2f %7.2fx  %s\n", $1, $2, $5, ($5 > 0 ? $2 / $5 : 0), $3 }'
  done
done
