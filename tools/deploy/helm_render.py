#!/usr/bin/env python3
"""Renders a Helm chart offline, as `helm template` would, for the subset of Helm's template language that
deploy/helm/switchyard uses. Helm itself is not packaged for Debian 12 or PyPI, so the suite renders the chart
with this and validates the result against the Kubernetes schemas (tests/deploy).

What it implements, with Go text/template and Helm semantics:
  - actions {{ }} with the trim markers {{- and -}}, comments {{/* */}};
  - if / else if / else / end, range (over lists and maps, with `$k, $v :=` or `$v :=`), with, define,
    include, template; variables ($, $name) and field chains (.Values.a.b, $.Release.Name, $v.x);
  - pipelines with `|`, parenthesised sub-pipelines, string, number and bool literals;
  - the functions: include quote squote toYaml nindent indent add sub mul div mod max min default required
    printf print int toString trunc trimSuffix trimPrefix replace lower upper eq ne lt le gt ge and or not
    empty len sha256sum b64enc hasKey;
  - values as Helm reads them: numbers from values files are float64 (so they print as Go prints a float64:
    1e+06 for a million, which is why charts pass big numbers through `int`), `--set` numbers are int64;
  - templates/*.yaml|yml|tpl rendered in name order, files starting with `_` holding only definitions, NOTES.txt
    skipped, documents that render empty dropped; each document headed `# Source: CHART/templates/FILE`.
Anything else in a template is an error naming the file and the action, never a silent difference.

Usage: helm_render.py CHART_DIR [--release NAME] [--namespace NS] [-f VALUES.yaml ...] [--set a.b=c ...]
"""
import argparse
import base64
from decimal import Decimal
import hashlib
import math
import os
import re
import sys

import yaml


class TemplateError(Exception):
    pass


# ---------------------------------------------------------------------------------------------------------------
# Values


class GoFloat(float):
    """A number read from a values file: Helm holds it as a float64."""


def as_go_values(obj):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, float)):
        return GoFloat(obj)
    if isinstance(obj, dict):
        return {str(k): as_go_values(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_go_values(v) for v in obj]
    return obj


def merge_values(base, override):
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_values(out[k], v)
        elif v is None:
            out.pop(k, None)  # Helm: null deletes a default
        else:
            out[k] = v
    return out


def parse_set_value(text):
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)  # --set numbers are int64
    return text


def apply_set(values, assignment):
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise TemplateError(f"--set {assignment!r}: expected KEY=VALUE")
    parts = key.split(".")
    node = values
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = parse_set_value(value)


# ---------------------------------------------------------------------------------------------------------------
# Printing values as Go's fmt %v does


def go_float(f):
    """A float64 as Go's %v prints it: the shortest digits that read back, in %e form when the exponent is below
    -4 or at least 6 (strconv's rule for the shortest precision)."""
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "0"
    sign = "-" if f < 0 else ""
    d = Decimal(repr(abs(float(f))))
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    exp = d.adjusted()
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    if exp >= 0:
        whole = digits[:exp + 1].ljust(exp + 1, "0")
        rest = digits[exp + 1:]
        return sign + whole + ("." + rest if rest else "")
    return sign + "0." + "0" * (-exp - 1) + digits


def go_str(v):
    if v is None:
        return "<no value>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, GoFloat):
        return go_float(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "[" + " ".join(go_str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_str(v[k])}" for k in sorted(v)) + "]"
    return str(v)


def truthy(v):
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v != 0
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def to_int(v):
    if v is None:
        return 0
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, str):
        try:
            return int(float(v)) if v.strip() else 0
        except ValueError:
            return 0  # cast.ToInt64 gives 0 for what it cannot read
    return 0


def plain(obj):
    """Values as sigs.k8s.io/yaml marshals them: whole float64s are integers."""
    if isinstance(obj, float) and not isinstance(obj, bool) and obj.is_integer():
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


def to_yaml(v):
    if v is None:
        return "null"
    text = yaml.safe_dump(plain(v), default_flow_style=False, sort_keys=True, allow_unicode=True)
    if text.endswith("...\n"):
        text = text[:-4]
    return text.rstrip("\n")  # Helm's toYaml trims the final newline


