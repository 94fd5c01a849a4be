#!/usr/bin/env python3
"""Integration test of models that are processes and of peers (llama-swap parity), with real upstream processes.

switchyard starts fake_upstream.py (a small OpenAI-compatible server) as a `cmd` model. Checked: a swap between a
plugin model and a process model of one group; SSE bytes through switchyard identical to a direct connection;
kill -9 of the upstream mid-stream gives the client a clean error event and the next request starts it again;
SIGKILL of switchyard leaves no child alive; a peer served through a second switchyard (with its API key); the
Ollama API refuses process models naming why; /upstream, /logs and /running.
Every check can fail; the exit status is the number of failed checks.

Usage: test_upstream.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback

import sy_server
from sy_server import CheckFailed, check

ARGS = None


def free_port_block(n=4):
    """A port p with p..p+n-1 free (as far as a bind can tell)."""
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + n > 65535:
            continue
        ok = True
        for k in range(n):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", p + k))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return p
    raise CheckFailed("no block of free ports")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of someone else's counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


class Server(sy_server.Server):
    """One `switchyard serve` process in ARGS.work_dir/NAME with its own config file and log."""

    def __init__(self, name, config_text):
        super().__init__(ARGS, name, config_text)


def fake_cmd(extra=""):
    py = sys.executable
    script = os.path.join(ARGS.source_dir, "tests", "integration", "fake_upstream.py")
    return f"{py} {script} --port ${{PORT}} --name ${{MODEL_ID}} {extra}".strip()


def process_section(name, group, extra_args="", extra=""):
    pid_file = os.path.join(ARGS.work_dir, f"{name}.pid")
    return (f"[model.{name}]\ncmd = ${{FAKE}} --port ${{PORT}} --name ${{MODEL_ID}}\n"
            f"  --pid-file {pid_file} {extra_args}\n"
            f"group = {group}\nmemory = 256M\nenv = FAKE_TAG=a,b, OTHER=1\n{extra}\n")


def pid_of(name):
    with open(os.path.join(ARGS.work_dir, f"{name}.pid")) as f:
        return int(f.read().strip())


def macros():
    py = sys.executable
    script = os.path.join(ARGS.source_dir, "tests", "integration", "fake_upstream.py")
    return f"[macros]\nFAKE = {py} {script}\n\n"


def chat(stream, content="hello there", model="proc", **extra):
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": content}], **extra}


def dechunked_sse(port, path, body):
    """The raw body bytes of a streamed POST (http.client removes the chunked framing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, resp.getheader("Content-Type"), data


# ---------------------------------------------------------------------------------------------------------------


def t_swap_and_proxy(_):
    start = free_port_block()
    fixture = os.path.join(ARGS.source_dir, "tests", "fixtures", "test-engine", "alpha.model")
    cfg = (f"[host]\nstart_port = {start}\n\n" + macros()
           + process_section("proc", "g", extra="use_model_name = upstream-name\nname = Fake one\n"
                             "description = a fake upstream\nmetadata = {\"port\": \"x\"}\n")
           + f"[model.alpha]\nplugin = test-engine\npath = {fixture}\ngroup = g\nengine.eos_one_in = 0\n\n"
           + process_section("hidden", "other", extra="unlisted = true\n")
           + "[group.g]\nswap = true\nexclusive = false\n\n[group.other]\nexclusive = false\n")
    srv = Server("swap", cfg)
    try:
        st, body = srv.json("POST", "/v1/chat/completions", chat(False))
        check(st == 200, f"process model chat: {st} {body}")
        check(body["choices"][0]["message"]["content"] == "proc says: hello there (done)", f"reply {body}")
        check(body["received"]["model"] == "upstream-name", f"use_model_name not applied: {body['received']}")
        check(body["received"]["messages"] == chat(False)["messages"], "messages changed on the way")
        st, run = srv.json("GET", "/running")
        check(st == 200 and [m["model"] for m in run["running"]] == ["proc"], f"/running: {run}")
        # The swap: alpha (a plugin model of the same group) unloads proc, and proc comes back after.
        pid1 = pid_of("proc")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, model="alpha", max_tokens=4))
        check(st == 200, f"plugin model chat: {st} {body}")
        deadline = time.time() + 10
        while alive(pid1) and time.time() < deadline:
            time.sleep(0.05)
        check(not alive(pid1), "the process model's child still runs after the swap to alpha")
        st, run = srv.json("GET", "/running")
        check([m["model"] for m in run["running"]] == ["alpha"], f"/running after the swap: {run}")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False))
        check(st == 200 and pid_of("proc") != pid1, f"proc did not start again after the swap back: {st} {body}")
        check("unloading proc to load alpha (group rules)" in srv.log_text(), "no swap logged")
        check("unloading alpha to load proc (group rules)" in srv.log_text(), "no swap back logged")
        # SSE through switchyard is byte for byte what the upstream sends.
        st, ctype, through = dechunked_sse(srv.port, "/v1/chat/completions", chat(True, model="proc"))
        check(st == 200 and ctype.startswith("text/event-stream"), f"stream: {st} {ctype}")
        body = chat(True, model="upstream-name")
        st2, _, direct = dechunked_sse(start, "/v1/chat/completions", body)
        check(st2 == 200 and through == direct, f"SSE bytes differ:\n{through[:300]!r}\n{direct[:300]!r}")
        check(through.endswith(b"data: [DONE]\n\n"), "the stream lacks its end")
        # Embeddings and audio pass through.
        st, body = srv.json("POST", "/v1/embeddings", {"model": "proc", "input": "abc"})
        check(st == 200 and body["data"][0]["embedding"] == [3.0, 0.5, -0.25], f"embeddings: {st} {body}")
        boundary = "XyZ"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nproc\r\n"
                f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
                f"Content-Type: audio/wav\r\n\r\nRIFF....\r\n--{boundary}--\r\n").encode()
        st, _, raw = srv.request("POST", "/v1/audio/transcriptions", form,
                                 {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        check(st == 200 and json.loads(raw)["text"].startswith("transcribed by proc"), f"audio: {st} {raw[:200]}")
        # The Ollama API is for switchyard's own engines: 400 naming why.
        st, body = srv.json("POST", "/api/chat", chat(False))
        check(st == 400 and "served by another server" in body.get("error", ""), f"/api/chat: {st} {body}")
        # /upstream passthrough, with the query string.
        st, body = srv.json("GET", "/upstream/proc/echo-path/a/b?x=1&y=two%20words")
        check(st == 200 and body["path"] == "/echo-path/a/b?x=1&y=two%20words", f"/upstream: {st} {body}")
        st, body = srv.json("GET", "/upstream/alpha/x")
        check(st == 400, f"/upstream of a plugin model: {st} {body}")
        # /logs holds the upstream's output and ours; the env reached the child.
        st, _, logs = srv.request("GET", "/logs")
        text = logs.decode()
        check(st == 200 and "[proc] fake-upstream proc listening" in text, f"/logs: {text[-500:]}")
        check("env FAKE_TAG=a,b)" in text, "the env item with a comma did not reach the child")
        st, _, logs = srv.request("GET", "/logs?model=proc")
        check(logs.decode().startswith("fake-upstream proc"), f"/logs?model=proc: {logs[:200]!r}")
        # /logs/stream: what is kept, then new lines as they come.
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        conn.request("GET", "/logs/stream")
        stream = conn.getresponse()
        check(stream.status == 200, f"/logs/stream: {stream.status}")
        marker = f"/echo-path/stream-marker-{os.getpid()}".encode()
        srv.json("GET", "/upstream/proc" + marker.decode())  # logged by the upstream after the stream began
        seen = b""
        deadline = time.time() + 10
        while b"[proc] fake-upstream proc: \"GET " + marker not in seen and time.time() < deadline:
            seen += stream.read1(65536)
        conn.close()
        check(b"[proc] fake-upstream proc: \"GET " + marker in seen, f"/logs/stream: {seen[-600:]!r}")
        # /v1/models: name, description, metadata; unlisted models left out.
        st, models = srv.json("GET", "/v1/models")
        ids = [m["id"] for m in models["data"]]
        check("proc" in ids and "alpha" in ids and "hidden" not in ids, f"/v1/models ids: {ids}")
        entry = [m for m in models["data"] if m["id"] == "proc"][0]
        check(entry.get("name") == "Fake one" and entry.get("description") == "a fake upstream"
              and entry.get("meta", {}).get("llamaswap", {}).get("port") == "x", f"/v1/models entry: {entry}")
    finally:
        srv.stop()
    for name in ("proc",):
        check(not alive(pid_of(name)), f"{name}'s child outlived the stop of switchyard")


def t_upstream_dies_mid_stream(_):
    start = free_port_block()
    cfg = (f"[host]\nstart_port = {start}\n\n" + macros()
           + process_section("proc", "g", extra_args="--chunk-delay 0.3"))
    srv = Server("dies", cfg)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        long_text = " ".join(f"w{i}" for i in range(40))
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat(True, long_text)).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        check(resp.status == 200, f"stream status {resp.status}")
        first = resp.readline()
        check(first.startswith(b"data: "), f"first line {first!r}")
        victim = pid_of("proc")
        os.kill(victim, signal.SIGKILL)
        rest = resp.read()
        conn.close()
        events = [l for l in (first + rest).split(b"\n") if l.startswith(b"data: ")]
        last = json.loads(events[-1][6:])
        check("error" in last and last["error"]["code"] == "upstream_disconnected", f"last event: {events[-1]!r}")
        check(b"[DONE]" not in rest, "a broken stream must not claim to be done")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False))
        check(st == 200 and body["choices"][0]["message"]["content"].startswith("proc says"),
              f"no recovery after the kill: {st} {body}")
        check(pid_of("proc") != victim, "the process was not started again")
        # A client that goes away closes the upstream request (the upstream logs a broken pipe or finishes early).
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat(True, long_text)).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.readline()
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        # The upstream notices: its next write after our side closed the request fails (40 words at 0.3 s each
        # would take 12 s otherwise).
        deadline = time.time() + 5
        logs = b""
        while time.time() < deadline:
            _, _, logs = srv.request("GET", "/logs?model=proc")
            if b"BrokenPipeError" in logs or b"ConnectionResetError" in logs:
                break
            time.sleep(0.1)
        check(b"BrokenPipeError" in logs or b"ConnectionResetError" in logs,
              f"the upstream request stayed open after the client left:\n{logs[-1500:]!r}")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, "after a disconnect"))
        check(st == 200, f"after a client disconnect: {st} {body}")
    finally:
        srv.stop()


