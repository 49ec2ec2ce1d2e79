#!/usr/bin/env bash
# check.sh -- the one script run on the GPU machine: what it sees, and our device tests.
#
#   bash tests/gpu/check.sh --stage   here, before a device run: builds
#                                     build/test_device and copies into
#                                     build/gpu-libs the shared libraries
#                                     build/ needs beyond a bare system
#   bash tests/gpu/check.sh           runs the checks; prints a table last
#
# The GPU machine has the CUDA driver and toolkit but none of our Debian
# packages and no network, so everything here comes from the working tree
# (build/, built here).  Without a GPU (CI, this machine) the GPU rows say
# SKIP and why.  Exit status: 0 unless some row FAILed.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
BUILD=${BUILD:-build}
LIBS=$BUILD/gpu-libs
# test_device's rpath names this machine's checkout; the GPU machine's copy
# may live elsewhere, so the search path is set from where we are.
export LD_LIBRARY_PATH="$ROOT/$BUILD:$ROOT/$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# -- Staging (run here) -------------------------------------------------------

# Libraries every Linux with a CUDA driver has; all others get copied.
base_lib() {
  case "$1" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*| \
    librt.so*|libgcc_s.so*|libstdc++.so*|libcuda.so*) return 0 ;;
  esac
  return 1
}

stage() {
  local cc=${CC:-cc} f name path
  [ -f "$BUILD/libddplua.so" ] || { echo "stage: $BUILD/libddplua.so missing: run make first"; return 1; }
  "$cc" -std=c11 -Wall -Wextra -Werror -Iruntime/include tests/c/test_device.c \
    -L"$BUILD" -lddplua -Wl,-rpath,"$ROOT/$BUILD" -o "$BUILD/test_device" || return 1
  mkdir -p "$LIBS"
  for f in "$BUILD"/test_device "$BUILD"/*.so "$BUILD"/ddplua; do
    [ -f "$f" ] || continue
    # ldd lines: "name => /path (addr)"; copy by the soname the loader asks for.
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
    while read -r name path; do
      base_lib "$name" && continue
      case "$path" in "$ROOT/$BUILD"/*) continue ;; esac
      [ -f "$LIBS/$name" ] || { cp -L "$path" "$LIBS/$name" && echo "stage: $name <- $path"; }
    done
  done
  echo "stage: $(du -sh "$LIBS" | cut -f1) in $LIBS"
}

if [ "${1:-}" = "--stage" ]; then
  stage
  exit $?
fi

# -- Checks ---------------------------------------------------------------------

ROWS=()
NFAIL=0
row() {  # row NAME RESULT DETAIL
  ROWS+=("$(printf '%-14s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && NFAIL=$((NFAIL + 1))
  return 0
}
section() { printf '\n== %s\n' "$1"; }

run_limited() {  # run_limited SECONDS CMD...: a hung GPU must not hang the script
  if command -v timeout >/dev/null; then timeout "$@"; else shift; "$@"; fi
}

section "host"
echo "$(uname -srm), $(nproc 2>/dev/null || echo '?') cpus, checkout $ROOT"

section "nvidia-smi -L"
HAVE_GPU=0
if command -v nvidia-smi >/dev/null; then
  if out=$(run_limited 60 nvidia-smi -L 2>&1); then
    echo "$out"
    n=$(printf '%s\n' "$out" | grep -c '^GPU ')
    if [ "$n" -gt 0 ]; then
      HAVE_GPU=1
      row nvidia-smi PASS "$n GPU(s), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    else
      row nvidia-smi SKIP "no GPU listed"
    fi
  else
    echo "$out"
    row nvidia-smi FAIL "nvidia-smi -L failed"
  fi
else
  echo "SKIP: nvidia-smi not found (no NVIDIA driver on this machine)"
  row nvidia-smi SKIP "nvidia-smi not found"
fi

section "libraries"
missing=""
for f in "$BUILD"/libddplua.so "$BUILD"/libddplua_cuda.so "$BUILD"/test_device; do
  if [ ! -f "$f" ]; then
    echo "$f: missing"
    missing="$missing $(basename "$f")(not built)"
    continue
  fi
  echo "$f:"
  ldd "$f" 2>&1 | sed 's/^/  /'
  for m in $(ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }'); do
    case " $missing " in *" $m "*) ;; *) missing="$missing $m" ;; esac
  done
done
if [ -n "$missing" ]; then
  row libraries FAIL "missing:$missing (run tests/gpu/check.sh --stage here first)"
else
  row libraries PASS "all resolve"
fi

section "test_device"
if [ ! -x "$BUILD/test_device" ]; then
  echo "SKIP: $BUILD/test_device not built (run tests/gpu/check.sh --stage)"
  row test_device FAIL "not built"
else
  out=$(run_limited 300 "$BUILD/test_device" 2>&1)
  rc=$?
  echo "$out"
  last=$(printf '%s\n' "$out" | grep '^test_device:' | tail -1)
  skip=$(printf '%s\n' "$out" | grep '^SKIP:' | head -1)
  if [ "$rc" -ne 0 ] || [ -z "$last" ]; then
    row test_device FAIL "exit $rc${last:+, ${last#test_device: }}"
  elif [ -n "$skip" ]; then
    row test_device SKIP "${last#test_device: }; ${skip#SKIP: }"
  else
    row test_device PASS "${last#test_device: }"
  fi
  # A GPU the driver lists but the test did not use is a failure, not a skip.
  if [ "$HAVE_GPU" = 1 ] && [ -n "$skip" ]; then
    row gpu-used FAIL "nvidia-smi lists a GPU but ddplua found none"
  fi
fi

section "results"
printf '%s\n' "${ROWS[@]}"
if [ "$NFAIL" -gt 0 ]; then echo "gpu check: $NFAIL FAILED"; else echo "gpu check: ok"; fi
[ "$NFAIL" -eq 0 ]