def go_quote(s):
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_printf(fmt, args):
    out, i, a = [], 0, 0
    while i < len(fmt):
        ch = fmt[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(fmt):
            raise TemplateError("printf: a lone % at the end of the format")
        verb = fmt[i + 1]
        i += 2
        if verb == "%":
            out.append("%")
            continue
        if a >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        v = args[a]
        a += 1
        if verb in "sv":
            out.append(go_str(v))
        elif verb == "d":
            out.append(str(to_int(v)) if not isinstance(v, GoFloat) else f"%!d(float64={go_float(v)})")
        elif verb == "q":
            out.append(go_quote(go_str(v)))
        else:
            raise TemplateError(f"printf: the verb %{verb} is not supported")
    return "".join(out)


# ---------------------------------------------------------------------------------------------------------------
# Lexing and parsing

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)


def split_template(text, name):
    """[(kind, value)] of 'text' and 'action' pieces with the trim markers applied."""
    pieces = []
    pos = 0
    for m in ACTION.finditer(text):
        before = text[pos:m.start()]
        body = m.group(2)
        if m.group(1):
            before = before.rstrip(" \t\r\n")
        pieces.append(["text", before])
        stripped = body.strip()
        if stripped.startswith("/*"):
            if not stripped.endswith("*/"):
                raise TemplateError(f"{name}: an unclosed comment")
            pieces.append(["comment", ""])
        else:
            pieces.append(["action", stripped])
        pieces.append(["trim_after", bool(m.group(3))])
        pos = m.end()
    pieces.append(["text", text[pos:]])
    out = []
    trim_next = False
    for kind, value in pieces:
        if kind == "trim_after":
            trim_next = value
            continue
        if kind == "text":
            if trim_next:
                value = value.lstrip(" \t\r\n")
            trim_next = False
            if value:
                out.append(("text", value))
        else:
            trim_next = False
            out.append((kind, value))
    return out


TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<declare>:=)
  | (?P<assign>=)
  | (?P<pipe>\|)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
