#!/usr/bin/env bash
# The analysis package's tests (ctest: analysis_pytest): pytest over analysis/tests, which make a
# tiny real sweep with the moerl binary given here. Exits 77 (ctest: skipped) with a message only
# when python3 with h5py and numpy is not installed at all; anything else missing is a failure.
# Usage: tests/analysis_pytest.sh MOERL_BINARY
set -uo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3 || true)
if [[ -z "$py" ]] || ! "$py" -c 'import h5py, numpy' 2>/dev/null; then
  echo "analysis_pytest: SKIPPED: no python3 with h5py and numpy (scripts/install-deps.sh installs them)"
  exit 77
fi
export MOERL_BIN=${1:-}
exec "$py" -m pytest -p no:cacheprovider analysis/tests -q
