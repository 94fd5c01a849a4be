#!/usr/bin/env python3
"""Writes the JSON Schema corpus of tests/fixtures/json-schemas/: one file per schema,

    {"name": ..., "schema": {...}, "valid": [documents...], "invalid": [documents...]}
    {"name": ..., "schema": {...}, "error": "text the compile error must contain"}

`valid` documents are written the way the grammar spells JSON (compact, properties in schema order), so the
grammar must accept them; `invalid` ones break the schema, so the grammar must reject them. Both are checked
against Python `jsonschema` by json_schema_fixtures.py (which also validates what the grammar generates).
Documents are JSON texts (strings), so they can be invalid JSON too. Families: integer and number ranges,
string lengths, patterns, formats, enums, objects, arrays, combinators, references and recursion, OpenAI
strict-mode examples, Pydantic-style models, edge cases, and the keywords the compiler refuses.

    python3 tools/oracle/json_schema_corpus.py [--out tests/fixtures/json-schemas]
"""
import argparse
import json
import os
import shutil

C = []  # (name, schema, valid, invalid) or (name, schema, None, None, error)


def add(name, schema, valid=(), invalid=(), error=None):
    C.append({"name": name, "schema": schema, "valid": list(valid), "invalid": list(invalid), "error": error})


def j(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# ---- integers -------------------------------------------------------------------------------------------------
int_ranges = [
    (0, 9), (0, 10), (1, 100), (-5, 5), (-100, -10), (7, 7), (0, 150), (10, 99), (100, 999), (-1, 0),
    (0, 1), (123, 4567), (-999, 999), (18, 65), (1900, 2100), (-2147483648, 2147483647), (0, 255),
    (5, 1000000), (-1000000, -5), (999, 1001), (1, 1), (-7, -7), (0, 999999999999),
]
for lo, hi in int_ranges:
    s = {"type": "integer", "minimum": lo, "maximum": hi}
    add(f"int-range-{lo}-{hi}", s, [j(lo), j(hi), j((lo + hi) // 2)],
        [j(lo - 1), j(hi + 1), '"5"', j(lo + 0.5) if lo != hi else "1.5", "null"])
for lo in (0, 1, -3, 42, 1000):
    add(f"int-min-{lo}", {"type": "integer", "minimum": lo}, [j(lo), j(lo + 12345)], [j(lo - 1), j(lo - 1000)])
for hi in (0, -1, 9, 77, 100000):
    add(f"int-max-{hi}", {"type": "integer", "maximum": hi}, [j(hi), j(hi - 999)], [j(hi + 1), j(hi + 50000)])
for lo, hi in ((0, 10), (-5, 5), (99, 1000)):
    add(f"int-exclusive-{lo}-{hi}", {"type": "integer", "exclusiveMinimum": lo, "exclusiveMaximum": hi},
        [j(lo + 1), j(hi - 1)], [j(lo), j(hi)])
add("int-draft4-exclusive", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 10,
                             "exclusiveMaximum": True}, ["1", "9"], ["0", "10"])
add("int-fractional-bounds", {"type": "integer", "minimum": 0.5, "maximum": 9.5}, ["1", "9"], ["0", "10"])
add("int-plain", {"type": "integer"}, ["0", "-12", "9007199254740"], ["1.5", "01", "\"1\"", "-", "1e5x"])

# ---- numbers --------------------------------------------------------------------------------------------------
num_ranges = [
    ({"minimum": 0}, ["0", "0.5", "123.25"], ["-0.5", "-1"]),
    ({"exclusiveMinimum": 0}, ["0.001", "5"], ["0", "-2"]),
    ({"minimum": 0, "maximum": 1}, ["0", "1", "0.75", "1.0"], ["1.5", "-0.1", "2"]),
    ({"minimum": -10, "maximum": 10}, ["-10", "-9.5", "10"], ["-10.5", "11"]),
    ({"exclusiveMinimum": -1, "exclusiveMaximum": 1}, ["0", "-0.5", "0.999"], ["-1", "1"]),
    ({"maximum": 0}, ["0", "-3.5"], ["0.1", "7"]),
    ({"exclusiveMaximum": 100}, ["99.9", "-5"], ["100", "100.5"]),
    ({"minimum": 5, "maximum": 5}, ["5", "5.0"], ["5.5", "4.9"]),
    ({"minimum": -100, "maximum": -50}, ["-75.5", "-100"], ["-49", "-101"]),
    ({"minimum": 1, "exclusiveMaximum": 2}, ["1", "1.5"], ["2", "0.5"]),
    ({"minimum": 0, "maximum": 100000}, ["99999.5", "100000"], ["100000.5"]),
    ({"exclusiveMinimum": 10, "maximum": 20}, ["10.5", "20"], ["10", "20.5"]),
]
for i, (b, v, inv) in enumerate(num_ranges):
    s = {"type": "number", **b}
    add(f"number-range-{i}", s, v, inv + ['"1"', "null"])
add("number-plain", {"type": "number"}, ["0", "-1.25", "3e5", "1.5E-3"], ["\"x\"", "01", ".5", "1.", "+1"])

# ---- strings --------------------------------------------------------------------------------------------------
for lo, hi in ((0, 0), (1, 1), (2, 5), (0, 10), (3, None), (None, 4), (8, 8), (1, 64)):
    s = {"type": "string"}
    if lo is not None:
        s["minLength"] = lo
    if hi is not None:
        s["maxLength"] = hi
    lo_ = lo or 0
    valid = [j("a" * lo_), j("é" * lo_), j("x" * (hi if hi is not None else lo_ + 7))]
    invalid = ["1", "null"]
    if lo_ > 0:
        invalid.append(j("b" * (lo_ - 1)))
    if hi is not None:
        invalid.append(j("c" * (hi + 1)))
    add(f"string-length-{lo}-{hi}", s, valid, invalid)
add("string-plain", {"type": "string"}, [j("hello"), j("tab\tquote\"back\\slash"), j("日本語"), j("\u0001")],
    ["hello", "'single'", '"unterminated', '"bad \\q escape"', '"\t"'])

# ---- patterns -------------------------------------------------------------------------------------------------
patterns = [
    ("^[0-9]{5}$", ["12345"], ["1234", "123456", "abcde"]),
    ("^[A-Z][a-z]+$", ["Hello"], ["hello", "H", "HeLLo"]),
    ("^\\d{3}-\\d{4}$", ["555-1234"], ["5551234", "55-1234"]),
    ("^(foo|bar)+$", ["foo", "barfoo"], ["", "baz", "foob"]),
    ("^a.c$", ["abc", "a-c"], ["ac", "a\nc", "abcd"]),
    ("abc", ["abc", "xxabcyy"], ["ab", "acb"]),
    ("^abc", ["abc", "abcdef"], ["xabc"]),
    ("xyz$", ["xyz", "00xyz"], ["xyz0"]),
    ("^[^\"\\\\]*$", ["plain text"], ["has \" quote", "has \\ slash"]),
    ("^\\w+@\\w+\\.com$", ["me@host.com"], ["me@host.org", "@host.com"]),
    ("^#[0-9a-fA-F]{6}$", ["#00ff7F"], ["#00ff7", "00ff7F0", "#GGGGGG"]),
    ("^(\\+\\d{1,3} )?\\d{3,4}$", ["+1 234", "5678"], ["+1234 567", "12"]),
    ("^[a-z]{2,}(-[a-z]{2,})*$", ["en", "en-us-xy"], ["e", "en-", "EN"]),
    ("^(?:x|y)?z$", ["z", "xz"], ["xyz", "zz"]),
    ("^\\s*$", ["", "  \t"], ["a"]),
    ("^\\S+$", ["abc"], ["a b", ""]),
    ("^[\\u00e0-\\u00ff]+$", ["àé"], ["ae", "Ā"]),
    ("^(a|b|c){2}$", ["ab", "cc"], ["a", "abc", "ad"]),
    ("^\\$\\d+(\\.\\d\\d)?$", ["$5", "$10.25"], ["5", "$1.5"]),
    ("^(?P<year>\\d{4})-(?P<month>\\d{2})$", ["2024-05"], ["2024-5"]),
    ("^[-+]?[0-9]*\\.?[0-9]+$", ["-1.5", ".5", "7"], ["1.", "--1", "a"]),
    ("^- .{5,}$", ["- hello"], ["- hi", "hello world"]),
    ("^[^a-z]+$", ["ABC 123!"], ["ABc"]),
    ("^x{0,3}$", ["", "xxx"], ["xxxx"]),
    ("^.*\\.txt$", ["notes.txt", ".txt"], ["notes.txt.bak", "txt"]),
    ("^(yes|no)$|^maybe", ["yes", "maybe later"], ["yesno", "not maybe"]),
    ("^\\D\\W\\d$", ["a-1"], ["1-1", "aa1"]),
    ("^[\\]\\[]+$", ["[]]"], ["()"]),
]
for i, (p, v, inv) in enumerate(patterns):
    add(f"pattern-{i}", {"type": "string", "pattern": p}, [j(x) for x in v], [j(x) for x in inv] + ["5"])

# ---- formats --------------------------------------------------------------------------------------------------
formats = [
    ("date", ["2024-02-29", "1999-12-31", "0001-01-01"], ["2023-02-29", "2024-13-01", "2024-04-31", "24-01-01"]),
    ("time", ["12:34:56Z", "23:59:59.123+05:30", "00:00:00-08:00"], ["24:00:00Z", "12:60:00Z", "12:34Z"]),
    ("date-time", ["2024-01-15T10:30:00Z", "2000-02-29T23:59:59.5+01:00"], ["2024-01-15 10:30:00Z",
                                                                          "2024-01-32T00:00:00Z"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000", "not-a-uuid"]),
    ("email", ["a.b@example.com"], ["no-at-sign"]),
    ("ipv4", ["192.168.0.1", "255.255.255.255", "0.0.0.0"], ["256.1.1.1", "1.2.3", "01.2.3.4"]),
]
for f, v, inv in formats:
    add(f"format-{f}", {"type": "string", "format": f}, [j(x) for x in v], [j(x) for x in inv] + ["1"])

# ---- enums and const ------------------------------------------------------------------------------------------
add("enum-strings", {"enum": ["red", "green", "blue"]}, ['"red"', '"blue"'], ['"Red"', '"yellow"', "1"])
add("enum-typed-string", {"type": "string", "enum": ["a", "b", 1, None]}, ['"a"'], ["1", "null", '"c"'])
add("enum-mixed", {"enum": [1, "one", True, None, 2.5]}, ["1", '"one"', "true", "null", "2.5"], ["2", "false",
                                                                                                '"two"'])
add("enum-objects", {"enum": [{"a": 1}, [1, 2], "x"]}, ['{"a":1}', "[1,2]", '"x"'], ['{"a":2}', "[2,1]"])
add("enum-single", {"enum": ["only"]}, ['"only"'], ['"other"'])
add("enum-escapes", {"enum": ["quote\"d", "back\\slash", "new\nline", "ünï"]},
    [j("quote\"d"), j("new\nline"), j("ünï")], ['"quoted"', j("newline")])
add("const-string", {"const": "fixed"}, ['"fixed"'], ['"fixed "', "null"])
add("const-number", {"const": 42}, ["42"], ["43", '"42"'])
add("const-object", {"const": {"k": [True, None]}}, ['{"k":[true,null]}'], ['{"k":[true]}'])
add("const-null", {"const": None}, ["null"], ["0", '""'])
add("enum-nullable", {"type": "string", "enum": ["a", "b"], "nullable": True}, ['"a"', "null"], ['"c"'])
add("enum-integers", {"type": "integer", "enum": [1, 2, 3]}, ["1", "3"], ["4", "1.5"])

# ---- objects --------------------------------------------------------------------------------------------------
person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
          "required": ["name", "age"], "additionalProperties": False}
add("object-closed", person, ['{"name":"Ann","age":30}'],
    ['{"name":"Ann"}', '{"name":"Ann","age":-1}', '{"name":"Ann","age":30,"x":1}', '{"age":30,"name":5}', "[]"])
add("object-optional", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                                                          "c": {"type": "boolean"}}, "additionalProperties": False},
    ["{}", '{"a":1}', '{"b":"x","c":true}', '{"a":1,"b":"x","c":false}'], ['{"a":"1"}', '{"d":1}', '{"c":1}'])
add("object-some-required", {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"},
                                                               "tag": {"type": "string"}}, "required": ["id"],
                             "additionalProperties": False},
    ['{"id":1}', '{"id":1,"tag":"t"}'], ["{}", '{"note":"n"}', '{"id":1,"zzz":2}'])
