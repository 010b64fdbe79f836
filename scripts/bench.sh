#!/usr/bin/env bash
# Builds the CPU benchmarks in Release and runs them; prints a short table (median of 3 repetitions,
# CPU time per operation) with the targets from issue 2. Extra arguments go to the benchmark program,
# e.g. scripts/bench.sh --benchmark_filter=MixedSizes. BENCH_BUILD picks the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BENCH_BUILD:-build-bench}
jobs=${JOBS:-$(nproc)}
echo "bench: building engine_bench (Release) in $build" >&2
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPUMEM_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target engine_bench -j "$jobs" >/dev/null
json=$(mktemp)
trap 'rm -f "$json"' EXIT
echo "bench: running (about a minute)" >&2
"$build/bench/engine_bench" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$json" --benchmark_out_format=json "$@" >/dev/null
python3 - "$json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
targets = {"BM_MallocFree/1048576": 40.0, "BM_MixedSizes": 80.0}
ctx = data["context"]
print(f"{ctx.get('host_name', '?')}: {ctx['num_cpus']} CPUs, load {ctx.get('load_avg', ['?'])[0]}")
print(f"{'benchmark':44} {'cpu ns/op':>10} {'real ns/op':>11} {'Mops/s':>8}  target")
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"]
    scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    cpu, real = b["cpu_time"] * scale, b["real_time"] * scale
    rate = b.get("items_per_second", 0) / 1e6
    target = targets.get(name)
    verdict = "" if target is None else f"<= {target:g} ns: {'met' if cpu <= target else 'MISSED'}"
    print(f"{name:44} {cpu:10.1f} {real:11.1f} {rate:8.2f}  {verdict}")
PY
