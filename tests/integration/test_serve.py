#!/usr/bin/env python3
"""Integration test of `switchyard serve` on the test engine.

Starts real servers on free loopback ports (--listen 127.0.0.1:0, the bound port read back from the log) and
drives them with curl (error statuses and headers) and with the official `openai` and `ollama` Python clients.
Every check can fail; the exit status is the number of failed checks (capped at 100).

Usage: test_serve.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR [--only NAME ...]
"""
import calendar
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import ollama
import openai

import sy_server
from sy_server import CheckFailed, check

ARGS = None
FIXTURES = None


# ---------------------------------------------------------------------------------------------------------------
# Servers


class Server(sy_server.Server):
    """One `switchyard serve` process in ARGS.work_dir/NAME with its own config file and log."""

    def __init__(self, name, config_text, extra_args=()):
        super().__init__(ARGS, name, config_text, extra_args)


def model_section(name, fixture, group, aliases="", extra=""):
    lines = [f"[model.{name}]", "plugin = test-engine", f"path = {os.path.join(FIXTURES, fixture)}",
             f"group = {group}", "parallel = 2", "engine.eos_one_in = 0"]
    if aliases:
        lines.append(f"aliases = {aliases}")
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n\n"


def main_config():
    return ("[host]\nmax_request_body = 64K\n\n"
            + model_section("alpha", "alpha.model", "pair", aliases="gpt-4o-mini")
            + model_section("beta", "beta.model", "pair")
            + "[model.slow]\nplugin = test-engine\npath = " + os.path.join(FIXTURES, "alpha.model")
            + "\ngroup = slowpoke\nparallel = 1\nengine.delay_us = 50000\nengine.eos_one_in = 0\n\n"
            # alpha again, drafted for by a private instance of alpha: every proposal should stand.
            + model_section("drafty", "alpha.model", "helpers", extra="draft = model:alpha\ndraft_max = 8")
            + "[group.pair]\nswap = true\nexclusive = false\n\n"
            + "[group.slowpoke]\nexclusive = false\n\n"
            + "[group.helpers]\nexclusive = false\n")


# ---------------------------------------------------------------------------------------------------------------
# curl


def curl(url, *args, data=None, data_file=None):
    """(status, headers as a lower-cased dict, body text) of one curl call."""
    cmd = ["curl", "-sS", "-D", "-", "-o", "-", *args]
    if data is not None:
        cmd += ["--data-binary", "@-"]
    if data_file is not None:
        cmd += ["--data-binary", "@" + data_file]
    cmd.append(url)
    out = subprocess.run(cmd, input=data.encode() if isinstance(data, str) else data, capture_output=True,
                         timeout=60)
    check(out.returncode == 0, f"curl {' '.join(args)} {url} failed: {out.stderr.decode(errors='replace')}")
    raw = out.stdout.decode("utf-8", "replace")
    head, _, body = raw.partition("\r\n\r\n")
    while head.startswith("HTTP/1.1 100"):  # a 100 Continue precedes the real response
        head, _, body = body.partition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, body


def curl_json(url, *args, **kw):
    status, headers, body = curl(url, *args, **kw)
    try:
        return status, headers, json.loads(body)
    except ValueError:
        raise CheckFailed(f"{url}: body is not JSON: {body[:300]!r}")


def printable_window(text, start, size):
    """A run of `size` printable ASCII characters of text at or after index `start` (to use as a stop string)."""
    for i in range(start, len(text) - size + 1):
        w = text[i:i + size]
        if all(" " <= ch <= "~" for ch in w):
            return w
    raise CheckFailed(f"no printable {size}-character window in {text!r}")


def post(url, obj_or_text, *args):
    text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
    return curl_json(url, "-H", "Content-Type: application/json", *args, data=text)


# ---------------------------------------------------------------------------------------------------------------
# Checks on the main server


def t_health_and_cors(srv):
    status, headers, body = curl_json(srv.base + "/health")
    check(status == 200 and body == {"status": "ok"}, f"/health: {status} {body}")
    # No cors_origins configured: no CORS headers, and a browser's request from any origin is refused
    # (docs/security.md); the allowed case is in test_hostile.py.
    check("access-control-allow-origin" not in headers, f"/health must carry no CORS header: {headers}")
    status, headers, _ = curl(srv.base + "/v1/chat/completions", "-X", "OPTIONS", "-H", "Origin: http://example.com",
                              "-H", "Access-Control-Request-Method: POST",
                              "-H", "Access-Control-Request-Headers: authorization, content-type")
    check(status == 403, f"preflight from a foreign origin: {status}")
    check("access-control-allow-origin" not in headers, f"refused preflight with CORS headers: {headers}")
    status, _, body = curl_json(srv.base + "/v1/completions", "-H", "Origin: http://example.com",
                                "-H", "Content-Type: text/plain", data='{"model":"alpha","prompt":"x"}')
    check(status == 403 and body["error"]["code"] == "origin_not_allowed", f"simple POST cross-origin: {status} {body}")
    status, _, body = curl_json(srv.base + "/v1/models", "-H", "Host: rebind.example:8080")
    check(status == 403 and body["error"]["code"] == "host_not_allowed", f"foreign Host: {status} {body}")
    status, _, _ = curl_json(srv.base + "/v1/models", "-H", "Host: localhost:8080")
    check(status == 200, f"Host localhost: {status}")


