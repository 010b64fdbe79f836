#!/usr/bin/env python3
"""Runs every check of bench/gpu/torch_checks.py natively and under `gpumem run`, each in a fresh process,
and prints a table (check, native, gpumem) and how many natively passing checks pass under gpumem.

    python3 scripts/torch-checks.py --gpumem .device/gpu/gpumem [--only a,b] [--json out.json]

Exit status: 0 every check that passes natively passes under gpumem (checks marked `detail`, which assert
PyTorch's own segment sizes, are counted apart); 1 some do not; 2 bad usage.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHECKS = os.path.join(ROOT, "bench", "gpu", "torch_checks.py")


def run_check(prefix, name, timeout):
    """One check in a fresh process: (status, note, digest-or-note, seconds)."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(prefix + [sys.executable, CHECKS, name], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "note": f"over {timeout} s", "seconds": timeout}
    seconds = round(time.monotonic() - t0, 1)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT ") and r.returncode == 0:
            result = json.loads(line[len("RESULT "):])
            result["seconds"] = seconds
            return result
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    return {"status": "fail", "note": (lines[-1] if lines else f"exit {r.returncode}")[:160], "seconds": seconds,
            "exit": r.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpumem", default=os.path.join(ROOT, "build", "gpumem"), help="the gpumem binary")
    p.add_argument("--only", help="comma-separated check names")
    p.add_argument("--skip", default="", help="comma-separated check names to leave out")
    p.add_argument("--timeout", type=int, default=240, help="seconds per check and allocator")
    p.add_argument("--json", help="write every result to this file")
    a = p.parse_args()
    if not os.path.exists(a.gpumem):
        p.error(f"{a.gpumem} does not exist (build gpumem or pass --gpumem)")
    listing = subprocess.run([sys.executable, CHECKS, "--list"], capture_output=True, text=True)
    if listing.returncode != 0:
        sys.stderr.write(f"torch-checks: cannot list the checks (is torch installed?):\n{listing.stderr}\n")
        return 1
    checks = [json.loads(line) for line in listing.stdout.splitlines()]
    names = {c["name"] for c in checks}
    only = set(a.only.split(",")) if a.only else names
    unknown = (only | set(filter(None, a.skip.split(",")))) - names
    if unknown:
        p.error(f"unknown check(s): {', '.join(sorted(unknown))}")
    checks = [c for c in checks if c["name"] in only and c["name"] not in a.skip.split(",")]

    rows = []
    print(f"{'check':<42} {'native':<8} {'gpumem':<8} note", flush=True)
    for c in checks:
        native = run_check([], c["name"], a.timeout)
        gpumem = run_check([a.gpumem, "run", "-q", "--"], c["name"], a.timeout)
        if native["status"] == gpumem["status"] == "pass" and native.get("note") != gpumem.get("note"):
            gpumem["status"] = "differs"
            gpumem["note"] = f"native {native.get('note')} vs gpumem {gpumem.get('note')}"
        if gpumem["status"] == "pass" and gpumem.get("allocator") != "pluggable":
            gpumem["status"] = "fail"
            gpumem["note"] = "gpumem was not PyTorch's allocator in this run"
        note = gpumem.get("note") if gpumem["status"] != "pass" else native.get("note", "")
        flag = " [detail]" if c["detail"] else ""
        print(f"{c['name'] + flag:<42} {native['status']:<8} {gpumem['status']:<8} {note or ''}", flush=True)
        if native["status"] == "fail":
            print(f"{'':<42} native: {native['note']}", flush=True)
        rows.append({**c, "native": native, "gpumem": gpumem})

    def tally(detail):
        base = [r for r in rows if r["detail"] == detail and r["native"]["status"] == "pass"]
        return sum(r["gpumem"]["status"] == "pass" for r in base), len(base)
    api_ok, api_n = tally(False)
    det_ok, det_n = tally(True)
    print(f"\nof {api_n} checks that pass natively, {api_ok} pass under gpumem; "
          f"allocator-detail checks: {det_ok} of {det_n}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "api": [api_ok, api_n], "detail": [det_ok, det_n]}, f, indent=2)
    return 0 if api_ok == api_n else 1


if __name__ == "__main__":
    sys.exit(main())
