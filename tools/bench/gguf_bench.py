#!/usr/bin/env python3
"""gguf-quant beside llama.cpp on quantized GGUF files of a Qwen2.5-0.5B-shaped model, as docs/benchmarks.md
records them ("GGUF" section).

    python3 tools/oracle/make_bench_model.py --out /tmp/bench/qwen2.5-0.5b --gguf      # once (random weights)
    python3 tools/bench/gguf_bench.py --model-dir /tmp/bench/qwen2.5-0.5b \\
        --switchyard build-rel/bin/switchyard [--types Q8_0 Q4_K_M] [--threads 2] [-p 512] [-n 128] [--tier avx2]

For each type:
  1. quantizes model-f16.gguf with `switchyard quantize` and with llama.cpp's llama_model_quantize (through
     llama-cpp-python), timing both, and compares the two files (they are equal byte for byte when the
     quantizer matches llama.cpp's);
  2. runs `switchyard bench --plugin gguf-quant` and tools/bench/llama_cpp_bench.py on the same file, same
     threads, one run each, page cache warm (the file is read once first): load, first token after load, prefill
     of -p tokens, decode of -n tokens, memory.
Prints the machine, the load average before each run, the commands, the JSON results and Markdown tables with the
ratios (switchyard / llama.cpp).
"""

import argparse
import filecmp
import json
import os
import subprocess
import sys
import time

FTYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "F16": 1}


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return "%s, %s CPUs" % (fields.get("Model name", "?").strip(), fields.get("CPU(s)", "?").strip())


def run_json(cmd, env=None):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


LLAMA_QUANTIZE = r'''
import ctypes, sys, time, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(sys.argv[3]); p.nthread = int(sys.argv[4])
t0 = time.time()
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p))
print(time.time() - t0 if rc == 0 else -1)
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--switchyard", default="build/bin/switchyard")
    ap.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K_M"], choices=list(FTYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--tier", help="SY_CPU_TIER for switchyard (scalar, avx2, avx512)")
    ap.add_argument("--skip-quantize", action="store_true", help="reuse OUT files from an earlier run")
    args = ap.parse_args()

    here = os.path.dirname(os.path.abspath(__file__))
    f16 = os.path.join(args.model_dir, "model-f16.gguf")
    print("machine: %s; %s" % (cpu_model(), time.strftime("%Y-%m-%d %H:%M %Z")))
    env = dict(os.environ)
    if args.tier:
        env["SY_CPU_TIER"] = args.tier
    rows = []
    for t in args.types:
        ours = os.path.join(args.model_dir, "model-%s.gguf" % t.lower())
        ref = os.path.join(args.model_dir, "model-%s-llama.cpp.gguf" % t.lower())
        q = {}
        if not args.skip_quantize:
            warm(f16)
            print("load before switchyard quantize %s: %s" % (t, loadavg()))
            cmd = [args.switchyard, "quantize", "--no-progress", "--threads", str(args.threads), f16, ours, t]
            print("$ " + " ".join(cmd), flush=True)
            t0 = time.time()
            subprocess.run(cmd, check=True)
            q["switchyard_s"] = time.time() - t0
            print("load before llama.cpp quantize %s: %s" % (t, loadavg()))
            out = subprocess.run([sys.executable, "-c", LLAMA_QUANTIZE, f16, ref, str(FTYPES[t]), str(args.threads)],
                                 check=True, capture_output=True, text=True).stdout
            q["llama_cpp_s"] = float(out.strip().splitlines()[-1])
            q["identical"] = filecmp.cmp(ours, ref, shallow=False)
            print("quantize %s: switchyard %.1f s, llama.cpp %.1f s, files %s" % (
                t, q["switchyard_s"], q["llama_cpp_s"], "identical" if q["identical"] else "DIFFER"))
        warm(ours)
        print("load before switchyard bench %s: %s" % (t, loadavg()))
        sy = run_json([args.switchyard, "bench", "--plugin", "gguf-quant", "--model", ours, "--threads",
                       str(args.threads), "-p", str(args.p), "-n", str(args.n), "--json"], env)
        warm(ours)
        print("load before llama.cpp bench %s: %s" % (t, loadavg()))
        ll = run_json([sys.executable, os.path.join(here, "llama_cpp_bench.py"), "--model", ours, "--threads",
                       str(args.threads), "-p", str(args.p), "-n", str(args.n), "--json"])
        print(json.dumps({"type": t, "quantize": q, "switchyard": sy, "llama.cpp": ll}))
        rows.append((t, q, sy, ll))

    for t, q, sy, ll in rows:
        print("\n### %s (%s)\n" % (t, os.path.basename(ll["model"])))
        print("| | switchyard (gguf-quant) | llama.cpp | ratio |")
        print("| --- | ---: | ---: | ---: |")
        for key, label, lower in [("load_s", "load (s)", True), ("first_token_s", "first token after load (s)", True),
                                  ("load_plus_first_token_s", "load + first token (s)", True),
                                  ("prefill_tok_s", "prefill %d tok/s" % args.p, False),
                                  ("decode_tok_s", "decode %d tok/s" % args.n, False),
                                  ("peak_rss_mb", "peak RSS (MB)", True), ("anon_rss_mb", "anonymous RSS (MB)", True)]:
            a, b = sy[key], ll[key]
            print("| %s | %.3f | %.3f | %.2f%s |" % (label, a, b, a / b if b else float("nan"),
                                                   " (lower is better)" if lower else ""))
        if q:
            print("| quantize from F16 (s) | %.1f | %.1f | %.2f (lower is better) |" % (
                q["switchyard_s"], q["llama_cpp_s"], q["switchyard_s"] / q["llama_cpp_s"]))


if __name__ == "__main__":
    main()
