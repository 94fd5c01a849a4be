#!/usr/bin/env python3
"""Integration test of what migrating clients check first (issue 17): Ollama's version, details, model_info,
capabilities and model management; llama-server's /tokenize, /detokenize, /props, /slots and metrics names;
x-api-key; OpenAI's n, logit_bias and ignored fields; per-model defaults; the extra samplers; fill-in-the-middle
(/infill prompt tokens against llama-server's on the same GGUF, tests/fixtures/fim/qwen-infill.json); and
`serve MODEL...` / `--models-dir`.

Servers and helpers are test_serve.py's. With SY_SMOLLM2_GGUF set, the checks on a real model run too
(details from its header, logit_bias on its greedy token); without it they say they are skipped.

Usage: test_compat.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR [--only NAME ...]
"""
import json
import os
import re
import shutil
import sys

import ollama
import openai

import fim_model
import sy_server
import test_serve as ts
from test_serve import CheckFailed, Server, check, curl, curl_json, post

SMOL = os.environ.get("SY_SMOLLM2_GGUF", "")
FIM_GGUF = None


def te_section(name, fixture="alpha.model", extra=""):
    return ts.model_section(name, fixture, name, extra=extra)


def main_config():
    text = "[host]\nmax_request_body = 64K\n\n"
    text += te_section("alpha")
    text += te_section("tuned", extra="defaults.temperature = 0\ndefaults.max_tokens = 5\n"
                                      "defaults.system_prompt = You answer in one word.\n"
                                      "set_params.top_k = 1\nstrip_params = presence_penalty")
    text += (f"[model.coder]\nplugin = gguf-quant\npath = {FIM_GGUF}\nctx_size = {fim_model.N_CTX}\n"
             "group = coder\n\n")
    if SMOL:
        text += f"[model.smol]\nplugin = gguf-quant\npath = {SMOL}\ngroup = smol\naliases = smollm2\n\n"
        text += (f"[model.smoldry]\nplugin = gguf-quant\npath = {SMOL}\ngroup = smol\n"
                 "defaults.dry_multiplier = 2.0\ndefaults.dry_penalty_last_n = -1\n"
                 "defaults.dry_sequence_breakers = [\" banana\"]\n\n")
    return text


def loaded(srv):
    return [m.model for m in srv.ollama().ps().models]


# ---------------------------------------------------------------------------------------------------------------


def t_ollama_version_and_listing(srv):
    status, headers, body = curl_json(srv.base + "/api/version")
    check(status == 200, f"version {status} {body}")
    parts = [int(x) for x in body["version"].split(".")]
    check(parts >= [0, 6, 4], f"/api/version {body['version']} is below what Copilot needs (0.6.4)")
    check(re.fullmatch(r"\d+\.\d+\.\d+", headers.get("x-switchyard-version", "")),
          f"X-Switchyard-Version header: {headers}")
    status, _, models = curl_json(srv.base + "/v1/models")
    check(all(m["meta"]["switchyard_version"] == headers["x-switchyard-version"] for m in models["data"]),
          f"/v1/models meta {models}")
    o = srv.ollama()
    tags = {m.model: m for m in o.list().models}
    coder = tags["coder"].details
    check(coder.format == "gguf" and coder.family == "qwen2" and coder.families == ["qwen2"] and
          coder.quantization_level == "F16" and coder.parameter_size.endswith("M"), f"coder details {coder}")
    alpha = tags["alpha"].details
    check(alpha.family == "test" and alpha.parameter_size, f"alpha details {alpha}")
    check(loaded(srv) == [], f"listing loaded models: {loaded(srv)}")
    # show: capabilities from what the model supports, model_info from the header, nothing loads
    s = o.show("coder:latest")
    check("completion" in s.capabilities and "insert" in s.capabilities, f"coder capabilities {s.capabilities}")
    info = s.modelinfo
    check(info["general.architecture"] == "qwen2" and info["qwen2.context_length"] == 32768 and
          info["qwen2.embedding_length"] == fim_model.HIDDEN and info["qwen2.block_count"] == fim_model.LAYERS,
          f"coder model_info {info}")
    check(info["tokenizer.ggml.fim_pre_token_id"] == 151659 and info["tokenizer.ggml.tokens"] is None,
          "FIM ids and arrays as null: " + json.dumps({k: v for k, v in info.items() if "tokenizer" in k})[:400])
    caps = o.show("alpha").capabilities
    check("completion" in caps and "insert" not in caps, f"alpha has no FIM tokens: no insert ({caps})")
    check(loaded(srv) == [], f"show loaded models: {loaded(srv)}")
    if not SMOL:
        print("  (SY_SMOLLM2_GGUF unset: the SmolLM2 details are skipped)")
        return
    # SmolLM2-135M-Instruct Q4_1: the published model's facts (HF config: llama, 30 layers, 576 wide, 8192 ctx)
    d = tags["smol"].details
    check((d.family, d.parameter_size, d.quantization_level) == ("llama", "135M", "Q4_1"), f"smol details {d}")
    i = o.show("smollm2").modelinfo
    check((i["llama.context_length"], i["llama.embedding_length"], i["llama.block_count"]) == (8192, 576, 30),
          f"smol model_info {i}")
    check(loaded(srv) == [], f"show smol loaded it: {loaded(srv)}")


