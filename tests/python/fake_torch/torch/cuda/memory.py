"""torch.cuda.memory's pluggable-allocator API, reduced to what it does with the function pointers."""
import ctypes

import torch

_current = None
native_allocated = 4096  # what the "native" allocator holds once CUDA is initialised


def get_allocator_backend():
    return "native" if _current is None else "pluggable"


def _native_only(*args, **kwargs):
    if _current is not None:
        raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats")
    return native_allocated


memory_allocated = max_memory_allocated = memory_reserved = max_memory_reserved = _native_only
reset_peak_memory_stats = memory_stats = memory_summary = _native_only


# As in PyTorch, these reach torch._C at call time (so patching torch._C reaches them).
def get_per_process_memory_fraction(device=None):
    return torch._C._cuda_getMemoryFraction(0 if device is None else device)


def reset_accumulated_memory_stats(device=None):
    return torch._C._cuda_resetAccumulatedMemoryStats(0 if device is None else device)


def memory_stats_as_nested_dict(device=None):
    return torch._C._cuda_memoryStats(0 if device is None else device)


class _RawAllocator:
    def __init__(self, malloc_ptr, free_ptr):
        self.malloc_ptr, self.free_ptr, self.hooks = malloc_ptr, free_ptr, {}
        self.malloced = set()  # what PyTorch's pluggable allocator remembers for raw_delete

    def set_init_fn(self, ptr):
        self.hooks["init"] = ptr

    def set_reset_fn(self, ptr):
        self.hooks["reset"] = ptr

    def set_memory_fraction_fn(self, ptr):
        self.hooks["memory_fraction"] = ptr

    def set_base_alloc_fn(self, ptr):
        self.hooks["base_alloc"] = ptr

    def set_record_stream_fn(self, ptr):
        self.hooks["record_stream"] = ptr

    # The CUDA graph pool hooks (PyTorch 2.3+); their C++ signatures cannot be called from ctypes, so the
    # double only keeps them (tests/api/pool_hooks_test.cpp calls them with PyTorch's types).
    def set_begin_allocate_to_pool(self, ptr):
        self.hooks["begin_allocate_to_pool"] = ptr

    def set_end_allocate_to_pool_fn(self, ptr):
        self.hooks["end_allocate_to_pool"] = ptr

    def set_release_pool(self, ptr):
        self.hooks["release_pool"] = ptr

    # What PyTorch's C++ side does with the pointers, callable from tests.
    def malloc(self, size, device, stream):
        fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)(self.malloc_ptr)
        ptr = fn(size, device, stream)
        self.malloced.add(ptr)
        return ptr

    def free(self, ptr, size, device, stream):
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(self.free_ptr)
        fn(ptr, size, device, stream)

    def empty_cache(self):
        ctypes.CFUNCTYPE(None)(self.hooks["reset"])()


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        malloc_ptr = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_ptr = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        self._allocator = _RawAllocator(malloc_ptr, free_ptr)

    def allocator(self):
        return self._allocator


class MemPool:
    def __init__(self, allocator=None, use_on_oom=False, no_split=False):  # PyTorch 2.11's parameters
        raise RuntimeError("CUDAPluggableAllocator does not yet support createOrIncrefPool")


def change_current_allocator(allocator):
    global _current
    if torch.cuda.is_initialized():
        raise RuntimeError("Can't swap an already initialized allocator")
    _current = allocator


# Memory history and snapshots: PyTorch 2.11's Python functions, reduced to their calls into torch._C.
import pickle  # noqa: E402
import sys  # noqa: E402

from torch import _C  # noqa: E402


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False, compile_context=False, global_record_annotations=False,
                           skip_actions=None):
    if isinstance(enabled, bool):
        return _C._cuda_record_memory_history_legacy(enabled, True, max_entries, True, False, False, False)
    _C._cuda_record_memory_history(enabled, context, stacks, max_entries, clear_history, compile_context,
                                   global_record_annotations, skip_actions if skip_actions is not None else [])


def _snapshot(device=None, augment_with_fx_traces=False):
    return _C._cuda_memorySnapshot(None)


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
    s = _snapshot()
    with open(filename, "wb") as f:
        pickle.dump(s, f)


def memory_snapshot(mempool_id=None, include_traces=True):
    return _C._cuda_memorySnapshot((0, 0, include_traces))["segments"]