add("object-open-default", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    ['{"a":1}', '{"a":1,"b":"anything"}', '{"a":1,"b":[1,{"c":null}]}'], ['{"b":1}', '{"a":"x"}',
                                                                           '{"a":1,"a":"dup"}'])
add("object-open-true", {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": True},
    ["{}", '{"x":"s"}', '{"y":1}'], ['{"x":1}'])
add("object-additional-schema", {"type": "object", "additionalProperties": {"type": "integer"}},
    ["{}", '{"a":1,"b":2}'], ['{"a":"x"}', '{"a":1.5}'])
add("object-additional-schema-props", {"type": "object", "properties": {"name": {"type": "string"}},
                                       "required": ["name"], "additionalProperties": {"type": "number"}},
    ['{"name":"n","w":1.5}'], ['{"name":"n","w":"x"}', '{"name":1}'])
add("object-empty-closed", {"type": "object", "properties": {}, "additionalProperties": False}, ["{}"],
    ['{"a":1}'])
add("object-nested", {"type": "object", "properties": {
    "user": {"type": "object", "properties": {"id": {"type": "integer"}, "profile": {
        "type": "object", "properties": {"bio": {"type": "string", "maxLength": 20}}, "required": ["bio"],
        "additionalProperties": False}}, "required": ["id", "profile"], "additionalProperties": False}},
    "required": ["user"], "additionalProperties": False},
    ['{"user":{"id":1,"profile":{"bio":"hi"}}}'], ['{"user":{"id":1}}', '{"user":{"id":1,"profile":{"bio":1}}}'])
add("object-key-escapes", {"type": "object", "properties": {"a\"b": {"type": "integer"}, "é k": {"type": "string"},
                                                             "": {"type": "null"}},
                           "required": ["a\"b", "é k", ""], "additionalProperties": False},
    [j({"a\"b": 1, "é k": "v", "": None})], ['{"ab":1,"é k":"v","":null}'])
add("object-required-not-in-props", {"type": "object", "required": ["must"]}, ['{"must":1}'], ["{}"])
add("object-false-property", {"type": "object", "properties": {"ok": {"type": "integer"}, "banned": False}},
    ['{"ok":1}', "{}"], ['{"banned":1}', '{"ok":1,"banned":2}'])
add("object-no-type-props", {"properties": {"k": {"type": "boolean"}}, "required": ["k"]}, ['{"k":true}'],
    ['{"k":1}', "{}"])
add("object-many-props", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(12)},
                          "required": [f"p{i}" for i in range(0, 12, 2)], "additionalProperties": False},
    [j({f"p{i}": i for i in range(0, 12, 2)}), j({f"p{i}": i for i in range(12)})], ['{"p0":0}'])
