#!/usr/bin/env python3
"""Decode speed of `switchyard serve` with and without a constraint (response_format json_object), under load.

    python3 tools/bench/serve_constrained.py --model M.gguf --switchyard build/bin/switchyard \
        [--parallel 4] [--concurrency 1,4] [--tokens 64] [--repeats 3] [--json OUT]

One model with `parallel` slots. For each concurrency c and each mode (plain, json_object), c clients at once
each stream a completion of `--tokens` tokens at temperature 1 (seeded: the same seeds in both modes) for a short
prompt of their own. Reported per mode: the aggregate decode tok/s while all c streams decode (text chunks that
arrived in the window where every stream was past its first token and not finished, over its length; as
serve_throughput.py), and the median per-stream decode tok/s ((completion tokens - 1) / (end - first token)).
The host's grammar cost per constrained token is read from /metrics (switchyard_constraint_microseconds over
switchyard_constrained_tokens: masks, masked rows, accepts, measured in the engine loop). It is also estimated as
the difference of the per-stream step times: 1/tok_s(json_object) - 1/tok_s(plain),
from the median round and from the best round of each mode (the best is the least disturbed by other load).
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

WORDS = ["river", "garden", "engine", "lantern", "harbor", "meadow", "winter", "copper"]


def constraint_counters(srv):
    """(constrained tokens, microseconds of engine-loop grammar work) from /metrics."""
    text = srv.request("GET", "/metrics")[1]
    tokens = us = 0
    for line in text.splitlines():
        if line.startswith('switchyard_constrained_tokens{model="bench"}'):
            tokens = int(line.split()[-1])
        elif line.startswith('switchyard_constraint_microseconds{model="bench"}'):
            us = int(line.split()[-1])
    return tokens, us


def one_round(port, c, tokens, round_, constrained):
    results = [None] * c
    errors = []

    def client(i):
        body = {"model": "bench", "max_tokens": tokens, "temperature": 1, "seed": 1000 * round_ + i,
                "messages": [{"role": "user", "content": f"Describe the {WORDS[i % len(WORDS)]} {round_}-{i} "
                                                         "as a JSON object."}]}
        if constrained:
            body["response_format"] = {"type": "json_object"}
        try:
            results[i] = sc.stream(port, "/v1/chat/completions", body)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    w0 = max(r["t_first"] for r in results)
    w1 = min(r["t_end"] for r in results)
    in_window = sum(1 for r in results for t in r["chunk_times"] if w0 < t <= w1)
    per_stream = [(r["usage"]["completion_tokens"] - 1) / (r["t_end"] - r["t_first"])
                  for r in results if r["usage"]["completion_tokens"] > 1 and r["t_end"] > r["t_first"]]
    if constrained:
        for r in results:
            if r["finish"] == "stop":
                json.loads(r["text"])  # a complete document must parse
    return {"steady_tok_s": in_window / (w1 - w0) if w1 > w0 and in_window > 0 else None,
            "per_stream_tok_s": per_stream, "tokens": [r["usage"]["completion_tokens"] for r in results],
            "finish": [r["finish"] for r in results]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sc.add_serve_args(ap, "/tmp/sy-serve-constrained", parallel=4, concurrency="1,4", max_wait=900)
    args = ap.parse_args()
    sc.warm_page_cache(args.model)
    cfg = sc.bench_config(args)
    result = {"machine": sc.machine(), "model": os.path.abspath(args.model), "threads": args.threads,
              "tokens": args.tokens, "levels": {}}
    result["load_before"] = sc.wait_for_quiet(args.max_load, args.max_wait)
    srv = sc.Server(args.switchyard, cfg, args.plugin_dir, args.work_dir)
    try:
        one_round(srv.port, 1, 4, -1, False)  # load and warm up
        one_round(srv.port, 1, 4, -1, True)   # builds the grammar vocabulary once
        for c in [int(x) for x in args.concurrency.split(",")]:
            level, rounds = {}, {"plain": [], "json_object": []}
            t0, us0 = constraint_counters(srv)
            # Interleaved rounds (plain, json_object, plain, ...), so drift in the machine's load hits both alike.
            for r in range(args.repeats):
                for mode in rounds:
                    rounds[mode].append(one_round(srv.port, c, args.tokens, r, mode == "json_object"))
            t1, us1 = constraint_counters(srv)
            level["loop_us_per_constrained_token"] = (us1 - us0) / (t1 - t0) if t1 > t0 else None
            print(f"concurrency {c}: the engine loop spent {level['loop_us_per_constrained_token']:.1f} us per "
                  f"constrained token on the grammar ({t1 - t0} tokens; /metrics)", flush=True)
            for mode, rs in rounds.items():
                steady = [x["steady_tok_s"] for x in rs if x["steady_tok_s"]]
                streams = [sc.median(x["per_stream_tok_s"]) for x in rs if x["per_stream_tok_s"]]
                level[mode] = {"steady_tok_s": sc.median(steady) if steady else None,
                               "per_stream_tok_s": sc.median(streams), "best_per_stream_tok_s": max(streams),
                               "rounds": rs}
            for key, label in (("per_stream_tok_s", "median"), ("best_per_stream_tok_s", "best")):
                p, j = level["plain"][key], level["json_object"][key]
                level[label] = {"plain": p, "json_object": j, "slowdown_pct": (1 - j / p) * 100,
                                "mask_us_per_token": (1 / j - 1 / p) * 1e6}
                print(f"concurrency {c} ({label} round): plain {p:.1f} tok/s per stream, json_object {j:.1f}; "
                      f"{level[label]['slowdown_pct']:.1f}% slower, {level[label]['mask_us_per_token']:.0f} us per "
                      f"token; aggregate (median) plain {level['plain']['steady_tok_s'] or 0:.1f}, json_object "
                      f"{level['json_object']['steady_tok_s'] or 0:.1f}", flush=True)
            result["levels"][c] = level
    finally:
        result["exit_status"] = srv.stop()
    result["load_after"] = sc.loadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
