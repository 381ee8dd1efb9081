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
# The test suite's Python packages from PyPI (python/requirements-test.txt: the openai client, Selenium,
# lm-evaluation-harness, pinned with NumPy and pandas), in the project's venv .venv/ (Debian's python3,
# whose pytest it sees; never system-wide). ctest runs
# pytest from there; where PyPI is out of reach those tests skip with a message.
root="$(cd "$(dirname "$0")/.." && pwd)"
/usr/bin/python3 -m venv --system-site-packages "$root/.venv"
"$root/.venv/bin/pip" install -q --disable-pip-version-check -r "$root/python/requirements-test.txt" ||
  echo "warning: could not install python/requirements-test.txt; the tests that need it will be skipped"