add("object-additional-false-default-llama", {"type": "object", "properties": {"a": {"type": "string"}}},
    ['{"a":"x"}', "{}", '{"q":5}'], ['{"a":5}'])

# ---- arrays ---------------------------------------------------------------------------------------------------
add("array-items", {"type": "array", "items": {"type": "integer"}}, ["[]", "[1,2,3]"], ['["1"]', "[1,]", "{}"])
for lo, hi in ((1, None), (0, 2), (2, 2), (3, 5), (None, 0), (0, 10)):
    s = {"type": "array", "items": {"type": "boolean"}}
    if lo is not None:
        s["minItems"] = lo
    if hi is not None:
        s["maxItems"] = hi
    lo_ = lo or 0
    v = [j([True] * lo_)] + ([j([False] * hi)] if hi is not None else [j([True] * (lo_ + 4))])
    inv = ['[1]']
    if lo_ > 0:
        inv.append(j([True] * (lo_ - 1)))
    if hi is not None:
        inv.append(j([True] * (hi + 1)))
    add(f"array-count-{lo}-{hi}", s, v, inv)
add("array-prefix-closed", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                            "items": False}, ["[]", '["a"]', '["a",1]'], ['["a",1,2]', '[1]', '["a","b"]'])
add("array-prefix-required", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                              "minItems": 2, "items": False}, ['["a",1]'], ['["a"]', '["a",1,true]'])
add("array-prefix-rest", {"type": "array", "prefixItems": [{"const": "head"}], "items": {"type": "number"}},
    ['["head"]', '["head",1,2.5]'], ['["tail"]', '["head","x"]'])
