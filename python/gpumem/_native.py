"""In-process samples through libgpumem_monitor.so (include/gpumem/gpumem_monitor.h) and ctypes: no compiler,
no subprocess, NVML kept open between samples. The library is $GPUMEM_MONITOR_LIBRARY, else the wheel's
gpumem/_bin/, else beside the gpumem binary (build folder) or in its ../lib (cmake --install, the .deb), else
the loader's search path. load() returns None when none can be loaded (the caller runs the binary instead)."""
import ctypes
import json
import os
import sysconfig
import threading

from . import _binary

NAME = "libgpumem_monitor.so"
ABI_VERSION = 1
# flags and statuses of gpumem_monitor.h
PROCESSES, ALLOCATORS, HOLDERS, EXTRAS = 1, 2, 4, 8
OK, NO_DEVICE = 0, 4

_lock = threading.Lock()
_lib = None
_tried = False
_stuck = None  # a sample's thread that never got its answer (it still holds the library's lock)


def _candidates():
    explicit = os.environ.get("GPUMEM_MONITOR_LIBRARY")
    if explicit:
        return [explicit]  # only that one: a test or a user asking for a given build
    found = [os.path.join(_binary._HERE, "_bin", NAME)]
    try:
        bindir = os.path.dirname(os.path.realpath(_binary.path()))
        multiarch = sysconfig.get_config_var("MULTIARCH") or ""
        for rel in ("", "../lib", "../lib64", os.path.join("../lib", multiarch)):
            found.append(os.path.normpath(os.path.join(bindir, rel, NAME)))
    except _binary.GpumemNotFound:
        pass
    return [p for p in found if os.path.isfile(p)] + [NAME]


def _open(path):
    try:
        lib = ctypes.CDLL(path)
        if lib.gpumem_monitor_abi_version() != ABI_VERSION:
            return None
    except (OSError, AttributeError):
        return None
    lib.gpumem_monitor_sample_json.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                               ctypes.POINTER(ctypes.c_size_t)]
    lib.gpumem_monitor_sample_json.restype = ctypes.c_int
    lib.gpumem_monitor_free.argtypes = [ctypes.c_void_p]
    lib.gpumem_monitor_free.restype = None
    lib.gpumem_monitor_reset.argtypes = []
    lib.gpumem_monitor_reset.restype = None
    return lib


def load():
    """The loaded library, or None. Looked for once per process (reset() looks again)."""
    global _lib, _tried
    with _lock:
        if not _tried:
            _tried = True
            for path in _candidates():
                _lib = _open(path)
                if _lib is not None:
                    break
        return _lib


def path():
    """Where the loaded library lies, or None."""
    lib = load()
    return lib._name if lib is not None else None


TIMEOUT_S = 60  # as the binary's path: a GPU that stops answering blocks NVML for good


def sample(flags):
    """(status, document or sentence): the sample as a dict when status is OK, else the library's sentence.
    The call runs on a thread of its own so that Ctrl-C interrupts the wait and a hung GPU ends in an error
    after TIMEOUT_S instead of blocking the program for ever (the stuck call is left behind)."""
    global _stuck
    if _stuck is not None and _stuck.is_alive():  # it holds the library's lock: a new call would wait too
        return -1, "gpumem: the GPU driver has not answered an earlier sample yet (a GPU that stopped answering?)"
    lib = load()
    out, size = ctypes.c_void_p(), ctypes.c_size_t()
    result = []

    def call():
        try:
            result.append(lib.gpumem_monitor_sample_json(flags, ctypes.byref(out), ctypes.byref(size)))
        except BaseException as e:  # handed to the caller as it is
            result.append(e)

    worker = threading.Thread(target=call, name="gpumem-sample", daemon=True)
    worker.start()
    worker.join(TIMEOUT_S)
    if not result:
        _stuck = worker
        return -1, f"gpumem: the GPU driver gave no answer in {TIMEOUT_S} s (a GPU that stopped answering?)"
    if isinstance(result[0], BaseException):
        raise result[0]
    status = result[0]
    try:
        text = ctypes.string_at(out.value, size.value).decode("utf-8", "replace") if out.value else ""
    finally:
        lib.gpumem_monitor_free(out)
    return (status, json.loads(text)) if status == OK else (status, text or f"gpumem: sample failed ({status})")


def reset():
    """Closes the library's NVML and caches (the next sample opens NVML afresh) and looks for the library
    again: after a driver reload, or when GPUMEM_NVML_LIBRARY / GPUMEM_MONITOR_LIBRARY changed."""
    global _lib, _tried
    with _lock:
        if _lib is not None and not (_stuck is not None and _stuck.is_alive()):  # else it would wait with it
            _lib.gpumem_monitor_reset()
        _lib, _tried = None, False
