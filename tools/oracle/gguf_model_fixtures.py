#!/usr/bin/env python3
"""Tiny llama / qwen2 / qwen3 GGUF models and llama.cpp's outputs on them, for tests/gguf/test_gguf_models.c.

The models have widths that are multiples of 256, so every K-quant applies without fallback: hidden 256, 4 heads
(qwen3: head_dim 128), 2 KV heads, feed-forward 512, 2 layers, the 512-token byte-level BPE vocabulary of
tests/fixtures/hf/qwen2-tied-f32 (qwen2 pre-tokenizer). qwen2 has q/k/v biases and tied embeddings, qwen3 has
q/k norms and tied embeddings, llama has a separate output matrix.

Weights come from a generator the C test repeats exactly, so only metadata is committed:
  splitmix64 (seed from the JSON), one stream over the tensors in the order listed in the JSON, element by element;
  u = next() >> 40; matrices: (u % 4095 - 2047) * 2^-(shift + 6) (shift per tensor, in the JSON); norm weights:
  1 + (u % 257 - 128) / 1024; biases: (u % 257 - 128) / 1024. Every matrix value is exact in f16 (11 significant
  bits), so the F16 file holds exactly the generator's numbers. Matrices are stored F16, vectors F32. The values
  are fine-grained on purpose: weights on a coarse grid make many activations land exactly on a rounding tie of
  the 8-bit activation quantization, where the last bit of an f32 sum (which differs between engines) decides.

For each architecture this writes tests/fixtures/gguf/tiny-<arch>-meta.gguf (the model's metadata, no tensors) and
records in tests/fixtures/gguf/tiny-models.json, for the F16 model and llama.cpp's quantizations of it to F32, Q8_0,
Q4_K_M, Q5_K_M and Q6_K (llama_model_quantize, no imatrix):
  - "tensor_hash": FNV-1a 64 over, per tensor in file order, name + NUL + type (u32 LE) + n_dims (u32 LE) + dims
    (u64 LE each) + data bytes. The C test writes the F16 model, quantizes it with `switchyard quantize`, and
    must get the same hashes (the same bytes as llama.cpp);
  - per prompt: llama.cpp's ids (no BOS), 32 greedy tokens with their top-1 margins, and "top1", the argmax at
    every position of prompt + greedy[:-1] evaluated in one batch (logits_all), with margins.
Seeds are tried in order until the F32 and F16 runs have every greedy margin >= MIN_MARGIN, so identical greedy
continuations are a fair demand of an f32 engine (the two engines' f32 logits differ by ~0.001, at most ~0.008).
Quantized files cannot demand that: both engines round activations to 8 bits before each quantized product, and
the last-bit differences of two f32 engines flip some of those roundings, which moves logits by ~0.03 (Q8_0) to
~0.06 (K-quants) on average and up to ~0.35 on these random 2-layer models, whose top-2 gaps are often smaller.
The C test therefore compares quantized files where llama.cpp's margin exceeds that noise (see there).

    python3 tools/oracle/gguf_model_fixtures.py            # needs llama-cpp-python and gguf
"""
import argparse
import ctypes
import json
import os
import struct
import tempfile

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_DIR = os.path.join(ROOT, "tests/fixtures/hf/qwen2-tied-f32")
OUT_DIR = os.path.join(ROOT, "tests/fixtures/gguf")
PROMPTS = [
    "The switchyard moves trains",
    "Weights live in files that are mapped into memory, never copied, so loading a model costs almost nothing.",
    "What is 12 + 345?",
    "a",
]
N_GREEDY = 32
MIN_MARGIN = 0.01  # F32 / F16: every greedy step's top-2 gap at least this
QUANT_TYPES = {"F32": 0, "Q8_0": 7, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15

ARCHS = {
    "llama": dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=2, tied=False, qkv_bias=False,
                  qk_norm=False),
    "qwen2": dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=2, tied=True, qkv_bias=True,
                  qk_norm=False),
    "qwen3": dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=128, n_ff=512, n_layer=2, tied=True, qkv_bias=False,
                  qk_norm=True),
}


