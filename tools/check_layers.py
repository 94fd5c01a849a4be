#!/usr/bin/env python3
"""The include graph of host/, plugins/, kernels/ and abi/: fails on an include cycle or an include that goes
up a layer.

Components and what each may include (besides itself):
  abi                      nothing
  kernels/cpu, kernels/cuda  nothing
  plugins/common           abi, kernels/cpu
  plugins/<engine>         abi, plugins/common, kernels/cpu, kernels/cuda
  host/<folder>            abi and the host folders below it (HOST_LAYERS)

A cycle is checked between modules (x.c, x.h and a private x_internal.h together), so a.c including b.h while
b.c includes a.h counts.

Usage: tools/check_layers.py [ROOT]      (ROOT: the repository, default: this script's parent's parent)
       tools/check_layers.py --self-test (plants a cycle and an upward include in a scratch tree, expects both)
"""
import os
import re
import sys
import tempfile

# Each host folder and the host folders it may use. Order matters only for the report.
HOST_LAYERS = {
    "base": set(),
    "config": {"base"},
    "plugins": {"base"},
    "chat": {"base"},
    "grammar": {"base"},
    "http": {"base"},
    "engine": {"base", "plugins", "grammar"},
    "persist": {"base", "plugins", "engine"},
    "manager": {"base", "config", "plugins", "engine", "persist"},
    "api": {"base", "config", "plugins", "chat", "grammar", "engine", "persist", "manager", "http"},
    "cli": {"base", "config", "plugins", "chat", "grammar", "engine", "persist", "manager", "http", "api"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")


def component(rel):
    """The component a repository-relative path belongs to, or None when it is not checked."""
    parts = rel.split("/")
    if parts[0] == "abi":
        return "abi"
    if parts[0] == "kernels" and len(parts) > 2:
        return "kernels/" + parts[1]
    if parts[0] == "plugins" and len(parts) > 2:
        return "plugins/" + parts[1]
    if parts[0] == "host" and len(parts) > 2:
        return "host/" + parts[1]
    return None


def allowed(src, dst):
    if src == dst or dst == "abi":
        return True
    if src == "abi" or src.startswith("kernels/"):
        return False
    if src == "plugins/common":
        return dst == "kernels/cpu"
    if src.startswith("plugins/"):
        return dst in ("plugins/common", "kernels/cpu", "kernels/cuda")
    if src.startswith("host/"):
        folder = src[5:]
        if folder not in HOST_LAYERS:
            return False
        return dst.startswith("host/") and dst[5:] in HOST_LAYERS[folder]
    return False


def scan(root):
    files = []
    for top in ("abi", "host", "plugins", "kernels"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    files.append(os.path.relpath(os.path.join(dirpath, n), root))
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    return sorted(files), by_name


def resolve(root, src, kind, name, by_name, files_set):
    """The repository file an include names, or None for a system header."""
    if kind == "<":
        cand = os.path.join("abi", name)
        return cand if cand in files_set else None
    here = os.path.normpath(os.path.join(os.path.dirname(src), name))
    if here in files_set:
        return here
    if src.startswith("host/"):
        cand = os.path.normpath(os.path.join("host", name))
        if cand in files_set:
            return cand
    if "/" in name:
        cand = os.path.join("abi", name)
        if cand in files_set:
            return cand
        return "?" + name
    cands = by_name.get(name, [])
    if len(cands) == 1:
        return cands[0]
    if not cands:
        return None  # a header of a library (cjson/cJSON.h is "<"; this is e.g. a generated file)
    return "?" + name


def module(path):
    """x.c, x.h and x's private header x_internal.h are one module."""
    base = os.path.splitext(path)[0]
    return base[: -len("_internal")] if base.endswith("_internal") else base


def strongly_connected(graph):
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(root):
    files, by_name = scan(root)
    files_set = set(files)
    problems = []
    graph = {}
    for src in files:
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        src_comp = component(src)
        for kind, name in INCLUDE.findall(text):
            dst = resolve(root, src, kind, name, by_name, files_set)
            if dst is None:
                continue
            if dst.startswith("?"):
                problems.append(f"{src}: #include \"{name}\" does not name one file of the tree")
                continue
            dst_comp = component(dst)
            if src_comp and dst_comp and not allowed(src_comp, dst_comp):
                problems.append(f"{src}: includes {dst}: {src_comp} may not use {dst_comp}")
            a, b = module(src), module(dst)
            if a != b:
                graph.setdefault(a, set()).add(b)
    for comp in strongly_connected(graph):
        problems.append("include cycle between modules: " + " <-> ".join(comp))
    return files, problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as fh:
                fh.write(text)
        write("abi/switchyard/abi.h", "")
        write("host/base/buf.h", "")
        write("host/base/buf.c", '#include "base/buf.h"\n#include "engine/a.h"\n')  # up a layer
        write("host/engine/a.h", '#include <switchyard/abi.h>\n')
        write("host/engine/a.c", '#include "engine/a.h"\n#include "engine/b.h"\n')
        write("host/engine/b.h", "")
        write("host/engine/b.c", '#include "engine/b.h"\n#include "engine/a.h"\n')  # cycle a <-> b
        write("plugins/x/x.c", '#include "engine/a.h"\n')  # a plugin reaching into the host
        _, problems = check(d)
        want = ["base may not use host/engine", "include cycle between modules: host/engine/a <-> host/engine/b",
                "plugins/x/x.c: #include \"engine/a.h\""]
        missing = [w for w in want if not any(w in p for p in problems)]
        if missing:
            print("check_layers self-test: not reported:", missing, "\ngot:", problems)
            return 1
        print(f"check_layers self-test: the {len(want)} planted problems were reported")
        return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s) in {len(files)} files")
        return 1
    print(f"check_layers: {len(files)} files, no cycle, no include up a layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
