#!/usr/bin/env bash
# make bench: every benchmark beside its PyTorch twin, one process at a time
# (never two at once), at 1 and 2 threads; the collectives, DDP training
# and startup as 2-rank jobs of one thread a rank (ddplua --nproc 2 against
# torchrun with gloo).  The twins alternate for ROUNDS rounds and each
# number is the median over rounds, so a noisy neighbour on a shared
# machine shifts both sides alike.  Prints a table with the ratio: ddplua /
# PyTorch for rates, PyTorch / ddplua for times (us, ms, s): above 1,
# ddplua is faster.  Units ending in "(info)" are shown, not compared.
#   BENCHES="allreduce startup" make bench   runs only those
#   BENCH_PYTHON=venv/bin/python make bench  PyTorch from that python
#   (train_gpt: bench/train_gpt.* in one process; train_gpt_fused: ddplua
#   with F.scaled_dot_product_attention, the default of
#   examples/gpt_model.lua, against the same twin with GPT_FUSED=1 -- torch
#   2.x's fused attention; torch 1.13 has none, so its side is the formula
#   as in train_gpt; train_gpt_ddp:
#   the same script as a 2-rank job, 1 thread a rank)
set -uo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
ROUNDS=${ROUNDS:-3}
# The PyTorch a user would pick today: the current torch from PyPI, in the
# cached virtual environment scripts/py-venv.sh makes on demand (never in
# the system's Python); BENCH_PYTHON names another python.  Where PyPI
# cannot be reached, Debian's python3-torch (1.13, older than anyone would
# start with now) is the fallback, said so in the header.
PY_NOTE="PyPI, $HOME/.cache/ddplua/venv"
if [ -n "${BENCH_PYTHON:-}" ]; then
  PY=$BENCH_PYTHON PY_NOTE="BENCH_PYTHON"
  if ! $PY -c 'import torch' 2>/dev/null; then echo "bench: $PY has no torch"; exit 1; fi
elif ! PY=$(bash scripts/py-venv.sh 2>"$out/venv.err"); then
  echo "bench: no PyTorch from PyPI ($(tail -n1 "$out/venv.err")); Debian's python3-torch instead, as a fallback"
  PY=/usr/bin/python3 PY_NOTE="Debian's python3-torch: a fallback, PyPI unreachable"
  if ! $PY -c 'import torch' 2>/dev/null; then
    echo "bench: Debian's python3-torch is missing; installing it"
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get install -y -qq python3-torch >/dev/null
  fi
fi
TORCH_V=$($PY -c 'import torch; print(torch.__version__)' 2>/dev/null)
DDPLUA_V=$(build/ddplua -v 2>&1 | head -n1)
# Both sides get the OpenBLAS kernels ddplua picks (OPENBLAS_CORETYPE: where
# Debian's OpenBLAS does not know the CPU it falls back to SSE3 kernels,
# which PyTorch's matrix products, through the same OpenBLAS, would suffer
# too); a value of your own is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(build/ddplua -v 2>/dev/null | sed -n 's/.*kernels: //p')
  [ -n "$core" ] && export OPENBLAS_CORETYPE=$core
fi
. bench/machine.sh
bench_machine "$(free -g | awk '/Mem:/{print $2}') GiB"
echo "torch $TORCH_V ($PY_NOTE), $DDPLUA_V, median of $ROUNDS alternating rounds, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

# median of column 2 per op (column 1) over the files given
median() {
  awk -F'\t' '{ v[$1] = v[$1] " " $2; u[$1] = $3; if (!($1 in o)) { o[$1] = ++n; k[n] = $1 } }
    END { for (i = 1; i <= n; i++) { m = split(substr(v[k[i]], 2), a, " ");
            for (x = 1; x <= m; x++) for (y = x + 1; y <= m; y++) if (a[y] + 0 < a[x] + 0) { t = a[x]; a[x] = a[y]; a[y] = t }
            printf "%s\t%s\t%s\n", k[i], a[int((m + 1) / 2)], u[k[i]] } }' "$@"
}

