#!/usr/bin/env bash
# readme_quickstart.sh: runs the README's quick start (built from README.md's ```cpp block by
# tests/examples/CMakeLists.txt) twice in a fresh temp directory (its ./data): the first run must
# print {"value":2}, and so must the second, whose add carries the same Idempotency-Key and is
# replayed (a second add would print {"value":4}).
# Usage: readme_quickstart.sh PATH/TO/readme_quickstart
set -euo pipefail
exe=${1:?usage: readme_quickstart.sh PATH/TO/readme_quickstart}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
first=$("$exe")
[ "$first" = '{"value":2}' ] || { echo "readme_quickstart: first run printed '$first'" >&2; exit 1; }
again=$("$exe")
[ "$again" = '{"value":2}' ] ||
  { echo "readme_quickstart: second run (same key) printed '$again'" >&2; exit 1; }
echo "readme_quickstart: ok ($first, then replayed)"