def t_sigkill_leaves_no_child(_):
    start = free_port_block()
    cfg = f"[host]\nstart_port = {start}\n\n" + macros() + process_section("proc", "g")
    srv = Server("sigkill", cfg)
    st, body = srv.json("POST", "/v1/chat/completions", chat(False))
    check(st == 200, f"chat: {st} {body}")
    child = pid_of("proc")
    check(alive(child), "the child is not running")
    srv.kill()
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    check(not alive(child), f"child {child} survived SIGKILL of switchyard")


def t_peer(_):
    start = free_port_block()
    backend = Server("peer-backend", f"[host]\nstart_port = {start}\napi_keys = sekrit\n\n" + macros()
                     + process_section("proc", "g"))
    front = None
    try:
        st, body = backend.json("POST", "/v1/chat/completions", chat(False))
        check(st == 401, f"the backend must want its key: {st}")
        front = Server("peer-front", f"[peer.back]\nurl = http://127.0.0.1:{backend.port}/\napi_key = sekrit\n"
                       "models = proc\n")
        st, body = front.json("POST", "/v1/chat/completions", chat(False, "via a peer"))
        check(st == 200 and body["choices"][0]["message"]["content"] == "proc says: via a peer (done)",
              f"through the peer: {st} {body}")
        st, ctype, through = dechunked_sse(front.port, "/v1/chat/completions", chat(True))
        st2, _, direct = dechunked_sse(start, "/v1/chat/completions", chat(True))
        check(st == 200 and through == direct, "SSE through a peer differs from the upstream's")
        st, models = front.json("GET", "/v1/models")
        check("proc" in [m["id"] for m in models["data"]], f"peer model not listed: {models}")
        st, body = front.json("POST", "/api/generate", {"model": "proc", "prompt": "x"})
        check(st == 400, f"Ollama API on a peer model: {st} {body}")
    finally:
        if front:
            front.stop()
        backend.stop()