def t_errors(srv):
    b = srv.base
    # Malformed JSON: 400 in each API's error shape.
    status, _, body = post(b + "/v1/chat/completions", '{"model": "alpha", "messages": [')
    check(status == 400, f"malformed JSON: {status}")
    err = body.get("error", {})
    check(err.get("type") == "invalid_request_error" and err.get("code") == "invalid_json"
          and "param" in err and err.get("message"), f"OpenAI error shape: {body}")
    status, _, body = post(b + "/api/chat", "{nope")
    check(status == 400 and isinstance(body.get("error"), str), f"Ollama malformed JSON: {status} {body}")
    status, _, body = post(b + "/v1/chat/completions", "[1, 2]")
    check(status == 400, f"a JSON array body: {status}")
    # Unknown model: 404 naming the models offered.
    for path, key in (("/v1/chat/completions", "messages"), ("/api/chat", "messages")):
        status, _, body = post(b + path, {"model": "no-such-model", key: [{"role": "user", "content": "hi"}]})
        msg = body["error"]["message"] if path.startswith("/v1") else body["error"]
        check(status == 404, f"{path} unknown model: {status} {body}")
        check("no-such-model" in msg and "alpha" in msg and "beta" in msg, f"404 does not name the models: {msg}")
    status, _, body = post(b + "/v1/completions", {"prompt": "x"})
    check(status == 400 and body["error"]["param"] == "model", f"missing model: {status} {body}")
    # Body too large (the config allows 64 KiB), declared and chunked.
    big = os.path.join(ARGS.work_dir, "big.json")
    with open(big, "w") as f:
        f.write('{"model": "alpha", "prompt": "' + "a" * 70000 + '"}')
    status, _, body = curl_json(b + "/v1/completions", "-H", "Content-Type: application/json", data_file=big)
    check(status == 413 and body["error"]["code"] == "request_too_large", f"413 (declared): {status} {body}")
    status, _, body = curl_json(b + "/v1/completions", "-H", "Content-Type: application/json",
                                "-H", "Transfer-Encoding: chunked", data_file=big)
    check(status == 413, f"413 (chunked): {status} {body}")
    # Parameters.
    chat = {"model": "alpha", "messages": [{"role": "user", "content": "hi"}]}
    for extra, param in (({"n": 17}, "n"), ({"n": 0, "stream": True}, "n"), ({"temperature": "hot"}, "temperature"),
                         ({"temperature": 9}, "temperature"),
                         ({"max_tokens": 0}, "max_tokens"), ({"stop": [1]}, "stop"),
                         ({"top_logprobs": 2}, "top_logprobs"), ({"messages": []}, "messages"),
                         ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
                         ({"tools": [{"type": "function"}]}, "tools[0]")):
        status, _, body = post(b + "/v1/chat/completions", {**chat, **extra})
        check(status == 400 and body["error"]["param"] == param, f"{extra}: {status} {body}")
    # A prompt longer than the context (512 tokens).
    status, _, body = post(b + "/v1/completions", {"model": "alpha", "prompt": "a" * 600})
    check(status == 400 and body["error"]["code"] == "context_length_exceeded", f"long prompt: {status} {body}")
    status, _, body = post(b + "/v1/completions", {"model": "alpha", "prompt": [1, 2, 99999]})
    check(status == 400 and "vocabulary" in body["error"]["message"], f"bad token id: {status} {body}")
    # Routes.
    status, headers, body = curl_json(b + "/v1/chat/completions")
    check(status == 405 and "POST" in headers.get("allow", ""), f"GET on a POST route: {status} {headers}")
    status, _, body = curl_json(b + "/v2/nothing")
    check(status == 404, f"unknown path: {status}")
    status, _, body = post(b + "/api/generate", {"model": "alpha", "prompt": "x", "options": {"temperature": "x"}})
    check(status == 400 and "options.temperature" in body["error"], f"Ollama option type: {status} {body}")
    status, _, body = post(b + "/api/generate", {"model": "alpha", "prompt": "x", "keep_alive": "soon"})
    check(status == 400 and "keep_alive" in body["error"], f"keep_alive: {status} {body}")


def t_openai_chat(srv):
    c = srv.openai()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
    r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=12, temperature=1, seed=42)
    text = r.choices[0].message.content
    check(r.object == "chat.completion" and r.choices[0].message.role == "assistant", f"shape: {r}")
    check(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason}")
    u = r.usage
    check(u.completion_tokens == 12 and u.prompt_tokens > 10 and u.total_tokens == u.prompt_tokens + 12, f"usage {u}")
    check(len(text) > 0, "empty content")
    # The same request streamed, with usage: the same text (same seed), the usage in a last chunk of no choices.
    stream = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=12, temperature=1, seed=42,
                                       stream=True, stream_options={"include_usage": True})
    parts, usage, finish, roles = [], None, None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
            check(chunk.choices == [], f"usage chunk carries choices: {chunk}")
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                parts.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    check("".join(parts) == text, f"streamed {''.join(parts)!r} != {text!r}")
    check(roles == ["assistant"], f"roles in the stream: {roles}")
    check(finish == "length", f"stream finish_reason {finish}")
    check(usage is not None and usage.completion_tokens == 12, f"stream usage {usage}")
    # The second identical request reuses the cached prompt.
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    check(cached > 0, f"no cached prompt tokens on a repeated request: {usage}")
    # A different seed gives a different text (sampling is really seeded).
    r2 = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=12, temperature=1, seed=43)
    check(r2.choices[0].message.content != text, "seed 42 and 43 gave the same text")
    # Alias.
    r3 = c.chat.completions.create(model="gpt-4o-mini", messages=msgs, max_tokens=12, temperature=1, seed=42)
    check(r3.choices[0].message.content == text and r3.model == "gpt-4o-mini", f"alias: {r3}")
    # max_completion_tokens is the newer spelling.
    r4 = c.chat.completions.create(model="alpha", messages=msgs, max_completion_tokens=3, temperature=0)
    check(r4.usage.completion_tokens == 3, f"max_completion_tokens: {r4.usage}")
    # Logprobs: greedy, so the chosen token is the best of the alternatives.
    r5 = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=5, temperature=0, logprobs=True,
                                   top_logprobs=3)
    content = r5.choices[0].logprobs.content
    check(len(content) == 5, f"{len(content)} logprob entries for 5 tokens")
    for e in content:
        check(len(e.top_logprobs) == 3 and e.logprob <= 0, f"logprob entry {e}")
        check(abs(e.top_logprobs[0].logprob - e.logprob) < 1e-9, f"greedy token is not the best: {e}")
        check(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob, f"order {e}")
    check("".join(e.token for e in content) == r5.choices[0].message.content, "logprob tokens do not spell the text")


