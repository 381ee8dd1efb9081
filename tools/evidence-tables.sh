#!/usr/bin/env bash
# Issue 41's tables on the bundled model: RULER's ten kinds, look-alike needles, QA over held-out GCIDE
# entries, and FASA, Quest,
# DoubleSparse and Oracle without a dense layer; every policy at budgets 1/128..1/32 and 256 tokens,
# 20 tasks per kind, the profile calibrated on one training sample. About an hour on 2 cores.
# Usage: tools/evidence-tables.sh [OUT_DIR] [LENGTH] [N_PER_KIND]   (default eval-evidence/, 4096, 20)
# Environment: MODEL, FCS (FASA's chunks, default 8), BUDGETS (comma-separated), FASA (the binary).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-eval-evidence}
LENGTH=${2:-4096}
N=${3:-20}
SHARED=${FASA_SHARED:-../shared}
FASA=${FASA:-./build/fasa}
MODEL=${MODEL:-models/kjv-recall-f16.gguf}
mkdir -p "$OUT"
POLICIES=full,oracle,fasa,doublesparse,stream,snapkv,quest,h2o,sparq
BUDGETS=${BUDGETS:-0.0078125,0.015625,0.03125,256}
FCS=${FCS:-8}
GEN="--length $LENGTH --n $N"
$FASA calibrate -m "$MODEL" -f "$SHARED/eval/calibration.txt" --fcs "$FCS" -o "$OUT/profile.json" > /dev/null
P="--profile $OUT/profile.json"
run() {  # NAME ARGS...: records, markdown and the run time
  local name=$1 start=$SECONDS
  shift
  # shellcheck disable=SC2086
  $FASA eval retrieval -m "$MODEL" "$@" --budget $BUDGETS $P --json "$OUT/$name.json" > "$OUT/$name.md"
  echo "$name: $((SECONDS - start)) s" | tee -a "$OUT/times.txt"
}
# shellcheck disable=SC2086
run every --generate every $GEN --attn $POLICIES
# shellcheck disable=SC2086
run lookalike --generate all --distractors $GEN --attn $POLICIES
# shellcheck disable=SC2086
run qa --generate qa --qa-entries "$SHARED/eval/heldout_gcide.txt" $GEN --attn $POLICIES
# shellcheck disable=SC2086
run no-dense-layer --generate all $GEN --attn oracle,fasa,doublesparse,quest --dense-layers ""
for name in every lookalike qa no-dense-layer; do
  python3 tools/evidence_table.py "$OUT/$name.json" > "$OUT/$name-intervals.md"
done
echo "wrote $OUT/"
