#!/usr/bin/env python3
"""CTest fixture: a virtual environment holding the official `openai` and `ollama` Python clients (and
`jsonschema`, which checks structured outputs; `langchain-openai` when it installs, for with_structured_output).

Usage: setup_clients.py VENV_DIR

The integration test drives the server with the real clients, so it cannot run without them: when they cannot
be installed this setup FAILS (and CTest then does not run the tests that need it) with a message saying what to
do. An environment that already has both packages is reused as it is.
"""
import os
import subprocess
import sys
import venv

PACKAGES = ["openai>=1.0", "ollama>=0.4", "jsonschema>=4", "anthropic>=0.40"]
# Wanted but not required: the LangChain check runs where it installs and says so where it does not.
OPTIONAL = ["langchain-openai>=0.2", "langchain-ollama>=0.2", "zstandard"]


def have_clients(python):
    if not os.path.exists(python):
        return False
    probe = "import openai, ollama, jsonschema, anthropic; print('openai', openai.__version__)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def install_optional(python):
    if subprocess.run([python, "-c", "import langchain_openai, langchain_ollama, zstandard"],
                      capture_output=True).returncode == 0:
        return
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *OPTIONAL]
    if subprocess.run(cmd).returncode != 0:
        print(f"note: {' '.join(OPTIONAL)} did not install; the LangChain check will report itself skipped")


def main():
    if len(sys.argv) != 2:
        print("usage: setup_clients.py VENV_DIR", file=sys.stderr)
        return 2
    venv_dir = os.path.abspath(sys.argv[1])
    python = os.path.join(venv_dir, "bin", "python")
    if have_clients(python):
        print(f"ok: openai, ollama and jsonschema are installed in {venv_dir}")
        install_optional(python)
        return 0
    print(f"creating {venv_dir} and installing {' '.join(PACKAGES)} with pip ...", flush=True)
    try:
        venv.create(venv_dir, with_pip=True, clear=True)
    except Exception as exc:  # venv raises several kinds; all mean the same here
        print(f"FAIL: cannot create the virtual environment {venv_dir}: {exc}", file=sys.stderr)
        return 1
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", *PACKAGES]
    result = subprocess.run(cmd)
    if result.returncode != 0 or not have_clients(python):
        print(
            "FAIL: could not pip-install the official Python clients 'openai' and 'ollama' into "
            f"{venv_dir}. The integration tests drive the server with them and cannot run without them. "
            "Give pip access to PyPI (or a mirror: PIP_INDEX_URL, or a wheel folder: PIP_FIND_LINKS) and run "
            "the tests again.",
            file=sys.stderr,
        )
        return 1
    print(f"ok: openai, ollama and jsonschema installed in {venv_dir}")
    install_optional(python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
