#!/usr/bin/env bash
# tools/gpu-figures/bundle-libs.sh ships every shared library BIN loads: run through the bundled loader,
# BIN prints its version and loads no library from outside the bundle (a lent GPU machine has none of
# Debian's packages). Usage: gpu_bundle_check.sh BIN
set -euo pipefail
bin=${1:?usage: gpu_bundle_check.sh BIN}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$(dirname "$0")/../tools/gpu-figures/bundle-libs.sh" "$bin" "$dir/lib"
GOMP_SPINCOUNT=1000 LD_DEBUG=libs "$dir/lib/ld-linux-x86-64.so.2" --library-path "$dir/lib" "$bin" --version \
  >"$dir/out" 2>"$dir/debug"
grep -q '^fasa ' "$dir/out" || { echo "FAIL: no version line:"; cat "$dir/out"; exit 1; }
inits=$(grep 'calling init: ' "$dir/debug" | sed 's/.*calling init: //')
grep -qx "$dir/lib/libc.so.6" <<<"$inits" || { echo "FAIL: glibc did not come from the bundle"; exit 1; }
outside=$(grep -v "^$dir/lib/" <<<"$inits" || true)
[ -z "$outside" ] || { echo "FAIL: loaded from outside the bundle:"; echo "$outside"; exit 1; }
echo "$(wc -l <<<"$inits") libraries, all from the bundle"