def t_bad_configs(_):
    """Process keys are checked with file:line, and a config with errors starts nothing."""
    d = os.path.join(ARGS.work_dir, "bad")
    os.makedirs(d, exist_ok=True)
    cases = [
        ("[model.p]\ncmd = x ${NOPE}\n", "${NOPE} is not a macro"),
        ("[model.p]\ncmd = x\nplugin = test-engine\n", "takes no plugin or path"),
        ("[model.p]\ncmd = x\ncheck_endpoint = health\n", "check_endpoint"),
        ("[model.p]\ncmd = x\nenv = 1BAD=x\n", "is not NAME=VALUE"),
        ("[model.p]\nplugin = test-engine\npath = /x\nproxy = http://h\n", "only a model with 'cmd'"),
        ("[peer.q]\nmodels = a\n", "missing required key 'url'"),
    ]
    for i, (text, want) in enumerate(cases):
        path = os.path.join(d, f"bad{i}.ini")
        with open(path, "w") as f:
            f.write(text)
        out = subprocess.run([ARGS.switchyard, "serve", "--config", path, "--check-config"], capture_output=True,
                             timeout=30)
        err = out.stderr.decode()
        check(out.returncode == 1 and want in err, f"case {i}: rc {out.returncode}, wanted {want!r} in:\n{err}")