""", re.X)


def tokenize(expr, where):
    toks, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise TemplateError(f"{where}: cannot read {expr[pos:]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            toks.append((m.lastgroup, m.group()))
    return toks


class Parser:
    """Turns a token list into a pipeline: ('pipe', decl_vars, [command]), command = [operand]."""

    def __init__(self, toks, where):
        self.toks, self.i, self.where = toks, 0, where

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def pipeline(self, stop=None):
        decl = []
        # $a := or $a, $b :=
        j = self.i
        names = []
        while j < len(self.toks) and self.toks[j][0] == "var":
            names.append(self.toks[j][1])
            if j + 1 < len(self.toks) and self.toks[j + 1][0] == "comma":
                j += 2
                continue
            if j + 1 < len(self.toks) and self.toks[j + 1][0] in ("declare", "assign"):
                decl = names
                self.i = j + 2
            break
        cmds = [self.command(stop)]
        while self.peek()[0] == "pipe":
            self.take()
            cmds.append(self.command(stop))
        return ("pipe", decl, cmds)

    def command(self, stop):
        ops = []
        while True:
            kind, _ = self.peek()
            if kind is None or kind in ("pipe", "rparen") or kind == stop:
                break
            ops.append(self.operand())
        if not ops:
            raise TemplateError(f"{self.where}: an empty command")
        return ops

    def operand(self):
        kind, text = self.take()
        if kind == "string":
            return ("lit", bytes(text[1:-1], "utf-8").decode("unicode_escape"))
        if kind == "raw":
            return ("lit", text[1:-1])
        if kind == "number":
            return ("lit", float(text) if "." in text else int(text))
        if kind == "lparen":
            p = self.pipeline()
            if self.take()[0] != "rparen":
                raise TemplateError(f"{self.where}: a missing )")
            return ("sub", p)
        if kind == "var":
            name, _, rest = text.partition(".")
            return ("var", name, rest.split(".") if rest else [])
        if kind == "field":
            return ("field", [p for p in text.split(".") if p])
        if kind == "ident":
            if text in ("true", "false"):
                return ("lit", text == "true")
            if text == "nil":
                return ("lit", None)
            return ("func", text)
        raise TemplateError(f"{self.where}: unexpected {text!r}")


def parse_pipeline(expr, where):
    p = Parser(tokenize(expr, where), where)
    pipe = p.pipeline()
    if p.i != len(p.toks):
        raise TemplateError(f"{where}: unexpected {p.toks[p.i][1]!r} in {{{{ {expr} }}}}")
    return pipe


KEYWORD = re.compile(r"^(if|else if|else|end|range|with|define|template|block)\b\s*(.*)$", re.S)


def parse_nodes(pieces, name, defines):
    """A tree of ('text', s) / ('out', pipe) / ('if', [(cond, body)], else) / ('range', pipe, body, else) /
    ('with', pipe, body, else) / ('template', name, pipe) nodes; defines filled with name -> body."""
    pos = 0

    def block(terminators):
        nonlocal pos
        nodes = []
        while pos < len(pieces):
            kind, value = pieces[pos]
            pos += 1
            if kind == "text":
                nodes.append(("text", value))
                continue
            if kind == "comment":
                continue
            m = KEYWORD.match(value)
            word = m.group(1) if m else None
            rest = m.group(2) if m else None
            where = f"{name}: {{{{ {value} }}}}"
            if word in terminators:
                return nodes, word, rest
            if word in ("end", "else", "else if"):
                raise TemplateError(f"{where}: unexpected here")
            if word == "if":
                branches, otherwise = [], None
                cond = parse_pipeline(rest, where)
                while True:
                    body, term, term_rest = block(("end", "else", "else if"))
                    branches.append((cond, body))
                    if term == "else if":
                        cond = parse_pipeline(term_rest, where)
                        continue
                    if term == "else":
                        otherwise, term, _ = block(("end",))
                    break
                nodes.append(("if", branches, otherwise))
            elif word in ("range", "with"):
                pipe = parse_pipeline(rest, where)
                body, term, _ = block(("end", "else"))
                otherwise = None
                if term == "else":
                    otherwise, _, _ = block(("end",))
                nodes.append((word, pipe, body, otherwise))
            elif word == "define":
                dname = parse_pipeline(rest, where)
                if dname[2][0][0][0] != "lit":
                    raise TemplateError(f"{where}: define needs a quoted name")
                body, _, _ = block(("end",))
                defines[dname[2][0][0][1]] = body
            elif word == "template":
                pipe = parse_pipeline(rest, where)
                first = pipe[2][0]
                if first[0][0] != "lit":
                    raise TemplateError(f"{where}: template needs a quoted name")
                arg = ("pipe", [], [first[1:]]) if len(first) > 1 else None
                nodes.append(("template", first[0][1], arg))
            elif word == "block":
                raise TemplateError(f"{where}: block is not supported")
            else:
                nodes.append(("out", parse_pipeline(value, where), where))
        if terminators:
            raise TemplateError(f"{name}: a missing {{{{ end }}}}")
        return nodes, None, None

    nodes, _, _ = block(())
    return nodes


# ---------------------------------------------------------------------------------------------------------------
# Evaluation


class Renderer:
    def __init__(self, root):
        self.root = root
        self.defines = {}
        self.include_depth = 0

    def field(self, obj, path, where):
        for p in path:
            if isinstance(obj, dict):
                obj = obj.get(p)
            elif obj is None:
                return None  # Helm renders missing values as empty (or <no value>)
            else:
                raise TemplateError(f"{where}: cannot read .{p} of a {type(obj).__name__}")
        return obj

    def call(self, fname, args, where):
        def need(n):
            if len(args) != n:
                raise TemplateError(f"{where}: {fname} takes {n} argument(s), got {len(args)}")
        f = fname
        if f == "include":
            need(2)
            return self.include(args[0], args[1], where)
        if f == "quote":
            return " ".join(go_quote(go_str(a) if a is not None else "") for a in args)
        if f == "squote":
            return " ".join("'" + (go_str(a) if a is not None else "") + "'" for a in args)
        if f == "toYaml":
            need(1)
            return to_yaml(args[0])
        if f in ("nindent", "indent"):
            need(2)
            pad = " " * to_int(args[0])
            text = pad + go_str(args[1]).replace("\n", "\n" + pad)
            return "\n" + text if f == "nindent" else text
        if f in ("add", "mul"):
            acc = 0 if f == "add" else 1
            for a in args:
                acc = acc + to_int(a) if f == "add" else acc * to_int(a)
            return acc
        if f in ("sub", "div", "mod"):
            need(2)
            a, b = to_int(args[0]), to_int(args[1])
            if f == "sub":
                return a - b
            if b == 0:
                raise TemplateError(f"{where}: {f} by zero")
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)  # Go truncates toward zero
            return q if f == "div" else a - q * b
        if f in ("max", "min"):
            vals = [to_int(a) for a in args]
            return max(vals) if f == "max" else min(vals)
        if f == "default":
            need(2)
            return args[1] if truthy(args[1]) else args[0]
        if f == "required":
            need(2)
            if args[1] is None or args[1] == "":
                raise TemplateError(f"{where}: {go_str(args[0])}")
            return args[1]
        if f == "printf":
            return go_printf(go_str(args[0]), args[1:])
        if f == "print":
            return "".join(go_str(a) for a in args)
        if f == "int":
            need(1)
            return to_int(args[0])
        if f == "toString":
            need(1)
            return go_str(args[0])
        if f == "trunc":
            need(2)
            n, s = to_int(args[0]), go_str(args[1])
            return s[:n] if n >= 0 else s[n:]
        if f in ("trimSuffix", "trimPrefix"):
            need(2)
            fix, s = go_str(args[0]), go_str(args[1])
            if f == "trimSuffix":
                return s[:-len(fix)] if fix and s.endswith(fix) else s
            return s[len(fix):] if fix and s.startswith(fix) else s
        if f == "replace":
            need(3)
            return go_str(args[2]).replace(go_str(args[0]), go_str(args[1]))
        if f in ("lower", "upper"):
            need(1)
            return go_str(args[0]).lower() if f == "lower" else go_str(args[0]).upper()
        if f in ("eq", "ne"):
            if len(args) < 2:
                raise TemplateError(f"{where}: {f} needs two arguments")
            a = args[0]
            same = any(self.equal(a, b) for b in args[1:]) if f == "eq" else not self.equal(a, args[1])
            return same
        if f in ("lt", "le", "gt", "ge"):
            need(2)
            a, b = args
            if isinstance(a, str) != isinstance(b, str):
                raise TemplateError(f"{where}: {f} of incompatible types")
            return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[f]
        if f == "and":
            for a in args:
                if not truthy(a):
                    return a
            return args[-1]
        if f == "or":
            for a in args:
                if truthy(a):
                    return a
            return args[-1]
        if f == "not":
            need(1)
            return not truthy(args[0])
        if f == "empty":
            need(1)
            return not truthy(args[0])
        if f == "len":
            need(1)
            return len(args[0]) if args[0] is not None else 0
        if f == "sha256sum":
            need(1)
            return hashlib.sha256(go_str(args[0]).encode()).hexdigest()
        if f == "b64enc":
            need(1)
            return base64.b64encode(go_str(args[0]).encode()).decode()
        if f == "hasKey":
            need(2)
            return isinstance(args[0], dict) and go_str(args[1]) in args[0]
        raise TemplateError(f"{where}: the function {fname} is not supported by this renderer")

    @staticmethod
    def equal(a, b):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and not isinstance(b, bool):
            return float(a) == float(b)
        return a == b

    def include(self, name, data, where):
        name = go_str(name)
        if name not in self.defines:
            raise TemplateError(f"{where}: no template named {name!r}")
        self.include_depth += 1
        if self.include_depth > 100:
            raise TemplateError(f"{where}: include nested too deep")
        try:
            return self.render_nodes(self.defines[name], data, [{"$": data}])
        finally:
            self.include_depth -= 1

    def lookup_var(self, scopes, name, where):
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        raise TemplateError(f"{where}: undefined variable {name}")

    def eval_operand(self, op, dot, scopes, where):
        kind = op[0]
        if kind == "lit":
            return op[1]
        if kind == "field":
            return self.field(dot, op[1], where)
        if kind == "var":
            return self.field(self.lookup_var(scopes, op[1], where), op[2], where)
        if kind == "sub":
            return self.eval_pipe(op[1], dot, scopes, where)
        if kind == "func":
            return self.call(op[1], [], where)
        raise TemplateError(f"{where}: bad operand")

    def eval_command(self, cmd, dot, scopes, where, piped):
        head = cmd[0]
        if head[0] == "func":
            args = [self.eval_operand(o, dot, scopes, where) for o in cmd[1:]]
            if piped is not _NONE:
                args.append(piped)
            return self.call(head[1], args, where)
        if len(cmd) > 1 or piped is not _NONE:
            raise TemplateError(f"{where}: only a function can take arguments")
        return self.eval_operand(head, dot, scopes, where)

    def eval_pipe(self, pipe, dot, scopes, where):
        _, decl, cmds = pipe
        value = _NONE
        for cmd in cmds:
            value = self.eval_command(cmd, dot, scopes, where, value)
        if decl:
            scopes[-1][decl[-1]] = value
        return value

    def render_nodes(self, nodes, dot, scopes):
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "out":
                _, pipe, where = node
                v = self.eval_pipe(pipe, dot, scopes, where)
                if not pipe[1]:  # a declaration prints nothing
                    out.append(go_str(v))
            elif kind == "if":
                _, branches, otherwise = node
                for cond, body in branches:
                    if truthy(self.eval_pipe(cond, dot, scopes + [{}], "if")):
                        out.append(self.render_nodes(body, dot, scopes + [{}]))
                        break
                else:
                    if otherwise is not None:
                        out.append(self.render_nodes(otherwise, dot, scopes + [{}]))
            elif kind == "with":
                _, pipe, body, otherwise = node
                v = self.eval_pipe(pipe, dot, scopes + [{}], "with")
                if truthy(v):
                    out.append(self.render_nodes(body, v, scopes + [{}]))
                elif otherwise is not None:
                    out.append(self.render_nodes(otherwise, dot, scopes + [{}]))
            elif kind == "range":
                _, pipe, body, otherwise = node
                _, decl, cmds = pipe
                coll = self.eval_pipe(("pipe", [], cmds), dot, scopes, "range")
                if isinstance(coll, dict):
                    items = [(k, coll[k]) for k in sorted(coll)]
                elif isinstance(coll, list):
                    items = list(enumerate(coll))
                elif coll is None:
                    items = []
                elif isinstance(coll, (int, float)) and not isinstance(coll, bool):
                    items = [(i, i) for i in range(to_int(coll))]
                else:
                    raise TemplateError(f"range over a {type(coll).__name__}")
                if not items and otherwise is not None:
                    out.append(self.render_nodes(otherwise, dot, scopes + [{}]))
                for k, v in items:
                    scope = {}
                    if len(decl) == 1:
                        scope[decl[0]] = v
                    elif len(decl) == 2:
                        scope[decl[0]], scope[decl[1]] = k, v
                    out.append(self.render_nodes(body, v, scopes + [scope]))
            elif kind == "template":
                _, name, arg = node
                data = self.eval_pipe(arg, dot, scopes, "template") if arg else None
                out.append(self.include(name, data, "template"))
        return "".join(out)


_NONE = object()


# ---------------------------------------------------------------------------------------------------------------
# Charts


def load_yaml_file(path):
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return data if data is not None else {}


def render_chart(chart_dir, release="RELEASE-NAME", namespace="default", value_files=(), sets=()):
    """[(template path, rendered text)] in name order; documents that render empty are left out."""
    chart = load_yaml_file(os.path.join(chart_dir, "Chart.yaml"))
    for key in ("apiVersion", "name", "version"):
        if key not in chart:
            raise TemplateError(f"{chart_dir}/Chart.yaml: {key} is missing")
    values = as_go_values(load_yaml_file(os.path.join(chart_dir, "values.yaml")))
    for vf in value_files:
        values = merge_values(values, as_go_values(load_yaml_file(vf)))
    for s in sets:
        apply_set(values, s)
    tdir = os.path.join(chart_dir, "templates")
    names = sorted(n for n in os.listdir(tdir) if n.endswith((".yaml", ".yml", ".tpl")))
    root = {
        "Values": values,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True,
                    "IsUpgrade": False, "Revision": 1},
        "Chart": {"Name": chart["name"], "Version": chart["version"],
                  "AppVersion": chart.get("appVersion", ""), "Description": chart.get("description", "")},
        "Capabilities": {"KubeVersion": {"Version": "v1.33.0", "Major": "1", "Minor": "33"}},
        "Template": {"BasePath": f"{chart['name']}/templates"},
    }
    r = Renderer(root)
    parsed = []
    for n in names:
        with open(os.path.join(tdir, n), encoding="utf-8") as f:
            text = f.read()
        nodes = parse_nodes(split_template(text, n), n, r.defines)
        parsed.append((n, nodes))
    out = []
    for n, nodes in parsed:
        if n.startswith("_"):
            continue
        root["Template"]["Name"] = f"{chart['name']}/templates/{n}"
        text = r.render_nodes(nodes, root, [{"$": root}])
        for doc in re.split(r"(?m)^---\s*$", text):
            if doc.strip() and any(line.strip() and not line.lstrip().startswith("#")
                                   for line in doc.splitlines()):
                out.append((f"{chart['name']}/templates/{n}", doc.strip() + "\n"))  # as Helm trims them
    return out


def render_to_text(docs):
    return "".join(f"---\n# Source: {src}\n{doc}" for src, doc in docs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chart")
    ap.add_argument("--release", default="RELEASE-NAME")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("-f", "--values", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args(argv)
    try:
        docs = render_chart(args.chart, args.release, args.namespace, args.values, args.set)
    except (TemplateError, yaml.YAMLError, OSError) as e:
        print(f"helm_render: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(render_to_text(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
