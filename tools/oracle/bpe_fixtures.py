#!/usr/bin/env python3
"""Records Hugging Face `tokenizers` encodings of a varied corpus with the Qwen3 tokenizer.json (and variants of
it that exercise other pre-tokenizers, normalizers and added-token flags), as the oracle of switchyard's
byte-level BPE tests (tests/common/test_tokenizer_bpe.c).

Dev-time only:

    pip install tokenizers
    python3 tools/oracle/bpe_fixtures.py \
        --tokenizer /work/shared/tokenizers/qwen3/tokenizer.json \
        --out tests/fixtures/tokenizers/qwen3/bpe_cases.json.zst

Output: zstd-compressed JSON
    {"oracle": "tokenizers X.Y.Z", "source": "<sha256 of tokenizer.json>",
     "variants": [
        {"name": str,
         "replace": {top-level tokenizer.json keys replaced wholesale} ,
         "model_patch": {keys set inside "model"},
         "add_special": bool,            # cases were encoded with add_special_tokens=True
         "cases": [{"hex": UTF-8 text as hex,
                    "ids": ids with special-token parsing (tokenizers' default),
                    "ids_plain": ids without it (encode_special_tokens=True), only when they differ,
                    "decoded_hex": decode(ids) when it is not the text itself}]}]}
Variant 0 is the file unchanged. A test rebuilds each variant by splicing "replace" and "model_patch" into the
original tokenizer.json, exactly as this script does before handing it to tokenizers.
"""
import argparse
import hashlib
import json
import random
import subprocess
import sys
import unicodedata

import tokenizers
from tokenizers import Tokenizer

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------------------------------

SENTENCES = [
    # Latin with accents
    "Le cœur a ses raisons que la raison ne connaît point.", "Où est la bibliothèque ? À côté de l'église.",
    "Äpfel, Öl und Übermut: Grüße aus München!", "Straße, Maß, Fußgängerübergänge", "¿Qué tal? ¡Muy bien, señor!",
    "Zażółć gęślą jaźń", "Příliš žluťoučký kůň úpěl ďábelské ódy", "Tiếng Việt có dấu: Hà Nội, Đà Nẵng, Huế",
    "Ærø, Ålborg, Øresund", "Ça m'énerve, n'est-ce pas ?", "naïve café résumé coöperate façade jalapeño",
    "Íslenska: þú, ð, æ", "Türkçe: ığüşöç İĞÜŞÖÇ", "Română: ăâîșț", "Português: ação, coração, pão",
    # Cyrillic, Greek
    "Съешь же ещё этих мягких французских булок, да выпей чаю.", "Привет, как дела? Всё хорошо!",
    "Україна: їжак, ґанок, є", "Ελληνικά: Καλημέρα κόσμε, τι κάνεις;", "Ἐν ἀρχῇ ἦν ὁ λόγος",
    "Σίσυφος ΣΊΣΥΦΟΣ", "Български език", "Српски: Ђорђе, Љубљана",
    # Arabic, Hebrew (right to left, with marks)
    "مرحبا بالعالم", "اللُّغَةُ الْعَرَبِيَّةُ جَمِيلَةٌ", "السلام عليكم ورحمة الله", "١٢٣٤٥ ٦٧٨٩٠",
    "שלום עולם", "בְּרֵאשִׁית בָּרָא אֱלֹהִים", "עברית ו-English mixed",
    # Indic, Thai, others
    "नमस्ते दुनिया", "हिन्दी में लिखा गया वाक्य।", "क्षत्रिय श्री ज्ञान", "বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు",
    "ภาษาไทยเขียนไม่มีช่องว่าง", "สวัสดีครับ ยินดีต้อนรับ", "ພາສາລາວ", "ខ្មែរ", "မြန်မာ", "ქართული ენა",
    "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "ᐃᓄᒃᑎᑐᑦ", "ꦗꦮ",
    # CJK, Korean, Japanese
    "你好，世界！今天天气很好。", "我爱自然语言处理。", "繁體中文：臺灣、香港", "汉字和標點符號混合：「你好」『世界』",
    "안녕하세요, 세계! 한국어 문장입니다.", "대한민국 서울특별시", "こんにちは、世界！", "ひらがなとカタカナとカンジ",
    "東京都渋谷区", "ｶﾀｶﾅ半角", "日本語の文章です。漢字、ひらがな、カタカナが混ざっています。",
    "Emoji in 中文 and 日本語 and 한국어 😀",
]

