#!/usr/bin/env bash
# Installs what the training recipe needs, all from Debian 12: PyTorch (CPU), NumPy, SentencePiece,
# an optimised BLAS (without it torch falls back to a slow reference one), and the training text
# (bible-kjv-text, read with its `bible` command; dict-gcide). The engine's build does not need these.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends python3-torch python3-numpy python3-sentencepiece \
  libopenblas0-pthread bible-kjv bible-kjv-text dict-gcide
