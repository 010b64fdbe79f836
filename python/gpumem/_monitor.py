"""gpus(), processes(), watch(): GPU and process samples from the monitor gpumem's CLI uses (its Sampler over
NVML, /proc and the control channel), read in this process through libgpumem_monitor.so and ctypes
(_native.py; NVML stays open between samples), or, where that library cannot be loaded, from one run of
`gpumem --json --full`: the same JSON document either way (src/tui/sample_json.hpp). Fields a GPU does not
support are None. A machine without a driver, NVML or GPU raises NoDriverError; any other failure
GpumemError with its sentence."""
import json
import subprocess
import time
from dataclasses import dataclass, field
from typing import List, Optional

from . import _binary, _native
from ._binary import GpumemError

# document key -> attribute; memory in bytes, power in W (the document has mW), clocks in MHz
_GPU_FIELDS = {
    "index": "index", "name": "name", "uuid": "uuid", "bus_id": "bus_id",
    "memory_total_bytes": "memory_total", "memory_used_bytes": "memory_used", "memory_free_bytes": "memory_free",
    "memory_reserved_bytes": "memory_reserved", "utilization_gpu_percent": "utilization",
    "utilization_memory_percent": "memory_utilization", "temperature_c": "temperature",
    "power_mw": "power", "power_limit_mw": "power_limit", "clock_sm_mhz": "clock_sm",
    "clock_graphics_mhz": "clock_graphics", "clock_memory_mhz": "clock_memory", "pstate": "pstate",
    "fan_percent": "fan", "error": "error",
}
_PROCESS_FIELDS = {
    "pid": "pid", "used_memory_bytes": "used_memory", "user": "user", "command": "command",
    "container": "container", "kind": "kind", "allocated_bytes": "allocated", "reserved_bytes": "reserved",
    "allocated_peak_bytes": "peak_allocated",
}


class NoDriverError(GpumemError):
    pass


@dataclass
class Process:
    pid: int
    gpu: Optional[int]
    used_memory: Optional[int]  # bytes on that GPU (NVML)
    user: Optional[str] = None
    command: Optional[str] = None
    container: Optional[str] = None
    kind: Optional[str] = None  # "context", "no_context" (holds the device node only), "gone"
    # Processes running on gpumem's allocator (gpumem run), through the control channel; else None.
    allocated: Optional[int] = None
    reserved: Optional[int] = None
    peak_allocated: Optional[int] = None


@dataclass
class GPU:
    index: int
    name: Optional[str]
    uuid: Optional[str]
    bus_id: Optional[str]
    memory_total: Optional[int]  # bytes
    memory_used: Optional[int]
    memory_free: Optional[int]
    memory_reserved: Optional[int]
    utilization: Optional[int]  # percent
    memory_utilization: Optional[int]
    temperature: Optional[int]  # C
    power: Optional[float]  # W
    power_limit: Optional[float]
    clock_sm: Optional[int]  # MHz
    clock_graphics: Optional[int]
    clock_memory: Optional[int]
    pstate: Optional[str]
    fan: Optional[int] = None  # percent
    error: Optional[str] = None  # why the GPU could not be read at all ("GPU is lost"); then the rest is None
    # None, with processes_error saying why ("Not Supported"), when the GPU's process list cannot be read:
    # not the same as a GPU no process uses.
    processes: Optional[List[Process]] = field(default_factory=list)
    processes_error: Optional[str] = None


