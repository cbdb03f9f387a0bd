#!/bin/sh
# resume_other_ranks.sh MOERL MPIEXEC SCENARIO DIR — a run made on one rank, resumed on two (and
# one made on two, resumed on one): refused naming the rank layout, before any step, on every
# rank, without MPI_Abort (expect_clean_error.sh), and the files unchanged.
moerl=$1 mpiexec=$2 scenario=$3 dir=$4
here=$(dirname "$0")
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$moerl" run "$scenario" --out "$dir/one/r.h5" --cache "$dir/cache" --max-steps 2 >/dev/null || exit 1
"$mpiexec" --oversubscribe -np 2 "$moerl" run "$scenario" --out "$dir/two/r.h5" --cache "$dir/cache" --max-steps 2 >/dev/null || exit 1
sum1=$(cat "$dir"/one/* | cksum) sum2=$(cat "$dir"/two/* | cksum)
sh "$here/expect_clean_error.sh" "ranks = 1 in $dir/one/r.h5, 2 now" \
  "$mpiexec" --oversubscribe -np 2 "$moerl" run "$scenario" --out "$dir/one/r.h5" --cache "$dir/cache" --resume || exit 1
sh "$here/expect_clean_error.sh" "ranks = 2 in $dir/two/r.h5, 1 now" \
  "$moerl" run "$scenario" --out "$dir/two/r.h5" --cache "$dir/cache" --resume || exit 1
if out=$("$mpiexec" --oversubscribe -np 2 "$moerl" run "$scenario" --out "$dir/one/r.h5" --cache "$dir/cache" --resume 2>&1) ||
   printf '%s\n' "$out" | grep -q "^step"; then
  printf 'a step ran before the refusal\n%s\n' "$out"
  exit 1
fi
[ "$(cat "$dir"/one/* | cksum)" = "$sum1" ] && [ "$(cat "$dir"/two/* | cksum)" = "$sum2" ] || { echo "the files changed"; exit 1; }
echo "ok: refused on both layouts, files unchanged"
