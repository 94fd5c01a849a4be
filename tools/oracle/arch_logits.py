#!/usr/bin/env python3
"""Records llama.cpp's logits for stories260K and for two synthetic variants of it that exercise the other rows of
the transformer core's architecture table, as the oracle of tests/common/test_stories260k.c:

  llama  the file as it is (normal RoPE, no biases);
  qwen2  the same weights under general.architecture = qwen2 (neox RoPE) plus q/k/v biases;
  qwen3  the same weights under qwen3 (neox RoPE) plus per-head q/k RMSNorm weights.

The added tensors follow closed formulas with values exactly representable in F32, so the C test builds the very
same files in memory (see arch_variant_value() there; keep the two in step):

  blk.L.attn_{q,k,v}.bias[i]        = ((i * 7 + L * 13 + salt) % 17 - 8) / 64     salt q=0 k=1 v=2
  blk.L.attn_{q,k}_norm.weight[i]   = 1 + ((i * 5 + L * 3 + salt) % 9 - 4) / 16   salt q=0 k=1

Oracle: llama-cpp-python (its bundled llama.cpp, CPU, F32 weights, F32 KV cache). Dev-time only:

    pip install llama-cpp-python gguf
    python3 tools/oracle/arch_logits.py --model tests/fixtures/stories260K/stories260K.gguf \
        --out tests/fixtures/stories260K/arch-logits.json
"""
import argparse
import json
import os
import tempfile

import numpy as np
import gguf
import llama_cpp
from llama_cpp import Llama

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside"
N_TOKENS = 16
POSITIONS = [0, 7, 15]


def bias(layer, i, salt):
    return ((i * 7 + layer * 13 + salt) % 17 - 8) / 64.0


def norm(layer, i, salt):
    return 1.0 + ((i * 5 + layer * 3 + salt) % 9 - 4) / 16.0


def field_value(field):
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        et = field.types[1]
        if et == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data], t, et
        return [field.parts[i][0].item() for i in field.data], t, et
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), t, None
    return field.parts[field.data[0]][0].item(), t, None


def write_variant(reader, arch, path):
    w = gguf.GGUFWriter(path, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, vtype, etype = field_value(field)
        key = arch + name[len("llama"):] if name.startswith("llama.") else name
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, vtype, sub_type=etype)
        else:
            w.add_key_value(key, value, vtype)
    n_layer = reader.fields["llama.block_count"].parts[-1][0].item()
    tensors = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
        w.add_tensor(t.name, np.array(t.data, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)]))
    for layer in range(n_layer):
        if arch == "qwen2":
            for salt, part in enumerate("qkv"):
                rows = int(tensors[f"blk.{layer}.attn_{part}.weight"].shape[1])
                values = np.array([bias(layer, i, salt) for i in range(rows)], dtype=np.float32)
                w.add_tensor(f"blk.{layer}.attn_{part}.bias", values)
        if arch == "qwen3":
            head_dim = 8
            for salt, part in enumerate("qk"):
                values = np.array([norm(layer, i, salt) for i in range(head_dim)], dtype=np.float32)
                w.add_tensor(f"blk.{layer}.attn_{part}_norm.weight", values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def logits_of(path, tokens):
    # F32 KV cache (llama.cpp defaults to F16), like the transformer core, so only summation order differs.
    llm = Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, n_threads=2, verbose=False,
                type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.eval(tokens)
    scores = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    return {str(p): [float(f"{x:.6g}") for x in scores[p]] for p in POSITIONS}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.model)
    vocab = Llama(model_path=args.model, vocab_only=True, verbose=False)
    tokens = vocab.tokenize(PROMPT.encode(), add_bos=True)[:N_TOKENS]
    doc = {
        "oracle": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp CPU, F32 weights and KV cache)",
        "tokens": tokens,
        "archs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("llama", "qwen2", "qwen3"):
            path = args.model if arch == "llama" else os.path.join(tmp, f"{arch}.gguf")
            if arch != "llama":
                write_variant(reader, arch, path)
            doc["archs"][arch] = logits_of(path, tokens)
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
