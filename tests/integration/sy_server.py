"""One `switchyard serve` process for the integration and load tests (standard library only, so the tests that
run on the system python use it too).

Each server has a folder of its own under the work folder: its config file, its log (stdout and stderr) and its
resume path, emptied before the start so that no KV snapshot of an earlier run is found. It listens on
127.0.0.1:0 and the port the kernel picked is read back from its log, so servers of parallel tests never
collide. The start and the stop are bounded; the stop is SIGTERM, then SIGKILL after the timeout, and the exit
status must be 0 (sanitizer builds report leaks and errors through it).

    with Server(ARGS, "main", config_text) as srv:
        status, body = srv.json("GET", "/v1/models")

The tests find this module beside them: Python puts a script's own folder first on sys.path, and CTest runs
the scripts from the source tree (tests/load adds this folder itself).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import time
import traceback

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


class CheckFailed(Exception):
    """A check that failed; the message says what was expected and what came."""


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


def argument_parser():
    """A parser of what CTest passes every test: the executable, the plugin folder, the source tree and a work
    folder of the test's own; a test adds its own options."""
    ap = argparse.ArgumentParser()
    for flag in ("--switchyard", "--plugin-dir", "--source-dir", "--work-dir"):
        ap.add_argument(flag, required=True)
    return ap


def parse_arguments(ap):
    """AP's arguments with the four paths absolute (they go into config files that servers read elsewhere), and
    the work folder made."""
    args = ap.parse_args()
    for name in ("switchyard", "plugin_dir", "source_dir", "work_dir"):
        setattr(args, name, os.path.abspath(getattr(args, name)))
    os.makedirs(args.work_dir, exist_ok=True)
    return args


def run_tests(srv, tests, only=None, expected=(CheckFailed,), stop_timeout=20):
    """Each of TESTS (functions of SRV) that ONLY selects by its name, with or without its t_ prefix (all when ONLY
    is empty), then SRV's stop. Prints `ok NAME (s)` or `FAIL NAME: why` (a traceback for an exception not in
    EXPECTED), and the tail of the server's log when anything failed. Returns the names that failed, "stop" for
    a server that did not exit cleanly."""
    failed = []
    try:
        for t in tests:
            name = t.__name__[2:] if t.__name__.startswith("t_") else t.__name__
            if only and t.__name__ not in only and name not in only:
                continue
            t0 = time.time()
            try:
                t(srv)
                print(f"ok   {name} ({time.time() - t0:.1f} s)", flush=True)
            except expected as e:
                failed.append(t.__name__)
                print(f"FAIL {name}: {e}", flush=True)
            except Exception:
                failed.append(t.__name__)
                print(f"FAIL {name}: unexpected exception\n{traceback.format_exc()}", flush=True)
    finally:
        try:
            srv.stop(timeout=stop_timeout)
        except CheckFailed as e:
            failed.append("stop")
            print(f"FAIL stop: {e}", flush=True)
        if failed:
            print(f"--- server {srv.name}: its log (tail) ---\n" + srv.log_text()[-6000:], flush=True)
    return failed


class Server:
    """`switchyard serve` in ARGS.work_dir/NAME with CONFIG_TEXT (or none: `serve ARGS...` alone).

    args: the test's parsed arguments; switchyard, plugin_dir and work_dir are used.
    extra_args: appended to the command line (`--watch-config`, `--models-dir DIR`, model files...)."""

    def __init__(self, args, name, config_text=None, extra_args=(), start_timeout=30):
        self.name = name
        self.dir = os.path.join(args.work_dir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.config_path = None
        cmd = [args.switchyard, "serve"]
        if config_text is not None:
            self.config_path = os.path.join(self.dir, "serve.ini")
            self.write_config(config_text)
            cmd += ["--config", self.config_path]
        # KV snapshots (written at every unload and at the stop) stay in the server's folder, never in $HOME.
        self.resume_path = os.path.join(self.dir, "resume")
        shutil.rmtree(self.resume_path, ignore_errors=True)
        cmd += ["--listen", "127.0.0.1:0", "--plugin-dir", args.plugin_dir, "--resume-path", self.resume_path,
                *extra_args]
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.signalled = False
        self.stopped = False
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            m = LISTENING.search(self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise CheckFailed(f"server {name} did not start within {start_timeout} s; its log:\n{self.log_text()}")
        self.base = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
            return
        # The test's own failure is the one to report; a failed stop is printed beside it.
        try:
            self.stop()
        except CheckFailed as e:
            print(f"also: {e}", flush=True)

    # -- the process

    def write_config(self, text):
        with open(self.config_path, "w") as f:
            f.write(text)

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def send(self, sig):
        """A signal that starts a stop (or not: SIGHUP); after a stop signal, stop() only waits for the exit, as
        a second SIGTERM or SIGINT would make the server quit at once."""
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.signalled = True
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Stop with SIG (unless a stop signal was sent already) and wait up to TIMEOUT seconds, then SIGKILL;
        the exit status must be 0. A server stopped already is left as it is."""
        if self.stopped:
            return
        self.stopped = True
        try:
            if self.proc.poll() is None and not self.signalled:
                self.proc.send_signal(sig)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise CheckFailed(f"server {self.name} did not stop within {timeout} s of {sig.name}")
        finally:
            self.log.close()
        check(rc == 0, f"server {self.name} exited with status {rc}; its log:\n{self.log_text()[-4000:]}")

    def kill(self):
        """SIGKILL, as a crash or the OOM killer would end it."""
        self.stopped = True
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def proc_status_kb(self, key):
        """A kB field of /proc/PID/status (VmRSS, VmHWM...)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        raise CheckFailed(f"no {key} in /proc/{self.proc.pid}/status")

    # -- requests

    def request(self, method, path, body=None, headers=None, port=None, timeout=60):
        """(status, headers with lower-case names, raw body bytes); a dict or list body is sent as JSON."""
        conn = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
            sent = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers={**sent, **(headers or {})})
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, raw
        finally:
            conn.close()

    def json(self, method, path, body=None, headers=None, timeout=60):
        """(status, the body decoded as JSON, or as text where it is not JSON)."""
        status, _, raw = self.request(method, path, body, headers, timeout=timeout)
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def post(self, path, body, headers=None, timeout=120):
        """json("POST", ...) with the longer timeout of a generation."""
        return self.json("POST", path, body, headers, timeout)

    def openai(self, api_key="none"):
        import openai  # only the tests that run in the clients' venv call this
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=60)

    def ollama(self):
        import ollama
        return ollama.Client(host=self.base, timeout=60)
