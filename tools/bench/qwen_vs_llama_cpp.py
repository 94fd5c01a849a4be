#!/usr/bin/env python3
"""One run of `switchyard bench` (qwen-cpu-mmap on the BF16 checkpoint) beside one run of llama.cpp on the F16 GGUF
of the same weights, as docs/benchmarks.md records them.

    python3 tools/oracle/make_bench_model.py --out /tmp/bench-qwen2.5-0.5b --gguf     # once (random weights)
    python3 tools/bench/qwen_vs_llama_cpp.py --model-dir /tmp/bench-qwen2.5-0.5b \
        --switchyard build-rel/bin/switchyard [--threads 2] [-p 512] [-n 128] [--tier avx2]

Both read their files once first (warm page cache). Prints the machine, the load average before each run, the
commands, both JSON results and a Markdown table with the ratios (switchyard / llama.cpp).
"""

import argparse
import json
import os
import subprocess
import sys
import time


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(cmd, env=None):
    print("$ " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return "%s, %s CPUs" % (fields.get("Model name", "?").strip(), fields.get("CPU(s)", "?").strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--switchyard", default="build/bin/switchyard")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--tier", help="SY_CPU_TIER for switchyard (scalar, avx2, avx512)")
    ap.add_argument("--only", choices=["switchyard", "llama.cpp"])
    args = ap.parse_args()

    gguf = os.path.join(args.model_dir, "model-f16.gguf")
    print("machine: %s; %s" % (cpu_model(), time.strftime("%Y-%m-%d %H:%M %Z")))
    results = {}
    if args.only != "llama.cpp":
        warm(os.path.join(args.model_dir, "model.safetensors"))
        env = dict(os.environ)
        if args.tier:
            env["SY_CPU_TIER"] = args.tier
        print("load average before switchyard: %s" % loadavg())
        results["switchyard"] = run([args.switchyard, "bench", "--plugin", "qwen-cpu-mmap", "--model", args.model_dir,
                                     "--threads", str(args.threads), "-p", str(args.p), "-n", str(args.n), "--json"],
                                    env)
        print(json.dumps(results["switchyard"]))
    if args.only != "switchyard":
        warm(gguf)
        print("load average before llama.cpp: %s" % loadavg())
        here = os.path.dirname(os.path.abspath(__file__))
        results["llama.cpp"] = run([sys.executable, os.path.join(here, "llama_cpp_bench.py"), "--model", gguf,
                                    "--threads", str(args.threads), "-p", str(args.p), "-n", str(args.n), "--json"])
        print(json.dumps(results["llama.cpp"]))
    if len(results) == 2:
        s, l = results["switchyard"], results["llama.cpp"]
        rows = [("load (s)", "load_s", False), ("first token after load (s)", "first_token_s", False),
                ("load + first token (s)", "load_plus_first_token_s", False),
                ("prefill %d tok/s" % args.p, "prefill_tok_s", True),
                ("decode %d tok/s" % args.n, "decode_tok_s", True),
                ("peak RSS (MB)", "peak_rss_mb", False), ("anonymous RSS (MB)", "anon_rss_mb", False)]
        print("\n| | switchyard (qwen-cpu-mmap, BF16) | llama.cpp (F16 GGUF) | ratio |")
        print("| --- | ---: | ---: | ---: |")
        for name, key, higher in rows:
            ratio = s[key] / l[key] if l[key] else float("nan")
            note = "" if higher else " (lower is better)"
            print("| %s | %.3f | %.3f | %.2f%s |" % (name, s[key], l[key], ratio, note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