def wait_for(cond, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def t_rules(_):
    """Process models follow the plugin models' rules: preload, max_memory with the declared memory, ttl, reload."""
    start = free_port_block()
    for name in ("r1", "r2"):
        try:
            os.remove(os.path.join(ARGS.work_dir, f"{name}.pid"))
        except FileNotFoundError:
            pass

    def config(delay):
        return (f"[host]\nstart_port = {start}\nmax_memory = 300M\n\n" + macros()
                + process_section("r1", "a", extra_args=f"--chunk-delay {delay}", extra="preload = true\n")
                + process_section("r2", "b", extra="ttl = 1\n")
                + "[group.a]\nexclusive = false\n\n[group.b]\nexclusive = false\n")
    srv = Server("rules", config(0))
    try:
        pid_path = os.path.join(ARGS.work_dir, "r1.pid")
        check(wait_for(lambda: os.path.exists(pid_path) and alive(pid_of("r1"))), "r1 was not preloaded")
        pid1 = pid_of("r1")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, model="r2"))
        check(st == 200, f"r2: {st} {body}")
        check(wait_for(lambda: not alive(pid1)), "max_memory did not unload r1 (256M + 256M > 300M)")
        check("max_memory" in srv.log_text(), "no budget unload logged")
        pid2 = pid_of("r2")
        check(wait_for(lambda: not alive(pid2), 6), "ttl = 1 did not stop r2")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, model="r1"))
        check(st == 200, f"r1 again: {st} {body}")
        pid1 = pid_of("r1")
        # A reload that changes r1's command stops the running one; the next request starts the new one.
        with open(srv.config_path, "w") as f:
            f.write(config(0.01))
        srv.proc.send_signal(signal.SIGHUP)
        check(wait_for(lambda: not alive(pid1)), "the reload did not stop r1's old process")
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, model="r1"))
        check(st == 200 and pid_of("r1") != pid1, f"r1 after the reload: {st} {body}")
        check("--chunk-delay 0.01" in srv.log_text(), "the new command did not run")
    finally:
        srv.stop()


