#!/usr/bin/env bash
# check-layers.sh -- the runtime's layers, checked instead of claimed.
#
#   check-layers.sh [ROOT [OBJ]]     (defaults: . and ROOT/build/obj)
#
# The order is the one line of ROOT/docs/architecture.md that starts
# "Layers, bottom up:" (the Makefile reads the same line), e.g.
#   Layers, bottom up: core ops nn autograd io [cpu cuda] dist
# each a folder of ROOT/runtime; a bracketed group is one level of siblings,
# the device backends.  runtime/include (the public headers) sits below all.
# It fails, one line per finding, when:
#   include  a file includes a header of a higher layer or of a sibling;
#   mutual   two folders include each other;
#   call     an object of OBJ/<layer>/ uses a symbol defined in a higher
#            layer's or a sibling's object (from nm: calls and data alike);
#   record   device glue (a bracketed folder) includes a header of, or uses
#            a symbol of, autograd/, the recording layer: the glue runs
#            under the device table, below every op, so it calls forwards
#            (fw_*) and kernels only;
#   struct   a file names a struct defined in a higher layer (a forward
#            declaration of an upper layer's type).
# The last line says how many findings there were; exit 1 if any.
set -uo pipefail
root=${1:-.}
obj=${2:-$root/build/obj}
doc=$root/docs/architecture.md
line=$(sed -n 's/^Layers, bottom up: *//p' "$doc" 2>/dev/null | head -n 1)
if [ -z "$line" ]; then
  echo "FAIL layers: no 'Layers, bottom up:' line in $doc"
  exit 1
fi
if ! ls "$obj"/*/*.o >/dev/null 2>&1; then
  echo "FAIL layers: no objects under $obj (build first: make)"
  exit 1
fi

# rank of each layer, and which are device glue (a bracketed group)
declare -A rank glue
r=0 group=0
for tok in $line; do
  case $tok in
    \[*) group=1; tok=${tok#[} ;;
  esac
  closes=0
  case $tok in *\]) closes=1; tok=${tok%]} ;; esac
  [ -n "$tok" ] && rank[$tok]=$r
  [ "$group" = 1 ] && glue[$tok]=1
  if [ "$group" = 0 ] || [ "$closes" = 1 ]; then r=$((r + 1)); group=0; fi
done
rank[include]=-1
ranks=$(for l in "${!rank[@]}"; do echo "$l ${rank[$l]}"; done)

findings=$(mktemp)
trap 'rm -f "$findings"' EXIT

# -- include: every #include "folder/..." of every source and header ------------
( cd "$root/runtime" &&
  grep -HnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/' \
    $(find . -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' |
      sed 's|^\./||' | sort) ) |
  awk -v ranks="$ranks" -v glue="${!glue[*]}" '
    BEGIN { n = split(ranks, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], f, " "); rk[f[1]] = f[2] }
            n = split(glue, g, " "); for (i = 1; i <= n; i++) isglue[g[i]] = 1 }
    { split($0, p, ":"); file = p[1]; ln = p[2]
      match($0, /"[a-z_]+\//); to = substr($0, RSTART + 1, RLENGTH - 2)
      split(file, q, "/"); from = q[1]
      if (!(from in rk) || !(to in rk) || from == to) next
      edge[from " " to] = 1
      if (rk[to] > rk[from] || (rk[to] == rk[from]))
        printf "include  runtime/%s:%s (%s) includes a header of %s, %s\n", file, ln, from, to,
               rk[to] == rk[from] ? "a sibling" : "a higher layer"
      else if (isglue[from] && to == "autograd")
        printf "record   runtime/%s:%s (device glue) includes a header of autograd/, the recording layer\n", file, ln }
    END { for (e in edge) { split(e, x, " "); if ((x[2] " " x[1]) in edge && x[1] < x[2])
            printf "mutual   runtime/%s/ and runtime/%s/ include each other\n", x[1], x[2] } }
  ' >>"$findings"

# -- call / record: symbols of each layer's objects, from nm --------------------
defs=$(for o in "$obj"/*/*.o; do
         l=$(basename "$(dirname "$o")")
         nm -g --defined-only "$o" 2>/dev/null | awk -v l="$l" -v o="${o#"$obj"/}" 'NF >= 3 { print $3, l, o }'
       done)
for o in "$obj"/*/*.o; do
  l=$(basename "$(dirname "$o")")
  nm -u "$o" 2>/dev/null | awk -v l="$l" -v o="${o#"$obj"/}" '{ print $NF, l, o }'
done | awk -v ranks="$ranks" -v glue="${!glue[*]}" -v defs="$defs" '
  BEGIN { n = split(ranks, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], f, " "); rk[f[1]] = f[2] }
          n = split(glue, g, " "); for (i = 1; i <= n; i++) isglue[g[i]] = 1
          n = split(defs, d, "\n"); for (i = 1; i <= n; i++) { split(d[i], f, " "); dl[f[1]] = f[2]; dob[f[1]] = f[3] } }
  { sym = $1; from = $2; o = $3
    if (!(sym in dl)) next
    to = dl[sym]
    if (!(from in rk) || !(to in rk) || from == to) next
    if (isglue[from] && to == "autograd")
      printf "record   %s (device glue) calls %s, a recording op of autograd/ (%s)\n", o, sym, dob[sym]
    else if (rk[to] >= rk[from])
      printf "call     %s (%s) calls %s of %s (%s), %s\n", o, from, sym, to, dob[sym],
             rk[to] == rk[from] ? "a sibling" : "a higher layer" }
' | sort -u >>"$findings"

# -- struct: a struct named below the layer that defines it ---------------------
( cd "$root/runtime" &&
  files=$(find . -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' | sed 's|^\./||' | sort)
  grep -HnoE '(typedef[[:space:]]+)?struct[[:space:]]+[A-Za-z_][A-Za-z0-9_]*([[:space:]]*\{)?' $files ) |
  awk -v ranks="$ranks" '
    BEGIN { n = split(ranks, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], f, " "); rk[f[1]] = f[2] } }
    { split($0, p, ":"); file = p[1]; ln = p[2]; txt = substr($0, length(file) + length(ln) + 3)
      split(file, q, "/"); layer = q[1]
      name = txt; sub(/^(typedef[[:space:]]+)?struct[[:space:]]+/, "", name); sub(/[[:space:]]*\{$/, "", name)
      if (txt ~ /\{$/) { if (!(name in def) && (layer in rk)) def[name] = layer; next }
      use[++nu] = name "\t" layer "\t" file ":" ln }
    END { for (i = 1; i <= nu; i++) { split(use[i], u, "\t"); d = def[u[1]]
            if (d == "" || !(u[2] in rk) || u[2] == "include" || u[2] == d) continue
            split(u[3], w, ":"); key = w[1] " " u[1]
            if (rk[d] > rk[u[2]] && !(key in seen)) {
              seen[key] = 1
              printf "struct   runtime/%s (%s) names struct %s of %s, a higher layer\n", u[3], u[2], u[1], d } } }
  ' | sort -u >>"$findings"

n=$(grep -c . "$findings")
cat "$findings"
if [ "$n" -eq 0 ]; then
  echo "layers: $line -- 0 findings (includes, symbols of $(ls "$obj"/*/*.o | wc -l) objects, structs)"
  exit 0
fi
echo "FAIL layers: $n findings ($line)"
exit 1
