"""torch._C's allocator entry points that CUDA graph trees call, as PyTorch's pluggable allocator answers them."""
import torch


def _refused(name):
    def refuse(*args, **kwargs):
        raise RuntimeError(f"CUDAPluggableAllocator does not yet support {name}")
    return refuse


_cuda_checkPoolLiveAllocations = _refused("checkPoolLiveAllocations")
_cuda_getCheckpointState = _refused("getCheckpointState")
_cuda_setCheckpointPoolState = _refused("setCheckpointPoolState")


def _cuda_cudaCachingAllocator_raw_delete(ptr):
    allocator = torch.cuda.memory._current
    if allocator is None:
        raise RuntimeError("no allocator")
    allocator.allocator().free(ptr, 0, 0, 0)
