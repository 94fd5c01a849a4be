#!/usr/bin/env python3
"""Speculative decoding measurements, as docs/benchmarks.md records them ("Speculative decoding" section).

    python3 tools/oracle/make_bench_model.py --out /tmp/bench --gguf              # once: random weights, F16
    python3 -c '...llama_model_quantize(... LLAMA_FTYPE_MOSTLY_Q4_K_M ...)'      # Q4_K_M (see the docs)
    cmake -S . -B build-rel -G Ninja -DCMAKE_BUILD_TYPE=Release
    cmake --build build-rel --target switchyard spec-bench gguf-quant spec-drafter
    python3 tools/bench/spec_bench.py --build build-rel --model /tmp/bench/model-q4_k_m.gguf \\
        [--threads 2] [-n 128] [--reps 5] [--draft-max 8] [--smollm PATH.gguf] [--plots docs/benchmarks] \\
        [--json out.json]

Parts (all by default; --parts picks some):
  verify   what one decode call of 1 + k tokens costs relative to one token (k = 0..draft_max), on the model
  decode   decode tokens/s without speculation and with the replay drafter (the model's own greedy continuation
           with 0/20/50/80/100 % of the proposed positions corrupted, i.e. acceptance 100..0 %), runs interleaved
           in one process (tests/spec/spec_bench.c); every speculative output is checked against the plain one;
           speed-ups are per repetition (the plain run next to it), then the median
  cli      the same through `switchyard generate --draft replay:FILE:PCT --stats` on a text prompt (the user's path)
  ngram    the n-gram drafter's own time per proposal on a 4,000-token context, through its plugin ABI
  stories  the n-gram drafter's acceptance with the trained stories260K model on a plain prompt and on a prompt
           that quotes a story passage (and, with --smollm, SmolLM2-135M-Instruct, which can copy)
Prints the machine, the date, the load average around each part, every command, the raw JSON and Markdown tables.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STORY = ("Once upon a time, there was a little dog named Max. Max liked to run in the big green park near his "
         "house. One day, Max found a red ball under a tree. He picked it up and ran to his friend Sue. Sue "
         "laughed and threw the ball far away. Max ran fast and brought it back. They played all day until the "
         "sun went down. Then they went home, happy and tired.")
STORY_PROMPTS = {
    "plain": "Once upon a time, there was a little dog named Max.",
    "quoting": STORY + "\n" + "Once upon a time, there was a little dog named Max.",
}
SMOLLM_PROMPTS = {
    "plain": "Once upon a time, there was a little dog named Max.",
    "quoting": "Here is a story:\n\n" + STORY + "\n\nCopy the story exactly:\n\nOnce upon a time,",
}
CLI_PROMPT = "The quick brown fox jumps over the lazy dog. " * 2


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    mem = ""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = "%.0f GB RAM" % (int(line.split()[1]) / 1e6)
    return "%s, %s CPUs, %s" % (fields.get("Model name", "?").strip(), fields.get("CPU(s)", "?").strip(), mem)


def run_lines(cmd):
    print("$ " + " ".join(cmd if len(" ".join(cmd)) < 400 else [c if len(c) < 80 else c[:60] + "..." for c in cmd]),
          flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        print("  " + json.dumps(r), flush=True)
    return rows


def part_verify(a, spec_bench):
    print("\n## verify cost (load %s)" % loadavg())
    rows = run_lines([spec_bench, "verify-cost", a.model, "--threads", str(a.threads), "--draft-max",
                      str(a.draft_max), "--reps", "3", "-p", "32"])
    by_k = {}
    for r in rows:
        by_k.setdefault(r["k"], []).append(r["seconds"])
    base = statistics.median(by_k[0])
    table = [(k, statistics.median(v), statistics.median(v) / base) for k, v in sorted(by_k.items())]
    print("\n| proposals k | tokens in the call | seconds (median) | relative to k = 0 |")
    print("| ---: | ---: | ---: | ---: |")
    for k, s, rel in table:
        print("| %d | %d | %.4f | %.2f |" % (k, k + 1, s, rel))
    return {"rows": rows, "table": table, "load": loadavg()}


def model_speedup(runs, rel):
    """Speed-up the verify part's cost curve predicts for these runs' steps (k_hist: steps by proposals)."""
    if rel is None:
        return None
    work = sum(n * rel.get(k, rel[max(rel)]) for r in runs for k, n in enumerate(r["k_hist"]))
    return sum(r["tokens"] - 1 for r in runs) / work if work else None


def part_decode(a, spec_bench, rel=None):
    print("\n## decode with the replay drafter (load %s)" % loadavg())
    rows = run_lines([spec_bench, "decode", a.model, "--threads", str(a.threads), "-n", str(a.n), "-p", "32",
                      "--draft-max", str(a.draft_max), "--pcts", "0,20,50,80,100", "--reps", str(a.reps),
                      "--replay-file", a.replay])
    runs = [r for r in rows if r["kind"] == "decode"]
    plain = {r["rep"]: r for r in runs if r["mode"] == "plain"}
    summary = []
    for pct in (0, 20, 50, 80, 100):
        rs = [r for r in runs if r["mode"] == "replay" and r["corrupt_pct"] == pct]
        speedups = [r["tok_s"] / plain[r["rep"]]["tok_s"] for r in rs]
        drafted = sum(r["drafted"] for r in rs)
        accepted = sum(r["accepted"] for r in rs)
        # Per proposal: the accepted ones against those put to the test (the accepted ones and one per step that
        # rejected one; the proposals after a rejection are never compared).
        tested = accepted + sum(r["rejecting_steps"] for r in rs)
        summary.append({
            "acceptance_target": 100 - pct, "corrupt_pct": pct,
            "tok_s": statistics.median(r["tok_s"] for r in rs),
            "speedup_median": statistics.median(speedups), "speedup_min": min(speedups),
            "speedup_max": max(speedups),
            "per_proposal": accepted / tested if tested else 0.0,
            "accepted_share": accepted / drafted if drafted else 0.0,
            "mean_k": drafted / max(1, sum(r["spec_steps"] for r in rs)),
            "spec_steps": sum(r["spec_steps"] for r in rs) / len(rs), "steps": sum(r["steps"] for r in rs) / len(rs),
            "cost_per_draft": rs[-1]["cost_per_draft"],
            "model_speedup": model_speedup(rs, rel),
        })
    plain_tok_s = statistics.median(r["tok_s"] for r in plain.values())
    print("\nplain decoding: %.2f tok/s (median of %d; %s)" % (
        plain_tok_s, len(plain), ", ".join("%.2f" % r["tok_s"] for r in plain.values())))
    print("\n| acceptance (replay corrupted) | tok/s (median) | speed-up (median, min..max) | speed-up the verify "
          "curve predicts | accepted per proposal tested | accepted / proposed | mean proposals per verifying step | "
          "verifying steps / all steps | cost per proposal (speculator's estimate) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in summary:
        print("| %d %% (%d %%) | %.2f | %.2f× (%.2f..%.2f) | %s | %.2f | %.2f | %.1f | %.0f / %.0f | %.3f |" % (
            s["acceptance_target"], s["corrupt_pct"], s["tok_s"], s["speedup_median"], s["speedup_min"],
            s["speedup_max"], "%.2f×" % s["model_speedup"] if s["model_speedup"] else "-", s["per_proposal"],
            s["accepted_share"], s["mean_k"], s["spec_steps"], s["steps"], s["cost_per_draft"]))
    return {"rows": rows, "plain_tok_s": plain_tok_s, "summary": summary, "load": loadavg()}


STATS_RE = re.compile(r"generated (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tok/s\)")
SPEC_RE = re.compile(r"drafted (\d+) tokens, accepted (\d+)")


def part_cli(a, spec_bench, switchyard):
    print("\n## switchyard generate --draft replay (load %s)" % loadavg())
    replay = a.replay + ".text"
    run_lines([spec_bench, "decode", a.model, "--threads", str(a.threads), "-n", str(a.n), "--prompt",
               CLI_PROMPT, "--pcts", "20", "--reps", "1", "--replay-file", replay])
    base = [switchyard, "generate", "--gguf", a.model, "--threads", str(a.threads), "--temp", "0", "-n", str(a.n),
            "--stats"]
    results = []
    outputs = {}
    for rep in range(2):
        for label, extra in (("plain", []), ("replay 20% corrupted", ["--draft", "replay:%s:20" % replay,
                                                                       "--draft-max", str(a.draft_max)])):
            cmd = base + extra + [CLI_PROMPT]
            print("$ " + " ".join(cmd[:-1]) + " '" + CLI_PROMPT + "'", flush=True)
            p = subprocess.run(cmd, check=True, capture_output=True, text=True)
            m = STATS_RE.search(p.stderr)
            s = SPEC_RE.search(p.stderr)
            print("  " + p.stderr.strip().replace("\n", "\n  "))
            outputs.setdefault(label, p.stdout)
            if outputs[label] != p.stdout:
                sys.exit("the %s output changed between runs" % label)
            results.append({"label": label, "rep": rep, "tokens": int(m.group(1)), "seconds": float(m.group(2)),
                            "tok_s": float(m.group(3)), "drafted": int(s.group(1)) if s else 0,
                            "accepted": int(s.group(2)) if s else 0})
    same = outputs["plain"] == outputs["replay 20% corrupted"]
    print("same text with and without speculation: %s" % same)
    if not same:
        sys.exit("generate --draft changed the output")
    return {"results": results, "same_text": same, "load": loadavg()}


def part_ngram(a, spec_bench):
    print("\n## n-gram drafter cost (load %s)" % loadavg())
    rows = run_lines([spec_bench, "ngram-cost", "--context", "4000", "--reps", "200", "--steps", "100",
                      "--draft-max", str(a.draft_max)])
    return {"rows": rows, "load": loadavg()}


def acceptance_runs(spec_bench, model, threads, prompts, n, label):
    out = []
    for name, prompt in prompts.items():
        for cost, cost_label in (("0", "always propose"), (None, "measured cost")):
            cmd = [spec_bench, "decode", model, "--threads", str(threads), "--prompt", prompt, "-n", str(n),
                   "--draft", "ngram", "--draft-max", "8", "--reps", "3", "--replay-file", "/tmp/spec-bench-x.txt"]
            if cost is not None:
                cmd += ["--draft-cost", cost]
            rows = run_lines(cmd)
            setup = rows[0]
            runs = [r for r in rows if r["kind"] == "decode"]
            plain = [r for r in runs if r["mode"] == "plain"]
            spec = [r for r in runs if r["mode"] == "ngram"]
            drafted = sum(r["drafted"] for r in spec)
            accepted = sum(r["accepted"] for r in spec)
            tokens = sum(r["tokens"] for r in spec)
            out.append({
                "model": label, "prompt": name, "policy": cost_label, "prompt_tokens": setup["prompt_tokens"],
                "drafted": drafted / len(spec), "accepted": accepted / len(spec),
                "accepted_per_drafted": accepted / drafted if drafted else 0.0,
                "per_proposal": accepted / (accepted + sum(r["rejecting_steps"] for r in spec))
                if accepted else 0.0,
                "output_from_drafts": accepted / tokens if tokens else 0.0,
                "steps": statistics.mean(r["steps"] for r in spec),
                "speedup": statistics.median(s["tok_s"] / p["tok_s"] for s, p in zip(spec, plain)),
            })
    return out


def part_stories(a, spec_bench):
    print("\n## n-gram acceptance with trained models (load %s)" % loadavg())
    res = acceptance_runs(spec_bench, a.stories, 1, STORY_PROMPTS, 200, "stories260K")
    if a.smollm:
        res += acceptance_runs(spec_bench, a.smollm, a.threads, SMOLLM_PROMPTS, 120, "SmolLM2-135M-Instruct Q4_1")
    print("\n| model | prompt | proposals | prompt tokens | drafted | accepted | accepted per proposal tested | "
          "accepted / drafted | output tokens from drafts | decode steps | speed-up |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in res:
        print("| %s | %s | %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %.0f | %.2f× |" % (
            r["model"], r["prompt"], r["policy"], r["prompt_tokens"], r["drafted"], r["accepted"],
            r["per_proposal"], r["accepted_per_drafted"], r["output_from_drafts"], r["steps"], r["speedup"]))
    return {"results": res, "load": loadavg(), "prompts": {"stories260K": STORY_PROMPTS, "smollm": SMOLLM_PROMPTS}}


def plots(a, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(a.plots, exist_ok=True)
    if "decode" in results:
        d = results["decode"]
        s = sorted(d["summary"], key=lambda x: x["acceptance_target"])
        fig, ax = plt.subplots(figsize=(7, 4.2))
        xs = [str(x["acceptance_target"]) + " %" for x in s]
        bars = ax.bar(xs, [x["tok_s"] for x in s], color="#4878a8", label="replay drafter, draft_max %d" % a.draft_max)
        ax.axhline(d["plain_tok_s"], color="#c44e52", linestyle="--", label="no speculation (%.2f tok/s)" %
                   d["plain_tok_s"])
        for b, x in zip(bars, s):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), "%.2f×" % x["speedup_median"], ha="center",
                    va="bottom", fontsize=9)
        ax.set_xlabel("share of proposals the target accepts (replay drafter)")
        ax.set_ylabel("decode tokens / s")
        ax.set_title("Speculative decoding, Qwen2.5-0.5B-shaped Q4_K_M (random weights), %d threads" % a.threads,
                     fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
        ax.set_ylim(0, max(x["tok_s"] for x in s) * 1.18)
        fig.tight_layout()
        fig.savefig(os.path.join(a.plots, "spec_replay_decode.png"), dpi=110)
        plt.close(fig)
    if "verify" in results:
        t = results["verify"]["table"]
        fig, ax = plt.subplots(figsize=(6, 3.8))
        ax.plot([k for k, _, _ in t], [rel for _, _, rel in t], marker="o", color="#4878a8",
                label="measured (median of 3)")
        ax.plot([k for k, _, _ in t], [k + 1 for k, _, _ in t], color="#999999", linestyle=":",
                label="k + 1 separate steps")
        ax.set_xlabel("proposals verified in the call (k)")
        ax.set_ylabel("time relative to a 1-token decode")
        ax.set_title("Cost of verifying k proposals in one decode call", fontsize=10)
        ax.legend(fontsize=8)
        ax.set_ylim(0, max(4, max(rel for _, _, rel in t) * 1.1))
        fig.tight_layout()
        fig.savefig(os.path.join(a.plots, "spec_verify_cost.png"), dpi=110)
        plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-rel"))
    ap.add_argument("--model", help="the Q4_K_M GGUF file (verify, decode, cli)")
    ap.add_argument("--stories", default=os.path.join(ROOT, "tests/fixtures/stories260K/stories260K.gguf"))
    ap.add_argument("--smollm", help="SmolLM2-135M-Instruct GGUF (optional, stories part)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--replay", default="/tmp/spec-bench-replay.txt")
    ap.add_argument("--parts", default="verify,decode,cli,ngram,stories")
    ap.add_argument("--plots", help="folder for the PNG plots (docs/benchmarks)")
    ap.add_argument("--json", help="write every result here")
    a = ap.parse_args()
    spec_bench = os.path.join(a.build, "tests", "spec-bench")
    switchyard = os.path.join(a.build, "bin", "switchyard")
    parts = a.parts.split(",")
    if a.model is None and set(parts) & {"verify", "decode", "cli"}:
        ap.error("--model is needed for verify, decode and cli")
    if a.model:
        with open(a.model, "rb") as f:  # page cache warm
            while f.read(1 << 24):
                pass
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "machine": machine(), "load_start": loadavg(), "model": a.model, "threads": a.threads, "n": a.n,
               "draft_max": a.draft_max}
    print("# %s | %s | load %s" % (results["date"], results["machine"], results["load_start"]))
    if "verify" in parts:
        results["verify"] = part_verify(a, spec_bench)
    if "decode" in parts:
        rel = {k: r for k, _, r in results["verify"]["table"]} if "verify" in results else None
        results["decode"] = part_decode(a, spec_bench, rel)
    if "cli" in parts:
        results["cli"] = part_cli(a, spec_bench, switchyard)
    if "ngram" in parts:
        results["ngram"] = part_ngram(a, spec_bench)
    if "stories" in parts:
        results["stories"] = part_stories(a, spec_bench)
    results["load_end"] = loadavg()
    print("\nload at the end: %s" % results["load_end"])
    if a.plots:
        plots(a, results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
