#!/usr/bin/env bash
# Installs the Debian 12 packages gpumem builds and tests with. Idempotent: does nothing when all are present.
set -euo pipefail
packages=(cmake g++ make pkg-config python3 zlib1g-dev libncurses-dev libgtest-dev libgmock-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev libcpp-httplib-dev
          prometheus tmux python3-venv python3-pip)
# prometheus: promtool and a real server for the exporter tests (tests/exporter); tmux: the end-to-end tests
# of gpumem top (tests/tui); python3-venv, python3-pip: the wheel's test (tests/packaging)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
echo "install-deps: installing ${missing[*]}"
sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
