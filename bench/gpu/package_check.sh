#!/usr/bin/env bash
# The wheel on the GPU machine (issue 13): installs build/dist/gpumem-*.whl (or $1) offline into a fresh
# virtual environment that sees the system's PyTorch, then from another directory: gpumem --version and info,
# `gpumem run` of a PyTorch program, gpumem.gpus() against nvidia-smi's memory.used, the notebook helpers
# under PyTorch's allocator and under gpumem's, and the cost per sample of gpumem.gpus() (in process through the
# wheel's libgpumem_monitor.so) vs pynvml (or raw NVML) / nvidia-smi as GPUtil runs it (python_api_cost.py).
# Prints PASS/FAIL/COST lines; exit 1 if any FAIL. Usage: bench/gpu/package_check.sh [path/to/gpumem.whl]
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
wheel=${1:-$(ls "$src"/build/dist/gpumem-*.whl 2>/dev/null | head -1)}
[[ -f $wheel ]] || { echo "FAIL no wheel (run make wheel, or pass its path)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }

echo "wheel: $(basename "$wheel"); glibc here: $(ldd --version | head -1)"
python3 -m venv --system-site-packages "$tmp/venv" || { echo "FAIL python3 -m venv"; exit 1; }
check "pip install --no-index the wheel" '"$tmp/venv/bin/python" -m pip install -q --no-index "$wheel"'
export PATH="$tmp/venv/bin:$PATH"
cd "$tmp"
check "gpumem on PATH is the venv's" '[[ $(command -v gpumem) == $tmp/venv/bin/gpumem ]]'
check "gpumem --version" 'gpumem --version'
check "gpumem info" 'gpumem info'
check "gpumem run: a PyTorch program allocates through gpumem" 'gpumem run -- python -c "
import torch
x = torch.ones(256 << 20, dtype=torch.uint8, device=\"cuda\")
assert torch.cuda.memory.get_allocator_backend() == \"pluggable\", torch.cuda.memory.get_allocator_backend()
assert torch.cuda.memory_allocated() >= 256 << 20
print(\"allocated\", torch.cuda.memory_allocated())"'
check "gpumem.gpus() memory.used matches nvidia-smi (within 64 MiB)" 'python -c "
import subprocess, gpumem
smi = [int(l) for l in subprocess.run([\"nvidia-smi\", \"--query-gpu=memory.used\", \"--format=csv,noheader,nounits\"],
       capture_output=True, text=True, check=True).stdout.split()]
ours = [g.memory_used >> 20 for g in gpumem.gpus()]
print(\"nvidia-smi\", smi, \"gpumem\", ours)
assert len(smi) == len(ours) and all(abs(a - b) <= 64 for a, b in zip(smi, ours))"'
check "gpumem.gpus() reads in process through the wheel's libgpumem_monitor.so" 'python -c "
import gpumem._monitor as m
kind, where = m.backend()
print(kind, where)
assert kind == \"library\" and where.endswith(\"/gpumem/_bin/libgpumem_monitor.so\")"'
check "notebook helpers under PyTorch's allocator" 'python "$src/bench/gpu/package_notebook.py"'
check "notebook helpers under gpumem's allocator" 'gpumem run -q -- python "$src/bench/gpu/package_notebook.py"'
python "$src/bench/gpu/python_api_cost.py" || { echo "FAIL python_api_cost.py"; fails=$((fails + 1)); }
echo "package_check: $fails failed"
((fails == 0))
