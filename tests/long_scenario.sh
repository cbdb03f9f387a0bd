#!/usr/bin/env bash
# The reference long-answer scenario (scenarios/long.ini) does what it promises (ctest:
# long_scenario): its SFT base answers at EOS with about the right length and a sampled reward in
# [0.2, 0.8], and RL steps have lengths spread over a wide range, response_length_max − min >= 32
# and a mean >= 64 on every step. 20 steps of the scenario as written (about 1½ minutes on 2
# cores). Skipped (exit 77) only without python3 + h5py.
# Usage: tests/long_scenario.sh MOERL_BINARY [STEPS]
set -euo pipefail
moerl=$1
steps=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || { echo "long_scenario: skipped (no python3 with h5py)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$moerl" run "$root/scenarios/long.ini" --set rl.steps="$steps" --out "$tmp/long.h5" --cache "$tmp/cache" > "$tmp/log" 2>&1 ||
  { cat "$tmp/log"; echo "long_scenario: FAIL: the run failed"; exit 1; }
/usr/bin/python3 - "$tmp/long.h5" <<'PY'
import sys
import h5py
import numpy as np
m = h5py.File(sys.argv[1], "r")["metrics"]
mean, lo, hi = m["response_length_mean"][:], m["response_length_min"][:], m["response_length_max"][:]
answer, trunc, reward = m["answer_length_mean"][:], m["truncated_frac"][:], m["reward_mean"][:]
bad = []
if not 0.2 <= reward[0] <= 0.8:
    bad.append(f"the base policy's sampled reward {reward[0]:.3f} is outside [0.2, 0.8]")
if not trunc[0] < 0.5:
    bad.append(f"the base policy truncates {trunc[0]:.0%} of its responses: it does not answer at EOS")
if not abs(mean[0] - answer[0]) <= 0.3 * answer[0]:
    bad.append(f"the base policy's responses ({mean[0]:.1f} tokens) are not about the answers' length ({answer[0]:.1f})")
for s in range(len(mean)):
    if hi[s] - lo[s] < 32:
        bad.append(f"step {s}: lengths {lo[s]:.0f}..{hi[s]:.0f}, a range below 32")
    if mean[s] < 64:
        bad.append(f"step {s}: mean length {mean[s]:.1f} below 64")
print(f"long_scenario: {len(mean)} steps, mean length {mean.min():.1f}..{mean.max():.1f} "
      f"(answers {answer.mean():.1f}), range >= {(hi - lo).min():.0f}, base reward {reward[0]:.3f}, "
      f"truncated at step 0 {trunc[0]:.1%}")
for b in bad:
    print("long_scenario: FAIL:", b)
sys.exit(1 if bad else 0)
PY