add("array-prefix-min-beyond", {"type": "array", "prefixItems": [{"type": "null"}], "items": {"type": "integer"},
                                "minItems": 3, "maxItems": 4}, ["[null,1,2]", "[null,1,2,3]"],
    ["[null,1]", "[null,1,2,3,4]", "[1,2,3]"])
add("array-tuple-draft7", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}, {"type": "string"}],
                           "additionalItems": False}, ['[1,"a"]', "[1]"], ['[1,"a",2]', '["a"]'])
add("array-tuple-draft7-additional", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array", "items": [{"type": "integer"}],
                                      "additionalItems": {"type": "boolean"}}, ["[1,true,false]"], ["[1,2]"])
add("array-of-objects", {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}},
                                                    "required": ["x"], "additionalProperties": False},
                         "minItems": 1}, ['[{"x":1}]', '[{"x":1},{"x":-2.5}]'], ["[]", "[{}]", '[{"x":"1"}]'])
add("array-nested", {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}},
    ["[[1,2],[],[3]]"], ["[[1,2,3]]", "[1]"])
add("array-any", {"type": "array"}, ['[1,"a",null,{"b":[]}]'], ["{}", "[1 2]"])
add("array-unique-false", {"type": "array", "items": {"type": "integer"}, "uniqueItems": False}, ["[1,1]"],
    ['["a"]'])

# ---- combinators ----------------------------------------------------------------------------------------------
add("anyof-primitives", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, ['"s"', "5"], ["true", "1.5"])
add("anyof-nullable-pydantic", {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}], "default": None,
                                "title": "Nick"}, ['"abc"', "null"], ['"abcd"', "1"])
add("oneof-discriminated", {"oneOf": [
    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 0}},
     "required": ["kind", "r"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number", "minimum": 0}},
     "required": ["kind", "side"], "additionalProperties": False}],
    "discriminator": {"propertyName": "kind"}},
    ['{"kind":"circle","r":1.5}', '{"kind":"square","side":2}'],
    ['{"kind":"circle","side":2}', '{"kind":"triangle"}', '{"kind":"square","side":-1}'])
add("oneof-disjoint-types", {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "string"}}]},
    ["true", '["a"]'], ["1", "[1]"])
add("allof-merge-objects", {"allOf": [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}]},
    ['{"a":1,"b":"x"}'], ['{"a":1}', '{"b":"x"}', '{"a":"1","b":"x"}'])
add("allof-single-ref", {"$defs": {"Color": {"type": "string", "enum": ["r", "g"]}},
                         "type": "object", "properties": {"c": {"allOf": [{"$ref": "#/$defs/Color"}],
                                                                "description": "pydantic v1 style"}},
                         "required": ["c"], "additionalProperties": False}, ['{"c":"r"}'], ['{"c":"b"}'])
add("allof-bounds", {"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 10}, {"minimum": 5}]},
    ["5", "10"], ["4", "11"])
add("allof-closed-member", {"allOf": [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"a": {"minimum": 3}}, "required": ["a"]}]},
    ['{"a":3}', '{"a":4,"b":1}'], ['{"a":2}', '{"a":3,"c":1}'])
