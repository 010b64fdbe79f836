"""Private pools for gpumem_torch: torch.cuda.MemPool and what CUDA graph trees (torch.compile
mode="reduce-overhead") ask of the allocator. Graph captures themselves reach gpumem through the pool hooks
set in gpumem_torch.install(); these are the calls PyTorch's pluggable allocator refuses, answered from
gpumem's pools instead.

Contract: this module imports no other gpumem module. gpumem_torch imports it when it loads, calls
bind(gpumem_torch) at once and re-exports MemPool and pool_live_blocks (gpumem_torch.MemPool, ...); install()
calls _install_pool_support(torch). Everything here reaches the library (_load, _lib, which
is None until it loads), _check, _device, deallocate and GpumemError through that module, at call time.
"""
import ctypes

_shim = None  # gpumem_torch, from bind()


def bind(shim):
    """Called by gpumem_torch as it loads: the module whose library and helpers this one uses."""
    global _shim
    _shim = shim


_POOL_TAG = 0x67706D << 40  # "gpm": MemPool ids that cannot collide with PyTorch's graph pool handles
_pool_serial = iter(range(1, 1 << 40))
_restored_blocks = set()  # blocks a checkpoint restore allocated: PyTorch has no record of them


def _addresses(fn, *args):
    needed = _shim._check(fn(*args, None, 0))
    out = (ctypes.c_size_t * max(needed, 1))()
    got = _shim._check(fn(*args, out, needed))
    return [out[i] for i in range(min(got, needed))]


def pool_live_blocks(pool_id, device=None):
    """Addresses of the blocks the program holds in a private pool."""
    return _addresses(_shim._load().gpumem_pool_live_blocks, _shim._device(device), int(pool_id[0]), int(pool_id[1]))


class _PoolCheckpoint:
    """What torch._C._cuda_getCheckpointState returns under gpumem: a numbered copy of a pool's blocks."""

    def __init__(self, device, pool_id):
        self.device = device
        self.handle = _shim._check(_shim._load().gpumem_pool_checkpoint(device, int(pool_id[0]), int(pool_id[1])))

    def __del__(self):
        lib = getattr(_shim, "_lib", None)  # None too once interpreter shutdown has cleared the modules
        if lib is not None:
            lib.gpumem_pool_checkpoint_free(self.handle)


def _check_pool_live_allocations(device, pool_id, live_ptrs):
    return set(pool_live_blocks(pool_id, device)) == set(live_ptrs)


def _get_checkpoint_state(device, pool_id):
    return _PoolCheckpoint(_shim._device(device), pool_id)


def _set_checkpoint_pool_state(device, state, stale_storages, storages_to_add_deleters_to):
    # PyTorch would also give the live storages deleters; gpumem cannot reach them, so their blocks stay
    # allocated until the pool's next restore or its release (more memory held, never memory shared).
    _restored_blocks.update(_addresses(_shim._load().gpumem_pool_restore, state.handle))


def _wrap_raw_delete(original):
    def raw_delete(ptr):
        if ptr in _restored_blocks:
            _restored_blocks.discard(ptr)
            _shim.deallocate(ptr)
        else:
            original(ptr)
    return raw_delete


class MemPool:
    """torch.cuda.MemPool under gpumem: a private pool of gpumem's (PyTorch's own MemPool needs its native
    allocator). Use it as PyTorch documents: torch.cuda.use_mem_pool(pool), torch.cuda.graph(g, pool=pool.id)."""

    def __init__(self, allocator=None, use_on_oom=False, no_split=False):
        if allocator is not None:
            raise _shim.GpumemError("gpumem: MemPool(allocator=...) cannot be used under gpumem, which is itself "
                                    "the process's allocator; create MemPool() without an allocator")
        import torch
        self._device = torch.cuda.current_device()
        self._id = (_POOL_TAG | next(_pool_serial), 0)
        self.allocator = None
        self.use_on_oom, self.no_split = use_on_oom, no_split
        _shim._check(_shim._load().gpumem_pool_incref(self._device, *self._id))

    @property
    def id(self):
        return self._id

    def use_count(self):
        return _shim._check(_shim._load().gpumem_pool_use_count(self._device, *self._id))

    def snapshot(self, include_traces=True):
        import torch
        return torch.cuda.memory.memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self):
        lib = getattr(_shim, "_lib", None)  # as _PoolCheckpoint.__del__
        if lib is not None and hasattr(self, "_id"):
            lib.gpumem_pool_release(self._device, *self._id)


def _install_pool_support(torch):
    C = torch._C
    C._cuda_checkPoolLiveAllocations = _check_pool_live_allocations
    C._cuda_getCheckpointState = _get_checkpoint_state
    C._cuda_setCheckpointPoolState = _set_checkpoint_pool_state
    C._cuda_cudaCachingAllocator_raw_delete = _wrap_raw_delete(C._cuda_cudaCachingAllocator_raw_delete)
    torch.cuda.MemPool = MemPool
    torch.cuda.memory.MemPool = MemPool
