#!/usr/bin/env bash
# ctest: starts `fasa serve` on a free port with an API key and runs client.mjs (the official openai
# npm client) against it. Skips (exit 77) where Node.js or the client is not installed
# (scripts/install-deps.sh installs both).
# Usage: run.sh FASA_BINARY MODEL
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fasa="$1" model="$2"
if ! command -v node >/dev/null || [ ! -f "$here/node_modules/openai/package.json" ]; then
  echo "SKIPPED: Node.js or the openai npm client is missing (run scripts/install-deps.sh)"
  exit 77
fi
key="test-key-$$"
# shellcheck source=../start-server.sh
. "$here/../start-server.sh"
start_server "$fasa" -m "$model" --api-key "$key" --log-disable -t 2
node "$here/client.mjs" "http://127.0.0.1:$port/v1" "$key"
