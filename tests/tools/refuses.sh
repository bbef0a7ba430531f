#!/usr/bin/env bash
# refuses.sh: a benchmark program refuses bad flags before it runs anything: it exits 2, says
# on stderr what it refused, and prints nothing on stdout (no run started, no figure printed).
# Usage: refuses.sh EXECUTABLE EXPECTED_STDERR_TEXT ARGS...
set -uo pipefail
exe=${1:?usage: refuses.sh EXECUTABLE EXPECTED_STDERR_TEXT ARGS...}
want=${2:?usage: refuses.sh EXECUTABLE EXPECTED_STDERR_TEXT ARGS...}
shift 2
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$exe" "$@" > "$out" 2> "$err"
rc=$?
fail=0
if [ "$rc" -ne 2 ]; then
  echo "FAIL: $exe $* exited with status $rc, not 2" >&2
  fail=1
fi
if ! grep -qF -- "$want" "$err"; then
  echo "FAIL: stderr of $exe $* does not say '$want':" >&2
  cat "$err" >&2
  fail=1
fi
if [ -s "$out" ]; then
  echo "FAIL: $exe $* printed on stdout (a run started?):" >&2
  cat "$out" >&2
  fail=1
fi
[ "$fail" -eq 0 ] && echo "ok: $exe $* exits 2: $(head -n 1 "$err")"
exit "$fail"
