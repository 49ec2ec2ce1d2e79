#!/usr/bin/env bash
# Turns the public header into a Lua module holding the text for ffi.cdef,
# so the bindings never carry a hand-copied prototype.
set -euo pipefail
header=$1 out=$2
body=$(${CC:-cc} -E -P -DDL_CDEF -x c "$header" | grep -v '^\s*$')
{
  echo "-- generated from $(basename "$header") by scripts/gen_cdef.sh; do not edit"
  echo "return [==["
  echo "$body"
  echo "]==]"
} > "$out.tmp"
mv "$out.tmp" "$out"