def t_openai_completions(srv):
    c = srv.openai()
    r = c.completions.create(model="alpha", prompt="Once upon a time", max_tokens=24, temperature=0)
    text = r.choices[0].text
    check(r.object == "text_completion" and r.choices[0].finish_reason == "length", f"shape {r}")
    check(r.usage.completion_tokens == 24, f"usage {r.usage}")
    streamed = "".join(ch.choices[0].text for ch in
                       c.completions.create(model="alpha", prompt="Once upon a time", max_tokens=24, temperature=0,
                                            stream=True) if ch.choices)
    check(streamed == text, f"stream {streamed!r} != {text!r}")
    # A stop string: the text ends right before it.
    stop = printable_window(text, 3, 3)
    expected = text[:text.find(stop)]
    r2 = c.completions.create(model="alpha", prompt="Once upon a time", max_tokens=24, temperature=0, stop=[stop])
    check(r2.choices[0].text == expected and r2.choices[0].finish_reason == "stop",
          f"stop {stop!r}: {r2.choices[0].text!r} (finish {r2.choices[0].finish_reason}), expected {expected!r}")
    # echo and logprobs.
    r3 = c.completions.create(model="alpha", prompt="Once upon a time", max_tokens=4, temperature=0, echo=True,
                              logprobs=2)
    check(r3.choices[0].text == "Once upon a time" + text[:len(r3.choices[0].text) - 16], f"echo {r3.choices[0].text!r}")
    lp = r3.choices[0].logprobs
    check(len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and len(lp.top_logprobs) == 4, f"logprobs {lp}")
    check("".join(lp.tokens) == r3.choices[0].text[16:], f"logprob tokens {lp.tokens}")
    # Token ids as the prompt give the same as their text (the test tokenizer maps bytes to ids 0..255, BOS 256).
    ids = [256] + list("Once upon a time".encode())
    r4 = c.completions.create(model="alpha", prompt=ids, max_tokens=24, temperature=0)
    check(r4.choices[0].text == text, f"token-id prompt: {r4.choices[0].text!r} != {text!r}")


def t_openai_models(srv):
    c = srv.openai()
    ids = [m.id for m in c.models.list()]
    check(ids == ["alpha", "beta", "slow", "drafty"], f"models {ids}")
    m = c.models.retrieve("gpt-4o-mini")
    check(m.id == "alpha" and m.object == "model", f"retrieve by alias: {m}")
    try:
        c.models.retrieve("zeta")
        raise CheckFailed("retrieving an unknown model succeeded")
    except openai.NotFoundError as e:
        check("alpha" in str(e), f"404 does not name the models: {e}")
    try:
        c.chat.completions.create(model="zeta", messages=[{"role": "user", "content": "x"}])
        raise CheckFailed("chat with an unknown model succeeded")
    except openai.NotFoundError as e:
        check(e.status_code == 404, f"{e}")


def t_ollama(srv):
    o = srv.ollama()
    names = [m.model for m in o.list().models]
    check(names == ["alpha", "beta", "slow", "drafty"], f"tags {names}")
    msgs = [{"role": "user", "content": "Why is the sky blue?"}]
    opts = {"num_predict": 9, "seed": 7, "temperature": 1, "num_ctx": 4096}
    r = o.chat(model="beta", messages=msgs, options=opts, stream=False)
    check(r.done and r.done_reason == "length" and r.message.role == "assistant", f"chat {r}")
    check(r.eval_count == 9 and r.prompt_eval_count > 5, f"counts {r}")
    for k in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        v = getattr(r, k)
        check(isinstance(v, int) and v >= 0, f"{k} = {v!r}")
    check(r.total_duration > 0 and r.eval_duration > 0, f"durations {r}")
    parts, final = [], None
    for chunk in o.chat(model="beta", messages=msgs, options=opts, stream=True):
        if chunk.done:
            final = chunk
        else:
            parts.append(chunk.message.content)
    check("".join(parts) == r.message.content, f"streamed {''.join(parts)!r} != {r.message.content!r}")
    check(final is not None and final.eval_count == 9 and final.done_reason == "length", f"final {final}")
    g = o.generate(model="beta", prompt="Hello", options={"num_predict": 5, "temperature": 0}, stream=False)
    check(g.done and len(g.response) > 0 and g.eval_count == 5, f"generate {g}")
    streamed = "".join(p.response for p in o.generate(model="beta", prompt="Hello",
                                                      options={"num_predict": 5, "temperature": 0}, stream=True))
    check(streamed == g.response, f"generate stream {streamed!r} != {g.response!r}")
    raw = o.generate(model="beta", prompt="Hello", raw=True, options={"num_predict": 5, "temperature": 0})
    check(raw.response != g.response, "raw=True gave the templated prompt's output")
    word = printable_window(g.response, 2, 2)
    stop = o.generate(model="beta", prompt="Hello", options={"num_predict": 5, "temperature": 0, "stop": [word]})
    check(stop.response == g.response[:g.response.find(word)] and stop.done_reason == "stop",
          f"stop {word!r}: {stop.response!r} of {g.response!r}")
    # show, ps, version.
    s = o.show("beta")
    check(s.modelinfo and s.modelinfo.get("general.architecture"), f"show {s}")
    ps = [m.model for m in o.ps().models]
    check("beta" in ps and "alpha" not in ps, f"ps {ps} (alpha and beta swap)")
    status, _, body = curl_json(srv.base + "/api/version")
    check(status == 200 and body.get("version"), f"version {body}")
    # keep_alive 0 unloads after the request; an empty prompt loads.
    o.generate(model="beta", prompt="Hi", options={"num_predict": 1}, keep_alive=0)
    check("beta" not in [m.model for m in o.ps().models], "keep_alive 0 left beta loaded")
    r = o.generate(model="beta", prompt="")
    check(r.done and r.done_reason == "load", f"empty prompt: {r}")
    check("beta" in [m.model for m in o.ps().models], "an empty prompt did not load beta")
    try:
        o.chat(model="zeta", messages=msgs)
        raise CheckFailed("Ollama chat with an unknown model succeeded")
    except ollama.ResponseError as e:
        check(e.status_code == 404 and "alpha" in e.error, f"{e.status_code} {e.error}")


def ps_expires_in(srv, model):
    """Seconds until /api/ps says the model's keep-alive ends (None when not loaded; inf for the year 9999)."""
    status, _, body = curl_json(srv.base + "/api/ps")
    check(status == 200, f"/api/ps: {status} {body}")
    for m in body["models"]:
        if m["model"] == model:
            stamp = m["expires_at"]
            check(stamp.endswith("Z"), f"expires_at {stamp!r}")
            if stamp.startswith("9999-"):
                return float("inf")
            when = calendar.timegm(time.strptime(stamp[:-1].split(".")[0], "%Y-%m-%dT%H:%M:%S"))
            return when - time.time()
    return None


