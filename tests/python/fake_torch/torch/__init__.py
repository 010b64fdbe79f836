"""A test double of the few torch names gpumem_torch touches (CI has no PyTorch)."""


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError: what PyTorch raises for a c10::OutOfMemoryError."""


class UntypedStorage:
    """A strong reference to a fake StorageImpl (torch._C._storages), as graph trees make them from cdata."""

    def __init__(self, cdata):
        self._cdata = cdata

    def data_ptr(self):
        return _C._storages[self._cdata].data_ptr

    @classmethod
    def _new_with_weak_ptr(cls, cdata):
        s = _C._storages.get(cdata)
        return cls(cdata) if s is not None and s.alive else None


from . import _C  # noqa: E402,F401
from . import cuda  # noqa: E402,F401
from . import accelerator  # noqa: E402,F401
