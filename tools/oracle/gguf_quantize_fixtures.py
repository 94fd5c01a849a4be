#!/usr/bin/env python3
"""Records what llama.cpp makes of files written by `switchyard quantize` from SafeTensors checkpoints, for
tests/gguf/test_gguf_quantize.c.

For each (checkpoint of tests/fixtures/hf, type) below:
  1. `switchyard quantize CHECKPOINT OUT TYPE` (the binary given with --switchyard) writes OUT; its whole-file
     FNV-1a 64 is recorded (the C test must write the same bytes);
  2. llama.cpp's own pipeline, convert_hf_to_gguf.py --outtype f32 then llama_model_quantize to TYPE, writes a
     reference file; the FNV-1a 64 of its tensors (name, type, dims, data; see gguf_model_fixtures.py) is recorded,
     and must equal that of OUT: same tensor names, types, shapes and bytes (metadata may differ: general.name);
  3. llama.cpp loads OUT and, for each prompt of the checkpoint's expected.json, records 32 greedy tokens with
     their top-2 margins and the top-1 of every position of prompt + greedy[:-1], with margins.
The converter is the one vendored in llama-cpp-python's source package (tools/oracle/make_bench_model.py
--fetch-converter caches it); these tiny tokenizers are not in its table of known pre-tokenizers, so it is told
"qwen2", which they use.

Also records llama.cpp's per-tensor type choices for a Qwen2.5-0.5B-shaped model (--bench-gguf, the F16 file of
make_bench_model.py --gguf): for Q4_K_M, Q5_K_M, Q6_K, Q8_0, Q4_0, Q2_K and Q3_K_M, the types llama_model_quantize
gives each tensor (read back from its output), with the tensors' shapes, so the C test can check
sy_quant_choose_types on real shapes (hidden 896: K-quant fallbacks) without the 1 GB file.

    python3 tools/oracle/gguf_quantize_fixtures.py --switchyard build/bin/switchyard [--bench-gguf F16.gguf]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_model_fixtures as tiny  # noqa: E402  (tensor_hash, llama_quantize, run helpers)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HF = os.path.join(ROOT, "tests/fixtures/hf")
CASES = [
    ("qwen2-tied-f32", "Q8_0"), ("qwen2-tied-f32", "Q4_K_M"), ("qwen2-tied-f32", "Q6_K"),
    ("llama-gqa-f32-sharded", "Q4_0"), ("llama-gqa-f32-sharded", "Q5_K_M"),
    ("qwen3-tied-bf16", "F16"), ("qwen3-tied-bf16", "Q8_0"), ("qwen2-untied-bf16", "Q4_K_M"),
]
FTYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "Q2_K": 10, "Q3_K_M": 12, "Q4_K_M": 15, "Q5_K_M": 17,
          "Q6_K": 18}
BENCH_TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "Q2_K", "Q3_K_M"]
N_GREEDY = 32


def find_converter():
    cache = os.path.expanduser("~/.cache/switchyard/llama-cpp-python")
    found = glob.glob(os.path.join(cache, "*", "vendor", "llama.cpp", "convert_hf_to_gguf.py"))
    if not found:
        raise SystemExit("no llama.cpp converter: run tools/oracle/make_bench_model.py --fetch-converter once")
    return os.path.dirname(found[0])


CONVERT_WRAPPER = r'''
import sys
root = sys.argv[1]
sys.path.insert(0, root); sys.path.insert(0, root + "/gguf-py")
import conversion.base as base
for cls in [getattr(base, n) for n in dir(base)]:
    if isinstance(cls, type) and hasattr(cls, "get_vocab_base_pre"):
        cls.get_vocab_base_pre = lambda self, tok: "qwen2"
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(root + "/convert_hf_to_gguf.py", run_name="__main__")
'''


def convert(converter, model_dir, out):
    subprocess.run([sys.executable, "-c", CONVERT_WRAPPER, converter, "--outtype", "f32", "--outfile", out, model_dir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def file_fnv(path):
    h = 0xcbf29ce484222325
    data = open(path, "rb").read()
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & ((1 << 64) - 1)
    return f"{h:016x}"


def run_prompts(path, prompts):
    llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True, verbose=False)
    out = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        greedy, gm = [], []
        for _ in range(N_GREEDY):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(logits))
            greedy.append(tok)
            gm.append(round(float(tiny.margins_of(logits)), 5))
            llm.eval([tok])
        seq = ids + greedy[:-1]
        llm.reset()
        llm.eval(seq)
        scores = np.array(llm.scores[:len(seq)], dtype=np.float32)
        out.append({"ids": ids, "greedy": greedy, "greedy_margins": gm,
                    "top1": [int(t) for t in np.argmax(scores, axis=-1)],
                    "top1_margins": [round(float(m), 5) for m in tiny.margins_of(scores)]})
    del llm
    return out


def bench_choices(bench_gguf, tmp):
    r = gguf.GGUFReader(bench_gguf)
    shapes = {t.name: [int(d) for d in t.shape] for t in r.tensors}
    src_types = {t.name: t.tensor_type.name for t in r.tensors}
    out = {"source": os.path.basename(bench_gguf), "tensors": [{"name": n, "dims": shapes[n], "type": src_types[n]}
                                                               for n in shapes], "types": {}}
    for t in BENCH_TYPES:
        dst = os.path.join(tmp, f"bench-{t}.gguf")
        tiny.llama_quantize(bench_gguf, dst, FTYPES[t])
        q = gguf.GGUFReader(dst)
        out["types"][t] = {x.name: x.tensor_type.name for x in q.tensors}
        del q
        os.unlink(dst)
        print(f"bench {t}: {sorted(set(out['types'][t].values()))}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--bench-gguf", help="F16 GGUF of make_bench_model.py, for the Qwen2.5-0.5B type choices")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/fixtures/gguf/quantize-expected.json"))
    args = ap.parse_args()
    converter = find_converter()
    tmp = tempfile.mkdtemp(prefix="sy-quantize-")
    doc = {"format": 1, "oracle": f"llama-cpp-python {llama_cpp.__version__} (convert_hf_to_gguf.py + "
                                  f"llama_model_quantize)", "n_greedy": N_GREEDY, "cases": []}
    if os.path.exists(args.out):
        old = json.load(open(args.out))
        if "bench_choices" in old:
            doc["bench_choices"] = old["bench_choices"]
    converted = {}
    for model, qtype in CASES:
        src = os.path.join(HF, model)
        ours = os.path.join(tmp, f"{model}-{qtype}.gguf")
        subprocess.run([args.switchyard, "quantize", "--no-progress", src, ours, qtype], check=True)
        if model not in converted:
            converted[model] = os.path.join(tmp, f"{model}-conv-f32.gguf")
            convert(converter, src, converted[model])
        ref = os.path.join(tmp, f"{model}-ref-{qtype}.gguf")
        tiny.llama_quantize(converted[model], ref, FTYPES[qtype])
        ours_hash, ours_types = tiny.tensor_hash(ours)
        ref_hash, ref_types = tiny.tensor_hash(ref)
        if sorted(ours_types) != sorted(ref_types):
            print(f"WARNING {model} {qtype}: tensor types differ from llama.cpp's")
        expected = json.load(open(os.path.join(src, "expected.json")))
        prompts = [p["ids"] for p in expected["prompts"]]
        case = {"model": model, "type": qtype, "file_fnv1a64": file_fnv(ours), "file_size": os.path.getsize(ours),
                "tensor_hash": ours_hash, "llama_cpp_tensor_hash": ref_hash,
                "tensor_types": {n: t for n, t in ours_types}, "prompts": run_prompts(ours, prompts)}
        print(f"{model} {qtype}: tensors {'==' if ours_hash == ref_hash else '!='} llama.cpp's pipeline, "
              f"{os.path.getsize(ours)} bytes")
        doc["cases"].append(case)
    if args.bench_gguf:
        doc["bench_choices"] = bench_choices(args.bench_gguf, tmp)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