EMOJI = [
    "😀", "😀😃😄😁", "👍", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤️‍🔥",
    "🇯🇵🇺🇸🇩🇪", "1️⃣2️⃣#️⃣", "🫠🫶🥹", "I ❤️ NY", "smile😀smile", "  😀  ", "😀\n😀", "👋 hello 👋",
    "🙆‍♀️🙅‍♂️", "🏃🏾‍♀️‍➡️", "☺︎ vs ☺️", "✊🏿", "👁️‍🗨️", "🐈‍⬛",
]

NORMALIZATION = [
    "é", "e\u0301", "caf\u00e9", "cafe\u0301", "A\u030a", "\u00c5", "\u212b", "\u212a", "\u2126",
    "\u1100\u1161\u11a8", "\uac01", "\u0041\u0308\u0301", "o\u0302\u0323", "\u1ec7", "e\u0323\u0302",
    "\ufb01", "\ufb01nance", "①②③", "ｆｕｌｌｗｉｄｔｈ", "x²+y³", "½ ¼ ¾", "Ⅻ", "ｱｲｳ", "\u0301alone",
    "a\u0300\u0301\u0302\u0303\u0304", "ñ vs n\u0303", "ﾊﾟﾝ", "パン", "\u0958\u0959", "क़ख़",
    "\u05d1\u05bc", "\ufb31", "\u0f73", "\u1e9b\u0323", "Ω Ω", "\u2000\u2001", "\u00a0\u2007\u202f",
    "\u0130stanbul", "ß ẞ", "ǅ ǈ", "\u0345", "\u0344", "\u0340\u0341", "\u2329\u232a",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"Hello, %s!\\n\", \"world\");\n\treturn 0;\n}\n",
    "const add = (a, b) => a + b;\nconsole.log(`sum: ${add(1, 2)}`);",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html>\n  <body>\n    <div class=\"x\">&lt;tag&gt; &amp; &#x1F600;</div>\n  </body>\n</html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\n\"}}",
    "#!/bin/sh\nset -eu\nfor f in *.txt; do\n  echo \"$f\" | tr a-z A-Z\ndone\n",
    "    x = [i**2 for i in range(100) if i % 3 == 0]  # comment\n",
    "if (a && b || !c) { x += 1; } else { x -= 1; }",
    "std::vector<std::pair<int, std::string>> v{{1, \"one\"}};",
    "    \t    \t mixed indentation\n\t\t\tdeep\n",
    "x=1;y=2;z=x+y;print(z)", "a!=b&&c<=d||e>=f", "i++; --j; k <<= 2; m >>= 1;", "/* block */ // line",
    "@decorator\nclass Foo(Bar, metaclass=Meta):\n    pass\n", "$ curl -sSL https://example.com | bash -",
    "matrix = [[1, 2, 3],\n          [4, 5, 6]]", "λx.λy.x y", "∀x∈ℝ: x² ≥ 0", "->  =>  ::  ..=  ...",
    "\\begin{equation}\n  E = mc^2\n\\end{equation}", "git commit -m \"fix: don't crash\"",
]

NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "3141592653589793238462643383279502884197",
    "1,234,567.89", "1.5e-10", "-0.000001", "0x1F2E3D", "0b101010", "1_000_000", "2024-12-31T23:59:59Z",
    "+1 (555) 123-4567", "v1.2.3-rc.4", "192.168.0.1", "3.14159", "99.9%", "$1,000", "€5,00", "¥100",
    "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "１２３４５", "²³¹", "⅓⅔", "ⅠⅡⅢⅣ", "〇一二三", "१२३abc४५६", "a1b2c3d4",
    "00000000", "1 2 3 4 5", "1\n2\n3", "10.0.0.0/8", "1e100", "12:30:45", "4/5/2024",
]

