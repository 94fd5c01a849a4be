#!/usr/bin/env python3
"""Time to first token of a chat's second turn over a shared long context, against its first turn.

    python3 tools/bench/serve_prefix.py --model /tmp/bench/q4km.gguf --switchyard build/bin/switchyard \
        [--words 420] [--repeats 3] [--json OUT]

Turn 1: one long user message (about 600 tokens with the chat template) and a short answer (32 tokens). Turn 2:
the same messages, the first answer as the assistant's, and a short new user message. The second turn's prompt
begins with the first turn's prompt and answer, which the slot still holds: only the rest is prefilled. Each
repeat uses a long message of its own (so turn 1 always starts cold); the median is reported, with the
prompt_tokens and cached_tokens the server reports (usage.prompt_tokens_details.cached_tokens).
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_common as sc  # noqa: E402

VOCAB = ("the a of to and in is was that it for on with as by at from this be are or an have not they which "
         "one had but all were when there can more if will about out so what up time only into some could them "
         "other than then now its two over also after first new would these may any most where between each "
         "village river harbor merchant winter bridge lantern market garden letter journey mountain forest "
         "machine engine signal station morning evening window narrow quiet ancient golden silver broken").split()


def long_message(words, seed):
    rng = random.Random(seed)
    sentences = []
    n = 0
    while n < words:
        k = rng.randint(8, 18)
        s = " ".join(rng.choice(VOCAB) for _ in range(k))
        sentences.append(s[0].upper() + s[1:] + ".")
        n += k
    return "Read this account carefully, then answer my questions about it.\n\n" + " ".join(sentences)


def turn(port, messages, max_tokens):
    r = sc.stream(port, "/v1/chat/completions", {"model": "bench", "messages": messages, "max_tokens": max_tokens,
                                                 "temperature": 0})
    u = r["usage"] or {}
    return {"ttft_s": r["t_first"] - r["t_send"], "prompt_tokens": u.get("prompt_tokens"),
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
            "completion_tokens": u.get("completion_tokens"), "text": r["text"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir")
    ap.add_argument("--work-dir", default="/tmp/sy-serve-prefix")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--words", type=int, default=540, help="words of the long first message")
    ap.add_argument("--answer-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait for this 1-minute load average (and CPUs at most 20%% busy over 3 s) first")
    ap.add_argument("--max-wait", type=float, default=1800, help="seconds to wait for that at most")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    sc.warm_page_cache(args.model)
    cfg = (f"[host]\nresume_path = {os.path.join(args.work_dir, 'resume')}\n\n"
           f"[model.bench]\nplugin = gguf-quant\npath = {os.path.abspath(args.model)}\nparallel = {args.parallel}\n"
           f"threads = {args.threads}\nctx_size = {args.ctx}\npersist_on_unload = false\n")
    result = {"machine": sc.machine(), "model": os.path.abspath(args.model), "threads": args.threads,
              "parallel": args.parallel, "repeats": []}
    result["load_before"] = sc.wait_for_quiet(args.max_load, args.max_wait)
    print(f"load average {result['load_before']}", flush=True)
    srv = sc.Server(args.switchyard, cfg, args.plugin_dir, args.work_dir)
    try:
        turn(srv.port, [{"role": "user", "content": "Hi"}], 2)  # load
        for rep in range(args.repeats):
            msgs = [{"role": "user", "content": long_message(args.words, rep)}]
            t1 = turn(srv.port, msgs, args.answer_tokens)
            msgs += [{"role": "assistant", "content": t1["text"]},
                     {"role": "user", "content": "Who crossed the bridge first, and why?"}]
            t2 = turn(srv.port, msgs, args.answer_tokens)
            ratio = t1["ttft_s"] / t2["ttft_s"]
            result["repeats"].append({"turn1": t1, "turn2": t2, "ratio": ratio})
            print(f"repeat {rep}: turn 1 {t1['ttft_s'] * 1000:.0f} ms ({t1['prompt_tokens']} prompt tokens, "
                  f"{t1['cached_tokens']} cached); turn 2 {t2['ttft_s'] * 1000:.0f} ms ({t2['prompt_tokens']} "
                  f"prompt tokens, {t2['cached_tokens']} cached): {ratio:.1f}x faster", flush=True)
    finally:
        result["exit_status"] = srv.stop()
    reps = result["repeats"]
    result["turn1_ttft_median_s"] = sc.median([r["turn1"]["ttft_s"] for r in reps])
    result["turn2_ttft_median_s"] = sc.median([r["turn2"]["ttft_s"] for r in reps])
    result["ratio_median"] = sc.median([r["ratio"] for r in reps])
    result["load_after"] = sc.loadavg()
    print(f"median: turn 1 {result['turn1_ttft_median_s'] * 1000:.0f} ms, turn 2 "
          f"{result['turn2_ttft_median_s'] * 1000:.0f} ms, {result['ratio_median']:.1f}x; load average after "
          f"{result['load_after']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
