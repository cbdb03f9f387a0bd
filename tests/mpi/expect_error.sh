#!/bin/sh
# expect_error.sh MESSAGE COMMAND... — runs COMMAND (an mpirun line of moerl) and passes when it
# exits with a non-zero status (ctest's timeout catches a hang) and its output holds exactly one
# "moerl: error:" line, which contains MESSAGE: the error is printed once, every rank stops.
msg=$1
shift
out=$("$@" 2>&1)
rc=$?
n=$(printf '%s\n' "$out" | grep -c "moerl: error")
if [ "$rc" -eq 0 ]; then
  printf 'exit status 0, expected a failure\n%s\n' "$out"
  exit 1
fi
if [ "$n" -ne 1 ]; then
  printf 'expected one "moerl: error" line, got %s\n%s\n' "$n" "$out"
  exit 1
fi
if ! printf '%s\n' "$out" | grep "moerl: error" | grep -q -- "$msg"; then
  printf 'the error lacks "%s"\n%s\n' "$msg" "$out"
  exit 1
fi
printf 'ok: exit status %s, one message: %s\n' "$rc" "$(printf '%s\n' "$out" | grep "moerl: error")"
