#!/usr/bin/env python3
"""Prefill against prompt length and decode at depth: `switchyard bench` (gguf-quant, each forced CPU tier) beside
a native llama.cpp's llama-bench on the same GGUF file, same threads, runs alternating (ours, then the peer's,
for every length), as docs/benchmarks.md records them ("Attention at length").

    python3 tools/bench/attn_scaling_bench.py --model /tmp/pa-bench/model-q8_0.gguf \\
        --switchyard build/bin/switchyard --llama-bench /path/to/llama-bench \\
        [--lengths 512 2048 4096] [--tiers avx512] [--threads 2] [--depth 4096] [--gen 32] \\
        [--json out.json] [--plot docs/img/attn-prefill.png]

Prefill is -p N (ours: one prefill call of N tokens; llama-bench: -p N -n 0). Decode at depth is ours -p DEPTH
-n GEN (decode right after the prefill) and llama-bench -p 0 -n GEN -d DEPTH. One repetition each (-r 1): on a
shared machine alternating runs matter more than repetitions; the load average is printed before each run.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ours(args, tier, n_prompt, n_gen):
    cmd = [args.switchyard, "bench", "--plugin", "gguf-quant", "--model", args.model, "-p", str(n_prompt),
           "-n", str(n_gen), "--threads", str(args.threads), "--ctx-size", str(n_prompt + n_gen + 16), "--json"]
    env = dict(os.environ, SY_CPU_TIER=tier)
    print(f"# load {loadavg()}: SY_CPU_TIER={tier} {' '.join(cmd)}", flush=True)
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(json.dumps(r), flush=True)
    return r


def peer(args, n_prompt, n_gen, depth=0):
    cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-p", str(n_prompt), "-n", str(n_gen),
           "-r", "1", "-o", "json"]
    if depth:
        cmd += ["-d", str(depth)]
    print(f"# load {loadavg()}: {' '.join(cmd)}", flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)[0]
    print(json.dumps({k: r.get(k) for k in ("n_prompt", "n_gen", "n_depth", "avg_ts", "build_commit")}), flush=True)
    return r["avg_ts"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--switchyard", default="build/bin/switchyard")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 4096, 8192])
    ap.add_argument("--tiers", nargs="+", default=["avx512"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    print(f"# {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")

    res = {"prefill": {}, "decode_depth": {}}
    for n in args.lengths:
        row = {}
        for tier in args.tiers:
            row[tier] = ours(args, tier, n, 1)["prefill_tok_s"]
        row["llama.cpp"] = peer(args, n, 0)
        res["prefill"][n] = row
    if args.depth:
        row = {}
        for tier in args.tiers:
            row[tier] = ours(args, tier, args.depth, args.gen)["decode_tok_s"]
        row["llama.cpp"] = peer(args, 0, args.gen, args.depth)
        res["decode_depth"][args.depth] = row

    print("\n| prompt tokens | " + " | ".join(f"{t} tok/s" for t in args.tiers) + " | llama.cpp tok/s | " +
          " | ".join(f"{t} / llama.cpp" for t in args.tiers) + " |")
    print("| ---: |" + " ---: |" * (2 * len(args.tiers) + 1))
    for n, row in res["prefill"].items():
        print(f"| {n} | " + " | ".join(f"{row[t]:.1f}" for t in args.tiers) + f" | {row['llama.cpp']:.1f} | " +
              " | ".join(f"{row[t] / row['llama.cpp']:.2f}×" for t in args.tiers) + " |")
    for d, row in res["decode_depth"].items():
        print(f"| decode at depth {d} | " + " | ".join(f"{row[t]:.2f}" for t in args.tiers) +
              f" | {row['llama.cpp']:.2f} | " + " | ".join(f"{row[t] / row['llama.cpp']:.2f}×" for t in args.tiers) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        ns = list(res["prefill"])
        for name in args.tiers + ["llama.cpp"]:
            ax.plot(ns, [res["prefill"][n][name] for n in ns], marker="o",
                    label=f"switchyard {name}" if name != "llama.cpp" else "llama.cpp (native)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("prefill tok/s")
        ax.set_title(f"Qwen2.5-0.5B shape, random weights, {os.path.basename(args.model)}, {args.threads} threads")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
