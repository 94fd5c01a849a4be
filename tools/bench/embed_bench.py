#!/usr/bin/env python3
"""Embeddings per second, switchyard against llama-server --embeddings, on the same GGUF with the same threads.

Inputs of exactly 128 tokens ([CLS] + 126 word pieces + [SEP], checked with the model's tokenizer through
/tokenize of llama-server), sent to /v1/embeddings as requests of B inputs (B = 1, 16, 64) from one client; runs
alternate between the two servers (switchyard, llama-server, switchyard, ...) so that a change of load on the
machine falls on both, and the median of the rounds is reported. Writes JSON, and with --plot a PNG.

    build/bin/switchyard quantize "$SY_MINILM_DIR" minilm-f16.gguf F16
    python3 tools/bench/embed_bench.py --gguf minilm-f16.gguf \\
        --llama-server /work/peer/build/bin/llama-server --threads 2 \\
        --json build/embed-bench.json --plot docs/embeddings-bench.png
"""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common  # noqa: E402

WORDS = ("the railway yard sorts freight cars onto tracks by destination while locomotives shunt them back and "
         "forth engineers signal each move carefully and the night shift keeps trains rolling through storms").split()


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return json.loads(data)


def start(cmd, port, log_path):
    log = open(log_path, "wb")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"{cmd[0]} did not start: {open(log_path).read()[-2000:]}")


def texts_of_128_tokens(port, n, seed=16):
    """n texts that tokenize to exactly 128 tokens with the specials (llama-server's /tokenize, no specials)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        words = [rng.choice(WORDS) for _ in range(140)]
        lo, hi = 1, len(words)
        while lo < hi:  # the longest prefix of at most 126 pieces
            mid = (lo + hi + 1) // 2
            k = len(post(port, "/tokenize", {"content": " ".join(words[:mid])})["tokens"])
            lo, hi = (mid, hi) if k <= 126 else (lo, mid - 1)
        text = " ".join(words[:lo])
        if len(post(port, "/tokenize", {"content": text})["tokens"]) == 126:
            out.append(text)
    return out


def rate(port, model, texts, batch, seconds):
    """Embeddings per second over repeated requests of `batch` inputs, for at least `seconds`."""
    post(port, "/v1/embeddings", {"model": model, "input": texts[:batch]})  # warm
    done, t0, k = 0, time.perf_counter(), 0
    while True:
        chunk = [texts[(k * batch + i) % len(texts)] for i in range(batch)]
        r = post(port, "/v1/embeddings", {"model": model, "input": chunk, "encoding_format": "float"})
        if len(r["data"]) != batch:
            raise RuntimeError("short answer")
        done += batch
        k += 1
        dt = time.perf_counter() - t0
        if dt >= seconds and k >= 2:
            return done / dt


def plot(summary, batches, threads, path):
    """The bar chart of a summary (also from a saved JSON: plot(json.load(f), ...))."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = range(len(batches))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [summary["batches"][str(b)]["switchyard"] for b in batches], w,
           label="switchyard (gguf-quant)")
    ax.bar([x + w / 2 for x in xs], [summary["batches"][str(b)]["llama_server"] for b in batches], w,
           label="llama-server --embeddings")
    for x, b in zip(xs, batches):
        ax.annotate(f"{summary['batches'][str(b)]['ratio']:.2f}x",
                    (x, max(summary["batches"][str(b)]["switchyard"], summary["batches"][str(b)]["llama_server"])),
                    ha="center", va="bottom")
    ax.set_xticks(list(xs), [f"batch {b}" for b in batches])
    ax.set_ylabel("embeddings / s (128 tokens each)")
    ax.set_title(f"all-MiniLM-L6-v2 F16 GGUF, {threads} threads, {summary['machine']['date']}\n"
                 f"{summary['machine']['cpu']} ({summary['machine']['cpus']} CPUs), shared with parallel builds (loaded)",
                 fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--switchyard", default=os.path.join(os.path.dirname(__file__), "../../build/bin/switchyard"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    work = tempfile.mkdtemp(prefix="sy-embed-bench-")
    sy_port, ll_port = 18741, 18742
    cfg = os.path.join(work, "serve.ini")
    with open(cfg, "w") as f:
        f.write(f"[model.minilm]\nplugin = gguf-quant\npath = {os.path.abspath(args.gguf)}\nthreads = {args.threads}\n")
    sy = start([args.switchyard, "serve", "--config", cfg, "--listen", f"127.0.0.1:{sy_port}",
                "--resume-path", os.path.join(work, "resume")], sy_port, os.path.join(work, "switchyard.log"))
    ll = start([args.llama_server, "-m", args.gguf, "--embeddings", "--port", str(ll_port), "--host", "127.0.0.1",
                "-t", str(args.threads), "-tb", str(args.threads), "-np", "64", "-c", str(64 * 512),
                "-b", "8192", "-ub", "8192"], ll_port, os.path.join(work, "llama-server.log"))
    try:
        texts = texts_of_128_tokens(ll_port, 64)
        # both see the same 128 tokens per input
        st = post(sy_port, "/v1/embeddings", {"model": "minilm", "input": texts[:4]})
        if st["usage"]["prompt_tokens"] != 4 * 128:
            raise RuntimeError(f"switchyard counts {st['usage']['prompt_tokens']} tokens for 4 inputs")
        results = {b: {"switchyard": [], "llama-server": []} for b in batches}
        for rnd in range(args.rounds):
            for b in batches:
                for name, port in (("switchyard", sy_port), ("llama-server", ll_port)):
                    r = rate(port, "minilm", texts, b, args.seconds)
                    results[b][name].append(r)
                    print(f"round {rnd + 1} batch {b:3d} {name:13s} {r:8.1f} embeddings/s", flush=True)
    finally:
        for p in (sy, ll):
            p.terminate()
            p.wait(30)
    summary = {"machine": serve_common.machine(), "gguf": os.path.basename(args.gguf), "threads": args.threads,
               "tokens_per_input": 128, "rounds": args.rounds, "batches": {}}
    for b in batches:
        s, l = statistics.median(results[b]["switchyard"]), statistics.median(results[b]["llama-server"])
        summary["batches"][str(b)] = {"switchyard": s, "llama_server": l, "ratio": s / l,
                                      "runs": results[b]}
        print(f"batch {b:3d}: switchyard {s:.1f}/s, llama-server {l:.1f}/s, ratio {s / l:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.plot:
        plot(summary, batches, args.threads, args.plot)

if __name__ == "__main__":
    main()
