#!/usr/bin/env python3
"""Checks the hand-written expectations of tests/host/test_chat_jinja.c (every `expect(template, request, want)`)
against jinja2 configured as transformers configures it, so that those unit tests hold the reference's answers.
Dev time only:  tools/oracle/check_chat_jinja_units.py   (exit status 1 when one differs)"""
import datetime as dt
import json
import os
import re
import sys

import transformers.utils.chat_template_utils as ctu


class _Fixed(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime(2026, 3, 7, 9, 5, 0)  # 1772874300, the C tests' now_unix


ctu.datetime = _Fixed


def c_string(s):
    """A C string literal's body -> its text (the escapes these tests use: \\n \\r \\t \\" \\\\, UTF-8 as is)."""
    return s.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    src = open(os.path.join(root, "tests", "host", "test_chat_jinja.c"), encoding="utf-8").read()
    pat = re.compile(r'expect\("((?:[^"\\]|\\.)*)",\s*(NULL|"((?:[^"\\]|\\.)*)"),\s*"((?:[^"\\]|\\.)*)"\);', re.S)
    checked = bad = 0
    for m in pat.finditer(src):
        tpl = c_string(m.group(1))
        req = json.loads(c_string(m.group(3))) if m.group(3) is not None else {"messages": []}
        want = c_string(m.group(4))
        try:
            got = ctu.render_jinja_template([req["messages"]], tools=req.get("tools"), chat_template=tpl,
                                            **(req.get("chat_template_kwargs") or {}))[0][0]
        except Exception as e:  # noqa: BLE001 - reported as a difference
            got = f"<raises {type(e).__name__}: {e}>"
        checked += 1
        if got != want:
            bad += 1
            print(f"DIFF {tpl!r}\n  jinja2: {got!r}\n  test:   {want!r}")
    print(f"{checked} expectations checked, {bad} differ", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