def t_ollama_keep_alive(srv):
    def generate(**extra):
        status, _, body = post(srv.base + "/api/generate", {"model": "beta", "prompt": "Hi", "stream": False,
                                                            "options": {"num_predict": 2}, **extra})
        check(status == 200 and body.get("done"), f"generate {extra}: {status} {body}")

    # Each request sets how long the model stays loaded once idle, as Ollama does.
    generate(keep_alive="5m")
    left = ps_expires_in(srv, "beta")
    check(left is not None and 290 <= left <= 301, f"keep_alive 5m: expires in {left} s")
    generate(keep_alive=120)
    left = ps_expires_in(srv, "beta")
    check(left is not None and 110 <= left <= 121, f"keep_alive 120: expires in {left} s")
    generate(keep_alive=-1)
    check(ps_expires_in(srv, "beta") == float("inf"), "keep_alive -1 does not keep beta forever")
    generate(keep_alive="1h")
    left = ps_expires_in(srv, "beta")
    check(left is not None and 3590 <= left <= 3601, f"keep_alive 1h: expires in {left} s")
    # A request without keep_alive goes back to the model's configured ttl (none here: never).
    generate()
    check(ps_expires_in(srv, "beta") == float("inf"), "a request without keep_alive kept the last keep_alive")
    # A load without a prompt takes keep_alive too.
    status, _, body = post(srv.base + "/api/generate", {"model": "beta", "keep_alive": "10m"})
    check(status == 200 and body.get("done_reason") == "load", f"load with keep_alive: {status} {body}")
    left = ps_expires_in(srv, "beta")
    check(left is not None and 590 <= left <= 601, f"load with keep_alive 10m: expires in {left} s")
    # A short keep_alive really unloads the model once it is idle that long.
    generate(keep_alive="2s")
    check(ps_expires_in(srv, "beta") is not None, "beta went at once with keep_alive 2s")
    t0 = time.time()
    while time.time() - t0 < 8 and ps_expires_in(srv, "beta") is not None:
        time.sleep(0.2)
    took = time.time() - t0
    check(ps_expires_in(srv, "beta") is None, "keep_alive 2s: beta still loaded after 8 s")
    check(took >= 1.0, f"keep_alive 2s: beta unloaded after {took:.1f} s already")


def t_speculative(srv):
    c = srv.openai()
    prompt = "Once upon a time there was"
    plain = c.completions.create(model="alpha", prompt=prompt, max_tokens=32, temperature=0)
    drafted = c.completions.create(model="drafty", prompt=prompt, max_tokens=32, temperature=0)
    check(drafted.choices[0].text == plain.choices[0].text,
          f"speculative decoding changed the greedy text: {drafted.choices[0].text!r} != {plain.choices[0].text!r}")
    d = drafted.usage.completion_tokens_details
    check(d is not None and d.accepted_prediction_tokens > 0,
          f"the draft model's proposals (the same model) were never accepted: {drafted.usage}")
    check(d.rejected_prediction_tokens >= 0, f"usage {drafted.usage}")
    # "speculative": false turns the drafter off for one request; the text stays the same.
    status, _, body = post(srv.base + "/v1/completions", {"model": "drafty", "prompt": prompt, "max_tokens": 32,
                                                          "temperature": 0, "speculative": False})
    details = body.get("usage", {}).get("completion_tokens_details", {})
    check(status == 200 and body["choices"][0]["text"] == plain.choices[0].text, f"speculative false: {body}")
    check(details.get("accepted_prediction_tokens") == 0 and details.get("rejected_prediction_tokens") == 0,
          f"speculative false still drafted: {details}")
    status, _, body = post(srv.base + "/v1/completions", {"model": "drafty", "prompt": prompt, "speculative": 1})
    check(status == 400 and body["error"]["param"] == "speculative", f"speculative 1: {status} {body}")
    _, _, text = curl(srv.base + "/metrics")
    for pattern in (r'switchyard_draft_tokens_total\{model="drafty"\} [1-9]',
                    r'switchyard_draft_accepted_tokens_total\{model="drafty"\} [1-9]'):
        check(re.search(pattern, text), f"/metrics lacks {pattern}")


def t_management(srv):
    c = srv.openai()
    c.completions.create(model="alpha", prompt="x", max_tokens=2, temperature=0)
    status, _, body = curl_json(srv.base + "/running")
    running = {m["model"]: m for m in body["running"]}
    check(status == 200 and running.get("alpha", {}).get("state") == "ready" and "beta" not in running,
          f"/running {body}")
    status, headers, text = curl(srv.base + "/metrics")
    check(status == 200, f"/metrics {status}")
    check(headers.get("content-type", "").startswith("text/plain"), f"metrics content type {headers}")
    for pattern in (r'switchyard_requests_total\{endpoint="/v1/completions",status="200"\} [1-9]',
                    r'switchyard_requests_total\{endpoint="/v1/chat/completions",status="404"\} [1-9]',
                    r'switchyard_generated_tokens_total\{model="alpha"\} [1-9]',
                    r'switchyard_prompt_tokens_total\{model="beta"\} [1-9]',
                    r'switchyard_cached_tokens_total\{model="alpha"\} [1-9]',
                    r'switchyard_time_to_first_token_seconds_count [1-9]',
                    r'switchyard_token_latency_seconds_count [1-9]',
                    r'switchyard_model_loads_total [1-9]', r'switchyard_model_swaps_total [1-9]',
                    r'switchyard_model_memory_bytes\{model="alpha"\} [1-9]', r'switchyard_queue_depth\{model="alpha"\} 0',
                    r'switchyard_slots_busy\{model="alpha"\} 0',
                    r'switchyard_prefix_cache_tokens\{model="alpha"\} \d+',
                    r'switchyard_snapshots_written_total \d+', r'switchyard_snapshot_write_failures_total 0',
                    r'switchyard_snapshots_rejected_total\{reason="checksum"\} 0'):
        check(re.search(pattern, text), f"/metrics lacks {pattern}")
    status, _, body = curl_json(srv.base + "/unload/gpt-4o-mini", "-X", "POST")
    check(status == 200 and body.get("unloaded") == 1, f"/unload/alias {status} {body}")
    status, _, body = curl_json(srv.base + "/running")
    check("alpha" not in [m["model"] for m in body["running"]], f"alpha still running: {body}")
    status, headers, body = curl_json(srv.base + "/unload")
    check(status == 405 and "POST" in headers.get("allow", ""), f"GET /unload must not unload: {status} {body}")
    status, _, body = curl_json(srv.base + "/unload?model=nobody", "-X", "POST")
    check(status == 404, f"/unload of an unknown model: {status}")
    status, _, body = curl_json(srv.base + "/unload", "-X", "POST")
    check(status == 200, f"/unload all: {status} {body}")
    status, _, body = curl_json(srv.base + "/running")
    check(body["running"] == [], f"running after /unload: {body}")


