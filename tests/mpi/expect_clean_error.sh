#!/bin/sh
# expect_clean_error.sh MESSAGE COMMAND... — as expect_error.sh, and the job ends without
# MPI_Abort: no "MPI_ABORT" or ORTE error noise in the output (docs/parallelism.md).
out=$(sh "$(dirname "$0")/expect_error.sh" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || exit 1
if printf '%s\n' "$out" | grep -q -e "MPI_ABORT" -e "ORTE_ERROR_LOG"; then
  echo "the job ended through MPI_Abort"
  exit 1
fi
