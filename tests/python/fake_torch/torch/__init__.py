"""A test double of the few torch names gpumem_torch touches (CI has no PyTorch)."""
from . import cuda  # noqa: F401
from . import _C  # noqa: F401
