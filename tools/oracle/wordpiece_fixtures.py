#!/usr/bin/env python3
"""Records Hugging Face `tokenizers` encodings of a varied corpus with all-MiniLM-L6-v2's WordPiece tokenizer.json
(BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing), as the oracle of switchyard's WordPiece
(plugins/common/tokenizer_wordpiece.c; tests/common/test_tokenizer_wordpiece.c).

Dev-time only:

    pip install tokenizers zstandard
    python3 tools/oracle/wordpiece_fixtures.py --tokenizer "$SY_MINILM_DIR/tokenizer.json" \
        --out tests/fixtures/tokenizers/minilm

Writes tokenizer.json.zst (the file itself, compressed) and wordpiece_cases.json.zst:
    {"oracle": "tokenizers X.Y.Z", "cases": [{"hex": UTF-8 of s in hex (it may hold U+0000), "special": ids with
     [CLS]/[SEP], "plain": ids without}, ...], "pairs": [{"a": hex, "b": hex, "ids": [...], "types": [...]}, ...]}
The corpus (seeded, so reruns give the same file): sentences in many scripts, accents and combining marks, CJK,
punctuation of every kind, control and zero-width characters, odd whitespace, special-token text inside words,
words longer than max_input_chars_per_word, characters no piece covers (emoji, rare scripts), and random mixes.
"""
import argparse
import json
import os
import random

import tokenizers
import zstandard

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.", "A man is riding a horse.", "Two dogs are playing in the snow!",
    "How do I reset my password?", "Embeddings map text to vectors; similar texts land close together.",
    "Café, naïve, résumé, coöperate, jalapeño, Ångström, façade, Über, smörgåsbord.",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "中文：我爱自然语言处理。今天天气很好！", "日本語：東京は日本の首都です。ひらがなとカタカナ。",
    "한국어: 빠른 갈색 여우가 게으른 개를 뛰어넘습니다.", "العربية: الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "עברית: השועל החום המהיר קופץ מעל הכלב העצלן.", "हिन्दी: तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "ไทย: สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ", "Tiếng Việt: Con cáo nâu nhanh nhẹn nhảy qua con chó lười.",
    "Emoji 😀🚀🎉 and symbols ★☆♠♣ © ® ™ € £ ¥ § ¶ † ‡ • … ‰ ′ ″",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = ∫ f(x) dx ≈ 3.14159 ± 0.001 → ∞",
    "Code: def f(x): return x**2 + 1  # comment <tag attr=\"v\">&amp;</tag> {\"k\": [1, 2]}",
    "URLs: https://example.com/path?q=1&r=two#frag user@example.org 192.168.0.1:8080",
    "Numbers 1,234,567.89 and 3.0e-10, 50%, $19.99, #hashtag @mention",
    "İstanbul ıIiİ ß ẞ ﬁ ﬂ Ǆǅǆ ſ K Å Ω", "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３！", "Mixed\ttabs\nnewlines\r\nand  spaces",
    "zero\u200bwidth\u200cjoin\u200dchars\ufeffbom and soft\u00adhyphen", "nbsp\u00a0here\u3000ideographic\u2028line\u2029para",
    "control\x00\x01\x07\x1b\x7f\x85chars\ufffdreplacement", "[CLS] starts [SEP] and [MASK] inside[PAD]text[UNK]",
    "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "a" * 99, "b" * 100, "c" * 101, "x" * 250, "longword" * 20, "é" * 101,
    "Ｈｅｌｌｏ，ｗｏｒｌｄ！「引用」『二重』【括弧】〈山〉《书》", "—dashes– and ‘quotes’ “double” «guillemets» ‹single›",
    "", " ", "   ", ".", "!!!", "...", "¿Qué? ¡Sí!", "e\u0301 a\u0300 o\u0308 n\u0303 (combining)",
    "ǅungla Ǉubljana ǈ", "Ꭰ Ꭱ Ꭲ Cherokee; ᚠᚢᚦ runes; 𐌰𐌱 Gothic; 𓀀 hieroglyph", "𠀀𠀁𪜀 rare CJK ext B/C 丽",
]