def t_selectors(_):
    """llama-swap's selectors: warm picks a loaded target, spillover fills one target then starts the next."""
    start = free_port_block()
    cfg = (f"[host]\nstart_port = {start}\n\n" + macros()
           + process_section("p1", "s", extra_args="--chunk-delay 0.2")
           + process_section("p2", "s", extra_args="--chunk-delay 0.2")
           + "[group.s]\nswap = false\nexclusive = false\n\n"
           + "[selector.warm-sel]\nstrategy = warm\ntargets = p2, p1\nname = Warm one\n\n"
           + "[selector.spill]\nstrategy = spillover\ntargets = p1, p2\nspillover = 1\n")
    srv = Server("selectors", cfg)

    def who(model):
        st, body = srv.json("POST", "/v1/chat/completions", chat(False, model=model))
        check(st == 200, f"{model}: {st} {body}")
        return body["choices"][0]["message"]["content"].split()[0]

    try:
        check(who("warm-sel") == "p2", "warm with nothing loaded must start the first target")
        srv.json("POST", "/unload/p2")
        check(who("p1") == "p1", "p1")
        check(who("warm-sel") == "p1", "warm must choose the loaded target")
        # The last reply reaches the client a moment before p1's request count drops (the proxy ends its lease
        # after the response is written); spillover must start from an idle p1.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st, running = srv.json("GET", "/running")
            if st == 200 and all(m.get("in_flight", 0) == 0 for m in running.get("running", [])):
                break
            time.sleep(0.02)
        # Spillover: a streaming request holds p1; the next one spills to p2.
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request("POST", "/v1/chat/completions",
                     body=json.dumps(chat(True, " ".join(["w"] * 20), model="spill")).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = json.loads(resp.readline()[6:])
        check(first["choices"][0]["delta"]["content"] == "p1", f"the first spillover request: {first}")
        check(who("spill") == "p2", "the second concurrent request must spill over to p2")
        conn.close()
        st, models = srv.json("GET", "/v1/models")
        sel = [m for m in models["data"] if m["id"] == "warm-sel"]
        check(sel and sel[0]["targets"] == ["p2", "p1"] and sel[0]["name"] == "Warm one", f"/v1/models: {sel}")
    finally:
        srv.stop()


LLAMA_SERVER_DEFAULT = "/work/main/build/llama.cpp-native/build/bin/llama-server"


def t_llama_server(_):
    """At dev time: a natively built llama-server as a process model (skipped when it or the GGUF is absent)."""
    # Opt-in (a binary built outside this project): SY_LLAMA_SERVER=path, e.g. the native peer at
    # LLAMA_SERVER_DEFAULT built by tools/bench/build_llama_cpp.sh.
    server = os.environ.get("SY_LLAMA_SERVER", "")
    gguf = os.environ.get("SY_SMOLLM2_GGUF", "")
    if not (os.access(server, os.X_OK) and os.path.isfile(gguf)):
        print(f"skip t_llama_server: needs SY_LLAMA_SERVER ({server}) and SY_SMOLLM2_GGUF")
        return
    start = free_port_block()
    yaml_path = os.path.join(ARGS.work_dir, "llama-swap-smol.yaml")
    with open(yaml_path, "w") as f:
        f.write(f"startPort: {start}\nmacros:\n  server: {server} --port ${{PORT}} --host 127.0.0.1\n"
                f"models:\n  smol:\n    cmd: |\n      ${{server}}\n      -m {gguf}\n      -c 1024 -t 1 -np 1 --temp 0\n"
                f"    aliases: [smollm2]\n")
    out = subprocess.run([ARGS.switchyard, "import-config", yaml_path], capture_output=True, timeout=30)
    check(out.returncode == 0, f"import: {out.stderr.decode()}")
    srv = Server("llama-server", out.stdout.decode())
    try:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Name a colour."}],
                "max_tokens": 12, "temperature": 0, "seed": 1}
        st, through = srv.json("POST", "/v1/chat/completions", body)
        check(st == 200, f"through switchyard: {st} {through}")
        st, _, raw = srv.request("POST", "/v1/chat/completions", body, port=start)
        direct = json.loads(raw)
        check(through["choices"][0]["message"] == direct["choices"][0]["message"],
              f"llama-server answers differently through switchyard:\n{through}\n{direct}")

        def streamed(port):
            st, _, data = dechunked_sse(port, "/v1/chat/completions", dict(body, stream=True))
            check(st == 200, f"stream: {st}")
            text = ""
            for line in data.split(b"\n"):
                if line.startswith(b"data: {"):
                    for c in json.loads(line[6:]).get("choices", []):
                        text += (c.get("delta") or {}).get("content") or ""
            return text, data.count(b"data: ")
        a, na = streamed(srv.port)
        b, nb = streamed(start)
        check(a == b and na == nb and a, f"SSE differs: {a!r} ({na} events) vs {b!r} ({nb})")
        st, props = srv.json("GET", "/upstream/smol/props")
        check(st == 200 and "default_generation_settings" in props, f"/upstream/smol/props: {st}")
    finally:
        srv.stop()
    # --native: the same llama-swap model served by the gguf-quant engine in process.
    out = subprocess.run([ARGS.switchyard, "import-config", "--native", yaml_path], capture_output=True, timeout=30)
    ini = out.stdout.decode()
    check(out.returncode == 0 and "plugin = gguf-quant" in ini and "ctx_size = 1024" in ini, f"--native: {ini}")
    srv = Server("native", ini)
    try:
        st, body2 = srv.json("POST", "/v1/chat/completions", dict(body, model="smol"))
        check(st == 200 and body2["choices"][0]["message"]["content"], f"native: {st} {body2}")
    finally:
        srv.stop()


