#!/usr/bin/env bash
# allocator.sh: an executable linked with factum_allocator (CMake option FACTUM_TCMALLOC) really
# runs on tcmalloc: the dynamic loader binds every library's `malloc` and `free` to
# libtcmalloc_minimal, none to glibc. The failure this catches is silent otherwise: linked with
# --as-needed, the library drops out of the executable's NEEDED list (nothing calls it by name)
# and every figure in docs/performance.md measured with it would be glibc's.
# Usage: allocator.sh EXECUTABLE [ARGS...]   (ARGS: a quick, successful invocation)
set -euo pipefail
exe=${1:?usage: allocator.sh EXECUTABLE [ARGS...]}
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# LD_DEBUG output goes to stderr; the program's own output is not looked at.
LD_DEBUG=bindings "$exe" "$@" > /dev/null 2> "$log" ||
  { echo "FAIL: $exe $* exited with status $?" >&2; exit 1; }
for sym in malloc free; do
  bound=$(grep -c "normal symbol \`$sym'" "$log" || true)
  to_tc=$(grep "normal symbol \`$sym'" "$log" | grep -c 'libtcmalloc_minimal' || true)
  if [ "$bound" -eq 0 ]; then
    echo "FAIL: no binding of $sym seen (LD_DEBUG=bindings printed nothing?)" >&2
    exit 1
  fi
  if [ "$to_tc" -ne "$bound" ]; then
    echo "FAIL: $((bound - to_tc)) of $bound bindings of $sym do not go to libtcmalloc_minimal:" >&2
    grep "normal symbol \`$sym'" "$log" | grep -v 'libtcmalloc_minimal' | head -5 >&2
    exit 1
  fi
  echo "ok: $bound bindings of $sym, all to libtcmalloc_minimal"
done
