"""gpumem as PyTorch's CUDA allocator: ctypes over libgpumem.so's C ABI (include/gpumem/gpumem.h).

    import gpumem_torch
    gpumem_torch.install()          # before the first CUDA tensor
    ...
    gpumem_torch.max_memory_allocated()

Under a pluggable allocator PyTorch's own torch.cuda.memory_allocated() & co. raise; this module gives the
same names backed by gpumem, and install() points torch.cuda's names at them (patch_torch=False keeps
PyTorch's). torch.cuda.empty_cache(), set_per_process_memory_fraction() and Tensor.record_stream() reach
gpumem through the allocator's hooks. The library is $GPUMEM_LIBRARY, else libgpumem.so beside this file, else
that of the installation this file belongs to (the wheel's gpumem/_bin, PREFIX/lib for PREFIX/share/gpumem/python),
else the loader's search path.
"""
import ctypes
import json
import numbers
import os
import sys

__all__ = [
    "GpumemError", "OutOfMemoryError", "install", "is_installed", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "memory_stats", "memory_summary",
    "empty_cache", "set_per_process_memory_fraction", "set_limit", "mem_get_info", "backend_name",
    "allocate", "deallocate", "record_stream", "get_per_process_memory_fraction", "reset_accumulated_memory_stats",
    "cache_info", "oom_marker", "is_out_of_memory", "attach_out_of_memory_observer", "on_stop",
]


class GpumemError(RuntimeError):
    """A gpumem call failed; the message is the library's one-sentence reason."""


class OutOfMemoryError(GpumemError):
    pass


_E_OOM = -1
_lib = None
_lib_path = None
_installed = False
_torch_allocator = None  # keeps PyTorch's allocator object (and the library) alive


def _library_candidates(here):
    """Where libgpumem.so may be, relative to this file: beside it (the build folder, the wheel's gpumem/_bin,
    a `gpumem run` directory), ../build (the source tree), the wheel's gpumem/_bin (this file installed as a
    top-level module of the wheel), and the library folder of an installed prefix, this file being
    PREFIX/share/gpumem/python (cmake --install, the .deb)."""
    import sysconfig
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    prefix = os.path.join(here, "..", "..", "..")
    found = [os.path.join(here, "libgpumem.so"), os.path.join(here, "..", "build", "libgpumem.so"),
             os.path.join(here, "gpumem", "_bin", "libgpumem.so")]
    for libdir in ("lib", "lib64", os.path.join("lib", multiarch) if multiarch else None):
        if libdir:
            found.append(os.path.join(prefix, libdir, "libgpumem.so"))
    return [os.path.normpath(p) for p in found]


def _library_path():
    """$GPUMEM_LIBRARY, else the first of _library_candidates() that exists, else "libgpumem.so" when the
    system's loader finds it (ldconfig's cache, LD_LIBRARY_PATH)."""
    path = os.environ.get("GPUMEM_LIBRARY")
    if path:
        if not os.path.exists(path):
            raise GpumemError(f"gpumem: GPUMEM_LIBRARY={path} does not exist")
        return os.path.abspath(path)
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in _library_candidates(here):
        if os.path.exists(candidate):
            return candidate
    try:
        ctypes.CDLL("libgpumem.so")
        return "libgpumem.so"
    except OSError:
        pass
    raise GpumemError("gpumem: libgpumem.so not found beside gpumem_torch.py, in its installed prefix's lib, "
                      "in the wheel or on the loader's path; set GPUMEM_LIBRARY to its path")


