#!/usr/bin/env python3
"""A small OpenAI-compatible server for the process-model tests: what switchyard starts as a `cmd`.

Deterministic answers (the reply echoes the model name and the last user message; the SSE chunks are fixed), sent
with chunked transfer encoding as llama-server does, so a kill mid-stream is a broken response and not an end.

Usage: fake_upstream.py --port N [--name NAME] [--chunk-delay S] [--slow-start S] [--pid-file F]
Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions (stream or not), POST /v1/completions,
POST /v1/embeddings, POST /v1/audio/transcriptions, GET /echo-path/... (for /upstream passthrough).
"""
import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
STARTED = time.time()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake-upstream %s: %s\n" % (ARGS.name, fmt % args))
        sys.stderr.flush()

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/health":
            if time.time() - STARTED < ARGS.slow_start:
                return self.send_json(503, {"status": "loading"})
            return self.send_json(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": ARGS.name, "object": "model"}]})
        if self.path.startswith("/echo-path"):
            return self.send_json(200, {"path": self.path, "name": ARGS.name})
        self.send_json(404, {"error": "no such path " + self.path})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n)

    def do_POST(self):
        raw = self.body()
        if self.path == "/v1/audio/transcriptions":
            return self.send_json(200, {"text": "transcribed by %s (%d bytes)" % (ARGS.name, len(raw))})
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            return self.send_json(400, {"error": "bad json"})
        model = req.get("model")
        if self.path == "/v1/embeddings":
            inp = req.get("input")
            return self.send_json(200, {"object": "list", "model": model, "data": [
                {"object": "embedding", "index": 0, "embedding": [float(len(str(inp))), 0.5, -0.25]}]})
        if self.path == "/v1/echo":
            return self.send_json(200, {"received": req})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.send_json(404, {"error": "no such path " + self.path})
        if self.path == "/v1/chat/completions":
            last = (req.get("messages") or [{}])[-1].get("content", "")
        else:
            last = req.get("prompt", "")
        words = ["%s" % ARGS.name, "says:", *str(last).split(), "(done)"]
        n = int(req.get("max_tokens") or len(words))
        words = words[:n]
        if not req.get("stream"):
            text = " ".join(words)
            if self.path == "/v1/chat/completions":
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            else:
                choice = {"index": 0, "text": text, "finish_reason": "stop"}
            return self.send_json(200, {"id": "fake-1", "object": "chat.completion", "created": 1, "model": model,
                                        "choices": [choice],
                                        "received": req})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, w in enumerate(words):
            delta = {"content": (" " if i else "") + w}
            ev = {"id": "fake-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                  "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
            self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
            if ARGS.chunk_delay:
                time.sleep(ARGS.chunk_delay)
        ev = {"id": "fake-1", "object": "chat.completion.chunk", "created": 1, "model": model,
              "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self.chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="fake")
    ap.add_argument("--chunk-delay", type=float, default=0.0)
    ap.add_argument("--slow-start", type=float, default=0.0)
    ap.add_argument("--pid-file")
    ARGS = ap.parse_args()
    if ARGS.pid_file:
        with open(ARGS.pid_file, "w") as f:
            f.write(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    sys.stderr.write("fake-upstream %s listening on %d (env FAKE_TAG=%s)\n"
                     % (ARGS.name, ARGS.port, os.environ.get("FAKE_TAG", "")))
    sys.stderr.flush()
    srv.serve_forever()


if __name__ == "__main__":
    main()
