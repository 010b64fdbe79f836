"""torch._C's memory-history entry points as they behave under a pluggable allocator (they raise)."""


def _cuda_record_memory_history(*args, **kwargs):
    raise RuntimeError("CUDAPluggableAllocator does not yet support recordHistory")


def _cuda_record_memory_history_legacy(*args, **kwargs):
    raise RuntimeError("CUDAPluggableAllocator does not yet support recordHistory")


def _cuda_memorySnapshot(*args, **kwargs):
    raise RuntimeError("CUDAPluggableAllocator does not yet support snapshot")
