#!/usr/bin/env python3
"""Dev-time oracle: the prompt tokens llama-server's /infill lays out on a tiny Qwen2.5-Coder-vocabulary GGUF
(tests/integration/fim_model.py builds it with `switchyard quantize`), for the requests of fim_model.CASES.

llama-server does not return its prompt tokens, so each request runs with n_predict 1 on one slot, and the slot
is then saved (POST /slots/0?action=save): the file starts with the slot's token ids (llama.cpp's
llama_state_seq_save_file: magic, version, count, then the server's packed tokens: -1, a kind, n, the ids), whose first `tokens_evaluated` are the prompt.

Usage: fim_infill.py --llama-server BIN --switchyard BIN [--out tests/fixtures/fim/qwen-infill.json]
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
import fim_model  # noqa: E402


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--out", default=os.path.join(SOURCE, "tests", "fixtures", "fim", "qwen-infill.json"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="fim-oracle-")
    gguf = fim_model.build(SOURCE, work, args.switchyard)
    slots = os.path.join(work, "slots")
    os.makedirs(slots)
    port = free_port()
    log = open(os.path.join(work, "server.log"), "wb")
    proc = subprocess.Popen([args.llama_server, "-m", gguf, "-c", str(fim_model.N_CTX), "-np", "1", "--port",
                             str(port), "--host", "127.0.0.1", "--slot-save-path", slots, "-t", "2"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        version = ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=10) as r:
                version = json.loads(r.read()).get("build_info", "")
        except OSError:
            pass
        out_cases = []
        for i, case in enumerate(fim_model.CASES):
            body = dict(case, n_predict=1, temperature=0, cache_prompt=False)
            res = post(port, "/infill", body)
            n_prompt = res["tokens_evaluated"]
            name = f"case{i}.bin"
            post(port, "/slots/0?action=save", {"filename": name})
            with open(os.path.join(slots, name), "rb") as f:
                magic, ver, count = struct.unpack("<III", f.read(12))
                packed = list(struct.unpack(f"<{count}i", f.read(4 * count)))
            # the server's packed tokens: a marker (-1), a kind, the token count, the ids
            if len(packed) < 3 or packed[0] != -1 or packed[2] > len(packed) - 3:
                sys.exit(f"case {i}: unexpected slot file layout {packed[:4]}")
            ids = packed[3:3 + packed[2]]
            if len(ids) < n_prompt:
                sys.exit(f"case {i}: the slot holds {count} tokens, fewer than the prompt's {n_prompt}")
            out_cases.append({"request": case, "prompt_tokens": ids[:n_prompt]})
            print(f"case {i}: {n_prompt} prompt tokens")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    doc = {"source": "llama-server /infill (llama.cpp from the llama-cpp-python 0.3.36 sdist), n_predict 1, "
                     f"-c {fim_model.N_CTX} -np 1, on the GGUF of tests/integration/fim_model.py; "
                     "regenerate with tools/oracle/fim_infill.py",
           "llama_server_build": version, "n_ctx": fim_model.N_CTX, "cases": out_cases}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
