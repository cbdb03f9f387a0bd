#!/usr/bin/env bash
# scripts_no_gpu.sh — the GPU scripts on a machine without a GPU and without a CUDA build
# (ctest: gpu_scripts_no_gpu; a few seconds). Fake binaries (copies of /bin/true, or small shell
# scripts) stand in for the CUDA ones; nothing is built, nothing needs a device.
#
#   tests/gpu/device_checks.sh with MOERL_PREBUILT a directory that does not exist, or one that
#     lacks binaries: exit 1 before anything runs, one line on stderr naming MOERL_PREBUILT and
#     each missing binary (and none that is there), OUTDIR not even made;
#   tests/gpu/device_checks.sh with a test binary that cannot start (a missing CUDA library): its
#     row of the table says FAILED with the exit status, never "0 failed", and the exit status is
#     non-zero;
#   tests/gpu/device_checks.sh with BUDGET_S=0, rerun into the same OUTDIR: every budgeted check
#     is skipped and named in the table, none shows the last run's results, the exit status is
#     non-zero (the GPU tests did not run);
#   scripts/pack_gpu.sh with an output it cannot write (in a missing directory, under a file, an
#     existing directory, a read-only directory when not root): exit 1 with one line naming it,
#     before any build (cmake on PATH is a trap that fails the test) and any staging, the build
#     directory unchanged, nothing left in TMPDIR;
#   scripts/pack_gpu.sh failing after staging (a tar that fails, as on a full disk): one line, the
#     staging directory and the partial tarball removed, no tarball;
#   scripts/pack_gpu.sh with the fake binaries (where mpirun and git are there): a pack with the
#     binaries, env.sh and Open MPI, as on a real build machine, and nothing left in TMPDIR.
#
# Usage: tests/gpu/scripts_no_gpu.sh        (exit 0: all cases passed; 1: a case failed)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
W=$(mktemp -d "${TMPDIR:-/tmp}/moerl-scripts-no-gpu.XXXXXX")
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAILED: $*"; fails=$((fails + 1)); }

# one_line_error FILE PREFIX: stderr in FILE is exactly one line starting with PREFIX, no traceback
one_line_error() {
  local n
  n=$(wc -l < "$1")
  [ "$n" -eq 1 ] && head -1 "$1" | grep -q "^$2" && ! grep -q Traceback "$1"
}