def splitmix_stream(seed, start, n):
    """The values next() returns for calls start+1 .. start+n of a splitmix64 seeded with `seed`."""
    with np.errstate(over="ignore"):
        i = np.arange(start + 1, start + n + 1, dtype=np.uint64)
        z = np.uint64(seed) + i * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def tensor_list(cfg):
    """(name, dims (ggml order), kind, shift) in generation order: llama.cpp's order."""
    e, hd, nh, nkv, ff = cfg["n_embd"], cfg["head_dim"], cfg["n_head"], cfg["n_head_kv"], cfg["n_ff"]
    out = []
    if not cfg["tied"]:
        out.append(("output.weight", [e, 512], "matrix", 7))
    out.append(("output_norm.weight", [e], "norm", 0))
    out.append(("token_embd.weight", [e, 512], "matrix", 7))
    for layer in range(cfg["n_layer"]):
        blk = []
        blk.append(("attn_norm.weight", [e], "norm", 0))
        blk.append(("attn_q.weight", [e, nh * hd], "matrix", 8))
        blk.append(("attn_k.weight", [e, nkv * hd], "matrix", 8))
        blk.append(("attn_v.weight", [e, nkv * hd], "matrix", 8))
        blk.append(("attn_output.weight", [nh * hd, e], "matrix", 9 if nh * hd > 256 else 8))
        if cfg["qkv_bias"]:
            blk += [("attn_q.bias", [nh * hd], "bias", 0), ("attn_k.bias", [nkv * hd], "bias", 0),
                    ("attn_v.bias", [nkv * hd], "bias", 0)]
        if cfg["qk_norm"]:
            blk += [("attn_q_norm.weight", [hd], "norm", 0), ("attn_k_norm.weight", [hd], "norm", 0)]
        blk.append(("ffn_norm.weight", [e], "norm", 0))
        blk.append(("ffn_gate.weight", [e, ff], "matrix", 8))
        blk.append(("ffn_up.weight", [e, ff], "matrix", 8))
        blk.append(("ffn_down.weight", [ff, e], "matrix", 9))
        blk.sort(key=lambda t: t[0])
        out += [(f"blk.{layer}.{n}", d, k, s) for n, d, k, s in blk]
    return out


def generate(seed, tensors):
    pos = 0
    arrays = {}
    for name, dims, kind, shift in tensors:
        n = int(np.prod(dims))
        u = splitmix_stream(seed, pos, n) >> np.uint64(40)
        pos += n
        if kind == "matrix":
            v = ((u % np.uint64(4095)).astype(np.int64) - 2047).astype(np.float32) * np.float32(2.0 ** -(shift + 6))
            arrays[name] = v.astype(np.float16).reshape(list(reversed(dims)))
            assert np.array_equal(arrays[name].astype(np.float32), v.reshape(list(reversed(dims))))
        else:
            v = ((u % np.uint64(257)).astype(np.int64) - 128).astype(np.float32) / np.float32(1024)
            if kind == "norm":
                v = v + np.float32(1)
            arrays[name] = v.astype(np.float32)
    return arrays


def tokenizer_lists():
    tok = json.load(open(os.path.join(TOKENIZER_DIR, "tokenizer.json")))
    vocab, added = tok["model"]["vocab"], tok["added_tokens"]
    n = 512
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for text, i in vocab.items():
        tokens[i], types[i] = text, gguf.TokenType.NORMAL
    for a in added:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    template = json.load(open(os.path.join(TOKENIZER_DIR, "tokenizer_config.json")))["chat_template"]
    return tokens, types, merges, template


