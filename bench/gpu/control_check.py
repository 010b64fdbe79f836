"""GPU proof of the control channel (issue 9), run by scripts/gpu-check.sh: gpumem clear / limit / snapshot /
stop on PyTorch processes under `gpumem run`, and cooperative release between two of them. Prints PASS/FAIL lines
and the latency of each command; exit 1 when any check fails. Usage: control_check.py GPUMEM_BINARY"""
import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time

GPUMEM = sys.argv[1]
WORKER = "bench/gpu/control_worker.py"
fails = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""), flush=True)
    if not ok:
        fails.append(name)


class Worker:
    def __init__(self, *args):
        self.proc = subprocess.Popen([GPUMEM, "run", "-q", "--", sys.executable, WORKER, *map(str, args)],
                                     stdout=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            print("   worker:", line.rstrip(), flush=True)
            self.lines.put(line.split())

    def expect(self, first, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            try:
                words = self.lines.get(timeout=max(0.01, end - time.time()))
            except queue.Empty:
                break
            if words[:len(first)] == first:
                return words
        return None


def gpumem(*args):
    t = time.perf_counter()
    r = subprocess.run([GPUMEM, *map(str, args), "--json"], capture_output=True, text=True, timeout=120)
    ms = (time.perf_counter() - t) * 1e3
    print(f"   $ gpumem {' '.join(map(str, args))} --json -> exit {r.returncode}, {ms:.1f} ms", flush=True)
    if r.returncode != 0:
        print(f"     stderr: {r.stderr.strip()[:400]}", flush=True)
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), ms


def smi_used_mib(pid):
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        p, used = [s.strip() for s in line.split(",")]
        if int(p) == pid:
            return int(used)
    return None


def snapshot_step(pid):
    """gpumem snapshot of the live training process: PyTorch's pickle (with its memory history) that
    torch.cuda._memory_viz reads, and gpumem's JSON."""
    path, html = "/tmp/gpumem_control_snapshot.pickle", "/tmp/gpumem_control_snapshot.html"
    rc, live, _ = gpumem("stats", pid)
    rc, snap, latency["snapshot"] = gpumem("snapshot", pid, "-o", path)
    ok = rc == 0 and snap["bytes"] == os.path.getsize(path)
    detail = json.dumps(snap)
    if ok:
        with open(path, "rb") as f:
            data = pickle.load(f)
        active = [b for s in data["segments"] for b in s["blocks"] if b["state"].startswith("active")]
        traces = sum(len(t) for t in data["device_traces"])
        reserved = sum(s["total_size"] for s in data["segments"])
        ok = len(active) == snap["active_blocks"] > 0 and traces > 0
        detail = (f"{snap['bytes']} bytes, {len(active)} live blocks = {sum(b['size'] for b in active) >> 20} MiB "
                  f"(stats just before: {live[0]['devices'][0]['allocated_bytes'] >> 20 if live else '?'} MiB), {reserved >> 20} MiB "
                  f"in {snap['segments']} segments, {traces} trace entries, {latency['snapshot']:.1f} ms")
    check("snapshot of the running training process (pickle, with its history)", ok, detail)
    for action, args in (("stats", []), ("trace_plot", ["-o", html])):
        r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", action, path, *args],
                           capture_output=True, text=True, timeout=120)
        check(f"torch.cuda._memory_viz {action} reads it", ok and r.returncode == 0, (r.stdout + r.stderr)[-300:])
    rc, js, latency["snapshot_json"] = gpumem("snapshot", pid, "-o", "/tmp/gpumem_control_snapshot.json")
    if rc == 0:
        with open("/tmp/gpumem_control_snapshot.json") as f:
            doc = json.load(f)
    check("snapshot as gpumem JSON", rc == 0 and doc["devices"][0]["allocated"] > 0 and js["format"] == "json",
          json.dumps(js))


total_mib = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                               capture_output=True, text=True).stdout.split()[0])
latency = {}

# 1 clear: a training process that caches 8 GiB gives it back as nvidia-smi sees it.
a = Worker("train", 8192, 4096, "history")
ready = a.expect(["ready"])
check("training process ready", ready is not None)
if ready:
    pid = int(ready[1])
    a.expect(["probe", "ok"], 30)
    rc, stats, latency["stats"] = gpumem("stats", pid)
    check("stats", rc == 0 and stats[0]["devices"][0]["reserved_bytes"] >= 8 << 30, json.dumps(stats)[:300])
    # The worker takes its 4 GiB probe again at every step, so nvidia-smi is compared with what gpumem
    # reserves at the same moment: what the process holds beyond it (context, cuBLAS) must not change.
    def smi_and_reserved():
        used = smi_used_mib(pid)
        _, s, _ = gpumem("stats", pid)
        return used, s[0]["devices"][0]["reserved_bytes"] >> 20
    before, reserved_before = smi_and_reserved()
    rc, cleared, latency["clear"] = gpumem("clear", pid)
    time.sleep(0.5)
    after, reserved_after = smi_and_reserved()
    released_mib = cleared[0]["released_bytes"] >> 20 if rc == 0 else 0
    drift = abs((after - reserved_after) - (before - reserved_before))
    # The 4 GiB probe may be live at the moment of the clear (taken from the cached 8 GiB): then 4 GiB
    # stay, and the model's few hundred MiB.
    check("clear gives the cache back (nvidia-smi follows gpumem's reserved bytes)",
          rc == 0 and released_mib >= reserved_before - 4096 - 512 and drift <= 256,
          f"released {released_mib} MiB; nvidia-smi {before} -> {after} MiB while gpumem reserved "
          f"{reserved_before} -> {reserved_after} MiB (beyond it: {before - reserved_before} -> {after - reserved_after} MiB)")
    # 2 limit: below live + probe, the next probe fails in that process; removing it lets probes succeed again.
    rc, s, _ = gpumem("stats", pid)
    live = s[0]["devices"][0]["allocated_bytes"]
    rc, lim, latency["limit"] = gpumem("limit", pid, live + (2048 << 20))
    check("limit lowers the ceiling", rc == 0 and a.expect(["probe", "oom"], 30) is not None, json.dumps(lim))
    rc, _, _ = gpumem("limit", pid, 0)
    check("limit removed: probes succeed again", rc == 0 and a.expect(["probe", "ok"], 30) is not None)
    rc, _, latency["reset"] = gpumem("reset", pid)
    snapshot_step(pid)
    # 3 stop: the training loop ends through its on_stop handler, exit 0.
    rc, st, latency["stop"] = gpumem("stop", pid, "--timeout", 30)
    a.proc.wait(timeout=60)
    check("stop ends the training loop gracefully", rc == 0 and st["outcome"] == "stopped" and a.proc.returncode == 0,
          json.dumps(st))
else:
    a.proc.kill()

# 4 cooperative release: B needs memory that A only caches.
share = int(total_mib * 0.6)
h = Worker("hold", share)
if h.expect(["ready"]):
    t = time.perf_counter()
    n = Worker("need", share)
    got = n.expect(["need"], 120)
    ms = (time.perf_counter() - t) * 1e3
    check("second process gets memory the first only cached", got is not None and got[1] == "ok",
          f"{share} MiB each, {ms:.0f} ms including start-up")
    n.proc.wait(timeout=60)
else:
    check("holding process ready", False)
h.proc.terminate()
h.proc.wait(timeout=60)

print("latency_ms", json.dumps({k: round(v, 1) for k, v in latency.items()}), flush=True)
print("control-check:", len(fails), "failure(s)", flush=True)
sys.exit(1 if fails else 0)
