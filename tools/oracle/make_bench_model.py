#!/usr/bin/env python3
"""Generate a Qwen2.5-0.5B-shaped checkpoint with random BF16 weights for benchmarks (not committed: ~1 GB).

The shapes, names, dtype and tokenizer are those of Qwen2.5-0.5B-Instruct (hidden 896, 24 layers, 14 heads,
2 KV heads, intermediate 4864, vocab 151936, tied embeddings), so load time, memory and tokens per second measure
what the real model would cost; the text it writes is noise. The tokenizer is the real Qwen one from
/work/shared/tokenizers/qwen3 (the Qwen2.5 BPE vocabulary plus Qwen3's added tokens).

With --gguf it also writes an F16 GGUF of the same weights for the GGUF plugin and llama.cpp comparisons:
through llama.cpp's own convert_hf_to_gguf.py when one is found (--llama-cpp DIR, or the copy inside the
llama-cpp-python source package, fetched with pip into a cache by --fetch-converter), otherwise with the `gguf`
package's GGUFWriter directly (the same metadata keys and tensor names llama.cpp's converter writes for qwen2).

Without torch (or with --numpy) the checkpoint is written with numpy alone: the same tensors, names and config,
drawn as transformers' init draws them (normal, std 0.02; norms 1, biases 0) but from numpy's generator, so the
values differ from the torch path's. `switchyard quantize OUT model-q8_0.gguf Q8_0` then makes GGUF files of it.

Usage:
  python3 tools/oracle/make_bench_model.py --out models/bench-qwen2.5-0.5b [--gguf] [--fetch-converter]
         [--layers N | --tiny] [--seed S] [--numpy]
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np

try:  # --numpy needs neither (where no CPU torch wheel can be installed)
    import torch
    import transformers
except ImportError:
    torch = transformers = None

DEFAULT_TOKENIZER_DIR = os.environ.get("SY_QWEN_TOKENIZER_DIR", "/work/shared/tokenizers/qwen3")
CONVERTER_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "switchyard", "llama-cpp-python")

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rms_norm_eps=1e-6,
                  rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
                  use_sliding_window=False)

CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# --tiny: the same vocabulary, tokenizer and architecture in a tiny body (2 layers of width 64), for oracles that
# need many sampled generations with the real 151,936-token vocabulary (llama_cpp_grammar_fixtures.py).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=4096)


def build_checkpoint(out, layers, seed, tokenizer_dir, tiny=False):
    shape = dict(QWEN25_05B, **TINY) if tiny else dict(QWEN25_05B, num_hidden_layers=layers)
    config = transformers.Qwen2Config(**shape)
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(seed)
    # Built directly in BF16: the random init is as good as any, and it halves time and memory.
    torch.set_default_dtype(torch.bfloat16)
    model = transformers.Qwen2ForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=151643, eos_token_id=[151645, 151643], pad_token_id=151643, do_sample=True, temperature=0.7,
        top_p=0.8, top_k=20, repetition_penalty=1.05)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"checkpoint: {out} ({n_params / 1e6:.0f}M parameters, BF16)")


def write_safetensors(path, tensors):
    """A SafeTensors file from (name, dtype string, shape, bytes) tuples, in the order given."""
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for _, _, _, data in tensors:
            f.write(data)


def build_checkpoint_numpy(out, layers, seed, tokenizer_dir, tiny=False):
    """The checkpoint of build_checkpoint without torch: BF16 matrices drawn from N(0, 0.02), norms 1, biases 0."""
    shape = dict(QWEN25_05B, **TINY) if tiny else dict(QWEN25_05B, num_hidden_layers=layers)
    rng = np.random.default_rng(seed)
    h, inter, n_head, n_kv = (shape["hidden_size"], shape["intermediate_size"], shape["num_attention_heads"],
                              shape["num_key_value_heads"])
    head_dim = h // n_head

    def bf16(a):  # round to nearest even, as torch's conversion does
        u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()

    def normal(*dims):
        return ("BF16", dims, bf16(rng.standard_normal(dims, dtype=np.float32) * 0.02))

    def const(value, *dims):
        return ("BF16", dims, bf16(np.full(dims, value, dtype=np.float32)))

    tensors = [("model.embed_tokens.weight",) + normal(shape["vocab_size"], h)]
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight",) + const(1.0, h),
                    (p + "self_attn.q_proj.weight",) + normal(n_head * head_dim, h),
                    (p + "self_attn.q_proj.bias",) + const(0.0, n_head * head_dim),
                    (p + "self_attn.k_proj.weight",) + normal(n_kv * head_dim, h),
                    (p + "self_attn.k_proj.bias",) + const(0.0, n_kv * head_dim),
                    (p + "self_attn.v_proj.weight",) + normal(n_kv * head_dim, h),
                    (p + "self_attn.v_proj.bias",) + const(0.0, n_kv * head_dim),
                    (p + "self_attn.o_proj.weight",) + normal(h, n_head * head_dim),
                    (p + "post_attention_layernorm.weight",) + const(1.0, h),
                    (p + "mlp.gate_proj.weight",) + normal(inter, h),
                    (p + "mlp.up_proj.weight",) + normal(inter, h),
                    (p + "mlp.down_proj.weight",) + normal(h, inter)]
    tensors.append(("model.norm.weight",) + const(1.0, h))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    config = dict(shape, architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
                  torch_dtype="bfloat16", head_dim=head_dim)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                   "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    n_params = sum(int(np.prod(t[2])) for t in tensors)
    print(f"checkpoint: {out} ({n_params / 1e6:.0f}M parameters, BF16, numpy)")


# ---- GGUF through llama.cpp's converter ----

def fetch_converter():
    """Fetch llama-cpp-python's source package with pip and unpack llama.cpp's converter with the Python it
    imports (conversion/, gguf-py/). Returns the unpacked llama.cpp directory, or None."""
    os.makedirs(CONVERTER_CACHE, exist_ok=True)
    marker = os.path.join(CONVERTER_CACHE, "unpacked")
    if os.path.exists(marker):
        with open(marker) as f:
            return f.read().strip() or None
    subprocess.run([sys.executable, "-m", "pip", "download", "llama-cpp-python", "--no-deps", "--no-binary",
                    ":all:", "-d", CONVERTER_CACHE], check=True)
    sdists = sorted(glob.glob(os.path.join(CONVERTER_CACHE, "llama_cpp_python-*.tar.gz")))
    if not sdists:
        return None
    with tarfile.open(sdists[-1]) as tar:
        wanted = [m for m in tar.getmembers()
                  if m.name.endswith("/vendor/llama.cpp/convert_hf_to_gguf.py")
                  or "/vendor/llama.cpp/conversion/" in m.name or "/vendor/llama.cpp/gguf-py/" in m.name]
        tar.extractall(CONVERTER_CACHE, members=wanted, filter="data")
    found = glob.glob(os.path.join(CONVERTER_CACHE, "*", "vendor", "llama.cpp", "convert_hf_to_gguf.py"))
    result = os.path.dirname(found[0]) if found else None
    with open(marker, "w") as f:
        f.write(result or "")
    return result


def convert_with_llama_cpp(llama_cpp_dir, checkpoint, outfile):
    script = os.path.join(llama_cpp_dir, "convert_hf_to_gguf.py")
    env = dict(os.environ)
    gguf_py = os.path.join(llama_cpp_dir, "gguf-py")
    if os.path.isdir(gguf_py):  # the converter wants the gguf-py of its own version
        env["PYTHONPATH"] = gguf_py + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, script, checkpoint, "--outtype", "f16", "--outfile", outfile]
    print("gguf: " + " ".join(cmd))
    return subprocess.run(cmd, env=env).returncode == 0


# ---- GGUF with the gguf package directly ----

def tokenizer_vocab(checkpoint, vocab_size):
    import gguf
    with open(os.path.join(checkpoint, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    tokens = [None] * vocab_size
    types = [gguf.TokenType.UNUSED] * vocab_size
    for text, idx in tok["model"]["vocab"].items():
        if idx < vocab_size:
            tokens[idx], types[idx] = text, gguf.TokenType.NORMAL
    for added in tok.get("added_tokens", []):
        idx = added["id"]
        if idx < vocab_size:
            tokens[idx] = added["content"]
            types[idx] = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"  # rows of the embedding no token uses, named as llama.cpp names them
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    return tokens, types, merges


def convert_with_gguf_writer(checkpoint, outfile):
    import gguf
    from safetensors import safe_open
    with open(os.path.join(checkpoint, "config.json")) as f:
        cfg = json.load(f)
    n_layers = cfg["num_hidden_layers"]
    writer = gguf.GGUFWriter(outfile, "qwen2")
    writer.add_name("switchyard bench qwen2.5-0.5b-shaped (random weights)")
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    rope = cfg.get("rope_parameters") or {}
    writer.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, types, merges = tokenizer_vocab(checkpoint, cfg["vocab_size"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(cfg["bos_token_id"])
    writer.add_eos_token_id(cfg["eos_token_id"])
    writer.add_pad_token_id(cfg["bos_token_id"])
    writer.add_add_bos_token(False)
    with open(os.path.join(checkpoint, "tokenizer_config.json"), encoding="utf-8") as f:
        writer.add_chat_template(json.load(f).get("chat_template") or CHATML_TEMPLATE)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, n_layers)
    shard_files = sorted(glob.glob(os.path.join(checkpoint, "*.safetensors")))
    for path in shard_files:
        with safe_open(path, framework="pt") as st:
            for name in st.keys():
                gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
                if gguf_name is None:
                    raise SystemExit(f"gguf: no GGUF name for tensor {name}")
                t = st.get_tensor(name).float()
                # as llama.cpp's converter does: matrices in F16, norms and biases in F32
                arr = t.numpy().astype(np.float16 if t.dim() == 2 else np.float32)
                writer.add_tensor(gguf_name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory of the checkpoint")
    ap.add_argument("--layers", type=int, default=24, help="fewer layers for a quick check (default 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true",
                    help="2 layers of width 64 with the real vocabulary (for oracles, not benchmarks)")
    ap.add_argument("--tokenizer-dir", default=DEFAULT_TOKENIZER_DIR)
    ap.add_argument("--numpy", action="store_true", help="write the checkpoint with numpy (the default without torch)")
    ap.add_argument("--gguf", action="store_true", help="also write OUT/model-f16.gguf")
    ap.add_argument("--llama-cpp", help="a llama.cpp checkout with convert_hf_to_gguf.py")
    ap.add_argument("--fetch-converter", action="store_true",
                    help="pip-download llama-cpp-python's source package for llama.cpp's converter")
    ap.add_argument("--gguf-writer", action="store_true",
                    help="use the gguf package's writer even if a converter exists")
    args = ap.parse_args()
    use_numpy = args.numpy or torch is None
    if not use_numpy:
        torch.set_num_threads(os.cpu_count() or 1)

    if not os.path.exists(os.path.join(args.out, "config.json")):
        build = build_checkpoint_numpy if use_numpy else build_checkpoint
        build(args.out, args.layers, args.seed, args.tokenizer_dir, args.tiny)
    else:
        print(f"checkpoint: {args.out} exists, kept")
    if not args.gguf:
        return
    outfile = os.path.join(args.out, "model-f16.gguf")
    converter = None if args.gguf_writer else (args.llama_cpp or (fetch_converter() if args.fetch_converter else None))
    if converter and convert_with_llama_cpp(converter, args.out, outfile):
        print(f"gguf: {outfile} (llama.cpp converter)")
        return
    if converter:
        print("gguf: llama.cpp's converter failed; writing with the gguf package instead", file=sys.stderr)
    convert_with_gguf_writer(args.out, outfile)
    print(f"gguf: {outfile} (gguf package writer)")


if __name__ == "__main__":
    main()
