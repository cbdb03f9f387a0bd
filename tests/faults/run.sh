#!/usr/bin/env bash
# ctest's faults / faults_long: tests/faults/fault_suite.py with a Python that has numpy and h5py
# (exit 77, "skipped", when there is none). Extra arguments go to the suite (--long, --seed N).
# Usage: tests/faults/run.sh MOERL_BINARY [suite options]
set -uo pipefail
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3 || true)
if [[ -z "$py" ]] || ! "$py" -c 'import h5py, numpy' 2>/dev/null; then
  echo "faults: SKIPPED: no python3 with h5py and numpy (scripts/install-deps.sh installs them)"
  exit 77
fi
exec "$py" "$(dirname "$0")/fault_suite.py" "$@"
