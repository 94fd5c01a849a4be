#!/usr/bin/env bash
# Sets up, builds and runs the switchyard demo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/setup.sh
tools/build.sh "$root/build"
sy="$root/build/bin/switchyard"

echo "== switchyard plugins"
"$sy" plugins
echo
echo "== switchyard generate on the test engine (deterministic toy model), greedy"
"$sy" generate --plugin test-engine --model tests/fixtures/test-engine/model-a.txt --temp 0 -n 48 --stats "Hello"
if [[ -f build/plugins/gguf-quant.so ]]; then
  echo
  echo "== switchyard generate on stories260K (real trained weights, 260K parameters), greedy from BOS"
  "$sy" generate --gguf tests/fixtures/stories260K/stories260K.gguf --temp 0 -n 200 --stats
fi
