"""torch._C's memory entry points as PyTorch's pluggable allocator leaves them: they raise once a pluggable
allocator is current (PyTorch's C++ refuses getDeviceStats, getMemoryFraction, ...), like the real ones."""
import torch


def _refuse(what):
    def fn(*args, **kwargs):
        if torch.cuda.memory.get_allocator_backend() == "pluggable":
            raise RuntimeError(f"CUDAPluggableAllocator does not yet support {what}")
        return {} if what == "getDeviceStats" else None
    return fn


_cuda_memoryStats = _refuse("getDeviceStats")
_cuda_resetAccumulatedMemoryStats = _refuse("resetAccumulatedStats")
_cuda_resetPeakMemoryStats = _refuse("resetPeakStats")
_cuda_getMemoryFraction = _refuse("getMemoryFraction")
_cuda_attach_out_of_memory_observer = _refuse("attachOutOfMemoryObserver")
_accelerator_getDeviceStats = _refuse("getDeviceStats")
_accelerator_resetAccumulatedStats = _refuse("resetAccumulatedStats")
_accelerator_resetPeakStats = _refuse("resetPeakStats")

_cuda_record_memory_history = _refuse("recordHistory")
_cuda_record_memory_history_legacy = _refuse("recordHistory")
_cuda_memorySnapshot = _refuse("snapshot")

_cuda_checkPoolLiveAllocations = _refuse("checkPoolLiveAllocations")
_cuda_getCheckpointState = _refuse("getCheckpointState")
_cuda_setCheckpointPoolState = _refuse("setCheckpointPoolState")


def _cuda_cudaCachingAllocator_raw_delete(ptr):
    allocator = torch.cuda.memory._current
    if allocator is None:
        raise RuntimeError("no allocator")
    allocator.allocator().free(ptr, 0, 0, 0)
