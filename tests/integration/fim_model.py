"""A tiny Qwen2 model with the Qwen2.5-Coder / Qwen3 vocabulary (its FIM tokens <|fim_prefix|>, <|fim_suffix|>,
<|fim_middle|>, <|fim_pad|>, <|repo_name|>, <|file_sep|> found by their text, as llama.cpp finds them), with
deterministic pseudo-random weights, turned into a GGUF by `switchyard quantize`.

Used at dev time by tools/oracle/fim_infill.py (llama-server's /infill prompt tokens on this file become
tests/fixtures/fim/qwen-infill.json) and at test time by test_compat.py, which builds the same file and checks
that switchyard's /infill lays out the same tokens. The prompt tokens depend only on the tokenizer, the FIM
tokens and the context size, never on the weights. No dependency beyond the standard library and the `zstd`
command (or the zstandard module).
"""
import array
import json
import os
import shutil
import struct
import subprocess

HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, LAYERS, VOCAB = 16, 2, 1, 32, 1, 151936
HEAD_DIM = HIDDEN // HEADS
N_CTX = 4096  # both servers run with this context (llama-server -c 4096, switchyard ctx_size 4096)


def _decompress(src, dst):
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-d", "-f", src, "-o", dst], check=True)
        return
    import zstandard  # noqa: PLC0415 (only where the command is missing)
    with open(src, "rb") as f, open(dst, "wb") as out:
        out.write(zstandard.ZstdDecompressor().stream_reader(f).read())


def _values(n, salt):
    """n floats in [-0.05, 0.05) from a fixed integer hash: reproducible everywhere, no RNG library."""
    return array.array("f", (((i * 2654435761 + salt * 40503) % 100003) / 100003.0 * 0.1 - 0.05 for i in range(n)))


def _write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, shape, values in tensors:
        data = values.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def build(source_dir, work_dir, switchyard):
    """The GGUF path (built once per work_dir)."""
    out = os.path.join(work_dir, "qwen-fim-tiny.gguf")
    if os.path.exists(out):
        return out
    hf = os.path.join(work_dir, "qwen-fim-tiny-hf")
    os.makedirs(hf, exist_ok=True)
    tok = os.path.join(source_dir, "tests", "fixtures", "tokenizers", "qwen3")
    _decompress(os.path.join(tok, "tokenizer.json.zst"), os.path.join(hf, "tokenizer.json"))
    shutil.copy(os.path.join(tok, "tokenizer_config.json"), os.path.join(hf, "tokenizer_config.json"))
    config = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "tie_word_embeddings": True, "vocab_size": VOCAB, "torch_dtype": "float32",
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
    }
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    kv = KV_HEADS * HEAD_DIM
    tensors = [("model.embed_tokens.weight", [VOCAB, HIDDEN], _values(VOCAB * HIDDEN, 1)),
               ("model.norm.weight", [HIDDEN], array.array("f", [1.0] * HIDDEN))]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        shapes = [("self_attn.q_proj.weight", [HIDDEN, HIDDEN]), ("self_attn.q_proj.bias", [HIDDEN]),
                  ("self_attn.k_proj.weight", [kv, HIDDEN]), ("self_attn.k_proj.bias", [kv]),
                  ("self_attn.v_proj.weight", [kv, HIDDEN]), ("self_attn.v_proj.bias", [kv]),
                  ("self_attn.o_proj.weight", [HIDDEN, HIDDEN]), ("mlp.gate_proj.weight", [INTERMEDIATE, HIDDEN]),
                  ("mlp.up_proj.weight", [INTERMEDIATE, HIDDEN]), ("mlp.down_proj.weight", [HIDDEN, INTERMEDIATE])]
        for k, (name, shape) in enumerate(shapes):
            n = 1
            for d in shape:
                n *= d
            tensors.append((p + name, shape, _values(n, 10 + k)))
        tensors.append((p + "input_layernorm.weight", [HIDDEN], array.array("f", [1.0] * HIDDEN)))
        tensors.append((p + "post_attention_layernorm.weight", [HIDDEN], array.array("f", [1.0] * HIDDEN)))
    _write_safetensors(os.path.join(hf, "model.safetensors"), tensors)
    tmp = out + ".tmp"
    subprocess.run([switchyard, "quantize", hf, tmp, "F16"], check=True, capture_output=True)
    os.replace(tmp, out)
    return out


# The /infill requests of the comparison: plain, with other files and a prompt, a prefix and suffix longer than
# llama-server's budget (3/4 and 1/4 of its 2048-token batch), and text that is not ASCII.
CASES = [
    {"input_prefix": "def fib(n):\n    ", "input_suffix": "\n    return a\n"},
    {"input_prefix": "import os\n\ndef main():\n", "input_suffix": "\nif __name__ == '__main__':\n    main()\n",
     "input_extra": [{"filename": "util.py", "text": "def helper(x):\n    return x * 2\n"},
                     {"text": "# notes without a file name\n"}],
     "prompt": "    path = "},
    {"input_prefix": "".join(f"x{i} = {i} * {i}\n" for i in range(700)),
     "input_suffix": "".join(f"y{i} = {i}\n" for i in range(400))},
    {"input_prefix": "// Größe und Länge: ", "input_suffix": " // 終わり 🚀\n", "input_extra": []},
]
