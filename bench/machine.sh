# bench/machine.sh: the lines every benchmark prints first -- the machine
# and the CPU flags its numbers depend on (AVX2-only or AVX-512).
#   . bench/machine.sh; bench_machine [extra]
bench_machine() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')${1:+, $1}"
  echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(fma|avx2|avx512f|avx512bw|avx512_vnni|avx512_bf16|avx512_fp16|amx_tile)$' | tr '\n' ' ')"
}
