"""A workload on a GPU that another process has nearly filled (a shared server): natively, then under
`gpumem run`, each with the same free memory left by a holder process.

Usage (on the GPU machine): python3 bench/gpu/crowded.py GPUMEM_BINARY FREE WORKLOAD [FREE WORKLOAD ...]
  FREE: GiB the holder leaves free for the first workload; WORKLOAD: a name from record_workloads.py.
  More FREE WORKLOAD pairs may follow; CROWDED_ONLY=native or =gpumem runs only that side.
  Prints one line per run: exit status, peaks, the OOM message if any.
Exit: 0 when every gpumem run completed, 1 otherwise (a native OOM is reported, not a failure)."""
import os, subprocess, sys, time

HOLDER = r"""
import sys, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]) * 2**30)
x = torch.empty(max(0, free - keep - (256 << 20)), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(torch.cuda.mem_get_info()[0], flush=True)
sys.stdin.read()
"""


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    peaks = [l for l in out.splitlines() if "peak allocated" in l]
    oom = [l for l in out.splitlines() if "out of memory" in l.lower()]
    return p.returncode, (peaks[-1] if peaks else ""), (oom[0][:1200] if oom else "")


def main(argv):
    if len(argv) < 3 or len(argv) % 2 == 0:
        sys.stderr.write(__doc__)
        return 2
    gpumem, pairs = argv[0], list(zip(argv[2::2], argv[1::2]))
    failed = False
    for workload, free in pairs:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, free], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        left = int(holder.stdout.readline())
        try:
            print(f"{workload}: {left / 2**30:.2f} GiB free on the device beside the holder", flush=True)
            for name, cmd in (("native", []), ("gpumem", [gpumem, "run", "--"])):
                if os.environ.get("CROWDED_ONLY", name) != name:
                    continue
                t = time.time()
                rc, peaks, oom = run(cmd + [sys.executable, "bench/gpu/record_workloads.py", workload, "-"])
                print(f"  {name}: exit {rc} in {time.time() - t:.0f} s; {peaks or 'no peaks printed'}"
                      + (f"; {oom}" if oom else ""), flush=True)
                failed |= name == "gpumem" and rc != 0
        finally:
            holder.stdin.close()
            holder.wait()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
