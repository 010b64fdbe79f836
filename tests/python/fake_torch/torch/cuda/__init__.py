"""torch.cuda as gpumem_torch sees it: lazy initialisation, one device, PyTorch's memory query names."""
_initialized = False


def is_initialized():
    return _initialized


def _lazy_init():
    global _initialized
    _initialized = True


def device_count():
    return 1


def current_device():
    _lazy_init()
    return 0


from torch import OutOfMemoryError  # noqa: E402,F401
from . import memory  # noqa: E402
from .memory import memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved  # noqa: E402,F401
from .memory import reset_peak_memory_stats, memory_stats, memory_summary  # noqa: E402,F401
from .memory import MemPool  # noqa: E402,F401
from .memory import get_per_process_memory_fraction, reset_accumulated_memory_stats  # noqa: E402,F401
