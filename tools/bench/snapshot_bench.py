#!/usr/bin/env python3
"""Warm-KV snapshot persistence of `switchyard serve`: restart with --resume, and a swap back (A -> B -> A).

    python3 tools/bench/snapshot_bench.py --switchyard build/bin/switchyard \
        --restart-plugin qwen-cpu-mmap --restart-model /tmp/h11-bench \
        --swap-plugin gguf-quant --swap-model-a A.gguf --swap-model-b B.gguf \
        [--restart-tokens 2000] [--swap-tokens 1000] [--threads 2] [--json OUT]

1. Restart: a server with a fresh resume folder gets a prompt of --restart-tokens token ids (max_tokens 1, time
   to first token = cold), is stopped with SIGTERM (a clean shutdown snapshots its slots), then a second server
   is started on the same folder with `--resume` and gets the same prompt (warm). Reported: both times to first
   token, cached_tokens, the snapshot file size, and the save/restore lines of the server logs (state bytes, file
   bytes, seconds: write and read MB/s, compression ratio).
2. Swap back: two models in one swap group (two GGUF files; different paths make different models), each given
   a prompt of --swap-tokens token ids: A, B, A. The second A request's time to first token with the default
   persist_on_unload (A's KV is snapshotted when B swaps it out and restored when A loads again) against
   persist_on_unload = false (A's second prompt is prefilled again).

Prompts are token ids drawn from a fixed seed (ordinary vocabulary range), so their length is exact and the
prompts of A and B differ. Standard library only (the server helpers come from serve_common.py).
"""
import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

SAVE_RE = re.compile(r"model (\S+): KV of (\d+) sequence\(s\), (\d+) tokens, saved to (\S+) in ([0-9.]+) s "
                     r"\((\d+) written: (\d+) state bytes in (\d+) file bytes; (\d+) unchanged\)")
RESTORE_RE = re.compile(r"model (\S+): restored (\d+) KV snapshot\(s\), (\d+) tokens, from (\S+) in ([0-9.]+) s")
LOADED_RE = re.compile(r"model (\S+) loaded in ([0-9.]+) s")


class ResumableServer(sc.Server):
    """serve_common.Server with extra command-line flags (e.g. --resume)."""

    def __init__(self, switchyard, config_text, work_dir, extra_args=()):
        # a log per start: the servers of one run restart in the same folder
        super().__init__(switchyard, config_text, work_dir=work_dir, extra_args=extra_args,
                         log_name=f"server-{int(time.time() * 1000)}.log", start_timeout=60)

    def stop(self):
        """SIGTERM and wait: the clean shutdown writes the snapshots. Returns (rc, seconds to exit)."""
        t0 = time.perf_counter()
        rc = super().stop(timeout=300)
        return rc, time.perf_counter() - t0


def token_prompt(n, seed):
    rng = random.Random(seed)
    return [rng.randint(1000, 30000) for _ in range(n)]


