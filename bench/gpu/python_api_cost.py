"""Cost per sample of gpumem.gpus() against the anchors the seeds use, in one run on the GPU machine (issue 13):
  gpumem.gpus()            in process through libgpumem_monitor.so (ctypes), NVML kept open
  gpumem.gpus() (binary)   the fallback: one run of `gpumem --json --full` per sample
  pynvml / raw NVML        a Python loop reading the same GPU fields (name, uuid, bus id, memory, utilization,
                           temperature, power and limit, clocks, pstate, fan, compute processes): pynvml when
                           importable, else the same calls through ctypes on libnvidia-ml.so.1 ("raw NVML")
  nvidia-smi --query-gpu   what GPUtil.getGPUs() does: one nvidia-smi run, CSV parsed (no processes);
                           GPUtil itself too when importable
Wall time per sample (median, p90), CPU time per sample (this process + its children: nvidia-smi's and
gpumem's own CPU counts), and the first sample: for the in-process readers timed in a fresh Python process
(after its imports; NVML opened and every GPU attached inside it), what a script that samples once pays.
Prints a markdown table.
gpumem.gpus() reads more than the loops (ECC, BAR1, energy, encoder/decoder, graphics processes, /proc user and
command line, the control channel): the table is the cost of what each gives.

Usage: python3 bench/gpu/python_api_cost.py     (from the source tree after a build, or with the wheel
installed); N=200 samples in process, N_SPAWN=30 for the ones that spawn a program. Exit 4 without a GPU."""
import ctypes
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
try:
    import gpumem
except ImportError:  # the source tree: the package from python/, the binary and libraries from build/
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    os.environ.setdefault("GPUMEM_BINARY", os.path.join(SOURCE, "build", "gpumem"))
    import gpumem
from gpumem import _monitor, _native

N = int(os.environ.get("N", "200"))
N_SPAWN = int(os.environ.get("N_SPAWN", "30"))
SMI_FIELDS = ("index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory,"
              "temperature.gpu,power.draw,power.limit,clocks.sm,clocks.gr,clocks.mem,pstate,fan.speed")


def cpu_seconds():
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure(name, first, again, n, fresh=None):
    """first(): the first sample (opens what it needs); again(): every later one. fresh: time the first sample
    in a new process instead (this one has NVML open already)."""
    t = time.perf_counter()
    first()
    first_ms = (time.perf_counter() - t) * 1e3 if fresh is None else first_in_fresh_process(fresh)
    walls = []
    cpu0 = cpu_seconds()
    for _ in range(n):
        t = time.perf_counter()
        again()
        walls.append((time.perf_counter() - t) * 1e3)
    cpu_ms = (cpu_seconds() - cpu0) * 1e3 / n
    walls.sort()
    return name, statistics.median(walls), walls[int(0.9 * (n - 1))], cpu_ms, first_ms, n


class RawNvml:
    """The pynvml loop's calls through ctypes on libnvidia-ml.so.1 (pynvml is these calls plus Python wrappers)."""
    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    class Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    class Pci(ctypes.Structure):  # nvmlPciInfo_t of nvmlDeviceGetPciInfo_v3
        _fields_ = [("legacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                    ("device", ctypes.c_uint), ("pci_device_id", ctypes.c_uint), ("subsystem", ctypes.c_uint),
                    ("bus_id", ctypes.c_char * 32), ("slack", ctypes.c_uint * 8)]

    class Process(ctypes.Structure):  # nvmlProcessInfo_v2_t
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

    def __init__(self):
        self.lib = ctypes.CDLL(os.environ.get("GPUMEM_NVML_LIBRARY") or "libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise OSError("nvmlInit_v2 failed")

    def _uint(self, fn, *args):
        v = ctypes.c_uint()
        return v.value if fn(*args, ctypes.byref(v)) == 0 else None

    def sample(self):
        lib, out = self.lib, []
        count = self._uint(lib.nvmlDeviceGetCount_v2)
        for i in range(count or 0):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0:
                out.append(None)
                continue
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            pci, mem, util = self.Pci(), self.Memory(), self.Util()
            mem_ok = lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0
            util_ok = lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)) == 0
            g = {"name": name.value if lib.nvmlDeviceGetName(h, name, 96) == 0 else None,
                 "uuid": uuid.value if lib.nvmlDeviceGetUUID(h, uuid, 96) == 0 else None,
                 "bus_id": pci.bus_id if lib.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)) == 0 else None,
                 "memory": (mem.total, mem.used, mem.free) if mem_ok else None,
                 "util": (util.gpu, util.memory) if util_ok else None,
                 "temperature": self._uint(lib.nvmlDeviceGetTemperature, h, 0),
                 "power": self._uint(lib.nvmlDeviceGetPowerUsage, h),
                 "power_limit": self._uint(lib.nvmlDeviceGetEnforcedPowerLimit, h),
                 "clocks": [self._uint(lib.nvmlDeviceGetClockInfo, h, c) for c in (0, 1, 2)],
                 "pstate": self._uint(lib.nvmlDeviceGetPerformanceState, h),
                 "fan": self._uint(lib.nvmlDeviceGetFanSpeed, h)}
            n = ctypes.c_uint(64)
            procs = (self.Process * 64)()
            rc = lib.nvmlDeviceGetComputeRunningProcesses_v2(h, ctypes.byref(n), procs)
            g["processes"] = [(procs[k].pid, procs[k].used) for k in range(n.value)] if rc == 0 else None
            out.append(g)
        return out


