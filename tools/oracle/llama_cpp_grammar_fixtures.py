#!/usr/bin/env python3
"""llama.cpp's verdicts on what switchyard generates under a grammar: for every GBNF file of tests/fixtures/grammars,
response_format json_object and every schema of the JSON Schema corpus (tests/fixtures/json-schemas), N sampled
generations at temperature 1 per model (`build/tests/constrained_corpus generate`, the scheduler with the host's
grammar engine) are judged by

  G  llama.cpp's own grammar engine (tests/test-gbnf-validator of the peer build) on the GBNF we compiled: the GBNF
     file itself, or for a schema the GBNF our JSON Schema compiler wrote;
  J  Python json + jsonschema (formats checked) for every JSON grammar's complete output;
  L  for schemas (and json_object): llama.cpp's grammar for the same schema, converted by llama.cpp itself
     (common/json-schema-to-grammar.cpp, what llama-server runs; tools/oracle/llama_cpp_schema_to_gbnf.cpp
     compiled against the peer build), validated with test-gbnf-validator as well: the independent oracle.

and writes tests/fixtures/grammar-oracle/LABEL.json: per grammar, per sample "HASH FINISH TOKENS GJL" (FNV-1a 64
of the output bytes; stop or length; completion tokens; one letter per oracle):

  G: A accepted (complete: the generation ended with stop)  P a prefix of an accepted text (cut with length)
     r rejected
  J: V json.loads and jsonschema accept it  C cut by max_tokens (not a document)  N not a JSON grammar
     i invalid
  L: A / P as G  N not a schema  U llama.cpp cannot convert this schema (its error is in "llama_cpp_refused")
     o llama.cpp's grammar for the schema rejects a document jsonschema accepts (its grammar is narrower than
       the schema: "llama_cpp_narrower" lists the grammars, with a cause where one is found)
     q it rejects an output cut by max_tokens that G accepts as a prefix (jsonschema cannot judge a cut text; in
       this corpus: keys the schema does not name, which JSON Schema allows and llama.cpp's conversion does not)
     r it rejects a complete output jsonschema did not judge

The suite test (tests/spec/constrained_corpus.c) regenerates the samples, compares their hashes and checks that
G and J accept every one. Texts are not committed (only hashes); rerun this script to see them.

    tools/bench/build_llama_cpp.sh            # the peer: test-gbnf-validator and its static libraries
    python3 tools/oracle/make_bench_model.py --tiny --out /tmp/qwen-tiny
    python3 tools/oracle/llama_cpp_grammar_fixtures.py --build build --qwen-dir /tmp/qwen-tiny \\
        [--smollm2 $SY_SMOLLM2_GGUF] [--only stories260K,smollm2,qwen-random] [--samples LABEL=FILE.jsonl]
"""
import argparse
import collections
import concurrent.futures
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from importlib.metadata import version

import jsonschema
from jsonschema.validators import validator_for

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from json_schema_fixtures import denullable  # noqa: E402  (OpenAPI nullable, as the compiler reads it)

JSON_GBNF = {"gbnf/json.gbnf", "gbnf/json_arr.gbnf"}

# label: plugin, samples per grammar, max tokens, prompt style
MODELS = {
    "stories260K": ("gguf-quant", 16, 256, "plain"),
    "smollm2": ("gguf-quant", 4, 160, "chatml"),
    "qwen-random": ("qwen-cpu-mmap", 2, 128, "chatml"),
}


def build_converter(peer, out):
    src = os.path.join(peer, "src", "vendor", "llama.cpp")
    b = os.path.join(peer, "build")
    libs = ["common/libllama-common.a", "common/libllama-common-base.a", "src/libllama.a", "ggml/src/libggml.a",
            "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a", "vendor/hash/libvendor-hash.a"]
    cmd = ["g++", "-std=c++17", "-O1", "-I" + os.path.join(src, "common"), "-I" + os.path.join(src, "include"),
           "-I" + os.path.join(src, "vendor"), "-I" + os.path.join(src, "ggml", "include"),
           os.path.join(HERE, "llama_cpp_schema_to_gbnf.cpp"), "-o", out] + [os.path.join(b, l) for l in libs] + [
           "-fopenmp", "-lpthread", "-ldl"]
    subprocess.run(cmd, check=True)


