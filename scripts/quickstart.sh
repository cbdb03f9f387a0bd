#!/usr/bin/env bash
# Command (1) of the README: installs what is missing, builds, and runs the default job:
# GRPO against R3 (rollout routing replay) on a small MoE whose rollout engine runs FP8 and whose
# train engine runs BF16 (scenarios/quickstart.ini), then the comparison table and an audit of the
# trained GRPO policy's routing under the two engines' profiles.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
mkdir -p results
build/sim/moerl run scenarios/quickstart.ini --set rl.algorithm=grpo --out results/quickstart-grpo.h5
build/sim/moerl run scenarios/quickstart.ini --set rl.algorithm=r3 --out results/quickstart-r3.h5
build/sim/moerl inspect results/quickstart-grpo.h5 results/quickstart-r3.h5
# the trained policy's routing under the two engines' profiles, layer by layer
build/sim/moerl audit --scenario scenarios/quickstart.ini --checkpoint results/quickstart-grpo.ckpt.h5 \
  --profile-a fp8-rollout --profile-b bf16-train --out results/quickstart-audit.json
