# bench/machine.sh: the lines every benchmark prints first -- the machine
# and the CPU flags its numbers depend on (AVX2-only or AVX-512) -- and the
# setup the twin scripts share.
#   . bench/machine.sh; bench_machine [extra]
#   . bench/machine.sh; bench_twins   (PY and tmp set, the header printed)
bench_machine() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')${1:+, $1}"
  echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(fma|avx2|avx512f|avx512bw|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile)$' | tr '\n' ' ')"
}

# The overhead scripts' common start: PY, the PyTorch twin's python
# (BENCH_PYTHON, else the cached PyPI venv, else Debian's python3), tmp, a
# folder removed at exit, and the machine and versions printed.
bench_twins() {
  PY=${BENCH_PYTHON:-$HOME/.cache/ddplua/venv/bin/python}
  [ -x "$PY" ] || PY=/usr/bin/python3
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  bench_machine
  TWINS="$(build/ddplua -v 2>&1 | head -n1); torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo missing)"
}