def _load():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    path = _library_path()
    lib = ctypes.CDLL(path)
    c = ctypes
    sigs = {
        "gpumem_version": (c.c_char_p, []),
        "gpumem_last_error": (c.c_char_p, []),
        "gpumem_allocate": (c.c_int, [c.c_size_t, c.c_int, c.c_void_p, c.POINTER(c.c_void_p)]),
        "gpumem_deallocate": (c.c_int, [c.c_void_p, c.c_int, c.c_void_p]),
        "gpumem_set_limit": (c.c_int, [c.c_size_t, c.c_int]),
        "gpumem_set_fraction": (c.c_int, [c.c_double, c.c_int]),
        "gpumem_record_stream_checked": (c.c_int, [c.c_void_p, c.c_void_p]),
        "gpumem_empty_cache_checked": (c.c_int, []),
        "gpumem_backend_name": (c.c_int, [c.c_int, c.c_char_p, c.c_size_t]),
        "gpumem_memory_allocated": (c.c_size_t, [c.c_int]),
        "gpumem_memory_reserved": (c.c_size_t, [c.c_int]),
        "gpumem_max_memory_allocated": (c.c_size_t, [c.c_int]),
        "gpumem_max_memory_reserved": (c.c_size_t, [c.c_int]),
        "gpumem_reset_peak_memory_stats": (c.c_int, [c.c_int]),
        "gpumem_mem_get_info": (c.c_int, [c.c_int, c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)]),
        "gpumem_memory_stats_json": (c.c_int, [c.c_int, c.c_char_p, c.c_size_t]),
        "gpumem_memory_summary": (c.c_int, [c.c_int, c.c_char_p, c.c_size_t]),
        "gpumem_pool_incref": (c.c_int, [c.c_int, c.c_ulonglong, c.c_ulonglong]),
        "gpumem_pool_release": (c.c_int, [c.c_int, c.c_ulonglong, c.c_ulonglong]),
        "gpumem_pool_use_count": (c.c_int, [c.c_int, c.c_ulonglong, c.c_ulonglong]),
        "gpumem_pool_set_use_on_oom": (c.c_int, [c.c_int, c.c_ulonglong, c.c_ulonglong, c.c_int]),
        "gpumem_pool_live_blocks": (c.c_long, [c.c_int, c.c_ulonglong, c.c_ulonglong,
                                               c.POINTER(c.c_size_t), c.c_size_t]),
        "gpumem_pool_checkpoint": (c.c_long, [c.c_int, c.c_ulonglong, c.c_ulonglong]),
        "gpumem_pool_restore": (c.c_long, [c.c_long, c.POINTER(c.c_size_t), c.c_size_t]),
        "gpumem_pool_checkpoint_free": (c.c_int, [c.c_long]),
        "gpumem_oom_marker": (c.c_char_p, []),
        "gpumem_torch_oom_available": (c.c_int, []),
        "gpumem_set_oom_observer": (c.c_int, [c.c_void_p]),
        "gpumem_get_fraction": (c.c_int, [c.c_int, c.POINTER(c.c_double)]),
        "gpumem_reset_accumulated_memory_stats": (c.c_int, [c.c_int]),
        "gpumem_cache_info": (c.c_int, [c.c_int, c.POINTER(c.c_size_t)]),
        "gpumem_torch_enable_cache_info": (c.c_int, []),
        "gpumem_stop_requested": (c.c_int, []),
        "gpumem_ipc_export": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t]),  # gpumem_ipc.py
        "gpumem_ipc_open": (c.c_int, [c.c_int, c.c_char_p, c.POINTER(c.c_void_p)]),
        "gpumem_ipc_close": (c.c_int, [c.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib, _lib_path = lib, path
    return lib


def _has_module(name):
    import importlib.util
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _check(rc):
    if rc < 0:
        message = _load().gpumem_last_error().decode(errors="replace")
        raise (OutOfMemoryError if rc == _E_OOM else GpumemError)(message)
    return rc


_WORD_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
_MAX_DEVICE = 63  # gpumem/memory.hpp's kMaxDevices - 1


def _in_range(value, low, high, what):
    """value as an int from low to high: ctypes would wrap anything else into another number silently, and
    int() would truncate 1.5 or read True as 1."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise ValueError(f"gpumem: {what} must be an integer, got {value!r}")
    n = value.__index__()
    if not low <= n <= high:
        raise ValueError(f"gpumem: {what} must be from {low} to {high}, got {n}")
    return n


def _size(nbytes, what="size"):
    return _in_range(nbytes, 0, _WORD_MAX, what)


def _pointer(ptr):
    return ctypes.c_void_p(_in_range(ptr or 0, 0, _WORD_MAX, "pointer") or None)


def _device(device):
    """None -> PyTorch's current device once installed (gpumem's current device otherwise); int, 'cuda:N'
    or torch.device -> its index."""
    if device is None:
        torch = sys.modules.get("torch")
        if _installed and torch is not None and torch.cuda.is_initialized():
            return torch.cuda.current_device()
        return -1
    kind = device if isinstance(device, str) else getattr(device, "type", None)
    if kind is None:
        return _in_range(device, -1, _MAX_DEVICE, "device")
    kind, _, index = str(kind).partition(":")
    if kind != "cuda":
        raise ValueError(f"gpumem: {device!r} is not a CUDA device")
    if not isinstance(device, str):
        index = getattr(device, "index", None)
    if index is None or index == "":
        return _device(None)
    try:
        return _in_range(int(index), 0, _MAX_DEVICE, "device")
    except (TypeError, ValueError) as e:
        raise ValueError(f"gpumem: device {device!r}: {e}") from None


def _text(fn, device):
    dev = _device(device)
    size = _check(fn(dev, None, 0)) + 1
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = _check(fn(dev, buf, size))
        if needed < size:
            return buf.value.decode()
        # The text grew between the two calls (another thread allocated): cut short, so ask again.
        size = needed + 1 + needed // 8


def memory_allocated(device=None):
    return _load().gpumem_memory_allocated(_device(device))


def max_memory_allocated(device=None):
    return _load().gpumem_max_memory_allocated(_device(device))


def memory_reserved(device=None):
    return _load().gpumem_memory_reserved(_device(device))


def max_memory_reserved(device=None):
    return _load().gpumem_max_memory_reserved(_device(device))


def reset_peak_memory_stats(device=None):
    _check(_load().gpumem_reset_peak_memory_stats(_device(device)))


def memory_stats(device=None):
    """torch.cuda.memory_stats()'s flat keys ("allocated_bytes.all.current", ...), with gpumem's values."""
    return dict(sorted(json.loads(_text(_load().gpumem_memory_stats_json, device)).items()))


def memory_summary(device=None, abbreviated=False):
    return _text(_load().gpumem_memory_summary, device)


def empty_cache():
    _check(_load().gpumem_empty_cache_checked())


def set_per_process_memory_fraction(fraction, device=None):
    # A number, as PyTorch's: not True (1.0) or "0.5".
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise TypeError("fraction must be a number from 0 to 1, not %r" % (fraction,))
    _check(_load().gpumem_set_fraction(float(fraction), _device(device)))


def set_limit(nbytes, device=None):
    """Caps reserved bytes on a device (0 removes the cap)."""
    _check(_load().gpumem_set_limit(_size(nbytes, "limit"), _device(device)))


def mem_get_info(device=None):
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    _check(_load().gpumem_mem_get_info(_device(device), ctypes.byref(free), ctypes.byref(total)))
    return free.value, total.value


def backend_name(device=None):
    return _text(_load().gpumem_backend_name, device)


def allocate(nbytes, device=None, stream=0):
    """Raw allocation (an integer address); for tools and tests. Raises OutOfMemoryError when full."""
    out = ctypes.c_void_p()
    _check(_load().gpumem_allocate(_size(nbytes), _device(device), _pointer(stream), ctypes.byref(out)))
    return out.value or 0


def deallocate(ptr, device=None, stream=0):
    _check(_load().gpumem_deallocate(_pointer(ptr), _device(device), _pointer(stream)))


def record_stream(ptr, stream):
    _check(_load().gpumem_record_stream_checked(_pointer(ptr), _pointer(stream)))


def get_per_process_memory_fraction(device=None):
    """The fraction set last (exactly), else the limit as a fraction of the device, else 1.0."""
    out = ctypes.c_double()
    _check(_load().gpumem_get_fraction(_device(device), ctypes.byref(out)))
    return out.value


def reset_accumulated_memory_stats(device=None):
    _check(_load().gpumem_reset_accumulated_memory_stats(_device(device)))


def cache_info(device=None):
    """Largest block an allocation could get now (what PyTorch's cacheInfo tells cuDNN)."""
    out = ctypes.c_size_t()
    _check(_load().gpumem_cache_info(_device(device), ctypes.byref(out)))
    return out.value


def oom_marker():
    """Text in every gpumem out-of-memory message that is not PyTorch's own OutOfMemoryError (gpumem.h)."""
    return _load().gpumem_oom_marker().decode()


def is_out_of_memory(error):
    """True for an exception that is a gpumem out of memory: torch.OutOfMemoryError (gpumem_malloc throws
    c10's own type), this module's OutOfMemoryError, or a RuntimeError carrying the library's marker."""
    torch = sys.modules.get("torch")
    kinds = (OutOfMemoryError,) + tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                                                    getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None))
                                        if isinstance(k, type))
    if isinstance(error, kinds):
        return True
    try:
        return oom_marker() in str(error)
    except GpumemError:
        return False