def t_ollama_model_management(srv):
    o = srv.ollama()
    r = o.pull("alpha", stream=False)
    check(r.status == "success", f"pull alpha {r}")
    statuses = [p.status for p in o.pull("alpha:latest", stream=True)]
    check(statuses[0] == "pulling manifest" and statuses[-1] == "success", f"pull progress {statuses}")
    for call, want in ((lambda: o.pull("nope"), 404), (lambda: o.delete("alpha"), 400),
                       (lambda: o.delete("nope"), 404), (lambda: o.copy("alpha", "alpha2"), 400),
                       (lambda: o.push("alpha"), 400), (lambda: o.create(model="x", from_="alpha"), 400)):
        try:
            call()
            raise CheckFailed("a model management call succeeded")
        except ollama.ResponseError as e:
            check(e.status_code == want and (want == 404 or "configuration" in e.error), f"{e.status_code} {e.error}")
    status, _, body = curl_json(srv.base + "/api/delete", "-X", "DELETE", "-H", "Content-Type: application/json",
                                data=json.dumps({"model": "alpha"}))
    check(status == 400 and "configuration" in body["error"], f"DELETE /api/delete {status} {body}")


def t_ollama_options(srv):
    o = srv.ollama()
    # num_ctx: a per-request limit within the loaded context (512): prompt + output stay within it
    r = o.generate(model="alpha", prompt="Hello", raw=True, options={"num_ctx": 12, "temperature": 0})
    check(r.prompt_eval_count < 12 and r.prompt_eval_count + r.eval_count == 12 and r.done_reason == "length",
          f"num_ctx 12: {r}")
    try:
        o.generate(model="alpha", prompt="x " * 40, raw=True, options={"num_ctx": 8})
        raise CheckFailed("a prompt longer than num_ctx was accepted")
    except ollama.ResponseError as e:
        check(e.status_code == 400 and "num_ctx" in e.error, f"long prompt: {e}")
    # load-time options are accepted (the config sets the load); unknown and unimplemented ones are refused
    r = o.generate(model="alpha", prompt="Hi", options={"num_thread": 2, "num_gpu": 0, "use_mmap": True,
                                                        "num_predict": 2, "mirostat": 0, "tfs_z": 1})
    check(r.done, f"load-time options: {r}")
    for opts, name in (({"mirostat": 2}, "mirostat"), ({"tfs_z": 0.5}, "tfs_z"), ({"bogus": 1}, "bogus"),
                       ({"dry_multiplier": -1}, "dry_multiplier"), ({"dry_sequence_breakers": []},
                                                                     "dry_sequence_breakers")):
        try:
            o.generate(model="alpha", prompt="Hi", options=opts)
            raise CheckFailed(f"options {opts} accepted")
        except ollama.ResponseError as e:
            check(e.status_code == 400 and name in e.error, f"{opts}: {e}")
    r = o.generate(model="alpha", prompt="Hi", options={"typical_p": 0.5, "xtc_probability": 0.5,
                                                        "xtc_threshold": 0.1, "num_predict": 4, "seed": 3})
    check(r.eval_count == 4, f"typical_p and XTC: {r}")
    r = o.generate(model="alpha", prompt="Hi", options={"dry_multiplier": 0.8, "dry_base": 1.75,
                                                        "dry_allowed_length": 2, "dry_penalty_last_n": -1,
                                                        "dry_sequence_breakers": ["\n", "User:"],
                                                        "num_predict": 4, "seed": 3})
    check(r.eval_count == 4, f"DRY options: {r}")


