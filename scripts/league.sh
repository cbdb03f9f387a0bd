#!/usr/bin/env bash
# league.sh — your variant in the league: runs one new variant on the kept league's seeds, checks
# that today's binary reproduces the kept league, and joins the new runs to it (docs/tutorials/
# 08-your-algorithm.md walks through it).
#
#   scripts/league.sh --variant NAME --set section.key=value [--set ...] [--seeds 700-719]
#                     [--kept docs/league/league-runs.csv] [--grid scenarios/paper/learn-league.ini]
#                     [--work results/league-NAME] [--out DIR] [--cache results/cache] [--np N] [--rerun]
#
# 1. The plan (analysis/league_add.py): the grid's base, scenario keys and reference variant
#    (control) plus the variant NAME, its keys the --set ones, on the kept league's seeds (--seeds
#    picks some of them; a seed the kept league lacks is refused), written to WORK/grid.ini; moerl
#    validates it before anything runs (an unknown algorithm or key is refused with moerl's list).
#    It says how many runs it will start. A NAME the kept league has is refused unless --rerun.
# 2. The reproducibility guard: the reference on the league's first seed is re-run by today's
#    binary (WORK/guard) and compared with its kept row, every number, as `analysis.league --runs`
#    compares a re-run with a kept row (rtol 1e-5). A difference is refused, naming the numbers
#    (kept, now), before any run of NAME starts: a changed engine is never compared with stale
#    baselines. Its time gives the estimate for the runs to come. It is redone whenever the binary
#    changes (its sha256 is kept beside it).
# 3. The runs: NAME on the seeds, `moerl sweep ... --resume` into WORK/runs, two at a time under
#    mpirun where it exists and there are 2 cores (--np: how many), a progress line per finished run.
#    A stop (SIGTERM, SIGINT, SIGUSR1, SIGHUP) reaches the runs as SIGUSR1: they write their
#    checkpoints and the script exits 75; the same command resumes (scenarios/paper/mpi-sweep.sh).
# 4. The join: `analysis.league WORK/runs --runs KEPT --pair NAME:*` into --out (default WORK):
#    league.md (printed), league.csv, league-runs.csv (kept runs and new), pairs.csv, league.png;
#    the pairs of the kept league's pairs.csv (beside KEPT) are kept in them.
#    docs/league is rewritten only when --out names it.
# Exit status: 0 done; 1 a refusal or a failed run (the line says which); 2 a bad command line;
# 75 stopped (resume with the same command).
# MOERL (default build/sim/moerl) and PYTHON (default /usr/bin/python3) pick the programs.
# The body is one compound command, read whole before it runs.
{
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
moerl=${MOERL:-$root/build/sim/moerl}
py=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
allowed="--variant NAME, --set section.key=value, --seeds LIST, --kept CSV, --grid INI, --work DIR, --out DIR, --cache DIR, --np N, --rerun, --help"
die() { echo "league.sh: error: $1" >&2; exit "${2:-1}"; }
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }

variant="" seeds="" work="" out="" np="" rerun=0
kept=$root/docs/league/league-runs.csv
grid=$root/scenarios/paper/learn-league.ini
cache=results/cache
sets=() shown_sets=""
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
  opt=$1
  case "$opt" in
    -h|--help) usage; exit 0 ;;
    --rerun) rerun=1; shift; continue ;;
    --variant|--set|--seeds|--kept|--grid|--work|--out|--cache|--np)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$opt: needs a value (allowed options: $allowed)" 2 ;;
    *) die "unknown option '$opt' (allowed options: $allowed)" 2 ;;
  esac
  case "$opt" in
    --variant) variant=$2 ;;
    --set) sets+=(--set "$2"); shown_sets+=" $2" ;;
    --seeds) seeds=$2 ;;
    --kept) kept=$2 ;;
    --grid) grid=$2 ;;
    --work) work=$2 ;;
    --out) out=$2 ;;
    --cache) cache=$2 ;;
    --np) np=$2 ;;
  esac
  shift 2
done
[ -n "$variant" ] || die "--variant: required (the new variant's name, e.g. --variant clipped-reinforce)" 2
[ -x "$moerl" ] || die "no moerl binary at $moerl (build it: cmake --build build; or set MOERL)"
cores=$(nproc 2>/dev/null || echo 1)
if [ -z "$np" ]; then
  np=1
  command -v mpirun >/dev/null 2>&1 && [ "$cores" -ge 2 ] && np=2
fi
case "$np" in
  ''|*[!0-9]*|0) die "--np $np: not a number of runs at a time (allowed: 1, 2, ...)" 2 ;;
