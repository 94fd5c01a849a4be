#!/usr/bin/env python3
"""Records llama.cpp's SentencePiece (SPM) tokenization of ~200 varied strings for a GGUF vocabulary, as the
oracle of switchyard's tokenizer_spm tests.

Oracle: llama-cpp-python (its bundled llama.cpp), vocabulary only (no weights are run). Dev-time only:

    pip install llama-cpp-python        # builds llama.cpp from source if no wheel fits (~10 min on 2 cores)
    python3 tools/oracle/spm_fixtures.py \
        --model tests/fixtures/stories260K/stories260K.gguf \
        --out tests/fixtures/stories260K/spm-tokens.json

Output JSON:
    {"oracle": ..., "model": ..., "n_vocab": N,
     "cases": [{"text": str or null, "hex": bytes as hex, "add_special": bool, "parse_special": bool,
                "ids": [...]}, ...],
     "pieces": [hex of llama_token_to_piece(id, special=True) for every id]}
Each string is recorded twice: (add_special, no special parsing) and (no add_special, special parsing).
"""
import argparse
import ctypes
import json
import random

import llama_cpp
from llama_cpp import Llama

HANDWRITTEN = [
    "", " ", "  ", "   ", "\n", "\n\n", "\t", " \t \n ", "a", "A", "I", "hello", "Hello", "Hello world",
    "Hello, world!", "Once upon a time", "Once upon a time, there was a little girl named Lily.",
    " leading space", "trailing space ", "  two leading", "double  space", "triple   space",
    "new\nline", "line one\nline two\n", "tab\tseparated\tvalues", "CRLF\r\nline",
    "She said, \"Let's go!\"", "It's Tom's ball.", "don't can't won't", "(parentheses) [brackets] {braces}",
    "a-b_c.d,e;f:g", "!!!???...", "1234567890", "3.14159", "2024-01-01", "100%", "$5 and 10 cents",
    "email@example.com", "https://example.com/path?q=1&x=2", "C:\\path\\to\\file", "#hashtag @mention",
    "ALL CAPS SENTENCE", "MiXeD cAsE", "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
    "café", "naïve résumé", "über", "Straße", "señor", "ça va", "Ελληνικά", "Русский текст", "日本語",
    "中文字符", "한국어", "עברית", "العربية", "हिन्दी", "😀", "smile 😀 ok", "👍🏽", "🇩🇪", "∑ ∫ √ ∞",
    "€ £ ¥", "—dash–", "“quotes”", "‘single’", "…", "\u00a0nbsp", "zero\u200bwidth", "\u2581", "a\u2581b",
    "▁▁", "<s>", "</s>", "<unk>", "<s>hi", "a<s>b</s>", "<s><s>", "</s> end", "text <unk> text", "<s",
    "s>", "<0x41>", "<0x0A>", "\x00", "a\x00b", "\x01\x02\x03", "\x7f", "~`^|\\",
    "The cat sat on the mat. The dog ran in the park.",
    "Lily and Ben were best friends. They liked to play in the garden.",
    "One day, a big bird flew over the tree and said: \"Hello!\"",
    "Tim was very happy. He smiled and laughed.",
    "x" * 50, "ab" * 40, " " * 20 + "spaces", "z\n" * 10,
]

WORDS = ("the a an and was little big happy sad dog cat ball park tree sun day one two Lily Tom Ben Sue mom dad "
         "play run jump see saw said want wanted help friend friends very too to of in on with it she he they we "
         "you I not but so because then time upon once there red blue green fun toy toys box car").split()
EXTRAS = [",", ".", "!", "?", "'", "\"", ":", ";", "-", "\n", "  ", "é", "ü", "日", "😀", "ß", "ñ", "0", "42",
          "\t", "<s>", "</s>", "(", ")"]


def generated(n, seed=1234):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.7:
                w = rng.choice(WORDS)
                if rng.random() < 0.15:
                    w = w.capitalize()
                parts.append(w)
            else:
                parts.append(rng.choice(EXTRAS))
        sep = rng.choice([" ", " ", " ", "", "  "])
        s = sep.join(parts)
        if rng.random() < 0.2:
            s = " " + s
        out.append(s)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=200)
    args = ap.parse_args()

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    strings = list(HANDWRITTEN)
    strings += generated(max(0, args.count - len(strings)))

    cases = []
    for s in strings:
        b = s.encode("utf-8")
        for add_special, parse_special in ((True, False), (False, True)):
            ids = llm.tokenize(b, add_bos=add_special, special=parse_special)
            cases.append({"text": s, "hex": b.hex(), "add_special": add_special, "parse_special": parse_special,
                          "ids": ids})
    # Invalid UTF-8 byte strings (JSON cannot hold them as text).
    for b in (b"\xff", b"a\xc3", b"\xe2\x96", b"\x80\x80abc", b"ok\xf0\x9f\x98", b"\xc3\xa9\xff\xfe"):
        for add_special, parse_special in ((True, False), (False, True)):
            ids = llm.tokenize(b, add_bos=add_special, special=parse_special)
            cases.append({"text": None, "hex": b.hex(), "add_special": add_special,
                          "parse_special": parse_special, "ids": ids})

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    pieces = []
    buf = ctypes.create_string_buffer(256)
    for t in range(n_vocab):
        n = llama_cpp.llama_token_to_piece(vocab, t, buf, len(buf), 0, True)
        if n < 0:
            raise SystemExit(f"piece of token {t} does not fit")
        pieces.append(buf.raw[:n].hex())

    doc = {
        "oracle": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp SPM tokenizer, vocab_only)",
        "model": args.model.split("/")[-1],
        "n_vocab": n_vocab,
        "cases": cases,
        "pieces": pieces,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, {n_vocab} pieces -> {args.out}")


if __name__ == "__main__":
    main()
