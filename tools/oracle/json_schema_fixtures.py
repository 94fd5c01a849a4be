#!/usr/bin/env python3
"""The oracle of the JSON Schema corpus (tests/fixtures/json-schemas): validates, with Python `json` and
`jsonschema` (format checks on), what the grammar generated for each schema, and writes the verdicts that
tests/grammar/test_grammar_schema.c compares against (verdicts.json, committed). It also checks the corpus
itself: every hand-written `valid` document is valid and every `invalid` one is not (JSON-invalid counts), and
every schema the compiler must refuse was refused with the expected message.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install jsonschema rfc3339-validator
    SY_SOURCE_DIR=. build/tests/schema_samples > /tmp/samples.jsonl
    /tmp/venv/bin/python tools/oracle/json_schema_fixtures.py --samples /tmp/samples.jsonl

OpenAPI's `nullable: true` is not JSON Schema: before validating, a schema carrying it is rewritten as
anyOf [itself without it, {"type": "null"}] (what the compiler implements). Exit status 1 if any sample or
corpus document gets the wrong verdict; the verdicts are written either way.
"""
import argparse
import copy
import json
import os
import sys
from importlib.metadata import version

import jsonschema
from jsonschema.validators import validator_for


def denullable(s):
    if isinstance(s, list):
        return [denullable(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: (v if k in ("enum", "const", "default", "examples") else denullable(v)) for k, v in s.items()}
    if out.get("nullable") is True:
        del out["nullable"]
        inner = {k: v for k, v in out.items() if k not in ("$defs", "definitions", "$schema")}
        outer = {k: v for k, v in out.items() if k in ("$defs", "definitions", "$schema")}
        outer["anyOf"] = [inner, {"type": "null"}]
        return outer
    return out


def check(validator, text):
    try:
        doc = json.loads(text)
    except ValueError as e:
        return False, f"not JSON: {e}"
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        return False, errors[0].message[:200]
    return True, ""


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", required=True, help="output of build/tests/schema_samples")
    ap.add_argument("--dir", default=os.path.join(here, "..", "..", "tests", "fixtures", "json-schemas"))
    a = ap.parse_args()
    fixtures = {}
    for f in sorted(os.listdir(a.dir)):
        if f.endswith(".json") and f[:3].isdigit():
            with open(os.path.join(a.dir, f), encoding="utf-8") as fh:
                fixtures[f] = json.load(fh)
    bad = 0
    verdicts = {}
    n_samples = 0
    with open(a.samples, encoding="utf-8") as fh:
        lines = [json.loads(l) for l in fh if l.strip()]
    seen = set()
    for line in lines:
        fx = fixtures.get(line["file"])
        if fx is None:
            print(f"{line['file']}: not in the corpus")
            bad += 1
            continue
        seen.add(line["file"])
        name = fx["name"]
        if "error" in fx:
            got = line.get("error", "")
            if fx["error"] not in got:
                print(f"{name}: expected a compile error with {fx['error']!r}, got {got!r}")
                bad += 1
            continue
        if "error" in line:
            print(f"{name}: the compiler refused it: {line['error']}")
            bad += 1
            continue
        schema = denullable(copy.deepcopy(fx["schema"]))
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        for doc in fx.get("valid", []):
            ok, why = check(validator, doc)
            if not ok:
                print(f"{name}: corpus document {doc!r} should be valid: {why}")
                bad += 1
        for doc in fx.get("invalid", []):
            ok, _ = check(validator, doc)
            if ok:
                print(f"{name}: corpus document {doc!r} should be invalid")
                bad += 1
        out = []
        for s in line.get("samples", []):
            ok, why = check(validator, s["text"])
            n_samples += 1
            if not ok:
                print(f"{name}: generated {s['text'][:120]!r} is invalid: {why}")
                bad += 1
            v = {"hash": s["hash"], "valid": ok}
            if not ok:
                v["reason"] = why
            out.append(v)
        if len(out) == 0:
            print(f"{name}: no complete sample")
        verdicts[name] = out
    for f in fixtures:
        if f not in seen:
            print(f"{f}: no samples line (rebuild schema_samples)")
            bad += 1
    result = {
        "about": "Verdicts of Python jsonschema on the documents tests/grammar/schema_samples.c generates for each "
                 "schema (tools/oracle/json_schema_fixtures.py). Regenerate after changing the engine or corpus.",
        "jsonschema": version("jsonschema"),
        "samples": n_samples,
        "schemas": verdicts,
    }
    with open(os.path.join(a.dir, "verdicts.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    print(f"{len(fixtures)} schemas, {n_samples} samples, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