# ---------------------------------------------------------------------------------------------------------------
# Swapping two models of one group: every answer is its own model's.

SWAP_PROMPTS = ["Once upon a time", "The quick brown fox", "In the beginning"]


def swap_requests(srv, model):
    """The completions (greedy) and chats (seeded) of one model for all prompts."""
    c = srv.openai()
    out = []
    for p in SWAP_PROMPTS:
        r = c.completions.create(model=model, prompt=p, max_tokens=16, temperature=0)
        out.append(r.choices[0].text)
        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": p}], max_tokens=16,
                                      temperature=1, seed=11)
        out.append(r.choices[0].message.content)
    return out


def t_swap(srv):
    refs = {}
    for model, fixture in (("alpha", "alpha.model"), ("beta", "beta.model")):
        alone = Server(f"alone-{model}", model_section(model, fixture, "solo"))
        try:
            refs[model] = swap_requests(alone, model)
        finally:
            alone.stop()
    check(refs["alpha"] != refs["beta"], "alpha and beta give the same outputs: the swap test would prove nothing")
    # Alternate, checking that exactly the model just used is loaded.
    for round_ in range(3):
        for model in ("alpha", "beta"):
            got = swap_requests(srv, model)
            check(got == refs[model], f"round {round_}: {model} answered {got} instead of {refs[model]}")
            _, _, body = curl_json(srv.base + "/running")
            loaded = [(m["model"], m["state"]) for m in body["running"] if m["model"] in ("alpha", "beta")]
            check(loaded == [(model, "ready")], f"after {model}: /running says {body['running']}")
    # Concurrently: requests for both models interleave, waiting for each other's swaps; none is mixed up.
    errors = []

    def worker(i):
        model = ("alpha", "beta")[i % 2]
        try:
            for _ in range(2):
                got = swap_requests(srv, model)
                if got != refs[model]:
                    errors.append(f"{model} answered {got}")
        except Exception as e:  # reported below
            errors.append(f"{model}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(not any(t.is_alive() for t in threads), "concurrent swap requests did not finish within 120 s")
    check(not errors, "concurrent swaps: " + "; ".join(errors[:4]))
    _, _, text = curl(srv.base + "/metrics")
    m = re.search(r"switchyard_model_swaps_total (\d+)", text)
    check(m and int(m.group(1)) >= 6, f"swaps counted: {m.group(0) if m else None}")
    # Each swap saved the warm slots of the model it unloaded, and its next load restored them.
    for name in ("switchyard_snapshots_written_total", "switchyard_snapshots_restored_total",
                 "switchyard_snapshot_restored_tokens_total"):
        m = re.search(name + r" (\d+)", text)
        check(m and int(m.group(1)) > 0, f"{name}: {m.group(0) if m else None}")
    check(os.listdir(srv.resume_path), f"no snapshots in {srv.resume_path}")


# ---------------------------------------------------------------------------------------------------------------
# A client that leaves cancels its generation; the server stops cleanly mid-stream.


def stream_first_chunk(srv, body):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"stream status {resp.status}")
    first = resp.readline()
    return conn, resp, first


def t_disconnect_cancels(srv):
    # slow: one slot, 50 ms a token; 400 tokens would hold the slot for 20 s.
    conn, resp, first = stream_first_chunk(srv, {"model": "slow", "prompt": "Hi", "max_tokens": 400, "stream": True,
                                                 "temperature": 0})
    check(first, "no first chunk")
    conn.sock.shutdown(2)
    conn.close()
    t0 = time.time()
    r = srv.openai().completions.create(model="slow", prompt="Hi", max_tokens=3, temperature=0)
    took = time.time() - t0
    check(r.usage.completion_tokens == 3, f"{r.usage}")
    check(took < 5, f"the next request waited {took:.1f} s: the abandoned generation was not cancelled")
    # Non-streamed: the client leaves while the answer is being collected.
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    conn.request("POST", "/v1/completions", body=json.dumps({"model": "slow", "prompt": "Ho", "max_tokens": 400}),
                 headers={"Content-Type": "application/json"})
    time.sleep(0.5)
    conn.sock.shutdown(2)
    conn.close()
    t0 = time.time()
    srv.openai().completions.create(model="slow", prompt="Hi", max_tokens=2, temperature=0)
    took = time.time() - t0
    check(took < 5, f"after a non-streamed client left, the next request waited {took:.1f} s")


def t_shutdown_mid_stream(srv):
    check(srv.proc.poll() is None, "the main server is not running")
    conn, resp, first = stream_first_chunk(srv, {"model": "slow", "prompt": "Bye", "max_tokens": 400,
                                                 "stream": True})
    check(first.startswith(b"data: "), f"first line {first!r}")
    t0 = time.time()
    srv.send(signal.SIGTERM)
    rest = resp.read().decode("utf-8", "replace")  # must end, not hang or break
    conn.close()
    srv.stop()
    events = [line[6:] for line in rest.split("\n") if line.startswith("data: ")]
    check(events and events[-1] == "[DONE]", f"the stream did not end with [DONE]: {rest[-300:]!r}")
    check(any("shutting down" in e for e in events), f"no shutdown error event: {rest[-300:]!r}")
    check(time.time() - t0 < 10, "stopping took more than 10 s")


