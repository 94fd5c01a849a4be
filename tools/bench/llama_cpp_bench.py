#!/usr/bin/env python3
"""The quantities `switchyard bench` measures, measured for llama.cpp (through llama-cpp-python) on a GGUF file.

    python3 tools/bench/llama_cpp_bench.py --model /tmp/bench/model-f16.gguf [-p 512] [-n 128] [--threads 2] [--json]

Same protocol as host/cmd_bench.c: load; one token decoded right after load (first touch of the weights); a
prompt of -p tokens in one eval (logits of the last position only); -n tokens decoded one at a time, each the
argmax of the previous logits. The prompt ids come from the same formula ((i * 1103515245 + 12345) mod 2^32, mod
half the vocabulary). Memory from /proc/self/status and /proc/self/smaps_rollup, also as the growth over the
interpreter's own footprint before load (Python and numpy hold tens of MB that a C program does not).
"""

import argparse
import json
import sys
import time

import numpy as np


def proc_kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def memory():
    return {
        "peak_rss_mb": proc_kb("/proc/self/status", "VmHWM") / 1024,
        "rss_mb": proc_kb("/proc/self/status", "VmRSS") / 1024,
        "anon_rss_mb": proc_kb("/proc/self/status", "RssAnon") / 1024,
        "file_rss_mb": proc_kb("/proc/self/status", "RssFile") / 1024,
        "smaps_anon_mb": proc_kb("/proc/self/smaps_rollup", "Anonymous") / 1024,
    }


def bench_token(i, n_vocab):
    return ((i * 1103515245 + 12345) % (1 << 32)) % max(n_vocab // 2, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("-p", "--prompt", type=int, default=512)
    ap.add_argument("-n", "--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import llama_cpp  # imported before the baseline so its libraries count as the interpreter's

    before = memory()
    t = time.perf_counter()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.prompt + args.gen + 16, n_batch=args.prompt,
                          n_ubatch=args.prompt, n_threads=args.threads, n_threads_batch=args.threads,
                          use_mmap=True, logits_all=False, verbose=False)
    load_s = time.perf_counter() - t
    n_vocab = llm.n_vocab()
    prompt = [bench_token(i, n_vocab) for i in range(args.prompt)]

    t = time.perf_counter()
    llm.eval(prompt[:1])
    first_s = time.perf_counter() - t
    llm.reset()

    t = time.perf_counter()
    llm.eval(prompt)
    prefill_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(args.gen):
        # eval keeps no scores without logits_all: the context's logits of the last position
        token = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))))
        llm.eval([token])
    decode_s = time.perf_counter() - t
    after = memory()

    r = {"model": args.model, "engine": "llama.cpp (llama-cpp-python %s)" % llama_cpp.__version__,
         "threads": args.threads, "load_s": load_s, "first_token_s": first_s,
         "load_plus_first_token_s": load_s + first_s,
         "prompt_tokens": args.prompt, "prefill_s": prefill_s, "prefill_tok_s": args.prompt / prefill_s,
         "gen_tokens": args.gen, "decode_s": decode_s, "decode_tok_s": args.gen / decode_s}
    r.update(after)
    r["anon_rss_growth_mb"] = after["anon_rss_mb"] - before["anon_rss_mb"]
    r["interpreter_anon_rss_mb"] = before["anon_rss_mb"]
    if args.json:
        print(json.dumps(r))
    else:
        print("model      %s (%s)" % (args.model, r["engine"]))
        print("load       %.3f s" % load_s)
        print("first      %.3f s (load + first %.3f s)" % (first_s, load_s + first_s))
        print("prefill    %d tokens in %.3f s: %.1f tok/s" % (args.prompt, prefill_s, r["prefill_tok_s"]))
        print("decode     %d tokens in %.3f s: %.1f tok/s" % (args.gen, decode_s, r["decode_tok_s"]))
        print("memory     peak RSS %.1f MB, RSS %.1f MB (anonymous %.1f MB, of which %.1f MB since load; file %.1f MB)"
              % (after["peak_rss_mb"], after["rss_mb"], after["anon_rss_mb"], r["anon_rss_growth_mb"],
                 after["file_rss_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
