#!/usr/bin/env bash
# pack_gpu.sh — builds the CUDA binaries here (a CPU machine with the CUDA toolkit) and packs them,
# with their non-CUDA runtime libraries and a relocatable Open MPI, into one tarball for a bare GPU
# node. On the node the pack uses the node's own CUDA driver, cuBLAS and NCCL (never packed: they
# must match the driver), and Open MPI relocates through OPAL_PREFIX.
#
#   scripts/pack_gpu.sh [BUILD_DIR] [OUT.tar.gz]     (defaults: build-gpu, moerl-gpu-pack.tar.gz)
#
# On the GPU node:
#   tar xzf moerl-gpu-pack.tar.gz && cd moerl-gpu && source env.sh && tests/gpu/device_checks.sh
# (env.sh sets PATH, LD_LIBRARY_PATH, OPAL_PREFIX and MOERL_PREBUILT, so device_checks.sh skips
# its build and runs the packed binaries).
#
# A failure is one line "pack_gpu.sh: error: ..." and a non-zero exit; the output is checked before
# any build or copy (a relative OUT is taken from the checkout's top directory), and the staging
# directory (under $TMPDIR) and the partial tarball are removed on every exit.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
B=${1:-build-gpu}
OUT=${2:-moerl-gpu-pack.tar.gz}
JOBS=${JOBS:-$(nproc)}

STAGE=""
OUT_TMP=""
reported=""
failed_at=""
die() { echo "pack_gpu.sh: error: $*" >&2; reported=1; exit 1; }
cleanup() {
  local rc=$?
  trap - EXIT
  [ -n "$STAGE" ] && rm -rf "$STAGE"
  [ -n "$OUT_TMP" ] && rm -f "$OUT_TMP"
  if [ "$rc" -ne 0 ] && [ -z "$reported" ]; then
    echo "pack_gpu.sh: error: ${failed_at:-stopped} (exit status $rc); nothing packed, the staging directory removed" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'failed_at="line $LINENO failed: $BASH_COMMAND"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The output first: a file this user can create in an existing directory, tried for real (a
# read-only file system or a full quota answer here, not after the build and the ~95 MB staging).
case "$OUT" in /*) OUT_ABS=$OUT ;; *) OUT_ABS=$ROOT/$OUT ;; esac
[ -d "$OUT_ABS" ] && die "$OUT_ABS: is a directory (give the pack's file name, e.g. $OUT_ABS/moerl-gpu-pack.tar.gz)"
OUT_DIR=$(dirname -- "$OUT_ABS")
if [ ! -d "$OUT_DIR" ]; then
  [ -e "$OUT_DIR" ] && die "$OUT_ABS: cannot write the pack: $OUT_DIR is not a directory"
  die "$OUT_ABS: cannot write the pack: no directory $OUT_DIR"
fi
OUT_TMP="$OUT_ABS.tmp-$$"
if ! err=$( { : > "$OUT_TMP"; } 2>&1 ); then
  OUT_TMP=""
  die "$OUT_ABS: cannot write the pack: ${err##*: }"
fi

if [ ! -x "$B/sim/moerl" ] || [ ! -x "$B/tests/test_gpu" ]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DMOERL_CUDA=ON -DMOERL_CUDA_ARCHS=90
  cmake --build "$B" -j"$JOBS" --target moerl test_gpu test_cuda_host
fi
BINS=("$B/sim/moerl" "$B/tests/test_gpu" "$B/tests/test_cuda_host")

STAGE=$(mktemp -d)
P="$STAGE/moerl-gpu"
mkdir -p "$P/build/sim" "$P/build/tests" "$P/usr/bin" "$P/usr/lib"
# the sources device_checks.sh reads (scenarios, scripts, the analysis) and the binaries where it
# expects a build directory
git ls-files -z scenarios tests/gpu scripts analysis docs/gpu.md | xargs -0 -I{} cp --parents {} "$P/"
cp "$B/sim/moerl" "$P/build/sim/"
cp "$B/tests/test_gpu" "$B/tests/test_cuda_host" "$P/build/tests/"

# Runtime libraries: what the binaries and Open MPI's launcher need, less the C library (the node's)
# and everything CUDA (the node's driver, cuBLAS, NCCL).
skip='^(libc|libm|libdl|libpthread|librt|ld-linux.*|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia.*|libnvrtc.*)\.so'
MPIRUN=$(readlink -f "$(command -v mpirun)")
ORTED=$(command -v orted || true)
copy_libs() {
  ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    base=$(basename "$lib")
    if [[ "$base" =~ $skip ]]; then continue; fi
    cp -Ln "$lib" "$P/usr/lib/" 2>/dev/null || true
  done
}
copy_libs "${BINS[@]}" "$MPIRUN" ${ORTED:+"$ORTED"}

# Open MPI, laid out under usr/ as under its configured prefix /usr, so OPAL_PREFIX=<pack>/usr
# relocates it: the launcher, its plugins (pkglibdir) and help texts (pkgdatadir).
prefix=$(ompi_info --parsable --path prefix 2>/dev/null | sed 's/^path:prefix://')
prefix=${prefix:-/usr}
cp -L "$MPIRUN" "$P/usr/bin/"
ln -sf "$(basename "$MPIRUN")" "$P/usr/bin/mpirun"
[ -n "$ORTED" ] && cp -L "$ORTED" "$P/usr/bin/"
for kind in libdir pkglibdir pkgdatadir; do
  d=$(ompi_info --parsable --path "$kind" 2>/dev/null | sed "s/^path:$kind://")
  [ -n "$d" ] && [ -d "$d" ] || continue
  rel=${d#"$prefix"/}
  mkdir -p "$P/usr/$rel"
  cp -rL "$d/." "$P/usr/$rel/" 2>/dev/null || true
  [ "$kind" = pkglibdir ] && copy_libs "$d"/*.so
done

cat > "$P/env.sh" <<'ENV'
# Source from the pack's top directory: the packed libraries and Open MPI, the node's CUDA.
PACK=$(pwd)
export PATH="$PACK/usr/bin:$PATH"
export LD_LIBRARY_PATH="$PACK/usr/lib:$PACK/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}"
export OPAL_PREFIX="$PACK/usr"
export MOERL_PREBUILT="$PACK/build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ENV
git rev-parse HEAD > "$P/COMMIT" 2>/dev/null || true
tar czf "$OUT_TMP" -C "$STAGE" moerl-gpu
mv -f "$OUT_TMP" "$OUT_ABS"
OUT_TMP=""
rm -rf "$STAGE"
STAGE=""
echo "packed $(du -h "$OUT" | cut -f1) into $OUT (commit $(git rev-parse --short HEAD 2>/dev/null))"
