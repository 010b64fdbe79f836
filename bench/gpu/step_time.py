"""Step time under gpumem vs PyTorch's native allocator, measured so that a 1% difference can be told
from noise: each workload of bench/gpu/train.py runs R times natively and R times under `gpumem run`,
every run a fresh process, in alternating order (N G, G N, N G, ...) so that drift of the machine
falls on both sides, after an untimed native run (the first process after a pause starts cold: ViT's
first native run took 3.6 s, the next 2.3). --expandable adds PyTorch's expandable_segments as an arm.
Nothing else runs in the timed processes (no GPUMEM_TRACE, no report).

    python3 bench/gpu/step_time.py --gpumem .device/gpu/gpumem [--rounds 3] [--workloads lm:80,vit:40]
                                   [--steps N] [--warmup 1] [--expandable] [--json out.json]

For each workload it prints the sums of step times over all steps and after step 0 (CUDA, cuBLAS and
cuDNN start-up), the median of gpumem's sums over the median of native's, and native's own spread
(largest / smallest native sum): a ratio inside that spread is not a measured difference; the median
time gpumem spent in driver calls per run, and the ratio over the steps in which gpumem made none (what
is left there is host cost and noise); then gpumem's driver calls per kind.
Exit status: 0 measured (whatever the ratios), 1 a run failed, 2 bad usage."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TRAIN = os.path.join(ROOT, "bench", "gpu", "train.py")
WORKLOADS = ("lm", "resnet", "vit", "generate")


def run_once(gpumem, workload, steps, under_gpumem, extra_env=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [sys.executable, TRAIN, workload, "--out", out.name] + (["--steps", str(steps)] if steps else [])
        if under_gpumem:
            cmd = [gpumem, "run", "-q", "--"] + cmd
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEM_TRACE")}
        env.update(extra_env or {})
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{workload} {'gpumem' if under_gpumem else 'native'} exited {proc.returncode}: "
                               f"{proc.stderr.strip()[-400:]}")
        with open(out.name) as f:
            result = json.load(f)
    step_ms, driver = result["step_ms"], result.get("driver", {})
    return {"all": sum(step_ms), "after0": sum(step_ms[1:]), "step_ms": step_ms, "driver": driver,
            "step_driver_ms": result.get("driver_ms", []),
            "driver_ms": sum(v for k, v in driver.items() if k.endswith(".us")) / 1e3,
            "ahead": result.get("ahead", {})}


EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def measure(gpumem, workload, rounds, steps, variant=None, expandable=False, warmup=1):
    # variant: (VAR, VALUE) for a third arm, gpumem with that environment (e.g. GPUMEM_MAP_AHEAD=0);
    # expandable: one more arm, PyTorch's own allocator with its expandable_segments (its VMM mode)
    runs = {"native": [], "gpumem": []}
    arms = [("native", False, None), ("gpumem", True, None)]
    if variant:
        runs["variant"] = []
        arms.append(("variant", True, {variant[0]: variant[1]}))
    if expandable:
        runs["expandable"] = []
        arms.append(("expandable", False, EXPANDABLE))
    for _ in range(warmup):  # untimed: the first process after a pause starts cold (GPU clocks, disk cache)
        run_once(gpumem, workload, steps, False)
    for r in range(rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        if r % 2:
            order.reverse()
        for name, under_gpumem, env in order:
            runs[name].append(run_once(gpumem, workload, steps, under_gpumem, env))
            print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    result = {"workload": workload, "rounds": rounds, "runs": runs}
    for part in ("all", "after0"):
        native = [x[part] for x in runs["native"]]
        mine = [x[part] for x in runs["gpumem"]]
        result[part] = {
            "native_ms": native,
            "gpumem_ms": mine,
            "ratio": statistics.median(mine) / statistics.median(native),
            "native_spread": max(native) / min(native),
        }
        for arm in ("variant", "expandable"):
            if arm in runs:
                other = [x[part] for x in runs[arm]]
                result[part][arm + "_ms"] = other
                result[part][arm + "_ratio"] = statistics.median(other) / statistics.median(native)
    if variant:
        result["variant"] = f"{variant[0]}={variant[1]}"
        result["variant_driver_ms"] = statistics.median(x["driver_ms"] for x in runs["variant"])
    # gpumem's own time in driver calls (create, map, access, unmap, release), whole run: how much of a
    # difference the mapping explains; and the ratio over the steps (after step 0) in which gpumem made
    # no driver call in any round: what is left there is host cost and noise.
    result["gpumem_driver_ms"] = statistics.median(x["driver_ms"] for x in runs["gpumem"])
    steps = min(len(x["step_ms"]) for x in runs["native"] + runs["gpumem"])
    quiet = [k for k in range(1, steps)
             if all(len(x["step_driver_ms"]) > k and x["step_driver_ms"][k] < 0.05 for x in runs["gpumem"])]
    result["quiet_steps"] = len(quiet)
    result["quiet_ratio"] = (sum(x["step_ms"][k] for x in runs["gpumem"] for k in quiet) /
                             sum(x["step_ms"][k] for x in runs["native"] for k in quiet)) if quiet else None
    return result


HEADER = ("| workload | native all steps (ms) | gpumem all steps (ms) | gpumem / native | after step 0 | "
          "native spread | gpumem driver calls (ms) | steps without driver calls (n) |\n|---|---|---|---|---|---|---|---|")


def row(r):
    a, b = r["all"], r["after0"]
    quiet = "-" if r.get("quiet_ratio") is None else f"{r['quiet_ratio']:.4f}"
    return (f"| {r['workload']} | {' '.join(f'{x:.0f}' for x in a['native_ms'])} | "
            f"{' '.join(f'{x:.0f}' for x in a['gpumem_ms'])} | {a['ratio']:.4f} | {b['ratio']:.4f} | "
            f"{a['native_spread']:.3f} / {b['native_spread']:.3f} | {r.get('gpumem_driver_ms', 0):.0f} | "
            f"{quiet} ({r.get('quiet_steps', 0)}) |")


def valid_spec(spec):
    name, _, steps = spec.partition(":")
    return name in WORKLOADS and (steps == "" or (steps.isdigit() and 0 < int(steps) < 1000))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpumem", required=True, help="the gpumem binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated, each NAME or NAME:STEPS")
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default: train.py's)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--variant", help="VAR=VALUE: a third arm, gpumem run with that in its environment")
    ap.add_argument("--warmup", type=int, default=1, help="untimed native runs first, per workload (default 1)")
    ap.add_argument("--expandable", action="store_true",
                    help="one more arm: PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    workloads = [w for w in args.workloads.split(",") if w]
    if args.rounds < 1 or args.warmup < 0 or not all(map(valid_spec, workloads)) or not os.access(args.gpumem, os.X_OK):
        print(f"step_time: need --rounds >= 1, --warmup >= 0, workloads among {', '.join(WORKLOADS)} (NAME or NAME:STEPS, "
              "1-999 steps) and an executable --gpumem",
              file=sys.stderr)
        return 2
    results = []
    print(HEADER)
    for spec in workloads:
        w, _, steps = spec.partition(":")
        try:
            r = measure(args.gpumem, w, args.rounds, int(steps) if steps else args.steps,
                        tuple(args.variant.split("=", 1)) if args.variant else None, args.expandable, args.warmup)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"step_time: {e}", file=sys.stderr)
            return 1
        results.append(r)
        print(row(r), flush=True)
        if "variant" in r:
            a, b = r["all"], r["after0"]
            print(f"  {r['variant']}: {' '.join(f'{x:.0f}' for x in a['variant_ms'])} ms, / native "
                  f"{a['variant_ratio']:.4f}, after step 0 {b['variant_ratio']:.4f}, driver "
                  f"{r['variant_driver_ms']:.0f} ms", flush=True)
        if "expandable_ms" in r["all"]:
            a, b = r["all"], r["after0"]
            print(f"  expandable_segments: {' '.join(f'{x:.0f}' for x in a['expandable_ms'])} ms, / native "
                  f"{a['expandable_ratio']:.4f}, after step 0 {b['expandable_ratio']:.4f}", flush=True)
    for r in results:  # where gpumem's driver time went, per kind (its last run)
        driver = r["runs"]["gpumem"][-1]["driver"]
        print(f"{r['workload']} driver: " + ", ".join(
            f"{k} {driver.get(k + '.calls', 0)} / {driver.get(k + '.us', 0) / 1e3:.1f} ms"
            for k in ("create", "map", "access", "unmap", "release", "sync")) +
            f"; made ahead on gpumem's own thread: {r['runs']['gpumem'][-1]['ahead'].get('pages', 0)} pages / "
            f"{r['runs']['gpumem'][-1]['ahead'].get('us', 0) / 1e3:.1f} ms, "
            f"{r['runs']['gpumem'][-1]['ahead'].get('unused', 0)} unmapped unused, held at most "
            f"{r['runs']['gpumem'][-1]['ahead'].get('held_peak_bytes', 0) / 2**20:.0f} MiB "
            f"({r['runs']['gpumem'][-1]['ahead'].get('held_bytes', 0) / 2**20:.0f} at the end)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
