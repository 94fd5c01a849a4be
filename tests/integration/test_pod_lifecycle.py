#!/usr/bin/env python3
"""A pod's life, run as the Helm chart runs it: the server gets exactly the flags of the chart's StatefulSet and
its ConfigMap's [host] section (rendered by tools/deploy/helm_render.py from deploy/helm/switchyard), with only
what a pod has and a test has not swapped for local stand-ins (the config file's path, the snapshot volume's
path, a loopback port) and the chart's `models` value set to a test-engine model whose load takes 1.5 s plus the
real stories260K Llama. A kubelet stand-in runs the chart's probes on the chart's paths, periods, timeouts and
thresholds, and its stop: the preStop wait, then SIGTERM, bounded by terminationGracePeriodSeconds.

Checked:
  1. while the preload models load: the startup probe (/health) fails with 503 "loading", the liveness path (/)
     answers 200 (liveness never kills a loading pod); startup succeeds within its failure budget, then
     readiness and liveness pass;
  2. SIGTERM during a stream: readiness drops at once (503 "draining") while the stream still runs, a new request
     gets 503 with Retry-After, the stream ends cleanly (finish_reason "length", then [DONE]), the snapshots are
     written and the process exits 0, all within the grace period;
  3. the restart (same flags, so --resume) serves the same conversation prefix warm: cached tokens > 0, for both
     models, and /metrics counts the restored snapshots;
  4. with a drain shorter than the stream (stop.drainSeconds=1): the stream is cut cleanly at the deadline (an
     error event naming the shutdown, then [DONE]), the snapshots are still written.
Exit status: the number of failed checks.

Usage: test_pod_lifecycle.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR
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
import sys
import threading
import time

import yaml

ARGS = None
FAILED = []


def check(cond, msg):
    if cond:
        print(f"ok: {msg}")
    else:
        FAILED.append(msg)
        print(f"FAIL: {msg}")
    return cond


# ---------------------------------------------------------------------------------------------------------------
# The chart


def render_pod(extra_sets=()):
    sys.path.insert(0, os.path.join(ARGS.source_dir, "tools", "deploy"))
    import helm_render
    chart = os.path.join(ARGS.source_dir, "deploy", "helm", "switchyard")
    models_file = os.path.join(ARGS.work_dir, "models-values.yaml")
    with open(models_file, "w") as f:
        yaml.safe_dump({"models": models_ini()}, f)
    docs = helm_render.render_chart(chart, release="switchyard", value_files=[models_file], sets=extra_sets)
    docs = [yaml.safe_load(d) for _, d in docs]
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    return sts, cm


def models_ini():
    model = os.path.join(ARGS.work_dir, "chat.model")
    with open(model, "w") as f:
        f.write("switchyard-test-model\n# a model whose load takes as long as a big one's would, here 1.5 s\n"
                "name=chat\nseed=21\nn_ctx=4096\nload_delay_ms=1500\n")
    stories = os.path.join(ARGS.source_dir, "tests", "fixtures", "stories260K", "stories260K.gguf")
    return (f"[model.chat]\nplugin = test-engine\npath = {model}\ngroup = chat\npreload = true\nparallel = 2\n"
            "engine.delay_us = 20000\nengine.eos_one_in = 0\n\n"
            f"[model.stories]\nplugin = gguf-quant\npath = {stories}\ngroup = stories\npreload = true\n"
            "parallel = 2\nthreads = 1\nctx_size = 512\n\n"
            "[group.chat]\nexclusive = false\n\n[group.stories]\nexclusive = false\n")


class Pod:
    """The chart's container, as a local process; its paths mapped to the work folder."""

    def __init__(self, name, sts, cm, resume_dir):
        self.name = name
        spec = sts["spec"]["template"]["spec"]
        self.container = spec["containers"][0]
        self.grace = spec["terminationGracePeriodSeconds"]
        self.pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        mounts = {m["name"]: m["mountPath"] for m in self.container["volumeMounts"]}
        self.port = free_port()
        config_dir = os.path.join(ARGS.work_dir, name, "config")
        os.makedirs(config_dir, exist_ok=True)
        chart_listen = f"0.0.0.0:{self.container['ports'][0]['containerPort']}"
        local = {mounts["config"]: config_dir, mounts["resume"]: resume_dir, chart_listen: f"127.0.0.1:{self.port}"}
        ini = cm["data"]["switchyard.ini"]
        for k, v in local.items():
            ini = ini.replace(k, v)
        with open(os.path.join(config_dir, "switchyard.ini"), "w") as f:
            f.write(ini)
        self.args = []
        for a in self.container["args"]:
            for k, v in local.items():
                a = a.replace(k, v)
            self.args.append(a)
        self.log_path = os.path.join(ARGS.work_dir, name, "server.log")
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "wb")
        cmd = [ARGS.switchyard, *self.args, "--plugin-dir", ARGS.plugin_dir]
        self.t_start = time.time()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline and self.proc.poll() is None:
            if "listening on" in self.log_text():
                return
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} did not start:\n{self.log_text()}")

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def get(self, path, timeout):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            body = r.read().decode("utf-8", "replace")
            return r.status, body
        except OSError as e:
            return None, str(e)
        finally:
            conn.close()

    def post(self, path, body, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), json.loads(r.read() or b"null")
        finally:
            conn.close()

    def probe(self, which):
        p = self.container[which]
        return self.get(p["httpGet"]["path"], p["timeoutSeconds"])

    def kubelet_startup(self):
        """The startup probe on its period from the container's start (initialDelaySeconds 0), until it passes
        or its failureThreshold is spent. Returns (passed, [(t, status, body)])."""
        p = self.container["startupProbe"]
        seen = []
        for attempt in range(p["failureThreshold"]):
            t_next = self.t_start + attempt * p["periodSeconds"]
            time.sleep(max(0.0, t_next - time.time()))
            status, body = self.probe("startupProbe")
            seen.append((time.time() - self.t_start, status, body))
            if status is not None and 200 <= status < 400:
                return True, seen
        return False, seen


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------------------------------------------------------
# Requests


