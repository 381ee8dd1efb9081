#!/usr/bin/env bash
# ctest: starts `fasa serve` on a free port and drives its chat page (GET /) in headless Chromium with
# page.mjs. Skips (exit 77) where Chromium, Node.js or puppeteer-core is not installed (CI installs
# Debian's chromium, scripts/debian-packages-tests.txt; scripts/install-deps.sh the npm package).
# Usage: run.sh FASA_BINARY MODEL SCREENSHOT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fasa="$1" model="$2" screenshot="$3"
chromium="$(command -v chromium || true)"
if [ -z "$chromium" ] || ! command -v node >/dev/null || [ ! -f "$here/node_modules/puppeteer-core/package.json" ]; then
  echo "SKIPPED: Chromium, Node.js or puppeteer-core is missing (apt-get install chromium; scripts/install-deps.sh)"
  exit 77
fi
# shellcheck source=../start-server.sh
. "$here/../start-server.sh"
start_server "$fasa" -m "$model" -t 2
node "$here/page.mjs" "http://127.0.0.1:$port/" "$chromium" "$screenshot"