add("allof-string-lengths", {"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 4}]}, ['"ab"', '"abcd"'],
    ['"a"', '"abcde"'])
add("anyof-with-siblings", {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                            "additionalProperties": False,
                            "anyOf": [{"properties": {"id": {"maximum": 10}}}, {"properties": {"id": {"minimum": 100}}}]},
    ['{"id":5}', '{"id":100}'], ['{"id":50}'])
add("type-array", {"type": ["string", "null"]}, ['"x"', "null"], ["1", "true"])
add("type-array-three", {"type": ["integer", "boolean", "array"], "items": {"type": "integer"}},
    ["1", "false", "[1]"], ['"s"', '["s"]'])
add("nullable-openapi", {"type": "integer", "nullable": True, "minimum": 1}, ["1", "null"], ["0", '"1"'])
add("nullable-object", {"type": "object", "properties": {"v": {"type": "string", "nullable": True}},
                        "required": ["v"], "additionalProperties": False}, ['{"v":null}', '{"v":"s"}'],
    ['{"v":1}'])

# ---- references -----------------------------------------------------------------------------------------------
add("ref-defs", {"$defs": {"Id": {"type": "integer", "minimum": 1}}, "type": "object",
                 "properties": {"a": {"$ref": "#/$defs/Id"}, "b": {"$ref": "#/$defs/Id"}}, "required": ["a"],
                 "additionalProperties": False}, ['{"a":1}', '{"a":1,"b":2}'], ['{"a":0}', '{"b":1}'])
add("ref-definitions", {"definitions": {"Name": {"type": "string", "minLength": 1}},
                        "type": "array", "items": {"$ref": "#/definitions/Name"}}, ['["a","b"]'], ['[""]', "[1]"])
add("ref-recursive-tree", {"$defs": {"Node": {"type": "object", "properties": {
    "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 3}},
    "required": ["value", "children"], "additionalProperties": False}}, "$ref": "#/$defs/Node"},
    ['{"value":1,"children":[]}', '{"value":1,"children":[{"value":2,"children":[]}]}'],
    ['{"value":1}', '{"value":1,"children":[{"value":"x","children":[]}]}'])
add("ref-recursive-list", {"$defs": {"L": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
    "head": {"type": "string"}, "tail": {"$ref": "#/$defs/L"}}, "required": ["head", "tail"],
    "additionalProperties": False}]}}, "$ref": "#/$defs/L"},
    ["null", '{"head":"a","tail":{"head":"b","tail":null}}'], ['{"head":"a"}', '{"head":"a","tail":5}'])
add("ref-root", {"type": "object", "properties": {"name": {"type": "string"}, "next": {"anyOf": [
    {"$ref": "#"}, {"type": "null"}]}}, "required": ["name", "next"], "additionalProperties": False},
    ['{"name":"a","next":null}', '{"name":"a","next":{"name":"b","next":null}}'], ['{"name":"a"}'])
add("ref-chain", {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/C"}, "C": {"type": "boolean"}},
                  "$ref": "#/$defs/A"}, ["true"], ["1"])
add("ref-pointer-into-properties", {"type": "object", "properties": {"src": {"type": "integer", "maximum": 3},
                                                                      "copy": {"$ref": "#/properties/src"}},
                                    "required": ["src", "copy"], "additionalProperties": False},
    ['{"src":1,"copy":3}'], ['{"src":1,"copy":4}'])
add("ref-with-escaped-name", {"$defs": {"a/b": {"type": "null"}, "m~n": {"type": "boolean"}},
                              "type": "array", "prefixItems": [{"$ref": "#/$defs/a~1b"}, {"$ref": "#/$defs/m~0n"}],
                              "items": False, "minItems": 2}, ["[null,true]"], ["[true,null]"])
add("ref-mutual-recursion", {"$defs": {
    "Expr": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/Sum"}]},
    "Sum": {"type": "object", "properties": {"add": {"type": "array", "items": {"$ref": "#/$defs/Expr"},
                                                     "minItems": 2, "maxItems": 2}},
            "required": ["add"], "additionalProperties": False}}, "$ref": "#/$defs/Expr"},
    ["1", '{"add":[1,{"add":[2,3]}]}'], ['{"add":[1]}', '{"add":[1,"2"]}'])

# ---- OpenAI structured outputs (strict mode) ------------------------------------------------------------------
add("openai-math-reasoning", {"type": "object", "properties": {
    "steps": {"type": "array", "items": {"type": "object", "properties": {
        "explanation": {"type": "string"}, "output": {"type": "string"}}, "required": ["explanation", "output"],
        "additionalProperties": False}},
    "final_answer": {"type": "string"}}, "required": ["steps", "final_answer"], "additionalProperties": False},
    ['{"steps":[{"explanation":"e","output":"o"}],"final_answer":"x=3"}'],
    ['{"steps":[],"final_answer":3}', '{"steps":[{"explanation":"e"}],"final_answer":"x"}'])
add("openai-ui-recursive", {"type": "object", "properties": {
    "type": {"type": "string", "enum": ["div", "button", "header", "section", "field", "form"]},
    "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}},
    "attributes": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "value": {"type": "string"}}, "required": ["name", "value"],
        "additionalProperties": False}}},
    "required": ["type", "label", "children", "attributes"], "additionalProperties": False},
    ['{"type":"form","label":"f","children":[{"type":"button","label":"b","children":[],"attributes":[]}],'
     '"attributes":[{"name":"id","value":"x"}]}'], ['{"type":"span","label":"","children":[],"attributes":[]}'])
add("openai-research-paper", {"type": "object", "properties": {
    "title": {"type": "string"}, "authors": {"type": "array", "items": {"type": "string"}},
    "abstract": {"type": "string"}, "keywords": {"type": "array", "items": {"type": "string"}}},
    "required": ["title", "authors", "abstract", "keywords"], "additionalProperties": False},
    ['{"title":"T","authors":["A"],"abstract":"x","keywords":[]}'], ['{"title":"T"}'])
