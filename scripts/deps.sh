#!/usr/bin/env bash
# Installs the Debian packages psar needs, only those that are missing.
# Usage: scripts/deps.sh [--runtime-only]
set -euo pipefail

packages=(
  build-essential cmake pkg-config zlib1g-dev
  libopenmpi-dev openmpi-bin
  libzmq3-dev cppzmq-dev
  libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  iproute2 util-linux
  dataset-fashion-mnist fortunes-min
  python3 python3-yaml python3-matplotlib python3-pytest
  slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "psar: installing missing packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
