#!/usr/bin/env python3
"""Tool calling, reasoning and the Anthropic Messages API through `switchyard serve` with SmolLM2-135M-Instruct
(real weights) and the official clients: `openai`, `ollama`, `anthropic` and LangChain's ChatOpenAI.bind_tools.

SmolLM2's own template renders no tools, so it gets the generic format (tools described in the system prompt,
the output one JSON object); the same weights under other models' templates (chat_template_file) exercise the
native formats end to end: the prompt through the template, the call constrained by the format's grammar and
parsed back by its parser. Every call's arguments are checked against the tool's schema with `jsonschema`.

Exit status: the number of failed checks; 77 (skipped) when the model file is not found (SY_SMOLLM2_GGUF).

Usage: test_tools.py --switchyard EXE --plugin-dir DIR --source-dir SRC --work-dir DIR [--only NAME ...]
"""
import json
import os
import sys

import jsonschema
import ollama
import openai

import sy_server
from sy_server import CheckFailed, check

ARGS = None
SKIP = 77


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"type": "string", "enum": ["c", "f"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 40}}, "required": ["tz"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# Templates of other families rendered over SmolLM2's weights: (model name, template file, format).
NATIVE = [("hermes", "Qwen-Qwen3-0.6B.jinja"), ("qwen25", "Qwen-Qwen2.5-7B-Instruct.jinja"),
          ("llama31", "meta-llama-Llama-3.1-8B-Instruct.jinja"), ("llama32", "meta-llama-Llama-3.2-3B-Instruct.jinja"),
          ("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja"),
          ("mistral-small", "Mistral-Small-3.2-24B-Instruct-2506.jinja"),
          ("granite", "ibm-granite-granite-3.3-2B-Instruct.jinja"),
          ("functionary31", "meetkai-functionary-medium-v3.1.jinja"),
          ("minimax-m1", "MiniMax-M1.jinja"), ("hermes3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"),
          ("command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"),
          ("deepseek-v31", "deepseek-ai-DeepSeek-V3.1.jinja"), ("kimi-k2", "moonshotai-Kimi-K2.jinja"),
          ("qwen3-coder", "Qwen3-Coder.jinja"), ("glm46", "GLM-4.6.jinja"), ("lfm25", "LFM2.5-Instruct.jinja")]


def find_model():
    path = os.environ.get("SY_SMOLLM2_GGUF", "")
    return path if path and os.path.exists(path) else None


class Server(sy_server.Server):
    """One `switchyard serve` process in ARGS.work_dir/NAME with its own config file and log."""

    def __init__(self, name, config_text):
        super().__init__(ARGS, name, config_text)


def config(gguf):
    templates = os.path.join(ARGS.source_dir, "tests", "fixtures", "chat-templates", "templates")
    text = f"[model.smol]\nplugin = gguf-quant\npath = {gguf}\nparallel = 2\ngroup = g\n\n"
    # f32 KV for the formats: native_formats wants the streamed reply equal to the collected one with the same
    # seed, and the second request reuses the first one's KV through a different batch shape; the kernels are not
    # batch-invariant in the last bits, which an f16 cache can round to neighbouring values (docs/config.md).
    for name, file in NATIVE + [("r1", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")]:
        text += (f"[model.{name}]\nplugin = gguf-quant\npath = {gguf}\ngroup = g\n"
                 f"cache_type_k = f32\ncache_type_v = f32\n"
                 f"chat_template_file = {os.path.join(templates, file)}\n\n")
    # One model at a time, swapped: every section maps the same file.
    return text + "[group.g]\nswap = true\nexclusive = true\n"


def valid_call(name, args, label):
    check(name in SCHEMAS, f"{label}: unknown tool {name!r}")
    if isinstance(args, str):
        args = json.loads(args)
    jsonschema.validate(args, SCHEMAS[name])
    return args


# ---------------------------------------------------------------------------------------------------------------

def t_openai_required(srv):
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
    for seed in range(3):
        r = c.chat.completions.create(model="smol", messages=ASK, tools=TOOLS, tool_choice="required",
                                      temperature=1, seed=seed, max_tokens=120)
        ch = r.choices[0]
        check(ch.finish_reason == "tool_calls", f"seed {seed}: finish_reason {ch.finish_reason}")
        check(ch.message.tool_calls, f"seed {seed}: no tool_calls: {ch.message}")
        for tc in ch.message.tool_calls:
            check(tc.type == "function" and tc.id.startswith("call_"), f"call shape: {tc}")
            valid_call(tc.function.name, tc.function.arguments, f"seed {seed}")
    # Streamed: id, type and name in the first delta of each call, then the arguments in fragments.
    calls, fragments, finish = {}, 0, None
    for chunk in c.chat.completions.create(model="smol", messages=ASK, tools=TOOLS, tool_choice="required",
                                           temperature=1, seed=5, max_tokens=120, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check(tc.id and tc.function.name and tc.type == "function", f"first delta of a call: {tc}")
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "args": ""}
            else:
                check(tc.id is None and tc.function.name is None, f"later delta repeats id/name: {tc}")
            if tc.function.arguments:
                calls[tc.index]["args"] += tc.function.arguments
                fragments += 1
    check(finish == "tool_calls" and calls, f"stream: finish {finish}, calls {calls}")
    check(fragments > len(calls), f"arguments came in {fragments} fragments for {len(calls)} calls")
    for call in calls.values():
        valid_call(call["name"], call["args"], "stream")
    whole = c.chat.completions.create(model="smol", messages=ASK, tools=TOOLS, tool_choice="required",
                                      temperature=1, seed=5, max_tokens=120).choices[0].message.tool_calls
    check([(t.function.name, t.function.arguments) for t in whole] ==
          [(v["name"], v["args"]) for _, v in sorted(calls.items())], f"stream {calls} != whole {whole}")
    # A named function, and parallel_tool_calls false: exactly one call of it.
    r = c.chat.completions.create(model="smol", messages=ASK, tools=TOOLS, parallel_tool_calls=False,
                                  tool_choice={"type": "function", "function": {"name": "get_time"}},
                                  temperature=1, seed=2, max_tokens=120)
    tcs = r.choices[0].message.tool_calls
    check(len(tcs) == 1 and tcs[0].function.name == "get_time", f"named: {tcs}")
    valid_call("get_time", tcs[0].function.arguments, "named")
    # auto: a call or an answer, either well formed.
    r = c.chat.completions.create(model="smol", messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)
    m = r.choices[0].message
    check(bool(m.tool_calls) or bool(m.content), f"auto: {m}")
    for tc in m.tool_calls or []:
        valid_call(tc.function.name, tc.function.arguments, "auto")


def t_openai_round_trip(srv):
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
    for model in ["smol", "hermes", "llama31"]:
        r = c.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice="required",
                                      temperature=0, max_tokens=120)
        m = r.choices[0].message
        check(m.tool_calls, f"{model}: no call: {m}")
        history = ASK + [m.model_dump(exclude_none=True)] + [
            {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"temperature_c": 18, "sky": "sunny"})}
            for tc in m.tool_calls]
        r = c.chat.completions.create(model=model, messages=history, tools=TOOLS, tool_choice="none",
                                      temperature=0, max_tokens=40)
        ch = r.choices[0]
        check(ch.message.content and not ch.message.tool_calls and ch.finish_reason in ("stop", "length"),
              f"{model}: the answer after the tool result: {ch}")