add("openai-moderation", {"type": "object", "properties": {
    "is_violating": {"type": "boolean"},
    "category": {"type": ["string", "null"], "enum": ["violence", "sexual", "self_harm", None]},
    "explanation_if_violating": {"type": ["string", "null"]}},
    "required": ["is_violating", "category", "explanation_if_violating"], "additionalProperties": False},
    ['{"is_violating":false,"category":null,"explanation_if_violating":null}',
     '{"is_violating":true,"category":"violence","explanation_if_violating":"x"}'],
    ['{"is_violating":false,"category":"spam","explanation_if_violating":null}'])
add("openai-calendar-event", {"type": "object", "properties": {
    "name": {"type": "string"}, "date": {"type": "string"}, "participants": {"type": "array",
                                                                            "items": {"type": "string"}}},
    "required": ["name", "date", "participants"], "additionalProperties": False},
    ['{"name":"science fair","date":"Friday","participants":["Alice","Bob"]}'], ['{"name":"x","date":"y"}'])
add("openai-weather-tool", {"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country e.g. Bogotá, Colombia"},
    "units": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]}},
    "required": ["location", "units"], "additionalProperties": False},
    ['{"location":"Paris","units":"celsius"}'], ['{"location":"Paris","units":"kelvin"}'])
add("openai-entities", {"type": "object", "properties": {"attributes": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
    "required": ["name", "value"], "additionalProperties": False}}, "colors": {"type": "array", "items": {
        "type": "string", "enum": ["red", "green", "blue"]}}},
    "required": ["attributes", "colors"], "additionalProperties": False},
    ['{"attributes":[],"colors":["red"]}'], ['{"attributes":[],"colors":["pink"]}'])
add("openai-linked-list-defs", {"type": "object", "properties": {"linked_list": {"$ref": "#/$defs/linked_list_node"}},
                                "$defs": {"linked_list_node": {"type": "object", "properties": {
                                    "value": {"type": "number"}, "next": {"anyOf": [
                                        {"$ref": "#/$defs/linked_list_node"}, {"type": "null"}]}},
                                    "additionalProperties": False, "required": ["next", "value"]}},
                                "additionalProperties": False, "required": ["linked_list"]},
    ['{"linked_list":{"value":1,"next":{"value":2,"next":null}}}'], ['{"linked_list":{"value":1}}'])
add("openai-function-args", {"type": "object", "properties": {
    "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"}, "quantity": {"type": "integer", "minimum": 1,
                                                                               "maximum": 99},
    "priority": {"type": "string", "enum": ["low", "normal", "high"]}},
    "required": ["order_id", "quantity", "priority"], "additionalProperties": False},
    ['{"order_id":"ORD-123456","quantity":3,"priority":"high"}'],
    ['{"order_id":"ORD-12345","quantity":3,"priority":"high"}', '{"order_id":"ORD-123456","quantity":0,"priority":"low"}'])

# ---- Pydantic-style models ------------------------------------------------------------------------------------
add("pydantic-user", {"$defs": {"Role": {"enum": ["admin", "user"], "title": "Role", "type": "string"},
                                "Address": {"properties": {"street": {"title": "Street", "type": "string"},
                                                           "zip": {"anyOf": [{"type": "string"}, {"type": "null"}],
                                                                   "default": None, "title": "Zip"}},
                                            "required": ["street"], "title": "Address", "type": "object"}},
                      "properties": {"name": {"title": "Name", "type": "string"},
                                     "role": {"$ref": "#/$defs/Role", "default": "user"},
                                     "address": {"$ref": "#/$defs/Address"},
                                     "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"}},
                      "required": ["name", "address"], "title": "User", "type": "object"},
    ['{"name":"n","address":{"street":"s"}}', '{"name":"n","role":"admin","address":{"street":"s","zip":null},"tags":[]}'],
    ['{"name":"n"}', '{"name":"n","role":"root","address":{"street":"s"}}'])
add("pydantic-dict-str-int", {"additionalProperties": {"type": "integer"}, "title": "Counts", "type": "object"},
    ['{"a":1}', "{}"], ['{"a":"1"}'])
add("pydantic-literal-union", {"properties": {"pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat",
                                                                                   "dog": "#/$defs/Dog"},
                                                                       "propertyName": "pet_type"},
                                                     "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                                                     "title": "Pet"}},
                               "required": ["pet"], "title": "Model", "type": "object",
                               "$defs": {"Cat": {"properties": {"pet_type": {"const": "cat", "title": "Pet Type"},
                                                                "meows": {"title": "Meows", "type": "integer"}},
                                                 "required": ["pet_type", "meows"], "title": "Cat", "type": "object"},
                                         "Dog": {"properties": {"pet_type": {"const": "dog", "title": "Pet Type"},
                                                                "barks": {"title": "Barks", "type": "number"}},
                                                 "required": ["pet_type", "barks"], "title": "Dog", "type": "object"}}},
    ['{"pet":{"pet_type":"cat","meows":3}}'], ['{"pet":{"pet_type":"cat","barks":3}}', '{"pet":{"pet_type":"fish"}}'])
