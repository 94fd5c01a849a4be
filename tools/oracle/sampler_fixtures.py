#!/usr/bin/env python3
"""Dev-time oracle: llama.cpp's own sampler chain (logit bias, top-k, typical-p, top-p, min-p, XTC with its coin
always on, temperature) on random logits, through tools/oracle/sampler_chain.cpp linked against the native
llama.cpp build. Writes tests/fixtures/sampler/llama-chain.json: per case the logits, the parameters, and the
candidates that survive with their probabilities; tests/host/test_sampler.c checks sy_sampler_distribution
against them.

DRY (llama.cpp's llama_sampler_init_dry, through tools/oracle/sampler_dry.cpp) goes to
tests/fixtures/sampler/llama-dry.json: per case the history, the breakers, the parameters and every candidate's
logit after DRY. "token" cases give the breakers as token sequences (llama.cpp's testing entry) over a small
vocabulary, checked by tests/host/test_sampler.c; "text" cases give them as strings that llama.cpp tokenizes
over SmolLM2's vocabulary (--model, SY_SMOLLM2_GGUF), histories tokenized by llama.cpp too, checked by
tests/gguf/test_smollm2.c, which builds the breakers with the host's own code.

Usage: sampler_fixtures.py [--llama-build /work/main/build/llama.cpp-native] [--out FILE] [--dry-out FILE]
                           [--model SMOLLM2.gguf]
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-build", default="/work/main/build/llama.cpp-native")
    ap.add_argument("--out", default=os.path.join(SOURCE, "tests", "fixtures", "sampler", "llama-chain.json"))
    ap.add_argument("--dry-out", default=os.path.join(SOURCE, "tests", "fixtures", "sampler", "llama-dry.json"))
    ap.add_argument("--model", default=os.environ.get("SY_SMOLLM2_GGUF", ""))
    args = ap.parse_args()
    src = os.path.join(args.llama_build, "src", "vendor", "llama.cpp")
    lib = os.path.join(args.llama_build, "build")
    tmp = tempfile.mkdtemp(prefix="sampler-oracle-")

    def build(name):
        exe = os.path.join(tmp, name)
        subprocess.run(["g++", "-O1", "-std=c++17", os.path.join(HERE, name + ".cpp"),
                        "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "ggml", "include"),
                        "-I" + os.path.join(src, "src"),
                        os.path.join(lib, "src", "libllama.a"), os.path.join(lib, "ggml", "src", "libggml.a"),
                        os.path.join(lib, "ggml", "src", "libggml-cpu.a"),
                        os.path.join(lib, "ggml", "src", "libggml-base.a"),
                        "-lpthread", "-fopenmp", "-o", exe], check=True)
        return exe

    dry_fixtures(build("sampler_dry"), args)
    exe = build("sampler_chain")
    rng = random.Random(17)
    cases = []
    for i in range(60):
        n = rng.choice([16, 50, 200])
        logits = [round(rng.gauss(0, 2.5), 4) for _ in range(n)]
        params = {
            "top_k": rng.choice([0, 0, 10, 40]),
            "typical_p": rng.choice([1.0, 0.95, 0.7, 0.4, 0.2]),
            "top_p": rng.choice([1.0, 1.0, 0.9, 0.6]),
            "min_p": rng.choice([0.0, 0.0, 0.05, 0.2]),
            "xtc_probability": rng.choice([0.0, 0.0, 1.0]),
            "xtc_threshold": rng.choice([0.05, 0.1, 0.3]),
            "temperature": rng.choice([1.0, 0.7, 1.5]),
        }
        bias = []
        if i % 3 == 0:
            bias = [[rng.randrange(n), round(rng.uniform(-5, 5), 3)]]
            # -100 only without typical-p: llama.cpp's float softmax underflows to p = 0 there and its entropy
            # turns NaN (a quirk of its own, which the host's double arithmetic does not share)
            if params["typical_p"] >= 1.0:
                t = rng.randrange(n)
                if t != bias[0][0]:
                    bias.append([t, -100.0])
        cases.append({"logits": logits, "params": params, "logit_bias": bias})
    lines = []
    for c in cases:
        p = c["params"]
        fields = [len(c["logits"]), p["top_k"], p["typical_p"], p["top_p"], p["min_p"], p["xtc_probability"],
                  p["xtc_threshold"], p["temperature"], len(c["logit_bias"])]
        for tok, b in c["logit_bias"]:
            fields += [tok, b]
        fields += c["logits"]
        lines.append(" ".join(str(x) for x in fields))
    out = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    for c, line in zip(cases, out.strip().split("\n")):
        v = line.split()
        k = int(v[0])
        c["ids"] = [int(v[1 + 2 * j]) for j in range(k)]
        c["probs"] = [float(v[2 + 2 * j]) for j in range(k)]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"source": "llama.cpp's sampler chain (llama-cpp-python 0.3.36 sdist, native build) via "
                             "tools/oracle/sampler_chain.cpp; regenerate with tools/oracle/sampler_fixtures.py",
                   "cases": cases}, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, args.out)
    print("wrote", args.out, len(cases), "cases")


def write_json(path, doc):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def repetitive(rng, alphabet, n):
    """A history with repetitions: random tokens with earlier stretches copied in."""
    h = []
    while len(h) < n:
        if len(h) > 4 and rng.random() < 0.5:
            start = rng.randrange(len(h) - 2)
            h += h[start:start + rng.randint(2, 12)]
        else:
            h.append(rng.randrange(alphabet))
    return h[:n]


def dry_fixtures(exe, args):
    rng = random.Random(1717)
    cases = []
    vocab = 32
    for i in range(50):
        n_hist = rng.choice([3, 20, 60, 150])
        hist = repetitive(rng, vocab, n_hist)
        breakers = []
        for _ in range(rng.choice([0, 1, 2, 3])):
            breakers.append([rng.randrange(vocab) for _ in range(rng.choice([1, 1, 2, 3]))])
        if breakers and n_hist > 8 and rng.random() < 0.6:
            # a breaker a few tokens before the end, so the repetition limit it sets decides the penalty
            b = breakers[0]
            pos = n_hist - rng.randint(len(b) + 1, len(b) + 5)
            hist[pos:pos + len(b)] = b
            hist = hist[:n_hist]
        params = {"dry_multiplier": rng.choice([0.8, 1.5, 0.3]), "dry_base": rng.choice([1.75, 1.1, 3.0, 1.0]),
                  "dry_allowed_length": rng.choice([0, 1, 2, 2, 4]),
                  "dry_penalty_last_n": rng.choice([64, 16, 1000, 5])}
        cands = list(range(vocab))
        cases.append({"kind": "token", "history": hist, "breakers": breakers, "params": params,
                      "ids": cands, "logits": [round(rng.gauss(0, 2), 4) for _ in cands]})
    # a period-5 pattern repeated past the exponent's cap (base 3: 80), so the cap decides the penalty
    hist = [1, 2, 3, 4, 5] * 40
    cases.append({"kind": "token", "history": hist, "breakers": [], "ids": list(range(8)), "logits": [0.5] * 8,
                  "params": {"dry_multiplier": 0.8, "dry_base": 3.0, "dry_allowed_length": 2,
                             "dry_penalty_last_n": 1000}})
    lines = []
    for c in cases:
        p = c["params"]
        f = ["T", p["dry_multiplier"], p["dry_base"], p["dry_allowed_length"], p["dry_penalty_last_n"],
             len(c["breakers"])]
        for b in c["breakers"]:
            f += [len(b)] + b
        f += [len(c["history"])] + c["history"] + [len(c["ids"])]
        for t, l in zip(c["ids"], c["logits"]):
            f += [t, l]
        lines.append(" ".join(str(x) for x in f))
    out = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
    for c, line in zip(cases, out.strip().split("\n")):
        v = line.split()
        c["want"] = [float(v[2 + 2 * j]) for j in range(int(v[0]))]
        assert [int(v[1 + 2 * j]) for j in range(int(v[0]))] == c["ids"]
    text_cases = []
    if args.model:
        texts = [
            "User: tell me a story\nAssistant: once upon a time there was a cat\nUser: tell me a story\nAssistant: once upon a time there was a",
            "The cat sat on the mat. The cat sat on the mat. The cat sat on the",
            "*bold* and *bold* and \"quoted words here\" and \"quoted words here\" and \"quoted words",
            "### Step one\nmix the flour and the water\n### Step two\nmix the flour and the",
            "a b c d e f a b c d e f a b c d e f a b c d",
            "key: value one two three\nkey: value one two three\nkey: value one",
            # ending just after a breaker: the limit it sets decides
            "User: tell me a story\nAssistant: once upon a time\nUser: tell me a story\nAssistant: once",
            "The cat sat on the mat. The cat sat on the mat. The cat",
            "\"quoted words here\" and \"quoted words here\" and \"quoted",
            "### Step one\nmix the flour\n### Step two\nmix the flour\n### Step",
        ]
        breaker_sets = [[], ["\n", ":", "\"", "*"], ["User:", "Assistant:"], ["###", "\n\n"], [" mat."],
                        ["the cat", "d e"], ["three\nkey"]]
        lines = []
        for t_i, text in enumerate(texts):
            for b_i, breakers in enumerate(breaker_sets):
                if (t_i + b_i) % 2 and b_i != 1 and t_i < 6:
                    continue
                params = {"dry_multiplier": rng.choice([0.8, 1.2]), "dry_base": rng.choice([1.75, 2.0]),
                          "dry_allowed_length": rng.choice([1, 2, 3]), "dry_penalty_last_n": rng.choice([64, 200])}
                text_cases.append({"kind": "text", "text": text, "breakers": breakers, "params": params})
                f = ["S", params["dry_multiplier"], params["dry_base"], params["dry_allowed_length"],
                     params["dry_penalty_last_n"], len(breakers)] + [b.encode().hex() for b in breakers]
                f += ["H", text.encode().hex()]
                lines.append(" ".join(str(x) for x in f))
        out = subprocess.run([exe, args.model], input="\n".join(lines) + "\n", capture_output=True, text=True,
                             check=True).stdout
        for c, line in zip(text_cases, out.strip().split("\n")):
            v = line.split()
            n_hist = int(v[0])
            c["history"] = [int(x) for x in v[1:1 + n_hist]]
            rest = v[1 + n_hist:]
            k = int(rest[0])
            c["ids"] = [int(rest[1 + 2 * j]) for j in range(k)]
            c["logits"] = [float(rest[2 + 2 * j]) for j in range(k)]
            c["want"] = [float(rest[1 + 2 * k + j]) for j in range(k)]
    write_json(args.dry_out, {"source": "llama.cpp's DRY sampler (llama-cpp-python 0.3.36 sdist, native build) via "
                                        "tools/oracle/sampler_dry.cpp; text cases over SmolLM2-135M-Instruct's "
                                        "vocabulary; regenerate with tools/oracle/sampler_fixtures.py",
                              "cases": cases + text_cases})
    print("wrote", args.dry_out, len(cases), "token cases,", len(text_cases), "text cases")


if __name__ == "__main__":
    main()
