#!/usr/bin/env python3
"""Decode speed with and without a constraint, switchyard serve and llama-server side by side, on one GGUF.

    python3 tools/bench/grammar_vs_llama_cpp.py --model model-f16.gguf --switchyard build/bin/switchyard \\
        --llama-server build/llama.cpp-native/build/bin/llama-server [--tokens 128] [--repeats 3] [--json OUT]

One server at a time (switchyard first, then llama-server), one slot, `--threads` threads, the same requests:
POST /v1/completions, streamed, greedy (temperature 0), `--tokens` tokens for one fixed prompt, in four modes
through the fields both servers read (llama.cpp's): none; `json_schema: {"type": "object"}`; `json_schema` the
10-property schema of tools/bench/grammar_bench.c; `grammar` tests/fixtures/grammars/json.gbnf. Per request the
decode tok/s is (completion tokens - 1) / (last token - first token) from the stream's arrival times; rounds are
interleaved (none, object, schema, json.gbnf, none, ...) and the median round is reported. A constrained
generation may end before `--tokens` when its document is complete: its speed is over the tokens it made.
For switchyard the engine loop's own time on the grammar per constrained token (mask, masked row, accept) is read
from /metrics around each request: the figure that other load on the machine disturbs least.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

SCHEMA10 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 1000000},
        "name": {"type": "string", "maxLength": 64},
        "email": {"type": "string"},
        "active": {"type": "boolean"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "role": {"enum": ["admin", "user", "guest"]},
        "created": {"type": "string", "format": "date-time"},
        "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "note": {"type": ["string", "null"]},
    },
    "required": ["id", "name", "email", "active", "score", "tags", "role", "created", "address", "note"],
    "additionalProperties": False,
}

PROMPT = "Here is the record of the new user, as JSON:\n"


def modes():
    with open(os.path.join(ROOT, "tests", "fixtures", "grammars", "json.gbnf"), encoding="utf-8") as f:
        json_gbnf = f.read()
    return {"none": {}, "object": {"json_schema": {"type": "object"}}, "schema10": {"json_schema": SCHEMA10},
            "json.gbnf": {"grammar": json_gbnf}}


class LlamaServer:
    def __init__(self, exe, model, threads, ctx, log_path):
        self.log = open(log_path, "wb")
        self.port = 18000 + os.getpid() % 1000
        self.proc = subprocess.Popen([exe, "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(ctx),
                                      "-np", "1", "--host", "127.0.0.1", "--port", str(self.port), "--no-warmup"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                import http.client
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError("llama-server did not start; see " + log_path)

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def one(port, model_name, tokens, extra):
    body = dict({"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "seed": 1}, **extra)
    if model_name:
        body["model"] = model_name
    r = sc.stream(port, "/v1/completions", body)
    n = (r["usage"] or {}).get("completion_tokens") or len(r["chunk_times"])
    dt = r["t_end"] - r["t_first"]
    return {"tokens": n, "finish": r["finish"], "tok_s": (n - 1) / dt if n > 1 and dt > 0 else None,
            "first_s": r["t_first"] - r["t_send"], "text": r["text"][:200]}


def constraint_counters(port):
    """switchyard's /metrics: (constrained tokens, microseconds the engine loop spent on the grammar for them:
    masks, masked rows, accepts). None for a server without them."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode("utf-8", "replace")
    tokens = us = None
    for line in text.splitlines():
        if line.startswith('switchyard_constrained_tokens{model="bench"}'):
            tokens = int(line.split()[-1])
        elif line.startswith('switchyard_constraint_microseconds{model="bench"}'):
            us = int(line.split()[-1])
    return (tokens, us) if tokens is not None and us is not None else None


def run_rounds(port, model_name, tokens, repeats, metrics=False):
    ms = modes()
    for extra in ms.values():  # warm up: first touch of the weights, grammar vocabularies, caches
        one(port, model_name, 8, extra)
    rounds = {m: [] for m in ms}
    loop = {m: [0, 0] for m in ms}
    for _ in range(repeats):
        for m, extra in ms.items():
            before = constraint_counters(port) if metrics else None
            rounds[m].append(one(port, model_name, tokens, extra))
            after = constraint_counters(port) if metrics else None
            if before and after:
                loop[m][0] += after[0] - before[0]
                loop[m][1] += after[1] - before[1]
    out = {}
    for m, rs in rounds.items():
        speeds = [x["tok_s"] for x in rs if x["tok_s"]]
        out[m] = {"tok_s": sc.median(speeds) if speeds else None, "rounds": rs}
        if loop[m][0]:
            out[m]["loop_us_per_constrained_token"] = loop[m][1] / loop[m][0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a GGUF both servers load")
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir")
    ap.add_argument("--llama-server")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work-dir", default="/tmp/sy-grammar-vs-llama")
    ap.add_argument("--max-load", type=float, default=1.5)
    ap.add_argument("--max-wait", type=float, default=120)
    ap.add_argument("--only", choices=["switchyard", "llama.cpp"], help="run one server")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work_dir, exist_ok=True)
    sc.warm_page_cache(a.model)
    result = {"machine": sc.machine(), "model": os.path.abspath(a.model), "threads": a.threads, "tokens": a.tokens,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result["load_before"] = sc.wait_for_quiet(a.max_load, a.max_wait)
    cfg = (f"[host]\nresume_path = {os.path.join(a.work_dir, 'resume')}\n\n"
           f"[model.bench]\nplugin = gguf-quant\npath = {os.path.abspath(a.model)}\nparallel = 1\n"
           f"threads = {a.threads}\nctx_size = {a.ctx}\npersist_on_unload = false\n")
    def save():
        if a.json:
            with open(a.json, "w") as f:
                json.dump(result, f, indent=1)

    def show(who):
        base = result[who]["none"]["tok_s"]
        for m in modes():
            v = result[who][m]["tok_s"]
            r = result[who][m]["rounds"][0]
            loop = result[who][m].get("loop_us_per_constrained_token")
            print(f"{who:<10} {m:<10} {v or 0:8.2f} tok/s  {(v / base - 1) * 100 if v and base else 0:+6.1f}% vs none  "
                  + (f"grammar {loop:.0f} us/token  " if loop else "")
                  + f"({r['tokens']} tokens, {r['finish']}: {r['text'][:60]!r})", flush=True)

    if a.only in (None, "switchyard"):
        srv = sc.Server(a.switchyard, cfg, a.plugin_dir, a.work_dir)
        try:
            result["switchyard"] = run_rounds(srv.port, "bench", a.tokens, a.repeats, metrics=True)
        finally:
            srv.stop()
        result["load_after_switchyard"] = sc.loadavg()
        show("switchyard")
        save()
    if a.only in (None, "llama.cpp"):
        ls = LlamaServer(a.llama_server, a.model, a.threads, a.ctx, os.path.join(a.work_dir, "llama-server.log"))
        try:
            result["llama.cpp"] = run_rounds(ls.port, None, a.tokens, a.repeats)
        finally:
            ls.stop()
        result["load_after_llama.cpp"] = sc.loadavg()
        show("llama.cpp")
        save()


if __name__ == "__main__":
    main()
