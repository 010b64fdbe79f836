"""Notebook and script helpers over torch.cuda's memory functions, so they work under PyTorch's allocator and
under gpumem's (`gpumem run`, or gpumem_torch.install(), answers torch.cuda's functions from gpumem):
  track(label)      context manager and decorator: allocated before / after, peak inside, reserved change,
                    time; nested blocks keep their own peaks; summary() is the table of every block so far
  tensors()         live CUDA tensors found through gc (parameters, their gradients, optimizer state),
                    grouped by shape and dtype; with memory history on, where each group was allocated
  purge()           gc.collect() + empty_cache(), and what came back
  print_memory()    one line: allocated, reserved, peaks, free / total
  %%track LABEL     IPython cell magic, after `%load_ext gpumem`
torch is imported when a helper is first called, never by `import gpumem`."""
import functools
import gc
import sys
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple


def _torch():
    import torch
    return torch


def format_bytes(n):
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.2f} {unit}"
        n /= 1024
    return f"{sign}{n} B"  # not reached


@dataclass
class TrackRecord:
    label: str
    depth: int
    allocated_before: int
    reserved_before: int
    allocated_after: int = 0
    reserved_after: int = 0
    peak: int = 0  # highest allocated inside the block, nested blocks included
    seconds: float = 0.0
    device: int = 0  # the CUDA device it watched: nested blocks on other devices do not touch its peak

    def line(self):
        return (f"{'  ' * self.depth}{self.label}: allocated {format_bytes(self.allocated_before)} -> "
                f"{format_bytes(self.allocated_after)} ({format_bytes(self.allocated_after - self.allocated_before)}), "
                f"peak {format_bytes(self.peak)}, reserved {format_bytes(self.reserved_after - self.reserved_before)}"
                f", {self.seconds:.3f} s")


_open: List[TrackRecord] = []  # blocks entered and not yet left, outermost first
_done: List[TrackRecord] = []


class track:
    """with gpumem.track("epoch 1"): ...  or  @gpumem.track("step"). Prints the block's line on exit
    (quiet=True: only records it for summary()). device: as torch.cuda takes it (None: the current one).
    Entering resets torch.cuda's peak counters (the only way to read a peak inside the block): the
    program's own max_memory_allocated() then covers the time since the block began."""

    def __init__(self, label="block", device=None, quiet=False):
        self.label, self.device, self.quiet = label, device, quiet
        self.record: Optional[TrackRecord] = None
        self._entered: List[tuple] = []  # (record, start) per entry: one instance may be entered nested

    def __enter__(self):
        torch = _torch()
        cuda = torch.cuda
        index = _device_index(torch, self.device)
        index = cuda.current_device() if index is None else index
        # Resetting the peak counter for this block must not lose what the open outer blocks on the same
        # device saw so far.
        peak_so_far = cuda.max_memory_allocated(self.device)
        for outer in _open:
            if outer.device == index:
                outer.peak = max(outer.peak, peak_so_far)
        cuda.reset_peak_memory_stats(self.device)
        allocated = cuda.memory_allocated(self.device)
        self.record = TrackRecord(self.label, len(_open), allocated, cuda.memory_reserved(self.device), peak=allocated,
                                  device=index)
        _open.append(self.record)
        self._entered.append((self.record, time.perf_counter()))
        return self.record

    def __exit__(self, *exc):
        cuda = _torch().cuda
        r, start = self._entered.pop()
        self.record = r
        r.seconds = time.perf_counter() - start
        r.peak = max(r.peak, cuda.max_memory_allocated(self.device))
        r.allocated_after = cuda.memory_allocated(self.device)
        r.reserved_after = cuda.memory_reserved(self.device)
        _open.remove(r)
        for outer in _open:
            if outer.device == r.device:
                outer.peak = max(outer.peak, r.peak)
        _done.append(r)
        if not self.quiet:
            print("gpumem: " + r.line(), file=sys.stderr)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def tracked(*args, **kwargs):
            with track(self.label if self.label != "block" else fn.__qualname__, self.device, self.quiet):
                return fn(*args, **kwargs)
        return tracked


def summary(reset=False):
    """The table of every tracked block so far, in the order they ended (nested blocks indented)."""
    text = "\n".join(["gpumem track summary:"] + [r.line() for r in _done])
    if reset:
        _done.clear()
    return text


def track_records():
    return list(_done)


@dataclass
class TensorGroup:
    shape: Tuple[int, ...]
    dtype: str
    count: int
    bytes: int
    kinds: Tuple[str, ...]  # "parameter", "gradient", "tensor"
    where: Tuple[str, ...] = ()  # "file:line in function" of the allocations, when memory history is on

    def __str__(self):
        text = f"{self.count} x {self.dtype}{list(self.shape)} ({', '.join(self.kinds)}): {format_bytes(self.bytes)}"
        return text + (f" from {'; '.join(self.where)}" if self.where else "")


def _frame_text(frames):
    """The innermost frame outside torch itself (PyTorch's and gpumem's snapshots list innermost first)."""
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" not in name and not name.endswith(("gpumem_torch.py", "gpumem_pools.py")):
            return f"{name}:{f.get('line')} in {f.get('name')}"
    return None


