#!/usr/bin/env bash
# Sets up, builds and runs the serving demo: `switchyard serve` on configs/demo.ini, a request to each of two
# models (the second one swaps the first out), and a second chat turn that reuses the first turn's KV.
# Set SY_DEMO_PORT to use another port than 8080.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tools/setup.sh
if ! command -v curl >/dev/null; then
  DEBIAN_FRONTEND=noninteractive $( [[ $(id -u) -ne 0 ]] && echo sudo ) apt-get install -y -qq curl
fi
tools/build.sh "$root/build"
sy="$root/build/bin/switchyard"
port=${SY_DEMO_PORT:-8080}
base="http://127.0.0.1:$port"

echo "== switchyard plugins"
"$sy" plugins
echo
echo "== switchyard serve --config configs/demo.ini --listen 127.0.0.1:$port"
log=$(mktemp)
"$sy" serve --config configs/demo.ini --listen "127.0.0.1:$port" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do
  curl -fs "$base/health" >/dev/null 2>&1 && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done

show() { # title, then curl arguments
  echo
  echo "-- $1"
  shift
  curl -fsS "$@" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d, indent=2)[:1500])'
}

show "GET /v1/models" "$base/v1/models"
show "stories260K (a real trained 260K-parameter Llama) continues a story: POST /v1/completions" \
  "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"stories","prompt":"Once upon a time, there was a little dog","max_tokens":60,"temperature":0}'
show "test-a (the deterministic test engine) answers a chat: the request swaps stories260K out" \
  "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"test-a","messages":[{"role":"user","content":"Tell me about trains."}],"max_tokens":24,"temperature":0}'
first=$(curl -fsS "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"test-a","messages":[{"role":"user","content":"Tell me about trains."}],"max_tokens":24,"temperature":0}' \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])')
turn2=$(python3 -c 'import json,sys; print(json.dumps({"model":"test-a","max_tokens":24,"temperature":0,"messages":[
  {"role":"user","content":"Tell me about trains."},{"role":"assistant","content":sys.argv[1]},
  {"role":"user","content":"And about stations?"}]}))' "$first")
show "second turn: usage.prompt_tokens_details.cached_tokens counts the prompt tokens not prefilled again" \
  "$base/v1/chat/completions" -H 'Content-Type: application/json' -d "$turn2"
show "GET /running (llama-swap's view of what is loaded)" "$base/running"
echo
echo "-- Ollama API: POST /api/generate (stream false)"
curl -fsS "$base/api/generate" -d '{"model":"stories","prompt":"The cat","stream":false,"options":{"temperature":0,"num_predict":30}}' \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["response"]); print("eval_count", d["eval_count"])'
echo
echo "== server log"
kill -TERM $server
wait $server || true
trap - EXIT
cat "$log"
rm -f "$log"