CONVERSATION = [{"role": "system", "content": "You are a terse assistant who answers about trains."},
                {"role": "user", "content": "Which is the oldest railway still running, and where is it?"}]
STORY = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog"


def converse(pod, label):
    """The same conversation prefix on both models; returns the cached tokens of each."""
    st, _, chat = pod.post("/v1/chat/completions", {"model": "chat", "messages": CONVERSATION, "max_tokens": 6,
                                                    "temperature": 0})
    st2, _, comp = pod.post("/v1/completions", {"model": "stories", "prompt": STORY, "max_tokens": 6,
                                                "temperature": 0})
    if not check(st == 200 and st2 == 200, f"{label}: the conversation is answered ({st}, {st2})"):
        return 0, 0
    return (chat["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0),
            comp["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))


class Stream(threading.Thread):
    """A streamed chat completion read to its end on a thread of its own; events are timestamped."""

    def __init__(self, pod, max_tokens):
        super().__init__(daemon=True)
        self.pod, self.max_tokens = pod, max_tokens
        self.events, self.error, self.first = [], None, threading.Event()
        self.t_end = None

    def run(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.pod.port, timeout=60)
            body = {"model": "chat", "messages": [{"role": "user", "content": "Tell me a long story."}],
                    "max_tokens": self.max_tokens, "temperature": 0, "stream": True}
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            self.status = r.status
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data: "):
                    self.events.append((time.time(), line[6:]))
                    self.first.set()
            conn.close()
        except Exception as e:  # a broken stream is what the checks look for
            self.error = repr(e)
        finally:
            self.t_end = time.time()
            self.first.set()

    def finish_reason(self):
        for _, e in reversed(self.events):
            if e != "[DONE]":
                try:
                    ch = json.loads(e).get("choices") or [{}]
                    if ch[0].get("finish_reason"):
                        return ch[0]["finish_reason"]
                except ValueError:
                    pass
        return None


def snapshot_files(resume_dir):
    out = {}
    for root, _, files in os.walk(resume_dir):
        for f in files:
            if f.endswith(".sysnap"):
                p = os.path.join(root, f)
                out[p] = os.stat(p).st_mtime
    return out


# ---------------------------------------------------------------------------------------------------------------
# The life


def startup_checks(pod, label):
    status, body = pod.probe("startupProbe")
    check(status == 503 and json.loads(body).get("status") == "loading",
          f"{label}: while the models load, /health (startup, readiness) says 503 loading ({status} {body})")
    status, body = pod.probe("livenessProbe")
    check(status == 200, f"{label}: while the models load, the liveness path {pod.container['livenessProbe']['httpGet']['path']} answers 200 ({status})")
    passed, seen = pod.kubelet_startup()
    sp = pod.container["startupProbe"]
    check(passed, f"{label}: the startup probe passed within {sp['failureThreshold']} x {sp['periodSeconds']} s "
          f"(probes: {[(round(t, 1), s) for t, s, _ in seen]})")
    check(any(s == 503 for _, s, _ in seen), f"{label}: the kubelet's first startup probe saw the load")
    for which in ("readinessProbe", "livenessProbe"):
        status, body = pod.probe(which)
        check(status == 200, f"{label}: {which} passes once started ({status} {body})")
    st, body = pod.get("/health", 3)
    check(st == 200 and json.loads(body) == {"status": "ok"}, f"{label}: /health is 200 ok ({st} {body})")


def stop_with_checks(pod, label, stream, resume_dir, drain_s, expect_cut):
    """The kubelet's stop while `stream` runs, with what the pod answers at each step checked."""
    before = snapshot_files(resume_dir)
    t0 = time.time()
    check(pod.pre_stop[0] == "/bin/sleep", f"{label}: preStop is a sleep ({pod.pre_stop})")
    pre = float(pod.pre_stop[1])
    status, _ = pod.probe("readinessProbe")
    check(status == 200, f"{label}: during the preStop wait the pod still serves ({status})")
    time.sleep(max(0.0, t0 + pre - time.time()))
    check(stream.t_end is None, f"{label}: the stream still runs when SIGTERM comes")
    t_term = time.time()
    pod.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    status, body = pod.probe("readinessProbe")
    running = stream.t_end is None
    state = json.loads(body).get("status") if status else None
    check(status == 503 and state == "draining" and running,
          f"{label}: right after SIGTERM readiness fails, 503 draining, while the stream runs ({status} {body}, "
          f"stream running: {running})")
    st, headers, err = pod.post("/v1/chat/completions", {"model": "chat", "messages": CONVERSATION, "max_tokens": 2})
    check(st == 503 and headers.get("retry-after", "").isdigit() and err["error"]["code"] == "server_draining",
          f"{label}: a new request gets 503 with Retry-After ({st}, Retry-After {headers.get('retry-after')}, {err})")
    status, _ = pod.probe("livenessProbe")
    check(status == 200, f"{label}: liveness still passes while draining ({status})")
    left = pod.grace - (t_term - t0)
    try:
        rc = pod.proc.wait(timeout=left)
        killed = False
    except subprocess.TimeoutExpired:
        pod.proc.kill()
        rc, killed = pod.proc.wait(), True
    t_exit = time.time()
    pod.log.close()
    stream.join(10)
    check(not killed and rc == 0, f"{label}: the process exited 0 by itself (status {rc}, killed: {killed})")
    check(t_exit - t0 <= pod.grace, f"{label}: the whole stop took {t_exit - t0:.2f} s of the "
          f"{pod.grace} s grace period (preStop {pre:.0f} s, SIGTERM to exit {t_exit - t_term:.2f} s)")
    events = [e for _, e in stream.events]
    check(stream.error is None and events and events[-1] == "[DONE]",
          f"{label}: the stream ended cleanly with [DONE] (error {stream.error}, last {events[-1:]})")
    if expect_cut:
        check(any("shutting down" in e for e in events),
              f"{label}: the cut stream says why in its last event ({events[-2:]})")
        check(stream.t_end - t_term <= drain_s + 2.0,
              f"{label}: the stream was cut at the {drain_s} s drain deadline ({stream.t_end - t_term:.2f} s after SIGTERM)")
    else:
        check(stream.finish_reason() == "length", f"{label}: the stream finished its work (finish_reason "
              f"{stream.finish_reason()}) {stream.t_end - t_term:.2f} s after SIGTERM, within the drain")
    after = snapshot_files(resume_dir)
    written = [p for p, m in after.items() if before.get(p) != m and m >= t_term - 1]
    models = sorted({os.path.basename(os.path.dirname(p)) for p in written})
    check(models == ["chat", "stories"], f"{label}: the stop wrote the snapshots of both models ({models})")
    log = pod.log_text()
    m = re.search(r"stopped in ([\d.]+) s \(drain and cut ([\d.]+) s, snapshots and unload ([\d.]+) s\)", log)
    check(m is not None, f"{label}: the server logged its stop's timings")
    if m:
        print(f"   {label}: stop timings: total {m.group(1)} s, drain and cut {m.group(2)} s, "
              f"snapshots and unload {m.group(3)} s")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    ARGS = ap.parse_args()
    ARGS.source_dir = os.path.abspath(ARGS.source_dir)
    ARGS.work_dir = os.path.abspath(ARGS.work_dir)
    shutil.rmtree(ARGS.work_dir, ignore_errors=True)
    os.makedirs(ARGS.work_dir)
    resume_dir = os.path.join(ARGS.work_dir, "claim-resume-0")  # the pod's claim: kept across its restarts
    os.makedirs(resume_dir)
    t_test = time.time()
    pods = []
    try:
        sts, cm = render_pod()
        pod = Pod("pod-0", sts, cm, resume_dir)
        pods.append(pod)
        args = pod.args
        check("--resume" in args and "--drain-timeout" in args, f"the chart's flags: {' '.join(args)}")
        drain = int(args[args.index("--drain-timeout") + 1])

        # 1. The start, the load watched by the probes.
        pod.start()
        startup_checks(pod, "start")
        cold = converse(pod, "start")
        check(cold == (0, 0), f"start: the first conversation is cold (cached tokens {cold})")

        # 2. A stop during a stream of 400 tokens at 20 ms: 8 s, past the preStop wait, well within the drain.
        stream = Stream(pod, 400)
        stream.start()
        stream.first.wait(10)
        stop_with_checks(pod, "stop", stream, resume_dir, drain, expect_cut=False)

        # 3. The restart on the same claim, with the same flags (--resume): the conversation comes back warm.
        pod = Pod("pod-0-restarted", sts, cm, resume_dir)
        pods.append(pod)
        pod.start()
        startup_checks(pod, "restart")
        warm = converse(pod, "restart")
        check(warm[0] > 0 and warm[1] > 0, f"restart: the same conversation prefix is served warm "
              f"(cached tokens: chat {warm[0]}, stories {warm[1]})")
        st, metrics = pod.get("/metrics", 5)
        m = re.search(r"^switchyard_snapshots_restored_total (\d+)$", metrics, re.M)
        check(m is not None and int(m.group(1)) >= 2, f"restart: /metrics counts the restored snapshots ({m and m.group(0)})")
        for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
            check(re.search(rf"^{re.escape(name)} [\d.]+$", metrics, re.M) is not None,
                  f"restart: /metrics exports {name} for the inference gateway's endpoint picker")
        pod.proc.send_signal(signal.SIGTERM)
        check(pod.proc.wait(timeout=pod.grace) == 0, "restart: an idle pod stops at once with status 0")
        pod.log.close()

        # 4. A drain shorter than the stream: the chart with stop.drainSeconds=1 cuts it at the deadline.
        sts1, cm1 = render_pod(["stop.drainSeconds=1"])
        pod = Pod("pod-0-short-drain", sts1, cm1, resume_dir)
        pods.append(pod)
        pod.start()
        deadline = time.time() + 30
        while time.time() < deadline and pod.probe("readinessProbe")[0] != 200:
            time.sleep(0.1)
        stream = Stream(pod, 1000)
        stream.start()
        stream.first.wait(10)
        stop_with_checks(pod, "short drain", stream, resume_dir, 1, expect_cut=True)
    except Exception as e:
        import traceback
        traceback.print_exc()
        FAILED.append(f"exception: {e!r}")
    finally:
        for p in pods:
            if p.proc is not None and p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
        if FAILED:
            for p in pods:
                print(f"--- {p.name} log (tail):\n{p.log_text()[-3000:]}")
    return finish(t_test)


def finish(t_test):
    print(f"{len(FAILED)} failure(s) in {time.time() - t_test:.1f} s")
    return min(len(FAILED), 100)


if __name__ == "__main__":
    sys.exit(main())