def _sample_from_binary():
    exe = _binary.path()
    try:
        r = subprocess.run([exe, "--json", "--full"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise GpumemError(f"gpumem: cannot run {exe}: {e.strerror}") from None
    except subprocess.TimeoutExpired:
        raise GpumemError("gpumem --json --full gave no answer in 60 s") from None
    if r.returncode == 4:
        raise NoDriverError(r.stderr.strip() or "gpumem: no GPU driver or NVML")
    if r.returncode != 0:
        raise GpumemError(r.stderr.strip() or f"gpumem --json --full failed with exit code {r.returncode}")
    try:
        return json.loads(r.stdout)
    except ValueError:  # an older or foreign binary: say which, not a JSONDecodeError traceback
        raise GpumemError(f"{exe} --json --full printed no JSON sample (not gpumem, or an older one?)") from None


def backend():
    """"library" (path) when samples are read in this process, else "binary" (path): what gpus() uses."""
    lib = _native.path()
    return ("library", lib) if lib else ("binary", _binary.path())


def sample(processes=True, allocators=True, holders=False, extras=False):
    """The raw sample document (a dict; keys in src/tui/sample_json.hpp), read with these parts (extras: ECC,
    BAR1, energy, engine utilizations...; the binary fallback reads every part)."""
    if _native.load() is None:
        doc = _sample_from_binary()  # the binary reads every part; drop what was not asked for
        for g in doc.get("gpus", []):
            if not processes:
                g["processes"] = None
            elif not holders and g.get("processes"):
                g["processes"] = [p for p in g["processes"] if p.get("kind") != "no_context"]
        return doc
    flags = (_native.PROCESSES if processes else 0) | (_native.ALLOCATORS if processes and allocators else 0) | \
        (_native.HOLDERS if processes and holders else 0) | (_native.EXTRAS if extras else 0)
    status, doc = _native.sample(flags)
    if status == _native.NO_DEVICE:
        raise NoDriverError(doc)
    if status != _native.OK:
        raise GpumemError(doc)
    return doc


def _process(p, gpu, with_allocators):
    values = {attr: p.get(key) for key, attr in _PROCESS_FIELDS.items()}
    if not with_allocators:
        values.update(allocated=None, reserved=None, peak_allocated=None)
    return Process(gpu=gpu, **values)


def _gpu(g, with_allocators):
    values = {attr: g.get(key) for key, attr in _GPU_FIELDS.items()}
    for watts in ("power", "power_limit"):
        if values[watts] is not None:
            values[watts] = values[watts] / 1000.0
    procs = [_process(p, g.get("index"), with_allocators) for p in g.get("processes") or []]
    error = g.get("processes_error")
    return GPU(processes=None if error else procs, processes_error=error, **values)


def gpus(with_processes=True, with_allocators=True):
    """One GPU object per GPU, with its processes (and, for gpumem processes, what their allocator holds)
    unless with_processes=False (fewer NVML calls)."""
    doc = sample(processes=with_processes, allocators=with_allocators)
    return [_gpu(g, with_allocators) for g in doc.get("gpus", [])]


def processes(with_allocators=False):
    """Every process using a GPU, as `gpumem ps` lists them (processes holding a GPU's device node without a
    context too): pid, gpu, used_memory (bytes), user, command, container, kind; with_allocators=True adds
    allocated / reserved / peak_allocated of processes on gpumem's allocator."""
    doc = sample(processes=True, allocators=with_allocators, holders=True)
    return [_process(p, g.get("index"), with_allocators) for g in doc.get("gpus", []) for p in g.get("processes") or []]


def watch(interval=1.0, count=None, with_processes=True):
    """Yields gpus() every interval seconds (count times, or until the caller stops iterating). A bad
    interval or count is refused here, at the call, not at the first sample."""
    # At most a day: time.sleep() overflows on larger ones (10**400, 1e300).
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 86400:
        raise ValueError(f"gpumem.watch: interval must be a number of seconds above 0, at most 86400, got {interval!r}")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"gpumem.watch: count must be None or a whole number from 0, got {count!r}")
    return _watch(interval, count, with_processes)


def _watch(interval, count, with_processes):
    n = 0
    next_at = time.monotonic()
    while count is None or n < count:
        yield gpus(with_processes)
        n += 1
        next_at += interval
        now = time.monotonic()
        if next_at < now:  # fell behind (a slow consumer or sample): restart the schedule, never burst
            next_at = now
        if count is None or n < count:
            time.sleep(max(0.0, next_at - now))