def t_openai_errors(srv):
    def err(body):
        status, j = srv.post("/v1/chat/completions", {"model": "smol", "messages": ASK, **body})
        return status, j.get("error", {}) if isinstance(j, dict) else {}
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]
    status, e = err({"tools": bad})
    check(status == 400 and e.get("param") == "tools[0].function.parameters" and "not" in e["message"],
          f"invalid schema: {status} {e}")
    status, e = err({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    check(status == 400 and e.get("param") == "tool_choice" and "nope" in e["message"], f"unknown choice: {status} {e}")
    status, e = err({"messages": ASK + [{"role": "tool", "tool_call_id": "call_x", "content": "1"}], "tools": TOOLS})
    check(status == 400 and "answers no call" in e["message"], f"orphan tool message: {status} {e}")
    status, e = err({"tools": TOOLS, "response_format": {"type": "json_object"}})
    check(status == 400 and e.get("param") == "response_format", f"tools + response_format: {status} {e}")
    status, e = err({"tools": [{"type": "function", "function": {"name": "bad name!"}}]})
    check(status == 400 and e.get("param") == "tools[0].function.name", f"bad name: {status} {e}")
    status, e = err({"tool_choice": "required"})
    check(status == 400 and e.get("param") == "tool_choice", f"required without tools: {status} {e}")


def t_native_formats(srv):
    """Each format: required gives a call that the format's parser reads back and that validates."""
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=180)
    failures = []
    for name, _ in NATIVE:
        # Command R7B's prompt opens its thinking block, and SmolLM2 never closes it: calls right away instead.
        extra = {"reasoning_format": "none"} if name == "command-r7b" else {}
        try:
            # One call (parallel_tool_calls false): the grammar is then complete and the reply ends there.
            r = c.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice="required",
                                          parallel_tool_calls=False, temperature=1, seed=3, max_tokens=150,
                                          extra_body=extra)
            tcs = r.choices[0].message.tool_calls
            check(tcs and r.choices[0].finish_reason == "tool_calls", f"{name}: {r.choices[0]}")
            for tc in tcs:
                valid_call(tc.function.name, tc.function.arguments, name)
            streamed = {}
            for chunk in c.chat.completions.create(model=name, messages=ASK, tools=TOOLS, tool_choice="required",
                                                   parallel_tool_calls=False, temperature=1, seed=3, max_tokens=150,
                                                   stream=True, extra_body=extra):
                for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    s = streamed.setdefault(tc.index, {"name": tc.function.name, "args": ""})
                    s["args"] += tc.function.arguments or ""
            check([(t.function.name, t.function.arguments) for t in tcs] ==
                  [(v["name"], v["args"]) for _, v in sorted(streamed.items())], f"{name}: stream differs")
        except (CheckFailed, jsonschema.ValidationError, json.JSONDecodeError, openai.APIError) as e:
            failures.append(f"{name}: {e}")
    check(not failures, "; ".join(failures))