POOLS = {
    "ascii": [chr(c) for c in range(0x20, 0x7F)],
    "letters": list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    "latin1": [chr(c) for c in range(0xA0, 0x250)],
    "greek": [chr(c) for c in range(0x370, 0x400)],
    "cyrillic": [chr(c) for c in range(0x400, 0x530)],
    "combining": [chr(c) for c in range(0x300, 0x370)],
    "cjk": [chr(c) for c in range(0x4E00, 0x4E00 + 2000)] + [chr(c) for c in range(0x3400, 0x3500)],
    "kana": [chr(c) for c in range(0x3040, 0x3100)],
    "hangul": [chr(c) for c in range(0xAC00, 0xAC00 + 500)] + [chr(c) for c in range(0x1100, 0x1200)],
    "arabic": [chr(c) for c in range(0x600, 0x700)], "hebrew": [chr(c) for c in range(0x590, 0x600)],
    "devanagari": [chr(c) for c in range(0x900, 0x980)], "thai": [chr(c) for c in range(0xE00, 0xE80)],
    "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡§«¶·»¿‐‑‒–—―‖‗‘’‚‛“”„‟†‡•‣․‥…‧‰‱′″‴‵‶‷‸‹›※‼‽‾‿⁀⁁⁂⁃⁄、。〃〈〉《》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〽゠・"),
    "symbols": list("€£¥¢©®™°±×÷∀∂∃∅∇∈∉∋∏∑−∓∗√∝∞∠∧∨∩∪∫≈≠≡≤≥⊂⊃⊆⊇⊕⊗⊥⋅⌈⌉⌊⌋◊♠♣♥♦★☆☀☁☂☃✓✔✗✘"),
    "emoji": [chr(c) for c in range(0x1F600, 0x1F650)] + [chr(c) for c in range(0x1F300, 0x1F340)],
    "space": list(" \t\n\r\u00a0\u1680\u2000\u2003\u2009\u200a\u2028\u2029\u202f\u205f\u3000\x0b\x0c\x85"),
    "control": [chr(c) for c in range(0, 0x20)] + ["\x7f", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
                                                    "\u00ad", "\ufffd", "\ue000", "\U000f0000", "\u0378", "\ufdd0"],
    "fullwidth": [chr(c) for c in range(0xFF01, 0xFF5F)],
    "special": ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[cls]", "[SEP", "CLS]"],
    "rare": [chr(c) for c in range(0x13A0, 0x13F0)] + [chr(c) for c in range(0x10330, 0x10340)]
            + [chr(c) for c in range(0x20000, 0x20020)] + [chr(c) for c in range(0x2A700, 0x2A710)]
            + [chr(c) for c in range(0x2B820, 0x2B830)] + [chr(c) for c in range(0x2CEB0, 0x2CEC0)]
            + [chr(c) for c in range(0xF900, 0xF920)] + [chr(c) for c in range(0x2F800, 0x2F810)]
            + [chr(c) for c in range(0x30000, 0x30010)],
}

WORDS = ("the of and to in is was for that with as on by at from his her an which be this are were not or but "
         "tokenizer embedding vector search model language neural network running jumped unbelievable internationalization "
         "switchyard locomotive railway station platform timetable").split()


def random_text(rng):
    kind = rng.random()
    if kind < 0.35:  # words of a language with punctuation and case
        n = rng.randint(1, 30)
        words = [rng.choice(WORDS) for _ in range(n)]
        words = [w.upper() if rng.random() < 0.1 else w.capitalize() if rng.random() < 0.2 else w for w in words]
        sep = [" ", " ", " ", ", ", ". ", "! ", "? ", "-", "'", "\n", "\t", "  ", "/", "_", ""]
        return "".join(w + rng.choice(sep) for w in words).strip() if rng.random() < 0.7 else \
            "".join(w + rng.choice(sep) for w in words)
    pools = rng.sample(list(POOLS), rng.randint(1, 4))
    n = rng.randint(1, 60) if rng.random() < 0.9 else rng.randint(100, 400)
    out = []
    for _ in range(n):
        p = POOLS[rng.choice(pools)]
        out.append(rng.choice(p))
        if rng.random() < 0.15:
            out.append(" ")
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=2400)
    args = ap.parse_args()
    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    tok.no_truncation()
    tok.no_padding()
    rng = random.Random(16)
    texts = list(SENTENCES)
    while len(texts) < args.count:
        texts.append(random_text(rng))
    cases = []
    for t in texts:
        cases.append({"hex": t.encode().hex(), "special": tok.encode(t).ids, "plain": tok.encode(t, add_special_tokens=False).ids})
    pairs = []
    for i in range(200):
        a, b = rng.choice(texts), rng.choice(texts)
        e = tok.encode(a, b)
        pairs.append({"a": a.encode().hex(), "b": b.encode().hex(), "ids": e.ids, "types": e.type_ids})
    doc = {"oracle": "tokenizers " + tokenizers.__version__, "cases": cases, "pairs": pairs}
    os.makedirs(args.out, exist_ok=True)
    cctx = zstandard.ZstdCompressor(level=19)
    with open(os.path.join(args.out, "wordpiece_cases.json.zst.tmp"), "wb") as f:
        f.write(cctx.compress(json.dumps(doc, ensure_ascii=False).encode()))
        f.flush(); os.fsync(f.fileno())
    os.replace(os.path.join(args.out, "wordpiece_cases.json.zst.tmp"), os.path.join(args.out, "wordpiece_cases.json.zst"))
    with open(args.tokenizer, "rb") as src, open(os.path.join(args.out, "tokenizer.json.zst.tmp"), "wb") as f:
        f.write(cctx.compress(src.read()))
        f.flush(); os.fsync(f.fileno())
    os.replace(os.path.join(args.out, "tokenizer.json.zst.tmp"), os.path.join(args.out, "tokenizer.json.zst"))
    print(f"{len(cases)} cases, {len(pairs)} pairs")


if __name__ == "__main__":
    main()
