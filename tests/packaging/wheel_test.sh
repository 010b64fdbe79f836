#!/usr/bin/env bash
# make_wheel.py over the existing build, installed offline into a fresh virtual environment and used from
# another directory: `gpumem` on PATH, `import gpumem`, the installed `gpumem run` finding its own
# libgpumem.so and shim, gpumem.gpus() against the NVML test double. Usage: wheel_test.sh BUILD_DIR SRC_DIR
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*" >&2; exit 1; }

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
wheel=$(python3 "$src/packaging/make_wheel.py" "$build" "$src" "$version" "$tmp/dist")
need=$(objdump -T "$build/gpumem" "$build/libgpumem.so" "$build/libgpumem_monitor.so" | grep -o 'GLIBC_2\.[0-9]*' |
       sort -uV | tail -1)
[[ $(basename "$wheel") == "gpumem-$version-py3-none-manylinux_2_${need#GLIBC_2.}_x86_64.whl" ]] \
  || fail "wheel name $(basename "$wheel") does not match the binaries' $need"

python3 -m venv "$tmp/venv" || fail "python3 -m venv (python3-venv installed?)"
"$tmp/venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel" || fail "pip install"
mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere"
export PATH="$tmp/venv/bin:$PATH"
unset GPUMEM_BINARY GPUMEM_LIBRARY PYTHONPATH
[[ $(command -v gpumem) == "$tmp/venv/bin/gpumem" ]] || fail "gpumem is not on PATH from the venv"
[[ $(gpumem --version) == "gpumem $version" ]] || fail "gpumem --version: $(gpumem --version)"
gpumem replay --help >/dev/null || fail "gpumem replay --help"
python -c "import gpumem, sys; assert gpumem.__version__ == '$version', gpumem.__version__" || fail "import gpumem"

out=$(gpumem run -q --backend host -- python -c '
import os, gpumem_torch
p = gpumem_torch.allocate(1 << 20); print(os.environ["GPUMEM_LIBRARY"], gpumem_torch.memory_allocated(0))') \
  || fail "gpumem run from the wheel: $out"
[[ $out == "$tmp/venv/lib/python"*"/site-packages/gpumem/_bin/libgpumem.so 1048576" ]] || fail "gpumem run used: $out"

export GPUMEM_NVML_LIBRARY="$build/fake_nvml/libgpumem_fake_nvml_current.so"
export GPUMEM_FAKE_NVML_SCENARIO="$src/tests/monitor/scenarios/two_gpus.txt"
python -c '
import gpumem, gpumem._monitor as m
assert m.backend()[0] == "library" and m.backend()[1].endswith("/site-packages/gpumem/_bin/libgpumem_monitor.so"), m.backend()
g = gpumem.gpus()
assert [x.name for x in g][:2] == ["NVIDIA H100 80GB HBM3"] * 2, g
assert g[0].memory_used == 20480 << 20 and [p.pid for p in g[0].processes] == [4242, 4343], g[0]' \
  || fail "gpumem.gpus() from the wheel"
echo "PASS wheel $(basename "$wheel"): installed offline, gpumem on PATH, import gpumem, gpumem run, gpus() in process"
