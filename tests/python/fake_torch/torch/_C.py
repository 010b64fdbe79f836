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
    # PyTorch's pluggable raw_delete frees only what its own malloc handed out, and forgets it then.
    allocator = torch.cuda.memory._current
    if allocator is None:
        raise RuntimeError("no allocator")
    if ptr not in allocator.allocator().malloced:
        raise RuntimeError("Trying to free a pointer not allocated here")
    allocator.allocator().malloced.discard(ptr)
    allocator.allocator().free(ptr, 0, 0, 0)


# Storages as CUDA graph trees see them: StorageImpl addresses (cdata) with a data pointer and a deleter
# that is the allocator's (standard) or none (graph-tree replay outputs). Tests make and kill them.
class _StorageImpl:
    def __init__(self, data_ptr, standard_deleter):
        self.data_ptr, self.standard_deleter, self.alive = data_ptr, standard_deleter, True


_storages = {}


def _make_storage(data_ptr, standard_deleter=False):
    cdata = 0x5000 + 16 * len(_storages)
    _storages[cdata] = _StorageImpl(data_ptr, standard_deleter)
    return cdata


def _kill_storage(cdata):
    _storages[cdata].alive = False


class StorageWeakRef:
    """torch.multiprocessing.reductions.StorageWeakRef over these storages. The double has no
    torch.multiprocessing (gpumem_ipc's install needs it absent): a test that needs this registers it."""

    def __init__(self, storage):
        self.cdata = storage._cdata

    def expired(self):
        return not _storages[self.cdata].alive


def _has_Standard_Deleter(cdata):
    return _storages[cdata].standard_deleter


def _free_And_Remove_DeleterFn(cdata):
    s = _storages[cdata]
    if not s.standard_deleter:
        raise RuntimeError("Expected standard deleter")
    s.standard_deleter = False
    _cuda_cudaCachingAllocator_raw_delete(s.data_ptr)
