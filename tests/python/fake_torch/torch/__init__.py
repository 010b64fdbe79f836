"""A test double of the few torch names gpumem_torch touches (CI has no PyTorch)."""
from . import _C  # noqa: F401
from . import cuda  # noqa: F401
