"""A test double of the few torch names gpumem_torch touches (CI has no PyTorch)."""


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError: what PyTorch raises for a c10::OutOfMemoryError."""


from . import _C  # noqa: E402,F401
from . import cuda  # noqa: E402,F401
from . import accelerator  # noqa: E402,F401