# A directory of commands put first on PATH: cmake (must never be called here), mpirun and
# nvidia-smi that answer at once.
SHIM="$W/shim"
mkdir -p "$SHIM"
printf '#!/bin/sh\necho "cmake called: $*" >> "%s/cmake-called"\nexit 1\n' "$W" > "$SHIM/cmake"
printf '#!/bin/sh\necho "mpirun: not in this test" >&2\nexit 1\n' > "$SHIM/mpirun"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed: no GPU in this test" >&2\nexit 9\n' > "$SHIM/nvidia-smi"
chmod +x "$SHIM"/*

# ---- device_checks.sh: MOERL_PREBUILT missing or incomplete --------------------------------
out="$W/dc-out"
PATH="$SHIM:$PATH" MOERL_PREBUILT="$W/no-such-pack/build" bash tests/gpu/device_checks.sh "$out" > "$W/dc1.out" 2> "$W/dc1.err"
rc=$?
if [ $rc -eq 1 ] && one_line_error "$W/dc1.err" "device_checks.sh: error: MOERL_PREBUILT=$W/no-such-pack/build (no such directory)" \
   && grep -q "$W/no-such-pack/build/sim/moerl $W/no-such-pack/build/tests/test_gpu $W/no-such-pack/build/tests/test_cuda_host" "$W/dc1.err" \
   && [ ! -e "$out" ] && [ ! -s "$W/dc1.out" ]; then
  ok "device_checks.sh, MOERL_PREBUILT a missing directory: $(cat "$W/dc1.err")"
else
  bad "device_checks.sh, MOERL_PREBUILT a missing directory: rc=$rc, stderr: $(cat "$W/dc1.err"), stdout: $(head -3 "$W/dc1.out")"
fi

P="$W/pack/build"
mkdir -p "$P/sim" "$P/tests"
cp /bin/true "$P/sim/moerl"
printf 'not a binary\n' > "$P/tests/test_cuda_host"  # there, but not executable
PATH="$SHIM:$PATH" MOERL_PREBUILT="$P" bash tests/gpu/device_checks.sh "$out" > "$W/dc2.out" 2> "$W/dc2.err"
rc=$?
if [ $rc -eq 1 ] && one_line_error "$W/dc2.err" "device_checks.sh: error: MOERL_PREBUILT=$P: missing or not executable: $P/tests/test_gpu $P/tests/test_cuda_host;" \
   && ! grep -q "$P/sim/moerl" "$W/dc2.err" && [ ! -e "$out" ]; then
  ok "device_checks.sh, MOERL_PREBUILT without two binaries: $(cat "$W/dc2.err")"
else
  bad "device_checks.sh, MOERL_PREBUILT without two binaries: rc=$rc, stderr: $(cat "$W/dc2.err")"
fi

# ---- device_checks.sh: a test binary that cannot start is a FAILED row ---------------------
printf '#!/bin/sh\nexit 0\n' > "$P/sim/moerl"
cat > "$P/tests/test_cuda_host" <<'EOF'
#!/bin/sh
echo "[==========] 3 tests from 1 test suite ran. (1 ms total)"
echo "[  PASSED  ] 3 tests."
EOF
cat > "$P/tests/test_gpu" <<'EOF'
#!/bin/sh
echo "$0: error while loading shared libraries: libcudart.so.12: cannot open shared object file: No such file or directory" >&2
exit 127
EOF
chmod +x "$P/sim/moerl" "$P/tests/test_cuda_host" "$P/tests/test_gpu"
PATH="$SHIM:$PATH" MOERL_PREBUILT="$P" N_CONC=1 timeout 120 bash tests/gpu/device_checks.sh "$out" > "$W/dc3.out" 2> "$W/dc3.err"
rc=$?
gpu_row=$(grep '^| GPU tests |' "$W/dc3.out")
host_row=$(grep '^| host tests of device math |' "$W/dc3.out")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$gpu_row" | grep -q "FAILED: no test ran to the end (exit status 127: .*libcudart" \
   && ! echo "$gpu_row" | grep -q "0 failed" && echo "$host_row" | grep -q "| 3 ran, 3 passed, 0 skipped, 0 failed"; then
  ok "device_checks.sh, test_gpu cannot start: exit $rc, $gpu_row"
else
  bad "device_checks.sh, test_gpu cannot start: rc=$rc, rows: $gpu_row / $host_row; stderr: $(tail -3 "$W/dc3.err")"
fi

# ---- device_checks.sh: the time budget ------------------------------------------------------
# BUDGET_S=0, rerun into the same OUTDIR (the last case left its test_gpu.txt there): every budgeted
# check is skipped and named, the GPU tests' row says SKIPPED (not the last run's FAILED), exit non-zero.
PATH="$SHIM:$PATH" MOERL_PREBUILT="$P" N_CONC=1 BUDGET_S=0 timeout 120 bash tests/gpu/device_checks.sh "$out" > "$W/dc4.out" 2> "$W/dc4.err"
rc=$?
gpu_row=$(grep '^| GPU tests |' "$W/dc4.out")
skip_row=$(grep '^| skipped, out of the time budget' "$W/dc4.out")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$gpu_row" | grep -q "SKIPPED: not run (the time budget)" \
   && echo "$skip_row" | grep -q "GPU tests (test_gpu)" && echo "$skip_row" | grep -q "moerl bench bench-large.ini on cpu" \
   && echo "$skip_row" | grep -q "bench workload on the GPU" && grep -q '^| RL run, quickstart 10 steps on cuda | skipped' "$W/dc4.out" \
   && [ ! -e "$out/test_gpu.txt" ]; then
  ok "device_checks.sh, BUDGET_S=0: exit $rc, $skip_row"
else
  bad "device_checks.sh, BUDGET_S=0: rc=$rc, rows: $gpu_row / $skip_row; stdout: $(tail -20 "$W/dc4.out")"
fi

# ---- pack_gpu.sh: an output it cannot write ------------------------------------------------
B="$W/build-gpu"  # a fake CUDA build: the binaries where the script expects them
mkdir -p "$B/sim" "$B/tests"
for b in sim/moerl tests/test_gpu tests/test_cuda_host; do cp /bin/true "$B/$b"; done
before=$(cd "$B" && find . -type f -exec sha256sum {} + | sort)
T="$W/tmp"  # the script's TMPDIR: where its staging directory goes
mkdir -p "$T" "$W/outdir"
: > "$W/a-file"
cases=("$W/no-such-dir/pack.tar.gz|no directory $W/no-such-dir"
       "$W/a-file/pack.tar.gz|$W/a-file is not a directory"
       "$W/outdir|is a directory")
if [ "$(id -u)" -ne 0 ]; then  # root writes anywhere: the read-only case only for other users
  mkdir -p "$W/readonly" && chmod 555 "$W/readonly"
  cases+=("$W/readonly/pack.tar.gz|Permission denied")
fi
for c in "${cases[@]}"; do
  o=${c%%|*}
  want=${c#*|}
  rm -f "$W/cmake-called"
  PATH="$SHIM:$PATH" TMPDIR="$T" bash scripts/pack_gpu.sh "$B" "$o" > "$W/p.out" 2> "$W/p.err"
  rc=$?
  if [ $rc -eq 1 ] && one_line_error "$W/p.err" "pack_gpu.sh: error: $o" && grep -qF "$want" "$W/p.err" \
     && [ -z "$(ls -A "$T")" ] && [ ! -e "$W/cmake-called" ] \
     && [ "$(cd "$B" && find . -type f -exec sha256sum {} + | sort)" = "$before" ] \
     && [ -z "$(ls -A "$W/outdir")" ]; then
    ok "pack_gpu.sh, output $o: $(cat "$W/p.err")"
  else
    bad "pack_gpu.sh, output $o: rc=$rc, stderr: $(cat "$W/p.err"), TMPDIR: $(ls -A "$T"), cmake: $(cat "$W/cmake-called" 2>/dev/null)"
  fi
done
[ "$(id -u)" -ne 0 ] && chmod 755 "$W/readonly"

# ---- pack_gpu.sh: a failure after staging --------------------------------------------------
if command -v mpirun > /dev/null && command -v ompi_info > /dev/null && git -C "$ROOT" rev-parse > /dev/null 2>&1; then
  TAR_SHIM="$W/tar-shim"
  mkdir -p "$TAR_SHIM"
  printf '#!/bin/sh\necho "tar: write error: No space left on device" >&2\nexit 2\n' > "$TAR_SHIM/tar"
  printf '#!/bin/sh\necho "cmake called: $*" >> "%s/cmake-called"\nexit 1\n' "$W" > "$TAR_SHIM/cmake"
  chmod +x "$TAR_SHIM"/*
  o="$W/outdir/pack.tar.gz"
  PATH="$TAR_SHIM:$PATH" TMPDIR="$T" bash scripts/pack_gpu.sh "$B" "$o" > "$W/p.out" 2> "$W/p.err"
  rc=$?
  last=$(tail -1 "$W/p.err")
  if [ $rc -ne 0 ] && echo "$last" | grep -q '^pack_gpu.sh: error: line [0-9]* failed: tar czf .*(exit status 2); nothing packed' \
     && [ "$(grep -c 'pack_gpu.sh: error' "$W/p.err")" -eq 1 ] \
     && [ -z "$(ls -A "$T")" ] && [ -z "$(ls -A "$W/outdir")" ]; then
    ok "pack_gpu.sh, tar fails after staging: $last"
  else
    bad "pack_gpu.sh, tar fails after staging: rc=$rc, stderr: $(cat "$W/p.err"), TMPDIR: $(ls -A "$T"), outdir: $(ls -A "$W/outdir")"
  fi

  # ---- pack_gpu.sh: a pack, as on a build machine --------------------------------------------
  PATH="$W/no-shim:$PATH" TMPDIR="$T" bash scripts/pack_gpu.sh "$B" "$o" > "$W/p.out" 2> "$W/p.err"
  rc=$?
  list=$(tar tzf "$o" 2>/dev/null)
  missing=""
  for f in moerl-gpu/env.sh moerl-gpu/build/sim/moerl moerl-gpu/build/tests/test_gpu moerl-gpu/build/tests/test_cuda_host \
           moerl-gpu/usr/bin/mpirun moerl-gpu/tests/gpu/device_checks.sh moerl-gpu/COMMIT; do
    echo "$list" | grep -qx "$f" || missing="$missing $f"
  done
  if [ $rc -eq 0 ] && [ -z "$missing" ] && grep -q "^packed .* into $o" "$W/p.out" && [ -z "$(ls -A "$T")" ] \
     && [ "$(ls -A "$W/outdir")" = pack.tar.gz ]; then
    ok "pack_gpu.sh with fake binaries: $(tail -1 "$W/p.out")"
  else
    bad "pack_gpu.sh with fake binaries: rc=$rc, missing:$missing, stderr: $(tail -3 "$W/p.err"), TMPDIR: $(ls -A "$T")"
  fi
else
  echo "note: no mpirun/ompi_info or no git checkout: pack_gpu.sh's cases after staging not tried"
fi

if [ $fails -ne 0 ]; then
  echo "scripts_no_gpu: $fails case(s) FAILED"
  exit 1
fi
echo "scripts_no_gpu: all cases passed"
