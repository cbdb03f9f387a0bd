#!/usr/bin/env bash
# Every scenario and grid the repository ships validates (`moerl sweep --dry-run`: its keys,
# values, profiles, variants and seeds), so a grid named in the docs cannot rot unseen between
# the runs that use it. A grid whose base moved, a key renamed in the code, a profile key that no
# longer parses: each fails here, named. The driver scripts beside them must parse (bash -n).
#   tests/scenarios_validate.sh path/to/moerl
set -u
moerl=${1:?usage: $0 path/to/moerl}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0; bad=0
while IFS= read -r f; do
  n=$((n + 1))
  if ! out=$("$moerl" sweep "$f" --dry-run --out "$tmp/$n" 2>&1); then
    bad=$((bad + 1))
    echo "FAIL ${f#$root/}: $(printf '%s\n' "$out" | tail -n 2)"
  fi
done < <(find "$root/scenarios" -name '*.ini' | sort)
[ "$n" -gt 0 ] || { echo "no scenarios found under $root/scenarios"; exit 1; }
echo "$((n - bad)) of $n scenarios and grids validate"
# the driver scripts beside them (learn-league.sh, learn-more.sh, …) parse
s=0; sbad=0
while IFS= read -r f; do
  s=$((s + 1))
  if ! out=$(bash -n "$f" 2>&1); then
    sbad=$((sbad + 1))
    echo "FAIL ${f#$root/}: $out"
  fi
done < <(find "$root/scenarios" -name '*.sh' | sort)
echo "$((s - sbad)) of $s driver scripts parse"
bad=$((bad + sbad))
[ "$bad" -eq 0 ]