def first_token(port, model, prompt):
    r = sc.stream(port, "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
    u = r["usage"] or {}
    return {"ttft_s": r["t_first"] - r["t_send"], "prompt_tokens": u.get("prompt_tokens"),
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens")}


def parse_log(text):
    saves = [{"model": m[0], "sequences": int(m[1]), "tokens": int(m[2]), "seconds": float(m[4]),
              "written": int(m[5]), "state_bytes": int(m[6]), "file_bytes": int(m[7])}
             for m in SAVE_RE.findall(text)]
    restores = [{"model": m[0], "snapshots": int(m[1]), "tokens": int(m[2]), "seconds": float(m[4])}
                for m in RESTORE_RE.findall(text)]
    loads = [{"model": m[0], "seconds": float(m[1])} for m in LOADED_RE.findall(text)]
    for s in saves:
        s["write_state_MBps"] = s["state_bytes"] / 1e6 / s["seconds"] if s["seconds"] > 0 else None
        s["ratio"] = s["state_bytes"] / s["file_bytes"] if s["file_bytes"] else None
    return {"saves": saves, "restores": restores, "loads": loads}


def files_under(path):
    out = []
    for root, _, names in os.walk(path):
        for n in names:
            p = os.path.join(root, n)
            out.append({"path": os.path.relpath(p, path), "bytes": os.path.getsize(p)})
    return out


def model_section(name, plugin, path, args, group=None, persist=True, ctx=None):
    s = (f"[model.{name}]\nplugin = {plugin}\npath = {os.path.abspath(path)}\nparallel = 1\n"
         f"threads = {args.threads}\nctx_size = {ctx or args.ctx}\n")
    if group:
        s += f"group = {group}\n"
    if not persist:
        s += "persist_on_unload = false\n"
    return s + "\n"


def run_restart(args, work, log):
    resume = os.path.join(work, "resume")
    shutil.rmtree(resume, ignore_errors=True)
    cfg = f"[host]\nresume_path = {resume}\n\n" + model_section("restart", args.restart_plugin,
                                                                 args.restart_model, args)
    prompt = token_prompt(args.restart_tokens, 1)
    res = {}
    log("restart: cold server (fresh resume folder)")
    srv = ResumableServer(args.switchyard, cfg, work)
    try:
        sc.stream(srv.port, "/v1/completions", {"model": "restart", "prompt": [11, 12, 13], "max_tokens": 1})
        res["cold"] = first_token(srv.port, "restart", prompt)  # the model is loaded; this is the prefill
    finally:
        rc, t_stop = srv.stop()
    res["cold_server_rc"], res["stop_s"] = rc, t_stop
    res["cold_log"] = parse_log(srv.log_text())
    res["snapshot_files"] = files_under(resume)
    log(f"  cold ttft {res['cold']['ttft_s']:.3f} s, stop {t_stop:.2f} s, files {res['snapshot_files']}")
    # The load of the model after --resume restores the snapshot inside the load; the load is triggered by the
    # timed request itself (the worst case: the user's first request pays load + restore), and a second server
    # with a preloaded model gives the restore-excluded time too.
    for preload in (False, True):
        log(f"restart: --resume server ({'model preloaded' if preload else 'load on first request'})")
        c = cfg.replace("parallel = 1\n", "parallel = 1\npreload = true\n") if preload else cfg
        srv = ResumableServer(args.switchyard, c, work, ["--resume", "--resume-path", resume])
        try:
            if preload:  # wait until it is loaded (and restored)
                deadline = time.time() + 120
                while time.time() < deadline and not LOADED_RE.search(srv.log_text()):
                    time.sleep(0.05)
            r = first_token(srv.port, "restart", prompt)
        finally:
            rc, _ = srv.stop()
        key = "resume_preloaded" if preload else "resume"
        res[key] = r
        res[key + "_log"] = parse_log(srv.log_text())
        res[key + "_rc"] = rc
        log(f"  ttft {r['ttft_s']:.3f} s, cached {r['cached_tokens']}/{r['prompt_tokens']}, "
            f"restores {res[key + '_log']['restores']}, loads {res[key + '_log']['loads']}")
    res["speedup"] = res["cold"]["ttft_s"] / res["resume"]["ttft_s"]
    res["speedup_preloaded"] = res["cold"]["ttft_s"] / res["resume_preloaded"]["ttft_s"]
    return res


def run_swap(args, work, persist, log):
    resume = os.path.join(work, "resume-swap-" + ("on" if persist else "off"))
    shutil.rmtree(resume, ignore_errors=True)
    cfg = (f"[host]\nresume_path = {resume}\n\n"
           + model_section("swap-a", args.swap_plugin, args.swap_model_a, args, "pair", persist)
           + model_section("swap-b", args.swap_plugin, args.swap_model_b, args, "pair", persist)
           + "[group.pair]\nswap = true\n")
    pa, pb = token_prompt(args.swap_tokens, 2), token_prompt(args.swap_tokens, 3)
    log(f"swap A->B->A, persist_on_unload = {'true' if persist else 'false'}")
    srv = ResumableServer(args.switchyard, cfg, work)
    try:
        a1 = first_token(srv.port, "swap-a", pa)
        b1 = first_token(srv.port, "swap-b", pb)
        a2 = first_token(srv.port, "swap-a", pa)
    finally:
        rc, _ = srv.stop()
    parsed = parse_log(srv.log_text())
    log(f"  A {a1['ttft_s']:.3f} s, B {b1['ttft_s']:.3f} s, A again {a2['ttft_s']:.3f} s "
        f"(cached {a2['cached_tokens']}/{a2['prompt_tokens']})")
    return {"persist_on_unload": persist, "a1": a1, "b1": b1, "a2": a2, "rc": rc, "log": parsed}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--restart-plugin", default="qwen-cpu-mmap")
    ap.add_argument("--restart-model", required=True)
    ap.add_argument("--swap-plugin", default="gguf-quant")
    ap.add_argument("--swap-model-a", required=True)
    ap.add_argument("--swap-model-b", required=True)
    ap.add_argument("--restart-tokens", type=int, default=2000)
    ap.add_argument("--swap-tokens", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--skip", choices=("restart", "swap"), action="append", default=[])
    ap.add_argument("--work-dir")
    ap.add_argument("--json")
    args = ap.parse_args()

    work = args.work_dir or tempfile.mkdtemp(prefix="sy-snapshot-bench-")
    os.makedirs(work, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    out = {"machine": sc.machine(), "load_before": sc.loadavg(), "args": vars(args), "work_dir": work}
    for p in (args.restart_model, args.swap_model_a, args.swap_model_b):
        if os.path.isfile(p):
            sc.warm_page_cache(p)
        elif os.path.isdir(p):
            for n in os.listdir(p):
                if n.endswith(".safetensors"):
                    sc.warm_page_cache(os.path.join(p, n))
    log(f"machine {out['machine']}, load {out['load_before']}")
    if "restart" not in args.skip:
        out["restart"] = run_restart(args, work, log)
    if "swap" not in args.skip:
        out["swap_persist"] = run_swap(args, work, True, log)
        out["swap_no_persist"] = run_swap(args, work, False, log)
    out["load_after"] = sc.loadavg()
    log(f"load after {out['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
