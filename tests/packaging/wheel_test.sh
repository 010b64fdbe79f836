#!/usr/bin/env bash
# make_wheel.py over the existing build, installed offline into a fresh virtual environment and used from
# another directory: `gpumem` on PATH, `import gpumem`, `import gpumem_torch` finding the wheel's libgpumem.so,
# the installed `gpumem run` finding its own libgpumem.so and shim, `gpumem exporter` saying it is not in the
# wheel, gpumem.gpus() against the NVML test double. Usage: wheel_test.sh BUILD_DIR SRC_DIR
set -euo pipefail
build=$(realpath "$1") src=$(realpath "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL $*" >&2; exit 1; }

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
wheel=$(python3 "$src/packaging/make_wheel.py" "$build" "$src" "$version" "$tmp/dist")
need=$(objdump -T "$build/gpumem" "$build/libgpumem.so" "$build/libgpumem_monitor.so" | grep -o 'GLIBC_2\.[0-9]*' |
       sort -uV | tail -1)
# linux_x86_64, not manylinux: the gpumem binary needs ncurses, which manylinux does not allow (make_wheel.py).
[[ $(basename "$wheel") == "gpumem-$version-py3-none-linux_x86_64.whl" ]] || fail "wheel name $(basename "$wheel")"
meta=$(python3 -c 'import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())' "$wheel" \
       "gpumem-$version.dist-info/METADATA")
[[ $meta == *"Requires-External: glibc (>=2.${need#GLIBC_2.})"* ]] || fail "METADATA does not say glibc >= $need: $meta"
if readelf -d "$build/gpumem" | grep -q 'libncursesw\|libtinfo'; then
  [[ $meta == *"Requires-External: libncursesw6"* ]] || fail "METADATA does not name ncurses: $meta"
fi

python3 -m venv "$tmp/venv" || fail "python3 -m venv (python3-venv installed?)"
"$tmp/venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel" || fail "pip install"
mkdir "$tmp/elsewhere" && cd "$tmp/elsewhere"
export PATH="$tmp/venv/bin:$PATH"
unset GPUMEM_BINARY GPUMEM_LIBRARY PYTHONPATH
[[ $(command -v gpumem) == "$tmp/venv/bin/gpumem" ]] || fail "gpumem is not on PATH from the venv"
[[ $(gpumem --version) == "gpumem $version" ]] || fail "gpumem --version: $(gpumem --version)"
gpumem replay --help >/dev/null || fail "gpumem replay --help"
python -c "import gpumem, sys; assert gpumem.__version__ == '$version', gpumem.__version__" || fail "import gpumem"

# `import gpumem_torch` as the README says, without `gpumem run`: the top-level module finds the wheel's library.
out=$(GPUMEM_BACKEND=host python -c '
import gpumem_torch
p = gpumem_torch.allocate(1 << 20); print(gpumem_torch._lib_path, gpumem_torch.memory_allocated(0))
gpumem_torch.deallocate(p)') || fail "import gpumem_torch from the wheel: $out"
[[ $out == "$tmp/venv/lib/python"*"/site-packages/gpumem/_bin/libgpumem.so 1048576" ]] || fail "import gpumem_torch used: $out"

# `gpumem exporter`: not in the wheel, and it says so (and where the exporter comes from).
if out=$(gpumem exporter --once 2>&1); then fail "gpumem exporter from the wheel succeeded: $out"; fi
[[ $out == *"not part of the pip wheel"*".deb"* ]] || fail "gpumem exporter from the wheel said: $out"

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
