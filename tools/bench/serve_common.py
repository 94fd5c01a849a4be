"""Shared parts of the serving benchmarks (tools/bench/serve_*.py): a `switchyard serve` process on a free
loopback port, timed streaming requests over plain http.client, and the facts about the machine a result needs
(CPU, date, load average). Standard library only."""

import datetime
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import time


def machine():
    """CPU model and count from lscpu, the date (UTC), the kernel."""
    info = {"cpu": "?", "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            info["cpu"] = m.group(1).strip()
    except (OSError, subprocess.SubprocessError):
        pass
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info["kernel"] = os.uname().release
    return info


def loadavg():
    with open("/proc/loadavg") as f:
        return tuple(float(x) for x in f.read().split()[:3])


def cpu_busy(seconds=3.0):
    """Fraction of the CPUs' time spent busy over the next `seconds` (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_for_quiet(max_load, max_wait_s, log=print, max_busy=0.2):
    """Waits (up to max_wait_s) until the CPUs are quiet: the 1-minute load average at most max_load and, over 3 s,
    at most max_busy of the CPU time busy (the load average lags). Returns the load average then."""
    deadline = time.time() + max_wait_s
    while True:
        busy = cpu_busy()
        load = loadavg()
        if (load[0] <= max_load and busy <= max_busy) or time.time() >= deadline:
            return load
        log(f"  load average {load[0]:.2f}, {busy * 100:.0f}% busy: waiting")
        time.sleep(5)


def warm_page_cache(path):
    """Reads a file once so that its pages are in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


class Server:
    """One `switchyard serve` with the given config text, on a free loopback port."""

    def __init__(self, switchyard, config_text, plugin_dir=None, work_dir=None, log_level="info", extra_args=(),
                 log_name="server.log", start_timeout=30):
        self.dir = work_dir or tempfile.mkdtemp(prefix="sy-serve-bench-")
        os.makedirs(self.dir, exist_ok=True)
        self.config_path = os.path.join(self.dir, "serve.ini")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.log_path = os.path.join(self.dir, log_name)
        self.log = open(self.log_path, "wb")
        cmd = [switchyard, "serve", "--config", self.config_path, "--listen", "127.0.0.1:0", "--log-level",
               log_level]
        if plugin_dir:
            cmd += ["--plugin-dir", plugin_dir]
        cmd += list(extra_args)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.02)
        if self.port is None:
            self.proc.kill()
            raise RuntimeError("switchyard serve did not start:\n" + self.log_text()[-3000:])

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw.decode("utf-8", "replace")
        finally:
            conn.close()

    def stop(self, timeout=60):
        """SIGTERM, then wait up to `timeout` seconds (SIGKILL after). Returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc


def stream(port, path, body):
    """POSTs a streaming OpenAI request (SSE) and times it. Returns a dict: t_send, t_first (the first chunk that
    carries text), t_end (the chunk with finish_reason), n_text_chunks, text, finish, usage, chunk_times."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    r = {"t_send": time.perf_counter(), "t_first": None, "t_end": None, "text": "", "finish": None, "usage": None,
         "chunk_times": []}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{path}: status {resp.status}: {resp.read()[:500]!r}")
        parts = []
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.decode("utf-8").strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            ev = json.loads(data)
            now = time.perf_counter()
            if "error" in ev:
                raise RuntimeError(f"{path}: error event {ev['error']}")
            if ev.get("usage"):
                r["usage"] = ev["usage"]
            for ch in ev.get("choices", []):
                text = (ch.get("delta") or {}).get("content") or ch.get("text") or ""
                if text:
                    parts.append(text)
                    r["chunk_times"].append(now)
                    if r["t_first"] is None:
                        r["t_first"] = now
                if ch.get("finish_reason"):
                    r["finish"] = ch["finish_reason"]
                    r["t_end"] = now
        r["text"] = "".join(parts)
        if r["t_end"] is None:
            raise RuntimeError(f"{path}: the stream ended without a finish_reason")
        if r["t_first"] is None:
            r["t_first"] = r["t_end"]
        return r
    finally:
        conn.close()


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def add_serve_args(ap, work_dir, parallel, concurrency, max_wait):
    """The options every serving benchmark over one GGUF model takes."""
    ap.add_argument("--model", required=True)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir")
    ap.add_argument("--work-dir", default=work_dir)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--parallel", type=int, default=parallel)
    ap.add_argument("--concurrency", default=concurrency)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait for this 1-minute load average (and CPUs at most 20%% busy over 3 s) first")
    ap.add_argument("--max-wait", type=float, default=max_wait, help="seconds to wait for that at most")
    ap.add_argument("--json", help="write the results here")


def bench_config(args):
    """The INI of the one model a serving benchmark runs."""
    return (f"[host]\nresume_path = {os.path.join(args.work_dir, 'resume')}\n\n"
            f"[model.bench]\nplugin = gguf-quant\npath = {os.path.abspath(args.model)}\nparallel = {args.parallel}\n"
            f"threads = {args.threads}\nctx_size = {args.ctx}\npersist_on_unload = false\n")

