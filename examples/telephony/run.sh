#!/usr/bin/env bash
# run.sh: the one command of examples/telephony: builds what is stale, runs the scenario against a
# real `factum serve` and the fake vendor, checks it, and prints the `factum inspect` commands
# that show what happened (data kept in ./data/examples/telephony, or $FACTUM_EXAMPLE_DATA).
set -euo pipefail
exec "$(cd "$(dirname "$0")/.." && pwd)/lib/run-example.sh" telephony "$@"
