#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face checkpoints and their transformers outputs as test fixtures.

Writes tests/fixtures/hf/<name>/ for each model below: config.json, generation_config.json, model.safetensors (or
shards + model.safetensors.index.json), tokenizer.json, tokenizer_config.json, and expected.json with what
transformers computes for fixed prompts (see tools/oracle/README.md for the schema).

Weights are random but seeded; the models are built by transformers' own classes, so tensor names, shapes and
the math are exactly what real checkpoints of these architectures use. Logits are computed in float32 from the
stored weights (a BF16 checkpoint is upcast first), which is what switchyard's CPU engine computes as well.

Usage: python3 tools/oracle/make_hf_models.py [--out tests/fixtures/hf] [--only NAME ...]
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

VOCAB_SIZE = 512          # rows of the embedding; the tokenizer uses fewer, like real Qwen checkpoints do
TOKENIZER_VOCAB = 500     # byte-level BPE tokens learned from TRAINING_TEXT (256 bytes + merges)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 500, 501, 502
GREEDY_NEW_TOKENS = 32
MIN_GREEDY_MARGIN = 1e-3  # logit gap between the best and second-best token at every greedy step
SEED_TRIES = 20

# Qwen2's pre-tokenizer split pattern (the one in its tokenizer.json), so the tiny tokenizer has the same shape.
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    " + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

TRAINING_TEXT = """\
The switchyard moves trains from one track to another, and a model server moves requests from one model to another.
A small model answers quickly; a large model answers well. The host keeps both warm when memory allows it.
Tokens are pieces of text: words, parts of words, spaces and punctuation. Numbers like 12, 345 and 6789 are split
into single digits. Code has its own shapes: def main(): return 0, for (int i = 0; i < n; i++) { sum += x[i]; }
Weights live in files that are mapped into memory, never copied, so loading a model costs almost nothing.
The cache of keys and values grows with every token; it can be saved, compressed and restored after a restart.
Attention looks back at every earlier position; the feed-forward block mixes features; the norm keeps scales sane.
Rotary embeddings turn each pair of features by an angle that grows with the position in the sequence.
Greedy decoding takes the most likely token each step, which makes the output a pure function of the weights.
Café, naïve, façade; 東京 and 北京; emoji such as 🙂 are bytes too, and byte-level merges handle them all.
Questions and answers: What is the capital of France? Paris. How many legs has a spider? Eight.
"""

PROMPT_TEXTS = [
    "The switchyard moves trains",
    "Weights live in files that are mapped into memory, never copied, so loading a model costs almost nothing.",
    "What is 12 + 345?",
]
# Prompt whose every position's logits are recorded (index into PROMPT_TEXTS).
ALL_POSITIONS_PROMPT = 1

# name -> (transformers class name, config overrides, weight dtype, seed, save options)
MODELS = {
    "qwen2-tied-f32": ("Qwen2", dict(tie_word_embeddings=True), torch.float32, 11, {}),
    "qwen2-untied-bf16": ("Qwen2", dict(tie_word_embeddings=False), torch.bfloat16, 12, {}),
    "qwen3-f32": ("Qwen3", dict(tie_word_embeddings=False, head_dim=32), torch.float32, 13, {}),
    "qwen3-tied-bf16": ("Qwen3", dict(tie_word_embeddings=True, head_dim=32), torch.bfloat16, 14, {}),
    "llama-gqa-f32-sharded": ("Llama", dict(num_hidden_layers=3, tie_word_embeddings=False), torch.float32, 15,
                              dict(max_shard_size="200KB")),
    "lfm2-f32": ("Lfm2", dict(num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "full_attention"],
                              block_multiple_of=32, tie_word_embeddings=True), torch.float32, 16, {}),
}

BASE_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=VOCAB_SIZE, max_position_embeddings=256, rms_norm_eps=1e-6,
                   rope_theta=10000.0)


