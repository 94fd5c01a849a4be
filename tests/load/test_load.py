#!/usr/bin/env python3
"""Load test of `switchyard serve`: many streaming requests over three models that swap, with clients leaving.

One server on a free loopback port serves two test-engine models in one swap group (a per-token delay makes
requests overlap and swaps wait for each other) and stories260K on the GGUF plugin in a group of its own. First
every (endpoint, model, prompt) is run alone, one request at a time, on a server of its own: the reference
outputs (greedy). Then a crowd of client threads sends the streaming requests in a shuffled order over the
OpenAI chat and completions APIs (SSE) and Ollama's generate API (NDJSON); some clients close their socket
mid-stream. The checks:

  - every request that was read to its end got exactly its reference text, finish reason and token count;
  - the two swapping models were really swapped while this ran, and every model is idle afterwards;
  - after POST /unload the server's resident memory (VmRSS) is back near its baseline (taken after start);
  - the server is still alive, and exits with status 0 on SIGTERM.

Only the Python standard library is used. The exit status is the number of failed checks (at most 100).

Usage: test_load.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR
                    [--requests N] [--clients N] [--seed N] [--disconnect-fraction F]
"""
import http.client
import json
import os
import random
import re
import socket
import sys
import threading
import time

# The server fixture shared with the integration tests (tests/integration/sy_server.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "integration"))
import sy_server  # noqa: E402
from sy_server import CheckFailed  # noqa: E402

ARGS = None

# Prompts shared by every model and endpoint; the lengths of their answers vary too.
PROMPTS = [
    ("Once upon a time", 24),
    ("The quick brown fox jumps over", 32),
    ("In the beginning there was a small village by the sea", 20),
    ("Lily and Ben went to the park", 40),
    ("Tell me a story about a dragon who", 28),
    ("Why is the sky blue?", 16),
]
MODELS = ["te-alpha", "te-beta", "stories"]
ENDPOINTS = ["chat", "completions", "ollama-generate"]
# A client that leaves mid-stream asks for this many tokens; cancelled, it should cost a few of them.
LEAVER_MAX_TOKENS = 200

# The RSS after /unload may exceed the baseline by this much (allocator arenas of the connection threads, caches).
RSS_TOLERANCE_BYTES = 20 * 1024 * 1024
RSS_TOLERANCE_FRACTION = 0.15


def config_text(work_dir, delay_us):
    fixtures = os.path.join(ARGS.source_dir, "tests", "fixtures")
    alpha = os.path.join(fixtures, "test-engine", "alpha.model")
    beta = os.path.join(fixtures, "test-engine", "beta.model")
    stories = os.path.join(fixtures, "stories260K", "stories260K.gguf")
    te_common = (f"group = pair\nparallel = 4\nengine.delay_us = {delay_us}\nengine.eos_one_in = 0\n"
                 "max_queue = 256\n")
    return (f"[host]\nresume_path = {os.path.join(work_dir, 'resume')}\nlog_level = info\n\n"
            f"[model.te-alpha]\nplugin = test-engine\npath = {alpha}\n{te_common}\n"
            f"[model.te-beta]\nplugin = test-engine\npath = {beta}\n{te_common}\n"
            f"[model.stories]\nplugin = gguf-quant\npath = {stories}\ngroup = solo\nparallel = 4\nthreads = 1\n"
            "ctx_size = 512\nmax_queue = 256\n\n"
            "[group.pair]\nswap = true\nexclusive = false\n\n"
            "[group.solo]\nexclusive = false\n")


class Server(sy_server.Server):
    """One `switchyard serve` process on a free loopback port, in ARGS.work_dir/NAME."""

    def __init__(self, name, config):
        super().__init__(ARGS, name, config)

    def rss_bytes(self):
        return self.proc_status_kb("VmRSS") * 1024

    def metrics(self):
        return self.request("GET", "/metrics")[2].decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------------------------
