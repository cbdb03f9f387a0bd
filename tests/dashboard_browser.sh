#!/usr/bin/env bash
# The dashboard in a real browser (ctest: dashboard_browser): tests/dashboard/test_browser.py opens
# the reports' index.html in headless Chromium over the DevTools protocol. Exits 77 (ctest:
# skipped) with a message only when Debian's chromium or python3-websocket is not installed
# (scripts/install-deps.sh installs both); anything else is a failure.
# Usage: tests/dashboard_browser.sh MOERL_BINARY
set -uo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3 || true)
if ! command -v chromium >/dev/null 2>&1 || [[ -z "$py" ]] || ! "$py" -c 'import websocket, h5py, scipy' 2>/dev/null; then
  echo "dashboard_browser: SKIPPED: needs chromium and python3 with websocket, h5py, scipy (scripts/install-deps.sh)"
  exit 77
fi
exec "$py" tests/dashboard/test_browser.py "$1"