CONTRACTIONS = [
    "I'm here.", "You're right.", "He's gone.", "We've won.", "They'll see.", "She'd know.", "Don't stop.",
    "I'M HERE", "YOU'RE", "HE'S", "WE'VE", "THEY'LL", "SHE'D", "DON'T", "It'S mIxEd", "iT'lL", "wE'Ve",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "''s", "'''",
    "it's", "it’s", "it‘s", "rock'n'roll", "O'Neil", "y'all", "ma'am", "'tis", "the '90s", "'quoted'",
    "it'ſ", "it'ſx", "don'T", "can'tn't", "'s's's", " 's", "\n's", "'ll've", "x'd'y",
]

WHITESPACE = (
    [" " * n for n in range(1, 34)] + ["\t" * n for n in range(1, 12)] + ["\n" * n for n in range(1, 12)] +
    ["\r\n" * n for n in range(1, 6)] +
    ["a" + " " * n + "b" for n in range(1, 20)] + ["a" + "\t" * n + "b" for n in range(1, 6)] +
    ["a" + "\n" * n + "b" for n in range(1, 8)] + ["x" + " " * n for n in range(1, 10)] +
    [" " * n + "x" for n in range(1, 10)] +
    [" \n", "\n ", " \n ", "  \n  ", "\t\n", "\n\t", " \t \n \r\n ", "\r", "\r\r", "a\rb", "a \r\n b",
     "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2028", "a\u2028b", "\u2029", "\u0085", "a\u0085b",
     "a \u0085\u0085 b", "\u180e", "x\u180ey", "\u200b", "a\u200bb", "\ufeff", "\ufeffhello", "\u2060",
     "\u000b", "\u000c", "a\u000bb\u000cc", "\u1680", "\u205f", "\u2009thin", "end   ", "   start",
     "multiple   spaces   between   words", "tabs\tbetween\twords", "line\nbreaks\nhere", "para\n\n\npara",
     "    indented\n        more\n", "trailing \n", "\n\n\n\nx", "x\n\n\n\n", " \n \n \n", "\t \t \t"]
)

SPECIALS = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat's 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nSimple.\n</think>\n\n4<|im_end|>",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_end|><|im_start|>", "<|im_start|><|im_start|>",
    "text<|im_end|>text", "text <|im_end|> text", " <|im_end|> ", "\n<|im_end|>\n", "<|im_start", "im_start|>",
    "<|im_end|", "<<|im_end|>>", "<|<|im_end|>|>", "<|IM_END|>", "< |im_end| >", "<think>", "</think>",
    "<think>\nreasoning\n</think>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
    "<tool_response>ok</tool_response>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>", "<|box_start|>(1,2),(3,4)<|box_end|>",
    "<|object_ref_start|>cat<|object_ref_end|>", "<|quad_start|><|quad_end|>", "<|video_pad|>x",
    "<|repo_name|>r<|file_sep|>f", "<|fim_pad|>", "a<|endoftext|>b<|endoftext|>c", "<|endoftext|>" * 3,
    "<|im_start|>user\n日本語<|im_end|>", "<|im_start|>😀<|im_end|>", "<|im_end|>'s", "'s<|im_end|>",
    "<|im_start|>  spaced  <|im_end|>", "<|im_end|>\n\n\n", "<tool_call><tool_call>", "</tool_call>x",
]

UNICODE_NEW = [  # letters and digits that Unicode 15.0 / 16.0 added (newer than many regex engines know)
    "\U00031350\U00031351 CJK Ext H", "x\U00031350y", "\u1c89\u1c8a", "\U00011f04\U00011f05\U00011f06",
    "\U0001e4f0\U0001e4f1\U0001e4f2", "\U0001e4d0\U0001e4d1", "\U000105c0\U000105c1 z", "a\U0002ebf0b",
]

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had "
         "by word but not what all were we when your can said there use an each which she do how their if will "
         "up other about out many then them these so some her would make like him into time has look two more "
         "write go see number no way could people my than first water been call who oil its now find long down "
         "day did get come made may part Hello World Python Rust über naïve 東京 서울 Москва Αθήνα القاهرة").split()