def t_stop_fails_every_api(_main):
    """A stop mid-generation ends each API's answer with that API's own error (a server of its own): the
    Ollama NDJSON stream with an error line, the Anthropic stream with an overloaded_error event, and the
    collected answers of the OpenAI, Ollama and Anthropic APIs with 503."""
    srv = Server("stop-apis", f"[model.slow]\nplugin = test-engine\npath = {os.path.join(FIXTURES, 'alpha.model')}\n"
                 "parallel = 8\nengine.delay_us = 50000\nengine.eos_one_in = 0\n")
    say = [{"role": "user", "content": "Bye"}]
    streams = {"ollama": ("/api/generate", {"model": "slow", "prompt": "Bye", "options": {"num_predict": 400}}),
               "anthropic": ("/v1/messages", {"model": "slow", "max_tokens": 400, "messages": say, "stream": True})}
    collected = {"openai": ("/v1/chat/completions", {"model": "slow", "max_tokens": 400, "messages": say}),
                 "ollama": ("/api/chat", {"model": "slow", "messages": say, "stream": False,
                                          "options": {"num_predict": 400}}),
                 "anthropic": ("/v1/messages", {"model": "slow", "max_tokens": 400, "messages": say})}
    try:
        opened = {}
        for api, (path, body) in streams.items():
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            check(resp.status == 200, f"{api} stream: status {resp.status}")
            check(resp.readline(), f"{api} stream: no first line")
            opened[api] = (conn, resp)
        answers = {}

        def ask(api, path, body):
            answers[api] = srv.json("POST", path, body, timeout=30)

        askers = [threading.Thread(target=ask, args=(api, *req)) for api, req in collected.items()]
        for t in askers:
            t.start()
        time.sleep(0.5)  # every generation has started: each is one slot of eight
        srv.send(signal.SIGTERM)
        for t in askers:
            t.join(30)
        tails = {api: resp.read().decode("utf-8", "replace") for api, (_, resp) in opened.items()}
        for conn, _ in opened.values():
            conn.close()
    finally:
        srv.stop()
    last = json.loads(tails["ollama"].strip().split("\n")[-1])
    check(last.get("error") == "the server is shutting down", f"Ollama's stream ended with {last}")
    check("event: error\n" in tails["anthropic"] and '"overloaded_error"' in tails["anthropic"]
          and "the server is shutting down" in tails["anthropic"], f"Anthropic's stream: {tails['anthropic'][-300:]!r}")
    for api in collected:
        status, body = answers.get(api, (None, None))
        check(status == 503 and "the server is shutting down" in json.dumps(body), f"{api} collected: {status} {body}")


# ---------------------------------------------------------------------------------------------------------------
# API keys, SIGHUP and --watch-config reloads (a server of its own).


