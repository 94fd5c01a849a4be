#!/usr/bin/env python3
"""Measures the stop protocol and the warm restart for one model, as the chart runs the server (its flags; the
kubelet's preStop wait left out, it only adds its own seconds): the time to ready from a cold start, a stop with
every slot warm and one stream running (readiness drop, drain, snapshot write, exit), the time to ready of the
restart with --resume, and the cached tokens of the same conversations after it. For docs/deploy.md.

Usage: measure_stop.py --switchyard EXE --plugin-dir DIR --plugin gguf-quant --model FILE [--ctx 2048]
                       [--parallel 4] [--prompt-words 300] [--drain 30] [--chat]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

WORDS = ("the train left the old station at dawn and rolled past fields of wheat while the driver watched "
         "clouds gather over distant hills where a small village kept its clock tower").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, a, cfg, resume, log):
        self.port = free_port()
        self.log_path = log
        self.t0 = time.time()
        self.proc = subprocess.Popen([a.switchyard, "serve", "--config", cfg, "--listen", f"127.0.0.1:{self.port}",
                                      "--resume", "--resume-path", resume, "--drain-timeout", str(a.drain),
                                      "--plugin-dir", a.plugin_dir], stdout=open(log, "wb"), stderr=subprocess.STDOUT)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        except OSError:
            return None, ""
        finally:
            c.close()

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out = json.loads(r.read())
        c.close()
        return r.status, out

    def wait_ready(self):
        while time.time() - self.t0 < 600:
            status, body = self.get("/health")
            if status == 200:
                return time.time() - self.t0
            if '"error"' in body:
                raise RuntimeError(f"a preload failed:\n{open(self.log_path).read()[-3000:]}")
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited:\n{open(self.log_path).read()[-3000:]}")
            time.sleep(0.02)
        raise RuntimeError("not ready")


def request(a, i):
    words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(a.prompt_words)]
    text = f"Story {i}: " + " ".join(words)
    if a.chat:
        return "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": text}],
                                        "max_tokens": 4, "temperature": 0}
    return "/v1/completions", {"model": "m", "prompt": text, "max_tokens": 4, "temperature": 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--prompt-words", type=int, default=300)
    ap.add_argument("--drain", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chat", action="store_true")
    a = ap.parse_args()
    a.model = os.path.abspath(a.model)
    work = tempfile.mkdtemp(prefix="sy-measure-stop-")
    try:
        cfg = os.path.join(work, "s.ini")
        open(cfg, "w").write(f"[host]\nlog_level = info\n\n[model.m]\nplugin = {a.plugin}\npath = {a.model}\n"
                             f"preload = true\nparallel = {a.parallel}\nctx_size = {a.ctx}\nthreads = {a.threads}\n")
        resume = os.path.join(work, "resume")
        s = Server(a, cfg, resume, os.path.join(work, "log1"))
        cold_ready = s.wait_ready()
        prompt_tokens = []
        for i in range(a.parallel - 1):
            path, body = request(a, i)
            st, out = s.post(path, body)
            if st != 200:
                raise RuntimeError(f"request {i}: {st} {out}")
            prompt_tokens.append(out["usage"]["prompt_tokens"])
        # One stream runs while the stop begins.
        path, body = request(a, a.parallel - 1)
        body = dict(body, max_tokens=min(200, a.ctx - 8 - a.prompt_words * 2), stream=True)
        done = {}

        def stream():
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=600)
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            n = 0
            if r.status != 200:
                done["error"] = f"{r.status} {r.read()[:300]!r}"
                done["first"] = done["end"] = time.time()
                return
            for line in r:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    n += 1
                    done.setdefault("first", time.time())
            done["end"], done["events"] = time.time(), n
        t = threading.Thread(target=stream)
        t.start()
        while "first" not in done and t.is_alive():
            time.sleep(0.01)
        if "error" in done or "first" not in done:
            raise RuntimeError(f"the stream failed: {done.get('error')}")
        time.sleep(0.3)
        t_term = time.time()
        s.proc.send_signal(signal.SIGTERM)
        while s.get("/health")[0] == 200:
            pass
        t_unready = time.time()
        rc = s.proc.wait(timeout=a.drain + 120)
        t_exit = time.time()
        t.join()
        log = open(s.log_path).read()
        m = re.search(r"stopped in ([\d.]+) s \(drain and cut ([\d.]+) s, snapshots and unload ([\d.]+) s\)", log)
        saved = re.search(r"KV of (\d+) sequence\(s\), (\d+) tokens, saved to .* in ([\d.]+) s \((\d+) written: (\d+) "
                          r"state bytes", log)
        s2 = Server(a, cfg, resume, os.path.join(work, "log2"))
        warm_ready = s2.wait_ready()
        cached = []
        for i in range(a.parallel - 1):
            path, body = request(a, i)
            st, out = s2.post(path, body)
            cached.append(out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))
        s2.proc.send_signal(signal.SIGTERM)
        s2.proc.wait(timeout=120)
        log2 = open(s2.log_path).read()
        restored = re.search(r"restored [^\n]*", log2)
        print(json.dumps({
            "model": os.path.basename(a.model), "parallel": a.parallel, "ctx": a.ctx,
            "prompt_tokens": prompt_tokens, "cold_start_to_ready_s": round(cold_ready, 3),
            "sigterm_to_unready_s": round(t_unready - t_term, 4),
            "stream_end_after_sigterm_s": round(done["end"] - t_term, 3), "stream_events": done["events"],
            "sigterm_to_exit_s": round(t_exit - t_term, 3), "exit_status": rc,
            "server_stop_log": m.group(0) if m else None,
            "snapshot": {"sequences": int(saved.group(1)), "tokens": int(saved.group(2)),
                         "write_s": float(saved.group(3)), "state_bytes": int(saved.group(5))} if saved else None,
            "warm_restart_to_ready_s": round(warm_ready, 3), "cached_tokens_after_restart": cached,
            "restore_log": restored.group(0) if restored else None,
        }, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