def t_reasoning(srv):
    """DeepSeek R1's template opens <think> in the prompt (with enable_thinking): what follows is reasoning until
    </think>; without it the template closes the block at once."""
    c = openai.OpenAI(base_url=srv.base + "/v1", api_key="none", max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "Why is the sky blue?"}]
    think = {"chat_template_kwargs": {"enable_thinking": True}}
    r = c.chat.completions.create(model="r1", messages=msgs, temperature=0, max_tokens=24, extra_body=think)
    m = r.choices[0].message.model_dump()
    check(m.get("reasoning_content") and not m.get("content"), f"r1 split: {m}")
    r = c.chat.completions.create(model="r1", messages=msgs, temperature=0, max_tokens=24)
    check(r.choices[0].message.content and not r.choices[0].message.model_dump().get("reasoning_content"),
          f"r1 without thinking: {r.choices[0].message}")
    status, j = srv.post("/v1/chat/completions", {"model": "r1", "messages": msgs, "temperature": 0, "max_tokens": 24,
                                                  "reasoning_format": "none", **think})
    raw = j["choices"][0]["message"]
    check(status == 200 and raw["content"].strip() == m["reasoning_content"].strip() and
          "reasoning_content" not in raw, f"reasoning_format none: {raw}")
    streamed = "".join(ch.choices[0].delta.model_dump().get("reasoning_content") or "" for ch in
                       c.chat.completions.create(model="r1", messages=msgs, temperature=0, max_tokens=24, stream=True,
                                                 extra_body=think)
                       if ch.choices)
    check(streamed.strip() == m["reasoning_content"].strip(), f"streamed reasoning {streamed!r}")
    o = ollama.Client(host=srv.base, timeout=120)
    r = o.chat(model="r1", messages=msgs, think=True, options={"temperature": 0, "num_predict": 24})
    check(r.message.thinking and not r.message.content, f"ollama think: {r.message}")
    r = o.chat(model="r1", messages=msgs, think=False, options={"temperature": 0, "num_predict": 24})
    check(r.message.content and not r.message.thinking, f"ollama think false: {r.message}")


