#!/bin/sh
# SPDX-License-Identifier: MIT
# expect_output.sh PROGRAM TEXT...: runs PROGRAM, which must fail (a planted
# error it is meant to be caught on), and checks that its output (stdout and
# stderr) contains every TEXT as a fixed string. Prints the output either way.
prog=$1
shift
out=$("$prog" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
  echo "expect_output: $prog exited 0; the planted error went unreported" >&2
  exit 1
fi
for want in "$@"; do
  if ! printf '%s\n' "$out" | grep -qF -- "$want"; then
    echo "expect_output: missing from the output: $want" >&2
    exit 1
  fi
done
echo "expect_output: $prog failed as planted (exit $rc), and said all of: $*"
