"""Host cost of torch.empty + free through PyTorch, native allocator vs gpumem, in one run.

    python3 bench/gpu/torch_host_cost.py --gpumem .device/gpu/gpumem [--json out.json]

Runs the same timing loop in two fresh processes (an allocator cannot change inside one): PyTorch's own
caching allocator, and `gpumem run`. Each times `torch.empty(n, uint8, device="cuda")` followed by `del`
for 1 MiB and 64 MiB, after a warm-up that fills both caches, as the median of 7 repeats of 20000 pairs.
Prints a table (µs per pair, ratio native/gpumem: above 1 means gpumem is cheaper); exit 1 if a run fails.
"""
import argparse
import json
import os
import subprocess
import sys

SIZES = {"1 MiB": 1 << 20, "64 MiB": 64 << 20}
WORKER = r"""
import json, statistics, sys, time, torch
sizes, pairs, repeats = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.cuda.init()
out = {"allocator": torch.cuda.memory.get_allocator_backend()}
for name, n in sizes.items():
    for _ in range(1000):                      # warm-up: the block is cached after the first pair
        x = torch.empty(n, dtype=torch.uint8, device="cuda"); del x
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            x = torch.empty(n, dtype=torch.uint8, device="cuda"); del x
        runs.append((time.perf_counter_ns() - t0) / pairs / 1000.0)
    out[name] = statistics.median(runs)
print("RESULT " + json.dumps(out))
"""


def run(command, pairs, repeats):
    r = subprocess.run(command + [sys.executable, "-c", WORKER, json.dumps(SIZES), str(pairs), str(repeats)],
                       capture_output=True, text=True, timeout=600)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    sys.stderr.write(f"torch_host_cost: {' '.join(command) or 'native'} failed (exit {r.returncode}):\n{r.stderr[-2000:]}\n")
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpumem", default=os.path.join(os.path.dirname(__file__), "..", "..", "build", "gpumem"),
                   help="the gpumem binary (libgpumem.so and gpumem_torch.py beside it)")
    p.add_argument("--pairs", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", help="also write the numbers to this file")
    a = p.parse_args()
    if a.pairs < 1 or a.repeats < 1:
        p.error("--pairs and --repeats must be at least 1")
    native = run([], a.pairs, a.repeats)
    gpumem = run([a.gpumem, "run", "-q", "--"], a.pairs, a.repeats)
    if not native or not gpumem:
        return 1
    if gpumem.get("allocator") != "pluggable":
        sys.stderr.write("torch_host_cost: the gpumem run did not use a pluggable allocator\n")
        return 1
    print(f"{'torch.empty + free':<20} {'native µs':>10} {'gpumem µs':>10} {'native/gpumem':>14}")
    rows = {}
    for name in SIZES:
        rows[name] = {"native_us": native[name], "gpumem_us": gpumem[name], "ratio": native[name] / gpumem[name]}
        print(f"{name:<20} {native[name]:>10.3f} {gpumem[name]:>10.3f} {rows[name]['ratio']:>13.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