def llama_cpp_convert(tool, schemas):
    """{id: schema} -> {id: (gbnf or None, error or None)} through llama.cpp's converter."""
    text = "".join(json.dumps({"id": k, "schema": v}) + "\n" for k, v in schemas.items())
    out = subprocess.run([tool], input=text, capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        d = json.loads(line)
        res[d["id"]] = (d.get("gbnf"), d.get("error"))
    return res


def trim_partial_utf8(b):
    """A text cut by max_tokens may end inside a UTF-8 character (our grammar allows only what completes it);
    llama.cpp's validator decodes whole characters only, so the partial one is dropped."""
    i = len(b)
    k = 0
    while i > 0 and k < 4 and (b[i - 1] & 0xC0) == 0x80:
        i -= 1
        k += 1
    if i > 0 and b[i - 1] >= 0xC0:
        lead = b[i - 1]
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if len(b) - (i - 1) < need:
            return b[:i - 1]
    return b


class Validator:
    """test-gbnf-validator on (grammar text, input bytes), memoised."""

    def __init__(self, exe, tmp):
        self.exe, self.tmp, self.memo, self.files = exe, tmp, {}, {}
        self.lock = threading.Lock()

    def grammar_file(self, gbnf):
        h = hashlib.sha1(gbnf.encode()).hexdigest()[:16]
        with self.lock:  # written whole before any validator reads it
            if h not in self.files:
                p = os.path.join(self.tmp, f"g-{h}.gbnf")
                with open(p + ".tmp", "w", encoding="utf-8") as f:
                    f.write(gbnf)
                os.replace(p + ".tmp", p)
                self.files[h] = p
            return self.files[h]

    def run(self, gbnf, data, cut):
        """'A' accepted, 'P' a viable prefix (cut only), 'r' rejected; and the message."""
        key = (hashlib.sha1(gbnf.encode()).hexdigest(), data, cut)
        if key in self.memo:
            return self.memo[key]
        gpath = self.grammar_file(gbnf)
        fd, ipath = tempfile.mkstemp(dir=self.tmp)
        with os.fdopen(fd, "wb") as f:
            f.write(trim_partial_utf8(data) if cut else data)
        out = subprocess.run([self.exe, gpath, ipath], capture_output=True).stdout.decode("utf-8", "replace")
        os.unlink(ipath)
        text = trim_partial_utf8(data) if cut else data
        n_cpts = len(text.decode("utf-8"))
        if "is valid according to the grammar" in out:
            v = ("P" if cut else "A", "")
        else:
            m = re.search(r"Error: (.*) at position (\d+)", out)
            if cut and m and m.group(1) == "Unexpected end of input" and int(m.group(2)) == n_cpts:
                v = ("P", "")
            else:
                v = ("r", (m.group(0) if m else out.strip().splitlines()[0] if out.strip() else "no output")[:200])
        self.memo[key] = v
        return v


def json_verdict(validator, data):
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as e:
        return "i", f"not JSON: {e}"[:200], None
    if validator is None:
        return "V", "", doc
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        return "i", errors[0].message[:200], doc
    return "V", "", doc


def close_objects(s):
    """The schema with additionalProperties: false wherever an object schema does not say (llama.cpp's default)."""
    if isinstance(s, list):
        return [close_objects(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: (v if k in ("enum", "const", "default", "examples") else close_objects(v)) for k, v in s.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def narrower_cause(schema, doc):
    """Why llama.cpp's grammar refuses a document jsonschema accepts, when a cause is found."""
    closed = close_objects(denullable(copy.deepcopy(schema)))
    cls = validator_for(closed, default=jsonschema.Draft202012Validator)
    if any(True for _ in cls(closed).iter_errors(doc)):
        return "keys the schema does not name (llama.cpp: no additionalProperties unless the schema allows them)"
    return None


def load_fixture_schemas():
    d = os.path.join(ROOT, "tests", "fixtures", "json-schemas")
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and f[:3].isdigit():
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                fx = json.load(fh)
            if "error" not in fx:
                out["schema/" + f] = fx["schema"]
    return out


def generate(build, label, path, n, max_tokens, prompt, out_path):
    plugin = MODELS[label][0]
    env = dict(os.environ, SY_SOURCE_DIR=ROOT, SY_BUILD_DIR=os.path.abspath(build))
    cmd = [os.path.join(build, "tests", "constrained_corpus"), "generate", label, plugin, path, str(n),
           str(max_tokens)] + (["chatml"] if prompt == "chatml" else [])
    print(" ".join(cmd), flush=True)
    with open(out_path + ".tmp", "w") as f:
        subprocess.run(cmd, env=env, stdout=f, check=True)
    os.replace(out_path + ".tmp", out_path)


def judge(label, lines, val, llama_grammars, schemas, meta, jobs):
    gbnf_of = {}
    samples = []
    for d in lines:
        if "gbnf" in d:
            gbnf_of[d["grammar"]] = d["gbnf"]
        else:
            samples.append(d)
    validators = {}
    for name, schema in schemas.items():
        s = denullable(copy.deepcopy(schema))
        cls = validator_for(s, default=jsonschema.Draft202012Validator)
        validators[name] = cls(s, format_checker=cls.FORMAT_CHECKER)
    validators["json_object"] = jsonschema.Draft202012Validator({"type": "object"})
    for g in JSON_GBNF:
        validators[g] = None

    def one(d):
        name, data, cut = d["grammar"], bytes.fromhex(d["hex"]), d["finish"] != "stop"
        G, gwhy = val.run(gbnf_of[name], data, cut)
        if name in validators:
            if cut:
                J, jwhy, doc = "C", "", None
            else:
                J, jwhy, doc = json_verdict(validators[name], data)
        else:
            J, jwhy, doc = "N", "", None
        L, lwhy, cause = "N", "", None
        if name in llama_grammars:
            lg, lerr = llama_grammars[name]
            if lg is None:
                L = "U"
            else:
                L, lwhy = val.run(lg, data, cut)
                if L == "r" and J == "V":
                    L = "o"
                    cause = narrower_cause(schemas.get(name, {}), doc) if name in schemas else None
                elif L == "r" and J == "C":
                    L = "q"
        return d, G, gwhy, J, jwhy, L, lwhy, cause

    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        results = list(ex.map(one, samples))
    per_grammar = collections.OrderedDict((g, []) for g in gbnf_of)
    counts = collections.Counter()
    problems, narrower = [], collections.Counter()
    examples = {}
    for d, G, gwhy, J, jwhy, L, lwhy, cause in results:
        per_grammar[d["grammar"]].append(f"{d['hash']} {d['finish']} {d['tokens']} {G}{J}{L}")
        counts["samples"] += 1
        counts["finish_" + d["finish"]] += 1
        counts["G_" + G] += 1
        counts["J_" + J] += 1
        counts["L_" + L] += 1
        text = bytes.fromhex(d["hex"]).decode("utf-8", "replace")
        if G == "r":
            problems.append(f"{d['grammar']} #{d['sample']}: llama.cpp rejects it under our GBNF: {gwhy}: {text[:160]!r}")
        if J == "i":
            problems.append(f"{d['grammar']} #{d['sample']}: jsonschema: {jwhy}: {text[:160]!r}")
        if L == "r":
            problems.append(f"{d['grammar']} #{d['sample']}: llama.cpp's schema grammar rejects it: {lwhy}: "
                            f"{text[:160]!r}")
        if L in "oq":
            why = cause or (f"llama.cpp: {lwhy}" if L == "o" else "cut output: " + lwhy)
            narrower.setdefault(d["grammar"], collections.Counter())[why] += 1
            examples.setdefault(d["grammar"], []).append(f"#{d['sample']}: {why}: {text[:200]!r}")
    for p in problems:
        print(f"{label}: {p}")
    for g, ex in examples.items():
        print(f"{label}: llama.cpp narrower on {g} ({len(ex)})")
        for e in ex[:2]:
            print("    " + e)
    fixture = dict(meta)
    fixture["counts"] = dict(sorted(counts.items()))
    # per grammar: how many outputs llama.cpp's own grammar for the schema refused, and the first reason
    fixture["llama_cpp_narrower"] = {g: f"{sum(c.values())}: {c.most_common(1)[0][0]}" for g, c in narrower.items()}
    fixture["grammars"] = per_grammar
    return fixture, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="switchyard build folder")
    ap.add_argument("--peer", default=os.environ.get("SY_PEER_DIR", "/work/main/build/llama.cpp-native"),
                    help="tools/bench/build_llama_cpp.sh's folder (src/ and build/)")
    ap.add_argument("--smollm2", default=os.environ.get("SY_SMOLLM2_GGUF"))
    ap.add_argument("--qwen-dir", help="make_bench_model.py --tiny output (the random-weight Qwen-vocabulary model)")
    ap.add_argument("--only", default="stories260K,smollm2,qwen-random")
    ap.add_argument("--samples", action="append", default=[], help="LABEL=FILE: reuse a generate output")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "sy-grammar-oracle"))
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    exe = os.path.join(a.peer, "build", "bin", "test-gbnf-validator")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe}: not built (tools/bench/build_llama_cpp.sh)")
    conv = os.path.join(a.work, "llama_cpp_schema_to_gbnf")
    build_converter(a.peer, conv)
    schemas = load_fixture_schemas()
    asked = dict(schemas)
    asked["json_object"] = {}  # what llama-server converts for response_format json_object
    llama_grammars = llama_cpp_convert(conv, asked)
    refused = {k: e for k, (g, e) in llama_grammars.items() if g is None}
    print(f"llama.cpp converts {len(asked) - len(refused)} of {len(asked)} schemas; refuses {len(refused)}")
    given = dict(s.split("=", 1) for s in a.samples)
    val = Validator(exe, a.work)
    paths = {"stories260K": os.path.join(ROOT, "tests", "fixtures", "stories260K", "stories260K.gguf"),
             "smollm2": a.smollm2, "qwen-random": a.qwen_dir}
    bad = 0
    for label in a.only.split(","):
        plugin, n, max_tokens, prompt = MODELS[label]
        out = given.get(label)
        if out is None:
            if not paths[label]:
                print(f"{label}: no model given, skipped")
                continue
            out = os.path.join(a.work, f"{label}.jsonl")
            generate(a.build, label, paths[label], n, max_tokens, prompt, out)
        with open(out, encoding="utf-8") as f:
            lines = [json.loads(l) for l in f if l.strip()]
        meta = {
            "about": "Verdicts of llama.cpp's grammar (G: on our GBNF; L: on llama.cpp's own conversion of the schema) "
                     "and of Python jsonschema (J) on sampled generations (temperature 1) under every grammar of the "
                     "corpora; written by tools/oracle/llama_cpp_grammar_fixtures.py, whose docstring gives the "
                     "letters. Checked by tests/spec/constrained_corpus.c.",
            "model": label, "engine": plugin, "samples_per_grammar": n, "max_tokens": max_tokens, "prompt": prompt,
            "model_file": os.path.basename(os.path.normpath(paths[label] or "")),
            "llama_cpp": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp (tests/test-gbnf-validator.cpp, "
                         "common/json-schema-to-grammar.cpp)",
            "jsonschema": version("jsonschema"),
            "llama_cpp_refused": dict(sorted(refused.items())),
        }
        fixture, problems = judge(label, lines, val, llama_grammars, schemas, meta, a.jobs)
        bad += len(problems)
        dest = os.path.join(ROOT, "tests", "fixtures", "grammar-oracle", f"{label}.json")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest + ".tmp", "w", encoding="utf-8") as f:
            json.dump(fixture, f, indent=0, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(dest + ".tmp", dest)
        print(f"{label}: {json.dumps(fixture['counts'])}; llama.cpp narrower on {len(fixture['llama_cpp_narrower'])} "
              "grammars")
    print(f"{bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