for bench in ${BENCHES:-tensor_ops train_mlp train_cnn train_gpt train_gpt_fused train_gpt_compile allreduce train_ddp train_cnn_ddp train_gpt_ddp startup data_images}; do
  # the twins' commands ($t: threads per process) and the thread counts
  case $bench in
    allreduce)
      threads=1 what="2 ranks x 1 thread"
      lua="build/ddplua --nproc 2 --no-prefix bench/allreduce.lua"
      py="$PY bench/torchrun.py --nproc_per_node 2 bench/allreduce.py" ;;
    train_cnn_ddp)
      threads=1 what="2 ranks x 1 thread"
      lua="build/ddplua --nproc 2 --no-prefix bench/train_cnn.lua 1"
      py="$PY bench/torchrun.py --nproc_per_node 2 bench/train_cnn.py 1" ;;
    train_ddp)
      threads=1 what="2 ranks x 1 thread"
      lua="build/ddplua --nproc 2 --no-prefix bench/train_ddp.lua"
      py="$PY bench/torchrun.py --nproc_per_node 2 bench/train_ddp.py" ;;
    train_gpt_ddp)
      threads=1 what="2 ranks x 1 thread"
      lua="build/ddplua --nproc 2 --no-prefix bench/train_gpt.lua 1"
      py="$PY bench/torchrun.py --nproc_per_node 2 bench/train_gpt.py 1" ;;
    train_gpt_fused)
      threads="1 2" what=""
      lua="GPT_FUSED=1 build/ddplua bench/train_gpt.lua \$t" py="GPT_FUSED=1 $PY bench/train_gpt.py \$t" ;;
    train_gpt_compile)
      # ddplua's GPT as it runs by default (fused attention) against
      # torch.compile of the same fused twin (torch >= 2.0; 1.13's side fails)
      threads="1 2" what=""
      lua="GPT_FUSED=1 build/ddplua bench/train_gpt.lua \$t"
      py="GPT_FUSED=1 GPT_COMPILE=1 $PY bench/train_gpt.py \$t" ;;
    data_images)
      # the JPEGs both sides decode, written once by PIL
      $PY bench/data_images.py --make || echo "bench: data_images.py --make failed"
      threads=1 what="1 thread, 1 and 2 loader workers"
      lua="build/ddplua bench/data_images.lua 1" py="$PY bench/data_images.py 1" ;;
    startup)
      threads=1 what="2 ranks x 1 thread"
      lua="bash bench/startup.sh ddplua" py="bash bench/startup.sh torchrun" ;;
    *)
      threads="1 2" what=""
      lua="build/ddplua bench/$bench.lua \$t" py="$PY bench/$bench.py \$t" ;;
  esac
  for t in $threads; do
    export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
    for r in $(seq "$ROUNDS"); do
      for side in lua py; do
        f="$out/$bench.$side.$t.$r"
        if [ "$side" = lua ]; then cmd=$lua; else cmd=$py; fi
        if ! eval "$cmd" >"$f" 2>"$f.err"; then
          echo "bench: $bench ($side, round $r) failed:"; cat "$f.err"
        fi
      done
    done
    for side in lua py; do
      median $(seq -f "$out/$bench.$side.$t.%g" "$ROUNDS") >"$out/$bench.$side.$t"
    done
    echo
    echo "== $bench, ${what:-$t thread(s)}: $DDPLUA_V against torch $TORCH_V"
    printf '%-24s %12s %20s %8s  %s\n' op ddplua "torch $TORCH_V" ratio unit
    paste "$out/$bench.lua.$t" "$out/$bench.py.$t" |
      awk -F'\t' 'function f(v) { return sprintf(v > 0 && v < 0.1 ? "%.3g" : "%.2f", v) }
        $3 ~ /\(info\)$/ { printf "%-24s %12s %20s %8s  %s\n", $1, f($2), f($5), "-", $3; next }
        { r = $3 ~ /^(us|ms|s)$/ ? ($2 > 0 ? $5 / $2 : 0) : ($5 > 0 ? $2 / $5 : 0)
          printf "%-24s %12s %20s %7.2fx  %s\n", $1, f($2), f($5), r, $3 }'
  done
done
