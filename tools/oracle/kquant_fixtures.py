#!/usr/bin/env python3
"""K-quant numerics against llama.cpp: teacher-forced top-1 tokens of one random Llama-shaped model quantized to
every K-quant (and Q4_0 / Q8_0 for comparison), for tests/gguf/test_kquant_agreement.c.

The model is tests/fixtures/gguf/tiny-models.json's "llama" (hidden 256, 4 heads, 2 KV heads, feed-forward 512,
2 layers, vocabulary 512, separate output matrix), its F16 weights from that fixture's generator (see
gguf_model_fixtures.py). llama.cpp quantizes it (tools/oracle/kquant_logits.cpp, llama_model_quantize, no imatrix):
"pure" files put every matrix, token embedding and output included, in one type (llama-quantize --pure); Q4_K_M
is the usual mixture. Each file then evaluates N_TOKENS seeded random token ids (0..499) in one batch, and the
fixture records per position llama.cpp's top-1 and top-2 token and their logit gap ("margin").

    tests/fixtures/gguf/kquant-agreement.json:
      {"format": 1, "oracle": ..., "model": "llama", "tokens": [...],
       "files": {"Q6_K": {"ftype": 18, "pure": true, "tensor_hash": ..., "top1": [...], "top2": [...],
                          "margin": [...]}, ...}}

The test rebuilds each file (the same bytes: the tensor hashes must match), runs it on every CPU tier and counts
where its top-1 differs from llama.cpp's, and at what llama.cpp margin.

Dev-time analysis: with --ours DIR, where the test wrote its logits (SY_KQUANT_DUMP=DIR ctest -R gguf-kquant):
DIR/<type>-<tier>.f32 and the float64 reference backend's DIR/<type>-reference.f32, it prints, per type, how far
each engine's logits are from the float64 reference (which quantizes the weights but not the activations) and the
agreement table.

    python3 tools/oracle/kquant_fixtures.py [--peer /work/peer] [--ours DIR]
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

import gguf_model_fixtures as tiny

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(ROOT, "tests/fixtures/gguf/kquant-agreement.json")
N_TOKENS = 512
TOKEN_SEED = 0x6B7175616E74  # "kquant"
# name -> (llama_ftype, pure)
TYPES = {
    "Q2_K": (10, True), "Q3_K": (12, True), "Q4_K": (14, True), "Q5_K": (16, True), "Q6_K": (18, True),
    "Q4_K_M": (15, False), "Q4_0": (2, True), "Q8_0": (7, True),
}
N_VOCAB = 512
TIERS = ["scalar", "avx2", "avx512"]


def build_oracle(peer, exe):
    src = os.path.join(peer, "src", "vendor", "llama.cpp")
    lib = os.path.join(peer, "build")
    subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(HERE, "kquant_logits.cpp"),
                    "-I" + os.path.join(src, "include"), "-I" + os.path.join(src, "ggml", "include"),
                    os.path.join(lib, "src", "libllama.a"), os.path.join(lib, "ggml", "src", "libggml.a"),
                    os.path.join(lib, "ggml", "src", "libggml-cpu.a"), os.path.join(lib, "ggml", "src", "libggml-base.a"),
                    "-fopenmp", "-lpthread", "-ldl", "-o", exe], check=True)


def top2(logits):
    order = np.argsort(-logits, axis=-1, kind="stable")
    t1, t2 = order[:, 0], order[:, 1]
    rows = np.arange(len(logits))
    return t1, t2, logits[rows, t1] - logits[rows, t2]


def analyse(ours_dir, doc):
    print("\nper type: RMS distance of each engine's logits to the float64 reference; top-1 agreement with "
          "llama.cpp and flips by llama.cpp's margin")
    for name, rec in doc["files"].items():
        ref_path = os.path.join(ours_dir, f"{name}-reference.f32")
        llama = np.fromfile(os.path.join(ours_dir, f"{name}-llama.f32"), dtype=np.float32).reshape(-1, N_VOCAB)
        ref = np.fromfile(ref_path, dtype=np.float32).reshape(-1, N_VOCAB) if os.path.exists(ref_path) else None
        l1 = np.array(rec["top1"])
        line = f"{name:7s} llama.cpp: "
        if ref is not None:
            r1, _, rm = top2(ref)
            line += f"rms to ref {np.sqrt(np.mean((llama - ref) ** 2)):.4f}, top-1 as ref {np.mean(r1 == l1) * 100:.1f}%"
        print(line)
        for tier in TIERS:
            p = os.path.join(ours_dir, f"{name}-{tier}.f32")
            if not os.path.exists(p):
                continue
            ours = np.fromfile(p, dtype=np.float32).reshape(-1, N_VOCAB)
            o1, _, _ = top2(ours)
            flips = np.nonzero(o1 != l1)[0]
            margins = sorted((round(rec["margin"][i], 3) for i in flips), reverse=True)
            line = (f"   {tier:7s} agree {np.mean(o1 == l1) * 100:6.2f}%  flips {len(flips):3d} "
                    f"(>= 0.2: {sum(m >= 0.2 for m in margins)})  max |ours - llama| "
                    f"{np.max(np.abs(ours - llama)):.3f} rms {np.sqrt(np.mean((ours - llama) ** 2)):.4f}")
            if ref is not None:
                line += (f"  rms to ref {np.sqrt(np.mean((ours - ref) ** 2)):.4f}, top-1 as ref "
                         f"{np.mean(o1 == r1) * 100:.1f}%")
            print(line)
            if margins:
                print(f"           flip margins: {margins[:12]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", default="/work/peer", help="the native llama.cpp build (src/vendor/llama.cpp, build/)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--ours", help="folder of the test's logits dumps (see above): analyse instead of writing")
    ap.add_argument("--keep", help="folder to keep the GGUF files and llama.cpp's logits in")
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="sy-kquant-")
    os.makedirs(tmp, exist_ok=True)
    exe = os.path.join(tmp, "kquant_logits")
    build_oracle(args.peer, exe)

    base = json.load(open(os.path.join(ROOT, "tests/fixtures/gguf/tiny-models.json")))["models"]["llama"]
    cfg = base["config"]
    tensors = [(t["name"], t["dims"], t["kind"], t["shift"]) for t in base["tensors"]]
    arrays = tiny.generate(base["seed"], tensors)
    f16 = os.path.join(tmp, "kquant-F16.gguf")
    tiny.write_model(f16, "llama", cfg, arrays, tensors)
    assert tiny.tensor_hash(f16)[0] == base["files"]["F16"]["tensor_hash"], "the generator changed"

    u = tiny.splitmix_stream(TOKEN_SEED, 0, N_TOKENS) >> np.uint64(40)
    tokens = [int(t) for t in u % np.uint64(500)]
    doc = {"format": 1, "oracle": "llama.cpp (native build, tools/oracle/kquant_logits.cpp)", "model": "llama",
           "token_seed": TOKEN_SEED, "tokens": tokens, "files": {}}
    for name, (ftype, pure) in TYPES.items():
        path = os.path.join(tmp, f"kquant-{name}.gguf")
        subprocess.run([exe, "quantize", f16, path, str(ftype), "1" if pure else "0"], check=True)
        out = os.path.join(tmp, f"{name}-llama.f32")
        subprocess.run([exe, "logits", path, "2", out], input=" ".join(map(str, tokens)).encode(), check=True)
        logits = np.fromfile(out, dtype=np.float32).reshape(N_TOKENS, N_VOCAB)
        t1, t2, m = top2(logits)
        h, types = tiny.tensor_hash(path)
        doc["files"][name] = {"ftype": ftype, "pure": pure, "tensor_hash": h,
                              "tensor_types": sorted({ty for _, ty in types}),
                              "top1": [int(x) for x in t1], "top2": [int(x) for x in t2],
                              "margin": [round(float(x), 4) for x in m]}
        print(f"{name}: hash {h}, types {doc['files'][name]['tensor_types']}, margins < 0.2 at "
              f"{int(np.sum(m < 0.2))}/{N_TOKENS}")
        if args.ours:
            os.makedirs(args.ours, exist_ok=True)
            logits.tofile(os.path.join(args.ours, f"{name}-llama.f32"))
    if args.ours and any(os.path.exists(os.path.join(args.ours, f"{n}-{t}.f32")) for n in TYPES for t in TIERS):
        analyse(args.ours, doc)
    if not args.ours or not os.path.exists(args.out):
        with open(args.out, "w") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