def add_metadata(w, arch, cfg):
    tokens, types, merges, template = tokenizer_lists()
    w.add_name(f"switchyard tiny {arch} (random weights)")
    w.add_context_length(512)
    w.add_embedding_length(cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_feed_forward_length(cfg["n_ff"])
    w.add_head_count(cfg["n_head"])
    w.add_head_count_kv(cfg["n_head_kv"])
    if cfg["head_dim"] * cfg["n_head"] != cfg["n_embd"]:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(500)
    w.add_eos_token_id(502)
    w.add_pad_token_id(500)
    w.add_add_bos_token(False)
    w.add_chat_template(template)


def write_model(path, arch, cfg, arrays, tensors, with_tensors=True):
    w = gguf.GGUFWriter(path, arch)
    add_metadata(w, arch, cfg)
    if with_tensors:
        for name, dims, kind, shift in tensors:
            w.add_tensor(name, arrays[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensor_hash(path):
    r = gguf.GGUFReader(path)
    h = 0xcbf29ce484222325
    for t in r.tensors:
        blob = t.name.encode() + b"\0" + struct.pack("<II", int(t.tensor_type), len(t.shape))
        blob += b"".join(struct.pack("<Q", int(d)) for d in t.shape)
        blob += np.asarray(t.data).tobytes()
        for b in blob:
            h = ((h ^ b) * 0x100000001b3) & MASK
    return f"{h:016x}", [(t.name, t.tensor_type.name) for t in r.tensors]


def llama_quantize(src, dst, ftype):
    import llama_cpp  # imported here: kquant_fixtures.py uses the generator without llama-cpp-python
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {dst}: {rc}")


def margins_of(scores):
    top2 = np.sort(scores, axis=-1)[..., -2:]
    return (top2[..., 1] - top2[..., 0]).astype(float)


def run_model(path):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True, verbose=False)
    out = []
    for text in PROMPTS:
        ids = llm.tokenize(text.encode(), add_bos=False, special=False)
        llm.reset()
        llm.eval(ids)
        greedy, gm = [], []
        for _ in range(N_GREEDY):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(logits))
            greedy.append(tok)
            gm.append(float(margins_of(logits)))
            llm.eval([tok])
        seq = ids + greedy[:-1]
        llm.reset()
        llm.eval(seq)
        scores = np.array(llm.scores[:len(seq)], dtype=np.float32)
        out.append({"text": text, "ids": ids, "greedy": greedy, "greedy_margins": [round(m, 5) for m in gm],
                    "top1": [int(t) for t in np.argmax(scores, axis=-1)],
                    "top1_margins": [round(float(m), 5) for m in margins_of(scores)]})
    del llm
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=OUT_DIR)
    ap.add_argument("--only", choices=list(ARCHS))
    args = ap.parse_args()
    import llama_cpp
    fixture_path = os.path.join(args.out_dir, "tiny-models.json")
    doc = {"format": 1, "oracle": f"llama-cpp-python {llama_cpp.__version__}", "n_greedy": N_GREEDY,
           "min_margin": MIN_MARGIN, "models": {}}
    if args.only and os.path.exists(fixture_path):
        doc["models"] = json.load(open(fixture_path))["models"]
    tmp = tempfile.mkdtemp(prefix="sy-tiny-")
    for arch, cfg in ARCHS.items():
        if args.only and arch != args.only:
            continue
        tensors = tensor_list(cfg)
        for seed in range(1, 400):
            arrays = generate(seed, tensors)
            f16 = os.path.join(tmp, f"tiny-{arch}-F16.gguf")
            write_model(f16, arch, cfg, arrays, tensors)
            files = {"F16": f16}
            for t, ft in QUANT_TYPES.items():
                files[t] = os.path.join(tmp, f"tiny-{arch}-{t}.gguf")
                llama_quantize(f16, files[t], ft)
            runs, why = {}, None
            for t in ["F32", "F16"]:
                runs[t] = run_model(files[t])
                worst = min(min(p["greedy_margins"]) for p in runs[t])
                if worst < MIN_MARGIN:
                    why = f"{t} greedy margin {worst:.4f} < {MIN_MARGIN}"
                    break
            if why is None:
                break
            print(f"{arch} seed {seed}: {why}; next seed")
        for t in ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]:
            runs[t] = run_model(files[t])
        model = {"seed": seed, "config": cfg,
                 "tensors": [{"name": n, "dims": d, "kind": k, "shift": s} for n, d, k, s in tensors],
                 "files": {}}
        for t in ["F16", "F32", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]:
            h, types = tensor_hash(files[t])
            model["files"][t] = {"tensor_hash": h, "size": os.path.getsize(files[t]),
                                 "tensor_types": {n: ty for n, ty in types}, "prompts": runs[t]}
            agree = sum(a == b for p, q in zip(runs[t], runs["F32"]) for a, b in zip(p["top1"], q["top1"]))
            total = sum(len(p["top1"]) for p in runs[t])
            print(f"{arch} seed {seed} {t}: hash {h}, top-1 vs F32 {agree}/{total}")
        doc["models"][arch] = model
        write_model(os.path.join(args.out_dir, f"tiny-{arch}-meta.gguf"), arch, cfg, None, tensors, with_tensors=False)
    with open(fixture_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {fixture_path}")


if __name__ == "__main__":
    main()
