#!/usr/bin/env bash
# Installs the Debian packages fasa builds with (Debian 12). Uses sudo when not run as root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  g++ cmake make pkg-config \
  libgtest-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev libstb-dev
