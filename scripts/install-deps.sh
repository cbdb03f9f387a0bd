#!/usr/bin/env bash
# Installs exactly the Debian packages moerl needs to build, test and analyse; idempotent.
# Usage: scripts/install-deps.sh [--with-python]   (python3-torch for the golden references)
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libopenmpi-dev openmpi-bin
      libhdf5-dev
      libboost-program-options-dev
      libtbb-dev
      libgtest-dev googletest
      libopenblas-dev
      libhwy-dev                          # Google Highway: the CPU kernels' SIMD, run-time dispatch
      python3 python3-numpy python3-h5py
      python3-matplotlib python3-pytest    # analysis/ and its tests (ctest runs them)
      python3-scipy python3-pandas         # analysis/: t quantiles, the notebook loader (load_runs)
      python3-pip python3-venv             # pip install -e . (pyproject.toml; its test)
      chromium python3-websocket           # the dashboard's browser test (ctest: dashboard_browser)
      slurm-wlm munge)                     # a one-node SLURM for scripts/slurm/'s recipes (ctest: slurm)
if [[ "${1:-}" == "--with-python" ]]; then
  pkgs+=(python3-torch)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