def t_llama_server_extras(srv):
    b = srv.base
    # /slots and /props report without loading
    status, _, slots = curl_json(b + "/slots?model=tuned")
    check(status == 200 and len(slots) == 2 and slots[0]["is_processing"] is False and slots[0]["loaded"] is False,
          f"slots {slots}")
    status, _, props = curl_json(b + "/props?model=coder")
    check(status == 200 and props["default_generation_settings"]["n_ctx"] == 32768 and
          props["modalities"] == {"vision": False, "audio": False} and "chat_template" in props and
          props["is_loaded"] is False, f"props {str(props)[:400]}")
    check("tuned" not in loaded(srv) and "coder" not in loaded(srv), f"/slots or /props loaded: {loaded(srv)}")
    status, _, props = curl_json(b + "/props?model=tuned")
    p = props["default_generation_settings"]["params"]
    check(p["temperature"] == 0 and p["n_predict"] == 5 and p["top_k"] == 1, f"tuned props {p}")
    # /tokenize with pieces and /detokenize round-trip
    text = "héllo wörld"
    status, _, tok = post(b + "/tokenize", {"model": "coder", "content": text, "with_pieces": True})
    check(status == 200 and tok["tokens"], f"tokenize {status} {tok}")
    ids = [t["id"] for t in tok["tokens"]]
    pieces = "".join(t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode("latin-1")
                     for t in tok["tokens"])
    check(all(isinstance(t["piece"], str) for t in tok["tokens"]) and pieces == text, f"pieces {tok}")
    status, _, plain = post(b + "/tokenize", {"model": "coder", "content": text})
    check(plain["tokens"] == ids, f"tokenize without pieces {plain}")
    status, _, det = post(b + "/detokenize", {"model": "coder", "tokens": ids})
    check(status == 200 and det["content"] == text, f"detokenize {det}")
    status, _, det = post(b + "/detokenize", {"model": "coder", "tokens": [10 ** 9]})
    check(status == 400 and det["error"]["param"] == "tokens", f"bad token {det}")
    status, _, metrics = curl(b + "/metrics")
    check(status == 200 and "llamacpp:prompt_tokens_total" in metrics and
          "llamacpp:tokens_predicted_total" in metrics and "llamacpp:requests_processing" in metrics,
          "llama.cpp metric names missing")


def t_openai_n_and_logit_bias(srv):
    c = srv.openai()
    msgs = [{"role": "user", "content": "Tell me something."}]
    r = c.chat.completions.create(model="alpha", messages=msgs, n=3, max_tokens=6, seed=11, temperature=1.0)
    texts = [ch.message.content for ch in r.choices]
    check(len(texts) == 3 and [ch.index for ch in r.choices] == [0, 1, 2], f"n=3: {r}")
    check(len(set(texts)) > 1, f"n=3 gave identical samples: {texts}")
    check(r.usage.completion_tokens == 18, f"usage {r.usage}")
    again = c.chat.completions.create(model="alpha", messages=msgs, n=3, max_tokens=6, seed=11, temperature=1.0)
    check([ch.message.content for ch in again.choices] == texts, "n=3 with one seed is not reproducible")
    one = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=6, seed=11, temperature=1.0)
    check(one.choices[0].message.content == texts[0], "the first of n is not the n=1 answer")
    # accepted and ignored; refused by name
    r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=2, user="u-1", store=False,
                                  metadata={"k": "v"}, service_tier="auto")
    check(r.choices[0].message.content is not None, "user/store/metadata/service_tier")
    try:
        c.chat.completions.create(model="alpha", messages=msgs, modalities=["text", "audio"],
                                  audio={"voice": "alloy", "format": "wav"})
        raise CheckFailed("audio output accepted")
    except openai.BadRequestError as e:
        check(e.body["param"] in ("audio", "modalities"), f"audio: {e.body}")
    # logit_bias: banning the greedy token changes the greedy choice; out of vocabulary is refused
    first = c.completions.create(model="alpha", prompt="abc", max_tokens=1, temperature=0, logprobs=1)
    tok = first.choices[0].logprobs.tokens[0]
    status, _, ids = post(srv.base + "/tokenize", {"model": "alpha", "content": tok})
    banned = c.completions.create(model="alpha", prompt="abc", max_tokens=1, temperature=0,
                                  logit_bias={str(i): -100 for i in ids["tokens"]})
    check(banned.choices[0].text != first.choices[0].text, f"logit_bias -100 did not ban {tok!r}")
    try:
        c.completions.create(model="alpha", prompt="abc", max_tokens=1, logit_bias={"99999999": 1})
        raise CheckFailed("logit_bias outside the vocabulary accepted")
    except openai.BadRequestError as e:
        check(e.body["param"] == "logit_bias", f"{e.body}")
    if SMOL:
        r = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=1, temperature=0)
        status, _, paris = post(srv.base + "/tokenize", {"model": "smol", "content": r.choices[0].text})
        r2 = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=1, temperature=0,
                                  logit_bias={str(paris["tokens"][0]): -100})
        check(r2.choices[0].text != r.choices[0].text, f"smol logit_bias: {r.choices[0].text!r}")


