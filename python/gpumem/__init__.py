"""gpumem from Python.

Monitoring (any process, through the gpumem binary): gpus(), processes(), watch(interval).
Notebook helpers (this process's PyTorch memory, under PyTorch's allocator or gpumem's): track(label),
summary(), tensors(), purge(), print_memory(); `%load_ext gpumem` adds the %%track cell magic.
The `gpumem` command itself comes with the wheel (`gpumem run -- python train.py` for gpumem's allocator).
"""
from ._binary import GpumemNotFound
from ._monitor import GPU, GpumemError, NoDriverError, Process, gpus, processes, watch
from ._notebook import load_ipython_extension, print_memory, purge, summary, tensors, track

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("gpumem")
except PackageNotFoundError:  # used from the source tree
    __version__ = None
__all__ = ["GPU", "Process", "GpumemError", "GpumemNotFound", "NoDriverError", "gpus", "processes", "watch",
           "track", "summary", "tensors", "purge", "print_memory", "load_ipython_extension"]
