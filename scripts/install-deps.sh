#!/usr/bin/env bash
# Installs the Debian packages fasa builds with (Debian 12; list in debian-packages.txt). Uses sudo
# when not run as root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
# shellcheck disable=SC2046
$SUDO apt-get install -y --no-install-recommends $(cat "$(dirname "$0")/debian-packages.txt")
# The npm packages of the server's client tests (tests/openai-client, tests/chat-page). Node.js from
# Debian where none is installed; without the npm registry the test skips with a message.
if ! command -v npm >/dev/null; then $SUDO apt-get install -y --no-install-recommends nodejs npm; fi
for client in openai-client chat-page; do  # the openai client; puppeteer-core (drives Chromium where installed)
  dir="$(dirname "$0")/../tests/$client"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || {
    rm -rf "$dir/node_modules"  # a failed install leaves empty package folders behind
    echo "warning: could not install tests/$client's npm packages; its test will be skipped"
  }
done