def pynvml_loop():
    import pynvml
    pynvml.nvmlInit()

    def value(fn, *args):
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    def sample():
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pci = value(pynvml.nvmlDeviceGetPciInfo, h)
            mem = value(pynvml.nvmlDeviceGetMemoryInfo, h)
            util = value(pynvml.nvmlDeviceGetUtilizationRates, h)
            procs = value(pynvml.nvmlDeviceGetComputeRunningProcesses, h)
            out.append({"name": value(pynvml.nvmlDeviceGetName, h), "uuid": value(pynvml.nvmlDeviceGetUUID, h),
                        "bus_id": pci.busId if pci else None,
                        "memory": (mem.total, mem.used, mem.free) if mem else None,
                        "util": (util.gpu, util.memory) if util else None,
                        "temperature": value(pynvml.nvmlDeviceGetTemperature, h, 0),
                        "power": value(pynvml.nvmlDeviceGetPowerUsage, h),
                        "power_limit": value(pynvml.nvmlDeviceGetEnforcedPowerLimit, h),
                        "clocks": [value(pynvml.nvmlDeviceGetClockInfo, h, c) for c in (0, 1, 2)],
                        "pstate": value(pynvml.nvmlDeviceGetPerformanceState, h),
                        "fan": value(pynvml.nvmlDeviceGetFanSpeed, h),
                        "processes": [(p.pid, p.usedGpuMemory) for p in procs] if procs is not None else None})
        return out
    return sample


def nvidia_smi():
    r = subprocess.run(["nvidia-smi", "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, check=True)
    return [[v.strip() for v in line.split(",")] for line in r.stdout.splitlines() if line.strip()]


FIRST = {"gpumem": lambda: gpumem.gpus(), "pynvml": lambda: pynvml_loop()(), "raw": lambda: RawNvml().sample()}


def first_in_fresh_process(which):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--first", which], capture_output=True, text=True)
    try:
        return float(r.stdout.split()[-1])
    except (IndexError, ValueError):
        print(f"SKIP first sample of {which} in a fresh process: {r.stderr.strip()[-300:]}")
        return float("nan")


def time_first(which):
    if which == "pynvml":
        import pynvml  # noqa: F401  (the import is not part of the sample)
    t = time.perf_counter()
    FIRST[which]()
    print(f"{(time.perf_counter() - t) * 1e3:.3f}")
    return 0


def force_binary(on):
    if on:
        os.environ["GPUMEM_MONITOR_LIBRARY"] = "/nonexistent/libgpumem_monitor.so"
    else:
        os.environ.pop("GPUMEM_MONITOR_LIBRARY", None)
    _native.reset()


def main():
    try:
        gpus = gpumem.gpus()
    except gpumem.NoDriverError as e:
        print(f"no GPU: {e}")
        return 4
    kind, where = _monitor.backend()
    print(f"{len(gpus)} GPU(s): {', '.join(sorted({g.name or '?' for g in gpus}))}; gpumem.gpus() through the {kind} "
          f"{where}; {sum(len(g.processes or []) for g in gpus)} process(es) on them")
    if kind != "library":
        print("FAIL libgpumem_monitor.so was not loaded: gpumem.gpus() runs the binary")
    rows = [measure("gpumem.gpus() in process", gpumem.gpus, gpumem.gpus, N, fresh="gpumem"),
            measure("gpumem.gpus(with_allocators=False)", lambda: gpumem.gpus(with_allocators=False),
                    lambda: gpumem.gpus(with_allocators=False), N),
            measure("gpumem.gpus(with_processes=False)", lambda: gpumem.gpus(with_processes=False),
                    lambda: gpumem.gpus(with_processes=False), N)]
    force_binary(True)
    rows.append(measure("gpumem.gpus() through the binary (fallback)", gpumem.gpus, gpumem.gpus, N_SPAWN))
    force_binary(False)
    try:
        holder = {}
        rows.append(measure("pynvml loop, same fields", lambda: holder.setdefault("s", pynvml_loop())(),
                            lambda: holder["s"](), N, fresh="pynvml"))
    except Exception as e:  # not installed (ImportError), or a pynvml that does not fit this driver
        print(f"SKIP pynvml: {type(e).__name__}: {e}; the same calls through ctypes instead")
        holder = {}
        rows.append(measure("raw NVML (ctypes) loop, same fields (no pynvml)",
                            lambda: holder.setdefault("s", RawNvml()).sample(), lambda: holder["s"].sample(), N,
                            fresh="raw"))
    if shutil.which("nvidia-smi"):
        rows.append(measure("nvidia-smi --query-gpu (GPUtil style)", nvidia_smi, nvidia_smi, N_SPAWN))
    else:
        print("SKIP nvidia-smi not on PATH")
    try:
        import GPUtil
        rows.append(measure("GPUtil.getGPUs()", GPUtil.getGPUs, GPUtil.getGPUs, N_SPAWN))
    except ImportError:
        print("SKIP GPUtil not installed (the nvidia-smi row is what it runs)")

    print("\n| reader | wall ms/sample (median) | p90 | CPU ms/sample | first sample ms | samples |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, median, p90, cpu, first, n in rows:
        print(f"| {name} | {median:.3f} | {p90:.3f} | {cpu:.3f} | {first:.1f} | {n} |")
    ours = rows[0]
    for other in rows[3:]:
        print(f"COST {other[0]} takes x{other[1] / ours[1]:.2f} the wall time and x{other[3] / max(ours[3], 1e-9):.2f} "
              "the CPU time of gpumem.gpus() in process (above 1: gpumem is cheaper)")
    return 1 if kind != "library" else 0


if __name__ == "__main__":
    sys.exit(time_first(sys.argv[2]) if sys.argv[1:2] == ["--first"] else main())