def _origins(torch):
    """{block address: where it was allocated} from torch.cuda.memory._snapshot(); {} without history."""
    try:
        snapshot = torch.cuda.memory._snapshot()
    except Exception:  # no CUDA, or an allocator that cannot snapshot: the groups stand without origins
        return {}
    origins = {}
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            text = _frame_text(block.get("frames") or [])
            if text and block.get("state") == "active_allocated":
                origins[block.get("address")] = text
    return origins


def _address(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # tensors without a storage API (or a test double): their own pointer
        return getattr(t, "data_ptr", lambda: None)()


def _nbytes(t):
    return t.element_size() * t.nelement()


def _device_index(torch, device):
    """The CUDA device index torch's spellings name: 1, "cuda:1", torch.device("cuda", 1); "cuda" or a
    device without an index is the current one; None is every device."""
    if device is None:
        return device
    if isinstance(device, bool) or (isinstance(device, int) and device < 0) or \
            not isinstance(device, (int, str)) and not hasattr(device, "type"):
        raise ValueError(f"gpumem: {device!r} is not a CUDA device (give 1, 'cuda:1' or 'cuda')")
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None) if not isinstance(device, str) else None
    if not isinstance(device, str) and getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"gpumem: {device!r} is not a CUDA device (give 1, 'cuda:1' or 'cuda')")
    if isinstance(device, str):
        kind, _, number = device.partition(":")
        if kind != "cuda" or (number and not number.isdigit()):
            raise ValueError(f"gpumem: {device!r} is not a CUDA device (give 1, 'cuda:1' or 'cuda')")
        index = int(number) if number else None
    return index if index is not None else torch.cuda.current_device()


def tensors(device=None):
    """Live CUDA tensors reachable from Python (gc), gradients included, grouped by shape and dtype, largest
    first. A tensor seen twice (a parameter and a dict entry) counts once."""
    torch = _torch()
    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    seen, groups, where = set(), {}, {}

    wanted = _device_index(torch, device)

    def visit(t, kind):
        if id(t) in seen or not getattr(t, "is_cuda", False):
            return
        if wanted is not None and t.get_device() != wanted:
            return
        seen.add(id(t))
        key = (tuple(t.shape), str(t.dtype).replace("torch.", ""))
        g = groups.setdefault(key, TensorGroup(key[0], key[1], 0, 0, ()))
        g.count += 1
        g.bytes += _nbytes(t)
        if kind not in g.kinds:
            g.kinds += (kind,)
        where.setdefault(key, []).append(t)

    found = []
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj):
                found.append(obj)
        except Exception:  # objects whose type lookups fail (proxies) are not tensors
            continue
    grads = [g for g in (getattr(t, "grad", None) for t in found) if g is not None and torch.is_tensor(g)]
    grad_ids = {id(g) for g in grads}
    for t in found + grads:
        if parameter is not None and isinstance(t, parameter):
            visit(t, "parameter")
        else:
            visit(t, "gradient" if id(t) in grad_ids else "tensor")
    origins = _origins(torch) if groups else {}
    for key, g in groups.items():
        g.kinds = tuple(k for k in ("parameter", "gradient", "tensor") if k in g.kinds)
        if origins:
            places = (origins.get(_address(t)) for t in where[key])
            g.where = tuple(dict.fromkeys(p for p in places if p))[:3]
    return sorted(groups.values(), key=lambda g: g.bytes, reverse=True)


@dataclass
class PurgeResult:
    collected: int
    allocated_before: int
    allocated_after: int
    reserved_before: int
    reserved_after: int

    def __str__(self):
        return (f"purge: collected {self.collected} objects, allocated {format_bytes(self.allocated_before)} -> "
                f"{format_bytes(self.allocated_after)}, reserved {format_bytes(self.reserved_before)} -> "
                f"{format_bytes(self.reserved_after)} ({format_bytes(self.reserved_before - self.reserved_after)} "
                "given back)")


def purge(device=None, quiet=False):
    """Collects garbage, empties the allocator's cache, and reports what came back."""
    cuda = _torch().cuda
    allocated, reserved = cuda.memory_allocated(device), cuda.memory_reserved(device)
    collected = gc.collect()
    cuda.empty_cache()
    result = PurgeResult(collected, allocated, cuda.memory_allocated(device), reserved, cuda.memory_reserved(device))
    if not quiet:
        print("gpumem: " + str(result), file=sys.stderr)
    return result


def memory_line(device=None):
    cuda = _torch().cuda
    parts = [f"allocated {format_bytes(cuda.memory_allocated(device))}",
             f"max allocated {format_bytes(cuda.max_memory_allocated(device))}",
             f"reserved {format_bytes(cuda.memory_reserved(device))}",
             f"max reserved {format_bytes(cuda.max_memory_reserved(device))}"]
    try:
        free, total = cuda.mem_get_info(device)
        parts.append(f"free {format_bytes(free)} of {format_bytes(total)}")
    except Exception as e:  # a device that cannot say: the other numbers still stand
        parts.append(f"free unknown ({e})")
    return ", ".join(parts)


def print_memory(device=None, file=None):
    """The seeds' print_cuda_memory_info: allocated, peaks, reserved, free of total, in one line."""
    print("gpumem: " + memory_line(device), file=file or sys.stdout)


def load_ipython_extension(ipython):
    """`%load_ext gpumem` registers the %%track cell magic: %%track LABEL tracks the cell like track()."""
    def track_cell(line, cell):
        with track(line.strip() or "cell"):
            ipython.run_cell(cell)
    ipython.register_magic_function(track_cell, "cell", "track")
