#!/usr/bin/env bash
# Fails when a source folder includes a folder above it. The one place the layer order is written:
# each folder may include itself, the public headers (include/fasa/) and the folders before it.
# docs/ARCHITECTURE.md explains the layers.
set -euo pipefail
cd "$(dirname "$0")/.."
LAYERS=(util ops io tokenizer kv select model gpu calib sparse api eval bench draw server cli python)

rank() {
  local i
  for i in "${!LAYERS[@]}"; do [[ ${LAYERS[$i]} == "$1" ]] && { echo "$i"; return; }; done
  echo -1
}

bad=0
for dir in "${LAYERS[@]}"; do
  path=src/$dir
  [[ $dir == cli || $dir == python ]] && path=$dir
  [[ -d $path ]] || { echo "check-layers: $path is in the layer order but does not exist" >&2; exit 1; }
  own=$(rank "$dir")
  # Every quoted include whose first path part is a layer (fasa/ is the public API, below all).
  while IFS=: read -r file line text; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$text")
    r=$(rank "$target")
    if (( r > own )); then
      echo "$file:$line: $dir/ includes $target/, a higher layer (order: ${LAYERS[*]})"
      bad=1
    fi
  done < <(grep -HnE '^#include "[a-z_]+/' "$path"/*.h "$path"/*.cpp "$path"/*.inc 2>/dev/null || true)
done
# A folder under src/ that is not in the order is a mistake too: its includes would go unchecked.
for d in src/*/; do
  d=${d#src/}; d=${d%/}
  (( $(rank "$d") >= 0 )) || { echo "src/$d/ is not in the layer order of $0"; bad=1; }
done
(( bad == 0 )) && echo "check-layers: every include goes down (${LAYERS[*]})"
exit "$bad"