def t_import_config(_):
    """llama-swap's own example config: the INI loads with serve --check-config, the report lists what dropped."""
    src = os.path.join(ARGS.source_dir, "tests", "fixtures", "llama-swap", "config.example.yaml")
    out = subprocess.run([ARGS.switchyard, "import-config", src], capture_output=True, timeout=30)
    check(out.returncode == 0, f"import-config: rc {out.returncode}: {out.stderr.decode()[-2000:]}")
    ini, report = out.stdout.decode(), out.stderr.decode()
    for want in ("[model.gpt-oss-120b]", "use_model_name = openai/gpt-oss-120B", "env = CUDA_VISIBLE_DEVICES=0,1,2",
                 "strip_params = temperature, top_p, top_k", "cmd_stop = docker stop ${MODEL_ID}",
                 "[peer.openrouter]", "url = https://openrouter.ai/api", "[group.group2]", "start_port = 10001",
                 "aliases = gpt-4o-mini", "--ctx-size 16384 --temperature 0.7", "latest-llama = "):
        check(want in ini, f"the INI lacks {want!r}:\n{ini}")
    for dropped in ("selectors.llama: target 'modelA'", "profiles", "routing.settings.matrix", "concurrencyLimit", "setParamsByID",
                    "hooks.on_startup.preload: 'llama'", "member 'llama' is not an imported model", "ui:"):
        check(dropped in report, f"the report does not name {dropped!r}:\n{report}")
    path = os.path.join(ARGS.work_dir, "imported.ini")
    with open(path, "w") as f:
        f.write(ini)
    env = dict(os.environ, HOME=os.environ.get("HOME", "/root"))
    chk = subprocess.run([ARGS.switchyard, "serve", "--config", path, "--check-config",
                          "--plugin-dir", ARGS.plugin_dir], capture_output=True, timeout=30, env=env)
    check(chk.returncode == 0, f"serve --check-config on the import: {chk.stderr.decode()[-3000:]}")
    # Not YAML, or not a mapping: one clear error, exit 1.
    bad = os.path.join(ARGS.work_dir, "bad.yaml")
    with open(bad, "w") as f:
        f.write("models: [unclosed\n")
    out = subprocess.run([ARGS.switchyard, "import-config", bad], capture_output=True, timeout=30)
    check(out.returncode == 1 and "not YAML" in out.stderr.decode(), f"bad YAML: {out.returncode} {out.stderr}")


TESTS = [t_swap_and_proxy, t_upstream_dies_mid_stream, t_sigkill_leaves_no_child, t_peer, t_bad_configs,
         t_rules, t_selectors, t_import_config, t_llama_server]


def main():
    global ARGS
    ap = sy_server.argument_parser()
    ap.add_argument("--only", action="append")
    ARGS = sy_server.parse_arguments(ap)
    failed = 0
    for t in TESTS:
        if ARGS.only and t.__name__ not in ARGS.only:
            continue
        t0 = time.time()
        try:
            t(None)
            print(f"ok   {t.__name__} ({time.time() - t0:.1f} s)")
        except Exception as e:  # noqa: BLE001 - every failure is reported and counted
            failed += 1
            print(f"FAIL {t.__name__}: {e}")
            if not isinstance(e, CheckFailed):
                traceback.print_exc()
        sys.stdout.flush()
    print(f"{failed} failed")
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
