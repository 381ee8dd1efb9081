#!/usr/bin/env bash
# Soak: decodes N tokens (default 100000) in one FASA session on the bundled model and samples the
# process's RSS every 5 s; passes when RSS after the first 10 % of the run stays within 5 % (the KV
# cache is allocated up front, so growth would be a leak). Usage: tools/soak.sh [N] [PROFILE]
# Without a profile FASA uses a synthetic one (speed/soak only). Stops by itself (timeout 2 h).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000} PROFILE=${2:-}
POLICY=(--attn fasa --budget 256 --fcs 8 --dense-layers "")
if [ -n "$PROFILE" ]; then POLICY+=(--profile "$PROFILE"); else POLICY+=(--synthetic-profile); fi
LOG=$(mktemp)
timeout 7200 ./build/fasa run -p "Ge1:1 In the beginning" -n "$N" -c $((N + 16)) --ignore-eos --temp 0.8 \
  -t 2 "${POLICY[@]}" > /dev/null 2> "$LOG" &
PID=$!
START=$(date +%s)
: > "$LOG.rss"
while kill -0 $PID 2> /dev/null; do
  awk -v t=$(($(date +%s) - START)) '/VmRSS/ {print t, $2}' "/proc/$PID/status" >> "$LOG.rss" 2> /dev/null || true
  sleep 5
done
wait $PID || { echo "soak: fasa run failed"; cat "$LOG"; exit 1; }
tail -2 "$LOG"
awk 'NR == 1 {first = $2} {rss[NR] = $2; t[NR] = $1} END {
  s = int(NR / 10) + 1; base = rss[s]; max = 0; for (i = s; i <= NR; i++) if (rss[i] > max) max = rss[i];
  printf "RSS: %d KiB at %d s (start), %d KiB at %d s (10%%), %d KiB at %d s (end), max %d KiB after 10%%\n",
         first, t[1], base, t[s], rss[NR], t[NR], max;
  if (max > base * 1.05) { print "soak: RSS grew more than 5 %"; exit 1 } else print "soak: RSS flat" }' "$LOG.rss"