add("pydantic-optional-list", {"properties": {"items": {"anyOf": [{"items": {"$ref": "#/$defs/Item"}, "type": "array"},
                                                                  {"type": "null"}], "default": None}},
                               "$defs": {"Item": {"properties": {"sku": {"type": "string", "minLength": 3},
                                                                 "qty": {"type": "integer", "exclusiveMinimum": 0}},
                                                  "required": ["sku", "qty"], "type": "object"}},
                               "type": "object"},
    ["{}", '{"items":null}', '{"items":[{"sku":"abc","qty":1}]}'], ['{"items":[{"sku":"ab","qty":1}]}',
                                                                    '{"items":[{"sku":"abc","qty":0}]}'])
add("pydantic-datetime-uuid", {"properties": {"id": {"format": "uuid", "type": "string"},
                                              "created": {"format": "date-time", "type": "string"},
                                              "day": {"format": "date", "type": "string"}},
                               "required": ["id", "created", "day"], "type": "object", "additionalProperties": False},
    ['{"id":"123e4567-e89b-12d3-a456-426614174000","created":"2024-01-01T00:00:00Z","day":"2024-01-01"}'],
    ['{"id":"x","created":"2024-01-01T00:00:00Z","day":"2024-01-01"}'])
add("pydantic-constrained", {"properties": {"score": {"maximum": 1.0, "minimum": 0.0, "type": "number"},
                                            "code": {"maxLength": 4, "minLength": 4, "type": "string"},
                                            "count": {"exclusiveMaximum": 10, "type": "integer", "minimum": 0}},
                             "required": ["score", "code", "count"], "type": "object", "additionalProperties": False},
    ['{"score":0.5,"code":"abcd","count":9}'], ['{"score":1.5,"code":"abcd","count":9}', '{"score":0.5,"code":"abc","count":9}',
                                                '{"score":0.5,"code":"abcd","count":10}'])
add("pydantic-nested-models", {"$defs": {"Line": {"properties": {"product": {"type": "string"},
                                                                 "price": {"type": "number", "minimum": 0}},
                                                  "required": ["product", "price"], "type": "object",
                                                  "additionalProperties": False},
                                         "Customer": {"properties": {"email": {"type": "string", "format": "email"}},
                                                      "required": ["email"], "type": "object",
                                                      "additionalProperties": False}},
                               "properties": {"customer": {"$ref": "#/$defs/Customer"},
                                              "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"},
                                                        "minItems": 1, "maxItems": 5}},
                               "required": ["customer", "lines"], "type": "object", "additionalProperties": False},
    ['{"customer":{"email":"a@b.co"},"lines":[{"product":"p","price":2.5}]}'],
    ['{"customer":{"email":"a@b.co"},"lines":[]}', '{"customer":{"email":"nope"},"lines":[{"product":"p","price":1}]}'])
add("pydantic-tuple", {"properties": {"point": {"maxItems": 2, "minItems": 2, "prefixItems": [{"type": "number"},
                                                                                              {"type": "number"}],
                                                "type": "array"}}, "required": ["point"], "type": "object"},
    ['{"point":[1,2.5]}'], ['{"point":[1]}', '{"point":[1,2,3]}'])
add("pydantic-enum-int", {"$defs": {"Level": {"enum": [1, 2, 3], "title": "Level", "type": "integer"}},
                          "properties": {"level": {"$ref": "#/$defs/Level"}}, "required": ["level"], "type": "object"},
    ['{"level":2}'], ['{"level":4}'])

# ---- edge cases -----------------------------------------------------------------------------------------------
add("empty-schema", {}, ["1", '"s"', "null", '{"a":[true]}'], ["nul", "{", "[1,]"])
add("true-schema", True, ["[]", "0"], ["tru"])
add("object-type-only", {"type": "object"}, ["{}", '{"a":{"b":[]}}'], ["[]", "null"])
add("boolean", {"type": "boolean"}, ["true", "false"], ["0", '"true"'])
add("null", {"type": "null"}, ["null"], ["0", "{}"])
add("annotations-ignored", {"type": "string", "title": "T", "description": "d", "examples": ["x"], "default": "x",
                            "$comment": "c", "deprecated": True, "readOnly": True, "x-custom": 1,
                            "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:t"},
    ['"x"'], ["1"])
add("deep-nesting", {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
    "type": "object", "properties": {"c": {"type": "object", "properties": {"d": {"type": "array", "items": {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}}}}, "required": ["d"],
                                      "additionalProperties": False}}, "required": ["c"],
    "additionalProperties": False}}, "required": ["b"], "additionalProperties": False}}, "required": ["a"],
    "additionalProperties": False}, ['{"a":{"b":{"c":{"d":[[0,3]]}}}}'], ['{"a":{"b":{"c":{"d":[[4]]}}}}'])
