#!/usr/bin/env python3
"""Unit tests of tools/deploy/helm_render.py: each case is a template with the output Go's text/template and
Helm give for it (the semantics the renderer's docstring lists), and the errors it must raise rather than render
something else.

Usage: test_helm_render.py --source-dir SRC
"""
import argparse
import os
import shutil
import sys
import tempfile
import unittest

import yaml

H = None


def render(template, values=None, sets=(), helpers=""):
    d = tempfile.mkdtemp(prefix="sy-helm-render-")
    try:
        os.makedirs(os.path.join(d, "templates"))
        with open(os.path.join(d, "Chart.yaml"), "w") as f:
            f.write("apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: \"4.5\"\n")
        with open(os.path.join(d, "values.yaml"), "w") as f:
            f.write(yaml.safe_dump(values or {}))
        with open(os.path.join(d, "templates", "t.yaml"), "w") as f:
            f.write(template)
        if helpers:
            with open(os.path.join(d, "templates", "_h.tpl"), "w") as f:
                f.write(helpers)
        docs = H.render_chart(d, release="rel", namespace="ns", sets=sets)
        return "".join(doc for _, doc in docs)
    finally:
        shutil.rmtree(d)


class Semantics(unittest.TestCase):
    def test_trim_markers(self):
        self.assertEqual(render("a  {{- 1 }}  b"), "a1  b\n")
        self.assertEqual(render("a {{ 1 -}}\n\n  b"), "a 1b\n")
        self.assertEqual(render("x:\n  {{- /* gone */}}\n  y"), "x:\n  y\n")

    def test_if_else_chain(self):
        t = "{{ if .Values.a }}A{{ else if .Values.b }}B{{ else }}C{{ end }}"
        self.assertEqual(render(t, {"a": 1, "b": 1}), "A\n")
        self.assertEqual(render(t, {"a": 0, "b": "x"}), "B\n")
        self.assertEqual(render(t, {"a": "", "b": []}), "C\n")

    def test_range(self):
        self.assertEqual(render("{{ range $k, $v := .Values.m }}{{ $k }}={{ $v }};{{ end }}",
                                {"m": {"b": 2, "a": "x"}}), "a=x;b=2;\n")
        self.assertEqual(render("{{ range $i, $v := .Values.l }}{{ $i }}:{{ . }} {{ end }}", {"l": ["p", "q"]}),
                         "0:p 1:q\n")
        self.assertEqual(render("{{ range .Values.l }}x{{ else }}none{{ end }}", {"l": []}), "none\n")

    def test_with_sets_dot(self):
        t = "{{ with .Values.w }}{{ .name }}{{ else }}no{{ end }}"
        self.assertEqual(render(t, {"w": {"name": "n"}}), "n\n")
        self.assertEqual(render(t, {"w": {}}), "no\n")

    def test_numbers_print_as_helm_prints_them(self):
        # Values files hold float64s: a million prints in %e form, unless passed through int.
        self.assertEqual(render("{{ .Values.n }} {{ .Values.n | int }} {{ .Values.p }} {{ .Values.f }}",
                                {"n": 1000000, "p": 8080, "f": 0.25}), "1e+06 1000000 8080 0.25\n")
        self.assertEqual(render("{{ .Values.n }}", {"n": 1}, sets=["n=1000000"]), "1000000\n")  # --set: int64

    def test_functions(self):
        self.assertEqual(render('{{ quote "a\\"b" }} {{ "x" | quote }} {{ squote 3 }}'), '"a\\"b" "x" \'3\'\n')
        self.assertEqual(render('{{ default "d" .Values.missing }} {{ default "d" .Values.z }} '
                                '{{ default "d" .Values.s }}', {"z": 0, "s": "v"}), "d d v\n")
        self.assertEqual(render('{{ printf "%s-%d-%v" "a" 3 true }}'), "a-3-true\n")
        self.assertEqual(render("{{ div 7 2 }} {{ div -7 2 }} {{ mod -7 2 }} {{ add 1 2 3 }} {{ sub 5 7 }} "
                                "{{ mul 2 3 4 }}"), "3 -3 -1 6 -2 24\n")
        self.assertEqual(render('{{ "abcdef-" | trunc 4 }} {{ "name-" | trimSuffix "-" }}'), "abcd name\n")
        self.assertEqual(render("{{ eq .Values.port 8080 }} {{ ne 1 2 }} {{ not 0 }}", {"port": 8080}),
                         "true true true\n")
        self.assertEqual(render("{{ and 1 0 }} {{ or 0 \"\" \"z\" }}"), "0 z\n")

    def test_to_yaml_and_indent(self):
        t = "top:\n  {{- toYaml .Values.m | nindent 2 }}\n"
        self.assertEqual(render(t, {"m": {"b": 1, "a": {"c": [1, 2]}}}), "top:\n  a:\n    c:\n    - 1\n    - 2\n  b: 1\n")
        self.assertEqual(render("x:\n{{ toYaml .Values.m | indent 4 }}", {"m": {"k": "v"}}), "x:\n    k: v\n")

    def test_include_and_define(self):
        helpers = '{{- define "n" -}}{{ .Release.Name }}-{{ .Chart.Name }}{{- end -}}'
        self.assertEqual(render('name: {{ include "n" . }}', helpers=helpers), "name: rel-demo\n")
        self.assertEqual(render('{{ include "n" . | upper | quote }}', helpers=helpers), '"REL-DEMO"\n')

    def test_builtins(self):
        self.assertEqual(render("{{ .Release.Name }} {{ .Release.Namespace }} {{ .Chart.Version }} "
                                "{{ .Chart.AppVersion }} {{ $.Release.Service }}"), "rel ns 1.2.3 4.5 Helm\n")

    def test_documents_split_and_empty_dropped(self):
        out = render("{{ if .Values.on }}a: 1{{ end }}\n---\nb: 2\n---\n# only a comment\n", {"on": False})
        self.assertEqual(out, "b: 2\n")

    def test_errors(self):
        for t, msg in [("{{ nosuch 1 }}", "not supported"), ("{{ if 1 }}x", "missing"), ("{{ $v }}", "undefined"),
                       ("{{ end }}", "unexpected"), ('{{ include "nope" . }}', "no template"),
                       ('{{ required "give x" .Values.x }}', "give x"), ("{{ div 1 0 }}", "by zero")]:
            with self.assertRaises(H.TemplateError, msg=t) as cm:
                render(t)
            self.assertIn(msg, str(cm.exception), t)


class Chart(unittest.TestCase):
    def test_fullname_and_values_override(self):
        chart = os.path.join(ARGS.source_dir, "deploy", "helm", "switchyard")
        docs = H.render_chart(chart, release="switchyard")
        sts = [yaml.safe_load(d) for _, d in docs if "kind: StatefulSet" in d][0]
        self.assertEqual(sts["metadata"]["name"], "switchyard")
        docs = H.render_chart(chart, release="prod", sets=["stop.drainSeconds=100", "replicas=5"])
        sts = [yaml.safe_load(d) for _, d in docs if "kind: StatefulSet" in d][0]
        self.assertEqual(sts["metadata"]["name"], "prod-switchyard")
        self.assertEqual(sts["spec"]["replicas"], 5)
        self.assertEqual(sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"], 5 + 100 + 20 + 5)


def main():
    global H, ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ARGS, rest = ap.parse_known_args()
    sys.path.insert(0, os.path.join(os.path.abspath(ARGS.source_dir), "tools", "deploy"))
    import helm_render
    H = helm_render
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=1)


ARGS = None
if __name__ == "__main__":
    main()
