#!/usr/bin/env bash
# The full quality tables on the bundled model (kjv-recall): KL on held-out text, the public retrieval
# tasks, CA; the generated long tasks are tools/retrieval-table.sh's. Long: about an hour on 2 cores.
# Usage: tools/eval-all.sh [OUT_DIR] — writes OUT_DIR/*.md and *.json (default eval-results/).
# Every policy gets the same windows, tasks, seeds and dense layers (layer 0, the default).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-eval-results}
SHARED=${FASA_SHARED:-../shared}
FASA=./build/fasa
MODEL=models/kjv-recall-f16.gguf
mkdir -p "$OUT"
POLICIES=full,oracle,fasa,stream,snapkv,quest,h2o,sparq,random
BUDGETS=32,64,128,256

$FASA calibrate -m $MODEL -f "$SHARED/eval/calibration.txt" --fcs 8 --topk 64 -o "$OUT/recall.profile.json"
$FASA analyze "$OUT/recall.profile.json" -o "$OUT/profile-analysis" > /dev/null
P="--profile $OUT/recall.profile.json"

for text in heldout_kjv heldout_gcide; do
  $FASA eval ppl -m $MODEL -f "$SHARED/eval/$text.txt" --windows 8 --attn $POLICIES --budget $BUDGETS $P \
    --json "$OUT/ppl-$text.json" > "$OUT/ppl-$text.md"
done

# FASA variants: per-head vs group-shared chunks, 8 vs 16 chunks, without forced rows (the paper's) and with 4 sink + 16 recent.
for fcs in 8 16; do
  for sharing in group head; do
    for forced in "--sink 0 --recent 0" "--sink 4 --recent 16"; do
      name="fasa-fcs$fcs-$sharing-$(echo $forced | tr -d - | tr " " -)"
      # shellcheck disable=SC2086
      $FASA eval ppl -m $MODEL -f "$SHARED/eval/heldout_kjv.txt" --windows 8 --attn fasa --budget $BUDGETS $P \
        --fcs $fcs --fc-sharing $sharing $forced --json "$OUT/ppl-heldout_kjv-$name.json" > "$OUT/ppl-heldout_kjv-$name.md"
    done
  done
done

$FASA eval ca -m $MODEL -f "$SHARED/eval/heldout_kjv.txt" --windows 4 --attn $POLICIES --topk 16,64,256 $P \
  --json "$OUT/ca.json" > "$OUT/ca.md"
for fcs in 4 16; do
  for sharing in group head; do
    $FASA eval ca -m $MODEL -f "$SHARED/eval/heldout_kjv.txt" --windows 4 --attn fasa --topk 16,64,256 $P \
      --fcs $fcs --fc-sharing $sharing --json "$OUT/ca-fasa-fcs$fcs-$sharing.json" > "$OUT/ca-fasa-fcs$fcs-$sharing.md"
  done
done
$FASA eval ca -m $MODEL -f "$SHARED/eval/heldout_kjv.txt" --windows 4 --attn fasa --topk 16,64,256 $P \
  --fc-sharing head --json "$OUT/ca-fasa-fcs8-head.json" > "$OUT/ca-fasa-fcs8-head.md"

$FASA eval retrieval -m $MODEL --tasks "$SHARED/eval/retrieval.jsonl" --attn $POLICIES --budget $BUDGETS $P \
  --json "$OUT/retrieval.json" > "$OUT/retrieval.md"
echo "tables in $OUT/"