def stream_chat_choices(c, **kw):
    """A streamed chat with n choices: each index's text, finish_reason and finish count, the usage, and the
    order of the indexes as the chunks came."""
    texts, finishes, order, usage = {}, {}, [], None
    for chunk in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            order.append(ch.index)
            texts.setdefault(ch.index, "")
            if ch.delta and ch.delta.content:
                texts[ch.index] += ch.delta.content
            if ch.finish_reason:
                check(ch.index not in finishes, f"choice {ch.index} finished twice")
                finishes[ch.index] = ch.finish_reason
    return texts, finishes, order, usage


def t_openai_n_streaming(srv):
    c = srv.openai()
    models = ["alpha"] + (["smol"] if SMOL else [])
    if not SMOL:
        print("  (SY_SMOLLM2_GGUF unset: n streamed on SmolLM2 is skipped)")
    for model in models:
        kw = dict(model=model, messages=[{"role": "user", "content": "Tell me a short story about a cat."}], n=3,
                  max_tokens=24, seed=5, temperature=1.0)
        texts, finishes, order, usage = stream_chat_choices(c, **kw)
        check(sorted(texts) == [0, 1, 2] and sorted(finishes) == [0, 1, 2], f"{model}: streamed n=3: {texts} {finishes}")
        check(all(texts[i] for i in range(3)) and all(f in ("stop", "length") for f in finishes.values()),
              f"{model}: a streamed choice is empty or unfinished: {texts} {finishes}")
        whole = c.chat.completions.create(**kw)
        for ch in whole.choices:
            check(texts[ch.index] == ch.message.content and finishes[ch.index] == ch.finish_reason,
                  f"{model}: streamed choice {ch.index} {texts[ch.index]!r} ({finishes[ch.index]}) is not the "
                  f"collected one {ch.message.content!r} ({ch.finish_reason})")
        check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens and
              usage.prompt_tokens == whole.usage.prompt_tokens, f"{model}: streamed usage {usage} vs {whole.usage}")
        print(f"  {model}: 3 streamed choices equal the collected ones; chunk order {''.join(map(str, order[:40]))}...")
    # a client that leaves a streamed n = 3 early: every choice is cancelled and the slots serve the next request
    stream = c.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "Go on."}], n=3,
                                       max_tokens=400, stream=True)
    for i, _ in enumerate(stream):
        if i == 5:
            break
    stream.close()
    r = c.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "Hi"}], n=3, max_tokens=4)
    check(len(r.choices) == 3, f"after a client left a streamed n = 3: {r}")
    # completions: n streamed, each choice the collected one
    kw = dict(model=models[-1], prompt="Once upon a time", n=2, max_tokens=12, seed=9, temperature=1.0)
    texts, finishes = {}, {}
    for chunk in c.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + ch.text
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    whole = c.completions.create(**kw)
    check(sorted(finishes) == [0, 1] and [texts[ch.index] for ch in whole.choices] == [ch.text for ch in whole.choices],
          f"completions n=2 streamed {texts} vs {[ch.text for ch in whole.choices]}")


