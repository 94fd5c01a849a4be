#!/usr/bin/env python3
"""Swap latency of `switchyard serve`: a request for model B while model A is loaded, timed to its first token.

    python3 tools/bench/serve_swap.py --model-a /tmp/bench/model-q4_k_m.gguf --model-b /tmp/bench/model-q8_0.gguf \
        --switchyard build/bin/switchyard [--swaps 20] [--threads 2] [--settings persist] \
        [--llama-server /work/peer/build/bin/llama-server --llama-server-runs 20] [--json OUT]

A and B are two GGUF files (two copies of one file work: different paths make different models) in one swap
group of a server of their own; their pages are read once first (a warm page cache). Model A is loaded by a
first request; then requests alternate B, A, B, ... each of them a swap: the loaded model is unloaded, the other
loaded, the prompt prefilled and the first token streamed. The same short prompt is sent with /v1/completions
(max_tokens 1), so the swap dominates. Two configurations, `--rounds` servers of each run one after another,
`--swaps` swaps each:

  - persist_on_unload = false: a plain swap (unload, load, prefill, first token);
  - persist_on_unload = true (the default): the unloaded model's warm KV is written to a snapshot first, and the
    model loaded restores its own snapshot of its previous unload, so the repeated prompt is a cache hit.

For comparison: the time to first token of a prompt of the same length on the loaded model (no swap), and
`switchyard bench` on the same file (the engine's load and 5-token prefill without the server).

With --llama-server, the restart that llama-swap performs is measured on the same two files, the same threads and
context: the running llama-server is stopped (SIGTERM, waited for), the other one started, its /health polled
until it answers 200, then the same streamed /v1/completions request is sent; the time from the stop to the first
token is the swap's (llama-swap does exactly these steps when a request names the other model). Runs alternate
B, A, B, ... like the switchyard swaps, and each switchyard round is followed by a llama-server round.

The reference point is llama-swap's approach, one llama.cpp server process per model: a swap there is stopping
one process and starting another, which must load the model before its first token. That cold start is measured
on the same file with llama.cpp through llama-cpp-python in a fresh process (`--llama-cpp-runs`): the time from
spawning the process to its first token, and within it the load and the first token (what a llama-server binary,
which has no Python to import, would need at least).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

# The prompts, with first words that differ so that no request reuses another's KV: the swap's request and the
# no-swap comparisons then prefill the same number of tokens.
PROMPT = "Hello, my name is"
FRESH_PROMPTS = ["Goodbye, my name is", "Welcome, my name is", "Thanks, my name is", "Sorry, my name is",
                 "Yes, my name is", "Well, my name is"]


def config(args, work, persist):
    common = (f"plugin = gguf-quant\ngroup = pair\nparallel = 1\nthreads = {args.threads}\nctx_size = {args.ctx}\n"
              f"persist_on_unload = {'true' if persist else 'false'}\n")
    return (f"[host]\nresume_path = {os.path.join(work, 'resume')}\n\n"
            f"[model.bench-a]\npath = {os.path.abspath(args.model_a)}\n{common}\n"
            f"[model.bench-b]\npath = {os.path.abspath(args.model_b)}\n{common}\n"
            "[group.pair]\nswap = true\n")


def ttft(port, model, prompt=PROMPT):
    r = sc.stream(port, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
    u = r["usage"] or {}
    return {"model": model, "ttft_s": r["t_first"] - r["t_send"], "prompt_tokens": u.get("prompt_tokens"),
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens")}


def run_switchyard(args, persist):
    work = os.path.join(args.work_dir, "persist" if persist else "plain")
    shutil.rmtree(work, ignore_errors=True)  # no snapshots of an earlier run
    os.makedirs(work)
    srv = sc.Server(args.switchyard, config(args, work, persist), args.plugin_dir, work)
    try:
        for model in ("bench-a", "bench-b", "bench-a"):  # first loads of each are not counted
            ttft(srv.port, model)
        swaps, loaded, repeats = [], [], []
        for i in range(args.swaps):
            model = ("bench-b", "bench-a")[i % 2]
            swaps.append(ttft(srv.port, model))
            # No swap, the same cache state: the same prompt again on the model just loaded (the swap's own
            # prefill without the swap), so swap minus this is what the swap itself costs.
            if i % 3 == 1:
                repeats.append(ttft(srv.port, model))
            # No swap: the model just loaded answers a prompt of the same length that shares no prefix.
            if i % 3 == 2:
                loaded.append(ttft(srv.port, model, FRESH_PROMPTS[(i // 3) % len(FRESH_PROMPTS)]))
        log = srv.log_text()
    finally:
        rc = srv.stop()
    loads = [float(x) for x in re.findall(r"model bench-[ab] loaded in ([0-9.]+) s", log)][3:]
    unloads = [float(x) for x in re.findall(r"model bench-[ab] unloaded in ([0-9.]+) s", log)][2:]
    saves = [float(x) for x in re.findall(r"model bench-[ab]: KV of .* saved to .* in ([0-9.]+) s", log)]
    waits = [float(x) for x in re.findall(r"model bench-[ab]: waited ([0-9.]+) s for the KV snapshots", log)]
    t = sorted(s["ttft_s"] for s in swaps)
    return {"persist_on_unload": persist, "snapshot_write_s_median": sc.median(saves) if saves else None,
            "loads_that_waited_for_a_write": len(waits), "swaps": swaps, "loaded": loaded,
            "swap_ttft_median_s": sc.median(t), "swap_ttft_min_s": t[0], "swap_ttft_max_s": t[-1],
            "swap_ttft_p90_s": p90(t),
            "loaded_ttft_median_s": sc.median([x["ttft_s"] for x in loaded]),
            "repeat_ttft_median_s": sc.median([x["ttft_s"] for x in repeats]), "repeats": repeats,
            "server_load_s_median": sc.median(loads) if loads else None,
            "server_unload_s_median": sc.median(unloads) if unloads else None,
            "prompt_tokens": swaps[0]["prompt_tokens"], "exit_status": rc}


def run_engine_bench(args):
    """`switchyard bench` on the same file: the engine's own load and prefill of the same number of tokens,
    without the server (the floor a swap could reach)."""
    out = subprocess.run([args.switchyard, "bench", "--plugin", "gguf-quant", "--model", os.path.abspath(args.model_b),
                          "-p", "5", "-n", "1", "--threads", str(args.threads), "--ctx-size", str(args.ctx), "--json"]
                         + (["--plugin-dir", args.plugin_dir] if args.plugin_dir else []),
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("switchyard bench failed:\n" + out.stderr[-2000:])
    return json.loads(out.stdout)


LLAMA_CHILD = r"""
import sys, time, json
t_start = time.time()
import llama_cpp
t_import = time.time()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=int(sys.argv[3]),
                      n_threads_batch=int(sys.argv[3]), verbose=False)
