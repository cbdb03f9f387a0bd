#!/usr/bin/env bash
# Command (1) of the README: installs what is missing, builds, and runs the default job —
# until the RL loop lands, an audit of a freshly initialised reference-workload model
# (scenarios/bench.ini) under the FP8 rollout profile against the BF16 train profile.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
mkdir -p results
build/moerl sft scenarios/bench.ini --steps 0 --out results/base.h5
build/moerl audit --scenario scenarios/bench.ini --checkpoint results/base.h5 \
  --profile-a fp8-rollout --profile-b bf16-train --out results/audit.json