def build_tokenizer(out_dir):
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(TRAINING_TEXT.splitlines(), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    assert tok.get_vocab_size() <= VOCAB_SIZE
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        unk_token=None, clean_up_tokenization_spaces=False, model_max_length=BASE_CONFIG["max_position_embeddings"])
    fast.save_pretrained(out_dir)
    # The chat template goes inside tokenizer_config.json, where Qwen's published checkpoints keep it.
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path) as f:
        tok_config = json.load(f)
    tok_config["chat_template"] = CHAT_TEMPLATE
    with open(config_path, "w") as f:
        json.dump(tok_config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return fast


def reinit_weights(model, seed, tied):
    """Replace transformers' small default init with one that makes every parameter matter to the logits:
    activations O(1), norm weights away from 1, non-zero biases. A forward pass that skips a norm weight, a bias
    or a rotation then disagrees visibly with these fixtures.

    With tied embeddings the input token's own embedding dominates the logits unless the layers outweigh it
    (greedy decoding then repeats one token forever), so tied models get smaller embeddings and stronger
    residual branches."""
    emb_std, branch_gain = (0.3, 3.0) if tied else (1.0, 1.0)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif p.dim() == 1:  # biases
                p.copy_(0.2 * noise)
            elif "embed_tokens" in name:
                p.copy_(emb_std * noise)
            else:  # linear [out, in] and lfm2's depthwise conv [hidden, 1, L]
                fan_in = p.shape[-1] if p.dim() == 2 else p.shape[-1] * p.shape[-2]
                residual_branch_out = any(k in name for k in ("o_proj", "down_proj", "out_proj", "feed_forward.w2"))
                p.copy_((branch_gain if residual_branch_out else 1.0) * noise / math.sqrt(fan_in))


def make_config(family, overrides, tokenizer):
    cls = getattr(transformers, family + "Config")
    kwargs = dict(BASE_CONFIG)
    kwargs.update(overrides)
    specials = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    kwargs.update(bos_token_id=specials["<|endoftext|>"], eos_token_id=specials["<|endoftext|>"],
                  pad_token_id=specials["<|endoftext|>"])
    if family == "Lfm2":
        kwargs["norm_eps"] = kwargs.pop("rms_norm_eps")
        kwargs.pop("rope_theta")
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
    config = cls(**kwargs)
    config.architectures = [family + "ForCausalLM"]
    return config, specials


def fmt_floats(values):
    # float32 values round-trip through 9 significant digits
    return [float(f"{v:.9g}") for v in values]


def top_k(row, k=5):
    return [int(i) for i in torch.topk(row, k).indices]


def record_expected(model_f32, name, family, weight_dtype, prompts):
    exp = {
        "format": 1,
        "model": name,
        "architecture": family + "ForCausalLM",
        "weights_dtype": {torch.float32: "float32", torch.bfloat16: "bfloat16"}[weight_dtype],
        "compute_dtype": "float32",
        "vocab_size": VOCAB_SIZE,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "prompts": [],
    }
    with torch.no_grad():
        for pi, (text, ids) in enumerate(prompts):
            input_ids = torch.tensor([ids])
            logits = model_f32(input_ids).logits[0].float()
            entry = {"text": text, "ids": ids, "last_logits": fmt_floats(logits[-1].tolist()),
                     "last_top5": top_k(logits[-1])}
            out = model_f32.generate(input_ids, attention_mask=torch.ones_like(input_ids))
            new_tokens = out[0, len(ids):].tolist()
            assert len(new_tokens) == GREEDY_NEW_TOKENS, (name, len(new_tokens))
            # Cross-check generate (incremental, KV cache) against one causal pass over the whole sequence: each
            # new token must be the argmax there too; the margins come from that pass.
            full = model_f32(out).logits[0, len(ids) - 1:-1].float()
            assert full.argmax(-1).tolist() == new_tokens, (name, pi)
            margins = []
            for row in full:
                top2 = torch.topk(row, 2).values
                margins.append(float(f"{float(top2[0] - top2[1]):.6g}"))
            entry["greedy"] = {"max_new_tokens": GREEDY_NEW_TOKENS, "tokens": new_tokens, "top1_margins": margins}
            if pi == ALL_POSITIONS_PROMPT:
                entry["all_logits"] = [fmt_floats(row.tolist()) for row in logits]
                entry["all_top5"] = [top_k(row) for row in logits]
            exp["prompts"].append(entry)
    return exp


def build_model(name, out_root):
    family, overrides, weight_dtype, first_seed, save_opts = MODELS[name]
    out_dir = os.path.join(out_root, name)
    # Random weights can put two candidate tokens within float32 noise of each other, and then any correct
    # engine may pick either. Seeds are tried in a fixed order until every greedy step has a clear winner.
    for seed in range(first_seed, first_seed + 100 * SEED_TRIES, 100):
        exp = build_with_seed(name, family, overrides, weight_dtype, seed, save_opts, out_dir)
        worst = min(min(p["greedy"]["top1_margins"]) for p in exp["prompts"])
        if worst >= MIN_GREEDY_MARGIN:
            break
        print(f"{name}: seed {seed} has a greedy near-tie (margin {worst:.2g}); trying the next seed")
    else:
        raise SystemExit(f"{name}: no seed without greedy near-ties in {SEED_TRIES} tries")
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(exp, f, separators=(",", ":"))
        f.write("\n")
    for n in os.listdir(out_dir):
        os.chmod(os.path.join(out_dir, n), 0o644)
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"{name}: {size / 1024:.0f} KiB in {out_dir} (seed {seed}, smallest greedy margin {worst:.3g})")


def build_with_seed(name, family, overrides, weight_dtype, seed, save_opts, out_dir):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    tokenizer = build_tokenizer(out_dir)
    config, specials = make_config(family, overrides, tokenizer)
    torch.manual_seed(seed)
    model = getattr(transformers, family + "ForCausalLM")(config).eval()
    reinit_weights(model, seed, config.tie_word_embeddings)
    if config.tie_word_embeddings:
        model.tie_weights()
    # The generation config points at ChatML's end of turn and the end of text, like Qwen's instruct models.
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=specials["<|endoftext|>"], eos_token_id=[specials["<|im_end|>"], specials["<|endoftext|>"]],
        pad_token_id=specials["<|endoftext|>"], do_sample=True, temperature=0.7, top_p=0.8, top_k=20,
        repetition_penalty=1.05)
    model.to(weight_dtype)
    model.save_pretrained(out_dir, **save_opts)

    # The oracle runs in float32 on exactly the stored (possibly BF16-rounded) weights, with plain greedy
    # decoding that never stops early (not the sampling settings saved above).
    reloaded = getattr(transformers, family + "ForCausalLM").from_pretrained(out_dir, dtype=torch.float32).eval()
    reloaded.generation_config = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=GREEDY_NEW_TOKENS, eos_token_id=None, pad_token_id=0)
    prompts = [(text, tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROMPT_TEXTS]
    prompts.append(("(single token)", [prompts[0][1][0]]))
    exp = record_expected(reloaded, name, family, weight_dtype, prompts)
    exp["seed"] = seed
    exp["special_tokens"] = specials
    return exp


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "hf"))
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS), help="build only these models")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    names = args.only or list(MODELS)
    if "Lfm2ForCausalLM" not in dir(transformers):
        print("transformers has no Lfm2ForCausalLM; skipping lfm2 fixtures", file=sys.stderr)
        names = [n for n in names if MODELS[n][0] != "Lfm2"]
    for name in names:
        build_model(name, os.path.abspath(args.out))


if __name__ == "__main__":
    main()
