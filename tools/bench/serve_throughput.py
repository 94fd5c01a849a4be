#!/usr/bin/env python3
"""Aggregate decode throughput of `switchyard serve` with 1, 2, 4, 8 concurrent streams (continuous batching).

    python3 tools/bench/serve_throughput.py --model /tmp/bench/q4km.gguf --switchyard build/bin/switchyard \
        [--parallel 8] [--concurrency 1,2,4,8] [--tokens 64] [--repeats 3] [--json OUT] [--plot OUT.png]

One model with `parallel` slots. For each concurrency c, c clients at once each stream a greedy completion of
`--tokens` tokens for a short prompt of their own (distinct prompts, so no prefix is shared). Two figures:

  - decode tok/s, all streams decoding: the tokens that arrived while every one of the c streams was past its first
    token and not yet finished, divided by the length of that window (the steady state of a batch of c);
  - end to end tok/s: all completion tokens / the time from the first request sent to the last stream's end
    (prefill and first-token latency included).

The median over `--repeats` rounds is reported, with the speedup over one stream. With `--engine-batch-decode
EXE` (tools/bench/engine_batch_decode.c, built by hand) the engine alone is measured right after, on the same
file: one batched decode() call over 1, 2, 4, 8 sequences, without the server, so the scheduler's share shows.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

WORDS = ["river", "garden", "engine", "lantern", "harbor", "meadow", "winter", "copper", "violet", "orbit",
         "canyon", "signal", "marble", "thunder", "pepper", "island"]


def prompt_for(i, round_):
    return f"Story {round_}-{i}: the {WORDS[i % len(WORDS)]} and the {WORDS[(i * 7 + 3) % len(WORDS)]} said"


def one_round(port, c, tokens, round_):
    results = [None] * c
    errors = []

    def client(i):
        try:
            results[i] = sc.stream(port, "/v1/completions", {"model": "bench", "prompt": prompt_for(i, round_),
                                                             "max_tokens": tokens, "temperature": 0})
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    t_end = max(r["t_end"] for r in results)
    n_tokens = sum(r["usage"]["completion_tokens"] for r in results)
    # Steady state: every stream decoding.
    w0 = max(r["t_first"] for r in results)
    w1 = min(r["t_end"] for r in results)
    in_window = sum(1 for r in results for t in r["chunk_times"] if w0 < t <= w1)
    steady = in_window / (w1 - w0) if w1 > w0 and in_window > 0 else None
    return {"completion_tokens": n_tokens, "wall_s": t_end - t0, "end_to_end_tok_s": n_tokens / (t_end - t0),
            "steady_tok_s": steady, "window_s": w1 - w0, "window_tokens": in_window,
            "ttft_s": [r["t_first"] - r["t_send"] for r in results],
            "finish": [r["finish"] for r in results]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sc.add_serve_args(ap, "/tmp/sy-serve-throughput", parallel=8, concurrency="1,2,4,8", max_wait=1800)
    ap.add_argument("--plot", help="write a PNG plot here (needs matplotlib)")
    ap.add_argument("--engine-batch-decode", help="the engine_batch_decode executable (see above)")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    sc.warm_page_cache(args.model)
    cfg = sc.bench_config(args)
    result = {"machine": sc.machine(), "model": os.path.abspath(args.model), "threads": args.threads,
              "parallel": args.parallel, "tokens": args.tokens, "levels": {}}
    result["load_before"] = sc.wait_for_quiet(args.max_load, args.max_wait)
    print(f"load average {result['load_before']}", flush=True)
    srv = sc.Server(args.switchyard, cfg, args.plugin_dir, args.work_dir)
    try:
        one_round(srv.port, 1, 4, -1)  # load and warm up
        for c in levels:
            rounds = [one_round(srv.port, c, args.tokens, r) for r in range(args.repeats)]
            steady = [r["steady_tok_s"] for r in rounds if r["steady_tok_s"]]
            level = {"rounds": rounds, "steady_tok_s": sc.median(steady) if steady else None,
                     "end_to_end_tok_s": sc.median([r["end_to_end_tok_s"] for r in rounds]),
                     "ttft_median_s": sc.median([t for r in rounds for t in r["ttft_s"]])}
            result["levels"][c] = level
            print(f"concurrency {c}: decode {level['steady_tok_s'] or 0:.1f} tok/s (all streams decoding), end to "
                  f"end {level['end_to_end_tok_s']:.1f} tok/s, median time to first token "
                  f"{level['ttft_median_s'] * 1000:.0f} ms; finish reasons "
                  f"{sorted(set(f for r in rounds for f in r['finish']))}", flush=True)
        _, running = srv.request("GET", "/running")
        metrics = srv.request("GET", "/metrics")[1]
        result["running"] = running
    finally:
        result["exit_status"] = srv.stop()
    result["load_after"] = sc.loadavg()
    print(f"load average after {result['load_after']}", flush=True)
    if args.engine_batch_decode:
        plugin_dir = args.plugin_dir or os.path.join(os.path.dirname(os.path.abspath(args.switchyard)), "..", "plugins")
        out = subprocess.run([args.engine_batch_decode, plugin_dir, os.path.abspath(args.model), str(args.threads)],
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError("engine_batch_decode failed:\n" + out.stderr[-2000:])
        result["engine_alone_tok_s"] = {int(m.group(1)): float(m.group(2)) for m in
                                        re.finditer(r"batch (\d+): [0-9.]+ ms per step, ([0-9.]+) tok/s", out.stdout)}
        result["load_after_engine"] = sc.loadavg()
        print("engine alone (one batched decode call): " + ", ".join(
            f"{b}: {v:.1f} tok/s" for b, v in sorted(result["engine_alone_tok_s"].items())) +
            f"; load average after {result['load_after_engine']}", flush=True)
    base = result["levels"].get(1)
    if base:
        for c, level in result["levels"].items():
            level["speedup_steady"] = (level["steady_tok_s"] / base["steady_tok_s"]
                                       if level["steady_tok_s"] and base["steady_tok_s"] else None)
            level["speedup_end_to_end"] = level["end_to_end_tok_s"] / base["end_to_end_tok_s"]
            print(f"  {c}: x{level['speedup_steady'] or 0:.2f} decode, x{level['speedup_end_to_end']:.2f} end to end")
    if isinstance(metrics, str):
        result["metrics_decode_lines"] = [ln for ln in metrics.splitlines() if "generated_tokens" in ln]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    levels = sorted(result["levels"])
    steady = [result["levels"][c]["steady_tok_s"] or 0 for c in levels]
    e2e = [result["levels"][c]["end_to_end_tok_s"] for c in levels]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    ax.plot(levels, steady, "o-", label="decode, all streams decoding")
    ax.plot(levels, e2e, "s--", label="end to end (prefill included)")
    engine = result.get("engine_alone_tok_s") or {}
    if engine:
        ks = sorted(engine)
        ax.plot(ks, [engine[k] for k in ks], "^-.", color="tab:green", label="engine alone, one batched decode call")
    ax.plot(levels, [steady[0] * c for c in levels], ":", color="gray", label="linear in the single stream")
    if 4 in levels:
        ax.plot([4], [2.5 * steady[0]], marker="_", markersize=28, mew=2, color="tab:red", ls="none",
                label="target at 4: 2.5 × single stream")
    for c, v in zip(levels, steady):
        ax.annotate(f"{v:.1f}", (c, v), textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(c) for c in levels])
    ax.set_xlabel("concurrent streams (parallel = %d slots)" % result["parallel"])
    ax.set_ylabel("aggregate tokens / s")
    ax.set_ylim(0, max(max(steady), max(e2e), max(engine.values(), default=0)) * 1.35)
    ax.set_title("switchyard serve, 0.5B Q4_K_M (random weights), %d threads" % result["threads"], fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":
    main()
