#!/usr/bin/env bash
# Load test of `fasa serve` on loopback: starts the server on the bundled model, runs
# CLIENTS x REQUESTS requests (build/fasa_load_test), samples the server's RSS every half second,
# stops the server and prints the figures. Stops by itself (each part has a time limit).
# Usage: tools/load-test.sh [CLIENTS] [REQUESTS] [PARALLEL] [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${1:-32} REQUESTS=${2:-20} PARALLEL=${3:-2} PORT=${4:-8097}
MODEL=${MODEL:-models/kjv-recall-f16.gguf}

./build/fasa serve -m "$MODEL" --host 127.0.0.1 --port "$PORT" --parallel "$PARALLEL" \
  --queue "$CLIENTS" -c 512 -t 2 2> /tmp/fasa-load-server.log &
SERVER=$!
trap 'kill $SERVER 2> /dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  sleep 0.1
done

rss() { awk '/VmRSS/ {print $2}' "/proc/$SERVER/status"; }
RSS_START=$(rss)
(while kill -0 $SERVER 2> /dev/null; do rss; sleep 0.5; done) > /tmp/fasa-load-rss.txt 2> /dev/null &
SAMPLER=$!
STATUS=0
timeout 600 ./build/fasa_load_test --port "$PORT" --clients "$CLIENTS" --requests "$REQUESTS" || STATUS=$?
kill $SAMPLER 2> /dev/null || true
RSS_END=$(rss)
RSS_MAX=$(sort -n /tmp/fasa-load-rss.txt | tail -1)
METRICS=$(curl -sf "http://127.0.0.1:$PORT/metrics")
SERVER_ERRORS=$(echo "$METRICS" | awk '/^fasa_requests_total\{code="5/ {n += $2} END {print n + 0}')
echo "server: RSS start ${RSS_START} KiB, max ${RSS_MAX} KiB, end ${RSS_END} KiB; 5xx responses: ${SERVER_ERRORS}"
echo "$METRICS" | grep -E '^fasa_(requests_total|requests_cancelled_total|generated_tokens_total|decode_tokens_per_second)'

kill -0 $SERVER 2> /dev/null || { echo "the server died"; exit 1; }
exit $STATUS