esac
[ "$np" -gt 1 ] && ! command -v mpirun >/dev/null 2>&1 && die "--np $np: no mpirun on PATH (allowed here: --np 1)" 2
work=${work:-results/league-$variant}
out=${out:-$work}

# 1. The plan.
planargs=(--grid "$grid" --kept "$kept" --variant "$variant" --out "$work" --parallel "$np" "${sets[@]}")
[ -n "$seeds" ] && planargs+=(--seeds "$seeds")
[ $rerun = 1 ] && planargs+=(--rerun)
export MOERL_PROG=league.sh MOERL_ERROR_PREFIX="league.sh: error: "  # analysis.league_add's refusals
"$py" -m analysis.league_add plan "${planargs[@]}" || exit $?
# shellcheck source=/dev/null
. "$work/plan.sh"   # grid, seeds, guard_seed, reference, n_todo, n_seeds, score
if ! msg=$("$moerl" sweep "$grid" --seeds "$seeds" --dry-run --out "$work/runs" 2>&1); then
  echo "$msg" | grep -v '^ ' >&2
  die "the variant $variant does not validate (moerl's message above; its keys: ${shown_sets# })"
fi

. "$root/scenarios/paper/mpi-sweep.sh"

# 2. The guard: the reference on the first league seed, by today's binary, against its kept row.
sum=$(sha256sum "$moerl" | cut -d' ' -f1)
if [ -f "$work/guard/moerl.sha256" ] && [ "$(cat "$work/guard/moerl.sha256")" = "$sum" ] &&
   grep -q ",complete,\|,collapsed," "$work/guard/index.csv" 2>/dev/null; then
  echo "league.sh: guard: $reference/$guard_seed was re-run by this binary (sha256 ${sum:0:12}) in $work/guard"
else
  rm -rf "$work/guard"
  echo "league.sh: guard: re-running $reference/$guard_seed with today's binary (sha256 ${sum:0:12}) ..."
  mkdir -p "$work/guard"
  mpi_sweep_np=1 mpi_sweep_log=$work/guard.log \
    mpi_sweep league.sh "$cmdline" "the guard run" "$grid" "$work/guard" \
    --variants "$reference" --seeds "$guard_seed" --cache "$cache" --quiet
fi
guardargs=(--kept "$kept" --dir "$work/guard" --seed "$guard_seed" --reference "$reference"
           --runs-to-start "$n_todo" --parallel "$np")
"$py" -m analysis.league_add guard "${guardargs[@]}" || exit $?
echo "$sum" > "$work/guard/moerl.sha256"

# 3. The runs: only those not finished in WORK/runs.
if [ "$n_todo" -gt 0 ]; then
  # The sweep's log in WORK/runs.log; its line per finished run ("[3/20] ... eta") shown as it comes.
  : > "$work/runs.log"
  # (tail ends with this script: --pid)
  tail -n +1 -F --pid=$$ "$work/runs.log" 2>/dev/null | grep --line-buffered -E '^\[[0-9]+/[0-9]+\]|error:' &
  follow=$!
  trap 'kill "$follow" 2>/dev/null' EXIT
  # mpi_sweep ends the script itself on a stop (75, "resume with: ...") or a failed run (its status)
  mpi_sweep_np=$np mpi_sweep_log=$work/runs.log \
    mpi_sweep league.sh "$cmdline" "the runs of $variant" "$grid" "$work/runs" \
    --variants "$variant" --seeds "$seeds" --cache "$cache" --ranks-per-run 1 --resume
  sleep 1
  kill "$follow" 2>/dev/null
else
  echo "league.sh: every run of $variant on seeds $seeds is finished in $work/runs"
fi

# 4. The join, the table and the paired differences against every kept variant. The pairs the
#    kept league's own pairs.csv lists (beside --kept) are kept too, so that joining a variant into
#    the kept directory loses none of its paired differences; those naming NAME are redone as NAME:*.
pairs=()
kept_pairs=$(dirname "$kept")/pairs.csv
if [ -f "$kept_pairs" ]; then
  while IFS= read -r p; do pairs+=(--pair "$p"); done < <(awk -F, -v v="$variant" \
    'NR > 1 && $1 !~ /^#/ && NF >= 2 && $1 != v && $2 != v { print $1 ":" $2 }' "$kept_pairs")
fi
"$py" -m analysis.league "$work/runs" --runs "$kept" --out "$out" "${pairs[@]}" --pair "$variant:*" || exit $?
exit 0
}
