#!/usr/bin/env bash
# ctest: starts `fasa serve` on a free port with an API key and runs client.mjs (the official openai
# npm client) against it. Skips (exit 77) where Node.js or the client is not installed
# (scripts/install-deps.sh installs both).
# Usage: run.sh FASA_BINARY MODEL
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fasa="$1" model="$2"
if ! command -v node >/dev/null || [ ! -d "$here/node_modules/openai" ]; then
  echo "SKIPPED: Node.js or the openai npm client is missing (run scripts/install-deps.sh)"
  exit 77
fi
log="$(mktemp)"
key="test-key-$$"
"$fasa" serve -m "$model" --port 0 --api-key "$key" --log-disable -t 2 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 300); do  # the model loads, then the line with the port
  port="$(sed -n 's|.* on http://[^:]*:\([0-9]*\) .*|\1|p' "$log")"
  [ -n "$port" ] && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "fasa serve did not start:"; cat "$log"; exit 1; }
node "$here/client.mjs" "http://127.0.0.1:$port/v1" "$key"
