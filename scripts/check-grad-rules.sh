#!/usr/bin/env bash
# Checks autograd's gradient rules (runtime/autograd/rules.h): no node op
# told apart by a bare digit in autograd (`n->op == 1`, `->kind != 2`,
# `case 2:`), every rule's backward defined in autograd (none in a layer
# above it), every backward listed, every rule recorded by some op.  Prints
# one line; exits 1 on a problem.  $1: the runtime folder (default
# runtime), so an older tree can be checked.
set -uo pipefail
rt=${1:-runtime}
rules=$rt/autograd/rules.h
problems=()

# -- bare digits: an op compared with a number, a switch over numbers
if [ -d "$rt/autograd" ]; then
  while IFS= read -r hit; do problems+=("bare-digit node op: $hit"); done < <(
    grep -nHE -e '->(op|kind)[[:space:]]*([=!<>]=?|[<>])[[:space:]]*[0-9]' \
              -e '[0-9][[:space:]]*([=!<>]=|[<>])[[:space:]]*[a-z_]+(->rule)?->(op|kind)\b' \
              -e '\bcase[[:space:]]+[0-9]+[[:space:]]*:' \
              "$rt"/autograd/*.c "$rt"/autograd/*.h 2>/dev/null)
fi

if [ ! -f "$rules" ]; then
  problems+=("no rule table: $rules is missing")
  kinds=() backwards=()
else
  # AG_RULE(KIND, "Name", backward, "saved") lines (a comment may follow)
  table=$(sed -nE 's#^AG_RULE\(([A-Z0-9_]+),[[:space:]]*"([^"]*)",[[:space:]]*([a-z0-9_]+),[[:space:]]*"([^"]*)"\)[[:space:]]*(/\*.*\*/)?[[:space:]]*$#\1 \2 \3#p' "$rules")
  mapfile -t kinds < <(awk 'NF { print $1 }' <<<"$table")
  mapfile -t backwards < <(awk 'NF { print $3 }' <<<"$table" | sort -u)
  nrows=$(grep -cE '^AG_RULE\(' "$rules")
  [ "$nrows" -eq "${#kinds[@]}" ] ||
    problems+=("rules.h: $nrows AG_RULE lines, only ${#kinds[@]} of the form AG_RULE(KIND, \"Name\", bw_x, \"saved\")")
  while read -r kind name _; do
    [ -n "$kind" ] || continue
    [[ $name =~ ^[A-Z][A-Za-z0-9]*Backward$ ]] || problems+=("rule $kind: name $name is not a grad_fn name (...Backward)")
  done <<<"$table"

  # every backward defined in autograd (as a function, or by grad_elementwise.c's
  # UNARY_RULE): rules.c, which points at them, calls nothing of a layer above
  bwdef='^(DL_HIDDEN )?int (bw_[a-z0-9_]+)\(ag_node|^UNARY_RULE\((bw_[a-z0-9_]+),'
  defined=$(grep -hoE "$bwdef" "$rt"/autograd/*.c 2>/dev/null | sed -E 's/.*(bw_[a-z0-9_]+).*/\1/' | sort -u)
  for b in "${backwards[@]}"; do
    grep -qx "$b" <<<"$defined" || problems+=("backward $b of rules.h is defined nowhere in autograd")
  done
  while IFS= read -r hit; do
    problems+=("a backward above autograd (hand it to the node: bw_from_recorder): $hit")
  done < <(grep -rnHE "$bwdef" "$rt" --include='*.c' | grep -v "^$rt/autograd/")
  # and every backward listed: one outside the table would never run
  listed=$(printf '%s\n' "${backwards[@]}")
  while IFS= read -r b; do
    [ -n "$b" ] || continue
    grep -qx "$b" <<<"$listed" || problems+=("backward $b is in no rule of rules.h")
  done <<<"$defined"

  # every rule recorded: some op names AG_<KIND> (a rule nobody records is dead)
  used=$(grep -rhoE '\bAG_[A-Z0-9_]+\b' "$rt" --include='*.c' | sort -u)
  for k in "${kinds[@]}"; do
    grep -qx "AG_$k" <<<"$used" || problems+=("rule $k: no op records AG_$k")
  done
fi

if [ ${#problems[@]} -eq 0 ]; then
  echo "grad rules: ${#kinds[@]} rules, ${#backwards[@]} backwards, each defined, listed and recorded; no bare-digit node op"
  exit 0
fi
echo "FAIL grad rules: ${#problems[@]} problem(s)"
printf '  %s\n' "${problems[@]}"
exit 1
