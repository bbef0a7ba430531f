#!/usr/bin/env bash
# run-example.sh NAME: what each example's run.sh does: installs missing packages, builds what is
# stale (scripts/build), then runs examples/NAME/scenario.sh against the freshly built
# `factum-examples` (the factum command line with the example types)
# and `factum-fake-vendor`, keeping the data in $FACTUM_EXAMPLE_DATA (default
# ./data/examples/NAME, emptied first) so that the printed `factum inspect` commands work
# afterwards.
set -euo pipefail
name=${1:?usage: run-example.sh NAME}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
"$root/scripts/install-deps"
"$root/scripts/build" > /dev/null
build=${FACTUM_BUILD_DIR:-$root/build}
data=${FACTUM_EXAMPLE_DATA:-$root/data/examples/$name}
exec "$root/examples/$name/scenario.sh" --factum "$build/examples/factum-examples" \
  --vendor "$build/tools/fake_vendor/factum-fake-vendor" --data "$data" "$@"