def t_ollama(srv):
    o = ollama.Client(host=srv.base, timeout=120)
    # Ollama has no tool_choice: the model chooses (greedy, this question gets a call from SmolLM2).
    r = o.chat(model="smol", messages=ASK, tools=TOOLS, options={"temperature": 0, "num_predict": 120})
    check(r.message.tool_calls, f"ollama: no call: {r.message}")
    for tc in r.message.tool_calls:
        check(isinstance(tc.function.arguments, dict), f"arguments as an object: {tc}")
        valid_call(tc.function.name, tc.function.arguments, "ollama")
    calls = []
    for part in o.chat(model="smol", messages=ASK, tools=TOOLS, stream=True,
                       options={"temperature": 0, "num_predict": 120}):
        calls += part.message.tool_calls or []
    check([(t.function.name, t.function.arguments) for t in calls] ==
          [(t.function.name, t.function.arguments) for t in r.message.tool_calls], f"ollama stream: {calls}")
    history = ASK + [r.message, {"role": "tool", "content": "18 degrees and sunny", "tool_name": "get_weather"}]
    r2 = o.chat(model="smol", messages=history, options={"temperature": 0, "num_predict": 40})
    check(r2.message.content and not r2.message.tool_calls, f"ollama round trip: {r2.message}")
    caps = o.show("smol").capabilities
    check("tools" in caps and "completion" in caps, f"capabilities: {caps}")
    o.chat(model="r1", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 1})
    check("thinking" in o.show("r1").capabilities, f"r1 capabilities: {o.show('r1').capabilities}")


def t_langchain(srv):
    try:
        from langchain_openai import ChatOpenAI
        from langchain_core.messages import ToolMessage
    except ImportError as e:
        print(f"note: LangChain check skipped ({e})", flush=True)
        return
    llm = ChatOpenAI(base_url=srv.base + "/v1", api_key="none", model="smol", temperature=0, max_tokens=120,
                     max_retries=0)
    bound = llm.bind_tools(TOOLS, tool_choice="required")
    msg = bound.invoke("What is the weather in Paris?")
    check(msg.tool_calls, f"bind_tools: {msg}")
    for tc in msg.tool_calls:
        valid_call(tc["name"], tc["args"], "langchain")
    merged = None
    for chunk in bound.stream("What is the weather in Paris?"):
        merged = chunk if merged is None else merged + chunk
    check(merged.tool_calls and merged.tool_calls[0]["name"] == msg.tool_calls[0]["name"] and
          merged.tool_calls[0]["args"] == msg.tool_calls[0]["args"], f"streamed bind_tools: {merged.tool_calls}")
    answer = llm.bind_tools(TOOLS, tool_choice="none").invoke(
        ["What is the weather in Paris?", msg, ToolMessage(content="18 degrees", tool_call_id=msg.tool_calls[0]["id"])])
    check(answer.content and not answer.tool_calls, f"langchain round trip: {answer}")


