#!/usr/bin/env bash
# The main job, until the monitor's multi-process demo replaces it: compile
# the bundled interfaces to Go and C with chanosc and run the C example that
# encodes and decodes them.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in interfaces/*.if; do
  name=$(basename "$f" .if)
  ./bin/chanosc -lang go -o "$out/go/$name" "$f"
  ./bin/chanosc -lang c -o "$out/c" "$f"
  echo "chanosc: $f -> Go package $name, C $name.h/$name.c"
done
echo "demo: ok"
