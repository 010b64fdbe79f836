"""Memory history and snapshots for gpumem_torch: torch.cuda.memory._record_memory_history(),
_snapshot(), _dump_snapshot() and torch.cuda.memory_snapshot() answered by gpumem, in PyTorch's own
format (torch.cuda._memory_viz and the memory_viz page read it unchanged).

PyTorch's Python functions call three torch._C entry points, which the pluggable allocator cannot serve;
install() replaces those (not the Python functions), so every caller of the Python API, whatever its
arguments, goes through PyTorch's own argument handling and then gpumem's C ABI (gpumem_history.h).
Frames: when stacks are asked, libgpumem calls _capture_frames on the allocating thread before the
allocation, only when that thread holds the GIL (else no frames)."""
import ctypes
import os
import pickle
import sys

_lib = None
_frame_source = None  # the ctypes callback object: must stay alive while the library may call it
_MAX_FRAMES = 64
_FRAME_SOURCE_TYPE = ctypes.CFUNCTYPE(None)


def _capture_frames():
    try:
        frame = sys._getframe(1)
        parts = []
        while frame is not None and len(parts) < _MAX_FRAMES:
            code = frame.f_code
            parts.append(f"{code.co_filename}\x1f{frame.f_lineno}\x1f{code.co_name}")
            frame = frame.f_back
        _lib.gpumem_history_set_frames("\x1e".join(parts).encode("utf-8", "replace"))
    except Exception:  # a failing stack capture must never fail the allocation
        pass


def bind(lib):
    """Declares the history entry points of libgpumem.so (ctypes signatures)."""
    global _lib
    c = ctypes
    sigs = {
        "gpumem_history_start": (c.c_int, [c.c_size_t, c.c_int, c.c_int, _FRAME_SOURCE_TYPE]),
        "gpumem_history_stop": (c.c_int, []),
        "gpumem_history_clear": (c.c_int, []),
        "gpumem_history_set_frames": (c.c_int, [c.c_char_p]),
        "gpumem_snapshot_write": (c.c_int, [c.c_char_p]),
        "gpumem_snapshot_pickle": (c.c_void_p, [c.POINTER(c.c_size_t)]),
        "gpumem_buffer_free": (None, [c.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib = lib


def _check(rc):
    if rc < 0:
        raise RuntimeError(_lib.gpumem_last_error().decode(errors="replace"))


def record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, clear_history=False):
    """PyTorch's semantics: enabled None stops; "state" keeps only live blocks' frames; "all" also keeps
    the last max_entries events. stacks "python" or "all" records Python frames (no C++ frames here)."""
    global _frame_source
    if enabled is None:
        _check(_lib.gpumem_history_stop())
        if clear_history:
            _check(_lib.gpumem_history_clear())
        return
    if enabled not in ("state", "all"):
        raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
    if clear_history:
        _check(_lib.gpumem_history_clear())
    want_stacks = context is not None and stacks in ("python", "all")
    if _frame_source is None:
        _frame_source = _FRAME_SOURCE_TYPE(_capture_frames)
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"max_entries must be a whole number of events, 0 or more, not {max_entries!r}")
    entries = 0 if enabled == "state" else min(max_entries, (1 << 63) - 1)
    _check(_lib.gpumem_history_start(entries, 1 if enabled == "all" else 0, 1 if want_stacks else 0,
                                     _frame_source))


def snapshot_bytes():
    size = ctypes.c_size_t(0)
    buf = _lib.gpumem_snapshot_pickle(ctypes.byref(size))
    if not buf:
        raise RuntimeError(_lib.gpumem_last_error().decode(errors="replace"))
    try:
        return ctypes.string_at(buf, size.value)
    finally:
        _lib.gpumem_buffer_free(buf)


def snapshot():
    """The dict torch.cuda.memory._snapshot() returns."""
    return pickle.loads(snapshot_bytes())


def dump_snapshot(filename="dump_snapshot.pickle"):
    """Writes the pickle straight from the library (streamed, never built twice in memory)."""
    path = os.fsencode(filename)  # str, bytes or a path-like, as open() takes them
    if b"\0" in path:
        raise ValueError(f"the snapshot's file name holds a NUL byte: {filename!r}")
    _check(_lib.gpumem_snapshot_write(path))


# torch._C replacements, with the signatures PyTorch's memory.py calls them with.
def _cuda_record_memory_history(enabled, context="all", stacks="all", max_entries=sys.maxsize,
                                clear_history=False, *_ignored):
    record_memory_history(enabled, context, stacks, max_entries, clear_history)


def _cuda_record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                       trace_alloc_record_context=False, *_ignored):
    if not enabled:
        record_memory_history(None)
        return
    record_memory_history("all" if trace_alloc_record_context else "state",
                          "all" if record_context else None, "python", trace_alloc_max_entries)


def _cuda_memory_snapshot(arg=None):
    s = snapshot()
    if isinstance(arg, tuple) and len(arg) == 3 and not arg[2]:
        s["device_traces"] = [[] for _ in s["device_traces"]]
    return s


def install(torch, lib):
    """Points torch._C's history and snapshot entry points at gpumem (also torch.cuda.memory's _C)."""
    bind(lib)
    replacements = {"_cuda_record_memory_history": _cuda_record_memory_history,
                    "_cuda_record_memory_history_legacy": _cuda_record_memory_history_legacy,
                    "_cuda_memorySnapshot": _cuda_memory_snapshot}
    targets = [getattr(torch, "_C", None), getattr(getattr(torch.cuda, "memory", None), "_C", None)]
    for target in {id(t): t for t in targets if t is not None}.values():
        for name, fn in replacements.items():
            setattr(target, name, fn)