def t_dry(srv):
    c = srv.openai()
    msgs = [{"role": "user", "content": "Hi"}]
    r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=4, seed=1,
                                  extra_body={"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
                                              "dry_penalty_last_n": 64, "dry_sequence_breakers": ["\n", ":"]})
    check(r.choices[0].message.content is not None, "DRY fields on chat")
    for body, name in (({"dry_multiplier": -0.5}, "dry_multiplier"), ({"dry_allowed_length": -1}, "dry_allowed_length"),
                       ({"dry_penalty_last_n": -2}, "dry_penalty_last_n"),
                       ({"dry_sequence_breakers": []}, "dry_sequence_breakers"),
                       ({"dry_sequence_breakers": "\n"}, "dry_sequence_breakers"),
                       ({"dry_sequence_breakers": [""]}, "dry_sequence_breakers"),
                       ({"dry_sequence_breakers": ["x" * 41]}, "dry_sequence_breakers"),
                       ({"dry_sequence_breakers": [7]}, "dry_sequence_breakers"),
                       ({"dry_sequence_breakers": ["a"] * 65}, "dry_sequence_breakers")):
        try:
            c.completions.create(model="alpha", prompt="abc", max_tokens=1, extra_body=dict(body, dry_multiplier=0.8)
                                 if name != "dry_multiplier" else body)
            raise CheckFailed(f"{body} accepted")
        except openai.BadRequestError as e:
            check(e.body["param"] == name and name in e.body["message"], f"{body}: {e.body}")
    status, _, r = post(srv.base + "/infill", {"model": "coder", "input_prefix": "def f(", "input_suffix": "):",
                                               "n_predict": 2, "dry_multiplier": 0.8,
                                               "dry_sequence_breakers": ["("]})
    check(status == 200, f"/infill with DRY: {status} {r}")
    if not SMOL:
        print("  (SY_SMOLLM2_GGUF unset: DRY on SmolLM2 is skipped)")
        return
    # greedy on a text that invites repeating it: DRY changes what comes, the same through OpenAI and Ollama
    prompt = "apple banana cherry apple banana cherry apple banana cherry apple banana cherry apple"
    plain = c.completions.create(model="smol", prompt=prompt, max_tokens=12, temperature=0)
    dry = dict(dry_multiplier=2.0, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=-1)
    r = c.completions.create(model="smol", prompt=prompt, max_tokens=12, temperature=0, extra_body=dry)
    check(r.choices[0].text != plain.choices[0].text, f"DRY left the greedy repetition {plain.choices[0].text!r}")
    check(" banana cherry" not in r.choices[0].text[:16], f"DRY still repeats: {r.choices[0].text!r}")
    o = srv.ollama().generate(model="smol", prompt=prompt, raw=True,
                              options=dict(dry, temperature=0, num_predict=12))
    check(o.response == r.choices[0].text, f"Ollama's DRY {o.response!r} vs OpenAI's {r.choices[0].text!r}")
    # a breaker inside the repeated text stops the penalty from reaching across it: a breaker that is the
    # repeated word itself ("banana", several tokens or one) gives another answer than the defaults
    r2 = c.completions.create(model="smol", prompt=prompt, max_tokens=12, temperature=0,
                              extra_body=dict(dry, dry_sequence_breakers=[" banana"]))
    check(r2.choices[0].text != r.choices[0].text, f"the breaker ' banana' changed nothing: {r2.choices[0].text!r}")
    # the same as a model's defaults (config: defaults.dry_*, the breakers a JSON array)
    d = c.completions.create(model="smoldry", prompt=prompt, max_tokens=12, temperature=0)
    check(d.choices[0].text == r2.choices[0].text, f"defaults.dry_*: {d.choices[0].text!r} vs {r2.choices[0].text!r}")
    d = c.completions.create(model="smoldry", prompt=prompt, max_tokens=12, temperature=0,
                             extra_body={"dry_sequence_breakers": ["\n", ":", "\"", "*"]})
    check(d.choices[0].text == r.choices[0].text, f"a request's breakers over the defaults: {d.choices[0].text!r}")
    print(f"  smol greedy: {plain.choices[0].text!r} -> DRY {r.choices[0].text!r}, breaker ' banana' "
          f"{r2.choices[0].text!r}")


