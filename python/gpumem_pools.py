"""Private pools for gpumem_torch: torch.cuda.MemPool and what CUDA graph trees (torch.compile
mode="reduce-overhead") ask of the allocator. Graph captures themselves reach gpumem through the pool hooks
set in gpumem_torch.install(); these are the calls PyTorch's pluggable allocator refuses, answered from
gpumem's pools instead, and the storage-deleter calls that a checkpoint restore makes graph trees ask
(_has_Standard_Deleter, _free_And_Remove_DeleterFn, raw_delete: see _AdoptedStorages).

Contract: this module imports no other gpumem module. gpumem_torch imports it when it loads, calls
bind(gpumem_torch) at once and re-exports MemPool and pool_live_blocks (gpumem_torch.MemPool, ...); install()
calls _install_pool_support(torch). Everything here reaches the library (_load, _lib, which
is None until it loads), _check, _device, deallocate and GpumemError through that module, at call time.
"""
import ctypes
import inspect
import threading

_shim = None  # gpumem_torch, from bind()


def bind(shim):
    """Called by gpumem_torch as it loads: the module whose library and helpers this one uses."""
    global _shim
    _shim = shim


_POOL_TAG = 0x67706D << 40  # "gpm": MemPool ids that cannot collide with PyTorch's graph pool handles
_pool_serial = iter(range(1, 1 << 40))
_restored_blocks = set()  # blocks a checkpoint restore allocated: PyTorch has no record of them


class _AdoptedStorages:
    """Live storages a checkpoint restore handed back to the allocator. PyTorch's own restore gives each one
    the allocator's deleter, so its block is freed when the storage dies, and CUDA graph trees then assert
    torch._C._has_Standard_Deleter on them. Python cannot set a storage's deleter, so gpumem keeps a weak
    reference instead, answers those two calls for it, and frees the block of a storage found dead at the
    next graph-tree call (sweep): the block stays allocated a little longer, never handed out twice.
    Graph trees run one per thread: every method holds a lock.

    weak_ref(cdata) -> (object with expired(), data pointer) or None; free(ptr) frees a block."""

    def __init__(self, weak_ref, free):
        self._weak_ref, self._free = weak_ref, free
        self._by_storage = {}  # StorageImpl address -> (weak reference, data pointer, pool)
        self._lock = threading.RLock()

    def adopt(self, cdata, pool, block_ptrs):
        """Takes the storage at cdata if it is alive and its memory is one of the pool's blocks; that block."""
        got = self._weak_ref(cdata)
        if got is None or got[1] not in block_ptrs:
            return None
        with self._lock:
            self._by_storage[cdata] = (got[0], got[1], pool)
        return got[1]

    def holds(self, cdata):
        with self._lock:
            entry = self._by_storage.get(cdata)
        return entry is not None and not entry[0].expired()

    def release(self, cdata):
        """Forgets the storage at cdata and every other one over its block; the block (None if not held)."""
        with self._lock:
            entry = self._by_storage.pop(cdata, None)
            if entry is not None:
                self.release_ptr(entry[1])
        return None if entry is None else entry[1]

    def release_ptr(self, ptr):
        """Forgets every storage over ptr (its block is freed by the caller); True if there was one."""
        with self._lock:
            held = [c for c, e in self._by_storage.items() if e[1] == ptr]
            for c in held:
                del self._by_storage[c]
        return bool(held)

    def keep_only(self, pool, block_ptrs):
        """Forgets the pool's storages whose block is no longer allocated (a restore freed it)."""
        with self._lock:
            for c in [c for c, e in self._by_storage.items() if e[2] == pool and e[1] not in block_ptrs]:
                del self._by_storage[c]

    def sweep(self):
        """Frees the blocks of held storages that died, once per block (aliases share one); how many."""
        with self._lock:
            dead = [c for c, e in self._by_storage.items() if e[0].expired()]
            ptrs = {self._by_storage.pop(c)[1] for c in dead} - {e[1] for e in self._by_storage.values()}
            for ptr in ptrs:
                self._free(ptr)
        return len(ptrs)

    def __len__(self):
        with self._lock:
            return len(self._by_storage)


def _storage_weak_ref(cdata):
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    storage = torch.UntypedStorage._new_with_weak_ptr(cdata)
    return None if storage is None else (StorageWeakRef(storage), storage.data_ptr())


_adopted = _AdoptedStorages(_storage_weak_ref, lambda ptr: _shim.deallocate(ptr))


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
        self.device, self.pool_id = device, pool_id
        self.handle = _shim._check(_shim._load().gpumem_pool_checkpoint(device, int(pool_id[0]), int(pool_id[1])))

    def __del__(self):
        lib = getattr(_shim, "_lib", None)  # None too once interpreter shutdown has cleared the modules
        if lib is not None:
            lib.gpumem_pool_checkpoint_free(self.handle)


