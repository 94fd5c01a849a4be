#!/usr/bin/env python3
"""Oracle fixtures of switchyard's embedding engines (tests/embed), from sentence-transformers and transformers.

    python3 tools/oracle/embedding_fixtures.py minilm --model "$SY_MINILM_DIR" --out tests/fixtures/embeddings

minilm: all-MiniLM-L6-v2 as sentence-transformers runs it (its max_seq_length 256, mean pooling, Normalize) on 128
sentences (English, accents, Greek, Cyrillic, CJK, Arabic, Hindi, emoji, code, and long ones past 256 tokens):
minilm-st.json.zst = {"oracle": versions, "max_seq_length": 256, "dim": 384, "cases": [{"text", "ids": the
tokens sentence-transformers fed (after its truncation), "vector": [384 floats]}]}.
"""
import argparse
import json
import os
import random
import sys

import zstandard

BASE = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "The cat sits outside.",
    "The new movie is awesome.", "The new movie is so great!", "How do I reset my password?",
    "What is the capital of France?", "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.", "Embeddings map text to vectors.",
    "switchyard serves local language models over OpenAI and Ollama APIs.",
    "Café au lait, crème brûlée and a croissant, s'il vous plaît.", "Über den Wolken muss die Freiheit wohl grenzenlos sein.",
    "¿Dónde está la biblioteca? Está cerca de la estación.", "Ελληνικά: η γρήγορη καφέ αλεπού.",
    "Русский язык: быстрая коричневая лиса прыгает.", "我爱自然语言处理。", "東京は日本の首都です。",
    "서울은 한국의 수도입니다.", "القاهرة هي عاصمة مصر.", "दिल्ली भारत की राजधानी है।", "Hà Nội là thủ đô của Việt Nam.",
    "I love pizza 🍕 and tacos 🌮!", "def add(a, b): return a + b  # adds two numbers",
    "SELECT name, COUNT(*) FROM users GROUP BY name HAVING COUNT(*) > 1;", "https://example.com/path?query=1&b=2",
    "The temperature is -3.5°C; humidity 87%.", "e = mc²; ∑ x_i ≥ 0", "naïve coöperation façade jalapeño",
    "ALL CAPS SENTENCE WITH SHOUTING", "mixed CaSe WoRdS", "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nhere", "[CLS] literal special tokens [SEP] inside", "a", ".", "??!!",
    "supercalifragilisticexpialidocious", "x" * 150, "Pneumonoultramicroscopicsilicovolcanoconiosis is a word.",
]
WORDS = ("the railway yard sorts freight cars onto tracks by destination while locomotives shunt them back and "
         "forth engineers signal each move carefully and the night shift keeps trains rolling through storms "
         "snow and heat café résumé naïve Zürich 東京 北京 москва").split()


def sentences():
    rng = random.Random(16)
    out = list(BASE)
    while len(out) < 112:
        n = rng.randint(3, 40)
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)) + rng.choice([".", "!", "?", ""]))
    for k in range(16):  # long: past max_seq_length, so truncation is part of the oracle
        n = rng.randint(150, 600)
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    return out


def minilm(args):
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer
    torch.manual_seed(0)
    model = SentenceTransformer(args.model, device="cpu")
    texts = sentences()
    vecs = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    feats = model.tokenize(texts)
    cases = []
    for i, t in enumerate(texts):
        mask = feats["attention_mask"][i].tolist()
        ids = [x for x, m in zip(feats["input_ids"][i].tolist(), mask) if m]
        cases.append({"text": t, "ids": ids, "vector": [float("%.8g" % v) for v in vecs[i].tolist()]})
    doc = {"oracle": "sentence-transformers %s, torch %s" % (sentence_transformers.__version__, torch.__version__),
           "max_seq_length": model.max_seq_length, "dim": int(vecs.shape[1]), "cases": cases}
    write_zst(os.path.join(args.out, "minilm-st.json.zst"), doc)
    print("%d sentences, dim %d, longest %d tokens" % (len(cases), vecs.shape[1], max(len(c["ids"]) for c in cases)))


def write_zst(path, doc):
    data = zstandard.ZstdCompressor(level=19).compress(json.dumps(doc, ensure_ascii=False).encode())
    with open(path + ".tmp", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("minilm")
    a.add_argument("--model", required=True)
    a.add_argument("--out", required=True)
    args = ap.parse_args()
    {"minilm": minilm}[args.cmd](args)


if __name__ == "__main__":
    main()
