#!/usr/bin/env python3
"""Validates what deploy/ gives Kubernetes, offline: the Helm chart rendered with tools/deploy/helm_render.py
under several sets of values, and the plain manifests of deploy/kubernetes (which must be the chart's
rendering), against the Kubernetes schemas that kubernetes-validate bundles (strict: an unknown field fails) for
the oldest and newest versions the chart supports, and the InferencePool and HTTPRoute documents against
tests/deploy/schemas. Then what the schemas cannot see: the rules of docs/deploy.md between the values, the
probes, the stop and the server's flags, and that `switchyard serve` accepts the configuration the chart writes.
Exit status: the number of failed checks.

Usage: validate_manifests.py --source-dir SRC [--switchyard EXE --plugin-dir DIR]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import jsonschema
import kubernetes_validate
import yaml

KUBE_VERSIONS = ["1.29.0", "1.37.0"]  # persistentVolumeClaimRetentionPolicy is on by default from 1.27
FAILURES = []


QUIET = []


def fail(msg):
    FAILURES.append(msg)
    if not QUIET:
        print(f"FAIL: {msg}")


def ok(msg):
    print(f"ok: {msg}")


def crd_schemas(src):
    d = os.path.join(src, "tests", "deploy", "schemas")
    return {("inference.networking.k8s.io/v1", "InferencePool"): json.load(open(os.path.join(d, "inferencepool-v1.json"))),
            ("gateway.networking.k8s.io/v1", "HTTPRoute"): json.load(open(os.path.join(d, "httproute-v1.json")))}


def validate_doc(doc, where, crds):
    key = (doc.get("apiVersion"), doc.get("kind"))
    name = f"{where}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
    if key in crds:
        try:
            jsonschema.validate(doc, crds[key])
        except jsonschema.ValidationError as e:
            fail(f"{name}: {e.message} at {'/'.join(map(str, e.absolute_path))}")
            return False
        return True
    for v in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(doc, v, strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            fail(f"{name}: no schema for {key} in Kubernetes {v}")
            return False
        except kubernetes_validate.utils.ValidationError as e:
            fail(f"{name} (Kubernetes {v}): {e.message} at {'/'.join(map(str, e.path))}")
            return False
    return True


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def ini_host(text):
    host, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section == "host" and not line.startswith(("#", ";")):
            k, _, v = line.partition("=")
            host[k.strip()] = v.strip()
    return host


def check_rules(docs, values, where):
    """The rules docs/deploy.md states, on one rendering."""
    sts = by_kind(docs, "StatefulSet")
    if len(sts) != 1:
        fail(f"{where}: expected one StatefulSet, got {len(sts)}")
        return
    sts = sts[0]
    pod = sts["spec"]["template"]
    spec = pod["spec"]
    c = spec["containers"][0]
    labels = pod["metadata"]["labels"]
    args = c["args"]
    stop, probes, res = values["stop"], values["probes"], values["resources"]

    def arg(flag):
        return args[args.index(flag) + 1] if flag in args else None

    grace = spec["terminationGracePeriodSeconds"]
    want = stop["preStopSeconds"] + stop["drainSeconds"] + stop["snapshotSeconds"] + stop["marginSeconds"]
    if grace != want:
        fail(f"{where}: terminationGracePeriodSeconds {grace}, not preStop + drain + snapshots + margin = {want}")
    if grace <= stop["preStopSeconds"] + stop["drainSeconds"]:
        fail(f"{where}: the grace period leaves no time for the snapshots after the drain")
    if c["lifecycle"]["preStop"]["exec"]["command"] != ["/bin/sleep", str(stop["preStopSeconds"])]:
        fail(f"{where}: preStop is {c['lifecycle']['preStop']}")
    if arg("--drain-timeout") != str(stop["drainSeconds"]):
        fail(f"{where}: --drain-timeout {arg('--drain-timeout')} is not stop.drainSeconds {stop['drainSeconds']}")
    if "--resume" not in args:
        fail(f"{where}: the server does not start with --resume")
    sp, rp, lp = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    if sp["httpGet"]["path"] != "/health" or rp["httpGet"]["path"] != "/health":
        fail(f"{where}: the startup and readiness probes must ask /health")
    if lp["httpGet"]["path"] == "/health":
        fail(f"{where}: liveness on /health would restart a pod that is loading or draining")
    if sp["failureThreshold"] * sp["periodSeconds"] < probes["loadSeconds"]:
        fail(f"{where}: the startup probe allows {sp['failureThreshold'] * sp['periodSeconds']} s, "
             f"less than loadSeconds {probes['loadSeconds']}")
    if rp["failureThreshold"] * rp["periodSeconds"] > stop["preStopSeconds"] + rp["periodSeconds"]:
        fail(f"{where}: readiness takes longer to drop than the preStop wait")
    mem = f"{res['maxMemoryMiB'] + res['overheadMiB']}Mi"
    if c["resources"]["requests"]["memory"] != mem or c["resources"]["limits"]["memory"] != mem:
        fail(f"{where}: memory request/limit {c['resources']} are not max_memory + overhead = {mem}")
    cm = by_kind(docs, "ConfigMap")[0]
    ini = cm["data"]["switchyard.ini"]
    host = ini_host(ini)
    if host.get("max_memory") != f"{res['maxMemoryMiB']}M":
        fail(f"{where}: max_memory = {host.get('max_memory')} does not match resources.maxMemoryMiB")
    if host.get("drain_timeout") != str(stop["drainSeconds"]):
        fail(f"{where}: drain_timeout = {host.get('drain_timeout')} does not match stop.drainSeconds")
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    if host.get("resume_path") != mounts["resume"]["mountPath"] or arg("--resume-path") != mounts["resume"]["mountPath"]:
        fail(f"{where}: resume_path, --resume-path and the snapshot volume's mount differ")
    if [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] != ["resume"]:
        fail(f"{where}: the claim template is not the snapshot volume")
    if not mounts["models"].get("readOnly"):
        fail(f"{where}: the models volume is not mounted read-only")
    if arg("--config") != os.path.join(mounts["config"]["mountPath"], "switchyard.ini"):
        fail(f"{where}: --config {arg('--config')} is not the ConfigMap's file")
    port = c["ports"][0]["containerPort"]
    if arg("--listen") != f"0.0.0.0:{port}" or host.get("listen") != f"0.0.0.0:{port}":
        fail(f"{where}: the server does not listen on the container port {port}")
    ann = pod["metadata"].get("annotations", {})
    if values["metrics"]["prometheusAnnotations"] and (ann.get("prometheus.io/scrape") != "true"
                                                       or ann.get("prometheus.io/port") != str(port)
                                                       or ann.get("prometheus.io/path") != "/metrics"):
        fail(f"{where}: the Prometheus annotations are {ann}")
    sc = c["securityContext"]
    if not spec["securityContext"].get("runAsNonRoot") or sc.get("allowPrivilegeEscalation") is not False:
        fail(f"{where}: the pod may run as root or escalate")

    def selects(selector):
        return all(labels.get(k) == v for k, v in selector.items())

    if not selects(sts["spec"]["selector"]["matchLabels"]):
        fail(f"{where}: the StatefulSet's selector does not select its pods")
    for svc in by_kind(docs, "Service"):
        if not selects(svc["spec"]["selector"]):
            fail(f"{where}: Service {svc['metadata']['name']} does not select the pods")
    if sts["spec"]["serviceName"] not in [s["metadata"]["name"] for s in by_kind(docs, "Service")]:
        fail(f"{where}: the StatefulSet's serviceName is no Service of the chart")
    for pdb in by_kind(docs, "PodDisruptionBudget"):
        if not selects(pdb["spec"]["selector"]["matchLabels"]):
            fail(f"{where}: the PodDisruptionBudget does not select the pods")
    for pool in by_kind(docs, "InferencePool"):
        if not selects(pool["spec"]["selector"]["matchLabels"]):
            fail(f"{where}: the InferencePool does not select the pods")
        if [p["number"] for p in pool["spec"]["targetPorts"]] != [port]:
            fail(f"{where}: the InferencePool's targetPorts are not the container port")
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        if hpa["spec"]["scaleTargetRef"]["name"] != sts["metadata"]["name"]:
            fail(f"{where}: the HPA scales {hpa['spec']['scaleTargetRef']}")
        if "replicas" in sts["spec"]:
            fail(f"{where}: with an HPA the StatefulSet must leave replicas to it")


def serve_accepts(ini_text, switchyard, plugin_dir, where):
    """The configuration the chart writes, to `switchyard serve` (the model files are not here: their preload
    fails, logged; the config must still be accepted and the server start and stop cleanly)."""
    with tempfile.TemporaryDirectory(prefix="sy-chart-ini-") as work:
        path = os.path.join(work, "switchyard.ini")
        open(path, "w").write(ini_text)
        log_path = os.path.join(work, "log")
        with open(log_path, "w") as log:
            p = subprocess.Popen([switchyard, "serve", "--config", path, "--listen", "127.0.0.1:0", "--plugin-dir",
                                  plugin_dir, "--resume-path", os.path.join(work, "resume")], stdout=log,
                                 stderr=subprocess.STDOUT)
            deadline = time.time() + 20
            while time.time() < deadline and p.poll() is None and "listening on" not in open(log_path).read():
                time.sleep(0.05)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=60)
        text = open(log_path).read()
        if rc != 0 or "listening on" not in text:
            fail(f"{where}: switchyard serve refused the chart's configuration (status {rc}):\n{text[-1500:]}")
        else:
            ok(f"{where}: switchyard serve accepts the chart's configuration")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--switchyard")
    ap.add_argument("--plugin-dir")
    args = ap.parse_args()
    src = os.path.abspath(args.source_dir)
    sys.path.insert(0, os.path.join(src, "tools", "deploy"))
    import helm_render
    import render_manifests
    chart = os.path.join(src, "deploy", "helm", "switchyard")
    crds = crd_schemas(src)

    # The schemas must refuse what is wrong, or passing them means nothing.
    bad = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
           "spec": {"serviceName": "x", "selector": {}, "template": {}, "replicas": "two"}}
    bad_pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "x"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 70000}],
                         "endpointPickerRef": {"name": "epp"}}}
    QUIET.append(True)
    refused = not validate_doc(bad, "self-test", crds), not validate_doc(bad_pool, "self-test", crds)
    del FAILURES[:]
    QUIET.clear()
    if not refused[0]:
        fail("self-test: a StatefulSet with replicas: two passed the schema")
    else:
        ok("self-test: the schema refuses replicas: two")
    if not refused[1]:
        fail("self-test: an InferencePool with port 70000 passed its schema")
    else:
        ok("self-test: the InferencePool schema refuses port 70000")
    value_sets = {
        "defaults": [],
        "autoscaling": ["autoscaling.enabled=true"],
        "inference-pool": ["inferencePool.enabled=true", "inferencePool.httpRoute.enabled=true"],
        "route-to-upstream-pool": ["inferencePool.httpRoute.enabled=true",
                                   "inferencePool.httpRoute.poolName=switchyard-pool"],
        "tuned": ["replicas=3", "resources.maxMemoryMiB=16384", "resources.cpuLimit=true", "resources.cpu=8",
                  "resume.storageClassName=fast-ssd", "resume.size=50Gi", "stop.drainSeconds=120",
                  "probes.loadSeconds=1800", "nodeSelector.pool=inference", "podDisruptionBudget.enabled=false",
                  "metrics.prometheusAnnotations=false", "image.tag=2.0"],
    }
    base_values = yaml.safe_load(open(os.path.join(chart, "values.yaml")))
    for name, sets in value_sets.items():
        docs_text = helm_render.render_to_text(helm_render.render_chart(chart, "switchyard", "default", sets=sets))
        docs = [d for d in yaml.safe_load_all(docs_text) if d]
        n_bad = sum(not validate_doc(d, f"chart ({name})", crds) for d in docs)
        values = json.loads(json.dumps(base_values))
        for s in sets:
            helm_render.apply_set(values, s)
        before = len(FAILURES)
        check_rules(docs, values, f"chart ({name})")
        if n_bad == 0 and len(FAILURES) == before:
            ok(f"chart ({name}): {len(docs)} documents valid ({', '.join(sorted({d['kind'] for d in docs}))})")
        if args.switchyard and name in ("defaults", "tuned"):
            serve_accepts(by_kind(docs, "ConfigMap")[0]["data"]["switchyard.ini"], args.switchyard,
                          args.plugin_dir, f"chart ({name})")

    kdir = os.path.join(src, "deploy", "kubernetes")
    for n in sorted(os.listdir(kdir)):
        if not n.endswith(".yaml") or n == "epp-values.yaml":
            continue
        docs = [d for d in yaml.safe_load_all(open(os.path.join(kdir, n))) if d]
        if all(validate_doc(d, f"deploy/kubernetes/{n}", crds) for d in docs):
            ok(f"deploy/kubernetes/{n}: {len(docs)} documents valid")
    for n, (_, _, _) in render_manifests.MANIFESTS.items():
        path = os.path.join(kdir, n)
        if not os.path.exists(path) or open(path).read() != render_manifests.render(n):
            fail(f"deploy/kubernetes/{n} is not the chart's rendering: run tools/deploy/render_manifests.py")
    epp = yaml.safe_load(open(os.path.join(kdir, "epp-values.yaml")))
    sts_labels = {"app.kubernetes.io/name": "switchyard", "app.kubernetes.io/instance": "switchyard"}
    if epp["inferencePool"]["modelServers"]["matchLabels"] != sts_labels:
        fail("deploy/kubernetes/epp-values.yaml does not select the pods of deploy/kubernetes/switchyard.yaml")
    flags = epp["inferenceExtension"]["flags"]
    metrics_c = open(os.path.join(src, "host", "api", "metrics.c")).read()
    for flag in ("total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric"):
        if f'"{flags[flag]}' not in metrics_c:
            fail(f"epp-values.yaml: {flag} names {flags[flag]}, which /metrics does not export")
    print(f"{len(FAILURES)} failure(s)")
    return min(len(FAILURES), 100)


if __name__ == "__main__":
    sys.exit(main())