def t_model_defaults(srv):
    c = srv.openai()
    msgs = [{"role": "user", "content": "Hi"}]
    a = c.chat.completions.create(model="tuned", messages=msgs)
    b = c.chat.completions.create(model="tuned", messages=msgs, temperature=1.5, presence_penalty=1.0,
                                  extra_body={"top_k": 50})
    check(a.usage.completion_tokens == 5, f"defaults.max_tokens 5: {a.usage}")
    plain = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=1)
    check(a.usage.prompt_tokens > plain.usage.prompt_tokens, "defaults.system_prompt did not reach the prompt")
    # top_k forced to 1: any temperature gives the greedy answer
    check(b.choices[0].message.content == a.choices[0].message.content, "set_params.top_k = 1 not forced")
    with_sys = c.chat.completions.create(model="tuned", messages=[{"role": "system", "content": "S"}] + msgs)
    check(with_sys.usage.prompt_tokens < a.usage.prompt_tokens, "a request's own system message was replaced")
    r = srv.ollama().generate(model="tuned", prompt="Hi")
    check(r.eval_count == 5, f"Ollama: defaults.max_tokens as num_predict {r}")


def t_fim(srv):
    with open(os.path.join(ts.ARGS.source_dir, "tests", "fixtures", "fim", "qwen-infill.json")) as f:
        fixture = json.load(f)
    for i, case in enumerate(fixture["cases"]):
        body = dict(case["request"], model="coder", n_predict=1, temperature=0, return_prompt_tokens=True)
        status, _, r = post(srv.base + "/infill", body)
        check(status == 200, f"/infill case {i}: {status} {r}")
        check(r["prompt_tokens"] == case["prompt_tokens"],
              f"/infill case {i}: prompt tokens differ from llama-server's: {r['prompt_tokens'][:20]}... vs "
              f"{case['prompt_tokens'][:20]}...")
        check(r["tokens_evaluated"] == len(case["prompt_tokens"]), f"case {i} tokens_evaluated")
    c = srv.openai()
    r = c.completions.create(model="coder", prompt="def add(a, b):\n    ", suffix="\n", max_tokens=3, temperature=0)
    check(r.usage.completion_tokens == 3, f"suffix on /v1/completions {r}")
    g = srv.ollama().generate(model="coder", prompt="def add(a, b):\n    ", suffix="\n", options={"num_predict": 3})
    check(g.eval_count == 3, f"suffix on /api/generate {g}")
    try:
        c.completions.create(model="alpha", prompt="x", suffix="y", max_tokens=1)
        raise CheckFailed("FIM on a model without FIM tokens accepted")
    except openai.BadRequestError as e:
        check("fill-in-the-middle" in e.body["message"], f"{e.body}")
    # llama.vscode sends no model: the configured model with FIM tokens is meant
    status, _, r = post(srv.base + "/infill", {"input_prefix": "def f(", "input_suffix": ")\n", "n_predict": 2})
    check(status == 200 and r["model"] == "coder" and r["tokens_predicted"] == 2, f"/infill without a model {r}")
    status, _, r = post(srv.base + "/infill", {"model": "coder", "input_extra": [{"filename": "a"}]})
    check(status == 400 and r["error"]["param"] == "input_extra", f"bad input_extra {r}")


def t_x_api_key(_main):
    srv = Server("keys", "[host]\napi_keys = k-one\n\n" + te_section("alpha"))
    try:
        status, _, _ = curl_json(srv.base + "/v1/models", "-H", "x-api-key: k-one")
        check(status == 200, f"x-api-key: {status}")
        status, _, body = curl_json(srv.base + "/v1/models", "-H", "x-api-key: wrong")
        check(status == 401, f"wrong x-api-key: {status} {body}")
        status, _, body = curl_json(srv.base + "/v1/models")
        check(status == 401 and "x-api-key" in body["error"]["message"], f"no key: {body}")
        r = srv.openai(api_key="k-one").models.list()
        check(r.data[0].id == "alpha", "Bearer still works")
    finally:
        srv.stop()


