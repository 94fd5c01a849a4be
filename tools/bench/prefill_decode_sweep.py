#!/usr/bin/env python3
"""Prefill against prompt length and decode against depth, switchyard (each CPU tier this machine has) beside a
native llama.cpp's llama-bench, on Q8_0, Q4_K_M and BF16, same files, same threads, runs alternating; the median
of --repeats runs per point. Writes a JSON file with every run, two PNG plots, and prints Markdown tables of the
ratios and of the issue's targets (docs/benchmarks.md, "Prefill and decode sweep").

    python3 tools/oracle/make_bench_model.py --out /tmp/sy-bench/qwen2.5-0.5b --gguf        # once (random weights)
    python3 tools/bench/prefill_decode_sweep.py --model-dir /tmp/sy-bench/qwen2.5-0.5b \\
        --switchyard build/bin/switchyard --llama-bench /work/peer/build/bin/llama-bench \\
        [--types Q8_0 Q4_K_M BF16] [--tiers avx2 avx512] [--lengths 512 1024 2048 4096 8192] \\
        [--depths 0 1024 4096 8192] [--gen 32] [--repeats 3] [--threads 2] \\
        [--json docs/img/sweep.json] [--plot-prefill docs/img/sweep-prefill.png] [--plot-decode ...] [--resume]

What each engine runs (page cache warm: every file is read once first):
  Q8_0, Q4_K_M   ours: gguf-quant on model-q8_0.gguf / model-q4_k_m.gguf (made with `switchyard quantize` from
                 model-f16.gguf when missing); the peer: the same file.
  BF16           ours: qwen-cpu-mmap on the BF16 safetensors checkpoint; the peer: model-f16.gguf (llama.cpp has
                 no BF16 kernels on this path; F16 is its nearest type, the same weights to 3 bits of mantissa).
  prefill N      ours: `switchyard bench -p N -n GEN --ctx-size N+GEN+16` (one prefill call of N tokens; the GEN
                 greedy tokens after it give decode at depth N in the same run); the peer: `llama-bench -p N -n 0
                 --no-warmup` (its warmup would be a second full prefill; --peer-warmup keeps it).
  decode at D    ours: the -p D run above (D = 0: `-p 1 -n GEN`); the peer: `llama-bench -p 0 -n GEN -d D`
                 (the depth prefill is not timed, as in ours).
Order: for each repeat, for each length (and depth), for each type: ours on every tier, then the peer. --resume
keeps the runs already in --json and only adds those missing, so an interrupted sweep continues; --report-only
rebuilds tables and plots from --json. The AMX tier is run only where the CPU has it; otherwise the output says why.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

TYPES = {
    "Q8_0": {"plugin": "gguf-quant", "ours": "model-q8_0.gguf", "peer": "model-q8_0.gguf"},
    "Q4_K_M": {"plugin": "gguf-quant", "ours": "model-q4_k_m.gguf", "peer": "model-q4_k_m.gguf"},
    "BF16": {"plugin": "qwen-cpu-mmap", "ours": ".", "peer": "model-f16.gguf"},
}
TIER_ORDER = ["scalar", "avx2", "avx512", "amx"]
# /proc/cpuinfo flags each tier needs (kernels/cpu/sy_kernels.c, sy_cpu_tier_supported)
TIER_FLAGS = {"scalar": [], "avx2": ["avx2", "fma", "f16c"],
              "avx512": ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"],
              "amx": ["amx_tile", "amx_int8", "amx_bf16"]}
PEER = "llama.cpp"


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def warm(path):
    paths = [os.path.join(path, n) for n in os.listdir(path) if n.endswith(".safetensors")] \
        if os.path.isdir(path) else [path]
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def available_tiers(wanted, switchyard, probe_model):
    """The tiers of `wanted` this CPU runs, and a line for each one skipped saying why."""
    flags, tiers, notes = cpu_flags(), [], []
    for tier in wanted:
        missing = [f for f in TIER_FLAGS[tier] if f not in flags]
        if missing:
            notes.append(f"{tier}: not run, this CPU lacks {', '.join(missing)} (/proc/cpuinfo)")
            continue
        if tier == "amx":  # the kernel must also grant the tile state; switchyard exits 2 with the reason if not
            p = subprocess.run([switchyard, "bench", "--model", probe_model, "-p", "1", "-n", "1", "--json"],
                               env=dict(os.environ, SY_CPU_TIER="amx"), capture_output=True, text=True)
            if p.returncode != 0:
                notes.append(f"amx: not run, {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'rc %d' % p.returncode}")
                continue
        tiers.append(tier)
    return tiers, notes


class Sweep:
    def __init__(self, args):
        self.args = args
        self.data = {"runs": []}
        if (args.resume or args.report_only) and os.path.exists(args.json):
            with open(args.json) as f:
                self.data = json.load(f)

    def save(self):
        if self.args.json:
            tmp = self.args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.data, f, indent=1)
            os.replace(tmp, self.args.json)

    def count(self, **key):
        return sum(1 for r in self.data["runs"] if all(r.get(k) == v for k, v in key.items()))

    def record(self, **run):
        run.update(time_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.data["runs"].append(run)
        self.save()

    def execute(self, cmd, env_extra=None):
        env = dict(os.environ, **(env_extra or {}))
        shown = " ".join(f"{k}={v}" for k, v in (env_extra or {}).items()) + (" " if env_extra else "") + " ".join(cmd)
        load = loadavg()
        print(f"# load {load}: {shown}", flush=True)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            print(f"#   timed out after {self.args.timeout} s", flush=True)
            return None, load, shown
        if p.returncode != 0:
            print(f"#   failed (rc {p.returncode}): {p.stderr.strip()[-400:]}", flush=True)
            return None, load, shown
        print(f"#   {time.time() - t0:.0f} s", flush=True)
        return p.stdout, load, shown

    def ours(self, typ, tier, n_prompt):
        a, t = self.args, TYPES[typ]
        model = os.path.normpath(os.path.join(a.model_dir, t["ours"]))
        cmd = [a.switchyard, "bench", "--plugin", t["plugin"], "--model", model, "-p", str(n_prompt), "-n",
               str(a.gen), "--threads", str(a.threads), "--ctx-size", str(n_prompt + a.gen + 16), "--json"]
        out, load, shown = self.execute(cmd, {"SY_CPU_TIER": tier})
        if out is None:
            return None
        r = json.loads(out.strip().splitlines()[-1])
        print(f"#   prefill {r['prefill_tok_s']:.1f} tok/s, decode {r['decode_tok_s']:.2f} tok/s", flush=True)
        return r, load, shown

    def peer(self, typ, n_prompt, n_gen, depth):
        a = self.args
        model = os.path.join(a.model_dir, TYPES[typ]["peer"])
        cmd = [a.llama_bench, "-m", model, "-t", str(a.threads), "-p", str(n_prompt), "-n", str(n_gen),
               "-r", "1", "-o", "json"]
        if depth:
            cmd += ["-d", str(depth)]
        if n_prompt and not a.peer_warmup:
            cmd.append("--no-warmup")
        cmd += a.peer_args.split()
        out, load, shown = self.execute(cmd)
        if out is None:
            return None
        r = json.loads(out)[0]
        print(f"#   {r['avg_ts']:.2f} tok/s (llama.cpp {r.get('build_commit')})", flush=True)
        self.data.setdefault("peer_build", r.get("build_commit"))
        return r["avg_ts"], load, shown

    def prefill_point(self, typ, n, rep):
        a = self.args
        for tier in a.tiers:
            if self.count(kind="prefill", type=typ, engine="switchyard", tier=tier, n=n) <= rep:
                got = self.ours(typ, tier, n)
                if got:
                    r, load, shown = got
                    self.record(kind="prefill", type=typ, engine="switchyard", tier=tier, n=n,
                                tok_s=r["prefill_tok_s"], load=load, cmd=shown)
                    self.record(kind="decode", type=typ, engine="switchyard", tier=tier, n=n, gen=a.gen,
                                tok_s=r["decode_tok_s"], load=load, cmd=shown)
        if self.count(kind="prefill", type=typ, engine=PEER, n=n) <= rep:
            got = self.peer(typ, n, 0, 0)
            if got:
                self.record(kind="prefill", type=typ, engine=PEER, n=n, tok_s=got[0], load=got[1], cmd=got[2])

    def decode_point(self, typ, d, rep):
        a = self.args
        for tier in a.tiers:  # depths that are also prefill lengths were measured by the prefill run
            if d not in a.lengths and self.count(kind="decode", type=typ, engine="switchyard", tier=tier, n=d) <= rep:
                got = self.ours(typ, tier, max(d, 1))
                if got:
                    r, load, shown = got
                    self.record(kind="decode", type=typ, engine="switchyard", tier=tier, n=d, gen=a.gen,
                                tok_s=r["decode_tok_s"], load=load, cmd=shown)
        if self.count(kind="decode", type=typ, engine=PEER, n=d) <= rep:
            got = self.peer(typ, 0, a.gen, d)
            if got:
                self.record(kind="decode", type=typ, engine=PEER, n=d, gen=a.gen, tok_s=got[0], load=got[1],
                            cmd=got[2])

    def run(self):
        a = self.args
        points = sorted([("decode", d) for d in a.depths] + [("prefill", n) for n in a.lengths],
                        key=lambda p: (p[1], p[0] == "decode"))
        for rep in range(a.repeats):
            print(f"## repeat {rep + 1} of {a.repeats}", flush=True)
            for kind, n in points:
                for typ in a.types:
                    (self.prefill_point if kind == "prefill" else self.decode_point)(typ, n, rep)

    # ---- report ----

    def median(self, **key):
        v = [r["tok_s"] for r in self.data["runs"] if all(r.get(k) == val for k, val in key.items())]
        return (statistics.median(v), len(v)) if v else (None, 0)

    def points(self, kind, typ):
        """The lengths or depths of one table: for decode, those the sweep asked for (a prefill run of ours also
        decodes at its own length, which the peer has no run for)."""
        ns = {r["n"] for r in self.data["runs"] if r["kind"] == kind and r["type"] == typ}
        if kind == "decode":
            ns &= set(self.data.get("depths") or [r["n"] for r in self.data["runs"] if r["engine"] == PEER and r["kind"] == kind])
        return sorted(ns)

    def engines(self):
        tiers = [t for t in TIER_ORDER if any(r.get("tier") == t for r in self.data["runs"])]
        return tiers

    def report(self):
        a, tiers = self.args, self.engines()
        types = [t for t in TYPES if any(r["type"] == t for r in self.data["runs"])]
        best = tiers[-1] if tiers else None
        out = []
        for kind, title, col in (("prefill", "prefill", "prompt tokens"), ("decode", "decode", "depth")):
            for typ in types:
                ns = self.points(kind, typ)
                out.append(f"\n{typ}, {title} tok/s (median of n runs)\n")
                out.append(f"| {col} | " + " | ".join(f"switchyard {t}" for t in tiers) + f" | {PEER} | " +
                           " | ".join(f"{t} / {PEER}" for t in tiers) + " |")
                out.append("| ---: |" + " ---: |" * (2 * len(tiers) + 1))
                for n in ns:
                    peer, pn = self.median(kind=kind, type=typ, engine=PEER, n=n)
                    cells, ratios = [], []
                    for t in tiers:
                        v, vn = self.median(kind=kind, type=typ, engine="switchyard", tier=t, n=n)
                        cells.append(f"{v:.2f} (n={vn})" if v else "")
                        ratios.append(f"{v / peer:.2f}×" if v and peer else "")
                    out.append(f"| {n} | " + " | ".join(cells) + f" | {f'{peer:.2f} (n={pn})' if peer else ''} | "
                               + " | ".join(ratios) + " |")
        # the targets
        out.append(f"\nTargets (issue 19): ratio switchyard / {PEER}; best tier here: {best}\n")
        out.append("| target | " + " | ".join(types) + " |")
        out.append("| --- |" + " ---: |" * len(types))

        def ratio(kind, typ, tier, n):
            v, _ = self.median(kind=kind, type=typ, engine="switchyard", tier=tier, n=n)
            p, _ = self.median(kind=kind, type=typ, engine=PEER, n=n)
            return v / p if v and p else None

        def row(label, kind, tier, n, goals_of):
            cells = []
            for typ in types:
                r = ratio(kind, typ, tier, n) if tier else None
                verdicts = ", ".join(f"≥ {g}×: {'yes' if r >= g else 'no'}" for g in goals_of(typ)) if r else ""
                cells.append("not run" if r is None else f"{r:.2f}× ({verdicts})")
            out.append(f"| {label} | " + " | ".join(cells) + " |")

        for n in (512, 2048, 4096, 8192):
            if best == "avx512":  # both prefill targets fall on the same tier
                row(f"prefill {n}, avx512 (the best tier here): ≥ 1.5×, ≥ 1.2× on avx512", "prefill", best, n,
                    lambda t: (1.5, 1.2))
            else:
                row(f"prefill {n}, best tier ({best}) ≥ 1.5×", "prefill", best, n, lambda t: (1.5,))
                row(f"prefill {n}, avx512 ≥ 1.2×", "prefill", "avx512" if "avx512" in tiers else None, n,
                    lambda t: (1.2,))
        row(f"decode at depth 0 ({a.gen} tokens, {best}): ≥ 1.5× quantized, ≥ 1.2× BF16", "decode", best, 0,
            lambda t: (1.2,) if t == "BF16" else (1.5,))
        for d in (4096, 8192):
            row(f"decode at depth {d} ({best}) ≥ 1.5×", "decode", best, d, lambda t: (1.5,))
        text = "\n".join(out)
        print(text)
        return text

    def plot(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        tiers = self.engines()
        types = [t for t in TYPES if any(r["type"] == t for r in self.data["runs"])]
        for kind, path, xlabel in (("prefill", self.args.plot_prefill, "prompt tokens"),
                                   ("decode", self.args.plot_decode, "depth (tokens already in the KV cache)")):
            if not path or not types:
                continue
            fig, axes = plt.subplots(1, len(types), figsize=(4.6 * len(types), 4), squeeze=False)
            for ax, typ in zip(axes[0], types):
                ns = self.points(kind, typ)
                for name in tiers + [PEER]:
                    key = dict(engine=PEER) if name == PEER else dict(engine="switchyard", tier=name)
                    pts = [(n, self.median(kind=kind, type=typ, n=n, **key)[0]) for n in ns]
                    pts = [(n, v) for n, v in pts if v]
                    if pts:
                        label = f"{PEER} (native{', F16' if typ == 'BF16' else ''})" if name == PEER \
                            else f"switchyard {name}"
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label,
                                linestyle="--" if name == PEER else "-")
                if kind == "prefill":
                    ax.set_xscale("log", base=2)
                ax.set_xticks(ns, [str(n) for n in ns])
                ax.set_ylim(bottom=0)
                ax.set_xlabel(xlabel)
                ax.set_ylabel(f"{kind} tok/s")
                ax.set_title(typ)
                ax.grid(True, alpha=0.3)
                ax.legend(fontsize=8)
            fig.suptitle(f"Qwen2.5-0.5B shape, random weights, {self.data.get('threads', '?')} threads, "
                         f"{self.data.get('date', '')}", fontsize=10)
            fig.tight_layout()
            fig.savefig(path, dpi=100)
            print(f"# wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--switchyard", default="build/bin/switchyard")
    ap.add_argument("--llama-bench", default="/work/peer/build/bin/llama-bench")
    ap.add_argument("--types", nargs="+", default=list(TYPES), choices=list(TYPES))
    ap.add_argument("--tiers", nargs="+", default=["avx2", "avx512", "amx"], choices=TIER_ORDER,
                    help="tiers to run where this CPU has them (default avx2 avx512 amx)")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--depths", type=int, nargs="+", default=[0, 1024, 4096, 8192])
    ap.add_argument("--gen", type=int, default=32, help="tokens decoded per decode measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1200, help="seconds before one run is abandoned")
    ap.add_argument("--peer-warmup", action="store_true", help="let llama-bench warm up before a prefill")
    ap.add_argument("--peer-args", default="", help="more llama-bench options, e.g. '--repack 0'")
    ap.add_argument("--json", default="prefill_decode_sweep.json")
    ap.add_argument("--plot-prefill")
    ap.add_argument("--plot-decode")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --json")
    ap.add_argument("--report-only", action="store_true", help="tables and plots from --json, no runs")
    ap.add_argument("--markdown", help="also write the tables to this file")
    args = ap.parse_args()
    for n in args.lengths + args.depths:
        if n < 0 or n > 1 << 20:
            ap.error(f"length or depth {n} out of range")
    if args.repeats < 1 or args.gen < 1 or args.threads < 1:
        ap.error("--repeats, --gen and --threads must be at least 1")

    sweep = Sweep(args)
    if not args.report_only:
        for path in (args.switchyard, args.llama_bench):
            if not os.access(path, os.X_OK):
                ap.error(f"{path} is not an executable")
        for typ in args.types:
            for key in ("ours", "peer"):
                path = os.path.join(args.model_dir, TYPES[typ][key])
                if not os.path.exists(path) and typ in ("Q8_0", "Q4_K_M"):
                    f16 = os.path.join(args.model_dir, "model-f16.gguf")
                    cmd = [args.switchyard, "quantize", "--no-progress", "--threads", str(args.threads), f16, path, typ]
                    print("$ " + " ".join(cmd), flush=True)
                    subprocess.run(cmd, check=True)
                if not os.path.exists(path):
                    ap.error(f"{path} is missing (tools/oracle/make_bench_model.py --gguf makes the model)")
        args.tiers, notes = available_tiers(args.tiers, args.switchyard,
                                            os.path.join(args.model_dir, TYPES["Q8_0"]["ours"]))
        machine = f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.node()}"
        print(f"# machine: {machine}\n# tiers run: {' '.join(args.tiers)}", flush=True)
        for line in notes:
            print(f"# {line}", flush=True)
        sweep.data.update(machine=machine, date=time.strftime("%Y-%m-%d", time.gmtime()), threads=args.threads,
                          tiers=args.tiers, tier_notes=notes, gen=args.gen,
                          lengths=args.lengths, depths=args.depths, command=" ".join(sys.argv))
        sweep.data.setdefault("started_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        for typ in args.types:
            for key in ("ours", "peer"):
                warm(os.path.join(args.model_dir, TYPES[typ][key]))
        sweep.run()
        sweep.data["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        sweep.save()
    text = sweep.report()
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    sweep.plot()
    return 0


if __name__ == "__main__":
    sys.exit(main())