# One streaming request


class Outcome:
    def __init__(self):
        self.text = ""
        self.finish = None
        self.tokens = None
        self.events = 0
        self.complete = False  # the stream reached its end marker
        self.error = None      # an error event or a bad status


def request_body(endpoint, model, prompt_index, max_tokens=None):
    prompt, default_max = PROMPTS[prompt_index]
    max_tokens = max_tokens or default_max
    if endpoint == "chat":
        return "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": prompt}],
                                        "max_tokens": max_tokens, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True}}
    if endpoint == "completions":
        return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                   "stream": True, "stream_options": {"include_usage": True}}
    return "/api/generate", {"model": model, "prompt": prompt, "stream": True,
                             "options": {"num_predict": max_tokens, "temperature": 0}}


def stream_request(port, endpoint, model, prompt_index, leave_after=None):
    """Sends one streaming request and reads it to its end, or (leave_after = k) closes the socket after k
    events. A client that leaves asks for a long answer, so that it surely leaves mid-generation. Returns an
    Outcome."""
    path, body = request_body(endpoint, model, prompt_index, LEAVER_MAX_TOKENS if leave_after else None)
    out = Outcome()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"status {resp.status}: {resp.read()[:300]!r}"
            return out
        parts = []
        while True:
            line = resp.readline()
            if not line:
                break  # the server ended the stream without its end marker
            line = line.decode("utf-8").rstrip("\r\n")
            if not line:
                continue
            if endpoint == "ollama-generate":
                ev = json.loads(line)
                if "error" in ev:
                    out.error = ev["error"]
                    break
                out.events += 1
                parts.append(ev.get("response", ""))
                if ev.get("done"):
                    out.finish, out.tokens, out.complete = ev.get("done_reason"), ev.get("eval_count"), True
                    break
            else:
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    out.complete = out.finish is not None
                    break
                ev = json.loads(data)
                if "error" in ev:
                    out.error = ev["error"]
                    continue  # [DONE] follows
                out.events += 1
                if ev.get("usage"):
                    out.tokens = ev["usage"]["completion_tokens"]
                for ch in ev.get("choices", []):
                    parts.append((ch.get("delta") or {}).get("content") or ch.get("text") or "")
                    if ch.get("finish_reason"):
                        out.finish = ch["finish_reason"]
            if leave_after is not None and out.events >= leave_after and not out.complete:
                # The client goes away mid-stream: no more reading, the connection is torn down.
                conn.sock.shutdown(socket.SHUT_RDWR)
                break
        out.text = "".join(parts)
        return out
    finally:
        conn.close()


# ---------------------------------------------------------------------------------------------------------------


def reference_outputs():
    """Each (endpoint, model, prompt) run alone, one after another, on a fresh server."""
    srv = Server("reference", config_text(os.path.join(ARGS.work_dir, "reference"), delay_us=0))
    refs = {}
    try:
        for model in MODELS:
            for endpoint in ENDPOINTS:
                for i in range(len(PROMPTS)):
                    o = stream_request(srv.port, endpoint, model, i)
                    if not o.complete or o.error:
                        raise CheckFailed(f"reference {endpoint} {model} prompt {i}: error {o.error}, "
                                          f"complete {o.complete}")
                    refs[(endpoint, model, i)] = (o.text, o.finish, o.tokens)
    finally:
        srv.stop()
    for endpoint in ENDPOINTS:
        for i in range(len(PROMPTS)):
            texts = [refs[(endpoint, m, i)][0] for m in MODELS]
            if len(set(texts)) != len(texts):
                raise CheckFailed(f"two models give the same {endpoint} answer to prompt {i}: a mix-up would "
                                  "go unnoticed")
    return refs