def t_serve_models_dir(_main):
    root = os.path.join(ts.ARGS.work_dir, "models-dir")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "plain", "sub"))
    shutil.copy(FIM_GGUF, os.path.join(root, "plain", "Tiny-Coder.gguf"))
    shutil.copy(FIM_GGUF, os.path.join(root, "plain", "sub", "model.gguf"))
    shutil.copytree(os.path.join(ts.ARGS.source_dir, "tests", "fixtures", "hf", "qwen2-tied-f32"),
                    os.path.join(root, "plain", "hf-qwen"))
    shutil.copytree(os.path.join(os.path.dirname(FIM_GGUF), "qwen-fim-tiny-hf"), os.path.join(root, "plain", "hf-coder"))
    # an Ollama models folder: a manifest naming its model layer in blobs/
    import hashlib
    with open(FIM_GGUF, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    os.makedirs(os.path.join(root, "ollama", "blobs"))
    shutil.copy(FIM_GGUF, os.path.join(root, "ollama", "blobs", "sha256-" + digest))
    mdir = os.path.join(root, "ollama", "manifests", "registry.ollama.ai", "library", "coder")
    os.makedirs(mdir)
    with open(os.path.join(mdir, "7b"), "w") as f:
        json.dump({"schemaVersion": 2, "layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                   "digest": "sha256:" + digest, "size": 1}]}, f)

    def start(name, args):
        """A server without a config of its own: `serve ARGS`."""
        return Server(name, None, args)

    srv = start("dir", ["--models-dir", os.path.join(root, "plain")])
    try:
        models = {m.id: m for m in srv.openai().models.list().data}
        check(set(models) == {"Tiny-Coder", "sub", "hf-qwen", "hf-coder"}, f"--models-dir found {sorted(models)}")
        hf = srv.ollama().show("hf-coder")
        check(hf.details.format == "safetensors" and hf.details.family == "qwen2" and "insert" in hf.capabilities
              and hf.modelinfo["qwen2.embedding_length"] == fim_model.HIDDEN, f"HF folder: {hf.details} {hf.capabilities}")
        check(models["Tiny-Coder"].aliases == ["qwen-fim-tiny-hf"], f"general.name alias {models['Tiny-Coder']}")
        r = srv.openai().completions.create(model="qwen-fim-tiny-hf", prompt="x", max_tokens=2)
        check(r.usage.completion_tokens == 2, "generate on a found model by its alias")
    finally:
        srv.stop()
    srv = start("ollama-dir", ["--models-dir", os.path.join(root, "ollama"), FIM_GGUF])
    try:
        names = sorted(m.model for m in srv.ollama().list().models)
        check(names == ["coder:7b", "qwen-fim-tiny"], f"Ollama folder + a file: {names}")
    finally:
        srv.stop()
    # a config adds models and overrides found ones of the same name
    cfg = os.path.join(ts.ARGS.work_dir, "override.ini")
    with open(cfg, "w") as f:
        f.write(te_section("Tiny-Coder") + te_section("extra"))
    srv = start("dir-config", ["--config", cfg, "--models-dir", os.path.join(root, "plain")])
    try:
        tags = {m.model: m.details.family for m in srv.ollama().list().models}
        check(tags.get("Tiny-Coder") == "test" and "extra" in tags and "sub" in tags, f"config override {tags}")
    finally:
        srv.stop()


TESTS = [t_ollama_version_and_listing, t_ollama_model_management, t_ollama_options, t_llama_server_extras,
         t_openai_n_and_logit_bias, t_openai_n_streaming, t_dry, t_model_defaults, t_fim, t_x_api_key, t_serve_models_dir]


def main():
    global FIM_GGUF
    ap = sy_server.argument_parser()
    ap.add_argument("--only", nargs="*")
    args = sy_server.parse_arguments(ap)
    ts.ARGS = args
    ts.FIXTURES = os.path.join(args.source_dir, "tests", "fixtures", "test-engine")
    FIM_GGUF = fim_model.build(args.source_dir, args.work_dir, args.switchyard)
    failed = sy_server.run_tests(Server("compat", main_config()), TESTS, args.only)
    print(f"{len(failed)} failed")
    return min(len(failed), 100)


if __name__ == "__main__":
    sys.exit(main())
