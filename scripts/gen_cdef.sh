#!/usr/bin/env bash
# Turns the public headers into a Lua module holding the text for ffi.cdef,
# so the bindings never carry a hand-copied prototype.
# Usage: gen_cdef.sh OUT HEADER...
set -euo pipefail
out=$1
shift
names=$(for h in "$@"; do basename "$h"; done | tr '\n' ' ')
body=$(for h in "$@"; do echo "#include \"$(basename "$h")\""; done |
       ${CC:-cc} -E -P -DDL_CDEF -I"$(dirname "$1")" -x c - | grep -v '^\s*$')
{
  echo "-- generated from ${names% } by scripts/gen_cdef.sh; do not edit"
  echo "return [==["
  echo "$body"
  echo "]==]"
} > "$out.tmp"
mv "$out.tmp" "$out"
