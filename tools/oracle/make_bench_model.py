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

Usage:
  python3 tools/oracle/make_bench_model.py --out models/bench-qwen2.5-0.5b [--gguf] [--fetch-converter]
         [--layers N | --tiny] [--seed S] [--numpy]

--numpy (the default when torch or transformers is not installed) writes the checkpoint without them: the same
tensor names, shapes and BF16 dtype, drawn as transformers initializes Qwen2 (matrices and embedding normal with
std 0.02, biases zero, norms one), and the GGUF with the gguf package's writer (llama.cpp's converter needs torch).
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

try:  # torch and transformers build the checkpoint; without them --numpy writes the same shapes with numpy alone
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


def qwen2_config_json(shape):
    """config.json as transformers writes it for Qwen2ForCausalLM (the keys the plugins and llama.cpp read)."""
    cfg = dict(shape, architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu",
               initializer_range=0.02, attention_dropout=0.0, use_cache=True, torch_dtype="bfloat16",
               max_window_layers=shape["num_hidden_layers"], sliding_window=None)
    return cfg


def qwen2_tensor_shapes(shape):
    h, heads, kv = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    hd = h // heads
    out = [("model.embed_tokens.weight", (shape["vocab_size"], h))]
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (heads * hd, h)), (p + "self_attn.q_proj.bias", (heads * hd,)),
                (p + "self_attn.k_proj.weight", (kv * hd, h)), (p + "self_attn.k_proj.bias", (kv * hd,)),
                (p + "self_attn.v_proj.weight", (kv * hd, h)), (p + "self_attn.v_proj.bias", (kv * hd,)),
                (p + "self_attn.o_proj.weight", (h, heads * hd)),
                (p + "mlp.gate_proj.weight", (shape["intermediate_size"], h)),
                (p + "mlp.up_proj.weight", (shape["intermediate_size"], h)),
                (p + "mlp.down_proj.weight", (h, shape["intermediate_size"]))]
    out.append(("model.norm.weight", (h,)))
    if not shape["tie_word_embeddings"]:
        out.append(("lm_head.weight", (shape["vocab_size"], h)))
    return out


def f32_to_bf16_bits(a):
    """Round to nearest even, as torch's .to(torch.bfloat16) does (the values here are finite)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def build_checkpoint_numpy(out, layers, seed, tokenizer_dir, tiny=False):
    shape = dict(QWEN25_05B, **TINY) if tiny else dict(QWEN25_05B, num_hidden_layers=layers)
    tensors = sorted(qwen2_tensor_shapes(shape))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dims in tensors:
        size = 2 * int(np.prod(dims))
        header[name] = {"dtype": "BF16", "shape": list(dims), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(len(blob).to_bytes(8, "little") + blob)
        for name, dims in tensors:
            if name.endswith("norm.weight"):
                values = np.ones(dims, np.float32)
            elif name.endswith(".bias"):
                values = np.zeros(dims, np.float32)
            else:
                values = rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)
            f.write(f32_to_bf16_bits(values).tobytes())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(qwen2_config_json(shape), f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
                   "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
                  f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    n_params = sum(int(np.prod(d)) for _, d in tensors)
    print(f"checkpoint: {out} ({n_params / 1e6:.0f}M parameters, BF16, numpy)")


def read_safetensors_f32(path):
    """(name, float32 array) for each tensor of a safetensors file, with numpy alone (BF16, F16, F32)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, t in header.items():
        if name == "__metadata__":
            continue
        raw = data[t["data_offsets"][0]:t["data_offsets"][1]]
        if t["dtype"] == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            arr = raw.view(np.float16).astype(np.float32)
        elif t["dtype"] == "F32":
            arr = np.array(raw.view(np.float32))
        else:
            raise SystemExit(f"gguf: tensor {name} has dtype {t['dtype']}; BF16, F16 or F32 expected")
        yield name, arr.reshape(t["shape"])


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
        for name, t in read_safetensors_f32(path):
            gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if gguf_name is None:
                raise SystemExit(f"gguf: no GGUF name for tensor {name}")
            # as llama.cpp's converter does: matrices in F16, norms and biases in F32
            writer.add_tensor(gguf_name, t.astype(np.float16 if t.ndim == 2 else np.float32))
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
    ap.add_argument("--gguf", action="store_true", help="also write OUT/model-f16.gguf")
    ap.add_argument("--llama-cpp", help="a llama.cpp checkout with convert_hf_to_gguf.py")
    ap.add_argument("--fetch-converter", action="store_true",
                    help="pip-download llama-cpp-python's source package for llama.cpp's converter")
    ap.add_argument("--gguf-writer", action="store_true",
                    help="use the gguf package's writer even if a converter exists")
    ap.add_argument("--numpy", action="store_true",
                    help="write the checkpoint with numpy instead of torch/transformers (default without them)")
    args = ap.parse_args()
    use_numpy = args.numpy or torch is None or transformers is None

    if not os.path.exists(os.path.join(args.out, "config.json")):
        if use_numpy:
            build_checkpoint_numpy(args.out, args.layers, args.seed, args.tokenizer_dir, args.tiny)
        else:
            torch.set_num_threads(os.cpu_count() or 1)
            build_checkpoint(args.out, args.layers, args.seed, args.tokenizer_dir, args.tiny)
    else:
        print(f"checkpoint: {args.out} exists, kept")
    if not args.gguf:
        return
    outfile = os.path.join(args.out, "model-f16.gguf")
    # llama.cpp's converter imports torch
    converter = None if args.gguf_writer or torch is None else (args.llama_cpp or (fetch_converter() if args.fetch_converter else None))
    if converter and convert_with_llama_cpp(converter, args.out, outfile):
        print(f"gguf: {outfile} (llama.cpp converter)")
        return
    if converter:
        print("gguf: llama.cpp's converter failed; writing with the gguf package instead", file=sys.stderr)
    convert_with_gguf_writer(args.out, outfile)
    print(f"gguf: {outfile} (gguf package writer)")


if __name__ == "__main__":
    main()
