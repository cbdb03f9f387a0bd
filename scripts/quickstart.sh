#!/usr/bin/env bash
# Command (1) of the README: installs what is missing, builds, and runs the default job:
# GRPO against R3 (rollout routing replay) on a small MoE whose rollout engine runs FP8 and whose
# train engine runs BF16 (scenarios/quickstart.ini), then the comparison table and an audit of the
# trained GRPO policy's routing under the two engines' profiles.
#
# Usage: scripts/quickstart.sh [--force] [--set section.key=value]... [--out DIR] [--no-build]
#   Run again, it skips what is finished (a complete run is resumed, which leaves it as it is; a
#   stopped one continues) and prints the comparison again.
#   --force        start both runs over (also what a run started with other --set values needs)
#   --set K=V      a scenario override for both runs (repeatable), e.g. --set rl.steps=20
#   --out DIR      where the results go (default results; the base policy is cached in DIR/cache)
#   --no-build     use the binary as built (MOERL, default build/sim/moerl): no install, no build
set -euo pipefail
usage="usage: scripts/quickstart.sh [--force] [--set section.key=value]... [--out DIR] [--no-build]"
mode=(--resume)
sets=()
out=results
build=1
while (($#)); do
  case "$1" in
    --force) mode=(--force); shift ;;
    --resume) mode=(--resume); shift ;;
    --set) (($# >= 2)) || { echo "quickstart: --set needs section.key=value ($usage)" >&2; exit 2; }
           sets+=(--set "$2"); shift 2 ;;
    --set=*) sets+=(--set "${1#--set=}"); shift ;;
    --out) (($# >= 2)) || { echo "quickstart: --out needs a directory ($usage)" >&2; exit 2; }
           out=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '7,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart: unknown option '$1' ($usage)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
if [[ $build == 1 ]]; then
  scripts/install-deps.sh
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j"$(nproc)"
fi
moerl=${MOERL:-build/sim/moerl}
mkdir -p "$out"
cache=("--cache" "$out/cache")
[[ $out == results ]] && cache=()  # the default cache (results/cache), shared with moerl run and sweep
for algo in grpo r3; do
  "$moerl" run scenarios/quickstart.ini --set rl.algorithm=$algo --out "$out/quickstart-$algo.h5" \
    "${mode[@]}" "${cache[@]}" "${sets[@]}"
done
"$moerl" inspect "$out/quickstart-grpo.h5" "$out/quickstart-r3.h5"
# the trained policy's routing under the two engines' profiles, layer by layer (recomputed on
# every call from the checkpoint, hence --force: the audit file is this script's own output)
"$moerl" audit --force --scenario scenarios/quickstart.ini --checkpoint "$out/quickstart-grpo.ckpt.h5" \
  --profile-a fp8-rollout --profile-b bf16-train --out "$out/quickstart-audit.json" "${sets[@]}"