_oom_observers = []
_OOM_OBSERVER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t)


def _call_oom_observers(device, requested, device_allowed, device_free):
    for observer in list(_oom_observers):
        try:
            observer(device, requested, device_allowed, device_free)
        except Exception as e:  # an observer must not turn the OOM into a crash inside the allocator
            sys.stderr.write(f"gpumem: out-of-memory observer {observer!r} raised {e!r}\n")


_oom_trampoline = _OOM_OBSERVER_TYPE(_call_oom_observers)


def attach_out_of_memory_observer(observer):
    """torch._C._cuda_attach_out_of_memory_observer: observer(device, alloc, device_allowed, device_free)
    runs on each out of memory (device_allowed: the limit, else the device's total, as PyTorch passes), before the exception is raised."""
    if not callable(observer):
        raise TypeError("gpumem: the out-of-memory observer must be callable")
    if not _oom_observers:
        _check(_load().gpumem_set_oom_observer(ctypes.cast(_oom_trampoline, ctypes.c_void_p)))
    _oom_observers.append(observer)


def _nested(flat):
    """memory_stats()'s flat "a.b.c" keys as the nested dict torch._C._cuda_memoryStats returns."""
    nested = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return nested


def _patch_torch_internals(torch):
    """Points the torch._C functions that PyTorch's pluggable allocator refuses at gpumem. torch.cuda's and
    torch.accelerator's Python functions look these up at call time, so memory_stats, memory_allocated,
    memory_summary, get_per_process_memory_fraction, reset_accumulated_memory_stats & co. all answer."""
    C = torch._C
    replacements = {
        "_cuda_memoryStats": lambda device: _nested(memory_stats(device)),
        "_cuda_resetAccumulatedMemoryStats": reset_accumulated_memory_stats,
        "_cuda_resetPeakMemoryStats": reset_peak_memory_stats,
        "_cuda_getMemoryFraction": get_per_process_memory_fraction,
        "_cuda_attach_out_of_memory_observer": attach_out_of_memory_observer,
        # torch.accelerator answers {} unless it believes its allocator is initialised (c10's, which
        # the pluggable allocator never initialises): gpumem's is, from install() on.
        "_accelerator_isAllocatorInitialized": lambda: True,
        "_accelerator_emptyCache": empty_cache,
        "_accelerator_getDeviceStats": lambda device=None: _nested(memory_stats(device)),
        "_accelerator_resetAccumulatedStats": reset_accumulated_memory_stats,
        "_accelerator_resetPeakStats": reset_peak_memory_stats,
    }
    for name, fn in replacements.items():
        if hasattr(C, name):
            setattr(C, name, fn)
    for module in (torch.cuda, getattr(torch.cuda, "memory", None)):
        if module is not None:
            module.get_per_process_memory_fraction = get_per_process_memory_fraction
            module.reset_accumulated_memory_stats = reset_accumulated_memory_stats