PUNCT = [",", ".", "!", "?", ";", ":", "-", "—", "(", ")", "[", "]", "{", "}", "\"", "'", "’", "/", "\\", "@",
         "#", "$", "%", "&", "*", "+", "=", "<", ">", "|", "~", "`", "^", "…", "«", "»", "“", "”"]
GAPS = [" ", " ", " ", "  ", "\n", "\t", " \n", "\n\n", "", "", "\u00a0", "\u3000", "   "]
SPECIAL_BITS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|",
                "|>", "<", "im_end"]


def assigned_codepoints():
    """Code points assigned in the Unicode version Python knows (14.0), no surrogates, grouped by range."""
    pools = {"bmp": [], "astral": [], "marks": [], "latin": [], "cjk": [], "hangul": [], "emoji": [],
             "spaces": [], "controls": []}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat == "Cn":
            continue
        if cat in ("Mn", "Mc", "Me"):
            pools["marks"].append(ch)
        if cat.startswith("Z") or ch in "\t\n\r\x0b\x0c\x85":
            pools["spaces"].append(ch)
        if cat == "Cc":
            pools["controls"].append(ch)
        if cp < 0x250:
            pools["latin"].append(ch)
        elif 0x4E00 <= cp <= 0x9FFF or 0x3040 <= cp <= 0x30FF:
            pools["cjk"].append(ch)
        elif 0xAC00 <= cp <= 0xD7A3:
            pools["hangul"].append(ch)
        elif 0x1F300 <= cp <= 0x1FAFF:
            pools["emoji"].append(ch)
        if cp < 0x10000:
            pools["bmp"].append(ch)
        else:
            pools["astral"].append(ch)
    return pools


def random_unicode(rng, pools, n):
    weights = [("ascii", 30), ("latin", 10), ("marks", 6), ("cjk", 8), ("hangul", 4), ("emoji", 6),
               ("spaces", 6), ("controls", 2), ("bmp", 18), ("astral", 6), ("apostrophe", 2), ("digit", 4)]
    names = [w[0] for w in weights]
    cum = [w[1] for w in weights]
    out = []
    for _ in range(n):
        length = rng.choice([1, 2, 3, 5, 8, 13, 21, 34])
        chars = []
        for _ in range(length):
            kind = rng.choices(names, cum)[0]
            if kind == "ascii":
                chars.append(chr(rng.randint(0x20, 0x7E)))
            elif kind == "apostrophe":
                chars.append(rng.choice(["'s", "'t", "'LL", "'", "'re", "'D"]))
            elif kind == "digit":
                chars.append(str(rng.randint(0, 99999)))
            else:
                chars.append(rng.choice(pools[kind]))
        out.append("".join(chars))
    return out


def random_structured(rng, n):
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 24)):
            r = rng.random()
            if r < 0.55:
                w = rng.choice(WORDS)
                w = w.upper() if rng.random() < 0.1 else (w.capitalize() if rng.random() < 0.2 else w)
                parts.append(w)
            elif r < 0.75:
                parts.append(rng.choice(PUNCT))
            elif r < 0.85:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.92:
                parts.append(rng.choice(SPECIAL_BITS))
            else:
                parts.append(rng.choice(["'s", "'ll", "'VE", "😀", "é", "e\u0301", "ß", "日本", "\r\n"]))
            parts.append(rng.choice(GAPS))
        out.append("".join(parts))
    return out


def long_texts():
    para = ("The quick brown fox jumps over the lazy dog. Le renard brun rapide saute par-dessus le chien paresseux. "
            "敏捷的棕色狐狸跳过了懒狗。 Быстрая коричневая лиса перепрыгивает через ленивую собаку. 😀👍🏽\n")
    return [para * 20, "a" * 5000, " " * 3000, "\n" * 1000, "😀" * 500, "ab " * 1500, "1234567890" * 300,
            ("word " * 200 + "\n") * 5, "x" * 70 + " " + "y" * 70, "the" * 400, "日本" * 800]


