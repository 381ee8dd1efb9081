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
# The test suite's Python packages from PyPI (python/requirements-test.txt: the openai client), in the
# project's venv .venv/ (Debian's python3, whose NumPy and pytest it sees; never system-wide). ctest runs
# pytest from there; where PyPI is out of reach those tests skip with a message.
root="$(cd "$(dirname "$0")/.." && pwd)"
/usr/bin/python3 -m venv --system-site-packages "$root/.venv"
"$root/.venv/bin/pip" install -q --disable-pip-version-check -r "$root/python/requirements-test.txt" ||
  echo "warning: could not install python/requirements-test.txt; the tests that need it will be skipped"
# The npm package of the chat page's browser test (tests/chat-page: puppeteer-core drives Chromium). Node.js
# from Debian where none is installed; without the npm registry the test skips with a message.
if ! command -v npm >/dev/null; then $SUDO apt-get install -y --no-install-recommends nodejs npm; fi
dir="$root/tests/chat-page"
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || {
  rm -rf "$dir/node_modules"  # a failed install leaves empty package folders behind
  echo "warning: could not install tests/chat-page's npm packages; its test will be skipped"
}