def t_anthropic(srv):
    try:
        import anthropic
    except ImportError as e:
        raise CheckFailed(f"the anthropic client is needed: {e}")
    c = anthropic.Anthropic(base_url=srv.base, api_key="none", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    T = {"temperature": 0}
    r = c.messages.create(model="smol", max_tokens=120, messages=ASK, tools=tools, tool_choice={"type": "any"},
                          extra_body=T)
    uses = [b for b in r.content if b.type == "tool_use"]
    check(r.stop_reason == "tool_use" and uses, f"anthropic: {r}")
    for u in uses:
        check(u.id.startswith("toolu_"), f"tool_use id {u.id}")
        valid_call(u.name, u.input, "anthropic")
    with c.messages.stream(model="smol", max_tokens=120, messages=ASK, tools=tools, tool_choice={"type": "any"},
                           extra_body=T) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    check(kinds[0] == "message_start" and "content_block_start" in kinds and "message_stop" in kinds,
          f"events: {kinds}")
    check([(b.name, b.input) for b in final.content if b.type == "tool_use"] == [(u.name, u.input) for u in uses],
          f"streamed {final.content} != {r.content}")
    r = c.messages.create(model="smol", max_tokens=120, messages=ASK, tools=tools,
                          tool_choice={"type": "tool", "name": "get_time"}, extra_body=T)
    check([b.name for b in r.content if b.type == "tool_use"][:1] == ["get_time"], f"named: {r.content}")
    # The round trip: the call, its result, an answer.
    history = ASK + [{"role": "assistant", "content": [u.model_dump(exclude_none=True) for u in uses]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": "18 C, sunny"}
                                                  for u in uses]}]
    r = c.messages.create(model="smol", max_tokens=40, messages=history, tools=tools, tool_choice={"type": "none"},
                          system="You are terse.", extra_body=T)
    check(r.stop_reason in ("end_turn", "max_tokens") and r.content and r.content[0].type == "text" and
          r.content[0].text, f"anthropic round trip: {r}")
    n = c.messages.count_tokens(model="smol", messages=ASK, tools=tools)
    check(n.input_tokens > 20, f"count_tokens: {n}")
    r = c.messages.create(model="smol", max_tokens=40, messages=[{"role": "user", "content": "Count: one two three"}],
                          stop_sequences=["three", "four"], extra_body=T)
    check(r.stop_reason == "stop_sequence" and r.stop_sequence in ("three", "four"), f"stop_sequence: {r}")
    r = c.messages.create(model="r1", max_tokens=16, messages=[{"role": "user", "content": "Why is the sky blue?"}],
                          thinking={"type": "enabled", "budget_tokens": 1024}, extra_body=T)
    check(r.content and r.content[0].type == "thinking" and r.content[0].thinking, f"thinking block: {r.content}")
    try:
        c.messages.create(model="smol", max_tokens=10, messages=ASK, tools=tools,
                          tool_choice={"type": "tool", "name": "nope"})
        raise CheckFailed("unknown tool accepted")
    except anthropic.BadRequestError as e:
        check(e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", f"{e.body}")
    status, body = srv.post("/v1/messages", {"model": "smol", "messages": ASK})
    check(status == 400 and body["error"]["type"] == "invalid_request_error" and "max_tokens" in body["error"]["message"],
          f"missing max_tokens: {status} {body}")
    status, body = srv.post("/v1/messages", {"model": "nope", "max_tokens": 5, "messages": ASK})
    check(status == 404 and body["error"]["type"] == "not_found_error", f"unknown model: {status} {body}")


TESTS = [t_openai_required, t_openai_round_trip, t_openai_errors, t_ollama, t_langchain, t_anthropic, t_reasoning,
         t_native_formats]


def main():
    global ARGS
    ap = sy_server.argument_parser()
    ap.add_argument("--only", nargs="*")
    ARGS = sy_server.parse_arguments(ap)
    gguf = find_model()
    if gguf is None:
        print("skipped: SmolLM2-135M-Instruct.Q4_1.gguf not found (set SY_SMOLLM2_GGUF)")
        return SKIP
    failed = sy_server.run_tests(Server("tools", config(gguf)), TESTS, ARGS.only,
                                 expected=(CheckFailed, jsonschema.ValidationError), stop_timeout=30)
    print(f"{len(failed)} failed")
    return min(len(failed), 76)


if __name__ == "__main__":
    sys.exit(main())