def wait_idle(srv, seconds):
    """True when no model has a busy slot or a queued request (cancellations end asynchronously)."""
    deadline = time.time() + seconds
    while True:
        status, body = srv.json("GET", "/running")
        busy = [(m["model"], m["slots_busy"], m["queue_depth"]) for m in body["running"]
                if m["slots_busy"] or m["queue_depth"]]
        if not busy:
            return True, body
        if time.time() > deadline:
            return False, body
        time.sleep(0.1)


def sanitized_build(exe):
    """True for an AddressSanitizer build: its quarantine and shadow memory keep freed memory resident, so RSS says
    nothing about leaks there (its own leak check at exit does, and the exit status carries it)."""
    with open(exe, "rb") as f:
        return b"__asan_init" in f.read()


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\d+(?:\.\d+)?)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    global ARGS
    ap = sy_server.argument_parser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--disconnect-fraction", type=float, default=0.15)
    ap.add_argument("--delay-us", type=int, default=1000, help="the test engine's sleep per token")
    ap.add_argument("--deadline", type=float, default=75, help="seconds the request storm may take")
    ARGS = sy_server.parse_arguments(ap)
    failures = []

    def fail(msg):
        failures.append(msg)
        print("FAIL " + msg, flush=True)

    t_all = time.time()
    try:
        refs = reference_outputs()
    except CheckFailed as e:
        print(f"FAIL reference outputs: {e}", flush=True)
        return 1
    print(f"ok   {len(refs)} reference outputs, each alone ({time.time() - t_all:.1f} s)", flush=True)

    rng = random.Random(ARGS.seed)
    jobs = []
    for k in range(ARGS.requests):
        endpoint = ENDPOINTS[k % len(ENDPOINTS)]
        model = MODELS[(k // len(ENDPOINTS)) % len(MODELS)]
        prompt_index = rng.randrange(len(PROMPTS))
        leave_after = rng.randint(1, 4) if rng.random() < ARGS.disconnect_fraction else None
        jobs.append((k, endpoint, model, prompt_index, leave_after))
    rng.shuffle(jobs)

    srv = Server("load", config_text(os.path.join(ARGS.work_dir, "load"), delay_us=ARGS.delay_us))
    try:
        time.sleep(0.3)
        rss_base = srv.rss_bytes()
        results = {}
        lock = threading.Lock()
        queue = list(jobs)

        def client():
            while True:
                with lock:
                    if not queue:
                        return
                    job = queue.pop()
                k, endpoint, model, prompt_index, leave_after = job
                try:
                    o = stream_request(srv.port, endpoint, model, prompt_index, leave_after)
                except Exception as e:  # reported as a failed request below
                    o = Outcome()
                    o.error = f"exception {e!r}"
                with lock:
                    results[k] = (job, o)

        t0 = time.time()
        threads = [threading.Thread(target=client, daemon=True) for _ in range(ARGS.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.1, ARGS.deadline - (time.time() - t0)))
        storm_s = time.time() - t0
        if any(t.is_alive() for t in threads):
            fail(f"the {ARGS.requests} requests did not finish within {ARGS.deadline:.0f} s "
                 f"({len(results)} done)")

        completed = left = mismatched = errors = completed_tokens = 0
        for k, (job, o) in sorted(results.items()):
            _, endpoint, model, prompt_index, leave_after = job
            if o.error:
                errors += 1
                if errors <= 5:
                    fail(f"request {k} ({endpoint} {model} prompt {prompt_index}): {o.error}")
                continue
            if leave_after is not None:
                if o.complete:
                    fail(f"request {k} ({endpoint} {model}) asked for {LEAVER_MAX_TOKENS} tokens and ended after "
                         f"{o.events} events, before its client left")
                left += 1
                continue
            if not o.complete:
                errors += 1
                if errors <= 5:
                    fail(f"request {k} ({endpoint} {model} prompt {prompt_index}): the stream ended early")
                continue
            completed += 1
            completed_tokens += o.tokens or 0
            got = (o.text, o.finish, o.tokens)
            want = refs[(endpoint, model, prompt_index)]
            if got != want:
                mismatched += 1
                if mismatched <= 5:
                    fail(f"request {k} ({endpoint} {model} prompt {prompt_index}) answered {got!r}, alone it "
                         f"answered {want!r}")
        print(f"     {ARGS.requests} requests from {ARGS.clients} clients in {storm_s:.1f} s: {completed} "
              f"completed, {left} left mid-stream, {errors} failed, {mismatched} differ from their reference",
              flush=True)
        if errors or mismatched:
            fail(f"{errors} requests failed and {mismatched} differ from their reference outputs")
        elif completed + left != ARGS.requests:
            fail(f"only {completed + left} of {ARGS.requests} requests came back")
        else:
            print("ok   every completed answer equals its reference", flush=True)

        idle, running = wait_idle(srv, 10)
        if not idle:
            fail(f"models still busy 10 s after the last request: {running}")
        if srv.proc.poll() is not None:
            fail(f"the server died (status {srv.proc.returncode})")
        text = srv.metrics()
        swaps = metric(text, "switchyard_model_swaps_total") or 0
        loads = metric(text, "switchyard_model_loads_total") or 0
        print(f"     model loads {loads:.0f}, swaps {swaps:.0f}",
              flush=True)
        if swaps < 2:
            fail(f"only {swaps:.0f} swaps happened: the swap group was not exercised")
        # Tokens generated for the clients that left: cancelled at their next token, a few each; not cancelled,
        # up to LEAVER_MAX_TOKENS each.
        generated = sum(int(v) for v in re.findall(r'^switchyard_generated_tokens_total\{[^}]*\} (\d+)$', text, re.M))
        wasted = generated - completed_tokens
        per_leaver = wasted / left if left else 0
        print(f"     tokens generated {generated}, of them for clients that left {wasted} ({per_leaver:.1f} per "
              f"client, of the {LEAVER_MAX_TOKENS} each asked for)", flush=True)
        if left and per_leaver > LEAVER_MAX_TOKENS / 4:
            fail(f"clients that left cost {per_leaver:.1f} tokens each: their generations were not cancelled")

        rss_loaded = srv.rss_bytes()
        status, body = srv.json("POST", "/unload")
        if status != 200:
            fail(f"POST /unload: {status} {body}")
        _, running = srv.json("GET", "/running")
        if running.get("running"):
            fail(f"models still loaded after /unload: {running}")
        time.sleep(0.5)
        rss_after = srv.rss_bytes()
        allowed = max(RSS_TOLERANCE_BYTES, int(rss_base * RSS_TOLERANCE_FRACTION))
        mib = 1024 * 1024
        print(f"     VmRSS: baseline {rss_base / mib:.1f} MiB, loaded {rss_loaded / mib:.1f} MiB, after /unload "
              f"{rss_after / mib:.1f} MiB (allowed up to {(rss_base + allowed) / mib:.1f} MiB)", flush=True)
        if sanitized_build(ARGS.switchyard):
            print("     (AddressSanitizer build: the RSS bound is not checked; its leak check at exit is)", flush=True)
        elif rss_after > rss_base + allowed:
            fail(f"VmRSS after /unload is {rss_after / mib:.1f} MiB, more than the baseline "
                 f"{rss_base / mib:.1f} MiB + {allowed / mib:.1f} MiB")
        else:
            print("ok   memory returns to its baseline after /unload", flush=True)
    finally:
        try:
            srv.stop()
            print("ok   the server exits with status 0 on SIGTERM", flush=True)
        except CheckFailed as e:
            fail(str(e))
    if failures:
        print("--- load server log (tail) ---\n" + srv.log_text()[-5000:], flush=True)
    print(f"{'FAILED' if failures else 'passed'} in {time.time() - t_all:.1f} s", flush=True)
    return min(len(failures), 100)


if __name__ == "__main__":
    sys.exit(main())