def _check_pool_live_allocations(device, pool_id, live_ptrs):
    _adopted.sweep()  # natively a dead adopted storage's deleter has freed its block already
    return set(pool_live_blocks(pool_id, device)) == set(live_ptrs)


def _get_checkpoint_state(device, pool_id):
    _adopted.sweep()
    return _PoolCheckpoint(_shim._device(device), pool_id)


def _set_checkpoint_pool_state(device, state, stale_storages, storages_to_add_deleters_to):
    # graph trees pass no stale storages (PyTorch's restore refuses to free blocks no stale storage names);
    # the live ones get the allocator's deleter natively: here they are adopted (_AdoptedStorages).
    _adopted.sweep()
    _restored_blocks.update(_addresses(_shim._load().gpumem_pool_restore, state.handle))
    pool = tuple(int(x) for x in state.pool_id)
    blocks = set(pool_live_blocks(pool, state.device))
    _adopted.keep_only(pool, blocks)
    for cdata in storages_to_add_deleters_to:
        if _standard_deleter is not None and not _standard_deleter(cdata):
            ptr = _adopted.adopt(cdata, pool, blocks)
            _restored_blocks.discard(ptr)  # the storage owns it now: freed by the sweep or with it


def _wrap_raw_delete(original):
    def raw_delete(ptr):
        if ptr in _restored_blocks or _adopted.release_ptr(ptr):
            _restored_blocks.discard(ptr)
            _shim.deallocate(ptr)
            return
        try:
            original(ptr)
        except RuntimeError as refused:
            # PyTorch's raw_delete frees any block of the pool; the pluggable allocator knows only what its
            # own malloc made (and forgets on its first free). A block gpumem holds live is freed here.
            try:
                _shim.deallocate(ptr)
            except _shim.GpumemError:
                raise refused from None
    return raw_delete


_standard_deleter = None  # torch._C._has_Standard_Deleter as PyTorch defines it, once installed
_native_init_signature = inspect.signature(lambda self, allocator=None, use_on_oom=False, no_split=False: None)


def _has_standard_deleter(cdata):
    return _adopted.holds(cdata) or _standard_deleter(cdata)


def _wrap_free_and_remove_deleter(original):
    def free_and_remove_deleter(cdata):  # graph trees free a live path's storages before a new generation
        ptr = _adopted.release(cdata)
        if ptr is None:
            return original(cdata)
        _shim.deallocate(ptr)
    return free_and_remove_deleter


class MemPool:
    """torch.cuda.MemPool under gpumem: a private pool of gpumem's (PyTorch's own MemPool needs its native
    allocator). Use it as PyTorch documents: torch.cuda.use_mem_pool(pool), torch.cuda.graph(g, pool=pool.id)."""

    def __init__(self, *args, **kwargs):
        # The installed PyTorch's own parameters: (allocator, use_on_oom, no_split) or (..., symmetric).
        bound = _native_init_signature.bind(None, *args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        given.pop(next(iter(_native_init_signature.parameters)), None)  # self
        if given.get("allocator") is not None:
            raise _shim.GpumemError("gpumem: MemPool(allocator=...) cannot be used under gpumem, which is itself "
                                    "the process's allocator; create MemPool() without an allocator")
        if given.get("symmetric"):
            raise _shim.GpumemError("gpumem: MemPool(symmetric=True) registers the pool with NCCL through PyTorch's "
                                    "own allocator, which gpumem replaces; run this program without gpumem run")
        import torch
        self._device = torch.cuda.current_device()
        self._id = (_POOL_TAG | next(_pool_serial), 0)
        self.allocator = None
        self.use_on_oom, self.no_split = bool(given.get("use_on_oom")), bool(given.get("no_split"))
        lib = _shim._load()
        _shim._check(lib.gpumem_pool_incref(self._device, *self._id))
        if self.use_on_oom:  # an allocation outside every pool takes this pool's free blocks before failing
            _shim._check(lib.gpumem_pool_set_use_on_oom(self._device, *self._id, 1))

    @property
    def is_symmetric(self):
        return False

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
    global _standard_deleter
    if _standard_deleter is None and hasattr(C, "_has_Standard_Deleter"):
        _standard_deleter = C._has_Standard_Deleter
        C._has_Standard_Deleter = _has_standard_deleter
        C._free_And_Remove_DeleterFn = _wrap_free_and_remove_deleter(C._free_And_Remove_DeleterFn)
    global _native_init_signature
    native = getattr(torch.cuda, "MemPool", None)
    if native is not None and native is not MemPool:
        try:
            signature = inspect.signature(native.__init__)
        except (TypeError, ValueError):  # a C-level __init__ without a signature: keep the default above
            signature = None
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if signature is not None and not any(p.kind in variadic for p in signature.parameters.values()):
            _native_init_signature = signature
    torch.cuda.MemPool = MemPool
    torch.cuda.memory.MemPool = MemPool
