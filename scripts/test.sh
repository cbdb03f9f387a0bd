#!/usr/bin/env bash
# Command (2) of the README: installs what is missing, builds, and runs the test suite via ctest.
# Exits non-zero when any test fails. Long runs carry the ctest label "long" and are skipped here;
# run them with:  ctest --test-dir build -L long
# The test labelled "slurm" runs here: it starts a one-node SLURM of its own on localhost (a
# minute or two) and is skipped, with the reason, where SLURM is missing or its daemons cannot
# start (docs/clusters.md); ctest ... -LE 'long|slurm' leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE long
