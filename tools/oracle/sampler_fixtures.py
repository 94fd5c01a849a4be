#!/usr/bin/env python3
"""Dev-time oracle: llama.cpp's own sampler chain (logit bias, top-k, typical-p, top-p, min-p, XTC with its coin
always on, temperature) on random logits, through tools/oracle/sampler_chain.cpp linked against the native
llama.cpp build. Writes tests/fixtures/sampler/llama-chain.json: per case the logits, the parameters, and the
candidates that survive with their probabilities; tests/host/test_sampler.c checks sy_sampler_distribution
against them.

Usage: sampler_fixtures.py [--llama-build /work/main/build/llama.cpp-native] [--out FILE]
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
    args = ap.parse_args()
    src = os.path.join(args.llama_build, "src", "vendor", "llama.cpp")
    lib = os.path.join(args.llama_build, "build")
    exe = os.path.join(tempfile.mkdtemp(prefix="sampler-oracle-"), "chain")
    subprocess.run(["g++", "-O1", "-std=c++17", os.path.join(HERE, "sampler_chain.cpp"),
                    "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "ggml", "include"),
                    os.path.join(lib, "src", "libllama.a"), os.path.join(lib, "ggml", "src", "libggml.a"),
                    os.path.join(lib, "ggml", "src", "libggml-cpu.a"), os.path.join(lib, "ggml", "src", "libggml-base.a"),
                    "-lpthread", "-fopenmp", "-o", exe], check=True)
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


if __name__ == "__main__":
    main()