def build_corpus(seed):
    rng = random.Random(seed)
    pools = assigned_codepoints()
    corpus = [""]
    corpus += SENTENCES + EMOJI + NORMALIZATION + CODE + NUMBERS + CONTRACTIONS + WHITESPACE + SPECIALS
    corpus += UNICODE_NEW
    corpus += [chr(c) for c in range(0x80)]  # every ASCII character alone, NUL and controls included
    corpus += ["x" + chr(c) + "y" for c in range(0x80)]
    corpus += [" " + s for s in SENTENCES[:20]] + [s + "\n" for s in SENTENCES[20:40]]
    corpus += [unicodedata.normalize("NFD", s) for s in SENTENCES[:30]]
    corpus += [unicodedata.normalize("NFKD", s) for s in NORMALIZATION]
    corpus += random_unicode(rng, pools, 1000)
    corpus += random_structured(rng, 700)
    corpus += long_texts()
    seen, out = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Variants of the tokenizer
# ---------------------------------------------------------------------------------------------------------------

def byte_level(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": False,
            "use_regex": use_regex}


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern}, "behavior": behavior,
            "invert": invert}


def added(id_, content, special=False, lstrip=False, rstrip=False, normalized=None, single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": (not special) if normalized is None else normalized, "special": special}


def variants(base):
    out = [{"name": "qwen3", "replace": {}, "model_patch": {}, "add_special": False, "subset": None}]
    out.append({"name": "gpt2-bytelevel-regex", "add_special": False, "subset": 600, "model_patch": {},
                "replace": {"normalizer": None, "pre_tokenizer": byte_level(True, True)}})
    bos = {"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
           "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}}
    out.append({"name": "llama3-style", "add_special": True, "subset": 600, "model_patch": {"ignore_merges": True},
                "replace": {"normalizer": None, "post_processor": bos,
                            "pre_tokenizer": {"type": "Sequence",
                                              "pretokenizers": [split(LLAMA3_REGEX, "Isolated"), byte_level()]}}})
    extra = [added(151669, "<mask>", special=True, lstrip=True),
             added(151670, "[SEP]", special=True, rstrip=True),
             added(151671, "xyzzy", single_word=True),
             added(151672, "café"),
             added(151673, "<sep2>", lstrip=True, rstrip=True, normalized=False),
             added(151674, "日本", single_word=True, normalized=False),
             added(151675, "  ", normalized=False),
             added(151676, "ﬁ", normalized=True)]
    out.append({"name": "added-token-flags", "add_special": False, "subset": 500, "model_patch": {},
                "replace": {"added_tokens": base["added_tokens"] + extra}, "extra_corpus": [
                    "a <mask> b", "a   <mask>b", "<mask>", " <mask>", "\u3000<mask>", "x\n\t<mask>",
                    "[SEP]  after", "[SEP]\n\nx", "a[SEP] b", "xyzzy world", "xyzzythere", "say xyzzy",
                    "axyzzy", "xyzzy_", "xyzzy!", "(xyzzy)", "éxyzzy xyzzy", "xyzzy\u0301", "xyzzyé", "٣xyzzy",
                    "café",
                    "cafe\u0301", "un café noir", "caféine", "<sep2>", "  <sep2>  ", "a <sep2> b <sep2> c",
                    "日本", "日本語", "東日本", " 日本 ", "日本!", "a  b", "a    b", "   ", "  x  ",
                    "\ufb01", "fi", "ﬁne", "ﬁﬁ", "<|im_end|> <mask> [SEP] xyzzy", "<mask><mask>", "<mask> <mask>",
                    "[SEP][SEP]", "xyzzy xyzzy", "xyzzy<|im_end|>", "<|im_end|>xyzzy",
                    "x <mask>[SEP] y", "\u00a0<mask>\u00a0", "<mask>\u2028"]})
    out.append({"name": "nfkc-sequence", "add_special": False, "subset": 400, "model_patch": {},
                "replace": {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFKC"}]}}})
    out.append({"name": "nfd", "add_special": False, "subset": 300, "model_patch": {},
                "replace": {"normalizer": {"type": "NFD"}}})
    behaviors = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    for behavior in behaviors:
        for invert in (False, True):
            out.append({"name": "split-%s%s" % (behavior, "-invert" if invert else ""), "add_special": False,
                        "subset": 200, "model_patch": {},
                        "replace": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                            split(r"\s+|[.,!?;]", behavior, invert), byte_level()]}}})
    out.append({"name": "split-literal-two-steps", "add_special": False, "subset": 200, "model_patch": {},
                "replace": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                    split(" ", "MergedWithNext", literal=True), split(r"\p{N}+", "Contiguous"),
                    byte_level(True, False)]}}})
    return out