def t_api_keys_and_reload(_main):
    base_cfg = model_section("alpha", "alpha.model", "solo")
    srv = Server("keys", base_cfg, extra_args=("--watch-config",))
    try:
        status, _, _ = curl_json(srv.base + "/v1/models")
        check(status == 200, f"no keys: {status}")
        srv.write_config("[host]\napi_keys = k-one, k-two\n\n" + base_cfg)
        srv.proc.send_signal(signal.SIGHUP)  # not a stop signal
        deadline = time.time() + 10
        while time.time() < deadline and curl_json(srv.base + "/v1/models")[0] != 401:
            time.sleep(0.1)
        status, headers, body = curl_json(srv.base + "/v1/models")
        check(status == 401 and body["error"]["code"] == "invalid_api_key", f"after SIGHUP: {status} {body}")
        check(headers.get("www-authenticate", "").startswith("Bearer"), f"401 headers {headers}")
        status, _, body = curl_json(srv.base + "/api/tags", "-H", "Authorization: Bearer k-three")
        check(status == 401 and isinstance(body.get("error"), str), f"wrong key on /api: {status} {body}")
        status, _, _ = curl_json(srv.base + "/v1/models", "-H", "Authorization: Bearer k-two")
        check(status == 200, f"right key: {status}")
        status, _, _ = curl_json(srv.base + "/health")
        check(status == 200, f"/health must stay open: {status}")
        status, _, _ = curl(srv.base + "/v1/models", "-X", "OPTIONS")
        check(status == 204, f"preflight must stay open: {status}")
        r = srv.openai(api_key="k-one").chat.completions.create(
            model="alpha", messages=[{"role": "user", "content": "x"}], max_tokens=2)
        check(r.usage.completion_tokens == 2, f"{r.usage}")
        try:
            srv.openai(api_key="k-wrong").models.list()
            raise CheckFailed("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        # --watch-config: the file changes, the keys go.
        srv.write_config(base_cfg)
        st = os.stat(srv.config_path)
        os.utime(srv.config_path, (st.st_atime, st.st_mtime + 5))
        deadline = time.time() + 10
        while time.time() < deadline and curl_json(srv.base + "/v1/models")[0] != 200:
            time.sleep(0.1)
        check(curl_json(srv.base + "/v1/models")[0] == 200, "--watch-config did not reload the config")
        # A broken config is refused and the running one stays.
        srv.write_config("[model.broken]\npath = \n")
        os.utime(srv.config_path, (st.st_atime, st.st_mtime + 10))
        time.sleep(2.5)
        check(curl_json(srv.base + "/v1/models")[0] == 200, "a broken config replaced the running one")
        check("errors; the running configuration stays" in srv.log_text(), "no message about the broken config")
        # POST /reload with admin keys: management takes only the admin key, inference either.
        srv.write_config("[host]\napi_keys = user-key\nadmin_api_keys = admin-key\n\n" + base_cfg)
        status, _, body = curl_json(srv.base + "/reload", "-X", "POST")
        check(status == 200 and body == {"status": "ok"}, f"POST /reload: {status} {body}")
        status, _, body = curl_json(srv.base + "/running", "-H", "Authorization: Bearer user-key")
        check(status == 401 and "admin" in body["error"]["message"], f"/running with a user key: {status} {body}")
        status, _, _ = curl_json(srv.base + "/running", "-H", "Authorization: Bearer admin-key")
        check(status == 200, f"/running with the admin key: {status}")
        for key in ("user-key", "admin-key"):
            status, _, _ = curl_json(srv.base + "/v1/models", "-H", f"Authorization: Bearer {key}")
            check(status == 200, f"/v1/models with {key}: {status}")
        status, _, _ = curl_json(srv.base + "/reload", "-X", "POST", "-H", "Authorization: Bearer user-key")
        check(status == 401, f"POST /reload with a user key: {status}")
        srv.write_config("[model.broken]\npath = \n")
        status, _, body = curl_json(srv.base + "/reload", "-X", "POST", "-H", "Authorization: Bearer admin-key")
        check(status == 400 and body["error"]["code"] == "reload_failed", f"POST /reload of a broken config: {status}")
        check(curl_json(srv.base + "/running", "-H", "Authorization: Bearer admin-key")[0] == 200,
              "a refused /reload replaced the running config")
    finally:
        srv.stop(signal.SIGINT)


# ---------------------------------------------------------------------------------------------------------------
# Structured output: response_format, format, grammar, json_schema

TICKET = {"type": "object",
          "properties": {"status": {"enum": ["open", "closed"]},
                         "code": {"type": "integer", "minimum": 100, "maximum": 599},
                         "urgent": {"type": "boolean"}},
          "required": ["status", "code", "urgent"], "additionalProperties": False}


def http_post(srv, path, body):
    """(status, parsed JSON) of a plain POST (urllib: what a llama.cpp client sends)."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(srv.base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def t_structured(srv):
    import jsonschema
    c = srv.openai()
    msgs = [{"role": "user", "content": "File a ticket as JSON."}]
    # json_schema (strict): every output is a valid document, streamed or not, chat or completions.
    rf = {"type": "json_schema", "json_schema": {"name": "ticket", "schema": TICKET, "strict": True}}
    for seed in range(6):
        r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=100, temperature=1, seed=seed,
                                      response_format=rf)
        text = r.choices[0].message.content
        check(r.choices[0].finish_reason == "stop", f"json_schema seed {seed}: {r.choices[0].finish_reason} {text!r}")
        jsonschema.validate(json.loads(text), TICKET)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
        model="alpha", messages=msgs, max_tokens=100, temperature=1, seed=3, response_format=rf, stream=True)
        if ch.choices)
    again = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=100, temperature=1, seed=3,
                                      response_format=rf).choices[0].message.content
    check(streamed == again, f"streamed {streamed!r} != {again!r}")
    r = c.completions.create(model="alpha", prompt="A ticket:", max_tokens=100, temperature=1, seed=9,
                             extra_body={"response_format": rf})
    jsonschema.validate(json.loads(r.choices[0].text), TICKET)
    # json_object: a JSON object when it ends; a cut by max_tokens is "length".
    complete = 0
    for seed in range(8):
        r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=300, temperature=1, seed=seed,
                                      response_format={"type": "json_object"})
        ch = r.choices[0]
        if ch.finish_reason == "stop":
            check(isinstance(json.loads(ch.message.content), dict), f"json_object: {ch.message.content!r}")
            complete += 1
        else:
            check(ch.finish_reason == "length" and r.usage.completion_tokens == 300, f"json_object: {r}")
    check(complete > 0, "no json_object generation completed in 300 tokens")
    r = c.chat.completions.create(model="alpha", messages=msgs, max_tokens=2, temperature=1, seed=1,
                                  response_format={"type": "json_object"})
    check(r.choices[0].finish_reason == "length", f"max_tokens 2: {r.choices[0]}")
    # llama.cpp's fields, as its clients send them.
    status, body = http_post(srv, "/v1/completions", {"model": "alpha", "prompt": "Answer:", "max_tokens": 20,
                                                      "temperature": 1, "seed": 4,
                                                      "grammar": 'root ::= ("yes" | "no") "."'})
    check(status == 200 and body["choices"][0]["text"] in ("yes.", "no."), f"grammar: {status} {body}")
    status, body = http_post(srv, "/v1/chat/completions", {"model": "alpha", "messages": msgs, "max_tokens": 100,
                                                           "temperature": 1, "seed": 5, "json_schema": TICKET})
    check(status == 200, f"json_schema field: {status} {body}")
    jsonschema.validate(json.loads(body["choices"][0]["message"]["content"]), TICKET)
    # Refusals: a keyword the compiler cannot honour, bad GBNF, two constraints at once, a bad type.
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}}}
    status, body = http_post(srv, "/v1/chat/completions", {"model": "alpha", "messages": msgs, "response_format": bad})
    check(status == 400 and "not" in body["error"]["message"] and
          body["error"]["param"] == "response_format.json_schema.schema", f"bad schema: {status} {body}")
    status, body = http_post(srv, "/v1/completions", {"model": "alpha", "prompt": "x", "grammar": "root ::= foo"})
    check(status == 400 and "foo" in body["error"]["message"] and body["error"]["param"] == "grammar",
          f"bad GBNF: {status} {body}")
    status, body = http_post(srv, "/v1/completions", {"model": "alpha", "prompt": "x", "grammar": 'root ::= "a"',
                                                      "json_schema": TICKET})
    check(status == 400, f"two constraints: {status} {body}")
    status, body = http_post(srv, "/v1/chat/completions", {"model": "alpha", "messages": msgs,
                                                           "response_format": {"type": "xml"}})
    check(status == 400 and body["error"]["param"] == "response_format.type", f"type xml: {status} {body}")
    try:
        c.chat.completions.create(model="alpha", messages=msgs, response_format=bad)
        raise CheckFailed("the openai client got no error for an unsupported schema keyword")
    except openai.BadRequestError as e:
        check("not" in str(e), f"openai client error: {e}")
    # Ollama: format "json" and a schema, chat and generate, streamed too.
    o = srv.ollama()
    for seed in range(4):
        r = o.chat(model="alpha", messages=msgs, format=TICKET, options={"seed": seed, "temperature": 1,
                                                                         "num_predict": 100})
        check(r.done_reason == "stop", f"ollama schema: {r}")
        jsonschema.validate(json.loads(r.message.content), TICKET)
    g = o.generate(model="alpha", prompt="A ticket:", format=TICKET, options={"seed": 2, "temperature": 1,
                                                                               "num_predict": 100})
    jsonschema.validate(json.loads(g.response), TICKET)
    streamed = "".join(p.response for p in o.generate(model="alpha", prompt="A ticket:", format=TICKET, stream=True,
                                                      options={"seed": 2, "temperature": 1, "num_predict": 100}))
    check(streamed == g.response, f"ollama stream {streamed!r} != {g.response!r}")
    complete = 0
    for seed in range(6):
        r = o.chat(model="alpha", messages=msgs, format="json", options={"seed": seed, "temperature": 1,
                                                                         "num_predict": 300})
        if r.done_reason == "stop":
            check(isinstance(json.loads(r.message.content), dict), f"ollama json: {r.message.content!r}")
            complete += 1
    check(complete > 0, "no Ollama format json generation completed in 300 tokens")
    try:
        o.generate(model="alpha", prompt="x", format={"type": "object", "not": {}})
        raise CheckFailed("Ollama accepted a schema with 'not'")
    except ollama.ResponseError as e:
        check(e.status_code == 400 and "not" in e.error, f"{e.status_code} {e.error}")
    status, _, metrics = curl(srv.base + "/metrics")
    m = re.search(r'^switchyard_constrained_tokens\{model="alpha"\} (\d+)$', metrics, re.M)
    check(status == 200 and m and int(m.group(1)) > 100, f"constrained tokens in /metrics: {m and m.group(0)}")
    # LangChain's structured output (method json_schema: response_format strict, parsed into a Pydantic model).
    try:
        from langchain_openai import ChatOpenAI
        from pydantic import BaseModel, Field
        from typing import Literal
    except ImportError as e:
        print(f"note: LangChain check skipped ({e}); setup_clients.py could not install langchain-openai",
              flush=True)
        return

    class Ticket(BaseModel):
        status: Literal["open", "closed"]
        code: int = Field(ge=100, le=599)
        urgent: bool

    llm = ChatOpenAI(base_url=srv.base + "/v1", api_key="none", model="alpha", temperature=1, max_tokens=100,
                     max_retries=0, seed=11)
    t = llm.with_structured_output(Ticket, method="json_schema").invoke("File a ticket.")
    check(isinstance(t, Ticket) and 100 <= t.code <= 599, f"LangChain: {t!r}")


# ---------------------------------------------------------------------------------------------------------------

# A template of our own for a model's chat_template_file: it shows what reaches it (tools, kwargs, tool messages)
# and refuses a conversation the way real templates do (raise_exception).
CUSTOM_TEMPLATE = """{%- if messages[0].content == 'forbidden' %}{{ raise_exception('Roles must alternate (custom).') }}{% endif -%}
{%- for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.tool_call_id is defined %}[{{ m.tool_call_id }}]{% endif %}
{% endfor -%}
{%- if tools %}tools: {{ tools | map(attribute='function.name') | join(',') }}
{% endif -%}
thinking={{ enable_thinking | default('unset') }} bos={{ bos_token is defined }}
{%- if add_generation_prompt %}
<assistant>{% endif %}"""


def t_chat_templates(srv):
    # The model's own template (the test engine's ChatML, through the Jinja engine) on /apply-template ...
    status, body = srv.json("POST", "/apply-template", {"model": "alpha", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }}"}]})
    want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi {{ x }}<|im_end|>\n<|im_start|>assistant\n"
    check(status == 200 and body.get("prompt") == want, f"/apply-template: {status} {body!r}")
    # ... is the template /api/show returns, and `switchyard chat-template` renders the same from it
    status, show = srv.json("POST", "/api/show", {"model": "alpha"})
    check(status == 200 and "<|im_start|>" in show.get("template", ""), f"/api/show template: {status} {show!r}")
    tpl = os.path.join(srv.dir, "alpha.jinja")
    with open(tpl, "w") as f:
        f.write(show["template"])
    req = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi {{ x }}"}],
           "add_generation_prompt": True}
    out = subprocess.run([ARGS.switchyard, "chat-template", tpl], input=json.dumps(req).encode(), capture_output=True)
    check(out.returncode == 0 and out.stdout.decode() == want, f"chat-template verb: {out.returncode} {out.stdout!r} {out.stderr!r}")
    # With tools, the model's named tool_use template (the test engine reports one through sy_model_info) is used
    status, body = srv.json("POST", "/apply-template", {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}],
                                                        "tools": [{"type": "function", "function": {"name": "lookup"}}]})
    want_tools = "<|im_start|>system\n# Tools: lookup<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    check(status == 200 and body.get("prompt") == want_tools, f"/apply-template with tools: {status} {body!r}")
    # A configured template file: tools, chat_template_kwargs and tool messages reach it; its refusal is a 400.
    path = os.path.join(ARGS.work_dir, "custom.jinja")
    with open(path, "w") as f:
        f.write(CUSTOM_TEMPLATE)
    custom = Server("jinja", model_section("custom", "alpha.model", "g", extra=f"chat_template_file = {path}"))
    try:
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
                 {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
        status, body = custom.json("POST", "/apply-template", {
            "model": "custom", "tools": tools, "chat_template_kwargs": {"enable_thinking": False},
            "messages": [{"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})
        # (what jinja2 renders for it: trim_blocks eats the newline after each block tag)
        want = "<user>Weather?<assistant><tool>sunny[c1]tools: get_weather,search\nthinking=False bos=True<assistant>"
        check(status == 200 and body.get("prompt") == want, f"custom /apply-template: {status} {body!r}")
        status, body = custom.json("POST", "/v1/chat/completions", {
            "model": "custom", "max_tokens": 2, "messages": [{"role": "user", "content": "forbidden"}]})
        check(status == 400 and "Roles must alternate (custom)." in json.dumps(body),
              f"a template's raise_exception: {status} {body!r}")
        r = custom.openai().chat.completions.create(model="custom", max_tokens=3,
                                                    messages=[{"role": "user", "content": "fine"}])
        check(r.usage.prompt_tokens > 0 and r.choices[0].message.content is not None, f"chat through it: {r}")
    finally:
        custom.stop()


TESTS = [t_health_and_cors, t_errors, t_openai_chat, t_openai_completions, t_openai_models, t_structured,
         t_chat_templates,
         t_speculative, t_ollama,
         t_ollama_keep_alive, t_management, t_swap, t_disconnect_cancels, t_api_keys_and_reload,
         t_stop_fails_every_api, t_shutdown_mid_stream]


def main():
    global ARGS, FIXTURES
    ap = sy_server.argument_parser()
    ap.add_argument("--only", nargs="*")
    ARGS = sy_server.parse_arguments(ap)
    FIXTURES = os.path.join(ARGS.source_dir, "tests", "fixtures", "test-engine")
    if subprocess.run(["curl", "--version"], capture_output=True).returncode != 0:
        print("FAIL: curl is needed by this test", file=sys.stderr)
        return 1
    print(f"clients: openai {openai.__version__}, ollama", flush=True)
    failed = sy_server.run_tests(Server("main", main_config()), TESTS, ARGS.only)
    print(f"{len(TESTS) - len(failed)} passed, {len(failed)} failed" if not ARGS.only else f"{len(failed)} failed")
    return min(len(failed), 100)


if __name__ == "__main__":
    sys.exit(main())
