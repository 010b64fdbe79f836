"""gpus(), processes(), watch(): GPU and process samples read by the gpumem binary (the monitor Sampler over
NVML, /proc and the control channel), through its JSON: `gpumem query --format json` for the GPU fields,
`gpumem ps --json` for the processes, `gpumem stats --all --json` for what gpumem processes allocated. Fields a GPU does not support are None. A machine without a driver or
NVML raises NoDriverError (the binary's exit code 4); any other failure GpumemError with its sentence."""
import json
import subprocess
import time
from dataclasses import dataclass, field
from typing import List, Optional

from . import _binary
from ._binary import GpumemError

MIB = 1 << 20

# query field -> (attribute, scale): memory comes in MiB, power in W, clocks in MHz.
_GPU_FIELDS = {
    "index": ("index", None), "name": ("name", None), "uuid": ("uuid", None), "pci.bus_id": ("bus_id", None),
    "memory.total": ("memory_total", MIB), "memory.used": ("memory_used", MIB),
    "memory.free": ("memory_free", MIB), "memory.reserved": ("memory_reserved", MIB),
    "utilization.gpu": ("utilization", None), "utilization.memory": ("memory_utilization", None),
    "temperature.gpu": ("temperature", None), "power.draw": ("power", None), "power.limit": ("power_limit", None),
    "clocks.current.sm": ("clock_sm", None), "clocks.current.graphics": ("clock_graphics", None),
    "clocks.current.memory": ("clock_memory", None), "pstate": ("pstate", None),
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
    kind: Optional[str] = None  # "compute", "graphics", "gone", ... as `gpumem ps` says
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
    processes: List[Process] = field(default_factory=list)


def _run_json(*args, accept=(0,)):
    try:
        r = subprocess.run([_binary.path(), *args], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise GpumemError(f"gpumem: cannot run {_binary.path()}: {e.strerror}") from None
    except subprocess.TimeoutExpired:
        raise GpumemError(f"gpumem {args[0]} gave no answer in 60 s") from None
    if r.returncode == 4:
        raise NoDriverError(r.stderr.strip() or "gpumem: no GPU driver or NVML")
    if r.returncode not in accept:
        raise GpumemError(r.stderr.strip() or f"gpumem {args[0]} failed with exit code {r.returncode}")
    return json.loads(r.stdout)


def _scaled(value, scale):
    return value * scale if value is not None and scale else value


def processes(with_allocators=False):
    """Every process using a GPU (`gpumem ps`): pid, gpu, used_memory (bytes), user, command, container;
    with_allocators=True adds allocated / reserved / peak_allocated of processes on gpumem's allocator."""
    procs = [Process(pid=p.get("pid"), gpu=p.get("gpu"), used_memory=p.get("used_memory_bytes"), user=p.get("user"),
                     command=p.get("command"), container=p.get("container"), kind=p.get("kind"))
             for p in _run_json("ps", "--json").get("processes", [])]
    if with_allocators:
        _add_allocator_stats(procs)
    return procs


def _allocator_stats():
    """{pid: [device stats]} of the gpumem processes this user may ask (5: some did not answer)."""
    try:
        stats = _run_json("stats", "--all", "--json", accept=(0, 5))
    except (GpumemError, ValueError):  # the processes' numbers are extras: the GPU sample stands without them
        return {}
    return {s["pid"]: s.get("devices", []) for s in stats if isinstance(s, dict) and "pid" in s}


def _add_allocator_stats(procs):
    stats = _allocator_stats()
    gpus_of = {}
    for p in procs:
        gpus_of.setdefault(p.pid, []).append(p)
    for pid, devices in stats.items():
        for p in gpus_of.get(pid, []):
            # gpumem numbers devices as CUDA does in that process; with one device each, they are the same GPU.
            match = devices if len(devices) == 1 and len(gpus_of[pid]) == 1 else \
                [d for d in devices if d.get("device") == p.gpu]
            if match:
                p.allocated = match[0].get("allocated_bytes")
                p.reserved = match[0].get("reserved_bytes")
                p.peak_allocated = match[0].get("allocated_peak_bytes")


def gpus(with_processes=True):
    """One GPU object per GPU, with its processes unless with_processes=False (one read fewer)."""
    rows = _run_json("query", "--query-gpu", ",".join(_GPU_FIELDS), "--format", "json")
    result = []
    for row in rows:
        values = {attr: _scaled(row.get(key), scale) for key, (attr, scale) in _GPU_FIELDS.items()}
        result.append(GPU(**values))
    if with_processes and result:
        by_index = {g.index: g for g in result}
        procs = processes()
        _add_allocator_stats(procs)
        for p in procs:
            if p.gpu in by_index:
                by_index[p.gpu].processes.append(p)
    return result


def watch(interval=1.0, count=None, with_processes=True):
    """Yields gpus() every interval seconds (count times, or until the caller stops iterating)."""
    n = 0
    next_at = time.monotonic()
    while count is None or n < count:
        yield gpus(with_processes)
        n += 1
        next_at += interval
        if count is None or n < count:
            time.sleep(max(0.0, next_at - time.monotonic()))
