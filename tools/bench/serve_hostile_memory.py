#!/usr/bin/env python3
"""Peak resident memory of `switchyard serve` under huge prompts (docs/benchmarks.md, docs/security.md).

Starts a server on stories260K (SentencePiece), loads the model, resets the process's peak RSS (clear_refs 5),
then sends N concurrent requests of a prompt of SIZE MB (completions, chat, Ollama generate and chat in turn)
and reports each status and how far the peak rose.

usage: serve_hostile_memory.py --switchyard build/bin/switchyard --plugin-dir build/plugins [--mb 15] [--n 4]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def post(port, path, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=300)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    raw = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        raw += chunk
    s.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest[:160]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--model", default=os.path.join(os.path.dirname(__file__), "../../tests/fixtures/stories260K/stories260K.gguf"))
    ap.add_argument("--mb", type=float, default=15)
    ap.add_argument("--n", type=int, default=4)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sy-hostile-mem-")
    cfg = os.path.join(work, "serve.ini")
    with open(cfg, "w") as f:
        f.write(f"[host]\nresume_path = {work}/resume\nmax_request_body = 64M\n\n[model.stories]\nplugin = gguf-quant\n"
                f"path = {os.path.abspath(args.model)}\n")
    log = open(os.path.join(work, "log"), "wb")
    proc = subprocess.Popen([args.switchyard, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--plugin-dir",
                             args.plugin_dir], stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(300):
        m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", open(os.path.join(work, "log"), "rb").read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.05)
    try:
        post(port, "/v1/completions", b'{"model":"stories","prompt":"Once","max_tokens":1}')
        n_bytes = int(args.mb * (1 << 20))
        prompt = ("Once upon a time " * (n_bytes // 17 + 1))[:n_bytes]
        bodies = [
            ("/v1/completions", {"model": "stories", "prompt": prompt, "max_tokens": 1}),
            ("/v1/chat/completions", {"model": "stories", "max_tokens": 1,
                                      "messages": [{"role": "user", "content": prompt}]}),
            ("/api/generate", {"model": "stories", "prompt": prompt, "stream": False, "options": {"num_predict": 1}}),
            ("/api/chat", {"model": "stories", "stream": False, "options": {"num_predict": 1},
                           "messages": [{"role": "user", "content": prompt}]}),
        ]
        with open(f"/proc/{proc.pid}/clear_refs", "w") as f:
            f.write("5")
        before = status_kb(proc.pid, "VmRSS") / 1024
        results = [None] * args.n
        t0 = time.time()

        def go(i):
            path, body = bodies[i % len(bodies)]
            results[i] = (path,) + post(port, path, json.dumps(body).encode())

        threads = [threading.Thread(target=go, args=(i,)) for i in range(args.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.time() - t0
        peak = status_kb(proc.pid, "VmHWM") / 1024
        for r in results:
            print(f"{r[0]}: {r[1]} {r[2]!r}")
        print(f"{args.n} x {args.mb} MB prompts: RSS before {before:.0f} MB, peak {peak:.0f} MB "
              f"(+{peak - before:.0f} MB), {took:.2f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
