#!/usr/bin/env bash
# Issue 56's GPU figures in one run on a lent GPU machine: decode tokens/s at depths 0, 32K and 128K
# on the llama3.2-1b and llama3.1-8b shapes (random F16 weights from `fasa make-model`) — full
# attention, FASA-C and FASA-M on the Vulkan device (`fasa bench -ngl 99`, the depth a random fill:
# decode cost does not depend on the values) — beside PyTorch's scaled-dot-product attention in an
# fp16 llama decode step of the same shape on the same GPU (sdpa_decode.py).
#
# Prepare here (the machine has no glslc; it runs a binary built here, beside every shared library it
# loads, glibc and the loader included, so what the machine has installed does not matter):
#   cmake -B build-portable -DCMAKE_BUILD_TYPE=Release -DFASA_NATIVE=OFF && cmake --build build-portable -j2 --target fasa
#   echo /.gl/ >>.git/info/exclude; tools/gpu-figures/bundle-libs.sh build-portable/fasa .gl
# Then the device tool's run, carrying build-portable/fasa and .gl:
#   tools/gpu-figures/run.sh $OUT
# Environment: SHAPES (default "llama3.2-1b llama3.1-8b"), DEPTHS (0,32768,131072), BUDGET (256),
# STEPS (32 decoded tokens a repetition), REPS (3), FASA (build-portable/fasa), LIBS (.gl: bundle-libs.sh's
# folder; none where it is missing).
set -euo pipefail
out=${1:?usage: run.sh OUT_DIR}
fasa=("${FASA:-build-portable/fasa}")
libs=${LIBS:-.gl}
if [ -x "$libs/ld-linux-x86-64.so.2" ]; then
  # (the machine's LD_LIBRARY_PATH after the bundle: --library-path replaces it, and the Vulkan loader
  # may find the driver's own libraries only there)
  fasa=("$libs/ld-linux-x86-64.so.2" --library-path "$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${fasa[@]}")
  # fasa sets GOMP_SPINCOUNT by running /proc/self/exe again, which would now be the loader alone
  export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-1000}
fi
shapes=${SHAPES:-"llama3.2-1b llama3.1-8b"}
depths=${DEPTHS:-0,32768,131072}
mkdir -p "$out"
if ! "${fasa[@]}" bench -m models/kjv-recall-f16.gguf -p 1 -n 0 -r 1 --no-warmup --attn full -ngl 99 >/dev/null 2>"$out/vulkan-check.txt"; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json  # (where the loader finds no driver)
fi
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true; lscpu | grep 'Model name'; } >"$out/machine.txt"
for shape in $shapes; do
  model=/tmp/$shape-f16.gguf
  [ -f "$model" ] || "${fasa[@]}" make-model --shape "$shape" --type f16 -o "$model"
  "${fasa[@]}" bench -m "$model" -ngl 99 -p 0 -n "${STEPS:-32}" -d "$depths" --fill random -r "${REPS:-3}" \
    --attn full,fasa --budget "${BUDGET:-256}" --kv-offload none,ram -o jsonl >"$out/$shape-fasa.jsonl" 2>"$out/$shape-fasa.log"
  python3 "$(dirname "$0")/sdpa_decode.py" --shape "$shape" --depths "$depths" --steps "${STEPS:-32}" \
    --reps "${REPS:-3}" >"$out/$shape-torch.jsonl" 2>"$out/$shape-torch.log"
  rm -f "$model"
done
python3 "$(dirname "$0")/table.py" "$out" | tee "$out/table.md"