add("string-implied-by-keyword", {"maxLength": 2}, ['"ab"'], ['"abc"'])
add("number-implied-by-keyword", {"minimum": 3}, ["3", "4.5"], ["2"])
add("array-implied-by-keyword", {"items": {"type": "string"}}, ['["a"]'], ["[1]"])
add("unicode-enum", {"enum": ["日本", "😀", "naïve"]}, ['"日本"', '"😀"'], ['"日"'])
add("pattern-unicode", {"type": "string", "pattern": "^[一-龥]{2}$"}, ['"中文"'], ['"中"', '"ab"'])
add("object-optional-only-with-extra", {"type": "object", "properties": {"a": {"type": "integer"}},
                                        "additionalProperties": {"type": "boolean"}},
    ["{}", '{"a":1}', '{"a":1,"b":true}', '{"z":false}'], ['{"b":1}', '{"a":true}'])
add("array-items-false", {"type": "array", "items": False}, ["[]"], ["[1]"])
add("anyof-objects-different-keys", {"anyOf": [
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
    {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"], "additionalProperties": False}]},
    ['{"a":1}', '{"b":"x"}'], ['{"a":1,"b":"x"}', "{}"])
add("integer-and-number-bounds-large", {"type": "integer", "minimum": -1000000000000, "maximum": 1000000000000},
    ["1000000000000", "-1000000000000", "0"], ["1000000000001"])
add("whitespace-sensitive-string", {"type": "string", "enum": [" lead", "trail ", " "]}, ['" lead"', '" "'],
    ['"lead"', '""'])


# ---- more variations: ranges that cross digit counts, lengths with unicode, arrays of unions --------------------
for lo, hi in ((9, 11), (95, 105), (-11, -9), (-105, 95), (1000, 1009), (0, 99999), (19, 2001), (-50, 0)):
    add(f"int-range-digits-{lo}-{hi}", {"type": "integer", "minimum": lo, "maximum": hi},
        [j(lo), j(hi), j(lo + 1)], [j(lo - 1), j(hi + 1), j(hi * 10 + 1 if hi > 0 else lo * 10 - 1)])
for i, (lo, hi) in enumerate(((0, 3), (2, 2), (1, 20))):
    add(f"string-length-unicode-{i}", {"type": "string", "minLength": lo, "maxLength": hi},
        [j("日" * lo), j("😀" * hi)], [j("日" * (hi + 1))] + ([j("x" * (lo - 1))] if lo else []))
add("array-of-unions", {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string",
                                                                                               "maxLength": 2}]},
                        "maxItems": 4}, ['[1,"ab"]', "[]"], ['[-1]', '["abc"]', "[1,2,3,4,5]"])
add("object-enum-values", {"type": "object", "properties": {"status": {"enum": ["open", "closed"]},
                                                              "code": {"enum": [200, 404]}},
                           "required": ["status", "code"], "additionalProperties": False},
    ['{"status":"open","code":404}'], ['{"status":"opened","code":404}', '{"status":"open","code":500}'])
add("array-min-items-objects-open", {"type": "array", "items": {"type": "object"}, "minItems": 2},
    ["[{},{}]", '[{"a":1},{}]'], ["[{}]", "[1,2]"])

# ---- refused keywords -----------------------------------------------------------------------------------------
refused = [
    ({"not": {"type": "string"}}, "unsupported keyword 'not'"),
    ({"type": "object", "if": {}, "then": {}}, "unsupported keyword 'if'"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties"),
    ({"type": "object", "minProperties": 1}, "minProperties"),
    ({"type": "number", "multipleOf": 2}, "multipleOf"),
    ({"type": "string", "format": "hostname"}, "format 'hostname'"),
    ({"$ref": "https://example.com/s.json"}, "only local references"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "object", "propertyNames": {"pattern": "^a"}}, "propertyNames"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired"),
    ({"type": "string", "pattern": "^(?=a)a$"}, "lookaround"),
    ({"type": "string", "pattern": "^(a)\\1$"}, "backreferences"),
    ({"type": "string", "pattern": "^a", "maxLength": 3}, "minLength/maxLength"),
    ({"type": "integer", "minimum": 10, "maximum": 1}, "no integer"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    (False, "allows nothing"),
    ({"type": "object", "properties": {"a": {"type": "strng"}}}, "unknown type 'strng'"),
    ({"type": "number", "minimum": 0.25}, "whole-number"),
    ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties"),
    ({"type": "string", "pattern": "^a\\bb$"}, "word boundary"),
    ({"type": "array", "maxItems": 100000}, "over the limit"),
    ({"type": "object", "required": ["x"], "additionalProperties": False}, "not in properties"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "do not intersect"),
    ({"type": "string", "pattern": "^(?i)abc$"}, "inline flags"),
]
for i, (s, e) in enumerate(refused):
    add(f"refused-{i}", s, error=e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "json-schemas"))
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        if f.endswith(".json") and f[:3].isdigit():
            os.remove(os.path.join(out, f))
    names = set()
    for i, c in enumerate(C):
        assert c["name"] not in names, c["name"]
        names.add(c["name"])
        doc = {"name": c["name"], "schema": c["schema"]}
        if c["error"]:
            doc["error"] = c["error"]
        else:
            doc["valid"] = c["valid"]
            doc["invalid"] = c["invalid"]
        with open(os.path.join(out, f"{i:03d}-{c['name']}.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
    n_err = sum(1 for c in C if c["error"])
    print(f"{len(C)} schemas ({len(C) - n_err} compiled, {n_err} refused) in {out}")


if __name__ == "__main__":
    main()
