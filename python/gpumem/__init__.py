"""gpumem from Python.

Monitoring (any process, through the gpumem binary): gpus(), processes(), watch(interval).
The `gpumem` command itself comes with the wheel (`gpumem run -- python train.py` for gpumem's allocator).
"""
from ._binary import GpumemNotFound
from ._monitor import GPU, GpumemError, NoDriverError, Process, gpus, processes, watch

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("gpumem")
except PackageNotFoundError:  # used from the source tree
    __version__ = None
__all__ = ["GPU", "Process", "GpumemError", "GpumemNotFound", "NoDriverError", "gpus", "processes", "watch"]
