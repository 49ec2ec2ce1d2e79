#!/usr/bin/env bash
# Checks that libddplua.so exports exactly the functions its public headers
# (runtime/include/*.h) declare: nothing internal leaks out, and nothing
# declared is missing.  Prints one line; exits 1 on a difference.
set -uo pipefail
lib=${1:-build/libddplua.so}
declared=$(cat runtime/include/*.h | tr '\n' ' ' | grep -oE 'DL_API[^;(]*\b(dl_[a-z0-9_]+) *\(' |
           sed -E 's/.*\b(dl_[a-z0-9_]+) *\($/\1/' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRW]$/ { print $3 }' | sort -u)
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
n_decl=$(echo "$declared" | grep -c .)
n_exp=$(echo "$exported" | grep -c .)
if [ -z "$extra" ] && [ -z "$missing" ]; then
  echo "exports: $n_exp symbols exported, $n_decl declared in runtime/include, the same"
  exit 0
fi
echo "FAIL exports: $n_exp exported, $n_decl declared"
[ -n "$extra" ] && echo "  exported but in no public header:" $extra
[ -n "$missing" ] && echo "  declared but not exported:" $missing
exit 1
