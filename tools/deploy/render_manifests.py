#!/usr/bin/env python3
"""Writes the plain manifests of deploy/kubernetes from the Helm chart (tools/deploy/helm_render.py), so that the
two never disagree; the suite checks that the committed files are what this writes.

Usage: render_manifests.py [--check]   (--check: exit 1, naming the file, when a committed one differs)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helm_render  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHART = os.path.join(ROOT, "deploy", "helm", "switchyard")
OUT = os.path.join(ROOT, "deploy", "kubernetes")
HEADER = ("# Generated from deploy/helm/switchyard by tools/deploy/render_manifests.py ({what}); edit the chart,\n"
          "# then run the script. `kubectl apply -f` this file as it is, or change it to taste: docs/deploy.md.\n")

# file -> (what it holds, --set values, which templates' documents)
MANIFESTS = {
    "switchyard.yaml": ("the server: ConfigMap, Services, StatefulSet, PodDisruptionBudget", [],
                        ("configmap.yaml", "service.yaml", "statefulset.yaml", "pdb.yaml")),
    "hpa.yaml": ("a HorizontalPodAutoscaler on queue depth; apply it with switchyard.yaml",
                 ["autoscaling.enabled=true"], ("hpa.yaml",)),
    "inference-gateway.yaml": ("routing with the Gateway API Inference Extension: InferencePool and HTTPRoute",
                               ["inferencePool.enabled=true", "inferencePool.httpRoute.enabled=true"], ("inferencepool.yaml",)),
}


def render(name):
    what, sets, templates = MANIFESTS[name]
    docs = helm_render.render_chart(CHART, release="switchyard", namespace="default", sets=sets)
    docs = [(src, doc) for src, doc in docs if os.path.basename(src) in templates]
    return HEADER.format(what=what) + helm_render.render_to_text(docs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    stale = 0
    for name in MANIFESTS:
        text = render(name)
        path = os.path.join(OUT, name)
        if args.check:
            current = open(path).read() if os.path.exists(path) else None
            if current != text:
                print(f"FAIL: deploy/kubernetes/{name} is not what the chart renders; run tools/deploy/render_manifests.py")
                stale += 1
            else:
                print(f"ok: deploy/kubernetes/{name} is the chart's rendering")
            continue
        os.makedirs(OUT, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        print(f"wrote deploy/kubernetes/{name}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
