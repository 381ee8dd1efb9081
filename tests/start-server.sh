# Sourced by the ctest scripts that drive `fasa serve` (chat-page/):
# `start_server FASA_BINARY SERVE_ARGS...` starts it on a free port, waits for the line that names the
# port, sets $port, and stops the server when the script exits.
start_server() {
  local fasa="$1"
  shift
  server_log="$(mktemp)"
  "$fasa" serve --port 0 "$@" 2>"$server_log" &
  server=$!
  trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$server_log"' EXIT
  port=""
  for _ in $(seq 1 300); do  # the model loads, then the line with the port
    port="$(sed -n 's|.* on http://[^:]*:\([0-9]*\) .*|\1|p' "$server_log")"
    [ -n "$port" ] && return 0
    kill -0 $server 2>/dev/null || { cat "$server_log"; exit 1; }
    sleep 0.1
  done
  echo "fasa serve did not start:"
  cat "$server_log"
  exit 1
}
