#!/usr/bin/env python3
"""Expected renderings of real chat templates, made with the reference: transformers' own apply_chat_template path
(its _normalize_chat_messages, then render_jinja_template: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks, loopcontrols, transformers' tojson, raise_exception, strftime_now, dict, namespace and the
{% generation %} block). Dev time only; the suite reads what this writes.

    tools/oracle/chat_template_fixtures.py [--templates DIR] [--out tests/fixtures/chat-templates]

Copies every DIR/*.jinja (and DIR/LICENSE*) to OUT/templates/, writes OUT/conversations.json (the requests, as
`switchyard chat-template` and sy_chat_jinja_apply take them) and OUT/expected/<template>.json: for each
conversation either {"text": ...} or, where jinja2 raises, {"error": message, "kind": exception class}.
strftime_now sees a fixed time (FIXED_NOW, UTC) so the fixtures are reproducible; the C side gets the same
time through SY_CHAT_TEMPLATE_NOW / sy_chat_jinja_options.now_unix.
"""
import argparse
import calendar
import copy
import datetime as _dt
import json
import os
import shutil
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

FIXED_NOW = _dt.datetime(2026, 3, 7, 9, 5, 0)
FIXED_NOW_UNIX = calendar.timegm(FIXED_NOW.timetuple())


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


# transformers' strftime_now calls datetime.now() through the module's own name
ctu.datetime = _FixedDatetime

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web and return the top results.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "max_results": {"type": "integer", "description": "How many results", "default": 5},
            },
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    {"name": "user_only", "request": {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True}},
    {"name": "system_user", "request": {"messages": [SYSTEM, {"role": "user", "content": "What is 2+2?"}],
                                        "add_generation_prompt": True}},
    {"name": "multi_turn", "request": {"messages": [
        SYSTEM, {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am an assistant."},
        {"role": "user", "content": "Tell me a joke."}], "add_generation_prompt": True}},
    {"name": "multi_turn_no_gen", "request": {"messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
        "add_generation_prompt": False}},
    {"name": "non_ascii", "request": {"messages": [
        {"role": "system", "content": "Réponds en français. «Guillemets» — tirets."},
        {"role": "user", "content": "Grüße aus 東京! Привет 👋 \"quoted\" and a back\\slash\ttab"},
        {"role": "assistant", "content": "こんにちは! Ça va très bien. 🚀"},
        {"role": "user", "content": "  spaced out  \n\nwith blank lines\n"}], "add_generation_prompt": True}},
    {"name": "content_parts", "request": {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]}],
        "add_generation_prompt": True}},
    {"name": "tools_offered", "request": {"messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}],
                                          "tools": TOOLS, "add_generation_prompt": True}},
    {"name": "tools_no_system", "request": {"messages": [{"role": "user", "content": "Find news about Mars."}],
                                            "tools": TOOLS, "add_generation_prompt": True}},
    {"name": "tool_round_trip", "request": {"messages": [
        SYSTEM, {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 18, \"sky\": \"clear\"}"}],
        "tools": TOOLS, "add_generation_prompt": True}},
    {"name": "parallel_tool_calls", "request": {"messages": [
        {"role": "user", "content": "Weather in Paris and in Tokyo, in celsius?"},
        {"role": "assistant", "content": "", "tool_calls": [
            call("call_a", "get_weather", {"city": "Paris", "unit": "celsius"}),
            call("call_b", "get_weather", {"city": "Tokyo", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "18 degrees, clear"},
        {"role": "tool", "tool_call_id": "call_b", "name": "get_weather", "content": "22 degrees, rain"},
        {"role": "assistant", "content": "Paris: 18°C and clear. Tokyo: 22°C with rain."},
        {"role": "user", "content": "Thanks! Now search for umbrellas."}],
        "tools": TOOLS, "add_generation_prompt": True}},
    {"name": "tool_call_string_arguments", "request": {"messages": [
        {"role": "user", "content": "Search for cats."},
        {"role": "assistant", "content": None,
         "tool_calls": [call("call_9", "search_web", "{\"query\": \"cats\", \"max_results\": 3}")]},
        {"role": "tool", "tool_call_id": "call_9", "content": "1. Cats are great."}],
        "tools": TOOLS, "add_generation_prompt": True}},
    {"name": "reasoning_in_history", "request": {"messages": [
        {"role": "user", "content": "What is 17*3?"},
        {"role": "assistant", "reasoning_content": "17*3 = 51.", "content": "51"},
        {"role": "user", "content": "And 51*2?"}], "add_generation_prompt": True}},
    {"name": "thinking_disabled", "request": {"messages": [{"role": "user", "content": "Quick: capital of Italy?"}],
                                              "add_generation_prompt": True,
                                              "chat_template_kwargs": {"enable_thinking": False}}},
    {"name": "thinking_enabled_effort", "request": {"messages": [SYSTEM, {"role": "user", "content": "Prove it."}],
                                                    "add_generation_prompt": True,
                                                    "chat_template_kwargs": {"enable_thinking": True,
                                                                             "reasoning_effort": "high"}}},
    {"name": "reasoning_thinking_disabled", "request": {"messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "reasoning_content": "Greeting.", "content": "Hello!"},
        {"role": "user", "content": "Bye"}], "add_generation_prompt": True,
        "chat_template_kwargs": {"enable_thinking": False}}},
]

BOS, EOS = "<s>", "</s>"


def render(template, request):
    req = copy.deepcopy(request)
    conv = ctu._normalize_chat_messages(req["messages"])
    kwargs = {"bos_token": req.get("bos_token", BOS), "eos_token": req.get("eos_token", EOS)}
    kwargs.update(req.get("chat_template_kwargs") or {})
    rendered, _ = ctu.render_jinja_template(
        conversations=[conv], tools=req.get("tools"), documents=req.get("documents"), chat_template=template,
        add_generation_prompt=req.get("add_generation_prompt", False), **kwargs)
    return rendered[0]


def atomic_write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default="/work/shared/chat-templates")
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "chat-templates"))
    args = ap.parse_args()
    tdir = os.path.join(args.out, "templates")
    edir = os.path.join(args.out, "expected")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(edir, exist_ok=True)
    for name in sorted(os.listdir(args.templates)):
        if name.endswith(".jinja") or name.startswith("LICENSE"):
            shutil.copyfile(os.path.join(args.templates, name), os.path.join(tdir, name))
    convs = []
    for c in CONVERSATIONS:
        req = dict(c["request"])
        req.setdefault("bos_token", BOS)
        req.setdefault("eos_token", EOS)
        convs.append({"name": c["name"], "request": req})
    atomic_write(os.path.join(args.out, "conversations.json"),
                 json.dumps({"now_unix": FIXED_NOW_UNIX, "jinja2": jinja2.__version__,
                             "transformers": transformers.__version__, "conversations": convs},
                            ensure_ascii=False, indent=1) + "\n")
    n_text = n_err = 0
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            template = f.read()
        results = {}
        for c in convs:
            try:
                results[c["name"]] = {"text": render(template, c["request"])}
                n_text += 1
            except Exception as e:  # jinja2 raising is an expected outcome: the fixture records it
                results[c["name"]] = {"error": str(e), "kind": type(e).__name__}
                n_err += 1
        atomic_write(os.path.join(edir, name[:-len(".jinja")] + ".json"),
                     json.dumps(results, ensure_ascii=False, indent=1) + "\n")
    print(f"{n_text} renderings, {n_err} errors, {len(convs)} conversations", file=sys.stderr)


if __name__ == "__main__":
    main()