t_load = time.time()
for chunk in llm.create_completion(sys.argv[4], max_tokens=1, temperature=0, stream=True):
    t_first = time.time()
    break
print(json.dumps({"t_start": t_start, "t_import": t_import, "t_load": t_load, "t_first": t_first}))
"""


def run_llama_cpp(args):
    runs = []
    for _ in range(args.llama_cpp_runs):
        t_spawn = time.time()
        out = subprocess.run([sys.executable, "-c", LLAMA_CHILD, os.path.abspath(args.model_b), str(args.ctx),
                              str(args.threads), PROMPT], capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError("llama-cpp-python run failed:\n" + out.stderr[-2000:])
        t = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append({"spawn_to_first_s": t["t_first"] - t_spawn, "interpreter_and_import_s": t["t_import"] - t_spawn,
                     "load_s": t["t_load"] - t["t_import"], "first_token_s": t["t_first"] - t["t_load"],
                     "load_and_first_s": t["t_first"] - t["t_import"]})
    keys = runs[0].keys()
    return {"runs": runs, "median": {k: sc.median([r[k] for r in runs]) for k in keys}}


class LlamaServer:
    """One llama-server process on a free port (the caller's port choice), with llama-swap's default flags."""

    def __init__(self, binary, model, port, threads, ctx, log):
        self.port = port
        self.proc = subprocess.Popen([binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t",
                                      str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1"],
                                     stdout=log, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout=120):
        import http.client
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/health")
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.005)  # llama-swap polls its upstream's health; a short period favours the peer
        raise RuntimeError("llama-server did not become healthy")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_llama_server(args, log_path):
    """--swaps restarts of llama-server alternating B, A, ..., each timed from the stop of the running one to the
    first streamed token of the new one (llama-swap's swap)."""
    files = (os.path.abspath(args.model_b), os.path.abspath(args.model_a))
    swaps = []
    with open(log_path, "ab") as log:
        srv = LlamaServer(args.llama_server, os.path.abspath(args.model_a), free_port(), args.threads, args.ctx, log)
        try:
            srv.wait_healthy()
            sc.stream(srv.port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "temperature": 0})
            for i in range(args.swaps):
                t0 = time.perf_counter()
                srv.stop()
                t_stopped = time.perf_counter()
                srv = LlamaServer(args.llama_server, files[i % 2], free_port(), args.threads, args.ctx, log)
                srv.wait_healthy()
                t_healthy = time.perf_counter()
                r = sc.stream(srv.port, "/v1/completions", {"prompt": PROMPT, "max_tokens": 1, "temperature": 0})
                swaps.append({"model": files[i % 2], "ttft_s": r["t_first"] - t0, "stop_s": t_stopped - t0,
                              "start_to_healthy_s": t_healthy - t_stopped, "request_to_first_s": r["t_first"] - t_healthy})
        finally:
            srv.stop()
    t = sorted(x["ttft_s"] for x in swaps)
    return {"swaps": swaps, "swap_ttft_median_s": sc.median(t), "swap_ttft_p90_s": p90(t),
            "stop_median_s": sc.median([x["stop_s"] for x in swaps]),
            "start_to_healthy_median_s": sc.median([x["start_to_healthy_s"] for x in swaps]),
            "request_to_first_median_s": sc.median([x["request_to_first_s"] for x in swaps])}


def p90(sorted_values):
    """The nearest-rank 90th percentile: the value at rank ceil(0.9 n)."""
    import math
    return sorted_values[max(0, math.ceil(0.9 * len(sorted_values)) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-a", required=True)
    ap.add_argument("--model-b", required=True)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir")
    ap.add_argument("--work-dir", default="/tmp/sy-serve-swap")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--swaps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3, help="servers started one after another, --swaps each")
    ap.add_argument("--llama-cpp-runs", type=int, default=3, help="0: skip the llama-cpp-python reference")
    ap.add_argument("--settings", default="plain,persist",
                    help="which switchyard configurations: plain (persist_on_unload = false), persist, or both")
    ap.add_argument("--llama-server", help="a llama-server binary: measure its restart on the same files")
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait for this 1-minute load average (and CPUs at most 20%% busy over 3 s) first")
    ap.add_argument("--max-wait", type=float, default=1800, help="seconds to wait for that at most")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    for path in (args.model_a, args.model_b):
        sc.warm_page_cache(path)
    result = {"machine": sc.machine(), "prompt": PROMPT, "threads": args.threads, "ctx_size": args.ctx,
              "model_a": os.path.abspath(args.model_a), "model_b": os.path.abspath(args.model_b)}
    result["load_before"] = sc.wait_for_quiet(args.max_load, args.max_wait)
    print(f"load average {result['load_before']}", flush=True)
    settings = [x.strip() for x in args.settings.split(",") if x.strip()]
    if not settings or any(x not in ("plain", "persist") for x in settings):
        ap.error("--settings takes plain, persist or both (comma-separated)")
    llama_rounds = []
    for persist in [x == "persist" for x in settings]:
        rounds = []
        for k in range(args.rounds):
            r = run_switchyard(args, persist)
            rounds.append(r)
            if args.llama_server:  # alternate: each switchyard round is followed by a llama-server round
                lr = run_llama_server(args, os.path.join(args.work_dir, "llama-server.log"))
                llama_rounds.append(lr)
                print(f"llama-server restart round {len(llama_rounds) - 1}: swap to first token median "
                      f"{lr['swap_ttft_median_s'] * 1000:.1f} ms, p90 {lr['swap_ttft_p90_s'] * 1000:.1f} ms (stop "
                      f"{lr['stop_median_s'] * 1000:.1f}, start to healthy {lr['start_to_healthy_median_s'] * 1000:.1f}, "
                      f"request to first token {lr['request_to_first_median_s'] * 1000:.1f}); load average now "
                      f"{sc.loadavg()[0]:.2f}", flush=True)
            print(f"persist_on_unload={str(persist).lower()} round {k}: swap to first token median "
                  f"{r['swap_ttft_median_s'] * 1000:.1f} ms (min {r['swap_ttft_min_s'] * 1000:.1f}, p90 "
                  f"{r['swap_ttft_p90_s'] * 1000:.1f}, max {r['swap_ttft_max_s'] * 1000:.1f}) over {len(r['swaps'])} "
                  f"swaps, {r['prompt_tokens']} prompt tokens, cached "
                  f"{sorted(set(x['cached_tokens'] for x in r['swaps']))}; no swap: "
                  f"{r['loaded_ttft_median_s'] * 1000:.1f} ms, same prompt again "
                  f"{r['repeat_ttft_median_s'] * 1000:.1f} ms; server log: load "
                  f"{(r['server_load_s_median'] or 0) * 1000:.1f} ms, unload "
                  f"{(r['server_unload_s_median'] or 0) * 1000:.1f} ms, snapshot write (background) "
                  f"{(r['snapshot_write_s_median'] or 0) * 1000:.1f} ms, loads that waited for one "
                  f"{r['loads_that_waited_for_a_write']}; load average now {sc.loadavg()[0]:.2f}",
                  flush=True)
        all_swaps = sorted(s["ttft_s"] for r in rounds for s in r["swaps"])
        summary = {"rounds": rounds, "swap_ttft_median_s": sc.median(all_swaps),
                   "swap_ttft_p90_s": p90(all_swaps),
                   "loaded_ttft_median_s": sc.median([x["ttft_s"] for r in rounds for x in r["loaded"]]),
                   "repeat_ttft_median_s": sc.median([x["ttft_s"] for r in rounds for x in r["repeats"]]),
                   "server_load_s_median": sc.median([r["server_load_s_median"] for r in rounds]),
                   "server_unload_s_median": sc.median([r["server_unload_s_median"] for r in rounds])}
        result["persist" if persist else "plain"] = summary
        print(f"persist_on_unload={str(persist).lower()}, all rounds: swap to first token median "
              f"{summary['swap_ttft_median_s'] * 1000:.1f} ms, p90 {summary['swap_ttft_p90_s'] * 1000:.1f} ms; no swap "
              f"{summary['loaded_ttft_median_s'] * 1000:.1f} ms, same prompt again {summary['repeat_ttft_median_s'] * 1000:.1f} ms",
              flush=True)
    if llama_rounds:
        t = sorted(x["ttft_s"] for r in llama_rounds for x in r["swaps"])
        result["llama_server_restart"] = {"rounds": llama_rounds, "swap_ttft_median_s": sc.median(t),
                                          "swap_ttft_p90_s": p90(t)}
        print(f"llama-server restart, all rounds: swap to first token median {sc.median(t) * 1000:.1f} ms, p90 "
              f"{p90(t) * 1000:.1f} ms", flush=True)
    eb = [run_engine_bench(args) for _ in range(3)]
    result["engine_bench"] = eb
    print("switchyard bench (engine alone, no server): " + "; ".join(
        f"load {b.get('load_s', 0) * 1000:.0f} ms + 5-token prefill {b.get('prefill_s', 0) * 1000:.0f} ms"
        for b in eb), flush=True)
    if args.llama_cpp_runs > 0:
        r = run_llama_cpp(args)
        result["llama_cpp_cold_start"] = r
        m = r["median"]
        print(f"llama.cpp (llama-cpp-python) in a fresh process: spawn to first token {m['spawn_to_first_s'] * 1000:.0f}"
              f" ms (interpreter + import {m['interpreter_and_import_s'] * 1000:.0f}, load {m['load_s'] * 1000:.0f}, "
              f"first token {m['first_token_s'] * 1000:.0f}); load + first token {m['load_and_first_s'] * 1000:.0f} ms",
              flush=True)
    result["load_after"] = sc.loadavg()
    print(f"load average after {result['load_after']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
