#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang, ASan and UBSan, and runs each for RUNS
# executions (default 10 million) or MAX_SECONDS (default 3600), whichever comes first, from the
# seed corpora in fuzz/corpus/ (new inputs go to build-fuzz/corpus/, not the repository).
# An allocation over 512 MiB or an input taking over 10 s counts as a crash.
# Usage: scripts/fuzz.sh [gguf hf profile tokenizer request]   (env: RUNS, MAX_SECONDS, JOBS)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10000000} MAX_SECONDS=${MAX_SECONDS:-3600}
if ! command -v clang++-14 > /dev/null || [ ! -e /usr/lib/llvm-14/lib/libomp.so ]; then
  # shellcheck disable=SC2046
  apt-get install -y --no-install-recommends $(cat scripts/debian-packages-clang.txt)
fi
cmake -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFASA_FUZZ=ON \
  -DFASA_BUILD_TESTS=OFF > /dev/null
cmake --build build-fuzz -j"$(nproc)"
declare -A MAX_LEN=([gguf]=8192 [hf]=8192 [profile]=32768 [tokenizer]=512 [request]=2048)
for h in "${@:-gguf hf profile tokenizer request}"; do
  for name in $h; do
    mkdir -p "build-fuzz/corpus/$name"
    echo "== fuzz_$name"
    ./build-fuzz/fuzz/fuzz_$name -runs="$RUNS" -max_total_time="$MAX_SECONDS" -max_len="${MAX_LEN[$name]}" \
      -timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048 -print_final_stats=1 \
      "build-fuzz/corpus/$name" "fuzz/corpus/$name" > "build-fuzz/fuzz_$name.log" 2>&1 || {
      echo "fuzz_$name FAILED: see build-fuzz/fuzz_$name.log"; tail -30 "build-fuzz/fuzz_$name.log"; exit 1; }
    grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb" "build-fuzz/fuzz_$name.log" || true
  done
done
