"""Which gpumem binary the Python package runs: $GPUMEM_BINARY, else the one in the wheel (gpumem/_bin/),
else `gpumem` on PATH (the .deb or `cmake --install`)."""
import os
import shutil

_HERE = os.path.dirname(os.path.abspath(__file__))


class GpumemError(RuntimeError):
    """A gpumem command failed; the message is its sentence."""


class GpumemNotFound(GpumemError):
    pass


def path():
    explicit = os.environ.get("GPUMEM_BINARY")
    if explicit:
        return explicit
    bundled = os.path.join(_HERE, "_bin", "gpumem")
    if os.path.isfile(bundled):
        return bundled
    found = shutil.which("gpumem")
    if found:
        return found
    raise GpumemNotFound("gpumem: the gpumem binary was not found (install the wheel or the .deb, "
                         "or set GPUMEM_BINARY to its path)")