def on_stop(fn):
    """Run fn() in the main thread when `gpumem stop PID` asks this process to stop, instead of raising
    KeyboardInterrupt there (e.g. to save a checkpoint and leave the training loop). Ctrl-C keeps its
    usual meaning. The cache has already been released when fn runs."""
    import signal
    if not callable(fn):
        raise TypeError("on_stop needs a function to call, not %r" % (fn,))
    lib = _load()
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if lib.gpumem_stop_requested():
            fn()
        elif callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)


def is_installed():
    return _installed


_TORCH_NAMES = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                "reset_peak_memory_stats", "memory_stats", "memory_summary")


def install(patch_torch=True):
    """Makes gpumem PyTorch's CUDA allocator. Must run before the process's first CUDA use."""
    global _installed, _torch_allocator
    if _installed:
        return
    import torch
    if torch.cuda.is_initialized():
        held = torch.cuda.memory_allocated() if torch.cuda.memory.get_allocator_backend() == "native" else 0
        raise GpumemError(
            "gpumem: install() came too late: this process already initialised CUDA with PyTorch's own "
            f"allocator ({held} bytes allocated), and PyTorch cannot change allocators after that; call "
            "gpumem_torch.install() before the first CUDA tensor, or start the program with `gpumem run`")
    lib = _load()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(_lib_path, "gpumem_malloc", "gpumem_free")
    raw = allocator.allocator()
    hooks = (("set_reset_fn", "gpumem_reset"), ("set_memory_fraction_fn", "gpumem_set_memory_fraction"),
             ("set_record_stream_fn", "gpumem_record_stream"), ("set_base_alloc_fn", "gpumem_base_alloc"),
             ("set_init_fn", "gpumem_init"), ("set_begin_allocate_to_pool", "gpumem_begin_allocate_to_pool"),
             ("set_end_allocate_to_pool_fn", "gpumem_end_allocate_to_pool"), ("set_release_pool", "gpumem_release_pool"))
    if not hasattr(raw, "set_begin_allocate_to_pool"):
        # Without the pool hooks a CUDA graph's memory would be handed to other tensors: wrong results.
        raise GpumemError("gpumem: this PyTorch has no CUDA graph pool hooks in its pluggable allocator "
                          f"(torch {torch.__version__}); gpumem needs PyTorch 2.3 or newer")
    for setter, symbol in hooks:
        if hasattr(raw, setter):
            getattr(raw, setter)(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    torch.cuda.memory.change_current_allocator(allocator)
    if _has_module("torch.multiprocessing"):
        import gpumem_ipc  # beside this file: CUDA tensors through torch.multiprocessing
        gpumem_ipc.install(torch)
    lib.gpumem_torch_enable_cache_info()  # cuDNN benchmark's cacheInfo(); 0 (not found) leaves PyTorch's
    _torch_allocator = allocator
    _installed = True
    _install_pool_support(torch)
    _history_module().install(torch, lib)
    if patch_torch:
        this = sys.modules[__name__]
        for name in _TORCH_NAMES:
            setattr(torch.cuda, name, getattr(this, name))
            setattr(torch.cuda.memory, name, getattr(this, name))
        torch.cuda.reset_max_memory_allocated = reset_peak_memory_stats
        torch.cuda.memory.reset_max_memory_allocated = reset_peak_memory_stats
        _patch_torch_internals(torch)


# ---- Private pools and CUDA graphs: gpumem_pools.py, beside this file (its docstring says the contract).
import gpumem_pools as _pools  # noqa: E402
from gpumem_pools import MemPool, _install_pool_support, pool_live_blocks  # noqa: E402,F401  (re-exported)

_pools.bind(sys.modules[__name__])


def _history_module():
    """gpumem_history.py (memory history, snapshots): beside this file, else beside libgpumem.so."""
    try:
        import gpumem_history
    except ImportError:
        sys.path.append(os.path.dirname(_lib_path))
        import gpumem_history
    return gpumem_history


class _InstallWhenTorchLoads:
    """A meta-path finder that lets `import torch` run unchanged, then calls install() right after it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            try:
                install()
            except GpumemError as e:
                sys.stderr.write(f"{e}\n")
                sys.stderr.flush()
                os._exit(4)

        spec.loader.exec_module = exec_module
        return spec


def install_on_torch_import():
    """Installs gpumem as soon as the program imports torch (what `gpumem run` sets up)."""
    if "torch" in sys.modules:
        install()
    elif not any(isinstance(f, _InstallWhenTorchLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallWhenTorchLoads())


_DRIVER_KINDS = ("create", "map", "access", "unmap", "release")
_REPORT_KEYS = {"peak_allocated": "allocated_bytes.all.peak", "peak_reserved": "reserved_bytes.all.peak",
                "peak_requested": "requested_bytes.all.peak", "peak_active": "active_bytes.all.peak",
                "num_ooms": "num_ooms",
                "num_device_alloc": "num_device_alloc", "num_device_free": "num_device_free"}


def _run_setup():
    """Called by the sitecustomize that `gpumem run` generates: install on `import torch`, and at exit
    write this process's peaks to $GPUMEM_REPORT_DIR/report-<pid>.json for `gpumem run` to print."""
    install_on_torch_import()
    report_dir = os.environ.get("GPUMEM_REPORT_DIR")
    if not report_dir:
        return
    import atexit
    state = {"oom": False}
    owner = os.getpid()
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        if is_out_of_memory(value):
            state["oom"] = True
        previous_hook(kind, value, tb)

    def write_report():
        if os.getpid() != owner:
            return  # a forked child: its counts are its parent's (and CUDA is unusable after fork)
        devices = {}
        torch = sys.modules.get("torch")
        if _installed and torch is not None and torch.cuda.is_initialized():
            for d in range(torch.cuda.device_count()):
                stats = memory_stats(d)
                if stats.get("segment.all.allocated", 0) or stats.get("allocation.all.allocated", 0) or \
                        stats.get("num_ooms", 0):  # a first request that failed still counts
                    device = {k: stats.get(key, 0) for k, key in _REPORT_KEYS.items()}
                    # What the page-by-page growth cost the program's threads (gpumem's own thread's
                    # pages made ahead not included): the price of the memory saved (README).
                    device["driver_calls"] = sum(stats.get(f"gpumem.driver.{k}.calls", 0) for k in _DRIVER_KINDS)
                    device["driver_us"] = sum(stats.get(f"gpumem.driver.{k}.us", 0) for k in _DRIVER_KINDS)
                    devices[str(d)] = device
        report = {"pid": os.getpid(), "installed": _installed, "oom": state["oom"], "devices": devices}
        try:
            with open(os.path.join(report_dir, f"report-{os.getpid()}.json"), "w") as f:
                json.dump(report, f)
        except OSError:
            pass  # the report is a courtesy; the program's own exit status stands

    sys.excepthook = excepthook
    atexit.register(write_report)