def apply_variant(base, v):
    tok = json.loads(json.dumps(base))
    for k, val in v["replace"].items():
        tok[k] = val
    for k, val in v["model_patch"].items():
        tok["model"][k] = val
    return tok


def normal_form(normalizer):
    """The single normal form a normalizer (or Sequence of them) amounts to, or None: compatibility if any step
    has it, composed if the last step composes (how switchyard folds them)."""
    if normalizer is None:
        return None
    if normalizer["type"] == "Sequence":
        forms = [normal_form(n) for n in normalizer["normalizers"]]
        forms = [f for f in forms if f]
        if not forms:
            return None
        compat = any("K" in f for f in forms)
        return ("NFK" if compat else "NF") + forms[-1][-1]
    return normalizer["type"]


def normalization_agrees(tok, form, text):
    """tokenizers normalizes with older Unicode tables than current libraries (its
    unicode-normalization-alignments crate): a combining mark newer than those tables counts as a starter there,
    so a string holding such marks out of canonical order normalizes differently from utf8proc or Python. Such
    strings say nothing about the tokenizer and are left out of the fixture."""
    return form is None or tok.normalizer.normalize_str(text) == unicodedata.normalize(form, text)


def encode_all(tok, texts, add_special):
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special)]
    tok.encode_special_tokens = True
    plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special)]
    tok.encode_special_tokens = False
    return ids, plain


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()

    raw = open(args.tokenizer, "rb").read()
    base = json.loads(raw)
    corpus = build_corpus(args.seed)
    rng = random.Random(args.seed + 1)
    doc = {"oracle": "tokenizers " + tokenizers.__version__, "source": hashlib.sha256(raw).hexdigest(),
           "variants": []}
    total = 0
    for v in variants(base):
        tj = apply_variant(base, v)
        tok = Tokenizer.from_str(json.dumps(tj))
        for t in tj["added_tokens"]:  # the ids we declare must be the ones tokenizers assigns
            assert tok.token_to_id(t["content"]) == t["id"], (v["name"], t)
        texts = corpus if v["subset"] is None else rng.sample(corpus, v["subset"])
        texts = texts + [s for s in v.get("extra_corpus", []) if s not in texts]
        form = normal_form(tj["normalizer"])
        kept = [s for s in texts if normalization_agrees(tok, form, s)]
        if len(kept) != len(texts):
            print("%-28s %5d strings left out: tokenizers' Unicode tables disagree on their normal form" %
                  (v["name"], len(texts) - len(kept)), file=sys.stderr)
        texts = kept
        ids, plain = encode_all(tok, texts, v["add_special"])
        cases = []
        for text, a, b in zip(texts, ids, plain):
            case = {"hex": text.encode("utf-8").hex(), "ids": a}
            if b != a:
                case["ids_plain"] = b
            decoded = tok.decode(a, skip_special_tokens=False)
            if decoded != text:
                case["decoded_hex"] = decoded.encode("utf-8").hex()
            cases.append(case)
        doc["variants"].append({"name": v["name"], "replace": v["replace"], "model_patch": v["model_patch"],
                                "add_special": v["add_special"], "cases": cases})
        total += len(cases)
        print("%-28s %5d cases" % (v["name"], len(cases)), file=sys.stderr)
    data = json.dumps(doc, ensure_ascii=True, separators=(",", ":")).encode()
    packed = subprocess.run(["zstd", "-19", "-q", "-c"], input=data, stdout=subprocess.PIPE, check=True).stdout
    with open(args.out, "wb") as f:
        f.write(packed)
    print("%d cases, %d bytes JSON, %d bytes compressed -> %s" % (total, len(data), len(packed), args.out),
          file=sys.stderr)


if __name__ == "__main__":
    main()
