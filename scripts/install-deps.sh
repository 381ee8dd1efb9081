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
# The official openai npm client, for the server's client test (tests/openai-client). Node.js from
# Debian where none is installed; without the npm registry the test skips with a message.
if ! command -v npm >/dev/null; then $SUDO apt-get install -y --no-install-recommends nodejs npm; fi
(cd "$(dirname "$0")/../tests/openai-client" && npm ci --no-audit --no-fund --loglevel=error) ||
  echo "warning: could not install the openai npm client; its test will be skipped"
