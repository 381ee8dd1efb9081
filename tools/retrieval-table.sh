#!/usr/bin/env bash
# The long-context headline tables on the retrieval model (issue 20 §5): generated RULER-style tasks at
# 1K/2K/4K on held-out haystacks, budgets 1/64..1/8 of the context, every policy, FASA variants; the
# public tasks; KL on heldout_kjv.txt; decode speed full vs FASA at 4K.
# Usage: tools/retrieval-table.sh [OUT_DIR] [N_PER_KIND]   (default eval-retrieval/, 10 tasks per kind)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-eval-retrieval}
N=${2:-10}
SHARED=${FASA_SHARED:-../shared}
FASA=./build/fasa
MODEL=models/kjv-recall-f16.gguf
mkdir -p "$OUT"
POLICIES=full,oracle,fasa,stream,snapkv,quest,h2o,sparq,random
BUDGETS=0.015625,0.03125,0.0625,0.125
GEN="--generate all --length 1024,2048,4096 --n $N --seed 1"

$FASA calibrate -m $MODEL -f "$SHARED/eval/calibration.txt" --fcs 8 -o "$OUT/recall.profile.json" > /dev/null
P="--profile $OUT/recall.profile.json"

for hay in heldout_kjv heldout_gcide; do
  $FASA eval retrieval -m $MODEL $GEN --haystack "$SHARED/eval/$hay.txt" --attn $POLICIES --budget $BUDGETS $P \
    --json "$OUT/generated-$hay.json" --plot "$OUT/generated-$hay.png" > "$OUT/generated-$hay.md"
done
# FASA variants on one haystack: per-head vs group-shared chunks, 8 vs 16 chunks, no forced rows (the paper's) or 4 sink + 16 recent.
for fcs in 8 16; do
  for sharing in group head; do
    for forced in "--sink 0 --recent 0" "--sink 4 --recent 16"; do
      name="fasa-fcs$fcs-$sharing-$(echo $forced | tr -d - | tr " " -)"
      # shellcheck disable=SC2086
      $FASA eval retrieval -m $MODEL $GEN --haystack "$SHARED/eval/heldout_kjv.txt" --attn fasa --budget $BUDGETS $P \
        --fcs $fcs --fc-sharing $sharing $forced --json "$OUT/generated-heldout_kjv-$name.json" > "$OUT/generated-heldout_kjv-$name.md"
    done
  done
done
$FASA eval retrieval -m $MODEL --tasks "$SHARED/eval/retrieval.jsonl" --attn $POLICIES --budget 16,32,64,128 $P \
  --json "$OUT/public.json" > "$OUT/public.md"
$FASA eval ppl -m $MODEL -f "$SHARED/eval/heldout_kjv.txt" -c 1024 --windows 8 --attn $POLICIES --budget 32,64,128,256 $P \
  --json "$OUT/ppl-heldout_kjv.json" > "$OUT/ppl-heldout_kjv.md"
$FASA bench -m $MODEL -d 4096 -p 0 -n 64 --attn full,fasa --budget 256 $P -o md > "$OUT/bench-4k.md"
echo "wrote $OUT/"
