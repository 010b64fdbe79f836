"""CUDA IPC for gpumem_torch: gpumem allocations shared with other processes, and torch.multiprocessing's
CUDA tensor reduction pointed at them (PyTorch's pluggable allocator refuses storage._share_cuda_).

The exporter describes an allocation's physical pages through the C ABI (gpumem_ipc_export: file
descriptors of its chunks), pickles them as multiprocessing.reduction.DupFd (sent over a Unix socket with
SCM_RIGHTS), and keeps the memory's owner alive until every receiver closed its end of a keep-alive pipe
(a receiver that dies closes it too). The receiver maps the pages (gpumem_ipc_open) and views them as a
tensor through __cuda_array_interface__; dropping the tensor unmaps them (gpumem_ipc_close).
"""
import ctypes
import json
import os

from gpumem_torch import GpumemError, _check, _load

_exported = []  # (read end of a keep-alive pipe, what keeps the memory alive) until every receiver lets go


def _transfer(fd):
    """multiprocessing.reduction.DupFd for fd, which this takes over. Pickled while a process is being
    spawned (spawn, forkserver: a tensor passed in Process args), the child is given this very descriptor
    when it starts, after the pickling: it stays open until that process object goes (closed at once, the
    child got a closed or reused descriptor). Otherwise (a Queue, a Pipe) DupFd has duplicated it already."""
    import weakref
    from multiprocessing import context
    from multiprocessing.reduction import DupFd
    spawning = context.get_spawning_popen()
    try:
        holder = DupFd(fd)
    except BaseException:
        os.close(fd)
        raise
    if spawning is None:
        os.close(fd)
    else:
        weakref.finalize(spawning, os.close, fd)
    return holder


def _collect_exported():
    """Drops the references of exports whose receivers all closed their end of the keep-alive pipe."""
    import select
    keep = []
    for read_end, owner in _exported:
        if select.select([read_end], [], [], 0)[0] and os.read(read_end, 1) == b"":
            os.close(read_end)
        else:
            keep.append((read_end, owner))
    _exported[:] = keep


class SharedAllocation:
    """A live gpumem allocation on its way to another process: pickle it through multiprocessing (its file
    descriptors travel as multiprocessing.reduction.DupFd) and call open() there. The exporting process
    keeps `owner` (e.g. the tensor's storage) alive until every receiver has closed what it opened."""

    def __init__(self, address, device, owner=None):
        lib = _load()
        buf = ctypes.create_string_buffer(1 << 16)
        needed = _check(lib.gpumem_ipc_export(ctypes.c_void_p(address), buf, len(buf)))
        if needed >= len(buf):  # the library closed the descriptors of the first try
            buf = ctypes.create_string_buffer(needed + 1)
            _check(lib.gpumem_ipc_export(ctypes.c_void_p(address), buf, len(buf)))
        description = json.loads(buf.value.decode())
        per_piece = [piece.pop("fds") for piece in description["pieces"]]
        fds = [fd for piece_fds in per_piece for fd in piece_fds]
        self._fds = []
        try:
            while fds:
                self._fds.append(_transfer(fds.pop(0)))
        finally:
            for fd in fds:  # left when one failed
                os.close(fd)
        read_end, write_end = os.pipe()
        try:
            self._keepalive = _transfer(write_end)
        except BaseException:
            os.close(read_end)
            raise
        _collect_exported()
        _exported.append((read_end, owner))
        self._counts = [len(piece_fds) for piece_fds in per_piece]
        self._description, self.device = description, int(device)
        self.nbytes = description["bytes"] - description["offset"]

    def open(self):
        """In the receiving process: maps the memory here; returns an OpenedAllocation."""
        # The keep-alive end first: when opening fails it is closed, and the exporter lets the memory go.
        keepalive = self._keepalive.detach()
        fds = []
        try:
            for holder in self._fds:
                fds.append(holder.detach())
            description = json.loads(json.dumps(self._description))
            at = 0
            for piece, n in zip(description["pieces"], self._counts):
                piece["fds"], at = fds[at:at + n], at + n
            out = ctypes.c_void_p()
            _check(_load().gpumem_ipc_open(self.device, json.dumps(description).encode(), ctypes.byref(out)))
        except BaseException:
            os.close(keepalive)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return OpenedAllocation(out.value, self.nbytes, self.device, keepalive)


class OpenedAllocation:
    """Another process's gpumem memory mapped here; close() (or garbage collection) unmaps it and tells the
    exporter. Exposes __cuda_array_interface__ so torch.as_tensor(opened, device=...) views it in place."""

    def __init__(self, address, nbytes, device, keepalive_fd):
        self.address, self.nbytes, self.device, self._keepalive = address, nbytes, device, keepalive_fd

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.address, False), "version": 3,
                "strides": None}

    def close(self):
        if self._keepalive is not None:
            try:
                _check(_load().gpumem_ipc_close(ctypes.c_void_p(self.address)))
            finally:
                os.close(self._keepalive)
                self._keepalive = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the process exit unmaps and closes anyway
            pass


def _rebuild_cuda_tensor(shared, dtype, size, stride, offset, requires_grad):
    import torch
    opened = shared.open()
    raw = torch.as_tensor(opened, device=f"cuda:{shared.device}")  # holds `opened` until the storage dies
    t = torch.empty((0,), dtype=dtype, device=raw.device).set_(raw.untyped_storage(), offset, size, stride)
    return t.requires_grad_(requires_grad)


def install(torch):
    """torch.multiprocessing shares CUDA tensors through storage._share_cuda_, which PyTorch's pluggable
    allocator refuses: CUDA tensors gpumem allocated go through SharedAllocation instead."""
    import torch.multiprocessing  # noqa: F401 (registers PyTorch's reductions first)
    from multiprocessing.reduction import ForkingPickler
    reductions = torch.multiprocessing.reductions
    original = reductions.reduce_tensor

    def reduce_tensor(tensor):
        if tensor.is_cuda and not (tensor.requires_grad and not tensor.is_leaf):
            storage = tensor.untyped_storage()
            try:
                shared = SharedAllocation(storage.data_ptr(), tensor.device.index, owner=storage)
            except GpumemError:
                return original(tensor)
            torch.cuda.current_stream(tensor.device).synchronize()  # the receiver sees finished writes
            return (_rebuild_cuda_tensor, (shared, tensor.dtype, tuple(tensor.size()), tuple(tensor.stride()),
                                           tensor.storage_offset(), tensor.requires_grad))
        return original(tensor)

    reductions.reduce_tensor = reduce_tensor
    for cls, fn in list(ForkingPickler._extra_reducers.items()):
        if fn is original:
            ForkingPickler._extra_reducers[cls] = reduce_tensor
    torch.cuda.ipc_collect = _collect_exported
