#!/usr/bin/env python3
"""LFM2 GGUF fixtures for tests/lfm2: llama.cpp's own converter and llama.cpp's own forward pass.

  python3 tools/oracle/lfm2_gguf_fixture.py --fetch-converter          # or --llama-cpp DIR (a llama.cpp checkout)

Writes into tests/fixtures/lfm2/ (--out to change):
  lfm2-f32.gguf            tests/fixtures/hf/lfm2-f32 converted by convert_hf_to_gguf.py --outtype f32
  lfm2-q8_0.gguf           the same with --outtype q8_0 (matrices Q8_0, small tensors F32)
  expected-llama.cpp.json  llama.cpp's logits and greedy tokens on both files (llama-cpp-python), in the schema of
                           tests/fixtures/hf/*/expected.json (tools/oracle/README.md), one entry per file

The fixture's tokenizer is a byte-level BPE with Qwen2's pre-tokenizer trained on a paragraph, so the converter's
pre-tokenizer fingerprint cannot recognize it; the conversion tells it "qwen2" (which is what it is) instead of
failing. Everything else is the converter's unmodified code path for Lfm2ForCausalLM.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

BOOTSTRAP = r"""
import os, runpy, sys
script = sys.argv[1]
sys.path.insert(0, os.path.dirname(script))
sys.path.insert(1, os.path.join(os.path.dirname(script), "gguf-py"))
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def convert(llama_cpp_dir, checkpoint, outfile, outtype):
    script = os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py")
    cmd = [sys.executable, "-c", BOOTSTRAP, script, checkpoint, "--outtype", outtype, "--outfile", outfile]
    print("convert: " + " ".join(cmd[3:]))
    subprocess.run(cmd, check=True)


def run_llama_cpp(gguf_path, hf_expected, with_all_logits):
    from llama_cpp import Llama
    import numpy as np
    llm = Llama(model_path=gguf_path, n_ctx=256, n_batch=256, n_threads=1, logits_all=True, verbose=False, seed=0,
                type_k=0, type_v=0)  # F32 KV cache: no F16 rounding in the oracle
    prompts = []
    for p in hf_expected["prompts"]:
        ids = p["ids"]
        llm.reset()
        llm.eval(ids)
        scores = np.array(llm.scores[: len(ids)], dtype=np.float32)
        entry = {"text": p["text"], "ids": ids, "last_logits": [round(float(v), 6) for v in scores[-1]],
                 "last_top5": [int(i) for i in np.argsort(-scores[-1], kind="stable")[:5]]}
        if "all_logits" in p and with_all_logits:
            entry["all_logits"] = [[round(float(v), 6) for v in row] for row in scores]
        # greedy: argmax of the last row, fed back one token at a time
        tokens, margins, row = [], [], scores[-1]
        for _ in range(32):
            order = np.argsort(-row, kind="stable")
            tokens.append(int(order[0]))
            margins.append(round(float(row[order[0]] - row[order[1]]), 6))
            llm.eval([tokens[-1]])
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        entry["greedy"] = {"max_new_tokens": 32, "tokens": tokens, "top1_margins": margins}
        prompts.append(entry)
    return prompts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", help="a llama.cpp checkout (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    ap.add_argument("--fetch-converter", action="store_true", help="get the converter from llama-cpp-python's sdist")
    ap.add_argument("--hf", default=os.path.join(ROOT, "tests/fixtures/hf/lfm2-f32"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/lfm2"))
    args = ap.parse_args()
    llama_cpp_dir = args.llama_cpp
    if llama_cpp_dir is None and args.fetch_converter:
        from make_bench_model import fetch_converter
        llama_cpp_dir = fetch_converter()
    if llama_cpp_dir is None:
        sys.exit("need --llama-cpp DIR or --fetch-converter")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.hf, "expected.json")) as f:
        hf_expected = json.load(f)
    import llama_cpp
    result = {"format": 1, "model": "lfm2-f32", "source": "tests/fixtures/hf/lfm2-f32",
              "oracle": "llama.cpp via llama-cpp-python " + llama_cpp.__version__, "vocab_size": 512, "files": {}}
    for outtype in ("f32", "q8_0"):
        path = os.path.join(args.out, f"lfm2-{outtype}.gguf")
        convert(llama_cpp_dir, args.hf, path, outtype)
        result["files"][os.path.basename(path)] = {"prompts": run_llama_cpp(path, hf_expected, outtype == "f32")}
    with open(os.path.join(args.out, "expected-llama.cpp.json"), "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
