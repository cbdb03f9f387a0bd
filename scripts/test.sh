#!/usr/bin/env bash
# Command (2) of the README: installs what is missing, builds, and runs the test suite via ctest.
# Exits non-zero when any test fails. Long runs carry the ctest label "long" and are skipped here;
# run them with:  ctest --test-dir build -L long
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" -LE long
