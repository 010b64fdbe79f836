# sitecustomize for `gpumem run`: copied as sitecustomize.py into the run's private directory, which
# `gpumem run` puts first on PYTHONPATH (beside a copy of gpumem_torch.py). It arms gpumem_torch (installs
# it when the program imports torch, writes this process's report at exit), then runs the sitecustomize
# that would have run without us.
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
import gpumem_torch as _gpumem_torch  # noqa: E402

_gpumem_torch._run_setup()


def _chain_sitecustomize():
    import importlib
    saved = list(_sys.path)
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _here]
    ours = _sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        if ours is not None:
            _sys.modules["sitecustomize"] = ours
    finally:
        _sys.path[:] = saved


_chain_sitecustomize()
